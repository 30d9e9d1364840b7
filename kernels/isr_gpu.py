"""Independent-set refinement (ISR) of G-kway on the GPU: the twin of :mod:`.isr_cpu`.

Same functions and semantics as :mod:`.isr_cpu` (read its docstring for the algorithm),
taking and returning CuPy arrays; ``prefix`` and ``dist`` may be NumPy or CuPy. The
partition state (partition, block weights, traffic per level) stays on the device and
moves are applied with ``jet.cu``'s kernels (``move_delta_*``, ``commit_moves``); the
rebalancing steps call :mod:`.rebalance_gpu` as ``jet_gpu.jet_refine`` does.

One ISR step (``cuda/isr.cu`` plus CuPy sorts and prefix sums)
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

Host synchronisation and CUDA graphs
------------------------------------
An ISR step does not synchronise: every launch covers ``n``, ``2n``, ``n + 1`` or
``k`` items, the move count and the selected prefix stay on the device, and the
sorts and prefix sums are CuPy calls that stream capture accepts
(``argsort``, ``sort``, ``cumsum``). The loop reads back one small array per
iteration (moves, max block weight, traffic per level: ``_State.snapshot``)
to take its decisions; rebalancing steps add the syncs of :mod:`.rebalance_gpu`.
The price of fixed sizes is two sorts over ``n`` and ``2n`` keys per step, whatever
the number of candidates. All scratch is allocated once per call (:class:`_ISR`)
except the outputs (and CUB temporaries) of ``cp.argsort``/``cp.sort``: capturing a
step as a graph body needs those under a private memory pool kept alive with the
graph (gkway.md 4.4, risk 2), or a sort with preallocated buffers.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from . import objective_gpu
from .gpu_common import HISTOGRAM_BLOCKS, TableScratch, as_device, i64, kernel, launch
from .isr_cpu import HARD_CAP, step_key
from .jet_cpu import _cost_of, _judge
from .jet_gpu import _Graph, block_weights, cost

__all__ = ["HARD_CAP", "block_weights", "cost", "isr_moves", "isr_refine", "step_key"]

_SRC = "isr.cu"
_JET = "jet.cu"  # move application: move_delta_*, commit_moves


class _State:
    """The current partition on the device, its block weights and traffic per level."""

    def __init__(self, g: _Graph, part, k: int):
        self.part, self.k = part, int(k)
        self.bw = block_weights(part, g.vwgt, k)
        self.traffic = objective_gpu.level_traffic_device(g.xadj, g.adjncy, g.adjwgt, part,
                                                          g.prefix)
        self.target = cp.full(g.n, -1, dtype=cp.int32)  # -1 except for pending moves
        self.count = cp.zeros(1, dtype=cp.int64)
        rows = objective_gpu._rows(g.n)
        self.delta_rows = cp.zeros((g.nlev + 1, rows), dtype=g.adjwgt.dtype)
        self.suffix = "f64" if g.adjwgt.dtype == cp.float64 else "i64"

    def apply(self, g: _Graph) -> None:
        """Execute the moves marked in ``target`` (``jet.cu``'s kernels: traffic change
        per level in deterministic row sums, then block weights and partition by integer
        atomics; ``target`` is reset to -1)."""
        rows = self.delta_rows.shape[1]
        self.delta_rows.fill(0)
        launch(kernel(_JET, "move_delta_" + self.suffix), rows,
               g.xadj, g.adjncy, g.adjwgt, self.part, g.prefix, self.target,
               i64(g.n), i64(rows), self.delta_rows)
        self.traffic += self.delta_rows.sum(axis=1)
        self.count.fill(0)
        launch(kernel(_JET, "commit_moves"), g.n,
               self.part, self.target, g.vwgt, i64(g.n), i64(self.k), self.bw, self.count,
               max_blocks=HISTOGRAM_BLOCKS)

    def snapshot(self) -> tuple[int, int, np.ndarray]:
        """``(moves of the last apply, max block weight, traffic)``: one small readback."""
        words = cp.concatenate((self.count, self.bw.max(keepdims=True),
                                self.traffic.view(cp.int64))).get()
        return int(words[0]), int(words[1]), words[2:].view(self.traffic.dtype)


class _ISR:
    """Scratch of the ISR kernels, allocated once per refinement call."""

    def __init__(self, g: _Graph, k: int):
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

    def candidates(self, g: _Graph, part, bw, k: int, lmax: int, key: np.uint64) -> None:
        """Steps 1 and 2: ``dest``, ``gain`` and ``sel`` of every vertex."""
        launch(kernel(_SRC, "isr_propose"), g.n,
               g.xadj, g.adjncy, *g.gain_weights, g.vwgt, part, bw, i64(lmax), g.div, g.delta,
               i64(g.n), i64(k), i64(g.nlev), i64(g.cut_mode), self.table.offset,
               self.table.keys, self.table.vals, self.dest, self.gain)
        launch(kernel(_SRC, "isr_independent"), g.n,
               g.xadj, g.adjncy, self.dest, self.gain, np.uint64(key), i64(g.n), self.sel)

    def select(self, g: _Graph, part, bw, k: int, lmax: int, target) -> None:
        """Step 3: ``order`` of the moves, ``jstar`` = length of the applied prefix, and
        ``target[u] = dest[u]`` for the vertices of that prefix (others untouched)."""
        n = g.n
        launch(kernel(_SRC, "isr_sort_keys"), n, self.sel, self.gain, i64(n), self.skey)
        self.order = cp.argsort(self.skey)  # stable: equal gains stay in id order
        launch(kernel(_SRC, "isr_events"), n,
               self.order, self.sel, part, self.dest, i64(n), i64(k), self.ekey)
        skeys = cp.sort(self.ekey)          # keys are unique: no stability needed
        self.seg_start.fill(-1)
        launch(kernel(_SRC, "isr_event_deltas"), 2 * n,
               skeys, self.order, g.vwgt, i64(n), i64(k), self.sdelta, self.seg_start)
        cp.cumsum(self.sdelta, out=self.cs)
        self.diff.fill(0)
        launch(kernel(_SRC, "isr_violations"), 2 * n,
               skeys, self.sdelta, self.cs, self.seg_start, bw, i64(lmax), i64(n), i64(k),
               self.diff)
        launch(kernel(_SRC, "isr_idle_overload"), k,
               self.seg_start, bw, i64(lmax), i64(n), i64(k), self.diff)
        cp.cumsum(self.diff, out=self.cnt)
        self.jstar.fill(0)
        launch(kernel(_SRC, "isr_last_feasible"), n,
               self.order, self.sel, self.cnt, i64(n), self.jstar)
        launch(kernel(_SRC, "isr_mark_targets"), n,
               self.order, self.dest, self.jstar, i64(n), target)

    def step(self, g: _Graph, part, bw, k: int, lmax: int, key: np.uint64, target) -> None:
        """One ISR step: marks the selected moves in ``target`` (no synchronisation)."""
        self.candidates(g, part, bw, k, lmax, key)
        self.select(g, part, bw, k, lmax, target)


def isr_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, step=0,
              seed=0) -> tuple[cp.ndarray, cp.ndarray, cp.ndarray]:
    """The moves of one ISR step from ``part`` (not modified): ``(vertices, targets,
    gains)`` in selection order (gain desc, id asc), exactly those of
    ``isr_cpu.isr_moves`` (int32, int32, float64 CuPy arrays)."""
    g = _Graph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    k, lmax = int(k), int(lmax)
    part = as_device(part, cp.int32)
    if g.n == 0:
        empty = cp.zeros(0, dtype=cp.int32)
        return empty, empty, cp.zeros(0, dtype=cp.float64)
    bw = block_weights(part, g.vwgt, k)
    isr = _ISR(g, k)
    target = cp.full(g.n, -1, dtype=cp.int32)
    isr.step(g, part, bw, k, lmax, step_key(seed, step), target)
    ids = isr.order[: int(isr.jstar[0])]
    return ids.astype(cp.int32), isr.dest[ids], isr.gain[ids]


def _refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, max_iters=12,
            phi=0.999, max_weak=2, seed=0):
    """:func:`isr_refine` with statistics (``isr_cpu._refine``'s): ``(part, cost, stats)``."""
    g = _Graph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    k, lmax = int(k), int(lmax)
    if g.nlev == 0 or int(g.prefix_h[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")
    stats = {"iterations": 0, "isr_steps": 0, "weak_steps": 0, "strong_steps": 0,
             "isr_moves": 0, "rebalance_moves": 0}
    cur = as_device(part, cp.int32).copy()
    if g.n == 0 or k == 1:
        return cur, cost(g.xadj, g.adjncy, g.adjwgt, cur, g.prefix_h, g.dist_h), stats
    from . import rebalance_gpu

    st = _State(g, cur, k)
    _, maxw, traffic = st.snapshot()
    best, best_cost, best_maxw = cur.copy(), _cost_of(traffic, g.dist_h), maxw
    isr = _ISR(g, k)
    it = 0
    weak_runs = 0
    while it < max_iters and stats["iterations"] < HARD_CAP:
        it += 1
        stats["iterations"] += 1
        isr_round = maxw <= lmax
        if isr_round:
            isr.step(g, cur, st.bw, k, lmax, step_key(seed, stats["isr_steps"]), st.target)
            stats["isr_steps"] += 1
            weak_runs = 0
        elif weak_runs < max_weak:
            moves, dest = rebalance_gpu.weak_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, cur, k,
                                                   lmax, g.prefix, st.bw, seed)
            st.target[moves] = dest[moves]
            weak_runs += 1
            stats["weak_steps"] += 1
        else:
            moves, full = rebalance_gpu.strong_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, cur, k,
                                                     lmax, g.prefix, st.bw)
            st.target[moves] = full[moves]
            weak_runs = 0
            stats["strong_steps"] += 1
        st.apply(g)
        moved, maxw, traffic = st.snapshot()
        stats["isr_moves" if isr_round else "rebalance_moves"] += moved
        if isr_round and moved == 0:
            break  # no positive-gain move fits: a local optimum
        cur_cost = _cost_of(traffic, g.dist_h)
        # Jet's bookkeeping: balanced beats unbalanced, then lower cost / lower max weight
        keep, progress = _judge(cur_cost, maxw, best_cost, best_maxw, lmax, phi)
        if progress:
            it = 0
        if keep:
            best[...] = cur
            best_cost, best_maxw = cur_cost, maxw
    if g.adjwgt.dtype == cp.float64:
        # incremental float updates drift in the last bits: report a fresh sum
        best_cost = cost(g.xadj, g.adjncy, g.adjwgt, best, g.prefix_h, g.dist_h)
    return best, best_cost, stats


def isr_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0,
               incremental=True) -> tuple[cp.ndarray, float]:
    """Independent-set refinement loop: the rules of ``isr_cpu.isr_refine`` (ISR step
    when balanced, else weak then strong rebalancing; Jet's best-partition bookkeeping
    and stopping rule; :data:`HARD_CAP`). Returns ``(part, cost)``: a new CuPy int32
    array and ``J``; ``part`` is not modified.

    ``filter_ratio`` and ``incremental`` are accepted for signature parity with
    ``jet_refine`` and ignored (ISR moves positive gains only and re-evaluates every
    boundary vertex each step).
    """
    del filter_ratio, incremental
    best, best_cost, _ = _refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist,
                                 max_iters=max_iters, phi=phi, max_weak=max_weak, seed=seed)
    return best, best_cost
