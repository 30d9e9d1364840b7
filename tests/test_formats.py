"""Readers, writers and error reporting of procmap.formats."""
from __future__ import annotations

import io
import os
import stat

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from procmap.errors import FormatError, InputError, ProcmapError
from procmap.formats import (GRAPH_FORMATS, WRITABLE_FORMATS, atomic_write, detect_format,
                             read_graph, read_mapping, read_prof_files, write_graph, write_mapping)
from procmap.formats.tokenizer import tokenize
from procmap.graph import CommGraph


def put(tmp_path, name: str, content) -> str:
    """Write ``content`` (str or bytes) to ``tmp_path/name`` and return the path."""
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


def edges(graph: CommGraph) -> dict[tuple[int, int], float]:
    """Undirected edges ``{(u, v): w}`` with ``u < v``."""
    src = graph.edge_sources()
    return {(int(u), int(v)): w.item() for u, v, w in zip(src, graph.adjncy, graph.adjwgt) if u < v}


def expect_error(path: str, line: int | None, *words: str, format: str | None = None):
    """read_graph must raise a FormatError naming ``path`` (and ``line``) and ``words``."""
    with pytest.raises(FormatError) as info:
        read_graph(path, format=format)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(path + (f":{line}: " if line is not None else ": ")), text
    assert info.value.path == path and info.value.line == line
    for word in words:
        assert word in text, text
    return info.value


# ------------------------------------------------------------------------------ tokenizer
def test_tokenizer_reads_shortest_repr_floats_exactly():
    rng = np.random.default_rng(7)
    values = rng.random(2000) * 10.0 ** rng.integers(-30, 30, 2000)
    values = np.concatenate([values, [5e-324, 1.7976931348623157e308, 0.1, 9007199254740993.0]])
    text = "\n".join(repr(float(v)) for v in values).encode()
    assert np.array_equal(tokenize(text).values, values)


# --------------------------------------------------------------------------------- .comm
def test_comm_sums_directed_entries_and_skips_comments(tmp_path):
    path = put(tmp_path, "a.comm", "# header\n\n0 1 80800\n1 0 80000  # back\n  \n2 3 1.5\n"
                                   "0 1 200\n3 3 9\n")
    graph = read_graph(path)
    assert graph.n == 4
    assert edges(graph) == {(0, 1): 161000.0, (2, 3): 1.5}
    assert graph.adjwgt.dtype == np.float64


def test_comm_integer_volumes_stay_integers(tmp_path):
    graph = read_graph(put(tmp_path, "a.comm", "0 1 3\n1 2 4\r\n"))
    assert graph.adjwgt.dtype == np.int64 and edges(graph) == {(0, 1): 3, (1, 2): 4}
    assert np.array_equal(graph.vwgt, [1, 1, 1])


def test_comm_tasks_directive_adds_isolated_ranks(tmp_path):
    graph = read_graph(put(tmp_path, "a.comm", "# procmap comm\n#tasks: 6\n\n0 1 5\n"))
    assert graph.n == 6 and graph.m == 1
    # only the leading comment block counts
    graph = read_graph(put(tmp_path, "b.comm", "0 1 5\n# tasks: 9\n"))
    assert graph.n == 2
    # no entries but a task count: an edgeless graph
    graph = read_graph(put(tmp_path, "c.comm", "# tasks: 3\n"))
    assert graph.n == 3 and graph.m == 0


@pytest.mark.parametrize("text, line, words", [
    ("0 1 5\n0 1\n", 2, ["expected 3 numbers", "found 2"]),
    ("0 1 5 7\n", 1, ["found 4"]),
    ("0 1 5\n\n0 1.5 2\n", 3, ["1.5", "not a non-negative integer"]),
    ("# c\n-1 1 2\n", 2, ["-1", "not a non-negative integer"]),
    ("0 1 -4\n", 1, ["-4", "finite number >= 0"]),
    ("0 1 5\n1 2 1e999\n", 2, ["inf"]),
    ("0 1 x\n", 1, ["'x'", "not a number"]),
    ("0 1 nan\n", 1, ["not a number"]),
    ("# tasks: 3\n0 1 1\n2 3 1\n", 3, ["rank 3 out of range", "# tasks: 3", "line 1"]),
    ("# tasks: three\n0 1 1\n", 1, ["'# tasks:'", "three"]),
    ("# tasks: 3\n# tasks: 4\n0 1 1\n", 2, ["contradicts"]),
    ("0 1 1\n99999999999 0 1\n", 2, ["exceeds the largest supported rank"]),
])
def test_comm_errors_name_file_and_line(tmp_path, text, line, words):
    expect_error(put(tmp_path, "bad.comm", text), line, *words)


@pytest.mark.parametrize("text, line, words", [
    ("", None, ["no communication entries"]),
    ("# only\n\n# comments\n", None, ["no communication entries"]),
    ("# tasks: 0\n", 1, ["empty graph"]),
])
def test_comm_empty(tmp_path, text, line, words):
    expect_error(put(tmp_path, "empty.comm", text), line, *words)


def test_missing_file_and_directory(tmp_path):
    for fmt in GRAPH_FORMATS:
        missing = str(tmp_path / f"missing.{fmt}")
        err = expect_error(missing, None, "cannot read", format=fmt)
        assert isinstance(err, ProcmapError)
    expect_error(str(tmp_path), None, "cannot read", format="comm")
    expect_error(str(tmp_path), None, "no .prof files")


# --------------------------------------------------------------------------------- METIS
# The triangle 1-2-3 plus vertex 4 isolated; edge weights 1-2: 5, 1-3: 6, 2-3: 7.
TRIANGLE_EDGES = {(0, 1): 5, (0, 2): 6, (1, 2): 7}


@pytest.mark.parametrize("text, vwgt, weighted", [
    ("4 3\n2 3\n1 3\n1 2\n\n", [1, 1, 1, 1], False),
    ("% comment\n4 3 0\n2 3\n% inside\n1 3\n1 2\n\n", [1, 1, 1, 1], False),
    ("4 3 1\n2 5 3 6\n1 5 3 7\n1 6 2 7\n\n", [1, 1, 1, 1], True),
    ("4 3 001\n2 5 3 6\n1 5 3 7\n1 6 2 7\n\n", [1, 1, 1, 1], True),
    ("4 3 10\n4 2 3\n5 1 3\n6 1 2\n7\n", [4, 5, 6, 7], False),
    ("4 3 010 1\n4 2 3\n5 1 3\n6 1 2\n7\n", [4, 5, 6, 7], False),
    ("4 3 11\n4 2 5 3 6\n5 1 5 3 7\n6 1 6 2 7\n7\n", [4, 5, 6, 7], True),
    ("4 3 011\n4 2 5 3 6\n5 1 5 3 7\n6 1 6 2 7\n7\n", [4, 5, 6, 7], True),
    ("4 3 100\n9 2 3\n9 1 3\n9 1 2\n9\n", [1, 1, 1, 1], False),
    ("4 3 101\n9 2 5 3 6\n9 1 5 3 7\n9 1 6 2 7\n9\n", [1, 1, 1, 1], True),
    ("4 3 110\n9 4 2 3\n9 5 1 3\n9 6 1 2\n9 7\n", [4, 5, 6, 7], False),
    ("4 3 111\n9 4 2 5 3 6\n9 5 1 5 3 7\n9 6 1 6 2 7\n9 7\n", [4, 5, 6, 7], True),
    ("\n% lead\n4 3 1\n2 5 3 6 % trailing comment\n1 5 3 7\n1 6 2 7\n\n\n\n", [1, 1, 1, 1], True),
])
def test_metis_fmt_variants(tmp_path, text, vwgt, weighted):
    graph = read_graph(put(tmp_path, "t.graph", text))
    assert graph.n == 4
    expected = TRIANGLE_EDGES if weighted else {e: 1 for e in TRIANGLE_EDGES}
    assert edges(graph) == expected
    assert graph.vwgt.tolist() == vwgt
    assert graph.adjwgt.dtype == np.int64


def test_metis_blank_lines_are_isolated_vertices(tmp_path):
    graph = read_graph(put(tmp_path, "iso.metis", "5 1\n\n3\n2\n\n\n"))
    assert graph.n == 5 and edges(graph) == {(1, 2): 1}
    assert graph.degrees().tolist() == [0, 1, 1, 0, 0]


def test_metis_self_loops_are_dropped(tmp_path):
    # m counting the loop or not are both accepted
    for m in (1, 2):
        graph = read_graph(put(tmp_path, f"loop{m}.graph", f"2 {m} 1\n1 4 2 3\n1 3\n"))
        assert edges(graph) == {(0, 1): 3}


@pytest.mark.parametrize("text, line, words", [
    ("3 2 1\n2 5\n1 6 3 1\n2 1\n", 2, ["asymmetric weights", "edge 1-2", "5", "6", "line 3"]),
    ("3 3 1\n3 5 2 6\n1 5 3 7\n1 6 2 7\n", 2, ["asymmetric weights", "edge 1-2 has weight 6",
                                                "but 5"]),
    ("3 2\n2\n1 3\n\n", 3, ["asymmetric graph", "edge 2-3", "not in the line of vertex 3"]),
    ("3 3\n2\n1 3\n2\n", 1, ["m = 3", "hold 2"]),
    ("3 2\n2\n1 4\n2\n", 3, ["neighbour 4 ", "1..3"]),
    ("3 2\n2\n0 3\n2\n", 3, ["neighbour 0 "]),
    ("3 2\n2\n1 2.5\n2\n", 3, ["neighbour 2.5 "]),
    ("3 2 1\n2 5\n1 5 3\n2 1\n", 3, ["vertex 2 has 3 numbers", "fmt 001"]),
    ("3 2 11\n\n1 1 5 3 1\n1 2 1\n", 2, ["vertex 1 has 0 numbers", "fmt 011"]),
    ("3 2 1\n2 5\n1 5 3 1.5\n2 1.5\n", 3, ["edge weight 1.5", "integers"]),
    ("3 2 1\n2 5\n1 5 3 -1\n2 -1\n", 3, ["edge weight -1 "]),
    ("3 2 10\n-1 2\n1 1 3\n1 2\n", 2, ["vertex weight -1 "]),
    ("3 2\n2\n1 3\n", 1, ["n = 3", "only 2 vertex lines"]),
    ("2 1\n2\n1\n2\n", 4, ["more vertex lines than n = 2"]),
    ("2 1 011 2\n1 1 2 1\n1 1 1 1\n", 1, ["ncon = 2", "not supported"]),
    ("2 1 1 1\n2 1\n1 1\n", 1, ["ncon = 1 given but fmt 001 has no vertex weights"]),
    ("2 1 12\n2\n1\n", 1, ["fmt 12 is not a METIS format flag"]),
    ("2\n2\n1\n", 1, ["header must be"]),
    ("2 1 1 1 1\n", 1, ["header must be"]),
    ("2 -1\n2\n1\n", 1, ["non-negative integers"]),
    ("0 0\n", 1, ["empty graph"]),
    ("3 2\n2 2\n1 1 3\n2\n", 2, ["vertex 1 lists neighbour 2 twice"]),
    ("2 1\n2\n1 x\n", 3, ["'x'", "not a number"]),
])
def test_metis_errors(tmp_path, text, line, words):
    expect_error(put(tmp_path, "bad.graph", text), line, *words)


def test_metis_empty_file(tmp_path):
    expect_error(put(tmp_path, "e.graph", "% nothing\n\n"), None, "no header line")


def test_metis_writer_formats(tmp_path):
    graph = CommGraph.from_edges([0, 0, 1], [1, 2, 2], [5, 6, 7], n=4)
    path = str(tmp_path / "w.graph")
    write_graph(graph, path)
    lines = [ln for ln in open(path).read().splitlines() if not ln.startswith("%")]
    assert lines == ["4 3 001", "2 5 3 6", "1 5 3 7", "1 6 2 7", ""]
    weighted = CommGraph.from_edges([0, 0, 1], [1, 2, 2], [5, 6, 7], n=4, vwgt=[4, 5, 6, 7])
    write_graph(weighted, path)
    lines = [ln for ln in open(path).read().splitlines() if not ln.startswith("%")]
    assert lines == ["4 3 011", "4 2 5 3 6", "5 1 5 3 7", "6 1 6 2 7", "7"]
    assert read_graph(path).same_as(weighted)


def test_metis_writer_rejects_fractional_weights(tmp_path):
    graph = CommGraph.from_edges([0], [1], [0.5])
    path = str(tmp_path / "f.graph")
    with pytest.raises(FormatError, match="METIS needs integer weights"):
        write_graph(graph, path)
    assert not os.path.exists(path)


# ---------------------------------------------------------------------------- MatrixMarket
def test_mtx_general_is_c_plus_ct(tmp_path):
    text = ("%%MatrixMarket matrix coordinate integer general\n% comment\n3 3 3\n"
            "1 2 80800\n2 1 80000\n3 3 5\n")
    graph = read_graph(put(tmp_path, "g.mtx", text))
    assert graph.n == 3 and edges(graph) == {(0, 1): 160800}


def test_mtx_symmetric_is_mirrored_not_doubled(tmp_path):
    text = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n2 1 80400\n3 1 2.5\n2 2 7\n"
    graph = read_graph(put(tmp_path, "s.mtx", text))
    assert edges(graph) == {(0, 1): 80400.0, (0, 2): 2.5}
    assert graph.to_scipy()[1, 0] == 80400.0


def test_mtx_pattern_and_array(tmp_path):
    text = "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 2\n2 1\n4 3\n"
    assert edges(read_graph(put(tmp_path, "p.mm", text))) == {(0, 1): 1, (2, 3): 1}
    # column-major dense: C = [[0, 1], [2, 0]] -> (0, 1) = 3
    text = "%%MatrixMarket matrix array integer general\n2 2\n0\n2\n1\n0\n"
    assert edges(read_graph(put(tmp_path, "a.mtx", text))) == {(0, 1): 3}
    # symmetric array: lower triangle column by column: (1,1) (2,1) (3,1) (2,2) (3,2) (3,3)
    text = "%%MatrixMarket matrix array real symmetric\n3 3\n0\n4\n0\n0\n2.5\n0\n"
    assert edges(read_graph(put(tmp_path, "b.mtx", text))) == {(0, 1): 4.0, (1, 2): 2.5}


@pytest.mark.parametrize("text, line, words", [
    ("%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", 1, ["complex"]),
    ("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 1\n", 1, ["skew-symmetric"]),
    ("%%MatrixMarket vector coordinate real general\n2 1\n1 1\n", 1, ["'vector'"]),
    ("%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 1\n", 1, ["first line"]),
    ("1 2 3\n", 1, ["first line"]),
    ("%%MatrixMarket matrix coordinate real general\n2 3 1\n1 2 1\n", 2, ["square", "2 x 3"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1\n", 2, ["announces 2", "found 1"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1\n2 3 1\n", 4, ["more entries"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 4 1\n", 3, ["outside 1..3"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n0 1 1\n", 3, ["outside 1..3"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2\n", 3, ["expected 3 numbers"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 -1\n", 3, ["value -1 ", ">= 0"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1e400\n", 3, ["inf"]),
    ("%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 3.5\n", 3, ["3.5", "integer"]),
    ("%%MatrixMarket matrix coordinate real general\n3 3\n1 2 1\n", 2, ["size line"]),
    ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n", 2, ["announces 4", "found 3"]),
    ("%%MatrixMarket matrix coordinate real general\n0 0 0\n", 2, ["empty graph"]),
    ("%%MatrixMarket matrix coordinate real general\n", None, ["missing size line"]),
])
def test_mtx_errors(tmp_path, text, line, words):
    expect_error(put(tmp_path, "bad.mtx", text), line, *words)


# ---------------------------------------------------------------------------------- .npy
def test_npy_dense_matrix(tmp_path):
    matrix = np.array([[0, 3, 0], [1, 0, 2], [0, 0, 0]], dtype=np.int32)
    for order, dtype in (("C", "<i4"), ("F", ">i8"), ("C", "<f4"), ("C", "?")):
        path = str(tmp_path / f"m_{order}.npy")
        np.save(path, np.asarray(matrix, dtype=dtype, order=order))
        graph = read_graph(path)
        want = {(0, 1): 2, (1, 2): 1} if dtype == "?" else {(0, 1): 4, (1, 2): 2}
        assert edges(graph) == want


@pytest.mark.parametrize("array, words", [
    (np.zeros((2, 3)), ["square", "(2, 3)"]),
    (np.zeros((2, 2, 2)), ["square"]),
    (np.zeros(4), ["square"]),
    (np.zeros((0, 0)), ["empty graph"]),
    (np.array([[0, -1], [0, 0]]), ["negative"]),
    (np.array([[0, np.nan], [0, 0]]), ["not finite"]),
    (np.zeros((2, 2), dtype=complex), ["complex128"]),
    (np.array([[None, 1], [1, None]], dtype=object), ["object"]),
    (np.zeros((2, 2), dtype=[("a", "<i4")]), ["plain numeric"]),
])
def test_npy_errors(tmp_path, array, words):
    path = str(tmp_path / "bad.npy")
    np.save(path, array, allow_pickle=True)
    expect_error(path, None, *words)


def test_npy_corrupt(tmp_path):
    good = io.BytesIO()
    np.save(good, np.ones((3, 3)))
    data = good.getvalue()
    expect_error(put(tmp_path, "g.npy", b"garbage" * 20), None, "not a valid .npy")
    expect_error(put(tmp_path, "t.npy", data[:-5]), None, "promises 72 data bytes", "67")
    expect_error(put(tmp_path, "h.npy", data[:30]), None, "not a valid .npy")
    expect_error(put(tmp_path, "e.npy", b""), None, "not a valid .npy")


# --------------------------------------------------------------------------- .csv / .mat
def test_csv_comma_whitespace_and_header(tmp_path):
    want = {(0, 1): 3, (1, 2): 2}
    assert edges(read_graph(put(tmp_path, "a.csv", "0,3,0\n0,0,2\n0,0,0\n"))) == want
    assert edges(read_graph(put(tmp_path, "b.csv", "r0,r1,r2\n0, 1,0\n2,0,2\n0,0,0\n"))) == want
    assert edges(read_graph(put(tmp_path, "c.mat", "# eztrace\n0 3 0 \n0 0 2 \n0 0 0 \n"))) == want
    assert edges(read_graph(put(tmp_path, "d.csv", "\n# c\nsrc dst\n0 3\n0 0\n"))) == {(0, 1): 3}


@pytest.mark.parametrize("name, text, line, words", [
    ("a.csv", "0,1\n1,0,0\n", 2, ["row has 3 values, expected 2"]),
    ("a.csv", "0,1,2\n1,0\n", 1, ["row has 3 values, expected 2"]),
    ("a.csv", "h1,h2\n0,1\n1,0,0\n", 3, ["row has 3 values"]),
    ("a.csv", "0,1\n-1,0\n", 2, ["value -1 ", ">= 0"]),
    ("a.csv", "0,1\n1e999,0\n", 2, ["inf"]),
    ("a.csv", "0,1\n1,abc\n", 2, ["'abc'", "not a number"]),
    ("a.mat", "r0 r1\n0 1\n1 0\n", 1, ["'r0'", "not a number"]),
    ("a.csv", "", None, ["empty graph"]),
    ("a.csv", ",\n , \n", None, ["empty graph"]),
    ("a.csv", "only,header\n", None, ["no matrix rows after the header"]),
])
def test_csv_errors(tmp_path, name, text, line, words):
    expect_error(put(tmp_path, name, text), line, *words)


# ---------------------------------------------------------------------------------- .npz
def test_npz_reads_scipy_sparse(tmp_path):
    for fmt in ("csr", "csc", "coo"):
        path = str(tmp_path / f"m_{fmt}.npz")
        sp.save_npz(path, sp.csr_matrix(np.array([[0, 3, 0], [1, 0, 2], [0, 0, 0]])).asformat(fmt))
        assert edges(read_graph(path)) == {(0, 1): 4, (1, 2): 2}


def test_npz_errors(tmp_path):
    dense = str(tmp_path / "dense.npz")
    np.savez(dense, np.eye(3))
    expect_error(dense, None, "not a scipy.sparse .npz")
    expect_error(put(tmp_path, "junk.npz", b"PK\x03\x04 not really a zip"), None, "not an .npz")
    rect = str(tmp_path / "rect.npz")
    sp.save_npz(rect, sp.csr_matrix(np.ones((2, 3))))
    expect_error(rect, None, "square")
    negative = str(tmp_path / "neg.npz")
    sp.save_npz(negative, sp.csr_matrix(np.array([[0, -1.0], [0, 0]])))
    expect_error(negative, None, "negative")
    good = io.BytesIO()
    sp.save_npz(good, sp.csr_matrix(np.ones((3, 3))))
    expect_error(put(tmp_path, "trunc.npz", good.getvalue()[:-40]), None)
    # a zip whose central directory asks for an unknown zip version (NotImplementedError)
    data = bytearray(good.getvalue())
    at = data.index(b"PK\x01\x02")
    data[at + 6:at + 8] = b"\xff\x00"
    expect_error(put(tmp_path, "version.npz", bytes(data)), None, "not an .npz")
    # an uncompressed archive with an index beyond the shape
    bad = sp.csr_matrix(np.ones((3, 3)))
    bad.indices[0] = 7
    out = io.BytesIO()
    sp.save_npz(out, bad, compressed=False)
    expect_error(put(tmp_path, "index.npz", out.getvalue()), None, "corrupt")


# --------------------------------------------------------------------------------- .prof
PROF_SAMPLE = (
    "# POINT TO POINT\n"
    "E\t0\t1\t80800 bytes\t20 msgs sent\t0,0,0,0,0,0,0,10,0,0,0,0,0,11,0\n"
    "I\t0\t1\t8000 bytes\t1 msgs sent\n"
    "I\t0\t2\t8000 bytes\t1 msgs sent\t0,0,1\n"
    "# OSC\n"
    "# COLLECTIVES\n"
    "C\t0\t1\t8000 bytes\t1 msgs sent\n"
    "D\tMPI_COMM_WORLD\tprocs: 0,1,2,3\n"
    "O2A\t0\t0 bytes\t0 msgs sent\n"
    "A2O\t0\t0 bytes\t0 msgs sent\n"
    "A2A\t0\t24000 bytes\t1 msgs sent\n"
)


def test_prof_sample(tmp_path):
    graph = read_graph(put(tmp_path, "app.0.prof", PROF_SAMPLE))
    assert graph.n == 4  # from the MPI_COMM_WORLD line: rank 3 sends nothing
    assert edges(graph) == {(0, 1): 88800, (0, 2): 8000}


def test_prof_files_are_summed(tmp_path):
    first = put(tmp_path, "app.0.prof", PROF_SAMPLE)
    second = put(tmp_path, "app.1.prof", "# POINT TO POINT\nE\t1\t0\t80000 bytes\t20 msgs sent\n"
                                          "E\t1\t4\t7 bytes\t1 msgs sent\n")
    graph = read_prof_files([first, second])
    assert graph.n == 5
    assert edges(graph) == {(0, 1): 168800, (0, 2): 8000, (1, 4): 7}
    assert read_graph(str(tmp_path)).same_as(graph)
    assert read_graph(str(tmp_path), format="prof").same_as(graph)


@pytest.mark.parametrize("text, line, words", [
    ("# P2P\nE\t0\t1\t80800 bytes\n", 2, ["malformed E line"]),
    ("I\t0\tone\t5 bytes\t1 msgs sent\n", 1, ["malformed I line"]),
    ("E\t0\t1\t-5 bytes\t1 msgs sent\n", 1, ["malformed E line"]),
    ("E\t0\t1\t99999999999999999999 bytes\t1 msgs sent\n", 1, ["int64"]),
    ("X\t0\t1\t5 bytes\t1 msgs sent\n", 1, ["unknown monitoring record 'X'"]),
    ("0 1 5\n", 1, ["unknown monitoring record '0'"]),
    ("# nothing\nC\t0\t1\t8 bytes\t1 msgs sent\n", None, ["no point-to-point entries"]),
])
def test_prof_errors(tmp_path, text, line, words):
    expect_error(put(tmp_path, "app.0.prof", text), line, *words)


def test_read_prof_files_needs_paths():
    with pytest.raises(FormatError, match="no .prof files"):
        read_prof_files([])


# ---------------------------------------------------------------------- format detection
@pytest.mark.parametrize("name, fmt", [
    ("a.comm", "comm"), ("a.graph", "metis"), ("A.METIS", "metis"), ("a.mtx", "mtx"),
    ("a.mm", "mtx"), ("a.npy", "npy"), ("a.csv", "csv"), ("x.mat", "csv"), ("a.npz", "npz"),
    ("app.0.prof", "prof"),
])
def test_detect_format_by_extension(name, fmt):
    assert detect_format(name) == fmt


def test_detect_format_explicit_and_unknown(tmp_path):
    assert detect_format("x.txt", "METIS") == "metis"
    assert detect_format("x.txt", ".comm") == "comm"
    assert detect_format("x", "matrixmarket") == "mtx"
    assert detect_format(str(tmp_path)) == "prof"
    with pytest.raises(FormatError) as info:
        detect_format("data.txt")
    assert str(info.value).startswith("data.txt: ") and "'.txt'" in str(info.value)
    with pytest.raises(FormatError, match="unknown graph format 'scotch'"):
        detect_format("data.grf", "scotch")
    assert set(WRITABLE_FORMATS) == set(GRAPH_FORMATS) - {"prof"}


def test_read_graph_with_explicit_format(tmp_path):
    path = put(tmp_path, "edges.txt", "0 1 4\n")
    assert edges(read_graph(path, format="comm")) == {(0, 1): 4}


def test_write_prof_is_refused(tmp_path):
    with pytest.raises(FormatError, match="cannot write the 'prof' format"):
        write_graph(CommGraph.from_edges([0], [1]), str(tmp_path / "x.prof"))


# -------------------------------------------------------------------------- atomic writes
def test_atomic_write_replaces_on_success(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    with atomic_write(path) as handle:
        handle.write("new")
        assert path.read_text() == "old"  # nothing visible before the end
    assert path.read_text() == "new"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_keeps_old_file_when_the_writer_raises(tmp_path):
    path = tmp_path / "out.rankfile"
    path.write_text("old content")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(path) as handle:
            handle.write("half")
            raise RuntimeError("boom")
    assert path.read_text() == "old content"
    assert os.listdir(tmp_path) == ["out.rankfile"]
    with pytest.raises(RuntimeError):
        with atomic_write(tmp_path / "fresh.bin", "wb") as handle:
            handle.write(b"x")
            raise RuntimeError
    assert os.listdir(tmp_path) == ["out.rankfile"]


def test_graph_writer_failure_leaves_existing_file(tmp_path):
    path = tmp_path / "g.graph"
    path.write_text("precious")
    with pytest.raises(FormatError):
        write_graph(CommGraph.from_edges([0], [1], [0.5]), path)
    assert path.read_text() == "precious"
    assert os.listdir(tmp_path) == ["g.graph"]


def test_atomic_write_binary_with_numpy_and_bad_directory(tmp_path):
    path = tmp_path / "a.npy"
    with atomic_write(path, "wb") as handle:
        np.save(handle, np.arange(3))
    assert np.load(path).tolist() == [0, 1, 2]
    new_mode = stat.S_IMODE(os.stat(path).st_mode)
    assert new_mode & 0o600 == 0o600
    with pytest.raises(ProcmapError, match="cannot write"):
        with atomic_write(tmp_path / "no" / "such" / "dir.txt") as handle:
            handle.write("x")


# ------------------------------------------------------------------------------ mappings
def test_mapping_round_trip(tmp_path):
    pes = np.array([3, 0, 1, 1, 2, 100000], dtype=np.int64)
    path = str(tmp_path / "map.txt")
    write_mapping(pes, path)
    assert open(path).read() == "3\n0\n1\n1\n2\n100000\n"
    back = read_mapping(path, n=6)
    assert back.dtype == np.int64 and np.array_equal(back, pes)
    assert read_mapping(put(tmp_path, "c.txt", "# kahip\n1\n\n2 # pe\n")).tolist() == [1, 2]


@pytest.mark.parametrize("text, n, line, words", [
    ("0\n1.5\n", None, 2, ["1.5", "non-negative integer"]),
    ("0\n-1\n", None, 2, ["PE id -1 "]),
    ("0\n1 2\n", None, 2, ["one PE id per line", "found 2"]),
    ("0\nx\n", None, 2, ["'x'"]),
    ("0\n1\n", 3, None, ["2 entries, expected 3"]),
    ("# nothing\n", None, None, ["empty mapping"]),
])
def test_mapping_errors(tmp_path, text, n, line, words):
    path = put(tmp_path, "m.txt", text)
    with pytest.raises(FormatError) as info:
        read_mapping(path, n=n)
    assert str(info.value).startswith(path + (f":{line}: " if line else ": "))
    for word in words:
        assert word in str(info.value)


def test_write_mapping_rejects_bad_ids(tmp_path):
    with pytest.raises(InputError):
        write_mapping([0, -1], tmp_path / "m")
    with pytest.raises(InputError):
        write_mapping([0.5], tmp_path / "m")
    with pytest.raises(InputError):
        write_mapping([[0]], tmp_path / "m")
    assert not os.path.exists(tmp_path / "m")
    with pytest.raises(FormatError, match="cannot read"):
        read_mapping(tmp_path / "m")


# ---------------------------------------------------------------------------- round trips
EXTENSIONS = {"comm": ".comm", "metis": ".graph", "mtx": ".mtx", "npy": ".npy", "csv": ".csv",
              "npz": ".npz", "pmg": ".pmg"}


@st.composite
def comm_graphs(draw, integral: bool, with_vwgt: bool = False):
    """Random graphs: up to 25 communicating tasks plus isolated tasks at the end."""
    active = draw(st.integers(1, 25))
    n = active + draw(st.integers(0, 4))
    count = draw(st.integers(0, 60))
    ids = st.integers(0, active - 1)
    src = draw(st.lists(ids, min_size=count, max_size=count))
    dst = draw(st.lists(ids, min_size=count, max_size=count))
    if integral:
        weights = st.integers(0, 2**40)
    else:
        weights = st.floats(0, 1e12, allow_nan=False, allow_infinity=False, allow_subnormal=True)
    volume = draw(st.lists(weights, min_size=count, max_size=count))
    vwgt = None
    if with_vwgt:
        vwgt = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n))
    return CommGraph.from_edges(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                                np.array(volume, dtype=np.int64 if integral else np.float64),
                                n=n, vwgt=vwgt)


ROUND_TRIP = settings(max_examples=25, deadline=None, derandomize=True,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("fmt", WRITABLE_FORMATS)
@ROUND_TRIP
@given(graph=comm_graphs(integral=True))
def test_round_trip_integer_weights(tmp_path, fmt, graph):
    path = str(tmp_path / f"g{EXTENSIONS[fmt]}")
    write_graph(graph, path)
    back = read_graph(path)
    assert back.same_as(graph), (fmt, edges(graph), edges(back))


@pytest.mark.parametrize("fmt", [f for f in WRITABLE_FORMATS if f != "metis"])
@ROUND_TRIP
@given(graph=comm_graphs(integral=False))
def test_round_trip_float_weights(tmp_path, fmt, graph):
    path = str(tmp_path / f"g{EXTENSIONS[fmt]}")
    write_graph(graph, path)
    assert read_graph(path).same_as(graph)


@ROUND_TRIP
@given(graph=comm_graphs(integral=True, with_vwgt=True))
def test_round_trip_metis_vertex_weights(tmp_path, graph):
    path = str(tmp_path / "g.metis")
    write_graph(graph, path, format="metis")
    assert read_graph(path).same_as(graph)


def test_round_trip_mat_extension_and_explicit_format(tmp_path):
    graph = CommGraph.from_edges([0, 1], [1, 2], [7, 8], n=4)
    write_graph(graph, tmp_path / "x.mat")
    assert "," not in (tmp_path / "x.mat").read_text().splitlines()[1]
    assert read_graph(tmp_path / "x.mat").same_as(graph)
    write_graph(graph, tmp_path / "x.data", format="comm")
    assert read_graph(tmp_path / "x.data", format="comm").same_as(graph)


# ------------------------------------------------------------ one grid, three file formats
def test_grid_in_metis_comm_and_mtx_is_the_same_graph(tmp_path):
    side = 200
    ids = np.arange(side * side).reshape(side, side)
    right = np.column_stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()])
    down = np.column_stack([ids[:-1, :].ravel(), ids[1:, :].ravel()])
    pairs = np.concatenate([right, down])  # every undirected edge once, u < v
    n, m = side * side, len(pairs)

    # .comm: each pair once, unit volume -> C + C^T has weight 1 per edge
    comm = put(tmp_path, "grid.comm", "".join(f"{u} {v} 1\n" for u, v in pairs))
    # METIS: no weights, every edge in both endpoints' lines, 1-based
    neighbours = [[] for _ in range(n)]
    for u, v in pairs:
        neighbours[u].append(v + 1)
        neighbours[v].append(u + 1)
    metis = put(tmp_path, "grid.graph",
                f"{n} {m}\n" + "".join(" ".join(map(str, nb)) + "\n" for nb in neighbours))
    # MatrixMarket: symmetric pattern, lower triangle
    mtx = put(tmp_path, "grid.mtx", f"%%MatrixMarket matrix coordinate pattern symmetric\n"
                                     f"{n} {n} {m}\n" + "".join(f"{v + 1} {u + 1}\n" for u, v in pairs))

    graphs = [read_graph(p) for p in (comm, metis, mtx)]
    expected = CommGraph.from_edges(pairs[:, 0], pairs[:, 1], np.ones(m, dtype=np.int64), n=n)
    for graph in graphs:
        assert graph.n == n and graph.m == m == 2 * side * (side - 1)
        assert graph.same_as(expected)
    # and through procmap's own writers
    for ext in (".comm", ".graph", ".mtx"):
        path = str(tmp_path / f"again{ext}")
        write_graph(expected, path)
        assert read_graph(path).same_as(expected)
