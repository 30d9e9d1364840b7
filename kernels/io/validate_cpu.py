"""Validation of CSR arrays that come from a binary file (``procmap.formats.pmg``).

A binary graph file holds the CSR arrays of a :class:`~procmap.graph.CommGraph`
as they are; before the trusted constructor may use them, every invariant the
text readers establish by construction is checked here, in one pass over the
entries (docs/design.md section 2):

* ``xadj``: ``xadj[0] == 0``, non-decreasing, ``xadj[n] == nnz`` (:func:`check_xadj`);
* every row: ids in ``0..n-1``, no self loop, strictly increasing (sorted, no
  duplicates), weights finite and ``> 0`` (zero entries are never stored);
* symmetry: every entry ``(u, v, w)`` has a reverse ``(v, u, w)``, found by binary
  search in row ``v``: O(m log d), parallel over blocks of rows.

Only the entries with ``u < v`` are searched (``mode=1``); the driver also counts
the entries above and below the diagonal. If every upper entry has a distinct
reverse below the diagonal and the two counts are equal, the map is a bijection:
every lower entry has its reverse too. ``mode=2`` searches every entry, to name a
lower entry without a reverse; ``mode=0`` checks the rows alone.

Kernels are specialised on the weight dtype only (int64 or float64): two
compilations. ``xadj`` must have passed :func:`check_xadj` before
:func:`check_rows` runs (row bounds are used unchecked); ids are range-checked
before they index ``xadj``.
"""
from __future__ import annotations

import numba as nb
import numpy as np

#: Violation codes returned by :func:`check_rows` (``OK``: none).
OK = 0
BAD_ID = 1
SELF_LOOP = 2
UNSORTED = 3
DUPLICATE = 4
BAD_WEIGHT = 5
MISSING_REVERSE = 6
ASYMMETRIC = 7

#: Rows per block of the parallel driver (blocks are the unit of work and of the
#: "first violation" search).
BLOCK_ROWS = 4096


@nb.njit(cache=True, nogil=True)
def check_xadj(xadj, nnz):
    """First index ``i`` at which ``xadj`` breaks ``xadj[0] == 0``, ``xadj[i] <=
    xadj[i + 1]``, ``xadj[-1] == nnz``; ``-1`` when none does."""
    if xadj[0] != 0:
        return 0
    for i in range(xadj.size - 1):
        if xadj[i + 1] < xadj[i] or xadj[i + 1] > nnz:
            return i + 1
    if xadj[xadj.size - 1] != nnz:
        return xadj.size - 1
    return -1


@nb.njit(cache=True, nogil=True, inline="always")
def _find(adjncy, lo, hi, key):
    """Index of ``key`` in the sorted ``adjncy[lo:hi]``, or ``-1`` (binary search)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        value = adjncy[mid]
        if value < key:
            lo = mid + 1
        elif value > key:
            hi = mid
        else:
            return mid
    return -1


@nb.njit(cache=True, nogil=True)
def _check_block(xadj, adjncy, adjwgt, lo, hi, mode):
    """Check rows ``lo..hi-1``. Returns ``(entry, code, upper, largest, total, fractional)``:
    the first violating entry and its code (``-1, OK`` if none), the number of
    entries above the diagonal, the largest weight, the float64 sum of the weights
    and the number of non-integral weights."""
    n = xadj.size - 1
    upper = 0
    largest = 0.0
    total = 0.0
    fractional = 0
    for u in range(lo, hi):
        prev = -1
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            if v < 0 or v >= n:
                return e, BAD_ID, upper, largest, total, fractional
            if v == u:
                return e, SELF_LOOP, upper, largest, total, fractional
            if v <= prev:
                code = DUPLICATE if v == prev else UNSORTED
                return e, code, upper, largest, total, fractional
            prev = v
            w = adjwgt[e]
            if not (w > 0) or w == np.inf:  # zero, negative, NaN, inf
                return e, BAD_WEIGHT, upper, largest, total, fractional
            wf = np.float64(w)
            total += wf
            if wf > largest:
                largest = wf
            if wf != np.floor(wf):
                fractional += 1
            if v > u:
                upper += 1
            if mode == 2 or (mode == 1 and v > u):
                r = _find(adjncy, xadj[v], xadj[v + 1], u)
                if r < 0:
                    return e, MISSING_REVERSE, upper, largest, total, fractional
                if adjwgt[r] != w:
                    return e, ASYMMETRIC, upper, largest, total, fractional
    return -1, OK, upper, largest, total, fractional


@nb.njit(parallel=True, cache=True, nogil=True)
def check_rows(xadj, adjncy, adjwgt, mode):
    """Check every row of a CSR graph (see the module docstring), in parallel blocks.

    Returns ``(entry, code, upper, largest, total, fractional)``: the first violating
    entry in row order and its code (``-1, OK`` if none), the number of entries
    above the diagonal, the largest weight, the float64 sum of the weights (order
    unspecified) and the number of non-integral weights; the last four cover all
    entries only when no violation was found.
    """
    n = xadj.size - 1
    blocks = (n + BLOCK_ROWS - 1) // BLOCK_ROWS
    entries = np.full(blocks, -1, dtype=np.int64)
    codes = np.zeros(blocks, dtype=np.int64)
    uppers = np.zeros(blocks, dtype=np.int64)
    largests = np.zeros(blocks, dtype=np.float64)
    totals = np.zeros(blocks, dtype=np.float64)
    fractionals = np.zeros(blocks, dtype=np.int64)
    for b in nb.prange(blocks):
        lo = b * BLOCK_ROWS
        hi = min(lo + BLOCK_ROWS, n)
        e, c, up, big, tot, frac = _check_block(xadj, adjncy, adjwgt, lo, hi, mode)
        entries[b] = e
        codes[b] = c
        uppers[b] = up
        largests[b] = big
        totals[b] = tot
        fractionals[b] = frac
    upper = 0
    largest = 0.0
    total = 0.0
    fractional = 0
    for b in range(blocks):
        if codes[b] != OK:
            return entries[b], codes[b], upper, largest, total, fractional
        upper += uppers[b]
        largest = max(largest, largests[b])
        total += totals[b]
        fractional += fractionals[b]
    return -1, OK, upper, largest, total, fractional
