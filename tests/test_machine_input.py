"""Machine input at its limits (issue 20, sections 3 and 5): hierarchies, tleaf strings,
distance matrices, --slots, Slurm variables and host names.

Every size a user gives is checked against ``procmap.limits`` where it is parsed,
before an array of that size exists; numbers are ASCII digits only; host names are
letters, digits, '-', '.' and '_'. The parsers are tested in-process (under an
address-space cap where the old code allocated gigabytes); a few CLI cases run in a
subprocess under ``RLIMIT_AS`` and must end in one stderr line and exit status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
import warnings

import networkx as nx
import numpy as np
import pytest

from procmap import baselines
from procmap.errors import InputError, TopologyError
from procmap.launcher_hooks.placement import host_layout
from procmap.limits import MAX_PES, MAX_SLOTS, MAX_TASKS
from procmap.topology import (DistanceMatrix, Hierarchy, SlurmAllocation, check_host_name,
                              compress_hostlist, detect_slurm, expand_hostlist, from_tleaf,
                              parse_cpus_per_node, read_hostfile)

ROOT = os.path.join(os.path.dirname(__file__), "..")
EXAMPLE = os.path.join(ROOT, "examples", "halo3d.comm")
GiB = 1 << 30
# The CLI subprocesses run under this address-space limit: numba and numpy import
# well below it, and every bad input here asked the old code for more.
CLI_ADDRESS_SPACE = 3 * GiB
SLURM_HUGE = {"SLURM_NTASKS": "2000000000", "SLURM_JOB_NODELIST": "n[1-6]",
              "SLURM_JOB_CPUS_PER_NODE": "1000000000(x6)"}


def _vm_size() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def bounded_memory(extra: int = GiB):
    """Let this process grow by at most ``extra`` bytes of address space meanwhile.

    A check that comes after the allocation then fails as a MemoryError instead of
    taking the machine's memory.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture
def capped():
    with bounded_memory():
        yield


def write_npy_header(path, shape, descr="<f8") -> str:
    """A .npy file holding only a header (no data): what a truncated download leaves."""
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": descr, "fortran_order": False, "shape": shape})
    return str(path)


# --------------------------------------------------------- sizes: hierarchies
@pytest.mark.parametrize("text, pes", [
    ("1000000000:1000000000", "1,000,000,000,000,000,000"),
    ("100000:100000", "10,000,000,000"),
    ("4096:4097", "16,781,312"),  # just above 2^24
])
def test_hierarchy_above_max_pes_is_refused_before_allocating(capped, text, pes):
    with pytest.raises(TopologyError, match=f"has {pes} PEs; procmap handles at most 16,777,216"):
        Hierarchy.parse(text)


def test_hierarchy_at_max_pes_is_accepted():
    h = Hierarchy.parse("4096:4096")
    assert h.k == MAX_PES and h.total_slots == MAX_PES


def test_hierarchy_constructor_and_tleaf_check_pes(capped):
    with pytest.raises(TopologyError, match="10,000,000,000 PEs"):
        Hierarchy((100000, 100000), None)
    with pytest.raises(TopologyError, match=r"^tleaf: hierarchy 100000:100000 has "
                                            "10,000,000,000 PEs"):
        from_tleaf("tleaf 2 100000 1 100000 1")


# ------------------------------------------------------------ sizes: slots
def test_capacities_above_max_slots_are_refused():
    h = Hierarchy.parse("4:8:6")
    with pytest.raises(TopologyError, match="capacity of PE 0 is 4,611,686,018,427,387,904; "
                                            "capacities must lie in 0..2,147,483,646"):
        h.with_capacities(np.full(h.k, 2**62, dtype=np.int64))
    with pytest.raises(TopologyError, match="capacities must lie in 0..2,147,483,646"):
        DistanceMatrix([[0, 1], [1, 0]], capacities=[1, MAX_SLOTS + 1])


def test_total_slots_at_the_limits_is_exact():
    h = Hierarchy.parse("4096:4096").with_capacities(np.full(MAX_PES, MAX_SLOTS, dtype=np.int64))
    assert h.total_slots == MAX_PES * MAX_SLOTS  # 2^55 - 2^25: no int64 overflow


def test_baselines_never_list_unreachable_slots(capped):
    """--slots at its limit: the baselines list O(n + k) slots, not 192 * 2^31."""
    h = Hierarchy.parse("4:8:6").with_capacities(np.full(192, MAX_SLOTS, dtype=np.int64))
    np.testing.assert_array_equal(baselines.block(192, h), np.zeros(192))
    rr = baselines.roundrobin(12, h)
    np.testing.assert_array_equal(rr, [0, 32, 64, 96, 128, 160] * 2)  # one PE per node
    assert baselines.random(192, h).max() == 0


def test_roundrobin_with_uneven_nodes_keeps_its_order():
    h = Hierarchy((2, 3), None, np.array([3, 0, 1, 1, 2, 0]), node_level=1)
    # Nodes (PE pairs) hold 3, 2 and 2 slots: round 0, round 1, then node 0's third.
    np.testing.assert_array_equal(baselines.roundrobin(7, h), [0, 2, 4, 0, 3, 4, 0])


# ------------------------------------------------------ sizes: .npy matrices
def test_npy_header_only_matrix_is_refused_before_loading(tmp_path, capped):
    path = write_npy_header(tmp_path / "d.npy", (1, 10**9))
    with pytest.raises(TopologyError, match=r"d.npy: header declares shape \(1, 1000000000\) of "
                                            "float64 \\(8,000,000,000 bytes\\)"):
        DistanceMatrix.from_file(path)


def test_npy_negative_shape(tmp_path):
    path = write_npy_header(tmp_path / "d.npy", (-1, -1))
    with pytest.raises(TopologyError, match=r"d.npy: header declares a negative dimension in "
                                            r"shape \(-1, -1\)"):
        DistanceMatrix.from_file(path)


def test_text_matrix_numbers_are_ascii(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("0 1_0\n1_0 0\n", encoding="utf-8")
    with pytest.raises(TopologyError, match=r"d.txt:1: '1_0' is not a number in digits 0-9"):
        DistanceMatrix.from_file(path)


# ------------------------------------------------------------ sizes: Slurm
def test_cpus_per_node_above_max_pes(capped):
    with pytest.raises(TopologyError, match="1,000,000,000 CPUs on a node; procmap handles at "
                                            "most 16,777,216 PEs"):
        parse_cpus_per_node("1000000000(x6)", 6)
    with pytest.raises(TopologyError, match="more than 16,777,216 nodes"):
        parse_cpus_per_node("1(x20000000)")


def test_detect_slurm_refuses_huge_cpu_counts_where_parsed(capped):
    with pytest.raises(TopologyError, match=r"^SLURM_JOB_CPUS_PER_NODE: .*1,000,000,000 CPUs "
                                            "on a node"):
        detect_slurm(SLURM_HUGE)
    # Each node within the limit, all of them together above it.
    with pytest.raises(TopologyError, match=r"SLURM_JOB_CPUS_PER_NODE='10000000\(x2\)': "
                                            "20,000,000 CPUs on 2 hosts"):
        detect_slurm({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "10000000(x2)"})


def test_allocation_hierarchy_checks_pes_before_allocating(capped):
    alloc = SlurmAllocation(("a", "b"), (10**7, 10**7))
    with pytest.raises(TopologyError, match="Slurm allocation 10000000:2 has 20,000,000 PEs"):
        alloc.hierarchy()
    with pytest.raises(TopologyError, match="Slurm allocation 4096:4096:2 has"):
        SlurmAllocation(("a", "b"), None).hierarchy("4096:4096")


@pytest.mark.parametrize("value, message", [
    (str(MAX_TASKS + 1), "is above procmap's limit of 2,147,483,646"),
    ("1_0", "is not an integer in digits 0-9"),
    ("\uff14", "is not an integer in digits 0-9"),
    ("-3", "is not an integer in digits 0-9"),
])
def test_slurm_ntasks_limits_and_digits(value, message):
    with pytest.raises(TopologyError, match=f"SLURM_NTASKS='{value}'.*{message}"):
        detect_slurm({"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": value})
    assert detect_slurm({"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": " 2000000000 "}).ntasks == \
        2_000_000_000


# ---------------------------------------------------------- ASCII digits only
@pytest.mark.parametrize("levels, bad", [("4_0:8", "4_0"), ("\uff14:\uff18", "\uff14"),
                                         ("+4:8", "+4")])
def test_hierarchy_levels_are_ascii_digits(levels, bad):
    with pytest.raises(TopologyError, match=re.escape(f"hierarchy '{levels}': '{bad}' is not a "
                                                      "whole number")):
        Hierarchy.parse(levels)


@pytest.mark.parametrize("distances, bad", [("1:1_0", "1_0"), ("1:\uff11\uff10", "\uff11\uff10")])
def test_distances_are_ascii_digits(distances, bad):
    with pytest.raises(TopologyError, match=f"distances '{distances}': '{bad}' is not a number"):
        Hierarchy.parse("2:2", distances)
    assert Hierarchy.parse("2:2", "0.5:1e3").distances == (0.5, 1000.0)


@pytest.mark.parametrize("text, message", [
    ("tleaf 2 4_0 1 2 10", "size '4_0' of level 0 is not an integer"),
    ("tleaf \uff12 4 1 2 10", "level count '\uff12' is not an integer"),
    ("tleaf 1 4 1_0", "cost '1_0' of level 0 is not a number"),
])
def test_tleaf_numbers_are_ascii_digits(text, message):
    with pytest.raises(TopologyError, match=message):
        from_tleaf(text)


@pytest.mark.parametrize("text", ["\uff13\uff12", "3_2(x2)", "32(x\uff12)"])
def test_cpu_counts_are_ascii_digits(text):
    with pytest.raises(TopologyError, match="malformed CPU count list"):
        parse_cpus_per_node(text)


@pytest.mark.parametrize("line, message", [
    ("n1 slots=4_0\n", r"hosts:1: slots '4_0' is not an integer in digits 0-9"),
    ("n1:\uff14\n", r"hosts:1: slot count '\uff14' is not an integer"),
    ("n1 slots=99999999999\n", r"hosts:1: slots '99999999999' is above procmap's limit of 2,147,483,646"),
])
def test_hostfile_slot_counts(tmp_path, line, message):
    path = tmp_path / "hosts"
    path.write_text(line, encoding="utf-8")
    with pytest.raises(TopologyError, match=message):
        read_hostfile(path)


# ---------------------------------------------------------------- host names
@pytest.mark.parametrize("name", ["n1:4", "n2=x", "a b", "", "n\uff11", "\ufeffnode01", "a,b"])
def test_check_host_name_refuses(name):
    with pytest.raises(TopologyError, match="invalid host name"):
        check_host_name(name)


def test_check_host_name_accepts_usual_names():
    for name in ("node01", "n-1.cluster.org", "gpu_a100-7", "10.0.0.1"):
        assert check_host_name(name) == name


def test_host_lists_validate_every_name():
    with pytest.raises(TopologyError, match=r"^host list 'n1:4,n2=x': invalid host name 'n1:4': "
                                            "host names may contain only letters, digits"):
        expand_hostlist("n1:4,n2=x")
    with pytest.raises(TopologyError, match="invalid host name 'a=b'"):
        compress_hostlist(["a=b"])
    with pytest.raises(TopologyError, match="invalid host name 'a b'"):
        host_layout(Hierarchy.parse("2:2"), ["a b", "c"])
    with pytest.raises(TopologyError, match=r"^SLURM_JOB_NODELIST: .*invalid host name 'n1:4'"):
        detect_slurm({"SLURM_JOB_NODELIST": "n1:4,n2"})


def test_hostfile_bom_is_stripped(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node01 slots=2\nnode02:4\n", encoding="utf-8-sig")
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert read_hostfile(path) == [("node01", 2), ("node02", 4)]


def test_hostfile_host_names_are_validated_with_file_and_line(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node01\nn2=x slots=2\n", encoding="utf-8")
    with pytest.raises(TopologyError, match=r"hosts:2: invalid host name 'n2=x'"):
        read_hostfile(path)


# -------------------------------------------------------- warnings and reprs
def test_reversed_distances_warn_once_per_machine():
    """_machine parses and then sets --slots; host_layout sets the node level: one warning."""
    from procmap.cli import _machine

    args = argparse.Namespace(hierarchy="4:8:6", distance="100:10:1", distance_matrix=None,
                              slots=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = _machine(args)
        host_layout(h, [f"n{i}" for i in range(6)])
    assert [str(w.message) for w in caught] == [
        "distances 100:10:1 are not non-decreasing from leaf to root; is the order reversed?"]


@pytest.mark.parametrize("slots, message", [
    ("4_0", "--slots 4_0 is not an integer in digits 0-9"),
    ("\uff14", "--slots \uff14 is not an integer in digits 0-9"),
    ("-1", "--slots -1 is not an integer in digits 0-9"),
    ("4611686018427387904", "--slots 4611686018427387904 is above procmap's limit of "
                            "2,147,483,646"),
])
def test_slots_flag(slots, message, tmp_path, capsys):
    from procmap.cli import main

    graph = tmp_path / "g.comm"
    graph.write_text("0 1 5\n")
    argv = ["eval", str(graph), "-H", "4:8:6", "--baseline", "block", "--json", "--slots"]
    assert main([*argv, slots]) == 2
    assert capsys.readouterr().err == f"procmap: error: {message}\n"
    assert main([*argv, "2"]) == 0
    assert "384 slots" in json.loads(capsys.readouterr().out)["machine"]


def test_messages_show_plain_numbers():
    with pytest.raises(TopologyError, match=r"got 0$") as info:
        Hierarchy((np.int64(4), np.int64(0)), None)
    assert "np." not in str(info.value)
    graph = nx.Graph([(np.int64(0), np.int64(1)), (np.int64(2), np.int64(3))])
    with pytest.raises(TopologyError, match="^PEs 0 and 2 are not connected"):
        DistanceMatrix.from_networkx(graph)
    with pytest.raises(TopologyError, match="^PE 9 is not a node"):
        DistanceMatrix.from_networkx(graph, pes=[np.int64(0), np.int64(9)])


# ----------------------------------------------------------- the CLI, bounded
def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CLI_ADDRESS_SPACE, CLI_ADDRESS_SPACE))


def run_bounded(argv: list[str], cwd, env_extra: dict | None = None):
    """``procmap argv`` in a subprocess under CLI_ADDRESS_SPACE; (rc, stderr lines, seconds)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k != "PROCMAP_PROLOG"}
    env.update(env_extra or {})
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "procmap", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=_limit_address_space)
    return proc.returncode, proc.stderr.splitlines(), time.monotonic() - start, proc.stdout


@pytest.mark.parametrize("case", ["hierarchy", "slots", "npy", "slurm-topology", "slurm",
                                  "host-names"])
def test_cli_bad_machine_is_one_line_exit_2(tmp_path, case):
    env = None
    if case == "hierarchy":
        argv = ["eval", EXAMPLE, "-H", "1000000000:1000000000", "--baseline", "block"]
        expected = "hierarchy 1000000000:1000000000 has 1,000,000,000,000,000,000 PEs"
    elif case == "slots":
        argv = ["eval", EXAMPLE, "-H", "4:8:6", "--baseline", "block",
                "--slots", "4611686018427387904"]
        expected = "--slots 4611686018427387904 is above procmap's limit of 2,147,483,646"
    elif case == "npy":
        path = write_npy_header(tmp_path / "d.npy", (1, 10**9))
        argv = ["eval", EXAMPLE, "--distance-matrix", path, "--baseline", "block"]
        expected = "header declares shape (1, 1000000000)"
    elif case == "slurm-topology":
        argv, env = ["topology"], SLURM_HUGE
        expected = "SLURM_JOB_CPUS_PER_NODE: CPU count list '1000000000(x6)': 1,000,000,000 CPUs"
    elif case == "slurm":
        argv, env = ["slurm", EXAMPLE, "-o", "out"], SLURM_HUGE
        expected = "SLURM_JOB_CPUS_PER_NODE: CPU count list '1000000000(x6)': 1,000,000,000 CPUs"
    else:
        argv = ["rankfile", EXAMPLE, "-H", "4:8:6", "--hosts", "n1:4,n2=x", "-o", "rf"]
        expected = "host list 'n1:4,n2=x': invalid host name 'n1:4'"
    rc, err, seconds, out = run_bounded(argv, tmp_path, env)
    assert rc == 2, (rc, err[-3:])
    assert len(err) == 1 and err[0].startswith("procmap: error: ") and expected in err[0], err
    assert out == ""
    assert seconds < 10, seconds  # ~1 s of imports; the old code took longer or crashed
    assert os.listdir(tmp_path) == (["d.npy"] if case == "npy" else [])  # nothing written
