"""CUDA kernels for the mapping objective (GPU twins of :mod:`.objective_cpu`).

Same functions and semantics as the CPU module, taking CuPy arrays (``xadj`` int64,
``adjncy`` int32, ``adjwgt`` int64 or float64, ``pe`` int32, ``vwgt`` int64);
``prefix`` and ``dist`` may be NumPy or CuPy. Every CSR entry ``(u, v)`` is visited
once, so each undirected edge counts twice (docs/design.md section 3).

Reductions (``objective/objective.cu``)
----------------------------------
No float atomics: the vertices are dealt to ``R = min(n, 2**18)`` rows, row ``r``
sums vertices ``r, r + R, ...`` sequentially in one thread, and a CuPy reduction adds
the rows. The result depends on ``n`` only, so it is deterministic.

Relation to the CPU twin
------------------------
* Integer weights: :func:`level_traffic` and :func:`pe_loads` are exactly the CPU's
  (integer sums do not depend on the order).
* Float weights: :func:`level_traffic` and :func:`matrix_cost` add the same terms in
  another order than the CPU's chunks (which are sized for a few CPU threads, not
  for thousands of GPU threads), so they agree to rounding, not bit for bit.
  ``matrix_cost`` rounds each product before adding it (no fused multiply-add),
  as the CPU does.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from ..gpu_common import HISTOGRAM_BLOCKS, as_device, i64, kernel, launch

_SRC = "objective/objective.cu"
#: Rows of the deterministic partial sums: enough threads to fill a GPU, few enough
#: that the row sums cost little memory.
MAX_ROWS = 1 << 18


def _rows(n: int) -> int:
    return max(1, min(int(n), MAX_ROWS))


def _weights(adjwgt) -> cp.ndarray:
    """``adjwgt`` as int64 or float64 (the two compiled variants)."""
    a = cp.asarray(adjwgt)
    return as_device(a, cp.float64 if a.dtype.kind == "f" else cp.int64)


def _suffix(adjwgt: cp.ndarray) -> str:
    return "f64" if adjwgt.dtype == cp.float64 else "i64"


def level_traffic_device(xadj, adjncy, adjwgt, pe, prefix) -> cp.ndarray:
    """:func:`level_traffic`, left on the device (no synchronisation)."""
    xadj, adjncy = as_device(xadj, cp.int64), as_device(adjncy, cp.int32)
    adjwgt, pe = _weights(adjwgt), as_device(pe, cp.int32)
    prefix = as_device(prefix, cp.int64)
    n = xadj.size - 1
    rows = _rows(n)
    out = cp.zeros((prefix.size + 1, rows), dtype=adjwgt.dtype)
    launch(kernel(_SRC, "level_traffic_" + _suffix(adjwgt)), rows,
           xadj, adjncy, adjwgt, pe, prefix, i64(n), i64(rows), out)
    return out.sum(axis=1)


def level_traffic(xadj, adjncy, adjwgt, pe, prefix) -> np.ndarray:
    """Traffic per hierarchy level, both directions counted (host array).

    ``T[0]`` is the volume between tasks on the same PE, ``T[t]`` the volume between
    PEs whose deepest common group is at level ``t``; length ``l + 1``, in
    ``adjwgt``'s dtype (int64 or float64). ``J = sum_t d_t * T[t]``.
    """
    return level_traffic_device(xadj, adjncy, adjwgt, pe, prefix).get()


def matrix_cost(xadj, adjncy, adjwgt, pe, dist) -> tuple[float, float]:
    """``(J, off-PE volume)`` for an explicit ``k x k`` distance matrix, both directions."""
    xadj, adjncy = as_device(xadj, cp.int64), as_device(adjncy, cp.int32)
    adjwgt, pe = _weights(adjwgt), as_device(pe, cp.int32)
    dist = as_device(dist, cp.float64)
    n = xadj.size - 1
    rows = _rows(n)
    out = cp.zeros((2, rows), dtype=cp.float64)
    launch(kernel(_SRC, "matrix_cost_" + _suffix(adjwgt)), rows,
           xadj, adjncy, adjwgt, pe, dist, i64(dist.shape[0]), i64(n), i64(rows), out)
    j, cut = out.sum(axis=1).get()
    return float(j), float(cut)


def pe_loads(pe, vwgt, k: int) -> tuple[cp.ndarray, cp.ndarray]:
    """Per-PE total task weight and task count (CuPy int64 arrays of length ``k``)."""
    pe, vwgt = as_device(pe, cp.int32), as_device(vwgt, cp.int64)
    loads = cp.zeros(int(k), dtype=cp.int64)
    counts = cp.zeros(int(k), dtype=cp.int64)
    launch(kernel(_SRC, "pe_loads"), pe.size, pe, vwgt, i64(pe.size), i64(k), loads, counts,
           max_blocks=HISTOGRAM_BLOCKS)
    return loads, counts
