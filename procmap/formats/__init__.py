"""Communication-graph and mapping files (DESIGN.md section 7).

Graph formats (name: extensions; semantics):

========  ==================  =========================================================
comm      .comm               ``src dst volume`` lines, 0-based; graph = ``C + C^T``
metis     .graph .metis       METIS graph, 1-based, already symmetric, all fmt flags
mtx       .mtx .mm            MatrixMarket; general = ``C`` (-> ``C + C^T``),
                              symmetric = the graph itself
npy       .npy                dense ``n x n`` array ``C``, row = sender (-> ``C + C^T``)
csv       .csv .mat           dense text rows (commas or whitespace), as ``npy``
npz       .npz                ``scipy.sparse.save_npz`` matrix ``C`` (-> ``C + C^T``)
prof      .prof, a directory  Open MPI monitoring output, bytes of E and I lines (read only)
========  ==================  =========================================================

Every reader raises only :class:`~procmap.errors.ProcmapError` subclasses on
bad input (a :class:`~procmap.errors.FormatError` naming the file and, where it
applies, the 1-based line). Every writer goes through :func:`atomic_write`:
the target appears complete or not at all. Writers produce files that read back
as the same :class:`~procmap.graph.CommGraph`; only METIS stores vertex weights.
"""
from __future__ import annotations

import os

from procmap.errors import FormatError
from procmap.graph import CommGraph

from .atomic import atomic_write
from .comm import read_comm, write_comm
from .dense import read_dense_text, read_npy, write_dense_text, write_npy
from .mapping import read_mapping, write_mapping
from .matrixmarket import read_mtx, write_mtx
from .metis import read_metis, write_metis
from .npz import read_npz, write_npz
from .prof import read_prof, read_prof_files

#: Every graph format name :func:`read_graph` understands.
GRAPH_FORMATS: tuple[str, ...] = ("comm", "metis", "mtx", "npy", "csv", "npz", "prof")
#: The formats :func:`write_graph` can produce (``prof`` is read only).
WRITABLE_FORMATS: tuple[str, ...] = ("comm", "metis", "mtx", "npy", "csv", "npz")

_EXTENSIONS = {
    ".comm": "comm",
    ".graph": "metis", ".metis": "metis",
    ".mtx": "mtx", ".mm": "mtx",
    ".npy": "npy",
    ".csv": "csv", ".mat": "csv",
    ".npz": "npz",
    ".prof": "prof",
}
_ALIASES = {"graph": "metis", "matrixmarket": "mtx", "mm": "mtx", "mat": "csv", "dense": "csv"}

_READERS = {
    "comm": read_comm, "metis": read_metis, "mtx": read_mtx, "npy": read_npy,
    "csv": read_dense_text, "npz": read_npz, "prof": read_prof,
}
_WRITERS = {
    "comm": write_comm, "metis": write_metis, "mtx": write_mtx, "npy": write_npy,
    "csv": write_dense_text, "npz": write_npz,
}


def detect_format(path: str | os.PathLike, format: str | None = None) -> str:
    """Return the graph format name for ``path``: ``format`` if given, else from the extension.

    ``format`` is case-insensitive and may carry a leading dot or be an alias
    (``graph``, ``matrixmarket``, ``mm``, ``mat``, ``dense``). A directory means
    Open MPI ``.prof`` files. Raises :class:`FormatError` naming the file for an
    unknown format name or extension.
    """
    if format is not None:
        name = str(format).strip().lower().lstrip(".")
        name = _ALIASES.get(name, name)
        if name not in GRAPH_FORMATS:
            raise FormatError(f"unknown graph format {format!r} (known: {', '.join(GRAPH_FORMATS)})",
                              path)
        return name
    if os.path.isdir(path):
        return "prof"
    extension = os.path.splitext(os.fspath(path))[1].lower()
    if extension in _EXTENSIONS:
        return _EXTENSIONS[extension]
    known = " ".join(sorted(_EXTENSIONS))
    raise FormatError(f"cannot tell the graph format from the extension {extension or '(none)'!r}; "
                      f"use one of {known} or name the format", path)


def read_graph(path: str | os.PathLike, format: str | None = None) -> CommGraph:
    """Read a communication graph from ``path`` (format from ``format`` or the extension).

    Returns the symmetric graph (``C + C^T`` for directed formats). Raises only
    :class:`~procmap.errors.ProcmapError` subclasses on bad input.
    """
    name = detect_format(path, format)
    return _READERS[name](path)


def write_graph(graph: CommGraph, path: str | os.PathLike, format: str | None = None) -> None:
    """Write ``graph`` to ``path`` atomically in ``format`` (default: from the extension)."""
    name = detect_format(path, format)
    if name not in _WRITERS:
        raise FormatError(f"procmap cannot write the {name!r} format "
                          f"(writable: {', '.join(WRITABLE_FORMATS)})", path)
    _WRITERS[name](graph, path)


__all__ = [
    "GRAPH_FORMATS", "WRITABLE_FORMATS", "atomic_write", "detect_format", "read_graph",
    "write_graph", "read_mapping", "write_mapping", "read_prof_files",
    "read_comm", "write_comm", "read_metis", "write_metis", "read_mtx", "write_mtx",
    "read_npy", "write_npy", "read_dense_text", "write_dense_text", "read_npz", "write_npz",
    "read_prof",
]
