"""GPU subgraph extraction (kernels/initial/subgraph_gpu.py) against its CPU twin
(kernels/initial/subgraph_cpu.py): the same blocks and members, value for value."""
import numpy as np
import pytest

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.initial import subgraph_cpu as sc

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


def random_graph(n, m, seed, *, float_weights=False):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    w = rng.random(m) * 10 + 0.1 if float_weights else rng.integers(1, 20, m)
    return CommGraph.from_edges(src, dst, w, n=n, vwgt=rng.integers(1, 6, n))


GRAPHS = {
    "grid2d": lambda: grid_graph((50, 40)),
    "grid3d": lambda: grid_graph((12, 10, 9), 2),
    "rgg": lambda: random_geometric_graph(4000, seed=3),
    "delaunay": lambda: delaunay_graph(3000, seed=4),
    "random_int": lambda: random_graph(2500, 9000, 5),
    "random_float": lambda: random_graph(2500, 9000, 6, float_weights=True),
    "isolated": lambda: CommGraph.from_edges([0, 1, 5], [1, 2, 6], n=10),
}


def partitions(g, seed):
    """Contiguous blocks, random labels with an empty block, one block, singletons."""
    rng = np.random.default_rng(seed)
    yield (np.arange(g.n) * 5 // g.n), 5
    labels = rng.integers(0, 8, g.n)
    labels[labels == 3] = 4  # block 3 stays empty
    yield labels, 8
    yield np.zeros(g.n, dtype=np.int64), 1
    yield np.arange(g.n), g.n


def assert_same(gpu_arr, cpu_arr):
    got = cp.asnumpy(gpu_arr)
    assert got.dtype == cpu_arr.dtype
    np.testing.assert_array_equal(got, cpu_arr)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_extract_subgraphs_identical(name):
    from procmap.kernels.initial import subgraph_gpu as sg
    g = GRAPHS[name]()
    arrays = (g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    for part, k in partitions(g, 0):
        if k > 200 and g.n > 200:
            continue  # singletons only on the tiny graph: k Python-level slices
        want_blocks, want_members = sc.extract_subgraphs(*arrays, part, k)
        blocks, members = sg.extract_subgraphs(*(cp.asarray(a) for a in arrays),
                                               cp.asarray(part), k)
        assert len(blocks) == len(members) == k
        for b in range(k):
            assert all(isinstance(a, cp.ndarray) for a in blocks[b])
            for got, want in zip(blocks[b], want_blocks[b]):
                assert_same(got, want)
            assert_same(members[b], want_members[b])


def test_extract_subgraphs_invariants():
    """Independent of the CPU twin: every kept edge lies inside its block, and the
    blocks hold exactly the edges of the graph that do not cross blocks."""
    from procmap.kernels.initial import subgraph_gpu as sg
    g = random_graph(2000, 8000, 7)
    part = np.random.default_rng(1).integers(0, 4, g.n)
    blocks, members = sg.extract_subgraphs(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 4)
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    inside = part[src] == part[g.adjncy]
    kept = 0
    for b in range(4):
        xadj, adjncy, adjwgt, vwgt = (cp.asnumpy(a) for a in blocks[b])
        ids = cp.asnumpy(members[b])
        assert np.all(part[ids] == b) and np.all(np.diff(ids) > 0)
        lsrc = np.repeat(np.arange(ids.size), np.diff(xadj))
        gsrc, gdst = ids[lsrc], ids[adjncy]
        assert np.all(part[gdst] == b)
        assert np.array_equal(vwgt, g.vwgt[ids])
        # local edges are global edges with the same weight (checked on a sample)
        for u, v, w in zip(gsrc[:200].tolist(), gdst[:200].tolist(), adjwgt[:200].tolist()):
            row = slice(g.xadj[u], g.xadj[u + 1])
            j = np.flatnonzero(g.adjncy[row] == v)
            assert j.size == 1 and g.adjwgt[row][j[0]] == w
        kept += adjncy.size
    assert kept == np.count_nonzero(inside)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_internal_edges_identical(name):
    """The V-cycles' edge filter: the CSR without the edges between blocks, equal to
    the CPU twin value for value (dtypes included)."""
    from procmap.kernels.initial import subgraph_gpu as sg
    g = GRAPHS[name]()
    for part, _ in partitions(g, 1):
        part = part.astype(np.int32)
        want = sc.internal_edges(g.xadj, g.adjncy, g.adjwgt, part)
        got = sg.internal_edges(cp.asarray(g.xadj), cp.asarray(g.adjncy), cp.asarray(g.adjwgt),
                                cp.asarray(part))
        for a, b in zip(got, want):
            assert_same(a, b)
