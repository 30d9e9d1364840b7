import numpy as np
import pytest

from procmap import baselines, evaluate
from procmap.generators import grid_graph
from procmap.topology import Hierarchy


def test_block_is_slot_order_and_even_when_oversubscribed():
    h = Hierarchy.parse("2:3")
    np.testing.assert_array_equal(baselines.block(4, h), [0, 1, 2, 3])
    pes = baselines.block(12, h)
    assert np.bincount(pes, minlength=6).tolist() == [2] * 6
    assert np.all(np.diff(pes) >= 0)


def test_block_respects_capacities():
    h = Hierarchy.parse("2:2").with_capacities([2, 0, 1, 1])
    np.testing.assert_array_equal(baselines.block(4, h), [0, 0, 2, 3])


def test_roundrobin_cycles_over_nodes():
    h = Hierarchy.parse("2:2:3")  # node_level 2: 3 nodes of 4 PEs
    assert h.num_nodes == 3
    pes = baselines.roundrobin(7, h)
    np.testing.assert_array_equal(pes // 4, [0, 1, 2, 0, 1, 2, 0])
    np.testing.assert_array_equal(pes, [0, 4, 8, 1, 5, 9, 2])


def test_roundrobin_skips_full_nodes():
    caps = np.ones(8, dtype=int)
    caps[4:7] = 0  # node 1 has a single slot (PE 7)
    h = Hierarchy.parse("4:2", node_level=1).with_capacities(caps)
    pes = baselines.roundrobin(5, h)
    np.testing.assert_array_equal(pes, [0, 7, 1, 2, 3])


@pytest.mark.parametrize("name", baselines.BASELINES)
def test_baselines_are_valid(name):
    g = grid_graph((10, 12))
    for h in (Hierarchy.parse("4:8:6"), Hierarchy.parse("2:2:3")):
        ev = evaluate(g, h, baselines.baseline(name, g.n, h, seed=3))
        assert ev.valid


def test_random_is_seeded():
    h = Hierarchy.parse("4:8")
    a = baselines.random(32, h, seed=1)
    assert np.array_equal(a, baselines.random(32, h, seed=1))
    assert not np.array_equal(a, baselines.random(32, h, seed=2))
    assert sorted(a.tolist()) == list(range(32))
