"""Independent-set refinement (ISR) of G-kway on the GPU: the twin of :mod:`.isr_cpu`.

Same functions and semantics as :mod:`.isr_cpu` (read its docstring for the algorithm),
taking and returning CuPy arrays; ``prefix`` and ``dist`` may be NumPy or CuPy. The
refinement loop is the GPU's Jet loop with the ISR step as its balanced round (see
"The refinement loop" below).

One ISR step (``refinement/isr.cu`` plus CuPy sorts and prefix sums)
-------------------------------------------------------------
1. ``isr_propose`` -- one thread per vertex: connectivities per level group in the
   per-vertex table of the LP kernels (``cuda/conn_table.cuh``: ``deg(u) * l`` entries,
   in local memory or, for high degrees, a hash table in global scratch; no cap on the
   degree or on the number of adjacent blocks), then the best legal destination.
2. ``isr_independent`` -- one thread per vertex: the priority rule.
3. Selection, over fixed-size arrays: ``isr_sort_keys`` + a stable ``cp.argsort`` over
   all ``n`` vertices give the move order (gain desc, id asc; unselected vertices
   last); ``isr_events`` writes two balance events per move with the unique key
   ``block * 2n + event``; ``cp.sort`` groups them by block in move order; a global
   ``cp.cumsum`` minus the value before each block's run gives every block's weight
   after each of its events; ``isr_violations`` adds +1 on every stretch of move
   positions where a block is above ``lmax`` to a difference array (integer atomics),
   a ``cp.cumsum`` counts the violations of every prefix, and ``isr_last_feasible``
   takes the largest position with none (integer ``atomicMax``). This is the
   event-based form of G-kway's delta-weight table (gkway.md 4.3): ``O(n)`` memory for
   any ``k``, no 1024-move cap.

Relation to the CPU twin
------------------------
* **Bit-identical**: candidates (destinations and float gains: neighbour-order sums
  and ``__dadd_rn``/``__dmul_rn``/``__dsub_rn`` as in ``jet.cu``), the independent
  set (same priority and hash), the move order and the selected prefix (integer
  weights), in cut and distance mode, for integer and float edge weights. So
  :func:`isr_moves` returns exactly ``isr_cpu.isr_moves``.
* :func:`isr_refine` is bit-identical to ``isr_cpu.isr_refine`` (partition and cost)
  while no strong rebalancing step runs and the edge weights are integers. Weak
  rebalancing is bit-identical too (:mod:`.rebalance_gpu`), so runs from a balanced
  start, or that weak steps alone repair, agree. Strong steps pick other moves than
  the CPU's. With float weights the per-level traffic is summed in another order
  (:mod:`.objective_gpu`), so the loop's cost comparisons may, rarely, decide
  differently and the reported cost agrees to rounding.

The refinement loop
-------------------
:func:`isr_refine` is the GPU's one refinement loop (``jet_gpu.refine``) with an ISR
step as its balanced round (:class:`_ISRRound`): the loop's state, move application
(``jet.cu``'s ``move_delta_*``, ``commit_moves``), device-side bookkeeping
(``refinement/jet_loop.cu``), weak and strong rebalancing are Jet's. ISR differs only in
the round, in that a step which moves nothing ends the loop (there are no locks),
and in the iteration cap :data:`HARD_CAP`. The step number behind each step's hash
key is the loop's count of balanced rounds, read on the device.

Host synchronisation and CUDA graphs
------------------------------------
An ISR step does not synchronise: every launch covers ``n``, ``2n``, ``n + 1`` or
``k`` items, the move count and the selected prefix stay on the device, and every
kernel skips itself unless the loop's control block names a balanced round. The
sorts (``cp.argsort``, ``cp.sort``) allocate their outputs and CUB temporaries,
which a captured graph would bake in; so the loop launches ISR's body from the host
every iteration and reads the loop's status from pinned memory after it (one
synchronisation per iteration), rebalancing steps adding the syncs of
:mod:`.rebalance_gpu`. Capturing the step needs those sorts under a private memory
pool kept alive with the graph (gkway.md 4.4, risk 2), or a sort with preallocated
buffers. The price of fixed sizes is two sorts over ``n`` and ``2n`` keys per
step, whatever the number of candidates. All other scratch is allocated once per
call (:class:`ISRStep`).
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from ..common_cpu import seed_key
from ..gpu_common import TableScratch, as_device, i64, kernel, launch
from .isr_cpu import HARD_CAP, step_key
from .jet_gpu import (MODE_LP, MODE_STRONG, MODE_WEAK, DeviceGraph, LoopState, block_weights, cost,
                      refine)

__all__ = ["HARD_CAP", "block_weights", "cost", "isr_moves", "isr_refine",
           "isr_refine_with_stats", "step_key"]

_SRC = "refinement/isr.cu"
_NO_GATE = np.uint64(0)  # null control-block pointer: the kernels always run


class ISRStep:
    """Scratch of the ISR kernels, allocated once per refinement call.

    ``seed`` and ``step`` name the step's hash key (``isr_cpu.step_key(seed, step)``);
    ``step`` is a one-element device int64 array, so that the loop's count of
    balanced rounds serves. ``gate``: the loop's control block (the kernels then run
    only when it names a balanced round), ``None`` outside the loop.
    """

    def __init__(self, g: DeviceGraph, k: int):
        n = g.n
        self.table = TableScratch(g.xadj, g.nlev)
        self.dest = cp.empty(n, dtype=cp.int32)
        self.gain = cp.empty(n, dtype=cp.float64)
        self.sel = cp.empty(n, dtype=cp.uint8)
        self.skey = cp.empty(n, dtype=cp.int64)
        self.ekey = cp.empty(2 * n, dtype=cp.int64)
        self.sdelta = cp.empty(2 * n, dtype=cp.int64)
        self.cs = cp.empty(2 * n, dtype=cp.int64)
        self.seg_start = cp.empty(k, dtype=cp.int64)
        self.diff = cp.empty(n + 1, dtype=cp.int64)
        self.cnt = cp.empty(n + 1, dtype=cp.int64)
        self.jstar = cp.zeros(1, dtype=cp.uint64)
        self.order = None  # move order of the last step (int64 vertex ids)

    def candidates(self, g: DeviceGraph, part, bw, k: int, lmax: int, seed: int, step,
                   gate=None) -> None:
        """Steps 1 and 2: ``dest``, ``gain`` and ``sel`` of every vertex."""
        gate = _NO_GATE if gate is None else gate
        launch(kernel(_SRC, "isr_propose"), g.n,
               g.xadj, g.adjncy, *g.gain_weights, g.vwgt, part, bw, i64(lmax), g.div, g.delta,
               i64(g.n), i64(k), i64(g.nlev), i64(g.cut_mode), self.table.offset,
               self.table.keys, self.table.vals, self.dest, self.gain, gate)
        launch(kernel(_SRC, "isr_independent"), g.n,
               g.xadj, g.adjncy, self.dest, self.gain, np.uint64(seed_key(seed)), step,
               i64(g.n), self.sel, gate)

    def select(self, g: DeviceGraph, part, bw, k: int, lmax: int, target, gate=None) -> None:
        """Step 3: ``order`` of the moves, ``jstar`` = length of the applied prefix, and
        ``target[u] = dest[u]`` for the vertices of that prefix (others untouched)."""
        n = g.n
        gate = _NO_GATE if gate is None else gate
        launch(kernel(_SRC, "isr_sort_keys"), n, self.sel, self.gain, i64(n), self.skey, gate)
        self.order = cp.argsort(self.skey)  # stable: equal gains stay in id order
        launch(kernel(_SRC, "isr_events"), n,
               self.order, self.sel, part, self.dest, i64(n), i64(k), self.ekey, gate)
        skeys = cp.sort(self.ekey)          # keys are unique: no stability needed
        self.seg_start.fill(-1)
        launch(kernel(_SRC, "isr_event_deltas"), 2 * n,
               skeys, self.order, g.vwgt, i64(n), i64(k), self.sdelta, self.seg_start, gate)
        cp.cumsum(self.sdelta, out=self.cs)
        self.diff.fill(0)
        launch(kernel(_SRC, "isr_violations"), 2 * n,
               skeys, self.sdelta, self.cs, self.seg_start, bw, i64(lmax), i64(n), i64(k),
               self.diff, gate)
        launch(kernel(_SRC, "isr_idle_overload"), k,
               self.seg_start, bw, i64(lmax), i64(n), i64(k), self.diff, gate)
        cp.cumsum(self.diff, out=self.cnt)
        self.jstar.fill(0)
        launch(kernel(_SRC, "isr_last_feasible"), n,
               self.order, self.sel, self.cnt, i64(n), self.jstar, gate)
        launch(kernel(_SRC, "isr_mark_targets"), n,
               self.order, self.dest, self.jstar, i64(n), target, gate)

    def step(self, g: DeviceGraph, part, bw, k: int, lmax: int, seed: int, step, target,
             gate=None) -> None:
        """One ISR step: marks the selected moves in ``target`` (no synchronisation)."""
        self.candidates(g, part, bw, k, lmax, seed, step, gate)
        self.select(g, part, bw, k, lmax, target, gate)


class _ISRRound:
    """ISR's balanced round of the refinement loop (the interface of
    ``jet_gpu._LPRound``): one ISR step, hash key from the loop's count of balanced
    rounds. No locks; not capturable (the step's sorts allocate)."""

    locking = False
    capturable = False

    def __init__(self, g: DeviceGraph, k: int, seed: int):
        self.isr = ISRStep(g, k)
        self.seed = seed

    def begin_pass(self, _item) -> None:
        """Nothing to set: ISR runs one pass."""

    def enqueue(self, g: DeviceGraph, st: LoopState) -> None:
        self.isr.step(g, st.part, st.bw, st.k, st.lmax, self.seed, st.steps(), st.target,
                      gate=st.ctl)


def isr_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, step=0,
              seed=0) -> tuple[cp.ndarray, cp.ndarray, cp.ndarray]:
    """The moves of one ISR step from ``part`` (not modified): ``(vertices, targets,
    gains)`` in selection order (gain desc, id asc), exactly those of
    ``isr_cpu.isr_moves`` (int32, int32, float64 CuPy arrays)."""
    g = DeviceGraph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    k, lmax = int(k), int(lmax)
    part = as_device(part, cp.int32)
    if g.n == 0:
        empty = cp.zeros(0, dtype=cp.int32)
        return empty, empty, cp.zeros(0, dtype=cp.float64)
    bw = block_weights(part, g.vwgt, k)
    isr = ISRStep(g, k)
    target = cp.full(g.n, -1, dtype=cp.int32)
    isr.step(g, part, bw, k, lmax, seed, cp.full(1, step, dtype=cp.int64), target)
    ids = isr.order[: int(isr.jstar[0])]
    return ids.astype(cp.int32), isr.dest[ids], isr.gain[ids]


def isr_refine_with_stats(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, dist, *,
                          max_iters: int = 12, phi: float = 0.999, max_weak: int = 2,
                          seed: int = 0, start_iters: int | None = None
                          ) -> tuple[cp.ndarray, float, dict[str, int]]:
    """:func:`isr_refine` with statistics: ``(part, cost, stats)``, the counts of
    ``isr_cpu.isr_refine_with_stats``."""
    g = DeviceGraph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    best, best_cost, state = refine(g, part, k, lmax, lambda g: _ISRRound(g, int(k), seed),
                                    (None,), max_iters=max_iters, phi=phi, max_weak=max_weak,
                                    seed=seed, max_rounds=HARD_CAP, start_iters=start_iters)
    iterations, steps, moves = (0, [0] * 3, [0] * 3) if state is None else state.counters()
    stats = {"iterations": iterations, "isr_steps": steps[MODE_LP],
             "weak_steps": steps[MODE_WEAK], "strong_steps": steps[MODE_STRONG],
             "isr_moves": moves[MODE_LP], "rebalance_moves": moves[MODE_WEAK] + moves[MODE_STRONG]}
    return best, best_cost, stats


def isr_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0,
               incremental=True, start_iters=None) -> tuple[cp.ndarray, float]:
    """Independent-set refinement loop: the rules of ``isr_cpu.isr_refine`` (ISR step
    when balanced, else weak then strong rebalancing; Jet's best-partition bookkeeping
    and stopping rule; :data:`HARD_CAP`). Returns ``(part, cost)``: a new CuPy int32
    array and ``J``; ``part`` is not modified.

    ``filter_ratio`` and ``incremental`` are accepted for signature parity with
    ``jet_refine`` and ignored (ISR moves positive gains only and re-evaluates every
    boundary vertex each step).
    """
    del filter_ratio, incremental
    best, best_cost, _ = isr_refine_with_stats(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix,
                                               dist, max_iters=max_iters, phi=phi,
                                               max_weak=max_weak, seed=seed,
                                               start_iters=start_iters)
    return best, best_cost
