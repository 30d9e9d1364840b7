"""Byte-level primitives of the fast text readers (``metis_cpu``, ``comm_cpu``).

Both readers parse plain decimal integers straight from the file's bytes; these
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
