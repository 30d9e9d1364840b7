"""Jet refinement on the GPU (twin of :mod:`.jet_cpu`): label propagation and the
GPU's one refinement loop, which runs Jet and, with an ISR step as its balanced round,
:mod:`.isr_gpu`'s independent-set refinement.

Same functions and semantics as :mod:`.jet_cpu` (read its module docstring for the
algorithm and the gain formula), taking and returning CuPy arrays; ``prefix``,
``dist`` and ``locked`` may be NumPy or CuPy. The rebalancers live in
:mod:`.rebalance_gpu`; :func:`jet_refine` calls them as the CPU loop calls
``rebalance_cpu.weak_select`` / ``strong_select``.

Kernels (``refinement/jet.cu``)
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
* Heavy rows: a row of integer weights longer than ``HEAVY_DEGREE``
  (``cuda/conn_table.cuh``) is scanned by the whole warp that lists its vertex, with
  atomic table sums, before the lanes take their own rows. A thread that scans a hub of
  a power-law graph alone holds up the whole kernel: a Jet iteration on R-MAT 2^20 took
  16.5 ms that way, against 2.4 ms without the hubs' edges.
* ``move_delta_*`` / ``commit_moves`` -- apply a round of moves: traffic change
  per level, block weights, partition.

Relation to the CPU twin
------------------------
* Bit-identical: the LP proposals (destinations and gains, cut and distance mode),
  the afterburner and therefore :func:`jet_lp`; weak rebalancing. Heavy rows keep this
  where their sums are of integers (integer weights; in distance mode also integer
  distances, else the afterburner's warp sum may round differently). Every vertex visits its neighbours
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

The refinement loop (:func:`refine`, :class:`_Refiner`)
-------------------------------------------------------
One loop for both refiners, as on the CPU: the *balanced round* when the partition
is balanced, else weak rebalancing (at most ``max_weak`` times in a row), else
strong; Jet's best-partition rules and patience. The balanced round is an object
(:class:`_LPRound` here, ``isr_gpu._ISRRound`` for ISR) that marks its moves in the
state's target array; the two differ in the loop only by LP's locks (a round that
moves nothing ends an ISR loop at once, a Jet loop only when nothing was locked) and
ISR's iteration cap (``max_rounds``).

Host synchronisation
--------------------
The state (partition, block weights, traffic, and the loop's control block:
iteration counter, best cost, best max block weight, the kind of the next iteration,
iterations and moves per kind) stays on the device, and the bookkeeping after every
iteration runs there too (``loop_control`` in ``refinement/jet_loop.cu``, the CPU loop's
arithmetic and branch order). One loop body holds the balanced round and a weak
rebalancing step (:class:`.rebalance_gpu.WeakStep`: fixed sizes, no readback), each
gated by the kind the control block names, so a run of balanced and weak iterations
is one :class:`.cuda_graphs.DeviceLoop`: its first iteration is launched directly
and, if the device asks for more, the rest run as one CUDA while-node graph, with no
host work per iteration (Jet; the ISR step allocates in its sorts, so ISR's body is
launched from the host every iteration). Only strong rebalancing (a data-dependent
host loop over limits and levels) returns to the host. The host reads the loop's
status from pinned memory once per run. No per-vertex data crosses the bus inside
the loop.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from .. import cuda_graphs
from ..gpu_common import (HISTOGRAM_BLOCKS, TableScratch, as_device, f64, gain_weights, i64,
                          kernel, launch)
from ..objective import objective_gpu
from ..rebalancing import rebalance_gpu
from .jet_cpu import ULTRA_FILTER_RATIOS, filter_schedule, traffic_cost

__all__ = ["ULTRA_FILTER_RATIOS", "block_weights", "cost", "filter_schedule", "jet_lp",
           "jet_refine", "lp_proposals", "ultra_refine"]

_SRC = "refinement/jet.cu"
_NO_GATE = np.uint64(0)  # null control-block pointer: gated kernels always run


# ------------------------------------------------------------------ inputs
def _host(a, dtype) -> np.ndarray:
    """``a`` (NumPy or CuPy) as a contiguous host array of ``dtype``."""
    return np.ascontiguousarray(cp.asnumpy(a), dtype=dtype)


def _weights(adjwgt) -> cp.ndarray:
    a = cp.asarray(adjwgt)
    return as_device(a, cp.float64 if a.dtype.kind == "f" else cp.int64)


class DeviceGraph:
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
    return traffic_cost(traffic, _host(dist, np.float64))


# ------------------------------------------------------------------ label propagation
class LPKernels:
    """Scratch of the LP kernels, allocated once per refinement call."""

    def __init__(self, g: DeviceGraph):
        n = g.n
        self.table = TableScratch(g.xadj, g.nlev)
        self.ratio = cp.zeros(1, dtype=cp.float64)  # the filter ratio, read by lp_propose
        self.dest = cp.empty(n, dtype=cp.int32)
        self.gain = cp.empty(n, dtype=cp.float64)
        self.listed = cp.empty(max(n, 1), dtype=cp.int32)  # the round's boundary vertices
        self.count = cp.zeros(1, dtype=cp.uint64)

    def round(self, g: DeviceGraph, part, k: int, locked, filter_ratio, move, target,
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


def lp_proposals(xadj, adjncy, adjwgt, part, k: int, prefix, dist, *, locked=None,
                 filter_ratio: float = 0.25) -> tuple[cp.ndarray, cp.ndarray]:
    """The first filter of Algorithm 4 for every vertex, bit-identical to
    :func:`.jet_cpu.lp_proposals`: ``(dest, gain)``, int32 ``dest[u]`` (-1: no
    candidate) and float64 ``gain[u]`` (0 where ``dest[u] == -1``). ``part`` is not
    modified."""
    g = DeviceGraph(xadj, adjncy, adjwgt, None, prefix, dist)
    lp = LPKernels(g)
    lp.round(g, as_device(part, cp.int32), int(k), _locks(locked, g.n), filter_ratio,
             cp.empty(g.n, dtype=cp.uint8), cp.empty(g.n, dtype=cp.int32))
    # the afterburner ran too; the kernels leave the gain of non-candidates as it was
    return lp.dest, cp.where(lp.dest >= 0, lp.gain, 0.0)


def _locks(locked, n: int) -> cp.ndarray:
    """``locked`` as the kernels' uint8 device array (``None``: nothing locked)."""
    return (cp.zeros(n, dtype=cp.uint8) if locked is None
            else as_device(cp.asarray(locked).astype(cp.uint8, copy=False)))


def jet_lp(xadj, adjncy, adjwgt, part, k, prefix, dist, *, locked=None,
           filter_ratio=0.25) -> tuple[cp.ndarray, cp.ndarray]:
    """Unconstrained label propagation (paper Algorithm 4 with Jet's filter).

    ``part`` (int32) is not modified; ``locked`` (optional bool/uint8) vertices stay.
    Returns ``(vertices, targets)``: ascending int32 ids of the vertices to move and
    their destination blocks, exactly those of :func:`.jet_cpu.jet_lp`.
    """
    g = DeviceGraph(xadj, adjncy, adjwgt, None, prefix, dist)
    part = as_device(part, cp.int32)
    locked = _locks(locked, g.n)
    move = cp.empty(g.n, dtype=cp.uint8)
    target = cp.empty(g.n, dtype=cp.int32)
    LPKernels(g).round(g, part, int(k), locked, filter_ratio, move, target)
    moves = cp.flatnonzero(move).astype(cp.int32)
    return moves, target[moves]


# ------------------------------------------------------------------ refinement state
#: Blocks of the first stage of the traffic-delta reduction (``row_partials``).
_PARTIALS = 256
_THREADS = 256  # REDUCE_THREADS in refinement/jet_loop.cu
_LOOP = "refinement/jet_loop.cu"
# words of the control block (C_* / F_* / S_* in refinement/jet_loop.cu)
_C_IT, _C_MAXW, _C_BEST_MAXW, _C_ROUNDS, _C_MODE, _C_WEAK = 0, 2, 3, 6, 7, 8
_C_STEPS, _C_MOVES = 9, 12  # three words each, indexed by MODE_*
_CTL_WORDS = 16
_F_COST, _F_BEST = 0, 1
_S_IT, _S_MAXW, _S_STOP, _S_ROUNDS, _S_MODE, _S_PROGRESSED = 1, 2, 3, 4, 5, 6
# kinds of iteration (MODE_* in cuda/common.cuh); MODE_LP is the balanced round, an LP
# round in Jet's loop and an ISR step in ISR's
MODE_LP, MODE_WEAK, MODE_STRONG = 0, 1, 2
#: ``max_rounds`` of a loop without an iteration cap (Jet's).
NO_CAP = 2**62


class LoopState:
    """The refinement state on the device: current and best partition, block weights,
    traffic per level, and the loop's control block (iteration counter, best cost,
    iterations and moves per kind...), which ``loop_control`` (refinement/jet_loop.cu)
    updates after every iteration.

    ``locking``: the balanced round locks the vertices it moved (Jet's LP), so a round
    that moves nothing ends the loop only after a round that moved nothing; without
    (ISR) it ends the loop at once. ``max_rounds``: the loop's iteration cap."""

    def __init__(self, g: DeviceGraph, part, k: int, lmax: int, max_iters: int, phi: float,
                 max_weak: int, locking: bool, max_rounds: int, start_iters: int):
        self.g, self.k, self.lmax, self.max_iters, self.phi = g, k, lmax, max_iters, phi
        self.start_iters = start_iters
        self.max_weak, self.locking, self.max_rounds = max_weak, locking, max_rounds
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
        cost0 = traffic_cost(self._traffic_h, g.dist_h)
        # the CPU loop's first branch: the balanced round when balanced, else weak (if
        # allowed), else strong
        mode = MODE_LP if maxw <= self.lmax else MODE_WEAK if self.max_weak > 0 else MODE_STRONG
        self._ctl_h[:] = 0
        self._ctl_h[[_C_MAXW, _C_BEST_MAXW, _C_MODE]] = maxw, maxw, mode
        self._fctl_h[:] = cost0
        self.ctl.set(self._ctl_h, stream=stream)
        self.fctl.set(self._fctl_h, stream=stream)
        self.maxw, self.cost0, self.mode = maxw, cost0, mode

    def steps(self) -> cp.ndarray:
        """A device view of the number of balanced rounds run so far (ISR's hash keys
        derive from it)."""
        return self.ctl[_C_STEPS + MODE_LP:_C_STEPS + MODE_LP + 1]

    def counters(self) -> tuple[int, list[int], list[int]]:
        """``(iterations, iterations per kind, moves per kind)`` of the last pass, kinds
        indexed by MODE_* (one readback, on the current stream)."""
        ctl = self.ctl.get()
        return (int(ctl[_C_ROUNDS]), [int(x) for x in ctl[_C_STEPS:_C_STEPS + 3]],
                [int(x) for x in ctl[_C_MOVES:_C_MOVES + 3]])

    def apply(self, kind: int, handle: np.uint64, status_ptr: np.uint64) -> None:
        """Execute the moves marked in ``target`` (twin of ``jet_cpu.apply_moves``), then the
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
             i64(self.max_iters), i64(self.start_iters), i64(self.max_weak), f64(self.phi),
             i64(self.locking),
             i64(self.max_rounds), handle, status_ptr))
        launch(kernel(_LOOP, "copy_if_improved"), g.n, self.best, self.part, i64(g.n), self.ctl)


# ------------------------------------------------------------------ balanced rounds
class _LPRound:
    """Jet's balanced round: an LP round with the pass's filter ratio; the vertices it
    moves stay locked during the next LP round.

    The interface of a balanced round (:class:`_Refiner`; ISR's is
    ``isr_gpu._ISRRound``): ``locking`` and ``capturable`` (the round neither
    allocates nor synchronises, so the loop may run as a CUDA graph), ``begin_pass``
    (the pass's argument, here the filter ratio) and ``enqueue`` (mark the round's
    moves in ``st.target``, gated by the control block, no synchronisation)."""

    locking = True
    capturable = True

    def __init__(self, g: DeviceGraph):
        self.lp = LPKernels(g)
        self.locked = cp.zeros(g.n, dtype=cp.uint8)  # the vertices moved by the last LP round
        self.moved = cp.empty(g.n, dtype=cp.uint8)
        kernel(_LOOP, "copy_locks")  # loaded now: module loading is no work to capture
        for name in ("lp_boundary", "lp_propose", "lp_afterburn"):
            kernel(_SRC, name)

    def begin_pass(self, filter_ratio: float) -> None:
        self.locked.fill(0)
        self.lp.ratio.fill(filter_ratio)

    def enqueue(self, g: DeviceGraph, st: LoopState) -> None:
        self.lp.round(g, st.part, st.k, self.locked, None, self.moved, st.target, gate=st.ctl)
        launch(kernel(_LOOP, "copy_locks"), g.n, self.locked, self.moved, i64(g.n), st.ctl)


# ------------------------------------------------------------------ refinement loop
def jet_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0, incremental: bool = True,
               start_iters: int | None = None,
               graph_mode: str | None = None) -> tuple[cp.ndarray, float]:
    """Jet refinement loop (paper Algorithm 6). Returns ``(part, cost)``.

    The rules of :func:`.jet_cpu.jet_refine`: LP when the partition is balanced,
    else weak rebalancing (at most ``max_weak`` times in a row), then strong; LP
    locks the vertices it moved until the next LP round; the best partition is kept
    (balanced beats unbalanced, then lower cost / lower max block weight); stop after
    ``max_iters`` iterations without improvement (``phi``; ``start_iters`` while none
    has improved yet) or at an unlocked LP fixed point. ``part`` is not modified; the
    result is a new CuPy int32 array and ``J``.

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
                        max_weak=max_weak, seed=seed, start_iters=start_iters,
                        graph_mode=graph_mode)


def ultra_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *,
                 filter_ratios=ULTRA_FILTER_RATIOS, max_iters=12, phi=0.999, max_weak=2,
                 seed=0, start_iters: int | None = None,
                 graph_mode: str | None = None) -> tuple[cp.ndarray, float]:
    """Jet's "ultra" refinement: one :func:`jet_refine` pass per filter ratio, each
    continuing from the previous result, exactly as :func:`.jet_cpu.ultra_refine`.
    Returns ``(part, cost)``; ``part`` is not modified.

    The passes share one device state, LP scratch and captured loop graph (the ratio
    is read from device memory), so a pass costs its iterations and a restart, not
    the setup of a new refinement.
    """
    g = DeviceGraph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    best, best_cost, _ = refine(g, part, k, lmax, _LPRound, filter_ratios, max_iters=max_iters,
                                phi=phi, max_weak=max_weak, seed=seed, start_iters=start_iters,
                                graph_mode=graph_mode)
    return best, best_cost


def refine(g: DeviceGraph, part, k, lmax, make_round, passes, *, max_iters, phi, max_weak, seed,
           graph_mode: str | None = None, max_rounds: int = NO_CAP,
           start_iters: int | None = None):
    """The GPU refinement loop, for Jet and ISR: from ``part`` (not modified), one pass
    per item of ``passes``, each continuing from the previous one's best partition.

    ``make_round(g)`` builds the balanced round (:class:`_LPRound`, or
    ``isr_gpu._ISRRound``), whose ``begin_pass`` receives the pass's item.
    ``max_rounds`` caps the iterations of a pass; until an iteration of a pass has made
    progress, ``start_iters`` (default ``max_iters``) iterations without progress end it.
    Returns ``(best, cost, state)``:
    the last pass's best partition (a new CuPy int32 array), its ``J`` and the
    :class:`LoopState` (its :meth:`LoopState.counters`, read only by callers that want them),
    ``None`` when no pass ran (``n == 0``, ``k == 1`` or no passes).
    """
    k, lmax = int(k), int(lmax)
    if g.nlev == 0 or int(g.prefix_h[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")  # > 1 need not terminate
    cur = as_device(part, cp.int32).copy()
    if g.n == 0 or k == 1 or not len(passes):
        return cur, cost(g.xadj, g.adjncy, g.adjwgt, cur, g.prefix_h, g.dist_h), None
    caller = cp.cuda.get_current_stream()
    stream = cuda_graphs.loop_stream()
    stream.wait_event(caller.record())  # the inputs were written on the caller's stream
    with stream:
        refiner = _Refiner(g, cur, k, lmax, max_iters, phi, max_weak, seed, graph_mode,
                           make_round(g), max_rounds,
                           max_iters if start_iters is None else start_iters)
        for i, item in enumerate(passes):
            if i:
                cur[...] = refiner.st.best  # the next pass starts from this one's result
            refiner.run(item)
        best, best_cost, state = refiner.st.best, refiner.best_cost(), refiner.st
    caller.wait_event(stream.record())
    return best, best_cost, state


def _load_loop_kernels(suffix: str) -> None:
    """Load the kernels every iteration runs now: module loading is no work to capture."""
    for name in ("move_delta_" + suffix, "commit_moves"):
        kernel(_SRC, name)
    for name in ("row_partials_" + suffix, "loop_control_" + suffix, "copy_if_improved"):
        kernel(_LOOP, name)


class _Refiner:
    """One refinement problem on the device (graph, partition ``cur``, limits), run
    for one or more passes (:meth:`run`); everything a pass needs is allocated once,
    and the loop graph is captured once, by the first pass that needs it.

    The loop body holds the balanced round (``balanced``: Jet's LP round or an ISR
    step) *and* a weak rebalancing step, each gated by the kind of iteration the
    control block names, so runs of balanced and weak iterations -- im's J-gain
    refinement alternates them -- stay on the device; only strong rebalancing (a
    data-dependent host loop) returns to the host. A round that is not
    ``capturable`` runs its body from the host (DeviceLoop mode ``"off"``), still
    one status read per iteration.
    """

    def __init__(self, g: DeviceGraph, cur, k, lmax, max_iters, phi, max_weak, seed, graph_mode,
                 balanced, max_rounds, start_iters):
        self.g, self.cur, self.k, self.lmax = g, cur, k, lmax
        self.max_iters, self.max_rounds, self.seed = max_iters, max_rounds, seed
        self.start_iters = start_iters
        self.graph_mode = graph_mode if balanced.capturable else "off"
        self.st = LoopState(g, cur, k, lmax, max_iters, phi, max_weak, balanced.locking,
                            max_rounds, start_iters)
        _load_loop_kernels(self.st.suffix)
        self.balanced = balanced
        self.table = TableScratch(g.xadj, 1)          # the rebalancers' connectivity tables
        self.weak = rebalance_gpu.WeakStep(g.n, k)
        self.loop = None   # the DeviceLoop, made on the first balanced or weak iteration
        self.passes = 0

    def _body(self):
        """One balanced-or-weak iteration as a DeviceLoop body. A closure over the
        arrays, not a bound method: the loop must not keep the refiner alive (a
        reference cycle would hold all its device memory until the garbage collector
        runs)."""
        g, st, balanced, weak, table = self.g, self.st, self.balanced, self.weak, self.table
        cur, lmax, seed = self.cur, self.lmax, self.seed

        def iteration(handle, status_ptr):
            balanced.enqueue(g, st)
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

    def run(self, item) -> None:
        """One refinement pass (jet_cpu.jet_refine's loop) from the current ``cur``,
        ``item`` handed to the balanced round's ``begin_pass``; the pass's best
        partition ends in ``st.best``."""
        st = self.st
        if self.passes:
            st.restart()
        self.passes += 1
        self.balanced.begin_pass(item)
        mode, it, rounds, stop, progressed = st.mode, 0, 0, False, False
        while (it < (self.max_iters if progressed else self.start_iters)
               and rounds < self.max_rounds and not stop):
            if mode != MODE_STRONG:
                if self.loop is None:
                    self.loop = cuda_graphs.DeviceLoop(self._body(), self.graph_mode)
                self.loop.run()
                status = self.loop.status
            else:
                self._strong()
                status = st.status
            it, stop, mode = int(status[_S_IT]), bool(status[_S_STOP]), int(status[_S_MODE])
            rounds, progressed = int(status[_S_ROUNDS]), bool(status[_S_PROGRESSED])

    def best_cost(self) -> float:
        """The cost of ``st.best`` (of the last pass)."""
        g = self.g
        if g.adjwgt.dtype == cp.float64:
            # incremental float updates drift in the last bits: report a fresh sum
            return cost(g.xadj, g.adjncy, g.adjwgt, self.st.best, g.prefix_h, g.dist_h)
        return float(self.st.fctl[_F_BEST:_F_BEST + 1].get()[0])
