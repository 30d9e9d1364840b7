"""The communication graph: a symmetric task graph in CSR form (docs/design.md section 2).

Conventions
-----------
* ``C`` is stored symmetrised: entry ``(i, j)`` holds ``C_ij + C_ji`` of the input,
  so an undirected edge appears twice in ``adjncy`` (once from each endpoint).
* Self loops are dropped (a task talking to itself costs nothing), duplicates are
  merged (summed), explicit zeros are dropped.
* Edge weights are ``int64`` when every input weight is integral, else ``float64``;
  they are finite and ``>= 0``. Vertex weights are ``int64`` and ``>= 0``.
* Totals fit (docs/design.md section 10): the total edge weight (both directions,
  duplicates summed) and the total vertex weight are at most ``2^63 - 1``; a float
  total edge weight is finite. The constructors check this before summing anything,
  so no CSR entry and no total can wrap.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .limits import INT64_MAX, check_total, exact_sum

#: :meth:`CommGraph.from_edges` merges up to this many entries with NumPy alone (a sort
#: of ``u * n + v`` keys); larger inputs go through scipy.sparse, whose counting
#: conversion is faster there but is slow to import, a cost the launcher commands
#: and ``eval`` on small jobs should not pay.
NUMPY_MERGE_MAX_ENTRIES = 1 << 18

_INT_EXACT = 2.0 ** 53  # float64 holds every integer up to here exactly


def _plain(value) -> int | float:
    """A numpy scalar as a Python number, for messages (``5``, not ``np.int64(5)``)."""
    return int(value) if np.asarray(value).dtype.kind in "iub" else float(value)


def _weights_dtype(values: np.ndarray) -> np.ndarray:
    """Validate edge weights and return them as int64 (all integral) or float64."""
    values = np.asarray(values)
    if values.dtype == np.bool_:
        values = values.astype(np.int64)
    if values.dtype.kind not in "iuf":
        raise InputError(f"edge weights must be numbers, got dtype {values.dtype}")
    if values.dtype.kind == "f" and values.dtype != np.float64:
        # float16 compared with 2^53 would overflow (a numpy warning); longdouble
        # beyond float64 becomes inf here and is reported as not finite below
        with np.errstate(over="ignore"):
            values = values.astype(np.float64)
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"edge weight {float(values[i])} is not finite (entry {i})")
    if values.size and values.min() < 0:
        i = int(np.argmin(values))
        raise InputError(f"negative edge weight {_plain(values[i])} (entry {i})")
    if values.dtype.kind == "f":
        if values.size == 0 or (np.all(values == np.floor(values)) and values.max() < _INT_EXACT):
            return values.astype(np.int64)
        return values
    if values.dtype == np.uint64 and values.size and values.max() > INT64_MAX:
        i = int(np.argmax(values))
        raise InputError(f"edge weight {int(values[i]):,} (entry {i}) exceeds the int64 range "
                         f"(at most {INT64_MAX:,})")
    return values.astype(np.int64, copy=False)


def _vertex_weights(vwgt, n: int) -> np.ndarray:
    if vwgt is None:
        return np.ones(n, dtype=np.int64)
    vwgt = np.asarray(vwgt)
    if vwgt.shape != (n,):
        raise InputError(f"vertex weights have shape {tuple(int(d) for d in vwgt.shape)}, "
                         f"expected ({n},)")
    if vwgt.dtype.kind == "f":
        if not np.all(np.isfinite(vwgt)) or not np.all(vwgt == np.floor(vwgt)):
            raise InputError("vertex weights must be finite integers")
    elif vwgt.dtype.kind not in "iub":
        raise InputError(f"vertex weights must be integers, got dtype {vwgt.dtype}")
    # the cast to int64 would wrap (float(INT64_MAX) is 2^63, itself out of range)
    if n and (vwgt.max() >= 2.0**63 if vwgt.dtype.kind == "f" else
              vwgt.dtype.kind == "u" and vwgt.max() > INT64_MAX):
        i = int(np.argmax(vwgt))
        raise InputError(f"vertex weight {_plain(vwgt[i]):,} (task {i}) exceeds the int64 range "
                         f"(at most {INT64_MAX:,})")
    vwgt = vwgt.astype(np.int64)
    if n and vwgt.min() < 0:
        raise InputError(f"negative vertex weight {int(vwgt.min())} (task {int(np.argmin(vwgt))})")
    check_total(exact_sum(vwgt), "total vertex weight")
    return vwgt


def _asymmetry(u: int, v: int, cuv, cvu) -> InputError:
    """The error naming an asymmetric pair: ``C[u,v] = cuv`` but ``C[v,u] = cvu``."""
    return InputError(f"asymmetric weights: C[{u},{v}] = {cuv} but C[{v},{u}] = {cvu}")


def _asymmetry_error(key: np.ndarray, weight: np.ndarray, n: int, bad: np.ndarray) -> InputError:
    """The error for an asymmetric matrix given as sorted unique ``u * n + v`` keys:
    names the first asymmetric pair in row-major order, as ``C[u,v]`` and ``C[v,u]``."""
    u, v = key[bad] // n, key[bad] % n
    first = int(np.minimum(u * n + v, v * n + u).min())
    a, b = divmod(first, n)

    def entry(i: int, j: int):
        at = int(np.searchsorted(key, i * n + j))
        found = at < key.size and key[at] == i * n + j
        return weight[at] if found else weight.dtype.type(0)

    return _asymmetry(a, b, entry(a, b), entry(b, a))


def _merge_numpy(src, dst, weights, n: int, *, add_transpose: bool, check_symmetric: bool):
    """``(xadj, adjncy, adjwgt)`` of the entries with duplicates summed and zeros
    dropped, rows sorted; ``C + C^T`` when ``add_transpose``. Raises on an asymmetric
    matrix when ``check_symmetric``. NumPy only (see ``NUMPY_MERGE_MAX_ENTRIES``)."""
    key = src * n + dst
    order = np.argsort(key, kind="stable")
    key, weights = key[order], weights[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else order[:0]
    weights = np.add.reduceat(weights, first) if key.size else weights
    key = key[first]
    if add_transpose:  # float: C and C^T merged once more; a + b == b + a exactly
        both = np.concatenate([key, (key % n) * n + key // n])
        order = np.argsort(both, kind="stable")
        both, weights = both[order], np.concatenate([weights, weights])[order]
        first = np.flatnonzero(np.r_[True, both[1:] != both[:-1]]) if both.size else order[:0]
        weights = np.add.reduceat(weights, first) if both.size else weights
        key = both[first]
    nonzero = weights != 0
    key, weights = key[nonzero], weights[nonzero]
    if check_symmetric and key.size:
        mirror = (key % n) * n + key // n
        at = np.minimum(np.searchsorted(key, mirror), key.size - 1)
        bad = np.flatnonzero((key[at] != mirror) | (weights[at] != weights))
        if bad.size:
            raise _asymmetry_error(key, weights, n, bad)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // n, minlength=n), out=xadj[1:])
    return xadj, (key % n).astype(np.int32), weights


def _merge_scipy(src, dst, weights, n: int, *, add_transpose: bool, check_symmetric: bool):
    """:func:`_merge_numpy` through scipy.sparse (a counting conversion: faster on
    large inputs)."""
    import scipy.sparse as sp

    mat = sp.coo_matrix((weights, (src, dst)), shape=(n, n)).tocsr()
    mat.sum_duplicates()
    if add_transpose:
        mat = (mat + mat.T).tocsr()  # x + y == y + x: the result is exactly symmetric
    if check_symmetric:
        diff = abs(mat - mat.T)
        if diff.nnz and diff.max() != 0:
            coo = diff.tocoo()
            i = int(np.argmax(coo.data != 0))
            u, v = int(coo.row[i]), int(coo.col[i])
            raise _asymmetry(u, v, mat[u, v], mat[v, u])
    mat.eliminate_zeros()
    mat.sort_indices()
    return mat.indptr.astype(np.int64), mat.indices.astype(np.int32), mat.data


@dataclass(eq=False)
class CommGraph:
    """Symmetric communication graph of ``n`` tasks in CSR form.

    Attributes
    ----------
    xadj : ndarray of int64, shape (n + 1,)
        Row pointers: the neighbours of task ``u`` are ``adjncy[xadj[u]:xadj[u+1]]``.
    adjncy : ndarray of int32, shape (2m,)
        Neighbour ids, sorted within each row.
    adjwgt : ndarray of int64 or float64, shape (2m,)
        Communication volume of each directed CSR entry (bytes, messages, ...:
        whatever unit the input used). Entry (u, v) equals entry (v, u).
    vwgt : ndarray of int64, shape (n,)
        Task weights (1 unless given); used for balance in partition mapping.

    Use the ``from_*`` constructors; the bare constructor trusts its arguments.
    """

    xadj: np.ndarray
    adjncy: np.ndarray
    adjwgt: np.ndarray
    vwgt: np.ndarray
    _edge_sources: np.ndarray | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_scipy(cls, matrix, vwgt=None, *, symmetric: bool = False) -> "CommGraph":
        """Build from a square scipy sparse matrix ``C`` (row = sender, column = receiver).

        ``C + C^T`` is stored unless ``symmetric=True``, which states that ``matrix``
        already is the symmetric graph (as in METIS files) and checks it is.
        """
        import scipy.sparse as sp

        if not sp.issparse(matrix):
            raise InputError("expected a scipy sparse matrix")
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise InputError("communication matrix must be square, got shape "
                             f"{tuple(int(d) for d in matrix.shape)}")
        coo = matrix.tocoo()
        return cls.from_edges(coo.row, coo.col, coo.data, n=matrix.shape[0], vwgt=vwgt,
                              symmetric=symmetric)

    @classmethod
    def from_dense(cls, array, vwgt=None) -> "CommGraph":
        """Build from a dense ``n x n`` array ``C`` (row = sender); stores ``C + C^T``."""
        array = np.asarray(array)
        if array.ndim != 2 or array.shape[0] != array.shape[1]:
            raise InputError(f"communication matrix must be square, got shape {array.shape}")
        weights = _weights_dtype(array.ravel())  # validates NaN / negative on the full matrix
        rows, cols = np.nonzero(weights.reshape(array.shape))
        return cls.from_edges(rows, cols, weights.reshape(array.shape)[rows, cols],
                              n=array.shape[0], vwgt=vwgt)

    @classmethod
    def from_edges(cls, src, dst, weights=None, *, n: int | None = None, vwgt=None,
                   symmetric: bool = False) -> "CommGraph":
        """Build from directed entries ``src[e] -> dst[e]`` with volume ``weights[e]``.

        Entries are summed into ``C + C^T`` (so listing both directions of a pair adds
        both volumes). ``n`` defaults to ``max id + 1``. With ``symmetric=True`` the
        entries must already describe a symmetric matrix, which is stored as is.
        """
        src = np.asarray(src).ravel()
        dst = np.asarray(dst).ravel()
        if src.shape != dst.shape:
            raise InputError("src and dst have different lengths")
        for name, ids in (("source", src), ("destination", dst)):
            if ids.size and ids.dtype.kind == "f" and not np.all(ids == np.floor(ids)):
                raise InputError(f"{name} task ids must be integers")
            if ids.size and ids.dtype.kind not in "iuf":
                raise InputError(f"{name} task ids must be integers")
        src = src.astype(np.int64, copy=False)
        dst = dst.astype(np.int64, copy=False)
        weights = (np.ones(src.size, dtype=np.int64) if weights is None
                   else _weights_dtype(np.asarray(weights).ravel()))
        if weights.shape != src.shape:
            raise InputError("weights and ids have different lengths")
        if n is None:
            n = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
        if src.size:
            lo = min(src.min(), dst.min())
            hi = max(src.max(), dst.max())
            if lo < 0:
                raise InputError(f"negative task id {int(lo)}")
            if hi >= n:
                raise InputError(f"task id {int(hi)} out of range for {n} tasks")
        if n >= 2**31 - 1:
            raise InputError(f"{n} tasks exceed the int32 id range")
        keep = src != dst
        if not keep.all():
            src, dst, weights = src[keep], dst[keep], weights[keep]
        # Every stored entry is a sum of input weights, so a total that fits means no
        # merged duplicate (and no later total) can wrap.
        check_total(exact_sum(weights) * (1 if symmetric else 2),
                    "total edge weight (both directions, duplicates summed)")
        exact = weights.dtype.kind == "i"
        if not symmetric and exact:
            # C + C^T in one conversion: both directions of every entry, summed by tocsr.
            # Only for integers: float sums in another order would differ in the last bit
            # between (u, v) and (v, u).
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            weights = np.concatenate([weights, weights])
        merge = _merge_numpy if src.size <= NUMPY_MERGE_MAX_ENTRIES else _merge_scipy
        xadj, adjncy, adjwgt = merge(src, dst, weights, n, add_transpose=not symmetric and not exact,
                                     check_symmetric=symmetric)
        return cls(xadj=xadj, adjncy=adjncy, adjwgt=_weights_dtype(adjwgt),
                   vwgt=_vertex_weights(vwgt, n))

    # ------------------------------------------------------------- properties
    @property
    def n(self) -> int:
        """Number of tasks."""
        return int(self.xadj.size - 1)

    @property
    def num_directed_edges(self) -> int:
        """Number of CSR entries, ``2m``."""
        return int(self.adjncy.size)

    @property
    def m(self) -> int:
        """Number of undirected edges (each counted once)."""
        return self.num_directed_edges // 2

    def keep_totals(self, *, edge: int | None = None, vertex: int | None = None
                    ) -> "CommGraph":
        """Record totals a reader has already computed exactly (in its validation
        pass), so that :attr:`total_edge_weight` and :attr:`total_vertex_weight` need
        no second pass over the arrays. ``None`` leaves a total to be computed; the
        values must be what those properties would return. Returns ``self``."""
        cached = vars(self)
        if edge is not None:
            cached.setdefault("total_edge_weight", int(edge))
        if vertex is not None:
            cached.setdefault("total_vertex_weight", int(vertex))
        return self

    @functools.cached_property
    def total_vertex_weight(self) -> int:
        """Sum of the task weights, an exact ``int`` (computed once: a graph's arrays
        are not modified after construction)."""
        return exact_sum(self.vwgt)

    @functools.cached_property
    def total_edge_weight(self) -> float | int:
        """Sum of ``adjwgt`` over all CSR entries (each undirected edge twice); an exact
        ``int`` for integer weights (never wrapped, even for a graph built by hand);
        computed once, as :attr:`total_vertex_weight`."""
        return exact_sum(self.adjwgt)

    def edge_sources(self) -> np.ndarray:
        """Source task of every CSR entry (the extended CSR of the GPU-IM paper), int32."""
        if self._edge_sources is None:
            degrees = np.diff(self.xadj)
            self._edge_sources = np.repeat(np.arange(self.n, dtype=np.int32), degrees)
        return self._edge_sources

    def degrees(self) -> np.ndarray:
        return np.diff(self.xadj)

    # ------------------------------------------------------------ conversion
    def to_scipy(self):
        """The symmetric matrix as ``scipy.sparse.csr_matrix`` (both triangles)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.adjwgt, self.adjncy, self.xadj), shape=(self.n, self.n))

    def with_num_tasks(self, n: int) -> "CommGraph":
        """Return the graph padded with isolated tasks (weight 1) up to ``n`` tasks."""
        if n < self.n:
            raise InputError(f"cannot shrink a graph of {self.n} tasks to {n}")
        if n == self.n:
            return self
        extra = n - self.n
        xadj = np.concatenate([self.xadj, np.full(extra, self.xadj[-1], dtype=np.int64)])
        vwgt = _vertex_weights(np.concatenate([self.vwgt, np.ones(extra, dtype=np.int64)]), n)
        return CommGraph(xadj, self.adjncy, self.adjwgt, vwgt)

    def same_as(self, other: "CommGraph") -> bool:
        """Structural equality: same CSR arrays, weights and vertex weights."""
        return (np.array_equal(self.xadj, other.xadj) and np.array_equal(self.adjncy, other.adjncy)
                and np.array_equal(self.adjwgt, other.adjwgt) and np.array_equal(self.vwgt, other.vwgt))

    def __repr__(self) -> str:
        return (f"CommGraph(n={self.n}, m={self.m}, edge weights {self.adjwgt.dtype}, "
                f"total vertex weight {self.total_vertex_weight})")
