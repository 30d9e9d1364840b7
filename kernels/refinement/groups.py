"""Placing the vertices a group refinement moved onto PEs of their new group.

``im`` refines a level's mapping top-down (docs/design.md section 4): first the
partition of the PEs into the groups of a hierarchy level (nodes, then processors),
each group one block of ``size`` PEs and ``size * L_max`` weight, then the PEs
themselves. A vertex whose group changed still sits on a PE of its old group;
:func:`place_in_groups` gives it a PE of the new one.

The function is written once, on the array module ``xp`` (NumPy or CuPy): its work is
proportional to the edges of the moved vertices only (a few border vertices per
level), and every step is a sort, a prefix sum or a scatter that both modules run
well. :func:`procmap.kernels.backend.cpu` / ``gpu`` bind ``xp``.

Rule, in rounds:

1. every unplaced vertex proposes the PE of its new group, with room for it, to which
   it has the heaviest edges (ties: the lower PE id); a vertex with no neighbour there
   proposes the least-loaded PE of its group, if that one has room;
2. each PE accepts its proposals in order of connection (heaviest first, then vertex
   id) while they fit under ``lmax``;
3. after ``rounds`` rounds the vertices left are spread over their group's PEs from the
   least loaded up, even past ``lmax`` (the J refinement that follows rebalances; the
   group's total weight, at most ``size * lmax``, fits).

Deterministic: no randomness, and the result does not depend on the order of
parallel work (sorts are stable on unique keys).
"""
from __future__ import annotations

__all__ = ["place_in_groups"]


def place_in_groups(xp, xadj, adjncy, adjwgt, vwgt, pes, groups, size: int, k: int,
                    lmax: int, rounds: int = 4):
    """Return task -> PE (int32) with task ``v`` on a PE of group ``groups[v]``.

    ``pes`` is the mapping before the group refinement (PE ``p`` lies in group
    ``p // size``; ``k`` PEs, ``k % size == 0``), ``groups`` the refined groups
    (int32). Vertices whose group did not change keep their PE; ``pes`` and
    ``groups`` are not modified. ``lmax`` is the PE weight limit the placement keeps
    where it can (see the module docstring). Arrays are of the module ``xp``.
    """
    pes = xp.asarray(pes, dtype=xp.int32)
    groups = xp.asarray(groups, dtype=xp.int32)
    moved = xp.flatnonzero(groups != pes // size)
    out = pes.copy()
    if moved.size == 0:
        return out
    out[moved] = -1
    placed = out >= 0
    load = xp.bincount(out[placed], weights=vwgt[placed], minlength=k).astype(xp.int64)
    w = vwgt[moved].astype(xp.int64)
    g = groups[moved].astype(xp.int64)
    row, nbr, ew = _rows(xp, xadj, adjncy, adjwgt, moved)
    unplaced = xp.ones(moved.size, dtype=bool)
    for _ in range(rounds):
        prop, conn = _proposals(xp, out, load, w, g, row, nbr, ew, unplaced, size, k, lmax)
        accepted = _accept(xp, prop, conn, w, load, lmax)
        if accepted.size == 0:
            break
        out[moved[accepted]] = prop[accepted]
        load += xp.bincount(prop[accepted], weights=w[accepted], minlength=k).astype(xp.int64)
        unplaced[accepted] = False
        if not bool(unplaced.any()):
            return out
    left = xp.flatnonzero(unplaced)
    if left.size:
        out[moved[left]] = _spread(xp, load, g[left], size, k)
    return out


def _rows(xp, xadj, adjncy, adjwgt, moved):
    """The CSR entries of the vertices ``moved``: (index into ``moved``, neighbour,
    weight) per entry."""
    start = xadj[moved]
    deg = xadj[moved + 1] - start
    row = xp.repeat(xp.arange(moved.size, dtype=xp.int64), deg)
    first = xp.cumsum(deg) - deg
    entry = start[row] + (xp.arange(row.size, dtype=xp.int64) - first[row])
    return row, adjncy[entry].astype(xp.int64), adjwgt[entry]


def _proposals(xp, out, load, w, g, row, nbr, ew, unplaced, size, k, lmax):
    """Each unplaced vertex's proposed PE (-1: none) and its connection to it."""
    n_moved = w.size
    p = out[nbr].astype(xp.int64)
    safe = xp.where(p >= 0, p, 0)
    ok = ((p >= 0) & unplaced[row] & (safe // size == g[row])
          & (load[safe] + w[row] <= lmax))
    key = row[ok] * k + p[ok]
    prop = xp.full(n_moved, -1, dtype=xp.int64)
    conn = xp.zeros(n_moved, dtype=xp.float64)
    if key.size:
        ukey, inv = xp.unique(key, return_inverse=True)
        total = xp.bincount(inv.ravel(), weights=ew[ok].astype(xp.float64))
        r, pe = ukey // k, ukey % k
        # per vertex: heaviest connection first, then the lower PE id (lexsort: last key
        # is the primary one)
        order = xp.lexsort(xp.stack([pe.astype(xp.float64), -total, r.astype(xp.float64)]))
        r, pe, total = r[order], pe[order], total[order]
        head = xp.ones(r.size, dtype=bool)
        head[1:] = r[1:] != r[:-1]
        prop[r[head]] = pe[head]
        conn[r[head]] = total[head]
    # no neighbour in the new group with room: the least-loaded PE of the group
    least = xp.argmin(load.reshape(k // size, size), axis=1) + xp.arange(0, k, size)
    bare = unplaced & (prop < 0)
    fallback = least[g]
    fits = load[fallback] + w <= lmax
    prop = xp.where(bare & fits, fallback, prop)
    return prop, conn


def _accept(xp, prop, conn, w, load, lmax):
    """Indices (into the proposals) that their PEs accept: per PE, heaviest connection
    first (then the lower index), while the accepted weight fits under ``lmax``."""
    cand = xp.flatnonzero(prop >= 0)
    if cand.size == 0:
        return cand
    order = xp.lexsort(xp.stack([cand.astype(xp.float64), -conn[cand],
                                 prop[cand].astype(xp.float64)]))
    cand = cand[order]
    pe, wt = prop[cand], w[cand]
    csum = xp.cumsum(wt)
    head = xp.ones(cand.size, dtype=bool)
    head[1:] = pe[1:] != pe[:-1]
    seg_start = xp.flatnonzero(head)
    seg_of = xp.cumsum(head) - 1
    before = (csum - wt) - (csum - wt)[seg_start][seg_of]  # weight accepted ahead in its PE
    return xp.sort(cand[load[pe] + before + wt <= lmax])


def _spread(xp, load, g, size, k):
    """PEs for the vertices left after the rounds: the ``i``-th vertex of a group (in
    index order) goes to its group's ``i``-th least-loaded PE, cyclically."""
    by_load = xp.argsort(load.reshape(k // size, size), axis=1, kind="stable")
    order = xp.argsort(g, kind="stable")
    gs = g[order]
    head = xp.ones(gs.size, dtype=bool)
    head[1:] = gs[1:] != gs[:-1]
    seg_start = xp.flatnonzero(head)
    rank = xp.arange(gs.size) - seg_start[xp.cumsum(head) - 1]
    pe = xp.empty(g.size, dtype=xp.int64)
    pe[order] = gs * size + by_load[gs, rank % size]
    return pe
