"""Fuzzing: every reader either returns a valid CommGraph or raises a ProcmapError.

Inputs are random bytes and mutated valid files (bit flips, truncation, inserted
garbage, deleted or duplicated lines, swapped digits). Any other exception
(IndexError, ValueError from numpy, MemoryError, ...) fails the test.

Huge declared sizes (issue 20 section 3) go through the CLI in a subprocess under
an address-space limit: a few bytes that declare 2^31 tasks must cost one error
line and exit status 2, quickly, never a multi-GB allocation.
"""
from __future__ import annotations

import io
import resource
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from procmap.errors import ProcmapError
from procmap.formats import read_graph, read_mapping
from procmap.graph import CommGraph


def _npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def _npz_bytes(matrix, compressed: bool = True) -> bytes:
    out = io.BytesIO()
    sp.save_npz(out, matrix, compressed=compressed)
    return out.getvalue()


_DENSE = np.array([[0, 3, 0, 1], [2, 0, 5, 0], [0, 0, 0, 7], [1, 0, 0, 0]], dtype=np.int64)

#: One or two valid files per format, small so that mutations hit every part.
VALID = {
    "comm": [b"# procmap comm\n# tasks: 6\n0 1 80800\n1 0 80000\n2 3 1.5\n3 4 7 # x\n\n4 0 2\n"],
    "metis": [b"% c\n5 3 011\n4 2 5 3 6\n5 1 5 3 7\n6 1 6 2 7\n7\n1\n",
              b"4 3\n2 3\n1 3\n1 2\n\n"],
    "mtx": [b"%%MatrixMarket matrix coordinate integer general\n% c\n4 4 4\n1 2 80800\n2 1 80000\n"
            b"3 4 5\n4 4 1\n",
            b"%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n2 1 2.5\n3 2 1e3\n",
            b"%%MatrixMarket matrix array integer general\n2 2\n0\n2\n1\n0\n"],
    "npy": [_npy_bytes(_DENSE), _npy_bytes(_DENSE.astype(np.float32).T)],
    "csv": [b"r0,r1,r2\n0,3,0\n2,0,1.5\n0,0,0\n", b"0 1 2\n1 0 0\n2 0 0\n"],
    "npz": [_npz_bytes(sp.csr_matrix(_DENSE)), _npz_bytes(sp.coo_matrix(_DENSE * 0.5)),
            _npz_bytes(sp.csr_matrix(_DENSE), compressed=False),
            _npz_bytes(sp.csc_matrix(_DENSE * 0.5), compressed=False)],
    "prof": [b"# POINT TO POINT\nE\t0\t1\t80800 bytes\t20 msgs sent\t0,0,10,0\n"
             b"I\t0\t2\t8000 bytes\t1 msgs sent\n# COLLECTIVES\nC\t0\t1\t8 bytes\t1 msgs sent\n"
             b"D\tMPI_COMM_WORLD\tprocs: 0,1,2,3\nA2A\t0\t24000 bytes\t1 msgs sent\n"],
    "mapping": [b"0\n3\n# comment\n1\n2\n2\n"],
}
FORMATS = sorted(VALID)


@st.composite
def mutated(draw, original: bytes) -> bytes:
    """``original`` after one to three random edits."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete_line", "duplicate_line",
                                     "swap_digits", "replace"]))
        if not data:
            data = bytearray(draw(st.binary(min_size=1, max_size=8)))
            continue
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            garbage = draw(st.one_of(st.binary(min_size=1, max_size=4),
                                     st.sampled_from([b"-", b".", b"e", b"nan", b"-1", b"9", b"\n",
                                                      b" ", b",", b"%", b"#", b"\x00", b"0"])))
            data[at:at] = garbage
        elif kind == "replace":
            data[at] = draw(st.sampled_from(b"0123456789-+.eE \t\n,%#x"))
        else:
            lines = bytes(data).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            if kind == "delete_line":
                del lines[i]
            elif kind == "duplicate_line":
                lines.insert(i, lines[i])
            else:  # swap two digits inside one line
                digits = [k for k, c in enumerate(lines[i]) if 48 <= c <= 57]
                if len(digits) >= 2:
                    a, b = draw(st.sampled_from(digits)), draw(st.sampled_from(digits))
                    line = bytearray(lines[i])
                    line[a], line[b] = line[b], line[a]
                    lines[i] = bytes(line)
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def check_reader(directory, fmt: str, data: bytes) -> None:
    """Read ``data`` as ``fmt``; only a valid result or a ProcmapError is acceptable."""
    path = directory / f"fuzz.{fmt}"
    path.write_bytes(data)
    try:
        if fmt == "mapping":
            pes = read_mapping(path)
            assert pes.dtype == np.int64 and pes.ndim == 1 and (pes >= 0).all()
            return
        graph = read_graph(path, format=fmt)
    except ProcmapError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert isinstance(graph, CommGraph)
    check_graph(graph)


def check_graph(graph: CommGraph) -> None:
    """The invariants of docs/design.md section 2."""
    assert graph.n >= 1
    assert graph.xadj[0] == 0 and np.all(np.diff(graph.xadj) >= 0)
    assert graph.adjncy.dtype == np.int32 and graph.adjwgt.dtype in (np.int64, np.float64)
    assert np.all(np.isfinite(graph.adjwgt)) and np.all(graph.adjwgt > 0)
    assert np.all(graph.edge_sources() != graph.adjncy)
    matrix = graph.to_scipy()
    assert (matrix != matrix.T).nnz == 0


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("fmt", FORMATS)
def test_valid_seeds_read(fuzz_dir, fmt):
    for data in VALID[fmt]:
        path = fuzz_dir / f"seed.{fmt}"
        path.write_bytes(data)
        if fmt == "mapping":
            assert read_mapping(path).tolist() == [0, 3, 1, 2, 2]
        else:
            check_graph(read_graph(path, format=fmt))


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(fuzz_dir, fmt, data):
    check_reader(fuzz_dir, fmt, data)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(FUZZ, max_examples=250)
@given(data=st.data())
def test_mutated_valid_files(fuzz_dir, fmt, data):
    original = data.draw(st.sampled_from(VALID[fmt]))
    check_reader(fuzz_dir, fmt, data.draw(mutated(original)))


@pytest.mark.parametrize("fmt", FORMATS)
@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_valid_files_of_another_format(fuzz_dir, fmt, data):
    """A file of one format fed to another reader (the classic wrong-extension mistake)."""
    other = data.draw(st.sampled_from([f for f in FORMATS if f != fmt]))
    check_reader(fuzz_dir, fmt, data.draw(st.sampled_from(VALID[other])))


# --------------------------------------------------------- huge declared sizes (CLI)
#: Address-space limit of the CLI runs: numba and llvmlite import under it (the CLI
#: needs about 1 GiB of address space), far below the 7-16 GiB the headers declare.
CLI_ADDRESS_SPACE = 3 << 30


def _npy_header(shape_text: str, data: bytes = b"") -> bytes:
    """A hand-crafted version-1.0 ``.npy`` header declaring ``shape_text``."""
    header = ("{'descr': '<f8', 'fortran_order': False, 'shape': " + shape_text + ", }").encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


def _npz_with_shape(shape: tuple[int, int]) -> bytes:
    """A one-entry COO matrix saved by scipy, its ``shape.npy`` replaced by ``shape``."""
    members = {}
    with zipfile.ZipFile(io.BytesIO(_npz_bytes(sp.coo_matrix(_DENSE), False))) as archive:
        for name in archive.namelist():
            members[name] = archive.read(name)
    members["shape.npy"] = _npy_bytes(np.array(shape, dtype=np.int64))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


#: One file per reader whose header (or ids) declares far more than its content shows.
HUGE = {
    "comm-header": ("h.comm", b"# tasks: 2000000000\n0 1 5\n"),
    "comm-ids": ("i.comm", b"0 2147483645 5\n"),
    "mtx-size": ("s.mtx", b"%%MatrixMarket matrix coordinate integer general\n"
                          b"2147483646 2147483646 1\n1 2 3\n"),
    "metis-header": ("n.graph", b"2147483646 1\n2\n1\n"),
    "npz-shape": ("s.npz", _npz_with_shape((2 * 10**9, 2 * 10**9))),
    "prof-procs": ("p.prof", b"D\tMPI_COMM_WORLD\tprocs: 0,2000000000\n"),
    "npy-shape": ("s.npy", _npy_header("(100000, 100000)")),
    "npy-negative": ("m.npy", _npy_header("(-1, -1)", b"\0" * 8)),
}


def _run_cli(path: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """``procmap eval path`` under :data:`CLI_ADDRESS_SPACE`; returns (result, wall s, CPU s)."""
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (CLI_ADDRESS_SPACE, CLI_ADDRESS_SPACE))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "procmap", "eval", path, "-H", "4:8",
                             "--baseline", "block"], capture_output=True, text=True,
                            preexec_fn=limit_memory, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, wall, cpu


@pytest.fixture(scope="module")
def cli_baseline(tmp_path_factory) -> tuple[float, float]:
    """Wall and CPU seconds of ``procmap eval`` on a trivial valid file (mostly start-up)."""
    path = tmp_path_factory.mktemp("cli") / "ok.comm"
    path.write_bytes(b"0 1 5\n1 2 3\n")
    result, wall, cpu = _run_cli(str(path))
    assert result.returncode == 0, result.stderr
    print(f"\nbaseline (valid .comm): wall {wall:.2f} s, CPU {cpu:.2f} s")
    return wall, cpu


@pytest.mark.parametrize("case", sorted(HUGE))
def test_huge_declared_size_is_one_error_line_through_the_cli(tmp_path, cli_baseline, case):
    name, data = HUGE[case]
    path = tmp_path / name
    path.write_bytes(data)
    result, wall, cpu = _run_cli(str(path))
    print(f"{case}: wall {wall:.2f} s, CPU {cpu:.2f} s: {result.stderr.strip()[:120]}")
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"procmap: error: {path}"), result.stderr
    assert result.stdout == ""
    base_wall, base_cpu = cli_baseline
    # CPU time does not depend on other jobs sharing the machine: at most 2 s of work
    # beyond what a valid file costs (interpreter and import); wall time, generously
    assert cpu < base_cpu + 2.0, f"{cpu:.2f} s CPU vs {base_cpu:.2f} s for a valid file"
    assert wall < base_wall + 10.0, f"{wall:.2f} s vs {base_wall:.2f} s for a valid file"
