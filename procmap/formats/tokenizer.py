"""Vectorised tokenizer for numeric text files (``.comm``, METIS, dense CSV).

Large inputs are scanned by one Numba pass over the raw bytes instead of line by
line in Python. The result is a flat ``float64`` token array plus, for every kept
line, where its tokens start and its 1-based line number in the file, so readers
can name the offending line in their errors.

Numbers stay exact: a token written as an integer (digits with an optional sign)
whose value float64 cannot hold exactly (beyond 2^53) is also kept as an exact
int64 (:meth:`Tokens.integers`), and one beyond the int64 range is an error, as
is a float token beyond the float64 range (``1e400``) and ``nan``/``inf``.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from procmap.errors import FormatError
from procmap.limits import INT64_MAX
from procmap.textfmt import show_number  # noqa: F401  (re-exported for the readers)

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
def _scan(data, comment, sep, keep_blank, tokens, integer_text, line_start, line_no, slow,
          fill):
    """Count (``fill=False``) or fill token and line arrays.

    A line whose first non-blank byte is ``comment`` is skipped; text after
    ``comment`` elsewhere on a line is ignored. Blank lines are kept only when
    ``keep_blank`` (METIS: an isolated vertex). ``integer_text[t]`` says whether
    token ``t`` is written as an integer (no fraction, no exponent). Tokens the
    fast path cannot convert exactly are listed in ``slow`` as
    ``(token index, start, end)`` rows.
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
            integral = True
            while pos < n and 48 <= data[pos] <= 57:
                mant = mant * 10.0 + (data[pos] - 48)
                ndig += 1
                pos += 1
            if pos < n and data[pos] == 46:
                integral = False
                pos += 1
                while pos < n and 48 <= data[pos] <= 57:
                    mant = mant * 10.0 + (data[pos] - 48)
                    ndig += 1
                    exp10 -= 1
                    pos += 1
            if ndig == 0:
                return ntok, nlines, nslow, 1, lineno, start
            if pos < n and (data[pos] == 101 or data[pos] == 69):
                integral = False
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
                integer_text[ntok] = integral
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
    values : float64 array of every token in file order (integers beyond 2^53
        rounded; :meth:`integers` gives them exactly).
    integer_text : bool array: token written as an integer (no ``.``, no exponent).
    line_start : int64 array, ``len = nlines + 1``; tokens of kept line ``i`` are
        ``values[line_start[i]:line_start[i+1]]``.
    line_no : int64 array: the 1-based file line of each kept line.
    big_index, big_value : sorted token indices of the integer tokens that float64
        does not hold exactly, and their exact int64 values (usually empty).
    """

    def __init__(self, values, line_start, line_no, integer_text=None, big_index=None,
                 big_value=None, source=None):
        self.values = values
        self.line_start = line_start
        self.line_no = line_no
        self.integer_text = (np.ones(values.size, dtype=np.bool_) if integer_text is None
                             else integer_text)
        self.big_index = np.empty(0, dtype=np.int64) if big_index is None else big_index
        self.big_value = np.empty(0, dtype=np.int64) if big_value is None else big_value
        self._source = source  # (data, comment, sep) for token_text()

    @property
    def nlines(self) -> int:
        return int(self.line_no.size)

    def counts(self) -> np.ndarray:
        return np.diff(self.line_start)

    def line(self, i: int) -> np.ndarray:
        return self.values[self.line_start[i]:self.line_start[i + 1]]

    def positions(self, i: int) -> np.ndarray:
        """Token indices of kept line ``i``."""
        return np.arange(self.line_start[i], self.line_start[i + 1], dtype=np.int64)

    def line_of(self, index: int) -> int:
        """The 1-based file line of token ``index``."""
        return int(self.line_no[np.searchsorted(self.line_start, index, side="right") - 1])

    def _big(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For token indices ``index``: where each would sit in ``big_index``, and which are big."""
        where = np.minimum(np.searchsorted(self.big_index, index), self.big_index.size - 1)
        return where, self.big_index[where] == index

    def bad_integer(self, index: np.ndarray, low: int, high: int, *,
                    written: bool = False) -> int:
        """Position in ``index`` of the first token that is not an integer in
        ``[low, high]`` (exactly, also beyond 2^53), or -1.

        ``written=True`` also requires the token to be written as an integer
        (``1e3`` and ``5.0`` are then bad), as MatrixMarket ``integer`` fields do.
        """
        index = np.asarray(index, dtype=np.int64)
        values = self.values[index]
        upper = float(high)
        # float(high) may round up (2^63 - 1 -> 2^63): then the bound itself is out
        below = values < upper if upper > high else values <= upper
        ok = (values >= low) & below & (values == np.floor(values))
        if written:
            ok &= self.integer_text[index]
        if self.big_index.size and index.size:
            where, big = self._big(index)
            exact = self.big_value[where[big]]
            ok[big] = (exact >= low) & (exact <= high)
        bad = np.flatnonzero(~ok)
        return int(bad[0]) if bad.size else -1

    def integers(self, index: np.ndarray) -> np.ndarray:
        """Exact int64 values of the tokens at ``index``, which :meth:`bad_integer`
        has accepted (integers in the int64 range)."""
        index = np.asarray(index, dtype=np.int64)
        values = self.values[index]
        if not self.big_index.size or not index.size:
            return values.astype(np.int64)
        where, big = self._big(index)
        values[big] = 0  # rounded, possibly to 2^63: never cast
        out = values.astype(np.int64)
        out[big] = self.big_value[where[big]]
        return out

    def token_text(self, index: int) -> str:
        """The text of token ``index`` as written in the file (for error messages)."""
        if self._source is None:
            return show_number(self.values[index])
        data, comment, sep = self._source
        line = self.line_of(index)
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        begin = 0 if line == 1 else int(newlines[line - 2]) + 1
        end = int(newlines[line - 1]) if line - 1 < newlines.size else len(data)
        text = data[begin:end].split(comment.encode(), 1)[0]
        if sep is not None:
            text = text.replace(sep.encode(), b" ")
        fields = text.split()
        k = int(index - self.line_start[np.searchsorted(self.line_start, index, side="right") - 1])
        if k >= len(fields):
            return show_number(self.values[index])
        return fields[k].decode("utf-8", "replace")


def _exact_integer(text: bytes, path, line: int) -> int:
    """The exact value of an integer token; FormatError beyond the int64 range."""
    digits = text.lstrip(b"+-").lstrip(b"0")
    # more than 19 digits exceeds int64 in any case (and keeps int() away from huge strings)
    value = int(text) if len(digits) <= 19 else None
    if value is None or abs(value) > INT64_MAX:
        shown = text.decode() if len(text) <= 30 else text[:27].decode() + "..."
        raise FormatError(f"integer {shown} exceeds the int64 range (at most {INT64_MAX:,})",
                          path, line)
    return value


def tokenize(data: bytes, path=None, *, comment: str = "#", sep: str | None = None,
             keep_blank: bool = False) -> Tokens:
    """Split ``data`` into numeric tokens per line.

    Raises :class:`FormatError` naming ``path`` and the line of the first token that
    is not a number (this includes ``nan`` and ``inf`` spelled out), of an integer
    token beyond the int64 range and of a float token beyond the float64 range.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    c = ord(comment)
    s = 0 if sep is None else ord(sep)
    dummy_f = np.empty(0, dtype=np.float64)
    dummy_b = np.empty(0, dtype=np.bool_)
    dummy_i = np.empty(0, dtype=np.int64)
    dummy_slow = np.empty((0, 3), dtype=np.int64)
    ntok, nlines, nslow, err, eline, epos = _scan(buf, c, s, keep_blank, dummy_f, dummy_b, dummy_i,
                                                  dummy_i, dummy_slow, False)
    if err:
        end = epos
        while end < len(data) and end - epos < 20 and data[end:end + 1] not in (b"\n", b" ", b"\t", b","):
            end += 1
        token = data[epos:end].decode("utf-8", "replace")
        raise FormatError(_bad_token(token, err), path, int(eline))
    values = np.empty(ntok, dtype=np.float64)
    integer_text = np.empty(ntok, dtype=np.bool_)
    line_start = np.empty(nlines + 1, dtype=np.int64)
    line_no = np.empty(nlines, dtype=np.int64)
    slow = np.empty((nslow, 3), dtype=np.int64)
    _scan(buf, c, s, keep_blank, values, integer_text, line_start, line_no, slow, True)
    tokens = Tokens(values, line_start, line_no, integer_text, source=(data, comment, sep))
    big_index, big_value = [], []
    for index, start, end in slow.tolist():
        text = data[start:end]
        if integer_text[index]:
            value = _exact_integer(text, path, tokens.line_of(index))
            values[index] = float(value)
            if abs(value) > 2**53:  # float64 rounds it: keep the exact value
                big_index.append(index)
                big_value.append(value)
        else:
            values[index] = float(text)
            if values[index] in (np.inf, -np.inf):
                raise FormatError(f"{text.decode()!r} exceeds the float64 range (it would read "
                                  "as inf)", path, tokens.line_of(index))
    if big_index:
        tokens.big_index = np.array(big_index, dtype=np.int64)
        tokens.big_value = np.array(big_value, dtype=np.int64)
    return tokens


def _bad_token(token: str, err: int) -> str:
    """The message for a token the scanner rejected; spelled-out ``nan`` and ``inf``
    are numbers to Python, so say why they are refused."""
    word = token.lower().lstrip("+-")
    if word == "nan":
        return f"{token!r} is not a number (values must be finite)"
    if word in ("inf", "infinity"):
        return f"{token!r} is not a finite number"
    return f"{token!r} is {_MESSAGES[err]}"
