"""``procmap.map_tasks``: the one entry point of every mapping engine (docs/design.md section 4)."""
from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Callable

import numpy as np

from . import baselines
from .engines.context import Context, preset
from .engines.hm import hierarchical_multisection
from .engines.im import integrated_mapping, polish_on_gpu
from .engines.multilevel import COARSENINGS, REFINEMENTS
from .errors import CapacityError, DeviceError, InputError, TopologyError
from .graph import CommGraph
from .kernels import backend
from .kernels.refinement.swap_cpu import swap_refine
from .mapping import Mapping
from .options import ENGINES  # noqa: F401  (re-exported)
from .objective import (check_objective_range, evaluate, is_rank_placement, largest_distance,
                        max_block_weight)


ProgressFn = Callable[[str, str], None]


def _check_inputs(graph: CommGraph, topology, engine: str, eps: float) -> None:
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if graph.n == 0:
        raise InputError("empty graph: there are no tasks to map")
    if not hasattr(topology, "prefix_sizes"):
        raise TopologyError("the mapping engines need a hierarchy (--hierarchy); explicit "
                            "distance matrices can be evaluated but not mapped onto yet")
    if not (0.0 <= eps < 10.0):
        raise InputError(f"imbalance {eps} outside [0, 10)")
    if topology.total_slots == 0:
        raise CapacityError("the machine has no slots (every PE has capacity 0)")


def map_tasks(graph: CommGraph, topology, *, engine: str = "auto", eps: float = 0.03,
              seed: int = 0, device: str = "auto", coarsening: str | None = None,
              refinement: str | None = None, progress: ProgressFn | None = None,
              context: Context | None = None) -> Mapping:
    """Map the tasks of ``graph`` onto the PEs of ``topology``, minimising J.

    Parameters
    ----------
    graph : the symmetric communication graph (J counts both directions of each edge).
    topology : a :class:`~procmap.topology.Hierarchy`; its capacities are slots per PE.
    engine : ``"hm"`` (hierarchical multisection), ``"hm-ultra"`` (with Jet's ultra
        refinement schedule), ``"im"`` (integrated mapping) or ``"auto"`` (the ``im``
        preset: ``im`` for partition mapping; for rank placement the best of ``hm`` and
        ``hm-ultra`` starts and block placement, swap-refined, then polished). Each
        names a preset of :mod:`procmap.engines.context` (:func:`procmap.preset`).
    eps : allowed imbalance in partition mapping: ``L_max = ceil((1+eps) c(V)/k')``
        over the ``k'`` PEs with capacity.
    seed : random seed; the same input, seed, engine and device give the same mapping.
    device : ``"cpu"``, ``"gpu"`` (CuPy and a CUDA GPU; an error when there is none) or
        ``"auto"`` (the GPU for graphs with at least
        ``context.device.auto_gpu_min_edges`` directed edges when one is usable). On
        the GPU, subgraphs below ``context.device.gpu_min_vertices`` vertices (and
        ``gpu_min_edges`` directed edges) and rank placement run on the CPU. Out of GPU
        memory, ``"auto"`` warns and reruns on the CPU; ``"gpu"`` raises
        :class:`~procmap.errors.DeviceError`.
    coarsening : ``"hem"`` (heavy-edge and two-hop matching, the presets' scheme) or
        ``"unionfind"`` (G-kway's union-find clustering); ``None`` keeps the context's.
    refinement : ``"jet"`` (Jet label propagation, the presets' scheme) or ``"isr"``
        (G-kway's independent-set refinement); FM follows either on levels refined on
        the CPU. ``None`` keeps the context's.
    progress : optional callback ``progress(phase, detail)``.
    context : a :class:`~procmap.engines.context.Context` (a preset or one derived from
        it with :func:`dataclasses.replace`); when given it replaces the preset of
        ``engine``, which is then ignored. ``coarsening`` / ``refinement``, when given,
        are applied to it (:meth:`Context.with_schemes`).

    Two modes (docs/design.md section 2): with ``n <= slots`` (rank placement) no PE gets
    more tasks than its capacity, the result is polished by swap refinement and is
    never worse than the block placement a launcher would use (the better of the
    two is returned; ``Mapping.engine`` says which). With ``n > slots`` (partition
    mapping) every usable PE receives at most ``L_max`` task weight.
    """
    _check_inputs(graph, topology, engine, eps)
    check_objective_range(graph, largest_distance(topology))  # before any kernel runs
    if coarsening is not None and coarsening not in COARSENINGS:
        raise InputError(f"unknown coarsening {coarsening!r} "
                         f"(choose from {', '.join(COARSENINGS)})")
    if refinement is not None and refinement not in REFINEMENTS:
        raise InputError(f"unknown refinement {refinement!r} "
                         f"(choose from {', '.join(REFINEMENTS)})")
    if context is None:
        context = preset(engine)
    elif not isinstance(context, Context):
        raise InputError(f"context must be a procmap Context, got {type(context).__name__}")
    ctx = context.with_schemes(coarsening, refinement)
    try:
        concrete = backend.resolve_device(device, graph.adjncy.size,
                                          ctx.device.auto_gpu_min_edges)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    except RuntimeError as exc:
        raise DeviceError(str(exc)) from None
    try:
        return _map(graph, topology, ctx, eps, seed, concrete, progress)
    except Exception as exc:
        if not _out_of_gpu_memory(exc):
            raise
        if device == "gpu":
            raise DeviceError("out of GPU memory; run with --device cpu (or device='cpu')") \
                from None
        warnings.warn("out of GPU memory: mapping on the CPU instead", RuntimeWarning,
                      stacklevel=2)
        return _map(graph, topology, ctx, eps, seed, "cpu", progress)


def _out_of_gpu_memory(exc: BaseException) -> bool:
    """CuPy's allocator failure (checked by name: CuPy may not be installed)."""
    return (type(exc).__name__ == "OutOfMemoryError"
            and type(exc).__module__.startswith("cupy"))


def _map(graph, topology, ctx: Context, eps, seed, device, progress) -> Mapping:
    """:func:`map_tasks` with the context ``ctx`` on the concrete ``device`` ("cpu" or
    "gpu")."""
    seconds: dict[str, float] = {}
    t_start = time.perf_counter()
    levels = topology.levels
    caps = topology.capacities
    if is_rank_placement(graph, topology):
        # usually a few thousand tasks: the host is faster than any kernel launch
        if graph.n < ctx.device.gpu_min_vertices:
            device = "cpu"
        pes, used = _rank_placement(graph, topology, ctx, seed, seconds, progress, device)
    else:
        k_usable = int(np.count_nonzero(caps))
        lmax = max_block_weight(graph.total_vertex_weight, k_usable, eps)
        heaviest = int(graph.vwgt.max())
        if heaviest > lmax:
            raise CapacityError(f"task {int(graph.vwgt.argmax())} weighs {heaviest}, more than "
                                f"L_max = {lmax}: no balanced mapping exists (raise --imbalance)")
        share = (caps > 0).astype(np.float64)
        run = ctx
        if run.pipeline == "im" and k_usable < topology.k:
            # im's refinement uses one L_max for every PE: it cannot keep PEs empty
            run = ctx.hm_context()
        used = run.name
        if run.pipeline == "im":
            pes = integrated_mapping(graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt, levels,
                                     topology.distances, lmax, eps, seed, share, seconds, run,
                                     progress, device=device)
            if device == "cpu":
                seconds.pop("upload", None)  # nothing is uploaded: the CPU uses the arrays
        else:
            t0 = time.perf_counter()
            # hm on the GPU may end with a J-refinement of the whole mapping there
            # (RefinementContext.gpu_mapping_polish); one upload serves both
            polish = (run.refinement.gpu_mapping_polish and device == "gpu"
                      and ctx.device.on_gpu(graph.n, graph.adjncy.size)
                      and k_usable == topology.k)
            arrays = (graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt)
            if polish:
                arrays = backend.gpu().upload_graph(*arrays)
            pes = hierarchical_multisection(*arrays, levels, share, eps, seed, run,
                                            progress=_count_progress(progress, "multisection"),
                                            device=device)
            seconds["multisection"] = time.perf_counter() - t0
            if polish:
                t0 = time.perf_counter()
                pes = polish_on_gpu(*arrays, pes, levels, topology.distances, lmax, seed, run)
                seconds["refinement"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ev = evaluate(graph, topology, pes, eps=eps)
    seconds["evaluation"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_start
    return Mapping(pes=pes, engine=used, evaluation=ev, device=device, seed=seed, seconds=seconds)


def _count_progress(progress, phase):
    if progress is None:
        return None
    return lambda done, total: progress(phase, f"{done}/{total} tasks placed")


def _swap_on_gpu(xadj, adjncy, adjwgt, pe, cap, prefix, dist, *, max_passes: int) -> float:
    """:func:`swap_refine` on the GPU (parallel rounds); ``pe`` is a host array."""
    from .kernels.refinement import swap_gpu
    on_device = backend.gpu().asarray(pe, np.int32)
    gain = swap_gpu.swap_refine(xadj, adjncy, adjwgt, on_device, cap, prefix, dist,
                                max_passes=max_passes)
    pe[:] = backend.to_host(on_device)
    return gain


def _rank_placement(graph, topology, ctx: Context, seed, seconds, progress, device):
    """n <= slots: exact capacities in every split, then swaps; never worse than block.

    Runs ``ctx``'s ``hm`` pipeline (:meth:`Context.hm_context`) with ``ctx.placement``'s
    starts and swap passes, then the starts of ``ctx.placement.extra`` (``auto``:
    ``hm-ultra``), then block placement; each candidate is swap-refined and the lowest J
    wins (ties: the earliest candidate) and gets the wider swap polish of
    ``ctx.placement.polish_group`` (never raising J). Start ``a`` of a pipeline uses seed
    ``seed + 1009 a``, as that pipeline's own engine does, so a candidate equals the one
    the engine would make. On the GPU (``device="gpu"``, large task counts only) the
    multisections run there and the swaps are the parallel rounds of
    :mod:`procmap.kernels.refinement.swap_gpu`.
    """
    run = ctx.hm_context()
    place = run.placement
    swap = swap_refine if device == "cpu" else _swap_on_gpu
    # A PE never holds more than n tasks: larger capacities only inflate the swap tables
    # (sized by the total capacity), e.g. --slots 2147483646 would ask for terabytes.
    caps = np.minimum(topology.capacities, graph.n)
    levels = topology.levels
    prefix = topology.prefix_sizes
    dist = np.asarray(topology.distances, dtype=np.float64)
    unit = np.ones(graph.n, dtype=np.int64)  # placement counts tasks, not their weights
    pipelines = [(run, place.starts_at(graph.n))]
    extra_starts = place.extra_starts_at(graph.n)
    if extra_starts:
        pipelines.append((replace(place.extra, device=run.device), extra_starts))
    candidates = []
    t_hm = t_swap = 0.0
    for pipeline, starts in pipelines:
        for attempt in range(starts):
            t0 = time.perf_counter()
            pes = hierarchical_multisection(graph.xadj, graph.adjncy, graph.adjwgt, unit,
                                            levels, caps.astype(np.float64), 0.0,
                                            seed + 1009 * attempt, pipeline, caps=caps,
                                            device=device)
            t1 = time.perf_counter()
            swap(graph.xadj, graph.adjncy, graph.adjwgt, pes, caps, prefix, dist,
                 max_passes=place.swap_passes)
            t_swap += time.perf_counter() - t1
            t_hm += t1 - t0
            candidates.append((evaluate(graph, topology, pes).J, len(candidates), pes,
                               pipeline.name))
    if progress:
        tried = " + ".join(f"{p.name} x{s}" for p, s in pipelines)
        progress("multisection + swaps", f"{graph.n} tasks on {topology.k} PEs, {tried}")
    t0 = time.perf_counter()
    block = baselines.block(graph.n, topology)
    swap(graph.xadj, graph.adjncy, graph.adjwgt, block, caps, prefix, dist,
         max_passes=place.swap_passes)
    t_swap += time.perf_counter() - t0
    candidates.append((evaluate(graph, topology, block).J, len(candidates), block,
                       "block+swaps"))
    best = min(candidates, key=lambda c: (c[0], c[1]))  # ties: the earliest candidate
    pes, used = best[2], best[3]
    group = place.polish_group_for(prefix)
    if group:
        # on the host whatever the device: it never raises J, so the winner stays best
        t0 = time.perf_counter()
        swap_refine(graph.xadj, graph.adjncy, graph.adjwgt, pes, caps, prefix, dist,
                    max_passes=place.swap_passes, group=group)
        t_swap += time.perf_counter() - t0
    seconds["multisection"] = t_hm
    seconds["swap refinement"] = t_swap
    return pes, used
