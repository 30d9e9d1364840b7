"""The engines' configuration (docs/design.md section 4): frozen contexts, named presets,
derivation with ``dataclasses.replace``, and ``map_tasks(context=...)``."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import procmap
from procmap import PRESETS, Context, map_tasks, preset
from procmap.engines import context as cx
from procmap.errors import InputError
from procmap.generators import grid_graph
from procmap.topology import Hierarchy

MESH = grid_graph((60, 50))  # large enough for a multilevel cycle in the top split
MACHINE = Hierarchy.parse("2:3:4", "1:10:100")
PLACEMENT = grid_graph((4, 3, 2))  # n == slots of MACHINE: rank placement

CLASSES = [cx.CoarseningContext, cx.RefinementContext, cx.FMContext, cx.LocalFMContext,
           cx.FlowContext, cx.SplitSchedule, cx.InitialMappingContext, cx.PlacementContext,
           cx.DeviceContext, cx.Context]


def _contexts(ctx):
    """``ctx`` and every context nested in it."""
    yield ctx
    for f in dataclasses.fields(ctx):
        value = getattr(ctx, f.name)
        if dataclasses.is_dataclass(value):
            yield from _contexts(value)


def test_presets_exist_and_auto_is_im():
    assert set(PRESETS) == {"hm", "hm-ultra", "im"}
    for name, ctx in PRESETS.items():
        assert isinstance(ctx, Context) and ctx.name == name and preset(name) is ctx
    assert preset("auto") is preset("im")
    assert preset("im").pipeline == "im" and preset("hm").pipeline == "hm"
    with pytest.raises(ValueError, match="unknown preset"):
        preset("fast")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_frozen_all_the_way_down(name):
    for ctx in _contexts(preset(name)):
        field = dataclasses.fields(ctx)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(ctx, field, getattr(ctx, field))


def test_public_names_are_lazy_exports():
    assert procmap.Context is Context and procmap.preset is preset
    assert {"Context", "preset", "PRESETS"} <= set(dir(procmap))
    probe = ("import sys, procmap.engines.context\n"
             "print(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert not {"numpy", "numba", "procmap.api", "procmap.engines.multilevel"} & loaded


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_field_is_documented(cls):
    doc = cls.__doc__ or ""
    missing = [f.name for f in dataclasses.fields(cls) if f"``{f.name}``" not in doc]
    assert not missing, f"{cls.__name__} does not document {missing}"


def test_kernel_defaults_match_the_context():
    """The kernels keep defaults for direct calls; the engines pass the context's."""
    from procmap.kernels.coarsening import coarsen_cpu
    from procmap.kernels.refinement import jet_cpu
    from procmap.options import AUTO_GPU_MIN_EDGES
    c, r = cx.CoarseningContext(), cx.RefinementContext()
    assert c.hem_max_rounds == coarsen_cpu.HEM_MAX_ROUNDS
    assert c.unmatched_threshold == coarsen_cpu.UNMATCHED_THRESHOLD
    assert r.ultra_filters == jet_cpu.ULTRA_FILTER_RATIOS
    for ultra in (False, True):
        for finest in (False, True):
            assert r.filters(ultra=ultra, finest=finest) == jet_cpu.filter_schedule(
                ultra=ultra, finest=finest)
    assert cx.DeviceContext().auto_gpu_min_edges == AUTO_GPU_MIN_EDGES
    from procmap.kernels.refinement.flow_cpu import flow_refine
    defaults = flow_refine.__kwdefaults__
    assert (defaults["alpha"], defaults["rounds"]) == (cx.FlowContext(depth=1).alpha_at(0),
                                                       cx.FlowContext().rounds)


def test_names_no_longer_collide():
    """hm's splits coarsen to 8 vertices per block, im's whole graph to 128 per PE, and
    im's initial multisection again to 8: the same field, each in its own context."""
    hm, im = preset("hm"), preset("im")
    assert hm.coarsening.factor == 8 and hm.coarsening.min_vertices == 3000
    assert im.coarsening.factor == 128 and im.coarsening.min_vertices == 0
    assert im.initial.multisection.coarsening.factor == 8
    assert isinstance(hm.refinement.patience, int) and isinstance(im.refinement.patience, int)
    assert hm.schedule.tries_at(5) == 1 and preset("hm-ultra").schedule.tries_at(0) == 5


@pytest.mark.parametrize("engine", ["hm", "hm-ultra", "im", "auto"])
@pytest.mark.parametrize("graph", [MESH, PLACEMENT], ids=["partition", "placement"])
def test_context_equals_engine_preset(engine, graph):
    by_engine = map_tasks(graph, MACHINE, engine=engine, seed=3, device="cpu")
    by_context = map_tasks(graph, MACHINE, context=preset(engine), seed=3, device="cpu")
    np.testing.assert_array_equal(by_engine.pes, by_context.pes)
    assert by_engine.engine == by_context.engine and by_engine.J == by_context.J


def test_schemes_apply_to_every_nested_context():
    ctx = preset("im").with_schemes("unionfind", "isr")
    schemes = {(c.coarsening.scheme, c.refinement.scheme) for c in _contexts(ctx)
               if isinstance(c, Context)}
    assert schemes == {("unionfind", "isr")}
    a = map_tasks(MESH, MACHINE, engine="im", seed=1, device="cpu", coarsening="unionfind",
                  refinement="isr")
    b = map_tasks(MESH, MACHINE, context=ctx, seed=1, device="cpu")
    np.testing.assert_array_equal(a.pes, b.pes)


def _differs(ctx, engine, graph=MESH):
    base = map_tasks(graph, MACHINE, engine=engine, seed=2, device="cpu")
    derived = map_tasks(graph, MACHINE, context=ctx, seed=2, device="cpu")
    assert derived.evaluation.valid
    return not np.array_equal(base.pes, derived.pes)


def test_derived_fm_changes_the_mapping():
    im = preset("im")
    assert _differs(replace(im, fm=replace(im.fm, passes=0)), "im")


def test_derived_coarsening_changes_the_mapping():
    hm = preset("hm")
    assert _differs(replace(hm, coarsening=replace(hm.coarsening, min_vertices=200)), "hm")


def test_derived_schedule_changes_the_mapping():
    hm = preset("hm")
    assert _differs(replace(hm, schedule=replace(hm.schedule, tries=(3, 1))), "hm")


def test_derived_placement_context_is_used():
    hm = preset("hm")
    single = replace(hm, placement=replace(hm.placement, starts=1))
    m = map_tasks(PLACEMENT, MACHINE, context=single, seed=0, device="cpu")
    assert m.evaluation.valid and m.evaluation.counts.max() <= 1


def test_bad_contexts_are_rejected():
    with pytest.raises(ValueError, match="coarsening scheme"):
        cx.CoarseningContext(scheme="metis")
    with pytest.raises(ValueError, match="refinement scheme"):
        replace(preset("hm").refinement, scheme="fm")
    with pytest.raises(ValueError, match="initial.multisection"):
        replace(preset("hm"), pipeline="im")
    with pytest.raises(InputError, match="Context"):
        map_tasks(MESH, MACHINE, context="hm")
