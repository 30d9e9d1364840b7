"""What the report's figures show, computed without matplotlib.

Conventions (docs/design.md sections 2 and 3): volumes are the graph's edge weights
(the user's unit, e.g. bytes) counted in both directions, as in
``J = sum over ordered pairs C_ij * D(pe_i, pe_j)``; so the traffic matrix sums to
the total edge weight of the CSR, and the level bars of a placement sum to it too.
Levels are indexed as in :attr:`procmap.objective.Evaluation.level_traffic`: entry 0
stays on one PE, entry ``t`` is traffic between PEs whose deepest common group is
level ``t`` of the hierarchy (leaf first).

No ``n x n`` array is ever built: the traffic matrix is summed per cell with
``np.bincount`` over the directed edges, into at most ``max_cells`` x ``max_cells``
cells.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from procmap import textfmt
from procmap.graph import CommGraph
from procmap.objective import Evaluation, evaluate, is_rank_placement

#: Largest side of the traffic-matrix image, in cells (4M float64 cells: 32 MiB).
MAX_CELLS = 2048
#: Boundaries of a level are drawn only when there are at most this many (denser
#: grid lines would paint the picture over).
MAX_LINES = 128
#: The per-node bars show at most this many bars (consecutive nodes are summed).
MAX_BARS = 256


# ----------------------------------------------------------------- names
def level_names(hierarchy) -> list[str]:
    """A label for every entry of ``level_traffic``: :func:`procmap.textfmt.level_names`."""
    return textfmt.level_names(hierarchy.num_levels, hierarchy.node_level)


def group_name(hierarchy, t: int) -> str:
    """What one group of level ``t`` is called (0: a PE)."""
    if t == 0:
        return "PE"
    if t == hierarchy.node_level:
        return "node"
    if t == hierarchy.node_level - 1:
        return "processor"
    return f"level-{t} group"


# ------------------------------------------------------------ the matrix
@dataclass
class TrafficMatrix:
    """Rank-to-rank traffic of one placement, ranks ordered by PE.

    ``values[a, b]`` is the volume sent from the tasks of cell ``a`` to those of cell
    ``b``; ``values.sum()`` is the graph's total edge weight (both directions).
    A cell is one rank (``unit == "rank"``, ranks sorted by PE, ties by rank), one PE
    (``"PE"``) or ``group`` consecutive PEs (``"PE group"``). ``lines[t]`` holds the
    positions, in cell coordinates (cell ``a`` spans ``[a, a + 1)``), where a new
    level-``t`` group starts (t = 0: a new PE); levels with more than
    :data:`MAX_LINES` boundaries are left out.
    """

    values: np.ndarray
    unit: str
    group: int
    lines: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def cells(self) -> int:
        return int(self.values.shape[0])

    def as_dict(self) -> dict:
        """JSON form: the nonzero cells as (row, col, value) lists, row-major."""
        rows, cols = np.nonzero(self.values)
        return {"cells": self.cells, "unit": self.unit, "group": self.group,
                "lines": {str(t): [float(x) for x in pos] for t, pos in self.lines.items()},
                "rows": rows.tolist(), "cols": cols.tolist(),
                "values": _plain_list(self.values[rows, cols])}


def traffic_matrix(graph: CommGraph, hierarchy, pes: np.ndarray,
                   max_cells: int = MAX_CELLS) -> TrafficMatrix:
    """Aggregate ``graph``'s traffic under ``pes`` (task -> PE) to at most
    ``max_cells`` x ``max_cells`` cells: per rank when ``n <= max_cells``, else per
    PE, else per group of ``ceil(k / max_cells)`` consecutive PEs."""
    pes = np.asarray(pes, dtype=np.int64)
    n, k = graph.n, hierarchy.k
    sizes = [1] + [int(s) for s in hierarchy.prefix_sizes[:-1]]  # PEs per level-t group
    lines: dict[int, np.ndarray] = {}
    if n <= max_cells:
        order = np.argsort(pes, kind="stable")
        cell = np.empty(n, dtype=np.int64)
        cell[order] = np.arange(n)
        cells, unit, group = n, "rank", 1
        sorted_pes = pes[order]
        for t, size in enumerate(sizes):
            gid = sorted_pes // size
            lines[t] = (np.flatnonzero(gid[1:] != gid[:-1]) + 1).astype(np.float64)
    else:
        group = max(1, math.ceil(k / max_cells))
        cells = math.ceil(k / group)
        cell = pes // group
        unit = "PE" if group == 1 else "PE group"
        for t, size in enumerate(sizes):
            if t == 0:
                continue  # every cell border is a PE border: nothing to mark
            lines[t] = np.arange(size, k, size, dtype=np.float64) / group
    lines = {t: pos for t, pos in lines.items() if 0 < pos.size <= MAX_LINES}
    src = graph.edge_sources()
    flat = cell[src] * cells + cell[graph.adjncy]
    # bincount sums in float64: exact up to 2^53, plenty for a picture
    values = np.bincount(flat, weights=graph.adjwgt, minlength=cells * cells)
    return TrafficMatrix(values.reshape(cells, cells), unit, group, lines)


# ---------------------------------------------------------------- levels
@dataclass
class LevelTraffic:
    """Traffic per hierarchy level for every placement (both directions).

    ``volumes[name][t]`` follows ``Evaluation.level_traffic``; levels from
    ``first_off_node`` on cross nodes.
    """

    names: list[str]
    volumes: dict[str, list]
    first_off_node: int

    def off_node_share(self, name: str) -> float:
        """Fraction of the placement's traffic that leaves its node (0 without traffic)."""
        v = self.volumes[name]
        total = sum(v)
        return float(sum(v[self.first_off_node:]) / total) if total else 0.0

    def as_dict(self) -> dict:
        return {"names": self.names, "volumes": self.volumes,
                "first_off_node": self.first_off_node,
                "off_node_share": {p: self.off_node_share(p) for p in self.volumes}}


# ----------------------------------------------------------------- nodes
@dataclass
class NodeTraffic:
    """Per-node view: traffic sent off-node and load against capacity.

    A bar is ``group`` consecutive nodes (1 unless there are more than
    :data:`MAX_BARS` nodes). ``off_node[name][b]`` is the volume the tasks of bar ``b``
    send to other nodes (one direction; summed over bars it is the between-nodes
    traffic of :class:`LevelTraffic`, which counts both). ``load`` is tasks per bar in
    rank placement, task weight in partition mapping; ``capacity`` is slots (rank
    placement) or L_max times the PEs with slots (partition mapping).
    """

    group: int
    nodes: int
    off_node: dict[str, np.ndarray]
    load: dict[str, np.ndarray]
    capacity: np.ndarray
    load_unit: str

    def as_dict(self) -> dict:
        return {"group": self.group, "nodes": self.nodes, "load_unit": self.load_unit,
                "off_node": {p: _plain_list(v) for p, v in self.off_node.items()},
                "load": {p: _plain_list(v) for p, v in self.load.items()},
                "capacity": _plain_list(self.capacity)}


def _bars(per_node: np.ndarray, group: int) -> np.ndarray:
    """Sum consecutive groups of ``group`` nodes (the last group may be shorter)."""
    if group == 1:
        return per_node
    return np.add.reduceat(per_node, np.arange(0, per_node.size, group))


def node_traffic(graph: CommGraph, hierarchy, placements: dict[str, np.ndarray],
                 evaluations: dict[str, Evaluation]) -> NodeTraffic:
    """The per-node view of every placement in ``placements`` (name -> task -> PE)."""
    per_node = hierarchy.pes_per_node
    nodes = hierarchy.num_nodes
    group = max(1, math.ceil(nodes / MAX_BARS))
    src = graph.edge_sources()
    caps = np.asarray(hierarchy.capacities, dtype=np.int64)
    placement = is_rank_placement(graph, hierarchy)
    if placement:
        capacity = caps.reshape(nodes, per_node).sum(axis=1)
    else:
        limit = next(iter(evaluations.values())).limit
        capacity = limit * np.count_nonzero(caps.reshape(nodes, per_node), axis=1)
    off, load = {}, {}
    for name, pes in placements.items():
        node = np.asarray(pes, dtype=np.int64) // per_node
        a, b = node[src], node[graph.adjncy]
        leaves = a != b
        off[name] = _bars(np.bincount(a[leaves], weights=graph.adjwgt[leaves],
                                      minlength=nodes), group)
        weights = None if placement else graph.vwgt
        load[name] = _bars(np.bincount(node, weights=weights, minlength=nodes), group)
    return NodeTraffic(group, nodes, off, load, _bars(capacity, group),
                       "tasks" if placement else "task weight")


# ---------------------------------------------------------------- report
@dataclass
class ReportData:
    """Everything the report shows; ``mapped`` names procmap's placement."""

    summary: dict
    mapped: str
    matrices: dict[str, TrafficMatrix]
    levels: LevelTraffic
    nodes: NodeTraffic
    evaluations: dict[str, Evaluation]

    def as_dict(self, matrices: bool = True) -> dict:
        out = {"summary": self.summary, "mapped": self.mapped,
               "levels": self.levels.as_dict(), "nodes": self.nodes.as_dict()}
        if matrices:
            out["matrices"] = {p: m.as_dict() for p, m in self.matrices.items()}
        return out


def build_report(graph: CommGraph, hierarchy, pes: np.ndarray, *,
                 baselines: tuple[str, ...] = ("block", "roundrobin"), mapped: str = "procmap",
                 info: dict | None = None, eps: float = 0.03, seed: int = 0,
                 max_cells: int = MAX_CELLS) -> ReportData:
    """Evaluate ``pes`` and the ``baselines`` and compute every figure's data.

    ``info`` (engine, seed, seconds, source, ...) is copied into the summary. The
    traffic matrices compare ``block`` (what ``mpirun`` does) with ``pes``, whether
    or not ``block`` is among ``baselines``; ``seed`` seeds the random baseline.
    """
    from procmap import baselines as base

    placements = {name: base.baseline(name, graph.n, hierarchy, seed) for name in baselines}
    placements[mapped] = np.asarray(pes)
    evaluations = {name: evaluate(graph, hierarchy, p, eps=eps) for name, p in placements.items()}
    block = placements.get("block")
    if block is None:
        block = base.block(graph.n, hierarchy)
    matrices = {"block": traffic_matrix(graph, hierarchy, block, max_cells),
                mapped: traffic_matrix(graph, hierarchy, placements[mapped], max_cells)}
    levels = LevelTraffic(level_names(hierarchy),
                          {p: ev.level_traffic for p, ev in evaluations.items()},
                          hierarchy.node_level + 1)
    shown = {p: placements[p] for p in ("block", mapped) if p in placements}
    nodes = node_traffic(graph, hierarchy, shown, evaluations)
    summary = _summary(graph, hierarchy, evaluations, levels, mapped, info or {})
    return ReportData(summary, mapped, matrices, levels, nodes, evaluations)


def _summary(graph, hierarchy, evaluations, levels, mapped, info) -> dict:
    j = evaluations[mapped].J
    rows = {}
    for name, ev in evaluations.items():
        rows[name] = {"J": ev.J, "cut": ev.cut, "off_node_share": levels.off_node_share(name),
                      "valid": ev.valid}
    improvement = {name: (1.0 - j / ev.J) if ev.J else 0.0
                   for name, ev in evaluations.items() if name != mapped}
    return {"tasks": graph.n, "edges": graph.m, "hierarchy": str(hierarchy),
            "distance": hierarchy.distance_string(), "pes": hierarchy.k,
            "nodes": hierarchy.num_nodes, "mode": evaluations[mapped].mode,
            **info, "placements": rows, "improvement": improvement}


def _plain_list(values: np.ndarray) -> list:
    """JSON-friendly numbers: ints where every value is integral."""
    values = np.asarray(values)
    if values.dtype.kind == "f" and values.size and np.all(np.mod(values, 1) == 0) \
            and np.abs(values).max() < 2**53:
        return values.astype(np.int64).tolist()
    return values.tolist()
