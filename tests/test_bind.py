"""launcher_hooks/procmap_bind.sh: the launch wrapper that binds a task to PROCMAP_CPU.

A TaskProlog cannot bind (Slurm sets the affinity before it runs; 24.11 removed
SLURM_PROLOG_CPU_MASK), so ``srun --task-prolog=procmap_taskprolog.sh --cpu-bind=none
procmap_bind.sh ./app`` binds every task itself (issue 23).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from procmap.launcher_hooks import slurm

WRAPPER = slurm.bind_wrapper_path()
SHOW = "import os, sys; print(sorted(os.sched_getaffinity(0))); print(repr(sys.argv[1:]))"
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
TASKSET = shutil.which("taskset")
PYTHON = os.path.realpath(sys.executable)   # not a pyenv shim: those need bash on PATH

needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs in the affinity set")
needs_taskset = pytest.mark.skipif(TASKSET is None, reason="taskset (util-linux) is missing")


def _whole_node() -> bool:
    try:
        with open("/sys/devices/system/cpu/online") as fh:
            online = fh.read().strip()
        with open("/proc/self/status") as fh:
            allowed = next(line.split()[1] for line in fh if line.startswith("Cpus_allowed_list:"))
    except (OSError, StopIteration, IndexError):
        return True
    return online == allowed


def _expected(c: int) -> int:
    """The wrapper's rule: CPU c on a whole node, else the c-th CPU of the affinity set."""
    return c if _whole_node() else CPUS[c]


@pytest.fixture(params=["taskset", "python"])
def path_mode(request, tmp_path):
    """PATH for the wrapper: the normal one (taskset) or one with only python3 and sh."""
    if request.param == "taskset":
        if TASKSET is None:
            pytest.skip("taskset (util-linux) is missing")
        return os.pathsep.join([os.path.dirname(PYTHON), os.environ.get("PATH", "/usr/bin:/bin")])
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(PYTHON, bare / "python3")
    os.symlink(shutil.which("sh") or "/bin/sh", bare / "sh")
    return str(bare)


def _run(path: str, env: dict, *app: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    environ = {"PATH": path, **env}
    command = [*prefix, "sh", WRAPPER, *app]
    if prefix:   # taskset itself must be found on the normal PATH
        command = [*prefix, "env", f"PATH={path}", "sh", WRAPPER, *app]
        environ["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=30)


def _affinity(done: subprocess.CompletedProcess) -> list[int]:
    assert done.returncode == 0, done.stderr
    return eval(done.stdout.splitlines()[0])


def test_shipped_with_the_taskprolog():
    assert os.path.dirname(WRAPPER) == os.path.dirname(slurm.taskprolog_path())
    assert os.access(WRAPPER, os.X_OK)   # srun runs it directly, like the TaskProlog
    with open(WRAPPER) as fh:
        assert fh.readline() == "#!/bin/sh\n"


@needs_two
@pytest.mark.parametrize("cpu", [0, 1])
def test_binds_to_procmap_cpu(path_mode, cpu):
    done = _run(path_mode, {"PROCMAP_CPU": str(cpu)}, "python3", "-c", SHOW)
    assert _affinity(done) == [_expected(cpu)]
    assert done.stderr == ""


@needs_two
def test_unset_runs_unbound_with_one_line(path_mode):
    done = _run(path_mode, {}, "python3", "-c", SHOW)
    assert _affinity(done) == CPUS
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("procmap_bind: ")
    assert "PROCMAP_CPU is not set" in done.stderr


@needs_two
@pytest.mark.parametrize("value", ["", "x", "1x", "-1", "0x2", "1 2", "99999999999"])
def test_not_a_number_runs_unbound_with_one_line(path_mode, value):
    done = _run(path_mode, {"PROCMAP_CPU": value}, "python3", "-c", SHOW)
    assert _affinity(done) == CPUS
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("procmap_bind: ")
    assert "not a CPU number" in done.stderr


@needs_two
def test_leading_zeros_are_decimal(path_mode):
    done = _run(path_mode, {"PROCMAP_CPU": "01"}, "python3", "-c", SHOW)
    assert _affinity(done) == [_expected(1)]


@needs_two
def test_core_beyond_the_node_runs_unbound(path_mode):
    done = _run(path_mode, {"PROCMAP_CPU": "4096"}, "python3", "-c", SHOW)
    assert _affinity(done) == CPUS
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("procmap_bind: ")


@needs_two
def test_procmap_bind_0_runs_unbound(path_mode):
    """The TaskProlog exports PROCMAP_BIND=0 for a task that is not on the map's host."""
    done = _run(path_mode, {"PROCMAP_CPU": "0", "PROCMAP_BIND": "0"}, "python3", "-c", SHOW)
    assert _affinity(done) == CPUS
    assert done.stderr.count("\n") == 1 and "PROCMAP_BIND=0" in done.stderr


@needs_two
@needs_taskset
def test_partial_node_uses_the_nth_cpu_of_the_step(path_mode):
    """Started on CPU 1 only (a step owning one CPU of the node): core 0 is CPU 1."""
    last = str(CPUS[-1])
    done = _run(path_mode, {"PROCMAP_CPU": "0"}, "python3", "-c", SHOW, prefix=(TASKSET, "-c", last))
    assert _affinity(done) == [int(last)]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("procmap_bind: ")
    assert f"core 0 to CPU {last}" in done.stderr
    # core 1 does not exist in a one-CPU step: unbound (i.e. still on that CPU), one line
    done = _run(path_mode, {"PROCMAP_CPU": "1"}, "python3", "-c", SHOW, prefix=(TASKSET, "-c", last))
    assert _affinity(done) == [int(last)]
    assert done.stderr.count("\n") == 1 and "beyond" in done.stderr


@needs_two
def test_arguments_pass_unchanged(path_mode):
    args = ["a b", "'single'", '"double"', "", "$HOME", "*", "back\\slash", "-c", "--", "new\nline"]
    done = _run(path_mode, {"PROCMAP_CPU": "0"}, "python3", "-c", SHOW, *args)
    assert eval(done.stdout.split("\n", 1)[1]) == args


def test_exit_status_and_pid_are_the_applications(path_mode, tmp_path):
    script = "import os, sys; print(os.getpid(), os.getppid()); sys.exit(7)"
    for env in ({"PROCMAP_CPU": "0"}, {}):
        done = _run(path_mode, env, "python3", "-c", script)
        assert done.returncode == 7
    # exec, not a child: the application keeps the wrapper's PID (signals reach it)
    probe = tmp_path / "pid"
    proc = subprocess.Popen(["sh", WRAPPER, "python3", "-c",
                             f"import os; open({str(probe)!r}, 'w').write(str(os.getpid()))"],
                            env={"PATH": path_mode, "PROCMAP_CPU": "0"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.communicate(timeout=30)
    assert proc.returncode == 0 and int(probe.read_text()) == proc.pid


def test_missing_application_fails_like_sh(path_mode):
    done = _run(path_mode, {"PROCMAP_CPU": "0"}, "no-such-program-procmap")
    assert done.returncode == 127 and "no-such-program-procmap" in done.stderr


def test_no_application_is_a_usage_error():
    done = subprocess.run(["sh", WRAPPER], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.startswith("procmap_bind: usage")


def test_neither_taskset_nor_python_runs_unbound(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(shutil.which("sh") or "/bin/sh", bare / "sh")
    done = subprocess.run(["sh", WRAPPER, PYTHON, "-c", "print('ran')"],
                          env={"PATH": str(bare), "PROCMAP_CPU": "0"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == "ran\n"
    assert done.stderr.count("\n") == 1 and "neither taskset nor python3" in done.stderr


@needs_two
def test_taskprolog_then_wrapper_binds_per_node_lists(path_mode):
    """Issue 23's job: lists n1: 1,0 and n2: 0,1; each rank lands on its own core."""
    hosts, nodes, cores = ["n1", "n2"], np.array([0, 0, 1, 1]), np.array([1, 0, 0, 1])
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        rank_map = os.path.join(tmp, "job.ranks")
        with open(rank_map, "w") as fh:
            fh.write(slurm.rank_map_text(hosts, nodes, cores))
        for rank in range(4):
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROCMAP_RANK_MAP": rank_map,
                   "PROCMAP_BIND": "1", "SLURM_PROCID": str(rank),
                   "SLURMD_NODENAME": hosts[nodes[rank]]}
            prolog = subprocess.run(["sh", slurm.taskprolog_path()], env=env,
                                    capture_output=True, text=True, timeout=10)
            exports = dict(line[len("export "):].split("=", 1)
                           for line in prolog.stdout.splitlines() if line.startswith("export "))
            assert exports["PROCMAP_CPU"] == str(cores[rank])
            done = _run(path_mode, {**exports, "PROCMAP_BIND": "1"}, "python3", "-c", SHOW)
            assert _affinity(done) == [_expected(int(cores[rank]))]
