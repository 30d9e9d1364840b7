"""The binary ``.pmg`` graph format: round trips, equality with the text readers,
every validation error, bounded memory on lying headers, and the CLI."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from procmap.cli import main
from procmap.errors import FormatError
from procmap.formats import GRAPH_FORMATS, WRITABLE_FORMATS, detect_format, read_graph, write_graph
from procmap.formats import pmg
from procmap.generators import grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.limits import MAX_TASKS

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "halo3d.comm")


def small() -> CommGraph:
    """0-1 (5), 0-2 (2), 1-2 (7), 2-3 (1); task 4 isolated; vertex weights 1..5."""
    return CommGraph.from_edges([0, 0, 1, 2], [1, 2, 2, 3], [5, 2, 7, 1], n=5,
                                vwgt=[1, 2, 3, 4, 5])


def arrays(graph: CommGraph) -> dict:
    return {"xadj": graph.xadj.copy(), "adjncy": graph.adjncy.copy(),
            "adjwgt": graph.adjwgt.copy(), "vwgt": graph.vwgt.copy()}


def write(tmp_path, name="g.pmg", graph=None, **changes) -> str:
    """Write ``graph`` (default :func:`small`) with raw array or header ``changes``."""
    parts = arrays(graph or small())
    header = {k: changes.pop(k) for k in list(changes)
              if k in ("version", "flags", "dtype_code", "n", "nnz", "checksum")}
    parts.update(changes)
    path = str(tmp_path / name)
    pmg.write_arrays(path, parts["xadj"], parts["adjncy"], parts["adjwgt"], parts["vwgt"],
                     **header)
    return path


def expect(path: str, *words: str) -> str:
    with pytest.raises(FormatError) as info:
        read_graph(path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(path + ": "), text
    for word in words:
        assert word in text, text
    return text


# ---------------------------------------------------------------------- round trips
@pytest.mark.parametrize("make", [
    small,
    lambda: grid_graph((17, 9)),
    lambda: grid_graph((5, 4, 3), weight=7, diagonal=True),
    lambda: random_geometric_graph(3000, seed=3),
    lambda: CommGraph.from_edges([0, 1, 3], [1, 2, 0], [0.5, 2.25, 1e300], n=6),  # float, isolated
    lambda: CommGraph.from_edges([], [], [], n=4),  # no edges
    lambda: CommGraph.from_edges([0], [1], [2**61], n=2),  # total 2^62 fits
], ids=["small", "grid2d", "grid3d-diag", "rgg", "float", "no-edges", "huge-weight"])
def test_round_trip(tmp_path, make):
    graph = make()
    path = str(tmp_path / "g.pmg")
    write_graph(graph, path)
    back = read_graph(path)
    assert back.same_as(graph)
    assert back.adjwgt.dtype == graph.adjwgt.dtype and back.xadj.dtype == np.int64
    assert back.adjncy.dtype == np.int32 and back.vwgt.dtype == np.int64
    assert back.xadj.flags.writeable and back.adjwgt.flags.writeable
    size = os.path.getsize(path)
    assert size == 64 + 8 * (graph.n + 1) + 4 * graph.adjncy.size + (graph.adjncy.size % 2) * 4 \
        + 8 * graph.adjncy.size + 8 * graph.n


def test_registered():
    assert "pmg" in GRAPH_FORMATS and "pmg" in WRITABLE_FORMATS
    assert detect_format("x.PMG") == "pmg" and detect_format("x", "pmg") == "pmg"


def test_integral_float_weights_become_int64(tmp_path):
    """As in every reader: a float file whose weights are all integral gives int64."""
    graph = small()
    path = write(tmp_path, adjwgt=graph.adjwgt.astype(np.float64))
    back = read_graph(path)
    assert back.adjwgt.dtype == np.int64 and back.same_as(graph)


@pytest.mark.parametrize("ext", ["comm", "npz", "graph", "mtx"])
def test_same_graph_as_other_readers(tmp_path, ext):
    graph = random_geometric_graph(2000, seed=1)
    if ext == "comm":
        source = EXAMPLE
    else:
        source = str(tmp_path / f"g.{ext}")
        write_graph(graph, source)
    expected = read_graph(source)
    target = str(tmp_path / "g.pmg")
    write_graph(expected, target)
    assert read_graph(target).same_as(expected)


def test_cli_convert_then_eval(tmp_path, capsys):
    target = str(tmp_path / "halo.pmg")
    assert main(["convert", EXAMPLE, target]) == 0
    capsys.readouterr()
    results = []
    for source in (EXAMPLE, target):
        assert main(["eval", source, "--baseline", "block", "--hierarchy", "4:8:6",
                     "--distance", "1:10:100", "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out)["J"])
    assert results[0] == results[1]


def test_cli_bad_file_exits_2(tmp_path, capsys):
    path = str(tmp_path / "bad.pmg")
    with open(path, "wb") as f:
        f.write(b"not a graph at all, just text\n" * 3)
    assert main(["eval", path, "--baseline", "block", "--hierarchy", "2:2"]) == 2
    err = capsys.readouterr().err
    assert path in err and "magic" in err


# ------------------------------------------------------------------------ the header
def test_bad_magic(tmp_path):
    path = str(tmp_path / "g.pmg")
    write(tmp_path)
    data = bytearray(open(path, "rb").read())
    data[1] = ord("X")
    open(path, "wb").write(bytes(data))
    expect(path, "magic")


def test_text_file_and_empty_file(tmp_path):
    path = str(tmp_path / "g.pmg")
    open(path, "wb").write(b"0 1 5\n")
    expect(path, "magic")
    open(path, "wb").write(b"")
    expect(path, "magic")
    open(path, "wb").write(pmg.MAGIC + b"\x01\x00")
    expect(path, "truncated")


def test_bad_version(tmp_path):
    expect(write(tmp_path, version=2), "version 2")


def test_bad_dtype_code_and_flags(tmp_path):
    expect(write(tmp_path, dtype_code=7), "dtype code 7")
    expect(write(tmp_path, flags=1), "reserved")


def test_truncated_and_extended(tmp_path):
    path = write(tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-8])
    expect(path, "header declares", "file holds")
    open(path, "wb").write(data + b"\0" * 8)
    expect(path, "header declares", "file holds")


@pytest.mark.parametrize("field", ["n", "nnz"])
def test_header_lying_about_sizes(tmp_path, field):
    graph = small()
    value = graph.n + 1 if field == "n" else graph.adjncy.size + 2
    expect(write(tmp_path, **{field: value}), "header declares", "file holds")


@pytest.mark.parametrize("n", [MAX_TASKS, MAX_TASKS + 1, 2**63, 2**64 - 1])
def test_huge_header_refused_before_allocation(tmp_path, monkeypatch, n):
    """A 100-byte file claiming 2^31 tasks costs nothing: np.empty is never called."""
    path = write(tmp_path, n=n)

    def no_allocation(*args, **kwargs):
        raise AssertionError("allocated before checking the header")

    monkeypatch.setattr(pmg.np, "empty", no_allocation)
    text = expect(path)
    assert "header declares" in text or "at most" in text


def test_empty_graph_refused(tmp_path):
    path = write(tmp_path, xadj=np.zeros(1, np.int64), adjncy=np.zeros(0, np.int32),
                 adjwgt=np.zeros(0, np.int64), vwgt=np.zeros(0, np.int64))
    expect(path, "empty graph")


def test_bad_checksum(tmp_path):
    path = write(tmp_path)
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0x10  # a vertex weight: still a valid graph, but not the one written
    open(path, "wb").write(bytes(data))
    expect(path, "checksum")
    expect(write(tmp_path, checksum=12345), "checksum")


def test_header_bits_are_checksummed(tmp_path):
    """Flipping the weight dtype changes no size: the checksum covers the header."""
    path = write(tmp_path)
    data = bytearray(open(path, "rb").read())
    data[10] = 1  # int64 weights read as float64
    open(path, "wb").write(bytes(data))
    expect(path, "checksum")


# ----------------------------------------------------------------------- the arrays
def test_xadj_not_monotone(tmp_path):
    xadj = small().xadj.copy()
    xadj[2], xadj[3] = xadj[3], xadj[2]
    expect(write(tmp_path, xadj=xadj), "xadj[")


def test_xadj_not_starting_at_zero(tmp_path):
    xadj = small().xadj.copy()
    xadj[0] = 1
    expect(write(tmp_path, xadj=xadj), "xadj[0]")


def test_xadj_end_not_nnz(tmp_path):
    graph = small()
    xadj = graph.xadj.copy()
    xadj[-1] -= 1
    expect(write(tmp_path, xadj=xadj), "xadj[")


def test_asymmetric_weight(tmp_path):
    adjwgt = small().adjwgt.copy()
    adjwgt[0] += 1  # (0, 1): 6, (1, 0): 5
    expect(write(tmp_path, adjwgt=adjwgt), "asymmetric", "C[0,1] = 6", "C[1,0] = 5")


def drop_entry(graph: CommGraph, entry: int) -> dict:
    parts = arrays(graph)
    u = int(np.searchsorted(graph.xadj, entry, side="right") - 1)
    parts["xadj"][u + 1:] -= 1
    parts["adjncy"] = np.delete(parts["adjncy"], entry)
    parts["adjwgt"] = np.delete(parts["adjwgt"], entry)
    return parts


def test_missing_reverse_of_upper_entry(tmp_path):
    graph = small()
    # row 1 is [0, 2]: drop (1, 0); (0, 1) then has no reverse
    parts = drop_entry(graph, int(graph.xadj[1]))
    expect(write(tmp_path, **parts), "edge (0, 1) has no reverse")


def test_missing_reverse_of_lower_entry(tmp_path):
    graph = small()
    # row 2 is [0, 1, 3]: drop (2, 3); (3, 2) then has no reverse
    parts = drop_entry(graph, int(graph.xadj[2]) + 2)
    expect(write(tmp_path, **parts), "edge (3, 2) has no reverse")


def handmade(rows: list[list[int]], weights: list[list] | None = None, dtype=np.int64) -> dict:
    xadj = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    adjncy = np.array([v for r in rows for v in r], dtype=np.int32)
    flat = ([1] * adjncy.size if weights is None else [w for r in weights for w in r])
    return {"xadj": xadj, "adjncy": adjncy, "adjwgt": np.array(flat, dtype=dtype),
            "vwgt": np.ones(len(rows), np.int64)}


def test_self_loop(tmp_path):
    expect(write(tmp_path, **handmade([[1], [0, 1]])), "task 1", "self loop")


def test_unsorted_row(tmp_path):
    expect(write(tmp_path, **handmade([[2, 1], [0], [0]])), "task 0", "increasing", "2 before 1")


def test_duplicate(tmp_path):
    expect(write(tmp_path, **handmade([[1, 1], [0, 0]])), "task 0", "duplicate neighbour 1")


def test_id_out_of_range(tmp_path):
    expect(write(tmp_path, **handmade([[1], [0, 5]])), "task 1", "id 5 out of range 0..1")
    expect(write(tmp_path, **handmade([[-1, 1], [0]])), "task 0", "id -1 out of range")


def test_structural_error_reported_before_symmetry(tmp_path):
    # row 0 misses its reverse only because row 2 is unsorted: the real problem is named
    path = write(tmp_path, **handmade([[2], [2], [1, 0]]))
    expect(path, "task 2", "increasing")


@pytest.mark.parametrize("weight, word", [(-3, "negative"), (0, "zero"),
                                          (float("nan"), "not finite"),
                                          (float("inf"), "not finite")])
def test_bad_weight(tmp_path, weight, word):
    dtype = np.float64 if isinstance(weight, float) else np.int64
    parts = handmade([[1], [0]], [[weight], [weight]], dtype=dtype)
    expect(write(tmp_path, **parts), "edge (0, 1)", word)


def test_negative_vertex_weight(tmp_path):
    expect(write(tmp_path, vwgt=np.array([1, 1, -2, 1, 1])), "negative vertex weight -2",
           "task 2")


def test_totals_must_fit(tmp_path):
    parts = handmade([[1], [0]], [[2**62], [2**62]])
    expect(write(tmp_path, **parts), "total edge weight")
    parts = handmade([[1], [0]])
    parts["vwgt"] = np.array([2**62, 2**62], np.int64)
    expect(write(tmp_path, **parts), "total vertex weight")
    parts = handmade([[1], [0]], [[1e308], [1e308]], dtype=np.float64)
    expect(write(tmp_path, **parts), "total edge weight")


def test_missing_file(tmp_path):
    path = str(tmp_path / "none.pmg")
    expect(path, "cannot read")


def test_header_layout(tmp_path):
    """The documented layout, byte for byte."""
    path = write(tmp_path)
    data = open(path, "rb").read()
    magic, version, code, flags, reserved, n, nnz = struct.unpack_from("<8sHBBIQQ", data)
    assert (magic, version, code, flags, reserved, n, nnz) == (pmg.MAGIC, 1, 0, 0, 0, 5, 8)
    xadj = np.frombuffer(data, "<i8", 6, 64)
    assert list(xadj) == list(small().xadj)
    adjncy = np.frombuffer(data, "<i4", 8, 64 + 48)
    assert list(adjncy) == list(small().adjncy)
    vwgt = np.frombuffer(data, "<i8", 5, len(data) - 40)
    assert list(vwgt) == [1, 2, 3, 4, 5]
