"""METIS's C entry points called through ctypes, from the library that pymetis bundles.

Why not ``pymetis.part_graph``: its binding holds the GIL for the whole METIS run, so
while one split of ``hm`` partitions its coarsest graph, every other worker thread
stalls, even between two Numba kernels that would release the GIL again (the initial
mapping of ``im`` makes ~56 METIS calls on graphs of a few hundred vertices). A ctypes
call releases the GIL. METIS itself draws its random numbers from libc's ``rand()``,
one state for the process, so concurrent calls would interleave their draws: every
METIS run, here or through pymetis, holds :data:`lock`, which keeps every result the one
pymetis gives (tested).

Only what can be checked without risk is used: the width of ``idx_t`` is read from
``METIS_SetDefaultOptions`` (it writes ``METIS_NOPTIONS`` entries of -1), and no
``real_t`` argument is passed (uniform target weights, no ``ubvec``). Anything else
(another build of pymetis, target weights) goes through pymetis.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

_NOPTIONS = 40  # METIS_NOPTIONS
_SEED, _UFACTOR, _NUMBERING = 8, 16, 17  # indices in METIS's options array
_METIS_OK = 1
#: Held by every METIS run in the process, through ctypes or pymetis (see the module
#: docstring): one ``rand()`` state.
lock = threading.Lock()
_lib: tuple | None = None  # (library, idx dtype), or () where it cannot be used


def _load() -> tuple:
    """``(library, idx dtype)`` of pymetis's bundled METIS, or ``()`` if unusable."""
    global _lib
    if _lib is not None:
        return _lib
    with lock:  # one thread probes; the others wait for its answer
        if _lib is None:
            _lib = _probe()
    return _lib


def _probe() -> tuple:
    """Load the library and read the width of ``idx_t`` (see the module docstring)."""
    try:
        import pymetis._internal as internal
        lib = ctypes.CDLL(internal.__file__)
        for name in ("METIS_SetDefaultOptions", "METIS_PartGraphKway",
                     "METIS_PartGraphRecursive"):
            getattr(lib, name).restype = ctypes.c_int
    except (ImportError, OSError, AttributeError):
        return ()
    # -1 in exactly NOPTIONS 8-byte or NOPTIONS 4-byte entries (room to spare)
    probe = np.zeros(4 * _NOPTIONS, dtype=np.int32)
    lib.METIS_SetDefaultOptions(probe.ctypes.data_as(ctypes.c_void_p))
    written = int(np.count_nonzero(probe))
    if written != np.count_nonzero(probe == -1):
        return ()
    return {2 * _NOPTIONS: (lib, np.int64), _NOPTIONS: (lib, np.int32)}.get(written, ())


def available() -> bool:
    """Whether :func:`part_graph` can call METIS directly."""
    return bool(_load())


def part_graph(xadj, adjncy, vwgt, adjwgt, k: int, ufactor: int, seed: int) -> np.ndarray:
    """METIS partition into ``k`` equal blocks, as ``pymetis.part_graph`` computes it
    (recursive bisection for ``k <= 8``, else k-way; ``adjwgt`` may be ``None``).

    Requires :func:`available`. Returns an int32 array; ``RuntimeError`` if METIS fails.
    """
    lib, idx = _load()

    def arr(a):
        return np.ascontiguousarray(a, dtype=idx)

    def ptr(a):
        return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

    n = xadj.size - 1
    xadj, adjncy, vwgt = arr(xadj), arr(adjncy), arr(vwgt)
    adjwgt = None if adjwgt is None else arr(adjwgt)
    options = np.empty(_NOPTIONS, dtype=idx)
    lib.METIS_SetDefaultOptions(ptr(options))
    options[_SEED], options[_UFACTOR], options[_NUMBERING] = seed, ufactor, 0
    nvtxs, ncon, nparts = (np.array([v], dtype=idx) for v in (n, 1, k))
    objval = np.zeros(1, dtype=idx)
    part = np.zeros(n, dtype=idx)
    fn = lib.METIS_PartGraphRecursive if k <= 8 else lib.METIS_PartGraphKway
    with lock:  # METIS's random numbers come from libc's one rand() state
        status = fn(ptr(nvtxs), ptr(ncon), ptr(xadj), ptr(adjncy), ptr(vwgt), None,
                    ptr(adjwgt), ptr(nparts), None, None, ptr(options), ptr(objval), ptr(part))
    if status != _METIS_OK:
        raise RuntimeError(f"METIS failed with status {status} on a graph of {n} vertices")
    return part.astype(np.int32)
