"""Coarsening on the GPU: the CUDA twin of :mod:`procmap.kernels.coarsening.coarsen_cpu`.

Same functions, same arguments, same semantics; arrays in and out are CuPy arrays
(NumPy inputs are copied to the device). Kernels live in ``coarsening/coarsen.cu``.

What is bit-identical to the CPU twin
-------------------------------------
* :func:`heavy_edge_matching`: the CPU's rounds of proposal (rating
  ``w^2 / (c(u) c(v))`` in double, weight-0 vertices rated as weight 1, the cap,
  the seeded symmetric edge hash, then the smaller id) and handshake, one thread
  per vertex. Instead of compacting an active list on the host, a vertex is skipped
  when it is matched or *retired* (it proposed nobody once; eligibility only
  shrinks, so it never would again) -- the same vertex set the CPU keeps active.
  The CPU stops after a round that matched nothing; here every round checks a
  device flag written by the previous handshake and exits at once if it is clear.
  So HEM runs ``max_rounds`` launch pairs and **never synchronises with the host**
  (the rounds after the last productive one cost two empty launches each).
* :func:`two_hop_matching`: the leaf / twin / relative stages are one thread per
  anchor scanning its row in CSR order, and one thread per run of equal
  neighbourhood hashes, the runs made by a stable sort (``cp.argsort`` is stable)
  of the unmatched vertices in id order -- the CPU's loops exactly. The stage
  checks ``unmatched <= threshold * n`` read back one count each (at most three
  synchronisations per call).
* :func:`coarse_ids`: the same prefix scan over pair leaders.
* :func:`contract` with integer edge weights (int64 atomics are exact).

What differs
------------
* :func:`contract` with float64 edge weights sums parallel edges with
  ``atomicAdd(double)``: the summation order, so the last bits of a coarse weight,
  depend on thread scheduling (relative difference to the CPU ~1e-16 per addition,
  and not reproducible bit for bit between runs). Nothing in coarsening decides on
  these sums exactly; coarse weights only feed ratings of later levels.
* :func:`contract` builds each coarse row with one group of 8 to 32 lanes from the
  rows of its members (a member list from a counting pass, in scheduling order),
  hashing in shared memory when the row's region is small and in the region itself
  otherwise, and orders the row by ranking its distinct neighbours (a sort of their
  slots for the rare regions over :data:`SMALL_REGION`; the CPU sorts row by row):
  the output is canonical either way, so only the cost differs.

Memory in :func:`contract` (``2m`` fine CSR entries, ``mc <= 2m`` coarse ones): the
row scratch (int32 keys and 8-byte weights, 2m each), the member list (int32, n), the
region and member offsets, coarse degrees and weights (int64, 4 per coarse vertex) and
the coarse CSR itself; the fine graph is not copied.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from .coarsen_cpu import HEM_MAX_ROUNDS, UNMATCHED_THRESHOLD, edge_hash_key, weight_cap
from ..gpu_common import BLOCK, MAX_BLOCKS, as_device, i64, kernel, launch

__all__ = ["heavy_edge_matching", "two_hop_matching", "coarse_ids", "contract",
           "coarsen_once", "HEM_MAX_ROUNDS", "UNMATCHED_THRESHOLD"]

_CU = "coarsening/coarsen.cu"


# --------------------------------------------------------------------- helpers
def _csr(xadj, adjncy):
    return as_device(xadj, cp.int64), as_device(adjncy, cp.int32)


def _weights(adjwgt) -> tuple[cp.ndarray, str]:
    """Edge weights as the kernels take them: int64 (``_i64``) or float64 (``_f64``)."""
    adjwgt = as_device(adjwgt)
    if adjwgt.dtype.kind == "f":
        return adjwgt.astype(cp.float64, copy=False), "f64"
    return adjwgt.astype(cp.int64, copy=False), "i64"


def _u64(x) -> np.uint64:
    return np.uint64(x)


def _unmatched(match: cp.ndarray) -> int:
    # a host read: one synchronisation
    return int(cp.count_nonzero(match == cp.arange(match.size, dtype=match.dtype)))


# ------------------------------------------------------------------------- HEM
def _hem(xadj, adjncy, adjwgt, sfx, vwgt, max_vwgt, seed, max_rounds) -> cp.ndarray:
    n = xadj.size - 1
    match = cp.arange(n, dtype=cp.int32)
    pref = cp.full(n, -2, dtype=cp.int32)  # -2: not retired (yet)
    avail = cp.array(vwgt, dtype=cp.int64)  # a copy: -1 marks matched vertices
    progress = cp.zeros(max(int(max_rounds), 1), dtype=cp.int32)
    cap, key = i64(weight_cap(max_vwgt)), _u64(edge_hash_key(seed))
    propose = kernel(_CU, f"hem_propose_{sfx}")
    resolve = kernel(_CU, "hem_resolve")
    for r in range(int(max_rounds)):
        launch(propose, n, i64(n), xadj, adjncy, adjwgt, avail, cap, key, progress, i64(r), pref)
        launch(resolve, n, i64(n), pref, match, avail, progress, i64(r))
    return match


def heavy_edge_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt=None, seed: int = 0,
                        max_rounds: int = HEM_MAX_ROUNDS) -> cp.ndarray:
    """Heavy-edge matching with the ``exp*2`` rating ``w(u,v)^2 / (c(u) c(v))``.

    GPU twin of :func:`coarsen_cpu.heavy_edge_matching`, bit-identical to it.
    Launches ``2 * max_rounds`` kernels and never waits for the device. Returns
    ``match`` (CuPy int32): partner of ``u``, or ``u`` when unmatched.
    """
    xadj, adjncy = _csr(xadj, adjncy)
    adjwgt, sfx = _weights(adjwgt)
    return _hem(xadj, adjncy, adjwgt, sfx, vwgt, max_vwgt, seed, max_rounds)


# --------------------------------------------------------------------- two-hop
def _pair_by_anchor(xadj, adjncy, adjwgt, sfx, vwgt, cap, match, max_degree, anchor) -> None:
    """Anchors of the unmatched vertices of degree <= ``max_degree``, then pairs per anchor."""
    n = xadj.size - 1
    launch(kernel(_CU, f"anchors_{sfx}"), n, i64(n), xadj, adjncy, adjwgt, match,
           i64(max_degree), anchor)
    launch(kernel(_CU, "pair_by_anchor"), n, i64(n), xadj, adjncy, vwgt, cap, anchor, match)


def _twin_matching(xadj, adjncy, vwgt, cap, key, match) -> None:
    n = xadj.size - 1
    hashes = cp.empty(n, dtype=cp.uint64)
    launch(kernel(_CU, "neighbourhood_hash"), n, i64(n), xadj, adjncy, match, key, hashes)
    # isolated vertices (hash 0) are twins too, as on the CPU
    cand = cp.flatnonzero(match == cp.arange(n, dtype=cp.int32))  # ids increasing
    if cand.size < 2:
        return
    # stable: within a run of equal hashes the vertices stay in id order
    order = cand[cp.argsort(hashes[cand])].astype(cp.int32)
    hs = hashes[order]
    boundary = cp.ones(order.size + 1, dtype=cp.bool_)
    boundary[1:-1] = hs[1:] != hs[:-1]
    starts = cp.flatnonzero(boundary).astype(cp.int64, copy=False)
    runs = starts.size - 1
    launch(kernel(_CU, "pair_twins"), runs, i64(runs), xadj, adjncy, vwgt, cap, order,
           starts, match)


def two_hop_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt=None, seed: int = 0, *,
                     threshold: float = UNMATCHED_THRESHOLD,
                     max_rounds: int = HEM_MAX_ROUNDS) -> cp.ndarray:
    """Heavy-edge matching completed by leaf, twin and relative matching.

    GPU twin of :func:`coarsen_cpu.two_hop_matching`, bit-identical to it (rows of
    ``adjncy`` must be sorted, as for the CPU). Each later stage runs only while
    more than ``threshold * n`` vertices are unmatched; every such check reads one
    count back from the device. Returns ``match`` (CuPy int32).
    """
    xadj, adjncy = _csr(xadj, adjncy)
    adjwgt, sfx = _weights(adjwgt)
    vwgt = as_device(vwgt, cp.int64)
    n = xadj.size - 1
    match = _hem(xadj, adjncy, adjwgt, sfx, vwgt, max_vwgt, seed, max_rounds)
    limit = threshold * n
    if _unmatched(match) <= limit:
        return match
    cap = i64(weight_cap(max_vwgt))
    anchor = cp.empty(n, dtype=cp.int32)

    _pair_by_anchor(xadj, adjncy, adjwgt, sfx, vwgt, cap, match, 1, anchor)  # leaves
    if _unmatched(match) <= limit:
        return match

    _twin_matching(xadj, adjncy, vwgt, cap, _u64(edge_hash_key(seed)), match)
    if _unmatched(match) <= limit:
        return match

    _pair_by_anchor(xadj, adjncy, adjwgt, sfx, vwgt, cap, match, n, anchor)  # relatives
    return match


# ------------------------------------------------------------------ coarse ids
def coarse_ids(match) -> tuple[cp.ndarray, int]:
    """Coarse vertex ids of a matching: ``(cmap`` CuPy int32``, nc)``.

    Pairs are led by their smaller endpoint, leaders numbered in id order by a
    prefix scan (as :func:`coarsen_cpu.coarse_ids`). The validity check rides on
    the one host read that ``nc`` needs anyway; raises ``ValueError`` if ``match``
    is not a matching.
    """
    match = as_device(match).astype(cp.int64, copy=False)
    n = match.size
    if n == 0:
        return cp.zeros(0, dtype=cp.int32), 0
    ids = cp.arange(n, dtype=cp.int64)
    safe = cp.clip(match, 0, n - 1)  # CuPy indexing does not bound-check: clip first
    bad = (match != safe) | (safe[safe] != ids)
    number = cp.cumsum(match >= ids, dtype=cp.int64) - 1  # exclusive scan at leaders
    nc, nbad = (int(x) for x in cp.stack((number[-1] + 1, cp.count_nonzero(bad))).get())
    if nbad:
        raise ValueError("match is not a matching: match[match[u]] != u for some u")
    cmap = number[cp.minimum(ids, match)].astype(cp.int32)
    return cmap, nc


# ------------------------------------------------------------------ contraction
def contract(xadj, adjncy, adjwgt, vwgt, cmap, nc: int):
    """Contract the graph along ``cmap`` (fine vertex -> coarse id in ``0..nc-1``).

    Paper Algorithm 3 on the GPU: coarse degree bounds (summed member degrees), weights
    and member counts by integer atomics, regions and member lists by exclusive scans.
    Then one group of 4 to 32 lanes per coarse vertex (by the average region size)
    hashes the edges of its members, self loops dropped: in a table in shared memory
    when the region has at most :func:`_shared_limit` slots, whose distinct neighbours
    go to the start of the region in neighbour order; else in the region itself (a
    global table; atomicCAS on the key, linear probing, atomicAdd of the weight). The
    coarse rows are then copied out, or, from a global table, written in neighbour
    order by ranking its slots (a sort of their slots for the rare regions over
    :data:`SMALL_REGION`). ``cmap`` may come from any clustering.

    Returns ``(cxadj int64, cadjncy int32, cadjwgt adjwgt.dtype, cvwgt int64)`` as
    CuPy arrays: symmetric CSR, rows sorted, no self loops. Equal to the CPU twin
    for integer weights; float weights may differ in the last bits (see the module
    docstring). Assumes ``xadj[0] == 0`` and ``xadj[n] == adjncy.size``.
    """
    xadj, adjncy = _csr(xadj, adjncy)
    out_dtype = as_device(adjwgt).dtype
    adjwgt, sfx = _weights(adjwgt)
    vwgt = as_device(vwgt, cp.int64)
    cmap = as_device(cmap, cp.int32)
    nc = int(nc)
    n, m2 = cmap.size, adjncy.size

    bound = cp.zeros(nc, dtype=cp.int64)
    cvwgt = cp.zeros(nc, dtype=cp.int64)
    members = cp.zeros(nc, dtype=cp.int64)
    launch(kernel(_CU, "contract_bounds"), n, i64(n), xadj, vwgt, cmap, bound, cvwgt, members)
    # scans straight into the offsets (no temporary and copy): bound[c] is the size of
    # c's region, members[c] its member count
    off = cp.empty(nc + 1, dtype=cp.int64)
    off[0] = 0
    cp.cumsum(bound, out=off[1:])
    moff = cp.empty(nc + 1, dtype=cp.int64)
    moff[0] = 0
    cp.cumsum(members, out=moff[1:])
    member = cp.empty(n, dtype=cp.int32)
    launch(kernel(_CU, "contract_members"), n, i64(n), cmap, moff, members, member)
    del members
    # the regions tile exactly the fine CSR: off[nc] == 2m
    tkey = cp.empty(m2, dtype=cp.int32)
    twgt = cp.empty(m2, dtype=adjwgt.dtype)
    cnt = cp.empty(nc, dtype=cp.int64)
    lanes = _row_lanes(m2, nc, ROW_SLOTS_PER_LANE["rows"])
    shared_max = i64(_shared_limit(lanes))
    # rows over SMALL_REGION slots hashed in their region are sorted (see the emit kernel);
    # tail = (coarse entries, such rows), read back in one go
    sort_above = max(SMALL_REGION, int(shared_max))
    tail = cp.zeros(2, dtype=cp.int64)
    _launch_groups(kernel(_CU, f"contract_rows_{sfx}_{lanes}"), nc, lanes, i64(nc), shared_max,
                   moff, member, xadj, adjncy, adjwgt, cmap, off, tkey, twgt, cnt,
                   i64(sort_above), tail[1:])
    del member, moff
    cxadj = cp.empty(nc + 1, dtype=cp.int64)
    cxadj[0] = 0
    cp.cumsum(cnt, out=cxadj[1:])
    del cnt
    tail[0] = cxadj[-1]
    mc, large = (int(x) for x in tail.get())
    cadjncy = cp.empty(mc, dtype=cp.int32)
    cadjwgt = cp.empty(mc, dtype=adjwgt.dtype)
    lanes = _row_lanes(m2, nc, ROW_SLOTS_PER_LANE["emit"])
    _launch_groups(kernel(_CU, f"contract_emit_{sfx}_{lanes}"), nc, lanes, i64(nc), shared_max,
                   i64(SMALL_REGION), off, tkey, twgt, cxadj, cadjncy, cadjwgt)
    if large:
        _emit_large_rows(cp.flatnonzero(bound > sort_above), off, bound, tkey, twgt, cxadj,
                         nc, cadjncy, cadjwgt)
    return cxadj, cadjncy, cadjwgt.astype(out_dtype, copy=False), cvwgt


#: Regions (summed fine degrees of a coarse vertex) up to this size that are not built
#: in shared memory are compacted by one group of lanes each (``contract_emit_*``: work
#: quadratic in the size); larger ones by one sort of their occupied slots
#: (:func:`_emit_large_rows`).
SMALL_REGION = 2048
#: Shared-memory table slots per lane of the row kernels (``ROW_SLOTS_PER_LANE`` in
#: coarsening/coarsen.cu, which must match): a group of G lanes builds rows of up to 8 G slots
#: in shared memory.
SHARED_SLOTS_PER_LANE = 8
#: Largest region built in shared memory, below the table size (``None``: the table
#: size); tests lower it to exercise the global tables.
SHARED_REGION: int | None = None


def _shared_limit(lanes: int) -> int:
    """Regions of at most this many slots are hashed in shared memory (``lanes`` per row)."""
    room = SHARED_SLOTS_PER_LANE * lanes
    return room if SHARED_REGION is None else min(room, SHARED_REGION)


def _launch_groups(fn, items: int, lanes: int, *args) -> None:
    """Launch a kernel with ``lanes`` threads per item (a grid stride over groups)."""
    if items <= 0:
        return
    blocks = min(MAX_BLOCKS, -(-int(items) * lanes // BLOCK))
    fn((blocks,), (BLOCK,), args)


#: Average region slots per lane that the row kernels aim at (see :func:`_row_lanes`):
#: "rows" builds the rows (hashing), "emit" writes the coarse CSR.
ROW_SLOTS_PER_LANE = {"rows": 2, "emit": 2}


def _row_lanes(m2: int, nc: int, slots_per_lane: float) -> int:
    """Lanes per coarse row (4, 8, 16 or 32) for regions of ``m2 / nc`` slots on average."""
    want = m2 / max(nc, 1) / slots_per_lane
    return 4 if want <= 4 else 8 if want <= 8 else 16 if want <= 16 else 32


def _emit_large_rows(rows, off, region, hkey, hwgt, cxadj, nc: int, cadjncy, cadjwgt) -> None:
    """Compact the regions of ``rows`` (the large ones) into their coarse rows, sorted
    by neighbour: a sort of their occupied slots by ``(row, neighbour)``."""
    sizes = region[rows]
    starts = cp.zeros(rows.size + 1, dtype=cp.int64)
    cp.cumsum(sizes, out=starts[1:])
    total = int(starts[-1])
    at = cp.arange(total, dtype=cp.int64)
    which = cp.searchsorted(starts, at, side="right") - 1  # index into rows of every slot
    slots = off[rows][which] + (at - starts[which])
    del at
    used = hkey[slots] >= 0
    slots, which = slots[used], which[used]
    order = cp.argsort(which * nc + hkey[slots])  # rows in order, each by neighbour
    slots, which = slots[order], which[order]
    first = cp.searchsorted(which, which, side="left")  # first sorted entry of its row
    pos = cxadj[rows][which] + (cp.arange(which.size, dtype=cp.int64) - first)
    cadjncy[pos] = hkey[slots]
    cadjwgt[pos] = hwgt[slots]


def coarsen_once(xadj, adjncy, adjwgt, vwgt, max_vwgt=None, seed: int = 0):
    """One coarsening level on the GPU: two-hop matching, coarse ids, contraction.

    Returns ``(cmap, cxadj, cadjncy, cadjwgt, cvwgt)`` (CuPy arrays), as
    :func:`coarsen_cpu.coarsen_once`.
    """
    xadj, adjncy = _csr(xadj, adjncy)
    adjwgt = as_device(adjwgt)
    vwgt = as_device(vwgt, cp.int64)
    match = two_hop_matching(xadj, adjncy, adjwgt, vwgt, max_vwgt, seed)
    cmap, nc = coarse_ids(match)
    return (cmap,) + contract(xadj, adjncy, adjwgt, vwgt, cmap, nc)
