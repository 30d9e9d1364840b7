"""Numba passes of the direct METIS reader (``procmap.formats.metis``, issue 21).

A METIS file *is* the CSR matrix: kept line ``i`` after the header lists the
neighbours of vertex ``i``. The reader never builds COO arrays, nor any array
per line; after the header (found by :func:`procmap.kernels.io.text_cpu.first_line`)
the bytes are cut into line-aligned chunks (:func:`procmap.kernels.io.comm_cpu.chunk_starts`)
and read twice, both times in parallel over the chunks:

1. :func:`count_lines` counts each chunk's kept lines (comment lines skipped,
   blank lines kept, exactly as :func:`procmap.formats.tokenizer.tokenize` with
   ``keep_blank=True`` does) and tokens. Prefix sums give each chunk its first
   vertex and, from the token counts, its first CSR entry;
2. :func:`fill_rows` parses each chunk's lines straight into ``adjncy`` (int32,
   0-based), ``adjwgt`` (int64), ``vwgt`` and ``xadj`` (each line writes the end
   of its own row).

These passes only accept the plain case: tokens made of decimal digits alone (at
most 18, so no overflow is possible), neighbour ids in ``1..n``, the token count
of every line right for ``fmt``, only blank lines after the ``n``-th vertex line.
Anything else (signs, ``2.0``, ``1e3``, huge integers, garbage, an id out of
range, a line with a token too few) makes :func:`fill_rows` report failure; the
reader then re-reads the file with the general tokenizer path, which accepts what
the format allows and words every error with its file line. Self loops, zero
weights and unsorted rows are counted so the reader can fix (or hand over) only
when they occur.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..common_cpu import sort_row
from .text_cpu import is_space, next_int, scan_line


@nb.njit(cache=True, nogil=True)
def _count_chunk(data, comment, lo, hi):
    lines = 0
    tokens = 0
    pos = lo
    while pos < hi:
        ntok, pos = scan_line(data, pos, hi, comment)
        if ntok >= 0:
            lines += 1
            tokens += ntok
    return lines, tokens


@nb.njit(parallel=True, cache=True, nogil=True)
def count_lines(data, comment, starts):
    """Kept lines (blank ones included, comment lines not) and tokens of every chunk
    ``data[starts[b]:starts[b+1]]``: two arrays of ``starts.size - 1`` counts."""
    nchunks = starts.size - 1
    lines = np.zeros(nchunks, dtype=np.int64)
    tokens = np.zeros(nchunks, dtype=np.int64)
    for b in nb.prange(nchunks):
        lines[b], tokens[b] = _count_chunk(data, comment, starts[b], starts[b + 1])
    return lines, tokens


@nb.njit(cache=True, nogil=True)
def _fill_chunk(data, comment, lo, hi, k, e, stop, has_size, has_vwgt, has_ewgt, xadj, adjncy,
                adjwgt, vwgt):
    """Parse the kept lines of ``data[lo:hi]``, vertex ``k`` first, into entries
    ``e..stop-1``. Returns ``(regular, self loops, zero weights, unsorted rows)``."""
    n = xadj.size - 1
    loops = 0
    zeros = 0
    unsorted = 0
    pos = lo
    while pos < hi:
        while pos < hi and data[pos] != 10 and is_space(data[pos]):
            pos += 1
        if pos < hi and data[pos] == comment:
            while pos < hi and data[pos] != 10:
                pos += 1
            pos += 1
            continue
        if k >= n:  # only blank lines may follow the n-th vertex line
            if pos < hi and data[pos] != 10:
                return False, loops, zeros, unsorted
            pos += 1
            k += 1
            continue
        if has_size:
            value, pos = next_int(data, pos, hi, comment)
            if value < 0:
                return False, loops, zeros, unsorted
        if has_vwgt:
            value, pos = next_int(data, pos, hi, comment)
            if value < 0:
                return False, loops, zeros, unsorted
            vwgt[k] = value
        prev = -1
        sorted_row = True
        while True:
            while pos < hi and is_space(data[pos]):
                pos += 1
            if pos >= hi:
                break
            c = data[pos]
            if c == 10 or c == comment:  # the end of the line
                while pos < hi and data[pos] != 10:
                    pos += 1
                pos += 1
                break
            value, pos = next_int(data, pos, hi, comment)
            if value < 1 or value > n or e >= stop:
                return False, loops, zeros, unsorted
            v = value - 1
            adjncy[e] = v
            if v == k:
                loops += 1
            if v <= prev:
                sorted_row = False
            prev = v
            if has_ewgt:
                value, pos = next_int(data, pos, hi, comment)
                if value < 0:
                    return False, loops, zeros, unsorted
                if value == 0:
                    zeros += 1
                adjwgt[e] = value
            else:
                adjwgt[e] = 1
            e += 1
        if not sorted_row:
            unsorted += 1
        xadj[k + 1] = e
        k += 1
    return e == stop, loops, zeros, unsorted


@nb.njit(parallel=True, cache=True, nogil=True)
def fill_rows(data, comment, starts, first_vertex, first_entry, has_size, has_vwgt, has_ewgt,
              xadj, adjncy, adjwgt, vwgt):
    """Parse every chunk's vertex lines into the CSR arrays, in parallel.

    Chunk ``b`` starts at vertex ``first_vertex[b]`` and entry ``first_entry[b]``
    (prefix sums of :func:`count_lines`). Returns ``(regular, self loops, zero
    weights, unsorted rows)``; the counts are meaningful only when every line is
    regular (and then every ``xadj[1:]`` entry has been written).
    """
    nchunks = starts.size - 1
    ok = np.ones(nchunks, dtype=np.bool_)
    loops = np.zeros(nchunks, dtype=np.int64)
    zeros = np.zeros(nchunks, dtype=np.int64)
    unsorted = np.zeros(nchunks, dtype=np.int64)
    for b in nb.prange(nchunks):
        r, lp, z, us = _fill_chunk(data, comment, starts[b], starts[b + 1], first_vertex[b],
                                   first_entry[b], first_entry[b + 1], has_size, has_vwgt,
                                   has_ewgt, xadj, adjncy, adjwgt, vwgt)
        ok[b] = r
        loops[b] = lp
        zeros[b] = z
        unsorted[b] = us
    return ok.all(), loops.sum(), zeros.sum(), unsorted.sum()


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
