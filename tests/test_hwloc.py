"""hwloc XML machines (``--topology FILE.xml``, ``procmap topology --hwloc``).

The fixtures in tests/data/hwloc are small hand-written machines in hwloc's v1
and v2 formats; their names give the structure (2p4c2t = 2 packages x 4 cores x
2 hardware threads).
"""
import json
import os

import numpy as np
import pytest

import procmap.limits
from procmap.cli import main
from procmap.errors import InputError
from procmap.topology import read_hwloc
from procmap.topology import hwloc as hwloc_mod

DATA = os.path.join(os.path.dirname(__file__), "data", "hwloc")


def path(name):
    return os.path.join(DATA, name)


@pytest.mark.parametrize("name, cores, pus, names, slots_core, slots_pu", [
    ("smt-2p4c2t.v2.xml", "4:2", "2:4:2", ("Core", "Package"), 8, 16),
    ("smt-2p4c2t.v1.xml", "4:2", "2:4:2", ("Core", "Package"), 8, 16),
    ("l3-2p2l4c.v2.xml", "4:2:2", "4:2:2", ("Core", "L3", "Package"), 16, 16),
    ("snc-2s2n2c.v1.xml", "2:2:2", "2:2:2", ("Core", "NUMA", "Package"), 8, 8),
    ("groups-2g2p2c.v2.xml", "2:2:2", "2:2:2", ("Core", "Package", "Group"), 8, 8),
    ("offline-2p2c2t.v2.xml", "2:2", "2:2:2", ("Core", "Package"), 3, 5),
    ("restricted-2p4c.v2.xml", "4:2", "4:2", ("Core", "Package"), 4, 4),
    ("irregular-4c2c.v1.xml", "4:2", "4:2", ("Core", "Package"), 5, 5),
    ("system-2m2s2c.v1.xml", "2:2:2", "2:2:2", ("Core", "Package", "Machine"), 8, 8),
])
def test_hierarchies(name, cores, pus, names, slots_core, slots_pu):
    m = read_hwloc(path(name))
    assert str(m.hierarchy) == cores
    assert m.level_names == names
    assert m.hierarchy.total_slots == slots_core
    assert m.hierarchy.distances == tuple(float(10 ** t) for t in range(len(names)))
    p = read_hwloc(path(name), pus=True)
    assert str(p.hierarchy) == pus
    assert p.hierarchy.total_slots == slots_pu
    assert p.level_names[-1] == names[-1]
    assert p.level_names[0] == ("PU" if pus != cores else "Core")


def test_versions():
    assert read_hwloc(path("smt-2p4c2t.v1.xml")).version == "1"
    assert read_hwloc(path("smt-2p4c2t.v2.xml")).version == "2.0"


def test_smt_pe_numbering_and_cpu_ids():
    # Sibling threads of a core are PUs i and i+8 (Linux numbering): adjacent PEs.
    m = read_hwloc(path("smt-2p4c2t.v2.xml"), pus=True)
    assert m.cpu_ids.tolist() == [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert m.hierarchy.node_level == 3
    # One PE per core: the core's first PU.
    assert read_hwloc(path("smt-2p4c2t.v2.xml")).cpu_ids.tolist() == list(range(8))


def test_offline_pus_get_capacity_zero():
    # Core 1 of package 0 lost PU 5; core 3 (package 1) lost both PUs.
    m = read_hwloc(path("offline-2p2c2t.v2.xml"), pus=True)
    assert m.hierarchy.capacities.tolist() == [1, 1, 1, 0, 1, 1, 0, 0]
    assert m.cpu_ids.tolist() == [0, 4, 1, -1, 2, 6, -1, -1]
    c = read_hwloc(path("offline-2p2c2t.v2.xml"))
    assert c.hierarchy.capacities.tolist() == [1, 1, 1, 0]


def test_allowed_cpuset_and_online_cpuset():
    r = read_hwloc(path("restricted-2p4c.v2.xml"))
    assert r.hierarchy.capacities.tolist() == [1, 1, 1, 0, 1, 0, 0, 0]
    assert r.usable == 4
    i = read_hwloc(path("irregular-4c2c.v1.xml"))  # 4 + 2 cores, PU 5 offline
    assert i.hierarchy.capacities.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]


def test_several_machines_set_node_level():
    h = read_hwloc(path("system-2m2s2c.v1.xml")).hierarchy
    assert h.node_level == 2 and h.num_nodes == 2


def test_distances():
    h = read_hwloc(path("l3-2p2l4c.v2.xml"), distances="1:4:20").hierarchy
    assert h.distances == (1.0, 4.0, 20.0)
    with pytest.raises(InputError, match="l3-2p2l4c.v2.xml"):
        read_hwloc(path("l3-2p2l4c.v2.xml"), distances="1:4")


def write(tmp_path, text, name="t.xml"):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


SMALL = ('<topology version="2.0"><object type="Machine" cpuset="0x3" allowed_cpuset="0x3">'
         '<object type="Core" os_index="0" cpuset="0x3"><object type="PU" os_index="0" cpuset="0x1"/>'
         '<object type="PU" os_index="1" cpuset="0x2"/></object></object></topology>')


@pytest.mark.parametrize("text, message", [
    ('<?xml version="1.0"?><!DOCTYPE topology [<!ENTITY a "aaaa">]><topology/>', "ENTITY"),
    ('<!DOCTYPE topology [<!ELEMENT topology ANY>]>' + SMALL, "DOCTYPE"),
    ("<topology><object type='Machine'", "not well-formed"),
    ("not xml at all", "not well-formed"),
    ("<graph/>", "not an hwloc XML topology"),
    ("<topology/>", "no <object>"),
    ('<topology><object type="Machine" cpuset="0x1"/></topology>', "no PU"),
    ('<topology><object type="Machine" allowed_cpuset="0xZZ"><object type="PU" os_index="0"/>'
     '</object></topology>', "malformed cpuset"),
    ('<topology><object type="Machine"><object type="PU" os_index="0"/>'
     '<object type="PU" os_index="0"/></object></topology>', "appears twice"),
    ('<topology><object type="Machine"><object type="PU" os_index="-1"/></object></topology>',
     "os_index"),
    ('<topology><object type="Machine" allowed_cpuset="0x0"><object type="PU" os_index="0"/>'
     '</object></topology>', "allowed and online"),
    ("", "not well-formed|empty"),
])
def test_bad_input_names_the_file(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(InputError, match=message) as info:
        read_hwloc(p)
    assert str(info.value).startswith(p + ":")


def test_hwloc_doctype_is_accepted(tmp_path):
    p = write(tmp_path, '<?xml version="1.0"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n' + SMALL)
    assert str(read_hwloc(p, pus=True).hierarchy) == "2"
    assert read_hwloc(p).hierarchy.k == 1


def test_limits(tmp_path, monkeypatch):
    p = write(tmp_path, SMALL)
    monkeypatch.setattr(hwloc_mod, "MAX_XML_BYTES", 100)
    with pytest.raises(InputError, match="larger than"):
        read_hwloc(p)
    monkeypatch.setattr(hwloc_mod, "MAX_XML_BYTES", 2**20)
    monkeypatch.setattr(procmap.limits, "MAX_PES", 1)
    with pytest.raises(InputError, match="procmap handles at most"):
        read_hwloc(p, pus=True)
    deep = "<topology>" + '<object type="Group">' * 300 + "</object>" * 300 + "</topology>"
    with pytest.raises(InputError, match="nested deeper"):
        read_hwloc(write(tmp_path, deep, "deep.xml"))


def test_cpuset_forms():
    assert hwloc_mod.parse_cpuset("0x000000ff,,0x00000001", "x") == ((0xFF << 64) | 1, False)
    bits, inf = hwloc_mod.parse_cpuset("0xf...f,0x00000003", "x")
    assert inf and hwloc_mod.cpuset_has((bits, inf), 1000)
    assert not hwloc_mod.cpuset_has((bits, inf), 2)


# ------------------------------------------------------------------- CLI
def test_cli_topology_forms(capsys):
    f = path("smt-2p4c2t.v2.xml")
    assert main(["topology", "--hwloc", f]) == 0
    out, err = capsys.readouterr()
    assert out == "4:2\n" and "one PE per core" in err
    assert main(["topology", "--hwloc", f, "--hwloc-pus", "--tleaf"]) == 0
    assert capsys.readouterr().out == "tleaf 3 2 100 4 10 2 1\n"
    assert main(["topology", "--hwloc", path("offline-2p2c2t.v2.xml"), "--json", "-d", "1:5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["hierarchy"] == "2:2" and d["slots"] == 3 and d["distance"] == "1:5"
    assert d["levels"] == ["Core", "Package"] and d["cpu_ids"] == [0, 1, 2, -1]


def test_cli_errors(capsys, tmp_path):
    bad = write(tmp_path, "<topology/>")
    assert main(["topology", "--hwloc", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"procmap: error: {bad}: ") and err.count("\n") == 1
    assert main(["topology", "--hwloc-pus"]) == 2
    assert "--hwloc-pus needs --hwloc" in capsys.readouterr().err


def test_machine_args_take_topology(tmp_path, capsys):
    graph = tmp_path / "g.comm"
    graph.write_text("0 1 5\n1 2 5\n2 3 1\n")
    f = path("restricted-2p4c.v2.xml")
    out = tmp_path / "g.map"
    assert main(["map", str(graph), "--topology", f, "-o", str(out), "-q"]) == 0
    pes = [int(x) for x in out.read_text().split()]
    assert set(pes) <= {0, 1, 2, 4}  # only the allowed cores have slots
    assert main(["map", str(graph), "--topology", f, "-H", "4:2", "-o", str(out)]) == 2
    assert "give one of --hierarchy, --distance-matrix and --topology" in capsys.readouterr().err


def test_machine_slots_only_on_usable_pes(tmp_path, capsys):
    """--slots 2 on PEs 0, 1, 2, 4, 5 (the usable PUs), none on PEs 3, 6 and 7."""
    graph = tmp_path / "g.comm"
    graph.write_text("".join(f"{i} {i + 1} 5\n" for i in range(9)))  # 10 tasks
    machine = ["--topology", path("offline-2p2c2t.v2.xml"), "--hwloc-pus", "--slots", "2"]

    def over_capacity(pes):
        mapping = tmp_path / "g.map"
        mapping.write_text("".join(f"{pe}\n" for pe in pes))
        assert main(["eval", str(graph), *machine, "--mapping", str(mapping), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert "10 slots" in out["machine"]
        return out["pes_over_capacity"]

    assert over_capacity([0, 0, 1, 1, 2, 2, 4, 4, 5, 5]) == 0
    assert over_capacity([0, 0, 0, 1, 1, 2, 2, 4, 4, 5]) == 1  # 3 tasks on a PE of 2 slots
    assert over_capacity([3, 6, 7, 0, 1, 1, 2, 2, 4, 5]) == 3  # the PEs without slots
