"""k-way Fiduccia-Mattheyses refinement (sequential, boundary-based), CPU only.

Jet's label propagation is parallel but myopic: it only takes moves that pay off
at once (plus a filtered few), so on meshes it stalls in local optima where a
block border needs a staircase of individually useless moves. FM takes the best
move even when its gain is negative, locks the moved vertex, and at the end of a
pass rolls back to the best prefix of moves: hill climbing that never ends worse.

The objective is the hierarchical J of ``prefix``/``dist`` (cut when ``prefix =
[k]``), the same as :mod:`jet_cpu`. Moves never push a block above ``lmax``.
Deterministic: ties are broken by vertex id and block id.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .common_cpu import distance as _distance


@nb.njit(cache=True, nogil=True)
def _best_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, prefix, dist, conn, blocks):
    """Best destination of ``u`` among its neighbours' blocks with room; ``(b, gain)``."""
    a = part[u]
    nb_ = 0
    for e in range(xadj[u], xadj[u + 1]):
        c = part[adjncy[e]]
        if conn[c] == 0.0:
            blocks[nb_] = c
            nb_ += 1
        conn[c] += adjwgt[e]
    best_b = -1
    best_g = -np.inf
    cut_mode = prefix.size == 1
    for i in range(nb_):
        b = blocks[i]
        if b == a or bw[b] + vwgt[u] > lmax:
            continue
        if cut_mode:
            g = (conn[b] - conn[a]) * dist[0]
        else:
            g = 0.0
            for j in range(nb_):
                c = blocks[j]
                g += conn[c] * (_distance(a, c, prefix, dist) - _distance(b, c, prefix, dist))
        if g > best_g or (g == best_g and b < best_b):
            best_g = g
            best_b = b
    for i in range(nb_):
        conn[blocks[i]] = 0.0
    return best_b, best_g


@nb.njit(cache=True, nogil=True)
def _push(hkey, hval, size, key, val):
    i = size
    hkey[i] = key
    hval[i] = val
    while i > 0:
        p = (i - 1) // 2
        # max-heap on key; smaller vertex id first on ties (determinism)
        if hkey[p] > hkey[i] or (hkey[p] == hkey[i] and hval[p] < hval[i]):
            break
        hkey[p], hkey[i] = hkey[i], hkey[p]
        hval[p], hval[i] = hval[i], hval[p]
        i = p
    return size + 1


@nb.njit(cache=True, nogil=True)
def _pop(hkey, hval, size):
    key = hkey[0]
    val = hval[0]
    size -= 1
    hkey[0] = hkey[size]
    hval[0] = hval[size]
    i = 0
    while True:
        l = 2 * i + 1
        r = l + 1
        m = i
        if l < size and (hkey[l] > hkey[m] or (hkey[l] == hkey[m] and hval[l] < hval[m])):
            m = l
        if r < size and (hkey[r] > hkey[m] or (hkey[r] == hkey[m] and hval[r] < hval[m])):
            m = r
        if m == i:
            break
        hkey[m], hkey[i] = hkey[i], hkey[m]
        hval[m], hval[i] = hval[i], hval[m]
        i = m
    return key, val, size


@nb.njit(cache=True, nogil=True)
def _fm_pass(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, max_stall):
    n = part.size
    bw = np.zeros(k, dtype=np.int64)
    for u in range(n):
        bw[part[u]] += vwgt[u]
    conn = np.zeros(k, dtype=np.float64)
    blocks = np.empty(k, dtype=np.int64)
    locked = np.zeros(n, dtype=np.uint8)
    cap = 4 * xadj[n] + n + 16  # every push is a vertex or a neighbour update
    hkey = np.empty(cap, dtype=np.float64)
    hval = np.empty(cap, dtype=np.int64)
    size = 0
    for u in range(n):
        a = part[u]
        for e in range(xadj[u], xadj[u + 1]):
            if part[adjncy[e]] != a:
                b, g = _best_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, prefix, dist,
                                  conn, blocks)
                if b >= 0:
                    size = _push(hkey, hval, size, g, u)
                break
    moved_v = np.empty(n, dtype=np.int64)
    moved_from = np.empty(n, dtype=np.int64)
    nmoves = 0
    cum = 0.0
    best_cum = 0.0
    best_len = 0
    stall = 0
    while size > 0 and stall < max_stall:
        key, u, size = _pop(hkey, hval, size)
        if locked[u]:
            continue
        b, g = _best_move(u, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, prefix, dist, conn, blocks)
        if b < 0:
            continue
        if g < key:
            if size + 1 < cap:
                size = _push(hkey, hval, size, g, u)  # stale key: requeue with the true gain
            continue
        a = part[u]
        part[u] = b
        bw[a] -= vwgt[u]
        bw[b] += vwgt[u]
        locked[u] = 1
        moved_v[nmoves] = u
        moved_from[nmoves] = a
        nmoves += 1
        cum += g
        if cum > best_cum + 1e-9:
            best_cum = cum
            best_len = nmoves
            stall = 0
        else:
            stall += 1
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            if locked[v] or size + 1 >= cap:
                continue
            bv, gv = _best_move(v, xadj, adjncy, adjwgt, vwgt, part, bw, lmax, prefix, dist,
                                conn, blocks)
            if bv >= 0:
                size = _push(hkey, hval, size, gv, v)
    # roll back the moves after the best prefix
    for i in range(nmoves - 1, best_len - 1, -1):
        part[moved_v[i]] = moved_from[i]
    return best_cum


def fm_refine(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, dist, *,
              max_passes: int = 4, max_stall: int | None = None, min_gain: float = 0.0) -> float:
    """Run FM passes on ``part`` (int32, modified in place) until a pass gains nothing.

    ``max_stall`` moves without a new best end a pass (default ``max(50, n/100)``);
    a pass that gains no more than ``min_gain`` ends the refinement.
    A move's gain is computed over u's own CSR row, i.e. one direction of each edge;
    J counts both directions, so J decreases by exactly twice the returned value.
    """
    n = part.size
    if max_stall is None:
        max_stall = max(50, n // 100)
    w = np.asarray(adjwgt, dtype=np.float64)
    prefix = np.asarray(prefix, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    total = 0.0
    for _ in range(max_passes):
        g = _fm_pass(xadj, adjncy, w, vwgt, part, int(k), int(lmax), prefix, dist, int(max_stall))
        total += g
        if g <= max(min_gain, 1e-9):
            break
    return total
