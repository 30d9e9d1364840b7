"""Streaming initial partition (Fennel, Tsourakakis et al., WSDM 2014): the start of a
graph that does not coarsen (power-law graphs).

One pass over the vertices in a given order puts each vertex ``u`` in the block ``b``
with room for it (``load[b] + vwgt[u] <= caps[b]``) that maximises

    conn(u, b) - alpha * gamma * (load[b] / scale[b]) ** (gamma - 1) * vwgt[u]

``conn(u, b)`` being the weight of ``u``'s edges to the vertices already in ``b``: the
edges it would keep inside a block, minus the marginal cost of the load
``alpha * L ** gamma`` of a block. ``scale[b]`` makes blocks of unequal shares
comparable (``k * share[b]``: 1 for equal shares). A vertex for which no block has room
goes to the block with the lowest scaled load (the refinement's rebalancing repairs
that); ties go to the lower block id. Sequential by nature: each decision depends on
all earlier ones, and the result depends only on the inputs.
"""
from __future__ import annotations

import numba as nb
import numpy as np

#: Fennel's exponent of the load cost (the paper's choice: 1.5).
GAMMA = 1.5


@nb.njit(cache=True, nogil=True)
def fennel(xadj, adjncy, adjwgt, vwgt, order, caps, scale, alpha: float,
           gamma: float = GAMMA) -> np.ndarray:
    """Blocks (int32) of the vertices streamed in ``order`` (a permutation of
    ``0..n-1``) into ``caps.size`` blocks: see the module docstring. ``caps`` are the
    blocks' weight limits, ``scale`` their load scales (``k * share``), ``alpha`` the
    weight of the load cost against edge weight."""
    n = xadj.size - 1
    k = caps.size
    part = np.full(n, -1, dtype=np.int32)
    load = np.zeros(k, dtype=np.int64)
    conn = np.zeros(k, dtype=np.float64)
    for i in range(n):
        u = order[i]
        for e in range(xadj[u], xadj[u + 1]):
            b = part[adjncy[e]]
            if b >= 0:
                conn[b] += adjwgt[e]
        w = vwgt[u]
        best, best_score = -1, -np.inf
        fallback, fallback_load = 0, np.inf
        for b in range(k):
            scaled = load[b] / scale[b]
            if scaled < fallback_load:
                fallback, fallback_load = b, scaled
            if load[b] + w <= caps[b]:
                score = conn[b] - alpha * gamma * scaled ** (gamma - 1.0) * w
                if score > best_score:
                    best, best_score = b, score
            conn[b] = 0.0
        if best < 0:
            best = fallback
        part[u] = best
        load[best] += w
    return part
