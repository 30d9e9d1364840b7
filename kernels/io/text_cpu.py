"""Byte-level primitives of the fast text readers (``metis_cpu``, and ``comm_cpu`` for
``.comm`` and MatrixMarket).

The readers parse plain decimal integers straight from the file's bytes; these
helpers are written once and inlined into their Numba passes.
"""
from __future__ import annotations

import numba as nb

#: Tokens with more digits go to the general path (18 digits always fit int64).
MAX_DIGITS = 18


@nb.njit(cache=True, nogil=True, inline="always")
def is_space(c):
    """Blank, tab, carriage return, vertical tab or form feed (not newline)."""
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@nb.njit(cache=True, nogil=True, inline="always")
def next_int(data, pos, end, comment):
    """The next plain integer of ``data[pos:end]`` (blanks skipped first):
    ``(value, next pos)``. ``value`` is ``-1`` when the token is not 1..MAX_DIGITS
    decimal digits ended by a blank, a newline, ``comment`` or ``end``."""
    while pos < end and is_space(data[pos]):
        pos += 1
    value = 0
    ndig = 0
    while pos < end:
        c = data[pos]
        if c < 48 or c > 57:
            break
        value = value * 10 + (c - 48)
        ndig += 1
        pos += 1
    if ndig == 0 or ndig > MAX_DIGITS:
        return -1, pos
    if pos < end:
        c = data[pos]
        if not (c == 10 or c == comment or is_space(c)):
            return -1, pos
    return value, pos


@nb.njit(cache=True, nogil=True, inline="always")
def scan_line(data, pos, end, comment):
    """The line that starts at ``pos`` (it ends at a newline or ``end``): ``(tokens,
    start of the next line)``, ``tokens`` being ``-1`` for a comment line.

    The lines are those of :func:`procmap.formats.tokenizer.tokenize`: a line whose
    first non-blank byte is ``comment`` is a comment line; ``comment`` elsewhere
    ends the line's tokens. A token is a maximal run of bytes that are neither
    blank, newline nor ``comment`` (its syntax is the caller's business).
    """
    while pos < end and data[pos] != 10 and is_space(data[pos]):
        pos += 1
    if pos < end and data[pos] == comment:
        while pos < end and data[pos] != 10:
            pos += 1
        return -1, pos + 1
    ntok = 0
    while pos < end:
        c = data[pos]
        if c == 10:
            break
        if is_space(c):
            pos += 1
            continue
        if c == comment:
            while pos < end and data[pos] != 10:
                pos += 1
            break
        ntok += 1
        pos += 1
        while pos < end:
            c = data[pos]
            if c == 10 or c == comment or is_space(c):
                break
            pos += 1
    return ntok, pos + 1


@nb.njit(cache=True, nogil=True)
def first_line(data, comment):
    """The first line that holds a token (a header or size line), skipping comment
    and blank lines: ``(first byte, tokens, start of the next line)``; ``(-1, 0,
    data.size)`` when there is none."""
    pos = 0
    while pos < data.size:
        start = pos
        ntok, pos = scan_line(data, pos, data.size, comment)
        if ntok > 0:
            return start, ntok, pos
    return -1, 0, data.size


@nb.njit(cache=True, nogil=True, inline="always")
def end_of_line(data, pos, end, comment):
    """Skip blanks from ``pos``: the start of the next line when only a newline, a
    trailing ``comment`` or ``end`` follows, else ``-1`` (another token follows)."""
    while pos < end and is_space(data[pos]):
        pos += 1
    if pos < end and data[pos] != 10:
        if data[pos] != comment:
            return -1
        while pos < end and data[pos] != 10:
            pos += 1
    return pos + 1
