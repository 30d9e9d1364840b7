"""scipy sparse ``.npz`` files (``scipy.sparse.save_npz`` / ``load_npz``).

The file holds a square sparse matrix ``C`` (row = sender); the graph is
``C + C^T``. Only scipy's sparse layout is accepted: an ``.npz`` written with
``np.savez`` (a dense array, several arrays) is a FormatError. Pickles are never
loaded. The writer stores the upper triangle of the symmetric graph in CSR
form (uncompressed, for speed), so reading it back gives the same graph; vertex weights are
not stored.
"""
from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import scipy.sparse as sp

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph

from .atomic import as_format_error, atomic_write, read_bytes
from .comm import MAX_TASKS

# Members scipy.sparse.save_npz writes for its formats (csr/csc/bsr: indices+indptr,
# coo: row+col, dia: offsets); 'format' names the layout.
_SCIPY_MEMBERS = {"format.npy", "shape.npy", "data.npy"}


def read_npz(path: str | os.PathLike) -> CommGraph:
    """Read a ``scipy.sparse.save_npz`` file into a CommGraph holding ``C + C^T``."""
    data = read_bytes(path)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001
        # BadZipFile, NotImplementedError (zip version), UnicodeDecodeError (names), ...
        raise FormatError(f"not an .npz (zip) archive: {_one_line(exc)}", path) from None
    if not _SCIPY_MEMBERS <= names:
        raise FormatError("not a scipy.sparse .npz file (expected the arrays of "
                          f"scipy.sparse.save_npz, found {sorted(names)[:6]})", path)
    try:
        matrix = sp.load_npz(io.BytesIO(data))  # np.load(allow_pickle=False) inside
        if hasattr(matrix, "check_format"):
            # load_npz checks only shapes; a corrupt (uncompressed) archive can hold
            # unsorted pointers or indices beyond the shape
            matrix.check_format(full_check=True)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001
        # zipfile, zlib, numpy's .npy parser and scipy's format checks raise a wide,
        # version-dependent range of exceptions on corrupt archives; all mean the same.
        raise FormatError(f"corrupt scipy.sparse .npz: {_one_line(exc)}", path) from None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise FormatError(f"communication matrix must be square, got shape {matrix.shape}", path)
    if matrix.shape[0] == 0:
        raise FormatError("empty graph: 0 x 0 matrix", path)
    if matrix.shape[0] > MAX_TASKS:
        raise FormatError(f"{matrix.shape[0]} rows exceed the supported {MAX_TASKS} tasks", path)
    if matrix.dtype.kind not in "biuf":
        raise FormatError(f"matrix dtype {matrix.dtype} is not a real number type", path)
    try:
        return CommGraph.from_scipy(matrix)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def write_npz(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write the upper triangle of ``graph`` with ``scipy.sparse.save_npz`` (CSR).

    Uncompressed: for 5 million edges deflate takes ~5 s and halves the size,
    storing takes 0.05 s; the reader accepts both.
    """
    upper = sp.triu(graph.to_scipy(), k=1, format="csr")
    upper.indices = upper.indices.astype(np.int32, copy=False)
    with atomic_write(path, "wb") as handle:
        sp.save_npz(handle, upper, compressed=False)
