"""Mapping engines on the CPU: validity, determinism, capacities, brute force."""
import itertools
import math

import numpy as np
import pytest

from procmap import CommGraph, baselines, evaluate
from procmap.api import map_tasks
from procmap.engines.hm import adaptive_imbalance
from procmap.errors import CapacityError, InputError, TopologyError
from procmap.generators import chung_lu_graph, grid_graph
from procmap.kernels.rebalancing.limits_cpu import fit_to_limits
from procmap.kernels.initial.subgraph_cpu import extract_subgraphs
from procmap.kernels.refinement.swap_cpu import swap_refine
from procmap.topology import DistanceMatrix, Hierarchy


def random_graph(n, avg_deg, seed, float_weights=False):
    rng = np.random.default_rng(seed)
    m = n * avg_deg // 2
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.random(m) * 100 if float_weights else rng.integers(1, 100, m)
    return CommGraph.from_edges(src, dst, w, n=n)


def test_adaptive_imbalance_matches_sharedmap_root_value():
    # at the root of a 3-level hierarchy: (1 + eps)^(1/3) - 1
    assert adaptive_imbalance(0.03, 1000, 192, 1000, 192, 3) == pytest.approx(0.009902, abs=1e-6)
    # a light subgraph gets more room, an overfull one is clamped to 0.001
    assert adaptive_imbalance(0.03, 1000, 192, 150, 32, 2) > 0.03
    assert adaptive_imbalance(0.03, 1000, 192, 250, 32, 2) == 0.001


def test_extract_subgraphs_equals_scipy_submatrices():
    g = random_graph(60, 6, 1)
    part = np.random.default_rng(2).integers(0, 4, g.n)
    part[part == 2] = 3  # an empty block
    blocks, members = extract_subgraphs(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, 4)
    A = g.to_scipy()
    for (x, a, w, v), ids in zip(blocks, members):
        assert np.all(part[ids] == part[ids[0]]) if ids.size else True
        sub = A[ids][:, ids].tocsr()
        assert np.array_equal(x, sub.indptr) and np.array_equal(a, sub.indices)
        assert np.array_equal(w, sub.data) and np.array_equal(v, g.vwgt[ids])
    assert sum(ids.size for ids in members) == g.n


def test_swap_refine_lowers_J_by_reported_gain_and_stays_valid():
    g = random_graph(40, 6, 3)
    h = Hierarchy.parse("2:2:3:2", "1:5:20:50").with_capacities(np.full(24, 2))
    pes = baselines.random(g.n, h, seed=4).astype(np.int32)
    before = evaluate(g, h, pes).J
    gain = swap_refine(g.xadj, g.adjncy, g.adjwgt, pes, h.capacities, h.prefix_sizes,
                       np.array(h.distances))
    after = evaluate(g, h, pes)
    assert after.valid and gain > 0
    assert before - after.J == pytest.approx(2 * gain)


def test_fit_to_limits_meets_uneven_limits():
    g = grid_graph((10, 10))
    part = np.zeros(g.n, dtype=np.int32)
    limits = np.array([10, 50, 25, 15])
    assert fit_to_limits(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, limits) > 0
    assert np.all(np.bincount(part, minlength=4) <= limits)
    too_small = np.zeros(g.n, dtype=np.int32)
    assert fit_to_limits(g.xadj, g.adjncy, g.adjwgt, g.vwgt, too_small, np.array([10, 10, 10, 10])) == -1


@pytest.mark.parametrize("engine", ["hm", "hm-ultra", "im"])
def test_partition_mapping_is_valid_and_beats_baselines(engine):
    g = grid_graph((24, 20))
    h = Hierarchy.parse("2:2:3", "1:10:100")
    m = map_tasks(g, h, engine=engine, seed=1)
    assert m.evaluation.mode == "partition" and m.evaluation.valid
    assert m.pes.shape == (g.n,) and m.pes.min() >= 0 and m.pes.max() < h.k
    lmax = math.ceil(1.03 * g.n / h.k)
    assert np.bincount(m.pes, minlength=h.k).max() <= lmax
    for name in baselines.BASELINES:
        assert m.J < evaluate(g, h, baselines.baseline(name, g.n, h)).J


@pytest.mark.parametrize("engine", ["hm", "im"])
def test_determinism(engine):
    g = random_graph(500, 8, 5, float_weights=True)
    h = Hierarchy.parse("2:4:2", "1:10:100")
    a = map_tasks(g, h, engine=engine, seed=7)
    b = map_tasks(g, h, engine=engine, seed=7)
    assert np.array_equal(a.pes, b.pes) and a.J == b.J



@pytest.mark.parametrize("engine", ["hm", "hm-ultra"])
def test_concurrent_splits_equal_serial_splits(engine):
    """With several Numba threads the splits below the top one run concurrently in
    worker threads (engines/hm.py, _split_tasks); with one thread they run one after
    another. The mapping must be the same."""
    import numba

    g = grid_graph((60, 50))  # big enough for a multilevel cycle in the top split
    h = Hierarchy.parse("2:3:4", "1:10:100")
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        serial = map_tasks(g, h, engine=engine, seed=3, device="cpu")
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        concurrent = map_tasks(g, h, engine=engine, seed=3, device="cpu")
    finally:
        numba.set_num_threads(old)
    assert np.array_equal(serial.pes, concurrent.pes)
    assert concurrent.evaluation.valid


def test_gpu_tries_stay_under_the_peak_memory_target(monkeypatch):
    """On the GPU, concurrent tries are capped by the peak-memory target (bytes per
    directed edge) and by the free device memory; the host path is unaffected."""
    from procmap.engines import multilevel as ml
    from procmap.engines.context import preset
    from procmap.kernels import backend

    dev = preset("hm-ultra").device
    monkeypatch.setattr(ml, "threading_layer", lambda: "omp")
    monkeypatch.setattr(backend, "gpu_free_bytes", lambda: 1 << 40)

    def workers(n, degree):
        edges = n * degree
        graph_bytes = 12 * edges + 16 * n  # int32 adjncy, int64 adjwgt / xadj / vwgt
        return ml.try_workers(4, True, n, edges, graph_bytes, dev)

    assert workers(1 << 20, 4) == 1    # 2D grid: a second try would pass 100 B/edge
    assert workers(1 << 20, 6) == 2    # Delaunay
    assert workers(1 << 20, 13) == 4   # random geometric
    for n, degree in ((1 << 20, 4), (1 << 20, 6), (1 << 20, 13)):
        edges = n * degree
        w = workers(n, degree)
        peak = 12 * edges + 16 * n + w * (dev.try_bytes_per_vertex * n
                                          + dev.try_bytes_per_edge * edges)
        assert peak <= dev.peak_bytes_per_edge * edges
    monkeypatch.setattr(backend, "gpu_free_bytes", lambda: 1 << 20)
    assert workers(1 << 20, 13) == 1   # the device holds one try only
    # host: Numba's threads decide, not memory
    host = 4 if ml.nb.get_num_threads() > 1 else 1
    assert ml.try_workers(4, False, 1 << 20, 13 << 20, 1 << 40, dev) == host


def test_weighted_tasks_respect_lmax():
    g = random_graph(300, 6, 8)
    vwgt = np.random.default_rng(9).integers(1, 10, g.n)
    g = CommGraph(g.xadj, g.adjncy, g.adjwgt, vwgt)
    h = Hierarchy.parse("2:2:2")
    for engine in ("hm", "im"):
        m = map_tasks(g, h, engine=engine, seed=0)
        assert m.evaluation.valid
        assert m.evaluation.loads.max() <= math.ceil(1.03 * vwgt.sum() / 8)


# ----------------------------------------------------------------- rank placement
def stencil_numbered_randomly(shape, seed):
    g = grid_graph(shape)
    perm = np.random.default_rng(seed).permutation(g.n)
    A = g.to_scipy()
    return CommGraph.from_scipy(A[perm][:, perm], symmetric=True)


@pytest.mark.parametrize("levels,n", [("4:8:6", 192), ("4:8:6", 150), ("2:3:4", 24)])
def test_rank_placement_is_valid_and_never_worse_than_block(levels, n):
    h = Hierarchy.parse(levels, "1:10:100")
    for g in (random_graph(n, 4, 11), stencil_numbered_randomly((n, 1), 1)):
        m = map_tasks(g, h, seed=0)
        ev = m.evaluation
        assert ev.mode == "placement" and ev.valid and ev.counts.max() <= 1
        for name in baselines.BASELINES:
            assert m.J <= evaluate(g, h, baselines.baseline(name, g.n, h, seed=0)).J


def test_rank_placement_stencil_natural_and_random_order():
    h = Hierarchy.parse("4:8:6", "1:10:100")
    natural = grid_graph((8, 6, 4))
    block_J = evaluate(natural, h, baselines.block(192, h)).J
    assert map_tasks(natural, h).J <= block_J
    shuffled = stencil_numbered_randomly((8, 6, 4), 3)
    assert map_tasks(shuffled, h).J <= 1.10 * block_J


def test_rank_placement_irregular_capacities():
    caps = np.ones(48, dtype=np.int64)
    caps[[1, 2, 9, 30, 31, 40]] = 0
    caps[[5, 6]] = 3
    h = Hierarchy.parse("4:4:3", "1:10:100").with_capacities(caps)
    g = random_graph(int(caps.sum()), 5, 12)
    m = map_tasks(g, h, seed=2)
    assert m.evaluation.valid
    assert np.all(np.bincount(m.pes, minlength=48) <= caps)


def brute_force_placement(g, h):
    best = None
    for perm in itertools.permutations(range(h.k), g.n):
        j = evaluate(g, h, np.array(perm)).J
        best = j if best is None else min(best, j)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_rank_placement_small_cases_reach_brute_force_optimum(seed):
    h = Hierarchy.parse("2:2:2", "1:10:100")
    g = random_graph(7, 4, 20 + seed)
    optimum = brute_force_placement(g, h)
    j = map_tasks(g, h, seed=seed).J
    assert optimum <= j <= 1.05 * optimum


def test_bad_requests():
    h = Hierarchy.parse("2:2")
    with pytest.raises(InputError, match="empty"):
        map_tasks(CommGraph.from_edges([], [], [], n=0), h)
    heavy = random_graph(40, 4, 1)
    vwgt = np.ones(heavy.n, dtype=np.int64)
    vwgt[3] = 100
    with pytest.raises(CapacityError, match="L_max"):
        map_tasks(CommGraph(heavy.xadj, heavy.adjncy, heavy.adjwgt, vwgt), h)
    with pytest.raises(TopologyError):
        map_tasks(heavy, DistanceMatrix.from_hierarchy(h))
    with pytest.raises(InputError, match="engine"):
        map_tasks(heavy, h, engine="magic")


@pytest.mark.parametrize("engine", ["hm", "im"])
@pytest.mark.parametrize("schemes", [("unionfind", "jet"), ("hem", "isr"), ("unionfind", "isr")])
def test_gkway_schemes_give_valid_deterministic_mappings(engine, schemes):
    """--coarsening unionfind / --refinement isr: valid, deterministic, and a real
    mapping (clearly better than a random placement)."""
    coarsening, refinement = schemes
    g = grid_graph((150, 150))  # large enough that union-find levels are used
    h = Hierarchy.parse("2:4:3", "1:10:100")
    a = map_tasks(g, h, engine=engine, seed=5, device="cpu", coarsening=coarsening,
                  refinement=refinement)
    b = map_tasks(g, h, engine=engine, seed=5, device="cpu", coarsening=coarsening,
                  refinement=refinement)
    np.testing.assert_array_equal(a.pes, b.pes)
    assert a.evaluation.valid
    assert a.J < 0.5 * evaluate(g, h, baselines.random(g.n, h, seed=1)).J


def test_unknown_schemes_are_input_errors():
    g = grid_graph((10, 10))
    h = Hierarchy.parse("2:2")
    with pytest.raises(InputError, match="coarsening"):
        map_tasks(g, h, coarsening="metis")
    with pytest.raises(InputError, match="refinement"):
        map_tasks(g, h, refinement="fm")


def test_unionfind_coarsening_needs_fewer_levels_and_stops_near_the_target():
    from procmap.engines.context import CoarseningContext
    from procmap.engines.multilevel import coarsen
    g = grid_graph((150, 150))
    args = (g.xadj, g.adjncy, g.adjwgt, g.vwgt, 3000, 100, 1)
    hem = coarsen(*args, coarsening=CoarseningContext(scheme="hem"))
    uf = coarsen(*args, coarsening=CoarseningContext(scheme="unionfind"))
    assert len(uf) < len(hem)
    assert 1500 <= uf[-1].n <= 3000  # never undershoots target / 2 (HEM finishes)
    assert all(int(level.vwgt.max()) <= 100 for level in uf)
    assert int(uf[-1].vwgt.sum()) == g.n


def _random_graph(n: int, avg_degree: int, seed: int) -> CommGraph:
    """Erdos-Renyi-like graph: matching halves its vertices but keeps almost every edge
    (the power-law case of CoarseningContext.max_edge_keep, without a generator)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, n * avg_degree // 2)
    dst = rng.integers(0, n, n * avg_degree // 2)
    keep = src != dst
    return CommGraph.from_edges(src[keep], dst[keep], np.ones(int(keep.sum())), n=n)


def test_coarsening_stops_at_a_level_that_keeps_almost_every_edge():
    from dataclasses import replace

    from procmap.engines.context import CoarseningContext
    from procmap.engines.multilevel import coarsen
    ctx = CoarseningContext()
    dense = _random_graph(20_000, 16, 1)
    args = (dense.xadj, dense.adjncy, dense.adjwgt, dense.vwgt, 1000, 10_000, 1)
    assert len(coarsen(*args, coarsening=ctx)) == 1  # the first level keeps > 80% of the edges
    unlimited = coarsen(*args, coarsening=replace(ctx, max_edge_keep=1.0))
    assert len(unlimited) > 2
    assert unlimited[1].adjncy.size > ctx.max_edge_keep * dense.adjncy.size
    mesh = grid_graph((150, 150))  # a level keeps about half of a mesh's edges
    levels = coarsen(mesh.xadj, mesh.adjncy, mesh.adjwgt, mesh.vwgt, 1000, 10_000, 1,
                     coarsening=ctx)
    assert levels[-1].n <= 1000


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_v_cycle_coarsening_keeps_every_coarse_vertex_in_one_block(device):
    """A V-cycle matches the graph without its cut edges. Pendant vertices hung on the
    other half of a grid lose their only edge there and are isolated, and two-hop
    matching pairs isolated vertices as twins: never across blocks."""
    from procmap.engines.context import CoarseningContext
    from procmap.engines.multilevel import coarsen
    from procmap.kernels import backend
    grid = grid_graph((40, 40))
    side = 40 * 40
    part = (np.arange(side) % 40 >= 20).astype(np.int32)  # left and right halves
    pendants = 600
    anchor = np.random.default_rng(2).integers(0, side, pendants)
    pendant_part = (1 - part[anchor]).astype(np.int32)  # each in the block its anchor is not
    rows, cols = np.nonzero(grid.to_scipy())
    keep = rows < cols
    g = CommGraph.from_edges(np.concatenate([rows[keep], anchor]),
                             np.concatenate([cols[keep], side + np.arange(pendants)]),
                             np.ones(int(keep.sum()) + pendants), n=side + pendants)
    part = np.concatenate([part, pendant_part])
    be = backend.cpu() if device == "cpu" else backend.gpu()
    arrays = be.upload_graph(g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    levels = coarsen(*arrays, 200, 10_000, 1, be.asarray(part, np.int32),
                     coarsening=CoarseningContext(min_vertices=0))
    assert len(levels) > 2
    for fine, coarse in zip(levels[:-1], levels[1:]):
        fine_part, cmap = backend.to_host(fine.part), backend.to_host(fine.cmap)
        np.testing.assert_array_equal(backend.to_host(coarse.part)[cmap], fine_part)


@pytest.mark.parametrize("targets", [None, np.array([3.0, 1, 1, 1])])
def test_metis_partition_of_an_edgeless_graph_fills_each_share(targets):
    from procmap.engines.initial import metis_partition
    vwgt = np.random.default_rng(1).integers(1, 5, 10_000)
    xadj = np.zeros(vwgt.size + 1, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    part = metis_partition(xadj, none.astype(np.int32), none, vwgt, 4, 0.03, 1, targets)
    share = (np.full(4, 0.25) if targets is None else targets / targets.sum()) * vwgt.sum()
    loads = np.bincount(part, weights=vwgt, minlength=4)
    assert np.all(np.abs(loads - share) <= vwgt.max() / 2)


def test_random_partition_is_seeded_and_fills_each_share():
    from procmap.engines.initial import random_partition
    vwgt = np.random.default_rng(1).integers(1, 9, 5000)
    targets = np.array([0.5, 0.25, 0.125, 0.125])
    a = random_partition(vwgt, 4, 3, targets)
    np.testing.assert_array_equal(a, random_partition(vwgt, 4, 3, targets))
    assert not np.array_equal(a, random_partition(vwgt, 4, 4, targets))
    loads = np.bincount(a, weights=vwgt, minlength=4)
    assert np.all(np.abs(loads - targets * vwgt.sum()) <= vwgt.max())
    equal = np.bincount(random_partition(vwgt, 7, 0), weights=vwgt, minlength=7)
    assert equal.max() - equal.min() <= 2 * vwgt.max()


@pytest.mark.parametrize("targets", [None, np.array([0.5, 0.25, 0.125, 0.125])])
def test_stream_partition_is_seeded_and_respects_each_blocks_limit(targets):
    """The streaming start (Fennel): every vertex in a block, no block above its share of
    ``lmax``, the same blocks for the same seed; the seed reorders vertices of equal
    weighted degree only, and a Chung-Lu graph has many."""
    from procmap.engines.initial import stream_partition
    g = chung_lu_graph(4000, avg_degree=8, seed=2)
    k, lmax = 4, 1100 if targets is None else 2100
    a = stream_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k, lmax, 3, targets)
    np.testing.assert_array_equal(a, stream_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k,
                                                      lmax, 3, targets))
    assert not np.array_equal(a, stream_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k,
                                                  lmax, 4, targets))
    share = np.full(k, 0.25) if targets is None else targets
    assert a.min() >= 0 and a.max() < k
    assert np.all(np.bincount(a, minlength=k) <= np.floor(lmax * share / share.max()))


def test_stream_partition_follows_fennels_rule_vertex_by_vertex():
    """Reference oracle: the pass equals a plain-Python stream over the same order, in
    which each vertex joins the block with room that maximises its edge weight to the
    block minus alpha * gamma * (load / scale)^(gamma - 1) * its weight (ties: lower
    block), or the block of lowest scaled load when none has room; its edge weights
    count the neighbours placed before its batch (batches of 1 + position // 32
    vertices). Float weights, unequal vertex weights and unequal shares."""
    from procmap.engines.initial import stream_partition
    from procmap.kernels.initial.stream_cpu import BATCH_DIVISOR, GAMMA
    rng = np.random.default_rng(5)
    g = _random_graph(300, 6, 4)
    adjwgt = rng.random(g.adjncy.size) * 10.0 ** rng.integers(0, 3, g.adjncy.size)
    vwgt = rng.integers(1, 6, g.n)
    k, seed = 4, 7
    targets = np.array([0.4, 0.3, 0.2, 0.1])
    lmax = math.ceil(1.03 * 0.4 * vwgt.sum())
    part = stream_partition(g.xadj, g.adjncy, adjwgt, vwgt, k, lmax, seed, targets)

    share = targets / targets.sum()
    caps = np.floor(lmax * share / share.max())
    degree = np.array([adjwgt[g.xadj[u]:g.xadj[u + 1]].sum() for u in range(g.n)])
    shuffled = np.random.default_rng(seed).permutation(g.n)
    order = sorted(shuffled, key=lambda u: -degree[u])  # stable: ties keep the shuffle
    alpha = math.sqrt(k) * adjwgt.sum() / 2 / vwgt.sum() ** 1.5
    expected = np.full(g.n, -1)
    load = np.zeros(k)
    lo = 0
    while lo < g.n:
        hi = min(g.n, lo + 1 + lo // BATCH_DIVISOR)
        before = expected.copy()  # the blocks a batch's edge weights see
        for u in order[lo:hi]:
            conn = np.zeros(k)
            for e in range(g.xadj[u], g.xadj[u + 1]):
                if before[g.adjncy[e]] >= 0:
                    conn[before[g.adjncy[e]]] += adjwgt[e]
            scaled = load / (k * share)
            scores = [conn[b] - alpha * GAMMA * scaled[b] ** (GAMMA - 1) * vwgt[u]
                      if load[b] + vwgt[u] <= caps[b] else -np.inf for b in range(k)]
            best = int(np.argmax(scores)) if max(scores) > -np.inf else int(np.argmin(scaled))
            expected[u] = best
            load[best] += vwgt[u]
        lo = hi
    np.testing.assert_array_equal(part, expected)
    assert np.all(load <= caps)


def test_stream_partition_puts_a_vertex_without_room_in_the_lightest_block():
    """A vertex heavier than every block's room still gets a block (the lightest: the
    refinement's rebalancing repairs it), and the others keep to the limit."""
    from procmap.engines.initial import stream_partition
    g = _random_graph(200, 4, 1)
    vwgt = np.ones(g.n, dtype=np.int64)
    vwgt[7] = 500
    part = stream_partition(g.xadj, g.adjncy, g.adjwgt, vwgt, 4, 60, 0)
    loads = np.bincount(part, weights=vwgt, minlength=4)
    assert loads[part[7]] == 500 + np.count_nonzero(part == part[7]) - 1
    assert np.all(np.delete(loads, part[7]) <= 60)


def test_stream_start_cuts_far_less_than_a_random_one_on_a_power_law_graph():
    from procmap.engines.initial import random_partition, stream_partition
    from procmap.kernels.refinement.jet_cpu import cost
    g = chung_lu_graph(6000, avg_degree=8, seed=3)
    k = 6
    lmax = math.ceil(1.03 * g.n / k)
    one_level = (np.array([k]), np.array([1.0]))
    stream = stream_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k, lmax, 1)
    random = random_partition(g.vwgt, k, 1)
    assert (cost(g.xadj, g.adjncy, g.adjwgt, stream, *one_level)
            < 0.75 * cost(g.xadj, g.adjncy, g.adjwgt, random, *one_level))


def _power_law_with_leaves():
    """A Chung-Lu core of 5,000 vertices with 20,000 leaves hung on it: matching contracts
    the leaves for three levels, then stalls on the core at 7,660 vertices, above hm's
    coarsening target (3,000)."""
    core = chung_lu_graph(5000, avg_degree=8, seed=1)
    anchor = np.random.default_rng(0).integers(0, core.n, 20_000)
    src = np.concatenate([np.repeat(np.arange(core.n), np.diff(core.xadj)),
                          np.arange(core.n, core.n + anchor.size)])
    return CommGraph.from_edges(src, np.concatenate([core.adjncy, anchor]), None,
                                n=core.n + anchor.size)


@pytest.mark.parametrize("rule", ["stream", "random"])
def test_a_coarsest_graph_left_above_the_target_starts_as_the_context_says(monkeypatch, rule):
    """InitialMappingContext.stalled_start: coarsening stalls a few levels down (as in the
    deep splits of power-law graphs); with "stream" the coarsest graph starts from the
    streaming pass and METIS never runs, with "random" (a graph that coarsened a little)
    from METIS."""
    from dataclasses import replace

    from procmap.engines import multilevel
    from procmap.engines.context import preset
    g = _power_law_with_leaves()
    calls = []
    for name in ("metis_partition", "stream_partition", "random_partition"):
        real = getattr(multilevel, name)

        def record(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, args[0].size - 1))
            return _real(*args, **kwargs)

        monkeypatch.setattr(multilevel, name, record)
    hm = preset("hm")
    ctx = replace(hm, initial=replace(hm.initial, stalled_start=rule),
                  schedule=replace(hm.schedule, vcycles=(0,)))
    k = 6
    lmax = math.ceil(1.03 * g.n / k)
    part = multilevel.kway_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k, lmax, eps=0.03,
                                     seed=1, ctx=ctx)
    assert np.bincount(part, minlength=k).max() <= lmax
    assert len(calls) == 1
    name, size = calls[0]
    assert ctx.coarsening.target(k) < size < g.n
    assert name == {"stream": "stream_partition", "random": "metis_partition"}[rule]


@pytest.mark.parametrize("start", ["stream", "random", "metis"])
def test_every_stalled_start_gives_a_valid_deterministic_mapping(start):
    from dataclasses import replace

    from procmap.engines.context import preset
    g = chung_lu_graph(6000, avg_degree=8, seed=3)
    h = Hierarchy.parse("4:4:2", "1:10:100")
    hm = preset("hm")
    ctx = replace(hm, initial=replace(hm.initial, stalled_start=start))
    a = map_tasks(g, h, context=ctx, device="cpu", seed=2)
    b = map_tasks(g, h, context=ctx, device="cpu", seed=2)
    assert a.evaluation.valid
    np.testing.assert_array_equal(a.pes, b.pes)
    with pytest.raises(ValueError, match="stalled_start"):
        replace(hm.initial, stalled_start="fennel")


@pytest.mark.parametrize("engine", ["hm", "im"])
def test_engines_on_a_graph_that_does_not_coarsen(engine):
    """Coarsening stops at the input: the initial mapping sees the whole graph, and the
    result is still valid and deterministic (issue #22, power-law robustness)."""
    g = _random_graph(6000, 16, 2)
    h = Hierarchy.parse("4:4:2", "1:10:100")
    a = map_tasks(g, h, engine=engine, device="cpu", seed=4)
    b = map_tasks(g, h, engine=engine, device="cpu", seed=4)
    assert a.evaluation.valid
    np.testing.assert_array_equal(a.pes, b.pes)
    assert a.evaluation.J < 0.9 * evaluate(g, h, baselines.random(g.n, h, seed=0)).J


def test_a_split_that_does_not_coarsen_starts_without_metis_or_v_cycles(monkeypatch):
    """hm-ultra's top split of a graph that keeps its edges under matching: no METIS call
    on it (the streaming start), no V-cycle, which would coarsen it again for nothing and
    refine the same graph again, and no ultra schedule (17 Jet passes over the whole
    graph, for nothing on such graphs). Observed through the phases' interfaces:
    coarsening, the initial partitioner and the uncoarsening loop."""
    from procmap.engines import multilevel
    from procmap.engines.context import preset
    g = _random_graph(6000, 16, 2)
    metis_sizes, coarsened, refined = [], [], []
    real_metis, real_coarsen = multilevel.metis_partition, multilevel.coarsen
    real_uncoarsen = multilevel.uncoarsen

    def metis(xadj, *args, **kwargs):
        metis_sizes.append(xadj.size - 1)
        return real_metis(xadj, *args, **kwargs)

    def coarsen(xadj, adjncy, adjwgt, vwgt, target_n, max_vwgt, seed, part=None, *args,
                **kwargs):
        levels = real_coarsen(xadj, adjncy, adjwgt, vwgt, target_n, max_vwgt, seed, part,
                              *args, **kwargs)
        if xadj.size - 1 == g.n:  # (a V-cycle?, coarse levels made)
            coarsened.append((part is not None, len(levels) - 1))
        return levels

    def uncoarsen(levels, part, problem, ctx, plan, seed):
        if levels[0].n == g.n:
            refined.append((len(levels), plan.ultra))
        return real_uncoarsen(levels, part, problem, ctx, plan, seed)

    monkeypatch.setattr(multilevel, "metis_partition", metis)
    monkeypatch.setattr(multilevel, "coarsen", coarsen)
    monkeypatch.setattr(multilevel, "uncoarsen", uncoarsen)
    ctx = preset("hm-ultra")
    k = 6
    part = multilevel.kway_partition(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k,
                                     math.ceil(1.03 * g.n / k), eps=0.03, seed=1, ctx=ctx)
    assert np.bincount(part, minlength=k).max() <= math.ceil(1.03 * g.n / k)
    assert g.n not in metis_sizes
    tries, vcycles = ctx.schedule.tries_at(0), ctx.schedule.vcycles_at(0)
    assert vcycles > 1 and ctx.schedule.ultra_at(0)
    # per try (tries may run concurrently): the cycle itself, and no V-cycle (the graph
    # would not coarsen inside its blocks either); only the cycle refines the graph,
    # without the ultra schedule
    assert sorted(coarsened) == [(False, 0)] * tries
    assert refined == [(1, False)] * tries


def test_small_subgraphs_split_in_the_calling_thread_with_the_same_result(monkeypatch):
    """DeviceContext.thread_min_vertices: subgraphs below it never go to a worker thread,
    and the mapping is the one that handing every split to workers gives."""
    from dataclasses import replace

    from procmap.engines import hm as hm_mod
    from procmap.engines.context import preset
    g = grid_graph((48, 40))  # 1920 tasks: top split in the pool, 6 subgraphs of 320 below
    h = Hierarchy.parse("4:8:6", "1:10:100")
    handed = []
    real = hm_mod.backend.in_worker

    def in_worker(fn, threads, gpu=False):
        def run(item):
            handed.append(item[1].size)
            return fn(item)
        return real(run, threads, gpu)

    monkeypatch.setattr(hm_mod.backend, "in_worker", in_worker)
    ctx = preset("hm")
    serial = map_tasks(g, h, context=ctx, seed=3, device="cpu")
    if hm_mod.threading_layer() == "workqueue" or hm_mod.nb.get_num_threads() < 2:
        pytest.skip("splits run serially here whatever the threshold")
    assert not [size for size in handed if size < ctx.device.thread_min_vertices]
    pooled_ctx = replace(ctx, device=replace(ctx.device, thread_min_vertices=0))
    pooled = map_tasks(g, h, context=pooled_ctx, seed=3, device="cpu")
    assert [size for size in handed if size < ctx.device.thread_min_vertices]
    np.testing.assert_array_equal(serial.pes, pooled.pes)


def test_im_on_a_graph_that_does_not_coarsen_refines_hms_mapping():
    """With no coarse level, im maps the input with an hm pipeline (InitialMappingContext.
    uncoarsened: hm without FM) and refines J from there: never worse than that
    pipeline run alone with the same seed, and close to plain hm."""
    from procmap.engines.context import preset
    g = _random_graph(6000, 16, 2)
    h = Hierarchy.parse("4:4:2", "1:10:100")
    uncoarsened = preset("im").initial.uncoarsened
    assert uncoarsened.fm.passes == 0
    start = map_tasks(g, h, context=uncoarsened, device="cpu", seed=5)
    hm = map_tasks(g, h, engine="hm", device="cpu", seed=5)
    im = map_tasks(g, h, engine="im", device="cpu", seed=5)
    assert im.evaluation.valid
    assert im.evaluation.J < start.evaluation.J
    assert im.evaluation.J <= 1.01 * hm.evaluation.J


def test_im_does_not_coarsen_again_a_graph_it_saw_not_coarsen(monkeypatch):
    """SplitSchedule.coarsen: the hm that maps im's uncoarsened input starts its top split
    from a random partition instead of coarsening the whole graph a second time, as
    plain hm does (im's own attempt is its coarsening phase, not a split's)."""
    from procmap.engines import multilevel
    g = _random_graph(6000, 16, 2)
    h = Hierarchy.parse("4:4:2", "1:10:100")
    splits_coarsening_whole = []
    real = multilevel.coarsen

    def coarsen(xadj, *args, **kwargs):
        if xadj.size - 1 == g.n:
            splits_coarsening_whole.append(1)
        return real(xadj, *args, **kwargs)

    monkeypatch.setattr(multilevel, "coarsen", coarsen)
    hm = map_tasks(g, h, engine="hm", device="cpu", seed=5)
    assert splits_coarsening_whole
    splits_coarsening_whole.clear()
    im = map_tasks(g, h, engine="im", device="cpu", seed=5)
    assert not splits_coarsening_whole
    assert im.evaluation.valid and im.evaluation.J <= 1.01 * hm.evaluation.J


@pytest.mark.parametrize("local_fm", [False, True])
def test_uncoarsening_reports_the_objective_of_its_partition(local_fm):
    """The objective a cycle returns decides between tries and V-cycles; levels of
    fm.fm_only_min_n+ vertices skip Jet and carry it over from the coarser level (a
    projection keeps the cut), and localized FM subtracts its gains: the value must
    still be the partition's exact J."""
    from procmap.engines.context import preset
    from procmap.engines.initial import metis_partition
    from procmap.engines.multilevel import Problem, coarsen
    from procmap.engines.uncoarsen import LevelPlan, uncoarsen
    ctx = preset("hm")
    g = grid_graph((150, 150))  # finest levels above fm_only_min_n
    assert g.n >= ctx.fm.fm_only_min_n
    k = 6
    lmax = math.ceil(1.03 * g.n / k)
    problem = Problem(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k, lmax, 0.03, np.array([k]),
                      np.array([1.0]))
    runs = []
    for _ in range(2):
        levels = coarsen(*problem.graph, ctx.coarsening.target(k), lmax, 3,
                         coarsening=ctx.coarsening, device=ctx.device)
        c = levels[-1]
        start = metis_partition(c.xadj, c.adjncy, c.adjwgt, c.vwgt, k, 0.03, 3, None)
        runs.append(uncoarsen(levels, start, problem, ctx, LevelPlan(local_fm=local_fm), 3))
    (part, value), (part2, value2) = runs
    h = Hierarchy((k,), (1.0,))
    assert value == evaluate(g, h, part).J
    assert np.bincount(part, minlength=k).max() <= lmax
    np.testing.assert_array_equal(part, part2)
    assert value == value2


def _zigzag_mapping(rows: int, cols: int) -> np.ndarray:
    """Two nodes of 4 PEs on a ``rows x cols`` grid: the node border zigzags across the
    middle column (4 columns either way every 4 rows), PEs are row bands in a node."""
    r, c = np.divmod(np.arange(rows * cols), cols)
    shift = np.where((r // 4) % 2 == 0, 4, -4)
    node = (c >= cols // 2 + shift).astype(np.int32)
    return (node * 4 + r * 4 // rows).astype(np.int32)


@pytest.mark.parametrize("group_levels", [1, 2])
def test_group_refinement_straightens_a_node_border(group_levels):
    from dataclasses import replace

    from procmap.engines.context import preset
    from procmap.engines.multilevel import Level, Problem
    from procmap.engines.uncoarsen import LevelPlan, refine_level

    g = grid_graph((32, 32))
    h = Hierarchy.parse("2:2:2", "1:10:100")
    start = _zigzag_mapping(32, 32)
    lmax = math.ceil(1.03 * g.n / h.k)
    assert np.bincount(start, minlength=h.k).max() <= lmax
    im = preset("im")
    ctx = replace(im, refinement=replace(im.refinement, group_levels=group_levels))
    prefix, dist = np.array([2, 4, 8]), np.array([1.0, 10.0, 100.0])
    problem = Problem(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k=h.k, lmax=lmax, eps=0.03,
                      prefix=prefix, dist=dist)
    level = Level(g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    results = {}
    for groups in (False, True):
        pes, value = refine_level(level, start.copy(), problem, ctx, LevelPlan(), depth=0,
                                  seed=1, groups=groups)
        ev = evaluate(g, h, pes)
        assert ev.valid and np.bincount(pes, minlength=h.k).max() <= lmax
        assert value == pytest.approx(ev.J)
        results[groups] = ev
    between_nodes = evaluate(g, h, start).level_traffic[-1]
    # the PE-level refinement alone cannot move the node border far (every PE is
    # nearly full); refined as two blocks of 4 PEs, it becomes a straight cut
    assert results[True].level_traffic[-1] < results[False].level_traffic[-1] < between_nodes
    assert results[True].level_traffic[-1] <= 2 * 32  # one straight column border
    assert results[True].J < results[False].J


def test_group_refinement_skips_levels_with_flat_distances():
    """RefinementContext.group_min_step: with distances 1:2:3 no group level costs 4x the
    one below it, so refining with groups is refining the PEs alone."""
    from procmap.engines.context import preset
    from procmap.engines.multilevel import Level, Problem
    from procmap.engines.uncoarsen import LevelPlan, refine_level

    g = grid_graph((32, 32))
    start = _zigzag_mapping(32, 32)
    problem = Problem(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k=8, lmax=math.ceil(1.03 * g.n / 8),
                      eps=0.03, prefix=np.array([2, 4, 8]), dist=np.array([1.0, 2.0, 3.0]))
    level = Level(g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    runs = [refine_level(level, start.copy(), problem, preset("im"), LevelPlan(), depth=0,
                         seed=1, groups=groups)[0] for groups in (False, True)]
    np.testing.assert_array_equal(runs[0], runs[1])


def test_wants_groups_follows_the_size_and_the_gain_of_the_level_before():
    """RefinementContext.group_max_n / group_keep_gain: small levels always refine their
    groups; a larger one only when the level before it gained at least the fraction."""
    from dataclasses import replace

    from procmap.engines.context import preset
    from procmap.engines.uncoarsen import wants_groups

    im = preset("im")
    ctx = replace(im, refinement=replace(im.refinement, group_max_n=1000, group_keep_gain=0.05))
    assert wants_groups(ctx, 1000, None)
    assert not wants_groups(ctx, 1001, None)
    assert wants_groups(ctx, 1001, 0.05)
    assert not wants_groups(ctx, 1001, 0.0499)
    never = replace(ctx, refinement=replace(ctx.refinement, group_keep_gain=None))
    assert not wants_groups(never, 1001, 0.9)


@pytest.mark.parametrize("keep_gain, every_level", [(None, False), (-1.0, True), (1.0, False)])
def test_uncoarsen_refines_the_groups_of_large_levels_while_levels_gain(monkeypatch, keep_gain,
                                                                        every_level):
    """group_max_n admits only the level after the coarsest (the coarsest, just mapped,
    never refines groups); a finer level refines its groups only where the level before
    it did and gained at least group_keep_gain: never without the rule or with a gain no
    level reaches, on every level with any gain. The mapping stays within L_max."""
    from dataclasses import replace

    import procmap.engines.uncoarsen as unc
    from procmap.engines.context import preset
    from procmap.engines.multilevel import Problem, coarsen

    g = grid_graph((16, 16, 16))
    h = Hierarchy.parse("2:2:2", "1:10:100")
    lmax = math.ceil(1.03 * g.n / h.k)
    im = preset("im")
    levels = coarsen(g.xadj, g.adjncy, g.adjwgt, g.vwgt, 128, lmax, seed=1)
    assert len(levels) >= 4
    ctx = replace(im, refinement=replace(im.refinement, group_max_n=levels[-2].n,
                                         group_keep_gain=keep_gain))
    start = (np.arange(levels[-1].n) * h.k // levels[-1].n).astype(np.int32)
    problem = Problem(g.xadj, g.adjncy, g.adjwgt, g.vwgt, k=h.k, lmax=lmax, eps=0.03,
                      prefix=np.array([2, 4, 8]), dist=np.array([1.0, 10.0, 100.0]))
    refined = []
    original = unc.refine_groups

    def recording(level, *args, **kwargs):
        refined.append(level.n)
        return original(level, *args, **kwargs)

    monkeypatch.setattr(unc, "refine_groups", recording)
    pes, value = unc.uncoarsen(levels, start, problem, ctx, unc.LevelPlan(), seed=1)
    expected = [lv.n for lv in levels[-2::-1]] if every_level else [levels[-2].n]
    assert refined == expected
    assert np.bincount(pes, minlength=h.k).max() <= lmax
    assert value == pytest.approx(evaluate(g, h, pes).J)


def test_thread_shares_follow_the_size_of_the_subgraphs():
    """hm.thread_shares: the free threads go to the subgraphs that start splitting in
    proportion to their vertices plus edges, at least one each."""
    from procmap.engines.hm import thread_shares

    assert thread_shares([], 16) == []
    assert thread_shares([14_000_000, 400_000, 400_000, 400_000, 400_000, 400_000], 16) \
        == [14, 1, 1, 1, 1, 1]
    assert thread_shares([100, 100, 100, 100], 16) == [4, 4, 4, 4]
    assert thread_shares([5, 5], 0) == [1, 1]  # every running split holds threads
    assert thread_shares([0, 0], 8) == [4, 4]
