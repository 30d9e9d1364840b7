"""Splitters: how one multisection step partitions a subgraph (see hm.py)."""
from __future__ import annotations

import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import to_host
from procmap.kernels.limits_cpu import fit_to_limits

from .multilevel import kway_partition


#: Multilevel cycles per split by depth (top split first); deeper splits use the last.
#: Traffic cut by the top split crosses the most expensive links, so it gets more tries.
TRIES = {False: (1,), True: (4, 2, 1)}
#: V-cycles after each try, by depth (same indexing).
VCYCLES = {False: (1, 0), True: (3, 1, 0)}
#: hm-ultra uses Jet's ultra filter schedule on splits shallower than this depth: the
#: top split and the splits below it, whose cuts cross the two costliest levels of the
#: hierarchy. Measured with 2 (against 1), 4:8:6, seed 1: J 0.16-0.67% lower on each of
#: the eight 2^17 / 2^20 benchmark instances (seed 2 on del20 / rgg20: 0.62% / 0.22%).
ULTRA_DEPTH = 2
#: Splits of hm and hm-ultra shallower than this depth (the top split, whose cut
#: crosses the costliest links: ~70% of J on the benchmark instances) add localized FM
#: searches on their levels up to ``multilevel.LOCAL_FM_MAX_N`` vertices. Measured on
#: the eight 2^17 / 2^20 instances, 4:8:6, one thread: hm J geometric mean -2.1% for +19%
#: time (the deeper splits too: -2.7% for +51%); hm-ultra J -0.9% (1,021,026 ->
#: 1,011,720; rgg20 -2.4%, grid2d_1M -2.2%) for +6% time.
LOCAL_FM_DEPTH = 1
#: Jet's patience per level. FM runs after Jet on every level, so hm can stop Jet
#: earlier than Jet's 12 (measured: same J on the 2^17 set, about 15% less time).
JET_ITERS = {False: 8, True: 12}


def jet_splitter(ultra: bool = False, tries: tuple | None = None, vcycles: tuple | None = None,
                 jet_iters: int | None = None, coarsening: str = "hem",
                 refinement: str = "jet", local_fm_depth: int | None = None):
    """Split with procmap's multilevel partitioner (edge cut), Jet or Jet-ultra refinement.

    ``tries``/``vcycles`` (by split depth) and ``jet_iters`` default to the ``hm`` or
    ``hm-ultra`` schedule above, ``local_fm_depth`` (splits shallower than it add
    localized FM) to :data:`LOCAL_FM_DEPTH`; ``coarsening``/``refinement`` pick the
    multilevel partitioner's schemes (``multilevel.COARSENINGS`` / ``REFINEMENTS``).
    Blocks with equal targets share one limit, which Jet's rebalancers enforce; unequal
    limits (irregular capacities) are then met exactly by
    :func:`~procmap.kernels.limits_cpu.fit_to_limits`.
    """

    schedule = TRIES[ultra] if tries is None else tries
    cycles = VCYCLES[ultra] if vcycles is None else vcycles
    patience = JET_ITERS[ultra] if jet_iters is None else jet_iters
    local_depth = LOCAL_FM_DEPTH if local_fm_depth is None else local_fm_depth

    def split(xadj, adjncy, adjwgt, vwgt, targets, limits, eps, seed, depth=0):
        k = targets.size
        attempts = schedule[min(depth, len(schedule) - 1)]
        rounds = cycles[min(depth, len(cycles) - 1)]
        uniform = bool(np.all(limits == limits[0]))
        part = kway_partition(xadj, adjncy, adjwgt, vwgt, k, int(limits.max()), eps=eps,
                              seed=seed, ultra=ultra and depth < ULTRA_DEPTH,
                              targets=None if uniform else targets,
                              tries=attempts, vcycles=rounds, jet_iters=patience,
                              coarsening=coarsening, refinement=refinement,
                              local_fm=depth < local_depth)
        if not uniform:
            # exact per-block limits: a sequential pass over the few misfits, on the host
            be = backend.of(part)
            host = to_host(part).copy()
            fit_to_limits(*(to_host(a) for a in (xadj, adjncy, adjwgt, vwgt)), host, limits)
            part = be.asarray(host)
        return part

    return split
