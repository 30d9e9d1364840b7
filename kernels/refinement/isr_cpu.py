"""Independent-set refinement (ISR) of G-kway, CPU twin of :mod:`.isr_gpu`.

G-kway (Lee et al., its independent-set refinement) refines a *balanced*
partition with positive-gain moves only, in steps:

1. **Candidates** (``jet_cpu._isr_propose``, parallel over vertices): every boundary
   vertex ``u`` finds its best *legal* destination among the blocks adjacent to it:
   ``gain > 0`` and ``vwgt[u] + W[dst] <= lmax`` (largest gain, ties: smallest
   block id). The gain is the change of ``J`` of :mod:`.jet_cpu` -- in cut mode
   (``len(prefix) == 1``) ``conn(dst) - conn(own)`` in edge weight, otherwise paper
   equation 1 through group connectivities -- computed with the very operations of
   ``jet_cpu._lp_propose``. The hierarchical distance is an ultrametric, so a best
   positive-gain destination is always an adjacent block (gkway.md 4.2).
2. **Independent set** (``jet_cpu._isr_independent``): a candidate survives when its
   priority beats that of every candidate neighbour. Priority: larger gain, then a
   larger hash ``mix64(u ^ key)`` with ``key`` drawn from ``(seed, step)``
   (:func:`step_key`). The hash changes every step, which breaks the chains that
   G-kway's smallest-id rule resolves one vertex per step (gkway.md 4.3). No two
   adjacent vertices move in one step, so each gain is exact with respect to the
   other moves: ``J`` drops by exactly ``2 * sum(gain)`` (``2 * d_1 * sum(gain)``
   in cut mode, where gains are in edge weight) -- up to rounding for float weights.
3. **Prefix balance selection** (``jet_cpu._prefix_fit``): the survivors are sorted
   by ``(gain desc, id asc)`` and the longest prefix ``0..j`` after which every
   block weighs at most ``lmax`` is applied. Feasibility is not monotone in ``j``;
   the largest feasible ``j`` is taken (an O(M + k) scan with a count of overloaded
   blocks; no ``k x M`` table). Every candidate is legal on its own, so from a
   balanced state at least the first move is always applied.

:func:`isr_refine` is a drop-in for ``jet_cpu.jet_refine`` (same signature and
result) and runs the same loop, ``jet_cpu.refine`` in its ISR mode: an ISR step while
the partition is balanced (in place of Jet's LP round), else Jet's weak rebalancing (at
most ``max_weak`` times in a row) and then its strong rebalancing; it keeps the best
partition with Jet's rules and stops at a step that moves nothing, after ``max_iters``
iterations without a relative improvement ``phi``, or after :data:`HARD_CAP`
iterations. From a balanced start every step stays balanced and strictly lowers ``J``,
so the result is never worse than the start.

The step is a round of that compiled loop (``jet_cpu._isr_round``), so its kernels
live beside the loop in :mod:`.jet_cpu`; this module holds ISR's public API, its
hash keys (:func:`step_key`) and the pieces of the step for the tests
(:func:`_candidates`, :func:`_prefix_select`).

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

import numpy as np

from ..common_cpu import level_tables
from .jet_cpu import (_isr_independent, _isr_propose, _num_chunks, _prefix_fit, _seed_key,
                      block_weights, cost, isr_step, isr_step_key, refine)

__all__ = ["HARD_CAP", "block_weights", "cost", "isr_moves", "isr_refine", "step_key"]

#: Iteration cap of :func:`isr_refine`, whatever the improvement (against pathologies,
#: e.g. float gains that alternate between two states in their last bits).
HARD_CAP = 10_000


def step_key(seed: int, step: int) -> np.uint64:
    """Hash key of ISR step ``step``: a new tie-breaking priority every step."""
    return np.uint64(isr_step_key(_seed_key(seed), int(step)))


# ------------------------------------------------------------------ the step, piece by piece
class _Tables:
    """Scratch of :func:`_candidates` (the loop keeps its own in its state)."""

    def __init__(self, n: int, k: int, prefix: np.ndarray, dist: np.ndarray):
        self.cut_mode = np.asarray(prefix).size == 1
        self.grp, self.delta = level_tables(np.asarray(prefix, dtype=np.int64),
                                            np.asarray(dist, dtype=np.float64))
        self.nchunks = _num_chunks(n, k)
        self.dest = np.empty(n, dtype=np.int32)
        self.gain = np.empty(n, dtype=np.float64)
        self.sel = np.empty(n, dtype=np.uint8)


def _candidates(xadj, adjncy, fwgt, vwgt, part, k, lmax, bw, tab: _Tables, key):
    """Steps 1 and 2 alone: fills ``tab.dest``, ``tab.gain`` and ``tab.sel``."""
    _isr_propose(xadj, adjncy, fwgt, vwgt, part, bw, lmax, k, tab.grp, tab.delta, tab.cut_mode,
                 tab.nchunks, tab.dest, tab.gain)
    _isr_independent(xadj, adjncy, tab.dest, tab.gain, key, tab.nchunks, tab.sel)


def _prefix_select(src, dst, w, bw, lmax) -> int:
    """Step 3 alone: the largest ``j`` such that after the moves ``0..j`` (sources
    ``src``, destinations ``dst``, weights ``w``) no block exceeds ``lmax`` (-1: none)."""
    order = np.arange(len(src), dtype=np.int32)
    return int(_prefix_fit(order, order.size, np.ascontiguousarray(src, dtype=np.int32),
                           np.ascontiguousarray(dst, dtype=np.int32),
                           np.ascontiguousarray(w, dtype=np.int64),
                           np.ascontiguousarray(bw, dtype=np.int64), int(lmax)))


def isr_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, step=0,
              seed=0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The moves of one ISR step from ``part`` (not modified).

    Returns ``(vertices, targets, gains)`` in selection order (gain descending, then
    id ascending): int32, int32 and float64 arrays. Gains are those of
    ``jet_cpu.jet_lp`` (edge weight in cut mode, equation 1 otherwise); applying all
    moves at once lowers ``J`` by ``2 * d_1 * sum(gains)`` (cut mode) or
    ``2 * sum(gains)``. ``step`` and ``seed`` pick the tie-breaking hash.
    """
    return isr_step(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist,
                    step_key(seed, step))


# ------------------------------------------------------------------ refinement loop
def _refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, max_iters=12,
            phi=0.999, max_weak=2, seed=0):
    """:func:`isr_refine` with statistics: returns ``(part, cost, stats)``, where
    ``stats`` counts iterations, ISR steps, rebalancing steps and moved vertices."""
    best, best_cost, counts = refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist,
                                     (0.0,), max_iters=max_iters, phi=phi, max_weak=max_weak,
                                     seed=seed, isr=True, cap=HARD_CAP)
    stats = {"iterations": counts["iterations"], "isr_steps": counts["steps"],
             "weak_steps": counts["weak_steps"], "strong_steps": counts["strong_steps"],
             "isr_moves": counts["step_moves"], "rebalance_moves": counts["rebalance_moves"]}
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
