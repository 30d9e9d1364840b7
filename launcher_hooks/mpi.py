"""In-application rank reordering for mpi4py programs (docs/design.md section 6).

No MPI library actually reorders ranks for ``reorder=True`` (Cart, Graph and
Dist_graph creation keep the identity almost everywhere), so procmap computes the
permutation itself and applies it with the one call every MPI honours::

    newcomm = comm.Split(0, key=new_rank)

Vocabulary used below:

* *task* ``t`` -- row ``t`` of the communication matrix; after reordering it is the
  rank ``t`` of the new communicator (the application does task ``t``'s work there).
* *process* -- an MPI process, named by its rank in the *old* communicator.
* *PE* -- the process's position in the machine hierarchy
  (:class:`~procmap.topology.Hierarchy` numbering, docs/design.md section 2).

``map_tasks`` places tasks on PEs (rank placement: a PE gets at most as many tasks as
it has processes); the process sitting on PE ``p`` then becomes the task placed on
``p``. The hierarchy is either given (processes sit on it in rank order, or at the PEs
you name) or discovered at run time from an allgather of host name, CPU affinity and
sysfs package ids (:func:`discover_hierarchy`).

Example::

    from mpi4py import MPI
    from procmap.launcher_hooks.mpi import reorder

    comm = reorder(MPI.COMM_WORLD, "app.comm")       # matrix from a profiled run
    # or: each rank passes its own row {peer: bytes}
    comm = reorder(MPI.COMM_WORLD, {left: 8e6, right: 8e6})

Every function here is collective over ``comm``. Only the root's ``matrix`` (when it
is a whole matrix), ``hierarchy``, ``distances``, ``engine`` and ``seed`` are used;
rows (dicts) and ``pes`` given as one int are per process. An error while planning
(bad matrix, hierarchy too small, ...) is raised on *every* rank, never left to hang
the others in a collective. mpi4py is imported only by the functions that need it, and
only the root imports the engines (and Numba): the other ranks load neither the
engines nor the kernel cache, so a 1000-rank job reads the cache from one process.
"""
from __future__ import annotations

import dataclasses
import math
import os
import pickle
import socket
import sys
import time
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from procmap.errors import InputError, ProcmapError, TopologyError

__all__ = [
    "ReorderPlan", "ProcessInfo", "reorder", "plan_reorder", "discover_hierarchy",
    "process_info", "hierarchy_from_processes",
]

#: Default distances of the discovered 3-level hierarchy (package, node, network).
DEFAULT_DISTANCES = (1.0, 10.0, 100.0)


# --------------------------------------------------------------------------- process info
@dataclass(frozen=True)
class ProcessInfo:
    """What one process knows about where it runs.

    Attributes
    ----------
    host : ``MPI.Get_processor_name()`` (falls back to the socket host name).
    cpus : sorted OS CPU numbers of ``os.sched_getaffinity(0)``.
    online : the node's online CPUs (``/sys/devices/system/cpu/online``), or None if
        unreadable.
    packages : ``physical_package_id`` of every CPU in ``cpus`` (same order); None when
        the process is unbound or sysfs could not be read.
    cores : ``(die_id, core_id)`` of every CPU in ``cpus``; None like ``packages``.
    """

    host: str
    cpus: tuple
    online: tuple | None = None
    packages: tuple | None = None
    cores: tuple | None = None

    @property
    def bound(self) -> bool:
        """Bound: the affinity is a strict subset of the node's online CPUs."""
        if self.online is None or not self.cpus:
            return False
        return set(self.cpus) < set(self.online)

    @property
    def package(self) -> int | None:
        """The package this process is confined to, or None (unbound, spans packages,
        unknown): such processes are placed at node level only."""
        if not self.bound or not self.packages or len(set(self.packages)) != 1:
            return None
        return int(self.packages[0])


def _read_int(path: str) -> int:
    with open(path) as fh:
        return int(fh.read().strip())


def _parse_cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return cpus


def _host_name() -> str:
    """``MPI.Get_processor_name()`` if mpi4py is already loaded (never initialises MPI)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            if mpi.Is_initialized() and not mpi.Is_finalized():
                return mpi.Get_processor_name()
        except Exception:  # noqa: BLE001 - fall back to the socket name
            pass
    return socket.gethostname()


def process_info(*, host: str | None = None, cpus: Sequence[int] | None = None,
                 sysfs_root: str | os.PathLike = "/sys") -> ProcessInfo:
    """Describe the calling process (never initialises MPI).

    ``cpus`` defaults to ``os.sched_getaffinity(0)``; ``sysfs_root`` lets tests pass
    a fake tree. Unreadable sysfs files give an unbound description, never an error.
    """
    if host is None:
        host = _host_name()
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # not Linux
            cpus = range(os.cpu_count() or 1)
    cpus = tuple(sorted(int(c) for c in cpus))
    cpu_dir = os.path.join(os.fspath(sysfs_root), "devices", "system", "cpu")
    try:
        with open(os.path.join(cpu_dir, "online")) as fh:
            online = tuple(sorted(_parse_cpu_list(fh.read())))
    except (OSError, ValueError):
        online = None
    info = ProcessInfo(host, cpus, online)
    if not info.bound:
        return info  # topology ids are not needed: node level only
    try:
        packages, cores = [], []
        for c in cpus:
            topo = os.path.join(cpu_dir, f"cpu{c}", "topology")
            packages.append(_read_int(os.path.join(topo, "physical_package_id")))
            try:
                die = _read_int(os.path.join(topo, "die_id"))
            except (OSError, ValueError):
                die = 0
            cores.append((die, _read_int(os.path.join(topo, "core_id"))))
    except (OSError, ValueError):
        return info
    return ProcessInfo(host, cpus, online, tuple(packages), tuple(cores))


# ------------------------------------------------------------------- hierarchy discovery
def hierarchy_from_processes(infos: Sequence[ProcessInfo], distances=None):
    """Build the hierarchy whose PEs are the given processes (pure function).

    Levels (leaf first): processes per package group, package groups per node,
    nodes; ``node_level = 2``. Nodes are ordered by the lowest rank on them. On a
    node, the processes confined to one package form a group (groups ordered by
    package id, members by core, then rank); every process that is unbound, spans
    packages or has no readable topology forms a group of its own (it is known to
    be on the node, nothing more), after the package groups, in rank order. Groups
    and nodes are padded to the largest one with capacity-0 PEs.

    Returns ``(hierarchy, pe_of_rank, hosts)``: capacities are 1 exactly where a
    process sits, ``pe_of_rank[r]`` is the PE of the process of rank ``r``,
    ``hosts[i]`` the host name of node ``i``.
    """
    from procmap.topology import Hierarchy

    if not infos:
        raise TopologyError("no processes to build a hierarchy from")
    hosts: list[str] = []
    node_of: dict[str, int] = {}
    for info in infos:
        if info.host not in node_of:
            node_of[info.host] = len(hosts)
            hosts.append(info.host)
    groups_per_node: list[list[list[int]]] = [[] for _ in hosts]
    for node, host in enumerate(hosts):
        ranks = [r for r, info in enumerate(infos) if info.host == host]
        by_package: dict[int, list[int]] = {}
        loose: list[int] = []
        for r in ranks:
            pkg = infos[r].package
            if pkg is None:
                loose.append(r)
            else:
                by_package.setdefault(pkg, []).append(r)
        for pkg in sorted(by_package):
            members = sorted(by_package[pkg],
                             key=lambda r: (min(infos[r].cores), infos[r].cpus, r))
            groups_per_node[node].append(members)
        groups_per_node[node].extend([r] for r in loose)
    a1 = max(len(g) for groups in groups_per_node for g in groups)
    a2 = max(len(groups) for groups in groups_per_node)
    a3 = len(hosts)
    k = a1 * a2 * a3
    caps = np.zeros(k, dtype=np.int64)
    pe_of_rank = np.full(len(infos), -1, dtype=np.int64)
    for node, groups in enumerate(groups_per_node):
        for g, members in enumerate(groups):
            for pos, r in enumerate(members):
                pe = (node * a2 + g) * a1 + pos
                pe_of_rank[r] = pe
                caps[pe] = 1
    if distances is None:
        distances = DEFAULT_DISTANCES
    elif isinstance(distances, str):
        distances = tuple(float(d) for d in _split_distances(distances))
    distances = tuple(float(d) for d in distances)
    if len(distances) != 3:
        raise TopologyError(f"the discovered hierarchy has 3 levels (package, node, network) "
                            f"but {len(distances)} distances were given")
    h = Hierarchy((a1, a2, a3), distances, caps, node_level=2)
    return h, pe_of_rank, tuple(hosts)


def _split_distances(text: str) -> list[float]:
    parts = text.strip().split(":")
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise TopologyError(f"distances {text!r}: expected numbers separated by ':'") from None


def discover_hierarchy(comm, *, distances=None, root: int | None = None,
                       sysfs_root: str | os.PathLike = "/sys"):
    """Collective: allgather every process's :class:`ProcessInfo` and build the hierarchy.

    Returns ``(hierarchy, pe_of_rank, hosts)`` (see :func:`hierarchy_from_processes`)
    on every rank (``root=None``), or on ``root`` only (``None`` elsewhere).
    """
    info = process_info(sysfs_root=sysfs_root)
    if root is None:
        infos = comm.allgather(info)
    else:
        infos = comm.gather(info, root=root)
        if comm.Get_rank() != root:
            return None
    return hierarchy_from_processes(infos, distances)


# --------------------------------------------------------------------------------- plan
@dataclass
class ReorderPlan:
    """The result of :func:`plan_reorder`, identical on every rank (but ``mapping``).

    Attributes
    ----------
    new_rank : int64 array, ``new_rank[r]`` = rank in the new communicator of the
        process that has rank ``r`` in the old one.
    task_pe : int32 array, the mapping task -> PE computed by :func:`procmap.map_tasks`
        (task ``t`` = new rank ``t``).
    pe_of_rank : int64 array, PE of the process of old rank ``r``.
    hierarchy : the hierarchy mapped onto; its capacities are the number of processes
        on each PE.
    source : ``"discovered"`` or ``"given"``.
    hosts : node index -> host name (discovered hierarchies), else None.
    mapping : the :class:`~procmap.mapping.Mapping` (engine, seconds, evaluation), on the
        root only (``None`` elsewhere: the other ranks import mpi4py and numpy, never
        the engines or Numba).
    J : objective of the new placement; J_identity: of keeping the old ranks
        (task ``t`` on the process of old rank ``t``).
    """

    new_rank: np.ndarray
    task_pe: np.ndarray
    pe_of_rank: np.ndarray
    hierarchy: Any
    source: str
    hosts: tuple | None = None
    mapping: Any = field(default=None, repr=False)
    J: float = 0
    J_identity: float = 0

    @property
    def old_rank(self) -> np.ndarray:
        """``old_rank[t]``: old rank of the process that becomes new rank ``t``."""
        return np.argsort(self.new_rank, kind="stable")


def _as_hierarchy(hierarchy, distances):
    from procmap.topology import Hierarchy

    if isinstance(hierarchy, str):
        return Hierarchy.parse(hierarchy, distances)
    if isinstance(hierarchy, (list, tuple)):
        return Hierarchy(tuple(hierarchy), None if distances is None else
                         tuple(_split_distances(distances) if isinstance(distances, str)
                               else distances))
    if distances is not None and isinstance(hierarchy, Hierarchy):
        ds = _split_distances(distances) if isinstance(distances, str) else distances
        return Hierarchy(hierarchy.levels, tuple(ds), hierarchy.capacities, hierarchy.node_level)
    if not hasattr(hierarchy, "prefix_sizes"):
        raise TopologyError("reorder needs a Hierarchy (or a string such as '4:8:6'); explicit "
                            "distance matrices cannot be mapped onto yet")
    return hierarchy


def _block_positions(hierarchy, size: int) -> np.ndarray:
    """Processes in rank order fill the PEs of capacity > 0, each up to its capacity."""
    caps = np.asarray(hierarchy.capacities, dtype=np.int64)
    if int(caps.sum()) < size:
        raise TopologyError(f"hierarchy {hierarchy} has {int(caps.sum())} slots for "
                            f"{size} processes")
    return np.repeat(np.arange(hierarchy.k, dtype=np.int64), caps)[:size]


def _graph_from_rows(rows: Sequence, size: int):
    from procmap.graph import CommGraph

    src: list[int] = []
    dst: list[int] = []
    wgt: list = []
    for r, row in enumerate(rows):
        if row is None:
            continue
        if isinstance(row, MappingABC):
            items = row.items()
        else:
            arr = np.asarray(row)
            if arr.ndim != 1 or arr.shape[0] != size:
                raise InputError(f"row of rank {r}: expected a dict {{peer: volume}} or a "
                                 f"vector of {size} volumes, got shape {arr.shape}")
            nz = np.flatnonzero(arr)
            items = zip(nz.tolist(), arr[nz].tolist())
        for peer, volume in items:
            if isinstance(peer, bool) or not isinstance(peer, (int, np.integer)):
                raise InputError(f"row of rank {r}: peer {peer!r} is not an integer rank")
            if not 0 <= int(peer) < size:
                raise InputError(f"row of rank {r}: peer {int(peer)} out of range for "
                                 f"{size} ranks")
            try:
                v = float(volume)
            except (TypeError, ValueError):
                raise InputError(f"row of rank {r}: volume {volume!r} for peer {int(peer)} "
                                 "is not a number") from None
            if not math.isfinite(v) or v < 0:
                raise InputError(f"row of rank {r}: volume {volume!r} for peer {int(peer)} "
                                 "must be a finite number >= 0")
            src.append(r)
            dst.append(int(peer))
            wgt.append(volume)
    weights = np.asarray(wgt) if wgt else np.zeros(0, dtype=np.int64)
    if weights.dtype.kind not in "iuf":
        weights = weights.astype(np.float64)
    return CommGraph.from_edges(np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                                weights, n=size)


def _root_graph(matrix, rows, size: int):
    """The communication graph on root: a whole matrix given there, else the rows."""
    from procmap.graph import CommGraph

    graph = None
    if isinstance(matrix, CommGraph):
        graph = matrix
    elif isinstance(matrix, (str, os.PathLike)):
        from procmap.formats import read_graph
        graph = read_graph(matrix)
    elif matrix is not None and not isinstance(matrix, MappingABC):
        try:
            import scipy.sparse as sp
            if sp.issparse(matrix):
                graph = CommGraph.from_scipy(matrix)
        except ImportError:  # pragma: no cover - scipy is a dependency
            pass
        if graph is None and np.ndim(matrix) == 2:
            graph = CommGraph.from_dense(np.asarray(matrix))
    if graph is None:
        if all(row is None for row in rows):
            raise InputError("reorder: no communication matrix (pass a CommGraph, a file, a "
                             "dense/sparse matrix on the root, or each rank's row)")
        graph = _graph_from_rows(rows, size)
    if graph.n > size:
        raise InputError(f"the communication matrix has {graph.n} tasks but the communicator "
                         f"has {size} processes")
    if graph.n < size:
        graph = graph.with_num_tasks(size)  # the extra tasks do not communicate
    return graph


def _compute_plan(infos, rows, pes_args, matrix, hierarchy, distances, engine, seed,
                  size: int) -> ReorderPlan:
    """Runs on root only: everything that can fail happens here."""
    from procmap.api import map_tasks
    from procmap.objective import evaluate

    graph = _root_graph(matrix, rows, size)
    hosts = None
    if hierarchy is None:
        if pes_args is not None:
            raise InputError("reorder: 'pes' needs a given hierarchy")
        h, pe_of_rank, hosts = hierarchy_from_processes(infos, distances)
        source = "discovered"
    else:
        h = _as_hierarchy(hierarchy, distances)
        source = "given"
        if pes_args is None:
            pe_of_rank = _block_positions(h, size)
        else:
            if any(p is None for p in pes_args):
                missing = [r for r, p in enumerate(pes_args) if p is None]
                raise InputError(f"reorder: ranks {missing[:8]} gave no PE while others did")
            pe_of_rank = np.asarray(pes_args, dtype=np.int64).ravel()
            if pe_of_rank.shape != (size,):
                raise InputError(f"reorder: expected {size} PEs (one per process), got "
                                 f"{pe_of_rank.size}")
            bad = np.flatnonzero((pe_of_rank < 0) | (pe_of_rank >= h.k))
            if bad.size:
                raise InputError(f"reorder: PE {int(pe_of_rank[bad[0]])} of rank {int(bad[0])} "
                                 f"outside 0..{h.k - 1} of hierarchy {h}")
        # The slots are the processes themselves: every process gets exactly one task.
        h = h.with_capacities(np.bincount(pe_of_rank, minlength=h.k).astype(np.int64))
    mapping = map_tasks(graph, h, engine=engine, seed=seed)
    task_pe = np.asarray(mapping.pes, dtype=np.int64)
    # Tasks on PE p go to the processes on p (several only when a PE holds several
    # processes): both in increasing order, so the result is deterministic.
    order_t = np.lexsort((np.arange(size), task_pe))
    order_p = np.lexsort((np.arange(size), pe_of_rank))
    if not np.array_equal(task_pe[order_t], pe_of_rank[order_p]):
        raise ProcmapError("internal error: the mapping does not fill every process exactly "
                           "once")  # map_tasks keeps capacities; this guards the contract
    new_rank = np.empty(size, dtype=np.int64)
    new_rank[order_p] = order_t
    j_identity = evaluate(graph, h, pe_of_rank).J
    return ReorderPlan(new_rank=new_rank, task_pe=np.asarray(mapping.pes), pe_of_rank=pe_of_rank,
                       hierarchy=h, source=source, hosts=hosts, mapping=mapping, J=mapping.J,
                       J_identity=j_identity)


def _is_row(matrix) -> bool:
    return isinstance(matrix, MappingABC) or (isinstance(matrix, (np.ndarray, list, tuple))
                                               and np.ndim(matrix) == 1)


def plan_reorder(comm, matrix=None, hierarchy=None, *, distances=None, pes=None,
                 engine: str = "auto", seed: int = 0, root: int = 0,
                 sysfs_root: str | os.PathLike = "/sys") -> ReorderPlan:
    """Collective: compute (on ``root``) and broadcast the :class:`ReorderPlan`.

    Parameters
    ----------
    comm : an mpi4py intracommunicator (or anything with ``gather``/``bcast``/``Get_rank``/
        ``Get_size``).
    matrix : the communication matrix, tasks = ranks of ``comm``. On the root: a
        :class:`~procmap.graph.CommGraph`, a file path (:func:`procmap.formats.read_graph`),
        a dense ``n x n`` array or a scipy sparse matrix (row = sender; ``C + C^T`` is
        used). Or, on each rank, that rank's own row: a dict ``{peer_rank: volume}``
        (e.g. ``CommProfiler.matrix()``) or a dense vector of ``comm.size`` volumes; the
        rows are gathered on root. Ranks passing None have an empty row.
    hierarchy : None (discover at run time, see :func:`hierarchy_from_processes`), or a
        :class:`~procmap.topology.Hierarchy` / ``"4:8:6"`` string / level tuple. With a
        given hierarchy the processes sit on its PEs in rank order (each PE of capacity
        c takes c processes), unless ``pes`` says otherwise.
    distances : per-level distances (``"1:10:100"`` or a sequence); default 1, 10, 100.
    pes : with a given hierarchy: the PE of every process (a sequence of ``comm.size``
        ints, read on root) or, per rank, this process's PE (an int, gathered).
    engine, seed : passed to :func:`procmap.map_tasks`.
    root : the rank that reads files and computes the mapping.
    sysfs_root : sysfs tree read for discovery (tests).

    Raises the root's :class:`~procmap.errors.ProcmapError` on every rank.
    """
    rank = comm.Get_rank()
    size = comm.Get_size()
    # Always gathered (cheap): the root alone decides whether to discover.
    info = process_info(sysfs_root=sysfs_root)
    row = matrix if _is_row(matrix) else None
    my_pe = int(pes) if _is_int(pes) else None
    gathered = comm.gather((info, row, my_pe), root=root)
    message = None
    if rank == root:
        try:
            infos = [g[0] for g in gathered]
            rows = [g[1] for g in gathered]
            if pes is not None and not _is_int(pes):
                pes_args = [int(p) for p in np.asarray(pes).ravel()]
            else:
                per_rank = [g[2] for g in gathered]
                pes_args = None if all(p is None for p in per_rank) else per_rank
            plan = _compute_plan(infos, rows, pes_args, matrix, hierarchy, distances, engine,
                                 seed, size)
            # Without the Mapping: unpickling it (its Evaluation) would import the
            # engines and Numba on every rank, for numbers the root already has.
            message = ("ok", dataclasses.replace(plan, mapping=None))
        except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
            message = ("error", _portable(exc))
            _polite_bcast(comm, message, root)
            raise
    message = _polite_bcast(comm, message, root)
    if message[0] == "error":
        raise message[1]
    return plan if rank == root else message[1]


def _polite_bcast(comm, message, root: int):
    """``comm.bcast`` after a barrier that the non-root ranks wait for with short sleeps.

    MPI libraries busy-poll inside blocking collectives; while the root computes the
    mapping, ranks sharing its cores (oversubscribed jobs, tests) would slow it down.
    """
    ibarrier = getattr(comm, "Ibarrier", None)
    if ibarrier is not None:
        request = ibarrier()
        if comm.Get_rank() == root:
            request.Wait()
        else:
            delay = 1e-4
            while not request.Test():
                time.sleep(delay)
                delay = min(2 * delay, 0.01)
    return comm.bcast(message, root=root)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a ProcmapError with its message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return ProcmapError(f"{type(exc).__name__}: {exc}")


def reorder(comm, matrix=None, hierarchy=None, *, distances=None, pes=None,
            engine: str = "auto", seed: int = 0, root: int = 0, return_plan: bool = False,
            sysfs_root: str | os.PathLike = "/sys"):
    """Collective: a new communicator whose rank ``t`` runs on the PE where procmap put task ``t``.

    Returns ``comm.Split(0, key=new_rank)`` (``(newcomm, plan)`` with
    ``return_plan=True``); arguments as in :func:`plan_reorder`. The old communicator
    stays valid; use the new one everywhere the matrix's rank numbering applies, and
    free it when done.
    """
    plan = plan_reorder(comm, matrix, hierarchy, distances=distances, pes=pes, engine=engine,
                        seed=seed, root=root, sysfs_root=sysfs_root)
    newcomm = comm.Split(0, int(plan.new_rank[comm.Get_rank()]))
    if return_plan:
        return newcomm, plan
    return newcomm
