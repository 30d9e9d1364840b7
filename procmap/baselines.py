"""Baseline placements that procmap has to beat.

* ``block``: rank i on slot i -- what ``mpirun`` does by default (fill a node, then
  the next). With more tasks than slots, consecutive tasks share a slot:
  task i goes to slot ``floor(S * i / n)``.
* ``roundrobin``: rank i on node ``i mod N`` (Open MPI ``--map-by node``), taking
  each node's slots in order and skipping full nodes.
* ``random``: the block placement applied to a random permutation of the tasks.

Slots are enumerated PE by PE: PE p contributes ``capacity[p]`` consecutive slots.
A PE may have up to ``MAX_SLOTS`` (2^31 - 2) of them, so only the slots that n tasks
can reach are ever listed: arrays stay of size O(n + k), whatever the capacities.
"""
from __future__ import annotations

import numpy as np

from procmap.errors import CapacityError, TopologyError
from procmap.options import BASELINES  # noqa: F401  (re-exported)



def slot_pes(topology, limit: int | None = None) -> np.ndarray:
    """PE id of every slot, in slot order (int32); only the first ``limit`` slots
    when ``limit`` is given."""
    caps = np.asarray(topology.capacities, dtype=np.int64)
    if limit is not None:
        caps = _first_slots(caps, limit)
    return np.repeat(np.arange(caps.size, dtype=np.int32), caps)


def _first_slots(caps: np.ndarray, count: int) -> np.ndarray:
    """Capacities that keep only the first ``count`` slots in PE order."""
    before = np.cumsum(caps) - caps  # exact: capacities and k are bounded (limits.py)
    return np.clip(count - before, 0, caps)


def _spread(order: np.ndarray, n: int) -> np.ndarray:
    """Assign n tasks to the slot sequence ``order``: one each, or evenly when n > S."""
    total = order.size
    if total == 0:
        raise CapacityError("the machine has no slots (every PE has capacity 0)")
    if n <= total:
        return order[:n].copy()
    idx = (np.arange(n, dtype=np.int64) * total) // n
    return order[idx]


def block(n: int, topology) -> np.ndarray:
    """Task i -> slot i (or slot ``floor(S*i/n)`` when ``n > S``); returns task -> PE."""
    # With n <= S the first n slots are all that is used; with n > S there are
    # fewer than n slots, so both lists have at most n entries.
    return _spread(slot_pes(topology, limit=n), n)


def _node_of_pe(topology) -> np.ndarray:
    k = topology.k
    per_node = getattr(topology, "pes_per_node", 1)
    return np.arange(k, dtype=np.int64) // per_node


def _round_robin_capacities(topology, n: int) -> np.ndarray:
    """Capacities that keep only the slots the first ``n`` round-robin visits reach.

    Round r visits slot r of every node that has one; the first ``n`` visits use
    rounds ``0 .. R-1`` for the smallest ``R`` with ``sum(min(slots of node, R)) >= n``,
    so every node keeps its first ``R`` slots in PE order.
    """
    caps = np.asarray(topology.capacities, dtype=np.int64)
    per_node = getattr(topology, "pes_per_node", 1)
    by_node = caps.reshape(-1, per_node)
    node_slots = by_node.sum(axis=1)
    lo, hi = 0, int(node_slots.max(initial=0))  # binary search for R in lo..hi
    while lo < hi:
        mid = (lo + hi) // 2
        if int(np.minimum(node_slots, mid).sum()) >= n:
            hi = mid
        else:
            lo = mid + 1
    before = np.cumsum(by_node, axis=1) - by_node
    return np.clip(lo - before, 0, by_node).ravel()


def roundrobin(n: int, topology) -> np.ndarray:
    """Task i -> next free slot of node ``i mod N``, skipping full nodes."""
    caps = _round_robin_capacities(topology, n)
    pes = np.repeat(np.arange(caps.size, dtype=np.int32), caps)
    node = _node_of_pe(topology)[pes]
    # position of every slot within its node: 0, 1, 2, ... per node, in slot order
    starts = np.searchsorted(node, node, side="left")
    rank_in_node = np.arange(pes.size) - starts
    # visit slot j of every node before slot j+1 of any node: round-robin order
    order = np.lexsort((node, rank_in_node))
    return _spread(pes[order], n)


def random(n: int, topology, seed: int | None = 0) -> np.ndarray:
    """A random balanced placement: ``block`` on a seeded random permutation of tasks."""
    rng = np.random.default_rng(seed)
    placed = block(n, topology)
    return placed[rng.permutation(n)]


def baseline(name: str, n: int, topology, seed: int | None = 0) -> np.ndarray:
    """Dispatch by name (one of :data:`BASELINES`)."""
    if name == "block":
        return block(n, topology)
    if name == "roundrobin":
        return roundrobin(n, topology)
    if name == "random":
        return random(n, topology, seed)
    raise TopologyError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
