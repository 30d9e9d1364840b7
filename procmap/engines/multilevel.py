"""procmap's multilevel k-way partitioner (Jet-style), used by every split of ``hm``.

The three phases are kept apart, KaMinPar-style:

1. *coarsening*: two-hop matching (heavy-edge rating ``w^2 / (c(u) c(v))``, then
   leaf / twin / relative matching when too many vertices stay single) and hash
   contraction, until at most ``coarsen_factor * k`` vertices remain or a level
   stops shrinking;
2. *initial partitioning* of the coarsest graph with METIS (pymetis, on the host);
3. *refinement* while uncoarsening: Jet label propagation with the afterburner,
   weak then strong rebalancing (non-ultra: filter 0.75 on coarse levels, 0.25 on
   the finest; ultra: the 17 ratios 0.85 .. 0.05 on every level), then, with
   ``fm=True``, k-way FM passes that can climb out of the local optima where label
   propagation stops (sequential: the CPU backend's quality step). On the host, a
   level of :data:`FM_ONLY_MIN_N` or more vertices that arrives balanced goes to FM
   directly, and ``local_fm=True`` adds localized FM searches after the passes.

The objective is the edge cut, or, given ``prefix``/``dist``, the hierarchical
communication cost J (the ``im`` engine uses this).

Devices: every kernel runs on the backend of the arrays it is given
(:mod:`procmap.kernels.backend`). A graph on the GPU is coarsened there until a level
has fewer than ``backend.GPU_MIN_VERTICES`` vertices; that level and the coarser
ones move to the host, so their refinement (FM included) runs on the CPU, and the
partition moves back to the GPU when it is projected onto the first GPU level. The GPU
levels have no FM; Jet makes up for part of it there (:data:`GPU_POLISH_ITERS`).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba as nb
import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import threading_layer, to_host
from procmap.kernels.fm_cpu import fm_refine, local_fm_refine
from procmap.kernels.jet_cpu import filter_schedule

from procmap.options import COARSENINGS, REFINEMENTS  # noqa: F401  (re-exported)

from .initial import metis_partition

#: Coarsening stops at ``COARSEN_FACTOR * k`` vertices (GPU-HeiPa: 8).
COARSEN_FACTOR = 8
#: Coarsening never goes below this many vertices: METIS partitions a graph of a few
#: thousand vertices in milliseconds and better than Jet refines a tiny one up, and
#: small subgraphs (the deep splits of hm) then skip the multilevel cycle entirely.
MIN_COARSE = 3000
#: A level that keeps more than this fraction of the vertices ends coarsening.
MIN_SHRINK = 0.95
#: GPU levels get no FM (it is sequential), so there Jet refines alone, and longer: with
#: Jet's own patience even where the CPU schedule stops Jet early because FM follows, and
#: a split made on the GPU ends with a polish, Jet until GPU_POLISH_ITERS iterations in a
#: row bring no improvement at all (phi = 1), not merely none above 0.1%. On meshes Jet
#: keeps finding many small gains there, which FM collects on the CPU. Measured on an
#: H100, J on the GPU before / after (CPU backend): hm grid2d_1M 1,088,924 / 940,940
#: (979,356), grid3d_1M 7,690,582 / 7,408,626 (7,412,210); rgg20 and del20 within 2%;
#: im: im.py.
#: FM on the host after Jet on each GPU level (download the level, FM, upload the
#: partition) was measured on an H100 and left out: hm's J -1.8% on rgg20 (-3.3% with
#: localized FM too, still 1.04x the CPU backend's) for 1.8-2.5x the time, and +3% on
#: grid2d_1M; hm-ultra's J -1.0% to -4.5% (rgg20 -2.9%, to 1.005x the CPU's) for 32-77%
#: more time.
GPU_JET_ITERS = 12
GPU_POLISH_ITERS = 30
GPU_POLISH_PHI = 1.0
#: hm-ultra's passes on GPU levels run with phi = 1 too (its final polish alone found
#: little after them: grid2d_1M -0.3%), at a patience of 6. Measured on an H100, J and
#: time with 0.999 / 12 against 1 / 6 (CPU backend's J): rgg23 7,940,534 12.9 s /
#: 7,918,814 12.1 s (7,934,406); grid2d_8M 2,510,478 13.1 s / 2,494,068 12.0 s
#: (2,519,126); grid2d_1M 921,074 6.4 s / 884,220 5.5 s (868,416). A patience of 12 with
#: phi = 1 gained another 0.3-1.3% in 12-28% more time.
GPU_ULTRA_ITERS = 6
#: Jet's stopping threshold elsewhere (Jet, GPU-HeiPa): progress is J below 0.999 x best.
JET_PHI = 0.999
#: On the CPU, where FM follows, a level of at least this many vertices that arrives
#: balanced skips Jet: FM alone refines it as well, several times faster. On large
#: levels Jet spends its time alternating an unconstrained LP round with a weak
#: rebalancing round that scans every vertex of the overloaded block, each pair gaining
#: ~0.3%: on the finest level of a 6-way split of grid3d_1M, Jet took 0.73 s to bring
#: J from 86,122 to 63,144; FM alone 0.135 s to 63,080. Measured on hm, one thread, the
#: eight 2^17 / 2^20 instances: J geometric mean the same (1,086,799 against
#: 1,086,802), time -16%; threshold 5,000: J +0.6%; 50,000: -0.2% J, -11% time.
#: hm-ultra's passes (its filter schedule is the point) always run. On the GPU path the
#: rule meets only host levels of 20-50k vertices: hm on an H100, 2^20 instances, time
#: -20% to -35%, J the same on the grids and del20, +2.7% on rgg20.
FM_ONLY_MIN_N = 20_000
#: Splits asked for localized FM (:func:`~procmap.kernels.fm_cpu.local_fm_refine`) run
#: it after the global FM pass on CPU levels up to this many vertices: its gains on
#: coarse levels carry to all finer ones, while on a finest level of a million vertices
#: it finds ~0.1% for about twice the global pass's time.
LOCAL_FM_MAX_N = 100_000
#: A localized search ends after this many moves without a new best (measured on hm's
#: top split: 5 / 10 / 20 give J -1.5% / -2.0% / -2.8% for +21% / +27% / +49% time).
LOCAL_FM_STALL = 10
#: Localized FM on a level scans at most this many times its directed edges
#: (``local_fm_refine(max_work=...)``): a search costs ~``LOCAL_FM_STALL`` times the
#: squared degree, so a dense graph would otherwise pay seconds (a 5,000-vertex random
#: graph of average degree 196: 4.0 s uncapped, 0.017 s at 5, global FM 0.65 s). hm on
#: the eight benchmark instances, J: uncapped 1,061,772, 10 1,061,174, 5 1,063,350, 2
#: 1,067,189, with times within the VM's noise.
LOCAL_FM_WORK = 5.0
#: A global FM pass scans at most this many times the level's directed edges
#: (``fm_refine(max_work=...)``): each move re-evaluates the mover's neighbours, which
#: costs the product of their degrees, so on power-law graphs the hubs made passes
#: quadratic. On meshes, Delaunay and rgg graphs the passes stop well before the cap.
FM_WORK = 3.0


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
            part: np.ndarray | None = None, coarsening: str = "hem") -> list[Level]:
    """Coarsen until ``n <= target_n``; returns the levels, finest first.

    ``max_vwgt`` caps coarse vertex weights (no pair heavier than ``L_max``), so a
    balanced initial partition of the coarsest graph stays possible. Given ``part``
    (a V-cycle), only vertices of the same block are contracted: matching runs on
    the graph without cut edges, so every coarse vertex lies in one block and the
    partition carries over to every level unchanged.

    ``coarsening="unionfind"`` clusters with G-kway's union-find, which keeps only
    10-30% of the vertices per level; a level where it would undershoot
    ``target_n / 2`` is matched with HEM instead (a coarsest graph far below the
    target leaves the initial partitioner too few, too heavy vertices).
    """
    if coarsening not in COARSENINGS:
        raise ValueError(f"coarsening must be one of {COARSENINGS}, got {coarsening!r}")
    levels = [Level(xadj, adjncy, adjwgt, vwgt, part=part)]
    while levels[-1].n > target_n:
        g = levels[-1]
        be = backend.of(g.xadj)
        mx, ma, mw = g.xadj, g.adjncy, g.adjwgt
        if g.part is not None:
            mx, ma, mw = be.internal_edges(g.xadj, g.adjncy, g.adjwgt, g.part)
        cmap, nc = None, 0
        if coarsening == "unionfind":
            cmap, nc = be.cluster_ids(mx, ma, mw, g.vwgt, max_vwgt, seed + len(levels))
            if nc < target_n // 2:
                cmap = None
        if cmap is None:
            match = be.two_hop_matching(mx, ma, mw, g.vwgt, max_vwgt, seed + len(levels))
            cmap, nc = be.coarse_ids(match)
        del mx, ma, mw  # a V-cycle's filtered CSR: not alive with contraction's scratch
        if nc > MIN_SHRINK * g.n:
            break
        coarse = be.contract(g.xadj, g.adjncy, g.adjwgt, g.vwgt, cmap, nc)
        g.cmap = cmap
        cpart = None
        if g.part is not None:
            cpart = be.xp.empty(nc, dtype=np.int32)
            cpart[cmap] = g.part
        if be.name == "gpu" and nc < backend.GPU_MIN_VERTICES:
            # small levels are faster on the host (and get FM there)
            coarse = tuple(to_host(a) for a in coarse)
            cpart = None if cpart is None else to_host(cpart)
        levels.append(Level(*coarse, part=cpart))
    return levels


def kway_partition(xadj, adjncy, adjwgt, vwgt, k: int, lmax: int, *, eps: float, seed: int = 0,
                   ultra: bool = False, prefix: np.ndarray | None = None,
                   dist: np.ndarray | None = None, coarsen_factor: int = COARSEN_FACTOR,
                   targets: np.ndarray | None = None, tries: int = 1,
                   fm: bool = True, vcycles: int = 0, jet_iters: int = 12,
                   coarsening: str = "hem", refinement: str = "jet",
                   local_fm: bool = False) -> np.ndarray:
    """Partition into ``k`` blocks of weight at most ``lmax``; returns int32 block ids.

    Minimises the edge cut, or J for the hierarchy ``prefix``/``dist`` when given
    (then blocks are PEs). ``eps`` guides the initial partitioner; ``lmax`` is the
    hard limit the refinement enforces. With ``tries > 1`` the whole multilevel cycle
    runs with ``tries`` seeds and the partition with the lowest objective among the
    balanced ones is kept (the top splits of ``hm`` dominate J, so they get more tries);
    the tries run concurrently (:func:`_each_try`), with the same result.
    ``jet_iters`` is Jet's patience: iterations without improvement before a level's
    refinement stops (Jet: 12). ``coarsening`` / ``refinement`` pick the schemes
    (:data:`COARSENINGS`, :data:`REFINEMENTS`). ``local_fm`` adds localized FM
    searches after FM on levels up to :data:`LOCAL_FM_MAX_N` vertices (with ``fm``, and
    only for a graph on the host).
    """
    if refinement not in REFINEMENTS:
        raise ValueError(f"refinement must be one of {REFINEMENTS}, got {refinement!r}")
    n = xadj.size - 1
    be = backend.of(xadj)
    if k <= 1 or n == 0:
        return be.xp.zeros(n, dtype=np.int32)
    if prefix is None:
        prefix = np.array([k], dtype=np.int64)
        dist = np.array([1.0])
    prefix = np.asarray(prefix, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    schemes = (coarsening, refinement)
    # localized FM only where the whole split runs on the host: after it, GPU levels
    # refine by Jet alone, and there it measured J +7.6% on grid2d_1M (hm, H100)
    fm_mode = (fm, local_fm and be.name == "cpu")

    def attempt(i):
        """One try: a multilevel cycle with its own seed, then the V-cycles."""
        s = seed + 7919 * i
        part, value = _vcycle(xadj, adjncy, adjwgt, vwgt, k, lmax, eps, s, ultra, prefix, dist,
                              coarsen_factor, targets, fm_mode, jet_iters=jet_iters,
                              schemes=schemes)
        for cycle in range(vcycles):
            # re-coarsen inside the blocks and refine again: coarse moves shift whole
            # clusters across block borders, which single-vertex moves cannot
            again, v2 = _vcycle(xadj, adjncy, adjwgt, vwgt, k, lmax, eps, s + cycle + 1, ultra,
                                prefix, dist, coarsen_factor, targets, fm_mode, part,
                                jet_iters, schemes)
            if v2 < value and int(be.block_weights(again, vwgt, k).max()) <= lmax:
                part, value = again, v2
        return part, value

    best, best_key = None, None
    tries = max(1, tries)
    graph_bytes = sum(int(a.nbytes) for a in (xadj, adjncy, adjwgt, vwgt) if a is not None)
    workers = _try_workers(tries, be.name == "gpu", n, adjncy.size, graph_bytes)
    for part, value in _each_try(attempt, tries, be.name == "gpu", workers):
        key = (int(be.block_weights(part, vwgt, k).max()) > lmax, value)
        if best_key is None or key < best_key:  # ties: the earlier try
            best, best_key = part, key
    if workers > 1:
        best = be.adopt(best)  # made on a worker's stream (GPU)
    if be.name == "gpu":  # no FM ran on the GPU levels: polish (see GPU_POLISH_ITERS)
        refine = be.refiner(refinement)
        best, _ = refine(xadj, adjncy, adjwgt, vwgt, best, k, lmax, prefix, dist, seed=seed,
                         max_iters=GPU_POLISH_ITERS, phi=GPU_POLISH_PHI)
    return best.astype(np.int32, copy=False)


#: procmap's target for peak GPU memory, in bytes per directed edge of the graph a split
#: partitions (the GPU issue's 100): concurrent tries are capped to stay under it.
PEAK_BYTES_PER_EDGE = 100
#: Device memory one try needs (its coarse levels, contraction scratch, refinement
#: state), per vertex and per directed edge of the graph it partitions. Measured on an
#: H100 from hm-ultra's top split run with 1, 2 and 4 concurrent tries on grid2d, del
#: and rgg at 1M and 8M vertices: 114-242 bytes per vertex per try, more on denser
#: graphs; this model (180 + 6 * degree) covers all of them within about 20%.
TRY_BYTES_PER_VERTEX = 180
TRY_BYTES_PER_EDGE = 6


def _try_workers(tries: int, gpu: bool, n: int, edges: int, graph_bytes: int) -> int:
    """How many tries run at once (see :func:`_each_try`): 1 (serial) with one try,
    under Numba's workqueue layer, or on the host with one Numba thread. On the GPU,
    no more than the free device memory holds, and no more than keep the split's peak
    memory (its graph, ``graph_bytes``, plus the running tries) under
    :data:`PEAK_BYTES_PER_EDGE`: on sparse graphs such as 2D grids one try is all the
    target allows (measured: 4 concurrent tries peak at 172-176 bytes per edge there,
    one at 65). The result does not depend on the number of workers, only the time."""
    if tries == 1 or threading_layer() == "workqueue":
        return 1
    if not gpu:
        return tries if nb.get_num_threads() > 1 else 1
    per_try = max(1, TRY_BYTES_PER_VERTEX * n + TRY_BYTES_PER_EDGE * edges)
    room = backend.gpu_free_bytes() // per_try
    within_target = (PEAK_BYTES_PER_EDGE * edges - graph_bytes) // per_try
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


def _vcycle(xadj, adjncy, adjwgt, vwgt, k, lmax, eps, seed, ultra, prefix, dist, coarsen_factor,
            targets, fm_mode, start=None, jet_iters=12, schemes=("hem", "jet")):
    """One coarsen / initial partition / refine cycle; returns ``(part, objective)``.

    With ``start`` (a partition) the cycle is a V-cycle that keeps blocks intact
    while coarsening and starts refining from ``start`` on the coarsest level.
    ``fm_mode`` is ``(fm, local_fm)`` and ``schemes`` is ``(coarsening, refinement)``.
    """
    coarsening, refinement = schemes
    fm, local_fm = fm_mode
    levels = coarsen(xadj, adjncy, adjwgt, vwgt, max(coarsen_factor * k, MIN_COARSE), lmax, seed,
                     start, coarsening)
    coarsest = levels[-1]
    if start is not None:
        part = coarsest.part
    else:
        host = [to_host(a) for a in (coarsest.xadj, coarsest.adjncy, coarsest.adjwgt,
                                     coarsest.vwgt)]
        part = backend.of(coarsest.xadj).asarray(metis_partition(*host, k, eps, seed, targets))
    value = None
    for depth in range(len(levels) - 1, -1, -1):
        g = levels[depth]
        be = backend.of(g.xadj)
        if depth < len(levels) - 1:
            part = be.asarray(part)[g.cmap]  # project the coarser partition onto this level
        host_fm = fm and be.name == "cpu"  # FM is sequential: a CPU step
        patience, phi = jet_iters, JET_PHI
        if be.name == "gpu":  # no FM follows (see GPU_POLISH_ITERS)
            patience = max(jet_iters, GPU_JET_ITERS)
            if ultra:
                patience, phi = GPU_ULTRA_ITERS, GPU_POLISH_PHI
        if (host_fm and not ultra and value is not None and g.n >= FM_ONLY_MIN_N
                and int(be.block_weights(part, g.vwgt, k).max()) <= lmax):
            # FM alone (FM_ONLY_MIN_N); projection keeps J, so value carries over
            part = np.ascontiguousarray(part, dtype=np.int32)
        elif refinement == "jet":
            # one Jet pass per filter ratio (17 with ultra), sharing their setup
            part, value = be.ultra_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                          prefix, dist, seed=seed + depth, max_iters=patience,
                                          phi=phi, filter_ratios=filter_schedule(
                                              ultra=ultra, finest=depth == 0))
        else:  # independent-set refinement has no filter ratio: one pass
            part, value = be.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                        prefix, dist, seed=seed + depth, max_iters=patience,
                                        phi=phi)
        if host_fm:
            value -= 2.0 * fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix,
                                     dist, max_work=FM_WORK)
            if local_fm and g.n <= LOCAL_FM_MAX_N:
                value -= 2.0 * local_fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                               prefix, dist, max_stall=LOCAL_FM_STALL,
                                               max_work=LOCAL_FM_WORK)
    return part, value
