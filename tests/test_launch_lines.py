"""Launch lines that run verbatim where they were printed (issue 23 item 3).

Which MPI answers to ``mpiexec`` / ``mpirun`` is read from ``NAME --version``
(:mod:`procmap.launcher_hooks.mpi_detect`). The version outputs below are the exact
texts the launchers print; detection runs fake executables that print them, with
PATH set to the test's directory alone so that the MPIs installed where the tests
run change nothing.
"""
from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys

import numpy as np
import pytest

import procmap.launcher_hooks.pipeline as launcher_pipeline
from procmap import baselines
from procmap.formats import write_graph
from procmap.generators import grid_graph
from procmap.launcher_hooks import mpi_detect, mpich, openmpi
from procmap.mapping import Mapping
from procmap.objective import evaluate

# ------------------------------------------------------------ version texts
HYDRA = ("HYDRA build details:\n"
         "    Version:                                 4.0.2\n"
         "    Release Date:                            Thu Mar 31 11:36:15 CDT 2022\n"
         "    CC:                              gcc\n"
         "    Process Manager:                         pmi\n")
INTEL = ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)\n"
         "Copyright 2003-2023, Intel Corporation.")
OMPI5 = "mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/"
OMPI4 = {name: f"{name} (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/"
         for name in ("mpirun", "mpirun.openmpi", "orterun", "mpiexec")}


def fake(tmp_path, name: str, output: str) -> str:
    """An executable ``tmp_path/name`` printing ``output`` (builtin printf only)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\nprintf '%s\\n' " + shlex.quote(output) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """An empty directory that is the whole PATH: ``fake(bin_dir, ...)`` adds launchers."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", str(d))
    return d


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A 12-rank graph and the block placement in place of the mapper."""
    def block(graph, topology, *, engine="auto", eps=0.03, seed=0, device="auto", progress=None):
        pes = np.asarray(baselines.block(graph.n, topology), dtype=np.int32)
        return Mapping(pes=pes, engine="fixed", evaluation=evaluate(graph, topology, pes))
    monkeypatch.setattr(launcher_pipeline, "map_tasks", block)
    path = tmp_path / "grid.comm"
    write_graph(grid_graph((3, 4), weight=5), str(path))
    return str(path)


def run_json(capsys, argv) -> dict:
    """Run ``procmap ... --json`` in-process; its JSON output."""
    from procmap.cli import main

    argv = [str(a) for a in argv]
    assert main(argv if "--json" in argv else [*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ parsers
@pytest.mark.parametrize("text, expected", [
    (HYDRA, ("mpich", "4.0.2")),
    (INTEL, ("intel", "2021.10")),
    ("Intel(R) MPI Library", ("intel", None)),
    (OMPI5, ("openmpi", "5.0.11")),
    *[(text, ("openmpi", "4.1.4")) for text in OMPI4.values()],
    ("prterun (Open MPI) 5.0.0rc12", ("openmpi", "5.0.0")),
    ("mpirun (Open MPI) unreleased", ("openmpi", None)),
    ("usage: mpiexec [options]", None),
    ("", None),
])
def test_parse_mpi_version(text, expected):
    assert mpi_detect.parse_mpi_version(text) == expected


@pytest.mark.parametrize("text", list(OMPI4.values()))
def test_openmpi_parser_reads_openrte_whatever_the_launcher_name(text):
    assert openmpi.parse_version_output(text) == (4, "4.1.4")


def test_openmpi_parser_rejects_other_mpis():
    assert openmpi.parse_version_output(OMPI5) == (5, "5.0.11")
    assert openmpi.parse_version_output(HYDRA) is None
    assert openmpi.parse_version_output(INTEL) is None


# ---------------------------------------------------------------- detection
@pytest.mark.parametrize("name, text, kind, version", [
    ("mpiexec", HYDRA, "mpich", "4.0.2"),
    ("mpiexec", INTEL, "intel", "2021.10"),
    ("mpiexec", OMPI4["mpiexec"], "openmpi", "4.1.4"),
    ("mpirun.openmpi", OMPI4["mpirun.openmpi"], "openmpi", "4.1.4"),
    ("orterun", OMPI4["orterun"], "openmpi", "4.1.4"),
    ("mpirun", OMPI5, "openmpi", "5.0.11"),
])
def test_detect_mpi_with_fake_launchers(bin_dir, name, text, kind, version):
    fake(bin_dir, name, text)
    info = mpi_detect.detect_mpi(name)
    assert (info.kind, info.version, info.path) == (kind, version, str(bin_dir / name))


def test_detect_unknown_missing_and_hanging(bin_dir):
    missing = mpi_detect.detect_mpi("mpiexec")
    assert missing.kind is None and missing.reason == "mpiexec not found"
    fake(bin_dir, "odd", "usage: odd [options]")
    odd = mpi_detect.detect_mpi("odd")
    assert odd.kind is None and "not a known MPI launcher" in odd.reason and "usage" in odd.reason
    slow = bin_dir / "slow"
    slow.write_text("#!/bin/sh\nwhile :; do :; done\n")       # PATH has no sleep
    slow.chmod(0o755)
    hung = mpi_detect.detect_mpi(str(slow), timeout=0.3)
    assert hung.kind is None and "did not answer within 0.3 s" in hung.reason


def test_detect_openmpi_under_another_name(bin_dir):
    fake(bin_dir, "mpirun.openmpi", OMPI4["mpirun.openmpi"])
    version = openmpi.detect_openmpi("mpirun.openmpi")
    assert (version.major, version.version) == (4, "4.1.4")
    fake(bin_dir, "mpirun", HYDRA)
    other = openmpi.detect_openmpi("mpirun")
    assert other.major is None and "MPICH 4.0.2, not Open MPI" in other.source


def test_pick_launcher(bin_dir):
    fake(bin_dir, "mpiexec", OMPI4["mpiexec"])
    none = mpi_detect.pick_launcher("mpiexec", mpi_detect.MPICH, option="--mpiexec")
    assert none.name == "mpiexec" and none.note.startswith("no MPICH mpiexec was found on this "
                                                           "machine (mpiexec is Open MPI 4.1.4")
    assert "does not run here as printed" in none.note and "--mpiexec PATH" in none.note
    fake(bin_dir, "mpiexec.mpich", HYDRA)
    found = mpi_detect.pick_launcher("mpiexec", mpi_detect.MPICH, option="--mpiexec")
    assert found.name == "mpiexec.mpich" and found.info.version == "4.0.2"
    assert "printed mpiexec.mpich (MPICH 4.0.2) instead" in found.note
    fake(bin_dir, "mpiexec.hydra", INTEL)       # Intel MPI's mpiexec.hydra is no MPICH
    assert mpi_detect.pick_launcher("mpiexec", mpi_detect.MPICH,
                                    option="--mpiexec").name == "mpiexec.mpich"
    assert mpi_detect.pick_launcher("mpiexec", mpi_detect.INTEL,
                                    option="--mpiexec").name == "mpiexec.hydra"
    own = mpi_detect.pick_launcher("mpiexec.mpich", mpi_detect.MPICH, option="--mpiexec")
    assert own.name == "mpiexec.mpich" and own.note is None


# ------------------------------------------------------------------ rankfile
RANKFILE = ["rankfile", "-H", "2:2:3", "--hosts", "n[1-3]"]


def test_rankfile_prints_mpirun_as_given(bin_dir, job, tmp_path, capsys):
    fake(bin_dir, "mpirun.openmpi", OMPI4["mpirun.openmpi"])
    out = tmp_path / "rf"
    result = run_json(capsys, [*RANKFILE[:1], job, *RANKFILE[1:], "-o", out,
                               "--mpirun", "mpirun.openmpi"])
    assert result["commands"] == [f"mpirun.openmpi -n 12 --rankfile {out} ./app"]
    assert result["openmpi_version"] == "4.1.4" and result["mpirun"] == "mpirun.openmpi"
    assert not any("does not run here" in note for note in result["notes"])


def test_rankfile_forced_version_prints_the_given_path(bin_dir, job, tmp_path, capsys):
    out = tmp_path / "rf"
    result = run_json(capsys, [*RANKFILE[:1], job, *RANKFILE[1:], "-o", out,
                               "--mpirun", "/opt/ompi 5/bin/mpirun", "--openmpi-version", "5"])
    assert result["commands"] == [f"'/opt/ompi 5/bin/mpirun' -n 12 --map-by "
                                  f"rankfile:file={out} ./app"]


def test_rankfile_skips_an_mpirun_that_is_mpich(bin_dir, job, tmp_path, capsys):
    fake(bin_dir, "mpirun", HYDRA)
    out = tmp_path / "rf"
    argv = [*RANKFILE[:1], job, *RANKFILE[1:], "-o", out, "--json"]
    unknown = run_json(capsys, argv)
    # No Open MPI here: both forms, and a note that they do not run here as printed.
    assert [c.split()[0] for c in unknown["commands"]] == ["mpirun", "mpirun"]
    assert unknown["notes"][0].startswith("no Open MPI mpirun was found on this machine "
                                          "(mpirun is MPICH 4.0.2")
    fake(bin_dir, "mpirun.openmpi", OMPI5)
    found = run_json(capsys, argv)
    assert found["commands"] == [f"mpirun.openmpi -n 12 --map-by rankfile:file={out} ./app"]
    assert "printed mpirun.openmpi (Open MPI 5.0.11) instead" in found["notes"][0]


# --------------------------------------------------------------- machinefile
MACHINEFILE = ["machinefile", "-H", "2:2:3", "--hosts", "n[1-3]"]


def test_machinefile_prints_mpiexec_hydra_when_mpiexec_is_openmpi(bin_dir, job, tmp_path,
                                                                  capsys):
    fake(bin_dir, "mpiexec", OMPI4["mpiexec"])
    fake(bin_dir, "mpiexec.hydra", HYDRA)
    out = tmp_path / "mf"
    result = run_json(capsys, [*MACHINEFILE[:1], job, *MACHINEFILE[1:], "-o", out, "--json"])
    assert result["commands"] == [f"mpiexec.hydra -f {out} -n 12 -bind-to user:0,1,2,3 ./app"]
    assert result["mpiexec"] == "mpiexec.hydra"
    assert result["notes"][0] == ("mpiexec is Open MPI 4.1.4: printed mpiexec.hydra "
                                  "(MPICH 4.0.2) instead")


def test_machinefile_without_hydra_says_the_line_fails_here(bin_dir, job, tmp_path, capsys):
    from procmap.cli import main

    fake(bin_dir, "mpiexec", OMPI5.replace("mpirun", "mpiexec"))
    out = tmp_path / "mf"
    assert main([*MACHINEFILE[:1], job, *MACHINEFILE[1:], "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"  mpiexec -f {out} -n 12 -bind-to user:0,1,2,3 ./app      # MPICH" in text
    assert ("note: no MPICH mpiexec was found on this machine (mpiexec is Open MPI 5.0.11; "
            "no mpiexec.hydra or mpiexec.mpich on PATH is MPICH's): this line does not run "
            "here as printed") in text


def test_machinefile_mpiexec_option(bin_dir, job, tmp_path, capsys):
    hydra = fake(tmp_path, "my-mpiexec", HYDRA)           # not on PATH: a path
    out = tmp_path / "mf"
    result = run_json(capsys, [*MACHINEFILE[:1], job, *MACHINEFILE[1:], "-o", out, "--json",
                               "--mpiexec", hydra])
    assert result["commands"] == [f"{hydra} -f {out} -n 12 -bind-to user:0,1,2,3 ./app"]
    assert not any("mpiexec" in note and "instead" in note for note in result["notes"])


def test_machinefile_intel_prints_intel_mpiexec_hydra(bin_dir, job, tmp_path, capsys):
    fake(bin_dir, "mpiexec", OMPI5)
    fake(bin_dir, "mpiexec.hydra", INTEL)
    out = tmp_path / "mf"
    result = run_json(capsys, [*MACHINEFILE[:1], job, *MACHINEFILE[1:], "-o", out, "--json",
                               "--flavor", "intel"])
    assert result["commands"] == [f"I_MPI_PIN_PROCESSOR_LIST=0,1,2,3 mpiexec.hydra -machinefile "
                                  f"{out} -n 12 ./app"]


def test_intel_mpmd_form_is_marked_unverified():
    plan = mpich.plan_hydra("intel", ["a", "b"], np.array([0, 0, 1, 1]), np.array([1, 0, 0, 1]),
                            "mf", mpiexec="mpiexec.hydra")
    assert plan.commands[0][1].startswith("mpiexec.hydra -n 2 -host a -env ")
    assert "UNVERIFIED" in plan.notes[0] and "mpiexec.hydra -machinefile mf -n 4" in plan.notes[0]
    assert "unverified" in mpich.__doc__


def test_mpi_detect_imports_only_the_standard_library():
    probe = ("import sys\nimport procmap.launcher_hooks.mpi_detect\n"
             "print('numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
