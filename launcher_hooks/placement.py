"""From a mapping (task -> PE) to launcher terms: host and node-local core per rank.

Every launcher hook (Open MPI rankfile, MPICH/Intel machinefile, Slurm hostfile)
needs the same three things, computed here once:

* the *node boundary* of the hierarchy: how many of its levels lie inside one host.
  It is given (``--node-level``) or inferred from the number of hosts;
* the *host capacities*: a host with fewer slots (hostfile ``slots=N``, Slurm
  ``SLURM_JOB_CPUS_PER_NODE``) than PEs per node keeps only its first N PEs; the
  others get capacity 0 (docs/design.md section 2: irregular allocations are a regular
  hierarchy with some PEs at capacity 0);
* per rank ``(host, node-local core)`` with ``node = pe // pes_per_node`` and
  ``core = pe % pes_per_node`` (the PE numbering of docs/design.md section 2), and the
  CPU lists indexed by node-local rank that Slurm ``map_cpu:``, Hydra
  ``-bind-to user:`` and ``I_MPI_PIN_PROCESSOR_LIST`` all take.

Core numbers are the node-local PE numbers, i.e. logical cores in the order of the
hierarchy (hwloc logical order when the hierarchy was read from the machine). If the
OS numbers CPUs differently, check with ``--report-bindings`` /
``--cpu-bind=verbose`` before trusting OS-id based lists.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from procmap.errors import CapacityError, TopologyError
from procmap.topology import Hierarchy, check_host_name

__all__ = [
    "HostLayout", "nodes_per_level", "infer_node_level", "host_layout", "merge_host_slots",
    "locate", "canonical_cores", "runs", "interleaved_hosts", "cpu_lists", "common_list",
    "check_one_rank_per_core", "format_cpus",
]


# ---------------------------------------------------------------- node level
def nodes_per_level(levels: Sequence[int]) -> list[tuple[int, int]]:
    """``(L, nodes)`` for every possible node level, from the top down.

    Node level ``L`` puts the first ``L`` levels inside a node, so there are
    ``prod(levels[L:])`` nodes: for ``4:8:6`` that is ``[(3, 1), (2, 6), (1, 48), (0, 192)]``.
    """
    return [(level, math.prod(levels[level:])) for level in range(len(levels), -1, -1)]


def _level_table(levels: Sequence[int]) -> str:
    parts = []
    for level, nodes in nodes_per_level(levels):
        parts.append(f"{nodes} node{'s' if nodes != 1 else ''} at level {level}")
    return ", ".join(parts)


def infer_node_level(levels: Sequence[int], nhosts: int) -> int:
    """The smallest ``L`` with ``prod(levels[L:]) == nhosts``.

    The smallest ``L`` gives the smallest nodes: a level of size 1 above the node
    boundary (``4:8:1``) does not change the node size, so the choice among equal
    products does not matter for the result.

    Raises
    ------
    TopologyError
        When no level has exactly ``nhosts`` nodes; the message lists how many
        nodes each level would give.
    """
    for level in range(len(levels) + 1):
        if math.prod(levels[level:]) == nhosts:
            return level
    hierarchy = ":".join(map(str, levels))
    raise TopologyError(f"{nhosts} host{'s' if nhosts != 1 else ''} but hierarchy {hierarchy} has "
                        f"{_level_table(levels)}: give one host per node, or --node-level L "
                        "(L levels inside a node) to use the first hosts")


# ---------------------------------------------------------------- host layout
@dataclass(frozen=True)
class HostLayout:
    """A hierarchy whose nodes are named hosts.

    Attributes
    ----------
    hierarchy:
        The machine with ``node_level`` set to the node boundary and capacity 0 on
        the PEs that a host's slot count leaves out.
    hosts:
        Host of every node, in node order (``len(hosts) == hierarchy.num_nodes``).
    node_level_inferred:
        True when the node level was inferred from the number of hosts.
    unused_hosts:
        Hosts given beyond the hierarchy's nodes (only with an explicit node level).
    """

    hierarchy: Hierarchy
    hosts: tuple[str, ...]
    node_level_inferred: bool = False
    unused_hosts: tuple[str, ...] = ()

    @property
    def pes_per_node(self) -> int:
        return self.hierarchy.pes_per_node

    def slots_per_host(self) -> np.ndarray:
        """Usable slots of every host (int64), after capacities."""
        caps = np.asarray(self.hierarchy.capacities, dtype=np.int64)
        return caps.reshape(len(self.hosts), self.pes_per_node).sum(axis=1)


def merge_host_slots(entries: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Merge repeated hosts of a hostfile, adding their slots, in first-seen order.

    A host listed twice is one machine (Open MPI adds the slots up); its position
    in the node order is that of its first line.
    """
    merged: dict[str, int] = {}
    for host, slots in entries:
        merged[host] = merged.get(host, 0) + int(slots)
    return list(merged.items())


def host_layout(hierarchy: Hierarchy, hosts: Sequence[str], slots: Sequence[int] | None = None,
                node_level: int | None = None) -> HostLayout:
    """Put ``hosts`` on the nodes of ``hierarchy``.

    Parameters
    ----------
    hierarchy:
        The machine; its capacities are the starting point (1 slot per PE unless
        ``--slots`` said otherwise).
    hosts:
        Distinct host names; node ``i`` is ``hosts[i]``.
    slots:
        Optional slot count per host (same order). A host with fewer slots than PEs
        per node keeps only its first ``slots`` PEs; more slots than PEs do not add
        any (procmap never puts two ranks on one core).
    node_level:
        Levels inside a node. ``None`` infers it from ``len(hosts)``
        (:func:`infer_node_level`). With an explicit level, extra hosts are left
        unused (listed in :attr:`HostLayout.unused_hosts`).

    Raises
    ------
    TopologyError
        For an empty or duplicated host list, an invalid host name
        (:func:`~procmap.topology.check_host_name`), a node level outside ``0..l``,
        fewer hosts than nodes, or a bad slot list.
    """
    hosts = tuple(hosts)
    if not hosts:
        raise TopologyError("no hosts given")
    seen: set[str] = set()
    for host in hosts:
        check_host_name(host)  # names go verbatim into launcher files
        if host in seen:
            raise TopologyError(f"host {host!r} is listed twice; give every host once")
        seen.add(host)
    levels = hierarchy.levels
    inferred = node_level is None
    if inferred:
        node_level = infer_node_level(levels, len(hosts))
    elif not 0 <= node_level <= len(levels):
        raise TopologyError(f"--node-level {node_level} outside 0..{len(levels)} for hierarchy "
                            f"{hierarchy}")
    nnodes = math.prod(levels[node_level:])
    if len(hosts) < nnodes:
        raise TopologyError(f"{len(hosts)} host{'s' if len(hosts) != 1 else ''} but hierarchy "
                            f"{hierarchy} with node level {node_level} has {nnodes} nodes "
                            f"({math.prod(levels[:node_level])} PEs each); it has "
                            f"{_level_table(levels)}")
    used, unused = hosts[:nnodes], hosts[nnodes:]
    per_node = math.prod(levels[:node_level])
    caps = np.array(hierarchy.capacities, dtype=np.int64).reshape(nnodes, per_node)
    if slots is not None:
        slots = [int(s) for s in slots]
        if len(slots) != len(hosts):
            raise TopologyError(f"{len(slots)} slot counts for {len(hosts)} hosts")
        for i, count in enumerate(slots[:nnodes]):
            if count < 0:
                raise TopologyError(f"host {hosts[i]!r}: slot count {count} is negative")
            # Keep the first `count` PEs of the node: the allocation gives a number
            # of slots, not which cores, so take them in PE order.
            caps[i, count:] = 0
    # with_capacities: same levels and distances, so no second distance warning.
    h = hierarchy.with_capacities(caps.ravel(), node_level=node_level)
    return HostLayout(h, used, inferred, unused)


# ------------------------------------------------------------ per-rank places
def locate(pes: np.ndarray, layout: HostLayout) -> tuple[np.ndarray, np.ndarray]:
    """``(node index, node-local core)`` of every rank: ``pe // ppn`` and ``pe % ppn``."""
    pes = np.asarray(pes, dtype=np.int64)
    ppn = layout.pes_per_node
    return pes // ppn, pes % ppn


def canonical_cores(pes: np.ndarray, hierarchy: Hierarchy) -> np.ndarray:
    """Renumber the cores inside every node without changing J.

    Inside a node, the children of every group (cores of a processor, processors of
    the node, ...) are reordered by the smallest rank they hold; empty children go
    last. That is an automorphism of the hierarchy tree, so every pair of ranks keeps
    its level and J is unchanged. What it buys: the CPU list of a node (node-local
    rank -> core) depends only on *which local ranks share a processor*, not on the
    arbitrary labels the partitioner chose, so nodes holding the same pattern (a
    stencil's translated sub-boxes) get identical lists, and one ``map_cpu:`` /
    ``-bind-to user:`` list can serve all of them. The block placement is unchanged.

    Nodes whose PEs do not all have the same capacity (irregular allocations) are
    left as they are: moving a rank there could put it on a PE with capacity 0.
    """
    pes = np.asarray(pes, dtype=np.int64)
    levels = hierarchy.levels[: hierarchy.node_level]
    ppn = hierarchy.pes_per_node
    if ppn == 1 or pes.size == 0:
        return pes.astype(np.int32)
    caps = np.asarray(hierarchy.capacities).reshape(-1, ppn)
    uniform = (caps == caps[:, :1]).all(axis=1)
    ranks = np.flatnonzero(uniform[pes // ppn])
    sub = pes[ranks]
    # prefix[t] = PEs in one group of level t inside the node (prefix[0] = 1 core).
    prefix = [1]
    for a in levels:
        prefix.append(prefix[-1] * a)
    new_core = np.zeros(sub.size, dtype=np.int64)
    for t in range(1, len(prefix)):
        child = sub // prefix[t - 1]          # group of level t-1 (globally unique id)
        ids, inv = np.unique(child, return_inverse=True)
        key = np.full(ids.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(key, inv, ranks)        # smallest rank held by each child
        parent = ids // levels[t - 1]
        order = np.lexsort((key, parent))     # siblings together, by smallest rank
        sorted_parent = parent[order]
        first = np.searchsorted(sorted_parent, sorted_parent, side="left")
        position = np.empty(ids.size, dtype=np.int64)
        position[order] = np.arange(ids.size) - first
        new_core += position[inv] * prefix[t - 1]
    out = pes.copy()
    out[ranks] = (sub // ppn) * ppn + new_core
    return out.astype(np.int32)


# ---------------------------------------------------------- machinefile runs
def runs(node_of_rank: np.ndarray) -> list[tuple[int, int]]:
    """Run-length encode the node of each rank: ``[(node, count), ...]`` in rank order.

    Consecutive ranks on the same node are merged, so a block placement of 192 ranks
    on 6 nodes gives 6 runs of 32.
    """
    node_of_rank = np.asarray(node_of_rank)
    if node_of_rank.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, node_of_rank[1:] != node_of_rank[:-1]])
    counts = np.diff(np.r_[starts, node_of_rank.size])
    return [(int(node_of_rank[s]), int(c)) for s, c in zip(starts, counts)]


def interleaved_hosts(run_list: Sequence[tuple[int, int]]) -> list[int]:
    """Nodes that appear in more than one run (the rank order leaves and comes back)."""
    count: dict[int, int] = {}
    for node, _ in run_list:
        count[node] = count.get(node, 0) + 1
    return sorted(node for node, c in count.items() if c > 1)


# ----------------------------------------------------------------- CPU lists
def cpu_lists(group_of_rank: np.ndarray, cores: np.ndarray) -> dict[int, list[int]]:
    """Per group (node, or Hydra block), the cores of its ranks in rank order.

    Entry ``i`` of a group's list is the core of the group's ``i``-th rank, i.e. the
    list is indexed by node-local rank (``SLURM_LOCALID``, ``MPI_LOCALRANKID``),
    which is how Slurm ``map_cpu:``, Hydra ``-bind-to user:`` and Intel MPI's
    ``I_MPI_PIN_PROCESSOR_LIST`` read it.
    """
    lists: dict[int, list[int]] = {}
    for group, core in zip(np.asarray(group_of_rank).tolist(), np.asarray(cores).tolist()):
        lists.setdefault(group, []).append(core)
    return lists


def common_list(lists: Sequence[Sequence[int]]) -> list[int] | None:
    """One list that serves every group, or ``None``.

    Launchers apply one list on every node and use only its first entries on a node
    with fewer ranks, so a single list works when every group's list is a prefix of
    the longest one.
    """
    lists = [list(x) for x in lists]
    if not lists:
        return []
    longest = max(lists, key=len)
    for lst in lists:
        if longest[: len(lst)] != lst:
            return None
    return longest


def check_one_rank_per_core(hierarchy: Hierarchy) -> None:
    """Refuse capacities above 1: a launcher file would then oversubscribe cores.

    Two ranks bound to one core is oversubscription, and Open MPI 5 silently drops
    *every* binding of an oversubscribed job.
    """
    caps = np.asarray(hierarchy.capacities)
    if caps.size and int(caps.max()) > 1:
        raise CapacityError(f"capacity {int(caps.max())} on a PE: launcher files bind one rank per "
                            "core, so --slots must be 1 (to use hardware threads, make them a "
                            "level of the hierarchy, e.g. 2:4:8:6)")


def format_cpus(cpus: Sequence[int]) -> str:
    """``[3, 1, 2]`` -> ``"3,1,2"``: the comma form every launcher accepts."""
    return ",".join(str(int(c)) for c in cpus)
