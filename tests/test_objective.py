"""J, cut, per-level traffic and loads against brute force and the published convention."""
import numpy as np
import pytest

import procmap.objective
from procmap import CommGraph, evaluate
from procmap.errors import InputError
from procmap.generators import grid_graph
from procmap.topology import DistanceMatrix, Hierarchy


@pytest.fixture(params=["numpy", "kernels"])
def objective_path(request, monkeypatch):
    """Run the test once on each of evaluate()'s paths: NumPy (small graphs) and the
    compiled kernels (large ones), by moving the size threshold between them."""
    if request.param == "kernels":
        monkeypatch.setattr(procmap.objective, "NUMPY_OBJECTIVE_MAX_EDGES", -1)
    return request.param


def brute_force_J(dense: np.ndarray, pes: np.ndarray, dist: np.ndarray) -> float:
    """Double loop over ordered pairs of the symmetrised matrix C + C^T."""
    sym = dense + dense.T
    np.fill_diagonal(sym, 0)
    total = 0.0
    n = sym.shape[0]
    for i in range(n):
        for j in range(n):
            total += sym[i, j] * dist[pes[i], pes[j]]
    return total


def brute_force_distance(h: Hierarchy) -> np.ndarray:
    """D(p, q) straight from the definition in docs/design.md section 2."""
    k = h.k
    D = np.zeros((k, k))
    for p in range(k):
        for q in range(k):
            if p == q:
                continue
            size = 1
            for a, d in zip(h.levels, h.distances):
                size *= a
                if p // size == q // size:
                    D[p, q] = d
                    break
    return D


@pytest.mark.parametrize("seed", range(12))
def test_J_matches_brute_force(objective_path, seed):
    rng = np.random.default_rng(seed)
    levels = tuple(int(x) for x in rng.integers(1, 4, size=rng.integers(1, 4)))
    dists = tuple(sorted(float(x) for x in rng.integers(1, 50, size=len(levels))))
    h = Hierarchy(levels, dists)
    n = int(rng.integers(2, 25))
    dense = rng.integers(0, 5, size=(n, n)) * (rng.random((n, n)) < 0.3)
    if seed % 2:
        dense = dense * rng.random((n, n))  # float weights
    pes = rng.integers(0, h.k, size=n)
    g = CommGraph.from_dense(dense)
    ev = evaluate(g, h, pes)
    expected = brute_force_J(dense.astype(float), pes, brute_force_distance(h))
    assert ev.J == pytest.approx(expected, rel=1e-12, abs=1e-9)
    # traffic per level reproduces J, and the cut counts each undirected edge once
    assert sum(d * t for d, t in zip(h.distances, ev.level_traffic[1:])) == pytest.approx(expected)
    sym = dense + dense.T
    np.fill_diagonal(sym, 0)
    off = pes[:, None] != pes[None, :]
    assert ev.cut == pytest.approx(sym[off].sum() / 2)
    assert sum(ev.level_traffic) == pytest.approx(sym.sum())


@pytest.mark.parametrize("seed", range(4))
def test_J_with_a_distance_matrix_matches_brute_force(objective_path, seed):
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 6)), int(rng.integers(2, 20))
    dist = rng.integers(1, 9, size=(k, k)).astype(float)
    dist = dist + dist.T
    np.fill_diagonal(dist, 0)
    dense = rng.integers(0, 5, size=(n, n)) * (rng.random((n, n)) < 0.4)
    pes = rng.integers(0, k, size=n)
    ev = evaluate(CommGraph.from_dense(dense), DistanceMatrix(dist, capacities=[n] * k), pes)
    assert ev.J == pytest.approx(brute_force_J(dense.astype(float), pes, dist))
    assert ev.counts.tolist() == np.bincount(pes, minlength=k).tolist()


def test_numpy_and_kernel_paths_agree_exactly_on_integers(monkeypatch):
    graph = grid_graph((30, 20), weight=3, diagonal=True)
    machine = Hierarchy((4, 8, 3), (1, 10, 100))
    pes = np.random.default_rng(5).integers(0, machine.k, graph.n)
    small = evaluate(graph, machine, pes)
    monkeypatch.setattr(procmap.objective, "NUMPY_OBJECTIVE_MAX_EDGES", -1)
    large = evaluate(graph, machine, pes)
    assert small.as_dict() == large.as_dict()
    assert np.array_equal(small.loads, large.loads)


def test_hierarchy_distance_matches_definition():
    h = Hierarchy.parse("2:3:2", "1:10:100")
    np.testing.assert_array_equal(h.distance_matrix(), brute_force_distance(h))


def test_published_grid_value():
    """200x200 grid, 4:8:6, 1:10:100, vertex i -> PE floor(192 i / 40000): J = 427408."""
    g = grid_graph((200, 200))
    h = Hierarchy.parse("4:8:6", "1:10:100")
    pes = (192 * np.arange(g.n)) // g.n
    ev = evaluate(g, h, pes)
    assert ev.J == 427408
    assert isinstance(ev.J, int)
    assert ev.mode == "partition"
    assert ev.limit == 215  # ceil(1.03 * 40000 / 192)
    assert ev.valid


def test_loads_and_placement_capacity():
    g = CommGraph.from_edges([0, 1, 2], [1, 2, 3], [5, 6, 7])
    h = Hierarchy.parse("2:2")
    ev = evaluate(g, h, [0, 1, 2, 3])
    assert ev.mode == "placement" and ev.valid
    ev = evaluate(g, h, [0, 0, 2, 3])
    assert not ev.valid and ev.violations == 1
    assert list(ev.counts) == [2, 0, 1, 1]


def test_mapping_checks():
    g = CommGraph.from_edges([0], [1], [1])
    h = Hierarchy.parse("2")
    with pytest.raises(InputError, match="outside"):
        evaluate(g, h, [0, 2])
    with pytest.raises(InputError, match="entries"):
        evaluate(g, h, [0])


@pytest.mark.parametrize("shape,diagonal", [((5, 7), False), ((3, 4, 5), False), ((6, 5), True)])
def test_grid_generator_matches_scipy_construction(shape, diagonal):
    g = grid_graph(shape, diagonal=diagonal)
    coords = np.array(np.unravel_index(np.arange(g.n), shape)).T
    diff = np.abs(coords[:, None, :] - coords[None, :, :])
    adj = (diff.max(axis=2) == 1) if diagonal else (diff.sum(axis=2) == 1)
    ref = CommGraph.from_dense(adj.astype(int))
    # from_dense stores C + C^T, so every weight is 2 there
    assert np.array_equal(g.xadj, ref.xadj) and np.array_equal(g.adjncy, ref.adjncy)
    assert np.all(ref.adjwgt == 2 * g.adjwgt)
