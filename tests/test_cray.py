"""``procmap rankorder``: HPE Cray MPICH rank-order files (launcher_hooks/cray.py).

No Cray system here: the tests check the file format (round trip through
:func:`cray.parse_rank_order`), the ranges, the environment and launch lines, the
scattered-order warning, and the shared launcher rules (never oversubscribe, write
atomically, refuse to overwrite an input).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import procmap.launcher_hooks.pipeline as launcher_pipeline
from procmap.errors import FormatError
from procmap.formats import write_graph
from procmap.generators import grid_graph
from procmap.launcher_hooks import cray
from procmap.mapping import Mapping
from procmap.objective import evaluate

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "halo3d.comm")


def run_cli(argv) -> int:
    from procmap.cli import main

    return main([str(a) for a in argv])


def fixed_mapper(monkeypatch, pes_for):
    """Replace the mapper by ``pes_for(graph, topology) -> task->PE array``."""
    def fake(graph, topology, *, engine="auto", eps=0.03, seed=0, device="auto", progress=None):
        pes = np.asarray(pes_for(graph, topology), dtype=np.int32)
        return Mapping(pes=pes, engine="fixed", evaluation=evaluate(graph, topology, pes))
    monkeypatch.setattr(launcher_pipeline, "map_tasks", fake)


@pytest.fixture
def grid256(tmp_path):
    path = tmp_path / "grid256.comm"
    write_graph(grid_graph((16, 16), weight=5), str(path))
    return str(path)


# ------------------------------------------------------------------ format
@pytest.mark.parametrize("ranks, text", [
    ([0, 1, 2, 3, 8], "0-3,8"),
    ([4, 5], "4,5"),                       # a pair is as short as a range
    ([7, 0, 1, 2, 9, 10, 11, 12], "7,0-2,9-12"),
    ([3, 2, 1], "3,2,1"),                  # only ascending runs become ranges
    ([], ""),
])
def test_compress_ranges(ranks, text):
    assert cray.compress_ranges(ranks) == text
    if ranks:
        assert cray.parse_rank_order(text) == [ranks]


def test_round_trip_is_a_permutation_one_node_per_line():
    rng = np.random.default_rng(3)
    pes = rng.permutation(48)[:40]               # 40 ranks on 48 slots, 6 nodes of 8
    node, core = pes // 8, pes % 8
    lines = cray.slot_lines(node, core)
    back = cray.parse_rank_order(cray.rank_order_text(lines))
    assert back == lines
    assert sorted(r for line in back for r in line) == list(range(40))
    used = sorted(set(node.tolist()))
    for line, n in zip(back, used):
        mine = np.flatnonzero(node == n)
        assert line == mine[np.argsort(core[mine])].tolist()  # the node's slots in order


@pytest.mark.parametrize("text, message", [("0,1,x\n", "bad rank or range 'x'"),
                                           ("3-1\n", "descending range"),
                                           ("0,,1\n", "bad rank or range ''")])
def test_parse_rejects_bad_items(text, message):
    with pytest.raises(FormatError, match=message):
        cray.parse_rank_order(text, "order")


def test_environment_names_the_file_unless_it_is_the_default(tmp_path):
    cwd = str(tmp_path)
    assert cray.env_lines("MPICH_RANK_ORDER", cwd) == ["export MPICH_RANK_REORDER_METHOD=3"]
    assert cray.env_lines(os.path.join(cwd, "MPICH_RANK_ORDER"), cwd) == [
        "export MPICH_RANK_REORDER_METHOD=3"]
    assert cray.env_lines("sub/MPICH_RANK_ORDER", cwd)[1] == (
        f"export MPICH_RANK_REORDER_FILE={tmp_path}/sub/MPICH_RANK_ORDER")
    assert cray.env_lines("order.txt", cwd)[1].endswith("/order.txt")


# --------------------------------------------------------------- scattered
def test_contiguous_order_is_not_scattered_even_on_many_nodes():
    n, nodes = 64 * 32, 64
    plan = cray.plan_rankorder(np.arange(n) // 32, np.arange(n) % 32, "MPICH_RANK_ORDER")
    assert cray.pmi_process_mapping(plan.lines) == "(vector,(0,64,32))"
    assert plan.ranges == nodes and not plan.scattered and not plan.warnings
    assert plan.commands[0][1] == "srun -N 64 -n 2048 --ntasks-per-node=32 --distribution=block ./app"


def test_random_order_on_many_nodes_is_scattered():
    n = 64 * 32
    pes = np.random.default_rng(0).permutation(n)
    plan = cray.plan_rankorder(pes // 32, pes % 32, "MPICH_RANK_ORDER")
    assert plan.scattered and plan.pmi_bytes > cray.PMI_VALUE_MAX
    assert plan.ranges > 30 * 64                 # almost every rank is its own range
    assert len(plan.warnings) == 1 and "cray-mpich 9.1" in plan.warnings[0]


def test_small_interleaved_order_fits_the_pmi_value():
    # Two nodes, ranks alternating in pairs: 4 triples, far below the limit.
    plan = cray.plan_rankorder(np.arange(16) // 2 % 2, np.arange(16) // 4, "x")
    assert cray.pmi_process_mapping(plan.lines) == "(vector," + ",".join(
        ["(0,2,2)"] * 4) + ")"
    assert not plan.scattered


def test_uneven_nodes_warn_and_launch_without_ntasks_per_node():
    node = np.array([0, 0, 0, 1, 1])
    plan = cray.plan_rankorder(node, np.array([0, 1, 2, 0, 1]), "x")
    assert plan.counts == [3, 2]
    assert plan.commands[0][1] == "srun -N 2 -n 5 --distribution=block ./app"
    assert any("different rank counts (3,2)" in w for w in plan.warnings)


# --------------------------------------------------------------------- CLI
def test_cli_halo3d(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_cli(["rankorder", EXAMPLE, "-H", "4:8:6", "--nodes", 6, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lines = cray.parse_rank_order(open(tmp_path / "MPICH_RANK_ORDER").read())
    pes = np.array(out["pes"])
    assert len(lines) == 6 and [len(line) for line in lines] == [32] * 6
    assert sorted(r for line in lines for r in line) == list(range(192))
    for n, line in enumerate(lines):
        assert (pes[line] // 32 == n).all() and (np.diff(pes[line] % 32) > 0).all()
    assert out["environment"] == ["export MPICH_RANK_REORDER_METHOD=3"]
    assert out["commands"] == ["srun -N 6 -n 192 --ntasks-per-node=32 --distribution=block ./app"]
    assert not out["scattered"] and out["J"] <= out["J_block"]


def test_cli_text_output_and_hosts_only_count(tmp_path, capsys):
    target = tmp_path / "order.txt"
    assert run_cli(["rankorder", EXAMPLE, "-H", "4:8:6", "--hosts", "nid[001-006]",
                    "-o", target]) == 0
    out = capsys.readouterr().out
    assert f"export MPICH_RANK_REORDER_FILE={target}" in out
    assert "nid" not in target.read_text()       # no host names in the file
    assert "srun -N 6 -n 192" in out


def test_cli_scattered_warning_is_one_line(tmp_path, grid256, monkeypatch, capsys):
    # 256 ranks on random slots of 64 nodes of 4 cores: (almost) every rank a range.
    fixed_mapper(monkeypatch, lambda g, t: np.random.default_rng(1).permutation(g.n))
    assert run_cli(["rankorder", grid256, "-H", "4:64", "--nodes", 64, "-q",
                    "-o", tmp_path / "order"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("procmap: warning:")]
    assert len(warnings) == 1 and "scattered rank order" in warnings[0]
    assert len(cray.parse_rank_order((tmp_path / "order").read_text())) == 64


def test_cli_block_order_on_many_nodes_has_no_warning(tmp_path, grid256, monkeypatch, capsys):
    fixed_mapper(monkeypatch, lambda g, t: np.arange(g.n))
    assert run_cli(["rankorder", grid256, "-H", "4:64", "--nodes", 64, "-q",
                    "-o", tmp_path / "order"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_cli_never_oversubscribes(tmp_path, capsys):
    target = tmp_path / "order"
    assert run_cli(["rankorder", EXAMPLE, "-H", "4:8:6", "--nodes", 6, "--ntasks", 200,
                    "-o", target]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the node-level note
    assert last.startswith("procmap: error:") and "never oversubscribes" in last
    assert not target.exists()
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"n{i} slots=30\n" for i in range(6)))   # 180 < 192
    assert run_cli(["rankorder", EXAMPLE, "-H", "4:8:6", "--hostfile", hostfile,
                    "-o", target]) == 2
    assert "never oversubscribes" in capsys.readouterr().err and not target.exists()


def test_cli_refuses_output_equal_to_input_and_keeps_old_file(tmp_path, capsys):
    graph = tmp_path / "halo.comm"
    graph.write_text(open(EXAMPLE).read())
    before = graph.read_text()
    assert run_cli(["rankorder", graph, "-H", "4:8:6", "--nodes", 6, "-o", graph]) == 2
    assert capsys.readouterr().err.startswith("procmap: error:")
    assert graph.read_text() == before
    old = tmp_path / "MPICH_RANK_ORDER"
    old.write_text("old\n")
    assert run_cli(["rankorder", graph, "-H", "4:8:6", "--nodes", 7, "-o", old]) == 2
    assert old.read_text() == "old\n"               # failed run: old file intact
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp left


@pytest.mark.parametrize("extra, message", [
    ([], "needs the node count"),
    (["--nodes", 6, "--hosts", "a,b"], "not both"),
    (["--nodes", 0], "at least 1 node"),
])
def test_cli_node_count_errors(tmp_path, capsys, extra, message):
    target = tmp_path / "order"
    assert run_cli(["rankorder", EXAMPLE, "-H", "4:8:6", "-o", target, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("procmap: error:") and message in err and len(err.splitlines()) == 1
    assert not target.exists()


def test_cli_node_level_gives_the_nodes(tmp_path, capsys):
    assert run_cli(["rankorder", EXAMPLE, "-H", "4:8:6", "--node-level", 1, "-q",
                    "-o", tmp_path / "o"]) == 0
    lines = cray.parse_rank_order((tmp_path / "o").read_text())
    assert len(lines) == 48 and {len(line) for line in lines} == {4}


def test_rankorder_help_imports_no_engine():
    from tests.test_startup import HEAVY, _imported_after

    loaded = _imported_after("from procmap.cli import main\n"
                             "try:\n    main(['rankorder', '--help'])\nexcept SystemExit:\n    pass")
    assert not [m for m in HEAVY if m in loaded] and "numpy" not in loaded
