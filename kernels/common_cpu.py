"""Small helpers shared by the CPU kernels of several phases: hierarchical distances,
hashing and seed keys, chunking of the parallel loops, input preparation and sorting a
CSR row."""
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


def group_table(prefix):
    """``grp[t, b] = b // P_t`` (``P_0 = 1``, ``P_t = prefix[t - 1]``): the level-t group
    of block ``b``, for :func:`table_level` / :func:`table_distance`."""
    div = np.concatenate(([1], prefix[:-1])).astype(np.int64)
    return (np.arange(int(prefix[-1]), dtype=np.int64)[None, :] // div[:, None]).astype(np.int32)


def level_tables(prefix, dist):
    """``(grp, delta)`` of the group-connectivity gain: ``grp`` is :func:`group_table`,
    ``delta[t] = d_{t+1} - d_t`` (``d_0 = 0``), so that moving a vertex from block ``a``
    to ``b`` changes its cost by ``sum_t delta[t] * (W_t(b) - W_t(a))`` (paper
    equation 1; ``W_t(x)``: its weight into ``x``'s level-t group)."""
    delta = np.diff(np.concatenate(([0.0], np.asarray(dist, dtype=np.float64))))
    return group_table(np.asarray(prefix, dtype=np.int64)), delta


@nb.njit(inline="always", cache=True)
def table_level(p, q, grp):
    """:func:`level_index` read from the group table ``grp`` (:func:`group_table`):
    table lookups instead of integer divisions, which dominate the distance-mode
    loops of the refiners."""
    top = grp.shape[0] - 1    # the last level holds every block
    t = 0
    while t < top and grp[t + 1, p] != grp[t + 1, q]:
        t += 1
    return t


@nb.njit(inline="always", cache=True)
def table_distance(p, q, grp, dist):
    """:func:`distance` read from the group table ``grp``."""
    if p == q:
        return 0.0
    return dist[table_level(p, q, grp)]


def seed_key(seed: int) -> np.uint64:
    """The uint64 hash key of ``seed`` for the refinement and rebalancing kernels: their
    tie-breaking hashes are ``mix64(u ^ key)`` of a vertex ``u`` (the weak rebalancer's
    block choice, ISR's step keys). Any Python int maps to a key; the GPU twins use the
    very same value."""
    return np.uint64((int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64)


@nb.njit(inline="always", cache=True)
def mix64(x):
    """splitmix64 finaliser: a bijective scramble of a uint64 (deterministic tie noise)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


# ----------------------------------------------------------------- parallel loops
@nb.njit(cache=True)
def num_chunks(n, k):
    """Chunks of a parallel loop over ``n`` items with per-chunk scratch of ``O(k)``
    entries per level: a function of ``n`` and ``k`` only.

    A chunk spans at least ``max(2048, 2k)`` items (zeroing the scratch costs less than
    the work) and there are at most 4096 chunks. Independence of the thread count keeps
    float reductions (summed chunk by chunk) bit-identical across thread counts.
    """
    span = max(2048, 2 * k)
    return max(1, min(-(-n // span), 4096))


def use_threads() -> bool:
    """Whether kernels of more than one chunk should run on Numba's thread pool (more
    than one thread); otherwise they walk the same chunks serially in their caller."""
    return nb.get_num_threads() > 1


@nb.njit(cache=True, nogil=True)
def largest(a):
    """``a.max()`` of a non-empty array (as a loop: NumPy's reduction costs seconds of
    compile time in every caller)."""
    top = a[0]
    for x in a:
        if x > top:
            top = x
    return top


# ----------------------------------------------------------------- inputs
def float_weights(adjwgt: np.ndarray) -> np.ndarray:
    """Edge weights as float64 for the gain kernels (gains are float64 anyway: one
    compiled variant serves integer and float weights; costs stay exact in the
    weights' own dtype). No copy when they already are."""
    return adjwgt if adjwgt.dtype == np.float64 else adjwgt.astype(np.float64)


def refinement_inputs(xadj, adjncy, adjwgt, vwgt, part, prefix, dist):
    """The inputs of the refinement and rebalancing kernels as contiguous arrays of the
    dtypes they are compiled for (copies only where needed): ``xadj`` int64, ``adjncy``
    int32, ``adjwgt`` int64 or float64 (float weights stay float), ``vwgt`` int64,
    ``part`` int32, ``prefix`` int64, ``dist`` float64. ``vwgt`` and ``dist`` may be
    ``None`` (kept so). Raises ``ValueError`` when ``dist`` and ``prefix`` differ in
    length."""
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int32)
    adjwgt = np.ascontiguousarray(adjwgt)
    if adjwgt.dtype.kind != "f":
        adjwgt = adjwgt.astype(np.int64, copy=False)
    else:
        adjwgt = adjwgt.astype(np.float64, copy=False)
    if vwgt is not None:
        vwgt = np.ascontiguousarray(vwgt, dtype=np.int64)
    part = np.ascontiguousarray(part, dtype=np.int32)
    prefix = np.ascontiguousarray(prefix, dtype=np.int64)
    if dist is not None:
        dist = np.ascontiguousarray(dist, dtype=np.float64)
        if dist.shape != prefix.shape:
            raise ValueError("prefix and dist must have the same length")
    return xadj, adjncy, adjwgt, vwgt, part, prefix, dist


# ----------------------------------------------------------------- block connectivity
# The per-vertex connectivity of the LP-style proposals (jet_cpu, isr_cpu):
# acc[t, g] is the weight from u into level-t group g (grp[t, b] = b // P_t); cut mode
# keeps level 0 only. The adjacent blocks are listed in `touched` (first-seen order),
# `seen` stamps them per vertex, and the entries are cleared after use, so the scratch
# is reused vertex after vertex without a full reset.

@nb.njit(inline="always", cache=True)
def on_boundary(xadj, adjncy, part, u, a):
    """Whether a neighbour of ``u`` lies outside ``u``'s block ``a``: interior vertices
    have nowhere to go (most vertices of a good partition), so callers skip them
    before any scatter work."""
    for e in range(xadj[u], xadj[u + 1]):
        if part[adjncy[e]] != a:
            return True
    return False


@nb.njit(inline="always", cache=True)
def scatter_connectivity(xadj, adjncy, adjwgt, part, grp, cut_mode, u, acc, seen, touched):
    """Sum ``u``'s edge weights (as float64, in CSR order) into ``acc`` by level group;
    returns the number of adjacent blocks listed in ``touched`` (``u``'s own included
    when it has a neighbour there)."""
    nt = 0
    for e in range(xadj[u], xadj[u + 1]):
        b = part[adjncy[e]]
        w = float(adjwgt[e])
        if seen[b] != u:
            seen[b] = u
            touched[nt] = b
            nt += 1
        if cut_mode:
            acc[0, b] += w
        else:
            for t in range(grp.shape[0]):
                acc[t, grp[t, b]] += w
    return nt


@nb.njit(inline="always", cache=True)
def connectivity_gain(acc, grp, delta, cut_mode, a, b, own):
    """Gain of moving from block ``a`` to ``b``: ``conn(b) - conn(a)`` (``own``) in cut
    mode, else paper equation 1, ``sum_t delta[t] * (W_t(b) - W_t(a))``."""
    if cut_mode:
        return acc[0, b] - own
    g = 0.0
    for t in range(grp.shape[0]):
        g += delta[t] * (acc[t, grp[t, b]] - acc[t, grp[t, a]])
    return g


@nb.njit(inline="always", cache=True)
def clear_connectivity(acc, grp, cut_mode, touched, nt):
    """Zero the entries of ``acc`` that the listed blocks used."""
    for j in range(nt):
        b = touched[j]
        if cut_mode:
            acc[0, b] = 0.0
        else:
            for t in range(grp.shape[0]):
                acc[t, grp[t, b]] = 0.0


@nb.njit(cache=True, nogil=True)
def sort_row(adjncy, adjwgt, lo, hi):
    """Sort ``adjncy[lo:hi]`` in place by neighbour id, ``adjwgt`` alongside (stable).

    Insertion sort for short rows (the common case), a merge sort for long ones.
    """
    if hi - lo <= 32:
        for e in range(lo + 1, hi):
            v = adjncy[e]
            w = adjwgt[e]
            f = e - 1
            while f >= lo and adjncy[f] > v:
                adjncy[f + 1] = adjncy[f]
                adjwgt[f + 1] = adjwgt[f]
                f -= 1
            adjncy[f + 1] = v
            adjwgt[f + 1] = w
    else:
        order = np.argsort(adjncy[lo:hi], kind="mergesort")
        ids = adjncy[lo:hi][order]
        wts = adjwgt[lo:hi][order]
        adjncy[lo:hi] = ids
        adjwgt[lo:hi] = wts
