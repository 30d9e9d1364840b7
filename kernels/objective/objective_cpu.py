"""Numba kernels for the mapping objective (CPU twins of the GPU kernels).

All kernels walk the CSR once, in parallel over tasks; every CSR entry (u, v) is
visited, so each undirected edge contributes twice -- the published convention
for J (docs/design.md section 3).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..common_cpu import level_index


def _chunks(n: int) -> int:
    # Chunks depend on n alone, never on the thread count: float sums then come out
    # bit-identical for any number of threads. ~16k tasks a chunk, at most 1024 chunks,
    # keeps the load balanced on skewed degree distributions.
    return max(1, min(1024, n // 16384))


@nb.njit(parallel=True, cache=True, nogil=True)
def _level_traffic(xadj, adjncy, adjwgt, pe, prefix, nchunks, out):
    n = xadj.size - 1
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        acc = out[c]
        for u in range(lo, hi):
            p = pe[u]
            for e in range(xadj[u], xadj[u + 1]):
                q = pe[adjncy[e]]
                if p == q:
                    acc[0] += adjwgt[e]
                    continue
                acc[level_index(p, q, prefix) + 1] += adjwgt[e]


def level_traffic(xadj, adjncy, adjwgt, pe, prefix) -> np.ndarray:
    """Traffic per hierarchy level, both directions counted.

    Returns an array ``T`` of length ``l + 1`` (``adjwgt``'s dtype): ``T[0]`` is the
    volume between tasks on the same PE, ``T[t]`` the volume between PEs whose
    deepest common group is at level ``t`` (``prefix = [P_1, ..., P_l]``).
    ``J = sum_t d_t * T[t]``.
    """
    nchunks = _chunks(xadj.size - 1)
    out = np.zeros((nchunks, prefix.size + 1), dtype=adjwgt.dtype)
    _level_traffic(xadj, adjncy, adjwgt, pe, prefix, nchunks, out)
    return out.sum(axis=0)  # fixed chunk order: the same float sum for any thread count


@nb.njit(parallel=True, cache=True, nogil=True)
def _matrix_cost(xadj, adjncy, adjwgt, pe, dist, nchunks, out):
    n = xadj.size - 1
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        j = 0.0
        cut = 0.0
        for u in range(lo, hi):
            p = pe[u]
            for e in range(xadj[u], xadj[u + 1]):
                q = pe[adjncy[e]]
                if p != q:
                    j += adjwgt[e] * dist[p, q]
                    cut += adjwgt[e]
        out[c, 0] = j
        out[c, 1] = cut


def matrix_cost(xadj, adjncy, adjwgt, pe, dist) -> tuple[float, float]:
    """``(J, off-PE volume)`` for an explicit ``k x k`` distance matrix, both directions."""
    nchunks = _chunks(xadj.size - 1)
    out = np.zeros((nchunks, 2), dtype=np.float64)
    _matrix_cost(xadj, adjncy, adjwgt, pe, dist, nchunks, out)
    return float(out[:, 0].sum()), float(out[:, 1].sum())


@nb.njit(cache=True, nogil=True)
def _pe_loads(pe, vwgt, k, loads, counts):
    for u in range(pe.size):
        loads[pe[u]] += vwgt[u]
        counts[pe[u]] += 1


def pe_loads(pe, vwgt, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-PE total task weight and task count (both int64, length ``k``)."""
    loads = np.zeros(k, dtype=np.int64)
    counts = np.zeros(k, dtype=np.int64)
    _pe_loads(pe, vwgt, k, loads, counts)
    return loads, counts
