"""One configuration of the multilevel pipeline: frozen contexts and named presets.

Every tuning choice of the mapping engines lives here (docs/design.md section 4): how
a graph is coarsened, how the coarsest graph gets its first partition or mapping, the
refinement chain run on every level (Jet or ISR label propagation, FM, localized FM),
the tries and V-cycles per split depth, rank placement's restarts and swap polish, and
the device thresholds. The engines receive a :class:`Context` and read nothing else;
kernel modules keep only implementation constants (CUDA block sizes, bucket counts,
queue capacities) and the defaults of their own signatures for direct calls.

``hm``, ``hm-ultra`` and ``im`` are presets (:data:`PRESETS`, :func:`preset`); the
engine ``auto`` is the ``im`` preset (rank placement runs its multisection context's
starts, then ``hm-ultra``'s, and polishes the best placement: :class:`PlacementContext`).
A user derives a configuration with :func:`dataclasses.replace`::

    from dataclasses import replace
    from procmap import map_tasks, preset

    im = preset("im")
    ctx = replace(im, fm=replace(im.fm, passes=4))
    mapping = map_tasks(graph, machine, context=ctx)

The schemes of every nested context (``im``'s initial multisection, the fallback
multisection) change together with :meth:`Context.with_schemes`.

This module imports nothing heavy (no NumPy, Numba or kernel): ``import procmap``
stays light (docs/design.md section 5).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from procmap.options import AUTO_GPU_MIN_EDGES, COARSENINGS, REFINEMENTS

__all__ = ["CoarseningContext", "RefinementContext", "FMContext", "LocalFMContext",
           "FlowContext", "SplitSchedule", "InitialMappingContext", "PlacementContext", "DeviceContext",
           "Context", "PRESETS", "preset"]


#: The starts of a graph whose coarsening stalled (:attr:`InitialMappingContext.stalled_start`).
STALLED_STARTS = ("stream", "random", "metis")


def _per_depth(values: tuple, depth: int):
    """The entry of a per-split-depth tuple for ``depth`` (deeper splits use the last)."""
    return values[min(depth, len(values) - 1)]


@dataclass(frozen=True)
class CoarseningContext:
    """How a graph is coarsened before its first partition (one multilevel cycle).

    ``scheme``
        ``"hem"``: heavy-edge matching (rating ``w^2 / (c(u) c(v))``) completed by
        two-hop (leaf, twin, relative) matching, Jet's and GPU-HeiPa's scheme; or
        ``"unionfind"``: G-kway's union-find clustering (whole pseudo-forest
        components, capped at the maximum vertex weight).
    ``factor``
        Coarsening stops once a level has at most ``factor * k`` vertices, ``k`` being
        the number of blocks of the partition this cycle computes: the children of one
        ``hm`` split (GPU-HeiPa: 8), or all PEs for ``im``, whose coarsest graph is
        mapped by a whole multisection (GPU-HeiProMap: 128 vertices per PE, which
        leaves the initial mapping room to shape blocks that refinement of a coarser
        mapping cannot find).
    ``min_vertices``
        Coarsening never stops above ``factor * k`` only to go below this many
        vertices: the target is ``max(factor * k, min_vertices)``. METIS partitions a
        graph of a few thousand vertices fast and better than Jet refines a tiny one
        up, and the small subgraphs of hm's deep splits then skip coarsening entirely.
        0: no floor.
    ``min_shrink``
        A level that keeps more than this fraction of its finer level's vertices ends
        coarsening (a matching that no longer shrinks the graph only adds levels).
    ``max_edge_keep``
        A level that keeps more than this fraction of its finer level's directed edges
        is dropped and ends coarsening. On power-law graphs matching pairs vertices but
        hardly contracts edges: every level would cost as much to refine as the one
        below it, and the initial partition of a coarsest graph with almost all the
        edges costs as much as one of the input while seeing fewer vertices. On meshes,
        road-like graphs and weighted Delaunay graphs a level keeps about half of the
        edges, so the rule never triggers there. 1: no limit.
    ``unionfind_undershoot``
        With ``"unionfind"``, a level whose clustering would leave fewer than
        ``target // unionfind_undershoot`` vertices is matched with HEM instead:
        union-find keeps only 10-30% of the vertices per level, and a coarsest graph far
        below the target leaves the initial partitioner too few, too heavy vertices.
    ``unmatched_threshold``
        Two-hop matching runs its next stage (leaf, then twin, then relative
        matching) while more than this fraction of the vertices is unmatched (Jet,
        GPU-HeiPa: 0.25).
    ``hem_max_rounds``
        Heavy-edge matching stops after this many proposal/handshake rounds, or
        earlier when a round matches nothing; the first few rounds match almost every
        vertex that will be matched, and late rounds touch few vertices.
    """

    scheme: str = "hem"
    factor: int = 8
    min_vertices: int = 3000
    min_shrink: float = 0.95
    max_edge_keep: float = 0.8
    unionfind_undershoot: int = 2
    unmatched_threshold: float = 0.25
    hem_max_rounds: int = 8

    def __post_init__(self):
        if self.scheme not in COARSENINGS:
            raise ValueError(f"coarsening scheme must be one of {COARSENINGS}, "
                             f"got {self.scheme!r}")

    def target(self, k: int) -> int:
        """The vertex count at which coarsening for a ``k``-way partition stops."""
        return max(self.factor * k, self.min_vertices)


#: Jet's "ultra" schedule (Jet / GPU-HeiPa): 17 passes, filter ratios 0.85 .. 0.05.
_ULTRA_FILTERS = tuple(round(0.85 - 0.05 * i, 2) for i in range(17))


@dataclass(frozen=True)
class RefinementContext:
    """Label-propagation refinement on every level (Jet, or G-kway's ISR), with Jet's
    weak then strong rebalancing.

    ``scheme``
        ``"jet"``: Jet label propagation with the afterburner; ``"isr"``: G-kway's
        independent-set refinement (cheaper, lower quality).
    ``patience``
        Jet's stopping rule on host levels: a level's refinement stops after this many
        iterations in a row without progress (Jet: 12). Where FM follows on every
        level, Jet can stop earlier and leave the rest to FM.
    ``phi``
        What counts as progress: an objective below ``phi`` times the best so far
        (Jet, GPU-HeiPa: 0.999).
    ``max_weak``
        Weak rebalancing rounds before strong rebalancing takes over (Jet: 2).
    ``filters_coarse`` / ``filters_finest``
        Jet's filter ratios on coarse levels and on the finest level, one refinement
        pass per ratio (GPU-HeiPa: 0.75 and 0.25; Jet uses 0.25 for unit edge weights
        and 0.75 otherwise). A move of negative gain is proposed only while its loss
        is below the ratio times its connection to its own block (cut objective).
    ``ultra_filters``
        The filter ratios of Jet's ultra schedule (17 passes, 0.85 .. 0.05), used on
        every level of the splits shallower than :attr:`SplitSchedule.ultra_depth`,
        except in a cycle whose graph did not coarsen (power-law graphs: there the
        passes cost several times the rest of the split and gain nothing).
        Splits on ultra levels never skip Jet for FM (the schedule is the point).
    ``single_pass_filter``
        Filter ratio of the single-pass refinements outside the multilevel cycle's
        schedule: ``im``'s levels, ISR, and the GPU polishes. Their objective is J
        (or the cut for a split's polish), refined with one ratio.
    ``gpu_patience``
        Patience on GPU levels, at least this (``max(patience, gpu_patience)``):
        GPU levels get no FM (it is sequential), so Jet refines them alone, and longer.
    ``gpu_ultra_patience`` / ``gpu_ultra_phi``
        Patience and phi of ultra passes on GPU levels: every iteration counts as
        progress there only if it improves at all (phi 1), at a shorter patience, since
        17 passes already run per level.
    ``polish_patience`` / ``polish_phi``
        The polish that ends a split made on the GPU, the finest GPU level of ``im``
        and :attr:`gpu_mapping_polish`: Jet until ``polish_patience`` iterations in a
        row bring no improvement at all (phi 1), collecting the many small gains that
        FM collects on the host. ``im`` counts only gains of 0.01% as progress (phi
        0.9999): on a dense 3D stencil its finest level otherwise spends much of the
        mapping's time on iterations whose gains together hardly move J.
    ``polish_start_patience``
        The polish of a whole mapping (the finest level of ``im``,
        :attr:`gpu_mapping_polish`) stops after its first ``polish_start_patience``
        iterations if none of them improved anything; once one has,
        :attr:`polish_patience` applies. Where the refinement before it left nothing to
        gain (power-law graphs, whose polishes find nothing), the full patience of idle
        iterations over the whole graph is pure cost. A split's polish keeps the full
        patience: on meshes its first gains can come late.
    ``group_levels``
        Refine a mapping top-down on every level but the coarsest of a cycle: first
        the partition of the PEs into the groups of this many hierarchy levels above
        the PEs (the top ones first: nodes, then processors), each group one block of
        its PEs' total ``L_max``, by the chain's label propagation with the
        group-level part of J as objective; then the PEs (0: PEs only). A move between
        groups that J refinement of the PEs cannot make, since the PEs on the other
        side are full, is a move between blocks with room at the group level; the
        vertices that change group then take the PE of their new group to which they
        have the heaviest edges
        (:func:`procmap.kernels.refinement.groups_cpu.place_in_groups`). ``im``'s
        coarse initial mapping leaves node borders that only such moves straighten.
    ``group_patience``
        Jet's patience when it refines groups, on every device (no FM follows there,
        and a group level has few blocks, so its iterations are cheap).
    ``group_min_step``
        A group level is refined only where crossing its borders costs at least this
        many times what crossing the borders inside its groups does
        (``dist[j + 1] >= group_min_step * dist[j]``): with flat distances a group move
        gains little and disturbs the PE borders around it more.
    ``group_max_n``
        Levels of at most this many vertices refine their groups; larger ones only as
        :attr:`group_keep_gain` allows. On a level of millions of vertices the group
        passes cost about as much as the rest of the level's refinement, more than what
        they gain there on most graphs is worth to ``im``, the fast engine.
    ``group_keep_gain``
        A level above :attr:`group_max_n` vertices still refines its groups when the
        level before it refined its groups too and, groups and PEs together, lowered J
        by at least this fraction (``None``: never). Where the projection of every
        level leaves that much to gain, the group borders are still far from straight
        and the group passes pay on the finest levels too: 3D meshes, whose group
        borders are surfaces, gain about twice as much per level as 2D meshes, Delaunay
        and random geometric graphs. Once a level skips the group passes, the finer
        ones do as well.
    ``device_group_levels``
        :attr:`group_levels` on GPU levels (host levels use :attr:`group_levels`); the
        GPU levels above :attr:`group_max_n` vertices follow :attr:`group_keep_gain`
        as host levels do. 1 in ``im``, the nodes only: below that size a group level
        costs one label propagation of a level that is small for the GPU, and on meshes
        the straightened node borders leave the PE refinement of the finer levels less
        to do (dense 3D stencils map faster), while random geometric graphs, whose
        borders it hardly moves, take the same time. The processor level as well (2)
        saves more time on such stencils but costs 2D meshes J.
    ``gpu_mapping_polish``
        ``hm`` on the GPU ends with a J-refinement of the whole mapping on the device
        (one upload serves the splits and it): its splits minimise cuts one hierarchy
        level at a time, and a J-refinement moves what they left along block borders.
        Off for ``hm-ultra``, whose ultra passes leave nothing for it.
    """

    scheme: str = "jet"
    patience: int = 12
    phi: float = 0.999
    max_weak: int = 2
    filters_coarse: tuple[float, ...] = (0.75,)
    filters_finest: tuple[float, ...] = (0.25,)
    ultra_filters: tuple[float, ...] = _ULTRA_FILTERS
    single_pass_filter: float = 0.25
    gpu_patience: int = 12
    gpu_ultra_patience: int = 6
    gpu_ultra_phi: float = 1.0
    polish_patience: int = 30
    polish_start_patience: int = 8
    polish_phi: float = 1.0
    group_levels: int = 0
    group_patience: int = 8
    group_min_step: float = 4.0
    group_max_n: int = 300_000
    group_keep_gain: float | None = None
    device_group_levels: int = 0
    gpu_mapping_polish: bool = False

    def __post_init__(self):
        if self.scheme not in REFINEMENTS:
            raise ValueError(f"refinement scheme must be one of {REFINEMENTS}, "
                             f"got {self.scheme!r}")

    def filters(self, *, ultra: bool, finest: bool) -> tuple[float, ...]:
        """Jet's filter ratios on one level: one pass per ratio."""
        if ultra:
            return self.ultra_filters
        return self.filters_finest if finest else self.filters_coarse


@dataclass(frozen=True)
class FMContext:
    """Global k-way FM passes after label propagation on every host level (FM is
    sequential: the CPU backend's quality step; GPU levels skip it). The gain is the
    change in the level's objective (cut or J).

    ``passes``
        FM passes per level at most; 0 turns FM off (then no level skips Jet either).
    ``stall_divisor`` / ``stall_min``
        A pass ends after ``max(stall_min, n // stall_divisor)`` moves without a new
        best on a level of ``n`` vertices: longer searches climb out of deeper local
        optima, at a cost linear in the level.
    ``min_gain``
        Passes stop once one improves the objective by no more than this fraction of
        it (0: only a pass that gains nothing stops them).
    ``max_work``
        The passes of a level together scan at most this many times its directed
        edges; the pass that reaches the cap is the last. Each move re-evaluates the
        mover's neighbours, which costs the product of their degrees, so on power-law
        graphs the hubs would make passes quadratic, and every pass there runs into
        the cap while gaining a fraction of a percent: a cap per level, not per pass,
        keeps FM's share of a level's time bounded. On meshes, Delaunay and rgg graphs
        all passes together stop well before the cap.
    ``fm_only_min_n``
        On a host level of at least this many vertices that arrives balanced, FM
        refines alone and Jet is skipped: on large levels Jet spends its time
        alternating an unconstrained round with a weak rebalancing round, each pair
        gaining little, while FM reaches the same objective several times faster.
        ``None``: Jet always runs. Levels refined with Jet's ultra schedule always run
        Jet.
    """

    passes: int = 4
    stall_divisor: int = 100
    stall_min: int = 50
    min_gain: float = 0.0
    max_work: float = 3.0
    fm_only_min_n: int | None = 20_000

    def max_stall(self, n: int) -> int:
        """Moves without a new best that end a pass on a level of ``n`` vertices."""
        return max(self.stall_min, n // self.stall_divisor)


@dataclass(frozen=True)
class LocalFMContext:
    """Localized FM searches after the global FM pass (seeded at boundary vertices,
    each search bounded; host levels of splits whose whole cycle runs on the host).

    ``depth``
        Splits shallower than this depth run localized FM (0: none). The top split's
        cut crosses the costliest links, so it repays the extra search most.
    ``max_n``
        Only levels of at most this many vertices run it: its gains on coarse levels
        carry to all finer ones, while on a finest level of a million vertices it finds
        little for about twice the global pass's time.
    ``stall``
        A search ends after this many moves without a new best.
    ``max_work``
        The searches of a level scan at most this many times its directed edges: a
        search costs about ``stall`` times the squared degree, so a dense graph would
        otherwise pay seconds.
    ``rounds``
        Rounds of searches per level (each from every boundary vertex not yet moved).
    """

    depth: int = 1
    max_n: int = 100_000
    stall: int = 10
    max_work: float = 5.0
    rounds: int = 1


@dataclass(frozen=True)
class FlowContext:
    """Max-flow refinement of the cut after FM (KaFFPa's pairwise flows,
    ``kernels/refinement/flow_cpu.py``): per pair of adjacent blocks, a minimum s-t cut
    of a region grown around their border. Host levels of ``hm`` splits (the edge cut;
    J moves change distances to third blocks, which a pair's flow does not see).

    ``depth``
        Splits shallower than this depth run it on every host level (0: none).
    ``alpha``
        Per split depth (deeper splits use the last): a region may take up to ``alpha``
        times the room the other block has under ``lmax`` (KaFFPa's adaptive regions: a
        minimum cut that then overloads a block is not taken, and the pair tries again
        with half, down to 1, where every cut fits). Larger regions find more, the
        border can move further than one block's room, and cost more.
    ``rounds``
        Passes over the block pairs per level; a round that improves nothing ends them.

    Levels whose blocks have no room at all (``k * lmax`` equal to the total weight:
    rank placement with as many tasks as slots) skip flows: every block is full, so a
    region may take no vertex.
    """

    depth: int = 0
    alpha: tuple[float, ...] = (4.0,)
    rounds: int = 2

    def __post_init__(self):
        if not self.alpha or min(self.alpha) < 1.0:
            raise ValueError(f"flow alpha must be at least 1 at every depth, got {self.alpha}")

    def alpha_at(self, depth: int) -> float:
        """The region factor of a split at ``depth``; 0 where the split runs no flows."""
        return float(_per_depth(self.alpha, depth)) if depth < self.depth else 0.0


@dataclass(frozen=True)
class SplitSchedule:
    """Effort per multisection split, by split depth (0: the top split, whose cut
    crosses the most expensive links; deeper splits use the last entry).

    ``tries``
        Complete multilevel cycles, each with its own seed; the balanced partition
        with the lowest objective is kept (the tries may run concurrently; the result
        does not depend on it).
    ``vcycles``
        V-cycles after each try: re-coarsen inside the blocks and refine again, so
        that coarse moves shift whole clusters across block borders.
    ``ultra_depth``
        Splits shallower than this depth refine with Jet's ultra filter schedule
        (:attr:`RefinementContext.ultra_filters`); 0: none.
    ``coarsen``
        Whether a split at this depth tries to coarsen its graph. ``False`` where the
        graph is known not to coarsen: ``im`` maps a graph whose coarsening it already saw
        fail with an hm whose top split starts from a random partition at once
        (:meth:`Context.initial_context`), instead of coarsening it again, for nothing.
    """

    tries: tuple[int, ...] = (1,)
    vcycles: tuple[int, ...] = (1, 0)
    ultra_depth: int = 0
    coarsen: tuple[bool, ...] = (True,)

    def tries_at(self, depth: int) -> int:
        return _per_depth(self.tries, depth)

    def vcycles_at(self, depth: int) -> int:
        return _per_depth(self.vcycles, depth)

    def ultra_at(self, depth: int) -> bool:
        return depth < self.ultra_depth

    def coarsen_at(self, depth: int) -> bool:
        return _per_depth(self.coarsen, depth)


@dataclass(frozen=True)
class InitialMappingContext:
    """How the coarsest graph gets its first partition or mapping.

    ``multisection``
        ``None``: METIS k-way on the coarsest graph of each multilevel cycle (the
        ``hm`` pipelines). A :class:`Context` (an ``hm`` pipeline): the coarsest graph
        of ``im`` is mapped onto the whole machine by hierarchical multisection with
        it; the graph is small, so it can afford the tries and V-cycles the block
        shapes of the final mapping depend on.
    ``uncoarsened``
        The ``hm`` pipeline that maps ``im``'s graph when coarsening stopped at the
        input itself (power-law graphs, :attr:`CoarseningContext.max_edge_keep`): a
        multisection of the whole graph cannot afford :attr:`multisection`'s tries,
        and ``im`` then costs one ``hm`` run plus its refinement (``im``'s preset: ``hm``
        without FM, since that refinement runs FM on the whole graph). ``None``:
        :attr:`multisection`.
    ``stalled_start``
        The start of a coarsest graph that coarsening left above its target: levels
        stopped shrinking in edges (:attr:`CoarseningContext.max_edge_keep`), in
        practice on power-law graphs, whether at the input itself or a few levels down
        (the subgraphs of ``hm``'s deep splits). METIS coarsens such graphs as badly as
        matching here does, so it is slow, and serial (one call at a time in the
        process).

        * ``"stream"``: one streaming pass (Fennel,
          :func:`procmap.engines.initial.stream_partition`) that places hubs first and
          every vertex with the placed neighbours it has most edge weight to, under a
          load cost. Jet then starts near a local optimum instead of spending dozens of
          iterations pulling a random partition together and rebalancing what label
          propagation overloads. The pass is sequential, so a graph on the GPU starts
          as with ``"random"``, where Jet refines in parallel.
        * ``"random"``: a graph that did not coarsen at all starts from a seeded random
          balanced partition; one that coarsened a little, from METIS.
        * ``"metis"``: METIS, as for any coarsest graph.

        It acts in ``hm`` pipelines; ``im``'s coarsest graph is mapped by its nested ones
        (:attr:`multisection`, :attr:`uncoarsened`), whose own settings apply.
    """

    multisection: Context | None = None
    uncoarsened: Context | None = None
    stalled_start: str = "stream"

    def __post_init__(self):
        if self.stalled_start not in STALLED_STARTS:
            raise ValueError(f"stalled_start must be one of {STALLED_STARTS}, "
                             f"got {self.stalled_start!r}")


@dataclass(frozen=True)
class PlacementContext:
    """Rank placement (``n <= slots``): exact capacities in every split, swap polish,
    never worse than block placement. Every candidate placement (each multisection start,
    and block placement) is polished by swaps; the one with the lowest J is returned,
    ties going to the earliest (this pipeline's starts, then :attr:`extra`'s, then
    block placement). The budget is a number of starts, never a time: the same input and
    seed give the same placement on any machine.

    ``multistart_n``
        Problems up to this many tasks try :attr:`starts` multisection seeds, each
        polished by swaps: they take milliseconds, and swaps alone stop in local optima.
    ``starts``
        Multisection seeds tried on those problems (1 above :attr:`multistart_n`).
        Start ``a`` uses seed ``seed + 1009 a``, in every pipeline.
    ``swap_passes``
        Swap refinement passes at most per placement (the multisection's and block
        placement's).
    ``extra``
        A second ``hm`` pipeline whose starts are tried as well (``None``: none). The
        ``im`` preset, hence ``auto``, adds ``hm-ultra``: its multisections are often better,
        but each costs several times an ``hm`` start.
        Starts with the same seed as the engine of that preset give the same candidate,
        so where both pipelines run all their starts the result is never worse than
        either engine's.
    ``extra_starts``
        Starts of :attr:`extra` by problem size: ``(max_n, starts)`` steps with
        ascending ``max_n``; a problem of ``n`` tasks tries the ``starts`` of the first
        step with ``n <= max_n``, none above the last step.
    ``polish_group``
        The winning candidate is swap-refined once more with a wider neighbourhood:
        a task's candidate PEs are all PEs of the hierarchy groups (a processor's, a
        node's) that hold its neighbours, the largest groups of at most this many PEs
        (0, or no group that small: no polish). Plain swaps only try the neighbours'
        own PEs, which are usually full; the wider search also moves a task next to
        them. It costs about ``group`` times a plain swap pass, so it runs once, on
        the winner, and never raises J (the result stays at most every candidate's).
    """

    multistart_n: int = 10_000
    starts: int = 4
    swap_passes: int = 20
    extra: Context | None = None
    extra_starts: tuple[tuple[int, int], ...] = ()
    polish_group: int = 0

    def polish_group_for(self, prefix_sizes) -> int:
        """PEs per group of the polish on a hierarchy with group sizes
        ``prefix_sizes`` (``P_1 .. P_l``, ascending); 0: no polish."""
        fitting = [int(p) for p in prefix_sizes if int(p) <= self.polish_group]
        return max(fitting) if fitting and max(fitting) > 1 else 0

    def starts_at(self, n: int) -> int:
        """Starts of this pipeline for ``n`` tasks."""
        return self.starts if n <= self.multistart_n else 1

    def extra_starts_at(self, n: int) -> int:
        """Starts of :attr:`extra` for ``n`` tasks (0 without one)."""
        if self.extra is None:
            return 0
        for max_n, starts in self.extra_starts:
            if n <= max_n:
                return starts
        return 0


@dataclass(frozen=True)
class DeviceContext:
    """Where the pipeline runs, and how it uses the GPU.

    ``gpu_min_vertices`` / ``gpu_min_edges``
        On the GPU, graphs, subgraphs and levels with fewer vertices run on the host
        (:meth:`on_gpu`): their kernels are shorter than a launch costs, and the host
        adds FM. Unless they have at least ``gpu_min_edges`` directed edges: the deep
        splits of power-law graphs hand over dense subgraphs (R-MAT 2^20: 22k
        vertices with 6.5M directed edges), whose refinement costs the host seconds.
        Rank placement below ``gpu_min_vertices`` tasks always runs on the CPU.
    ``device_splits``
        Device subgraphs split at the same time, at most: each holds its multilevel
        hierarchy in GPU memory, and a few concurrent splits already fill the gaps of
        one (its host levels and loop synchronisations).
    ``peak_bytes_per_edge``
        Target for peak GPU memory, in bytes per directed edge of the graph a split
        partitions: concurrent tries are capped to stay under it.
    ``try_bytes_per_vertex`` / ``try_bytes_per_edge``
        The model of the device memory one try needs (its coarse levels, contraction
        scratch, refinement state): ``try_bytes_per_vertex * n + try_bytes_per_edge *
        directed edges``.
    ``auto_gpu_min_edges``
        ``device="auto"`` picks the GPU for graphs with at least this many directed
        edges when one is usable (below it, transfers, compilation and launches cost
        more than they save).
    ``thread_min_vertices``
        ``hm`` splits a subgraph of fewer vertices in the thread that holds it, with
        its whole subtree of splits, instead of handing it to a worker thread: the
        hand-off and the Numba thread set-up cost more than such a split (rank
        placement's subgraphs are all this small).
    """

    gpu_min_vertices: int = 50_000
    gpu_min_edges: int = 1_000_000
    device_splits: int = 4
    peak_bytes_per_edge: int = 100
    try_bytes_per_vertex: int = 180
    try_bytes_per_edge: int = 6
    auto_gpu_min_edges: int = AUTO_GPU_MIN_EDGES
    thread_min_vertices: int = 1024

    def on_gpu(self, n: int, m: int) -> bool:
        """Whether a graph of ``n`` vertices and ``m`` directed edges is large enough
        for the GPU (where one is used): :attr:`gpu_min_vertices` or :attr:`gpu_min_edges`."""
        return n >= self.gpu_min_vertices or m >= self.gpu_min_edges


@dataclass(frozen=True)
class Context:
    """The whole configuration of one mapping engine.

    ``name``
        Reported as :attr:`procmap.Mapping.engine` for mappings made by this context.
    ``pipeline``
        ``"hm"``: hierarchical multisection, one multilevel cycle (edge cut) per split
        from the top level down; ``"im"``: integrated mapping, one multilevel cycle of
        the whole graph with the J objective, whose coarsest graph is mapped by
        :attr:`initial`.
    ``coarsening``
        :class:`CoarseningContext` of the pipeline's cycles (an ``hm`` split's, or
        ``im``'s whole graph).
    ``refinement``
        :class:`RefinementContext`: label propagation on every level.
    ``fm``
        :class:`FMContext`: FM passes after label propagation on host levels.
    ``local_fm``
        :class:`LocalFMContext`: localized FM after the passes (``hm`` splits).
    ``flow``
        :class:`FlowContext`: max-flow refinement of the cut after FM (``hm`` splits).
    ``schedule``
        :class:`SplitSchedule`: tries, V-cycles and ultra levels per split depth
        (``hm`` pipelines).
    ``initial``
        :class:`InitialMappingContext`: the first partition or mapping of the coarsest
        graph.
    ``placement``
        :class:`PlacementContext`: rank placement's restarts and swap polish.
    ``device``
        :class:`DeviceContext`: device thresholds and GPU memory model, for this
        context and every context nested in it.
    ``multisection``
        The ``hm`` pipeline this context uses where it cannot run itself: rank placement
        and machines with unusable PEs (``im``'s refinement has one ``L_max`` for every
        PE, so it cannot keep PEs empty). ``None``: this context itself (``hm``
        pipelines).
    """

    name: str
    pipeline: str = "hm"
    coarsening: CoarseningContext = field(default_factory=CoarseningContext)
    refinement: RefinementContext = field(default_factory=RefinementContext)
    fm: FMContext = field(default_factory=FMContext)
    local_fm: LocalFMContext = field(default_factory=LocalFMContext)
    flow: FlowContext = field(default_factory=FlowContext)
    schedule: SplitSchedule = field(default_factory=SplitSchedule)
    initial: InitialMappingContext = field(default_factory=InitialMappingContext)
    placement: PlacementContext = field(default_factory=PlacementContext)
    device: DeviceContext = field(default_factory=DeviceContext)
    multisection: Context | None = None

    def __post_init__(self):
        if self.pipeline not in ("hm", "im"):
            raise ValueError(f"pipeline must be 'hm' or 'im', got {self.pipeline!r}")
        if self.pipeline == "im" and self.initial.multisection is None:
            raise ValueError("an 'im' context needs initial.multisection (the hm context "
                             "that maps its coarsest graph)")

    def with_schemes(self, coarsening: str | None = None,
                     refinement: str | None = None) -> Context:
        """This context with the coarsening and/or refinement scheme replaced here and
        in every nested context (``None`` keeps a scheme)."""
        ctx = self
        if coarsening is not None:
            ctx = replace(ctx, coarsening=replace(ctx.coarsening, scheme=coarsening))
        if refinement is not None:
            ctx = replace(ctx, refinement=replace(ctx.refinement, scheme=refinement))
        if ctx.initial.multisection is not None:
            ctx = replace(ctx, initial=replace(ctx.initial, multisection=ctx.initial.multisection
                                               .with_schemes(coarsening, refinement)))
        if ctx.initial.uncoarsened is not None:
            ctx = replace(ctx, initial=replace(ctx.initial, uncoarsened=ctx.initial.uncoarsened
                                               .with_schemes(coarsening, refinement)))
        if ctx.multisection is not None:
            ctx = replace(ctx, multisection=ctx.multisection.with_schemes(coarsening,
                                                                          refinement))
        if ctx.placement.extra is not None:
            ctx = replace(ctx, placement=replace(ctx.placement, extra=ctx.placement.extra
                                                 .with_schemes(coarsening, refinement)))
        return ctx

    def hm_context(self) -> Context:
        """The ``hm`` pipeline for rank placement and unusable PEs (:attr:`multisection`),
        with this context's device and placement settings."""
        if self.multisection is None:
            return self
        return replace(self.multisection, device=self.device, placement=self.placement)

    def initial_context(self, coarsened: bool = True) -> Context:
        """``im``'s initial multisection, with this context's device settings;
        ``coarsened=False``: the one for a coarsest graph that is the input itself
        (:attr:`InitialMappingContext.uncoarsened`), whose top split does not try to
        coarsen that graph again (:attr:`SplitSchedule.coarsen`)."""
        init = self.initial
        if coarsened:
            return replace(init.multisection, device=self.device)
        chosen = init.multisection if init.uncoarsened is None else init.uncoarsened
        schedule = replace(chosen.schedule, coarsen=(False, *chosen.schedule.coarsen))
        return replace(chosen, device=self.device, schedule=schedule)


# ------------------------------------------------------------------ presets
#: ``hm``: FM follows Jet on every level, so Jet stops earlier than its own 12.
_HM = Context(
    name="hm",
    refinement=RefinementContext(patience=8, gpu_mapping_polish=True),
    schedule=SplitSchedule(tries=(1,), vcycles=(1, 0), ultra_depth=0),
)

#: ``hm-ultra``: more tries and V-cycles where the cut is expensive (the top splits),
#: Jet's ultra schedule on the two top levels of splits, Jet's own patience, and
#: max-flow refinement after FM in the splits of the three top levels.
_HM_ULTRA = Context(
    name="hm-ultra",
    refinement=RefinementContext(patience=12),
    schedule=SplitSchedule(tries=(5, 2, 1), vcycles=(3, 1, 0), ultra_depth=2),
    flow=FlowContext(depth=3),
)

#: ``im``'s initial mapping: hm on the coarsest graph, with tries and V-cycles on its
#: top split and no localized FM (on the coarse, dense graphs im starts from, its
#: searches cost more than the initial mapping itself; im is the fast engine).
_IM_INITIAL = Context(
    name="hm",
    refinement=RefinementContext(patience=12),
    local_fm=LocalFMContext(depth=0),
    schedule=SplitSchedule(tries=(2, 1), vcycles=(1, 0), ultra_depth=0),
)

#: ``im``'s mapping of a graph that did not coarsen (power-law): ``hm`` without FM. im's
#: J refinement of the whole graph runs FM right after it, with the J gain; cut FM in
#: every split before it would do much of the same work, serially, twice.
_IM_UNCOARSENED = replace(_HM, fm=replace(_HM.fm, passes=0))

#: ``im``: coarsen the whole graph to 128 vertices per PE, map it with hm, then refine J
#: on every level, top-down: the nodes and processors as groups (on large levels only
#: while the levels keep gaining much: 3D meshes), then the PEs; each with a short Jet
#: (FM follows and does the rest), then longer FM passes than hm's, since the coarse
#: initial mapping leaves cluster-shaped block borders.
#: Rank placement (hence ``auto``'s): hm starts, then hm-ultra starts (all four of each up
#: to 512 tasks, so never worse than either engine there; fewer above, within the time
#: a placement of 1024 ranks may take), block placement, and a node-wide swap polish.
_IM = Context(
    name="im",
    pipeline="im",
    coarsening=CoarseningContext(factor=128, min_vertices=0),
    refinement=RefinementContext(patience=3, filters_coarse=(0.25,), group_levels=2,
                                 group_keep_gain=0.05, device_group_levels=1,
                                 polish_phi=0.9999),
    fm=FMContext(passes=10, stall_divisor=50, min_gain=0.001, max_work=6.0,
                 fm_only_min_n=None),
    local_fm=LocalFMContext(depth=0),
    initial=InitialMappingContext(multisection=_IM_INITIAL, uncoarsened=_IM_UNCOARSENED),
    placement=PlacementContext(multistart_n=512, extra=_HM_ULTRA,
                               extra_starts=((512, 4), (2048, 2), (8192, 1)),
                               polish_group=32),
    multisection=_HM,
)

#: The named presets. The engine ``auto`` is ``im`` (whose rank placement runs ``hm`` and
#: ``hm-ultra`` starts, and whose machines with unusable PEs run ``hm``).
PRESETS: dict[str, Context] = {"hm": _HM, "hm-ultra": _HM_ULTRA, "im": _IM}


def preset(name: str) -> Context:
    """The preset of an engine name (``"hm"``, ``"hm-ultra"``, ``"im"``; ``"auto"`` is
    ``"im"``). Contexts are frozen: derive with :func:`dataclasses.replace`."""
    if name == "auto":
        name = "im"
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of "
                         f"{', '.join(PRESETS)} or auto") from None
