"""Independent-set refinement (ISR) of G-kway, CPU twin of :mod:`.isr_gpu`.

G-kway (Lee et al., its independent-set refinement) refines a *balanced*
partition with positive-gain moves only, in steps:

1. **Candidates** (``jet_cpu.isr_propose``, parallel over vertices): every boundary
   vertex ``u`` finds its best *legal* destination among the blocks adjacent to it:
   ``gain > 0`` and ``vwgt[u] + W[dst] <= lmax`` (largest gain, ties: smallest
   block id). The gain is the change of ``J`` of :mod:`.jet_cpu` -- in cut mode
   (``len(prefix) == 1``) ``conn(dst) - conn(own)`` in edge weight, otherwise paper
   equation 1 through group connectivities -- computed with the very operations of
   ``jet_cpu.lp_proposals``. The hierarchical distance is an ultrametric, so a best
   positive-gain destination is always an adjacent block (gkway.md 4.2).
2. **Independent set** (``jet_cpu.isr_independent``): a candidate survives when its
   priority beats that of every candidate neighbour. Priority: larger gain, then a
   larger hash ``mix64(u ^ key)`` with ``key`` drawn from ``(seed, step)``
   (:func:`step_key`). The hash changes every step, which breaks the chains that
   G-kway's smallest-id rule resolves one vertex per step (gkway.md 4.3). No two
   adjacent vertices move in one step, so each gain is exact with respect to the
   other moves: ``J`` drops by exactly ``2 * sum(gain)`` (``2 * d_1 * sum(gain)``
   in cut mode, where gains are in edge weight) -- up to rounding for float weights.
3. **Prefix balance selection** (``jet_cpu.isr_prefix_fit``): the survivors are sorted
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

The step is a round of that compiled loop, so its kernels live beside the loop in
:mod:`.jet_cpu`; this module holds ISR's public API: the loop (:func:`isr_refine`,
with its counts :func:`isr_refine_with_stats`), one step (:func:`isr_moves`), its
first two parts alone (:func:`isr_candidates`), its third on any move list
(:func:`longest_feasible_prefix`) and the hash keys (:func:`step_key`).

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

from ..common_cpu import (float_weights, level_tables, num_chunks, refinement_inputs,
                          seed_key)
from .jet_cpu import (block_weights, cost, isr_independent, isr_prefix_fit, isr_propose,
                      isr_step, isr_step_key, refine)

__all__ = ["HARD_CAP", "block_weights", "cost", "isr_candidates", "isr_moves", "isr_refine",
           "isr_refine_with_stats", "longest_feasible_prefix", "step_key"]

#: Iteration cap of :func:`isr_refine`, whatever the improvement (against pathologies,
#: e.g. float gains that alternate between two states in their last bits).
HARD_CAP = 10_000


def step_key(seed: int, step: int) -> np.uint64:
    """Hash key of ISR step ``step``: a new tie-breaking priority every step."""
    return np.uint64(isr_step_key(seed_key(seed), int(step)))


# ------------------------------------------------------------------ the step, piece by piece
def isr_candidates(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, dist, *,
                   step: int = 0, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parts 1 and 2 of one ISR step from ``part`` (not modified): the candidates and
    their independent set, before the prefix balance selection.

    Returns ``(dest, gain, selected)`` over all vertices: int32 ``dest[u]``, the best
    legal adjacent destination (-1: none), float64 ``gain[u]`` (> 0 at candidates, 0
    elsewhere; edge weight in cut mode, equation 1 otherwise) and uint8 ``selected[u]``
    (1: the candidate beats every candidate neighbour under the hash of ``(seed,
    step)``). Bit-identical to the GPU twin's.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, dist = refinement_inputs(xadj, adjncy, adjwgt, vwgt,
                                                                       part, prefix, dist)
    k, n = int(k), part.size
    grp, delta = level_tables(prefix, dist)
    nchunks = num_chunks(n, k)
    dest = np.empty(n, dtype=np.int32)
    gain = np.empty(n, dtype=np.float64)
    selected = np.empty(n, dtype=np.uint8)
    isr_propose(xadj, adjncy, float_weights(adjwgt), vwgt, part, block_weights(part, vwgt, k),
                int(lmax), k, grp, delta, prefix.size == 1, nchunks, dest, gain)
    isr_independent(xadj, adjncy, dest, gain, step_key(seed, step), nchunks, selected)
    return dest, gain, selected


def longest_feasible_prefix(src, dst, w, bw, lmax: int) -> int:
    """Part 3 of an ISR step on a move list: the largest ``j`` such that after the moves
    ``0..j`` (move ``i`` takes weight ``w[i]`` from block ``src[i]`` to ``dst[i]``) no
    block of the weights ``bw`` exceeds ``lmax``; -1 when no prefix is feasible.
    Feasibility is not monotone in ``j`` (module docstring, step 3)."""
    order = np.arange(len(src), dtype=np.int32)
    return int(isr_prefix_fit(order, order.size, np.ascontiguousarray(src, dtype=np.int32),
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
def isr_refine_with_stats(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, dist, *,
                          max_iters: int = 12, phi: float = 0.999, max_weak: int = 2,
                          seed: int = 0, start_iters: int | None = None
                          ) -> tuple[np.ndarray, float, dict[str, int]]:
    """:func:`isr_refine` with statistics: returns ``(part, cost, stats)``, where
    ``stats`` counts what the loop did: ``iterations``, ``isr_steps``, ``weak_steps``,
    ``strong_steps`` (rebalancing rounds), ``isr_moves`` and ``rebalance_moves``
    (vertices moved by ISR steps and by rebalancing). The GPU twin reports the same."""
    best, best_cost, counts = refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist,
                                     (0.0,), max_iters=max_iters, phi=phi, max_weak=max_weak,
                                     seed=seed, isr=True, cap=HARD_CAP, start_iters=start_iters)
    stats = {"iterations": counts["iterations"], "isr_steps": counts["steps"],
             "weak_steps": counts["weak_steps"], "strong_steps": counts["strong_steps"],
             "isr_moves": counts["step_moves"], "rebalance_moves": counts["rebalance_moves"]}
    return best, best_cost, stats


def isr_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0,
               incremental=True, start_iters=None) -> tuple[np.ndarray, float]:
    """Independent-set refinement loop (G-kway with Jet's rebalancers). Returns
    ``(part, cost)`` like ``jet_cpu.jet_refine``, which it can replace.

    Each iteration runs an ISR step (module docstring) when the partition is
    balanced (max block weight <= ``lmax``), else weak rebalancing (at most
    ``max_weak`` times in a row), then strong rebalancing. The best partition is kept
    (balanced beats unbalanced; then lower cost, or lower max block weight). The loop
    stops when an ISR step moves nothing, after ``max_iters`` iterations without a
    cost below ``phi * best`` (or a lower max block weight while unbalanced; after
    ``start_iters`` while none has made progress, as in ``jet_refine``), or after
    :data:`HARD_CAP` iterations. ``seed`` drives the independent-set hash and
    the weak rebalancer.

    ``filter_ratio`` and ``incremental`` are accepted for signature parity with
    ``jet_refine`` and ignored: ISR moves positive gains only, and every step
    re-evaluates all boundary vertices.

    ``part`` is not modified; the result is a new int32 array and its cost ``J``.
    """
    del filter_ratio, incremental
    best, best_cost, _ = isr_refine_with_stats(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix,
                                               dist, max_iters=max_iters, phi=phi,
                                               max_weak=max_weak, seed=seed,
                                               start_iters=start_iters)
    return best, best_cost
