"""Union-find (G-kway) coarsening with a weight cap on the GPU: the CUDA twin of
:mod:`procmap.kernels.coarsening.unionfind_cpu`.

Same function, same arguments, same semantics; arrays in and out are CuPy arrays
(NumPy inputs are copied to the device). Kernels live in ``coarsening/unionfind.cu``.
The algorithm (picks, forest of the picks, pointer jumping, Kundu-Misra splitting
of trees heavier than the cap, numbering by smallest vertex) is described in the
CPU module's docstring.

What is bit-identical to the CPU twin
-------------------------------------
Everything: :func:`cluster_ids` returns the same ``(cmap, nc)`` for the same input
and seed. The picks compare the given weights (int64 or float64, never computed
with), degrees and the same 64-bit hash; the forest, roots and depths are integer
functions of the picks; the splitting step runs the CPU's ``_absorb`` loop one
thread per parent, depth by depth; the numbering uses an integer ``atomicMin``
(order-independent) and a prefix scan.

How it differs (cost only, not results)
---------------------------------------
* Pointer jumping runs a fixed ``ceil(log2 n) + 1`` rounds on double buffers; each
  round returns at once when the previous one changed nothing (a device flag, as
  in HEM), so the host never waits between rounds. The CPU loops until a round
  changes nothing.
* The CPU visits the heavy trees' vertices sequentially, deepest first; the GPU
  launches one kernel per depth over the vertices of that depth (the Kundu-Misra
  greedy only needs children finished before their parent). Trees within the cap
  are never visited; when no tree exceeds the cap (the usual case for loose caps)
  this step costs one host read (whether any tree does).

Host synchronisations per call: one for ``nc``; with a cap, one more (is any
tree heavier than the cap?); when some tree exceeds the cap, four more (two vertex lists, the
deepest depth, the depth histogram) plus one launch per depth of the heavy trees. A pathological
pick tree of depth ``D`` (e.g. a path with increasing edge weights) therefore costs
``D`` launches when the cap binds on it.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from .coarsen_cpu import edge_hash_key, weight_cap
from ..gpu_common import as_device, i64, kernel, launch

__all__ = ["cluster_ids"]

_CU = "coarsening/unionfind.cu"


def _u64(x) -> np.uint64:
    return np.uint64(x)


def _weights(adjwgt) -> tuple[cp.ndarray, str]:
    """Edge weights as the kernels take them: int64 (``_i64``) or float64 (``_f64``)."""
    adjwgt = as_device(adjwgt)
    if adjwgt.dtype.kind == "f":
        return adjwgt.astype(cp.float64, copy=False), "f64"
    return adjwgt.astype(cp.int64, copy=False), "i64"


def _jump(parent: cp.ndarray) -> tuple[cp.ndarray, cp.ndarray]:
    """``(root, depth)`` of every vertex of the forest ``parent`` (int32 each).

    Round ``j`` sees every vertex's ``2^j``-th ancestor (or its root); depths are
    below ``n``, so round ``ceil(log2 n)`` changes nothing at the latest, and later
    rounds are skipped on the device.
    """
    n = parent.size
    rounds = (n - 1).bit_length() + 1
    ids = cp.arange(n, dtype=cp.int32)
    anc = [parent.copy(), cp.empty_like(parent)]
    dist = [(parent != ids).astype(cp.int32), cp.empty(n, dtype=cp.int32)]
    progress = cp.zeros(rounds, dtype=cp.int32)
    jump = kernel(_CU, "uf_jump")
    for r in range(rounds):
        src, dst = r % 2, 1 - r % 2
        launch(jump, n, i64(n), anc[src], dist[src], anc[dst], dist[dst], progress, i64(r))
    return anc[rounds % 2], dist[rounds % 2]


def _tree_weights(root: cp.ndarray, vwgt: cp.ndarray) -> cp.ndarray:
    n = root.size
    tree_w = cp.zeros(n, dtype=cp.int64)
    launch(kernel(_CU, "uf_tree_weights"), n, i64(n), root, vwgt, tree_w)
    return tree_w


def _split(parent, depth, heavy, vwgt, cap: int) -> cp.ndarray:
    """The forest of the pieces: the Kundu-Misra cut of the ``heavy`` trees.

    Children lists (CSR by parent, ids increasing) and the vertices bucketed by
    depth come from stable sorts; then one launch per depth, deepest parents first.
    """
    n = parent.size
    ids = cp.arange(n, dtype=cp.int32)
    kid = cp.flatnonzero(heavy & (parent != ids)).astype(cp.int32)
    if kid.size == 0:  # the heavy trees are single vertices: nothing to cut
        return parent
    kids = kid[cp.argsort(parent[kid])]  # stable: ids increasing within a parent
    cptr = cp.searchsorted(parent[kids], cp.arange(n + 1)).astype(cp.int64, copy=False)
    hv = cp.flatnonzero(heavy).astype(cp.int32)
    bydepth = hv[cp.argsort(depth[hv])]
    dsorted = depth[bydepth]
    maxd = int(dsorted[-1])
    dptr = cp.searchsorted(dsorted, cp.arange(maxd + 2)).get()
    acc = vwgt.copy()
    cut = cp.zeros(n, dtype=cp.bool_)
    absorb = kernel(_CU, "uf_absorb")
    for d in range(maxd - 1, -1, -1):  # the deepest vertices have no children
        lo, hi = int(dptr[d]), int(dptr[d + 1])
        launch(absorb, hi - lo, i64(hi - lo), bydepth[lo:hi], cptr, kids, acc, vwgt,
               i64(cap), cut)
    return cp.where(cut, ids, parent)


def _number(root: cp.ndarray) -> tuple[cp.ndarray, int]:
    """Coarse ids: clusters numbered by their smallest vertex, ascending."""
    n = root.size
    minv = cp.full(n, n, dtype=cp.int32)
    launch(kernel(_CU, "uf_cluster_min"), n, i64(n), root, minv)
    first = minv[root]
    number = cp.cumsum(first == cp.arange(n, dtype=cp.int32), dtype=cp.int64) - 1
    cmap = number[first].astype(cp.int32)
    return cmap, int(number[-1]) + 1


def cluster_ids(xadj, adjncy, adjwgt, vwgt, max_vwgt: int | None = None,
                seed: int = 0) -> tuple[cp.ndarray, int]:
    """Union-find (G-kway) clusters with a weight cap: ``(cmap`` CuPy int32``, nc)``.

    GPU twin of :func:`unionfind_cpu.cluster_ids`, bit-identical to it: picks by
    (heaviest edge, lower degree, seeded hash, smaller id) among neighbours with
    ``vwgt[u] + vwgt[v] <= max_vwgt``, clusters = components of the picks, trees
    heavier than ``max_vwgt`` cut into the fewest connected pieces within it.
    Coarse ids number the clusters by their smallest vertex, so the result feeds
    ``coarsen_gpu.contract`` (or the CPU one) directly.
    """
    xadj = as_device(xadj, cp.int64)
    adjncy = as_device(adjncy, cp.int32)
    adjwgt, sfx = _weights(adjwgt)
    vwgt = as_device(vwgt, cp.int64)
    n = xadj.size - 1
    if n <= 0:
        return cp.zeros(0, dtype=cp.int32), 0
    cap = weight_cap(max_vwgt)
    pick = cp.empty(n, dtype=cp.int32)
    launch(kernel(_CU, f"uf_pick_{sfx}"), n, i64(n), xadj, adjncy, adjwgt, vwgt, i64(cap),
           _u64(edge_hash_key(seed)), pick)
    parent = cp.empty(n, dtype=cp.int32)
    launch(kernel(_CU, "uf_parents"), n, i64(n), pick, parent)
    root, depth = _jump(parent)
    if max_vwgt is not None:
        heavy = _tree_weights(root, vwgt)[root] > cap
        if bool(heavy.any()):
            root, _ = _jump(_split(parent, depth, heavy, vwgt, cap))
    return _number(root)
