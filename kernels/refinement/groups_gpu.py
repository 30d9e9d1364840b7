"""Placing the vertices a group refinement moved onto PEs of their new group on the GPU:
the CUDA twin of :mod:`.groups_cpu` (same rule, same result, value for value; one
thread per vertex, ``refinement/groups.cu``)."""
from __future__ import annotations

import cupy as cp

from ..gpu_common import as_device, i64, kernel, launch
from .groups_cpu import MAX_CANDIDATES, least_loaded
from .jet_gpu import block_weights

__all__ = ["place_in_groups"]


def place_in_groups(xadj, adjncy, adjwgt, vwgt, pes, groups, size: int, k: int) -> cp.ndarray:
    """Task -> PE (int32, on the device) with task ``u`` on a PE of group ``groups[u]``
    (GPU twin of :func:`.groups_cpu.place_in_groups`)."""
    pes = as_device(pes, cp.int32)
    groups = as_device(groups, cp.int32)
    out = cp.empty_like(pes)
    least = least_loaded(block_weights(pes, as_device(vwgt), k), size, xp=cp)
    launch(kernel("refinement/groups.cu", "place_in_groups"), pes.size, i64(pes.size),
           as_device(xadj, cp.int64), as_device(adjncy, cp.int32),
           as_device(adjwgt, cp.float64), pes, groups, i64(size), least,
           i64(MAX_CANDIDATES), out)
    return out
