"""Subgraph extraction (paper Algorithm 1): split a graph into the subgraphs induced
by the blocks of a partition, all blocks at once.

Output is one concatenated CSR per block, addressed by offsets, so the engines can
recurse into block b without copying the parent graph. :func:`internal_edges` keeps the
blocks' subgraphs in place instead (the graph without its cut edges), for V-cycles that
coarsen inside the blocks.
"""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def _fill(xadj, adjncy, adjwgt, part, local, order, vstart, sub_xadj, sub_adjncy, sub_adjwgt):
    # vertices are visited block by block (``order``), so every block's rows are
    # contiguous and its edges can be appended in one sweep
    e_out = 0
    for i in range(order.size):
        u = order[i]
        b = part[u]
        sub_xadj[i + b] = e_out  # block b's CSR starts at row offset vstart[b] + b
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            if part[v] == b:
                sub_adjncy[e_out] = local[v]
                sub_adjwgt[e_out] = adjwgt[e]
                e_out += 1
        # close the block's CSR after its last vertex
        if i + 1 == order.size or part[order[i + 1]] != b:
            sub_xadj[i + b + 1] = e_out
    return e_out


def extract_subgraphs(xadj, adjncy, adjwgt, vwgt, part, k: int):
    """Induced subgraphs of the ``k`` blocks of ``part``.

    Returns ``(blocks, members)``: ``blocks[b] = (xadj, adjncy, adjwgt, vwgt)`` of
    block ``b`` with local vertex ids ``0..n_b-1`` in increasing global order, and
    ``members[b]`` the global ids of its vertices (int64), so that
    ``members[b][i]`` is local vertex ``i``. Edge-row order is preserved, so rows
    stay sorted.
    """
    part = np.asarray(part, dtype=np.int64)
    order = np.argsort(part, kind="stable")  # stable: members stay in global order
    sizes = np.bincount(part, minlength=k)
    vstart = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=vstart[1:])
    local = np.empty(part.size, dtype=np.int32)
    local[order] = (np.arange(part.size) - vstart[part[order]]).astype(np.int32)
    # the subgraphs hold at most all edges; trimmed below
    sub_xadj = np.zeros(part.size + k, dtype=np.int64)
    sub_adjncy = np.empty(adjncy.size, dtype=np.int32)
    sub_adjwgt = np.empty(adjncy.size, dtype=adjwgt.dtype)
    _fill(xadj, adjncy, adjwgt, part, local, order, vstart, sub_xadj, sub_adjncy, sub_adjwgt)
    blocks, members = [], []
    for b in range(k):
        rows = sub_xadj[vstart[b] + b: vstart[b + 1] + b + 1]
        if sizes[b] == 0:
            rows = np.zeros(1, dtype=np.int64)
        else:
            rows = rows.copy()
        lo, hi = int(rows[0]), int(rows[-1])
        ids = order[vstart[b]:vstart[b + 1]]
        blocks.append((rows - lo, sub_adjncy[lo:hi], sub_adjwgt[lo:hi], vwgt[ids]))
        members.append(ids)
    return blocks, members


# ------------------------------------------------------- V-cycle edge filter
# The blocks' subgraphs without extracting them: V-cycles coarsen inside the blocks.
@nb.njit(parallel=True, cache=True, nogil=True)
def _count_internal(xadj, adjncy, part, nxadj):
    for u in nb.prange(xadj.size - 1):
        pu = part[u]
        k = 0
        for e in range(np.uint64(xadj[u]), np.uint64(xadj[u + 1])):
            k += part[np.uint64(adjncy[e])] == pu
        nxadj[u + 1] = k


@nb.njit(parallel=True, cache=True, nogil=True)
def _copy_internal(xadj, adjncy, adjwgt, part, nxadj, nadjncy, nadjwgt):
    for u in nb.prange(xadj.size - 1):
        pu = part[u]
        q = np.uint64(nxadj[u])
        for e in range(np.uint64(xadj[u]), np.uint64(xadj[u + 1])):
            v = adjncy[e]
            if part[np.uint64(v)] == pu:
                nadjncy[q] = v
                nadjwgt[q] = adjwgt[e]
                q += np.uint64(1)


def internal_edges(xadj, adjncy, adjwgt, part):
    """The CSR without the edges between different blocks of ``part``:
    ``(xadj int64, adjncy, adjwgt)``, the last two of their input dtypes (the GPU twin:
    :func:`.subgraph_gpu.internal_edges`)."""
    n = xadj.size - 1
    nxadj = np.zeros(n + 1, dtype=np.int64)
    _count_internal(xadj, adjncy, part, nxadj)
    np.cumsum(nxadj, out=nxadj)
    nadjncy = np.empty(nxadj[-1], dtype=adjncy.dtype)
    nadjwgt = np.empty(nxadj[-1], dtype=adjwgt.dtype)
    _copy_internal(xadj, adjncy, adjwgt, part, nxadj, nadjncy, nadjwgt)
    return nxadj, nadjncy, nadjwgt
