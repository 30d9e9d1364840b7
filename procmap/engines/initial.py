"""Initial partitioning of a (coarsest) graph on the CPU with METIS (pymetis), and the
starts of a graph whose coarsening stalled (streaming or random).

METIS wants positive integer weights that fit its 32-bit index type, so float or
huge volumes are rescaled; the partition, not the weights, is what we keep.
Equal targets call METIS directly (:mod:`.metis_lib`: the same partition, but other
threads run meanwhile); unequal ones go through ``pymetis.part_graph``.
"""
from __future__ import annotations

import numpy as np
import pymetis

from . import metis_lib

_METIS_WEIGHT_BUDGET = 2**30  # keeps METIS's 32-bit sums of edge weights from overflowing


def _metis_edge_weights(adjwgt: np.ndarray) -> np.ndarray | None:
    if adjwgt.size == 0:
        return None
    w = adjwgt.astype(np.float64)
    if adjwgt.dtype.kind == "f" or w.sum() > _METIS_WEIGHT_BUDGET:
        # Keep relative weights, about 2^30 in total, every edge at least 1. Dividing by
        # the largest weight first keeps every quotient finite, even for weights near
        # the smallest float (1e-300 / 1e-300 = 1, where 2^30 / 1e-300 overflows).
        wmax = w.max()
        if wmax <= 0:
            return None
        w = w / wmax
        w *= min(1e6, _METIS_WEIGHT_BUDGET / w.sum())
    out = np.maximum(1, np.rint(w)).astype(np.int64)
    if np.all(out == 1):
        return None
    return out


def metis_partition(xadj, adjncy, adjwgt, vwgt, k: int, eps: float, seed: int,
                    targets: np.ndarray | None = None) -> np.ndarray:
    """Partition into ``k`` blocks minimising the edge cut (METIS k-way).

    ``targets`` are the blocks' shares of the total vertex weight (sum 1; equal by
    default). ``eps`` is passed as METIS's ufactor. Returns an int32 array. METIS may
    leave a block slightly over its limit; the Jet rebalancer repairs that.
    """
    n = xadj.size - 1
    if targets is not None:
        targets = np.asarray(targets, dtype=np.float64)
        active = np.flatnonzero(targets > 0)
        if active.size < k:
            # METIS rejects zero targets: split among the blocks that may hold weight
            sub = metis_partition(xadj, adjncy, adjwgt, vwgt, int(active.size), eps, seed,
                                  targets[active])
            return active[sub].astype(np.int32)
    if k <= 1 or n == 0:
        return np.zeros(n, dtype=np.int32)
    if n <= k and targets is None:
        return np.arange(n, dtype=np.int32)
    opts = pymetis.Options()
    opts.ufactor = max(1, int(eps * 1000))
    opts.seed = int(seed) % (2**31 - 1)
    vw = np.asarray(vwgt, dtype=np.int64)
    if vw.sum() > _METIS_WEIGHT_BUDGET:
        vw = np.maximum(1, np.rint(vw * (_METIS_WEIGHT_BUDGET / vw.sum()))).astype(np.int64)
    tp = None if targets is None else [float(t) for t in np.asarray(targets) / np.sum(targets)]
    if adjncy.size == 0:
        # METIS needs edges; an edgeless graph is split by weight alone
        return _edgeless_partition(vw, k, targets)
    eweights = _metis_edge_weights(adjwgt)
    if tp is None and metis_lib.available():  # the same partition, without holding the GIL
        return metis_lib.part_graph(xadj, adjncy, vw, eweights, k, opts.ufactor, opts.seed)
    graph = pymetis.CSRAdjacency(np.asarray(xadj, dtype=np.int64), np.asarray(adjncy, dtype=np.int64))
    with metis_lib.lock:  # libc's one rand() state, shared with the direct calls
        _, parts = pymetis.part_graph(k, graph, vweights=vw, eweights=eweights, tpwgts=tp,
                                      options=opts)
    return np.asarray(parts, dtype=np.int32)


def stream_partition(xadj, adjncy, adjwgt, vwgt, k: int, lmax: int, seed: int,
                     targets: np.ndarray | None = None) -> np.ndarray:
    """Seeded streaming partition into ``k`` blocks (int32, Fennel): the vertices, by
    descending weighted degree (ties in a seeded random order), each join the block
    that holds most of its edge weight among those already placed, less a cost of the
    block's load (:mod:`procmap.kernels.initial.stream_cpu`). The start of a graph whose
    coarsening stalled (:attr:`~procmap.engines.context.InitialMappingContext.stalled_start`).

    A block ``b`` takes at most ``lmax * share[b] / max(share)`` (``targets``: the
    shares, as in :func:`metis_partition`; equal by default), unless no block has room
    for a vertex. Fennel's load cost is ``alpha * L^1.5`` with
    ``alpha = sqrt(k) * W_e / W_v^1.5`` (``W_e``: the total undirected edge weight,
    ``W_v``: the total vertex weight), the paper's choice for ``k`` balanced blocks.

    Hubs go first: placed early, they pull their many neighbours into their blocks, and
    the dense core of a power-law graph stays together. A random order would leave each
    early vertex without placed neighbours, and the pass would be little better than a
    random partition.
    """
    from procmap.kernels.initial.stream_cpu import fennel, weighted_degrees

    n = xadj.size - 1
    share = np.full(k, 1.0 / k) if targets is None else np.asarray(targets, float) / np.sum(targets)
    caps = np.floor(lmax * share / share.max()).astype(np.int64)
    adjwgt = np.asarray(adjwgt, dtype=np.float64)  # whatever the graph's: one specialization
    degree = weighted_degrees(xadj, adjwgt)
    shuffled = np.random.default_rng(seed).permutation(n)
    order = shuffled[np.argsort(-degree[shuffled], kind="stable")]
    total_v = float(np.sum(vwgt))
    alpha = np.sqrt(k) * float(degree.sum()) / 2.0 / total_v ** 1.5 if total_v > 0 else 0.0
    return fennel(xadj, adjncy, adjwgt, vwgt, order, caps, k * share, alpha)


def random_partition(vwgt: np.ndarray, k: int, seed: int,
                     targets: np.ndarray | None = None) -> np.ndarray:
    """Seeded random balanced partition into ``k`` blocks (int32): a random order of
    the vertices cut into consecutive runs, each of its block's share of the weight
    (``targets``, as in :func:`metis_partition`; a block ends within half a vertex
    weight of its share). The start of a graph that does not coarsen
    (:attr:`~procmap.engines.context.InitialMappingContext.random_start`)."""
    vwgt = np.asarray(vwgt)
    return _runs(vwgt, np.random.default_rng(seed).permutation(vwgt.size), k, targets)


def _edgeless_partition(vwgt: np.ndarray, k: int, targets) -> np.ndarray:
    """Blocks of an edgeless graph, where every placement cuts nothing: heaviest first,
    in consecutive runs (:func:`_runs`). Vectorised: deep splits of power-law graphs
    hand over tens of thousands of edgeless vertices."""
    return _runs(vwgt, np.argsort(-vwgt, kind="stable"), k, targets)


def _runs(vwgt: np.ndarray, order: np.ndarray, k: int, targets) -> np.ndarray:
    """Blocks (int32) of the vertices taken in ``order``: block after block, each takes
    a consecutive run up to its share of the total weight (``targets``; equal shares
    by default). A vertex goes to the block its middle falls in, so a block ends within
    half a vertex weight of its share."""
    share = np.full(k, 1.0 / k) if targets is None else np.asarray(targets, float) / np.sum(targets)
    w = vwgt[order].astype(np.float64)
    middle = np.cumsum(w) - w / 2.0
    blocks = np.searchsorted(np.cumsum(share * w.sum()), middle, side="right")
    part = np.empty(vwgt.size, dtype=np.int32)
    part[order] = np.minimum(blocks, k - 1)
    return part
