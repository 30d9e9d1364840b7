"""Coarsening kernels (CPU twins of the GPU kernels): matching and contraction.

One coarsening level of the multilevel pipeline (GPU-IM paper, section 4.2;
docs/design.md section 4) is

1. a matching: :func:`heavy_edge_matching`, completed by :func:`two_hop_matching`
   (leaf, twin and relative matching, Jet / mt-metis style) when HEM leaves more
   than a quarter of the vertices unmatched;
2. coarse vertex ids: :func:`coarse_ids` (prefix scan over pair leaders);
3. the contraction: :func:`contract` (paper Algorithm 3 with a dense slot map in
   place of the hash regions, self loops dropped, parallel edges summed), whose
   rows are then sorted by transposing the coarse graph.

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
  reads state frozen at the start of the loop (the contraction's loops run over
  chunks of rows, and what a row gets does not depend on the chunking), so the
  same input and ``seed`` give bit-identical output for any number of Numba
  threads.

The kernels are written as rounds of per-vertex proposals plus a resolution step
(what a GPU does), not as a sequential greedy: a CUDA twin can mirror them loop
by loop.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..common_cpu import mix64 as _mix64

#: Defaults of :func:`two_hop_matching` (and the GPU twin's) for direct calls. The
#: engines pass their own from ``procmap.engines.context.CoarseningContext``
#: (``hem_max_rounds``, ``unmatched_threshold``), which documents them; a test keeps
#: the two equal.
#: HEM stops after this many proposal/handshake rounds (or earlier, when a round
#: matches nothing); late rounds touch only the few vertices still active.
HEM_MAX_ROUNDS = 8

#: Two-hop matching runs its next stage while more than this fraction of the
#: vertices is unmatched (Jet, GPU-HeiPa: 0.25).
UNMATCHED_THRESHOLD = 0.25

_NO_CAP = np.iinfo(np.int64).max


# --------------------------------------------------------------------- hashing
@nb.njit(inline="always", cache=True)
def edge_hash(u, v, key):
    """Tie-break hash of the undirected edge {u, v}: symmetric in ``u``, ``v``, seeded by
    ``key`` (:func:`edge_hash_key`): ``mix64(((min << 32) | max) ^ key)``, a uint64. The
    matching and the union-find clustering (and their CUDA twins) break ties with it."""
    a = min(u, v)
    b = max(u, v)
    return _mix64(((np.uint64(a) << np.uint64(32)) | np.uint64(b)) ^ key)


def edge_hash_key(seed: int) -> np.uint64:
    """The key of :func:`edge_hash` for ``seed``: any Python int (also negative or
    wider than 64 bits) maps to a uint64."""
    return np.uint64(int(seed) % (1 << 64)) ^ np.uint64(0x9E3779B97F4A7C15)


def weight_cap(max_vwgt: int | None) -> int:
    """The coarse vertex weight cap of the kernels: ``max_vwgt``, or the largest int64
    for ``None`` (no cap)."""
    return _NO_CAP if max_vwgt is None else int(max_vwgt)


# ------------------------------------------------------------------------- HEM
# error_model="numpy": no ZeroDivisionError test per edge (the divisor is >= 1)
@nb.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _hem_propose(xadj, adjncy, adjwgt, avail, cap, seed, todo, pref):
    """pref[u] = best eligible unmatched neighbour of every u in ``todo`` (or -1).

    ``avail[v]`` is ``c(v)`` while v is unmatched and -1 once matched: one array
    holds both facts, so each edge costs one random access instead of two (the
    loop is bound by those accesses on graphs with poor id locality).

    The key of edge {u, v} is (w^2 / (c(u) c(v)), hash(u, v, seed)) compared
    lexicographically: the hash only orders exact rating ties (a "noise" that can
    never change a strict ordering) and is the same seen from u and from v, so the
    keys form one total order on the edges and the heaviest remaining eligible edge
    is always a mutual proposal -- every round with candidates makes progress.
    """
    for i in nb.prange(todo.size):
        u = todo[i]
        cu = avail[np.uint64(u)]  # unsigned indices: no negative-index wraparound code
        fu = np.float64(max(cu, 1))  # weight-0 vertices rate as weight 1 (no division by 0)
        best = -1
        best_r = -1.0
        best_h = np.uint64(0)
        have_h = False  # hashes only matter for rating ties: computed lazily
        for e in range(np.uint64(xadj[u]), np.uint64(xadj[u + 1])):
            v = adjncy[e]
            cv = avail[np.uint64(v)]
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
                    best_h = edge_hash(u, best, seed)
                    have_h = True
                h = edge_hash(u, v, seed)
                if h > best_h or (h == best_h and v < best):
                    best = v
                    best_h = h
        pref[np.uint64(u)] = best


@nb.njit(cache=True, nogil=True)
def _hem_handshake(active, na, pref, match, avail, todo):
    """Handshake: u and pref[u] match iff they prefer each other; then compact
    ``active[:na]`` to the vertices that may still match and list in ``todo`` those
    that must propose again. Returns ``(matched, na, nt)``.

    Reads only ``pref`` (frozen in this loop) and writes ``match[u]`` and
    ``avail[u]`` of the u at hand, so it equals a vertex-parallel handshake
    followed by a compaction, in one pass. A vertex without an eligible neighbour
    never gains one (eligibility only shrinks), so it leaves for good. A vertex
    whose choice v stays unmatched keeps it: the best of a shrinking set that
    still holds the old best is the old best, so proposing again would give the
    same ``pref``. v was unmatched when u chose it, so it is taken in this round
    iff its own choice x chose v back.
    """
    matched = 0
    k = 0
    t = 0
    for i in range(na):
        u = active[i]
        v = pref[u]
        if v < 0:
            continue
        x = pref[v]
        if x == u:
            match[u] = v
            avail[u] = -1
            matched += 1
            continue
        active[k] = u
        k += 1
        if x >= 0 and pref[x] == v:
            todo[t] = u
            t += 1
    return matched, k, t


@nb.njit(cache=True, nogil=True)
def _hem_rounds(xadj, adjncy, adjwgt, avail, cap, seed, max_rounds, match, pref):
    """The rounds of :func:`heavy_edge_matching` in one compiled call: no Python
    work (list compaction, launches) per round."""
    n = xadj.size - 1
    active = np.empty(n, dtype=np.int32)
    na = 0
    for u in range(n):
        if xadj[u + 1] > xadj[u]:
            active[na] = u
            na += 1
    todo = active.copy()
    nt = na
    for _ in range(max_rounds):
        if na == 0:
            break
        _hem_propose(xadj, adjncy, adjwgt, avail, cap, seed, todo[:nt], pref)
        matched, na, nt = _hem_handshake(active, na, pref, match, avail, todo)
        if matched == 0:
            break


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
    _hem_rounds(xadj, adjncy, adjwgt, avail, weight_cap(max_vwgt), edge_hash_key(seed),
                int(max_rounds), match, pref)
    return match


# ------------------------------------------------- two-hop: leaves, relatives
@nb.njit(parallel=True, cache=True, nogil=True)
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


@nb.njit(parallel=True, cache=True, nogil=True)
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
@nb.njit(parallel=True, cache=True, nogil=True)
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


@nb.njit(parallel=True, cache=True, nogil=True)
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
    cap = weight_cap(max_vwgt)
    anchor = np.empty(n, dtype=np.int32)

    _anchors(xadj, adjncy, adjwgt, match, 1, anchor)  # leaves
    _pair_by_anchor(xadj, adjncy, vwgt, cap, anchor, match)
    if _unmatched(match) <= limit:
        return match

    _twin_matching(xadj, adjncy, vwgt, cap, edge_hash_key(seed), match)
    if _unmatched(match) <= limit:
        return match

    _anchors(xadj, adjncy, adjwgt, match, n, anchor)  # relatives
    _pair_by_anchor(xadj, adjncy, vwgt, cap, anchor, match)
    return match


# ------------------------------------------------------------------ coarse ids
@nb.njit(cache=True, nogil=True)
def _number_pairs(match, cmap):
    """One pass in id order: a leader (the smaller endpoint) takes the next number,
    its partner (met later) copies it. Returns nc, or -1 if ``match`` is not a
    matching."""
    n = match.size
    nc = 0
    for u in range(n):
        v = match[u]
        if v < 0 or v >= n or match[v] != u:
            return -1
        if v >= u:
            cmap[u] = nc
            nc += 1
        else:
            cmap[u] = cmap[v]
    return nc


def coarse_ids(match) -> tuple[np.ndarray, int]:
    """Coarse vertex ids of a matching: ``(cmap int32, nc)``.

    Each pair (and each unmatched vertex) is led by its smaller endpoint; leaders
    are numbered in increasing id order (a prefix scan over leaders), and both
    endpoints take their leader's number. Raises ``ValueError`` if ``match`` is
    not symmetric.
    """
    match = np.asarray(match)
    cmap = np.empty(match.size, dtype=np.int32)
    nc = _number_pairs(match, cmap)
    if nc < 0:
        raise ValueError("match is not a matching: match[match[u]] != u for some u")
    return cmap, int(nc)


# ------------------------------------------------------------------ contraction
@nb.njit(cache=True, nogil=True)
def _members(xadj, cmap, nc):
    """Fine members of every coarse vertex (counting sort, ids increasing), and
    ``boff``: prefix sums of the coarse degree bounds (Algorithm 3 lines 1-3: a
    coarse vertex has at most as many neighbours as its members have edges)."""
    mptr = np.zeros(nc + 1, dtype=np.int64)
    boff = np.zeros(nc + 1, dtype=np.int64)
    for u in range(cmap.size):
        c = cmap[u]
        mptr[c + 1] += 1
        boff[c + 1] += xadj[u + 1] - xadj[u]
    for c in range(nc):
        mptr[c + 1] += mptr[c]
        boff[c + 1] += boff[c]
    fill = mptr[:-1].copy()
    mem = np.empty(cmap.size, dtype=np.int32)
    for u in range(cmap.size):
        c = cmap[u]
        mem[fill[c]] = u
        fill[c] += 1
    return mptr, mem, boff


@nb.njit(parallel=True, cache=True, nogil=True)
def _gather_rows(xadj, adjncy, adjwgt, vwgt, cmap, mptr, mem, boff, cuts, ckey, cwgt, cdeg,
                 cvwgt):
    """Algorithm 3 lines 4-10 with a dense slot map over coarse ids (as METIS
    contracts) in place of hash regions; rows come out unsorted.

    Parallel over chunks of consecutive coarse vertices: chunk j owns the space
    from ``boff[cuts[j]]`` (its rows' degree bounds) and packs its rows there one
    after another. A chunk's ``slot[d]`` is the place of coarse neighbour d in the
    row being built, -1 if d is not in it yet: the first edge to d claims the next
    place, later ones add their weight, so parallel edges are summed in member-id /
    CSR order whatever the chunking.

    Indices are cast to unsigned: Numba then omits its negative-index wraparound
    (a quarter of this loop's time). Slots that stay valid while they point into the
    current row (no clearing pass) measured no faster, on rgg20, del20 and grid3d_1M.
    """
    nc = mptr.size - 1
    for j in nb.prange(cuts.size - 1):
        slot = np.full(nc, -1, dtype=np.int32)
        pos = np.uint64(boff[cuts[j]])
        for c in range(cuts[j], cuts[j + 1]):
            start = pos
            vw = 0
            for i in range(mptr[c], mptr[c + 1]):
                u = np.uint64(mem[i])
                vw += vwgt[u]
                for e in range(np.uint64(xadj[u]), np.uint64(xadj[u + np.uint64(1)])):
                    d = np.uint64(cmap[np.uint64(adjncy[e])])
                    if d == c:
                        continue  # internal edge: a self loop of the coarse graph, dropped
                    # branch-free (selects): new and known neighbours alternate
                    # unpredictably (rgg: a branch costs a quarter more; grids: even)
                    s = slot[d]
                    new = s < 0
                    at = pos if new else start + np.uint64(s)
                    w = adjwgt[e]
                    summed = cwgt[at] + w  # at == pos reads an unused place: discarded
                    cwgt[at] = w if new else summed
                    ckey[at] = d
                    slot[d] = np.int32(at - start)
                    pos += np.uint64(new)
            for t in range(start, pos):
                slot[np.uint64(ckey[t])] = -1  # cheaper than clearing all nc entries per row
            cdeg[c] = pos - start
            cvwgt[c] = vw


@nb.njit(parallel=True, cache=True, nogil=True)
def _chunk_fill(boff, cuts, cdeg, ckey, cxadj):
    """fill[j, d]: where chunk j's first entry of row d goes in the transposition
    (row start plus the entries that earlier chunks send to row d)."""
    nc = cdeg.size
    fill = np.zeros((cuts.size - 1, nc), dtype=np.int64)
    for j in nb.prange(cuts.size - 1):
        p = np.uint64(boff[cuts[j]])
        for c in range(cuts[j], cuts[j + 1]):
            for _ in range(cdeg[c]):
                fill[j, np.uint64(ckey[p])] += 1
                p += np.uint64(1)
    for d in nb.prange(nc):
        run = cxadj[d]
        for j in range(cuts.size - 1):
            k = fill[j, d]
            fill[j, d] = run
            run += k
    return fill


@nb.njit(parallel=True, cache=True, nogil=True)
def _transpose_rows(boff, cuts, cdeg, ckey, cwgt, fill, cadjncy, cadjwgt):
    """Write every coarse edge (c, d, w) as entry c of row d. Sources are visited
    in increasing c, so every row comes out sorted; the graph is symmetric, so the
    transpose is the coarse graph itself. Returns the number of entries dropped
    because they would land past the end (only a non-symmetric input has any)."""
    mc = cadjncy.size
    lost = 0
    for j in nb.prange(cuts.size - 1):
        p = np.uint64(boff[cuts[j]])
        for c in range(cuts[j], cuts[j + 1]):
            for _ in range(cdeg[c]):
                d = np.uint64(ckey[p])
                q = np.uint64(fill[j, d])
                if q < mc:
                    fill[j, d] = q + np.uint64(1)
                    cadjncy[q] = c
                    cadjwgt[q] = cwgt[p]
                else:
                    lost += 1
                p += np.uint64(1)
    return lost


def _chunk_cuts(boff, chunks: int) -> np.ndarray:
    """Split the coarse ids into ``chunks`` ranges of about equal degree-bound sums."""
    nc = boff.size - 1
    cuts = np.minimum(np.searchsorted(boff, boff[-1] * np.arange(chunks + 1) // chunks), nc)
    cuts[0] = 0
    cuts[-1] = nc
    return cuts


def _chunks(nc: int, entries: int) -> int:
    # every chunk holds a slot array and a fill row over all nc coarse ids: no
    # more chunks than threads, nor (in memory) than the fine graph is large
    return max(1, min(nb.get_num_threads(), entries // max(nc, 1)))


def contract(xadj, adjncy, adjwgt, vwgt, cmap, nc: int):
    """Contract the graph along ``cmap`` (fine vertex -> coarse id in ``0..nc-1``).

    Paper Algorithm 3 with a dense slot map in place of its hash regions: bound
    every coarse degree by the sum of its members' fine degrees, build every coarse
    row from its members' edges ``(cmap[u], cmap[v], w)`` in member-id and CSR
    order, dropping edges inside a coarse vertex (self loops) and summing parallel
    edges; then transpose the rows (a counting sort by neighbour), which sorts
    them without comparisons.

    ``cmap`` may come from any clustering, not only a matching. The graph must be
    symmetric, which the transposition relies on (a ``ValueError`` where coarse in-
    and out-degrees differ; other asymmetric inputs come out transposed). Returns
    ``(cxadj int64, cadjncy int32, cadjwgt adjwgt.dtype, cvwgt int64)``: a symmetric
    CSR with sorted rows, no self loops; coarse vertex weights are summed.

    Float weights: entry ``(d, c)`` holds the weight summed for ``(c, d)`` (members
    of ``c`` by id, their edges in CSR order). A fixed order, so the output is
    bit-identical for any number of threads, but in the last bits it may differ
    from summing the same fine edges from ``d``'s side.
    """
    cmap = np.asarray(cmap, dtype=np.int32)
    nc = int(nc)
    mptr, mem, boff = _members(xadj, cmap, nc)
    cuts = _chunk_cuts(boff, _chunks(nc, adjncy.size))
    ckey = np.empty(boff[-1], dtype=np.int32)
    cwgt = np.empty(boff[-1], dtype=adjwgt.dtype)
    cdeg = np.empty(nc, dtype=np.int64)
    cvwgt = np.empty(nc, dtype=np.int64)
    _gather_rows(xadj, adjncy, adjwgt, vwgt, cmap, mptr, mem, boff, cuts, ckey, cwgt, cdeg, cvwgt)
    cxadj = np.zeros(nc + 1, dtype=np.int64)
    np.cumsum(cdeg, out=cxadj[1:])
    if cuts.size == 2:
        fill = cxadj[:-1].reshape(1, nc).copy()  # one chunk sends row d all its entries
    else:
        fill = _chunk_fill(boff, cuts, cdeg, ckey, cxadj)
    cadjncy = np.empty(cxadj[-1], dtype=np.int32)
    cadjwgt = np.empty(cxadj[-1], dtype=adjwgt.dtype)
    lost = _transpose_rows(boff, cuts, cdeg, ckey, cwgt, fill, cadjncy, cadjwgt)
    if lost or not np.array_equal(fill[-1], cxadj[1:]):
        raise ValueError("contract needs a symmetric graph (some row has no reverse edge)")
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
