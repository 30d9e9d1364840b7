"""Baseline placements that procmap has to beat.

* ``block``: rank i on slot i -- what ``mpirun`` does by default (fill a node, then
  the next). With more tasks than slots, consecutive tasks share a slot:
  task i goes to slot ``floor(S * i / n)``.
* ``roundrobin``: rank i on node ``i mod N`` (Open MPI ``--map-by node``), taking
  each node's slots in order and skipping full nodes.
* ``random``: the block placement applied to a random permutation of the tasks.

Slots are enumerated PE by PE: PE p contributes ``capacity[p]`` consecutive slots.
"""
from __future__ import annotations

import numpy as np

from procmap.errors import CapacityError, TopologyError

BASELINES = ("block", "roundrobin", "random")


def slot_pes(topology) -> np.ndarray:
    """PE id of every slot, in slot order (int32)."""
    caps = np.asarray(topology.capacities)
    return np.repeat(np.arange(caps.size, dtype=np.int32), caps)


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
    return _spread(slot_pes(topology), n)


def _node_of_pe(topology) -> np.ndarray:
    k = topology.k
    per_node = getattr(topology, "pes_per_node", 1)
    return np.arange(k, dtype=np.int64) // per_node


def roundrobin(n: int, topology) -> np.ndarray:
    """Task i -> next free slot of node ``i mod N``, skipping full nodes."""
    pes = slot_pes(topology)
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
