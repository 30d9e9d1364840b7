"""procmap's documented size limits, and the checks that enforce them where input is parsed.

Every number a user gives (a header's task count, a hierarchy, ``--slots``, a Slurm
variable, a ``.npy`` header) is checked against these limits *before* anything of that
size is allocated, so that bad input costs a one-line error, not a multi-GB allocation.

========================  =====================  ==========================================
limit                     value                  why
========================  =====================  ==========================================
``MAX_TASKS``             2^31 - 2               task ids are int32 in the CSR arrays
``MAX_PES``               2^24 (16,777,216)      more than twice the cores of any machine
                                                 of 2026; PE arrays stay below 128 MiB
``MAX_SLOTS``             2^31 - 2               slots per PE (a PE never holds more tasks
                                                 than there are tasks)
``MAX_SILENT_TASKS``      2^22 (4,194,304)       tasks a file may declare beyond what its
                                                 content shows (see :func:`check_declared_tasks`)
``INT64_MAX``             2^63 - 1               integer weights, their totals and J
========================  =====================  ==========================================

This module imports only :mod:`procmap.errors` (and numpy inside the functions that need
it, so that building the command line's parser stays cheap), so that readers, the machine
model (``procmap.topology``) and the launcher hooks can all use it.
"""
from __future__ import annotations

import os
import re
import sys
import math
import warnings
from typing import TYPE_CHECKING

from procmap.errors import InputError, TopologyError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MAX_TASKS", "MAX_PES", "MAX_SLOTS", "MAX_SILENT_TASKS", "INT64_MAX",
           "check_declared_tasks", "check_pes", "is_decimal_int", "is_decimal_number", "parse_count",
           "npy_header", "npy_stream_header", "exact_sum", "check_total"]

#: Largest number of tasks (task ids are int32 in ``adjncy``).
MAX_TASKS = 2**31 - 2
#: Largest number of processing elements of a machine.
MAX_PES = 2**24
#: Largest number of slots of one PE.
MAX_SLOTS = 2**31 - 2
#: Tasks a file may declare beyond those its content shows (ranks that never communicate).
MAX_SILENT_TASKS = 2**22
#: Largest int64; integer weights, totals and J must stay at or below it.
INT64_MAX = 2**63 - 1


def check_declared_tasks(declared: int, shown: int, what: str,
                         path: str | os.PathLike | None = None, line: int | None = None) -> int:
    """Check a task count that a header or a flag promises; return it if acceptable.

    ``shown`` is how many tasks the content has shown to be real (the largest id
    present plus one, or the number of entries, whichever the caller can tell
    cheaply). Ranks that never communicate are legitimate, so ``declared`` may exceed
    ``shown``, but by at most :data:`MAX_SILENT_TASKS`: a 27-byte file must not make
    procmap allocate gigabytes. ``what`` names the source for the message
    (``"header '# tasks:'"``, ``"size line"``).

    Raises :class:`~procmap.errors.InputError` (naming ``path`` and ``line``) when
    ``declared`` is negative, above :data:`MAX_TASKS`, or too far above ``shown``.
    """
    if declared < 0:
        raise InputError(f"{what} declares {declared:,} tasks: must be >= 0", path, line)
    if declared > MAX_TASKS:
        raise InputError(f"{what} declares {declared:,} tasks; procmap handles at most "
                         f"{MAX_TASKS:,}", path, line)
    if declared - shown > MAX_SILENT_TASKS:
        raise InputError(f"{what} declares {declared:,} tasks but the content shows only "
                         f"{shown:,}; at most {MAX_SILENT_TASKS:,} tasks may be absent from "
                         "the content (ranks that never communicate)", path, line)
    return declared


def check_pes(k: int, what: str) -> int:
    """Check the number of PEs ``k`` of a machine (``what`` names it); return ``k``.

    Called with the count computed from the description (Python ints, no overflow)
    *before* any per-PE array exists. Raises :class:`~procmap.errors.TopologyError`
    when ``k`` exceeds :data:`MAX_PES`.
    """
    if k > MAX_PES:
        raise TopologyError(f"{what} has {k:,} PEs; procmap handles at most {MAX_PES:,}")
    return k


# Plain decimal notation: ASCII digits, an optional fraction and exponent. Python's
# int() and float() also take "4_0" (as 40), surrounding white space and non-ASCII
# digits ("\uff14" is 4), which have no place in a machine description.
_DECIMAL_INT = re.compile(r"[0-9]+")
_DECIMAL_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_decimal_int(text: str) -> bool:
    """True when ``text`` is a non-negative integer in ASCII digits only (``"40"``, not
    ``"4_0"``, ``"+40"``, ``" 40"`` or fullwidth digits); check it before ``int(text)``."""
    return _DECIMAL_INT.fullmatch(text) is not None


def parse_count(text: str, what: str, low: int, high: int,
                error: type[Exception] = InputError) -> int:
    """A whole number written in ASCII digits, checked to lie in ``low..high``.

    ``what`` names the value in the message (``"--slots 4_0"``,
    ``"SLURM_NTASKS='0'"``, ``"hosts:3: slots"``); ``error`` is the exception class
    raised with that one-line message (a :class:`~procmap.errors.ProcmapError`).
    """
    value = text.strip()
    if not is_decimal_int(value):
        raise error(f"{what} is not an integer in digits 0-9")
    number = int(value)
    if number < low:
        raise error(f"{what} must be >= {low:,}")
    if number > high:
        raise error(f"{what} is above procmap's limit of {high:,}")
    return number


def is_decimal_number(text: str) -> bool:
    """True when ``text`` is a non-negative number in plain ASCII notation (``"10"``,
    ``"2.5"``, ``".5"``, ``"1e3"``); check it before ``float(text)``."""
    return _DECIMAL_NUMBER.fullmatch(text) is not None


def npy_header(path: str | os.PathLike) -> tuple[tuple[int, ...], np.dtype, bool]:
    """Read and check a ``.npy`` file's header without loading its data.

    Returns ``(shape, dtype, fortran_order)``. Raises :class:`InputError` naming
    ``path`` when the header is malformed, holds a negative dimension or an object
    dtype, or promises more bytes than the file holds: ``np.load`` would otherwise
    allocate the promised size (or fail with a traceback) before noticing.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            shape, dtype, fortran, _ = npy_stream_header(fh, size, name)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", name) from None
    return shape, dtype, fortran


def npy_stream_header(stream, size: int | None, name: str | os.PathLike
                      ) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """:func:`npy_header` for an open binary ``stream`` positioned at the start of a
    ``.npy`` of ``size`` bytes (a file, or a member of an ``.npz`` archive).

    Returns ``(shape, dtype, fortran_order, data_offset)``; errors name ``name``.
    ``size=None`` leaves the data size to the caller (one that demands it exactly).
    """
    import numpy as np

    try:
        with warnings.catch_warnings():
            # numpy warns about headers that look written by Python 2; reading them is fine
            warnings.simplefilter("ignore")
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise InputError(f"unsupported .npy format version {version[0]}.{version[1]}",
                                 name)
        offset = stream.tell()
    except InputError:
        raise
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001
        # numpy's header parser (ast.literal_eval behind a tokenize pass) raises a
        # version-dependent mix of ValueError, SyntaxError, TokenError, ...
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"not a valid .npy file ({text})", name) from None
    if dtype.hasobject:
        raise InputError("holds Python objects; procmap reads numeric arrays only", name)
    if any(int(d) < 0 for d in shape):
        raise InputError("header declares a negative dimension in shape "
                         f"{tuple(int(d) for d in shape)}", name)
    promised = dtype.itemsize * int(np.prod([int(d) for d in shape], dtype=object))
    if size is not None and promised > size - offset:
        raise InputError(f"header declares shape {tuple(int(d) for d in shape)} of {dtype} "
                         f"({promised:,} bytes) but the file holds {max(size - offset, 0):,} "
                         "bytes of data", name)
    return tuple(int(d) for d in shape), dtype, bool(fortran), int(offset)


# ------------------------------------------------------------------------------ totals
def exact_sum(values) -> int | float:
    """The sum of ``values`` without wrapping: a Python ``int`` for integer (and bool)
    arrays, exact however large; a ``float`` (possibly ``inf``) for float arrays.

    Cheap where nothing can wrap (``size * max|v| <= 2^62``: one int64 sum);
    otherwise the 32-bit halves of the values are summed separately, which cannot
    overflow, in chunks of 2^30 entries. No Python loop over the entries.
    """
    import numpy as np

    values = np.asarray(values)
    if values.dtype.kind == "b":
        return int(np.count_nonzero(values))
    if values.dtype.kind not in "iu":
        with np.errstate(over="ignore", invalid="ignore"):
            return float(values.sum(dtype=np.float64))
    if values.size == 0:
        return 0
    if values.dtype.itemsize < 8:
        values = values.astype(np.int64)  # exact; shifts below need 64-bit lanes
    largest = max(abs(int(values.min())), abs(int(values.max())))
    if largest * values.size <= 2**62:
        return int(values.sum())
    total = 0
    for start in range(0, values.size, 2**30):
        chunk = values.ravel()[start:start + 2**30]
        total += (int((chunk >> 32).sum()) << 32) + int((chunk & 0xFFFFFFFF).sum())
    return total


def check_total(total: int | float, what: str, path: str | os.PathLike | None = None,
                line: int | None = None) -> int | float:
    """Check a total from :func:`exact_sum` (or a product of totals); return it.

    An ``int`` must be at most :data:`INT64_MAX` (int64 arrays and kernels hold it),
    a ``float`` must be finite. ``what`` names the total for the message
    (``"total vertex weight"``). Raises :class:`InputError` otherwise.
    """
    if isinstance(total, int):
        if total > INT64_MAX:
            raise InputError(f"{what} {total:,} exceeds the int64 range (at most "
                             f"{INT64_MAX:,})", path, line)
    elif not math.isfinite(total):
        raise InputError(f"{what} exceeds the float64 range (at most "
                         f"{sys.float_info.max:.4g})", path, line)
    return total
