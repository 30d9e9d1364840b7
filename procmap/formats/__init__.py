"""Communication-graph and mapping files (docs/design.md section 7).

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
pmg       .pmg                procmap's binary CSR (header, checksum); the graph itself
========  ==================  =========================================================

Every reader raises only :class:`~procmap.errors.ProcmapError` subclasses on
bad input (a :class:`~procmap.errors.FormatError` naming the file and, where it
applies, the 1-based line). Every writer goes through :func:`atomic_write`:
the target appears complete or not at all. Writers produce files that read back
as the same :class:`~procmap.graph.CommGraph`; only METIS stores vertex weights.
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Callable

from procmap.errors import FormatError
from procmap.options import GRAPH_FORMATS, WRITABLE_FORMATS

from .atomic import atomic_write

if TYPE_CHECKING:
    from procmap.graph import CommGraph

_EXTENSIONS = {
    ".comm": "comm",
    ".graph": "metis", ".metis": "metis",
    ".mtx": "mtx", ".mm": "mtx",
    ".npy": "npy",
    ".csv": "csv", ".mat": "csv",
    ".npz": "npz",
    ".prof": "prof",
    ".pmg": "pmg",
}
_ALIASES = {"graph": "metis", "matrixmarket": "mtx", "mm": "mtx", "mat": "csv", "dense": "csv"}

# Every reader and writer, as (module, function). The modules are imported on first
# use: importing procmap.formats (e.g. for atomic_write) must not load Numba's parsers.
_FUNCTIONS = {
    "read_comm": ".comm", "write_comm": ".comm",
    "read_metis": ".metis", "write_metis": ".metis",
    "read_mtx": ".matrixmarket", "write_mtx": ".matrixmarket",
    "read_npy": ".dense", "write_npy": ".dense",
    "read_dense_text": ".dense", "write_dense_text": ".dense",
    "read_npz": ".npz", "write_npz": ".npz",
    "read_prof": ".prof", "read_prof_files": ".prof",
    "read_mapping": ".mapping", "write_mapping": ".mapping",
    "read_pmg": ".pmg", "write_pmg": ".pmg",
}
_READERS = {"comm": "read_comm", "metis": "read_metis", "mtx": "read_mtx", "npy": "read_npy",
            "csv": "read_dense_text", "npz": "read_npz", "prof": "read_prof",
            "pmg": "read_pmg"}
_WRITERS = {"comm": "write_comm", "metis": "write_metis", "mtx": "write_mtx",
            "npy": "write_npy", "csv": "write_dense_text", "npz": "write_npz",
            "pmg": "write_pmg"}


def __getattr__(name: str) -> Any:
    if name in _FUNCTIONS:
        value = getattr(importlib.import_module(_FUNCTIONS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _function(name: str) -> Callable:
    return __getattr__(name) if name not in globals() else globals()[name]


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


def read_graph(path: str | os.PathLike, format: str | None = None) -> "CommGraph":
    """Read a communication graph from ``path`` (format from ``format`` or the extension).

    Returns the symmetric graph (``C + C^T`` for directed formats). Raises only
    :class:`~procmap.errors.ProcmapError` subclasses on bad input.
    """
    name = detect_format(path, format)
    return _function(_READERS[name])(path)


def write_graph(graph: "CommGraph", path: str | os.PathLike, format: str | None = None) -> None:
    """Write ``graph`` to ``path`` atomically in ``format`` (default: from the extension)."""
    name = detect_format(path, format)
    if name not in _WRITERS:
        raise FormatError(f"procmap cannot write the {name!r} format "
                          f"(writable: {', '.join(WRITABLE_FORMATS)})", path)
    _function(_WRITERS[name])(graph, path)


__all__ = [
    "GRAPH_FORMATS", "WRITABLE_FORMATS", "atomic_write", "detect_format", "read_graph",
    "write_graph", "read_mapping", "write_mapping", "read_prof_files",
    "read_comm", "write_comm", "read_metis", "write_metis", "read_mtx", "write_mtx",
    "read_npy", "write_npy", "read_dense_text", "write_dense_text", "read_npz", "write_npz",
    "read_prof", "read_pmg", "write_pmg",
]
