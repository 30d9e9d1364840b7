"""procmap's multilevel k-way partitioner (Jet-style), used by every split of ``hm``.

The three phases are kept apart, KaMinPar-style:

1. *coarsening*: two-hop matching (heavy-edge rating ``w^2 / (c(u) c(v))``, then
   leaf / twin / relative matching when too many vertices stay single) and hash
   contraction, until at most ``CoarseningContext.target(k)`` vertices remain or a
   level stops shrinking;
2. *initial partitioning* of the coarsest graph with METIS (pymetis, on the host), or,
   where coarsening stalled above its target (power-law graphs), a streaming pass
   (``InitialMappingContext.stalled_start``);
3. *refinement* while uncoarsening: Jet label propagation with the afterburner,
   weak then strong rebalancing (non-ultra: filter 0.75 on coarse levels, 0.25 on
   the finest; ultra: the 17 ratios 0.85 .. 0.05 on every level), then k-way FM
   passes that can climb out of the local optima where label propagation stops
   (sequential: the CPU backend's quality step). On the host, a level of
   ``FMContext.fm_only_min_n`` or more vertices that arrives balanced goes to FM
   directly, and splits shallower than ``LocalFMContext.depth`` add localized FM
   searches after the passes.

Every choice comes from a :class:`~procmap.engines.context.Context`
(:mod:`procmap.engines.context`); this module holds no tuning constant.

The objective is the edge cut, or, given ``prefix``/``dist``, the hierarchical
communication cost J (the ``im`` engine uses this).

Devices: every kernel runs on the backend of the arrays it is given
(:mod:`procmap.kernels.backend`). A graph on the GPU is coarsened there until a level
has fewer than ``DeviceContext.gpu_min_vertices`` vertices; that level and the coarser
ones move to the host, so their refinement (FM included) runs on the CPU, and the
partition moves back to the GPU when it is projected onto the first GPU level. The GPU
levels have no FM; Jet makes up for part of it there (``RefinementContext.gpu_patience``
and the polish, ``polish_patience``).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numba as nb
import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import threading_layer, to_host

from procmap.options import COARSENINGS, REFINEMENTS  # noqa: F401  (re-exported)

from .context import CoarseningContext, Context, DeviceContext, preset
from .initial import metis_partition, random_partition, stream_partition
from .uncoarsen import LevelPlan, uncoarsen


@dataclass
class Level:
    """One graph of the hierarchy and the map from its vertices to the next coarser one."""

    xadj: np.ndarray
    adjncy: np.ndarray
    adjwgt: np.ndarray
    vwgt: np.ndarray
    cmap: np.ndarray | None = None  # fine vertex -> coarse vertex (set once coarsened)
    part: np.ndarray | None = None  # partition this level must respect (V-cycles)

    @property
    def n(self) -> int:
        return self.xadj.size - 1


def coarsen(xadj, adjncy, adjwgt, vwgt, target_n: int, max_vwgt: int, seed: int,
            part: np.ndarray | None = None,
            coarsening: CoarseningContext = CoarseningContext(),
            device: DeviceContext = DeviceContext()) -> list[Level]:
    """Coarsen until ``n <= target_n``; returns the levels, finest first.

    ``max_vwgt`` caps coarse vertex weights (no pair heavier than ``L_max``), so a
    balanced initial partition of the coarsest graph stays possible. Given ``part``
    (a V-cycle), only vertices of the same block are contracted: matching runs on
    the graph without cut edges, so every coarse vertex lies in one block and the
    partition carries over to every level unchanged.

    ``coarsening`` gives the scheme and its knobs (:class:`CoarseningContext`: a level
    that shrinks too little, in vertices or in edges, ends coarsening; a union-find
    level that would undershoot the target is matched with HEM instead). On the GPU,
    the first level below ``device.gpu_min_vertices`` vertices moves to the host, with
    all coarser ones.
    """
    c = coarsening
    levels = [Level(xadj, adjncy, adjwgt, vwgt, part=part)]
    while levels[-1].n > target_n:
        g = levels[-1]
        be = backend.of(g.xadj)
        mx, ma, mw = g.xadj, g.adjncy, g.adjwgt
        if g.part is not None:
            mx, ma, mw = be.internal_edges(g.xadj, g.adjncy, g.adjwgt, g.part)
        cmap, nc = None, 0
        if c.scheme == "unionfind":
            cmap, nc = be.cluster_ids(mx, ma, mw, g.vwgt, max_vwgt, seed + len(levels))
            if nc < target_n // c.unionfind_undershoot:
                cmap = None
        if cmap is None:
            match = be.two_hop_matching(mx, ma, mw, g.vwgt, max_vwgt, seed + len(levels),
                                        threshold=c.unmatched_threshold,
                                        max_rounds=c.hem_max_rounds)
            if g.part is not None:
                match = _within_blocks(be, match, g.part)
            cmap, nc = be.coarse_ids(match)
        del mx, ma, mw  # a V-cycle's filtered CSR: not alive with contraction's scratch
        if nc > c.min_shrink * g.n:
            break
        coarse = be.contract(g.xadj, g.adjncy, g.adjwgt, g.vwgt, cmap, nc)
        if coarse[1].size > c.max_edge_keep * g.adjncy.size:
            break  # a level that keeps (almost) every edge only costs
        g.cmap = cmap
        cpart = None
        if g.part is not None:
            cpart = be.xp.empty(nc, dtype=np.int32)
            cpart[cmap] = g.part
        if be.on_device and nc < device.gpu_min_vertices:
            # small levels are faster on the host (and get FM there)
            coarse = tuple(to_host(a) for a in coarse)
            cpart = None if cpart is None else to_host(cpart)
        levels.append(Level(*coarse, part=cpart))
    return levels


def _within_blocks(be, match, part):
    """``match`` without its pairs of vertices in different blocks of ``part`` (both
    ends left unmatched). A V-cycle matches the graph without its cut edges, where a
    vertex whose edges are all cut is isolated, and two-hop matching pairs isolated
    vertices as twins whatever their blocks: such a pair would make a coarse vertex
    that lies in two blocks (on the GPU, which block it kept depended on scheduling)."""
    xp = be.xp
    return xp.where(part[match] == part, match, xp.arange(match.size, dtype=match.dtype))


@dataclass(frozen=True)
class Problem:
    """What one multilevel cycle partitions: the graph, ``k`` blocks of weight at most
    ``lmax``, the objective (the cut for ``prefix = [k]``, ``dist = [1]``; else J for
    the hierarchy ``prefix``/``dist``), ``eps`` for the initial partitioner and the
    blocks' ``targets`` (shares of the weight; ``None``: equal)."""

    xadj: np.ndarray
    adjncy: np.ndarray
    adjwgt: np.ndarray
    vwgt: np.ndarray
    k: int
    lmax: int
    eps: float
    prefix: np.ndarray
    dist: np.ndarray
    targets: np.ndarray | None = None

    @property
    def graph(self):
        return self.xadj, self.adjncy, self.adjwgt, self.vwgt


def kway_partition(xadj, adjncy, adjwgt, vwgt, k: int, lmax: int, *, eps: float, seed: int = 0,
                   ctx: Context | None = None, depth: int = 0,
                   prefix: np.ndarray | None = None, dist: np.ndarray | None = None,
                   targets: np.ndarray | None = None) -> np.ndarray:
    """Partition into ``k`` blocks of weight at most ``lmax``; returns int32 block ids.

    Minimises the edge cut, or J for the hierarchy ``prefix``/``dist`` when given
    (then blocks are PEs). ``eps`` guides the initial partitioner; ``lmax`` is the
    hard limit the refinement enforces. ``ctx`` (default: the ``hm`` preset) configures
    every phase; ``depth`` is the split's depth in a multisection (0: the top split),
    which picks its tries, V-cycles, ultra schedule and localized FM
    (:class:`~procmap.engines.context.SplitSchedule`). With several tries the whole
    multilevel cycle runs with that many seeds and the partition with the lowest
    objective among the balanced ones is kept; the tries run concurrently
    (:func:`try_workers` of them at once), with the same result. Localized FM runs only
    for a graph on the host.
    """
    ctx = preset("hm") if ctx is None else ctx
    n = xadj.size - 1
    be = backend.of(xadj)
    if k <= 1 or n == 0:
        return be.xp.zeros(n, dtype=np.int32)
    if prefix is None:
        prefix = np.array([k], dtype=np.int64)
        dist = np.array([1.0])
    problem = Problem(xadj, adjncy, adjwgt, vwgt, int(k), int(lmax), eps,
                      np.asarray(prefix, dtype=np.int64), np.asarray(dist, dtype=np.float64),
                      targets)
    # localized FM only where the whole split runs on the host: after it, GPU levels
    # refine by Jet alone, where localized FM on the host levels made J worse
    plan = LevelPlan(ultra=ctx.schedule.ultra_at(depth),
                     local_fm=depth < ctx.local_fm.depth and be.runs_sequential_refiners,
                     flow=ctx.flow.alpha_at(depth))
    vcycles = ctx.schedule.vcycles_at(depth)

    def attempt(i):
        """One try: a multilevel cycle with its own seed, then the V-cycles."""
        s = seed + 7919 * i
        part, value, coarsened = _vcycle(problem, ctx, plan, s,
                                         try_coarsening=ctx.schedule.coarsen_at(depth))
        # a graph that did not coarsen at all (power-law graphs) would not coarsen inside
        # its blocks either: its V-cycles would only coarsen it again, for nothing
        for cycle in range(vcycles if coarsened else 0):
            # re-coarsen inside the blocks and refine again: coarse moves shift whole
            # clusters across block borders, which single-vertex moves cannot
            cycled = _vcycle(problem, ctx, plan, s + cycle + 1, part)
            if cycled is None:
                break  # nothing coarsens: a V-cycle would refine the same graph again
            again, v2, _ = cycled
            if v2 < value and int(be.block_weights(again, vwgt, k).max()) <= lmax:
                part, value = again, v2
        return part, value

    best, best_key = None, None
    tries = max(1, ctx.schedule.tries_at(depth))
    graph_bytes = sum(int(a.nbytes) for a in (xadj, adjncy, adjwgt, vwgt) if a is not None)
    workers = try_workers(tries, be.on_device, n, adjncy.size, graph_bytes, ctx.device)
    for part, value in _each_try(attempt, tries, be.on_device, workers):
        key = (int(be.block_weights(part, vwgt, k).max()) > lmax, value)
        if best_key is None or key < best_key:  # ties: the earlier try
            best, best_key = part, key
    if workers > 1:
        best = be.adopt(best)  # made on a worker's stream (GPU)
    if not be.runs_sequential_refiners:  # Jet alone refined the device levels: polish
        ref = ctx.refinement
        refine = be.refiner(ref.scheme)
        best, _ = refine(xadj, adjncy, adjwgt, vwgt, best, k, lmax, problem.prefix,
                         problem.dist, seed=seed, max_iters=ref.polish_patience,
                         phi=ref.polish_phi, filter_ratio=ref.single_pass_filter,
                         max_weak=ref.max_weak)
    return best.astype(np.int32, copy=False)


def try_workers(tries: int, gpu: bool, n: int, edges: int, graph_bytes: int,
                device: DeviceContext) -> int:
    """How many of a split's ``tries`` run at once (:func:`kway_partition`): the
    concurrency rule of tries, by device and memory.

    1 (serial) with one try, under Numba's workqueue layer, or on the host with one
    Numba thread; otherwise on the host all ``tries``. On the GPU (``gpu``), no more
    than the free device memory holds, and no more than keep the split's peak memory
    (its graph, ``graph_bytes``, plus the running tries, each
    ``device.try_bytes_per_vertex * n + device.try_bytes_per_edge * edges``, ``edges``
    counting directed edges) under ``device.peak_bytes_per_edge * edges``: on sparse
    graphs such as 2D grids one try is all the target allows. Never less than 1. The
    partition does not depend on the number of workers, only the time."""
    if tries == 1 or threading_layer() == "workqueue":
        return 1
    if not gpu:
        return tries if nb.get_num_threads() > 1 else 1
    per_try = max(1, device.try_bytes_per_vertex * n + device.try_bytes_per_edge * edges)
    room = backend.gpu_free_bytes() // per_try
    within_target = (device.peak_bytes_per_edge * edges - graph_bytes) // per_try
    return int(max(1, min(tries, room, within_target)))


def _each_try(attempt, tries: int, gpu: bool, workers: int):
    """``attempt(0) .. attempt(tries - 1)`` in order of the index.

    With ``workers > 1`` the tries run in that many worker threads
    (:func:`.backend.in_worker`), each with a share of the Numba threads (the kernels
    release the GIL) and, on the GPU, a CUDA stream of its own: independent cycles at a
    few threads each use the cores better than one cycle at all of them (see
    ``hm._split_tasks``), and on the GPU one try's kernels fill the gaps of another's
    (its host levels, its loop synchronisations, kernels too small to fill the
    device). Each try's result depends only on its seed, so the order of completion
    does not matter.
    """
    if workers <= 1:
        return [attempt(i) for i in range(tries)]
    run = backend.in_worker(attempt, max(1, nb.get_num_threads() // workers), gpu)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="procmap-try") as pool:
        return list(pool.map(run, range(tries)))


def _vcycle(problem: Problem, ctx: Context, plan: LevelPlan, seed: int, start=None, *,
            try_coarsening: bool = True):
    """One coarsen / initial partition / refine cycle; returns ``(part, objective,
    coarsened)``, ``coarsened`` False where the graph is above the coarsening target but
    not one coarse level came out (power-law graphs, :attr:`CoarseningContext.max_edge_keep`).

    With ``start`` (a partition) the cycle is a V-cycle that keeps blocks intact
    while coarsening and starts refining from ``start`` on the coarsest level; it
    returns ``None`` when it does not coarsen. Below the target, a V-cycle refines the
    graph again from ``start`` with another seed. ``try_coarsening=False``: the graph is
    known not to coarsen (:attr:`SplitSchedule.coarsen`), the cycle starts at once as if
    it had not. A cycle that did not coarsen refines without the ultra schedule
    (``plan.ultra`` is ignored). A coarsest graph above the target (coarsening stalled)
    starts as :attr:`InitialMappingContext.stalled_start` says, any other from METIS.
    """
    p = problem
    target = ctx.coarsening.target(p.k)
    if try_coarsening:
        levels = coarsen(*p.graph, target, p.lmax, seed, start, ctx.coarsening, ctx.device)
    else:
        levels = [Level(*p.graph, part=start)]
    uncoarsened = len(levels) == 1 and levels[0].n > target
    if start is not None and uncoarsened:
        return None
    if uncoarsened:
        # Jet's ultra schedule pays where coarser levels set up the moves of finer ones;
        # on a graph that did not coarsen (power-law) it is 17 passes over the whole input
        plan = replace(plan, ultra=False)
    coarsest = levels[-1]
    be = backend.of(coarsest.xadj)
    rule = ctx.initial.stalled_start
    if start is not None:
        part = coarsest.part
    elif coarsest.n > target and rule == "stream" and be.runs_sequential_refiners:
        part = stream_partition(coarsest.xadj, coarsest.adjncy, coarsest.adjwgt, coarsest.vwgt,
                                p.k, p.lmax, seed, p.targets)
    elif uncoarsened and rule != "metis":  # random, or a stream on the GPU
        part = be.asarray(random_partition(to_host(coarsest.vwgt), p.k, seed, p.targets))
    else:
        host = [to_host(a) for a in (coarsest.xadj, coarsest.adjncy, coarsest.adjwgt,
                                     coarsest.vwgt)]
        part = be.asarray(metis_partition(*host, p.k, p.eps, seed, p.targets))
    return (*uncoarsen(levels, part, p, ctx, plan, seed), not uncoarsened)
