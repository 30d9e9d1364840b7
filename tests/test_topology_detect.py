"""Machine detection: fake sysfs trees and Slurm environments."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from procmap.errors import TopologyError
from procmap.topology import (
    DistanceMatrix,
    Hierarchy,
    LocalMachine,
    SlurmAllocation,
    describe,
    detect_local,
    detect_slurm,
    parse_cpu_list,
)


def make_sysfs(root: Path, cpus: dict[int, tuple[int, int] | tuple[int, int, int]],
               online: str | None = None, offline_flags: dict[int, str] | None = None) -> Path:
    """Build ``root/devices/system/cpu`` with ``cpuN/topology/{physical_package_id,core_id[,die_id]}``.

    ``cpus`` maps an OS cpu number to ``(package, core)`` or ``(package, die, core)``.
    """
    base = root / "devices" / "system" / "cpu"
    base.mkdir(parents=True)
    for cpu, place in cpus.items():
        topo = base / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        if len(place) == 2:
            pkg, core = place
        else:
            pkg, die, core = place
            (topo / "die_id").write_text(f"{die}\n")
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{core}\n")
    if online is not None:
        (base / "online").write_text(online + "\n")
    for cpu, flag in (offline_flags or {}).items():
        (base / f"cpu{cpu}" / "online").write_text(flag + "\n")
    # Unrelated entries that real sysfs has next to the cpuN directories.
    (base / "cpufreq").mkdir()
    (base / "kernel_max").write_text("8191\n")
    return root


def linux_smt_numbering(npkg: int, ncores: int, nthreads: int, core_ids=None) -> dict[int, tuple[int, int]]:
    """Linux x86 numbering: cpu = thread * (all cores) + package * ncores + core."""
    core_ids = core_ids or list(range(ncores))
    total = npkg * ncores
    return {t * total + p * ncores + c: (p, core_ids[c])
            for t in range(nthreads) for p in range(npkg) for c in range(ncores)}


# ---------------------------------------------------------------- sysfs
class TestDetectLocal:
    def test_smt_two_packages(self, tmp_path):
        root = make_sysfs(tmp_path, linux_smt_numbering(2, 4, 2), online="0-15")
        m = detect_local(root)
        assert isinstance(m, LocalMachine)
        assert m.source == "sysfs"
        h = m.hierarchy
        assert h.levels == (2, 4, 2)
        assert h.node_level == 3 and h.num_nodes == 1
        assert h.total_slots == 16
        # PE = (package * 4 + core) * 2 + thread; thread siblings are cpu i and i + 8.
        assert list(m.cpu_ids) == [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
        assert m.smt == 2
        assert m.pe_of_cpu()[9] == 3
        # Siblings are at distance d1, cores of one package d2, packages d3.
        assert h.distance(0, 1) == 1 and h.distance(0, 2) == 10 and h.distance(0, 8) == 100

    def test_no_smt_and_core_id_gaps(self, tmp_path):
        # Core ids with gaps (0, 1, 8, 9) as on many Intel parts; no online file.
        root = make_sysfs(tmp_path, linux_smt_numbering(2, 4, 1, core_ids=[0, 1, 8, 9]))
        m = detect_local(root)
        assert m.hierarchy.levels == (4, 2)
        assert list(m.cpu_ids) == list(range(8))
        assert m.smt == 1

    def test_irregular_packages(self, tmp_path):
        cpus = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (0, 3), 4: (1, 0), 5: (1, 1)}
        m = detect_local(make_sysfs(tmp_path, cpus, online="0-5"))
        assert m.hierarchy.levels == (4, 2)
        assert list(m.hierarchy.capacities) == [1, 1, 1, 1, 1, 1, 0, 0]
        assert list(m.cpu_ids) == [0, 1, 2, 3, 4, 5, -1, -1]

    def test_package_ids_not_contiguous(self, tmp_path):
        # Package ids 0 and 3 (as on some multi-board systems), listed out of order.
        cpus = {0: (3, 0), 1: (3, 1), 2: (0, 0), 3: (0, 1)}
        m = detect_local(make_sysfs(tmp_path, cpus))
        assert m.hierarchy.levels == (2, 2)
        assert list(m.cpu_ids) == [2, 3, 0, 1]

    def test_offline_thread(self, tmp_path):
        # cpu 15 (second thread of the last core) is offline.
        root = make_sysfs(tmp_path, linux_smt_numbering(2, 4, 2), online="0-14")
        m = detect_local(root)
        assert m.hierarchy.levels == (2, 4, 2)
        assert m.hierarchy.total_slots == 15
        assert m.cpu_ids[15] == -1 and m.hierarchy.capacities[15] == 0

    def test_per_cpu_online_flags(self, tmp_path):
        # No global "online" list: cpu3 says it is offline, cpu0 has no flag.
        # An offline CPU is not part of the machine (its core is gone too).
        cpus = {c: (0, c) for c in range(4)}
        m = detect_local(make_sysfs(tmp_path, cpus, offline_flags={1: "1", 3: "0"}))
        assert m.hierarchy.levels == (3, 1)
        assert list(m.cpu_ids) == [0, 1, 2]

    def test_restrict_to_cpus(self, tmp_path):
        root = make_sysfs(tmp_path, linux_smt_numbering(2, 4, 2), online="0-15")
        m = detect_local(root, cpus={0, 1, 8, 9})
        # Only package 0, cores 0 and 1, both threads: the structure is kept.
        assert m.hierarchy.levels == (2, 2, 1)
        assert list(m.cpu_ids) == [0, 8, 1, 9]
        m = detect_local(root, cpus=range(4))
        assert m.hierarchy.levels == (4, 1)

    def test_dies(self, tmp_path):
        # Two dies in one package both number their cores from 0.
        cpus = {0: (0, 0, 0), 1: (0, 0, 1), 2: (0, 1, 0), 3: (0, 1, 1)}
        m = detect_local(make_sysfs(tmp_path, cpus))
        assert m.hierarchy.levels == (4, 1)
        assert list(m.cpu_ids) == [0, 1, 2, 3]

    def test_distances(self, tmp_path):
        root = make_sysfs(tmp_path, linux_smt_numbering(1, 2, 2))
        assert detect_local(root, distances="1:2:5").hierarchy.distances == (1, 2, 5)
        assert detect_local(root, distances=(1, 3, 9)).hierarchy.distances == (1, 3, 9)
        with pytest.raises(TopologyError):
            detect_local(root, distances="1:2")

    def test_unreadable_falls_back(self, tmp_path):
        m = detect_local(tmp_path / "does-not-exist")
        n = os.cpu_count() or 1
        assert m.source == "os.cpu_count"
        assert m.hierarchy.levels == (n,)
        assert list(m.cpu_ids) == list(range(n))
        assert m.smt == 1

    def test_unreadable_with_cpus_uses_them(self, tmp_path):
        m = detect_local(tmp_path / "does-not-exist", cpus={5, 3})
        assert m.source == "os.cpu_count"
        assert m.hierarchy.levels == (2,) and list(m.cpu_ids) == [3, 5]

    def test_cpus_not_online(self, tmp_path):
        root = make_sysfs(tmp_path, {0: (0, 0), 1: (0, 1)})
        with pytest.raises(TopologyError, match="none of CPUs"):
            detect_local(root, cpus={7})
        with pytest.raises(TopologyError, match="empty"):
            detect_local(root, cpus=[])

    def test_garbled_falls_back(self, tmp_path):
        root = make_sysfs(tmp_path, {0: (0, 0), 1: (0, 1)})
        (root / "devices/system/cpu/cpu1/topology/core_id").write_text("garbage\n")
        assert detect_local(root).source == "os.cpu_count"

    def test_missing_topology_dir_falls_back(self, tmp_path):
        root = make_sysfs(tmp_path, {0: (0, 0)})
        (root / "devices/system/cpu/cpu1").mkdir()  # a cpu directory without topology/
        assert detect_local(root).source == "os.cpu_count"

    def test_real_machine(self):
        # Whatever this machine is, detection must give a consistent answer.
        m = detect_local()
        assert m.hierarchy.k == m.cpu_ids.size
        assert np.array_equal(m.hierarchy.capacities > 0, m.cpu_ids >= 0)
        assert m.hierarchy.total_slots >= 1


class TestParseCpuList:
    @pytest.mark.parametrize("text, cpus", [
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("5", [5]),
        ("", []),
        ("0-1\n", [0, 1]),
    ])
    def test_parse(self, text, cpus):
        assert parse_cpu_list(text) == cpus

    @pytest.mark.parametrize("text", ["3-1", "a", "1,,2", "1-", "-1"])
    def test_errors(self, text):
        with pytest.raises(TopologyError):
            parse_cpu_list(text)


# ---------------------------------------------------------------- Slurm
class TestDetectSlurm:
    def test_no_slurm(self):
        assert detect_slurm({}) is None
        assert detect_slurm({"HOME": "/root", "SLURM_CONF": "/etc/slurm.conf"}) is None

    def test_job_environment(self):
        env = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "4(x2),2",
               "SLURM_NTASKS": "6", "SLURM_JOB_NTASKS": "10"}
        a = detect_slurm(env)
        assert a == SlurmAllocation(("n1", "n2", "n3"), (4, 4, 2), 6)
        assert a.nnodes == 3 and a.total_cpus == 10
        h = a.hierarchy()
        assert h.levels == (4, 3) and h.node_level == 1
        assert h.pes_per_node == 4 and h.num_nodes == 3
        assert list(h.capacities) == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
        assert h.total_slots == 10

    def test_prolog_environment(self):
        # The root Prolog sees SLURM_NODELIST and SLURM_JOB_NTASKS only.
        env = {"SLURM_NODELIST": "node[01-02,07]", "SLURM_JOB_CPUS_PER_NODE": "32(x3)",
               "SLURM_JOB_NTASKS": "96"}
        a = detect_slurm(env)
        assert a.hosts == ("node01", "node02", "node07")
        assert a.cpus_per_node == (32, 32, 32) and a.ntasks == 96
        assert describe(a.hierarchy()) == "hierarchy 32:3 (96 PEs, 3 nodes of 32), distances 1:10"

    def test_precedence_and_cpus_on_node(self):
        env = {"SLURM_JOB_NODELIST": "a[1-2]", "SLURM_NODELIST": "b[1-5]", "SLURM_CPUS_ON_NODE": "8"}
        a = detect_slurm(env)
        assert a.hosts == ("a1", "a2") and a.cpus_per_node == (8, 8) and a.ntasks is None

    def test_per_node_hierarchy(self):
        a = detect_slurm({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "16,10"})
        h = a.hierarchy("8:2")
        assert h.levels == (8, 2, 2) and h.node_level == 2
        assert h.pes_per_node == 16 and h.num_nodes == 2
        # The smaller node keeps its first 10 PEs.
        assert list(h.capacities) == [1] * 16 + [1] * 10 + [0] * 6
        h = a.hierarchy((8, 2), distances="1:5:50")
        assert h.distances == (1, 5, 50)

    def test_per_node_hierarchy_from_local_detection(self):
        node = Hierarchy((2, 4, 2), None, np.array([1] * 15 + [0]), node_level=3)
        a = detect_slurm({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "16(x2),4"})
        h = a.hierarchy(node, distances=(1, 10, 20, 100))
        assert h.levels == (2, 4, 2, 3) and h.node_level == 3
        caps = h.capacities.reshape(3, 16)
        assert list(caps[0]) == [1] * 15 + [0]  # node capacities kept; 16 cpus > 15 slots
        assert list(caps[2]) == [1] * 4 + [0] * 12

    def test_no_cpu_counts(self):
        a = detect_slurm({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS": "4"})
        assert a.cpus_per_node is None and a.total_cpus is None
        with pytest.raises(TopologyError, match="no CPU counts"):
            a.hierarchy()
        assert a.hierarchy("2:2").total_slots == 8

    @pytest.mark.parametrize("env, message", [
        ({"SLURM_JOB_NODELIST": "n[1-"}, "SLURM_JOB_NODELIST: malformed host list 'n\\[1-'"),
        ({"SLURM_NODELIST": "n[3-1]"}, "SLURM_NODELIST"),
        ({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "4(x2)"},
         "SLURM_JOB_CPUS_PER_NODE: .*describes 2 nodes, expected 3"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_JOB_CPUS_PER_NODE": "4(x"}, "SLURM_JOB_CPUS_PER_NODE"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_JOB_CPUS_PER_NODE": "0"}, "at least one CPU"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_CPUS_ON_NODE": "4,4"}, "SLURM_CPUS_ON_NODE='4,4'"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": "many"}, "SLURM_NTASKS='many' is not an integer"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_JOB_NTASKS": "0"}, "SLURM_JOB_NTASKS='0' must be >= 1"),
        ({"SLURM_JOB_NODELIST": "n1,n2,n1"}, "'n1' appears twice"),
        ({"SLURM_NTASKS": "4"}, "SLURM_NTASKS is set but neither"),
    ])
    def test_errors(self, env, message):
        with pytest.raises(TopologyError, match=message) as info:
            detect_slurm(env)
        assert "\n" not in str(info.value)

    def test_os_environ_default(self, monkeypatch):
        for name in list(os.environ):
            if name.startswith("SLURM"):
                monkeypatch.delenv(name)
        assert detect_slurm() is None
        monkeypatch.setenv("SLURM_JOB_NODELIST", "x[1-2]")
        monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "2(x2)")
        assert detect_slurm().hosts == ("x1", "x2")


# ---------------------------------------------------------------- describe
class TestDescribe:
    def test_hierarchy(self):
        h = Hierarchy.parse("4:8:6", "1:10:100")
        assert describe(h) == "hierarchy 4:8:6 (192 PEs, 6 nodes of 32), distances 1:10:100"

    def test_slots_and_singular(self):
        h = Hierarchy.parse("4:2", "1:2.5", node_level=2).with_capacities([1] * 7 + [0])
        assert describe(h) == "hierarchy 4:2 (8 PEs, 1 node of 8, 7 slots), distances 1:2.5"

    def test_distance_matrix(self):
        dm = DistanceMatrix([[0, 3], [3, 0]])
        assert describe(dm) == "distance matrix (2 PEs), max distance 3"
