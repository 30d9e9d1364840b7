"""Streaming initial partition (Fennel, Tsourakakis et al., WSDM 2014): the start of a
graph whose coarsening stalled (power-law graphs).

One pass over the vertices in a given order puts each vertex ``u`` in the block ``b``
with room for it (``load[b] + vwgt[u] <= caps[b]``) that maximises

    conn(u, b) - alpha * gamma * (load[b] / scale[b]) ** (gamma - 1) * vwgt[u]

``conn(u, b)`` being the weight of ``u``'s edges to the vertices already in ``b``: the
edges it would keep inside a block, minus the marginal cost of the load
``alpha * L ** gamma`` of a block. ``scale[b]`` makes blocks of unequal shares
comparable (``k * share[b]``: 1 for equal shares). A vertex for which no block has room
goes to the block with the lowest scaled load (the refinement's rebalancing repairs
that); ties go to the lower block id.

Batches. Reading the neighbours' blocks is the whole cost (one random access per
edge), so the order is cut into batches whose ``conn`` rows are gathered in parallel,
each against the blocks of the vertices before its batch; the vertices of a batch then
choose one after the other, in order, with the loads updated as they go. A vertex thus
does not see the neighbours placed in its own batch. Batches grow with the position
(``1 + position // BATCH_DIVISOR`` vertices): the first vertices, the hubs that pull
their neighbours into their blocks, choose one by one, and a batch never holds more
than a small fraction of what was placed before it. The result depends only on the
inputs, never on the thread count.
"""
from __future__ import annotations

import numba as nb
import numpy as np

#: Fennel's exponent of the load cost (the paper's choice: 1.5).
GAMMA = 1.5
#: A batch starting at position ``i`` of the order holds ``1 + i // BATCH_DIVISOR`` vertices.
BATCH_DIVISOR = 32
#: A batch's ``conn`` rows hold at most this many entries (batch size times blocks).
MAX_BATCH_ENTRIES = 1 << 22


@nb.njit(parallel=True, cache=True, nogil=True)
def weighted_degrees(xadj, adjwgt) -> np.ndarray:
    """Each vertex's total edge weight (float64)."""
    n = xadj.size - 1
    out = np.empty(n, dtype=np.float64)
    for u in nb.prange(n):
        total = 0.0
        for e in range(xadj[u], xadj[u + 1]):
            total += adjwgt[e]
        out[u] = total
    return out


@nb.njit(parallel=True, cache=True, nogil=True)
def _gather(xadj, adjncy, adjwgt, part, order, lo, hi, conn):
    """``conn[j, b]``: edge weight from ``order[lo + j]`` to the vertices in block ``b``."""
    for j in nb.prange(hi - lo):
        u = order[lo + j]
        row = conn[j]
        row[:] = 0.0
        for e in range(xadj[u], xadj[u + 1]):
            b = part[adjncy[e]]
            if b >= 0:
                row[b] += adjwgt[e]


@nb.njit(cache=True, nogil=True)
def _choose(vwgt, order, lo, hi, conn, part, load, caps, scale, alpha, gamma):
    """The vertices ``order[lo:hi]`` choose their blocks in order (module docstring)."""
    k = caps.size
    for j in range(hi - lo):
        u = order[lo + j]
        w = vwgt[u]
        best, best_score = -1, -np.inf
        fallback, fallback_load = 0, np.inf
        for b in range(k):
            scaled = load[b] / scale[b]
            if scaled < fallback_load:
                fallback, fallback_load = b, scaled
            if load[b] + w <= caps[b]:
                score = conn[j, b] - alpha * gamma * scaled ** (gamma - 1.0) * w
                if score > best_score:
                    best, best_score = b, score
        if best < 0:
            best = fallback
        part[u] = best
        load[best] += w


def fennel(xadj, adjncy, adjwgt, vwgt, order, caps, scale, alpha: float,
           gamma: float = GAMMA) -> np.ndarray:
    """Blocks (int32) of the vertices streamed in ``order`` (a permutation of
    ``0..n-1``) into ``caps.size`` blocks: see the module docstring. ``caps`` are the
    blocks' weight limits (int64), ``scale`` their load scales (``k * share``),
    ``alpha`` the weight of the load cost against edge weight; ``adjwgt`` is float64."""
    n = xadj.size - 1
    k = caps.size
    part = np.full(n, -1, dtype=np.int32)
    load = np.zeros(k, dtype=np.int64)
    largest = max(1, MAX_BATCH_ENTRIES // k)
    conn = np.empty((min(n, largest), k), dtype=np.float64)
    lo = 0
    while lo < n:
        hi = min(n, lo + min(largest, 1 + lo // BATCH_DIVISOR))
        _gather(xadj, adjncy, adjwgt, part, order, lo, hi, conn)
        _choose(vwgt, order, lo, hi, conn, part, load, caps, scale, float(alpha), float(gamma))
        lo = hi
    return part
