"""Issue 23, item 6: first-hour fixes of the command line.

Install hints that work from a checkout, a note for every silent switch, the
1-based ``.comm`` warning, ``--debug`` anywhere, per-command examples, readable
numbers and level names, correct plurals and an accurate time line.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import warnings

import pytest

from procmap.cli import main
from procmap.errors import ProcmapError
from procmap.textfmt import level_names, num, plural, traffic_text

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "halo3d.comm")
SUBCOMMANDS = ("eval", "map", "rankfile", "machinefile", "slurm", "topology", "convert", "warmup")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_slurm(monkeypatch):
    for var in list(os.environ):
        if var.startswith("SLURM_") or var == "PROCMAP_PROLOG":
            monkeypatch.delenv(var)


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("procmap: note:")]


# ------------------------------------------------------------ install lines
def test_install_lines_work_from_a_checkout():
    """procmap is not on PyPI: no hint may say `pip install procmap[...]`."""
    pattern = re.compile(r"pip install\s+['\"]?procmap\[")
    checked = [ROOT / "README.md", ROOT / "examples" / "README.md", ROOT / "kernels" / "backend.py",
               ROOT / "procmap" / "cli.py", ROOT / "launcher_hooks" / "cli.py"]
    for path in checked:
        assert not pattern.search(path.read_text()), path
    assert "python -m pip install -e '.[mpi]'" in (ROOT / "examples" / "README.md").read_text()


def test_gpu_error_names_the_checkout_install(monkeypatch):
    from procmap.kernels import backend

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match=re.escape("python -m pip install -e '.[gpu]'")):
        backend.resolve_device("gpu", 10)


# ------------------------------------------------------------- silent switches
def test_engine_im_in_rank_placement_is_noted(capsys, tmp_path):
    out = tmp_path / "a.map"
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8:6", "--engine", "im", "-o", out)
    assert code == 0
    notes = _notes(err)
    assert len(notes) == 1 and "--engine im" in notes[0] and "hm + swaps" in notes[0]
    assert "partition mapping" in notes[0]
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8:6", "--engine", "im", "-o", out, "-q")
    assert code == 0 and err == ""
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8:6", "-o", out)  # auto: no switch
    assert code == 0 and _notes(err) == []


def test_partition_mapping_without_slots_is_noted(capsys, tmp_path):
    out = tmp_path / "a.map"
    code, o, err = run(capsys, "map", EXAMPLE, "-H", "4:8", "-o", out, "--json")
    assert code == 0 and json.loads(o)["mode"] == "partition"
    notes = _notes(err)
    assert len(notes) == 1
    assert "192 tasks on 32 PEs: partition mapping (L_max 7" in notes[0]
    assert "--slots 6" in notes[0]
    code, o, err = run(capsys, "map", EXAMPLE, "-H", "4:8", "--slots", "6", "-o", out, "--json")
    assert code == 0 and json.loads(o)["mode"] == "placement" and _notes(err) == []
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8", "-o", out, "--quiet")
    assert code == 0 and err == ""


def test_map_without_output_says_nothing_was_written(capsys, tmp_path):
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8:6")
    assert code == 0
    assert _notes(err) == ["procmap: note: mapping not written (give -o FILE)"]
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8:6", "--quiet")
    assert code == 0 and err == ""
    code, _, err = run(capsys, "map", EXAMPLE, "-H", "4:8:6", "-o", tmp_path / "x.map")
    assert code == 0 and _notes(err) == []


def test_launcher_engine_im_is_noted(capsys, tmp_path):
    argv = ["rankfile", EXAMPLE, "-H", "4:8:6", "--hosts", "n[1-6]", "-o", tmp_path / "rf",
            "--openmpi-version", "5", "--engine", "im"]
    code, out, err = run(capsys, *argv)
    assert code == 0
    notes = [line for line in err.splitlines() if "--engine im" in line]
    assert len(notes) == 1 and "rank placement uses hm + swaps" in notes[0]
    code, out, err = run(capsys, *argv, "--quiet")
    assert code == 0 and "--engine im" not in err


# ------------------------------------------------------------ 1-based .comm
def _write(tmp_path, text, name="g.comm"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_one_based_comm_warns_once(tmp_path):
    from procmap.formats import read_graph

    path = _write(tmp_path, "1 2 5\n2 3 5\n3 4 5\n4 1 5\n")
    with pytest.warns(UserWarning) as record:
        graph = read_graph(path)
    assert graph.n == 5  # still read as 0-based
    assert len(record) == 1
    message = str(record[0].message)
    assert "\n" not in message and "1-based" in message and "0-based" in message
    assert "rank 0 never communicates" in message


@pytest.mark.parametrize("text", [
    "0 1 5\n1 2 5\n",                   # 0-based
    "# tasks: 5\n1 2 5\n2 3 5\n3 4 5\n",  # the header says rank 0 is silent on purpose
    "1 3 5\n3 4 5\n",                   # rank 2 silent as well: not a shifted 0..n-1
    "2 3 5\n",                          # starts at 2
])
def test_zero_based_or_declared_comm_does_not_warn(tmp_path, text):
    from procmap.formats import read_graph

    path = _write(tmp_path, text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_graph(path)


def test_one_based_comm_warning_on_the_command_line(capsys, tmp_path):
    path = _write(tmp_path, "1 2 5\n2 3 5\n3 4 5\n")
    code, _, err = run(capsys, "eval", path, "-H", "2:2", "--baseline", "block")
    assert code == 0
    lines = [line for line in err.splitlines() if "1-based" in line]
    assert len(lines) == 1 and lines[0].startswith("procmap: warning: ")


# --------------------------------------------------------------- --debug
def test_debug_is_accepted_on_every_subcommand(capsys):
    for command in SUBCOMMANDS:
        assert "--debug" in _help(capsys, command), command  # an option of the subcommand


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_before_or_after_the_command_shows_the_traceback(capsys, where):
    argv = ["eval", "missing.comm", "--baseline", "block", "-H", "4:8:6"]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    with pytest.raises(ProcmapError, match="missing.comm"):
        main(argv)
    code, out, err = run(capsys, "eval", "missing.comm", "--baseline", "block", "-H", "4:8:6")
    assert code == 2 and err.startswith("procmap: error:") and len(err.splitlines()) == 1


def test_debug_after_a_launcher_command(tmp_path):
    with pytest.raises(ProcmapError):
        main(["rankfile", "missing.comm", "-H", "4:8:6", "--hosts", "n[1-6]",
              "-o", str(tmp_path / "rf"), "--debug"])


# ------------------------------------------------------- per-command examples
def _help(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_each_command_has_its_own_examples(capsys):
    epilogs = {}
    for command in SUBCOMMANDS:
        text = _help(capsys, command)
        assert "examples:" in text, command
        examples = text[text.index("examples:"):]
        lines = [line for line in examples.splitlines()[1:] if line.startswith("  ")]
        assert lines and all(f"procmap {command}" in line for line in lines[:1]), command
        epilogs[command] = examples
    assert len(set(epilogs.values())) == len(SUBCOMMANDS)  # no shared block
    assert "conventions:" in epilogs["map"] and "conventions:" in epilogs["eval"]
    assert "node level:" in epilogs["machinefile"]


def test_convert_arguments_have_help_and_to_offers_writable_formats(capsys, tmp_path):
    from procmap.options import WRITABLE_FORMATS

    text = _help(capsys, "convert")
    for needle in ("graph to read", "file to write", "format of input", "format of output"):
        assert needle in text
    with pytest.raises(SystemExit) as exc:
        main(["convert", EXAMPLE, str(tmp_path / "x"), "--to", "prof"])
    assert exc.value.code == 2 and not (tmp_path / "x").exists()
    # argparse's refusal lists the choices --to offers: the writable formats, in order
    err = capsys.readouterr().err
    offered = err[err.index("choose from ") + len("choose from "):].split(")")[0]
    assert tuple(word.strip(" '") for word in offered.split(",")) == WRITABLE_FORMATS


# --------------------------------------------- numbers, level names, plurals
def test_num_and_plural():
    import numpy as np

    assert num(427408) == "427,408" and num(np.int64(1234567)) == "1,234,567"
    assert num(1234.5) == "1,234.50" and num(2.0) == "2" and num(1e20) == "1e+20"
    assert num(0.001) == "0.001" and num(0) == "0"
    assert plural(1, "edge") == "1 edge" and plural(0, "edge") == "0 edges"
    assert plural(12000, "host") == "12,000 hosts" and plural(np.int64(1), "task") == "1 task"


def test_level_names_follow_the_node_level():
    assert level_names(3, 2) == ["same core", "same processor", "same node", "between nodes"]
    assert level_names(2, 1) == ["same core", "same node", "between nodes"]
    assert level_names(4, 2)[-1] == "between racks"
    assert level_names(5, 2)[-1] == "level 5"
    assert level_names(4, 3) == ["same core", "level 1", "same processor", "same node",
                                 "between nodes"]
    assert level_names(2, None) == ["same core", "level 1", "level 2"]

    class Machine:
        node_level = 2
    assert traffic_text([0, 1200, 300, 80], Machine()) == (
        "same core 0 | same processor 1,200 | same node 300 | between nodes 80")


def test_reports_use_separators_level_names_and_plurals(capsys, tmp_path):
    path = _write(tmp_path, "# tasks: 2\n0 1 5000\n")
    code, out, _ = run(capsys, "eval", path, "-H", "2:2", "--baseline", "block")
    assert code == 0
    assert ": 2 tasks, 1 edge\n" in out
    assert "J         10,000 " in out
    assert "traffic   same core 0 | same node 10,000 | between nodes 0" in out
    assert "1 edges" not in out and "task(s)" not in out and "PE(s)" not in out
    code, out, _ = run(capsys, "map", EXAMPLE, "-H", "4:8:6", "-q", "-o", tmp_path / "m")
    assert code == 0 and ": 192 tasks, 472 edges" in out and "level 3" not in out
    assert re.search(r"^J +\d{1,3}(,\d{3})+ ", out, re.M)


def test_launcher_summary_names_levels_and_pluralises(capsys, tmp_path):
    path = _write(tmp_path, "0 1 5000\n")
    code, out, _ = run(capsys, "rankfile", path, "-H", "2:2", "--hosts", "n1", "--node-level", "2",
                       "-o", tmp_path / "rf", "--openmpi-version", "5", "-q")
    assert code == 0
    assert ": 2 tasks, 1 edge\n" in out and "on 1 host " in out
    assert "traffic   same core 0 | same processor 10,000 | same node 0" in out
    assert "J         10,000 " in out


# ------------------------------------------------------------- time line
def test_cpu_time_line_has_no_upload_and_total_includes_reading(capsys, tmp_path):
    code, out, _ = run(capsys, "map", EXAMPLE, "-H", "4:8", "--engine", "im", "--device", "cpu",
                       "-q", "--json", "-o", tmp_path / "m")
    assert code == 0
    seconds = json.loads(out)["seconds"]
    assert "upload" not in seconds and {"read", "total"} <= set(seconds)
    code, out, _ = run(capsys, "map", EXAMPLE, "-H", "4:8", "--engine", "im", "--device", "cpu",
                       "-q", "-o", tmp_path / "m")
    line = next(line for line in out.splitlines() if line.startswith("time"))
    assert "upload" not in line and "(start-up to written file" in line
    phases = {k: float(v) for k, v in re.findall(r"(?:^time\s+|, )([a-z][a-z ]*?) ([0-9.]+) s",
                                                     line)}
    assert {"imports", "read", "evaluate block", "write"} <= set(phases)
    total = float(re.search(r"total ([0-9.]+) s", line).group(1))
    # the total covers the phases timed around the mapping too (each rounded to 1 ms)
    outside = sum(phases[k] for k in ("imports", "read", "evaluate block", "write"))
    assert total >= outside - 0.005
    assert line.count("total") == 1
