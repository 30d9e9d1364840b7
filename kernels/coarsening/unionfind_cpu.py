"""Union-find coarsening (G-kway, with a coarse-weight cap): the CPU twin.

G-kway (Lee et al., its union-find coarsening) lets every vertex pick one neighbour and
contracts whole connected groups of the picks, instead of pairs: far fewer levels
than a matching. One call of :func:`cluster_ids` computes the coarse ids of one
level in four steps:

1. **Pick** (:func:`cluster_picks`). Every vertex ``u`` picks the eligible neighbour ``v``
   with the largest key ``(w(u,v), -deg(v), hash(u,v,seed), -v)``: the heaviest
   edge, then the neighbour of lower degree (G-kway's score ``c w(u,v) - deg(v)``
   with ``c >= max degree``, written lexicographically so that float weights work
   too), then the seeded symmetric edge hash of :mod:`.coarsen_cpu` (what the
   seed changes: ties only), then the smaller id. ``v`` is eligible when
   ``vwgt[u] + vwgt[v] <= max_vwgt``; a vertex without an eligible neighbour picks
   nobody.
2. **Forest** (:func:`_parents`). The picks form a pseudo-forest, and its only
   cycles are mutual picks ``u <-> v``: around a longer cycle every vertex would
   prefer the next edge to the previous one, so all its edge weights are equal,
   then so are the degrees compared at every vertex, and then the (distinct)
   edge hashes would have to increase all the way round. Self loops are ignored. (Eligibility is symmetric, so a vertex that picks
   nobody is picked by nobody.) Breaking every mutual pair at its smaller vertex
   gives a forest of rooted trees: ``parent[u] = pick[u]``, roots point to
   themselves.
3. **Components** (:func:`_jump`): root and depth of every vertex by pointer
   jumping (``anc[u] = anc[anc[u]]``, double-buffered rounds): ``O(log depth)``
   rounds, each the same on the GPU. This replaces G-kway's min-label propagation
   (``O(diameter)`` rounds) and gives the same components.
4. **Cap** (:func:`_split`). G-kway has no cap on the coarse vertex weight; here
   no cluster may weigh more than ``max_vwgt``. Trees heavier than the cap are
   split into the *minimum number* of connected pieces of weight ``<= max_vwgt``
   by the bottom-up greedy of Kundu & Misra (SIAM J. Comput. 1977): every vertex,
   deepest first, keeps its children's residual pieces lightest first (ties:
   smaller id) while its own piece stays within the cap, and cuts the others off
   as pieces of their own. Trees within the cap are left whole. The kept prefix
   is found without sorting (:func:`_absorb`): a binary search over the child
   weight ``t`` at which the prefix overflows, then the ``q`` smallest ids among
   the children of weight ``t``; the GPU runs the same function per parent.

Coarse ids then number the clusters by their smallest vertex, ascending, in the
format of :func:`.coarsen_cpu.coarse_ids`, so :func:`.coarsen_cpu.contract`
applies unchanged. Clusters are connected in the graph (they are subtrees of pick
edges), every vertex is mapped, and no cluster outweighs ``max_vwgt`` unless it
is a single vertex that does on its own.

Determinism: every loop writes only entries owned by its index and reads state
frozen before it (or runs sequentially), so the output depends only on the input
and the seed, never on the thread count. The GPU twin (:mod:`.unionfind_gpu`) is
bit-identical: everything is integer arithmetic or comparisons of the given weights.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .coarsen_cpu import edge_hash, edge_hash_key, weight_cap

__all__ = ["cluster_ids", "cluster_picks"]


# ----------------------------------------------------------------------- picks
@nb.njit(parallel=True, cache=True, nogil=True)
def _pick(xadj, adjncy, adjwgt, vwgt, cap, seed, pick):
    """pick[u] = u's best eligible neighbour by (w desc, deg asc, hash desc, id asc), or -1."""
    n = xadj.size - 1
    for u in nb.prange(n):
        if xadj[u] == xadj[u + 1]:
            pick[u] = -1
            continue
        cu = vwgt[u]
        best = -1
        best_w = adjwgt[xadj[u]]  # placeholder of the right type: best < 0 guards it
        best_d = 0
        best_h = np.uint64(0)
        have_h = False  # the hash only decides exact (w, deg) ties: computed lazily
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            if v == u or cu + vwgt[v] > cap:
                continue
            w = adjwgt[e]
            d = xadj[v + 1] - xadj[v]
            if best < 0 or w > best_w or (w == best_w and d < best_d):
                best = v
                best_w = w
                best_d = d
                have_h = False
            elif w == best_w and d == best_d:
                if not have_h:
                    best_h = edge_hash(u, best, seed)
                    have_h = True
                h = edge_hash(u, v, seed)
                if h > best_h or (h == best_h and v < best):
                    best = v
                    best_h = h
        pick[u] = best


@nb.njit(parallel=True, cache=True, nogil=True)
def _parents(pick, parent):
    """Forest of the picks: a mutual pair is rooted at its smaller vertex, a vertex
    without a pick is its own root."""
    for u in nb.prange(pick.size):
        v = pick[u]
        if v < 0 or (pick[v] == u and u < v):
            parent[u] = u
        else:
            parent[u] = v


# ------------------------------------------------------------ pointer jumping
@nb.njit(parallel=True, cache=True, nogil=True)
def _jump_round(anc, dist, anc_out, dist_out):
    """One pointer-jumping round (reads one buffer, writes the other). Returns the
    number of vertices whose ancestor was not yet a root."""
    changed = 0
    for u in nb.prange(anc.size):
        a = anc[u]
        b = anc[a]
        anc_out[u] = b
        dist_out[u] = dist[u] + dist[a]
        if b != a:
            changed += 1
    return changed


def _jump(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(root, depth)`` of every vertex of the forest ``parent`` (int32 each)."""
    n = parent.size
    anc = parent.copy()
    dist = (parent != np.arange(n, dtype=np.int32)).astype(np.int32)
    anc2 = np.empty_like(anc)
    dist2 = np.empty_like(dist)
    while _jump_round(anc, dist, anc2, dist2):
        anc, anc2 = anc2, anc
        dist, dist2 = dist2, dist
    # the last round changed nothing: its output equals its input
    return anc, dist


# ------------------------------------------------------------------------ cap
@nb.njit(inline="always", cache=True)
def _weight_upto(t, lo, hi, kids, acc):
    """Summed residual weight of the children kids[lo:hi] weighing at most t."""
    s = 0
    for i in range(lo, hi):
        a = acc[kids[i]]
        if a <= t:
            s += a
    return s


@nb.njit(cache=True, nogil=True)
def _absorb(p, cptr, kids, acc, vwgt, cap, cut):
    """Kundu-Misra step at p: keep the lightest children pieces (ties: smaller id)
    while p's piece stays <= cap, cut the rest. Children's ``acc`` must be final.

    The kept set is a prefix of the children sorted by (acc, id): all children
    lighter than the weight t at which the prefix first overflows, plus the q
    smallest ids among those of weight exactly t. t is found by binary search on
    the weight (at most 63 passes over the children), so no sort is needed and
    the GPU runs this function unchanged, one thread per parent.
    """
    lo = cptr[p]
    hi = cptr[p + 1]
    if lo == hi:
        return
    budget = cap - vwgt[p]  # >= 0: p's children found p eligible
    total = 0
    top = 0
    for i in range(lo, hi):
        a = acc[kids[i]]
        total += a
        top = max(top, a)
    if total <= budget:
        acc[p] = vwgt[p] + total
        return
    # invariant: weight_upto(t_lo) <= budget < weight_upto(t_hi); weight_upto(0)
    # is 0 and weight_upto(top) = total
    t_lo = 0
    t_hi = top
    while t_hi - t_lo > 1:
        mid = t_lo + (t_hi - t_lo) // 2
        if _weight_upto(mid, lo, hi, kids, acc) > budget:
            t_hi = mid
        else:
            t_lo = mid
    t = t_hi
    base = _weight_upto(t_lo, lo, hi, kids, acc)  # all children lighter than t
    q = (budget - base) // t  # how many of weight t still fit (fewer than there are)
    kept = base + q * t
    for i in range(lo, hi):  # kids[lo:hi] are in id order
        c = kids[i]
        a = acc[c]
        if a < t:
            continue
        if a == t and q > 0:
            q -= 1
        else:
            cut[c] = True
    acc[p] = vwgt[p] + kept


@nb.njit(cache=True, nogil=True)
def _children(parent, heavy):
    """Children lists (CSR, ids increasing) of the vertices of the heavy trees."""
    n = parent.size
    cptr = np.zeros(n + 1, dtype=np.int64)
    for c in range(n):
        if heavy[c] and parent[c] != c:
            cptr[parent[c] + 1] += 1
    for p in range(n):
        cptr[p + 1] += cptr[p]
    fill = cptr[:-1].copy()
    kids = np.empty(cptr[n], dtype=np.int32)
    for c in range(n):
        if heavy[c] and parent[c] != c:
            kids[fill[parent[c]]] = c
            fill[parent[c]] += 1
    return cptr, kids


@nb.njit(parallel=True, cache=True, nogil=True)
def _split(parent, root, depth, tree_w, vwgt, cap):
    """Cut every tree heavier than cap into the fewest pieces of weight <= cap.

    Returns the forest of the pieces: ``parent`` with every cut vertex made a root.
    Parents are visited depth by depth, deepest first, so children pieces are final
    before their parent's step; within a depth the parents are independent (each
    writes only its own ``acc`` and its own children's ``cut``), so they run in
    parallel, and the result does not depend on their order.
    """
    n = parent.size
    heavy = np.empty(n, dtype=np.bool_)
    maxd = 0
    for u in range(n):
        heavy[u] = tree_w[root[u]] > cap
        if heavy[u]:
            maxd = max(maxd, depth[u])
    cptr, kids = _children(parent, heavy)
    # heavy vertices bucketed by depth (counting sort)
    dptr = np.zeros(maxd + 2, dtype=np.int64)
    for u in range(n):
        if heavy[u]:
            dptr[depth[u] + 1] += 1
    for d in range(maxd + 1):
        dptr[d + 1] += dptr[d]
    fill = dptr[:-1].copy()
    bydepth = np.empty(dptr[maxd + 1], dtype=np.int32)
    for u in range(n):
        if heavy[u]:
            bydepth[fill[depth[u]]] = u
            fill[depth[u]] += 1
    acc = vwgt.copy()
    cut = np.zeros(n, dtype=np.bool_)
    for d in range(maxd - 1, -1, -1):  # the deepest vertices have no children
        for i in nb.prange(dptr[d], dptr[d + 1]):
            _absorb(bydepth[i], cptr, kids, acc, vwgt, cap, cut)
    out = parent.copy()
    for u in range(n):
        if cut[u]:
            out[u] = u
    return out


@nb.njit(cache=True, nogil=True)
def _tree_weights(root, vwgt):
    """Weight of every tree, stored at its root (0 elsewhere)."""
    tree_w = np.zeros(root.size, dtype=np.int64)
    for u in range(root.size):
        tree_w[root[u]] += vwgt[u]
    return tree_w


# ------------------------------------------------------------------ numbering
@nb.njit(cache=True, nogil=True)
def _number(root):
    """Coarse ids: clusters numbered by their smallest vertex, ascending."""
    n = root.size
    cid = np.full(n, -1, dtype=np.int32)
    cmap = np.empty(n, dtype=np.int32)
    nc = 0
    for u in range(n):  # u increasing: a cluster is first met at its smallest vertex
        r = root[u]
        if cid[r] < 0:
            cid[r] = nc
            nc += 1
        cmap[u] = cid[r]
    return cmap, nc


# ------------------------------------------------------------------------- API
def cluster_ids(xadj, adjncy, adjwgt, vwgt, max_vwgt: int | None = None,
                seed: int = 0) -> tuple[np.ndarray, int]:
    """Union-find (G-kway) clusters with a weight cap: ``(cmap int32, nc)``.

    Every vertex picks its best eligible neighbour (heaviest edge, then lower
    degree, then a seeded hash), clusters are the connected components of the
    picks, and components heavier than ``max_vwgt`` (``None``: no cap) are split
    into the fewest connected pieces within the cap (see the module docstring).
    Coarse ids ``0..nc-1`` number the clusters by their smallest vertex, as
    :func:`.coarsen_cpu.coarse_ids` does; contract with
    ``coarsen_cpu.contract(xadj, adjncy, adjwgt, vwgt, cmap, nc)``.

    Vertex weights must be ``>= 0``. Every cluster is connected in the graph and
    weighs at most ``max_vwgt``, except a single vertex heavier than that on its own.
    """
    xadj, adjncy, adjwgt, vwgt = _inputs(xadj, adjncy, adjwgt, vwgt)
    n = xadj.size - 1
    if n <= 0:
        return np.zeros(0, dtype=np.int32), 0
    cap = weight_cap(max_vwgt)
    pick = _picks(xadj, adjncy, adjwgt, vwgt, cap, seed)
    parent = np.empty(n, dtype=np.int32)
    _parents(pick, parent)
    root, depth = _jump(parent)
    if max_vwgt is not None:
        tree_w = _tree_weights(root, vwgt)
        if tree_w.max() > cap:
            root, _ = _jump(_split(parent, root, depth, tree_w, vwgt, cap))
    cmap, nc = _number(root)
    return cmap, int(nc)


def cluster_picks(xadj, adjncy, adjwgt, vwgt, max_vwgt: int | None = None,
                  seed: int = 0) -> np.ndarray:
    """Step 1 of :func:`cluster_ids` alone: every vertex's pick (int32; -1: none).

    ``pick[u]`` is the eligible neighbour ``v`` (``vwgt[u] + vwgt[v] <= max_vwgt``;
    ``None``: no cap) with the largest key ``(w(u,v), -deg(v), edge_hash(u, v), -v)``
    (module docstring). The GPU twin picks the same.
    """
    xadj, adjncy, adjwgt, vwgt = _inputs(xadj, adjncy, adjwgt, vwgt)
    return _picks(xadj, adjncy, adjwgt, vwgt, weight_cap(max_vwgt), seed)


def _inputs(xadj, adjncy, adjwgt, vwgt):
    """Contiguous arrays of the kernels' dtypes (float edge weights stay float)."""
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int32)
    adjwgt = np.ascontiguousarray(adjwgt)
    if adjwgt.dtype.kind != "f":
        adjwgt = adjwgt.astype(np.int64, copy=False)
    return xadj, adjncy, adjwgt, np.ascontiguousarray(vwgt, dtype=np.int64)


def _picks(xadj, adjncy, adjwgt, vwgt, cap: int, seed: int) -> np.ndarray:
    """:func:`_pick` into a new array, on prepared inputs."""
    pick = np.empty(xadj.size - 1, dtype=np.int32)
    _pick(xadj, adjncy, adjwgt, vwgt, cap, edge_hash_key(seed), pick)
    return pick
