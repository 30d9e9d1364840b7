"""Coarsening kernels (CPU twins of the GPU kernels): matching and contraction.

One coarsening level of the multilevel pipeline (GPU-IM paper, section 4.2;
DESIGN.md section 4) is

1. a matching: :func:`heavy_edge_matching`, completed by :func:`two_hop_matching`
   (leaf, twin and relative matching, Jet / mt-metis style) when HEM leaves more
   than a quarter of the vertices unmatched;
2. coarse vertex ids: :func:`coarse_ids` (prefix scan over pair leaders);
3. the contraction: :func:`contract` (paper Algorithm 3: per-coarse-vertex hash
   regions sized by the summed fine degrees, self loops dropped, parallel edges
   summed), followed by a sort of every coarse row.

:func:`coarsen_once` chains the three.

Conventions
-----------
* Graphs are plain CSR arrays, symmetric, no self loops: ``xadj`` int64 (n+1),
  ``adjncy`` int32 (2m), ``adjwgt`` int64 or float64 (2m), ``vwgt`` int64 (n).
* A matching is an int32 array ``match`` with ``match[u]`` the partner of ``u``, or
  ``u`` itself when ``u`` is unmatched; always ``match[match[u]] == u``.
* ``max_vwgt``: two vertices ``u, v`` are never paired when ``c(u) + c(v) > max_vwgt``
  (``None``: no cap).
* Determinism: every parallel loop writes only entries owned by its own index and
  reads state frozen at the start of the loop, so the same input and ``seed`` give
  bit-identical output for any number of Numba threads.

The kernels are written as rounds of per-vertex proposals plus a resolution step
(what a GPU does), not as a sequential greedy: a CUDA twin can mirror them loop
by loop.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .common_cpu import mix64 as _mix64

#: HEM stops after this many proposal/handshake rounds (or earlier, when a round
#: matches nothing). On a unit-weight 2D grid rounds 1-3 match 57%, 82%, 90% of the
#: vertices and rounds 4-6 another ~1%; late rounds touch only the few vertices
#: still active, so they cost little.
HEM_MAX_ROUNDS = 8

#: Two-hop matching runs its next stage while more than this fraction of the
#: vertices is unmatched (Jet, GPU-HeiPa: 0.25).
UNMATCHED_THRESHOLD = 0.25

# Coarse rows whose degree upper bound is at most this small are built as a sorted
# array (linear search + insertion) instead of a hash table: cheaper for the typical
# mesh row (bound 8-16, 4-8 distinct neighbours), and the row needs no sort later.
# Measured on 2 cores: 24 is near the best for grids and spatially ordered rggs;
# hashing everything (0) is ~10% faster only on graphs with random vertex order.
_SMALL_ROW = 24

_NO_CAP = np.iinfo(np.int64).max


# --------------------------------------------------------------------- hashing
@nb.njit(inline="always", cache=True)
def _edge_hash(u, v, seed):
    """Tie-break key of the undirected edge {u, v}: symmetric in u, v, seeded."""
    a = min(u, v)
    b = max(u, v)
    key = (np.uint64(a) << np.uint64(32)) | np.uint64(b)
    return _mix64(key ^ seed)


def _seed_key(seed) -> np.uint64:
    # any Python int (also negative or > 64 bit) maps to a well-mixed uint64
    return np.uint64(int(seed) % (1 << 64)) ^ np.uint64(0x9E3779B97F4A7C15)


def _cap(max_vwgt) -> int:
    return _NO_CAP if max_vwgt is None else int(max_vwgt)


# ------------------------------------------------------------------------- HEM
@nb.njit(parallel=True, cache=True)
def _hem_propose(xadj, adjncy, adjwgt, avail, cap, seed, active, pref):
    """pref[u] = best eligible unmatched neighbour of every active u (or -1).

    ``avail[v]`` is ``c(v)`` while v is unmatched and -1 once matched: one array
    holds both facts, so each edge costs one random access instead of two (the
    loop is bound by those accesses on graphs with poor id locality).

    The key of edge {u, v} is (w^2 / (c(u) c(v)), hash(u, v, seed)) compared
    lexicographically: the hash only orders exact rating ties (a "noise" that can
    never change a strict ordering) and is the same seen from u and from v, so the
    keys form one total order on the edges and the heaviest remaining eligible edge
    is always a mutual proposal -- every round with candidates makes progress.
    """
    for i in nb.prange(active.size):
        u = active[i]
        cu = avail[u]
        fu = np.float64(max(cu, 1))  # weight-0 vertices rate as weight 1 (no division by 0)
        best = -1
        best_r = -1.0
        best_h = np.uint64(0)
        have_h = False  # hashes only matter for rating ties: computed lazily
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            cv = avail[v]
            if cv < 0 or cu + cv > cap:
                continue
            w = np.float64(adjwgt[e])  # float: w^2 of a large int64 weight would overflow
            r = w * w / (fu * np.float64(max(cv, 1)))
            if best < 0 or r > best_r:
                best = v
                best_r = r
                have_h = False
            elif r == best_r:
                if not have_h:
                    best_h = _edge_hash(u, best, seed)
                    have_h = True
                h = _edge_hash(u, v, seed)
                if h > best_h or (h == best_h and v < best):
                    best = v
                    best_h = h
        pref[u] = best


@nb.njit(parallel=True, cache=True)
def _hem_resolve(active, pref, match, avail):
    """Handshake: u and pref[u] match iff they prefer each other. Returns #matched.

    Reads only ``pref`` (frozen in this loop); each u writes only its own
    ``match[u]`` and ``avail[u]``, and both endpoints see the same mutual pair.
    """
    count = 0
    for i in nb.prange(active.size):
        u = active[i]
        v = pref[u]
        if v >= 0 and pref[v] == u:
            match[u] = v
            avail[u] = -1
            count += 1
    return count


def heavy_edge_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt=None, seed: int = 0,
                        max_rounds: int = HEM_MAX_ROUNDS) -> np.ndarray:
    """Heavy-edge matching with the ``exp*2`` rating ``w(u,v)^2 / (c(u) c(v))``.

    Rounds of: every unmatched vertex proposes its best-rated unmatched neighbour
    ``v`` with ``c(u) + c(v) <= max_vwgt``; mutual proposals are matched. Stops when
    a round matches nothing or after ``max_rounds`` rounds. Equal ratings are
    ordered by a hash of ``(u, v, seed)``, so ``seed`` picks among equally good
    matchings (e.g. on unit-weight grids). Vertex weights must be ``>= 0``.

    Returns ``match`` (int32): partner of ``u``, or ``u`` when unmatched. Partners
    are always adjacent.
    """
    n = xadj.size - 1
    match = np.arange(n, dtype=np.int32)
    pref = np.full(n, -1, dtype=np.int32)
    avail = np.array(vwgt, dtype=np.int64)  # a copy: -1 marks matched vertices
    cap = _cap(max_vwgt)
    key = _seed_key(seed)
    # vertices that may still match; a vertex without an eligible neighbour never
    # gains one later (eligibility only shrinks), so it leaves the list for good
    active = np.flatnonzero(np.diff(xadj) > 0).astype(np.int32)
    for _ in range(max_rounds):
        if active.size == 0:
            break
        _hem_propose(xadj, adjncy, adjwgt, avail, cap, key, active, pref)
        if _hem_resolve(active, pref, match, avail) == 0:
            break
        active = active[(match[active] == active) & (pref[active] >= 0)]
    return match


# ------------------------------------------------- two-hop: leaves, relatives
@nb.njit(parallel=True, cache=True)
def _pair_by_anchor(xadj, adjncy, vwgt, cap, anchor, match):
    """Pair up unmatched vertices that chose the same anchor (a common neighbour).

    Vertex-parallel over anchors x: x scans its neighbours in id order and pairs
    those with ``anchor[v] == x`` greedily, keeping one vertex pending. Every
    candidate has exactly one anchor, so every ``match`` entry has one writer.
    Returns the number of newly matched vertices.
    """
    n = xadj.size - 1
    count = 0
    for x in nb.prange(n):
        pending = -1
        for e in range(xadj[x], xadj[x + 1]):
            v = adjncy[e]
            if anchor[v] != x:
                continue
            if pending < 0:
                pending = v
            elif vwgt[pending] + vwgt[v] <= cap:
                match[pending] = v
                match[v] = pending
                count += 2
                pending = -1
            elif vwgt[v] < vwgt[pending]:
                pending = v  # the lighter one has the better chance to fit the next
    return count


@nb.njit(parallel=True, cache=True)
def _anchors(xadj, adjncy, adjwgt, match, max_degree, anchor):
    """anchor[v] = matchmaker of every unmatched v with 1 <= deg(v) <= max_degree,
    else -1.

    The matchmaker is the neighbour of minimum degree (ties: heavier edge, then
    smaller id): low-degree matchmakers keep the groups small, which is what makes
    this step cheap on a GPU, and the heavier edge keeps related vertices together.
    With ``max_degree = 1`` these are the leaves, anchored at their only neighbour.
    """
    n = xadj.size - 1
    for v in nb.prange(n):
        anchor[v] = -1
        deg = xadj[v + 1] - xadj[v]
        if match[v] != v or deg == 0 or deg > max_degree:
            continue
        best = -1
        best_d = 0
        best_w = adjwgt[xadj[v]]
        for e in range(xadj[v], xadj[v + 1]):
            x = adjncy[e]
            d = xadj[x + 1] - xadj[x]
            w = adjwgt[e]
            if best < 0 or d < best_d or (d == best_d and (w > best_w or (w == best_w and x < best))):
                best = x
                best_d = d
                best_w = w
        anchor[v] = best


# ------------------------------------------------------------- two-hop: twins
@nb.njit(parallel=True, cache=True)
def _neighbourhood_hash(xadj, adjncy, match, seed, out):
    """Order-independent hash of N(v) (sum of scrambled ids) of unmatched v."""
    n = xadj.size - 1
    for v in nb.prange(n):
        h = np.uint64(0)
        if match[v] == v:
            for e in range(xadj[v], xadj[v + 1]):
                h += _mix64(np.uint64(adjncy[e]) ^ seed)  # wraps mod 2^64
        out[v] = h


@nb.njit(inline="always", cache=True)
def _same_neighbourhood(xadj, adjncy, u, v):
    du = xadj[u + 1] - xadj[u]
    if du != xadj[v + 1] - xadj[v]:
        return False
    a = xadj[u]
    b = xadj[v]
    for i in range(du):  # rows are sorted, so equal sets are equal sequences
        if adjncy[a + i] != adjncy[b + i]:
            return False
    return True


@nb.njit(parallel=True, cache=True)
def _pair_twins(xadj, adjncy, vwgt, cap, order, starts, match):
    """Pair consecutive vertices of each run of equal hashes whose neighbourhoods
    really are equal (checked, so a hash collision never pairs non-twins)."""
    count = 0
    for r in nb.prange(starts.size - 1):
        i = starts[r]
        end = starts[r + 1]
        while i + 1 < end:
            u = order[i]
            v = order[i + 1]
            if vwgt[u] + vwgt[v] <= cap and _same_neighbourhood(xadj, adjncy, u, v):
                match[u] = v
                match[v] = u
                count += 2
                i += 2
            else:
                i += 1
    return count


def _twin_matching(xadj, adjncy, vwgt, cap, key, match) -> None:
    n = xadj.size - 1
    hashes = np.empty(n, dtype=np.uint64)
    _neighbourhood_hash(xadj, adjncy, match, key, hashes)
    # isolated vertices (empty neighbourhood, hash 0) are twins too: pairing them
    # shrinks the graph for free
    cand = np.flatnonzero(match == np.arange(n, dtype=np.int32))
    if cand.size < 2:
        return
    order = cand[np.argsort(hashes[cand], kind="stable")].astype(np.int32)  # stable: runs in id order
    hs = hashes[order]
    starts = np.flatnonzero(np.concatenate(([True], hs[1:] != hs[:-1], [True]))).astype(np.int64)
    _pair_twins(xadj, adjncy, vwgt, cap, order, starts, match)


def _unmatched(match) -> int:
    return int(np.count_nonzero(match == np.arange(match.size, dtype=match.dtype)))


def two_hop_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt=None, seed: int = 0, *,
                     threshold: float = UNMATCHED_THRESHOLD,
                     max_rounds: int = HEM_MAX_ROUNDS) -> np.ndarray:
    """Heavy-edge matching completed by two-hop matching (Jet, LaSalle et al.).

    Runs :func:`heavy_edge_matching`; then, each stage only while more than
    ``threshold * n`` vertices are unmatched:

    * **leaf**: unmatched degree-1 vertices with the same neighbour are paired;
    * **twin**: unmatched vertices with identical neighbour sets (edge weights may
      differ), found by an order-independent neighbourhood hash and a sort;
      equality is *verified*, so a hash collision never pairs non-twins. Isolated
      vertices count as twins;
    * **relative**: every unmatched vertex picks a matchmaker (its minimum-degree
      neighbour, ties to the heavier edge), vertices with the same matchmaker are
      paired.

    Within a group, candidates are paired in id order. All stages respect
    ``max_vwgt``. Partners from these stages need not be adjacent (twins never
    are). Returns ``match`` (int32).
    """
    n = xadj.size - 1
    match = heavy_edge_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt, seed, max_rounds)
    limit = threshold * n
    if _unmatched(match) <= limit:
        return match
    cap = _cap(max_vwgt)
    anchor = np.empty(n, dtype=np.int32)

    _anchors(xadj, adjncy, adjwgt, match, 1, anchor)  # leaves
    _pair_by_anchor(xadj, adjncy, vwgt, cap, anchor, match)
    if _unmatched(match) <= limit:
        return match

    _twin_matching(xadj, adjncy, vwgt, cap, _seed_key(seed), match)
    if _unmatched(match) <= limit:
        return match

    _anchors(xadj, adjncy, adjwgt, match, n, anchor)  # relatives
    _pair_by_anchor(xadj, adjncy, vwgt, cap, anchor, match)
    return match


# ------------------------------------------------------------------ coarse ids
def coarse_ids(match) -> tuple[np.ndarray, int]:
    """Coarse vertex ids of a matching: ``(cmap int32, nc)``.

    Each pair (and each unmatched vertex) is led by its smaller endpoint; leaders
    are numbered in increasing id order by a prefix scan, and both endpoints take
    their leader's number. Raises ``ValueError`` if ``match`` is not symmetric.
    """
    match = np.asarray(match)
    n = match.size
    ids = np.arange(n, dtype=np.int64)
    if n and (match.min() < 0 or match.max() >= n or not np.array_equal(match[match], ids)):
        raise ValueError("match is not a matching: match[match[u]] != u for some u")
    leader = match >= ids
    number = np.cumsum(leader, dtype=np.int64) - 1  # inclusive scan - 1 = exclusive scan at leaders
    cmap = number[np.minimum(ids, match)].astype(np.int32)
    return cmap, int(leader.sum())


# ------------------------------------------------------------------ contraction
@nb.njit(cache=True)
def _members(cmap, nc):
    """Fine members of every coarse vertex (counting sort, ids increasing)."""
    mptr = np.zeros(nc + 1, dtype=np.int64)
    for u in range(cmap.size):
        mptr[cmap[u] + 1] += 1
    for c in range(nc):
        mptr[c + 1] += mptr[c]
    fill = mptr[:-1].copy()
    mem = np.empty(cmap.size, dtype=np.int32)
    for u in range(cmap.size):
        c = cmap[u]
        mem[fill[c]] = u
        fill[c] += 1
    return mptr, mem


@nb.njit(parallel=True, cache=True)
def _degree_bounds(xadj, vwgt, mptr, mem, bound, cvwgt):
    """Algorithm 3 lines 1-3: summed fine degrees bound each coarse degree."""
    for c in nb.prange(mptr.size - 1):
        b = 0
        w = 0
        for i in range(mptr[c], mptr[c + 1]):
            u = mem[i]
            b += xadj[u + 1] - xadj[u]
            w += vwgt[u]
        bound[c] = b
        cvwgt[c] = w


@nb.njit(parallel=True, cache=True)
def _hash_insert(xadj, adjncy, adjwgt, cmap, mptr, mem, off, small_row, hkey, hwgt, cdeg):
    """Algorithm 3 lines 7-10: insert every coarse edge into its row's region.

    Vertex-parallel over coarse vertices: each owns region ``off[c]:off[c+1]``, so
    no atomics are needed (Numba has no CAS on CPU arrays), and fine members and
    their edges are visited in id / CSR order, which fixes the summation order of
    float weights whatever the thread count.

    Regions of at most ``small_row`` slots are kept as a sorted array at the front
    of the region (linear search from the back plus insertion shift): for mesh-like
    rows (4-16 distinct neighbours) this beats hashing and leaves nothing to sort.
    Larger regions are open-addressing hash tables with linear probing keyed by the
    coarse neighbour id (empty slot = -1), sorted on extraction.
    """
    for c in nb.prange(mptr.size - 1):
        lo = off[c]
        size = off[c + 1] - lo
        k = 0
        for i in range(mptr[c], mptr[c + 1]):
            u = mem[i]
            for e in range(xadj[u], xadj[u + 1]):
                d = cmap[adjncy[e]]
                if d == c:
                    continue  # internal edge: a self loop of the coarse graph, dropped
                if size <= small_row:
                    j = lo + k - 1
                    while j >= lo and hkey[j] > d:
                        j -= 1
                    if j >= lo and hkey[j] == d:
                        hwgt[j] += adjwgt[e]
                    else:
                        for t in range(lo + k, j + 1, -1):
                            hkey[t] = hkey[t - 1]
                            hwgt[t] = hwgt[t - 1]
                        hkey[j + 1] = d
                        hwgt[j + 1] = adjwgt[e]
                        k += 1
                else:
                    # multiplicative hash, mapped onto the region by a multiply-shift
                    # (no division): slot = (h * size) >> 32 with h < 2^32
                    h = (np.uint64(d) * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)
                    j = lo + np.int64((h * np.uint64(size)) >> np.uint64(32))
                    while hkey[j] != -1 and hkey[j] != d:
                        j += 1
                        if j == lo + size:
                            j = lo
                    if hkey[j] == -1:
                        hkey[j] = d
                        hwgt[j] = adjwgt[e]
                        k += 1
                    else:
                        hwgt[j] += adjwgt[e]
        cdeg[c] = k


@nb.njit(parallel=True, cache=True)
def _extract_rows(off, small_row, hkey, hwgt, cxadj, cadjncy, cadjwgt):
    """Algorithm 3 line 11 plus a sort: copy each region's occupied slots to the
    coarse CSR, rows sorted by neighbour id (canonical, deterministic output)."""
    for c in nb.prange(cxadj.size - 1):
        lo = cxadj[c]
        hi = cxadj[c + 1]
        if off[c + 1] - off[c] <= small_row:
            # already sorted at the front of the region
            for t in range(hi - lo):
                cadjncy[lo + t] = hkey[off[c] + t]
                cadjwgt[lo + t] = hwgt[off[c] + t]
            continue
        out = lo
        for j in range(off[c], off[c + 1]):
            if hkey[j] != -1:
                cadjncy[out] = hkey[j]
                cadjwgt[out] = hwgt[j]
                out += 1
        if hi - lo <= 32:
            # insertion sort: a short row
            for a in range(lo + 1, hi):
                key = cadjncy[a]
                wk = cadjwgt[a]
                b = a - 1
                while b >= lo and cadjncy[b] > key:
                    cadjncy[b + 1] = cadjncy[b]
                    cadjwgt[b + 1] = cadjwgt[b]
                    b -= 1
                cadjncy[b + 1] = key
                cadjwgt[b + 1] = wk
        else:
            perm = np.argsort(cadjncy[lo:hi])  # keys are distinct: any sort is canonical
            keys = cadjncy[lo:hi][perm]
            wts = cadjwgt[lo:hi][perm]
            cadjncy[lo:hi] = keys
            cadjwgt[lo:hi] = wts


def contract(xadj, adjncy, adjwgt, vwgt, cmap, nc: int, *, small_row: int = _SMALL_ROW):
    """Contract the graph along ``cmap`` (fine vertex -> coarse id in ``0..nc-1``).

    Paper Algorithm 3: bound every coarse degree by the sum of its members' fine
    degrees, give every coarse vertex a region of that size, insert each coarse
    edge ``(cmap[u], cmap[v], w)`` into ``cmap[u]``'s region (hash with linear
    probing), drop edges inside a coarse vertex (self loops), sum parallel edges;
    then compact and sort every row by neighbour id.

    ``cmap`` may come from any clustering, not only a matching. ``small_row``
    (tuning only, the output does not depend on it): regions up to this size are
    sorted arrays instead of hash tables. Returns
    ``(cxadj int64, cadjncy int32, cadjwgt adjwgt.dtype, cvwgt int64)``: a symmetric
    CSR with sorted rows, no self loops; coarse vertex weights are summed.
    """
    cmap = np.asarray(cmap, dtype=np.int32)
    nc = int(nc)
    mptr, mem = _members(cmap, nc)
    bound = np.empty(nc, dtype=np.int64)
    cvwgt = np.empty(nc, dtype=np.int64)
    _degree_bounds(xadj, vwgt, mptr, mem, bound, cvwgt)
    off = np.zeros(nc + 1, dtype=np.int64)
    np.cumsum(bound, out=off[1:])
    hkey = np.full(off[-1], -1, dtype=np.int32)
    hwgt = np.empty(off[-1], dtype=adjwgt.dtype)
    cdeg = np.empty(nc, dtype=np.int64)
    _hash_insert(xadj, adjncy, adjwgt, cmap, mptr, mem, off, small_row, hkey, hwgt, cdeg)
    cxadj = np.zeros(nc + 1, dtype=np.int64)
    np.cumsum(cdeg, out=cxadj[1:])
    cadjncy = np.empty(cxadj[-1], dtype=np.int32)
    cadjwgt = np.empty(cxadj[-1], dtype=adjwgt.dtype)
    _extract_rows(off, small_row, hkey, hwgt, cxadj, cadjncy, cadjwgt)
    return cxadj, cadjncy, cadjwgt, cvwgt


def coarsen_once(xadj, adjncy, adjwgt, vwgt, max_vwgt=None, seed: int = 0):
    """One coarsening level: two-hop matching, coarse ids, contraction.

    Returns ``(cmap, cxadj, cadjncy, cadjwgt, cvwgt)``; the number of coarse
    vertices is ``cvwgt.size``. Project a coarse partition back with
    ``part_fine = part_coarse[cmap]``.
    """
    match = two_hop_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt, seed)
    cmap, nc = coarse_ids(match)
    return (cmap,) + contract(xadj, adjncy, adjwgt, vwgt, cmap, nc)
