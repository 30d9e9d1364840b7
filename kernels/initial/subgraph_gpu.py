"""Subgraph extraction on the GPU: the CUDA twin of :mod:`procmap.kernels.initial.subgraph_cpu`.

Same output as the CPU twin, value for value (only integer bookkeeping and copies,
nothing is summed): for every block ``b`` of ``part``, the induced subgraph with
local ids ``0..n_b-1`` in increasing global order and every row in its original
order, plus the global ids of its members.

How it differs from the CPU loop (which walks the vertices block by block): the
vertex order comes from a stable ``cp.argsort`` of ``part`` (stable, so members stay
in id order), the kept entries are flagged and counted by per-entry kernels
(``initial/subgraph.cu``) and two scans, and every kept entry is copied straight to its
place. All blocks live in one concatenated CSR; ``blocks[b]`` holds views into it.
One host read (``k + 1`` block starts and their edge offsets) is needed to slice it.
"""
from __future__ import annotations

import cupy as cp

from ..gpu_common import as_device, i64, kernel, launch

__all__ = ["extract_subgraphs", "internal_edges"]

_CU = "initial/subgraph.cu"


def internal_edges(xadj, adjncy, adjwgt, part):
    """The CSR without the edges between different blocks of ``part`` (GPU twin of
    :func:`.subgraph_cpu.internal_edges`, equal value for value): ``(xadj int64,
    adjncy, adjwgt)``, the last two of their input dtypes.

    Scratch: a flag and a running count per CSR entry (9 bytes), besides the result.
    """
    xadj = as_device(xadj, cp.int64)
    adjncy = as_device(adjncy, cp.int32)
    adjwgt = as_device(adjwgt)
    part = as_device(part, cp.int64)
    n, m2 = part.size, adjncy.size
    keep = cp.empty(m2, dtype=cp.uint8)
    launch(kernel(_CU, "subgraph_keep"), m2, i64(n), i64(m2), xadj, adjncy, part, keep)
    kept_before = cp.zeros(m2 + 1, dtype=cp.int64)
    cp.cumsum(keep, dtype=cp.int64, out=kept_before[1:])
    kept = int(kept_before[-1])
    words = _word_weights(adjwgt)
    out_adjncy = cp.empty(kept, dtype=cp.int32)
    out_words = cp.empty(kept, dtype=words.dtype)
    launch(kernel(_CU, "internal_fill"), m2, i64(m2), adjncy, words, keep, kept_before,
           out_adjncy, out_words)
    return kept_before[xadj], out_adjncy, out_words.astype(adjwgt.dtype, copy=False)


def _word_weights(adjwgt: cp.ndarray) -> cp.ndarray:
    """Edge weights as 8-byte words for the raw copy (int64 / float64 need no copy)."""
    if adjwgt.dtype.itemsize != 8:
        adjwgt = adjwgt.astype(cp.float64 if adjwgt.dtype.kind == "f" else cp.int64)
    return adjwgt


def extract_subgraphs(xadj, adjncy, adjwgt, vwgt, part, k: int):
    """Induced subgraphs of the ``k`` blocks of ``part`` (GPU twin of
    :func:`subgraph_cpu.extract_subgraphs`).

    Returns ``(blocks, members)``: ``blocks[b] = (xadj, adjncy, adjwgt, vwgt)`` of
    block ``b`` as CuPy arrays (int64 / int32 / ``adjwgt.dtype`` / ``vwgt.dtype``),
    local ids in increasing global order, rows in their original order; and
    ``members[b]`` the global ids of its vertices (CuPy int64). Assumes
    ``xadj[0] == 0``, ``xadj[n] == adjncy.size`` and ``0 <= part < k``.
    """
    k = int(k)
    xadj = as_device(xadj, cp.int64)
    adjncy = as_device(adjncy, cp.int32)
    adjwgt = as_device(adjwgt)
    vwgt = as_device(vwgt)
    part = as_device(part, cp.int64)
    n, m2 = part.size, adjncy.size

    order = cp.argsort(part)  # stable: block by block, ids increasing within a block
    # block starts by binary search in the sorted labels (cp.bincount would read
    # the label range back to the host twice)
    vstart = cp.searchsorted(part[order], cp.arange(k + 1, dtype=cp.int64))
    pos = cp.empty(n, dtype=cp.int64)  # position of every vertex in ``order``
    pos[order] = cp.arange(n, dtype=cp.int64)
    local = (pos - vstart[part]).astype(cp.int32)

    keep = cp.empty(m2, dtype=cp.uint8)
    launch(kernel(_CU, "subgraph_keep"), m2, i64(n), i64(m2), xadj, adjncy, part, keep)
    kept_before = cp.zeros(m2 + 1, dtype=cp.int64)
    kept_before[1:] = cp.cumsum(keep, dtype=cp.int64)
    kept_deg = kept_before[xadj[1:]] - kept_before[xadj[:-1]]
    # rows of all blocks back to back, in ``order``; block b's rows are
    # rowstart[vstart[b] : vstart[b+1] + 1]
    rowstart = cp.zeros(n + 1, dtype=cp.int64)
    rowstart[1:] = cp.cumsum(kept_deg[order])
    del kept_deg

    host = cp.concatenate((vstart, rowstart[vstart])).get()  # the one synchronisation
    vs, es = host[:k + 1], host[k + 1:]
    words = _word_weights(adjwgt)
    sub_adjncy = cp.empty(int(es[k]), dtype=cp.int32)
    sub_words = cp.empty(int(es[k]), dtype=words.dtype)
    launch(kernel(_CU, "subgraph_fill"), m2, i64(n), i64(m2), xadj, adjncy,
           words.view(cp.uint64), keep, kept_before, pos, local, rowstart, sub_adjncy,
           sub_words.view(cp.uint64))
    sub_adjwgt = sub_words.astype(adjwgt.dtype, copy=False)

    blocks, members = [], []
    for b in range(k):
        v0, v1, e0, e1 = int(vs[b]), int(vs[b + 1]), int(es[b]), int(es[b + 1])
        ids = order[v0:v1]
        rows = rowstart[v0:v1 + 1] - e0
        blocks.append((rows, sub_adjncy[e0:e1], sub_adjwgt[e0:e1], vwgt[ids]))
        members.append(ids)
    return blocks, members
