"""Machines from hwloc XML exports (``lstopo --of xml``), formats v1 and v2 (and v3).

What a PE is
    A **core** by default: MPI ranks are bound one per core, and that is what a
    rank placement (``procmap rankfile``/``slurm``) writes. With ``pus=True``
    (``--hwloc-pus``) the PE is the hardware thread (hwloc's PU) and the cores
    become the first level above it, as :func:`~.detect.detect_local` does on a
    machine with SMT. Without SMT both choices give the same hierarchy.

Which levels
    Leaf first, from the candidates PU (with ``pus``), Core, L3 cache, NUMA
    node, Group (each nesting depth of hwloc Groups), Die, Package, Machine.
    Each candidate splits the PUs into groups; a candidate is kept when it is
    strictly coarser than the last kept level and every one of its groups is a
    union of that level's groups (so the levels nest), else it is skipped. So
    the result is e.g. ``2:8:2`` (PUs per core, cores per package, packages)
    with ``pus=True`` or ``8:2`` without; an L3 or NUMA level appears only where
    it splits a package (AMD CCXs, Intel SNC), and levels of size 1 disappear.
    Where two candidates split the PUs alike, the level takes the coarser name
    (an L3 per package is a Package level), except that cores stay cores (a
    POWER8 core with its own L3 is a Core level).
    NUMA nodes are found by their cpusets, since hwloc 2 attaches them beside
    the CPU tree as memory children (in v1 they sit inside the tree); a PU
    belongs to the smallest NUMA node whose cpuset holds it.

Irregular machines
    The hierarchy is regular (docs/design.md section 2): each level's arity is
    the largest number of children any group of it has, and the PEs this adds
    (offline PUs, which hwloc leaves out of the tree, smaller packages, cores
    with fewer threads) get capacity 0. So do PEs whose PUs are all outside the
    root object's ``allowed_cpuset`` (a cgroup or cpuset restriction) or, in
    v1, its ``online_cpuset``. A core PE is usable when any of its PUs is.
    In a v1 file of several machines (a ``System`` root, as ``hwloc-assembler``
    writes) PU numbers restart in each Machine, and each Machine's own
    ``allowed_cpuset``/``online_cpuset``, where it has them, apply to its PUs.

Input safety
    The file is read whole, up to :data:`MAX_XML_BYTES`, and parsed by the
    standard library's expat parser (``defusedxml`` is not a dependency of
    procmap). Real exports carry ``<!DOCTYPE topology SYSTEM "hwloc.dtd">``,
    which expat does not fetch; any entity declaration, and any DOCTYPE with an
    internal subset, is refused before parsing, which rules out entity
    expansion attacks ("billion laughs") and external entities. The number of
    PUs and of PEs is checked against ``MAX_PES`` before any per-PE array
    exists, and object nesting is limited to :data:`MAX_DEPTH`.
"""
from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass

from procmap.errors import InputError, TopologyError
from procmap.limits import check_pes

__all__ = ["HwlocMachine", "read_hwloc", "parse_cpuset", "cpuset_has", "MAX_XML_BYTES",
           "MAX_DEPTH"]

#: Largest hwloc XML file read (real exports of 1,000-core machines are a few MiB).
MAX_XML_BYTES = 64 * 2**20
#: Deepest object nesting accepted (real trees are about 10 deep).
MAX_DEPTH = 256

# A DOCTYPE naming an external DTD is what hwloc writes; anything else in one
# (an internal subset "[...]") could declare entities.
_DOCTYPE = re.compile(rb"<!DOCTYPE\s+topology(?:\s+SYSTEM\s+\"[^\"<>\[\]]*\")?\s*>")
_HEX_WORD = re.compile(r"0x[0-9a-fA-F]{1,16}")


@dataclass(frozen=True, eq=False)
class HwlocMachine:
    """What :func:`read_hwloc` found.

    Attributes
    ----------
    hierarchy:
        Leaf first, capacity 1 on usable PEs and 0 on padding and unusable ones;
        ``node_level`` is the number of levels inside one Machine object (all of
        them for the usual single-machine export).
    level_names:
        What each level counts, leaf first: ``("Core", "Package")`` for ``8:2``
        (8 cores per package, 2 packages), ``("PU", "Core", "Package")`` for
        ``2:8:2``; also ``"L3"``, ``"NUMA"``, ``"Group"``, ``"Die"``, ``"Machine"``.
    cpu_ids:
        int64 array, PE -> OS index of its first usable PU (what ``taskset``
        takes); -1 for capacity-0 PEs.
    version:
        ``"1"`` for a v1 export (no ``version`` attribute), else the attribute.
    pus:
        Whether a PE is a PU (else a core).
    """

    hierarchy: object
    level_names: tuple
    cpu_ids: object
    version: str
    pus: bool

    @property
    def usable(self) -> int:
        """Number of PEs of capacity > 0."""
        return int((self.hierarchy.capacities > 0).sum())


# ---------------------------------------------------------------- parsing
def parse_cpuset(text: str | None, path: str) -> tuple[int, bool] | None:
    """An hwloc bitmap attribute (``cpuset``, ``allowed_cpuset``, ...) as ``(bits, infinite)``.

    The text is comma-separated 32-bit hex words, most significant first
    (``"0x000000ff,0xffffffff"``); an empty word is an all-zero one (hwloc writes
    ``"0xff,,0x1"``), and a leading ``"0xf...f"`` sets every bit above the words
    (``infinite`` is then True, and ``bits`` a negative int with those bits set). Bit
    ``i`` is PU ``os_index`` ``i``. ``None`` (attribute absent) gives ``None``: no
    restriction. Raises :class:`InputError` naming ``path`` for a malformed word.
    """
    if text is None:
        return None
    words = text.strip().split(",")
    infinite = False
    if words and words[0] == "0xf...f":
        infinite = True
        words = words[1:]
    value = 0
    for w in words:
        if not w:  # hwloc leaves all-zero words out between commas: "0xff,,0x1"
            w = "0x0"
        if not _HEX_WORD.fullmatch(w):
            raise InputError(f"malformed cpuset {text[:40]!r}", path)
        value = (value << 32) | int(w, 16)
    if infinite:
        value |= -1 << (32 * len(words))  # negative ints: all higher bits set
    return value, infinite


def cpuset_has(cpuset: tuple[int, bool] | None, bit: int) -> bool:
    """Whether a :func:`parse_cpuset` result holds PU ``bit``; ``None`` holds every PU."""
    return cpuset is None or bool((cpuset[0] >> bit) & 1)


def _check_bytes(data: bytes, path: str) -> None:
    """Refuse entity declarations and DOCTYPEs other than hwloc's, before parsing.

    ``xml.etree`` expands internal entities (a few hundred bytes can expand to
    gigabytes) and ``defusedxml`` is not available everywhere; hwloc never
    writes entities, so refusing them costs nothing.
    """
    if b"<!ENTITY" in data:
        raise InputError("refusing an XML entity declaration (<!ENTITY); hwloc exports "
                         "have none", path)
    start = data.find(b"<!DOCTYPE")
    if start >= 0:
        if not _DOCTYPE.match(data, start) or data.find(b"<!DOCTYPE", start + 1) >= 0:
            raise InputError("refusing a DOCTYPE other than hwloc's "
                             "(<!DOCTYPE topology SYSTEM \"hwloc.dtd\">)", path)


def _object_kind(elem) -> str | None:
    """The candidate level an object starts, or None (caches other than L3,
    Misc, I/O objects, ...)."""
    kind = elem.get("type", "")
    if kind in ("Core", "Package", "Die", "Group", "Machine", "PU", "NUMANode"):
        return kind
    if kind == "Socket":  # hwloc < 1.11
        return "Package"
    if kind == "L3Cache" or kind == "Cache" and elem.get("depth") == "3" \
            and elem.get("cache_type", "0") in ("0", "1"):
        # v2 names it L3Cache; v1 writes Cache depth="3" (cache_type 2 = instruction cache).
        return "L3"
    return None


def _parse(data: bytes, path: str):
    """``(version, root attributes, PUs, NUMA cpusets, Machine attributes)``;
    each PU is ``(os_index, {kind: key})`` with keys of its nearest Core/L3/Die/
    Package/Machine ancestor and ``("Group", depth)`` for each Group ancestor;
    Machine attributes map a Machine's key to its attribute dict."""
    import xml.etree.ElementTree as ET

    pus = []
    numas = []
    machines: dict = {}
    stack: list = []  # (elem, kind or None) of the open <object>s
    version = None
    root_attrs = None
    seen = set()
    counter = 0
    try:
        for event, elem in ET.iterparse(io.BytesIO(data), events=("start", "end")):
            if event == "start":
                if version is None:
                    if elem.tag != "topology":
                        raise InputError(f"not an hwloc XML topology (root element <{elem.tag}>, "
                                         "expected <topology>)", path)
                    version = elem.get("version", "1")
                    continue
                if elem.tag != "object":
                    continue
                kind = _object_kind(elem)
                if root_attrs is None:
                    root_attrs = dict(elem.attrib)
                if len(stack) >= MAX_DEPTH:
                    raise InputError(f"objects nested deeper than {MAX_DEPTH} levels", path)
                counter += 1
                stack.append((counter, kind))
                if kind == "Machine":
                    machines[counter] = dict(elem.attrib)
                elif kind == "NUMANode":
                    numas.append(parse_cpuset(elem.get("cpuset"), path))
                elif kind == "PU":
                    index = elem.get("os_index")
                    if index is None or not re.fullmatch(r"[0-9]{1,9}", index):
                        raise InputError(f"a PU has os_index {index!r}, expected a number", path)
                    index = int(index)
                    keys = {}
                    depth = 0
                    for obj_id, k in stack[:-1]:
                        if k == "Group":
                            depth += 1
                            keys[("Group", depth)] = obj_id
                        elif k is not None and k not in ("PU", "NUMANode"):
                            keys[k] = obj_id  # the nearest ancestor of that kind wins
                    # OS indexes are per machine: a v1 System of several Machines
                    # (hwloc-assembler) numbers each machine's PUs from 0.
                    if (keys.get("Machine"), index) in seen:
                        raise InputError(f"PU os_index {index} appears twice", path)
                    seen.add((keys.get("Machine"), index))
                    try:  # before the PUs found so far could grow without bound
                        check_pes(len(seen), "the topology's PU list")
                    except TopologyError as exc:
                        raise InputError(str(exc), path) from None
                    pus.append((index, keys))
            elif elem.tag == "object":
                stack.pop()
                elem.clear()  # keep memory flat for large exports
    except ET.ParseError as exc:
        line = getattr(exc, "position", (None,))[0]
        msg = str(exc).split(":")[0]
        raise InputError(f"not well-formed XML ({msg})", path, line) from None
    if version is None:
        raise InputError("empty hwloc XML file", path)
    if root_attrs is None:
        raise InputError("hwloc XML topology has no <object>", path)
    if not pus:
        raise InputError("hwloc XML topology has no PU objects", path)
    return version, root_attrs, pus, numas, machines


# --------------------------------------------------------------- building
def _numa_keys(pus, numas) -> list | None:
    """Per PU, the id of the smallest NUMA cpuset holding it (None if no NUMA node)."""
    if not numas:
        return None
    sets = sorted({c for c in numas if c is not None and not c[1]},
                  key=lambda c: bin(c[0]).count("1"))
    keys = []
    for index, _ in pus:
        key = next((i for i, (bits, _) in enumerate(sets) if (bits >> index) & 1), None)
        keys.append(key)
    return keys


def _candidates(pus, numas, want_pus: bool):
    """``[(name, key per PU)]`` fine to coarse (before sorting by group count)."""
    n = len(pus)
    cands = []
    if want_pus:
        cands.append(("PU", list(range(n))))
    # A PU without a Core ancestor is its own core.
    cands.append(("Core", [keys.get("Core", ("pu", i)) for i, (_, keys) in enumerate(pus)]))
    cands.append(("L3", [keys.get("L3") for _, keys in pus]))
    numa = _numa_keys(pus, numas)
    if numa is not None:
        cands.append(("NUMA", numa))
    depths = sorted({k[1] for _, keys in pus for k in keys if isinstance(k, tuple)},
                    reverse=True)  # deepest groups are the finest
    for d in depths:
        cands.append(("Group", [keys.get(("Group", d)) for _, keys in pus]))
    for name in ("Die", "Package", "Machine"):
        cands.append((name, [keys.get(name) for _, keys in pus]))
    # A kind that only some PUs lie in (None) does not split the machine evenly
    # enough to be a level.
    return [(nm, keys) for nm, keys in cands if None not in keys]


def _compact(keys) -> list[int]:
    """Keys renumbered 0, 1, ... in order of first appearance (hwloc logical order)."""
    ids: dict = {}
    return [ids.setdefault(k, len(ids)) for k in keys]


def _nests(fine: list[int], coarse: list[int]) -> bool:
    """Whether every group of ``fine`` lies inside one group of ``coarse``."""
    parent: dict = {}
    for f, c in zip(fine, coarse):
        if parent.setdefault(f, c) != c:
            return False
    return True


def read_hwloc(path: str | os.PathLike, *, pus: bool = False,
               distances=None) -> HwlocMachine:
    """Read an hwloc XML export and build its regular hierarchy.

    Parameters
    ----------
    path:
        The XML file (``lstopo --of xml``), hwloc 1.x, 2.x or 3.x format.
    pus:
        Make each PU (hardware thread) a PE; by default a PE is a core (see the
        module documentation for the levels and the irregular cases).
    distances:
        Per-level distances (``"1:10:100"`` or a sequence), default
        ``1, 10, 100, ...``.

    Raises
    ------
    InputError
        Naming ``path``: unreadable, too large, not well-formed XML, not an
        hwloc topology, entity declarations, no usable PU, or more than
        ``MAX_PES`` PEs; a bad ``distances`` string is reported likewise.
    """
    import numpy as np

    from .hierarchy import Hierarchy

    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read(MAX_XML_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", name) from None
    if len(data) > MAX_XML_BYTES:
        raise InputError(f"larger than {MAX_XML_BYTES // 2**20} MiB; not an hwloc export "
                         "procmap reads", name)
    _check_bytes(data, name)
    version, root, pu_list, numas, machines = _parse(data, name)

    # A PU is usable when the allowed (and, in v1, online) cpuset of its Machine
    # holds it; a Machine without them (or a PU outside any) takes the root's.
    # Only a v1 System root has Machines below it.
    def sets(attrs):
        return (parse_cpuset(attrs.get("allowed_cpuset"), name),
                parse_cpuset(attrs.get("online_cpuset"), name))  # online: v1 only

    root_sets = sets(root)
    machine_sets = {m: sets(a) for m, a in machines.items()}
    usable_pu = []
    for i, keys in pu_list:
        allowed, online = root_sets
        m_allowed, m_online = machine_sets.get(keys.get("Machine"), (None, None))
        allowed = m_allowed if m_allowed is not None else allowed
        online = m_online if m_online is not None else online
        usable_pu.append(cpuset_has(allowed, i) and cpuset_has(online, i))

    # Choose the levels: sort the candidates fine to coarse by group count (stable,
    # so equal counts keep the natural order), then keep those that nest.
    cands = [(nm, _compact(keys)) for nm, keys in _candidates(pu_list, numas, pus)]
    leaf_name, leaf = cands[0]
    rest = sorted(cands[1:], key=lambda c: -len(set(c[1])))
    chain = [(leaf_name, leaf)]
    for nm, keys in rest:
        top = chain[-1][1]
        if keys == top:
            # The same split under a coarser name (an L3 or NUMA node per
            # package, a PU per core): the level is named by the coarsest, but
            # a core stays a core (POWER8/9 have an L3 per core) and a leaf
            # becomes no coarser than a core.
            if chain[-1][0] != "Core" and (len(chain) > 1 or nm == "Core"):
                chain[-1] = (nm, keys)
        elif len(set(keys)) < len(set(top)) and _nests(top, keys):
            chain.append((nm, keys))
    chain.append(("Machines", [0] * len(pu_list)))  # the root: the whole file

    # Arity of each level: the most children any group of the level above has.
    # chain[0] are the PEs; chain[t] (t >= 1) groups the level-(t-1) groups.
    levels, names = [], []
    child_index = []  # per PU, its index among its siblings at each level
    for t in range(1, len(chain)):
        fine, coarse = chain[t - 1][1], chain[t][1]
        order: dict = {}
        idx = []
        for f, c in zip(fine, coarse):
            siblings = order.setdefault(c, {})
            idx.append(siblings.setdefault(f, len(siblings)))
        levels.append(max(len(s) for s in order.values()))
        names.append(chain[t - 1][0])  # what the level counts
        child_index.append(idx)
    # A level of arity 1 says nothing about locality: drop it.
    keep = [t for t, a in enumerate(levels) if a > 1]
    if not keep:  # a single PE
        keep = [len(levels) - 1]
    machine_level = next((t for t, (nm, _) in enumerate(chain) if nm == "Machine"), None)
    levels = [levels[t] for t in keep]
    names = [names[t] for t in keep]
    child_index = [child_index[t] for t in keep]
    try:
        k = check_pes(math.prod(levels), f"the hierarchy {':'.join(map(str, levels))} found")
    except TopologyError as exc:
        raise InputError(str(exc), name) from None

    strides = [math.prod(levels[:t]) for t in range(len(levels))]
    caps = np.zeros(k, dtype=np.int64)
    cpu_ids = np.full(k, -1, dtype=np.int64)
    for i, (os_index, _) in enumerate(pu_list):
        pe = sum(child_index[t][i] * strides[t] for t in range(len(levels)))
        if usable_pu[i]:
            caps[pe] = 1
            if cpu_ids[pe] < 0 or os_index < cpu_ids[pe]:
                cpu_ids[pe] = os_index
    if not caps.any():
        raise InputError("no PU of the topology is allowed and online", name)
    # Levels inside one node: those below the Machine level when the file holds
    # several machines (hwloc v1 "System"), else all of them.
    node_level = len(levels)
    if machine_level is not None and len(set(chain[machine_level][1])) > 1:
        node_level = sum(1 for t in keep if t < machine_level)
    try:
        if isinstance(distances, str):
            h = Hierarchy.parse(":".join(map(str, levels)), distances, capacities=caps,
                                node_level=node_level)
        else:
            h = Hierarchy(tuple(levels), None if distances is None else tuple(distances),
                          caps, node_level=node_level)
    except TopologyError as exc:
        raise InputError(f"{exc} (levels {':'.join(names)} of this file)", name) from None
    cpu_ids.setflags(write=False)
    return HwlocMachine(h, tuple(names), cpu_ids, version, pus)
