"""``procmap map`` end to end (issue 21): the parallel ``.pmg`` read and its CRC
combination, the background warm-up overlapped with reading (never changes a
mapping, never fatal), and a time line that accounts for the whole run."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest

from procmap import cli, startup
from procmap.cli import main
from procmap.errors import FormatError
from procmap.formats import pmg, read_graph, write_graph
from procmap.generators import grid_graph
from procmap.kernels import backend


# ---------------------------------------------------------------- CRC combination
def test_crc32_combine_matches_zlib():
    rng = random.Random(7)
    data = bytes(rng.getrandbits(8) for _ in range(5000))
    for cut in [0, 1, 2, 31, 32, 33, 999, 2500, 4999, 5000]:
        a, b = data[:cut], data[cut:]
        assert pmg.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(data)
    # several pieces, as the reader joins them
    crc, bounds = 0, [0, 17, 1024, 1025, 4096, 5000]
    for lo, hi in zip(bounds, bounds[1:]):
        crc = pmg.crc32_combine(crc, zlib.crc32(data[lo:hi]), hi - lo)
    assert crc == zlib.crc32(data)
    # lengths far beyond the data (the table covers 2^31 bits and more)
    big = 3 << 30
    assert pmg.crc32_combine(0, 0, big) == 0
    assert pmg.crc32_combine(zlib.crc32(b"x"), 0, 0) == zlib.crc32(b"x")


# ---------------------------------------------------------------- parallel .pmg read
@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 4 KiB on a machine of 8 cores: a small file is read by many threads in
    many pieces, on any machine."""
    monkeypatch.setattr(pmg, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


def _same(a, b) -> None:
    for name in ("xadj", "adjncy", "adjwgt", "vwgt"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@pytest.mark.parametrize("weight", [1, 2.5])
def test_parallel_read_in_pieces_is_the_graph(tmp_path, small_pieces, weight):
    graph = grid_graph((60, 50), weight=weight, diagonal=True)
    path = str(tmp_path / "g.pmg")
    write_graph(graph, path)
    assert os.path.getsize(path) > 20 * 4096
    _same(read_graph(path), graph)


def test_read_without_preadv(tmp_path, small_pieces, monkeypatch):
    monkeypatch.delattr(os, "preadv", raising=False)  # as on a platform without it
    graph = grid_graph((40, 30))
    path = str(tmp_path / "g.pmg")
    write_graph(graph, path)
    _same(read_graph(path), graph)


def test_corrupt_piece_is_a_checksum_error(tmp_path, small_pieces):
    path = str(tmp_path / "g.pmg")
    write_graph(grid_graph((60, 50), weight=3), path)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))
    with pytest.raises(FormatError, match="checksum mismatch"):
        read_graph(path)


def test_file_shrinking_while_read_is_an_error(tmp_path, small_pieces, monkeypatch):
    path = str(tmp_path / "g.pmg")
    write_graph(grid_graph((60, 50)), path)
    real = os.preadv

    def short(fd, buffers, offset):
        return 0 if offset > 40000 else real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", short)
    with pytest.raises(FormatError, match="shrank while being read"):
        read_graph(path)


def test_pending_read_errors_surface_in_result(tmp_path):
    missing = pmg.start_read(str(tmp_path / "missing.pmg"))
    with pytest.raises(FormatError, match="cannot read"):
        missing.result()
    bad = tmp_path / "bad.pmg"
    bad.write_bytes(b"not a graph at all" * 10)
    with pytest.raises(FormatError, match="bad magic"):
        pmg.start_read(str(bad)).result()


def test_cancelled_read_stops(tmp_path, small_pieces):
    path = str(tmp_path / "g.pmg")
    write_graph(grid_graph((60, 50)), path)
    pending = pmg.start_read(path)
    pending.cancel()
    assert pending.wait(timeout=30)  # the reading thread has ended
    pending.cancel()  # harmless twice
    assert pending.wait(timeout=0)


# ---------------------------------------------------------------- warm-up helpers
def test_warm_numba_runs_a_cached_kernel():
    backend.warm_numba()
    backend.warm_numba()  # twice: nothing left to do


def test_warm_gpu_raises_without_cupy_or_gpu():
    if backend.gpu_available():
        backend.warm_gpu()
    else:
        with pytest.raises(Exception):  # noqa: B017 -- ImportError or a CUDA error
            backend.warm_gpu()


# ------------------------------------------------------ the map command's overlap
@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A mesh as .pmg and as METIS text (small: the overlap is forced by the tests)."""
    base = tmp_path_factory.mktemp("overlap")
    graph = grid_graph((120, 80), weight=3)
    paths = {fmt: str(base / f"g.{fmt}") for fmt in ("pmg", "graph")}
    for path in paths.values():
        write_graph(graph, path)
    return paths


def _map(capsys, path, out, *extra) -> dict:
    code = main(["map", path, "-H", "4:4:2", "--engine", "im", "--device", "cpu", "--seed", "3",
                 "--json", "-q", "-o", str(out), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.mark.parametrize("fmt", ["pmg", "graph"])
def test_overlap_never_changes_the_mapping(capsys, tmp_path, monkeypatch, inputs, fmt,
                                          small_pieces):
    started = []
    real = startup.WarmUp

    class Spy(real):
        def __init__(self, gpu):
            started.append(gpu)
            super().__init__(gpu)

    monkeypatch.setattr(startup, "WarmUp", Spy)
    monkeypatch.setenv("PROCMAP_OVERLAP", "0")
    off = _map(capsys, inputs[fmt], tmp_path / "off.map")
    assert not started and "warm-up" not in off["seconds"]
    monkeypatch.setenv("PROCMAP_OVERLAP", "1")
    monkeypatch.setattr(startup, "OVERLAP_MIN_BYTES", 0)
    on = _map(capsys, inputs[fmt], tmp_path / "on.map")
    assert started == [False]  # --device cpu: no GPU warm-up
    assert "warm-up" in on["seconds"]
    assert (tmp_path / "on.map").read_bytes() == (tmp_path / "off.map").read_bytes()
    assert on["J"] == off["J"]


def test_failed_warm_up_is_not_fatal(capsys, tmp_path, monkeypatch, inputs):
    def broken():
        raise RuntimeError("warm-up failed")

    monkeypatch.setattr(backend, "warm_numba", broken)
    monkeypatch.setattr(backend, "warm_gpu", broken)
    monkeypatch.setattr(startup, "OVERLAP_MIN_BYTES", 0)
    seen = []
    real_wait = startup.WarmUp.wait

    def wait(self, job=None):
        result = real_wait(self, job)
        if job is None:
            seen.append(dict(self.errors))
        return result

    monkeypatch.setattr(startup.WarmUp, "wait", wait)
    monkeypatch.setattr(startup, "warm_gpu_wanted", lambda args, size: True)
    failed = _map(capsys, inputs["pmg"], tmp_path / "failed.map")
    assert set(seen[0]) == {"numba", "gpu"}
    monkeypatch.setenv("PROCMAP_OVERLAP", "0")
    plain = _map(capsys, inputs["pmg"], tmp_path / "plain.map")
    assert (tmp_path / "failed.map").read_bytes() == (tmp_path / "plain.map").read_bytes()
    assert failed["J"] == plain["J"]


@pytest.mark.skipif(backend.gpu_available(), reason="checks the error of a machine without GPU")
def test_device_gpu_without_gpu_reports_as_before(capsys, tmp_path, monkeypatch, inputs):
    argv = ["map", inputs["pmg"], "-H", "4:4:2", "--device", "gpu", "-o", str(tmp_path / "m")]
    monkeypatch.setattr(startup, "OVERLAP_MIN_BYTES", 0)
    assert main(argv) == 2
    with_overlap = capsys.readouterr().err
    monkeypatch.setenv("PROCMAP_OVERLAP", "0")
    assert main(argv) == 2
    assert capsys.readouterr().err == with_overlap
    assert "device 'gpu' needs CuPy" in with_overlap
    assert not (tmp_path / "m").exists()


def test_small_inputs_start_no_thread(capsys, tmp_path, monkeypatch, inputs):
    assert os.path.getsize(inputs["pmg"]) < startup.OVERLAP_MIN_BYTES

    def forbidden(*args, **kwargs):
        raise AssertionError("a small input started a background thread")

    monkeypatch.setattr(startup, "WarmUp", forbidden)
    monkeypatch.setattr(pmg, "start_read", forbidden)
    before = threading.active_count()
    out = _map(capsys, inputs["pmg"], tmp_path / "m")
    assert "warm-up" not in out["seconds"]
    assert threading.active_count() == before


def test_an_argument_error_comes_first_and_stops_the_read(capsys, tmp_path, monkeypatch,
                                                          inputs):
    monkeypatch.setattr(startup, "OVERLAP_MIN_BYTES", 0)
    cancelled = []
    real = pmg.PendingRead.cancel

    def cancel(self):
        cancelled.append(self.path)
        real(self)

    monkeypatch.setattr(pmg.PendingRead, "cancel", cancel)
    assert main(["map", inputs["pmg"], "-H", "4:0:2", "-o", str(tmp_path / "m")]) == 2
    assert "hierarchy" in capsys.readouterr().err
    assert cancelled == [inputs["pmg"]]
    # a corrupt large file is reported by the read, in its turn
    bad = tmp_path / "bad.pmg"
    bad.write_bytes(b"\x93PMG\r\n\x1a\n" + bytes(100))
    assert main(["map", str(bad), "-H", "4:4:2", "-o", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"procmap: error: {bad}: ") and "version" in err


# ---------------------------------------------------------------- the time line
PHASES_AROUND = ("imports", "machine", "read", "mapping set-up", "evaluate block", "write")


def test_time_line_in_process_has_every_phase_but_start_up(capsys, tmp_path, inputs):
    out = _map(capsys, inputs["pmg"], tmp_path / "m")
    seconds = out["seconds"]
    assert set(PHASES_AROUND) <= set(seconds) and "start-up" not in seconds
    assert all(v >= 0 for v in seconds.values())
    assert main(["map", inputs["pmg"], "-H", "4:4:2", "-q", "-o", str(tmp_path / "m")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("time"))
    assert "machine" in line and "mapping set-up" in line
    assert line.endswith("(start-up to written file, interpreter start aside)")


def test_time_line_of_the_executable_covers_the_run(tmp_path, inputs):
    """``python -m procmap map`` (console()): start-up is measured from the process's
    start, and the phases add up to the wall time but for the report and the exit."""
    if startup.process_age() is None:
        pytest.skip("no /proc start time here")
    env = {**os.environ, "PROCMAP_OVERLAP": "1"}
    t0 = time.time()
    done = subprocess.run([sys.executable, "-m", "procmap", "map", inputs["graph"], "-H",
                           "4:4:2", "--device", "cpu", "--json", "-q", "-o",
                           str(tmp_path / "m")], capture_output=True, text=True, env=env,
                          timeout=300)
    wall = time.time() - t0
    assert done.returncode == 0, done.stderr
    seconds = json.loads(done.stdout)["seconds"]
    assert {"start-up", *PHASES_AROUND} <= set(seconds)
    assert 0 < seconds["start-up"] < wall
    accounted = seconds["total"] + sum(seconds.get(k, 0.0) for k in cli.OUTSIDE_MAPPING)
    assert accounted <= wall + 0.02  # the start time is exact to a clock tick (10 ms)
    assert wall - accounted < 1.0  # the report and the exit: little (generous under load)


def test_process_age_is_sane():
    age = startup.process_age()
    if age is None:
        pytest.skip("no /proc start time here")
    assert 0 <= age < 24 * 3600


# ------------------------------------------------------- totals from the validation
@pytest.mark.parametrize("weights", ["int", "float-integral", "float", "huge"])
def test_pmg_totals_are_the_exact_ones(tmp_path, weights):
    """The reader hands over the totals its validation computed; they equal what the
    graph computes itself (exact ints for integer weights)."""
    from procmap.graph import CommGraph
    from procmap.limits import exact_sum

    base = grid_graph((30, 20), weight=3)
    adjwgt = {"int": base.adjwgt, "float-integral": base.adjwgt * 2.0,
              "float": base.adjwgt * 0.25, "huge": base.adjwgt * (2**50 + 1)}[weights]
    graph = CommGraph(base.xadj, base.adjncy, adjwgt, base.vwgt * 5)
    path = str(tmp_path / "g.pmg")
    write_graph(graph, path)
    read = read_graph(path)
    assert read.total_edge_weight == exact_sum(read.adjwgt)
    assert type(read.total_edge_weight) is type(exact_sum(read.adjwgt))
    assert read.total_vertex_weight == exact_sum(read.vwgt) == int(base.vwgt.sum()) * 5
    if weights in ("int", "float-integral"):
        assert "total_edge_weight" in vars(read)  # handed over, not recomputed


# ------------------------------------------------------------ text files read ahead
def _opens_here(monkeypatch) -> list:
    """Files that ``open`` opens from now on in this thread (a read ahead opens its file
    in a thread of its own): read_bytes took a read ahead over iff it opened nothing."""
    opened, real_open, here = [], open, threading.current_thread()

    def spy(file, *args, **kwargs):
        if threading.current_thread() is here:
            opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    return opened


def test_read_bytes_takes_over_a_prefetch(tmp_path, monkeypatch):
    from procmap.formats import atomic

    path = tmp_path / "a.graph"
    path.write_bytes(b"3 2\n2\n1 3\n2\n")
    opened = _opens_here(monkeypatch)
    pending = atomic.prefetch_bytes(str(path))
    assert atomic.prefetch_bytes(str(path)) is pending  # one read ahead per path
    assert atomic.read_bytes(str(path)) == b"3 2\n2\n1 3\n2\n"
    assert opened == []  # taken over
    assert pending.wait(timeout=0)
    # taken once: the next read reads the file
    assert atomic.read_bytes(str(path)) == b"3 2\n2\n1 3\n2\n"
    assert opened == [str(path)]


def test_prefetch_of_a_changed_or_missing_file_is_not_used(tmp_path, monkeypatch):
    from procmap.formats import atomic

    path = tmp_path / "a.comm"
    path.write_bytes(b"0 1 5\n")
    assert atomic.prefetch_bytes(str(path)).wait(timeout=60)
    os.replace(_write_other(tmp_path), path)  # replaced after the read ahead
    opened = _opens_here(monkeypatch)
    assert atomic.read_bytes(str(path)) == b"0 1 7\n1 2 7\n"
    assert opened == [str(path)]
    missing = str(tmp_path / "missing.comm")
    atomic.prefetch_bytes(missing)
    with pytest.raises(FormatError, match="cannot read"):
        atomic.read_bytes(missing)
    assert opened[-1] == missing
    # discarded: the next read reads the file, even one that no reader took
    assert atomic.prefetch_bytes(str(path)).wait(timeout=60)
    atomic.discard_prefetch(str(path))
    opened.clear()
    assert atomic.read_bytes(str(path)) == b"0 1 7\n1 2 7\n"
    assert opened == [str(path)]


def _write_other(tmp_path) -> str:
    other = tmp_path / "other.comm"
    other.write_bytes(b"0 1 7\n1 2 7\n")
    return str(other)


def test_map_leaves_no_prefetch_behind(capsys, tmp_path, monkeypatch, inputs):
    """A read ahead that ``procmap map`` started is taken or dropped: the next
    read_bytes of the file reads it (no bytes kept in memory)."""
    from procmap.formats import atomic

    monkeypatch.setattr(startup, "OVERLAP_MIN_BYTES", 0)
    _map(capsys, inputs["graph"], tmp_path / "m")
    opened = _opens_here(monkeypatch)
    atomic.read_bytes(inputs["graph"])
    assert opened == [inputs["graph"]]
    # an argument error before the read: the bytes read ahead are dropped
    assert main(["map", inputs["graph"], "-H", "4:0:2", "-o", str(tmp_path / "m")]) == 2
    capsys.readouterr()
    opened.clear()
    atomic.read_bytes(inputs["graph"])
    assert opened == [inputs["graph"]]
