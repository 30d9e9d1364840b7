"""Small Numba helpers shared by the CPU kernels: hierarchical distances and hashing."""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(inline="always", cache=True)
def level_index(p, q, prefix):
    """Index ``t`` (0-based) of the deepest common level of PEs ``p != q``.

    ``prefix[t] = P_{t+1} = a1 * ... * a_{t+1}``; the last entry is ``k``, so the loop
    always ends there.
    """
    t = 0
    while p // prefix[t] != q // prefix[t]:
        t += 1
    return t


@nb.njit(inline="always", cache=True)
def distance(p, q, prefix, dist):
    """``D(p, q)`` of the hierarchy ``prefix``/``dist`` (0 when ``p == q``)."""
    if p == q:
        return 0.0
    return dist[level_index(p, q, prefix)]


@nb.njit(inline="always", cache=True)
def mix64(x):
    """splitmix64 finaliser: a bijective scramble of a uint64 (deterministic tie noise)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x
