"""``procmap report``: the figures' data, their rendering, the HTML page and the CLI."""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from procmap import baselines
from procmap.cli import main
from procmap.generators import grid_graph
from procmap.objective import evaluate
from procmap.report import data as report_data
from procmap.report.data import build_report, level_names, node_traffic, traffic_matrix
from procmap.topology import Hierarchy

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "halo3d.comm")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def grid():
    return grid_graph((12, 10))  # 120 tasks


def _random_pes(n, k, seed=0):
    return np.random.default_rng(seed).integers(0, k, n)


# ------------------------------------------------------------- pixel-free
@pytest.mark.parametrize("max_cells, unit, group", [(2048, "rank", 1), (64, "PE", 1),
                                                    (5, "PE group", 4)])
def test_aggregation_conserves_the_volume(grid, max_cells, unit, group):
    h = Hierarchy.parse("2:2:4")  # 16 PEs, 4 nodes
    pes = _random_pes(grid.n, h.k)
    m = traffic_matrix(grid, h, pes, max_cells=max_cells)
    assert (m.unit, m.group) == (unit, group)
    assert m.cells <= max_cells
    assert m.values.sum() == grid.total_edge_weight
    np.testing.assert_allclose(m.values, m.values.T)  # a symmetric graph stays symmetric


def test_per_rank_matrix_is_the_graph_ordered_by_pe(grid):
    h = Hierarchy.parse("2:2:4")
    pes = _random_pes(grid.n, h.k, seed=3)
    m = traffic_matrix(grid, h, pes)
    order = np.argsort(pes, kind="stable")
    dense = grid.to_scipy().toarray()
    np.testing.assert_array_equal(m.values, dense[np.ix_(order, order)])
    # a node boundary wherever the sorted ranks move to another node (4 PEs per node)
    node = pes[order] // 4
    np.testing.assert_array_equal(m.lines[2], np.flatnonzero(np.diff(node)) + 1)


def test_group_lines_are_in_cell_coordinates(grid):
    h = Hierarchy.parse("2:2:4")
    m = traffic_matrix(grid, h, _random_pes(grid.n, h.k), max_cells=8)  # 2 PEs per cell
    np.testing.assert_array_equal(m.lines[2], [2.0, 4.0, 6.0])  # nodes start at PE 4, 8, 12
    assert 0 not in m.lines  # every cell border is a PE border


def test_large_aggregation_uses_no_dense_n_by_n():
    g = grid_graph((300, 300))  # 90,000 tasks: a dense n x n would be 65 GB
    h = Hierarchy.parse("4:8:128")  # 4096 PEs -> groups of 2
    m = traffic_matrix(g, h, baselines.block(g.n, h))
    assert m.values.shape == (2048, 2048) and m.group == 2
    assert m.values.sum() == g.total_edge_weight


@pytest.mark.parametrize("levels, names", [
    ("4:8:6", ["same core", "same processor", "same node", "between nodes"]),
    ("2:2", ["same core", "same node", "between nodes"]),
    ("2:2:2:2:2", ["same core", "same processor", "same node", "between nodes",
                   "between racks", "level 5"]),
])
def test_level_names(levels, names):
    assert level_names(Hierarchy.parse(levels)) == names


def test_deeper_node_levels_are_numbered():
    h = Hierarchy(levels=(2, 2, 2, 2), distances=None, node_level=3)
    assert level_names(h) == ["same core", "level 1", "same processor", "same node",
                              "between nodes"]


def test_level_bars_and_node_bars_add_up(grid):
    h = Hierarchy.parse("2:2:4", "1:10:100")
    data = build_report(grid, h, _random_pes(grid.n, h.k, seed=5),
                        baselines=("block", "roundrobin", "random"))
    total = grid.total_edge_weight
    for name, volumes in data.levels.volumes.items():
        assert sum(volumes) == total  # every directed edge lands on one level
        ev = data.evaluations[name]
        assert sum(d * v for d, v in zip((0, 1, 10, 100), volumes)) == ev.J
        between = sum(volumes[data.levels.first_off_node:])
        if name in data.nodes.off_node:
            assert data.nodes.off_node[name].sum() == between
        assert data.levels.off_node_share(name) == pytest.approx(between / total)
    # partition mapping (120 tasks on 16 PEs): capacity is L_max per PE with slots
    assert data.nodes.load_unit == "task weight"
    assert (data.nodes.capacity == 4 * data.evaluations["block"].limit).all()
    assert set(data.summary["improvement"]) == {"block", "roundrobin", "random"}


def test_node_bars_group_many_nodes(monkeypatch):
    monkeypatch.setattr(report_data, "MAX_BARS", 4)
    g = grid_graph((6, 6))
    h = Hierarchy.parse("1:1:36")  # 36 one-PE nodes -> 4 bars of 9 nodes
    pes = baselines.roundrobin(g.n, h)
    ev = evaluate(g, h, pes)
    nodes = node_traffic(g, h, {"rr": pes}, {"rr": ev})
    assert nodes.group == 9 and nodes.off_node["rr"].size == 4
    assert nodes.off_node["rr"].sum() == ev.level_traffic[3]
    assert nodes.load_unit == "tasks" and nodes.capacity.tolist() == [9, 9, 9, 9]
    assert nodes.load["rr"].sum() == g.n


def test_json_form_round_trips(grid):
    h = Hierarchy.parse("2:2:4")
    data = build_report(grid, h, _random_pes(grid.n, h.k))
    out = json.loads(json.dumps(data.as_dict()))
    m = out["matrices"]["procmap"]
    assert sum(m["values"]) == grid.total_edge_weight
    assert len(m["rows"]) == len(m["cols"]) == len(m["values"])


# -------------------------------------------------------------- rendering
def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which a valid PNG has first."""
    assert png[:8] == PNG_MAGIC
    assert png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def test_every_figure_renders_to_a_png(grid):
    pytest.importorskip("matplotlib")
    from procmap.report import figures

    h = Hierarchy.parse("2:2:4")
    data = build_report(grid, h, _random_pes(grid.n, h.k))
    images = figures.render_all(data, h)
    assert set(images) == set(figures.FIGURES)
    for png in images.values():
        width, height = _png_size(png)
        assert 200 < width < 3000 and 200 < height < 3000


def test_html_references_nothing_outside_itself(grid):
    pytest.importorskip("matplotlib")
    from procmap.report import figures, html

    h = Hierarchy.parse("2:2:4")
    data = build_report(grid, h, _random_pes(grid.n, h.k), info={"graph": "<g&>.comm"})
    text = html.page(data, figures.render_all(data, h), figures.FIGURES)
    sources = re.findall(r"""src\s*=\s*["']([^"']*)""", text)
    assert len(sources) == len(figures.FIGURES)
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    rest = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "", text)  # base64 holds '//'
    for outside in ("http:", "https:", "//", "href", "<link", "url(", "@import", "<script"):
        assert outside not in rest, outside
    assert "&lt;g&amp;&gt;.comm" in text  # names are escaped


# -------------------------------------------------------------------- CLI
def test_cli_engine_writes_html_pngs_and_json(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    code, stdout, err = run(capsys, "report", EXAMPLE, "--engine", "auto", "-H", "4:8:6",
                            "-d", "1:10:100", "-o", str(out), "--png", str(tmp_path / "figs"),
                            "--json")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["summary"]["engine"].startswith("hm")
    assert data["summary"]["improvement"]["block"] > 0
    assert data["levels"]["names"][-1] == "between nodes"
    assert set(data["matrices"]) == {"block", "procmap"}
    assert out.read_text().startswith("<!DOCTYPE html>")
    for name in ("traffic_matrix", "level_traffic", "node_traffic"):
        _png_size((tmp_path / "figs" / f"{name}.png").read_bytes())
    assert "wrote" in err and "lower than block" in err


def test_cli_mapping_file(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    mapping = tmp_path / "m.map"
    mapping.write_text("\n".join(str(p) for p in range(191, -1, -1)) + "\n")
    out = tmp_path / "r.html"
    code, stdout, err = run(capsys, "report", EXAMPLE, "--mapping", str(mapping), "-H", "4:8:6",
                            "--baseline", "block", "-o", str(out))
    assert code == 0, err
    assert stdout == ""
    text = out.read_text()
    assert "mapping" in text and "roundrobin" not in text


def test_missing_matplotlib_is_one_line_with_the_install_hint(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    out = tmp_path / "r.html"
    code, stdout, err = run(capsys, "report", EXAMPLE, "--engine", "auto", "-H", "4:8:6",
                            "-o", str(out))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("procmap: error: ")
    assert "pip install -e '.[report]'" in err
    assert not out.exists() and stdout == ""


@pytest.mark.parametrize("argv, needle", [
    (["-o", "{tmp}/missing/r.html"], "does not exist"),
    (["-o", "{graph}"], "input"),
    (["-o", "{tmp}/r.html", "--png", "{tmp}/a_file"], "--png needs a directory"),
    (["-o", "{tmp}/r.html", "--baseline", "block,nope"], "--baseline"),
    (["-o", "-", "--json"], "both write to standard output"),
])
def test_bad_outputs_fail_before_any_work(capsys, tmp_path, argv, needle):
    graph = tmp_path / "never_read.comm"  # missing: reading it would be another error
    (tmp_path / "a_file").write_text("")
    argv = [a.format(tmp=tmp_path, graph=graph) for a in argv]
    code, stdout, err = run(capsys, "report", str(graph), "--engine", "auto", "-H", "4:8:6",
                            *argv)
    assert code == 2 and err.count("\n") == 1 and needle in err, err
    assert "never_read.comm: " not in err.replace(f"{graph}: it is", "")
    assert not (tmp_path / "r.html").exists()


def test_distance_matrix_is_refused(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    dm = tmp_path / "d.txt"
    dm.write_text("0 1\n1 0\n")
    code, _, err = run(capsys, "report", EXAMPLE, "--engine", "auto", "--distance-matrix",
                       str(dm), "-o", str(tmp_path / "r.html"))
    assert code == 2 and "--hierarchy" in err and err.count("\n") == 1


def test_report_help_imports_neither_numpy_nor_matplotlib():
    probe = ("import sys\nfrom procmap.cli import main\ntry:\n    main(['report', '--help'])\n"
             "except SystemExit:\n    pass\nprint(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env={**os.environ})
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "numpy" not in loaded and "matplotlib" not in loaded
