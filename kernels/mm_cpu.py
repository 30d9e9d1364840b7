"""Numba passes of the direct MatrixMarket reader (``procmap.formats.matrixmarket``).

A ``coordinate`` MatrixMarket file lists directed entries ``row col [value]``
(1-based) that the graph holds as ``C + C^T`` (a ``symmetric`` file lists one
triangle ``L``, and ``L + L^T`` is the same sum), so the reader is the ``.comm``
reader's pipeline with another line layout:

1. :func:`procmap.kernels.text_cpu.first_line` finds the size line; the bytes
   after it are cut into line-aligned chunks and their entry lines counted in
   parallel (:func:`procmap.kernels.comm_cpu.chunk_starts`,
   :func:`procmap.kernels.comm_cpu.count_entries`);
2. :func:`parse_entries` (parallel over chunks) parses every entry line into
   ``src``/``dst`` (int32, 0-based) and ``volume`` (int64; 1 for ``pattern``);
3. :func:`build_symmetric` places both directions of every kept entry into CSR rows,
   sorts the rows and sums duplicates with the ``.comm`` kernels
   (:func:`procmap.kernels.comm_cpu.count_degrees`, ``fill_both``, ``merge_rows``,
   ``compact_rows``).

Only the plain case is accepted: every entry line holds exactly ``per_line``
tokens of 1 to 18 decimal digits (no sign, fraction or exponent), ids in
``base..limit - 1 + base``. Anything else makes :func:`parse_entries` report
failure, and the reader re-reads the file with the general tokenizer path, which
words every error with its line.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from . import comm_cpu
from .text_cpu import end_of_line, is_space, next_int


@nb.njit(cache=True, nogil=True)
def _parse_chunk(data, comment, lo, hi, k, per_line, base, limit, src, dst, volume):
    """Parse the entry lines of ``data[lo:hi]`` into entries ``k, k+1, ...``.

    Returns ``(ok, largest id, smallest id, largest volume of a non-loop entry,
    largest volume, self loops)``, ids counted from ``base``.
    """
    top = -1
    bottom = limit
    heaviest = 0
    largest = 0
    loops = 0
    pos = lo
    while pos < hi:
        while pos < hi and data[pos] != 10 and is_space(data[pos]):
            pos += 1
        if pos >= hi or data[pos] == 10 or data[pos] == comment:
            while pos < hi and data[pos] != 10:
                pos += 1
            pos += 1
            continue
        a, pos = next_int(data, pos, hi, comment)
        a -= base
        if a < 0 or a >= limit:
            return False, top, bottom, heaviest, largest, loops
        b, pos = next_int(data, pos, hi, comment)
        b -= base
        if b < 0 or b >= limit:
            return False, top, bottom, heaviest, largest, loops
        w = 1
        if per_line == 3:
            w, pos = next_int(data, pos, hi, comment)
            if w < 0:
                return False, top, bottom, heaviest, largest, loops
        pos = end_of_line(data, pos, hi, comment)
        if pos < 0:
            return False, top, bottom, heaviest, largest, loops
        src[k] = a
        dst[k] = b
        volume[k] = w
        k += 1
        top = max(top, a, b)
        bottom = min(bottom, a, b)
        if w > largest:
            largest = w
        if a == b:
            loops += 1
        elif w > heaviest:
            heaviest = w
    return True, top, bottom, heaviest, largest, loops


@nb.njit(parallel=True, cache=True, nogil=True)
def parse_entries(data, comment, starts, offsets, per_line, base, limit, src, dst, volume):
    """Parse every chunk's entry lines (``per_line`` = 2: ``i j``, weight 1; 3:
    ``i j w``) into ``src``/``dst``/``volume`` from ``offsets[b]`` on, ids minus
    ``base``.

    Returns ``(ok, largest id, smallest id, largest non-loop volume, largest volume,
    self loops)``; ``ok`` is False when some line is not ``per_line`` plain integers
    with ids in ``base..limit - 1 + base`` (the other values are then meaningless).
    """
    nchunks = starts.size - 1
    ok = np.ones(nchunks, dtype=np.bool_)
    top = np.full(nchunks, -1, dtype=np.int64)
    bottom = np.full(nchunks, limit, dtype=np.int64)
    heaviest = np.zeros(nchunks, dtype=np.int64)
    largest = np.zeros(nchunks, dtype=np.int64)
    loops = np.zeros(nchunks, dtype=np.int64)
    for b in nb.prange(nchunks):
        r, t, s, h, g, lp = _parse_chunk(data, comment, starts[b], starts[b + 1], offsets[b],
                                         per_line, base, limit, src, dst, volume)
        ok[b] = r
        top[b] = t
        bottom[b] = s
        heaviest[b] = h
        largest[b] = g
        loops[b] = lp
    return ok.all(), top.max(), bottom.min(), heaviest.max(), largest.max(), loops.sum()


def build_symmetric(src: np.ndarray, dst: np.ndarray, volume: np.ndarray, n: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xadj, adjncy, adjwgt)`` of ``C + C^T`` for the directed entries ``src[e] ->
    dst[e]`` (int32, ids below ``n``) of volume ``volume[e] >= 0`` (int64): self
    loops and zero volumes dropped, rows sorted, duplicates summed.

    The caller has checked that the total (both directions) fits in int64. Degrees
    and the fill of both directions run in parallel over ranges of rows (each thread
    reads every entry and writes only its rows: no atomics), the merge in parallel
    over rows. Memory: 12 bytes per CSR slot (two per kept entry) and 16 per row,
    besides the entries.
    """
    kc = comm_cpu
    nparts = max(1, min(nb.get_num_threads(), n))
    bounds = np.linspace(0, n, nparts + 1).astype(np.int64)
    position = np.zeros(n, dtype=np.int64)
    kc.count_degrees(src, dst, volume, bounds, position)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(position, out=xadj[1:])
    nnz = int(xadj[-1])
    position[:] = xadj[:-1]
    if nparts > 1:  # rows split by their entries, for the fill
        bounds = np.searchsorted(xadj, np.linspace(0, nnz, nparts + 1)).astype(np.int64)
        bounds[0], bounds[-1] = 0, n
        bounds = np.maximum.accumulate(np.minimum(bounds, n))
    adjncy = np.empty(nnz, dtype=np.int32)
    adjwgt = np.empty(nnz, dtype=np.int64)
    kc.fill_both(src, dst, volume, bounds, position, adjncy, adjwgt)
    length = position  # reused: the merged length of every row
    kept = int(kc.merge_rows(xadj, adjncy, adjwgt, length))
    if kept != nnz:
        kc.compact_rows(xadj, adjncy, adjwgt, length)
        adjncy.resize(kept, refcheck=False)
        adjwgt.resize(kept, refcheck=False)
    return xadj, adjncy, adjwgt
