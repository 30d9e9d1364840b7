"""Placing the vertices a group refinement moved onto PEs of their new group (Numba):
the twin of :mod:`.groups_gpu`.

``im`` refines a level's mapping top-down (docs/design.md section 4): first the
partition of the PEs into the groups of a hierarchy level (nodes, then processors),
each group a block of ``size`` consecutive PEs, then the PEs. A vertex whose group
changed still sits on a PE of its old group; :func:`place_in_groups` gives it the PE
of its new group to which it has the heaviest edges, where its neighbours are. PE
limits are not checked: the J refinement that follows rebalances with Jet's local
moves, whereas a vertex placed on a PE with room away from its neighbours stays there
(docs/design.md section 4).

Rule, per moved vertex ``u`` (independent of every other, so parallel and
deterministic): the candidates are the PEs (before the move) of ``u``'s neighbours that
lie in its new group, the first :data:`MAX_CANDIDATES` of them in row order; the one
with the largest total edge weight from ``u`` wins, ties to the lower PE id; with no
candidate, the least-loaded PE of the group (ties: the lower id).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .jet_cpu import block_weights

__all__ = ["MAX_CANDIDATES", "least_loaded", "place_in_groups"]

#: Candidate PEs examined per moved vertex: each costs a scan of the vertex's row, so a
#: hub that changes group costs at most this many scans.
MAX_CANDIDATES = 32


def least_loaded(load, size: int, xp=np):
    """The least-loaded PE of every group of ``size`` consecutive PEs, given the PE
    weights ``load`` (int64, one per PE; ties: the lower PE id). ``xp``: the array
    module of ``load``, NumPy or CuPy."""
    k = load.size
    return (xp.argmin(load.reshape(k // size, size), axis=1)
            + xp.arange(0, k, size)).astype(xp.int64)


def place_in_groups(xadj, adjncy, adjwgt, vwgt, pes, groups, size: int, k: int) -> np.ndarray:
    """Task -> PE (int32) with task ``u`` on a PE of group ``groups[u]`` (module
    docstring); tasks whose group is ``pes[u] // size`` keep their PE.

    ``pes``: the mapping before the group refinement (``k`` PEs, ``k % size == 0``);
    ``groups``: the refined groups. Neither is modified.
    """
    pes = np.ascontiguousarray(pes, dtype=np.int32)
    groups = np.ascontiguousarray(groups, dtype=np.int32)
    out = np.empty_like(pes)
    least = least_loaded(block_weights(pes, vwgt, k), size)
    _place(xadj, adjncy, adjwgt.astype(np.float64, copy=False), pes, groups, np.int64(size),
           least, np.int64(MAX_CANDIDATES), out)
    return out


@nb.njit(parallel=True, cache=True)
def _place(xadj, adjncy, adjwgt, pes, groups, size, least, max_candidates, out):
    for u in nb.prange(pes.size):
        g = groups[u]
        if pes[u] // size == g:
            out[u] = pes[u]
            continue
        best, best_conn, seen = -1, -1.0, 0
        for i in range(xadj[u], xadj[u + 1]):
            p = pes[adjncy[i]]
            if p // size != g or p == best:
                continue
            seen += 1
            if seen > max_candidates:
                break
            conn = 0.0
            for j in range(xadj[u], xadj[u + 1]):
                if pes[adjncy[j]] == p:
                    conn += adjwgt[j]
            if conn > best_conn or (conn == best_conn and p < best):
                best, best_conn = p, conn
        out[u] = best if best >= 0 else least[g]
