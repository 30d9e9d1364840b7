"""Rank placement (issue #22 item 4): ``auto`` tries hm and hm-ultra starts plus block
placement, each swap-refined, and polishes the winner with wider swaps; the swap
kernel against a brute-force oracle on tiny machines."""
from __future__ import annotations

import itertools
import os
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import patterns  # noqa: E402

from procmap import CommGraph, evaluate, map_tasks, preset  # noqa: E402
from procmap.generators import grid_graph  # noqa: E402
from procmap.kernels.refinement.swap_cpu import swap_refine  # noqa: E402
from procmap.topology import Hierarchy  # noqa: E402

MACHINE_64 = Hierarchy.parse("4:8:2", "1:10:100")  # the benchmark's 4:8:(n/32) at 64 ranks

SMALL = {
    "amr": lambda: patterns.amr_like(64),
    "halo2d-8": lambda: patterns.halo2d(8, 8, neighbours=8),
    "amg": lambda: patterns.amg_like(64),
    "grid": lambda: grid_graph((4, 4, 4)),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_auto_is_never_worse_than_an_engine(name):
    graph = SMALL[name]()
    assert graph.n == MACHINE_64.total_slots  # rank placement, n == slots
    auto = map_tasks(graph, MACHINE_64, engine="auto", seed=1, device="cpu")
    assert auto.evaluation.valid and auto.evaluation.counts.max() <= 1
    for engine in ("hm", "hm-ultra", "im"):
        other = map_tasks(graph, MACHINE_64, engine=engine, seed=1, device="cpu")
        assert auto.J <= other.J, (engine, auto.J, other.J)
    again = map_tasks(graph, MACHINE_64, engine="auto", seed=1, device="cpu")
    np.testing.assert_array_equal(auto.pes, again.pes)  # a work budget: deterministic


def test_auto_respects_uneven_capacities():
    machine = MACHINE_64.with_capacities(np.tile([2, 0, 1, 1], 16))
    graph = patterns.amr_like(64)  # 64 tasks on 64 slots, some PEs empty, some double
    m = map_tasks(graph, machine, engine="auto", seed=0, device="cpu")
    assert m.evaluation.valid
    assert np.all(np.bincount(m.pes, minlength=machine.k) <= machine.capacities)
    fewer = map_tasks(patterns.halo2d(5, 8), machine, engine="auto", seed=0, device="cpu")
    assert np.all(np.bincount(fewer.pes, minlength=machine.k) <= machine.capacities)


def test_auto_budget_is_a_number_of_starts():
    place = preset("auto").placement
    assert place.extra is preset("hm-ultra")
    assert place.extra_starts_at(64) == 4 and place.extra_starts_at(1024) == 2
    assert place.extra_starts_at(10 ** 6) == 0
    assert place.starts_at(64) == 4 and place.starts_at(1024) == 1
    assert preset("hm").placement.extra_starts_at(64) == 0  # explicit engines: one pipeline
    assert place.polish_group_for(np.array([4, 32, 1024])) == 32
    assert place.polish_group_for(np.array([64, 1024])) == 0
    assert preset("hm").placement.polish_group_for(np.array([4, 32])) == 0


def test_explicit_engines_keep_their_own_candidates():
    """hm with auto's placement settings but without the extra pipeline and polish
    gives exactly hm's placement."""
    graph = patterns.amr_like(64)
    hm = preset("hm")
    plain = map_tasks(graph, MACHINE_64, engine="hm", seed=2, device="cpu")
    ctx = replace(hm, placement=replace(preset("auto").placement, extra=None, polish_group=0,
                                        multistart_n=10_000))
    same = map_tasks(graph, MACHINE_64, context=ctx, seed=2, device="cpu")
    np.testing.assert_array_equal(plain.pes, same.pes)


# ------------------------------------------------------------------ swap kernel oracle
TINY = Hierarchy.parse("2:2:2", "1:10:100")


def _random_graph(rng, n, density=0.5):
    src, dst = np.nonzero(np.triu(rng.random((n, n)) < density, 1))
    return CommGraph.from_edges(src, dst, rng.integers(1, 50, src.size), n=n)


def _all_J(graph, topo, n):
    """The lowest J over every placement of ``n`` tasks on the slots (brute force)."""
    D = topo.distance_matrix()
    slots = np.repeat(np.arange(topo.k), topo.capacities)
    perms = np.array(list(itertools.permutations(range(slots.size), n)))
    pes = slots[perms]  # every placement, one per row
    src = graph.edge_sources()
    J = (graph.adjwgt[None, :] * D[pes[:, src], pes[:, graph.adjncy]]).sum(axis=1)
    return float(J.min())


def _refine(graph, topo, pes, group, passes=50):
    pes = pes.astype(np.int32).copy()
    swap_refine(graph.xadj, graph.adjncy, graph.adjwgt, pes, topo.capacities, topo.prefix_sizes,
                np.asarray(topo.distances, dtype=np.float64), max_passes=passes, group=group)
    return pes


@pytest.mark.parametrize("caps", [[1] * 8, [2, 0, 1, 1, 0, 2, 1, 1]], ids=["one", "uneven"])
def test_swap_refine_never_raises_J_and_keeps_capacities(caps):
    topo = TINY.with_capacities(caps)
    D = topo.distance_matrix()
    rng = np.random.default_rng(7)
    slots = np.repeat(np.arange(topo.k), topo.capacities)
    for trial in range(12):
        n = 8 if trial % 2 == 0 else 6
        graph = _random_graph(rng, n)
        C = graph.to_scipy().toarray().astype(np.float64)
        optimum = _all_J(graph, topo, n)
        for start in range(3):
            pes0 = rng.permutation(slots)[:n].astype(np.int32)
            j0 = float((C * D[np.ix_(pes0, pes0)]).sum())
            for group in (1, 2, 4, 8):
                pes = _refine(graph, topo, pes0, group)
                assert np.all(np.bincount(pes, minlength=topo.k) <= topo.capacities)
                j = float((C * D[np.ix_(pes, pes)]).sum())
                assert optimum - 1e-6 <= j <= j0 + 1e-6
                if group == 8:  # every PE a candidate: no single move or swap improves
                    _assert_swap_optimal(C, D, pes, topo.capacities, j)


def _assert_swap_optimal(C, D, pes, caps, j):
    n = pes.size
    count = np.bincount(pes, minlength=caps.size)

    def J(p):
        return float((C * D[np.ix_(p, p)]).sum())

    for u in range(n):
        if not C[u].any():
            continue  # a task without traffic is never a mover (its partner may be)
        for q in range(caps.size):
            if q != pes[u] and count[q] < caps[q]:
                p = pes.copy()
                p[u] = q
                assert J(p) >= j - 1e-6
        for v in range(n):
            if pes[v] != pes[u]:
                p = pes.copy()
                p[u], p[v] = pes[v], pes[u]
                assert J(p) >= j - 1e-6


def test_swap_group_one_is_the_plain_kernel():
    rng = np.random.default_rng(3)
    topo = Hierarchy.parse("4:8:2", "1:10:100")
    graph = patterns.amr_like(64)
    pes0 = rng.permutation(64).astype(np.int32)
    a = _refine(graph, topo, pes0, 1, passes=20)
    b = pes0.copy()
    swap_refine(graph.xadj, graph.adjncy, graph.adjwgt, b, topo.capacities, topo.prefix_sizes,
                np.asarray(topo.distances, dtype=np.float64), max_passes=20)
    np.testing.assert_array_equal(a, b)
    wide = _refine(graph, topo, a, 32, passes=20)
    assert evaluate(graph, topo, wide).J <= evaluate(graph, topo, a).J
