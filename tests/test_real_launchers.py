"""procmap's launcher outputs, run by the real launchers: every rank lands where procmap said.

Each test lets procmap write its files and print its launch lines, runs those lines
(verbatim, unless a comment says why not) with Debian's Slurm 22.05, MPICH Hydra or
Open MPI 4.1, and reads back, per rank, the node it ran on (``SLURMD_NODENAME``;
the MPI tests run on this one host) and its CPU affinity (``os.sched_getaffinity``),
written by a probe application to one JSON file per rank. The expected node and CPU
of each rank come from procmap's own files (hostfile, rank map, rankfile,
machinefile and its CPU lists), never from constants here, and the placements are
chosen to differ from the launcher's default, so a launcher that ignored procmap
fails the check.

The Slurm tests need the two-node cluster of ``.ci/slurm_up.sh`` (nodes ``n1`` and
``n2`` on this host, sharing its CPUs; ``SLURM_CONF`` set), whose site Prolog and
TaskProlog are procmap's prolog mode and ``procmap_taskprolog.sh``. Where a tool or
the cluster is missing the tests skip, unless ``PROCMAP_REAL_LAUNCHERS=1`` (CI): then
that is a failure. Every subprocess has a timeout.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from procmap.launcher_hooks import slurm

pytestmark = pytest.mark.launchers

REQUIRED = os.environ.get("PROCMAP_REAL_LAUNCHERS") == "1"
TIMEOUT = 120
REPO = Path(__file__).resolve().parent.parent
HOOKS = Path(slurm.bind_wrapper_path()).parent
OPENMPI4 = "/usr/bin/mpirun.openmpi"
HYDRA = ("mpiexec.hydra", "mpiexec.mpich")
# Ranks 0 and 2 talk, 1 and 3 talk: procmap pairs them on a node (hosts A B A B),
# where Slurm's and mpirun's default block placement has A A B B.
PAIRS = "0 2 100\n1 3 100\n0 1 5\n"
# Ranks 0-1 and 2-3 talk: a host-grouped placement with one CPU list for every node.
BLOCKS = "0 1 100\n2 3 100\n1 2 1\n"

PROBE = f"""#!{sys.executable}
# Probe application: record this rank's node and CPU affinity in $PROBE_DIR/rank.N.json.
import json, os, socket
names = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
rank = int(next(os.environ[v] for v in names if v in os.environ))
record = {{"rank": rank, "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
          "cpus": sorted(os.sched_getaffinity(0))}}
with open(os.path.join(os.environ["PROBE_DIR"], "rank.%d.json" % rank), "w") as fh:
    json.dump(record, fh)
"""


# ------------------------------------------------------------------ harness
def need(ok: bool, what: str) -> None:
    """Skip without ``what`` -- or fail, in CI (PROCMAP_REAL_LAUNCHERS=1)."""
    if ok:
        return
    if REQUIRED:
        pytest.fail(f"{what} (PROCMAP_REAL_LAUNCHERS=1: the real launchers must run here)")
    pytest.skip(what)


def run(cmd, *, cwd, env=None, check=True, shell=False) -> subprocess.CompletedProcess:
    """Run with a timeout; on failure, the output is in the assertion message."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, shell=shell, capture_output=True, text=True,
                          timeout=TIMEOUT, executable="/bin/bash" if shell else None)
    if check:
        assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def job_env(probe_dir: Path) -> dict:
    """This interpreter's procmap and python3 first on PATH (also inside jobs and
    prologs, which inherit it), and where the probe writes."""
    env = dict(os.environ, PROBE_DIR=str(probe_dir))
    scripts = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    env["PATH"] = os.pathsep.join(dict.fromkeys(scripts + env.get("PATH", "").split(os.pathsep)))
    for name in ("SLURM_HOSTFILE", "PROCMAP_RANK_MAP", "PROCMAP_BIND", "SLURM_JOB_ID"):
        env.pop(name, None)
    return env


@pytest.fixture
def work(tmp_path) -> Path:
    """A job directory with the probe application and an empty probe output dir."""
    (tmp_path / "probe").mkdir()
    app = tmp_path / "probe.py"
    app.write_text(PROBE)
    app.chmod(0o755)
    return tmp_path


def probes(work: Path, n: int) -> dict[int, dict]:
    """The probe records of ranks 0..n-1 (all of them, or the test fails)."""
    found = {int(p.stem.split(".")[1]): json.loads(p.read_text())
             for p in (work / "probe").glob("rank.*.json")}
    assert sorted(found) == list(range(n)), f"ranks that ran: {sorted(found)}"
    return found


def local_ranks(hosts: list[str]) -> list[int]:
    """Node-local rank of every rank (its position among the ranks of its host)."""
    seen: dict[str, int] = {}
    out = []
    for h in hosts:
        out.append(seen.get(h, 0))
        seen[h] = out[-1] + 1
    return out


def assert_placed(got: dict[int, dict], nodes: list[str] | None, cpus: list[int]) -> None:
    """Rank r ran on ``nodes[r]`` (unless None), bound to exactly CPU ``cpus[r]``."""
    table = {r: (g["node"], g["cpus"]) for r, g in sorted(got.items())}
    for r, record in got.items():
        if nodes is not None:
            assert record["node"] == nodes[r], f"rank {r}: node; all ranks: {table}"
        assert record["cpus"] == [cpus[r]], f"rank {r}: CPU {cpus[r]} expected; all ranks: {table}"
    print("rank -> node, cpus:", table)  # the bindings, for the log (-s / -rA)


def rank_map(path: Path) -> tuple[list[str], list[int]]:
    """Host and node-local CPU of every rank, from a procmap rank map."""
    rows = [line.split() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return [r[1] for r in rows], [int(r[2]) for r in rows]


# ------------------------------------------------------------------- Slurm
def _cluster_state() -> str | None:
    """``sinfo``'s "node state" lines, or None where Slurm does not answer."""
    if not (shutil.which("srun") and shutil.which("sinfo") and shutil.which("sbatch")):
        return None
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def cluster() -> None:
    state = _cluster_state()
    need(state is not None, "no answering Slurm (srun/sinfo/sbatch; start .ci/slurm_up.sh "
                            "and export SLURM_CONF)")
    nodes = dict(line.split() for line in state.splitlines() if line.strip())
    need(all(nodes.get(n, "").startswith(("idle", "mix", "alloc")) for n in ("n1", "n2")),
         f"the Slurm cluster lacks nodes n1 and n2 up (sinfo: {nodes})")


def sbatch(work: Path, script: str, *options: str, env=None) -> str:
    """Submit ``script`` (text) from ``work``, wait for its end; its output."""
    path = work / "job.sh"
    path.write_text(script)
    log = work / "job.out"
    proc = run(["sbatch", "--wait", f"--chdir={work}", f"--output={log}", *options, str(path)],
               cwd=work, env=env or job_env(work / "probe"), check=False)
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, f"sbatch -> {proc.returncode}\n{proc.stderr}\n{text}"
    return text


def job_id(work: Path) -> str:
    """The id of the one job whose procmap files are in ``work``."""
    (hosts,) = work.glob("procmap.*.hosts")
    return hosts.name.split(".")[1]


# The job script that runs the commands `procmap slurm --json` printed, as printed.
RUN_PRINTED = """#!/bin/bash
set -euo pipefail
procmap slurm {graph} --cpu-bind -o hosts --app {app} --json -q > report.json
python3 -c 'import json; print("\\n".join(json.load(open("report.json"))["commands"]))' > printed.sh
cat printed.sh
bash -e printed.sh
"""


def test_srun_arbitrary_with_map_cpu(cluster, work):
    """1. procmap slurm inside a 2-node job: SLURM_HOSTFILE + map_cpu, as printed."""
    (work / "g.comm").write_text(PAIRS)
    out = sbatch(work, RUN_PRINTED.format(graph="g.comm", app=work / "probe.py"), "-N2", "-n4")
    report = json.loads((work / "report.json").read_text())
    assert "--cpu-bind=map_cpu:" in out  # the one-list case: srun binds itself
    hosts = (work / "hosts").read_text().split()
    assert hosts != sorted(hosts), "procmap's placement should differ from the block one"
    lists = {c["group"]: c["cpus"] for c in report["cpu_lists"]}
    cpus = [lists[h][i] for h, i in zip(hosts, local_ranks(hosts))]
    assert_placed(probes(work, 4), hosts, cpus)


def _job_script(work: Path) -> str:
    """examples/slurm_job.sh with this test's APP; its #SBATCH lines are overridden."""
    return (REPO / "examples" / "slurm_job.sh").read_text()


def test_example_job_script(cluster, work):
    """2a. examples/slurm_job.sh under sbatch, with the real procmap (one map_cpu list)."""
    (work / "app.comm").write_text(PAIRS)
    env = dict(job_env(work / "probe"), APP=str(work / "probe.py"), HIERARCHY="2:2",
               DISTANCE="1:10")
    sbatch(work, _job_script(work), "-N2", "-n4", "--ntasks-per-node=2", env=env)
    hosts, cpus = rank_map(work / f"procmap.{job_id(work)}.ranks")
    assert hosts != sorted(hosts)
    assert_placed(probes(work, 4), hosts, cpus)


# A stand-in for the `procmap` command in examples/slurm_job.sh: the placement is fixed
# (n1: CPUs 1,0 and n2: 0,1 by node-local rank, which no one map_cpu list serves: a
# 2-CPU node gives procmap's own mapping one list), everything else -- hostfile, rank
# map, launch lines, JSON fields -- is procmap's code.
STAND_IN = f"""#!{sys.executable}
import argparse, json, sys
import numpy as np
from procmap.launcher_hooks import slurm_command
p = argparse.ArgumentParser()
p.add_argument("cmd"); p.add_argument("graph"); p.add_argument("-o", dest="output")
p.add_argument("--rank-map"); p.add_argument("--cpu-bind", action="store_true")
args, _ = p.parse_known_args()
args.app, args.hostfile, args.distance_matrix, args.format = "./app", None, None, None
node, core = np.array([0, 1, 0, 1]), np.array([1, 0, 0, 1])
out = slurm_command.slurm_outputs(args, node, core, ("n1", "n2"))
print(json.dumps({{"common_cpu_list": out["common_cpu_list"],
                  "commands": [c for _, c in out["commands"]]}}))
"""


def test_example_job_script_per_node_lists(cluster, work):
    """2b. examples/slurm_job.sh when the nodes need different CPU lists (n1: 1,0 and
    n2: 0,1): TaskProlog + procmap_bind.sh must put every rank on its listed CPU."""
    (work / "app.comm").write_text(PAIRS)
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "procmap").write_text(STAND_IN)
    (bin_dir / "procmap").chmod(0o755)
    env = job_env(work / "probe")
    env.update(APP=str(work / "probe.py"), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    sbatch(work, _job_script(work), "-N2", "-n4", "--ntasks-per-node=2", env=env)
    hosts, cpus = rank_map(work / f"procmap.{job_id(work)}.ranks")
    assert cpus == [1, 0, 0, 1] and hosts == ["n1", "n2", "n1", "n2"]
    assert_placed(probes(work, 4), hosts, cpus)


# ------------------------------------------------------------------ Prolog
# A job of the site Prolog (.ci/slurm_prolog.sh): the Prolog wrote procmap.<job>.hosts
# and .ranks before the job started; the site TaskProlog exports each task's CPU and
# procmap_bind.sh binds it.
PROLOG_JOB = f"""#!/bin/bash
set -euo pipefail
HOSTS=$PWD/procmap.$SLURM_JOB_ID.hosts
test -s "$HOSTS"
SLURM_HOSTFILE=$HOSTS PROCMAP_BIND=1 srun -n "$SLURM_NTASKS" --distribution=arbitrary \\
    --cpu-bind=none {HOOKS}/procmap_bind.sh {{app}}
"""


def _site_prolog_configured() -> bool:
    conf = os.environ.get("SLURM_CONF", "")
    try:
        text = Path(conf).read_text()
    except OSError:
        return False
    return "Prolog=" in text and "procmap_taskprolog.sh" in text


@pytest.fixture(scope="module")
def warm_cache(cluster) -> None:
    """A prolog never compiles: fill the kernel cache first where it is cold."""
    from procmap.kernels.backend import kernel_cache_is_warm

    if not kernel_cache_is_warm():
        subprocess.run([sys.executable, "-m", "procmap", "warmup"], capture_output=True,
                       timeout=600, check=True)


@pytest.mark.parametrize("graph, fallback", [
    (PAIRS, None),
    ("0 2 100\n1 x 5\n", "procmap.comm:2"),                      # broken input
    ("0 5 1\n", "6"),                                            # more ranks than the job's 4
], ids=["mapped", "broken-graph", "too-many-ranks"])
def test_site_prolog(cluster, warm_cache, work, graph, fallback):
    """3. Prolog= runs procmap's prolog mode, TaskProlog= exports the CPUs; on broken
    input the Prolog falls back to Slurm's block placement and the job still runs."""
    need(_site_prolog_configured(), "SLURM_CONF has no procmap Prolog/TaskProlog (.ci/slurm_up.sh)")
    (work / "procmap.comm").write_text(graph)
    sbatch(work, PROLOG_JOB.format(app=work / "probe.py"), "-N2", "-n4")
    job = job_id(work)
    hosts, cpus = rank_map(work / f"procmap.{job}.ranks")
    errors = "".join(p.read_text() for p in work.glob(f"procmap.{job}.*.prolog.err"))
    if fallback is None:
        assert errors == "" and hosts != sorted(hosts), errors
    else:
        assert "fell back to Slurm's block placement" in errors and fallback in errors, errors
        block_node, block_core = slurm.fallback_nodes(4, 2, [2, 2])
        assert hosts == [("n1", "n2")[i] for i in block_node] and cpus == block_core.tolist()
    assert_placed(probes(work, 4), hosts, cpus)


# ------------------------------------------------------------ partial node
def test_partial_node(cluster, work):
    """Issue item 2: on a node where another job holds a CPU, procmap's printed line
    runs (srun refuses map_cpu there) and the rank gets the CPU its step owns."""
    env = job_env(work / "probe")
    holder = run(["sbatch", "--parsable", "-w", "n1", "-n1", "--wrap", "sleep 300"],
                 cwd=work, env=env).stdout.strip().split(";")[0]
    try:
        wait_running(holder, work)
        (work / "one.comm").write_text("# tasks: 1\n")
        script = RUN_PRINTED.format(graph="one.comm", app=work / "probe.py").replace(
            "cat printed.sh", "grep Cpus_allowed_list /proc/self/status > batch.cpus\ncat printed.sh")
        out = sbatch(work, script, "-w", "n1", "-n1")
    finally:
        run(["scancel", holder], cwd=work, check=False)
    assert "--cpu-bind=map_cpu:" not in out and "procmap_bind.sh" in out
    owned = cpu_list((work / "batch.cpus").read_text().split()[-1])
    assert len(owned) < (os.cpu_count() or 1), "the job should hold a part of n1 only"
    hosts, cores = rank_map(work / "hosts.ranks")
    # procmap numbers the cores of the allocation 0, 1, ...: core c is the c-th owned CPU.
    assert_placed(probes(work, 1), hosts, [owned[c] for c in cores])


def wait_running(job: str, work: Path, seconds: float = 30) -> None:
    """Wait until ``job`` runs (it holds its CPUs), at most ``seconds``."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if run(["squeue", "-h", "-j", job, "-o", "%t"], cwd=work).stdout.strip() == "R":
            return
        time.sleep(0.5)
    pytest.fail(f"job {job} did not start within {seconds} s")


def cpu_list(text: str) -> list[int]:
    """``1,3-4`` (a Linux CPU list) as sorted CPU numbers."""
    cpus = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return sorted(cpus)


# -------------------------------------------------------------- Open MPI 4
def test_openmpi4_rankfile(work):
    """4. Debian's Open MPI 4.1 runs procmap's rankfile: each rank on its slot's CPU."""
    need(os.access(OPENMPI4, os.X_OK), f"no {OPENMPI4} (apt-get install openmpi-bin)")
    (work / "g.comm").write_text(PAIRS)
    # Two host names of this one machine stand for two nodes of 2 cores each.
    hosts = f"{socket.gethostname()},localhost"
    report = json.loads(run(["procmap", "rankfile", "g.comm", "--hosts", hosts, "-H", "2:2",
                             "--mpirun", OPENMPI4, "--app", str(work / "probe.py"), "-o", "rf",
                             "--json", "-q"], cwd=work, env=job_env(work / "probe")).stdout)
    (line,) = report["commands"]
    words = shlex.split(line)
    assert words[0] == OPENMPI4 and "--rankfile" in words
    # The 4 ranks share this machine's 2 cores: Open MPI 4 keeps a rankfile's bindings
    # when oversubscribed, but asks for the flag (on real nodes the line runs as printed).
    words.insert(1, "--oversubscribe")
    env = dict(job_env(work / "probe"), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run(words, cwd=work, env=env)
    slots = [int(line.rsplit("slot=", 1)[1]) for line in (work / "rf").read_text().splitlines()]
    assert slots != [0, 1, 0, 1]  # not the default by-core order
    assert_placed(probes(work, 4), None, slots)


# ----------------------------------------------------------- MPICH Hydra
def test_mpich_hydra_machinefile(work):
    """5. MPICH's Hydra runs procmap's machinefile with -bind-to user:, as printed."""
    need(any(shutil.which(h) for h in HYDRA), "no mpiexec.hydra (apt-get install mpich)")
    (work / "g.comm").write_text(BLOCKS)
    hosts = f"{socket.gethostname()},localhost"
    report = json.loads(run(["procmap", "machinefile", "g.comm", "--hosts", hosts, "-H", "2:2",
                             "--app", str(work / "probe.py"), "-o", "mf", "--json", "-q"],
                            cwd=work, env=job_env(work / "probe")).stdout)
    (line,) = report["commands"]
    assert shlex.split(line)[0] in HYDRA and "-bind-to user:" in line
    run(line, cwd=work, env=job_env(work / "probe"), shell=True)
    lists = [c["cpus"] for c in report["cpu_lists"]]
    cpus = [cpu for cpu_list in lists for cpu in cpu_list]  # runs in rank order
    assert_placed(probes(work, 4), None, cpus)
