"""The fast ``.comm`` readers against the general path, through
:func:`procmap.formats.comm.parse_comm`: the direct Numba reader (``reader="direct"``)
and the NumPy one for small files (``reader="small"``). Both must return the general
path's graph, or None where it would raise."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from procmap.errors import FormatError
from procmap.formats import comm, read_graph
from procmap.formats.comm import parse_comm
from procmap.graph import CommGraph


def general(data: bytes, path="x.comm") -> CommGraph:
    return parse_comm(data, path, reader="general")


@pytest.fixture(params=["direct", "small"])
def reader(request):
    """One of the fast readers, called like ``direct`` below."""
    def read(data: bytes, path="x.comm") -> CommGraph | None:
        return parse_comm(data, path, reader=request.param)
    return read


def direct(data: bytes, path="x.comm") -> CommGraph | None:
    return parse_comm(data, path, reader="direct")


def assert_same(a: CommGraph, b: CommGraph) -> None:
    for name in ("xadj", "adjncy", "adjwgt", "vwgt"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y), name


def random_text(rng, n: int, entries: int, *, header: int | None = None,
                big: bool = False) -> bytes:
    src = rng.integers(0, n, entries)
    dst = rng.integers(0, n, entries)
    dst[: entries // 8] = src[: entries // 8]  # self loops
    # big: beyond 2^53 (exact int64), the total (x 2) still below 2^63
    volume = rng.integers(0, 2**60 // (2 * entries) if big else 1000, entries)
    volume[rng.random(entries) < 0.1] = 0  # zero volumes
    # duplicates in both directions
    dup = rng.integers(0, entries, entries // 4)
    src = np.concatenate([src, dst[dup], src[dup]])
    dst = np.concatenate([dst, src[dup], dst[dup]])
    volume = np.concatenate([volume, volume[dup] + 1, volume[dup]])
    order = rng.permutation(src.size)  # unsorted
    lines = ["# random comm file", "#   another comment"]
    if header is not None:
        lines.append(f"#  tasks : {header}")
    blanks = ["", "   ", "\t", "# comment in the middle", "  # indented comment"]
    for i in order:
        pad = " " * int(rng.integers(0, 3))
        tail = ["", " ", " # tail", "#x", "\r", " \t"][int(rng.integers(0, 6))]
        lines.append(f"{pad}{src[i]}{' ' * int(rng.integers(1, 3))}{dst[i]}\t{volume[i]}{tail}")
        if rng.random() < 0.05:
            lines.append(blanks[int(rng.integers(0, len(blanks)))])
    text = "\n".join(lines)
    if rng.random() < 0.5:
        text += "\n"
    return text.encode()


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_equal_general_path(reader, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    entries = int(rng.integers(1, 3000))
    header = None if seed % 3 else n + int(rng.integers(0, 20))  # isolated ranks at the end
    data = random_text(rng, n, entries, header=header, big=seed % 4 == 1)
    fast = reader(data)
    assert fast is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(fast, general(data))


def test_large_file_many_chunks():
    rng = np.random.default_rng(99)
    data = random_text(rng, 5000, 200_000)
    assert len(data) > 1 << 21  # several chunks per thread
    fast = direct(data)
    assert fast is not None
    assert_same(fast, general(data))


@pytest.mark.parametrize("text", [
    "0 1 5\n",
    "0 0 5\n",  # only a self loop: 1 task, no edge
    "3 3 0\n0 2 0\n",  # nothing kept: 4 isolated tasks
    "# tasks: 7\n0 1 5\n1 0 5\n",
    "00 01 007\n",
    "0 1 999999999999999999\n1 0 999999999999999999\n",  # 18 digits, total still fits
    "0 1 5 #\n#\n2 1 3#c\n",
    "0 1 5",  # no final newline
    "\n\n  \n0 1 5\r\n1 2 6\r\n",
])
def test_small_cases_equal_general_path(reader, text):
    fast = reader(text.encode())
    assert fast is not None
    assert_same(fast, general(text.encode()))


@pytest.mark.parametrize("text", [
    "0 1 1e3\n",
    "0 1 2.5\n1 2 3\n",
    "0 1 5.0\n",
    "0 1 +5\n",
    "0 1 1234567890123456789\n",  # 19 digits: the general path keeps it exact
    "# tasks: 3\n",  # no entries
])
def test_fallback_cases_equal_general_path(reader, tmp_path, text):
    assert reader(text.encode()) is None
    path = tmp_path / "a.comm"
    path.write_text(text)
    assert_same(read_graph(str(path)), general(text.encode(), str(path)))


@pytest.mark.parametrize("text", [
    "",
    "# only comments\n\n",
    "0 1\n",
    "0 1 2 3\n",
    "0 -1 2\n",
    "0 1 -2\n",
    "0 1 nan\n",
    "0 x 2\n",
    "0 1.5 2\n",
    "# tasks: 2\n0 2 5\n",
    "# tasks: 0\n",
    "# tasks: 0\n0 0 1\n",
    "# tasks: x\n0 1 1\n",
    "# tasks: 3\n# tasks: 4\n0 1 1\n",
    "0 2147483646 1\n",
    "0 99999999999 1\n",
    "# tasks: 9999999\n0 1 1\n",
    "0 1 5000000000000000000\n",  # 19 digits: total (x2) overflows
    "0 1 999999999999999999\n1 2 999999999999999999\n2 3 999999999999999999\n"
    "3 4 999999999999999999\n4 5 999999999999999999\n",  # 18 digits each, total overflows
    "0 1 5\n1 2 3 # ok\n2 3\n",
])
def test_errors_identical_to_general_path(tmp_path, text):
    path = str(tmp_path / "bad.comm")
    with open(path, "w") as handle:
        handle.write(text)
    with pytest.raises(FormatError) as expected:
        general(text.encode(), path)
    with pytest.raises(FormatError) as got:
        read_graph(path)
    assert str(got.value) == str(expected.value)
    assert got.value.line == expected.value.line


def test_overflow_check_keeps_self_loops_out(reader, tmp_path):
    # The self loop's huge volume is dropped before the total is checked (as from_edges does).
    text = b"0 0 999999999999999999\n0 1 999999999999999999\n1 1 999999999999999999\n"
    fast = reader(text)
    assert fast is not None
    assert_same(fast, general(text))


def test_one_based_warning_identical(tmp_path):
    path = tmp_path / "one.comm"
    path.write_text("1 2 5\n2 3 4\n3 1 1\n")
    with pytest.warns(UserWarning, match="looks 1-based") as fast:
        graph = comm.read_comm(str(path))
    with pytest.warns(UserWarning, match="looks 1-based") as slow:
        reference = general(path.read_bytes(), str(path))
    assert [str(w.message) for w in fast] == [str(w.message) for w in slow]
    assert fast[0].filename == __file__  # points at read_comm's caller, as before
    assert_same(graph, reference)
    # not 1-based: rank 2 missing, or a '# tasks:' header
    for text in ("1 3 5\n", "# tasks: 4\n1 2 5\n2 3 1\n3 1 1\n"):
        path.write_text(text)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            read_graph(str(path))


def test_round_trip_of_written_file(reader, tmp_path):
    from procmap.formats import write_graph
    from procmap.generators import random_geometric_graph

    graph = random_geometric_graph(3000)
    path = str(tmp_path / "g.comm")
    write_graph(graph, path)
    data = open(path, "rb").read()
    fast = reader(data)
    assert fast is not None
    assert_same(fast, general(data))
    assert np.array_equal(fast.xadj, graph.xadj) and np.array_equal(fast.adjncy, graph.adjncy)


def test_one_based_warning_of_general_path_points_at_caller(tmp_path):
    path = tmp_path / "one.comm"
    path.write_text("1 2 5.5\n2 3 4\n3 1 1\n")  # float volume: the general path
    with pytest.warns(UserWarning, match="looks 1-based") as slow:
        comm.read_comm(str(path))
    assert slow[0].filename == __file__


@pytest.mark.parametrize("name", ["auto", "small", "direct", "general"])
def test_parse_comm_warning_points_at_its_caller(name):
    with pytest.warns(UserWarning, match="looks 1-based") as caught:
        parse_comm(b"1 2 5\n2 3 4\n3 1 1\n", "one.comm", reader=name)
    assert caught[0].filename == __file__


def test_parse_comm_refuses_an_unknown_reader():
    with pytest.raises(ValueError, match="reader must be one of"):
        parse_comm(b"0 1 5\n", "x.comm", reader="fast")
