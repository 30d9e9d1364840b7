"""Refinement while uncoarsening: the one loop every engine runs (docs/design.md section 4).

Every multilevel cycle ends the same way. :func:`uncoarsen` walks the levels from
the coarsest to the finest, projects the partition (or mapping) onto each level and
calls :func:`refine_level`, which runs the context's refinement chain there:

0. for ``im``, the groups of the top hierarchy levels first (nodes, then processors:
   :attr:`~procmap.engines.context.RefinementContext.group_levels`, on GPU levels
   ``device_group_levels``), each refined as a partition by step 1, its moved vertices
   then placed on PEs of their new groups; not on the coarsest level, whose mapping
   was just computed;
1. label propagation (:class:`~procmap.engines.context.RefinementContext`): Jet, one
   pass per filter ratio of the level, or G-kway's ISR; with Jet's weak and strong
   rebalancing;
2. global FM passes (:class:`~procmap.engines.context.FMContext`), on host levels;
3. max-flow refinement of the cut (:class:`~procmap.engines.context.FlowContext`), on
   host levels where the plan asks for it and the blocks have room;
4. localized FM searches (:class:`~procmap.engines.context.LocalFMContext`), where the
   plan asks for them.

The objective is the edge cut (``prefix = [k]``, ``dist = [1]``) or J for the
hierarchy ``prefix``/``dist``; blocks never end above ``lmax``. An ``hm`` split, a
V-cycle and ``im``'s integrated mapping differ only in their :class:`LevelPlan` and
context. Devices: each level refines on the backend its arrays live on; GPU levels
get no FM (it is sequential) and let Jet run longer instead.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from procmap.kernels import backend
from procmap.kernels.refinement.flow_cpu import flow_refine
from procmap.kernels.refinement.fm_cpu import fm_refine, local_fm_refine

if TYPE_CHECKING:
    from .context import Context
    from .multilevel import Level, Problem


@dataclass(frozen=True)
class LevelPlan:
    """What a cycle asks of every level, beside the context.

    ``ultra``
        Jet's ultra schedule (:attr:`RefinementContext.ultra_filters`) on every level;
        such levels never skip Jet for FM.
    ``local_fm``
        Localized FM after the global passes, on host levels of at most
        :attr:`LocalFMContext.max_n` vertices.
    ``flow``
        Max-flow refinement of the cut (:class:`FlowContext`) after FM, on host levels
        of a cut objective, with this region factor ``alpha`` (0: none).
    ``polish_finest``
        The finest level, when it is on the GPU, refines with the polish patience and
        phi (:attr:`RefinementContext.polish_patience`): ``im``'s last step. ``hm``'s
        splits polish after all their tries instead (``multilevel.kway_partition``).
    """

    ultra: bool = False
    local_fm: bool = False
    polish_finest: bool = False
    flow: float = 0.0


def refine_level(g: Level, part, problem: Problem, ctx: Context, plan: LevelPlan, *,
                 depth: int, seed: int, value: float | None = None, groups: bool = False):
    """Refine ``part`` on level ``g`` (``depth`` 0: the finest); returns
    ``(part, objective)``.

    ``value`` is the objective of ``part`` when known (the projection of a refined
    coarser level keeps it): a balanced host level of at least
    :attr:`FMContext.fm_only_min_n` vertices then goes to FM directly. ``groups``:
    refine the hierarchy's groups first (:func:`refine_groups`; :func:`uncoarsen`
    decides on which levels, :func:`wants_groups`).
    """
    ref, fm, lfm = ctx.refinement, ctx.fm, ctx.local_fm
    be = backend.of(g.xadj)
    group_levels = ref.group_levels if be.runs_sequential_refiners else ref.device_group_levels
    if groups and group_levels > 0 and problem.prefix.size > 1:
        part = refine_groups(g, part, problem, ctx, plan, group_levels, depth=depth, seed=seed)
        value = None
    k, lmax, prefix, dist = problem.k, problem.lmax, problem.prefix, problem.dist
    host_fm = fm.passes > 0 and be.runs_sequential_refiners
    patience, start, phi = _patience(ctx, plan, not be.runs_sequential_refiners, depth == 0)
    if (host_fm and not plan.ultra and value is not None and fm.fm_only_min_n is not None
            and g.n >= fm.fm_only_min_n
            and int(be.block_weights(part, g.vwgt, k).max()) <= lmax):
        part = np.ascontiguousarray(part, dtype=np.int32)  # FM alone; value carries over
    elif ref.scheme == "jet":
        # one Jet pass per filter ratio, sharing their setup
        part, value = be.ultra_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix,
                                      dist, seed=seed, max_iters=patience, start_iters=start,
                                      phi=phi, max_weak=ref.max_weak,
                                      filter_ratios=ref.filters(ultra=plan.ultra,
                                                                finest=depth == 0))
    else:  # independent-set refinement has no filter schedule: one pass
        part, value = be.isr_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix,
                                    dist, seed=seed, max_iters=patience, start_iters=start,
                                    phi=phi, max_weak=ref.max_weak,
                                    filter_ratio=ref.single_pass_filter)
    # the refiners' gains count one direction of each edge: value / 2 is their scale
    if host_fm:
        value -= 2.0 * fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, prefix, dist,
                                 max_passes=fm.passes, max_stall=fm.max_stall(g.n),
                                 min_gain=fm.min_gain * value / 2 if fm.min_gain else 0.0,
                                 max_work=fm.max_work)
    # with no room at all (k * lmax equal to the level's weight: rank placement with as
    # many tasks as slots) every block is full and a flow region cannot take a vertex
    if (plan.flow and be.runs_sequential_refiners and prefix.size == 1
            and k * lmax > int(g.vwgt.sum())):
        value -= 2.0 * flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                   alpha=plan.flow, rounds=ctx.flow.rounds)
    if host_fm and plan.local_fm and g.n <= lfm.max_n:
        value -= 2.0 * local_fm_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                       prefix, dist, max_stall=lfm.stall,
                                       max_rounds=lfm.rounds, max_work=lfm.max_work)
    return part, value


def refine_groups(g: Level, pes, problem: Problem, ctx: Context, plan: LevelPlan,
                  levels: int, *, depth: int, seed: int):
    """Refine the mapping ``pes`` of level ``g`` group level by group level, top-down,
    the ``levels`` hierarchy levels above the PEs (:attr:`RefinementContext.group_levels`,
    ``device_group_levels`` on GPU levels); returns the new task -> PE.

    The groups of hierarchy level ``j`` (``size = prefix[j]`` PEs each) are the blocks of
    a problem with ``k / size`` blocks of weight ``size * lmax`` whose objective is the
    part of J between groups (``prefix[j + 1:] / size``, ``dist[j + 1:]``), refined by
    the chain's label propagation with :attr:`RefinementContext.group_patience` on every
    device (FM, where the level has it, follows on the PEs: on groups it cost more than
    it gained). Levels whose distance step is below
    :attr:`RefinementContext.group_min_step` are skipped. The vertices whose group
    changed then move to PEs of their new group (``Backend.place_in_groups``).
    """
    be = backend.of(g.xadj)
    prefix, dist = problem.prefix, problem.dist
    ref = ctx.refinement
    lp_only = replace(ctx, fm=replace(ctx.fm, passes=0),
                      refinement=replace(ref, patience=ref.group_patience,
                                         gpu_patience=ref.group_patience))
    top = prefix.size - 1  # prefix[top] is every PE: one group, nothing to refine
    for j in range(top - 1, max(-1, top - 1 - levels), -1):
        size = int(prefix[j])
        if size <= 1 or dist[j + 1] < ref.group_min_step * dist[j]:
            continue
        sub = replace(problem, k=problem.k // size, lmax=size * problem.lmax,
                      prefix=prefix[j + 1:] // size, dist=dist[j + 1:], targets=None)
        grouped, _ = refine_level(g, pes // size, sub, lp_only,
                                  replace(plan, local_fm=False, polish_finest=False),
                                  depth=depth, seed=seed)
        pes = be.place_in_groups(g.xadj, g.adjncy, g.adjwgt, g.vwgt, pes, grouped, size,
                                 problem.k)
    return pes


def uncoarsen(levels: list[Level], part, problem: Problem, ctx: Context, plan: LevelPlan,
              seed: int):
    """Project ``part`` (a partition of the coarsest level, ``levels[-1]``) level by
    level onto the finest one, refining each with :func:`refine_level` (level ``d``
    with seed ``seed + d``; the hierarchy's groups first on every level but the
    coarsest, where :func:`wants_groups` says so); returns ``(part, objective)`` on the
    finest level."""
    value, gain = None, None
    for depth in range(len(levels) - 1, -1, -1):
        g = levels[depth]
        part = backend.of(g.xadj).asarray(part)  # where the level is
        if depth < len(levels) - 1:
            part = part[g.cmap]  # the coarser level's partition
        projected = value  # contraction keeps J: the projection's J is the coarser level's
        groups = depth < len(levels) - 1 and wants_groups(ctx, g.n, gain)
        part, value = refine_level(g, part, problem, ctx, plan, depth=depth, seed=seed + depth,
                                   value=value, groups=groups)
        # the rule looks at levels that refined their groups: once one skips them, so
        # do all finer levels
        gain = (projected - value) / projected if groups and projected else None
    return part, value


def wants_groups(ctx: Context, n: int, previous_gain: float | None) -> bool:
    """Whether a level of ``n`` vertices refines its groups, given the fraction by which
    the refinement of the coarser level before it, groups included, lowered the
    objective (``None``: unknown, or that level did not refine its groups): at most
    :attr:`RefinementContext.group_max_n` vertices, or above while that gain is at
    least :attr:`RefinementContext.group_keep_gain`."""
    ref = ctx.refinement
    if n <= ref.group_max_n:
        return True
    return (ref.group_keep_gain is not None and previous_gain is not None
            and previous_gain >= ref.group_keep_gain)


def _patience(ctx: Context, plan: LevelPlan, jet_alone: bool, finest: bool
              ) -> tuple[int, int, float]:
    """Jet's ``(patience, start patience, phi)`` on a level: the host's, or where no FM
    follows (GPU levels), the polish's (finest level of a ``polish_finest`` plan), the
    ultra passes', or at least :attr:`RefinementContext.gpu_patience`. The start
    patience (before the first improvement) is the patience, except for the polish."""
    ref = ctx.refinement
    if not jet_alone:
        return ref.patience, ref.patience, ref.phi
    if plan.polish_finest and finest:
        return ref.polish_patience, ref.polish_start_patience, ref.polish_phi
    if plan.ultra:
        return ref.gpu_ultra_patience, ref.gpu_ultra_patience, ref.gpu_ultra_phi
    patience = max(ref.patience, ref.gpu_patience)
    return patience, patience, ref.phi
