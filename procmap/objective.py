"""The mapping objective and balance report (DESIGN.md section 3).

``J(C, D, Pi) = sum over ordered pairs (i, j) of C_ij * D[Pi(i), Pi(j)]``: each
undirected edge counts twice, as in SharedMap, KaHIP and GPU-HeiPa. The edge cut
is reported the METIS way: each cut undirected edge once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from procmap.errors import CapacityError, InputError
from procmap.kernels import level_traffic, matrix_cost, pe_loads

from .graph import CommGraph


def _exact(value):
    """Return an int when ``value`` is integral (keeps large J exact), else float."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def max_block_weight(total_weight: int, k: int, eps: float) -> int:
    """``L_max = ceil((1 + eps) * c(V) / k)`` (SharedMap / GPU-HeiPa convention)."""
    return math.ceil((1.0 + eps) * total_weight / k)


def is_rank_placement(graph: CommGraph, topology) -> bool:
    """True when every task can get its own slot: the launcher case (DESIGN.md section 2)."""
    return graph.n <= int(topology.capacities.sum())


@dataclass
class Evaluation:
    """Quality and balance of one mapping.

    Attributes
    ----------
    J : communication cost, both directions of each edge counted.
    cut : volume of undirected edges between different PEs, each edge once.
    level_traffic : for hierarchies, volume per level, both directions: entry 0 stays
        on one PE, entry t crosses level t (1 = between PEs of one processor, ...).
        ``J == sum(d_t * level_traffic[t])``. ``None`` for explicit distance matrices.
    loads : total task weight per PE; counts: tasks per PE.
    mode : ``"placement"`` (n <= slots; a PE holds at most its capacity in tasks) or
        ``"partition"`` (n > slots; a PE holds at most ``limit`` weight).
    limit : capacity bound that applies: L_max in partition mode, else None (per-PE
        capacities apply).
    valid : no PE over its capacity (placement) or over L_max (partition).
    """

    J: float | int
    cut: float | int
    level_traffic: list | None
    loads: np.ndarray
    counts: np.ndarray
    mode: str
    limit: int | None
    imbalance: float
    valid: bool
    violations: int

    def as_dict(self) -> dict:
        return {
            "J": self.J,
            "cut": self.cut,
            "level_traffic": self.level_traffic,
            "mode": self.mode,
            "max_load": int(self.loads.max(initial=0)),
            "limit": self.limit,
            "imbalance": self.imbalance,
            "valid": self.valid,
            "pes_over_capacity": self.violations,
        }


def check_mapping(pes, graph: CommGraph, topology) -> np.ndarray:
    """Validate a task -> PE array (length n, ids in ``[0, k)``) and return it as int32."""
    pes = np.asarray(pes)
    if pes.shape != (graph.n,):
        raise InputError(f"mapping has {pes.size} entries but the graph has {graph.n} tasks")
    if pes.dtype.kind not in "iu":
        raise InputError(f"mapping must hold integer PE ids, got dtype {pes.dtype}")
    k = topology.k
    if pes.size and (pes.min() < 0 or pes.max() >= k):
        bad = int(np.argmax((pes < 0) | (pes >= k)))
        raise InputError(f"task {bad} is mapped to PE {int(pes[bad])}, outside 0..{k - 1}")
    return pes.astype(np.int32)


def evaluate(graph: CommGraph, topology, pes, *, eps: float = 0.03) -> Evaluation:
    """Evaluate the mapping ``pes`` (task -> PE) of ``graph`` onto ``topology``.

    ``topology`` is a :class:`~procmap.topology.Hierarchy` (distances looked up level
    by level, no ``k x k`` matrix) or any topology with a ``distance_matrix()``.
    ``eps`` sets ``L_max`` in partition mode.
    """
    pes = check_mapping(pes, graph, topology)
    k = topology.k
    if hasattr(topology, "prefix_sizes"):
        traffic = level_traffic(graph.xadj, graph.adjncy, graph.adjwgt, pes, topology.prefix_sizes)
        distances = topology.distances
        terms = [_exact(traffic[t + 1]) * (int(d) if float(d).is_integer() else d)
                 for t, d in enumerate(distances)]
        J = _exact(sum(terms))
        off_pe = _exact(traffic[1:].sum())
        per_level = [_exact(x) for x in traffic]
    else:
        J, off_pe = matrix_cost(graph.xadj, graph.adjncy, graph.adjwgt, pes,
                                np.ascontiguousarray(topology.distance_matrix(), dtype=np.float64))
        J, off_pe, per_level = _exact(J), _exact(off_pe), None
    cut = _exact(off_pe / 2) if isinstance(off_pe, float) else off_pe // 2
    loads, counts = pe_loads(pes, graph.vwgt, k)
    caps = topology.capacities
    if is_rank_placement(graph, topology):
        mode, limit = "placement", None
        violations = int(np.count_nonzero(counts > caps))
        used = caps > 0
        ideal = graph.n / max(1, int(np.count_nonzero(used)))
        imbalance = float(counts.max(initial=0) / ideal - 1.0) if graph.n else 0.0
    else:
        mode = "partition"
        limit = max_block_weight(graph.total_vertex_weight, int(np.count_nonzero(caps)), eps)
        violations = int(np.count_nonzero((loads > limit) | ((caps == 0) & (counts > 0))))
        ideal = graph.total_vertex_weight / max(1, int(np.count_nonzero(caps)))
        imbalance = float(loads.max(initial=0) / ideal - 1.0) if ideal else 0.0
    return Evaluation(J=J, cut=cut, level_traffic=per_level, loads=loads, counts=counts,
                      mode=mode, limit=limit, imbalance=imbalance, valid=violations == 0,
                      violations=violations)


def require_valid(evaluation: Evaluation) -> None:
    """Raise :class:`CapacityError` when a mapping overfills a PE."""
    if not evaluation.valid:
        raise CapacityError(f"{evaluation.violations} PE(s) over capacity")
