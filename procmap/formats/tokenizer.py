"""Vectorised tokenizer for numeric text files (``.comm``, METIS, dense CSV).

Large inputs are scanned by one Numba pass over the raw bytes instead of line by
line in Python. The result is a flat ``float64`` token array plus, for every kept
line, where its tokens start and its 1-based line number in the file, so readers
can name the offending line in their errors.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from procmap.errors import FormatError

# Error codes returned by the scanner (0 = ok).
_BAD_TOKEN = 1
_MESSAGES = {_BAD_TOKEN: "not a number"}

# Clinger's fast path: a decimal ``mant * 10**exp10`` converts with one correctly
# rounded float operation when ``mant`` and ``10**|exp10|`` are exact doubles.
# Any other token (17-digit repr output, huge exponents) is re-read by Python's
# float(), so that every written float reads back bit for bit.
_EXACT_MANT = 2.0 ** 53
_EXACT_POW10 = 22



@nb.njit(cache=True, nogil=True)
def _is_space(c, sep):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12 or (sep != 0 and c == sep)


@nb.njit(cache=True, nogil=True)
def _scan(data, comment, sep, keep_blank, tokens, line_start, line_no, slow, fill):
    """Count (``fill=False``) or fill token and line arrays.

    A line whose first non-blank byte is ``comment`` is skipped; text after
    ``comment`` elsewhere on a line is ignored. Blank lines are kept only when
    ``keep_blank`` (METIS: an isolated vertex). Tokens the fast path cannot
    convert exactly are listed in ``slow`` as ``(token index, start, end)`` rows.
    Returns ``(ntokens, nlines, nslow, error_code, error_line, error_pos)``.
    """
    n = data.size
    pos = 0
    lineno = 0
    ntok = 0
    nlines = 0
    nslow = 0
    while pos < n:
        lineno += 1
        # skip leading blanks
        while pos < n and data[pos] != 10 and _is_space(data[pos], sep):
            pos += 1
        if pos < n and data[pos] == comment:
            while pos < n and data[pos] != 10:
                pos += 1
            pos += 1
            continue
        first_tok = ntok
        while pos < n and data[pos] != 10:
            c = data[pos]
            if _is_space(c, sep):
                pos += 1
                continue
            if c == comment:
                while pos < n and data[pos] != 10:
                    pos += 1
                break
            # parse one number: [sign] digits [. digits] [(e|E) [sign] digits]
            start = pos
            neg = False
            if c == 45 or c == 43:
                neg = c == 45
                pos += 1
            mant = 0.0
            ndig = 0
            exp10 = 0
            while pos < n and 48 <= data[pos] <= 57:
                mant = mant * 10.0 + (data[pos] - 48)
                ndig += 1
                pos += 1
            if pos < n and data[pos] == 46:
                pos += 1
                while pos < n and 48 <= data[pos] <= 57:
                    mant = mant * 10.0 + (data[pos] - 48)
                    ndig += 1
                    exp10 -= 1
                    pos += 1
            if ndig == 0:
                return ntok, nlines, nslow, 1, lineno, start
            if pos < n and (data[pos] == 101 or data[pos] == 69):
                pos += 1
                eneg = False
                if pos < n and (data[pos] == 45 or data[pos] == 43):
                    eneg = data[pos] == 45
                    pos += 1
                edig = 0
                e = 0
                while pos < n and 48 <= data[pos] <= 57:
                    if e < 100000:
                        e = e * 10 + (data[pos] - 48)
                    edig += 1
                    pos += 1
                if edig == 0:
                    return ntok, nlines, nslow, 1, lineno, start
                exp10 += -e if eneg else e
            # the token must end at a separator, a comment or the end of line
            if pos < n and not (data[pos] == 10 or _is_space(data[pos], sep) or data[pos] == comment):
                return ntok, nlines, nslow, 1, lineno, start
            exact = mant < _EXACT_MANT and -_EXACT_POW10 <= exp10 <= _EXACT_POW10
            if fill:
                if exact:
                    value = mant
                    if exp10 < 0:
                        value = mant / 10.0 ** (-exp10)  # one correctly rounded division
                    elif exp10 > 0:
                        value = mant * 10.0 ** exp10
                    tokens[ntok] = -value if neg else value
                else:
                    tokens[ntok] = 0.0  # filled in by tokenize() from the text
                    slow[nslow, 0] = ntok
                    slow[nslow, 1] = start
                    slow[nslow, 2] = pos
            if not exact:
                nslow += 1
            ntok += 1
        if ntok > first_tok or keep_blank:
            if fill:
                line_start[nlines] = first_tok
                line_no[nlines] = lineno
            nlines += 1
        pos += 1
    if fill:
        line_start[nlines] = ntok
    return ntok, nlines, nslow, 0, 0, 0


class Tokens:
    """Numeric tokens of a text file, grouped by (kept) line.

    Attributes
    ----------
    values : float64 array of every token in file order.
    line_start : int64 array, ``len = nlines + 1``; tokens of kept line ``i`` are
        ``values[line_start[i]:line_start[i+1]]``.
    line_no : int64 array: the 1-based file line of each kept line.
    """

    def __init__(self, values, line_start, line_no):
        self.values = values
        self.line_start = line_start
        self.line_no = line_no

    @property
    def nlines(self) -> int:
        return int(self.line_no.size)

    def counts(self) -> np.ndarray:
        return np.diff(self.line_start)

    def line(self, i: int) -> np.ndarray:
        return self.values[self.line_start[i]:self.line_start[i + 1]]


def tokenize(data: bytes, path=None, *, comment: str = "#", sep: str | None = None,
             keep_blank: bool = False) -> Tokens:
    """Split ``data`` into numeric tokens per line.

    Raises :class:`FormatError` naming ``path`` and the line of the first token that
    is not a number (this includes ``nan`` and ``inf`` spelled out).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    c = ord(comment)
    s = 0 if sep is None else ord(sep)
    dummy_f = np.empty(0, dtype=np.float64)
    dummy_i = np.empty(0, dtype=np.int64)
    dummy_slow = np.empty((0, 3), dtype=np.int64)
    ntok, nlines, nslow, err, eline, epos = _scan(buf, c, s, keep_blank, dummy_f, dummy_i, dummy_i,
                                                  dummy_slow, False)
    if err:
        end = epos
        while end < len(data) and end - epos < 20 and data[end:end + 1] not in (b"\n", b" ", b"\t", b","):
            end += 1
        token = data[epos:end].decode("utf-8", "replace")
        raise FormatError(f"{token!r} is {_MESSAGES[err]}", path, int(eline))
    values = np.empty(ntok, dtype=np.float64)
    line_start = np.empty(nlines + 1, dtype=np.int64)
    line_no = np.empty(nlines, dtype=np.int64)
    slow = np.empty((nslow, 3), dtype=np.int64)
    _scan(buf, c, s, keep_blank, values, line_start, line_no, slow, True)
    for index, start, end in slow.tolist():
        values[index] = float(data[start:end])
    return Tokens(values, line_start, line_no)
