"""Mapping files: one PE id per line, line ``i`` (0-based) = PE of task ``i``.

This is the format of SharedMap and KaHIP (``--output_filename`` of
process_mapping), so their files and procmap's are interchangeable. The reader
also accepts ``#`` comments and blank lines; the writer writes bare ids only,
because the other tools do not skip comments.
"""
from __future__ import annotations

import os

import numpy as np

from procmap.errors import FormatError, InputError

from .atomic import atomic_write, read_bytes
from .comm import show_number
from .tokenizer import tokenize

_EXACT_INT = 2.0**53


def read_mapping(path: str | os.PathLike, n: int | None = None) -> np.ndarray:
    """Read a mapping file; return the PE of every task as an int64 array.

    Raises :class:`FormatError` (file and line) for a line without exactly one
    number, a PE id that is not a non-negative integer, an empty file, and (when
    ``n`` is given) a number of ids other than ``n``.
    """
    data = read_bytes(path)
    tokens = tokenize(data, path, comment="#")
    counts = tokens.counts()
    wrong = np.flatnonzero(counts != 1)
    if wrong.size:
        i = wrong[0]
        raise FormatError(f"expected one PE id per line, found {counts[i]} numbers", path,
                          int(tokens.line_no[i]))
    pes = tokens.values
    bad = np.flatnonzero(~((pes >= 0) & (pes < _EXACT_INT) & (pes == np.floor(pes))))
    if bad.size:
        i = bad[0]
        raise FormatError(f"PE id {show_number(pes[i])} is not a non-negative integer", path,
                          int(tokens.line_no[i]))
    if n is not None and pes.size != n:
        raise FormatError(f"mapping has {pes.size} entries, expected {n} (one per task)", path)
    if pes.size == 0 and n is None:
        raise FormatError("empty mapping: no PE ids", path)
    return pes.astype(np.int64)


def write_mapping(pes, path: str | os.PathLike) -> None:
    """Write ``pes`` (PE of each task, integers >= 0) one per line, atomically."""
    array = np.asarray(pes)
    if array.ndim != 1:
        raise InputError(f"a mapping is a 1-D array of PE ids, got shape {array.shape}")
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array) & (array == np.floor(array))):
            raise InputError("PE ids must be integers")
    elif array.dtype.kind not in "iub" and array.size:
        raise InputError(f"PE ids must be integers, got dtype {array.dtype}")
    array = array.astype(np.int64)
    if array.size and array.min() < 0:
        raise InputError(f"negative PE id {int(array.min())} (task {int(np.argmin(array))})")
    text = _id_lines(array)  # formatted before the file is opened: see _id_lines
    with atomic_write(path, "wb") as handle:
        handle.write(text)


#: Largest PE id for which :func:`_id_lines` formats through a table of every id's
#: text (built in a Python loop, so kept small).
_TABLE_MAX_ID = 1 << 16


def _id_lines(ids: np.ndarray) -> bytes:
    """``ids`` (int64, >= 0) as decimal text, one per line, in vectorised NumPy.

    Not the Numba formatter of the graph writers: ``procmap map`` needs it nowhere
    else, so it would be compiled (or loaded from the cache) here, at the end of
    the run; a KeyboardInterrupt raised inside llvmlite's callbacks while it
    compiles is lost or crashes the process. The table below is also faster
    (benchmarks/bench_end_to_end.py reports the write).

    PE ids are small (ids < k): each id's line ``"<id>\n"`` is looked up in a
    table of fixed-width, zero-padded byte strings, and the padding (the only zero
    bytes: digits and newlines are not 0) is dropped. Larger ids (or fewer ids
    than the table would hold) take one NumPy pass per digit instead.
    """
    if ids.size == 0:
        return b""
    top = int(ids.max())
    if top <= _TABLE_MAX_ID and top < ids.size:
        width = len(str(top)) + 1
        table = np.array([b"%d\n" % i for i in range(top + 1)], dtype=f"S{width}")
        rows = table[ids].view(np.uint8)
        return rows[rows != 0].tobytes()
    return _digit_lines(ids, top)


def _digit_lines(ids: np.ndarray, top: int) -> bytes:
    """:func:`_id_lines` for any ids: one pass per digit."""
    widths = np.ones(ids.size, dtype=np.int64)
    power = 10
    while power <= top:
        widths += ids >= power
        power *= 10
    ends = np.cumsum(widths + 1)  # one past each line's newline
    out = np.full(int(ends[-1]), ord("\n"), dtype=np.uint8)
    rest = ids.copy()
    last = ends - 2  # position of each number's last (units) digit
    for digit in range(int(widths.max())):
        live = widths > digit
        out[last[live] - digit] = ord("0") + rest[live] % 10
        rest //= 10
    return out.tobytes()
