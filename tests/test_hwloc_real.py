"""Real hwloc XML exports (issue #23 item 5): ``procmap topology --hwloc``.

The files in tests/data/hwloc/real are unchanged copies from hwloc's test suite
(BSD licence, see the README.md there for where each comes from). The expected
hierarchies below were worked out by reading the XML, not from procmap's
output: packages, L3s / NUMA nodes per package, cores per L3, PUs per core, and
which PUs are missing (offline), disallowed or padding. Each level is as wide
as its widest group; the PEs this adds and the unusable ones have capacity 0.

Besides the hand-written table, :func:`_independent` re-reads each file with a
few lines of ElementTree (no procmap code) to count the usable PUs and cores and
their first PU numbers, which the parsed machine must match.
"""
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter

import numpy as np
import pytest

from procmap.cli import main
from procmap.errors import InputError
from procmap.topology import read_hwloc

DATA = os.path.join(os.path.dirname(__file__), "data", "hwloc", "real")


def path(name):
    return os.path.join(DATA, name)


# file, format version,
#   one PE per core: hierarchy, level names, capacity-0 PEs,
#   one PE per PU (--hwloc-pus): hierarchy, level names, capacity-0 PEs.
REAL = [
    # Dual-socket Intel with SMT: one L3 per package, so no L3 level.
    ("Intel-Skylake-2xXeon6140.v2.xml", "2.0",
     "18:2", "Core:Package", 0, "2:18:2", "PU:Core:Package", 0),
    ("Intel-SapphireRapids-2xXeonMax9460.v2.xml", "2.0",
     "40:2", "Core:Package", 0, "2:40:2", "PU:Core:Package", 0),
    # Many packages (12), single NUMA node.
    ("Intel-IvyBridge-12xXeonE5-4620v2.v2.xml", "2.0",
     "8:12", "Core:Package", 0, "2:8:12", "PU:Core:Package", 0),
    # One package: its level of size 1 is left out.
    ("Intel-KnightsLanding-XeonPhi7210.v2.xml", "2.0",
     "64", "Core", 0, "4:64", "PU:Core", 0),
    # Hybrid: 6 P-cores x 2 threads + 8 E-cores x 1 thread; the E-cores' second
    # thread slots are padding.
    ("Intel-RaptorLake-Corei7-1370P.v2.xml", "2.0",
     "14", "Core", 0, "2:14", "PU:Core", 8),
    # Zen 1: 4 dies (hwloc memory Groups = NUMA nodes) x 2 CCX (L3) x 3 cores.
    ("AMD-Zen-2xEpyc7451.v2.xml", "2.0",
     "3:2:4:2", "Core:L3:Group:Package", 0, "2:3:2:4:2", "PU:Core:L3:Group:Package", 0),
    # Zen 3: 8 L3 x 8 cores per package, NUMA node = package, no SMT.
    ("AMD-Zen3-2xEpyc7763.v2.xml", "2.0",
     "8:8:2", "Core:L3:Package", 0, "8:8:2", "Core:L3:Package", 0),
    # Zen 4: 12 dies (one L3 each, named by the coarser Die) x 8 cores x 2 threads.
    ("AMD-Zen4-2xEpyc9654.v2.xml", "2.0",
     "8:12:2", "Core:Die:Package", 0, "2:8:12:2", "PU:Core:Die:Package", 0),
    # Hybrid Zen 5 / Zen 5c: L3s of 4 and 8 cores -> 8:2 with 4 padding cores.
    ("AMD-Zen5-StrixPoint-RyzenAI9HX370.v3.xml", "3.0",
     "8:2", "Core:L3", 4, "2:8:2", "PU:Core:L3", 8),
    # 4 packages x 2 NUMA nodes (= L3) x 8 cores.
    ("64amd64-4p2n4ca2co.v2.xml", "2.0",
     "8:2:4", "Core:NUMA:Package", 0, "8:2:4", "Core:NUMA:Package", 0),
    # cgroup allows PUs 0-5: NUMA node 0 has 4 of them, node 1 has 2; the other
    # packages hold no PU in the tree, so nothing of them is a PE.
    ("32amd64-4s2n4c-cgroup2.v2.xml", "2.0",
     "4:2", "Core:NUMA", 2, "4:2", "Core:NUMA", 2),
    # Offline PUs (v2: left out of the tree). Packages: 2 cores x 2 PUs,
    # 1 core x 2, 2 cores x 2, 2 cores x 1 -> 7 cores, 12 PUs of 2:2:4.
    ("16em64t-4s2c2t-offlines.v2.xml", "2.0",
     "2:4", "Core:Package", 1, "2:2:4", "PU:Core:Package", 4),
    # v1, online_cpuset 0x905b: 7 PUs on 6 cores; cores (1 + 2 PUs), (1), (1, 1), (1).
    ("16em64t-4s2c2t-offlines.v1.xml", "1",
     "2:4", "Core:Package", 2, "2:2:4", "PU:Core:Package", 9),
    # Haswell Cluster-on-Die: 2 NUMA nodes x 7 cores per package.
    ("28intel64-2p2g7c-CoDgroups.v1.xml", "1",
     "7:2:2", "Core:NUMA:Package", 0, "7:2:2", "Core:NUMA:Package", 0),
    # NUMA nodes above packages: 4 nodes x 4 packages x 6 cores.
    ("96em64t-4n4d3ca2co-pci.v1.xml", "1",
     "6:4:4", "Core:Package:NUMA", 0, "6:4:4", "Core:Package:NUMA", 0),
    # v1 System: 2 groups x 2 machines x 2 cores, PU numbers restart per machine.
    ("8em64t-2mi2ma2c.v1.xml", "1",
     "2:2:2", "Core:Machine:Group", 0, "2:2:2", "Core:Machine:Group", 0),
    # 8 packages x 8 cores; Groups cover only 6 packages so they are no level;
    # allowed_cpuset 0xffff leaves 16 cores.
    ("irregulargroups-disallowed.v3.xml", "3.0",
     "8:8", "Core:Package", 48, "8:8", "Core:Package", 48),
    ("nvidiaDGX2.v2.xml", "2.0",
     "2:2", "Core:Package", 0, "2:2", "Core:Package", 0),
    # POWER8: an L3 per core; the level stays "Core".
    ("power8gpudistances.v2.xml", "2.0",
     "4:2", "Core:Package", 0, "2:4:2", "PU:Core:Package", 0),
    # KNL SNC-4 hybrid: 4 quadrants (DDR + MCDRAM NUMA nodes with one cpuset,
    # an MCDRAM memory-side "L3") x 4 cores x 4 threads.
    ("64intel64-fakeKNL-SNC4-hybrid.v2.xml", "2.0",
     "4:4", "Core:NUMA", 0, "4:4:4", "PU:Core:NUMA", 0),
    # Its v1 form: quadrants are Groups, MCDRAM nodes have an empty cpuset.
    ("64intel64-fakeKNL-SNC4-hybrid.v1.xml", "1",
     "4:4", "Core:Group", 0, "4:4:4", "PU:Core:Group", 0),
    # KNL all-to-all hybrid, root-attached NUMA nodes, sparse PU numbers
    # (cpuset "0x00006000,,0x00040000,0x00006007").
    ("8intel64-fakeKNL-A2A-hybrid.v2.xml", "2.0",
     "4", "Core", 0, "2:4", "PU:Core", 0),
    ("8intel64-fakeKNL-A2A-hybrid.v1.xml", "1",
     "4", "Core", 0, "2:4", "PU:Core", 0),
]
NAMES = [r[0] for r in REAL]


def test_every_file_is_listed():
    files = sorted(f for f in os.listdir(DATA) if f.endswith(".xml"))
    assert files == sorted(NAMES)
    readme = open(path("README.md")).read()
    assert all(f"`{name}`" in readme for name in NAMES)
    assert "BSD" in readme and os.path.getsize(path("COPYING.hwloc")) > 1000


def _bits(text):
    """An hwloc bitmap as a set-membership test (None: everything)."""
    if text is None:
        return lambda i: True
    words = text.split(",")
    inf = words[0] == "0xf...f"
    words = words[1:] if inf else words
    value = int("".join(f"{int(w or '0', 16):08x}" for w in words) or "0", 16)
    n = 32 * len(words)
    return lambda i: (i >= n and inf) or bool((value >> i) & 1)


def _independent(name):
    """Usable PUs and cores straight from the XML: a PU is usable when the
    allowed and online cpusets of its Machine (else the root) hold it. Returns
    (usable PU count, sorted first usable PU of each core with one)."""
    root = ET.parse(path(name)).getroot().find("object")
    pus, firsts = 0, []

    def walk(elem, allowed, online, core):
        nonlocal pus
        if elem.get("type") == "Machine":
            allowed = _bits(elem.get("allowed_cpuset")) if elem.get("allowed_cpuset") else allowed
            online = _bits(elem.get("online_cpuset")) if elem.get("online_cpuset") else online
        if elem.get("type") == "Core":
            core = []
            firsts.append(core)
        if elem.get("type") == "PU":
            i = int(elem.get("os_index"))
            if allowed(i) and online(i):
                pus += 1
                if core is None:  # a PU without a Core is its own core
                    firsts.append([i])
                else:
                    core.append(i)
        for child in elem.findall("object"):
            walk(child, allowed, online, core)

    walk(root, _bits(root.get("allowed_cpuset")), _bits(root.get("online_cpuset")), None)
    return pus, sorted(min(c) for c in firsts if c)


@pytest.mark.parametrize("name, version, cores, core_names, core_zero, "
                         "pus, pu_names, pu_zero", REAL, ids=NAMES)
def test_real_hierarchy(name, version, cores, core_names, core_zero, pus, pu_names, pu_zero):
    usable_pus, core_firsts = _independent(name)
    for pe_pus, want, names, zero in ((False, cores, core_names, core_zero),
                                      (True, pus, pu_names, pu_zero)):
        m = read_hwloc(path(name), pus=pe_pus)
        h = m.hierarchy
        assert m.version == version
        assert (str(h), ":".join(m.level_names), h.k - m.usable) == (want, names, zero)
        assert h.k == int(np.prod([int(a) for a in want.split(":")]))
        assert h.capacities.tolist().count(0) == zero and set(h.capacities.tolist()) <= {0, 1}
        assert h.distances == tuple(float(10 ** t) for t in range(len(h.levels)))
        # cpu_ids: -1 exactly on capacity-0 PEs, else the PE's first usable PU.
        assert ((m.cpu_ids < 0) == (h.capacities == 0)).all()
        ids = sorted(int(c) for c in m.cpu_ids if c >= 0)
        if pe_pus:
            assert m.usable == usable_pus
        else:
            assert ids == core_firsts
        multi = name == "8em64t-2mi2ma2c.v1.xml"  # PU numbers repeat per machine
        assert len(set(ids)) == (len(ids) if not multi else len(ids) // 4)
        assert h.node_level == (1 if multi else len(h.levels))


@pytest.mark.parametrize("name, version, cores, core_names, core_zero, "
                         "pus, pu_names, pu_zero", REAL, ids=NAMES)
def test_real_cli(capsys, name, version, cores, core_names, core_zero, pus, pu_names, pu_zero):
    f = path(name)
    assert main(["topology", "--hwloc", f]) == 0
    out, err = capsys.readouterr()
    assert out == cores + "\n"
    assert f"hwloc XML v{version}" in err and f"levels {core_names}" in err
    assert main(["topology", "--hwloc", f, "--hwloc-pus", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["hierarchy"] == pus and d["levels"] == pu_names.split(":")
    assert d["pes"] - d["slots"] == pu_zero
    assert d["distance"] == ":".join(str(10 ** t) for t in range(len(d["levels"])))


# ------------------------------------------------------------ end to end
def _check_placement(mapping, h, slots_per_pe, tasks):
    caps = np.asarray(h.capacities) * slots_per_pe
    assert len(mapping) == tasks
    load = Counter(mapping)
    assert all(0 <= pe < h.k for pe in load)
    assert all(caps[pe] > 0 for pe in load), "a task on a capacity-0 PE"
    assert all(n <= caps[pe] for pe, n in load.items()), "a PE over capacity"


@pytest.mark.parametrize("name, extra, slots", [
    ("AMD-Zen4-2xEpyc9654.v2.xml", [], 1),                 # 192 ranks on 192 cores
    ("irregulargroups-disallowed.v3.xml", ["--slots", "12"], 12),  # 16 allowed cores
    ("Intel-RaptorLake-Corei7-1370P.v2.xml", ["--hwloc-pus", "--slots", "10"], 10),
])
def test_map_halo3d_onto_real_machine(tmp_path, name, extra, slots):
    graph = os.path.join(os.path.dirname(__file__), "..", "examples", "halo3d.comm")
    out = tmp_path / "halo.map"
    f = path(name)
    assert main(["map", graph, "--topology", f, *extra, "-o", str(out), "-q"]) == 0
    mapping = [int(x) for x in out.read_text().split()]
    h = read_hwloc(f, pus="--hwloc-pus" in extra).hierarchy
    _check_placement(mapping, h, slots, 192)


def test_map_generated_grid_onto_offline_machine(tmp_path):
    from procmap.formats import write_graph
    from procmap.generators import grid_graph

    graph = tmp_path / "grid.comm"
    write_graph(grid_graph((3, 4)), str(graph), "comm")  # 12 tasks
    f = path("16em64t-4s2c2t-offlines.v2.xml")  # 12 online PUs of 16
    out = tmp_path / "grid.map"
    assert main(["map", str(graph), "--topology", f, "--hwloc-pus", "-o", str(out), "-q"]) == 0
    h = read_hwloc(f, pus=True).hierarchy
    mapping = [int(x) for x in out.read_text().split()]
    _check_placement(mapping, h, 1, 12)
    assert sorted(mapping) == [pe for pe in range(h.k) if h.capacities[pe]]


# ------------------------------------------------- fixes found by these files
SYSTEM = """<topology><object type="System" os_index="0">
  <object type="Machine" os_index="0" cpuset="0x3" allowed_cpuset="0x1">
    <object type="Core" os_index="0" cpuset="0x1"><object type="PU" os_index="0" cpuset="0x1"/></object>
    <object type="Core" os_index="1" cpuset="0x2"><object type="PU" os_index="1" cpuset="0x2"/></object>
  </object>
  <object type="Machine" os_index="0" cpuset="0x3" online_cpuset="0x2">
    <object type="Core" os_index="0" cpuset="0x1"><object type="PU" os_index="0" cpuset="0x1"/></object>
    <object type="Core" os_index="1" cpuset="0x2"><object type="PU" os_index="1" cpuset="0x2"/></object>
  </object>
</object></topology>"""


def test_v1_system_numbers_pus_per_machine(tmp_path):
    p = tmp_path / "system.xml"
    p.write_text(SYSTEM)
    m = read_hwloc(str(p))
    assert str(m.hierarchy) == "2:2" and m.level_names == ("Core", "Machine")
    assert m.hierarchy.node_level == 1
    # Machine 0 allows PU 0 only; machine 1 has PU 1 online only.
    assert m.hierarchy.capacities.tolist() == [1, 0, 0, 1]
    assert m.cpu_ids.tolist() == [0, -1, -1, 1]
    # Within one machine a repeated PU number is still an error.
    p.write_text(SYSTEM.replace('os_index="1" cpuset="0x2"/>', 'os_index="0" cpuset="0x2"/>', 1))
    with pytest.raises(InputError, match="appears twice"):
        read_hwloc(str(p))
