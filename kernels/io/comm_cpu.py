"""Numba passes of the direct edge-list readers: ``.comm`` (``procmap.formats.comm``)
and MatrixMarket ``coordinate`` files (``procmap.formats.matrixmarket``).

Both formats list directed entries ``src dst [volume]`` that the graph holds as
``C + C^T`` (a ``symmetric`` MatrixMarket file lists one triangle ``L``, and
``L + L^T`` is the same sum). The direct readers never build COO matrices:

1. :func:`chunk_starts` cuts the bytes into line-aligned chunks;
2. :func:`count_entries` (parallel over chunks) counts the entry lines of each
   chunk (comment and blank lines skipped exactly as
   :func:`procmap.formats.tokenizer.tokenize` skips them), which gives each chunk
   its output offset;
3. :func:`parse_entries` (parallel over chunks) parses every entry line (``.comm``:
   3 tokens, 0-based; MatrixMarket: 2 or 3 tokens, 1-based) into ``src``/``dst``
   (int32) and ``volume`` (int64), with the statistics the readers check (largest
   and smallest id, largest volume, self loops);
4. :func:`build_symmetric`: :func:`count_degrees` and :func:`fill_both` (parallel
   over ranges of rows: each thread reads every entry and writes only its own rows,
   so no atomics) place both directions of every kept entry (no self loop, volume
   > 0) into CSR rows; :func:`merge_rows` (parallel over rows) sorts each row by
   neighbour and sums duplicates; :func:`compact_rows` closes the gaps they leave.

Only the plain case is accepted: every entry line holds exactly ``per_line`` tokens
of 1 to 18 decimal digits (no sign, fraction or exponent: no overflow possible),
ids in range. Anything else makes :func:`parse_entries` report failure, and the
reader re-reads the file with its general tokenizer path, which accepts float
volumes and words every error with its line.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..common_cpu import sort_row
from .text_cpu import end_of_line, is_space, next_int

#: Rows per block of :func:`merge_rows`.
BLOCK_ROWS = 2048
#: Integers up to here are exact in the tokenizer's float64 values.
EXACT_INT = 2.0**53
#: Problems :func:`split_entries` reports (0: none).
BAD_SRC, BAD_DST, BAD_VOLUME = 1, 2, 3


@nb.njit(cache=True, nogil=True)
def chunk_starts(data, nchunks):
    """``nchunks + 1`` byte offsets; chunk ``b`` is ``data[s[b]:s[b+1]]``, every
    chunk starting at the beginning of a line (some chunks may be empty)."""
    size = data.size
    starts = np.empty(nchunks + 1, dtype=np.int64)
    starts[0] = 0
    for b in range(1, nchunks):
        s = max(b * (size // nchunks), starts[b - 1])
        while s < size and s > 0 and data[s - 1] != 10:
            s += 1
        starts[b] = s
    starts[nchunks] = size
    return starts


@nb.njit(cache=True, nogil=True)
def _count_chunk(data, comment, lo, hi):
    count = 0
    pos = lo
    while pos < hi:
        while pos < hi and data[pos] != 10 and is_space(data[pos]):
            pos += 1
        if pos < hi and data[pos] != 10 and data[pos] != comment:
            count += 1
        while pos < hi and data[pos] != 10:
            pos += 1
        pos += 1
    return count


@nb.njit(parallel=True, cache=True, nogil=True)
def count_entries(data, comment, starts):
    """Entry lines (neither blank nor comment) of every chunk."""
    nchunks = starts.size - 1
    counts = np.zeros(nchunks, dtype=np.int64)
    for b in nb.prange(nchunks):
        counts[b] = _count_chunk(data, comment, starts[b], starts[b + 1])
    return counts


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


@nb.njit(parallel=True, cache=True, nogil=True)
def count_degrees(src, dst, volume, bounds, degree):
    """``degree[u]`` += entries (both directions, no self loop, volume > 0) at row ``u``.

    Thread ``p`` owns rows ``bounds[p]..bounds[p+1]-1`` and reads every entry.
    """
    nparts = bounds.size - 1
    count = src.size
    for p in nb.prange(nparts):
        lo = bounds[p]
        hi = bounds[p + 1]
        for e in range(count):
            u = src[e]
            v = dst[e]
            if u == v or volume[e] == 0:
                continue
            if lo <= u and u < hi:
                degree[u] += 1
            if lo <= v and v < hi:
                degree[v] += 1


@nb.njit(parallel=True, cache=True, nogil=True)
def fill_both(src, dst, volume, bounds, position, adjncy, adjwgt):
    """Place both directions of every kept entry; ``position[u]`` starts at
    ``xadj[u]`` and ends at ``xadj[u+1]``. Rows are split as in :func:`count_degrees`."""
    nparts = bounds.size - 1
    count = src.size
    for p in nb.prange(nparts):
        lo = bounds[p]
        hi = bounds[p + 1]
        for e in range(count):
            u = src[e]
            v = dst[e]
            w = volume[e]
            if u == v or w == 0:
                continue
            if lo <= u and u < hi:
                i = position[u]
                adjncy[i] = v
                adjwgt[i] = w
                position[u] = i + 1
            if lo <= v and v < hi:
                i = position[v]
                adjncy[i] = u
                adjwgt[i] = w
                position[v] = i + 1


@nb.njit(cache=True, nogil=True)
def _merge_row(lo, hi, adjncy, adjwgt):
    """Sort ``lo..hi-1`` by neighbour and sum duplicates; returns the new length."""
    strict = True
    for e in range(lo + 1, hi):
        if adjncy[e] <= adjncy[e - 1]:
            strict = False
            break
    if strict:
        return hi - lo
    sort_row(adjncy, adjwgt, lo, hi)
    out = lo
    for e in range(lo + 1, hi):
        if adjncy[e] == adjncy[out]:
            adjwgt[out] += adjwgt[e]
        else:
            out += 1
            adjncy[out] = adjncy[e]
            adjwgt[out] = adjwgt[e]
    return out + 1 - lo


@nb.njit(parallel=True, cache=True, nogil=True)
def merge_rows(xadj, adjncy, adjwgt, length):
    """Sort every row and merge duplicate neighbours (weights summed): row ``u``
    then holds ``length[u]`` entries from ``xadj[u]`` on. Returns the total."""
    n = xadj.size - 1
    blocks = (n + BLOCK_ROWS - 1) // BLOCK_ROWS
    kept = np.zeros(blocks, dtype=np.int64)
    for b in nb.prange(blocks):
        lo = b * BLOCK_ROWS
        hi = min(lo + BLOCK_ROWS, n)
        total = 0
        for u in range(lo, hi):
            c = _merge_row(xadj[u], xadj[u + 1], adjncy, adjwgt)
            length[u] = c
            total += c
        kept[b] = total
    return kept.sum()


@nb.njit(cache=True, nogil=True)
def compact_rows(xadj, adjncy, adjwgt, length):
    """Move row ``u`` (its first ``length[u]`` entries) down so rows are contiguous;
    ``xadj`` is rewritten. Serial: the target never lies after the source."""
    n = xadj.size - 1
    out = 0
    for u in range(n):
        lo = xadj[u]
        c = length[u]
        if lo != out:
            for k in range(c):
                adjncy[out + k] = adjncy[lo + k]
                adjwgt[out + k] = adjwgt[lo + k]
        xadj[u] = out
        out += c
    xadj[n] = out
    return out


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
    nparts = max(1, min(nb.get_num_threads(), n))
    bounds = np.linspace(0, n, nparts + 1).astype(np.int64)
    position = np.zeros(n, dtype=np.int64)
    count_degrees(src, dst, volume, bounds, position)
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
    fill_both(src, dst, volume, bounds, position, adjncy, adjwgt)
    length = position  # reused: the merged length of every row
    kept = int(merge_rows(xadj, adjncy, adjwgt, length))
    if kept != nnz:
        compact_rows(xadj, adjncy, adjwgt, length)
        adjncy.resize(kept, refcheck=False)
        adjwgt.resize(kept, refcheck=False)
    return xadj, adjncy, adjwgt


@nb.njit(cache=True, nogil=True)
def all_ranks_from_one(src, dst, top):
    """True when the entries mention every rank ``1..top`` (the caller knows that
    none mentions 0)."""
    seen = np.zeros(top + 1, dtype=np.bool_)
    for e in range(src.size):
        seen[src[e]] = True
        seen[dst[e]] = True
    for r in range(1, top + 1):
        if not seen[r]:
            return False
    return True


# ------------------------------------------------------- the general path's pass
@nb.njit(cache=True, nogil=True)
def split_entries(values, integer_text, limit):
    """Split flat ``src dst volume`` triples into columns and validate them in one pass.

    Returns ``(src, dst, int volume, float volume, problem, entry, integral)``:
    ``problem`` is 0 or one of ``BAD_*`` for the first bad ``entry``; the int64
    volume column is valid when ``integral`` (every volume a whole number that
    float64 holds exactly, or one written as an integer), which spares CommGraph a
    conversion pass. Volumes beyond 2^53 are left 0 there: the caller fills in
    their exact values from the tokenizer.
    """
    count = values.size // 3
    src = np.empty(count, dtype=np.int64)
    dst = np.empty(count, dtype=np.int64)
    int_volume = np.empty(count, dtype=np.int64)
    float_volume = np.empty(count, dtype=np.float64)
    integral = True
    for e in range(count):
        a = values[3 * e]
        b = values[3 * e + 1]
        w = values[3 * e + 2]
        # 'not (x >= 0)' is also true for NaN
        if not (a >= 0) or a >= limit or a != np.floor(a):
            return src, dst, int_volume, float_volume, BAD_SRC, e, integral
        if not (b >= 0) or b >= limit or b != np.floor(b):
            return src, dst, int_volume, float_volume, BAD_DST, e, integral
        if not (w >= 0) or w == np.inf:
            return src, dst, int_volume, float_volume, BAD_VOLUME, e, integral
        src[e] = np.int64(a)
        dst[e] = np.int64(b)
        float_volume[e] = w
        if integral:
            if w == np.floor(w) and w < EXACT_INT:
                int_volume[e] = np.int64(w)
            elif integer_text[3 * e + 2]:
                int_volume[e] = 0  # beyond 2^53: exact value from Tokens.big_value
            else:
                integral = False
    return src, dst, int_volume, float_volume, 0, 0, integral
