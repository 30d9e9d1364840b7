"""Jet refinement (CPU twins of the GPU kernels): label propagation and the refinement loop.

This is the refinement of Jet (Gilbert et al.) as adapted to process mapping by
GPU-HeiPa (GPU-IM paper, section 4.2, Algorithms 4-6):

* :func:`jet_lp` -- *unconstrained* label propagation. Every unlocked vertex
  proposes its best adjacent block, the proposals pass a filter, an "afterburner"
  re-evaluates each proposal assuming the higher-priority proposals among its
  neighbours were already executed, and the survivors move (balance ignored).
* Weak and strong rebalancing (``rebalancing/rebalance_cpu.py``) move the cheapest
  vertices (approximately sorted by loss with log-spaced buckets) out of overloaded
  blocks; the loop runs them as its rebalancing rounds. Weak may overload a
  destination; strong never fills a destination past its limit, so it always makes
  progress when a feasible move exists.
* :func:`jet_refine` -- the overall loop (Algorithm 6) that alternates the three
  and keeps the best partition seen; :func:`ultra_refine` chains it over Jet's
  "ultra" schedule of filter ratios.
* The loop (:func:`refine`) is written once, with ISR as a mode: ``isr_cpu.isr_refine``
  runs it with G-kway's independent-set step (:func:`_isr_round`, described in
  :mod:`.isr_cpu`) in place of the LP round.

Objective
---------
Blocks are PEs of a hierarchy given by ``prefix = [P_1, ..., P_l]`` (``P_t`` PEs per
level-t group, ``P_l = k``) and ``dist = [d_1, ..., d_l]``: ``D(p, q) = d_t`` for the
smallest ``t`` with ``p // P_t == q // P_t`` (0 when ``p == q``). The cost is
``J = sum over CSR entries (u, v) of w(u, v) * D(part[u], part[v])`` (each undirected
edge twice). A single level (``prefix = [k]``) is edge-cut partitioning ("cut
mode"): ``J = 2 * d_1 * cut``. Cut mode takes a fast path and Jet's relaxed
negative-gain filter; the general case ("distance mode") uses the gain of paper
equation 1 and accepts non-negative gains only (GPU-HeiPa).

Gains in distance mode
----------------------
Equation 1, ``G(u: a -> b) = sum_c conn(u, c) * (D(a, c) - D(b, c))``, is evaluated
through *group connectivities*: ``W_t(x)`` = edge weight from ``u`` into the
level-t group of block ``x`` (``W_0(x) = conn(u, x)``). Telescoping the distances
gives ``G = sum_{t < l} (d_{t+1} - d_t) * (W_t(b) - W_t(a))`` with ``d_0 = 0``, so
one pass over the neighbours (``l`` scatter-adds each) yields the gain of every
adjacent block in ``O(l)`` -- no ``k x k`` matrix, no quadratic loop over blocks.

Determinism
-----------
Every parallel loop writes only entries owned by its own index and reads state
frozen at the start of the loop; chunk boundaries depend on ``n`` and ``k`` only,
so even floating-point reductions are summed in the same order for any number of
Numba threads. Resolution steps that need an order (prefix selection, capacity
assignment) are sequential passes over the few vertices concerned. Ties are
broken by block id / vertex id, and the only randomness (the weak rebalancer's
choice among equally near blocks) is a hash of ``(vertex, seed)``. A loop whose
work fits in one chunk, and every loop when Numba has a single thread, runs
serially in its caller instead (no thread-pool wake-up); it walks the same chunks
in the same order, so it computes the very same floats.

Cost per iteration
------------------
:func:`jet_refine` runs its whole loop in one compiled function, and an LP round
costs time in proportion to the vertices it touches, not to ``n``: proposals are
kept between rounds and only the stale ones recomputed, the afterburner visits
only the recomputed vertices and their neighbours (no other verdict can have
changed), and the best partition is updated from the list of vertices moved
since the last snapshot. Rebalancing rounds still scan every vertex. Lists of at
least ``n / 32`` vertices are walked in id order (sorted by one pass over flags), so
that their rows are read in memory order.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numba as nb
import numpy as np

from ..common_cpu import (clear_connectivity, connectivity_gain, float_weights, group_table,
                          largest, level_tables, num_chunks, on_boundary, refinement_inputs,
                          scatter_connectivity, seed_key, table_distance, table_level,
                          use_threads)
from ..common_cpu import mix64 as _mix64
from ..objective.objective_cpu import level_traffic, pe_loads
from ..rebalancing.rebalance_cpu import strong_select, weak_select

# ------------------------------------------------------------------ constants
#: Jet's "ultra" schedule: 17 refinement passes with these filter ratios. This and
#: :func:`filter_schedule` are the kernels' defaults for direct calls; the engines take
#: the schedule from ``procmap.engines.context.RefinementContext`` (a test keeps the two
#: equal).
ULTRA_FILTER_RATIOS = tuple(round(0.85 - 0.05 * i, 2) for i in range(17))

def filter_schedule(*, ultra: bool = False, finest: bool = True) -> tuple[float, ...]:
    """Filter ratios of the refinement passes on one level (Jet / GPU-HeiPa).

    ``ultra``: 0.85, 0.80, ..., 0.05 (17 passes). Otherwise one pass, with 0.25 on
    the finest level and 0.75 on coarser ones (GPU-HeiPa's choice; Jet uses 0.25
    for unit edge weights and 0.75 otherwise).
    """
    if ultra:
        return ULTRA_FILTER_RATIOS
    return (0.25,) if finest else (0.75,)


# ------------------------------------------------------------------ objective
def traffic_cost(traffic, dist) -> float:
    """``J = sum_t d_t * traffic[t]`` from the traffic per level ``traffic``
    (``objective_cpu.level_traffic``: traffic[0] stays inside blocks) and the
    distances ``dist``; the GPU loop reports its costs through it too.

    Summed left to right from 0: :data:`_cost_nb`, the compiled twin used inside
    the refinement loop, must produce the very same float.
    """
    total = 0.0
    for t in range(len(dist)):
        total += float(dist[t]) * traffic[t + 1]
    return float(total)


def _judge(cost, maxw, best_cost, best_maxw, lmax, phi) -> tuple[bool, bool]:
    """Jet's best-partition rule after an iteration: ``(keep, progress)``.

    A balanced partition beats an unbalanced one; among balanced ones the lower cost
    wins, among unbalanced ones the lower max block weight, then the lower cost.
    ``progress`` (the patience counter restarts) needs a cost below ``phi * best`` or
    a lower max block weight while no balanced partition is known. The GPU loop's
    ``loop_control`` (refinement/jet_loop.cu) applies the same rule on the device.
    """
    best_ok = best_maxw <= lmax
    if maxw <= lmax:
        keep = not best_ok or cost < best_cost
        return keep, keep and (not best_ok or cost < phi * best_cost)
    if best_ok:
        return False, False
    keep = maxw < best_maxw or (maxw == best_maxw and cost < best_cost)
    return keep, maxw < best_maxw


# compiled twins of the host helpers, for the refinement loop (one definition each)
_cost_nb = nb.njit(cache=True)(traffic_cost)
_judge_nb = nb.njit(cache=True)(_judge)


def block_weights(part, vwgt, k: int) -> np.ndarray:
    """Total vertex weight per block (int64, length ``k``)."""
    return pe_loads(np.asarray(part), np.asarray(vwgt, dtype=np.int64), int(k))[0]


def cost(xadj, adjncy, adjwgt, part, prefix, dist) -> float:
    """The objective ``J``: every CSR entry ``(u, v)`` adds ``w * D(part[u], part[v])``.

    Both directions of each edge count, so in cut mode (``prefix = [k]``,
    ``dist = [1]``) this is twice the edge cut.
    """
    prefix = np.asarray(prefix, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    part = np.asarray(part, dtype=np.int32)
    traffic = level_traffic(xadj, adjncy, np.asarray(adjwgt), part, prefix)
    return traffic_cost(traffic, dist)


# ------------------------------------------------------------------ label propagation
@nb.njit(cache=True, nogil=True)
def _propose_range(xadj, adjncy, adjwgt, part, grp, delta, cut_mode, filter_ratio, locked,
                   active, lo, hi, acc, seen, touched, dest, gain):
    """:func:`_lp_propose` for ``active[lo:hi]`` with the caller's scratch: ``acc``
    all zero (left so), ``seen`` not yet stamped with any of these vertices."""
    for i in range(lo, hi):
        u = active[i]
        dest[u] = -1
        gain[u] = 0.0
        if locked[u]:
            continue
        a = part[u]
        if not on_boundary(xadj, adjncy, part, u, a):
            continue
        nt = scatter_connectivity(xadj, adjncy, adjwgt, part, grp, cut_mode, u, acc, seen,
                                  touched)
        own = acc[0, a]
        best_b = -1
        best_g = 0.0
        for j in range(nt):
            b = touched[j]
            if b == a:
                continue
            g = connectivity_gain(acc, grp, delta, cut_mode, a, b, own)
            if best_b < 0 or g > best_g or (g == best_g and b < best_b):
                best_b = b
                best_g = g
        if best_b >= 0:
            ok = best_g >= 0.0
            if cut_mode and not ok:
                ok = -best_g < math.floor(filter_ratio * own)
            if ok:
                dest[u] = best_b
                gain[u] = best_g
        clear_connectivity(acc, grp, cut_mode, touched, nt)


@nb.njit(parallel=True, cache=True, nogil=True)
def _lp_propose(xadj, adjncy, adjwgt, part, k, grp, delta, cut_mode, filter_ratio,
                locked, active, nchunks, dest, gain):
    """First filter of Algorithm 4: best adjacent block of every vertex in ``active``.

    ``grp[t, b] = b // P_t`` (``P_0 = 1``) is the level-t group of block ``b`` (a
    table: integer division is slow in the inner loop), ``delta[t] = d_{t+1} - d_t``.
    Writes ``dest[u]`` (-1: no candidate) and ``gain[u]`` of the vertices ``u`` in
    ``active`` (locked ones get -1). Cut mode: gain in edge weight (``conn(b) - conn(a)``), candidate if
    ``gain >= 0`` or ``-gain < floor(filter_ratio * conn(a))`` (Jet). Distance mode:
    gain of equation 1, candidate if ``gain >= 0`` (GPU-HeiPa).
    """
    n = active.size
    for c in nb.prange(nchunks):
        acc = np.zeros((grp.shape[0], k))      # acc[t, g]: weight into level-t group g
        seen = np.full(k, -1, dtype=np.int64)  # stamp: block already listed for u
        touched = np.empty(k, dtype=np.int32)
        _propose_range(xadj, adjncy, adjwgt, part, grp, delta, cut_mode, filter_ratio, locked,
                       active, c * n // nchunks, (c + 1) * n // nchunks, acc, seen, touched,
                       dest, gain)


@nb.njit(cache=True, nogil=True)
def _propose_any(xadj, adjncy, adjwgt, part, k, grp, delta, cut_mode, filter_ratio, locked,
                 active, par, dest, gain):
    """:func:`_lp_propose`, on the thread pool only when ``par`` and several chunks."""
    nchunks = num_chunks(active.size, k)
    if par and nchunks > 1:
        _lp_propose(xadj, adjncy, adjwgt, part, k, grp, delta, cut_mode, filter_ratio, locked,
                    active, nchunks, dest, gain)
        return
    # proposals are per vertex, so one serial pass equals any chunking
    acc = np.zeros((grp.shape[0], k))
    seen = np.full(k, -1, dtype=np.int64)
    touched = np.empty(k, dtype=np.int32)
    # np.int64(0), not 0: a literal argument would compile the callee once more
    _propose_range(xadj, adjncy, adjwgt, part, grp, delta, cut_mode, filter_ratio, locked,
                   active, np.int64(0), active.size, acc, seen, touched, dest, gain)


@nb.njit(cache=True, nogil=True)
def _afterburn_ok(u, xadj, adjncy, adjwgt, part, grp, dist, cut_mode, dest, gain):
    """Afterburner verdict for a candidate ``u`` (``dest[u] >= 0``): see
    :func:`_lp_afterburn`."""
    b = dest[u]
    a = part[u]
    gu = gain[u]
    g2 = 0.0
    for e in range(xadj[u], xadj[u + 1]):
        v = adjncy[e]
        cv = part[v]
        dv = dest[v]
        if dv >= 0 and (gain[v] > gu or (gain[v] == gu and v < u)):
            cv = dv
        w = float(adjwgt[e])
        if cut_mode:
            if cv == b:
                g2 += w
            elif cv == a:
                g2 -= w
        else:
            g2 += w * (table_distance(a, cv, grp, dist) - table_distance(b, cv, grp, dist))
    return g2 >= 0.0


@nb.njit(parallel=True, cache=True, nogil=True)
def _lp_afterburn(xadj, adjncy, adjwgt, part, grp, dist, cut_mode, dest, gain,
                  nchunks, move):
    """Second filter of Algorithm 4 (the afterburner).

    Candidate ``u`` re-evaluates its gain assuming every candidate neighbour ``v``
    of higher priority (larger first gain; equal gain and ``v < u``) already sits
    in ``dest[v]``; all other neighbours stay put. ``u`` moves when the
    re-evaluated gain is ``>= 0``.
    """
    n = part.size
    for c in nb.prange(nchunks):
        for u in range(c * n // nchunks, (c + 1) * n // nchunks):
            move[u] = 0
            if dest[u] >= 0 and _afterburn_ok(u, xadj, adjncy, adjwgt, part, grp, dist,
                                              cut_mode, dest, gain):
                move[u] = 1


@nb.njit(parallel=True, cache=True, nogil=True)
def _afterburn_list(xadj, adjncy, adjwgt, part, grp, dist, cut_mode, dest, gain, verts,
                    nchunks, ok):
    """:func:`_lp_afterburn` for the vertices ``verts`` only: ``ok[i]`` for ``verts[i]``."""
    n = verts.size
    for c in nb.prange(nchunks):
        for i in range(c * n // nchunks, (c + 1) * n // nchunks):
            u = verts[i]
            ok[i] = dest[u] >= 0 and _afterburn_ok(u, xadj, adjncy, adjwgt, part, grp, dist,
                                                   cut_mode, dest, gain)


def lp_proposals(xadj, adjncy, adjwgt, part, k: int, prefix, dist, *, locked=None,
                 filter_ratio: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """The first filter of Algorithm 4 for every vertex: its best adjacent block and gain.

    Returns ``(dest, gain)``: int32 ``dest[u]`` (-1: no candidate; locked vertices and
    vertices without a neighbour in another block have none) and float64 ``gain[u]``
    of the vertices with a destination (0 at the others). Gains are in edge weight in
    cut mode (``len(prefix) == 1``: ``conn(b) - conn(own)``, a candidate when ``>= 0``
    or when ``-gain < floor(filter_ratio * conn(own))``) and paper equation 1 otherwise
    (a candidate when ``>= 0``); ties go to the smaller block id. These are the
    proposals that :func:`jet_lp`'s afterburner then judges, bit-identical to the GPU
    twin's. ``part`` is not modified.
    """
    xadj, adjncy, adjwgt, _, part, prefix, dist = refinement_inputs(xadj, adjncy, adjwgt, None,
                                                                    part, prefix, dist)
    locked = _locks(locked, part.size)
    grp, delta = level_tables(prefix, dist)
    return _proposals(xadj, adjncy, float_weights(adjwgt), part, int(k), grp, delta,
                      prefix.size == 1, locked, filter_ratio)


def _locks(locked, n: int) -> np.ndarray:
    """``locked`` as the kernels' uint8 array (``None``: nothing locked)."""
    return (np.zeros(n, dtype=np.uint8) if locked is None
            else np.ascontiguousarray(locked, dtype=np.uint8))


def _proposals(xadj, adjncy, fwgt, part, k, grp, delta, cut_mode, locked, filter_ratio):
    """:func:`lp_proposals` on prepared inputs (``fwgt``: float64 weights)."""
    n = part.size
    dest = np.empty(n, dtype=np.int32)
    gain = np.empty(n, dtype=np.float64)
    _lp_propose(xadj, adjncy, fwgt, part, k, grp, delta, cut_mode, float(filter_ratio), locked,
                np.arange(n, dtype=np.int32), num_chunks(n, k), dest, gain)
    return dest, gain


def jet_lp(xadj, adjncy, adjwgt, part, k: int, prefix, dist, *, locked=None,
           filter_ratio: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """Unconstrained label propagation (paper Algorithm 4 with Jet's filter): the
    proposals of :func:`lp_proposals`, then the afterburner (:func:`_lp_afterburn`).

    Parameters
    ----------
    part : int32 array, the current partition (not modified).
    locked : optional bool/uint8 array; locked vertices do not move this round (Jet
        locks the vertices moved by the previous round).
    filter_ratio : Jet's ``c``; only used in cut mode (``len(prefix) == 1``).

    Returns ``(vertices, targets)``: ascending int32 ids of the vertices to move and
    their destination blocks. Balance is ignored.
    """
    xadj, adjncy, adjwgt, _, part, prefix, dist = refinement_inputs(xadj, adjncy, adjwgt, None,
                                                                    part, prefix, dist)
    k = int(k)
    cut_mode = prefix.size == 1
    grp, delta = level_tables(prefix, dist)
    fwgt = float_weights(adjwgt)
    dest, gain = _proposals(xadj, adjncy, fwgt, part, k, grp, delta, cut_mode,
                            _locks(locked, part.size), filter_ratio)
    move = np.empty(part.size, dtype=np.uint8)
    _lp_afterburn(xadj, adjncy, fwgt, part, grp, dist, cut_mode, dest, gain,
                  num_chunks(part.size, k), move)
    moves = np.flatnonzero(move).astype(np.int32)
    return moves, dest[moves]


# ------------------------------------------------------------------ applying moves
@nb.njit(cache=True, nogil=True)
def _move_delta_range(xadj, adjncy, adjwgt, part, grp, moves, target, lo, hi, row):
    """:func:`_move_delta` of ``moves[lo:hi]``, accumulated into ``row``."""
    for i in range(lo, hi):
        u = moves[i]
        a = part[u]
        b = target[u]
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            old_v = part[v]
            new_v = old_v
            f = 2
            if target[v] >= 0:
                new_v = target[v]
                f = 1
            w = adjwgt[e] * f
            lev_old = 0 if a == old_v else table_level(a, old_v, grp) + 1
            lev_new = 0 if b == new_v else table_level(b, new_v, grp) + 1
            if lev_old != lev_new:
                row[lev_old] -= w
                row[lev_new] += w


@nb.njit(parallel=True, cache=True, nogil=True)
def _move_delta(xadj, adjncy, adjwgt, part, grp, moves, target, nchunks, out):
    """Traffic change per level caused by moving ``moves`` to ``target`` at once.

    ``target[v] >= 0`` marks moving vertices. An ordered pair with one moving end
    is seen only from that end, so it counts for both directions (factor 2); a
    pair with both ends moving is seen from each end once.
    """
    m = moves.size
    for c in nb.prange(nchunks):
        _move_delta_range(xadj, adjncy, adjwgt, part, grp, moves, target,
                          c * m // nchunks, (c + 1) * m // nchunks, out[c])


@nb.njit(cache=True, nogil=True)
def _commit(moves, target, part, vwgt, bw):
    for i in range(moves.size):
        u = moves[i]
        bw[part[u]] -= vwgt[u]
        bw[target[u]] += vwgt[u]
        part[u] = target[u]


@nb.njit(cache=True, nogil=True)
def _apply_with_rows(xadj, adjncy, adjwgt, vwgt, part, grp, k, moves, target, bw, traffic,
                     rows, par):
    """:func:`apply_moves` with caller-owned scratch ``rows`` (at least
    ``num_chunks(moves.size, k)`` rows of ``traffic.size``)."""
    m = moves.size
    if m == 0:
        return
    nchunks = num_chunks(m, k)
    out = rows[:nchunks]
    for c in range(nchunks):
        for t in range(traffic.size):
            out[c, t] = 0
    if par and nchunks > 1:
        _move_delta(xadj, adjncy, adjwgt, part, grp, moves, target, nchunks, out)
    else:
        for c in range(nchunks):
            _move_delta_range(xadj, adjncy, adjwgt, part, grp, moves, target,
                              c * m // nchunks, (c + 1) * m // nchunks, out[c])
    # the float sum of the original ``traffic += out.sum(axis=0)``: NumPy adds the
    # rows in order into a copy of the first (tests/test_jet.py checks this through
    # apply_moves)
    for t in range(traffic.size):
        total = out[0, t]
        for c in range(1, nchunks):
            total += out[c, t]
        traffic[t] += total
    _commit(moves, target, part, vwgt, bw)


def apply_moves(xadj: np.ndarray, adjncy: np.ndarray, adjwgt: np.ndarray, vwgt: np.ndarray,
                part: np.ndarray, prefix: np.ndarray, k: int, moves: np.ndarray,
                target: np.ndarray, bw: np.ndarray, traffic: np.ndarray) -> None:
    """Move ``moves`` to ``target`` at once, in place: ``part``, the block weights ``bw``
    and the traffic per level ``traffic`` (``objective_cpu.level_traffic``'s layout)
    are updated, as every iteration of the refinement loop does.

    ``target`` is a full-length int32 array; entries of non-moving vertices must be -1.
    The traffic change is summed per chunk of moves (``common_cpu.num_chunks``) and the
    chunk rows are added to ``traffic`` in chunk order, which is NumPy's
    ``traffic + rows.sum(axis=0)``: float weights give the same bits for any number
    of threads. The arrays must have the kernels' dtypes
    (``common_cpu.refinement_inputs``). The GPU twin is ``jet_gpu``'s move step.
    """
    if moves.size == 0:
        return
    rows = np.empty((num_chunks(moves.size, k), traffic.size), dtype=traffic.dtype)
    _apply_with_rows(xadj, adjncy, adjwgt, vwgt, part, group_table(np.asarray(prefix)), k, moves,
                     target, bw, traffic, rows, use_threads())


# ------------------------------------------------------------------ ISR step
# The step of the loop's ISR mode (G-kway's independent-set refinement; the algorithm
# and its bit-identity with the GPU twin are described in :mod:`.isr_cpu`). It lives
# here, beside the loop that runs it, so that :mod:`.isr_cpu` can import the loop.

_STEP_MIX = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(cache=True, nogil=True)
def isr_step_key(seed_key, step):
    """``isr_cpu.step_key`` from the seed's ``common_cpu.seed_key``: a new tie-breaking
    hash for every ISR step (uint64 arithmetic wraps, as on the GPU)."""
    return _mix64(seed_key + _STEP_MIX * np.uint64(step + 1))


@nb.njit(parallel=True, cache=True, nogil=True)
def isr_propose(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, k, grp, delta, cut_mode, nchunks,
                dest, gain):
    """Best legal destination of every boundary vertex (ISR step 1, ``isr_cpu``).

    ``grp``/``delta`` are ``common_cpu.level_tables``. Writes ``dest[u]`` (-1: none)
    and ``gain[u]`` (0 for none). Connectivities and gains are computed exactly as
    in :func:`_lp_propose` (the GPU twin reproduces them bit for bit).
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
def isr_independent(xadj, adjncy, dest, gain, key, nchunks, sel):
    """``sel[u] = 1`` (uint8) for the candidates (``dest[u] >= 0``) whose priority beats
    every candidate neighbour (ISR step 2): larger ``gain``, then larger
    ``mix64(u ^ key)``. ``nchunks`` chunks of vertices on the thread pool."""
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
def isr_prefix_fit(moves, m, part, target, vwgt, bw, lmax):
    """Largest ``j < m`` such that after moving ``moves[0..j]`` (vertices, in order) to
    ``target`` no block of the weights ``bw`` (int64, not modified) exceeds ``lmax``
    (-1: none; ISR step 3).

    One pass in move order, tracking the number of overloaded blocks.
    """
    cur = bw.copy()
    over = 0
    for b in range(cur.size):
        if cur[b] > lmax:
            over += 1
    best = -1
    for j in range(m):
        u = moves[j]
        s = part[u]
        d = target[u]
        x = vwgt[u]
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


# ------------------------------------------------------------------ refinement loop
#: The graph as the compiled loop sees it (``fwgt``: float64 weights for the gains;
#: ``grp``/``delta``: :func:`.common_cpu.level_tables`).
_Graph = namedtuple("_Graph", ["xadj", "adjncy", "adjwgt", "fwgt", "vwgt", "prefix", "dist",
                               "grp", "delta"])

#: Scratch and bookkeeping of one refinement (all passes of :func:`ultra_refine`),
#: allocated once. Lists of vertices come with a flag array (membership, so each
#: vertex is listed once) and a length in ``sizes``; every other array of ``n``
#: entries is reused each iteration. Loops that append keep the length in a local
#: variable and store it back once: kept in ``sizes``, it is reloaded and stored
#: around every append (measured: 10x slower list building).
_State = namedtuple("_State", [
    "locked", "locks",           # LP locks: vertices moved by the last LP round
    "dirty", "dirty_list",       # vertices whose LP proposal is stale
    "dest", "gain",              # LP proposals, kept between rounds (ISR: its candidates)
    "in_near", "near",           # the re-proposed vertices and their neighbours
    "everyone",                  # 0, 1, ..., n - 1
    "ok",                        # afterburner verdict per entry of near
    "moves",                     # this iteration's moves, ascending
    "mark",                      # all zero between uses
    "in_changed", "changed",     # vertices moved since the last best snapshot
    "rb_dest", "bucket", "selected",  # rebalancing proposals (selected: ISR's independent set)
    "target",                    # destination of each moving vertex; -1 between iterations
    "rows",                      # traffic delta per chunk of moves
    "sizes",                     # lengths of the lists, indexed by the constants below
    "counts",                    # what the loop did, indexed by the constants below
])
_NLOCK, _NDIRTY, _NCHANGED = 0, 1, 2
#: ``counts``: iterations; LP or ISR rounds ("steps"), weak and strong rebalancing
#: rounds; vertices moved by the steps and by rebalancing
_COUNT_NAMES = ("iterations", "steps", "weak_steps", "strong_steps", "step_moves",
                "rebalance_moves")
_ITERATIONS, _STEPS, _WEAK_STEPS, _STRONG_STEPS, _STEP_MOVES, _REBALANCE_MOVES = range(6)


@nb.njit(cache=True, nogil=True)
def _new_state(n, k, traffic):
    everyone = np.arange(n).astype(np.int32)
    dirty = np.ones(n, dtype=np.uint8)           # nothing has been proposed yet
    sizes = np.zeros(3, dtype=np.int64)
    sizes[_NDIRTY] = n
    return _State(np.zeros(n, dtype=np.uint8), np.empty(n, dtype=np.int32),
                  dirty, everyone.copy(),
                  np.full(n, -1, dtype=np.int32), np.zeros(n),
                  np.zeros(n, dtype=np.uint8), np.empty(n, dtype=np.int32), everyone,
                  np.empty(n, dtype=np.uint8), np.empty(n, dtype=np.int32),
                  np.zeros(n, dtype=np.uint8),
                  np.zeros(n, dtype=np.uint8), np.empty(n, dtype=np.int32),
                  np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32),
                  np.empty(n, dtype=np.uint8), np.full(n, -1, dtype=np.int32),
                  np.empty((num_chunks(n, k), traffic.size), dtype=traffic.dtype), sizes,
                  np.zeros(len(_COUNT_NAMES), dtype=np.int64))


@nb.njit(inline="always", cache=True)
def _push(u, flag, items, count):
    """Append ``u`` to ``items[:count]`` unless ``flag`` lists it; returns the length."""
    if flag[u]:
        return count
    flag[u] = 1
    items[count] = u
    return count + 1


@nb.njit(cache=True, nogil=True)
def _push_around(xadj, adjncy, verts, flag, items, count):
    """:func:`_push` every vertex of ``verts`` and its neighbours."""
    for u in verts:
        count = _push(u, flag, items, count)
        for e in range(xadj[u], xadj[u + 1]):
            count = _push(adjncy[e], flag, items, count)
    return count


@nb.njit(parallel=True, cache=True, nogil=True)
def _flag_around(xadj, adjncy, verts, flag, nchunks):
    """Set ``flag`` of every vertex of ``verts`` and of its neighbours, in parallel
    chunks of ``verts`` (threads that meet one vertex all write the same 1)."""
    n = verts.size
    for c in nb.prange(nchunks):
        for i in range(c * n // nchunks, (c + 1) * n // nchunks):
            u = verts[i]
            flag[u] = 1
            for e in range(xadj[u], xadj[u + 1]):
                flag[adjncy[e]] = 1


@nb.njit(cache=True, nogil=True)
def _flag_list(flag, items):
    """``items`` := the flagged ids in increasing order; returns their number."""
    count = 0
    for u in range(flag.size):
        if flag[u]:
            items[count] = u
            count += 1
    return count


@nb.njit(inline="always", cache=True)
def _later(u, v, key):
    """Whether id ``u`` comes after id ``v`` in the order of :func:`_heapsort`."""
    return key[u] < key[v] or (key[u] == key[v] and u > v)


@nb.njit(inline="always", cache=True)
def _sift_down(a, root, size, key):
    while True:
        child = 2 * root + 1
        if child >= size:
            return
        if child + 1 < size and _later(a[child + 1], a[child], key):
            child += 1
        if not _later(a[child], a[root], key):
            return
        a[root], a[child] = a[child], a[root]
        root = child


@nb.njit(inline="always", cache=True)
def _heapsort(items, m, key):
    """Sort ``items[:m]`` (distinct ids) by ``key`` descending, then id ascending, in
    place. The order is total, so the result is that of any correct sort
    (ndarray.sort would add seconds to the compile time of the loop)."""
    for root in range(m // 2 - 1, -1, -1):
        _sift_down(items, root, m, key)
    for end in range(m - 1, 0, -1):
        items[0], items[end] = items[end], items[0]
        _sift_down(items, 0, end, key)


@nb.njit(cache=True, nogil=True)
def _sort_ascending(items, m, mark):
    """Sort ``items[:m]`` (distinct ids below ``mark.size``) in place."""
    if m * 32 < mark.size:
        _heapsort(items, m, mark)  # mark is all zero: by id alone
        return
    # many items: a pass over the flags is cheaper than comparisons
    for i in range(m):
        mark[items[i]] = 1
    j = 0
    for u in range(mark.size):
        if mark[u]:
            mark[u] = 0
            items[j] = u
            j += 1


@nb.njit(cache=True, nogil=True)
def _afterburn_some(g, part, k, cut_mode, par, verts, st):
    """Afterburner over ``verts``; the survivors go to ``st.moves`` (ascending).
    Returns their number."""
    nv = verts.size
    ok = st.ok[:nv]
    nchunks = num_chunks(nv, k)
    if par and nchunks > 1:
        _afterburn_list(g.xadj, g.adjncy, g.fwgt, part, g.grp, g.dist, cut_mode, st.dest,
                        st.gain, verts, nchunks, ok)
    else:
        for i in range(nv):
            u = verts[i]
            ok[i] = st.dest[u] >= 0 and _afterburn_ok(u, g.xadj, g.adjncy, g.fwgt, part,
                                                       g.grp, g.dist, cut_mode, st.dest,
                                                       st.gain)
    m = np.int64(0)  # not a literal 0: that types (and compiles) the callee once more
    for i in range(nv):
        if ok[i]:
            st.moves[m] = verts[i]
            m += 1
    _sort_ascending(st.moves, m, st.mark)
    return m


@nb.njit(cache=True, nogil=True)
def _lp_round(g, part, k, filter_ratio, incremental, par, st):
    """One round of :func:`jet_lp` on the kept proposals: moves in ``st.moves``, their
    destinations in ``st.target``, locks passed on. Returns the number of moves, or
    -1 at an unlocked fixed point (no move and no lock: LP would repeat itself).

    A proposal depends only on the blocks of the vertex and its neighbours and on
    its lock, so re-proposing the dirty vertices (moved, next to a move, unlocked)
    equals a full re-evaluation; ``incremental=False`` re-proposes every vertex.

    The afterburner then judges the re-proposed vertices and their neighbours only.
    A verdict depends only on the blocks, destinations and gains of the vertex and
    its neighbours; a destination changes only when it is re-proposed, and a vertex
    is re-proposed in the LP round after it moves. So any other vertex gets the
    verdict it got in the previous LP round, and that was "stay": a survivor moved
    then, and would be re-proposed now. (The first LP round proposes every vertex.)
    """
    n = part.size
    cut_mode = g.prefix.size == 1
    nd = st.sizes[_NDIRTY]
    if incremental and nd * 32 >= n:
        # a large list in id order (one pass over flags): rows are then read in memory
        # order, not each from a random place as in push order. A proposal does not
        # depend on the order. Small lists stay as they are: comparison sorts cost more
        # than their scattered reads.
        _sort_ascending(st.dirty_list, nd, st.mark)
    active = st.everyone if not incremental else st.dirty_list[:nd]
    _propose_any(g.xadj, g.adjncy, g.fwgt, part, k, g.grp, g.delta, cut_mode, filter_ratio,
                 st.locked, active, par, st.dest, st.gain)
    for u in st.dirty_list[:nd]:
        st.dirty[u] = 0
    st.sizes[_NDIRTY] = 0
    if active.size * 8 >= n:
        # the neighbourhood would be most of the graph: listing it costs more
        m = _afterburn_some(g, part, k, cut_mode, par, st.everyone, st)
    else:
        # np.int64(0), not 0: a literal argument would compile the callee once more
        nn = _push_around(g.xadj, g.adjncy, active, st.in_near, st.near, np.int64(0))
        if nn * 32 >= n:
            _sort_ascending(st.near, nn, st.mark)  # memory order, as above
        near = st.near[:nn]
        for u in near:
            st.in_near[u] = 0
        m = _afterburn_some(g, part, k, cut_mode, par, near, st)
    nlock = st.sizes[_NLOCK]
    nd = 0
    for u in st.locks[:nlock]:          # locks hold for one LP round only
        st.locked[u] = 0
        nd = _push(u, st.dirty, st.dirty_list, nd)  # its next proposal differs
    st.sizes[_NDIRTY] = nd
    for i in range(m):
        u = st.moves[i]
        st.locked[u] = 1
        st.locks[i] = u
        st.target[u] = st.dest[u]
    st.sizes[_NLOCK] = m
    return -1 if m == 0 and nlock == 0 else m


@nb.njit(cache=True, nogil=True)
def _weak_round(g, part, k, lmax, bw, seed_key, par, st):
    """``rebalance_cpu.weak_select`` into ``st.moves`` / ``st.target``; returns the move
    count."""
    weak_select(g.xadj, g.adjncy, g.fwgt, g.vwgt, part, k, lmax, g.prefix, bw, seed_key, par,
                 st.rb_dest, st.bucket, st.selected)
    m = 0
    for u in range(part.size):
        if st.selected[u]:
            st.moves[m] = u
            st.target[u] = st.rb_dest[u]
            m += 1
    return m


@nb.njit(cache=True, nogil=True)
def _strong_round(g, part, k, lmax, bw, par, st):
    """``rebalance_cpu.strong_select`` into ``st.moves`` / ``st.target``; returns the
    move count."""
    strong_select(g.xadj, g.adjncy, g.fwgt, g.vwgt, part, k, lmax, g.prefix, bw, par,
                   st.rb_dest, st.bucket, st.selected, st.target)
    m = 0
    for u in range(part.size):
        if st.target[u] >= 0:
            st.moves[m] = u
            m += 1
    return m


@nb.njit(cache=True, nogil=True)
def _isr_round(g, part, k, lmax, bw, key, st):
    """One ISR step (``isr_cpu``) with hash key ``key``: the moves in ``st.moves`` in
    selection order (gain descending, then id ascending: the order of
    ``isr_cpu.isr_moves``, in which :func:`_apply_with_rows` also sums their traffic),
    their destinations in ``st.target``. Returns the number of moves, or -1 when no
    candidate fits (a local optimum).

    Candidates go to ``st.dest``/``st.gain`` and the independent set to
    ``st.selected``; LP proposals are not kept in this mode.
    """
    nchunks = num_chunks(part.size, k)
    isr_propose(g.xadj, g.adjncy, g.fwgt, g.vwgt, part, bw, lmax, k, g.grp, g.delta,
                 g.prefix.size == 1, nchunks, st.dest, st.gain)
    isr_independent(g.xadj, g.adjncy, st.dest, st.gain, key, nchunks, st.selected)
    m = np.int64(0)  # not a literal 0: that types (and compiles) the callees once more
    for u in range(part.size):
        if st.selected[u]:
            st.moves[m] = u
            m += 1
    _heapsort(st.moves, m, st.gain)
    m = isr_prefix_fit(st.moves, m, part, st.dest, g.vwgt, bw, lmax) + 1
    for u in st.moves[:m]:
        st.target[u] = st.dest[u]
    return m if m > 0 else -1


@nb.njit(cache=True, nogil=True)
def _settle(xadj, adjncy, moves, par, st):
    """After applying ``moves``: clear their targets, flag the moved vertices and
    their neighbours dirty (stale proposals), remember the moved ones for the snapshot.

    Where the moves' rows hold at least ``n / 8`` entries (power-law graphs, whose hubs
    move too), the flags are set in parallel and the dirty list is rebuilt from them
    in id order: the same set, and the serial push would be the loop's longest serial
    step. The order of the list does not matter to its users."""
    nc = st.sizes[_NCHANGED]
    work = 0
    for u in moves:
        st.target[u] = -1
        nc = _push(u, st.in_changed, st.changed, nc)
        work += xadj[u + 1] - xadj[u]
    st.sizes[_NCHANGED] = nc
    n = st.dirty.size
    nchunks = num_chunks(moves.size, 1)
    if par and nchunks > 1 and work * 8 >= n:
        _flag_around(xadj, adjncy, moves, st.dirty, nchunks)
        st.sizes[_NDIRTY] = _flag_list(st.dirty, st.dirty_list)
        return
    st.sizes[_NDIRTY] = _push_around(xadj, adjncy, moves, st.dirty, st.dirty_list,
                                     st.sizes[_NDIRTY])


@nb.njit(cache=True, nogil=True)
def _snapshot(best, part, st):
    """``best[:] = part``, copying only the vertices moved since the last snapshot."""
    for u in st.changed[:st.sizes[_NCHANGED]]:
        best[u] = part[u]
        st.in_changed[u] = 0
    st.sizes[_NCHANGED] = 0


@nb.njit(cache=True, nogil=True)
def _restart(xadj, adjncy, cur, best, st, stale):
    """Turn the state a pass ended with into the start of the next pass: ``cur`` back
    to ``best``, no locks, and every proposal that this changes marked dirty (the
    invariant of :func:`_lp_round`). ``stale`` says which proposals the new filter
    ratio changes: 0 none, 1 the accepted negative gains, 2 all."""
    nd = st.sizes[_NDIRTY]
    changed = st.changed[:st.sizes[_NCHANGED]]
    for u in changed:                   # cur differs from best only here
        cur[u] = best[u]
        st.in_changed[u] = 0
    st.sizes[_NCHANGED] = 0
    nd = _push_around(xadj, adjncy, changed, st.dirty, st.dirty_list, nd)
    for u in st.locks[:st.sizes[_NLOCK]]:
        st.locked[u] = 0
        nd = _push(u, st.dirty, st.dirty_list, nd)
    st.sizes[_NLOCK] = 0
    for u in range(cur.size if stale else 0):
        if stale == 2 or (st.dest[u] >= 0 and st.gain[u] < 0.0):
            nd = _push(u, st.dirty, st.dirty_list, nd)
    st.sizes[_NDIRTY] = nd


def _make_loop(isr):
    """The refinement loop in one mode, fixed at compile time: LP rounds (``isr``
    false, :func:`jet_refine`) or ISR steps (``isr_cpu.isr_refine``).

    ``isr`` is a constant of the closure, so Numba prunes the other mode's branch
    before typing and compiles only this mode's kernels (Jet's first call compiles no
    ISR kernel, and ISR's no LP kernel); each mode is cached on its own (Numba keys a
    closure's cache entry by its cell values). As a runtime argument, ``isr`` made
    every first call compile both.
    """

    @nb.njit(cache=True, nogil=True)
    def loop(g, cur, best, st, k, lmax, filter_ratio, max_iters, start_iters, phi, max_weak,
             seed_key, incremental, par, traffic, cur_cost, cap):
        """One pass of the refinement loop on prepared inputs, from ``cur`` (equal to
        ``best``; both updated), whose traffic (updated) and cost are ``traffic`` and
        ``cur_cost``. Returns ``(best_cost, traffic of best)``.

        A balanced iteration runs an LP round (:func:`jet_refine`) or, in ISR mode, an
        ISR step (``isr_cpu.isr_refine``); rebalancing, the bookkeeping of the best
        partition and the stopping rules are those of both. ISR step ``i`` (counted in
        ``st.counts``, over the state's life) hashes with ``isr_step_key(seed_key, i)``.
        The loop also stops once ``st.counts`` holds ``cap`` iterations, and, until an
        iteration has made progress, after ``start_iters`` iterations.
        """
        bw = np.zeros(k, dtype=np.int64)
        for u in range(cur.size):
            bw[cur[u]] += g.vwgt[u]
        maxw = largest(bw)
        best_cost, best_maxw = cur_cost, maxw
        best_traffic = traffic.copy()
        counts = st.counts
        it = 0
        progressed = False
        weak_runs = 0
        while it < (max_iters if progressed else start_iters) and counts[_ITERATIONS] < cap:
            it += 1
            counts[_ITERATIONS] += 1
            if maxw <= lmax:
                if isr:
                    key = isr_step_key(seed_key, counts[_STEPS])
                    m = _isr_round(g, cur, k, lmax, bw, key, st)
                else:
                    m = _lp_round(g, cur, k, filter_ratio, incremental, par, st)
                counts[_STEPS] += 1
                weak_runs = 0
                if m < 0:
                    break
                counts[_STEP_MOVES] += m
            else:
                if weak_runs < max_weak:
                    m = _weak_round(g, cur, k, lmax, bw, seed_key, par, st)
                    weak_runs += 1
                    counts[_WEAK_STEPS] += 1
                else:
                    m = _strong_round(g, cur, k, lmax, bw, par, st)
                    weak_runs = 0
                    counts[_STRONG_STEPS] += 1
                counts[_REBALANCE_MOVES] += m
            moves = st.moves[:m]
            _apply_with_rows(g.xadj, g.adjncy, g.adjwgt, g.vwgt, cur, g.grp, k, moves, st.target,
                             bw, traffic, st.rows, par)
            _settle(g.xadj, g.adjncy, moves, par, st)
            cur_cost = _cost_nb(traffic, g.dist)
            maxw = largest(bw)
            keep, progress = _judge_nb(cur_cost, maxw, best_cost, best_maxw, lmax, phi)
            if progress:
                it = 0
                progressed = True
            if keep:
                _snapshot(best, cur, st)
                for t in range(traffic.size):
                    best_traffic[t] = traffic[t]
                best_cost, best_maxw = cur_cost, maxw
        return best_cost, best_traffic

    return loop


#: the loop of :func:`jet_refine` / :func:`ultra_refine` and that of ``isr_cpu``
_jet_loop = _make_loop(False)
_isr_loop = _make_loop(True)


def jet_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *, filter_ratio=0.25,
               max_iters=12, phi=0.999, max_weak=2, seed=0, incremental=True, start_iters=None):
    """Jet refinement loop (paper Algorithm 6). Returns ``(part, cost)``.

    Each iteration runs :func:`jet_lp` when the current partition is balanced
    (max block weight <= ``lmax``), else weak rebalancing (at most ``max_weak``
    times in a row), then strong rebalancing; the moves are applied at once.
    LP locks the vertices it moved until the next LP round.

    The best partition seen is kept: a balanced one beats an unbalanced one;
    among balanced ones the lower cost wins, among unbalanced ones the lower max
    block weight (then the lower cost). The loop stops after ``max_iters``
    iterations without improvement -- a cost below ``phi * best`` (balanced), or
    a lower max block weight while no balanced partition is known -- or as soon
    as an LP round without locks moves nothing (the state is then a fixed point).
    Until an iteration has made progress, ``start_iters`` iterations without progress
    end it (default ``max_iters``): a polish that finds nothing early stops early.

    ``part`` is not modified; the result is a new int32 array and its cost ``J``
    (both directions of each edge; ``2 * d_1 * cut`` in cut mode).

    ``incremental`` (default) re-proposes only the vertices whose proposal can have
    changed since the last LP round; ``False`` re-proposes every vertex every round.
    Both give the same result (tested); the first is much faster. The loop runs
    compiled, one call per refinement (module docstring, "Cost per iteration").
    """
    return refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, (filter_ratio,),
                  max_iters=max_iters, phi=phi, max_weak=max_weak, seed=seed,
                  incremental=incremental, start_iters=start_iters)[:2]


#: ``cap`` of :func:`refine` when none is given: only the patience ends the loop
_UNCAPPED = np.iinfo(np.int64).max


def refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, ratios, *, max_iters,
           phi, max_weak, seed, incremental=True, isr=False, cap=None, start_iters=None):
    """The CPU refinement loop behind :func:`jet_refine`, :func:`ultra_refine` and
    ``isr_cpu.isr_refine``: one pass per filter ratio of ``ratios`` (each from the
    best partition of the previous one), with LP rounds or, with ``isr``, ISR steps
    on balanced partitions; at most ``cap`` iterations in all (default: no cap). A pass
    ends after ``max_iters`` iterations in a row without progress, or ``start_iters``
    (default ``max_iters``) while none of its iterations has made progress yet.

    Returns ``(part, cost, counts)``; ``counts`` counts what the loop did:
    ``iterations``, ``steps`` (LP rounds or ISR steps), ``weak_steps``,
    ``strong_steps``, ``step_moves`` and ``rebalance_moves`` (vertices moved).
    """
    g, part = _setup(xadj, adjncy, adjwgt, vwgt, part, k, prefix, dist, phi)
    best, best_cost, counts = _refine_passes(
        g, part, int(k), int(lmax), tuple(ratios), max_iters,
        max_iters if start_iters is None else start_iters, phi, max_weak, seed, incremental,
        isr, _UNCAPPED if cap is None else int(cap))
    return best, best_cost, dict(zip(_COUNT_NAMES, (int(c) for c in counts)))


def isr_step(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, key):
    """The moves of one ISR step with hash key ``key`` from ``part`` (not modified), as
    the loop's ISR mode makes them: ``(vertices, targets, gains)`` in selection order."""
    g, part = _setup(xadj, adjncy, adjwgt, vwgt, part, k, prefix, dist, 1.0)
    k = int(k)
    st = _new_state(part.size, k, np.zeros(g.prefix.size + 1))
    m = max(_isr_round(g, part, k, int(lmax), block_weights(part, g.vwgt, k), key, st), 0)
    moves = st.moves[:m].copy()
    return moves, st.target[moves], st.gain[moves]


def _setup(xadj, adjncy, adjwgt, vwgt, part, k, prefix, dist, phi):
    """Validated, prepared inputs of the refinement: ``(_Graph, part)``."""
    xadj, adjncy, adjwgt, vwgt, part, prefix, dist = refinement_inputs(xadj, adjncy, adjwgt, vwgt,
                                                                       part, prefix, dist)
    k = int(k)
    if prefix.size == 0 or int(prefix[-1]) != k:
        raise ValueError(f"prefix must end with k = {k}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must lie in (0, 1], got {phi}")  # > 1 need not terminate
    g = _Graph(xadj, adjncy, adjwgt, float_weights(adjwgt), vwgt, prefix, dist,
               *level_tables(prefix, dist))
    return g, part


def _refine_passes(g, part, k, lmax, ratios, max_iters, start_iters, phi, max_weak, seed,
                   incremental, isr, cap):
    """:func:`refine` on prepared inputs. Returns ``(best, cost, st.counts)``.

    The passes share one state: a pass starts from the traffic and the proposals
    its predecessor ended with, re-proposing only what the restart changes
    (:func:`_restart`), not every vertex. Proposals and traffic depend on the
    partition, locks and filter ratio alone, so this is exact.
    """
    traffic = level_traffic(g.xadj, g.adjncy, g.adjwgt, part, g.prefix)
    best_cost = traffic_cost(traffic, g.dist)
    if part.size == 0 or k == 1:
        return part.copy(), best_cost, np.zeros(len(_COUNT_NAMES), dtype=np.int64)
    cur, best = part.copy(), part.copy()
    st = _new_state(part.size, k, traffic)
    nonneg = _nonnegative(g) if len(ratios) > 1 else True  # one O(m) pass, not one per ratio
    loop = _isr_loop if isr else _jet_loop
    for i, ratio in enumerate(ratios):
        if i:
            _restart(g.xadj, g.adjncy, cur, best, st,
                     _stale_proposals(g, ratios[i - 1], ratio, nonneg))
        best_cost, traffic = loop(
            g, cur, best, st, k, lmax, float(ratio), int(max_iters), int(start_iters),
            float(phi), int(max_weak), seed_key(seed), bool(incremental), use_threads(), traffic,
            best_cost, cap)
        if g.adjwgt.dtype.kind == "f":
            # incremental float updates drift in the last bits: report a fresh sum, and
            # start the next pass from it (as a separate jet_refine call would)
            traffic = level_traffic(g.xadj, g.adjncy, g.adjwgt, best, g.prefix)
            best_cost = traffic_cost(traffic, g.dist)
    return best, best_cost, st.counts


def _nonnegative(g) -> bool:
    """Whether every edge weight of ``g`` is >= 0 (see :func:`_stale_proposals`)."""
    return bool(g.fwgt.size == 0 or g.fwgt.min() >= 0.0)


def _stale_proposals(g, old_ratio, new_ratio, nonneg: bool | None = None) -> int:
    """Which LP proposals a change of the filter ratio invalidates (:func:`_restart`).

    Only cut mode filters by the ratio: a negative gain is accepted when
    ``-gain < floor(ratio * conn(own))``. With non-negative weights, a lower ratio
    can only reject more, so re-proposing the accepted negative gains suffices
    (Jet's ultra schedule descends); otherwise every vertex is re-proposed.
    ``nonneg``: :func:`_nonnegative` of ``g`` when the caller knows it already.
    """
    if g.prefix.size > 1 or new_ratio == old_ratio:
        return 0
    if nonneg is None:
        nonneg = _nonnegative(g)
    if new_ratio < old_ratio and nonneg:
        return 1
    return 2


def ultra_refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, *,
                 filter_ratios=ULTRA_FILTER_RATIOS, max_iters=12, phi=0.999, max_weak=2, seed=0,
                 start_iters=None):
    """Jet's "ultra" refinement: :func:`jet_refine` once per filter ratio, each pass
    continuing from the previous result. Returns ``(part, cost)``.

    The ratios only change the cut-mode filter; in distance mode the passes differ
    only through the locks and rebalancing state they start from.

    The passes share their setup and state: each continues from the traffic and
    LP proposals its predecessor ended with (:func:`_refine_passes`) instead of
    recomputing them; the result is that of calling :func:`jet_refine` once per
    ratio.
    """
    filter_ratios = tuple(filter_ratios)
    if not filter_ratios:
        result = np.ascontiguousarray(part, dtype=np.int32)
        return result, cost(xadj, adjncy, adjwgt, result, prefix, dist)
    return refine(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, dist, filter_ratios,
                  max_iters=max_iters, phi=phi, max_weak=max_weak, seed=seed,
                  start_iters=start_iters)[:2]
