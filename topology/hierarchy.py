"""Hierarchical machine model: ``a1:a2:...:al`` with distances ``d1:...:dl``.

PE numbering (DESIGN.md section 2, shared with SharedMap, KaHIP and GPU-HeiPa):
with ``P_t = a1 * ... * at`` (``P_0 = 1``), two distinct PEs ``p`` and ``q`` are at
level ``t`` -- and ``D(p, q) = d_t`` -- for the smallest ``t`` with
``p // P_t == q // P_t``. ``D(p, p) = 0``. The top-level split is the most
significant digit of a PE id.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from procmap.errors import TopologyError


def _parse_numbers(text: str | list | tuple, what: str, kind=int) -> list:
    if isinstance(text, str):
        parts = text.strip().split(":")
        if not text.strip() or any(not p.strip() for p in parts):
            raise TopologyError(f"{what} {text!r}: expected numbers separated by ':' (e.g. 4:8:6)")
        values = []
        for p in parts:
            try:
                values.append(kind(p) if kind is int else float(p))
            except ValueError:
                raise TopologyError(f"{what} {text!r}: {p!r} is not a{'n integer' if kind is int else ' number'}") from None
    else:
        values = list(text)
    return values


@dataclass(frozen=True)
class Hierarchy:
    """A regular machine hierarchy.

    Parameters
    ----------
    levels : sequence of int
        ``(a1, ..., al)``, leaf first: ``a1`` PEs per processor, ``a2`` processors per
        node, ``a3`` nodes, ... Every entry is a positive integer.
    distances : sequence of float
        ``(d1, ..., dl)``: the cost of one unit of traffic between two PEs whose
        deepest common group is at level ``t``. Defaults to ``1, 10, 100, ...``.
    capacities : array of int, optional
        Slots per PE (defaults to 1 everywhere). A PE of capacity 0 is not part of
        the allocation.
    node_level : int, optional
        How many levels lie inside one node (PEs per node = ``a1 * ... * a_node_level``).
        Defaults to 2 for hierarchies of 3 levels or more, else 1.
    """

    levels: tuple
    distances: tuple
    capacities: np.ndarray = field(default=None, compare=False)
    node_level: int = None

    def __post_init__(self):
        levels = tuple(self.levels)
        if not levels:
            raise TopologyError("hierarchy has no levels")
        for a in levels:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a < 1:
                raise TopologyError(f"hierarchy {':'.join(map(str, levels))}: every level must be a positive integer, got {a!r}")
        levels = tuple(int(a) for a in levels)
        if self.distances is None:
            distances = tuple(float(10 ** t) for t in range(len(levels)))
        else:
            distances = tuple(float(d) for d in self.distances)
        if len(distances) != len(levels):
            raise TopologyError(
                f"hierarchy {':'.join(map(str, levels))} has {len(levels)} levels but "
                f"{len(distances)} distances were given ({':'.join(_fmt(d) for d in distances)})")
        for d in distances:
            if not math.isfinite(d) or d < 0:
                raise TopologyError(f"distance {d!r} must be finite and >= 0")
        if any(b < a for a, b in zip(distances, distances[1:])):
            warnings.warn(f"distances {':'.join(_fmt(d) for d in distances)} are not "
                          "non-decreasing from leaf to root; is the order reversed?", stacklevel=3)
        k = math.prod(levels)
        caps = self.capacities
        if caps is None:
            caps = np.ones(k, dtype=np.int64)
        else:
            caps = np.asarray(caps)
            if caps.ndim == 0:
                caps = np.full(k, int(caps), dtype=np.int64)
            if caps.shape != (k,):
                raise TopologyError(f"capacities have shape {caps.shape}, expected ({k},) for {k} PEs")
            if caps.dtype.kind not in "iu" or (caps.size and caps.min() < 0):
                raise TopologyError("capacities must be non-negative integers")
            caps = caps.astype(np.int64)
        caps.setflags(write=False)
        node_level = self.node_level
        if node_level is None:
            node_level = 2 if len(levels) >= 3 else 1
        if not 0 <= node_level <= len(levels):
            raise TopologyError(f"node level {node_level} outside 0..{len(levels)}")
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "distances", distances)
        object.__setattr__(self, "capacities", caps)
        object.__setattr__(self, "node_level", int(node_level))

    # ----------------------------------------------------------------- parse
    @classmethod
    def parse(cls, levels: str, distances: str | None = None, **kwargs) -> "Hierarchy":
        """Parse ``"4:8:6"`` and ``"1:10:100"`` as given on the command line."""
        lv = _parse_numbers(levels, "hierarchy")
        ds = None if distances is None else _parse_numbers(distances, "distances", float)
        return cls(tuple(lv), None if ds is None else tuple(ds), **kwargs)

    # ------------------------------------------------------------ properties
    @property
    def num_levels(self) -> int:
        return len(self.levels)

    @property
    def k(self) -> int:
        """Number of PEs."""
        return math.prod(self.levels)

    @property
    def prefix_sizes(self) -> np.ndarray:
        """``P_t = a1 * ... * at`` for ``t = 1..l`` (int64): PEs in one level-t group."""
        return np.cumprod(np.asarray(self.levels, dtype=np.int64))

    @property
    def pes_per_node(self) -> int:
        return math.prod(self.levels[: self.node_level])

    @property
    def num_nodes(self) -> int:
        return self.k // self.pes_per_node

    @property
    def total_slots(self) -> int:
        return int(self.capacities.sum())

    def __str__(self) -> str:
        return ":".join(map(str, self.levels))

    def distance_string(self) -> str:
        return ":".join(_fmt(d) for d in self.distances)

    # ------------------------------------------------------------- distances
    def level_of(self, p, q) -> np.ndarray:
        """Level of the deepest common group of PEs ``p`` and ``q`` (0 when ``p == q``).

        Vectorised over array arguments; no ``k x k`` matrix is built.
        """
        p = np.asarray(p, dtype=np.int64)
        q = np.asarray(q, dtype=np.int64)
        level = np.zeros(np.broadcast(p, q).shape, dtype=np.int64)
        differ = p != q
        for t, size in enumerate(self.prefix_sizes, start=1):
            level[differ] = t
            differ = differ & ((p // size) != (q // size))
        return level

    def distance(self, p, q) -> np.ndarray:
        """``D(p, q)`` for PEs ``p``, ``q`` (vectorised)."""
        table = np.concatenate([[0.0], np.asarray(self.distances)])
        return table[self.level_of(p, q)]

    def distance_matrix(self) -> np.ndarray:
        """The dense ``k x k`` matrix (only for small ``k``: tests, exports)."""
        pes = np.arange(self.k)
        return self.distance(pes[:, None], pes[None, :])

    def with_capacities(self, capacities) -> "Hierarchy":
        return Hierarchy(self.levels, self.distances, capacities, self.node_level)


def _fmt(d: float) -> str:
    return str(int(d)) if float(d).is_integer() else repr(float(d))
