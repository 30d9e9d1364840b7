"""The direct MatrixMarket reader against the general tokenizer path, through
:func:`procmap.formats.matrixmarket.parse_mtx` (``reader="direct"`` and
``reader="general"``), the oracle it must match: the same graph on every file it
accepts, ``None`` (and then the general path's error, word for word) on every file
it does not."""
from __future__ import annotations

import numpy as np
import pytest

from procmap.errors import FormatError
from procmap.formats import read_graph
from procmap.formats.matrixmarket import parse_mtx
from procmap.graph import CommGraph


def general(data: bytes, path="x.mtx") -> CommGraph:
    return parse_mtx(data, path, reader="general")


def direct(data: bytes, path="x.mtx", nchunks=None) -> CommGraph | None:
    banner = data.split(b"\n", 1)[0].lower().split()
    assert banner[2:3] == [b"coordinate"]  # the files the direct path is for
    return parse_mtx(data, path, reader="direct", chunks=nchunks)


def assert_same(a: CommGraph, b: CommGraph) -> None:
    for name in ("xadj", "adjncy", "adjwgt", "vwgt"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y), name


def random_mtx(rng, n: int, entries: int, field: str, symmetry: str, *, crlf=False,
               big=False, decorate=True) -> bytes:
    """A valid coordinate file: self loops, zero values, duplicates, both directions,
    comments, blank lines, padding and trailing comments."""
    src = rng.integers(1, n + 1, entries)
    dst = rng.integers(1, n + 1, entries)
    dst[: entries // 8] = src[: entries // 8]  # self loops
    if symmetry == "symmetric":  # one triangle (diagonal included), as the format says
        src, dst = np.maximum(src, dst), np.minimum(src, dst)
    volume = rng.integers(0, 2**60 // (2 * entries) if big else 1000, entries)
    volume[rng.random(entries) < 0.1] = 0
    dup = rng.integers(0, entries, entries // 4)
    if symmetry == "general":
        src, dst = np.concatenate([src, dst[dup]]), np.concatenate([dst, src[dup]])
    else:
        src, dst = np.concatenate([src, src[dup]]), np.concatenate([dst, dst[dup]])
    volume = np.concatenate([volume, volume[dup] + 1])
    order = rng.permutation(src.size)
    lines = [f"%%MatrixMarket matrix coordinate {field} {symmetry}", "% a comment", "%"]
    if decorate:
        lines += ["", "   % indented comment", "  "]
    lines.append(f"{n} {n} {src.size}" + (" % size" if decorate else ""))
    blanks = ["", "   ", "\t", "% comment in the middle", "  % indented"]
    for i in order:
        pad = " " * int(rng.integers(0, 3)) if decorate else ""
        tail = ["", " ", " % tail", "%x", " \t"][int(rng.integers(0, 5))] if decorate else ""
        value = "" if field == "pattern" else f"\t{volume[i]}"
        lines.append(f"{pad}{src[i]}{' ' * int(rng.integers(1, 3))}{dst[i]}{value}{tail}")
        if decorate and rng.random() < 0.05:
            lines.append(blanks[int(rng.integers(0, len(blanks)))])
    text = ("\r\n" if crlf else "\n").join(lines)
    if rng.random() < 0.5:
        text += "\r\n" if crlf else "\n"
    return text.encode()


CASES = [(field, symmetry) for field in ("integer", "pattern", "real")
         for symmetry in ("general", "symmetric")]


@pytest.mark.parametrize("field,symmetry", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_random_files_equal_general_path(field, symmetry, seed):
    rng = np.random.default_rng(seed * 31 + len(field) + len(symmetry))
    n = int(rng.integers(1, 300))
    entries = int(rng.integers(1, 2000))
    data = random_mtx(rng, n, entries, field, symmetry, crlf=seed == 3,
                      big=seed == 1 and field == "integer")
    expected = general(data)
    for nchunks in (None, 1, 2, 7, 64):  # chunk borders anywhere
        fast = direct(data, nchunks=nchunks)
        assert fast is not None, (field, symmetry, nchunks)
        assert_same(fast, expected)


def test_large_file_many_chunks(tmp_path):
    rng = np.random.default_rng(5)
    data = random_mtx(rng, 20000, 80_000, "integer", "general", decorate=False)
    assert len(data) > 1 << 20  # 16 chunks of 64 KiB or more
    fast = direct(data)
    assert fast is not None
    assert_same(fast, general(data))
    path = tmp_path / "big.mtx"
    path.write_bytes(data)
    assert_same(read_graph(str(path)), fast)


def test_every_chunk_border_of_a_small_file():
    data = (b"%%MatrixMarket matrix coordinate integer general\n% c\n\n5 5 6\n1 2 3\n"
            b"% x\n2 1 4\r\n\n3 5 7 % t\n5 3 1\n4 4 9\n2 5 0")
    expected = general(data)
    for nchunks in list(range(1, 40)) + [len(data) // 2, len(data) + 1]:
        fast = direct(data, nchunks=nchunks)
        assert fast is not None
        assert_same(fast, expected)


@pytest.mark.parametrize("text", [
    "%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 5\n",  # only a self loop
    "%%MatrixMarket matrix coordinate integer general\n4 4 2\n1 2 0\n3 3 1\n",  # nothing kept
    "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 2\n2 1\n4 3",  # no final newline
    "%%MatrixMarket matrix coordinate integer symmetric\n2 2 2\n2 1 999999999999999999\n"
    "1 2 999999999999999999\n",  # 18 digits, the total (x 2) still fits
    "%%MatrixMarket matrix coordinate real general\n3 3 2\n001 02 0007\n3 1 5\n",
    "%%MatrixMarket  MATRIX  Coordinate  Integer  General \r\n2 2 1\r\n1 2 5\r\n",
    " %%MatrixMarket matrix coordinate integer general\n2 2 1 % size\n  1\t2   5   %e\n",
])
def test_small_cases_equal_general_path(tmp_path, text):
    data = text.encode()
    expected = general(data)
    path = tmp_path / "s.mtx"
    path.write_bytes(data)
    assert_same(read_graph(str(path)), expected)
    fast = direct(data)
    if fast is not None:
        assert_same(fast, expected)


@pytest.mark.parametrize("text", [
    "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 2.5\n",  # float weights
    "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 5.0\n",
    "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 1e3\n",
    "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 90071992547409930\n",  # >= 2^53
    "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 1234567890123456789\n",
    "%%MatrixMarket matrix coordinate integer general\n2 2 1\n2.0 1 3\n",  # index written 2.0
    "%%MatrixMarket matrix coordinate integer general\n2 2 1\n+2 1 3\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 0\n",  # no entries
])
def test_fallback_cases_equal_general_path(tmp_path, text):
    data = text.encode()
    assert direct(data) is None
    path = tmp_path / "f.mtx"
    path.write_bytes(data)
    assert_same(read_graph(str(path)), general(data))


@pytest.mark.parametrize("text", [
    "%%MatrixMarket matrix coordinate integer general\n",
    "%%MatrixMarket matrix coordinate integer general\n% only comments\n\n",
    "%%MatrixMarket matrix coordinate integer general\n2 3 1\n1 2 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3\n1 2 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1 1\n1 2 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1e0\n1 2 1\n",
    "%%MatrixMarket matrix coordinate integer general\n0 0 0\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 2 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 1\n2 3 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 4 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n0 1 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n-1 1 1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 2 4\n1 2\n",
    "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2 4\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 -1\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 3.5\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 x\n",
    "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 nan\n",
    "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1e400\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 99999999999999999999\n",
    "%%MatrixMarket matrix coordinate integer general\n2147483646 2147483646 1\n1 2 3\n",
    "%%MatrixMarket matrix coordinate integer general\n2147483647 2147483647 1\n1 2 3\n",
    "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 5000000000000000000\n",
    "%%MatrixMarket matrix coordinate integer symmetric\n3 3 5\n2 1 999999999999999999\n"
    "3 1 999999999999999999\n3 2 999999999999999999\n3 2 999999999999999999\n"
    "2 1 999999999999999999\n",  # 18 digits each, the total (x 2) overflows
])
def test_errors_identical_to_general_path(tmp_path, text):
    data = text.encode()
    path = str(tmp_path / "bad.mtx")
    with open(path, "wb") as handle:
        handle.write(data)
    with pytest.raises(FormatError) as expected:
        general(data, path)
    with pytest.raises(FormatError) as got:
        read_graph(path)
    assert str(got.value) == str(expected.value)
    assert got.value.line == expected.value.line
    assert direct(data, path) is None


def test_written_file_reads_back(tmp_path):
    from procmap.formats import write_graph
    from procmap.generators import random_geometric_graph

    graph = random_geometric_graph(3000)
    path = str(tmp_path / "g.mtx")
    write_graph(graph, path)
    data = open(path, "rb").read()
    fast = direct(data)
    assert fast is not None
    assert_same(fast, general(data))
    assert np.array_equal(fast.xadj, graph.xadj) and np.array_equal(fast.adjncy, graph.adjncy)
    assert np.array_equal(fast.adjwgt, graph.adjwgt)


def test_array_layout_keeps_the_general_path(tmp_path):
    path = tmp_path / "a.mtx"
    path.write_text("%%MatrixMarket matrix array integer general\n2 2\n0\n2\n1\n0\n")
    graph = read_graph(str(path))
    assert graph.adjncy.tolist() == [1, 0] and graph.adjwgt.tolist() == [3, 3]


def test_direct_reader_declines_the_array_layout():
    data = b"%%MatrixMarket matrix array integer general\n2 2\n0\n5\n5\n0\n"
    assert parse_mtx(data, "x.mtx", reader="direct") is None
    assert parse_mtx(data, "x.mtx").m == 1


def test_parse_mtx_refuses_bad_switches():
    data = b"%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 5\n"
    with pytest.raises(ValueError, match="reader must be one of"):
        parse_mtx(data, "x.mtx", reader="small")
    with pytest.raises(ValueError, match="chunks must be at least 1"):
        parse_mtx(data, "x.mtx", chunks=0)
