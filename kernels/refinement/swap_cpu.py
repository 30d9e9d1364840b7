"""Swap refinement for rank placement (strict per-PE capacities).

Label propagation cannot move a task onto a full PE, so rank placement improves a
valid placement with moves that keep it valid: a task moves to a PE with a free
slot, or two tasks on different PEs exchange places. Each accepted step lowers J.
Candidate PEs of a task are the PEs of its neighbours (where its traffic goes), or,
with ``group > 1``, every PE of the aligned group of ``group`` PEs around each
neighbour's PE (a processor's or a node's PEs): a task can then also move next to its
neighbours when their own PEs are full, or swap with a task that has none there.
Sequential and deterministic: tasks are visited in index order.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..common_cpu import distance as _dist


@nb.njit(cache=True, nogil=True)
def _cost_at(u, q, pe, xadj, adjncy, adjwgt, prefix, dist):
    """sum_w C_uw D(q, pe[w]) with every neighbour where it is now."""
    c = 0.0
    for e in range(xadj[u], xadj[u + 1]):
        c += adjwgt[e] * _dist(q, pe[adjncy[e]], prefix, dist)
    return c


@nb.njit(cache=True, nogil=True)
def _edge_weight(u, v, xadj, adjncy, adjwgt):
    # rows are sorted: binary search
    lo = xadj[u]
    hi = xadj[u + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if adjncy[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    if lo < xadj[u + 1] and adjncy[lo] == v:
        return float(adjwgt[lo])
    return 0.0


@nb.njit(cache=True, nogil=True)
def _swap_refine(xadj, adjncy, adjwgt, pe, cap, prefix, dist, max_passes, min_gain, group):
    n = pe.size
    k = cap.size
    count = np.zeros(k, dtype=np.int64)
    for u in range(n):
        count[pe[u]] += 1
    # tasks on each PE (at most cap[p]); slots hold task ids or -1
    start = np.zeros(k + 1, dtype=np.int64)
    for p in range(k):
        start[p + 1] = start[p] + cap[p]
    slot = np.full(start[k], -1, dtype=np.int64)
    fill = np.zeros(k, dtype=np.int64)
    for u in range(n):
        p = pe[u]
        slot[start[p] + fill[p]] = u
        fill[p] += 1
    total_gain = 0.0
    seen = np.full(k, -1, dtype=np.int64)
    for _ in range(max_passes):
        improved = 0
        for u in range(n):
            p = np.int64(pe[u])  # the PE type of the candidates q: _cost_at compiles once
            base_u = _cost_at(u, p, pe, xadj, adjncy, adjwgt, prefix, dist)
            if base_u == 0.0:
                continue
            best = min_gain
            best_q = -1
            best_v = -1
            for e in range(xadj[u], xadj[u + 1]):
                g0 = (pe[adjncy[e]] // group) * group
                for q in range(g0, min(g0 + group, k)):
                    if q == p or seen[q] == u:
                        continue
                    seen[q] = u
                    gain_u = base_u - _cost_at(u, q, pe, xadj, adjncy, adjwgt, prefix, dist)
                    # move into a free slot of q
                    if fill[q] < cap[q] and gain_u > best:
                        best = gain_u
                        best_q = q
                        best_v = -1
                    # or swap with each task v on q
                    for s in range(start[q], start[q] + fill[q]):
                        v = slot[s]
                        c_uv = _edge_weight(u, v, xadj, adjncy, adjwgt)
                        d_pq = _dist(p, q, prefix, dist)
                        gain_v = (_cost_at(v, q, pe, xadj, adjncy, adjwgt, prefix, dist)
                                  - _cost_at(v, p, pe, xadj, adjncy, adjwgt, prefix, dist))
                        # u and v keep their mutual distance; the two cost_at calls that
                        # saw the partner in place counted 0 for the (u, v) edge
                        g = gain_u + gain_v - 2.0 * c_uv * d_pq
                        if g > best:
                            best = g
                            best_q = q
                            best_v = v
            if best_q < 0:
                continue
            # apply: u leaves p for best_q; v (if any) goes to p
            q = best_q
            for s in range(start[p], start[p] + fill[p]):
                if slot[s] == u:
                    slot[s] = slot[start[p] + fill[p] - 1]
                    fill[p] -= 1
                    break
            if best_v >= 0:
                for s in range(start[q], start[q] + fill[q]):
                    if slot[s] == best_v:
                        slot[s] = slot[start[q] + fill[q] - 1]
                        fill[q] -= 1
                        break
                pe[best_v] = p
                slot[start[p] + fill[p]] = best_v
                fill[p] += 1
            pe[u] = q
            slot[start[q] + fill[q]] = u
            fill[q] += 1
            total_gain += best
            improved += 1
        if improved == 0:
            break
    return total_gain


def swap_refine(xadj, adjncy, adjwgt, pe, cap, prefix, dist, *, max_passes: int = 20,
                min_gain: float = 1e-9, group: int = 1) -> float:
    """Improve the valid placement ``pe`` (task -> PE, modified in place).

    ``cap`` is the slots per PE (every PE must hold at most ``cap[p]`` tasks on
    entry; it stays so). ``prefix``/``dist`` describe the hierarchy (``prefix[t] =
    P_{t+1}``). Returns the decrease of ``sum_u cost_at(u)`` = J / 2, i.e. J drops by
    twice the returned value. ``group``: the candidate PEs of a task are the PEs of
    the aligned groups of ``group`` PEs (``b // group``) that hold its neighbours; 1:
    its neighbours' PEs.
    """
    pe_view = pe if pe.dtype == np.int32 else pe.astype(np.int32)
    g = _swap_refine(xadj, adjncy, adjwgt.astype(np.float64, copy=False), pe_view,
                     np.asarray(cap, dtype=np.int64), np.asarray(prefix, dtype=np.int64),
                     np.asarray(dist, dtype=np.float64), max_passes, min_gain,
                     max(1, int(group)))
    if pe_view is not pe:
        pe[:] = pe_view
    return g
