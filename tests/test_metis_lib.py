"""METIS called through ctypes (procmap.engines.metis_lib) against pymetis's own binding."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pymetis
import pytest

from procmap.engines import initial, metis_lib
from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph

pytestmark = pytest.mark.skipif(not metis_lib.available(),
                                reason="pymetis's build does not export METIS's C API")


def _pymetis(g, k, seed, ufactor=30, vwgt=None, eweights=None):
    opts = pymetis.Options()
    opts.seed = seed
    opts.ufactor = ufactor
    _, parts = pymetis.part_graph(k, pymetis.CSRAdjacency(g.xadj, g.adjncy),
                                  vweights=g.vwgt if vwgt is None else vwgt,
                                  eweights=eweights, options=opts)
    return np.asarray(parts, dtype=np.int32)


GRAPHS = {
    "grid": lambda: grid_graph((23, 17)),
    "delaunay": lambda: delaunay_graph(700, seed=3),
    "rgg": lambda: random_geometric_graph(900, seed=5),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("k", [2, 4, 6, 8, 12, 32])  # recursive bisection up to 8, then k-way
def test_same_partition_as_pymetis(name, k):
    g = GRAPHS[name]()
    for seed in (0, 7):
        got = metis_lib.part_graph(g.xadj, g.adjncy, g.vwgt, None, k, 30, seed)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _pymetis(g, k, seed))


def test_same_partition_with_vertex_and_edge_weights():
    g = delaunay_graph(500, seed=11)
    rng = np.random.default_rng(2)
    vwgt = rng.integers(1, 9, g.n)
    # symmetric edge weights: one draw per undirected edge
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    lo, hi = np.minimum(src, g.adjncy), np.maximum(src, g.adjncy)
    ew = (lo * 7919 + hi * 104729) % 13 + 1
    got = metis_lib.part_graph(g.xadj, g.adjncy, vwgt, ew, 6, 50, 3)
    np.testing.assert_array_equal(got, _pymetis(g, 6, 3, ufactor=50, vwgt=vwgt, eweights=ew))


def test_concurrent_calls_give_the_serial_results():
    """libc's rand() is one state for the process: without the lock, concurrent calls
    would interleave their draws and depend on timing."""
    graphs = [grid_graph((20 + i, 15)) for i in range(6)] + [delaunay_graph(600, seed=i)
                                                             for i in range(6)]
    jobs = [(g, k, s) for g in graphs for k in (4, 8) for s in (1, 2)]

    def run(job):
        g, k, s = job
        return metis_lib.part_graph(g.xadj, g.adjncy, g.vwgt, None, k, 30, s)

    serial = [run(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):
            for a, b in zip(serial, pool.map(run, jobs)):
                np.testing.assert_array_equal(a, b)


def test_direct_and_pymetis_calls_side_by_side_give_the_serial_results():
    """Unequal targets go through pymetis: it must take the same lock as the direct calls."""
    graphs = [delaunay_graph(800, seed=i) for i in range(8)]
    targets = np.array([0.5, 0.3, 0.2])
    jobs = [(g, t) for g in graphs for t in (None, targets)]

    def run(job):
        g, t = job
        return initial.metis_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 3, 0.03, 5, t)

    serial = [run(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):
            for a, b in zip(serial, pool.map(run, jobs)):
                np.testing.assert_array_equal(a, b)


def test_metis_partition_falls_back_to_pymetis(monkeypatch):
    g = grid_graph((30, 20))
    direct = initial.metis_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 6, 0.03, 4)
    monkeypatch.setattr(metis_lib, "available", lambda: False)  # a build without the C symbols

    def direct_call(*args, **kwargs):
        raise AssertionError("METIS called directly although unavailable")

    monkeypatch.setattr(metis_lib, "part_graph", direct_call)
    fallback = initial.metis_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 6, 0.03, 4)
    np.testing.assert_array_equal(direct, fallback)


def test_unequal_targets_still_partition_by_target():
    g = grid_graph((30, 20))
    targets = np.array([0.5, 0.25, 0.25])
    part = initial.metis_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 3, 0.03, 1, targets)
    sizes = np.bincount(part, minlength=3) / g.n
    assert np.all(np.abs(sizes - targets) < 0.05)
