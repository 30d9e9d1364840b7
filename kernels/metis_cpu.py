"""Numba passes of the direct METIS reader (``procmap.formats.metis``, issue 21).

A METIS file *is* the CSR matrix: kept line ``i`` after the header lists the
neighbours of vertex ``i``. The reader therefore never builds COO arrays:

1. :func:`scan_lines` (serial, one pass over the bytes) finds every kept line
   (comment lines skipped, blank lines kept, exactly as
   :func:`procmap.formats.tokenizer.tokenize` with ``keep_blank=True`` does),
   its first byte, its 1-based file line and its number of tokens;
2. the token counts give the degrees, hence ``xadj``;
3. :func:`fill_rows` (parallel over blocks of rows) parses each line's integers
   straight into ``adjncy`` (int32, 0-based), ``adjwgt`` (int64) and ``vwgt``.

These passes only accept the plain case: tokens made of decimal digits alone (at
most 18, so no overflow is possible), neighbour ids in ``1..n``. Anything else
(signs, ``2.0``, ``1e3``, huge integers, garbage, an id out of range) is reported
as the first *irregular* row; the reader then re-reads the file with the general
tokenizer path, which accepts what the format allows and words every error with
its file line. Self loops, zero weights and unsorted rows are counted so the
reader can fix (or hand over) only when they occur.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .common_cpu import sort_row
from .text_cpu import is_space, next_int

#: Rows per block of :func:`fill_rows` (the unit of parallel work).
BLOCK_ROWS = 4096


@nb.njit(cache=True, nogil=True)
def count_newlines(data):
    """Number of ``\\n`` bytes (an upper bound, minus one, of the line count)."""
    count = 0
    for i in range(data.size):
        if data[i] == 10:
            count += 1
    return count


@nb.njit(cache=True, nogil=True)
def scan_lines(data, comment, line_byte, line_tokens, line_no):
    """Record every kept line: first byte, number of tokens, 1-based file line.

    A line whose first non-blank byte is ``comment`` is skipped; ``comment``
    elsewhere ends the line's tokens; blank lines are kept. A token is a maximal
    run of bytes that are neither blank, newline nor ``comment`` (its syntax is
    checked by :func:`fill_rows`). Returns the number of kept lines.
    """
    n = data.size
    pos = 0
    lineno = 0
    nlines = 0
    while pos < n:
        lineno += 1
        while pos < n and data[pos] != 10 and is_space(data[pos]):
            pos += 1
        if pos < n and data[pos] == comment:
            while pos < n and data[pos] != 10:
                pos += 1
            pos += 1
            continue
        start = pos
        ntok = 0
        while pos < n:
            c = data[pos]
            if c == 10:
                break
            if is_space(c):
                pos += 1
                continue
            if c == comment:
                while pos < n and data[pos] != 10:
                    pos += 1
                break
            ntok += 1
            pos += 1
            while pos < n:
                c = data[pos]
                if c == 10 or c == comment or is_space(c):
                    break
                pos += 1
        line_byte[nlines] = start
        line_tokens[nlines] = ntok
        line_no[nlines] = lineno
        nlines += 1
        pos += 1
    return nlines


@nb.njit(cache=True, nogil=True)
def _fill_block(data, comment, line_byte, xadj, lo, hi, has_size, has_vwgt, has_ewgt,
                adjncy, adjwgt, vwgt):
    """Parse rows ``lo..hi-1``; returns ``(first irregular row or -1, self loops,
    zero weights, unsorted rows)``."""
    n = xadj.size - 1
    loops = 0
    zeros = 0
    unsorted = 0
    for u in range(lo, hi):
        pos = line_byte[u]
        if has_size:
            value, pos = next_int(data, pos, data.size, comment)
            if value < 0:
                return u, loops, zeros, unsorted
        if has_vwgt:
            value, pos = next_int(data, pos, data.size, comment)
            if value < 0:
                return u, loops, zeros, unsorted
            vwgt[u] = value
        prev = -1
        sorted_row = True
        for e in range(xadj[u], xadj[u + 1]):
            value, pos = next_int(data, pos, data.size, comment)
            if value < 1 or value > n:
                return u, loops, zeros, unsorted
            v = value - 1
            adjncy[e] = v
            if v == u:
                loops += 1
            if v <= prev:
                sorted_row = False
            prev = v
            if has_ewgt:
                value, pos = next_int(data, pos, data.size, comment)
                if value < 0:
                    return u, loops, zeros, unsorted
                if value == 0:
                    zeros += 1
                adjwgt[e] = value
            else:
                adjwgt[e] = 1
        if not sorted_row:
            unsorted += 1
    return -1, loops, zeros, unsorted


@nb.njit(parallel=True, cache=True, nogil=True)
def fill_rows(data, comment, line_byte, xadj, has_size, has_vwgt, has_ewgt, adjncy, adjwgt,
              vwgt):
    """Parse every vertex line into the CSR arrays, in parallel blocks of rows.

    ``line_byte[u]`` is the first byte of vertex ``u``'s line; ``xadj`` comes from
    the token counts, so each row's output range is known. Returns ``(first
    irregular row or -1, self loops, zero weights, unsorted rows)``; the counts
    cover every row only when no row is irregular.
    """
    n = xadj.size - 1
    blocks = (n + BLOCK_ROWS - 1) // BLOCK_ROWS
    bad = np.full(blocks, -1, dtype=np.int64)
    loops = np.zeros(blocks, dtype=np.int64)
    zeros = np.zeros(blocks, dtype=np.int64)
    unsorted = np.zeros(blocks, dtype=np.int64)
    for b in nb.prange(blocks):
        lo = b * BLOCK_ROWS
        hi = min(lo + BLOCK_ROWS, n)
        r, lp, z, us = _fill_block(data, comment, line_byte, xadj, lo, hi, has_size, has_vwgt,
                                   has_ewgt, adjncy, adjwgt, vwgt)
        bad[b] = r
        loops[b] = lp
        zeros[b] = z
        unsorted[b] = us
    for b in range(blocks):
        if bad[b] >= 0:
            return bad[b], 0, 0, 0
    return -1, loops.sum(), zeros.sum(), unsorted.sum()


@nb.njit(cache=True, nogil=True)
def drop_self_loops(xadj, adjncy, adjwgt):
    """Remove the entries ``u -> u`` in place (serial compaction); ``xadj`` is
    rewritten. Returns the new number of entries."""
    n = xadj.size - 1
    out = 0
    begin = xadj[0]
    for u in range(n):
        end = xadj[u + 1]
        for e in range(begin, end):
            if adjncy[e] != u:
                adjncy[out] = adjncy[e]
                adjwgt[out] = adjwgt[e]
                out += 1
        begin = end
        xadj[u + 1] = out
    return out


@nb.njit(parallel=True, cache=True, nogil=True)
def sort_rows(xadj, adjncy, adjwgt):
    """Sort every row by neighbour id, weights alongside (rows already sorted are
    left as they are). Duplicates stay; the validator reports them."""
    n = xadj.size - 1
    for u in nb.prange(n):
        lo = xadj[u]
        hi = xadj[u + 1]
        ordered = True
        for e in range(lo + 1, hi):
            if adjncy[e] < adjncy[e - 1]:
                ordered = False
                break
        if ordered:
            continue
        sort_row(adjncy, adjwgt, lo, hi)
