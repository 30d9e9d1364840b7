"""Splitters: how one multisection step partitions a subgraph (see hm.py)."""
from __future__ import annotations

import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import to_host
from procmap.kernels.rebalancing.limits_cpu import fit_to_limits

from .context import Context
from .multilevel import kway_partition


def jet_splitter(ctx: Context):
    """Split with procmap's multilevel partitioner (edge cut) configured by ``ctx``.

    The split's depth (0: the top split) picks its tries, V-cycles, ultra schedule and
    localized FM from ``ctx.schedule`` and ``ctx.local_fm`` (see
    :func:`~procmap.engines.multilevel.kway_partition`). Blocks with equal targets share
    one limit, which Jet's rebalancers enforce; unequal limits (irregular capacities)
    are then met exactly by :func:`~procmap.kernels.rebalancing.limits_cpu.fit_to_limits`.
    """

    def split(xadj, adjncy, adjwgt, vwgt, targets, limits, eps, seed, depth=0):
        k = targets.size
        uniform = bool(np.all(limits == limits[0]))
        part = kway_partition(xadj, adjncy, adjwgt, vwgt, k, int(limits.max()), eps=eps,
                              seed=seed, ctx=ctx, depth=depth,
                              targets=None if uniform else targets)
        if not uniform:
            # exact per-block limits: a sequential pass over the few misfits, on the host
            be = backend.of(part)
            host = to_host(part).copy()
            fit_to_limits(*(to_host(a) for a in (xadj, adjncy, adjwgt, vwgt)), host, limits)
            part = be.asarray(host)
        return part

    return split
