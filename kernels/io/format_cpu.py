"""Numba passes that print integers as text, for the text writers (``procmap.formats``).

``np.savetxt`` formats number by number in Python; these passes size the output
first (:func:`int_digits` per value) and then write the digits straight into one
byte array, an order of magnitude faster on large graphs.
"""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def int_digits(value):
    """Characters needed to print ``value`` in decimal (sign included)."""
    width = 1
    if value < 0:
        width = 2
        value = -value
    while value >= 10:
        value //= 10
        width += 1
    return width


@nb.njit(cache=True, nogil=True)
def format_int_lines(values, line_start, sep):
    """Bytes of lines ``values[line_start[i]:line_start[i+1]]`` joined by ``sep``, one per line."""
    nlines = line_start.size - 1
    size = 0
    for i in range(nlines):
        a = line_start[i]
        b = line_start[i + 1]
        for k in range(a, b):
            size += int_digits(values[k])
        if b > a:
            size += b - a - 1
        size += 1
    out = np.empty(size, dtype=np.uint8)
    pos = 0
    for i in range(nlines):
        a = line_start[i]
        b = line_start[i + 1]
        for k in range(a, b):
            if k > a:
                out[pos] = sep
                pos += 1
            value = values[k]
            width = int_digits(value)
            if value < 0:
                out[pos] = 45  # '-'
                value = -value
            end = pos + width
            j = end - 1
            while True:  # digits right to left
                out[j] = 48 + value % 10
                value //= 10
                j -= 1
                if value == 0:
                    break
            pos = end
        out[pos] = 10
        pos += 1
    return out
