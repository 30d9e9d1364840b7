"""Jet refinement on the GPU (twin of :mod:`.jet_cpu`): label propagation and the
refinement loop.

Same functions and semantics as :mod:`.jet_cpu` (read its module docstring for the
algorithm and the gain formula), taking and returning CuPy arrays; ``prefix``,
``dist`` and ``locked`` may be NumPy or CuPy. The rebalancers live in
:mod:`.rebalance_gpu`; :func:`jet_refine` calls them as the CPU loop calls
``_weak_moves`` / ``_strong_moves``.

Kernels (``cuda/jet.cu``)
-------------------------
* ``lp_propose`` -- first filter, one thread per vertex. Block connectivities live
  in a per-vertex table in global scratch (vertex ``u`` owns ``deg(u) * l`` slots at
  ``xadj[u] * l``; keys ``t * k + group``): packed linear search for small regions,
  an open-addressing hash table for large ones, so there is no cap on the degree or
  on the number of adjacent blocks. Interior vertices are skipped first.
* ``lp_afterburn`` -- second filter, one thread per vertex.
* ``move_delta_*`` / ``commit_moves`` -- apply a round of moves: traffic change
  per level, block weights, partition.

Relation to the CPU twin
------------------------
* Bit-identical: the LP proposals (destinations and gains, cut and distance mode),
  the afterburner and therefore :func:`jet_lp`. Every vertex visits its neighbours
  in CSR order, each connectivity is summed in neighbour order as in the CPU's
  dense table, gains use the same operation order with explicit IEEE rounding
  (``__dadd_rn``/``__dmul_rn``: NVRTC would otherwise fuse multiply-adds), and the
  tie rules (smallest block id; afterburner priority larger gain, then smaller id)
  select the same winner in any listing order.
* Integer weights: traffic and block weights are exact, so a :func:`jet_refine`
  that only runs LP rounds returns exactly the CPU's partition and cost. Rounds
  that rebalance depend on :mod:`.rebalance_gpu`, which need not pick the CPU's
  moves, so the results then differ (same balance guarantees, similar cost).
* Float weights: per-level traffic is summed in another order than on the CPU
  (deterministic row sums, see :mod:`.objective_gpu`), so costs agree to rounding
  and the loop's cost comparisons may, rarely, decide differently.

Host synchronisation
--------------------
The state (partition, block weights, traffic, locks) stays on the device. Each
iteration of :func:`jet_refine` reads back one small array (move count, max block
weight, traffic per level: ``l + 3`` words) to take the loop's decisions; the
rebalancers add their own. No per-vertex data crosses the bus inside the loop.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from . import objective_gpu
from .gpu_common import as_device, f64, i64, kernel, launch
from .jet_cpu import (BUCKET_RATIO, MID_BUCKET, NUM_BUCKETS, ULTRA_FILTER_RATIOS, _cost_of,
                      filter_schedule)

__all__ = ["BUCKET_RATIO", "MID_BUCKET", "NUM_BUCKETS", "ULTRA_FILTER_RATIOS", "block_weights",
           "cost", "filter_schedule", "jet_lp", "jet_refine", "ultra_refine"]

_SRC = "jet.cu"


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
        self.adjwgt = _weights(adjwgt)                 # traffic: the weights' own dtype
        self.fwgt = as_device(self.adjwgt, cp.float64)  # gains: float64 (as the CPU)
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
            # the CPU's _level_tables: P_t of level-t groups (P_0 = 1), d_{t+1} - d_t
            self.div = cp.asarray(np.concatenate(([1], self.prefix_h[:-1])).astype(np.int64))
            self.delta = cp.asarray(np.diff(np.concatenate(([0.0], self.dist_h))))


# ------------------------------------------------------------------ objective
def block_weights(part, vwgt, k: int) -> cp.ndarray:
    """Total vertex weight per block (CuPy int64, length ``k``)."""
    return objective_gpu.pe_loads(part, vwgt, int(k))[0]


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
        slots = max(1, int(g.adjncy.size) * g.nlev)
        self.keys = cp.empty(slots, dtype=cp.int32)
        self.vals = cp.empty(slots, dtype=cp.float64)
        self.dest = cp.empty(n, dtype=cp.int32)
        self.gain = cp.empty(n, dtype=cp.float64)

    def round(self, g: _Graph, part, k: int, locked, filter_ratio: float, move, target) -> None:
        """Both filters: ``move[u] = 1`` / ``target[u] = dest`` for the vertices to move,
        ``0`` / ``-1`` for all others (no synchronisation)."""
        launch(kernel(_SRC, "lp_propose"), g.n,
               g.xadj, g.adjncy, g.fwgt, part, locked, g.div, g.delta,
               i64(g.n), i64(k), i64(g.nlev), i64(g.cut_mode), f64(filter_ratio),
               self.keys, self.vals, self.dest, self.gain)
        launch(kernel(_SRC, "lp_afterburn"), g.n,
               g.xadj, g.adjncy, g.fwgt, part, g.prefix, g.dist,
               i64(g.n), i64(g.cut_mode), self.dest, self.gain, move, target)


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
class _State:
    """The current partition on the device with its block weights and traffic."""

    def __init__(self, g: _Graph, part, k: int):
        self.part = part
        self.bw = block_weights(part, g.vwgt, k)
        self.traffic = objective_gpu.level_traffic_device(g.xadj, g.adjncy, g.adjwgt, part,
                                                          g.prefix)
        self.target = cp.full(g.n, -1, dtype=cp.int32)  # -1 except during a round
        self.count = cp.zeros(1, dtype=cp.int64)
        self.rows = cp.zeros((g.nlev + 1, objective_gpu._rows(g.n)), dtype=g.adjwgt.dtype)

    def apply(self, g: _Graph) -> None:
        """Execute the moves marked in ``target`` (twin of ``jet_cpu._apply``)."""
        suffix = "f64" if g.adjwgt.dtype == cp.float64 else "i64"
        rows = self.rows.shape[1]
        self.rows.fill(0)
        launch(kernel(_SRC, "move_delta_" + suffix), rows,
               g.xadj, g.adjncy, g.adjwgt, self.part, g.prefix, self.target,
               i64(g.n), i64(rows), self.rows)
        self.traffic += self.rows.sum(axis=1)
        self.count.fill(0)
        launch(kernel(_SRC, "commit_moves"), g.n,
               self.part, self.target, g.vwgt, i64(g.n), self.bw, self.count)

    def snapshot(self) -> tuple[int, int, np.ndarray]:
        """``(moves of the last round, max block weight, traffic)``: one small readback."""
        words = cp.concatenate((self.count, self.bw.max(keepdims=True),
                                self.traffic.view(cp.int64))).get()
        return int(words[0]), int(words[1]), words[2:].view(self.traffic.dtype)


# ------------------------------------------------------------------ refinement loop
def jet_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0,
               incremental: bool = True) -> tuple[cp.ndarray, float]:
    """Jet refinement loop (paper Algorithm 6). Returns ``(part, cost)``.

    The rules of :func:`.jet_cpu.jet_refine`: LP when the partition is balanced,
    else weak rebalancing (at most ``max_weak`` times in a row), then strong; LP
    locks the vertices it moved until the next LP round; the best partition is kept
    (balanced beats unbalanced, then lower cost / lower max block weight); stop after
    ``max_iters`` iterations without improvement (``phi``) or at an unlocked LP fixed
    point. ``part`` is not modified; the result is a new CuPy int32 array and ``J``.

    ``incremental`` is accepted for signature parity with the CPU loop and ignored:
    the GPU re-proposes every vertex each LP round (one kernel over all vertices),
    which gives the same proposals as the CPU's incremental re-evaluation.
    """
    del incremental
    g = _Graph(xadj, adjncy, adjwgt, vwgt, prefix, dist)
    k, lmax = int(k), int(lmax)
    if g.nlev == 0 or int(g.prefix_h[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")  # > 1 need not terminate
    cur = as_device(part, cp.int32).copy()
    if g.n == 0 or k == 1:
        return cur, cost(g.xadj, g.adjncy, g.adjwgt, cur, g.prefix_h, g.dist_h)
    from . import rebalance_gpu  # written alongside; imported late so this module loads alone

    st = _State(g, cur, k)
    _, maxw, traffic = st.snapshot()
    cur_cost = _cost_of(traffic, g.dist_h)
    best, best_cost, best_maxw = cur.copy(), cur_cost, maxw
    lp = _LP(g)
    locked = cp.zeros(g.n, dtype=cp.uint8)   # the vertices moved by the last LP round
    spare = cp.empty(g.n, dtype=cp.uint8)
    last_lp_moves = 0
    it = 0
    weak_runs = 0
    while it < max_iters:
        it += 1
        lp_round = maxw <= lmax
        if lp_round:
            lp.round(g, cur, k, locked, filter_ratio, spare, st.target)
            locked, spare = spare, locked  # locks hold for one LP round only
            weak_runs = 0
        elif weak_runs < max_weak:
            moves, dest = rebalance_gpu.weak_moves(g.xadj, g.adjncy, g.fwgt, g.vwgt, cur, k,
                                                   lmax, g.prefix, st.bw, seed)
            st.target[moves] = dest[moves]
            weak_runs += 1
        else:
            moves, full = rebalance_gpu.strong_moves(g.xadj, g.adjncy, g.fwgt, g.vwgt, cur, k,
                                                     lmax, g.prefix, st.bw)
            st.target[moves] = full[moves]
            weak_runs = 0
        st.apply(g)
        moved, maxw, traffic = st.snapshot()
        if lp_round:
            had_locks = last_lp_moves > 0
            last_lp_moves = moved
            if moved == 0 and not had_locks:
                break                      # unlocked fixed point: LP would repeat itself
        cur_cost = _cost_of(traffic, g.dist_h)

        best_ok = best_maxw <= lmax
        if maxw <= lmax:
            if not best_ok or cur_cost < best_cost:
                if not best_ok or cur_cost < phi * best_cost:
                    it = 0
                best[...] = cur
                best_cost, best_maxw = cur_cost, maxw
        elif not best_ok and (maxw < best_maxw or (maxw == best_maxw and cur_cost < best_cost)):
            if maxw < best_maxw:
                it = 0
            best[...] = cur
            best_cost, best_maxw = cur_cost, maxw
    if g.adjwgt.dtype == cp.float64:
        # incremental float updates drift in the last bits: report a fresh sum
        best_cost = cost(g.xadj, g.adjncy, g.adjwgt, best, g.prefix_h, g.dist_h)
    return best, best_cost


def ultra_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *,
                 filter_ratios=ULTRA_FILTER_RATIOS, max_iters=12, phi=0.999, max_weak=2,
                 seed=0) -> tuple[cp.ndarray, float]:
    """Jet's "ultra" refinement: :func:`jet_refine` once per filter ratio, each pass
    continuing from the previous result. Returns ``(part, cost)``."""
    result, value = as_device(part, cp.int32), None
    for ratio in filter_ratios:
        result, value = jet_refine(xadj, adjncy, adjwgt, vwgt, result, k, lmax, prefix, dist,
                                   filter_ratio=ratio, max_iters=max_iters, phi=phi,
                                   max_weak=max_weak, seed=seed)
    if value is None:
        value = cost(xadj, adjncy, adjwgt, result, prefix, dist)
    return result, value
