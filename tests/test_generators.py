"""Generators of the benchmark families: grid, random geometric and Delaunay graphs."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from procmap import generators as gen
from procmap.generators import (delaunay_graph, delaunay_tiles, grid_graph, random_geometric_graph,
                                random_points, spatial_order, tiled_delaunay_graph)
from reference_generators import (delaunay_reference, rgg_radius, rgg_reference,
                                  spatial_order_reference)


def _check_basic(g):
    mat = g.to_scipy()
    assert g.xadj.dtype == np.int64 and g.adjncy.dtype == np.int32
    assert (mat != mat.T).nnz == 0  # symmetric
    assert not np.any(mat.diagonal())  # no self loops
    assert np.all(g.adjwgt == 1)  # unit weights on both directions
    assert np.all(g.vwgt == 1)
    for u in range(min(g.n, 50)):  # rows sorted, no duplicates
        row = g.adjncy[g.xadj[u]:g.xadj[u + 1]]
        assert np.all(np.diff(row) > 0)


def _same(a, b):
    return (np.array_equal(a.xadj, b.xadj) and np.array_equal(a.adjncy, b.adjncy)
            and np.array_equal(a.adjwgt, b.adjwgt))


def test_grid_unit_weights():
    g = grid_graph((5, 7))
    _check_basic(g)
    assert g.m == 4 * 7 + 5 * 6


@pytest.mark.parametrize("make", [random_geometric_graph, delaunay_graph])
def test_basic_properties_and_determinism(make):
    g = make(400, seed=3)
    assert g.n == 400
    _check_basic(g)
    assert _same(g, make(400, seed=3))
    assert not _same(g, make(400, seed=4))


def test_rgg_edges_are_exactly_the_close_pairs():
    n, seed, factor = 300, 7, 0.55
    g = random_geometric_graph(n, seed=seed, radius_factor=factor)
    pts = random_points(n, seed)
    radius = factor * np.sqrt(np.log(n) / n)
    d = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(axis=2))
    close = (d < radius) & ~np.eye(n, dtype=bool)
    # numbering-independent checks first: edge count and degree multiset
    assert g.m == int(close.sum()) // 2
    assert sorted(g.degrees().tolist()) == sorted(close.sum(axis=1).tolist())
    # exact check through the documented numbering (cells of side = radius, row-major)
    order = spatial_order(pts, radius)
    expected = sp.csr_matrix(close[np.ix_(order, order)].astype(np.int64))
    assert (g.to_scipy() != expected).nnz == 0


def test_spatial_numbering_is_local():
    g = random_geometric_graph(2000, seed=1)
    src = g.edge_sources()
    span = np.abs(g.adjncy.astype(np.int64) - src).mean()
    assert span < 0.1 * g.n  # a random numbering would give about n / 3


def test_delaunay_size_and_connected():
    n = 500
    g = delaunay_graph(n, seed=2)
    _check_basic(g)
    assert 2.7 * n < g.m <= 3 * n - 6  # planar triangulation: 3n - 3 - hull edges
    ncomp, _ = connected_components(g.to_scipy(), directed=False)
    assert ncomp == 1


def test_delaunay_matches_scipy():
    from scipy.spatial import Delaunay

    n, seed = 200, 5
    pts = random_points(n, seed)
    g = delaunay_graph(n, seed=seed)
    order = spatial_order(pts, 0.55 * np.sqrt(np.log(n) / n))
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    edges = set()
    for a, b, c in Delaunay(pts).simplices:
        for u, v in ((a, b), (b, c), (c, a)):
            u, v = new_id[u], new_id[v]
            edges.add((min(u, v), max(u, v)))
    coo = sp.triu(g.to_scipy()).tocoo()
    assert set(zip(coo.row.tolist(), coo.col.tolist())) == edges


# ----------------------------------------------------------------- fast versions == references
def _identical(a, b):
    """Bit-identical CommGraphs: every array, dtype included (published numbers depend on it)."""
    return all(np.array_equal(getattr(a, k), getattr(b, k)) and getattr(a, k).dtype == getattr(b, k).dtype
               for k in ("xadj", "adjncy", "adjwgt", "vwgt"))


@pytest.mark.parametrize("n", [1, 2, 3, 60, 3000, 20000])
@pytest.mark.parametrize("factor", [0.55, 0.2, 1.7])
def test_rgg_equals_reference(n, factor):
    for seed in (0, 1):
        assert _identical(random_geometric_graph(n, seed, factor), rgg_reference(n, seed, factor))


@pytest.mark.parametrize("cells", [1, 2, 7, 30])
def test_rgg_search_grid_does_not_matter(cells):
    """Coarser search grids than the automatic one must find exactly the same pairs."""
    n, seed = 5000, 4
    assert _identical(random_geometric_graph(n, seed, search_cells=cells), rgg_reference(n, seed))


def test_rgg_search_grid_narrower_than_radius_is_refused():
    n = 5000
    # the default grid: cells wider than the radius, at most about sqrt(2n) per side
    finest = min(int(np.floor((1.0 - 1e-9) / rgg_radius(n, 0.55))), int(np.sqrt(2.0 * n)))
    default = random_geometric_graph(n, 4)
    assert _identical(random_geometric_graph(n, 4, search_cells=finest), default)
    for cells in (0, finest + 1):
        with pytest.raises(ValueError, match="search_cells"):
            random_geometric_graph(n, 4, search_cells=cells)


def test_spatial_order_equals_lexsort():
    rng = np.random.default_rng(0)
    fine = random_points(5000, 1)
    ties = np.round(rng.random((5000, 2)) * 40) / 40  # many equal x, equal y and duplicate points
    crowded = rng.random((3000, 2)) * 0.2  # cells of 100+ points: the merge-sort path
    for pts, cell in ((fine, 0.01), (ties, 0.1), (crowded, 0.05), (fine, 1e-4), (fine, 2.0)):
        assert np.array_equal(spatial_order(pts, cell), spatial_order_reference(pts, cell))


@pytest.mark.parametrize("n, tiles", [(2 ** 12, 2), (2 ** 12, 5), (2 ** 13, 8), (2 ** 14, 3), (2 ** 14, 11)])
def test_delaunay_tiles_equal_reference(n, tiles):
    """Small forced tiles: many tile borders, and hull triangles longer than a tile."""
    for seed in (0, 1, 2):
        graph = tiled_delaunay_graph(random_points(n, seed), tiles)
        assert graph is not None, "the tiled triangulation did not add up"
        assert _identical(graph, delaunay_reference(n, seed))


def test_delaunay_public_path_uses_tiles_and_equals_reference(monkeypatch):
    n, seed = 2 ** 14 + 123, 7
    assert delaunay_tiles(n) >= 2
    calls = []
    monkeypatch.setattr(gen, "tiled_delaunay_graph",
                        lambda *a, **k: calls.append(a[1]) or tiled_delaunay_graph(*a, **k))
    assert _identical(delaunay_graph(n, seed), delaunay_reference(n, seed))
    assert calls == [delaunay_tiles(n)]  # the first attempt succeeded


def test_delaunay_checks_catch_a_too_small_margin(monkeypatch):
    """With tiny margins triangles go missing: the checks must refuse, never return a
    wrong graph, and delaunay_graph must then fall back to the global triangulation."""
    n, seed = 2 ** 14, 3
    pts = random_points(n, seed)
    reference = delaunay_reference(n, seed)
    graphs = [tiled_delaunay_graph(pts, 4, factor) for factor in (0.2, 0.4, 0.6)]
    assert any(graph is None for graph in graphs)  # the checks did fire
    assert all(graph is None or _identical(graph, reference) for graph in graphs)
    monkeypatch.setattr(gen, "tiled_delaunay_graph", lambda *a, **k: None)
    assert _identical(delaunay_graph(n, seed), reference)
