"""The mapping objective and balance report (docs/design.md section 3).

``J(C, D, Pi) = sum over ordered pairs (i, j) of C_ij * D[Pi(i), Pi(j)]``: each
undirected edge counts twice, as in SharedMap, KaHIP and GPU-HeiPa. The edge cut
is reported the METIS way: each cut undirected edge once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from procmap.errors import CapacityError, InputError
from procmap.limits import INT64_MAX, check_total
from procmap.topology.hierarchy import common_level

from .graph import CommGraph

#: :func:`evaluate` sums J with NumPy alone up to this many directed edges, and with
#: the parallel kernels (``procmap.kernels``) above: loading the first compiled
#: kernel costs more start-up than NumPy takes on a graph this size.
NUMPY_OBJECTIVE_MAX_EDGES = 1 << 20


def _exact(value):
    """Return an int when ``value`` is integral (keeps large J exact), else float."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def max_block_weight(total_weight: int, k: int, eps: float) -> int:
    """``L_max = ceil((1 + eps) * c(V) / k)`` (SharedMap / GPU-HeiPa convention).

    Capped at ``2^63 - 1``: the kernels hold it in int64, and no block can weigh more
    than the total, which the graph keeps at or below that bound.
    """
    return min(math.ceil((1.0 + eps) * total_weight / k), INT64_MAX)


def largest_distance(topology) -> float:
    """The largest distance between two PEs of ``topology`` (a hierarchy's top level
    distance, or the largest entry of an explicit distance matrix); 0 for one PE."""
    if hasattr(topology, "prefix_sizes"):
        return float(max(topology.distances, default=0.0))
    matrix = topology.distance_matrix()
    return float(matrix.max()) if matrix.size else 0.0


def check_objective_range(graph: CommGraph, max_distance: float) -> None:
    """Check that no mapping's J can leave the range it is computed in.

    ``J <= total edge weight (both directions) x max_distance`` for every mapping.
    With integer volumes J, the cut and the kernels' gains are int64 sums, so the
    bound must be at most ``2^63 - 1``; with float volumes it must be finite.
    ``max_distance`` comes from :func:`largest_distance`. Call this where a graph
    meets a topology, before any kernel runs; raises :class:`InputError` with the
    numbers (scale the volumes down, e.g. bytes to KiB, to fix it).
    """
    total = graph.total_edge_weight  # exact: never wrapped
    if graph.adjwgt.dtype.kind in "iu":
        bound = total * (int(max_distance) if float(max_distance).is_integer()
                         else float(max_distance))
        if bound > INT64_MAX:
            raise InputError(f"J can reach {total:,} (total edge weight, both directions) x "
                             f"{_show_distance(max_distance)} (largest distance) = "
                             f"{_show_bound(bound)}, beyond the int64 range (at most "
                             f"{INT64_MAX:,}); scale the volumes down (e.g. bytes to KiB)")
    else:
        check_total(float(total) * float(max_distance),
                    f"J's bound, total edge weight {float(total):.6g} x largest distance "
                    f"{_show_distance(max_distance)},")


def _show_distance(d: float) -> str:
    d = float(d)
    return str(int(d)) if d.is_integer() else repr(d)


def _show_bound(bound: int | float) -> str:
    return f"{bound:,}" if isinstance(bound, int) else f"{bound:.6g}"


def is_rank_placement(graph: CommGraph, topology) -> bool:
    """True when every task can get its own slot: the launcher case (docs/design.md section 2)."""
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
    check_objective_range(graph, largest_distance(topology))
    k = topology.k
    if graph.num_directed_edges <= NUMPY_OBJECTIVE_MAX_EDGES:
        level_traffic, matrix_cost, pe_loads = _level_traffic, _matrix_cost, _pe_loads
    else:
        from procmap.kernels import level_traffic, matrix_cost, pe_loads
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


# NumPy versions of the objective kernels (same signatures and results as
# ``procmap.kernels``; float sums may differ in the last bits), for small graphs.
def _entry_pes(xadj, adjncy, pe) -> tuple[np.ndarray, np.ndarray]:
    """The PEs of both ends of every CSR entry."""
    return np.repeat(pe, np.diff(xadj)), pe[adjncy]


def _level_traffic(xadj, adjncy, adjwgt, pe, prefix) -> np.ndarray:
    level = common_level(*_entry_pes(xadj, adjncy, pe), prefix)
    traffic = np.zeros(prefix.size + 1, dtype=adjwgt.dtype)
    np.add.at(traffic, level, adjwgt)
    return traffic


def _matrix_cost(xadj, adjncy, adjwgt, pe, dist) -> tuple[float, float]:
    p, q = _entry_pes(xadj, adjncy, pe)
    off = p != q
    weight = adjwgt[off].astype(np.float64)
    return float((weight * dist[p[off], q[off]]).sum()), float(weight.sum())


def _pe_loads(pe, vwgt, k: int) -> tuple[np.ndarray, np.ndarray]:
    loads = np.zeros(k, dtype=np.int64)
    np.add.at(loads, pe, vwgt)
    return loads, np.bincount(pe, minlength=k).astype(np.int64)


def require_valid(evaluation: Evaluation) -> None:
    """Raise :class:`CapacityError` when a mapping overfills a PE."""
    if not evaluation.valid:
        raise CapacityError(f"{evaluation.violations} PE(s) over capacity")
