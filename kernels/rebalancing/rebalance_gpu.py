"""Jet's weak and strong rebalancing on the GPU: the twins of the rebalancers in
:mod:`.rebalance_cpu` (``weak_moves``, ``strong_moves``, ``rebalance_weak``,
``rebalance_strong``), taking and returning CuPy arrays.

Steps and how they relate to the CPU twin
-----------------------------------------
1. **Proposal** (:func:`rebalance_propose`: the kernel ``rebalance_propose`` in
   ``rebalancing/rebalance.cu``, one thread per vertex): the twin of
   ``rebalance_cpu.rebalance_propose``. Connectivities are summed in neighbour order into
   a per-vertex table of ``deg(u)`` (block id, float64 sum) entries, in the thread's
   local memory or, for high degrees, in a :class:`.gpu_common.TableScratch`, so they
   are the CPU's sums bit for bit, with no cap on the degree. Rows of integer weights
   longer than ``HEAVY_DEGREE`` (the hubs of power-law graphs) are summed by a whole
   warp with atomics: exact on integers, so the same sums. The best
   block, the hashed fallback block (same ``mix64`` hash and seed key) and ``-2`` are
   chosen by the CPU's rules. **Bit-identical** ``dest`` and ``bucket``.
2. **Gain buckets**: the CPU computes ``MID + ceil(log(x) / log(1.5))`` with the host's
   libm; CUDA's ``log`` may differ from it by an ulp, which moves exact powers of 1.5
   (a loss of 3 on a vertex of weight 2, say) into the next bucket. So the bucket
   boundaries are tabulated once on the host by bisection over doubles *with the CPU
   function itself* (:func:`bucket_thresholds`), and the kernel counts the boundaries
   below ``x``. This is exact as long as the CPU bucket is monotone in ``x`` (it is:
   log, division and ceil are).
3. **Selection** (:func:`select_prefix`, twin of the sequential
   ``rebalance_cpu.select_prefix``): candidates are sorted by
   the composite key ``(block, bucket, id)`` (one ``cp.argsort`` over int64; the ids
   make keys unique, so the order is deterministic), a segmented exclusive prefix sum
   of vertex weights gives the weight ordered before each candidate in its block, and
   a candidate is selected when that is below the block's excess ``bw - lmax``.
   That is the CPU's rule exactly, so :func:`weak_moves` is **bit-identical** to
   ``rebalance_cpu.weak_moves`` (moves and the full ``dest`` array).
4. **Strong assignment** (:func:`strong_assign`) replaces the sequential greedy
   ``rebalance_cpu.strong_assign``; the limit
   loop and the room per block ``rem`` are the CPU's. **Not bit-identical**:

   * pass 1: per destination block, the selected vertices preferring it, in
     ``(bucket, id)`` order, are accepted while their inclusive running weight fits
     in ``rem[block]`` (the CPU skips a vertex that does not fit and tries the next;
     here the first misfit ends the run). Equal to the CPU for unit vertex weights.
   * pass 2, level by level from the smallest group up (``prefix[0]``, ...):
     (a) the unassigned vertices of each level group, in ``(bucket, id)`` order, are
     laid along the cumulative room of the group's blocks (block id order); a vertex
     whose weight interval lies inside one block's room interval goes there, one that
     straddles two rooms waits; (b) **extension to the lead's design**: the waiting
     vertices are then laid on *slots*, up to ``SLOT_ROUNDS`` times: in each group,
     the vertices that fit its largest room are eligible; with ``W`` the largest
     eligible weight, block ``b`` offers ``rem[b] // W`` slots and the i-th eligible
     vertex takes the i-th slot (blocks in id order), so nothing straddles. What (b)
     cannot place waits for the next level. Without (b) a straddler of the last level
     never moves, which with non-unit weights left blocks overloaded where the CPU's
     first fit balanced them (seen on the k = 192 test inputs with weights 1..5).
     (b) also guarantees progress: the largest room of a group offers a slot whenever
     some vertex is eligible, and every candidate weighs at most the largest room, so
     if nothing moved before the last level, something moves there. For unit weights
     nothing straddles and after (a) a group either has no waiting vertex or no room,
     so (b) never moves anything.
   ``rem`` is updated (integer atomics) after every step, and every accepted vertex
   lies inside the room of its destination, so no destination is filled past its
   limit -- the CPU's guarantee. With non-unit weights one strong step balances a
   little less often than the CPU's sequential first fit (a parallel layout leaves
   fragments of room that first fit would use): on 393 small random instances, the
   GPU balanced 298 of the 307 the CPU balanced; it always reduced the overload.

5. **Weak step in a loop** (:class:`WeakStep`): the weak moves again, for the captured
   Jet loop, with fixed launch sizes and no host readback: the block-level inputs by
   one thread, the proposal kernel, per-(block, bucket) weight sums (integer
   atomics), per block the cut-off bucket ``c`` below which every candidate is taken
   and above which none is, and for bucket ``c`` the weight of the earlier ids from
   a chunked in-order prefix sum. The same selection as step 3 without a sort:
   **bit-identical** to ``rebalance_cpu.weak_moves``.

Determinism: keys are unique, integer atomics are order-independent, and no float
reduction drives a decision, so the same input and seed give the same output.
Host synchronisation: a few scalar readbacks and boolean compactions per call (counts,
the limit loop), never a per-vertex host loop.
"""
from __future__ import annotations

import functools
import math
import struct

import cupy as cp
import numpy as np

from .. import gpu_common as gc
from ..common_cpu import seed_key
from .rebalance_cpu import BUCKET_RATIO, MID_BUCKET, NUM_BUCKETS, gain_bucket

_CU = "rebalancing/rebalance.cu"
# Composite sort keys (segment, bucket, id): ids < 2^31, buckets < 64, segments < 2^26.
_BUCKET_SHIFT = 31
_SEGMENT_SHIFT = 37
#: Most slot layouts per level in pass 2 of the strong assignment (module docstring).
SLOT_ROUNDS = 3
#: A null ``gate`` pointer: the kernel runs whatever the loop's mode (calls outside it).
_NO_GATE = np.uint64(0)


# ------------------------------------------------------------------ gain buckets
def _bits_to_double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _double_to_bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _cpu_loss_bucket(x: float) -> int:
    """The CPU bucket of a loss ``x`` per unit weight (gain ``-x`` on weight 1)."""
    return int(gain_bucket(-x, 1))


@functools.lru_cache(maxsize=None)
def bucket_thresholds() -> np.ndarray:
    """``thr[j - 2]`` = the largest positive double whose CPU loss bucket is ``<= j``,
    for ``j = 2 .. NUM_BUCKETS - 2`` (bucket ``NUM_BUCKETS - 1`` is everything above).

    Found by bisection over the bit patterns of positive doubles (ordered like the
    doubles), starting from a bracket around ``1.5 ** (j - MID)``; the bracket is
    checked and widened to all positive doubles if it does not hold.
    """
    thr = []
    for j in range(2, NUM_BUCKETS - 1):
        centre = BUCKET_RATIO ** (j - MID_BUCKET)
        lo, hi = _double_to_bits(centre / 4.0), _double_to_bits(centre * 4.0)
        if not _cpu_loss_bucket(centre / 4.0) <= j < _cpu_loss_bucket(centre * 4.0):
            lo, hi = 1, _double_to_bits(np.finfo(np.float64).max)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _cpu_loss_bucket(_bits_to_double(mid)) <= j:
                lo = mid
            else:
                hi = mid
        thr.append(_bits_to_double(lo))
    out = np.array(thr, dtype=np.float64)
    assert np.all(np.diff(out) > 0), "CPU gain buckets are not monotone"
    return out


# ------------------------------------------------------------------ small helpers
def block_weights(part: cp.ndarray, vwgt: cp.ndarray, k: int) -> cp.ndarray:
    """Total vertex weight per block (int64, length ``k``), exact integer atomics."""
    part = gc.as_device(part, cp.int32)
    vwgt = gc.as_device(vwgt, cp.int64)
    bw = cp.zeros(int(k), dtype=cp.int64)
    gc.launch(gc.kernel(_CU, "add_block_weights"), part.size, part, vwgt, gc.i64(part.size),
              gc.i64(k), bw, max_blocks=gc.HISTOGRAM_BLOCKS)
    return bw


def _segment_exclusive(seg: cp.ndarray, w: cp.ndarray) -> cp.ndarray:
    """Exclusive prefix sums of ``w`` restarting at every run of equal ``seg``
    (``seg`` sorted ascending): the cumsum minus its value at the segment start."""
    excl = cp.cumsum(w) - w
    first = cp.searchsorted(seg, seg, side="left")
    return excl - excl[first]


def _sort_by_segment(ids: cp.ndarray, seg: cp.ndarray, bucket: cp.ndarray):
    """``ids`` and ``seg`` (int64) ordered by ``(seg, bucket[id], id)``."""
    ids = ids.astype(cp.int64, copy=False)
    key = (seg << _SEGMENT_SHIFT) | (bucket[ids].astype(cp.int64) << _BUCKET_SHIFT) | ids
    order = cp.argsort(key)
    return ids[order], seg[order]


def rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, heavy, dest_ok, prefix,
                      valid_cum, valid_ids, key, fallback,
                      table: gc.TableScratch | None = None) -> tuple[cp.ndarray, cp.ndarray]:
    """Run the proposal kernel (step 1), the twin of ``rebalance_cpu.rebalance_propose``
    with the same inputs as device arrays (``key``: its ``seed_key``; ``table``: the
    kernel's scratch for this graph, made here when not given). Returns ``(dest,
    bucket)`` (int32, length n), bit-identical to the CPU's."""
    n = part.size
    thr = cp.asarray(bucket_thresholds())
    if table is None:
        table = gc.TableScratch(xadj, 1)
    dest = cp.empty(n, dtype=cp.int32)
    bucket = cp.empty(n, dtype=cp.int32)
    gc.launch(gc.kernel(_CU, "rebalance_propose"), n,
              xadj, adjncy, *gc.gain_weights(adjwgt), vwgt, part, bw, gc.i64(lmax), heavy, dest_ok,
              gc.i64(1 if fallback else 0), prefix, gc.i64(prefix.size),
              valid_cum, valid_ids, np.uint64(key), thr, gc.i64(thr.size), gc.i64(n),
              table.offset, table.keys, table.vals, dest, bucket, _NO_GATE)
    return dest, bucket


def select_prefix(part, vwgt, dest, bucket, bw, lmax) -> cp.ndarray:
    """Step 3, the twin of ``rebalance_cpu.select_prefix``: ascending int64 ids of the
    selected candidates (the vertices the CPU flags)."""
    cand = cp.flatnonzero(dest != -1)
    if cand.size == 0:
        return cand
    ids, blk = _sort_by_segment(cand, part[cand].astype(cp.int64), bucket)
    before = _segment_exclusive(blk, vwgt[ids])
    return cp.sort(ids[before < bw[blk] - lmax])


def _assign(ids, blocks, target, vwgt, rem) -> int:
    """Send ``ids`` to ``blocks`` and take their weight off ``rem``; returns the count."""
    if ids.size == 0:
        return 0
    ids = ids.astype(cp.int32)
    target[ids] = blocks.astype(cp.int32)
    gc.launch(gc.kernel(_CU, "take_room"), ids.size, ids, gc.i64(ids.size), target, vwgt, rem)
    return int(ids.size)


def _layout(ids, grp, size, vwgt, rem):
    """Lay ``ids`` (ordered by group, bucket, id) along the cumulative room of their
    group's blocks (block id order). Returns ``(fits, block)``: a vertex fits when its
    weight interval lies inside one block's room interval."""
    k = rem.size
    w = vwgt[ids]
    rincl = cp.cumsum(rem)
    pos = (rincl - rem)[grp * size] + _segment_exclusive(grp, w)
    blk = cp.searchsorted(rincl, pos, side="right")  # first block whose room ends past pos
    end = rincl[cp.minimum(blk, k - 1)]
    fits = (pos < rincl[(grp + 1) * size - 1]) & (pos + w <= end)
    return fits, blk


def _slot_layout(ids, grp, size, vwgt, rem):
    """Lay ``ids`` (ordered by group, bucket, id) on slots. In each group, the vertices
    that fit the group's largest room are eligible; with ``W`` the largest eligible
    weight, block ``b`` offers ``rem[b] // W`` slots, and the i-th eligible vertex of a
    group takes the i-th slot of its group (block id order). No vertex can straddle,
    a block receives at most ``rem[b] // W`` vertices of weight ``<= W``, and the
    roomiest block offers a slot whenever some vertex is eligible.
    Returns ``(fits, block)``."""
    k = rem.size
    w = vwgt[ids]
    ok = w <= rem.reshape(-1, size).max(axis=1)[grp]
    wmax = cp.zeros(k // size, dtype=cp.int64)
    gc.launch(gc.kernel(_CU, "group_max_weight"), ids.size, grp, cp.where(ok, w, 0),
              gc.i64(ids.size), wmax)
    slots = rem // cp.maximum(wmax, 1)[cp.arange(k, dtype=cp.int64) // size]
    sincl = cp.cumsum(slots)
    rank = _segment_exclusive(grp, ok.astype(cp.int64))
    spos = (sincl - slots)[grp * size] + rank
    blk = cp.searchsorted(sincl, spos, side="right")  # the block holding slot spos
    fits = ok & (spos < sincl[(grp + 1) * size - 1])
    return fits, blk


def _place_level(left, size, part, vwgt, bucket, rem, target):
    """Pass 2 on the level whose groups hold ``size`` blocks (module docstring, step 4).

    Returns ``(count placed, ids still unplaced)``.
    """
    ids, grp = _sort_by_segment(left, part[left].astype(cp.int64) // size, bucket)
    fits, blk = _layout(ids, grp, size, vwgt, rem)                    # (a)
    placed = _assign(ids[fits], blk[fits], target, vwgt, rem)
    ids, grp = ids[~fits], grp[~fits]
    for _ in range(SLOT_ROUNDS):                                      # (b)
        if ids.size == 0:
            break
        fits, blk = _slot_layout(ids, grp, size, vwgt, rem)
        count = _assign(ids[fits], blk[fits], target, vwgt, rem)
        placed += count
        ids, grp = ids[~fits], grp[~fits]
        if count == 0:  # nothing eligible: no waiting vertex fits any room of its group
            break
    return placed, ids


def strong_assign(part, vwgt, dest, bucket, chosen, rem, sizes, target) -> int:
    """Parallel replacement of ``rebalance_cpu.strong_assign`` (module docstring, step 4)
    for the selected ids ``chosen`` and the hierarchy's group sizes ``sizes``.

    Fills ``target`` (-1: no move), updates ``rem``; returns the number of moves.
    """
    target.fill(-1)
    if chosen.size == 0:
        return 0
    d = dest[chosen]
    pref = chosen[d >= 0]
    left = chosen[d < 0]
    moved = 0
    if pref.size:  # pass 1: the preferred (connected) destination while it has room
        ids, blk = _sort_by_segment(pref, dest[pref].astype(cp.int64), bucket)
        w = vwgt[ids]
        fits = _segment_exclusive(blk, w) + w <= rem[blk]
        moved += _assign(ids[fits], blk[fits], target, vwgt, rem)
        left = cp.concatenate((left, ids[~fits]))
    for size in sizes:  # pass 2: nearest level group with room
        if left.size == 0:
            break
        placed, left = _place_level(left, size, part, vwgt, bucket, rem, target)
        moved += placed
    return moved


def _device_args(xadj, adjncy, adjwgt, vwgt, part, prefix, bw):
    """The arrays with the dtypes the kernels read (no copies when they already are)."""
    return (gc.as_device(xadj, cp.int64), gc.as_device(adjncy, cp.int32),
            gc.gain_weights(adjwgt)[0], gc.as_device(vwgt, cp.int64),
            gc.as_device(part, cp.int32), gc.as_device(prefix, cp.int64),
            gc.as_device(bw, cp.int64))


# ------------------------------------------------------------------ rebalancers
def weak_moves(xadj: cp.ndarray, adjncy: cp.ndarray, adjwgt: cp.ndarray, vwgt: cp.ndarray,
               part: cp.ndarray, k: int, lmax: int, prefix: cp.ndarray, bw: cp.ndarray,
               seed: int, table: gc.TableScratch | None = None) -> tuple[cp.ndarray, cp.ndarray]:
    """Weak rebalancing, bit-identical to ``rebalance_cpu.weak_moves``.

    ``table``: the proposal kernel's scratch for this graph (``TableScratch(xadj, 1)``),
    made here when not given; a caller that rebalances repeatedly passes its own.

    Returns ``(moves, dest)``: ascending int32 ids of the vertices to move and the full
    int32 proposal array (``dest[u]`` is the destination of every moving ``u``; -1 at
    non-candidates, as on the CPU).
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, bw = _device_args(xadj, adjncy, adjwgt, vwgt, part,
                                                              prefix, bw)
    k, lmax = int(k), int(lmax)
    opt = float(int(bw.sum())) / k
    sigma = max(0.99 * lmax, lmax - 100.0)
    dest_ok = (bw < sigma).astype(cp.uint8)
    valid_cum = cp.zeros(k + 1, dtype=cp.int64)
    valid_cum[1:] = cp.cumsum(dest_ok, dtype=cp.int64)
    valid_ids = cp.flatnonzero(dest_ok).astype(cp.int32)
    heavy = 1.5 * (bw.astype(cp.float64) - opt)  # same IEEE operations as the CPU
    dest, bucket = rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, heavy, dest_ok,
                                     prefix, valid_cum, valid_ids, seed_key(seed), True, table)
    moves = select_prefix(part, vwgt, dest, bucket, bw, lmax)
    return moves.astype(cp.int32), dest


def strong_moves(xadj: cp.ndarray, adjncy: cp.ndarray, adjwgt: cp.ndarray, vwgt: cp.ndarray,
                 part: cp.ndarray, k: int, lmax: int, prefix: cp.ndarray,
                 bw: cp.ndarray, table: gc.TableScratch | None = None
                 ) -> tuple[cp.ndarray, cp.ndarray]:
    """Strong rebalancing with the thresholds and limit loop of ``rebalance_cpu.strong_moves``
    and a parallel assignment (module docstring, step 4); ``table`` as for
    :func:`weak_moves`.

    Returns ``(moves, target)``: ascending int32 ids and the full int32 target array
    (-1 at vertices that stay).
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix, bw = _device_args(xadj, adjncy, adjwgt, vwgt, part,
                                                              prefix, bw)
    n = part.size
    k, lmax = int(k), int(lmax)
    sizes = [int(s) for s in cp.asnumpy(prefix)]
    if not sizes or sizes[-1] != k or any(k % s for s in sizes):
        raise ValueError(f"prefix {sizes} must divide k = {k} and end with it")
    opt = float(int(bw.sum())) / k
    excess = int(cp.maximum(bw - lmax, 0).sum())
    limit = min(lmax, max(int(math.floor(opt)) + 1, int(math.floor(0.99 * lmax))))
    limits = ([limit] if limit < lmax else []) + [lmax]
    target = cp.full(n, -1, dtype=cp.int32)
    no_ids = cp.zeros(0, dtype=cp.int32)
    for limit in limits:
        rem = cp.where(bw < limit, limit - bw, 0).astype(cp.int64)
        if int(rem.sum()) < excess and limit < lmax:
            continue
        max_rem = int(rem.max())
        if max_rem == 0:
            continue
        dest_ok = (rem > 0).astype(cp.uint8)
        heavy = cp.full(k, max_rem + 1, dtype=cp.float64)  # only vertices that fit somewhere
        dest, bucket = rebalance_propose(xadj, adjncy, adjwgt, vwgt, part, bw, lmax, heavy,
                                         dest_ok, prefix, cp.zeros(k + 1, dtype=cp.int64), no_ids,
                                         0, False, table)
        chosen = select_prefix(part, vwgt, dest, bucket, bw, lmax)
        if strong_assign(part, vwgt, dest, bucket, chosen, rem, sizes, target):
            return cp.flatnonzero(target >= 0).astype(cp.int32), target
    return no_ids, target


class WeakStep:
    """Weak rebalancing as fixed-size kernels without host readbacks, for the captured
    Jet loop (``rebalancing/rebalance.cu``, "weak step in a loop"): the moves of
    :func:`weak_moves` (so of ``rebalance_cpu.weak_moves``, bit for bit), selected without
    sorting and written into a target array. Buffers are allocated once per graph;
    every kernel skips itself unless the loop's control block says a weak iteration.
    """

    def __init__(self, n: int, k: int):
        self.n, self.k = int(n), int(k)
        self.dest_ok = cp.empty(k, dtype=cp.uint8)
        self.valid_cum = cp.empty(k + 1, dtype=cp.int64)
        self.valid_ids = cp.empty(max(k, 1), dtype=cp.int32)
        self.heavy = cp.empty(k, dtype=cp.float64)
        self.dest = cp.empty(n, dtype=cp.int32)
        self.bucket = cp.empty(n, dtype=cp.int32)
        self.wsum = cp.empty(k * NUM_BUCKETS, dtype=cp.int64)
        self.cut = cp.empty(k, dtype=cp.int64)
        self.cut_base = cp.empty(k, dtype=cp.int64)
        # chunks of the in-order prefix pass: ~256 vertices each, at most 4M csum entries
        self.nchunks = max(1, min(-(-n // 256), (1 << 22) // max(k, 1)))
        self.span = max(1, -(-n // self.nchunks))
        self.csum = cp.empty(self.nchunks * k, dtype=cp.int64)
        self.thr = cp.asarray(bucket_thresholds())
        for name in self.KERNELS:  # loaded now: module loading is no work to capture
            gc.kernel(_CU, name)

    KERNELS = ("weak_prep", "rebalance_propose", "weak_bucket_sums", "weak_cutoffs",
               "weak_chunk_sums", "weak_chunk_scan", "weak_select")

    def enqueue(self, xadj, adjncy, adjwgt, vwgt, part, bw, lmax: int, prefix, seed: int,
                table: gc.TableScratch, target, gate) -> None:
        """Queue one weak step: ``target[u] = dest`` for the moving vertices (``target``
        must be -1 elsewhere). ``gate``: the loop's control block (CuPy int64), or
        ``None`` to run unconditionally."""
        n, k, nb = self.n, self.k, NUM_BUCKETS
        gate = _NO_GATE if gate is None else gate
        i64, fn = gc.i64, functools.partial(gc.kernel, _CU)
        gc.launch(fn("weak_prep"), max(1, k * nb), bw, i64(k), i64(lmax), self.dest_ok,
                  self.valid_cum, self.valid_ids, self.heavy, self.wsum, i64(nb), gate)
        gc.launch(fn("rebalance_propose"), n,
                  xadj, adjncy, *gc.gain_weights(adjwgt), vwgt, part, bw, i64(lmax), self.heavy,
                  self.dest_ok,
                  i64(1), prefix, i64(prefix.size), self.valid_cum, self.valid_ids,
                  np.uint64(seed_key(seed)), self.thr, i64(self.thr.size), i64(n),
                  table.offset, table.keys, table.vals, self.dest, self.bucket, gate)
        gc.launch(fn("weak_bucket_sums"), n, part, self.dest, self.bucket, vwgt, i64(n), i64(k),
                  i64(nb), self.wsum, gate, max_blocks=gc.HISTOGRAM_BLOCKS)
        gc.launch(fn("weak_cutoffs"), k, bw, i64(k), i64(lmax), self.wsum, i64(nb), self.cut,
                  self.cut_base, gate)
        chunks = (i64(n), i64(k), i64(self.span), i64(self.nchunks))
        # a warp per chunk; a thread block per (overloaded) block for the scan
        gc.launch(fn("weak_chunk_sums"), 32 * self.nchunks, part, self.dest, self.bucket, vwgt,
                  self.cut, *chunks, self.csum, gate)
        fn("weak_chunk_scan")((min(k, gc.MAX_BLOCKS),), (gc.BLOCK,),
                              (self.cut, i64(k), i64(self.nchunks), self.csum, gate))
        gc.launch(fn("weak_select"), 32 * self.nchunks, part, self.dest, self.bucket, vwgt, bw,
                  i64(lmax), self.cut, self.cut_base, *chunks, self.csum, target, gate)


def _prepare(xadj, adjncy, adjwgt, vwgt, part, prefix):
    """Device arrays of the kernels' dtypes; edge weights int64 or float64 (the gain
    kernels read both as float64, as the CPU's ``common_cpu.float_weights``)."""
    return (gc.as_device(xadj, cp.int64), gc.as_device(adjncy, cp.int32),
            gc.gain_weights(adjwgt)[0], gc.as_device(vwgt, cp.int64),
            gc.as_device(part, cp.int32), gc.as_device(prefix, cp.int64))


def rebalance_weak(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, prefix, *,
                   seed: int = 0) -> tuple[cp.ndarray, cp.ndarray]:
    """Jet's weak rebalancing (``rebalance_cpu.rebalance_weak``, bit-identical).

    Returns ``(vertices, targets)``: ascending int32 ids and their destinations.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix = _prepare(xadj, adjncy, adjwgt, vwgt, part, prefix)
    bw = block_weights(part, vwgt, k)
    moves, dest = weak_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, bw, seed)
    return moves, dest[moves]


def rebalance_strong(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int,
                     prefix) -> tuple[cp.ndarray, cp.ndarray]:
    """Strong rebalancing (``rebalance_cpu.rebalance_strong`` with the parallel assignment).

    Returns ``(vertices, targets)``: ascending int32 ids and their destinations.
    """
    xadj, adjncy, adjwgt, vwgt, part, prefix = _prepare(xadj, adjncy, adjwgt, vwgt, part, prefix)
    bw = block_weights(part, vwgt, k)
    moves, target = strong_moves(xadj, adjncy, adjwgt, vwgt, part, k, lmax, prefix, bw)
    return moves, target[moves]
