"""Integrated mapping (``im``): map while uncoarsening (GPU-IM paper, section 4).

1. Coarsen the whole task graph until ``n <= 128 k`` (no coarse vertex heavier than
   ``L_max``).
2. Map the coarsest graph onto the PEs with hierarchical multisection.
3. Uncoarsen: project the mapping and refine it on every level with Jet label
   propagation whose gain is the change in J (paper equation 1; distances looked up
   level by level, no k x k matrix), with weak/strong rebalancing, locking and the
   same stopping rule (12 iterations without a relative improvement of 0.999),
   followed on every level by k-way FM passes with the same J gain (on the CPU;
   levels refined on the GPU skip FM, as GPU-HeiPa does, and Jet runs longer there).

With ``device="gpu"`` the graph is uploaded once and coarsened there; levels below
``backend.GPU_MIN_VERTICES`` vertices (the coarsest ones, and the initial hm) run on
the host, the larger ones on the GPU.
"""
from __future__ import annotations

import time

import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import to_host
from procmap.kernels.fm_cpu import fm_refine

from .hm import hierarchical_multisection
from .multilevel import (FM_WORK, GPU_JET_ITERS, GPU_POLISH_ITERS, GPU_POLISH_PHI, JET_PHI,
                         coarsen)
from .splitters import jet_splitter

#: im coarsens to ``COARSEN_FACTOR * k`` vertices before the initial hm. GPU-HeiPa uses
#: 8, its v1 (GPU-HeiProMap) 128; on the CPU 128 measured better J for similar time:
#: hm on a few hundred vertices per PE finds the block shapes that J-refinement of a
#: very coarse mapping cannot.
COARSEN_FACTOR = 128
#: The coarsest graph is small, so its hm can afford the tries and V-cycles by depth
#: (see splitters.py) that the block shapes of the final mapping depend on.
INITIAL_TRIES = (2, 1)
INITIAL_VCYCLES = (1, 0)
#: Unlike hm, the initial hm's top split adds no localized FM: on the coarse, dense
#: graphs im starts from (grid3d_1M: 22k vertices, 15 neighbours each) its searches cost
#: 0.46 s of a 0.79 s initial mapping (0.25 s without), on the CPU and the GPU path
#: alike; over the eight 2^17 / 2^20 instances J fell 1.7% for 17% more time, and im is
#: the fast engine, whose initial mapping already bounds its GPU speedup at 2^20.
#: Jet's patience per level while uncoarsening (Jet: 12). FM follows on every level and
#: does the rest: 3 measured the same J as 12 on the 2^17 set, in less time.
JET_ITERS = 3
#: GPU levels get no FM: Jet refines them alone, with Jet's own patience, and polishes
#: the finest one (multilevel.GPU_POLISH_ITERS: until 30 iterations in a row bring no
#: improvement at all). Measured on an H100, J of im on the GPU before / after:
#: grid2d_1M 1,058,792 / 998,256, grid3d_1M 8,551,650 / 8,439,884, grid2d_16M
#: 4,548,502 / 4,036,036 (the CPU backend's: 3,921,362); Delaunay and rgg reached the
#: CPU backend's J (del20 1,590,572 against 1,590,590).
#: FM effort per level. The coarse initial mapping leaves cluster-shaped block borders
#: (on 3D meshes J is 40% above hm's before refinement); longer FM passes recover more.
FM_PASSES = 10
FM_STALL_DIVISOR = 20
#: ... and stops once a pass improves J by less than this fraction.
FM_MIN_GAIN = 0.001


def integrated_mapping(xadj, adjncy, adjwgt, vwgt, levels, distances, lmax: int, eps: float,
                       seed: int, share: np.ndarray, seconds: dict, progress=None,
                       device: str = "cpu", coarsening: str = "hem",
                       refinement: str = "jet") -> np.ndarray:
    """Return task -> PE (int32, host) for partition mapping onto the hierarchy ``levels``.

    ``device`` is ``"cpu"`` or ``"gpu"``; ``seconds`` receives the time per phase.
    ``coarsening`` / ``refinement`` pick the schemes (see ``multilevel.COARSENINGS`` and
    ``REFINEMENTS``); the refinement's gain is the change in J either way.
    """
    k, prefix, dist = _hierarchy(levels, distances)
    t0 = time.perf_counter()
    be = backend.for_size(device, xadj.size - 1)
    graph = be.upload_graph(xadj, adjncy, adjwgt, vwgt)
    seconds["upload"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    hier = coarsen(*graph, COARSEN_FACTOR * k, lmax, seed, coarsening=coarsening)
    seconds["coarsening"] = time.perf_counter() - t0
    if progress:
        progress("coarsened", f"{len(hier)} levels, coarsest {hier[-1].n} vertices")
    t0 = time.perf_counter()
    g = hier[-1]
    pes = hierarchical_multisection(*(to_host(a) for a in (g.xadj, g.adjncy, g.adjwgt, g.vwgt)),
                                    levels, share, eps, seed,
                                    jet_splitter(tries=INITIAL_TRIES, vcycles=INITIAL_VCYCLES,
                                                 jet_iters=12, local_fm_depth=0,
                                                 coarsening=coarsening,
                                                 refinement=refinement))
    seconds["initial mapping"] = time.perf_counter() - t0
    if progress:
        progress("initial mapping", "hm on the coarsest graph")
    t0 = time.perf_counter()
    for depth in range(len(hier) - 1, -1, -1):
        g = hier[depth]
        lb = backend.of(g.xadj)
        if depth < len(hier) - 1:
            pes = lb.asarray(pes)[g.cmap]
        refine = lb.refiner(refinement)
        fm = lb.name == "cpu"
        if fm:
            patience, phi = JET_ITERS, JET_PHI
        elif depth == 0:
            patience, phi = GPU_POLISH_ITERS, GPU_POLISH_PHI
        else:
            patience, phi = GPU_JET_ITERS, JET_PHI
        pes, cost = refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, pes, k, lmax, prefix, dist,
                           seed=seed + depth, max_iters=patience, phi=phi)
        if fm:
            # a pass's gain counts one direction of each edge: J / 2 is the scale
            fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, pes, k, lmax, prefix, dist,
                      max_passes=FM_PASSES, max_stall=max(50, g.n // FM_STALL_DIVISOR),
                      min_gain=FM_MIN_GAIN * cost / 2, max_work=FM_WORK)
    pes = to_host(pes)
    seconds["refinement"] = time.perf_counter() - t0
    return np.asarray(pes, dtype=np.int32)


def polish_on_gpu(xadj, adjncy, adjwgt, vwgt, pes, levels, distances, lmax: int, seed: int,
                  refinement: str = "jet") -> np.ndarray:
    """Refine a whole mapping for J on the GPU: the refinement of im's finest GPU level
    (J gain, Jet's rebalancers, ``GPU_POLISH_ITERS`` iterations without any improvement
    end it). Returns task -> PE (int32, host); J never rises, no PE ends above ``lmax``
    (when none started above it). The graph may be on the host or already on the device.

    ``hm`` on the GPU calls it: its splits minimise cuts, one level of the hierarchy at
    a time and without FM on their GPU levels, and a J-refinement of the result moves
    what they left along the block borders (measured with the GPU's algorithm emulated on
    the CPU: J -3.6% on grid2d_1M, -1.0% on grid3d_1M, nothing on Delaunay and rgg).
    """
    k, prefix, dist = _hierarchy(levels, distances)
    be = backend.gpu()
    graph = be.upload_graph(xadj, adjncy, adjwgt, vwgt)  # no copy when already there
    refine = be.refiner(refinement)
    out, _ = refine(*graph, be.asarray(pes, np.int32), k, lmax, prefix, dist, seed=seed,
                    max_iters=GPU_POLISH_ITERS, phi=GPU_POLISH_PHI)
    return np.asarray(to_host(out), dtype=np.int32)


def _hierarchy(levels, distances):
    """``(k, prefix, dist)`` of the refinement kernels for the hierarchy ``levels``."""
    prefix = np.cumprod(np.asarray(levels, dtype=np.int64))
    return int(prefix[-1]), prefix, np.asarray(distances, dtype=np.float64)
