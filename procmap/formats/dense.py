"""Dense communication matrices: NumPy ``.npy`` and text (``.csv``, profile2mat ``.mat``).

Both hold an ``n x n`` matrix ``C`` with row = sender and column = receiver
(TreeMatch, Open MPI's profile2mat, EZTrace and pipit all use this layout); the
graph is ``C + C^T``. A matrix that is already symmetric is therefore doubled:
the mapping does not change, but volumes do (profile2mat's ``.mat`` files hold
``(C_ij + C_ji) / 2``, so they read back as the true ``C_ij + C_ji``).

Text layout: ``n`` lines of ``n`` numbers separated by commas (if the first data
line has one) or whitespace; ``#`` starts a comment. A ``.csv`` file (not
``.mat``) may start with one non-numeric header row, which is skipped.

The writers store the upper triangle of the symmetric graph (``C[u, v]`` for
``u < v``, zeros elsewhere), so that ``C + C^T`` reads back as the same graph.
Vertex weights are not stored.
"""
from __future__ import annotations

import io
import os

import numpy as np

from procmap.errors import FormatError, InputError, ProcmapError
from procmap.graph import CommGraph
from procmap.limits import MAX_TASKS, npy_stream_header

from .atomic import as_format_error, atomic_write, read_bytes
from .comm import format_int_lines, show_number
from .tokenizer import tokenize

#: Refuse to build dense matrices larger than this (bytes); use a sparse format.
MAX_DENSE_BYTES = 8 << 30


def _graph_from_matrix(matrix: np.ndarray, path) -> CommGraph:
    try:
        return CommGraph.from_dense(matrix)
    except InputError as exc:
        raise as_format_error(exc, path) from None


# ----------------------------------------------------------------------------------- npy
def read_npy(path: str | os.PathLike) -> CommGraph:
    """Read a ``.npy`` file holding a square numeric array (row = sender); returns ``C + C^T``.

    The header is checked before any data are touched (no pickles, no object or
    structured dtypes, a 2-D square shape, exactly as many data bytes as the
    header promises), so a corrupt file cannot trigger a huge allocation.
    """
    data = read_bytes(path)
    try:
        # negative dimensions and pickles end here; the data size is checked below,
        # exactly (the whole file is read already: nothing of the promised size exists)
        shape, dtype, fortran, offset = npy_stream_header(io.BytesIO(data), None, path)
    except InputError as exc:
        raise as_format_error(exc, path) from None
    if dtype.fields is not None or dtype.kind not in "biuf":
        raise FormatError(f".npy dtype {dtype} is not a plain numeric type", path)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise FormatError(f"communication matrix must be square (n x n), got shape {shape}", path)
    n = shape[0]
    if n == 0:
        raise FormatError("empty graph: 0 x 0 matrix", path)
    if n > MAX_TASKS:
        raise FormatError(f"{n:,} rows exceed the supported {MAX_TASKS:,} tasks", path)
    needed = n * n * dtype.itemsize
    if len(data) - offset != needed:
        raise FormatError(f"header promises {needed:,} data bytes ({n} x {n} {dtype}), file "
                          f"holds {len(data) - offset:,}", path)
    matrix = np.frombuffer(data, dtype=dtype, count=n * n, offset=offset)
    matrix = matrix.reshape((n, n), order="F" if fortran else "C")
    return _graph_from_matrix(matrix, path)


def _upper_dense(graph: CommGraph) -> np.ndarray:
    """The dense upper triangle of the graph's matrix: ``C`` with ``C + C^T`` = graph."""
    n = graph.n
    if n * n * graph.adjwgt.dtype.itemsize > MAX_DENSE_BYTES:
        raise ProcmapError(f"a dense {n} x {n} matrix is too large; write .comm, .mtx or .npz")
    matrix = np.zeros((n, n), dtype=graph.adjwgt.dtype)
    src = graph.edge_sources()
    upper = graph.adjncy > src
    matrix[src[upper], graph.adjncy[upper]] = graph.adjwgt[upper]
    return matrix


def write_npy(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write the upper triangle of ``graph`` as a dense ``.npy`` (int64 or float64)."""
    matrix = _upper_dense(graph)
    with atomic_write(path, "wb") as handle:
        np.save(handle, matrix, allow_pickle=False)


# ------------------------------------------------------------------------------ csv/mat
def _first_data_line(data: bytes, start: int = 0) -> tuple[int, int]:
    """``(start, end)`` byte offsets of the first line at/after ``start`` that is not blank or '#'."""
    pos = start
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            end = len(data)
        line = data[pos:end].strip()
        if line and not line.startswith(b"#"):
            return pos, end
        pos = end + 1
    return -1, -1


def read_dense_text(path: str | os.PathLike, *, allow_header: bool | None = None) -> CommGraph:
    """Read a dense text matrix (``.csv`` or ``.mat``); returns ``C + C^T``.

    ``allow_header`` (default: true unless the file name ends in ``.mat``) lets
    a first non-numeric row be skipped as column labels.
    """
    if allow_header is None:
        allow_header = not os.fspath(path).lower().endswith(".mat")
    data = read_bytes(path)
    start, end = _first_data_line(data)
    if start < 0:
        raise FormatError("empty graph: no matrix rows", path)
    if allow_header and not _numeric(data[start:end]):
        # Turn the header into a comment: keeps every line number as in the file.
        data = data[:start] + b"#" + data[start:]
        start, end = _first_data_line(data, end + 2)
        if start < 0:
            raise FormatError("empty graph: no matrix rows after the header", path)
    sep = "," if b"," in data[start:end] else None
    tokens = tokenize(data, path, comment="#", sep=sep)
    n = tokens.nlines
    if n == 0:
        raise FormatError("empty graph: no numbers in the matrix rows", path)
    if n > MAX_TASKS or n * n * 8 > MAX_DENSE_BYTES:
        raise FormatError(f"a dense {n:,} x {n:,} matrix is too large; use .comm, .mtx or .npz",
                          path)
    counts = tokens.counts()
    wrong = np.flatnonzero(counts != n)
    if wrong.size:
        i = wrong[0]
        raise FormatError(f"row has {int(counts[i]):,} values, expected {n:,} (the matrix has "
                          f"{n:,} rows)", path, int(tokens.line_no[i]))
    values = tokens.values
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        i = bad[0]
        raise FormatError(f"value {show_number(values[i])} must be a finite number >= 0", path,
                          int(tokens.line_no[i // n]))
    return _graph_from_matrix(values.reshape(n, n), path)


def _numeric(line: bytes) -> bool:
    """Whether ``line`` is a row of numbers rather than a header of column labels.

    A row whose every field Python reads as a float counts as numbers even where
    the tokenizer refuses a field (``nan``, ``inf``): the row is then reported as
    holding a non-finite value, not mistaken for a header.
    """
    text = line.split(b"#", 1)[0]
    fields = text.split(b",") if b"," in text else text.split()
    return all(_is_float(field) for field in fields if field.strip())


def _is_float(field: bytes) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def write_dense_text(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write the upper triangle of ``graph`` as ``n`` text rows.

    Comma-separated for ``.csv`` files, space-separated otherwise (profile2mat's
    ``.mat`` style); a ``#`` comment line states the convention.
    """
    matrix = _upper_dense(graph)
    n = graph.n
    sep = "," if os.fspath(path).lower().endswith(".csv") else " "
    header = (f"# procmap dense matrix C (row = sender), {n} x {n}: upper triangle of the symmetric "
              "graph; readers use C + C^T\n")
    with atomic_write(path, "wb") as handle:
        handle.write(header.encode())
        if matrix.dtype.kind in "iu":
            handle.write(format_int_lines(matrix.ravel(), np.arange(0, n * n + 1, n), sep))
        else:
            for row in matrix.tolist():  # Python floats: repr round-trips exactly
                text = sep.join("0" if value == 0 else repr(value) for value in row)
                handle.write((text + "\n").encode())
