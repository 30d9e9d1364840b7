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

This module imports only :mod:`procmap.errors` and numpy, so that readers, the machine
model (``procmap.topology``) and the launcher hooks can all use it.
"""
from __future__ import annotations

import os

import numpy as np

from procmap.errors import InputError

__all__ = ["MAX_TASKS", "MAX_PES", "MAX_SLOTS", "MAX_SILENT_TASKS", "INT64_MAX",
           "check_declared_tasks", "npy_header"]

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
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise InputError(f"unsupported .npy format version {version[0]}.{version[1]}",
                                 name)
            offset = fh.tell()
            size = os.fstat(fh.fileno()).st_size
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", name) from None
    except (ValueError, SyntaxError, TypeError) as exc:
        raise InputError(f"not a valid .npy file ({str(exc).splitlines()[0]})", name) from None
    if dtype.hasobject:
        raise InputError("holds Python objects; procmap reads numeric arrays only", name)
    if any(int(d) < 0 for d in shape):
        raise InputError(f"header declares a negative dimension in shape {tuple(shape)}", name)
    promised = dtype.itemsize * int(np.prod([int(d) for d in shape], dtype=object))
    if promised > size - offset:
        raise InputError(f"header declares shape {tuple(int(d) for d in shape)} of {dtype} "
                         f"({promised:,} bytes) but the file holds {size - offset:,} bytes "
                         "of data", name)
    return tuple(int(d) for d in shape), dtype, bool(fortran)
