"""Jet refinement on the GPU (twin of :mod:`.jet_cpu`): label propagation and the
refinement loop.

Same functions and semantics as :mod:`.jet_cpu` (read its module docstring for the
algorithm and the gain formula), taking and returning CuPy arrays; ``prefix``,
``dist`` and ``locked`` may be NumPy or CuPy. The rebalancers live in
:mod:`.rebalance_gpu`; :func:`jet_refine` calls them as the CPU loop calls
``_weak_moves`` / ``_strong_moves``.

Kernels (``cuda/jet.cu``)
-------------------------
* ``lp_boundary`` -- resets every vertex's proposal and lists the unlocked boundary
  vertices (a count and a list on the device: no readback), so that the two filters
  run over those alone, with no warp idling beside one boundary vertex.
* ``lp_propose`` -- first filter, one thread per listed vertex. Block connectivities
  live in a per-vertex table of ``deg(u) * l`` entries (keys ``t * k + group``): an
  array in the thread's local memory searched linearly when that is at most
  ``gpu_common.LOCAL_TABLE`` entries, else an open-addressing hash table in global
  scratch (:class:`.gpu_common.TableScratch`), so there is no cap on the degree or on
  the number of adjacent blocks.
* ``lp_afterburn`` -- second filter, one thread per listed vertex.
* ``move_delta_*`` / ``commit_moves`` -- apply a round of moves: traffic change
  per level, block weights, partition.

Relation to the CPU twin
------------------------
* Bit-identical: the LP proposals (destinations and gains, cut and distance mode),
  the afterburner and therefore :func:`jet_lp`; weak rebalancing. Every vertex visits its neighbours
  in CSR order, each connectivity is summed in neighbour order as in the CPU's
  dense table, gains use the same operation order with explicit IEEE rounding
  (``__dadd_rn``/``__dmul_rn``: NVRTC would otherwise fuse multiply-adds), and the
  tie rules (smallest block id; afterburner priority larger gain, then smaller id)
  select the same winner in any listing order.
* Integer weights: traffic and block weights are exact, so a :func:`jet_refine`
  without strong rebalancing steps returns exactly the CPU's partition and cost.
  Strong rebalancing assigns destinations in parallel (:mod:`.rebalance_gpu`), which
  need not pick the CPU's moves, so results then differ (same balance guarantees,
  similar cost).
* Float weights: per-level traffic is summed in another order than on the CPU
  (deterministic row sums, see :mod:`.objective_gpu`), so costs agree to rounding
  and the loop's cost comparisons may, rarely, decide differently.

Host synchronisation
--------------------
The state (partition, block weights, traffic, locks, and the loop's control block:
iteration counter, best cost, best max block weight, the kind of the next iteration)
stays on the device, and the bookkeeping after every iteration runs there too
(``loop_control`` in ``cuda/jet_loop.cu``, the CPU loop's arithmetic and branch order).
One loop body holds an LP round and a weak rebalancing step
(:class:`.rebalance_gpu.WeakStep`: fixed sizes, no readback), each gated by the kind
the control block names, so a run of LP and weak iterations is one
:class:`.cuda_graphs.DeviceLoop`: its first iteration is launched directly and, if the
device asks for more, the rest run as one CUDA while-node graph, with no host work per
iteration. Only strong rebalancing (a data-dependent host loop over limits and
levels) returns to the host. The host reads the loop's status from pinned memory
once per run. No per-vertex data crosses the bus inside the loop.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from . import cuda_graphs, objective_gpu, rebalance_gpu
from .gpu_common import (HISTOGRAM_BLOCKS, TableScratch, as_device, f64, gain_weights, i64,
                         kernel, launch)
from .jet_cpu import (BUCKET_RATIO, MID_BUCKET, NUM_BUCKETS, ULTRA_FILTER_RATIOS, _cost_of,
                      filter_schedule)

__all__ = ["BUCKET_RATIO", "MID_BUCKET", "NUM_BUCKETS", "ULTRA_FILTER_RATIOS", "block_weights",
           "cost", "filter_schedule", "jet_lp", "jet_refine", "ultra_refine"]

_SRC = "jet.cu"
_NO_GATE = np.uint64(0)  # null control-block pointer: gated kernels always run


# ------------------------------------------------------------------ inputs
def _host(a, dtype) -> np.ndarray:
    """``a`` (NumPy or CuPy) as a contiguous host array of ``dtype``."""
    return np.ascontiguousarray(cp.asnumpy(a), dtype=dtype)


def _weights(adjwgt) -> cp.ndarray:
    a = cp.asarray(adjwgt)
    return as_device(a, cp.float64 if a.dtype.kind == "f" else cp.int64)


class _Graph:
    """Device arrays of one refinement problem, with the dtypes the kernels expect."""

    def __init__(self, xadj, adjncy, adjwgt, vwgt, prefix, dist):
        self.xadj = as_device(xadj, cp.int64)
        self.adjncy = as_device(adjncy, cp.int32)
        self.adjwgt = _weights(adjwgt)  # traffic: the weights' own dtype
        # gains: float64 (as the CPU), converted as the kernels read the weights
        self.gain_weights = gain_weights(self.adjwgt)
        self.vwgt = None if vwgt is None else as_device(vwgt, cp.int64)
        self.n = self.xadj.size - 1
        self.prefix_h = _host(prefix, np.int64)
        self.prefix = cp.asarray(self.prefix_h)
        self.nlev = self.prefix_h.size
        self.cut_mode = self.nlev == 1
        if dist is not None:
            self.dist_h = _host(dist, np.float64)
            if self.dist_h.shape != self.prefix_h.shape:
                raise ValueError("prefix and dist must have the same length")
            self.dist = cp.asarray(self.dist_h)
            # the CPU's common_cpu.level_tables: P_t of level-t groups (P_0 = 1), d_{t+1} - d_t
            self.div = cp.asarray(np.concatenate(([1], self.prefix_h[:-1])).astype(np.int64))
            self.delta = cp.asarray(np.diff(np.concatenate(([0.0], self.dist_h))))


# ------------------------------------------------------------------ objective
def block_weights(part, vwgt, k: int) -> cp.ndarray:
    """Total vertex weight per block (CuPy int64, length ``k``): the rebalancers' kernel,
    which sums weights only (``pe_loads`` also counts tasks, which every restart of the
    refinement loop would compute for nothing)."""
    return rebalance_gpu.block_weights(part, vwgt, int(k))


def cost(xadj, adjncy, adjwgt, part, prefix, dist) -> float:
    """The objective ``J`` (every CSR entry ``(u, v)`` adds ``w * D(part[u], part[v])``;
    ``2 * d_1 * cut`` in cut mode)."""
    traffic = objective_gpu.level_traffic(xadj, adjncy, adjwgt, part, _host(prefix, np.int64))
    return _cost_of(traffic, _host(dist, np.float64))


# ------------------------------------------------------------------ label propagation
class _LP:
    """Scratch of the LP kernels, allocated once per refinement call."""

    def __init__(self, g: _Graph):
        n = g.n
        self.table = TableScratch(g.xadj, g.nlev)
        self.ratio = cp.zeros(1, dtype=cp.float64)  # the filter ratio, read by lp_propose
        self.dest = cp.empty(n, dtype=cp.int32)
        self.gain = cp.empty(n, dtype=cp.float64)
        self.listed = cp.empty(max(n, 1), dtype=cp.int32)  # the round's boundary vertices
        self.count = cp.zeros(1, dtype=cp.uint64)

    def round(self, g: _Graph, part, k: int, locked, filter_ratio, move, target,
              gate=None) -> None:
        """Both filters: ``move[u] = 1`` / ``target[u] = dest`` for the vertices to move,
        ``0`` / ``-1`` for all others (no synchronisation). ``filter_ratio=None`` keeps
        the ratio set last (a captured round reads it from device memory). ``gate``: the
        loop's control block; the kernels then run only when it says an LP iteration."""
        gate = _NO_GATE if gate is None else gate
        if filter_ratio is not None:
            self.ratio.fill(filter_ratio)
        self.count.fill(0)
        launch(kernel(_SRC, "lp_boundary"), g.n, g.xadj, g.adjncy, part, locked, i64(g.n),
               self.dest, move, target, self.listed, self.count, gate)
        # sized for every vertex; the threads past the listed count return at once
        launch(kernel(_SRC, "lp_propose"), g.n,
               g.xadj, g.adjncy, *g.gain_weights, part, g.div, g.delta,
               i64(k), i64(g.nlev), i64(g.cut_mode), self.ratio,
               self.table.offset, self.table.keys, self.table.vals, self.dest, self.gain,
               self.listed, self.count, gate)
        launch(kernel(_SRC, "lp_afterburn"), g.n,
               g.xadj, g.adjncy, *g.gain_weights, part, g.prefix, g.dist,
               i64(g.cut_mode), self.dest, self.gain, move, target, self.listed, self.count,
               gate)


def jet_lp(xadj, adjncy, adjwgt, part, k, prefix, dist, *, locked=None,
           filter_ratio=0.25) -> tuple[cp.ndarray, cp.ndarray]:
    """Unconstrained label propagation (paper Algorithm 4 with Jet's filter).

    ``part`` (int32) is not modified; ``locked`` (optional bool/uint8) vertices stay.
    Returns ``(vertices, targets)``: ascending int32 ids of the vertices to move and
    their destination blocks, exactly those of :func:`.jet_cpu.jet_lp`.
    """
    g = _Graph(xadj, adjncy, adjwgt, None, prefix, dist)
    part = as_device(part, cp.int32)
    locked = (cp.zeros(g.n, dtype=cp.uint8) if locked is None
              else as_device(cp.asarray(locked).astype(cp.uint8, copy=False)))
    move = cp.empty(g.n, dtype=cp.uint8)
    target = cp.empty(g.n, dtype=cp.int32)
    _LP(g).round(g, part, int(k), locked, filter_ratio, move, target)
    moves = cp.flatnonzero(move).astype(cp.int32)
    return moves, target[moves]


# ------------------------------------------------------------------ refinement state
#: Blocks of the first stage of the traffic-delta reduction (``row_partials``).
_PARTIALS = 256
_THREADS = 256  # REDUCE_THREADS in cuda/jet_loop.cu
_LOOP = "jet_loop.cu"
# words of the control block (C_* / F_* / S_* in cuda/jet_loop.cu)
_C_IT, _C_MAXW, _C_BEST_MAXW, _C_ROUNDS, _C_MODE, _C_WEAK = 0, 2, 3, 6, 7, 8
_CTL_WORDS = 10
_F_COST, _F_BEST = 0, 1
_S_IT, _S_MAXW, _S_STOP, _S_ROUNDS, _S_MODE = 1, 2, 3, 4, 5
# kinds of iteration (MODE_* in cuda/common.cuh)
MODE_LP, MODE_WEAK, MODE_STRONG = 0, 1, 2


class _State:
    """The refinement state on the device: current and best partition, block weights,
    traffic per level, and the loop's control block (iteration counter, best cost...),
    which ``loop_control`` (cuda/jet_loop.cu) updates after every iteration."""

    def __init__(self, g: _Graph, part, k: int, lmax: int, max_iters: int, phi: float,
                 max_weak: int):
        self.g, self.k, self.lmax, self.max_iters, self.phi = g, k, lmax, max_iters, phi
        self.max_weak = max_weak
        self.part = part
        self.best = part.copy()
        self.bw = cp.zeros(k, dtype=cp.int64)
        self.traffic = cp.zeros(g.nlev + 1, dtype=g.adjwgt.dtype)
        self.target = cp.full(g.n, -1, dtype=cp.int32)  # -1 except during a round
        self.count = cp.zeros(1, dtype=cp.int64)
        self.rows = cp.zeros((g.nlev + 1, objective_gpu._rows(g.n)), dtype=g.adjwgt.dtype)
        self.partial = cp.zeros((g.nlev + 1) * _PARTIALS, dtype=g.adjwgt.dtype)
        self.suffix = "f64" if g.adjwgt.dtype == cp.float64 else "i64"
        self.ctl = cp.zeros(_CTL_WORDS, dtype=cp.int64)
        self.fctl = cp.zeros(2, dtype=cp.float64)
        # where rebalancing iterations (run from the host) report: pinned, no copy
        self.status = cupyx.empty_pinned(8, dtype=np.int64)
        # restart's transfers (pinned: asynchronous; each is complete before the next
        # restart, which follows at least one synchronised loop run)
        self._maxw_h = cupyx.empty_pinned(1, dtype=np.int64)
        self._traffic_h = cupyx.empty_pinned(g.nlev + 1, dtype=self.traffic.dtype)
        self._ctl_h = cupyx.empty_pinned(_CTL_WORDS, dtype=np.int64)
        self._fctl_h = cupyx.empty_pinned(2, dtype=np.float64)
        self.restart()

    def restart(self) -> None:
        """Begin a refinement pass from the current ``part``: it is the best so far, the
        counters restart. Writes into the existing buffers, whose addresses a captured
        loop graph holds. One synchronisation: the max block weight and the traffic
        come back together, and the control block goes up from pinned memory (a copy
        from pageable memory would synchronise the stream too)."""
        g = self.g
        self.best[...] = self.part
        self.bw[...] = block_weights(self.part, g.vwgt, self.k)
        self.traffic[...] = objective_gpu.level_traffic_device(g.xadj, g.adjncy, g.adjwgt,
                                                               self.part, g.prefix)
        self.count.fill(0)
        stream = cp.cuda.get_current_stream()
        self.bw.max(keepdims=True).get(stream=stream, out=self._maxw_h, blocking=False)
        self.traffic.get(stream=stream, out=self._traffic_h, blocking=False)
        stream.synchronize()
        maxw = int(self._maxw_h[0])
        cost0 = _cost_of(self._traffic_h, g.dist_h)
        # the CPU loop's first branch: LP when balanced, else weak (if allowed), else strong
        mode = MODE_LP if maxw <= self.lmax else MODE_WEAK if self.max_weak > 0 else MODE_STRONG
        self._ctl_h[:] = 0
        self._ctl_h[[_C_MAXW, _C_BEST_MAXW, _C_MODE]] = maxw, maxw, mode
        self._fctl_h[:] = cost0
        self.ctl.set(self._ctl_h, stream=stream)
        self.fctl.set(self._fctl_h, stream=stream)
        self.maxw, self.cost0, self.mode = maxw, cost0, mode

    def apply(self, kind: int, handle: np.uint64, status_ptr: np.uint64) -> None:
        """Execute the moves marked in ``target`` (twin of ``jet_cpu._apply``), then the
        loop's bookkeeping for this iteration (no synchronisation, no allocation).
        ``kind``: the iteration's MODE_*, or -1 for the one the control block names."""
        g = self.g
        rows = self.rows.shape[1]
        self.rows.fill(0)
        launch(kernel(_SRC, "move_delta_" + self.suffix), rows,
               g.xadj, g.adjncy, g.adjwgt, self.part, g.prefix, self.target,
               i64(g.n), i64(rows), self.rows)
        launch(kernel(_SRC, "commit_moves"), g.n,
               self.part, self.target, g.vwgt, i64(g.n), i64(self.k), self.bw, self.count,
               max_blocks=HISTOGRAM_BLOCKS)
        kernel(_LOOP, "row_partials_" + self.suffix)(
            (_PARTIALS,), (_THREADS,), (self.rows, i64(rows), i64(g.nlev + 1), self.partial))
        kernel(_LOOP, "loop_control_" + self.suffix)(
            (1,), (_THREADS,),
            (self.partial, i64(_PARTIALS), self.traffic, i64(g.nlev), g.dist, self.bw,
             i64(self.k), i64(self.lmax), self.ctl, self.fctl, self.count, i64(kind),
             i64(self.max_iters), i64(self.max_weak), f64(self.phi), handle, status_ptr))
        launch(kernel(_LOOP, "copy_if_improved"), g.n, self.best, self.part, i64(g.n), self.ctl)


# ------------------------------------------------------------------ refinement loop
def jet_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0, incremental: bool = True,
               graph_mode: str | None = None) -> tuple[cp.ndarray, float]:
    """Jet refinement loop (paper Algorithm 6). Returns ``(part, cost)``.

    The rules of :func:`.jet_cpu.jet_refine`: LP when the partition is balanced,
    else weak rebalancing (at most ``max_weak`` times in a row), then strong; LP
    locks the vertices it moved until the next LP round; the best partition is kept
    (balanced beats unbalanced, then lower cost / lower max block weight); stop after
    ``max_iters`` iterations without improvement (``phi``) or at an unlocked LP fixed
    point. ``part`` is not modified; the result is a new CuPy int32 array and ``J``.

    Host round trips: runs of LP rounds (the common case) execute as one CUDA graph
    whose last kernel decides on the device whether another LP round follows
    (:class:`.cuda_graphs.DeviceLoop`; ``graph_mode`` overrides its mode, default
    ``PROCMAP_CUDA_GRAPHS`` or ``"auto"``). The host steps in only for rebalancing
    iterations and reads the loop's status from pinned memory after each run.

    ``incremental`` is accepted for signature parity with the CPU loop and ignored:
    the GPU re-proposes every vertex each LP round (one kernel over all vertices),
    which gives the same proposals as the CPU's incremental re-evaluation.
    """
    del incremental
    return ultra_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist,
                        filter_ratios=(filter_ratio,), max_iters=max_iters, phi=phi,
                        max_weak=max_weak, seed=seed, graph_mode=graph_mode)


def ultra_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *,
                 filter_ratios=ULTRA_FILTER_RATIOS, max_iters=12, phi=0.999, max_weak=2,
                 seed=0, graph_mode: str | None = None) -> tuple[cp.ndarray, float]:
    """Jet's "ultra" refinement: one :func:`jet_refine` pass per filter ratio, each
    continuing from the previous result, exactly as :func:`.jet_cpu.ultra_refine`.
    Returns ``(part, cost)``; ``part`` is not modified.

    The passes share one device state, LP scratch and captured loop graph (the ratio
    is read from device memory), so a pass costs its iterations and a restart, not
    the setup of a new refinement.
    """
    g = _Graph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    k, lmax = int(k), int(lmax)
    if g.nlev == 0 or int(g.prefix_h[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")  # > 1 need not terminate
    cur = as_device(part, cp.int32).copy()
    if g.n == 0 or k == 1 or not len(filter_ratios):
        return cur, cost(g.xadj, g.adjncy, g.adjwgt, cur, g.prefix_h, g.dist_h)
    caller = cp.cuda.get_current_stream()
    stream = cuda_graphs.loop_stream()
    stream.wait_event(caller.record())  # the inputs were written on the caller's stream
    with stream:
        refiner = _Refiner(g, cur, k, lmax, max_iters, phi, max_weak, seed, graph_mode)
        for i, ratio in enumerate(filter_ratios):
            if i:
                cur[...] = refiner.st.best  # the next pass starts from this one's result
            refiner.run(ratio)
        best, best_cost = refiner.st.best, refiner.best_cost()
    caller.wait_event(stream.record())
    return best, best_cost


def _load_loop_kernels(suffix: str) -> None:
    """Load every kernel of an LP iteration now: module loading is no work to capture."""
    for name in ("lp_boundary", "lp_propose", "lp_afterburn", "move_delta_" + suffix,
                 "commit_moves"):
        kernel(_SRC, name)
    for name in ("row_partials_" + suffix, "loop_control_" + suffix, "copy_if_improved",
                 "copy_locks"):
        kernel(_LOOP, name)


class _Refiner:
    """One refinement problem on the device (graph, partition ``cur``, limits), run
    for one or more passes (:meth:`run`); everything a pass needs is allocated once,
    and the loop graph is captured once, by the first pass that needs it.

    The loop body holds an LP round *and* a weak rebalancing step, each gated by the
    kind of iteration the control block names, so runs of LP and weak iterations --
    im's J-gain refinement alternates them -- stay on the device; only strong
    rebalancing (a data-dependent host loop) returns to the host.
    """

    def __init__(self, g: _Graph, cur, k, lmax, max_iters, phi, max_weak, seed, graph_mode):
        self.g, self.cur, self.k, self.lmax = g, cur, k, lmax
        self.max_iters, self.seed, self.graph_mode = max_iters, seed, graph_mode
        self.st = _State(g, cur, k, lmax, max_iters, phi, max_weak)
        _load_loop_kernels(self.st.suffix)
        self.lp = _LP(g)
        self.locked = cp.zeros(g.n, dtype=cp.uint8)  # the vertices moved by the last LP round
        self.moved = cp.empty(g.n, dtype=cp.uint8)
        self.table = TableScratch(g.xadj, 1)          # the rebalancers' connectivity tables
        self.weak = rebalance_gpu.WeakStep(g.n, k)
        self.loop = None   # the DeviceLoop, made on the first LP or weak iteration
        self.passes = 0

    def _body(self):
        """One LP-or-weak iteration as a DeviceLoop body. A closure over the arrays, not
        a bound method: the loop must not keep the refiner alive (a reference cycle
        would hold all its device memory until the garbage collector runs)."""
        g, st, lp, weak, table = self.g, self.st, self.lp, self.weak, self.table
        cur, k, lmax, seed, locked, moved = (self.cur, self.k, self.lmax, self.seed,
                                             self.locked, self.moved)

        def iteration(handle, status_ptr):
            lp.round(g, cur, k, locked, None, moved, st.target, gate=st.ctl)
            launch(kernel(_LOOP, "copy_locks"), g.n, locked, moved, i64(g.n), st.ctl)
            weak.enqueue(g.xadj, g.adjncy, g.adjwgt, g.vwgt, cur, st.bw, lmax, g.prefix, seed,
                         table, st.target, st.ctl)
            st.apply(-1, handle, status_ptr)

        return iteration

    def _strong(self) -> None:
        g, st = self.g, self.st
        moves, dest = rebalance_gpu.strong_moves(g.xadj, g.adjncy, g.adjwgt, g.vwgt, self.cur,
                                                 self.k, self.lmax, g.prefix, st.bw, self.table)
        st.target[moves] = dest[moves]
        st.apply(MODE_STRONG, np.uint64(0), np.uint64(st.status.ctypes.data))
        cp.cuda.get_current_stream().synchronize()

    def run(self, filter_ratio: float) -> None:
        """One refinement pass (jet_cpu.jet_refine's loop) from the current ``cur``;
        the pass's best partition ends in ``st.best``."""
        st = self.st
        if self.passes:
            st.restart()
            self.locked.fill(0)
        self.passes += 1
        self.lp.ratio.fill(filter_ratio)
        mode, it, stop = st.mode, 0, False
        while it < self.max_iters and not stop:
            if mode != MODE_STRONG:
                if self.loop is None:
                    self.loop = cuda_graphs.DeviceLoop(self._body(), self.graph_mode)
                self.loop.run()
                status = self.loop.status
            else:
                self._strong()
                status = st.status
            it, stop, mode = int(status[_S_IT]), bool(status[_S_STOP]), int(status[_S_MODE])

    def best_cost(self) -> float:
        """The cost of ``st.best`` (of the last pass)."""
        g = self.g
        if g.adjwgt.dtype == cp.float64:
            # incremental float updates drift in the last bits: report a fresh sum
            return cost(g.xadj, g.adjncy, g.adjwgt, self.st.best, g.prefix_h, g.dist_h)
        return float(self.st.fctl[_F_BEST:_F_BEST + 1].get()[0])
