"""Independent-set refinement (ISR) of G-kway, CPU twin of :mod:`.isr_gpu`.

G-kway (Lee et al., its independent-set refinement) refines a *balanced*
partition with positive-gain moves only, in steps:

1. **Candidates** (:func:`_isr_propose`, parallel over vertices): every boundary
   vertex ``u`` finds its best *legal* destination among the blocks adjacent to it:
   ``gain > 0`` and ``vwgt[u] + W[dst] <= lmax`` (largest gain, ties: smallest
   block id). The gain is the change of ``J`` of :mod:`.jet_cpu` -- in cut mode
   (``len(prefix) == 1``) ``conn(dst) - conn(own)`` in edge weight, otherwise paper
   equation 1 through group connectivities -- computed with the very operations of
   ``jet_cpu._lp_propose``. The hierarchical distance is an ultrametric, so a best
   positive-gain destination is always an adjacent block (gkway.md 4.2).
2. **Independent set** (:func:`_isr_independent`): a candidate survives when its
   priority beats that of every candidate neighbour. Priority: larger gain, then a
   larger hash ``mix64(u ^ key)`` with ``key`` drawn from ``(seed, step)``
   (:func:`step_key`). The hash changes every step, which breaks the chains that
   G-kway's smallest-id rule resolves one vertex per step (gkway.md 4.3). No two
   adjacent vertices move in one step, so each gain is exact with respect to the
   other moves: ``J`` drops by exactly ``2 * sum(gain)`` (``2 * d_1 * sum(gain)``
   in cut mode, where gains are in edge weight) -- up to rounding for float weights.
3. **Prefix balance selection** (:func:`_prefix_select`): the survivors are sorted
   by ``(gain desc, id asc)`` and the longest prefix ``0..j`` after which every
   block weighs at most ``lmax`` is applied. Feasibility is not monotone in ``j``;
   the largest feasible ``j`` is taken (an O(M + k) scan with a count of overloaded
   blocks; no ``k x M`` table). Every candidate is legal on its own, so from a
   balanced state at least the first move is always applied.

:func:`isr_refine` is the loop, a drop-in for ``jet_cpu.jet_refine`` (same
signature and result): an ISR step while the partition is balanced, else Jet's weak
rebalancing (at most ``max_weak`` times in a row) and then its strong rebalancing;
it keeps the best partition with Jet's rules and stops at a step that moves nothing,
after ``max_iters`` iterations without a relative improvement ``phi``, or after
:data:`HARD_CAP` iterations. From a balanced start every step stays balanced and
strictly lowers ``J``, so the result is never worse than the start.

Relation to the GPU twin
------------------------
The candidates (destinations and float gains), the independent set, the move order
and the selected prefix are bit-identical to :mod:`.isr_gpu`: both sum connectivities
in neighbour order, evaluate gains with the same IEEE operations (no fused
multiply-add), use the same hash, and balance is decided on integer weights. A whole
:func:`isr_refine` run is bit-identical as long as no strong rebalancing step runs
(the GPU's strong rebalancer picks other moves, see :mod:`.rebalance_gpu`) and the
weights are integers (float costs are summed in another order on the GPU).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .common_cpu import (clear_connectivity, connectivity_gain, level_tables, on_boundary,
                         scatter_connectivity)
from .common_cpu import mix64 as _mix64
from .jet_cpu import (_apply, _as_float, _cost_of, _judge, _num_chunks, _prepare, _seed_key, _strong_moves, _traffic, _weak_moves, block_weights, cost)

__all__ = ["HARD_CAP", "block_weights", "cost", "isr_moves", "isr_refine", "step_key"]

#: Iteration cap of :func:`isr_refine`, whatever the improvement (against pathologies,
#: e.g. float gains that alternate between two states in their last bits).
HARD_CAP = 10_000

_MASK64 = (1 << 64) - 1


def _mix64_int(x: int) -> int:
    """``common_cpu.mix64`` on Python ints (host-side key derivation)."""
    x &= _MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    x ^= x >> 31
    return x


def step_key(seed: int, step: int) -> np.uint64:
    """Hash key of ISR step ``step``: a new tie-breaking priority every step."""
    return np.uint64(_mix64_int(int(_seed_key(seed)) + 0x9E3779B97F4A7C15 * (int(step) + 1)))


# ------------------------------------------------------------------ kernels
@nb.njit(parallel=True, cache=True, nogil=True)
def _isr_propose(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, k, grp, delta, cut_mode, nchunks,
                 dest, gain):
    """Best legal destination of every boundary vertex (step 1 of the module docstring).

    ``grp``/``delta`` are ``common_cpu.level_tables``. Writes ``dest[u]`` (-1: none)
    and ``gain[u]`` (0 for none). Connectivities and gains are computed exactly as
    in ``jet_cpu._lp_propose`` (the GPU twin reproduces them bit for bit).
    """
    n = part.size
    nlev = grp.shape[0]
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        acc = np.zeros((nlev, k))               # acc[t, g]: weight into level-t group g
        seen = np.full(k, -1, dtype=np.int64)   # stamp: block already listed for u
        touched = np.empty(k, dtype=np.int32)
        for u in range(lo, hi):
            dest[u] = -1
            gain[u] = 0.0
            a = part[u]
            if not on_boundary(xadj, adjncy, part, u, a):
                continue  # interior: every gain is negative
            nt = scatter_connectivity(xadj, adjncy, adjwgt, part, grp, cut_mode, u, acc, seen,
                                      touched)
            own = acc[0, a]
            room = lmax - vwgt[u]
            best_b = -1
            best_g = 0.0
            for i in range(nt):
                b = touched[i]
                if b == a or bw[b] > room:
                    continue
                g = connectivity_gain(acc, grp, delta, cut_mode, a, b, own)
                if g > 0.0 and (best_b < 0 or g > best_g or (g == best_g and b < best_b)):
                    best_b = b
                    best_g = g
            if best_b >= 0:
                dest[u] = best_b
                gain[u] = best_g
            clear_connectivity(acc, grp, cut_mode, touched, nt)


@nb.njit(inline="always", cache=True)
def _beats(gv, hv, gu, hu):
    """Priority order of the independent set: larger gain, then larger hash."""
    return gv > gu or (gv == gu and hv > hu)


@nb.njit(parallel=True, cache=True, nogil=True)
def _isr_independent(xadj, adjncy, dest, gain, key, nchunks, sel):
    """``sel[u] = 1`` for the candidates whose priority beats every candidate neighbour."""
    n = dest.size
    for c in nb.prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        for u in range(lo, hi):
            sel[u] = 0
            if dest[u] < 0:
                continue
            gu = gain[u]
            hu = _mix64(np.uint64(u) ^ key)
            wins = True
            for e in range(xadj[u], xadj[u + 1]):
                v = adjncy[e]
                if v == u or dest[v] < 0:
                    continue
                if _beats(gain[v], _mix64(np.uint64(v) ^ key), gu, hu):
                    wins = False
                    break
            if wins:
                sel[u] = 1


@nb.njit(cache=True, nogil=True)
def _prefix_select(src, dst, w, bw, lmax):
    """Largest ``j`` such that after moves ``0..j`` no block exceeds ``lmax`` (-1: none).

    One pass in move order, tracking the number of overloaded blocks.
    """
    cur = bw.copy()
    over = 0
    for b in range(cur.size):
        if cur[b] > lmax:
            over += 1
    best = -1
    for j in range(src.size):
        s = src[j]
        d = dst[j]
        x = w[j]
        if cur[s] > lmax:
            over -= 1
        cur[s] -= x
        if cur[s] > lmax:
            over += 1
        if cur[d] > lmax:
            over -= 1
        cur[d] += x
        if cur[d] > lmax:
            over += 1
        if over == 0:
            best = j
    return best


# ------------------------------------------------------------------ one ISR step
class _Tables:
    """Per-call constants of the gain kernels."""

    def __init__(self, n: int, k: int, prefix: np.ndarray, dist: np.ndarray):
        self.cut_mode = prefix.size == 1
        self.grp, self.delta = level_tables(prefix, dist)
        self.nchunks = _num_chunks(n, k)
        self.dest = np.empty(n, dtype=np.int32)
        self.gain = np.empty(n, dtype=np.float64)
        self.sel = np.empty(n, dtype=np.uint8)


def _candidates(xadj, adjncy, fwgt, vwgt, part, k, lmax, bw, tab: _Tables, key):
    """Steps 1 and 2: fills ``tab.dest``, ``tab.gain`` and ``tab.sel``."""
    _isr_propose(xadj, adjncy, fwgt, vwgt, part, bw, lmax, k, tab.grp, tab.delta, tab.cut_mode,
                 tab.nchunks, tab.dest, tab.gain)
    _isr_independent(xadj, adjncy, tab.dest, tab.gain, key, tab.nchunks, tab.sel)


def _step(xadj, adjncy, fwgt, vwgt, part, k, lmax, bw, tab: _Tables, key):
    """One ISR step (no state change). Returns the vertices to move in selection order
    (gain desc, id asc) and their targets and gains."""
    _candidates(xadj, adjncy, fwgt, vwgt, part, k, lmax, bw, tab, key)
    ids = np.flatnonzero(tab.sel).astype(np.int32)
    order = np.lexsort((ids, -tab.gain[ids]))
    ids = ids[order]
    targets = tab.dest[ids]
    j = _prefix_select(part[ids], targets, vwgt[ids], bw, lmax)
    return ids[: j + 1], targets[: j + 1], tab.gain[ids[: j + 1]]


def isr_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, step=0,
              seed=0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The moves of one ISR step from ``part`` (not modified).

    Returns ``(vertices, targets, gains)`` in selection order (gain descending, then
    id ascending): int32, int32 and float64 arrays. Gains are those of
    ``jet_cpu.jet_lp`` (edge weight in cut mode, equation 1 otherwise); applying all
    moves at once lowers ``J`` by ``2 * d_1 * sum(gains)`` (cut mode) or
    ``2 * sum(gains)``. ``step`` and ``seed`` pick the tie-breaking hash.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, dist = _prepare(xadj, adjncy, adjwgt, vwgt, part,
                                                              prefix, dist)
    k, lmax = int(k), int(lmax)
    tab = _Tables(part.size, k, prefix, dist)
    bw = block_weights(part, vwgt, k)
    return _step(xadj, adjncy, _as_float(adjwgt), vwgt, part, k, lmax, bw, tab,
                 step_key(seed, step))


# ------------------------------------------------------------------ refinement loop
def _refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, max_iters=12,
            phi=0.999, max_weak=2, seed=0):
    """:func:`isr_refine` with statistics: returns ``(part, cost, stats)``, where
    ``stats`` counts iterations, ISR steps, rebalancing steps and moved vertices."""
    xadj, adjncy, adjwgt, vwgt, part, prefix, dist = _prepare(xadj, adjncy, adjwgt, vwgt, part,
                                                              prefix, dist)
    k, lmax = int(k), int(lmax)
    if prefix.size == 0 or int(prefix[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")
    stats = {"iterations": 0, "isr_steps": 0, "weak_steps": 0, "strong_steps": 0,
             "isr_moves": 0, "rebalance_moves": 0}
    n = part.size
    cur = part.copy()
    traffic = _traffic(xadj, adjncy, adjwgt, cur, prefix, k)
    cur_cost = _cost_of(traffic, dist)
    if n == 0 or k == 1:
        return cur, cur_cost, stats
    bw = block_weights(cur, vwgt, k)
    fwgt = _as_float(adjwgt)
    tab = _Tables(n, k, prefix, dist)
    target = np.full(n, -1, dtype=np.int32)
    best, best_cost, best_maxw = cur.copy(), cur_cost, int(bw.max())
    it = 0
    weak_runs = 0
    while it < max_iters and stats["iterations"] < HARD_CAP:
        it += 1
        stats["iterations"] += 1
        if bw.max() <= lmax:
            moves, dest, _ = _step(xadj, adjncy, fwgt, vwgt, cur, k, lmax, bw, tab,
                                   step_key(seed, stats["isr_steps"]))
            stats["isr_steps"] += 1
            stats["isr_moves"] += int(moves.size)
            weak_runs = 0
            if moves.size == 0:
                break  # no positive-gain move fits: a local optimum
            target[moves] = dest
        elif weak_runs < max_weak:
            moves, full = _weak_moves(xadj, adjncy, fwgt, vwgt, cur, k, lmax, prefix, bw, seed)
            target[moves] = full[moves]
            weak_runs += 1
            stats["weak_steps"] += 1
            stats["rebalance_moves"] += int(moves.size)
        else:
            moves, full = _strong_moves(xadj, adjncy, fwgt, vwgt, cur, k, lmax, prefix, bw)
            target[moves] = full[moves]
            weak_runs = 0
            stats["strong_steps"] += 1
            stats["rebalance_moves"] += int(moves.size)
        _apply(xadj, adjncy, adjwgt, vwgt, cur, prefix, k, moves, target, bw, traffic)
        target[moves] = -1
        cur_cost = _cost_of(traffic, dist)
        maxw = int(bw.max())
        # Jet's bookkeeping: balanced beats unbalanced, then lower cost / lower max weight
        keep, progress = _judge(cur_cost, maxw, best_cost, best_maxw, lmax, phi)
        if progress:
            it = 0
        if keep:
            best[:] = cur
            best_cost, best_maxw = cur_cost, maxw
    if adjwgt.dtype.kind == "f":
        # incremental float updates drift in the last bits: report a fresh sum
        best_cost = _cost_of(_traffic(xadj, adjncy, adjwgt, best, prefix, k), dist)
    return best, best_cost, stats


def isr_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0,
               incremental=True) -> tuple[np.ndarray, float]:
    """Independent-set refinement loop (G-kway with Jet's rebalancers). Returns
    ``(part, cost)`` like ``jet_cpu.jet_refine``, which it can replace.

    Each iteration runs an ISR step (module docstring) when the partition is
    balanced (max block weight <= ``lmax``), else weak rebalancing (at most
    ``max_weak`` times in a row), then strong rebalancing. The best partition is kept
    (balanced beats unbalanced; then lower cost, or lower max block weight). The loop
    stops when an ISR step moves nothing, after ``max_iters`` iterations without a
    cost below ``phi * best`` (or a lower max block weight while unbalanced), or
    after :data:`HARD_CAP` iterations. ``seed`` drives the independent-set hash and
    the weak rebalancer.

    ``filter_ratio`` and ``incremental`` are accepted for signature parity with
    ``jet_refine`` and ignored: ISR moves positive gains only, and every step
    re-evaluates all boundary vertices.

    ``part`` is not modified; the result is a new int32 array and its cost ``J``.
    """
    del filter_ratio, incremental
    best, best_cost, _ = _refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist,
                                 max_iters=max_iters, phi=phi, max_weak=max_weak, seed=seed)
    return best, best_cost
