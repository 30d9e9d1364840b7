"""End-to-end tests of the procmap command line (in-process through cli.main)."""
import json
import os

import numpy as np
import pytest

from procmap.cli import main
from procmap.formats import write_graph, write_mapping
from procmap.generators import grid_graph

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "halo3d.comm")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def grid_files(tmp_path_factory):
    """The 200x200 grid of the published case in three formats, plus its mapping."""
    d = tmp_path_factory.mktemp("grid")
    g = grid_graph((200, 200))
    paths = {}
    for ext in ("graph", "comm", "mtx"):
        paths[ext] = str(d / f"grid.{ext}")
        write_graph(g, paths[ext])
    paths["map"] = str(d / "grid.map")
    write_mapping((192 * np.arange(g.n)) // g.n, paths["map"])
    return paths


@pytest.mark.parametrize("fmt", ["graph", "comm", "mtx"])
def test_eval_reproduces_published_J(capsys, grid_files, fmt):
    code, out, _ = run(capsys, "eval", grid_files[fmt], "--mapping", grid_files["map"],
                       "--hierarchy", "4:8:6", "--distance", "1:10:100", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["J"] == 427408
    assert result["valid"] and result["mode"] == "partition"


def test_eval_block_baseline_equals_published_mapping(capsys, grid_files):
    code, out, _ = run(capsys, "eval", grid_files["graph"], "--baseline", "block",
                       "--hierarchy", "4:8:6", "--distance", "1:10:100")
    assert code == 0
    assert "J         427,408 " in out and "40,000 tasks, 79,600 edges" in out
    traffic = next(line for line in out.splitlines() if line.startswith("traffic"))
    assert traffic.split("|")[0].startswith("traffic   same core ")
    assert [part.strip().rsplit(" ", 1)[0] for part in traffic[10:].split("|")] == [
        "same core", "same processor", "same node", "between nodes"]


def test_eval_example_and_tleaf_hierarchy(capsys):
    code, out, _ = run(capsys, "eval", EXAMPLE, "--baseline", "block", "--hierarchy", "4:8:6",
                       "--distance", "1:10:100", "--json")
    assert code == 0
    j_block = json.loads(out)["J"]
    code, out, _ = run(capsys, "eval", EXAMPLE, "--baseline", "block",
                       "--hierarchy", "tleaf 3 6 100 8 10 4 1", "--json")
    assert code == 0 and json.loads(out)["J"] == j_block
    assert json.loads(out)["mode"] == "placement"


def test_eval_distance_matrix(capsys, tmp_path):
    from procmap.topology import Hierarchy
    dm = tmp_path / "d.txt"
    np.savetxt(dm, Hierarchy.parse("4:8:6", "1:10:100").distance_matrix(), fmt="%g")
    code, out, _ = run(capsys, "eval", EXAMPLE, "--baseline", "roundrobin", "--hierarchy", "4:8:6",
                       "--json")
    j_h = json.loads(out)["J"]
    code, out, _ = run(capsys, "eval", EXAMPLE, "--baseline", "block", "--distance-matrix", str(dm),
                       "--json")
    assert code == 0
    code2, out2, _ = run(capsys, "eval", EXAMPLE, "--baseline", "block", "--hierarchy", "4:8:6",
                         "--json")
    assert json.loads(out)["J"] == json.loads(out2)["J"]
    assert j_h != json.loads(out2)["J"]


@pytest.mark.parametrize("argv,needle", [
    (["eval", "missing.comm", "--baseline", "block", "--hierarchy", "4:8:6"], "missing.comm"),
    (["eval", EXAMPLE, "--baseline", "block", "--hierarchy", "4:0:6"], "4:0:6"),
    (["eval", EXAMPLE, "--baseline", "block", "--hierarchy", "4:8:6", "--distance", "1:10"], "distances"),
    (["eval", EXAMPLE, "--baseline", "block"], "--hierarchy"),
    (["eval", EXAMPLE, "--baseline", "block", "--hierarchy", "tleaf 3 6 100"], "tleaf"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("procmap: error:")
    assert needle in lines[0]


def test_bad_file_names_line(capsys, tmp_path):
    bad = tmp_path / "bad.comm"
    bad.write_text("0 1 5\n1 2 -3\n")
    code, _, err = run(capsys, "eval", str(bad), "--baseline", "block", "--hierarchy", "4:8:6")
    assert code == 2 and "bad.comm" in err and len(err.strip().splitlines()) == 1


def test_mapping_out_of_range(capsys, tmp_path):
    m = tmp_path / "m.txt"
    m.write_text("\n".join(["0"] * 191 + ["500"]) + "\n")
    code, _, err = run(capsys, "eval", EXAMPLE, "--mapping", str(m), "--hierarchy", "4:8:6")
    assert code == 2 and "500" in err


def test_non_increasing_distances_warn(capsys):
    code, _, err = run(capsys, "eval", EXAMPLE, "--baseline", "block", "--hierarchy", "4:8:6",
                       "--distance", "100:10:1")
    assert code == 0 and "warning" in err


def test_convert_round_trip_and_atomic(capsys, tmp_path):
    out = tmp_path / "halo.graph"
    code, _, _ = run(capsys, "convert", EXAMPLE, str(out))
    assert code == 0 and out.exists()
    code, o1, _ = run(capsys, "eval", str(out), "--baseline", "random", "--hierarchy", "4:8:6", "--json")
    code, o2, _ = run(capsys, "eval", EXAMPLE, "--baseline", "random", "--hierarchy", "4:8:6", "--json")
    assert json.loads(o1)["J"] == json.loads(o2)["J"]
    # a failing conversion writes nothing
    bad = tmp_path / "bad.comm"
    bad.write_text("0 1 x\n")
    target = tmp_path / "never.graph"
    code, _, err = run(capsys, "convert", str(bad), str(target))
    assert code == 2 and not target.exists()
    assert set(os.listdir(tmp_path)) == {"halo.graph", "bad.comm"}  # no temp file left


def test_topology_command(capsys, monkeypatch):
    for var in list(os.environ):
        if var.startswith("SLURM_"):
            monkeypatch.delenv(var)
    code, out, err = run(capsys, "topology")
    assert code == 0
    levels = out.strip().split(":")
    assert all(x.isdigit() and int(x) > 0 for x in levels)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-03]")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "32(x3)")
    code, out, _ = run(capsys, "topology")
    assert code == 0 and out.strip() == "32:3"
    code, out, _ = run(capsys, "topology", "--tleaf")
    assert out.startswith("tleaf 2 3 ")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-")
    code, _, err = run(capsys, "topology")
    assert code == 2 and "node[01-" in err


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert "procmap" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "examples:" in capsys.readouterr().out


# ---------------------------------------------------------------------- map
def test_map_writes_a_mapping_that_eval_confirms(capsys, tmp_path):
    out = tmp_path / "halo.map"
    code, o, _ = run(capsys, "map", EXAMPLE, "--hierarchy", "4:8:6", "--distance", "1:10:100",
                     "-o", str(out), "--json", "--quiet")
    assert code == 0
    result = json.loads(o)
    assert result["valid"] and result["mode"] == "placement"
    assert result["J"] <= result["J_block"]
    code, o, _ = run(capsys, "eval", EXAMPLE, "--mapping", str(out), "--hierarchy", "4:8:6",
                     "--distance", "1:10:100", "--json")
    assert code == 0 and json.loads(o)["J"] == result["J"]


def test_map_text_report_and_partition_mode(capsys, grid_files, tmp_path):
    code, o, _ = run(capsys, "map", grid_files["graph"], "--hierarchy", "2:2:3", "--engine", "im",
                     "--seed", "3", "--quiet", "-o", str(tmp_path / "g.map"))
    assert code == 0
    for needle in ("J ", "traffic", "L_max", "vs block", "time"):
        assert needle in o


def test_map_threads_option_gives_the_same_mapping(capsys, grid_files, tmp_path):
    """--threads 1 runs everything serially; the default uses all threads (concurrent
    splits); the mappings are the same."""
    import numba

    maps = []
    for extra in ([], ["--threads", "1"]):
        out = tmp_path / f"g{len(maps)}.map"
        code, _, _ = run(capsys, "map", grid_files["graph"], "--hierarchy", "2:2:3", "--engine",
                         "hm", "--seed", "5", "--quiet", "-o", str(out), *extra)
        assert code == 0
        maps.append(out.read_text())
    assert numba.get_num_threads() == 1  # the option took effect in this process
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert maps[0] == maps[1]


@pytest.mark.parametrize("content,argv,needle", [
    ("# tasks: 0\n", [], "empty"),
    ("0 1 5\n1 2 5\n2 3 5\n", ["--slots", "1", "--hierarchy", "3"], "slots"),
    ("0 1 5\n", ["--hierarchy", "4:8", "--distance", "1:10:100"], "distances"),
    ("0 1 5\n", ["--threads", "0"], "--threads"),
    ("0 1 5\n", ["--threads", "100000"], "--threads"),
])
def test_map_bad_requests_write_nothing(capsys, tmp_path, content, argv, needle):
    graph = tmp_path / "g.comm"
    graph.write_text(content)
    out = tmp_path / "out.map"
    args = ["map", str(graph), "-o", str(out), "--quiet"] + (argv or [])
    if "--hierarchy" not in args:
        args += ["--hierarchy", "2:2"]
    code, o, err = run(capsys, *args)
    assert code == 2 and o == "" and not out.exists()
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_map_task_heavier_than_lmax(capsys, tmp_path):
    graph = tmp_path / "heavy.graph"
    # METIS with vertex weights: task 1 weighs 50 of 53
    graph.write_text("3 2 010\n1 2\n50 1 3\n1 2\n")
    code, _, err = run(capsys, "map", str(graph), "--hierarchy", "2", "--quiet")
    assert code == 2 and "L_max" in err
