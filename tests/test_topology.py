"""Machine model: hierarchies, distance matrices, host lists, Scotch tleaf."""
from __future__ import annotations

import itertools
import math
import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from procmap.errors import TopologyError
from procmap.topology import (
    DistanceMatrix,
    Hierarchy,
    compress_hostlist,
    expand_hostlist,
    from_tleaf,
    is_hierarchy,
    parse_cpus_per_node,
    read_hostfile,
    read_tleaf,
    to_tleaf,
    write_tleaf,
)


# ---------------------------------------------------------------- Hierarchy
class TestHierarchyParsing:
    def test_valid(self):
        h = Hierarchy.parse("4:8:6", "1:10:100")
        assert h.levels == (4, 8, 6)
        assert h.distances == (1.0, 10.0, 100.0)
        assert h.k == 192
        assert h.pes_per_node == 32 and h.num_nodes == 6
        assert h.total_slots == 192
        assert list(h.prefix_sizes) == [4, 32, 192]

    def test_default_distances(self):
        assert Hierarchy.parse("4:8:6").distances == (1.0, 10.0, 100.0)

    @pytest.mark.parametrize("text", ["4:0:6", "4:x", "", "4::6", "-4:8", "4:-8:6", "4:8.5", ":", " "])
    def test_invalid_levels(self, text):
        with pytest.raises(TopologyError):
            Hierarchy.parse(text)

    @pytest.mark.parametrize("dist", ["1:10", "1:10:100:1000", "1:x:100", "1:-10:100", "1:nan:100", "1::100"])
    def test_invalid_distances(self, dist):
        with pytest.raises(TopologyError):
            Hierarchy.parse("4:8:6", dist)

    def test_distance_count_message(self):
        with pytest.raises(TopologyError, match="3 levels but 2 distances"):
            Hierarchy.parse("4:8:6", "1:10")

    def test_non_increasing_distances_warn(self):
        with pytest.warns(UserWarning, match="non-decreasing"):
            Hierarchy.parse("4:8:6", "100:10:1")

    def test_increasing_distances_do_not_warn(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Hierarchy.parse("4:8:6", "1:10:100")

    def test_capacities(self):
        h = Hierarchy.parse("2:2").with_capacities([1, 0, 2, 1])
        assert h.total_slots == 4
        with pytest.raises(TopologyError):
            Hierarchy.parse("2:2").with_capacities([1, 1, 1])
        with pytest.raises(TopologyError):
            Hierarchy.parse("2:2").with_capacities([1, -1, 1, 1])


def _brute_level(levels, p, q):
    """Deepest common level by mixed-radix digits (leaf digit first)."""
    if p == q:
        return 0
    dp, dq = [], []
    for a in levels:
        dp.append(p % a)
        dq.append(q % a)
        p //= a
        q //= a
    # The pair meets at the level just above the most significant differing digit.
    return 1 + max(t for t in range(len(levels)) if dp[t] != dq[t])


class TestHierarchyNumbering:
    def test_all_pairs_small(self):
        h = Hierarchy.parse("2:3:2", "1:5:20")
        pes = np.arange(h.k)
        lv = h.level_of(pes[:, None], pes[None, :])
        table = [0.0, 1.0, 5.0, 20.0]
        for p, q in itertools.product(range(h.k), repeat=2):
            expected = _brute_level(h.levels, p, q)
            assert lv[p, q] == expected
            assert h.distance(p, q) == table[expected]
        np.testing.assert_array_equal(h.distance_matrix(), np.asarray(table)[lv])

    def test_example_4_8_6(self):
        h = Hierarchy.parse("4:8:6", "1:10:100")
        assert h.distance(0, 3) == 1      # same processor
        assert h.distance(3, 4) == 10     # same node, other processor
        assert h.distance(31, 32) == 100  # other node
        assert h.distance(5, 5) == 0

    def test_random_pairs_big(self):
        h = Hierarchy.parse("4:8:16:32:8", "1:2:10:50:100")
        rng = np.random.default_rng(7)
        p = rng.integers(0, h.k, 2000)
        q = np.where(rng.random(2000) < 0.3, p ^ rng.integers(0, 8, 2000), rng.integers(0, h.k, 2000))
        q = np.clip(q, 0, h.k - 1)
        lv = h.level_of(p, q)
        d = h.distance(p, q)
        table = (0.0,) + h.distances
        for i in range(p.size):
            expected = _brute_level(h.levels, int(p[i]), int(q[i]))
            assert lv[i] == expected
            assert d[i] == table[expected]

    def test_is_hierarchy(self):
        h = Hierarchy.parse("2:2")
        assert is_hierarchy(h)
        assert not is_hierarchy(DistanceMatrix.from_hierarchy(h))


# ------------------------------------------------------------ DistanceMatrix
class TestDistanceMatrix:
    M = [[0, 1, 4], [1, 0, 2], [4, 2, 0]]

    def test_basic(self):
        dm = DistanceMatrix(self.M)
        assert dm.k == 3 and dm.total_slots == 3
        assert dm.distance(0, 2) == 4
        np.testing.assert_array_equal(dm.distance([0, 1], [2, 2]), [4, 2])
        np.testing.assert_array_equal(dm.distance(np.arange(3)[:, None], np.arange(3)[None, :]), self.M)
        assert dm.distance_matrix().dtype == np.float64
        assert not dm.distance_matrix().flags.writeable
        dm2 = dm.with_capacities([2, 0, 1])
        assert dm2.total_slots == 3 and dm2.k == 3
        assert dm2.distance_matrix() is dm.distance_matrix()
        assert dm == DistanceMatrix(np.array(self.M, dtype=float))
        assert dm != dm2

    @pytest.mark.parametrize("matrix, message", [
        ([[0, 1], [2, 0]], r"not symmetric: D\[0,1\] = 1 but D\[1,0\] = 2"),
        ([[0, -1], [-1, 0]], r"D\[0,1\] = -1 is negative"),
        ([[1, 1], [1, 0]], r"diagonal entry D\[0,0\] = 1"),
        ([[0, np.inf], [np.inf, 0]], r"D\[0,1\] = inf is not finite"),
        ([[0, np.nan], [np.nan, 0]], r"not finite"),
        ([[0, 1, 2], [1, 0, 3]], "square"),
        ([], "square|empty"),
        ([["a", "b"], ["c", "d"]], "not numeric"),
    ])
    def test_validation(self, matrix, message):
        with pytest.raises(TopologyError, match=message):
            DistanceMatrix(matrix)

    def test_capacity_validation(self):
        with pytest.raises(TopologyError, match="shape"):
            DistanceMatrix(self.M, capacities=[1, 1])
        with pytest.raises(TopologyError, match="PE 1"):
            DistanceMatrix(self.M, capacities=[1, -1, 1])
        with pytest.raises(TopologyError, match="integers"):
            DistanceMatrix(self.M, capacities=[1.0, 1.0, 1.0])

    def test_nearly_symmetric_is_symmetrised(self):
        m = np.array([[0, 1.0], [1.0 + 1e-13, 0]])
        dm = DistanceMatrix(m)
        assert dm.distance(0, 1) == dm.distance(1, 0)

    def test_from_hierarchy(self):
        h = Hierarchy.parse("2:3", "1:10")
        dm = DistanceMatrix.from_hierarchy(h.with_capacities([1, 1, 0, 1, 1, 1]))
        np.testing.assert_array_equal(dm.distance_matrix(), h.distance_matrix())
        assert dm.total_slots == 5

    def test_from_networkx(self):
        # Two switches s1-s2 (cost 10); a, b on s1 (cost 1 each); c on s2 (cost 2);
        # d hangs off c (cost 3).
        G = nx.Graph()
        G.add_edge("a", "s1", weight=1)
        G.add_edge("b", "s1", weight=1)
        G.add_edge("s1", "s2", weight=10)
        G.add_edge("c", "s2", weight=2)
        G.add_edge("c", "d", weight=3)
        dm = DistanceMatrix.from_networkx(G, pes=["a", "b", "c", "d"])
        expected = [[0, 2, 13, 16],
                    [2, 0, 13, 16],
                    [13, 13, 0, 3],
                    [16, 16, 3, 0]]
        np.testing.assert_array_equal(dm.distance_matrix(), expected)
        assert dm.labels == ("a", "b", "c", "d")
        # Hop counts.
        hops = DistanceMatrix.from_networkx(G, pes=["a", "b", "c", "d"], weight=None)
        np.testing.assert_array_equal(hops.distance_matrix()[0], [0, 2, 3, 4])

    def test_from_networkx_default_pes_sorted(self):
        G = nx.path_graph([3, 1, 2])  # edges 3-1, 1-2
        dm = DistanceMatrix.from_networkx(G)
        assert dm.labels == (1, 2, 3)
        np.testing.assert_array_equal(dm.distance_matrix(), [[0, 1, 1], [1, 0, 2], [1, 2, 0]])

    def test_from_networkx_errors(self):
        G = nx.Graph([(0, 1), (2, 3)])
        with pytest.raises(TopologyError, match="not connected"):
            DistanceMatrix.from_networkx(G)
        with pytest.raises(TopologyError, match="not a node"):
            DistanceMatrix.from_networkx(G, pes=[0, 9])
        with pytest.raises(TopologyError, match="twice"):
            DistanceMatrix.from_networkx(G, pes=[0, 0])
        with pytest.raises(TopologyError, match="directed"):
            DistanceMatrix.from_networkx(nx.DiGraph([(0, 1)]))
        neg = nx.Graph()
        neg.add_edge(0, 1, weight=-1)
        with pytest.raises(TopologyError, match="link costs"):
            DistanceMatrix.from_networkx(neg)

    def test_from_text_file(self, tmp_path):
        f = tmp_path / "d.txt"
        f.write_text("# distances\n0 1, 4\n\n1,0,2\n4 2 0   # last row\n")
        dm = DistanceMatrix.from_file(f)
        np.testing.assert_array_equal(dm.distance_matrix(), self.M)

    def test_from_npy_file(self, tmp_path):
        f = tmp_path / "d.npy"
        np.save(f, np.array(self.M, dtype=np.int32))
        dm = DistanceMatrix.from_file(f, capacities=[1, 2, 1])
        np.testing.assert_array_equal(dm.distance_matrix(), self.M)
        assert dm.total_slots == 4

    @pytest.mark.parametrize("text, message", [
        ("0 1\n1 x\n", r"d.txt:2: 'x' is not a number"),
        ("0 1 2\n1 0\n", r"d.txt:2: expected 3 values"),
        ("0 1\n1 0\n2 2\n", r"d.txt:3: .*square"),
        ("0 1\n# comment\n2 0\n", r"d.txt:1: distance matrix is not symmetric: .* \(line 3\)"),
        ("0 -1\n-1 0\n", r"d.txt:1: distance D\[0,1\] = -1 is negative"),
        ("# nothing\n", r"d.txt: no distance rows"),
    ])
    def test_file_errors(self, tmp_path, text, message):
        f = tmp_path / "d.txt"
        f.write_text(text)
        with pytest.raises(TopologyError, match=message):
            DistanceMatrix.from_file(f)

    def test_npy_errors(self, tmp_path):
        f = tmp_path / "bad.npy"
        np.save(f, np.zeros((2, 3)))
        with pytest.raises(TopologyError, match="bad.npy: .*square"):
            DistanceMatrix.from_file(f)


# ----------------------------------------------------------------- hostlists
class TestHostlist:
    @pytest.mark.parametrize("text, hosts", [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("n1,m[2-3]", ["n1", "m2", "m3"]),
        ("n1 n2\nn3", ["n1", "n2", "n3"]),
        ("tux[08-10]", ["tux08", "tux09", "tux10"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("n3,n1,n1", ["n3", "n1", "n1"]),  # order and duplicates kept
        ("  single  ", ["single"]),
    ])
    def test_expand(self, text, hosts):
        assert expand_hostlist(text) == hosts

    @pytest.mark.parametrize("text", ["node[01-", "node[3-1]", "", "   ", "n[a-b]", "n1]", "n[[1]]", "x[]", ","])
    def test_expand_errors(self, text):
        with pytest.raises(TopologyError) as info:
            expand_hostlist(text)
        message = str(info.value)
        assert "\n" not in message
        assert repr(text) in message

    def test_compress(self):
        assert compress_hostlist(["n1", "n2", "n3", "n7"]) == "n[1-3,7]"
        assert compress_hostlist(["node01", "node02", "node03"]) == "node[01-03]"
        assert compress_hostlist(["n3", "n1", "n2", "n2"]) == "n[1-3]"  # a set, sorted
        assert expand_hostlist(compress_hostlist(["a1b3", "a1b4", "a2b3", "a2b4"])) == \
            ["a1b3", "a1b4", "a2b3", "a2b4"]

    @pytest.mark.parametrize("hosts", [[], ["n 1"], ["n[1]"], ["a,b"], [""], "n1"])
    def test_compress_errors(self, hosts):
        with pytest.raises(TopologyError):
            compress_hostlist(hosts)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["n", "node", "gpu-", "r1c"]),
                              st.integers(0, 300),
                              st.sampled_from(["", "-ib"])),
                    min_size=1, max_size=40))
    def test_round_trip(self, parts):
        hosts = [f"{prefix}{num}{suffix}" for prefix, num, suffix in parts]
        expanded = expand_hostlist(compress_hostlist(hosts))
        assert sorted(expanded) == sorted(set(hosts))
        assert len(expanded) == len(set(hosts))

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 500), st.integers(0, 50), st.integers(1, 4))
    def test_round_trip_padded_ranges(self, start, length, width):
        hosts = [f"n{i:0{width}d}" for i in range(start, start + length + 1)]
        assert expand_hostlist(compress_hostlist(hosts)) == hosts


class TestCpusPerNode:
    @pytest.mark.parametrize("text, counts", [
        ("32(x6)", [32] * 6),
        ("36(x2),72", [36, 36, 72]),
        ("4", [4]),
        ("2(x1), 3", [2, 3]),
        ("1,2(x2),1", [1, 2, 2, 1]),
    ])
    def test_parse(self, text, counts):
        assert parse_cpus_per_node(text) == counts
        assert parse_cpus_per_node(text, len(counts)) == counts

    @pytest.mark.parametrize("text", ["", "x", "32(x", "32(x0)", "-1", "3,,4", "32(x2)(x3)", "4(2)", "1(x100000000)"])
    def test_errors(self, text):
        with pytest.raises(TopologyError):
            parse_cpus_per_node(text)

    def test_node_count_mismatch(self):
        with pytest.raises(TopologyError, match="describes 6 nodes, expected 5"):
            parse_cpus_per_node("32(x6)", 5)


class TestHostfile:
    def test_formats(self, tmp_path):
        f = tmp_path / "hosts"
        f.write_text("# cluster\n"
                     "node01 slots=4\n"
                     "node02:8   # MPICH\n"
                     "\n"
                     "node03\n"
                     "node04 slots=2 max_slots=4\n"
                     "node01 slots=1\n"
                     "node05 slots = 3 max-slots = 6\n"
                     "node06 cpu=2\n")
        assert read_hostfile(f) == [("node01", 4), ("node02", 8), ("node03", 1), ("node04", 2),
                                    ("node01", 1), ("node05", 3), ("node06", 2)]

    @pytest.mark.parametrize("text, message", [
        ("n1\nn2 slots=x\n", r"hosts:2: slots 'x' is not an integer"),
        ("n1:0\n", r"hosts:1: slot count '0' must be >= 1"),
        ("n1 foo=3\n", r"hosts:1: unknown hostfile option 'foo'"),
        ("n1 slots\n", r"hosts:1: expected key=value"),
        ("n1:2 slots=3\n", r"hosts:1: slot count given twice"),
        ("n1 slots=4 max_slots=2\n", r"hosts:1: max_slots=2 is less than slots=4"),
        (":4\n", r"hosts:1: missing host name"),
        ("# empty\n\n", r"hosts: no hosts"),
    ])
    def test_errors(self, tmp_path, text, message):
        f = tmp_path / "hosts"
        f.write_text(text)
        with pytest.raises(TopologyError, match=message):
            read_hostfile(f)


# --------------------------------------------------------------------- tleaf
class TestTleaf:
    def test_exact_string(self):
        h = Hierarchy.parse("4:8:6", "1:10:100")
        assert to_tleaf(h) == "tleaf 3 6 100 8 10 4 1"
        assert from_tleaf("tleaf 3 6 100 8 10 4 1") == h

    @pytest.mark.parametrize("text", ["tleaf 3 6 100 8 10 4 1\n", "tleaf\n3\n6 100\n8 10\n4 1", "  tleaf 3 6 100 8 10 4 1  "])
    def test_whitespace(self, text):
        h = from_tleaf(text)
        assert h.levels == (4, 8, 6) and h.distances == (1, 10, 100)

    def test_scotch_example(self):
        # s_f.tex example: 3 levels of 3, 2, 2 with costs 20, 7, 2 (root first).
        h = from_tleaf("tleaf 3 3 20 2 7 2 2")
        assert h.levels == (2, 2, 3) and h.distances == (2, 7, 20)

    @pytest.mark.parametrize("text, message", [
        ("", "empty"),
        ("cmplt 8", "expected a Scotch 'tleaf'"),
        ("ltleaf 3 32 10 2 5 4 1", "ltleaf"),
        ("tleaf", "missing the number of levels"),
        ("tleaf x 1 1", "level count 'x'"),
        ("tleaf 0", "level count must be >= 1"),
        ("tleaf 3 6 100 8 10", "3 levels need 6 numbers"),
        ("tleaf 2 6 100 8 10 4 1", "2 levels need 4 numbers"),
        ("tleaf 2 6 100 0 10", "size of level 1 must be >= 1"),
        ("tleaf 2 6 100 2.5 10", "size '2.5' of level 1"),
        ("tleaf 2 6 abc 2 10", "cost 'abc' of level 0"),
        ("tleaf 2 6 -1 2 10", "cost '-1' of level 0"),
    ])
    def test_errors(self, text, message):
        with pytest.raises(TopologyError, match=message) as info:
            from_tleaf(text)
        assert "\n" not in str(info.value)

    def test_non_integer_costs(self):
        h = Hierarchy.parse("2:2", "0.5:10")
        with pytest.raises(TopologyError, match="integer"):
            to_tleaf(h)
        assert to_tleaf(h, strict=False) == "tleaf 2 2 10 2 0.5"
        assert from_tleaf(to_tleaf(h, strict=False)) == h

    def test_file_round_trip(self, tmp_path):
        h = Hierarchy.parse("4:8:6", "1:10:100")
        f = tmp_path / "machine.tgt"
        write_tleaf(f, h)
        assert f.read_text() == "tleaf 3 6 100 8 10 4 1\n"
        assert read_tleaf(f) == h
        f.write_text("tleaf 2 1")
        with pytest.raises(TopologyError, match="machine.tgt: tleaf: 2 levels"):
            read_tleaf(f)

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.integers(1, 12), min_size=1, max_size=5).flatmap(
        lambda levels: st.tuples(st.just(levels),
                                 st.lists(st.integers(0, 10**6), min_size=len(levels), max_size=len(levels)))))
    def test_round_trip_integer(self, case):
        levels, steps = case
        distances = list(itertools.accumulate(steps))  # non-decreasing: no warning
        h = Hierarchy(tuple(levels), tuple(distances))
        text = to_tleaf(h)
        back = from_tleaf(text)
        assert back == h
        assert to_tleaf(back) == text
        tokens = text.split()
        assert tokens[:2] == ["tleaf", str(len(levels))]
        assert [int(t) for t in tokens[2::2]] == levels[::-1]

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(1, 16),
                              st.floats(0, 1e9, allow_nan=False, allow_infinity=False)),
                    min_size=1, max_size=5))
    def test_round_trip_float(self, pairs):
        levels = tuple(a for a, _ in pairs)
        distances = tuple(sorted(d for _, d in pairs))
        h = Hierarchy(levels, distances)
        back = from_tleaf(to_tleaf(h, strict=False))
        assert back.levels == h.levels
        assert back.distances == h.distances  # repr() round-trips floats exactly
        assert math.prod(back.levels) == h.k
