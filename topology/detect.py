"""Machine detection: the local node from sysfs, the job from Slurm's environment.

Both detectors are meant to run inside launch scripts and Slurm prologs, so they
read files and environment variables only (no ``scontrol``, no hwloc) and are
fast. :func:`detect_local` never fails on an unreadable sysfs: it falls back to
``os.cpu_count()`` and says so in :attr:`LocalMachine.source`.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from procmap.errors import TopologyError
from procmap.limits import MAX_PES, MAX_TASKS, check_pes, is_decimal_int, parse_count

from .distance_matrix import DistanceMatrix
from .hierarchy import Hierarchy
from .hostlist import expand_hostlist, parse_cpus_per_node

__all__ = ["LocalMachine", "SlurmAllocation", "detect_local", "detect_slurm", "describe",
           "parse_cpu_list"]


# --------------------------------------------------------------------- helpers
def parse_cpu_list(text: str) -> list[int]:
    """Parse a Linux CPU list (``"0-3,8,10-11"``) as found in sysfs and cpusets.

    An empty string (no CPUs, e.g. ``offline`` with nothing offline) gives ``[]``.

    Raises
    ------
    TopologyError
        If an item is not ``N`` or ``N-M`` with ``N <= M``.
    """
    cpus: list[int] = []
    text = text.strip()
    if not text:
        return cpus
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", item)
        if m is None:
            raise TopologyError(f"malformed CPU list {text!r}: bad item {item!r}")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else int(m.group(2))
        if hi < lo:
            raise TopologyError(f"malformed CPU list {text!r}: range {item!r} is reversed")
        cpus.extend(range(lo, hi + 1))
    return cpus


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read().strip()


# ------------------------------------------------------------------ local node
@dataclass(frozen=True, eq=False)
class LocalMachine:
    """What :func:`detect_local` found on this node.

    Attributes
    ----------
    hierarchy:
        Leaf first: ``threads:cores:packages`` with SMT, else ``cores:packages``;
        all levels lie inside the node (``node_level == num_levels``). PEs that do
        not exist (irregular packages, offline or excluded CPUs) have capacity 0.
    cpu_ids:
        int64 array, PE -> OS logical CPU number (what ``taskset``, Slurm
        ``map_cpu:`` with OS ids, and ``sched_setaffinity`` take); -1 for
        capacity-0 PEs.
    source:
        ``"sysfs"``, or ``"os.cpu_count"`` when sysfs could not be read (then the
        hierarchy is one flat level and ``cpu_ids`` is ``0..n-1``).
    """

    hierarchy: Hierarchy
    cpu_ids: np.ndarray
    source: str

    @property
    def smt(self) -> int:
        """Hardware threads per core (1 without SMT or when unknown)."""
        return self.hierarchy.levels[0] if self.hierarchy.num_levels == 3 else 1

    def pe_of_cpu(self) -> dict[int, int]:
        """Inverse of :attr:`cpu_ids`: OS CPU number -> PE id."""
        return {int(c): pe for pe, c in enumerate(self.cpu_ids) if c >= 0}


def _online_cpus(cpu_dir: str) -> list[int]:
    """Online logical CPUs that have a ``cpuN`` directory."""
    present = sorted(int(name[3:]) for name in os.listdir(cpu_dir)
                     if re.fullmatch(r"cpu\d+", name) and os.path.isdir(os.path.join(cpu_dir, name)))
    try:
        online = set(parse_cpu_list(_read(os.path.join(cpu_dir, "online"))))
    except FileNotFoundError:
        online = None
    cpus = []
    for c in present:
        if online is not None:
            if c in online:
                cpus.append(c)
            continue
        # Without the global list, each hot-pluggable CPU has its own flag;
        # CPUs without one (usually cpu0) cannot go offline.
        try:
            if _read(os.path.join(cpu_dir, f"cpu{c}", "online")) == "0":
                continue
        except FileNotFoundError:
            pass
        cpus.append(c)
    return cpus


def _fallback(distances, wanted: set[int] | None) -> LocalMachine:
    # Without sysfs the only CPU numbers we can trust are the ones we were
    # given (the affinity mask), else 0..cpu_count-1.
    ids = sorted(wanted) if wanted else list(range(os.cpu_count() or 1))
    n = len(ids)
    # Distances meant for the detected levels do not fit one flat level; the
    # fallback must not fail, so they are used only when they do fit.
    if distances is not None and (isinstance(distances, str) and ":" in distances
                                  or not isinstance(distances, str) and len(distances) != 1):
        distances = None
    h = _build((n,), distances, np.ones(n, dtype=np.int64), node_level=1)
    cpu_ids = np.asarray(ids, dtype=np.int64)
    cpu_ids.setflags(write=False)
    return LocalMachine(h, cpu_ids, "os.cpu_count")


def detect_local(sysfs_root: str | os.PathLike = "/sys", *, cpus: Iterable[int] | None = None,
                 distances: str | Sequence[float] | None = None) -> LocalMachine:
    """Detect this node's hierarchy from ``/sys/devices/system/cpu``.

    Every online CPU is placed by ``(physical_package_id, die_id, core_id)``:
    packages are numbered in the order of their ids, cores within a package in
    the order of ``(die_id, core_id)`` (``core_id`` is only unique within a die
    on multi-die packages, and ids have gaps, e.g. 0-7, 16-23), and the hardware
    threads of a core in the order of their CPU numbers. The hierarchy is
    ``threads:cores:packages`` when some core has more than one online thread,
    else ``cores:packages``. Packages with fewer cores, and cores with fewer
    threads, are padded to the maximum with capacity-0 PEs, so the hierarchy stays
    regular (docs/design.md section 2).

    Parameters
    ----------
    sysfs_root:
        Root of the sysfs tree (tests pass a fake one).
    cpus:
        Restrict to these OS CPU numbers, e.g. ``os.sched_getaffinity(0)`` inside
        a cgroup or a Slurm step. Other CPUs are left out like offline ones: a
        core or package with none of them disappears, partly used ones are
        padded with capacity-0 PEs. :class:`TopologyError` if none is online.
    distances:
        Per-level distances for the hierarchy (default ``1, 10, 100``).

    Falls back to one flat level (``source="os.cpu_count"``) when the CPU
    topology cannot be read: the CPUs in ``cpus`` if given, else
    ``0 .. os.cpu_count()-1``.
    """
    cpu_dir = os.path.join(os.fspath(sysfs_root), "devices", "system", "cpu")
    wanted = None if cpus is None else {int(c) for c in cpus}
    if wanted is not None and not wanted:
        raise TopologyError("detect_local: the set of CPUs to use is empty")
    try:
        online = _online_cpus(cpu_dir)
    except (OSError, TopologyError):
        # No readable sysfs (containers, other OSes): a flat machine is still a
        # valid, if uninformed, description.
        return _fallback(distances, wanted)
    if not online:
        return _fallback(distances, wanted)
    if wanted is not None:
        online = [c for c in online if c in wanted]
        if not online:
            raise TopologyError(f"detect_local: none of CPUs {sorted(wanted)[:8]}"
                                f"{'...' if len(wanted) > 8 else ''} is online")
    try:
        places = []  # (package id, (die id, core id), cpu)
        for c in online:
            topo = os.path.join(cpu_dir, f"cpu{c}", "topology")
            pkg = int(_read(os.path.join(topo, "physical_package_id")))
            core = int(_read(os.path.join(topo, "core_id")))
            try:
                die = int(_read(os.path.join(topo, "die_id")))
            except FileNotFoundError:
                die = 0
            places.append((pkg, (die, core), c))
    except (OSError, ValueError):
        # Missing or garbled topology files: same fallback as no sysfs.
        return _fallback(distances, wanted)

    pkg_ids = sorted({p for p, _, _ in places})
    pkg_index = {p: i for i, p in enumerate(pkg_ids)}
    cores_of = {p: sorted({core for q, core, _ in places if q == p}) for p in pkg_ids}
    core_index = {(p, core): i for p in pkg_ids for i, core in enumerate(cores_of[p])}
    threads_of: dict[tuple, list[int]] = {}
    for p, core, c in places:
        threads_of.setdefault((p, core), []).append(c)

    npkg = len(pkg_ids)
    ncores = max(len(v) for v in cores_of.values())
    nthreads = max(len(v) for v in threads_of.values())
    if nthreads > 1:
        levels = (nthreads, ncores, npkg)
    else:
        levels = (ncores, npkg)
    k = math.prod(levels)
    cpu_ids = np.full(k, -1, dtype=np.int64)
    for (p, core), members in threads_of.items():
        base = (pkg_index[p] * ncores + core_index[(p, core)]) * nthreads
        for t, c in enumerate(sorted(members)):
            cpu_ids[base + t] = c
    caps = (cpu_ids >= 0).astype(np.int64)
    h = _build(levels, distances, caps, node_level=len(levels))
    cpu_ids.setflags(write=False)
    return LocalMachine(h, cpu_ids, "sysfs")


# ------------------------------------------------------------------- Slurm job
_NODELIST_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
_CPUS_VARS = ("SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE")
_NTASKS_VARS = ("SLURM_NTASKS", "SLURM_JOB_NTASKS")


def _first(environ: Mapping[str, str], names: Sequence[str]) -> tuple[str | None, str | None]:
    for name in names:
        value = environ.get(name)
        if value is not None and value.strip():
            return name, value
    return None, None


@dataclass(frozen=True)
class SlurmAllocation:
    """A Slurm job's nodes as seen in its environment.

    Attributes
    ----------
    hosts:
        Host names in the order of the job's node list (``SLURM_NODEID`` order).
    cpus_per_node:
        CPUs Slurm allocated on each host (same order), or ``None`` when no CPU
        variable was set.
    ntasks:
        Number of tasks (``SLURM_NTASKS``, else ``SLURM_JOB_NTASKS``), or ``None``.
    """

    hosts: tuple[str, ...]
    cpus_per_node: tuple[int, ...] | None
    ntasks: int | None = None

    @property
    def nnodes(self) -> int:
        return len(self.hosts)

    @property
    def total_cpus(self) -> int | None:
        return None if self.cpus_per_node is None else sum(self.cpus_per_node)

    def hierarchy(self, cores_per_node_levels: str | Sequence[int] | Hierarchy | None = None,
                  distances: str | Sequence[float] | None = None) -> Hierarchy:
        """The allocation as a regular hierarchy with capacities.

        Without ``cores_per_node_levels`` the hierarchy is ``maxcpus:nnodes``
        (``node_level=1``); nodes with fewer CPUs get capacity 0 on their last PEs.
        With a per-node hierarchy (``"8:2"``, ``(8, 2)`` or a :class:`Hierarchy`,
        e.g. :func:`detect_local`'s), it is ``8:2:nnodes`` with the node levels
        inside the node; a node's PEs keep the per-node capacities, and a node
        with fewer allocated CPUs than slots keeps only its first
        ``cpus_per_node`` slots in PE order. That is an approximation: which CPUs
        Slurm gave is known only on the node itself (its CPU affinity).

        ``distances`` has one entry per level of the result (default
        ``1, 10, 100, ...``).

        Raises
        ------
        TopologyError
            If the CPU counts are unknown and no per-node hierarchy is given, a
            node has no CPUs at all, or the result would have more than
            ``MAX_PES`` PEs (checked before any per-PE array exists).
        """
        if cores_per_node_levels is None:
            if self.cpus_per_node is None:
                raise TopologyError("Slurm environment gives no CPU counts (SLURM_JOB_CPUS_PER_NODE); "
                                    "pass the per-node hierarchy")
            width = max(self.cpus_per_node)
            if width < 1:
                raise TopologyError("Slurm allocation has no CPUs")
            check_pes(width * self.nnodes, f"Slurm allocation {width}:{self.nnodes}")
            caps = np.zeros((self.nnodes, width), dtype=np.int64)
            for i, n in enumerate(self.cpus_per_node):
                caps[i, :n] = 1
            return _build((width, self.nnodes), distances, caps.ravel(), node_level=1)

        if isinstance(cores_per_node_levels, Hierarchy):
            node_levels = cores_per_node_levels.levels
            node_caps = cores_per_node_levels.capacities
        else:
            if isinstance(cores_per_node_levels, str):
                node_levels = Hierarchy.parse(cores_per_node_levels).levels
            else:
                node_levels = Hierarchy(tuple(cores_per_node_levels), None).levels
            node_caps = np.ones(math.prod(node_levels), dtype=np.int64)
        check_pes(math.prod(node_levels) * self.nnodes,
                  f"Slurm allocation {':'.join(map(str, node_levels))}:{self.nnodes}")
        caps = np.tile(node_caps, (self.nnodes, 1))
        if self.cpus_per_node is not None:
            for i, n in enumerate(self.cpus_per_node):
                # Keep the first n slots of the node: cap each PE at what is
                # left of n after the PEs before it.
                before = np.cumsum(caps[i]) - caps[i]
                caps[i] = np.clip(n - before, 0, caps[i])
        levels = tuple(node_levels) + (self.nnodes,)
        return _build(levels, distances, caps.ravel(), node_level=len(node_levels))


def _build(levels: tuple, distances, capacities: np.ndarray, node_level: int) -> Hierarchy:
    if isinstance(distances, str):
        # Reuse the command-line parser for "1:10:100" (same messages).
        return Hierarchy.parse(":".join(map(str, levels)), distances,
                               capacities=capacities, node_level=node_level)
    return Hierarchy(levels, None if distances is None else tuple(distances), capacities,
                     node_level=node_level)


def detect_slurm(environ: Mapping[str, str] | None = None) -> SlurmAllocation | None:
    """Read the job's allocation from Slurm's environment variables.

    Node list: ``SLURM_JOB_NODELIST``, else ``SLURM_NODELIST`` (the root Prolog sees
    only the latter). CPUs: ``SLURM_JOB_CPUS_PER_NODE`` (``32(x6)``), else
    ``SLURM_CPUS_ON_NODE``, which counts the current node only and is assumed for
    every node. Tasks: ``SLURM_NTASKS``, else ``SLURM_JOB_NTASKS``.

    Returns ``None`` when none of these variables is set (not inside Slurm).

    Numbers are ASCII digits; a node may have at most ``MAX_PES`` CPUs and the
    job at most ``MAX_TASKS`` tasks (``procmap.limits``), checked here, before
    anything of that size exists.

    Raises
    ------
    TopologyError
        Naming the variable, when a value is malformed or above those limits, a
        host name is invalid, the node list has duplicates, the CPU list
        describes another number of nodes, or CPU/task variables are set without
        a node list.
    """
    env = os.environ if environ is None else environ
    nl_var, nodelist = _first(env, _NODELIST_VARS)
    cpu_var, cpus_text = _first(env, _CPUS_VARS)
    nt_var, ntasks_text = _first(env, _NTASKS_VARS)
    if nl_var is None:
        if cpu_var is None and nt_var is None:
            return None
        raise TopologyError(f"{cpu_var or nt_var} is set but neither SLURM_JOB_NODELIST nor "
                            "SLURM_NODELIST is")
    try:
        hosts = expand_hostlist(nodelist)
    except TopologyError as exc:
        raise TopologyError(f"{nl_var}: {exc}") from None
    seen: set[str] = set()
    for host in hosts:
        if host in seen:
            raise TopologyError(f"{nl_var}={nodelist!r}: host {host!r} appears twice")
        seen.add(host)

    cpus: tuple[int, ...] | None = None
    if cpu_var == "SLURM_JOB_CPUS_PER_NODE":
        try:
            cpus = tuple(parse_cpus_per_node(cpus_text, len(hosts)))
        except TopologyError as exc:
            raise TopologyError(f"{cpu_var}: {exc} ({nl_var} has {len(hosts)} hosts)") from None
    elif cpu_var is not None:
        try:
            (per_node,) = parse_cpus_per_node(cpus_text)
        except (TopologyError, ValueError):
            raise TopologyError(f"{cpu_var}={cpus_text!r}: expected one CPU count") from None
        cpus = (per_node,) * len(hosts)
    if cpus is not None and any(c < 1 for c in cpus):
        raise TopologyError(f"{cpu_var}={cpus_text!r}: every node must have at least one CPU")
    if cpus is not None and sum(cpus) > MAX_PES:
        raise TopologyError(f"{cpu_var}={cpus_text!r}: {sum(cpus):,} CPUs on {len(hosts):,} "
                            f"hosts; procmap handles at most {MAX_PES:,} PEs")
    ntasks = None if nt_var is None else _parse_ntasks(nt_var, ntasks_text)
    return SlurmAllocation(tuple(hosts), cpus, ntasks)


def _parse_ntasks(var: str, text: str) -> int:
    """``SLURM_NTASKS``: ASCII digits, 1..MAX_TASKS."""
    return parse_count(text, f"{var}={text!r}", 1, MAX_TASKS, TopologyError)


# -------------------------------------------------------------------- summary
def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def describe(h: Hierarchy | DistanceMatrix) -> str:
    """A one-line summary for logs and ``--verbose``.

    ``"hierarchy 4:8:6 (192 PEs, 6 nodes of 32), distances 1:10:100"``; the slot
    count is added when capacities are not all 1.
    """
    slots = h.total_slots
    slot_text = "" if np.array_equal(h.capacities, np.ones(h.k, dtype=np.int64)) else f", {slots} slots"
    if isinstance(h, DistanceMatrix):
        return (f"distance matrix ({h.k} PE{'s' if h.k != 1 else ''}{slot_text}), "
                f"max distance {_fmt(h.distance_matrix().max())}")
    nodes = h.num_nodes
    return (f"hierarchy {h} ({h.k} PE{'s' if h.k != 1 else ''}, {nodes} node{'s' if nodes != 1 else ''} "
            f"of {h.pes_per_node}{slot_text}), distances {h.distance_string()}")
