"""scipy sparse ``.npz`` files (``scipy.sparse.save_npz`` / ``load_npz``).

The file holds a square sparse matrix ``C`` (row = sender); the graph is
``C + C^T``. Only scipy's sparse layout is accepted: an ``.npz`` written with
``np.savez`` (a dense array, several arrays) is a FormatError. Pickles are never
loaded. The writer stores the upper triangle of the symmetric graph in CSR
form (uncompressed, for speed), so reading it back gives the same graph; vertex weights are
not stored.

Before scipy loads anything, every member's ``.npy`` header is checked against the
member's size, and the shape against what the arrays can show (twice the stored
entries, or the row pointers): rows beyond that are ranks that never communicate,
at most ``procmap.limits.MAX_SILENT_TASKS`` of them.
"""
from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import scipy.sparse as sp

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import MAX_TASKS, check_declared_tasks, npy_stream_header

from .atomic import as_format_error, atomic_write, read_bytes

# Members scipy.sparse.save_npz writes for its formats (csr/csc/bsr: indices+indptr,
# coo: row+col, dia: offsets); 'format' names the layout.
_SCIPY_MEMBERS = {"format.npy", "shape.npy", "data.npy"}
#: Deflate expands at most ~1032:1; a member claiming more is lying about its size.
_MAX_RATIO = 1100


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
    _check_members(data, path)
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
        raise FormatError("communication matrix must be square, got shape "
                          f"{tuple(int(d) for d in matrix.shape)}", path)
    if matrix.shape[0] == 0:
        raise FormatError("empty graph: 0 x 0 matrix", path)
    if matrix.shape[0] > MAX_TASKS:
        raise FormatError(f"{int(matrix.shape[0]):,} rows exceed the supported {MAX_TASKS:,} "
                          "tasks", path)
    if matrix.dtype.kind not in "biuf":
        raise FormatError(f"matrix dtype {matrix.dtype} is not a real number type", path)
    try:
        return CommGraph.from_scipy(matrix)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def _check_members(data: bytes, path) -> None:
    """Check every member's ``.npy`` header and the matrix shape before scipy loads them.

    ``np.load`` allocates an array of the size a member's header promises before it
    reads the data, and scipy builds CSR arrays of the declared shape: a few bytes
    claiming 2e9 rows must fail here, naming the file.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    declared = [0]
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                if info.file_size > _MAX_RATIO * info.compress_size + 1024:
                    raise FormatError(f"member {info.filename} claims {info.file_size:,} bytes "
                                      f"from {info.compress_size:,} compressed bytes", path)
                with archive.open(info) as member:
                    try:
                        shape, dtype, _, _ = npy_stream_header(member, info.file_size, path)
                    except InputError as exc:
                        raise FormatError(f"{info.filename}: {exc.message}", path) from None
                    shapes[info.filename] = shape
                    if info.filename == "shape.npy":
                        declared = _declared_shape(member, shape, dtype, path)
    except (FormatError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001
        raise FormatError(f"corrupt scipy.sparse .npz: {_one_line(exc)}", path) from None
    # What the arrays show: each stored entry names at most two tasks; CSR/CSC/BSR
    # row pointers have one element per row (or block row) plus one.
    elements = {name: int(np.prod(shape, dtype=object)) for name, shape in shapes.items()}
    shown = max(2 * elements.get("data.npy", 0), elements.get("indptr.npy", 1) - 1)
    rows = max(declared)
    try:
        check_declared_tasks(rows, min(rows, shown), "the shape in shape.npy", path)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def _declared_shape(member, shape: tuple[int, ...], dtype: np.dtype, path) -> list[int]:
    """The matrix shape stored in ``shape.npy``; ``member`` is positioned after its
    (checked) header."""
    if len(shape) != 1 or not 1 <= shape[0] <= 8:
        raise FormatError(f"shape.npy holds an array of shape {shape}, expected (2,)", path)
    if dtype.kind not in "iu":
        raise FormatError("shape.npy must hold non-negative integers", path)
    values = np.frombuffer(member.read(shape[0] * dtype.itemsize), dtype=dtype)
    if values.size != shape[0] or (values < 0).any():
        raise FormatError("shape.npy must hold non-negative integers", path)
    return [int(v) for v in values]


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
