"""General machine model: an explicit symmetric ``k x k`` distance matrix.

Used when the machine is not a regular hierarchy: a torus, a dragonfly measured
by ping-pong, or a network graph whose shortest paths give the distances
(docs/design.md section 2). The interface mirrors :class:`~.hierarchy.Hierarchy` where
it makes sense (``k``, ``capacities``, ``total_slots``, ``distance``,
``distance_matrix``, ``with_capacities``) so engines can take either.
"""
from __future__ import annotations

import os
import re
from collections.abc import Hashable, Iterable
from typing import Union

import numpy as np

from procmap.errors import InputError, TopologyError
from procmap.limits import check_pes, npy_header

from .hierarchy import Hierarchy, check_capacities

__all__ = ["DistanceMatrix", "Topology", "is_hierarchy"]

# Rows checked at a time when validating symmetry: keeps the temporaries of a
# k ~ 10^4 matrix (800 MB) to a few tens of MB instead of another full copy.
_BLOCK_ROWS = 512

# Relative tolerance for symmetry: text files written with limited precision
# (e.g. "%.6g" of measured latencies) may differ in the last digit; larger
# differences are a real error. Accepted matrices are made exactly symmetric.
_SYMMETRY_RTOL = 1e-9


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _show(x) -> str:
    """``repr`` of a node or cost for messages, NumPy scalars as plain Python values
    (``5``, not ``np.int64(5)``)."""
    return repr(x.item() if isinstance(x, np.generic) else x)


def _validate_matrix(matrix: np.ndarray, where: str = "", row_lines: list[int] | None = None) -> np.ndarray:
    """Check a distance matrix and return it as a C-contiguous float64 array.

    ``where`` prefixes messages (a file name); ``row_lines`` maps a row to the
    line it came from so errors point at the line to fix.
    """
    def fail(msg: str, row: int | None = None) -> None:
        prefix = where
        if where and row is not None and row_lines is not None:
            prefix = f"{where}:{row_lines[row]}"
        raise TopologyError(f"{prefix}: {msg}" if prefix else msg)

    try:
        d = np.array(matrix, dtype=np.float64, copy=True, order="C")
    except (TypeError, ValueError) as exc:
        fail(f"distance matrix is not numeric ({exc})")
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        fail(f"distance matrix must be square (k x k), got shape {d.shape}")
    k = d.shape[0]
    if k == 0:
        fail("distance matrix is empty (0 PEs)")
    bad = ~np.isfinite(d)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        fail(f"distance D[{i},{j}] = {float(d[i, j])} is not finite", int(i))
    neg = d < 0
    if neg.any():
        i, j = np.argwhere(neg)[0]
        fail(f"distance D[{i},{j}] = {_fmt_num(d[i, j])} is negative", int(i))
    diag = np.diagonal(d)
    nz = np.flatnonzero(diag != 0)
    if nz.size:
        i = int(nz[0])
        fail(f"diagonal entry D[{i},{i}] = {_fmt_num(diag[i])} must be 0 (a PE is at distance 0 from itself)", i)
    scale = float(d.max())
    tol = _SYMMETRY_RTOL * scale
    exact = True
    for start in range(0, k, _BLOCK_ROWS):
        stop = min(start + _BLOCK_ROWS, k)
        diff = np.abs(d[start:stop] - d[:, start:stop].T)
        if (diff > tol).any():
            r, j = np.argwhere(diff > tol)[0]
            i = start + int(r)
            other = f" (line {row_lines[j]})" if row_lines is not None else ""
            fail(f"distance matrix is not symmetric: D[{i},{j}] = {_fmt_num(d[i, j])} but "
                 f"D[{j},{i}] = {_fmt_num(d[j, i])}{other}", i)
        exact = exact and not diff.any()
    if not exact:
        # Within tolerance but not bit-identical: make it exact so that J
        # computed either way round agrees.
        d = (d + d.T) * 0.5
    return d


def _validate_capacities(capacities, k: int) -> np.ndarray:
    # The same rules as for hierarchies: 0..MAX_SLOTS slots per PE, returned as a
    # read-only int64 copy.
    return check_capacities(capacities, k)


class DistanceMatrix:
    """A machine of ``k`` PEs given by an explicit symmetric distance matrix.

    Parameters
    ----------
    matrix : array_like, shape (k, k)
        Distances; converted to float64. Must be finite, >= 0, symmetric, with a
        zero diagonal (:class:`TopologyError` names the first bad entry).
    capacities : array_like of int, optional
        Slots per PE (default 1 everywhere); 0 removes a PE from the allocation.
    labels : sequence, optional
        A name per PE (e.g. the network-graph nodes it came from); informational.

    The matrix is stored read-only and shared, never copied, by
    :meth:`distance_matrix` and :meth:`with_capacities`.
    """

    __slots__ = ("_matrix", "_capacities", "_labels")

    def __init__(self, matrix, capacities=None, labels: Iterable[Hashable] | None = None) -> None:
        d = _validate_matrix(matrix)
        self._init(d, _validate_capacities(capacities, d.shape[0]), labels)

    def _init(self, d: np.ndarray, caps: np.ndarray, labels) -> None:
        d.setflags(write=False)
        self._matrix = d
        self._capacities = caps
        if labels is not None:
            labels = tuple(labels)
            if len(labels) != d.shape[0]:
                raise TopologyError(f"{len(labels)} labels given for {d.shape[0]} PEs")
        self._labels = labels

    @classmethod
    def _trusted(cls, d: np.ndarray, caps: np.ndarray, labels) -> "DistanceMatrix":
        # Skips the O(k^2) validation for matrices that are already checked.
        obj = cls.__new__(cls)
        obj._init(d, caps, labels)
        return obj

    # ----------------------------------------------------------- properties
    @property
    def k(self) -> int:
        """Number of PEs."""
        return self._matrix.shape[0]

    @property
    def capacities(self) -> np.ndarray:
        """Slots per PE (read-only int64 array of length ``k``)."""
        return self._capacities

    @property
    def total_slots(self) -> int:
        return int(self._capacities.sum())

    @property
    def labels(self) -> tuple | None:
        """Names of the PEs, if the matrix came from a named source (networkx)."""
        return self._labels

    def __repr__(self) -> str:
        slots = "" if self.total_slots == self.k else f", {self.total_slots} slots"
        return f"DistanceMatrix(k={self.k}{slots})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, DistanceMatrix):
            return NotImplemented
        return (np.array_equal(self._matrix, other._matrix)
                and np.array_equal(self._capacities, other._capacities)
                and self._labels == other._labels)

    __hash__ = None  # mutable-looking contents (arrays): not hashable, like ndarray

    # ------------------------------------------------------------ distances
    def distance(self, p, q) -> np.ndarray:
        """``D(p, q)`` for PE ids ``p``, ``q`` (vectorised, broadcasting)."""
        return self._matrix[np.asarray(p, dtype=np.int64), np.asarray(q, dtype=np.int64)]

    def distance_matrix(self) -> np.ndarray:
        """The ``k x k`` matrix itself (read-only float64; copy it to modify)."""
        return self._matrix

    def with_capacities(self, capacities) -> "DistanceMatrix":
        """The same machine with other capacities (the matrix is shared)."""
        return DistanceMatrix._trusted(self._matrix, _validate_capacities(capacities, self.k), self._labels)

    # --------------------------------------------------------- constructors
    @classmethod
    def from_hierarchy(cls, hierarchy: Hierarchy) -> "DistanceMatrix":
        """The explicit form of a hierarchy (small ``k`` only: ``k^2`` floats)."""
        return cls._trusted(np.ascontiguousarray(hierarchy.distance_matrix(), dtype=np.float64),
                            hierarchy.capacities, None)

    @classmethod
    def from_file(cls, path: str | os.PathLike, capacities=None) -> "DistanceMatrix":
        """Read a dense matrix from ``.npy`` or text.

        Text: one row a line, values separated by white space and/or commas;
        blank lines and ``#`` comments are skipped. Every row must have as many
        values as there are rows, and numbers are written in ASCII. A ``.npy``
        header is checked (square, numeric, no more than ``MAX_PES`` rows, as many
        bytes as it promises) before the data is loaded. :class:`TopologyError`
        names the file and line; ``OSError`` propagates when a text file cannot be
        opened (a ``.npy`` file that cannot be read is a :class:`TopologyError`).
        """
        path_str = os.fspath(path)
        if path_str.endswith(".npy"):
            _check_npy_header(path_str)
            try:
                data = np.load(path_str, allow_pickle=False)
            except ValueError as exc:
                raise TopologyError(f"{path_str}: not a readable .npy array ({exc})") from None
            d = _validate_matrix(data, where=path_str)
        else:
            try:
                rows, row_lines = _read_text_rows(path_str)
            except UnicodeDecodeError:
                raise TopologyError(f"{path_str}: not a text file (and not .npy)") from None
            d = _validate_matrix(np.vstack(rows), where=path_str, row_lines=row_lines)
        return cls._trusted(d, _validate_capacities(capacities, d.shape[0]), None)

    @classmethod
    def from_networkx(cls, G, pes: Iterable[Hashable] | None = None, weight="weight",
                      capacities=None) -> "DistanceMatrix":
        """Distances as weighted shortest-path lengths in a network graph.

        Parameters
        ----------
        G : networkx.Graph
            Undirected (multi)graph; switches and routers may be nodes too.
        pes : iterable of nodes, optional
            The nodes that are PEs, in PE order. Default: all nodes, sorted.
        weight : str, callable or None
            Edge attribute holding the link cost (missing attribute = 1), as in
            networkx; ``None`` counts hops.

        Raises
        ------
        TopologyError
            For a directed graph, unknown or repeated PEs, negative or non-finite
            link costs, or PEs that are not connected to each other.
        """
        import networkx as nx  # imported here: only this constructor needs it

        if G.is_directed():
            raise TopologyError("network graph is directed; distances must be symmetric "
                                "(pass G.to_undirected())")
        if pes is None:
            try:
                pes = sorted(G.nodes)
            except TypeError:
                raise TopologyError("network graph nodes cannot be sorted; pass pes= "
                                    "to give the PE order") from None
        else:
            pes = list(pes)
        if not pes:
            raise TopologyError("network graph has no PEs")
        index: dict = {}
        for i, node in enumerate(pes):
            if node not in G:
                raise TopologyError(f"PE {_show(node)} is not a node of the network graph")
            if node in index:
                raise TopologyError(f"PE {_show(node)} is listed twice")
            index[node] = i
        if isinstance(weight, str):
            # Dijkstra is wrong with negative costs and networkx reports it only
            # in some cases; check every link up front.
            for u, v, w in G.edges(data=weight, default=1):
                try:
                    ok = np.isfinite(float(w)) and float(w) >= 0
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    raise TopologyError(f"link {_show(u)}-{_show(v)} has {weight}={_show(w)}; "
                                        "link costs must be finite numbers >= 0")
        k = len(pes)
        d = np.empty((k, k), dtype=np.float64)
        for i, src in enumerate(pes):
            lengths = nx.single_source_dijkstra_path_length(G, src, weight=weight)
            for j, dst in enumerate(pes):
                try:
                    d[i, j] = lengths[dst]
                except KeyError:
                    raise TopologyError(f"PEs {_show(src)} and {_show(dst)} are not connected "
                                        "in the network graph") from None
        d = _validate_matrix(d)
        return cls._trusted(d, _validate_capacities(capacities, k), tuple(pes))


def _check_npy_header(path: str) -> None:
    """Refuse a ``.npy`` distance matrix from its header alone: np.load would
    allocate whatever shape the header declares before finding the data missing."""
    try:
        shape, dtype, _ = npy_header(path)
    except InputError as exc:  # the header check names the file already
        raise TopologyError(str(exc)) from None
    if dtype.kind not in "biuf":
        raise TopologyError(f"{path}: distance matrix has dtype {dtype}, expected numbers")
    if len(shape) != 2 or shape[0] != shape[1]:
        raise TopologyError(f"{path}: distance matrix must be square (k x k), got shape {shape}")
    check_pes(shape[0], f"{path}: distance matrix")


_SPLIT = re.compile(r"[\s,]+")


def _read_text_rows(path: str) -> tuple[list[np.ndarray], list[int]]:
    rows: list[np.ndarray] = []
    row_lines: list[int] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.split("#", 1)[0].strip().strip(",")
            if not line:
                continue
            tokens = _SPLIT.split(line)
            if not line.isascii() or "_" in line:
                # numpy, like float(), reads "1_0" as 10 and fullwidth digits as digits.
                bad = next(t for t in tokens if not t.isascii() or "_" in t)
                raise TopologyError(f"{path}:{lineno}: {bad!r} is not a number in digits 0-9")
            try:
                # numpy parses the strings in C: fast enough for k ~ 10^4 rows.
                row = np.array(tokens, dtype=np.float64)
            except ValueError:
                bad = next(t for t in tokens if not _is_float(t))
                raise TopologyError(f"{path}:{lineno}: {bad!r} is not a number") from None
            if rows and row.size != rows[0].size:
                raise TopologyError(f"{path}:{lineno}: expected {rows[0].size} values like the "
                                    f"first row, got {row.size}")
            rows.append(row)
            row_lines.append(lineno)
    if not rows:
        raise TopologyError(f"{path}: no distance rows")
    if len(rows) != rows[0].size:
        raise TopologyError(f"{path}:{row_lines[-1]}: distance matrix has {len(rows)} rows of "
                            f"{rows[0].size} values; it must be square")
    return rows, row_lines


def _is_float(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


#: What engines accept as a machine.
Topology = Union[Hierarchy, DistanceMatrix]


def is_hierarchy(topology: object) -> bool:
    """True for a :class:`Hierarchy` (distances by digit arithmetic, no matrix).

    Engines use it to pick the hierarchical fast path (``hm``'s multisection,
    level-wise traffic reports) over the general matrix lookup.
    """
    return isinstance(topology, Hierarchy)
