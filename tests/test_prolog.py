"""Prolog mode of ``procmap slurm`` (``--prolog``, ``PROCMAP_PROLOG=1``) always lands.

Whatever happens -- bad input, a slow read, a cold kernel cache, a mapping that
raises or dies -- a prolog exits 0 within ``--timeout`` of its start (wall clock),
writes Slurm's block placement whenever the allocation (hosts and a task count) is
known and fits, and says what happened in exactly one stderr line. The timing tests
run ``python -m procmap`` as a prolog would; the table of failure cases runs
in-process (fast). The TaskProlog's diagnostics are ``print `` lines on stdout.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import procmap.launcher_hooks.pipeline as launcher_pipeline
from procmap.formats import write_graph
from procmap.generators import grid_graph
from procmap.graph import CommGraph
from procmap.launcher_hooks import slurm

SLURM_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_CPUS_PER_NODE",
              "SLURM_CPUS_ON_NODE", "SLURM_NTASKS", "SLURM_JOB_NTASKS", "PROCMAP_PROLOG")
# Three nodes of four CPUs and twelve tasks: the block fallback is 4 + 4 + 4.
ALLOCATION = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "4(x3)",
              "SLURM_NTASKS": "12"}
BLOCK_12 = ["n1"] * 4 + ["n2"] * 4 + ["n3"] * 4
# Seconds a subprocess may need beyond its --timeout (process exit on a busy machine).
SLACK = 1.5


# ------------------------------------------------------------------- harness
@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No test sees the Slurm job (or prolog flag) it might be running in."""
    for var in SLURM_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _no_huge_padding(monkeypatch):
    """In-process, padding a graph to millions of silent tasks is a bug, not a test
    that may exhaust the machine's memory (SLURM_NTASKS=2e9)."""
    pad = CommGraph.with_num_tasks

    def guarded(self, n):
        if n > 10**6:
            raise AssertionError(f"padded to {n:,} tasks before checking the slots")
        return pad(self, n)
    monkeypatch.setattr(CommGraph, "with_num_tasks", guarded)


@pytest.fixture
def small_graph(tmp_path):
    """A 3x4 grid (12 ranks) as a .comm file."""
    path = tmp_path / "grid.comm"
    write_graph(grid_graph((3, 4), weight=5), str(path))
    return str(path)


@pytest.fixture(scope="module")
def big_graph(tmp_path_factory):
    """A 1000x1000 grid (10^6 ranks, 31 MB .comm): seconds to read, more to map."""
    path = tmp_path_factory.mktemp("big") / "grid1m.comm"
    write_graph(grid_graph((1000, 1000)), str(path))
    return str(path)


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SLURM_VARS}
    env.update(extra)
    return env


def _procmap(argv: list, env: dict, limit: float) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``python -m procmap`` like a prolog does; also the wall-clock seconds."""
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "procmap", *map(str, argv)], env=env,
                              capture_output=True, text=True, timeout=limit + 60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"procmap ran past {limit + 60:.0f} s: {argv}")
    return done, time.monotonic() - t0


def _run_in_process(argv: list) -> int:
    from procmap.cli import main

    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:  # argparse errors in a prolog exit 0 this way
        return 0 if exc.code is None else exc.code


# ------------------------------------------------------------- time budget
def test_cold_cache_falls_back_at_once(tmp_path, small_graph):
    """An empty compile cache: a prolog never compiles, it falls back at once and
    says how to warm the cache (the old code compiled for 19-32 s)."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    out = tmp_path / "hosts"
    done, seconds = _procmap(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--prolog",
                              "--timeout", "3"], _env(NUMBA_CACHE_DIR=str(cache), **ALLOCATION), 3)
    assert done.returncode == 0, done.stderr
    assert seconds < 3 + SLACK
    assert done.stderr.count("\n") == 1 and "cache is cold" in done.stderr
    assert "procmap warmup" in done.stderr
    assert out.read_text().splitlines() == BLOCK_12
    assert not [f for f in cache.rglob("*") if f.is_file()]   # nothing was compiled


def test_slow_read_and_map_stop_at_the_deadline(tmp_path, big_graph):
    """Reading and mapping 10^6 ranks take far longer than --timeout 3: the work is
    killed at the deadline, counted from the process's start (the old code read the
    graph outside the budget: 6.6 s for --timeout 3)."""
    out = tmp_path / "hosts"
    env = _env(SLURM_JOB_NODELIST="n[1-4]", SLURM_JOB_CPUS_PER_NODE="250000(x4)",
               SLURM_NTASKS="1000000", PROCMAP_PROLOG="1")
    done, seconds = _procmap(["slurm", big_graph, "-o", out, "--timeout", "3"], env, 3)
    assert done.returncode == 0, done.stderr
    assert seconds < 3 + SLACK
    assert done.stderr.count("\n") == 1
    assert "did not finish within --timeout 3 s" in done.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1_000_000 and lines[0] == "n1" and lines[-1] == "n4"


def test_timeout_outside_a_prolog_is_a_bound_too(tmp_path, big_graph):
    out = tmp_path / "hosts"
    env = _env(SLURM_JOB_NODELIST="n[1-4]", SLURM_JOB_CPUS_PER_NODE="250000(x4)")
    done, seconds = _procmap(["slurm", big_graph, "-o", out, "--timeout", "2"], env, 2)
    assert done.returncode == 2 and seconds < 2 + SLACK
    assert done.stderr.count("\n") == 1 and "did not finish within --timeout 2 s" in done.stderr
    assert not out.exists()


def test_run_with_deadline_kills_what_holds_the_gil():
    """In a fresh process (a forked child needs Numba's thread pool unstarted): a C
    loop that never releases the GIL is stopped at the deadline; results, errors
    and a dying child come back as such."""
    code = """if True:
        import json, os, time
        from procmap.launcher_hooks import slurm
        out = {"fork": slurm.fork_is_safe()}
        out["value"] = slurm.run_with_deadline(lambda: [1, 2], time.monotonic() + 20)
        def fails():
            raise ValueError("bad")
        for name, fn in (("error", fails), ("dies", lambda: os._exit(3))):
            try:
                slurm.run_with_deadline(fn, time.monotonic() + 20)
            except slurm.ChildFailed as exc:
                out[name] = str(exc)
        t0 = time.monotonic()
        try:
            slurm.run_with_deadline(lambda: sum(range(10**13)), time.monotonic() + 0.5)
        except slurm.MappingTimeout:
            out["gil"] = time.monotonic() - t0
        print(json.dumps(out))
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["fork"] and out["value"] == [1, 2]
    assert out["error"] == "ValueError: bad" and "without a result" in out["dies"]
    assert out["gil"] < 1.0


# ----------------------------------------------------------- allocation
def test_ntasks_beyond_the_cpus_writes_nothing(tmp_path, small_graph, capsys, monkeypatch):
    """SLURM_NTASKS=500 on 192 CPUs: no fallback (it would oversubscribe, and Slurm
    refuses the step anyway), and the line says so."""
    for var, value in {"SLURM_JOB_NODELIST": "n[1-6]", "SLURM_JOB_CPUS_PER_NODE": "32(x6)",
                       "SLURM_NTASKS": "500"}.items():
        monkeypatch.setenv(var, value)
    out = tmp_path / "hosts"
    assert _run_in_process(["slurm", small_graph, "-o", out, "--prolog"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "500 tasks (SLURM_NTASKS)" in err
    assert "192 CPUs on 6 hosts: the job oversubscribes" in err and "nothing written" in err
    assert "never oversubscribes" not in err
    assert not out.exists()


def test_huge_ntasks_is_checked_before_padding(tmp_path, small_graph, capsys, monkeypatch):
    """SLURM_NTASKS=2e9: a one-line error, not 2e9 silent tasks in memory (the
    autouse guard turns padding into a failure)."""
    for var, value in {**ALLOCATION, "SLURM_NTASKS": "2000000000"}.items():
        monkeypatch.setenv(var, value)
    out = tmp_path / "hosts"
    assert _run_in_process(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2,000,000,000 tasks but only 12 slots" in err
    assert not out.exists()


def test_timeout_must_be_a_positive_number(tmp_path, small_graph, capsys, monkeypatch):
    for var, value in ALLOCATION.items():
        monkeypatch.setenv(var, value)
    for bad in ("nan", "0", "-1", "inf", "soon", "1e999"):
        out = tmp_path / "hosts"
        assert _run_in_process(["slurm", small_graph, "-H", "2:2:3", "-o", out,
                                "--timeout", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--timeout {bad}: expected a number of seconds" in err
        assert not out.exists()


def test_help_documents_the_prolog_default_timeout(capsys):
    assert _run_in_process(["slurm", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"default with --prolog: {slurm.PROLOG_TIMEOUT:g} s" in text
    assert "never compiles" in text


# ------------------------------------------------------- failure table
def _slow_mapper(monkeypatch):
    def slow(*args, **kwargs):
        time.sleep(30)   # the child is killed at the deadline
    monkeypatch.setattr(launcher_pipeline, "map_tasks", slow)


def _raising_mapper(monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("engine bug")
    monkeypatch.setattr(launcher_pipeline, "map_tasks", fails)


# Each case: (id, extra arguments, environment changes, setup, expected hostfile).
# GRAPH and OUT in the arguments stand for the test's graph and output paths; the
# base command is `procmap slurm GRAPH -H 2:2:3 -o OUT --prolog` in the 3x4-CPU
# allocation of ALLOCATION. Expected: BLOCK_12 (or another line list) or None for
# "nothing written" (no allocation known, or it does not fit).
CASES = [
    ("missing graph", ["--graph", "/nonexistent/app.comm"], {}, None, BLOCK_12),
    ("graph is a directory", ["--graph", "DIR"], {}, None, BLOCK_12),
    ("malformed graph", ["--graph", "BROKEN"], {}, None, BLOCK_12),
    ("empty graph", ["--graph", "EMPTY"], {}, None, BLOCK_12),
    ("wrong --format", ["--format", "mtx"], {}, None, BLOCK_12),
    ("graph has more ranks than SLURM_NTASKS", [], {"SLURM_NTASKS": "6"}, None,
     ["n1", "n1", "n2", "n2", "n3", "n3"]),
    ("hierarchy does not fit the hosts", ["-H", "2:2:5"], {}, None, BLOCK_12),
    ("malformed hierarchy", ["-H", "2:x"], {}, None, BLOCK_12),
    ("hierarchy with a zero", ["-H", "0:2:3"], {}, None, BLOCK_12),
    ("missing --distance-matrix", ["-H", None, "--distance-matrix", "/nonexistent.npy"], {},
     None, BLOCK_12),
    ("bad --node-level", ["--node-level", "7"], {}, None, BLOCK_12),
    ("malformed --hosts", ["--hosts", "n[1-"], {}, None, BLOCK_12),
    ("duplicated --hosts entry", ["--hosts", "n1,n2,n3,n1"], {}, None, BLOCK_12),
    ("missing --hostfile", ["--hostfile", "/nonexistent/hosts.txt"], {}, None, BLOCK_12),
    ("malformed --hostfile", ["--hostfile", "BADHOSTS"], {}, None, BLOCK_12),
    ("hostfile with too few slots", ["--hostfile", "SMALLHOSTS"], {}, None, None),
    ("not in a job, no hosts", [], {"SLURM_JOB_NODELIST": None, "SLURM_JOB_CPUS_PER_NODE": None,
                                    "SLURM_NTASKS": None}, None, None),
    ("SLURM_NTASKS=0 (graph's count)", [], {"SLURM_NTASKS": "0"}, None, BLOCK_12),
    ("SLURM_NTASKS not a number", [], {"SLURM_NTASKS": "many"}, None, BLOCK_12),
    ("SLURM_NTASKS beyond the CPUs", [], {"SLURM_NTASKS": "500"}, None, None),
    ("SLURM_NTASKS=2e9", [], {"SLURM_NTASKS": "2000000000"}, None, None),
    ("malformed SLURM_JOB_CPUS_PER_NODE", [], {"SLURM_JOB_CPUS_PER_NODE": "junk"}, None,
     BLOCK_12),
    ("SLURM_JOB_CPUS_PER_NODE for 2 nodes", [], {"SLURM_JOB_CPUS_PER_NODE": "4(x2)"}, None,
     BLOCK_12),
    ("malformed SLURM_JOB_NODELIST", [], {"SLURM_JOB_NODELIST": "n["}, None, None),
    ("duplicated host in SLURM_JOB_NODELIST", [], {"SLURM_JOB_NODELIST": "n1,n2,n1"}, None, None),
    ("--timeout 0", ["--timeout", "0"], {}, None, BLOCK_12),
    ("--timeout -1", ["--timeout", "-1"], {}, None, BLOCK_12),
    ("--timeout nan", ["--timeout", "nan"], {}, None, BLOCK_12),
    ("--timeout inf", ["--timeout", "inf"], {}, None, BLOCK_12),
    ("--timeout not a number", ["--timeout", "soon"], {}, None, BLOCK_12),
    ("--timeout without a value", ["--timeout"], {}, None, BLOCK_12),
    ("unknown option", ["--bogus"], {}, None, BLOCK_12),
    ("unknown option with a value", ["--bogus", "3"], {}, None, BLOCK_12),
    ("--ntasks 0", ["--ntasks", "0"], {}, None, BLOCK_12),
    ("--ntasks not a number", ["--ntasks", "x"], {}, None, BLOCK_12),
    ("--engine unknown", ["--engine", "nope"], {}, None, BLOCK_12),
    ("unwritable output", ["-o", "/nonexistent/dir/hosts"], {}, None, None),
    ("output is the graph", ["-o", "GRAPH"], {}, None, None),
    ("mapping overruns --timeout", ["--timeout", "1"], {}, _slow_mapper, BLOCK_12),
    ("mapping raises", [], {}, _raising_mapper, BLOCK_12),
]


@pytest.mark.parametrize("extra, env, setup, expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_prolog_failure_lands(tmp_path, small_graph, capsys, monkeypatch, extra, env, setup,
                              expected):
    """Every failure: exit 0, exactly one stderr line, and the block fallback exactly
    when the allocation is known and fits (else nothing)."""
    for var, value in {**ALLOCATION, **env}.items():
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    if setup is not None:
        setup(monkeypatch)
    files = {"DIR": tmp_path, "BROKEN": tmp_path / "broken.comm", "EMPTY": tmp_path / "empty.comm",
             "BADHOSTS": tmp_path / "bad.hosts", "SMALLHOSTS": tmp_path / "small.hosts",
             "GRAPH": small_graph}
    files["BROKEN"].write_text("0 1 5\n1 x 3\n")
    files["EMPTY"].write_text("")
    files["BADHOSTS"].write_text("n1 slots=four\n")
    files["SMALLHOSTS"].write_text("n1 slots=2\nn2 slots=2\nn3 slots=2\n")
    out = tmp_path / "hosts"
    graph, hierarchy, words = small_graph, "2:2:3", []
    it = iter(extra)
    for word in it:
        if word == "--graph":
            graph = str(files.get(nxt := next(it), nxt))
        elif word == "-H":
            hierarchy = next(it)
        elif word == "-o":
            out = files.get(nxt := next(it), nxt)
        else:
            words.append(str(files.get(word, word)))
    argv = ["slurm", graph, "-o", out, "--prolog", *words]
    if hierarchy is not None:
        argv[2:2] = ["-H", hierarchy]
    t0 = time.monotonic()
    code = _run_in_process(argv)
    seconds = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 0
    assert err.count("\n") == 1 and err.startswith("procmap: prolog: "), err
    assert seconds < 10
    if expected is None:
        assert "nothing written" in err
        assert not os.path.exists(out) or out == small_graph
    else:
        assert "fell back to Slurm's block placement" in err
        assert open(out).read().splitlines() == expected


def test_prolog_success_is_silent_and_replaces_the_fallback(tmp_path, small_graph, capsys,
                                                            monkeypatch):
    """The mapping lands: stderr empty, the hostfile is the mapping's (not block's)."""
    for var, value in ALLOCATION.items():
        monkeypatch.setenv(var, value)

    def interleaved(graph, topology, **kwargs):
        from procmap.mapping import Mapping
        from procmap.objective import evaluate
        pes = np.arange(graph.n, dtype=np.int32)[::-1].copy()   # last node first
        return Mapping(pes=pes, engine="fixed", evaluation=evaluate(graph, topology, pes))
    monkeypatch.setattr(launcher_pipeline, "map_tasks", interleaved)
    out = tmp_path / "hosts"
    assert _run_in_process(["slurm", small_graph, "-H", "2:2:3", "-o", out, "--prolog"]) == 0
    assert capsys.readouterr().err == ""
    assert out.read_text().splitlines() == BLOCK_12[::-1]


# ----------------------------------------------------------- TaskProlog
def _taskprolog(env: dict) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(["sh", slurm.taskprolog_path()], env={**base, **env},
                          capture_output=True, text=True, timeout=10)


def test_taskprolog_diagnostics_are_print_lines(tmp_path):
    """slurmstepd shows a TaskProlog's ``print `` lines to the user and drops its stderr."""
    rank_map = tmp_path / "map"
    rank_map.write_text("0 a 1\n* b x\nbad\\cline 2\n")
    cases = [({"PROCMAP_RANK_MAP": "/nonexistent/map", "SLURM_PROCID": "0"}, "cannot read"),
             ({"PROCMAP_RANK_MAP": str(rank_map)}, "SLURM_PROCID is not set"),
             ({"PROCMAP_RANK_MAP": str(rank_map), "SLURM_PROCID": "1"}, "bad line"),
             ({"PROCMAP_RANK_MAP": str(rank_map), "SLURM_PROCID": "2"}, "bad\\cline 2"),
             ({"PROCMAP_RANK_MAP": str(rank_map), "SLURM_PROCID": "0", "PROCMAP_BIND": "1",
               "SLURMD_NODENAME": "b"}, "not binding")]
    for env, text in cases:
        done = _taskprolog(env)
        assert done.returncode == 0 and done.stderr == ""
        said = [line for line in done.stdout.splitlines() if not line.startswith("export ")]
        assert len(said) == 1 and said[0].startswith("print procmap_taskprolog: ")
        assert text in said[0]


def test_signal_during_the_prolog_still_exits_0(tmp_path, big_graph):
    """SIGTERM (or SIGINT) while the prolog maps: exit 0, one line, the fallback stays."""
    out = tmp_path / "hosts"
    env = _env(SLURM_JOB_NODELIST="n[1-4]", SLURM_JOB_CPUS_PER_NODE="250000(x4)",
               SLURM_NTASKS="1000000", PROCMAP_PROLOG="1")
    proc = subprocess.Popen([sys.executable, "-m", "procmap", "slurm", big_graph, "-o", str(out),
                             "--timeout", "60"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:  # the fallback comes first
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err.count("\n") == 1 and "terminated" in err, err
    lines = out.read_text().splitlines()
    assert len(lines) == 1_000_000 and lines[0] == "n1" and lines[-1] == "n4"
