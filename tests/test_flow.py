"""Max-flow refinement of the cut (kernels/refinement/flow_cpu.py): a pair's new border is a
minimum cut of its region (checked against SciPy's maximum flow on a network this file
builds itself), the cut falls by exactly the reported gain, blocks stay within L_max, the
result is deterministic, and the pipeline runs it where the context asks."""
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from procmap import map_tasks, preset
from procmap.engines.multilevel import kway_partition
from procmap.generators import grid_graph
from procmap.graph import CommGraph
from procmap.kernels.refinement.flow_cpu import flow_refine
from procmap.objective import evaluate
from procmap.topology import Hierarchy


def _cut(g: CommGraph, part) -> float:
    src = np.repeat(np.arange(g.n), np.diff(g.xadj))
    return float(g.adjwgt[part[src] != part[g.adjncy]].sum()) / 2


def _random_graph(n: int, m: int, seed: int, floats: bool = False) -> CommGraph:
    rng = np.random.default_rng(seed)
    w = 10.0 ** rng.uniform(-1, 3, m) if floats else rng.integers(1, 9, m)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    return CommGraph.from_edges(src[keep], dst[keep], w[keep], n=n, symmetric=False)


def _region(g: CommGraph, part, block: int, other: int, room: float) -> list[int]:
    """The region rule of the module docstring, written out: breadth-first from the
    block's vertices adjacent to ``other`` (ascending), in layers, until the next vertex
    does not fit into ``room``."""
    seeds = [u for u in range(g.n) if part[u] == block
             and any(part[v] == other for v in g.adjncy[g.xadj[u]:g.xadj[u + 1]])]
    region, weight = [], 0
    for u in seeds:
        if weight + g.vwgt[u] > room:
            return region
        region.append(u)
        weight += g.vwgt[u]
    head, inside = 0, set(region)
    while head < len(region):
        u = region[head]
        head += 1
        for v in g.adjncy[g.xadj[u]:g.xadj[u + 1]]:
            if v in inside or part[v] != block:
                continue
            if weight + g.vwgt[v] > room:
                return region
            region.append(int(v))
            inside.add(int(v))
            weight += g.vwgt[v]
    return region


def _min_cut_value(g: CommGraph, part, region: list[int]) -> float:
    """The weight of a minimum cut between blocks 0 and 1 when only ``region`` may change
    sides: the rest of block 0 is the source, the rest of block 1 the sink (SciPy)."""
    index = {u: i for i, u in enumerate(region)}
    s, t = len(region), len(region) + 1
    rows, cols, caps, fixed = [], [], [], 0
    for u in range(g.n):
        for e in range(g.xadj[u], g.xadj[u + 1]):
            v, w = int(g.adjncy[e]), int(g.adjwgt[e])
            node_u = index.get(u, s if part[u] == 0 else t)
            node_v = index.get(v, s if part[v] == 0 else t)
            if node_u == node_v:
                continue
            if {node_u, node_v} == {s, t}:
                fixed += w  # seen from both ends: halved below
                continue
            rows.append(node_u)
            cols.append(node_v)
            caps.append(w)
    net = sp.csr_matrix((np.asarray(caps, dtype=np.int32), (rows, cols)), shape=(t + 1, t + 1))
    return maximum_flow(net, s, t).flow_value + fixed / 2


@pytest.mark.parametrize("seed", range(6))
def test_a_pair_ends_on_a_minimum_cut_of_its_region(seed):
    g = _random_graph(60, 150, seed)
    rng = np.random.default_rng(seed)
    part = (rng.random(g.n) < 0.5).astype(np.int32)
    loads = np.bincount(part, weights=g.vwgt, minlength=2)
    lmax = int(loads.max()) + 6
    # alpha 1: each side of the region weighs at most what the other block can take
    region = (_region(g, part, 0, 1, lmax - loads[1])
              + _region(g, part, 1, 0, lmax - loads[0]))
    expected = min(_cut(g, part), _min_cut_value(g, part, region))
    before = _cut(g, part)
    gain = flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, lmax, alpha=1.0, rounds=1)
    assert _cut(g, part) == expected
    assert gain == before - expected
    assert np.bincount(part, weights=g.vwgt, minlength=2).max() <= lmax


@pytest.mark.parametrize("floats", [False, True])
@pytest.mark.parametrize("k, alpha", [(2, 4.0), (5, 1.0), (5, 4.0), (8, 8.0)])
def test_cut_falls_by_the_gain_within_lmax(k, alpha, floats):
    g = _random_graph(400, 1600, k, floats)
    rng = np.random.default_rng(k)
    part = rng.integers(0, k, g.n).astype(np.int32)
    lmax = int(np.ceil(1.1 * g.vwgt.sum() / k))
    part[:] = np.argsort(np.argsort(part, kind="stable")) * k // g.n  # balanced blocks
    before = _cut(g, part)
    gain = flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, alpha=alpha)
    after = _cut(g, part)
    assert gain > 0
    assert after == pytest.approx(before - gain, rel=1e-12)
    assert np.bincount(part, weights=g.vwgt, minlength=k).max() <= lmax
    again = flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax, alpha=alpha)
    assert _cut(g, part) == pytest.approx(after - again, rel=1e-12)  # never worse


def test_flow_straightens_a_staircase_border():
    # a 16 x 16 grid, blocks left and right of a staircase; the straight vertical
    # border (16) is the optimum
    g = grid_graph((16, 16))
    x, y = np.arange(g.n) % 16, np.arange(g.n) // 16
    part = (x >= 4 + (y % 8)).astype(np.int32)
    loads = np.bincount(part, minlength=2)
    lmax = 128 + 8
    assert _cut(g, part) > 16 and loads.max() <= lmax
    flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, lmax, alpha=8.0, rounds=4)
    assert _cut(g, part) == 16
    assert np.bincount(part, minlength=2).max() <= lmax


@pytest.mark.parametrize("cheap, border", [((17, 20), 21), ((18, 21), 19)])
def test_of_two_minimum_cuts_the_better_balanced_is_taken(cheap, border):
    # a path of 40 vertices split in the middle across a heavy edge; two edges of weight
    # 1 inside the region are the two minimum cuts, one nearest the source, one nearest
    # the sink: the one that leaves the blocks closer to equal wins
    src = np.arange(39)
    w = np.where(np.isin(src, cheap), 1, 5)
    g = CommGraph.from_edges(src, src + 1, w, n=40)
    part = (np.arange(40) >= 20).astype(np.int32)
    flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, 23, alpha=1.0, rounds=1)
    assert np.array_equal(part, (np.arange(40) >= border).astype(np.int32))


def test_overloaded_blocks_never_grow():
    g = _random_graph(200, 700, 9)
    part = np.zeros(g.n, dtype=np.int32)
    part[150:] = 1  # block 0 holds 150 of 200
    loads = np.bincount(part, weights=g.vwgt, minlength=2)
    lmax = 110
    flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 2, lmax, alpha=4.0)
    after = np.bincount(part, weights=g.vwgt, minlength=2)
    assert after[0] < loads[0]  # the overloaded block shrinks,
    assert after[1] <= lmax     # the other one stays within lmax


def test_flow_is_deterministic_and_leaves_trivial_inputs_alone():
    g = _random_graph(300, 1200, 4)
    start = (np.arange(g.n) * 4 // g.n).astype(np.int32)
    runs = []
    for _ in range(2):
        part = start.copy()
        flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 4, 90, alpha=4.0)
        runs.append(part)
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], start)
    one = np.zeros(g.n, dtype=np.int32)
    assert flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, one, 1, g.n) == 0.0
    assert flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, start.copy(), 4, 90, rounds=0) == 0.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_pipeline_runs_flows_where_the_context_asks(seed):
    g = grid_graph((60, 50))
    hm = preset("hm")
    on = replace(hm, flow=replace(hm.flow, depth=1))
    lmax = int(np.ceil(1.03 * g.n / 6))
    parts = [kway_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 6, lmax, eps=0.03, seed=seed,
                            ctx=ctx) for ctx in (hm, on, on)]
    assert not np.array_equal(parts[0], parts[1])  # the flows changed something,
    assert _cut(g, parts[1]) <= _cut(g, parts[0])  # for the better here,
    assert np.array_equal(parts[1], parts[2])      # deterministically
    assert np.bincount(parts[1], minlength=6).max() <= lmax
    with pytest.raises(ValueError, match="alpha"):
        replace(hm.flow, alpha=(4.0, 0.5))
    deep = replace(hm.flow, depth=2, alpha=(8.0, 4.0))
    assert [deep.alpha_at(d) for d in range(4)] == [8.0, 4.0, 0.0, 0.0]


def test_hm_ultra_maps_with_flows_validly():
    g = _random_graph(3000, 12000, 1)
    machine = Hierarchy.parse("2:2:3", "1:10:100")
    m = map_tasks(g, machine, engine="hm-ultra", seed=3, device="cpu")
    assert preset("hm-ultra").flow.depth > 0
    loads = np.bincount(m.pes, weights=g.vwgt, minlength=12)
    assert loads.max() <= np.ceil(1.03 * g.vwgt.sum() / 12)
    assert evaluate(g, machine, m.pes).J == m.J


def test_flows_skip_levels_whose_blocks_are_all_full(monkeypatch):
    """With k * lmax equal to the total weight (rank placement with as many tasks as
    slots) a balanced partition has every block full: the kernel's regions cannot take a
    vertex, so it changes nothing, and the pipeline does not call it there (nor compile
    it: auto's first run). With one unit of room it runs."""
    import procmap.engines.uncoarsen as unc

    g = grid_graph((24, 24))
    start = (np.arange(g.n) * 4 // g.n).astype(np.int32)  # four full blocks of 144
    part = start.copy()
    assert flow_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 4, g.n // 4, alpha=8.0) == 0.0
    assert np.array_equal(part, start)

    calls = []
    original = unc.flow_refine

    def recording(*args, **kwargs):
        calls.append(args[6])  # lmax
        return original(*args, **kwargs)

    monkeypatch.setattr(unc, "flow_refine", recording)
    hm = preset("hm")
    on = replace(hm, flow=replace(hm.flow, depth=1))
    for lmax in (g.n // 4, g.n // 4 + 1):
        part = kway_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 4, lmax, eps=0.0, seed=1,
                              ctx=on)
        assert np.bincount(part, minlength=4).max() <= lmax
    assert calls and set(calls) == {g.n // 4 + 1}
