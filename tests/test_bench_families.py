"""The benchmark generators of issue #22: benchmarks/families.py and benchmarks/patterns.py.

Small sizes only (the whole file runs in a few seconds): determinism for a seed, valid
symmetric graphs, and the structural properties the docstrings promise.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import families  # noqa: E402
import patterns  # noqa: E402

from procmap.generators import delaunay_graph  # noqa: E402


def check_valid(g):
    """Every CommGraph invariant the engines rely on."""
    n = g.n
    assert g.xadj.dtype == np.int64 and g.adjncy.dtype == np.int32 and g.vwgt.dtype == np.int64
    assert g.xadj[0] == 0 and g.xadj[-1] == g.adjncy.size and np.all(np.diff(g.xadj) >= 0)
    assert g.adjwgt.dtype.kind == "i" and (g.adjwgt.size == 0 or g.adjwgt.min() > 0)
    src = g.edge_sources()
    assert np.all(src != g.adjncy), "self loop"
    assert g.adjncy.size == 0 or (g.adjncy.min() >= 0 and g.adjncy.max() < n)
    # rows sorted and unique
    same_row = src[1:] == src[:-1]
    assert np.all(g.adjncy[1:][same_row] > g.adjncy[:-1][same_row])
    # symmetric with equal weights
    mat = g.to_scipy()
    assert abs(mat - mat.T).nnz == 0


def same(a, b):
    return a.same_as(b)


# ----------------------------------------------------------------------------- families
def test_rmat_deterministic_valid_heavy_tailed():
    g = families.rmat(12, seed=3)
    assert same(g, families.rmat(12, seed=3))
    assert not same(g, families.rmat(12, seed=4))
    check_valid(g)
    assert g.n == 4096
    assert 0.7 * 8 * 4096 < g.m < 8 * 4096
    assert np.all(g.adjwgt == 1)
    deg = g.degrees()
    assert deg.max() > 20 * deg.mean()  # hubs
    assert (deg == 0).sum() > 0.1 * g.n  # the untouched vertices stay isolated


def test_rmat_count_weights_sum_to_draws():
    g = families.rmat(10, edge_factor=4, seed=1, weights="count")
    check_valid(g)
    # every drawn non-loop edge counts once in each direction
    assert g.adjwgt.sum() <= 2 * 4 * 1024 and g.adjwgt.max() > 1


def test_chung_lu():
    g = families.chung_lu(5000, avg_degree=10, exponent=2.5, seed=2)
    assert same(g, families.chung_lu(5000, avg_degree=10, exponent=2.5, seed=2))
    check_valid(g)
    assert g.n == 5000 and g.m <= 25000
    deg = g.degrees()
    assert deg.max() > 20 * deg.mean()


def test_stencil27_weights():
    g = families.stencil27(5, 6, 7, face=16, edge=4, corner=1)
    check_valid(g)
    assert g.n == 5 * 6 * 7
    s = (5, 6, 7)
    faces = sum((s[d] - 1) * np.prod([s[e] for e in range(3) if e != d]) for d in range(3))
    edges = 2 * sum((s[d] - 1) * (s[e] - 1) * s[3 - d - e] for d in range(3) for e in range(d + 1, 3))
    corners = 4 * (s[0] - 1) * (s[1] - 1) * (s[2] - 1)
    assert g.m == faces + edges + corners
    u = (2 * 6 + 3) * 7 + 3  # an interior vertex
    w = g.adjwgt[g.xadj[u]:g.xadj[u + 1]]
    assert w.size == 26
    assert sorted(np.unique(w, return_counts=True)[1].tolist()) == [6, 8, 12]
    assert (w == 16).sum() == 6 and (w == 4).sum() == 12 and (w == 1).sum() == 8
    assert g.degrees().min() == 7  # a corner vertex


def test_road_like():
    g = families.road_like(3000, keep=0.2, seed=5)
    assert same(g, families.road_like(3000, keep=0.2, seed=5))
    check_valid(g)
    assert g.n == 3000
    assert families.components_count(g) == 1
    assert 2 * g.m / g.n < 3
    base = delaunay_graph(3000, seed=5)
    assert g.m == 2999 + round(0.2 * (base.m - 2999))
    # a subgraph of the Delaunay graph
    assert (g.to_scipy().astype(bool).astype(int) - base.to_scipy().astype(bool).astype(int)).max() <= 0


def test_spread_weights():
    base = delaunay_graph(4000, seed=1)
    g = families.spread_weights(base, decades=4, seed=7)
    assert same(g, families.spread_weights(base, decades=4, seed=7))
    check_valid(g)
    assert np.array_equal(g.xadj, base.xadj) and np.array_equal(g.adjncy, base.adjncy)
    assert g.adjwgt.min() >= 1 and g.adjwgt.max() <= 10**4
    assert np.log10(g.adjwgt.max() / g.adjwgt.min()) >= 3
    # log-uniform: every decade holds a fair share
    counts = np.histogram(np.log10(g.adjwgt), bins=[0, 1, 2, 3, 4.01])[0]
    assert counts.min() > 0.15 * counts.sum()


def test_with_isolated():
    base = delaunay_graph(2000, seed=1)
    g = families.with_isolated(base, fraction=0.25, components=50, seed=3)
    assert same(g, families.with_isolated(base, fraction=0.25, components=50, seed=3))
    check_valid(g)
    deg = g.degrees()
    assert (deg == 0).sum() == 500 + (base.degrees() == 0).sum()
    assert families.components_count(g) == 1 + 500 + 50
    assert g.n > base.n + 500 + 50 * 2 - 1
    # the base graph keeps its relative order: its vertices appear in increasing new ids
    assert g.total_vertex_weight == g.n


# ----------------------------------------------------------------------------- patterns
def test_halo2d():
    g = patterns.halo2d(8, 8, neighbours=4)
    check_valid(g)
    assert g.n == 64 and g.degrees().max() == 4 and g.m == 2 * 7 * 8
    g8 = patterns.halo2d(8, 8, neighbours=8)
    assert g8.degrees().max() == 8 and g8.m == 2 * 7 * 8 + 2 * 7 * 7
    u = 3 * 8 + 3
    assert sorted(np.unique(g8.adjwgt[g8.xadj[u]:g8.xadj[u + 1]], return_counts=True)[1]) == [4, 4]


def test_halo3d():
    g6 = patterns.halo3d(4, 4, 4, neighbours=6)
    check_valid(g6)
    assert g6.n == 64 and g6.degrees().max() == 6
    g = patterns.halo3d(4, 5, 6, neighbours=26)
    check_valid(g)
    u = (1 * 5 + 2) * 6 + 3
    w = g.adjwgt[g.xadj[u]:g.xadj[u + 1]]
    assert w.size == 26
    assert (w == 2 * 8192).sum() == 6 and (w == 2 * 256).sum() == 12 and (w == 2 * 8).sum() == 8
    # the rank numbering: the +k neighbour is rank u + 1, the +i neighbour u + py * pz
    row = g.adjncy[g.xadj[u]:g.xadj[u + 1]]
    assert u + 1 in row and u + 30 in row


@pytest.mark.parametrize("n", [64, 256])
def test_amg_like(n):
    g = patterns.amg_like(n, levels=4, seed=1)
    assert same(g, patterns.amg_like(n, levels=4, seed=1))
    check_valid(g)
    assert g.n == n
    fine = patterns.halo3d(*patterns.dims_create(n, 3), neighbours=26)
    assert g.m > fine.m  # coarse-level pairs on top of the fine halo
    src = g.edge_sources()
    assert np.abs(src - g.adjncy.astype(np.int64)).max() > np.abs(
        fine.edge_sources() - fine.adjncy.astype(np.int64)).max()  # long range in rank order


def test_cg_like():
    g = patterns.cg_like(16, seed=1, per_rank=200)
    assert same(g, patterns.cg_like(16, seed=1, per_rank=200))
    check_valid(g)
    assert g.n == 16 and families.components_count(g) == 1
    assert 2 <= g.degrees().mean() <= 8


def test_lu_wavefront():
    g = patterns.lu_wavefront(4, 8, problem=64, reverse_fraction=0.1)
    check_valid(g)
    assert g.n == 32 and g.degrees().max() == 4 and g.m == 3 * 8 + 4 * 7
    south = 40 * 8 * 64          # ceil(64 / py = 8) per k-plane
    east = 40 * 16 * 64          # ceil(64 / px = 4)
    assert set(g.adjwgt.tolist()) == {south + round(0.1 * south), east + round(0.1 * east)}
    assert g.adjncy[g.xadj[0]:g.xadj[1]].tolist() == [1, 8]


@pytest.mark.parametrize("dim", [2, 3])
def test_amr_like(dim):
    g = patterns.amr_like(64, seed=2, dim=dim)
    assert same(g, patterns.amr_like(64, seed=2, dim=dim))
    check_valid(g)
    assert g.n == 64 and families.components_count(g) == 1
    unit = 2 * 8 ** (dim - 1) * 8
    assert np.all(g.adjwgt % unit == 0)
    assert len(np.unique(g.adjwgt)) > 2  # several contacts / face sizes


def test_registry():
    assert set(patterns.SIZES) == {64, 256, 1024, 4096}
    for kind in patterns.PATTERN_KINDS:
        for n in patterns.SIZES:
            assert patterns.PATTERNS[f"{kind}_{n}"][1] == n
    for kind in ("halo2d-8", "halo3d-26", "amg", "lu", "amr"):
        fn, n = patterns.PATTERNS[f"{kind}_64"]
        assert fn().n == n
    assert patterns.dims_create(1024, 3) == (16, 8, 8)
    assert patterns.dims_create(4096, 2) == (64, 64)


# ----------------------------------------------------------------------------- variants
def test_engine_variants_replace_nested_context_fields():
    import variants
    from procmap.engines.context import preset

    assert variants.split_specs("hm, im[fm.max_work=3;initial.stalled_start=random],hm-ultra") == [
        "hm", "im[fm.max_work=3;initial.stalled_start=random]", "hm-ultra"]
    assert variants.split_specs("hm[schedule.tries=(2, 1)],im") == ["hm[schedule.tries=(2, 1)]", "im"]
    assert variants.context_of("hm") == preset("hm")
    ctx = variants.context_of("im[fm.max_work=3;initial.uncoarsened.fm.passes=4;"
                              "initial.stalled_start=random]")
    im = preset("im")
    assert ctx.fm.max_work == 3 and ctx.fm.passes == im.fm.passes
    assert ctx.initial.uncoarsened.fm.passes == 4
    assert ctx.initial.stalled_start == "random" and ctx.initial.multisection == im.initial.multisection
    assert variants.context_of("hm[schedule.tries=(2, 1)]").schedule.tries == (2, 1)


@pytest.mark.parametrize("spec", ["hm[fm.no_such_field=1]", "hm[fm.passes]", "hm[fm.passes=1",
                                  "nosuch", "hm[initial.stalled_start=fennel]"])
def test_engine_variants_reject_what_they_cannot_build(spec):
    import variants
    with pytest.raises(ValueError):
        variants.context_of(spec)
