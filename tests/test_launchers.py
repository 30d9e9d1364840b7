"""Launcher hooks: ``procmap rankfile``, ``machinefile`` and ``slurm``, and their helpers.

Fast and without a real MPI or Slurm: ``mpirun --version`` is a fake script, the
Slurm allocation comes from monkeypatched environment variables, and most CLI
tests replace the mapper by a fixed placement so that they check the launcher
logic, not the engines.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import threading

import numpy as np
import pytest

import procmap.launcher_hooks.pipeline as launcher_pipeline
from procmap import baselines
from procmap.errors import CapacityError, ProcmapError, TopologyError
from procmap.formats import write_graph
from procmap.generators import grid_graph
from procmap.launcher_hooks import mpich, openmpi, slurm
from procmap.launcher_hooks.placement import (canonical_cores, common_list, cpu_lists,
                                              host_layout, infer_node_level, interleaved_hosts,
                                              locate, merge_host_slots, nodes_per_level, runs)
from procmap.mapping import Mapping
from procmap.objective import evaluate
from procmap.topology import Hierarchy

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "halo3d.comm")
SLURM_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_CPUS_PER_NODE",
              "SLURM_CPUS_ON_NODE", "SLURM_NTASKS", "SLURM_JOB_NTASKS", "PROCMAP_PROLOG")


# ------------------------------------------------------------------- harness
def _main(argv: list[str]) -> int:
    """``procmap.cli.main``: the launcher commands are registered there."""
    from procmap.cli import main

    return main(argv)


def run_cli(argv: list[str]) -> int:
    """Run one procmap command in-process and return its exit status."""
    return _main([str(a) for a in argv])


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No test sees the Slurm job (or prolog flag) it might be running in."""
    for var in SLURM_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def small_graph(tmp_path):
    """A 3x4 grid (12 ranks) as a .comm file."""
    path = tmp_path / "grid.comm"
    write_graph(grid_graph((3, 4), weight=5), str(path))
    return str(path)


def fixed_mapper(monkeypatch, pes_for):
    """Replace the mapper by ``pes_for(graph, topology) -> task->PE array``."""
    def fake(graph, topology, *, engine="auto", eps=0.03, seed=0, device="auto", progress=None):
        pes = np.asarray(pes_for(graph, topology), dtype=np.int32)
        return Mapping(pes=pes, engine="fixed", evaluation=evaluate(graph, topology, pes))
    monkeypatch.setattr(launcher_pipeline, "map_tasks", fake)


def fake_mpirun(tmp_path, output: str, name: str = "mpirun") -> str:
    """An executable that prints ``output`` for ``--version``.

    It uses only the shell's builtin printf, so that it also runs with PATH set to
    ``tmp_path`` alone (tests that must not see the machine's real launchers).
    """
    path = tmp_path / name
    path.write_text("#!/bin/sh\nprintf '%s\\n' " + shlex.quote(output) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def rankfile_entries(path) -> list[tuple[int, str, int]]:
    entries = []
    for line in open(path):
        left, slot = line.split()[1], line.split()[2]
        rank, host = left.split("=")
        assert slot.startswith("slot=")
        entries.append((int(rank), host, int(slot[5:])))
    return entries


# -------------------------------------------------------------- node level
@pytest.mark.parametrize("nhosts, level", [(6, 2), (48, 1), (192, 0), (1, 3)])
def test_infer_node_level(nhosts, level):
    assert infer_node_level((4, 8, 6), nhosts) == level


def test_infer_node_level_prefers_smallest_level_on_ties():
    # 4:1:6 -- levels 1 and 2 both give 6 nodes of 4 PEs.
    assert infer_node_level((4, 1, 6), 6) == 1


def test_infer_node_level_error_lists_every_level():
    with pytest.raises(TopologyError) as err:
        infer_node_level((4, 8, 6), 5)
    text = str(err.value)
    assert text.startswith("5 hosts but hierarchy 4:8:6 has")
    assert "6 nodes at level 2" in text and "48 nodes at level 1" in text
    assert "192 nodes at level 0" in text and "1 node at level 3" in text
    assert nodes_per_level((4, 8, 6)) == [(3, 1), (2, 6), (1, 48), (0, 192)]


def test_host_layout_explicit_level_and_errors():
    h = Hierarchy.parse("4:8:6")
    layout = host_layout(h, [f"n{i}" for i in range(8)], node_level=2)
    assert layout.hosts == tuple(f"n{i}" for i in range(6))
    assert layout.unused_hosts == ("n6", "n7") and not layout.node_level_inferred
    with pytest.raises(TopologyError, match="5 hosts but hierarchy 4:8:6 with node level 2 has 6 nodes"):
        host_layout(h, [f"n{i}" for i in range(5)], node_level=2)
    with pytest.raises(TopologyError, match="listed twice"):
        host_layout(h, ["a", "b", "c", "d", "e", "a"])
    with pytest.raises(TopologyError, match="outside 0..3"):
        host_layout(h, ["a"], node_level=4)


def test_host_slots_give_capacity_zero_pes():
    h = Hierarchy.parse("2:2:3")
    layout = host_layout(h, ["a", "b", "c"], slots=[4, 2, 9])
    assert layout.hierarchy.node_level == 2 and layout.pes_per_node == 4
    assert layout.hierarchy.capacities.tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]
    assert layout.slots_per_host().tolist() == [4, 2, 4]


def test_merge_host_slots_adds_repeated_hosts():
    assert merge_host_slots([("a", 2), ("b", 4), ("a", 2)]) == [("a", 4), ("b", 4)]


# --------------------------------------------------------- placement helpers
def test_runs_and_interleaving():
    assert runs(np.array([0, 0, 1, 1, 1, 0, 2])) == [(0, 2), (1, 3), (0, 1), (2, 1)]
    assert interleaved_hosts(runs(np.array([0, 0, 1, 1, 1, 0, 2]))) == [0]
    assert runs(np.array([], dtype=int)) == []
    assert interleaved_hosts(runs(np.repeat([0, 1, 2], 4))) == []


def test_cpu_lists_are_indexed_by_node_local_rank():
    node = np.array([1, 0, 1, 0, 1])
    core = np.array([3, 2, 0, 1, 2])
    assert cpu_lists(node, core) == {1: [3, 0, 2], 0: [2, 1]}
    assert common_list([[0, 1, 2], [0, 1]]) == [0, 1, 2]    # shorter list = prefix
    assert common_list([[0, 1, 2], [1, 0]]) is None
    assert common_list([]) == []


def test_canonical_cores_keeps_J_and_block():
    h = Hierarchy.parse("2:4:3", "1:10:100")
    g = grid_graph((4, 6), weight=3)
    rng = np.random.default_rng(1)
    for _ in range(5):
        pes = rng.permutation(h.k)[: g.n].astype(np.int32)
        new = canonical_cores(pes, h)
        assert evaluate(g, h, new).J == evaluate(g, h, pes).J
        assert np.array_equal(new // 8, pes // 8)            # nobody changes host
        assert np.unique(new).size == g.n                     # still one rank per PE
    block = baselines.block(g.n, h)
    assert np.array_equal(canonical_cores(block, h), block)


def test_canonical_cores_make_mirrored_nodes_share_one_list():
    # 2 cores x 2 sockets x 2 nodes. Node 0 holds ranks 0-3 with sockets swapped,
    # node 1 holds ranks 4-7 in order: the same pattern, different labels.
    h = Hierarchy.parse("2:2:2")
    pes = np.array([2, 3, 0, 1, 4, 5, 6, 7])
    layout = host_layout(h, ["a", "b"])
    before = cpu_lists(*locate(pes, layout))
    assert before[0] != before[1]
    after = cpu_lists(*locate(canonical_cores(pes, h), layout))
    assert after[0] == after[1] == [0, 1, 2, 3]


def test_canonical_cores_leave_irregular_nodes_alone():
    h = Hierarchy.parse("2:2:2").with_capacities(np.array([1, 1, 1, 0, 1, 1, 1, 1]))
    h = Hierarchy(h.levels, h.distances, h.capacities, node_level=2)
    pes = np.array([2, 0, 1, 5, 4])
    new = canonical_cores(pes, h)
    assert new[:3].tolist() == [2, 0, 1]          # node 0 has a capacity-0 PE: untouched
    assert new[3:].tolist() == [4, 5]


def test_fallback_nodes():
    # Slurm's block distribution: counts dealt one per node per round, then blocks.
    node, core = slurm.fallback_nodes(10, 3, [4, 4, 4])
    assert node.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert core.tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 1, 2]
    node, _ = slurm.fallback_nodes(4, 3, [2, 2, 2])        # Slurm's documented example
    assert node.tolist() == [0, 0, 1, 2]
    node, _ = slurm.fallback_nodes(14, 3, [8, 4, 4])       # small nodes fill up first
    assert np.bincount(node).tolist() == [6, 4, 4]
    node, core = slurm.fallback_nodes(7, 2, None)       # unknown slots: even blocks
    assert node.tolist() == [0, 0, 0, 0, 1, 1, 1] and core.tolist() == [0, 1, 2, 3, 0, 1, 2]
    with pytest.raises(ProcmapError, match="13 ranks but only 12 slots"):
        slurm.fallback_nodes(13, 3, [4, 4, 4])             # never oversubscribed


# ----------------------------------------------------------------- rankfile
def test_rankfile_small_case(tmp_path, small_graph, capsys):
    out = tmp_path / "rf"
    code = run_cli(["rankfile", small_graph, "--hierarchy", "2:2:3", "--distance", "1:10:100",
                    "--hosts", "n[1-3]", "-o", out, "--openmpi-version", "4", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    pes = np.array(result["pes"])
    entries = rankfile_entries(out)
    assert [r for r, _, _ in entries] == list(range(12))           # every rank, in order
    for (rank, host, slot), pe in zip(entries, pes):
        assert host == ["n1", "n2", "n3"][pe // 4] and slot == pe % 4
    h = Hierarchy.parse("2:2:3", "1:10:100")
    assert evaluate(grid_graph((3, 4), weight=5), h, pes).J == result["J"]
    assert result["J"] <= result["J_block"]
    assert result["node_level"] == 2 and result["node_level_inferred"]
    assert result["commands"] == [f"mpirun -n 12 --rankfile {out} ./app"]


def test_rankfile_fewer_ranks_than_slots(tmp_path, small_graph, capsys):
    out = tmp_path / "rf"
    code = run_cli(["rankfile", small_graph, "-H", "4:2:2", "--hosts", "a,b", "-o", out,
                    "--openmpi-version", "5.0.11"])
    assert code == 0
    text = capsys.readouterr()
    entries = rankfile_entries(out)
    assert len(entries) == 12
    assert len({(h, s) for _, h, s in entries}) == 12               # no core used twice
    assert all(0 <= s < 8 for _, _, s in entries)
    assert f"mpirun -n 12 --map-by rankfile:file={out} ./app" in text.out
    assert "node level 2 inferred from 2 hosts" in text.err


def test_rankfile_hostfile_slots_leave_pes_empty(tmp_path, small_graph, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=4\nb slots=2   # a small node\nc:4\n")
    out = tmp_path / "rf"
    code = run_cli(["rankfile", small_graph, "-H", "2:2:3", "--hostfile", hostfile, "-o", out,
                    "--openmpi-version", "4", "--ntasks", "10", "--json"])
    # 12 ranks in the graph but 10 slots: the graph is the larger, so --ntasks 10 fails...
    assert code == 2
    assert "--ntasks = 10 tasks but" in capsys.readouterr().err
    g = grid_graph((2, 5))
    path = tmp_path / "g10.comm"
    write_graph(g, str(path))
    code = run_cli(["rankfile", path, "-H", "2:2:3", "--hostfile", hostfile, "-o", out,
                    "--openmpi-version", "4", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["slots_per_host"] == [4, 2, 4]
    pes = np.array(result["pes"])
    assert not np.isin(pes, [6, 7]).any()                           # host b, cores 2 and 3
    assert all(not (host == "b" and slot >= 2) for _, host, slot in rankfile_entries(out))


@pytest.mark.parametrize("argv, message", [
    (["--hosts", "n[1-4]"], "4 hosts but hierarchy 2:2:3 has"),              # no level has 4 nodes
    (["--hosts", "n[1-2]", "--node-level", "2"], "2 hosts but hierarchy 2:2:3 with node level 2"),
    (["--hosts", "n[1-"], "malformed host list"),
    (["--hosts", "n[1-3]", "--slots", "2"], "--slots must be 1"),
    (["--hosts", "n[1-3]", "--openmpi-version", "7"], "unknown Open MPI version"),
    (["--hosts", "n[1-3]", "--openmpi-version", "five"], "unknown Open MPI version"),
])
def test_rankfile_bad_input_is_one_line_and_writes_nothing(tmp_path, small_graph, capsys,
                                                           argv, message):
    out = tmp_path / "rf"
    out.write_text("old\n")
    code = run_cli(["rankfile", small_graph, "-H", "2:2:3", "-o", out, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("procmap: error:")
    assert out.read_text() == "old\n"                                # untouched
    assert sorted(os.listdir(tmp_path)) == ["grid.comm", "rf"]       # no temporary left


def test_more_ranks_than_slots_is_a_capacity_error(tmp_path, capsys):
    path = tmp_path / "g.comm"
    write_graph(grid_graph((4, 4)), str(path))
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=4\nb slots=4\nc slots=4\n")          # 12 slots, 16 ranks
    code = run_cli(["rankfile", path, "-H", "2:2:3", "--hostfile", hostfile, "-o", tmp_path / "rf"])
    err = capsys.readouterr().err
    assert code == 2 and "16 ranks but only 12 slots on 3 hosts" in err
    assert not (tmp_path / "rf").exists()
    layout = host_layout(Hierarchy.parse("2:2:3"), ["a", "b", "c"], [4, 4, 4])
    with pytest.raises(CapacityError):
        launcher_pipeline.check_slots(grid_graph((4, 4)), layout,
                                      launcher_pipeline.HostSpec(("a", "b", "c"), (4, 4, 4), "test"))


# ------------------------------------------------------- Open MPI detection
@pytest.mark.parametrize("output, expected", [
    ("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/", "--rankfile"),
    ("mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/",
     "--map-by rankfile:file="),
])
def test_launch_line_follows_mpirun_version(tmp_path, small_graph, capsys, monkeypatch, output,
                                            expected):
    fixed_mapper(monkeypatch, lambda g, t: baselines.block(g.n, t))
    mpirun = fake_mpirun(tmp_path, output)
    code = run_cli(["rankfile", small_graph, "-H", "2:2:3", "--hosts", "n[1-3]",
                    "-o", tmp_path / "rf", "--mpirun", mpirun])
    assert code == 0
    out = capsys.readouterr().out
    # The line starts with --mpirun as given (here a path), not a bare "mpirun".
    launch = [line for line in out.splitlines() if line.startswith(f"  {mpirun} ")]
    assert len(launch) == 1 and expected in launch[0]
    assert ("--oversubscribe" in out) == ("5.0.11" in output)       # the v5 binding note


@pytest.mark.parametrize("output", ["HYDRA build details:\n    Version: 4.0.2",
                                    "mpirun (Open MPI) unreleased"])
def test_unknown_mpirun_prints_both_forms(tmp_path, small_graph, capsys, monkeypatch, output):
    fixed_mapper(monkeypatch, lambda g, t: baselines.block(g.n, t))
    mpirun = fake_mpirun(tmp_path, output)
    # Only the fake on PATH: a real mpirun.openmpi here would be printed instead.
    monkeypatch.setenv("PATH", str(tmp_path))
    code = run_cli(["rankfile", small_graph, "-H", "2:2:3", "--hosts", "n[1-3]",
                    "-o", tmp_path / "rf", "--mpirun", mpirun])
    assert code == 0
    out = capsys.readouterr().out
    assert "--rankfile" in out and "--map-by rankfile:file=" in out
    assert "Open MPI version unknown" in out


def test_detect_openmpi_without_or_with_hanging_mpirun(tmp_path):
    missing = openmpi.detect_openmpi(str(tmp_path / "no-such-mpirun"))
    assert missing.major is None and "not found" in missing.source
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nexec sleep 5\n")
    slow.chmod(0o755)
    hung = openmpi.detect_openmpi(str(slow), timeout=0.3)
    assert hung.major is None and "did not answer" in hung.source
    assert openmpi.parse_version_output("mpirun (Open MPI) 4.1.4") == (4, "4.1.4")
    assert openmpi.parse_forced_version("5").major == 5
    with pytest.raises(ProcmapError):
        openmpi.parse_forced_version("3.1")


# ------------------------------------------------------------- machinefile
def _interleaved(graph, topology):
    """Ranks alternate between the 3 nodes of 2:2:3 in pairs: 0,1 -> n1, 2,3 -> n2, ..."""
    pair = np.arange(graph.n) // 2
    return (pair % 3) * 4 + (pair // 3) * 2 + np.arange(graph.n) % 2


def _fake_mpiexec(tmp_path, monkeypatch, output: str) -> None:
    """A fake ``mpiexec`` printing ``output`` first on PATH: the printed name does not
    depend on the MPI installed where the tests run."""
    fake_mpirun(tmp_path, output, name="mpiexec")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


HYDRA_VERSION = "HYDRA build details:\n    Version:                                 4.0.2"
INTEL_VERSION = "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)"


def test_machinefile_merges_runs_and_warns_on_interleaving(tmp_path, small_graph, capsys,
                                                           monkeypatch):
    fixed_mapper(monkeypatch, _interleaved)
    _fake_mpiexec(tmp_path, monkeypatch, HYDRA_VERSION)
    out = tmp_path / "mf"
    code = run_cli(["machinefile", small_graph, "-H", "2:2:3", "--hosts", "n[1-3]", "-o", out])
    assert code == 0
    captured = capsys.readouterr()
    assert out.read_text() == "n1:2\nn2:2\nn3:2\nn1:2\nn2:2\nn3:2\n"
    assert "warning: the placement interleaves hosts (n1, n2, n3" in captured.err
    # MPICH: blocks are Hydra nodes, each restarts at local rank 0 -> lists differ.
    launch = [line for line in captured.out.splitlines() if line.startswith("  mpiexec")]
    assert launch == [f"  mpiexec -f {out} -n 12 ./app      # MPICH"]


def test_machinefile_block_placement_has_one_list(tmp_path, small_graph, capsys, monkeypatch):
    fixed_mapper(monkeypatch, lambda g, t: baselines.block(g.n, t))
    out = tmp_path / "mf"
    for flavor, expected in [("mpich", f"mpiexec -f {out} -n 12 -bind-to user:0,1,2,3 ./app"),
                             ("intel", f"I_MPI_PIN_PROCESSOR_LIST=0,1,2,3 mpiexec -machinefile "
                                       f"{out} -n 12 ./app")]:
        _fake_mpiexec(tmp_path, monkeypatch, HYDRA_VERSION if flavor == "mpich" else INTEL_VERSION)
        code = run_cli(["machinefile", small_graph, "-H", "2:2:3", "--hosts", "n[1-3]", "-o", out,
                        "--flavor", flavor, "--json"])
        assert code == 0
        result = json.loads(capsys.readouterr().out)
        assert out.read_text() == "n1:4\nn2:4\nn3:4\n"
        assert result["common_cpu_list"] == [0, 1, 2, 3]
        assert result["commands"] == [expected] and result["warnings"] == []


def test_intel_plan_with_different_lists_uses_one_set_per_run():
    # Node 0: local ranks on cores 1,0; node 1: cores 0,1 -> no common list.
    plan = mpich.plan_hydra("intel", ["a", "b"], np.array([0, 0, 1, 1]), np.array([1, 0, 0, 1]),
                            "mf")
    assert plan.common is None and plan.warnings == []
    assert plan.lists == [("a", [1, 0]), ("b", [0, 1])]
    assert plan.commands[0][1] == ("mpiexec -n 2 -host a -env I_MPI_PIN_PROCESSOR_LIST 1,0 ./app"
                                   " : -n 2 -host b -env I_MPI_PIN_PROCESSOR_LIST 0,1 ./app")


# ------------------------------------------------------------------- Slurm
@pytest.fixture
def slurm_env(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-3]")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "4(x3)")
    monkeypatch.setenv("SLURM_NTASKS", "12")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)  # not a partial node of a real job


def test_slurm_env_to_hostfile(tmp_path, small_graph, capsys, slurm_env, monkeypatch):
    fixed_mapper(monkeypatch, _interleaved)
    out = tmp_path / "hosts"
    code = run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--cpu-bind", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    hosts = ["n1", "n2", "n3"]
    assert out.read_text().splitlines() == [hosts[pe // 4] for pe in result["pes"]]
    assert result["host_source"] == "Slurm (SLURM_JOB_NODELIST)"
    # Every node holds ranks in the same socket pattern: one map_cpu list.
    assert result["common_cpu_list"] == [0, 1, 2, 3]
    assert result["commands"] == [f"export SLURM_HOSTFILE={out}",
                                  "srun -n 12 --distribution=arbitrary --cpu-bind=map_cpu:0,1,2,3 ./app"]


def test_slurm_prolog_variables_and_padding(tmp_path, small_graph, capsys, monkeypatch):
    # What the root Prolog sees: SLURM_NODELIST and SLURM_JOB_NTASKS only.
    monkeypatch.setenv("SLURM_NODELIST", "n[1-3]")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "8,4(x2)")
    monkeypatch.setenv("SLURM_JOB_NTASKS", "14")
    fixed_mapper(monkeypatch, lambda g, t: baselines.block(g.n, t))
    out = tmp_path / "hosts"
    code = run_cli(["slurm", small_graph, "-o", out, "--json"])   # hierarchy from the allocation
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["hierarchy"] == "8:3" and result["tasks"] == 14
    assert result["slots_per_host"] == [8, 4, 4]
    assert out.read_text().splitlines() == ["n1"] * 8 + ["n2"] * 4 + ["n3"] * 2


def test_slurm_hosts_override_and_not_in_slurm(tmp_path, small_graph, capsys):
    out = tmp_path / "hosts"
    assert run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", out]) == 2
    assert "not inside a Slurm job" in capsys.readouterr().err and not out.exists()
    assert run_cli(["slurm", small_graph, "-H", "2:2:3", "--hosts", "x[1-3]", "-o", out]) == 0
    assert set(out.read_text().split()) <= {"x1", "x2", "x3"}


def test_step_is_partial_compares_affinity_with_online_cpus(tmp_path, monkeypatch):
    online = tmp_path / "online"
    mine = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    online.write_text(f"0-{max(mine) + 1}\n")
    assert not slurm.step_is_partial(str(online))          # not inside a job
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert slurm.step_is_partial(str(online))              # a CPU the step does not own
    online.write_text(",".join(map(str, mine)) + "\n")
    assert not slurm.step_is_partial(str(online))          # the whole node
    assert not slurm.step_is_partial(str(tmp_path / "missing"))


def test_slurm_partial_node_uses_the_wrapper(tmp_path, small_graph, capsys, slurm_env,
                                             monkeypatch):
    # srun refuses map_cpu with node-local cores on a partial node ("CPU binding
    # outside of job step allocation"): the wrapper's line, which maps core c to the
    # c-th CPU the step owns, even though one list would fit every node.
    fixed_mapper(monkeypatch, lambda g, t: baselines.block(g.n, t))
    monkeypatch.setattr(slurm, "step_is_partial", lambda: True)
    out = tmp_path / "hosts"
    assert run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--cpu-bind", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["common_cpu_list"] == [0, 1, 2, 3]
    assert not any("map_cpu" in c for c in result["commands"])
    assert result["commands"][-1].endswith(f"--cpu-bind=none {slurm.bind_wrapper_path()} ./app")
    assert result["rank_map"] == f"{out}.ranks" and (tmp_path / "hosts.ranks").exists()
    assert any("part of this node's CPUs" in note for note in result["notes"])


def test_slurm_different_lists_use_the_taskprolog(tmp_path, small_graph, capsys, slurm_env,
                                                  monkeypatch):
    # On n1, ranks 0 and 2 share a socket (cores 0, 1), 1 and 3 the other: a pattern
    # that no renumbering turns into the in-order list of n2 and n3.
    def pes_for(graph, topology):
        pes = baselines.block(graph.n, topology).copy()
        pes[:4] = [0, 2, 1, 3]
        return pes
    fixed_mapper(monkeypatch, pes_for)
    out = tmp_path / "hosts"
    code = run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--cpu-bind"])
    assert code == 0
    text = capsys.readouterr().out
    rank_map = tmp_path / "hosts.ranks"
    assert f"PROCMAP_RANK_MAP={rank_map} PROCMAP_BIND=1" in text
    srun = [line for line in text.splitlines() if line.startswith("  srun")]
    assert srun == [f"  srun -n 12 --distribution=arbitrary --task-prolog={slurm.taskprolog_path()} "
                    f"--cpu-bind=none {slurm.bind_wrapper_path()} ./app"]
    assert "SLURM_PROLOG_CPU_MASK" not in text and "procmap_bind.sh binds" in text
    assert "  n1: 0,2,1,3" in text and "  n2: 0,1,2,3" in text
    lines = [line.split() for line in rank_map.read_text().splitlines() if not line.startswith("#")]
    assert lines[:5] == [["0", "n1", "0"], ["1", "n1", "2"], ["2", "n1", "1"], ["3", "n1", "3"],
                         ["4", "n2", "0"]]


def test_prolog_fallback_on_broken_input(tmp_path, capsys, slurm_env):
    broken = tmp_path / "broken.comm"
    broken.write_text("0 1 5\n1 x 3\n")
    out = tmp_path / "hosts"
    code = run_cli(["slurm", broken, "-H", "2:2:3", "-o", out, "--prolog", "--cpu-bind"])
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("procmap: prolog: ")
    assert "block placement" in err
    assert out.read_text().splitlines() == ["n1"] * 4 + ["n2"] * 4 + ["n3"] * 4   # 12 = SLURM_NTASKS


def test_prolog_env_flag_and_bad_hierarchy(tmp_path, small_graph, capsys, slurm_env, monkeypatch):
    monkeypatch.setenv("PROCMAP_PROLOG", "1")
    out = tmp_path / "hosts"
    code = run_cli(["slurm", small_graph, "-H", "2:2:5", "-o", out])   # 10 nodes, 3 hosts
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3 hosts but hierarchy 2:2:5" in err
    assert out.read_text().splitlines() == ["n1"] * 4 + ["n2"] * 4 + ["n3"] * 4


def test_prolog_success_is_silent_on_stderr(tmp_path, small_graph, capsys, slurm_env):
    code = run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", tmp_path / "hosts", "--prolog"])
    assert code == 0
    assert capsys.readouterr().err == ""


def test_timeout_falls_back_in_prolog_and_fails_otherwise(tmp_path, small_graph, capsys,
                                                          slurm_env, monkeypatch):
    release = threading.Event()

    def slow(graph, topology):
        release.wait(30)   # the abandoned mapping thread ends when the test does
        return baselines.block(graph.n, topology)
    fixed_mapper(monkeypatch, slow)
    out = tmp_path / "hosts"
    try:
        code = run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--timeout", "0.2"])
        err = capsys.readouterr().err
        assert code == 2 and "did not finish within --timeout 0.2 s" in err and not out.exists()
        code = run_cli(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--timeout", "0.2",
                        "--prolog"])
        err = capsys.readouterr().err
        assert code == 0 and err.count("\n") == 1 and "--timeout 0.2 s" in err
        assert out.read_text().splitlines() == ["n1"] * 4 + ["n2"] * 4 + ["n3"] * 4
    finally:
        release.set()


def test_call_with_deadline_passes_results_and_errors():
    assert slurm.call_with_deadline(lambda: 42, None) == 42
    assert slurm.call_with_deadline(lambda: 42, slurm.time.monotonic() + 5) == 42
    with pytest.raises(ZeroDivisionError):
        slurm.call_with_deadline(lambda: 1 // 0, slurm.time.monotonic() + 5)


def test_prolog_usage_error_exits_zero(capsys, monkeypatch):
    monkeypatch.setenv("PROCMAP_PROLOG", "1")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["slurm", "x.comm", "--ntasks", "soon"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().err.count("\n") == 1


# ---------------------------------------------------------------- TaskProlog
def _taskprolog(env: dict) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(["sh", slurm.taskprolog_path()], env={**base, **env},
                          capture_output=True, text=True, timeout=10)


def test_taskprolog_exports(tmp_path):
    rank_map = tmp_path / "job.ranks"
    rank_map.write_text(slurm.rank_map_text(["a", "b"], np.array([0, 0, 1]), np.array([5, 2, 40])))
    done = _taskprolog({"PROCMAP_RANK_MAP": str(rank_map), "SLURM_PROCID": "1"})
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == [f"export PROCMAP_RANK_MAP={rank_map}",
                                        "export PROCMAP_NEW_RANK=1", "export PROCMAP_CPU=2"]
    # The TaskProlog binds nothing (Slurm set the affinity before it ran): it exports
    # PROCMAP_CPU for procmap_bind.sh, also with PROCMAP_BIND=1.
    bound = _taskprolog({"PROCMAP_RANK_MAP": str(rank_map), "SLURM_PROCID": "2",
                         "PROCMAP_BIND": "1", "SLURMD_NODENAME": "b"})
    assert bound.returncode == 0 and bound.stderr == ""
    assert bound.stdout.splitlines() == [f"export PROCMAP_RANK_MAP={rank_map}",
                                         "export PROCMAP_NEW_RANK=2", "export PROCMAP_CPU=40"]
    elsewhere = _taskprolog({"PROCMAP_RANK_MAP": str(rank_map), "SLURM_PROCID": "2",
                             "PROCMAP_BIND": "1", "SLURMD_NODENAME": "a"})
    assert "SLURM_PROLOG_CPU_MASK" not in elsewhere.stdout and elsewhere.stderr == ""
    # Diagnostics are "print " lines: slurmstepd shows them in the task's output; the
    # wrapper is told not to bind a task that runs on another host than the map's.
    assert elsewhere.stdout.splitlines()[-2].startswith("print procmap_taskprolog: ")
    assert "not binding" in elsewhere.stdout
    assert elsewhere.stdout.splitlines()[-1] == "export PROCMAP_BIND=0"


def test_taskprolog_default_map_location(tmp_path):
    (tmp_path / "procmap.77.ranks").write_text("# header\n\n3 a 1\n")
    done = _taskprolog({"SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "77",
                        "SLURM_PROCID": "0"})
    assert "export PROCMAP_NEW_RANK=3" in done.stdout.splitlines()
    assert _taskprolog({"SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "78",
                        "SLURM_PROCID": "0"}).stdout == ""                # no map: silent


@pytest.mark.parametrize("env", [
    {"PROCMAP_RANK_MAP": "/nonexistent/map", "SLURM_PROCID": "0"},
    {"PROCMAP_RANK_MAP": "MAP"},                                    # no SLURM_PROCID
    {"PROCMAP_RANK_MAP": "MAP", "SLURM_PROCID": "99"},              # beyond the map
    {"PROCMAP_RANK_MAP": "MAP", "SLURM_PROCID": "1"},               # garbage line
])
def test_taskprolog_never_fails(tmp_path, env):
    rank_map = tmp_path / "map"
    rank_map.write_text("0 a 1\n* b x\n")
    env = {k: (str(rank_map) if v == "MAP" else v) for k, v in env.items()}
    done = _taskprolog(env)
    assert done.returncode == 0 and done.stderr == ""
    assert "PROCMAP_NEW_RANK" not in done.stdout
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["print procmap_taskprolog"]


@pytest.mark.parametrize("argv", [
    ["rankfile", "--hosts", "n[1-6]", "--openmpi-version", "5"],
    ["machinefile", "--hosts", "n[1-6]"],
    ["rankorder", "--nodes", "6"],
    ["slurm", "--hosts", "n[1-6]"],
])
def test_bad_graph_is_one_line_even_where_the_node_level_is_inferred(tmp_path, capsys, argv):
    """The node-level note is said only once the input has proved good: a missing
    graph is exactly one stderr line, not the note and then the error."""
    from procmap.cli import main

    out = tmp_path / "out"
    code = main([argv[0], str(tmp_path / "missing.comm"), "-H", "4:8:6", "-o", str(out),
                 *argv[1:]])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "missing.comm" in err, err
    assert not out.exists()
    code = main([argv[0], EXAMPLE, "-H", "4:8:6", "-o", str(out), *argv[1:]])
    assert code == 0 and "node level 2 inferred" in capsys.readouterr().err
