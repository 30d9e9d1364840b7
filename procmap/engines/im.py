"""Integrated mapping (``im``): map while uncoarsening (GPU-IM paper, section 4).

1. Coarsen the whole task graph until ``n <= factor * k`` (the ``im`` preset: 128
   vertices per PE; no coarse vertex heavier than ``L_max``).
2. Map the coarsest graph onto the PEs with hierarchical multisection
   (``Context.initial``), on the device that holds it. Coarsening stops early where
   levels stop shrinking in edges (``CoarseningContext.max_edge_keep``: power-law
   graphs), so the coarsest graph may be the input itself.
3. Uncoarsen: project the mapping and refine it on every level with Jet label
   propagation whose gain is the change in J (paper equation 1; distances looked up
   level by level, no k x k matrix), with weak/strong rebalancing, locking and Jet's
   stopping rule (``RefinementContext.patience`` / ``phi``), followed on every level by
   k-way FM passes with the same J gain (``Context.fm``; on the CPU: levels refined on
   the GPU skip FM, as GPU-HeiPa does, and Jet runs longer there).

With ``device="gpu"`` the graph (when ``DeviceContext.on_gpu``) is uploaded once and
coarsened there; levels below ``DeviceContext.gpu_min_vertices`` vertices (the coarsest
ones, and the initial hm) run on the host, the larger ones on the GPU.
"""
from __future__ import annotations

import time

import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import to_host

from .context import Context
from .hm import hierarchical_multisection
from .multilevel import Problem, coarsen
from .uncoarsen import LevelPlan, uncoarsen


def integrated_mapping(xadj, adjncy, adjwgt, vwgt, levels, distances, lmax: int, eps: float,
                       seed: int, share: np.ndarray, seconds: dict, ctx: Context,
                       progress=None, device: str = "cpu") -> np.ndarray:
    """Return task -> PE (int32, host) for partition mapping onto the hierarchy ``levels``.

    ``ctx`` is an ``im`` pipeline (:mod:`procmap.engines.context`); ``device`` is
    ``"cpu"`` or ``"gpu"``; ``seconds`` receives the time per phase. The refinement's
    gain is the change in J whatever ``ctx.refinement.scheme``.
    """
    k, prefix, dist = _hierarchy(levels, distances)
    t0 = time.perf_counter()
    be = backend.for_size(device, ctx.device.on_gpu(xadj.size - 1, adjncy.size))
    graph = be.upload_graph(xadj, adjncy, adjwgt, vwgt)
    seconds["upload"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    hier = coarsen(*graph, ctx.coarsening.target(k), lmax, seed, coarsening=ctx.coarsening,
                   device=ctx.device)
    seconds["coarsening"] = time.perf_counter() - t0
    if progress:
        progress("coarsened", f"{len(hier)} levels, coarsest {hier[-1].n} vertices")
    t0 = time.perf_counter()
    g = hier[-1]
    # where coarsening stops early (power-law graphs: CoarseningContext.max_edge_keep),
    # the coarsest graph may still be on the device: its multisection then runs there too
    pes = hierarchical_multisection(g.xadj, g.adjncy, g.adjwgt, g.vwgt, levels, share, eps,
                                    seed, ctx.initial_context(coarsened=len(hier) > 1),
                                    device="gpu" if backend.of(g.xadj).on_device else "cpu")
    seconds["initial mapping"] = time.perf_counter() - t0
    if progress:
        progress("initial mapping", "hm on the coarsest graph")
    t0 = time.perf_counter()
    finest = hier[0]
    problem = Problem(finest.xadj, finest.adjncy, finest.adjwgt, finest.vwgt, k=k, lmax=lmax,
                      eps=eps, prefix=prefix, dist=dist)
    pes, _ = uncoarsen(hier, pes, problem, ctx, LevelPlan(polish_finest=True), seed)
    pes = to_host(pes)
    seconds["refinement"] = time.perf_counter() - t0
    return np.asarray(pes, dtype=np.int32)


def polish_on_gpu(xadj, adjncy, adjwgt, vwgt, pes, levels, distances, lmax: int, seed: int,
                  ctx: Context) -> np.ndarray:
    """Refine a whole mapping for J on the GPU: the refinement of im's finest GPU level
    (J gain, Jet's rebalancers, ``ctx.refinement.polish_patience`` iterations without
    any improvement end it). Returns task -> PE (int32, host); J never rises, no PE ends above ``lmax``
    (when none started above it). The graph may be on the host or already on the device.

    ``hm`` on the GPU calls it: its splits minimise cuts, one level of the hierarchy at
    a time and without FM on their GPU levels, and a J-refinement of the result moves
    what they left along the block borders (``RefinementContext.gpu_mapping_polish``).
    """
    k, prefix, dist = _hierarchy(levels, distances)
    be = backend.gpu()
    graph = be.upload_graph(xadj, adjncy, adjwgt, vwgt)  # no copy when already there
    ref = ctx.refinement
    refine = be.refiner(ref.scheme)
    out, _ = refine(*graph, be.asarray(pes, np.int32), k, lmax, prefix, dist, seed=seed,
                    max_iters=ref.polish_patience, start_iters=ref.polish_start_patience,
                    phi=ref.polish_phi,
                    filter_ratio=ref.single_pass_filter, max_weak=ref.max_weak)
    return np.asarray(to_host(out), dtype=np.int32)


def _hierarchy(levels, distances):
    """``(k, prefix, dist)`` of the refinement kernels for the hierarchy ``levels``."""
    prefix = np.cumprod(np.asarray(levels, dtype=np.int64))
    return int(prefix[-1]), prefix, np.asarray(distances, dtype=np.float64)
