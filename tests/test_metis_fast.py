"""The direct METIS reader (CSR built from the bytes) against the general path.

``read_metis`` tries the direct reader first (``parse_metis(..., reader="direct")``)
and falls back to the general one (``reader="general"``: tokenizer + COO +
``CommGraph.from_edges``); both must give
the same graph on every valid file, and the direct path must accept (not fall back
on) the plain files it is meant for.
"""
from __future__ import annotations

import numpy as np
import pytest

from procmap.errors import FormatError
from procmap.formats import metis
from procmap.formats.metis import parse_metis, read_metis
from procmap.graph import CommGraph


def direct_reader(data: bytes, path, chunks: int | None = None) -> CommGraph | None:
    """The direct reader alone: ``None`` where it declines the file."""
    return parse_metis(data, path, reader="direct", chunks=chunks)


def general_reader(data: bytes, path) -> CommGraph:
    """The general (tokenizer) reader, the oracle of the direct one."""
    return parse_metis(data, path, reader="general")


def _random_file(rng, n, fmt, *, comments=False, loops=False, shuffle=False,
                 zero_weights=False) -> bytes:
    """A valid METIS file of a random symmetric graph in format ``fmt``."""
    has_size, has_vwgt, has_ewgt = fmt // 100, (fmt // 10) % 10, fmt % 10
    rows: list[dict[int, int]] = [dict() for _ in range(n)]
    for _ in range(3 * n):
        u, v = (int(x) for x in rng.integers(0, n, size=2))
        if u == v:
            continue
        w = int(rng.integers(0 if zero_weights else 1, 1000)) if has_ewgt else 1
        rows[u][v] = w
        rows[v][u] = w
    nloops = 0
    if loops:
        for u in rng.choice(n, size=max(1, n // 5), replace=False).tolist():
            rows[u][u] = int(rng.integers(1, 9)) if has_ewgt else 1
            nloops += 1
    m = sum(len(r) for r in rows) - nloops
    assert m % 2 == 0
    out = []
    if comments:
        out.append("% a comment\n%another\n")
    out.append(f"{n} {m // 2 + (nloops if loops and rng.random() < 0.5 else 0)} {fmt:03d}\n")
    for u in range(n):
        if comments and rng.random() < 0.1:
            out.append("   % comment between vertex lines\n")
        items = sorted(rows[u].items())
        if shuffle:
            rng.shuffle(items)
        tokens = []
        if has_size:
            tokens.append(str(int(rng.integers(0, 50))))
        if has_vwgt:
            tokens.append(str(int(rng.integers(0, 50))))
        for v, w in items:
            tokens.append(str(v + 1))
            if has_ewgt:
                tokens.append(str(w))
        line = " ".join(tokens)
        if comments and tokens and rng.random() < 0.1:  # (on a blank line: a comment line)
            line += "  % trailing comment"
        out.append(line + "\n")
    return "".join(out).encode()


def _same(a, b) -> bool:
    return (np.array_equal(a.xadj, b.xadj) and np.array_equal(a.adjncy, b.adjncy)
            and np.array_equal(a.adjwgt, b.adjwgt) and a.adjwgt.dtype == b.adjwgt.dtype
            and a.adjncy.dtype == b.adjncy.dtype and np.array_equal(a.vwgt, b.vwgt))


@pytest.mark.parametrize("fmt", [0, 1, 10, 11, 100, 101, 110, 111])
@pytest.mark.parametrize("variant", ["plain", "comments", "loops", "unsorted", "all"])
def test_direct_matches_general(fmt, variant):
    rng = np.random.default_rng(fmt * 7 + len(variant))
    for n in (1, 2, 7, 60, 5000):  # 5000 rows: more than one parallel block
        data = _random_file(rng, n, fmt, comments=variant in ("comments", "all"),
                            loops=variant in ("loops", "all"),
                            shuffle=variant in ("unsorted", "all"))
        fast = direct_reader(data, "x.graph")
        assert fast is not None, (fmt, variant, n)
        assert _same(fast, general_reader(data, "x.graph"))


def test_isolated_vertices_blank_lines_and_no_final_newline(tmp_path):
    data = b"%c\n\n4 1\n2\n1\n\n   \n\n\n"  # blank lines before the header and after n
    g = direct_reader(data, "x")
    assert g is not None and _same(g, general_reader(data, "x"))
    assert g.degrees().tolist() == [1, 1, 0, 0]
    data = b"2 1 1\n2 5\n1 5"
    g = direct_reader(data, "x")
    assert g is not None and _same(g, general_reader(data, "x"))


@pytest.mark.parametrize("data", [
    b"2 1\n2.0\n1\n",              # float spelling of an integer: accepted by the general path
    b"2 1\n+2\n1\n",               # signed
    b"2 1 1\n2 0\n1 0\n",          # zero weights: dropped by the general path
    b"2 1 1\n2 0000000000000000000007\n1 7\n",  # more than 18 digits
])
def test_rare_spellings_fall_back(data, tmp_path):
    assert direct_reader(data, "x") is None
    path = tmp_path / "g.graph"
    path.write_bytes(data)
    assert _same(read_metis(path), general_reader(data, path))


@pytest.mark.parametrize("data", [
    b"2 1\n2\n\n",                 # asymmetric
    b"2 1\n2 2\n1 1\n",            # duplicates
    b"3 1\n2\n1\n",                # too few lines
    b"2 1\n2\n1\n3\n",             # too many lines
    b"2 5\n2\n1\n",                # wrong m
    b"2 1 1\n2 3\n1 4\n",          # asymmetric weights
    b"2 1 1\n2\n1 4\n",            # wrong count
    b"2 1\n3\n1\n",                # id out of range
    b"2 1\nx\n1\n",                # garbage
    b"2 1 1\n2 99999999999999999999\n1 4\n",  # overflow
    b"0 0\n",
    b"2 1 3\n2\n1\n",              # bad fmt
])
def test_errors_come_from_general_path(data, tmp_path):
    assert direct_reader(data, "x") is None
    path = tmp_path / "g.graph"
    path.write_bytes(data)
    with pytest.raises(FormatError) as fast:
        read_metis(path)
    with pytest.raises(FormatError) as general:
        general_reader(data, path)
    assert str(fast.value) == str(general.value)


def test_written_file_reads_back(tmp_path):
    from procmap.generators import random_geometric_graph

    graph = random_geometric_graph(3000)
    path = tmp_path / "g.graph"
    metis.write_metis(graph, path)
    data = path.read_bytes()
    fast = direct_reader(data, path)
    assert fast is not None and _same(fast, graph)


# ------------------------------------------------------------ the parallel chunked scan
@pytest.mark.parametrize("fmt", [0, 1, 10, 11, 100, 101, 110, 111])
def test_any_chunking_gives_the_same_graph(fmt):
    """Chunk borders anywhere (many chunks of a few lines, empty chunks), CRLF."""
    rng = np.random.default_rng(fmt + 1000)
    data = _random_file(rng, 300, fmt, comments=True, loops=True, shuffle=True)
    for text in (data, data.replace(b"\n", b"\r\n")):
        expected = general_reader(text, "x")
        for nchunks in (1, 3, 64, 1000):
            fast = direct_reader(text, "x", nchunks)
            assert fast is not None, (fmt, nchunks)
            assert _same(fast, expected)


def test_every_chunk_border_of_a_small_file():
    data = (b"% head\n\n  \n5 4 011 1 % header comment\n3 2 1 4 1 % c\n%mid\n 4 1 1 4 5 \r\n"
            b"  % indented comment\n7\n1 1 1 2 5 5 2\n2 4 2\n\n   \n% end\n\n")
    expected = general_reader(data, "x")
    assert expected.degrees().tolist() == [2, 2, 0, 3, 1]
    for nchunks in list(range(1, 40)) + [len(data) // 2, len(data) + 1]:
        fast = direct_reader(data, "x", nchunks)
        assert fast is not None
        assert _same(fast, expected)


def test_large_file_many_chunks():
    rng = np.random.default_rng(7)
    data = _random_file(rng, 60_000, 1)
    assert len(data) > 1 << 20  # 16 chunks of 64 KiB or more
    fast = direct_reader(data, "x")
    assert fast is not None
    assert _same(fast, general_reader(data, "x"))


@pytest.mark.parametrize("data", [
    b"2 1 10\n1 2\n\n",             # a blank line where fmt 010 needs a vertex weight
    b"2 1 1\n2 5 7\n1 5\n",          # a weight missing (odd token count)
    b"2 1\n2\n1\n\n% c\n 3\n",       # a token on a line after the n-th vertex line
    b"2 1\n2 % c\n1\n  x\n",         # garbage after the n-th vertex line
    b"2 1 11\n1\n1 1\n",             # vertex line without a neighbour's weight
    b"2 1 100\n\n1\n",               # a blank line where fmt 100 needs a size
    b"% only comments\n\n",          # no header
    b"2 1\n2\n1 -1\n",               # a sign
    b"2 1 1\n2 2.5\n1 2.5\n",        # a fraction
    b"3 2\n2\n1 3\n1\r\n",           # asymmetric (CRLF)
])
def test_more_errors_come_from_general_path(data, tmp_path):
    assert direct_reader(data, "x") is None
    for nchunks in (2, 5):
        assert direct_reader(data, "x", nchunks) is None
    path = tmp_path / "g.graph"
    path.write_bytes(data)
    with pytest.raises(FormatError) as fast:
        read_metis(path)
    with pytest.raises(FormatError) as general:
        general_reader(data, path)
    assert str(fast.value) == str(general.value)
    assert fast.value.line == general.value.line


def test_direct_reader_hands_over_exact_totals(tmp_path):
    # The validation pass's totals are kept by the graph: the same ints a fresh sum gives.
    from procmap.formats import write_graph
    from procmap.generators import random_geometric_graph
    from procmap.limits import exact_sum

    graph = random_geometric_graph(2000, seed=3)
    weighted = CommGraph(graph.xadj, graph.adjncy, graph.adjwgt * 7, graph.xadj[1:] % 5 + 1)
    for g in (graph, weighted):
        path = str(tmp_path / "g.graph")
        write_graph(g, path)
        got = direct_reader(open(path, "rb").read(), path)
        assert got is not None
        kept = vars(got)
        assert kept["total_edge_weight"] == exact_sum(got.adjwgt) == exact_sum(g.adjwgt)
        assert kept["total_vertex_weight"] == exact_sum(got.vwgt) == exact_sum(g.vwgt)


def test_parse_metis_refuses_bad_switches():
    with pytest.raises(ValueError, match="reader must be one of"):
        parse_metis(b"2 1\n2\n1\n", "x", reader="small")
    with pytest.raises(ValueError, match="chunks must be at least 1"):
        parse_metis(b"2 1\n2\n1\n", "x", chunks=0)
