"""Exact per-block weight limits (rank placement, irregular capacities).

Jet's rebalancers enforce one limit for every block. Rank placement needs each
block to stay within its own capacity (a node with 12 free slots next to one with
32), so after refinement this sequential pass moves the cheapest vertices out of
every block above its limit into the best-connected block that has room.
Deterministic: vertices are taken in (loss, id) order.
"""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def _fit(xadj, adjncy, adjwgt, vwgt, part, limits):
    k = limits.size
    n = part.size
    bw = np.zeros(k, dtype=np.int64)
    for u in range(n):
        bw[part[u]] += vwgt[u]
    conn = np.zeros(k, dtype=np.float64)
    moved = 0
    for _ in range(n + 1):  # every round moves at least one vertex or stops
        over = -1
        for b in range(k):
            if bw[b] > limits[b]:
                over = b
                break
        if over < 0:
            return moved
        # cheapest vertex of ``over`` that fits somewhere: loss = own - best conn
        best_u = -1
        best_dest = -1
        best_loss = np.inf
        for u in range(n):
            if part[u] != over:
                continue
            own = 0.0
            for e in range(xadj[u], xadj[u + 1]):
                conn[part[adjncy[e]]] += adjwgt[e]
            own = conn[over]
            dest = -1
            dconn = -1.0
            for e in range(xadj[u], xadj[u + 1]):
                b = part[adjncy[e]]
                if b != over and bw[b] + vwgt[u] <= limits[b] and conn[b] > dconn:
                    dconn = conn[b]
                    dest = b
            for e in range(xadj[u], xadj[u + 1]):
                conn[part[adjncy[e]]] = 0.0
            if dest < 0:
                # no adjacent block has room: the block with the most room
                room = 0
                for b in range(k):
                    if b != over and limits[b] - bw[b] - vwgt[u] >= room:
                        room = limits[b] - bw[b] - vwgt[u]
                        dest = b
                dconn = 0.0
            if dest < 0:
                continue
            loss = (own - dconn) / max(vwgt[u], 1)
            if loss < best_loss:
                best_loss = loss
                best_u = u
                best_dest = dest
        if best_u < 0:
            return -1  # nothing fits anywhere
        bw[over] -= vwgt[best_u]
        bw[best_dest] += vwgt[best_u]
        part[best_u] = best_dest
        moved += 1
    return moved


def fit_to_limits(xadj, adjncy, adjwgt, vwgt, part, limits) -> int:
    """Move vertices until every block ``b`` weighs at most ``limits[b]``.

    ``part`` (int32) is modified in place. Returns the number of moves, or -1 when
    the limits cannot be met by single moves (total weight above total capacity,
    or a vertex heavier than every block's room).

    Each move scans the overloaded block, so this is meant for the small overflow
    left after Jet's rebalancing, not as a general rebalancer.
    """
    return int(_fit(xadj, adjncy, np.asarray(adjwgt, dtype=np.float64), vwgt, part,
                    np.asarray(limits, dtype=np.int64)))
