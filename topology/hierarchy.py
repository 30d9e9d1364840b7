"""Hierarchical machine model: ``a1:a2:...:al`` with distances ``d1:...:dl``.

PE numbering (docs/design.md section 2, shared with SharedMap, KaHIP and GPU-HeiPa):
with ``P_t = a1 * ... * at`` (``P_0 = 1``), two distinct PEs ``p`` and ``q`` are at
level ``t`` -- and ``D(p, q) = d_t`` -- for the smallest ``t`` with
``p // P_t == q // P_t``. ``D(p, p) = 0``. The top-level split is the most
significant digit of a PE id.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from procmap.errors import TopologyError
from procmap.limits import MAX_SLOTS, check_pes, is_decimal_int, is_decimal_number


def _parse_numbers(text: str | list | tuple, what: str, kind=int) -> list:
    """Split ``"4:8:6"`` (``kind=int``) or ``"1:10:100"`` (``kind=float``) at ``:``.

    Only plain ASCII decimal notation is accepted: ``int()`` and ``float()`` would
    also read ``"4_0"`` as 40 and fullwidth digits as digits. Lists and tuples are
    returned as they are (the constructor checks them).
    """
    if not isinstance(text, str):
        return list(text)
    parts = [p.strip() for p in text.strip().split(":")]
    if not text.strip() or not all(parts):
        raise TopologyError(f"{what} {text!r}: expected numbers separated by ':' (e.g. 4:8:6)")
    values = []
    for p in parts:
        if kind is int and is_decimal_int(p):
            values.append(int(p))
        elif kind is not int and is_decimal_number(p):
            values.append(float(p))
        else:
            expected = "a whole number" if kind is int else "a number >= 0"
            raise TopologyError(f"{what} {text!r}: {p!r} is not {expected} in digits 0-9")
    return values


def _check_levels(levels: tuple) -> tuple[int, ...]:
    """Positive integers whose product (the PE count) is within ``MAX_PES``."""
    if not levels:
        raise TopologyError("hierarchy has no levels")
    text = ":".join(map(str, levels))
    for a in levels:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a < 1:
            shown = int(a) if isinstance(a, np.integer) else a
            raise TopologyError(f"hierarchy {text}: every level must be a positive integer, "
                                f"got {shown!r}")
    levels = tuple(int(a) for a in levels)
    # Python ints: the product cannot overflow, and it is checked before any
    # per-PE array is allocated.
    check_pes(math.prod(levels), f"hierarchy {text}")
    return levels


def _check_distances(distances, levels: tuple[int, ...]) -> tuple[float, ...]:
    """One finite, non-negative distance per level; warns when they decrease upwards."""
    if distances is None:
        return tuple(float(10 ** t) for t in range(len(levels)))
    distances = tuple(float(d) for d in distances)
    if len(distances) != len(levels):
        raise TopologyError(
            f"hierarchy {':'.join(map(str, levels))} has {len(levels)} levels but "
            f"{len(distances)} distances were given ({':'.join(_fmt(d) for d in distances)})")
    for d in distances:
        if not math.isfinite(d) or d < 0:
            raise TopologyError(f"distance {_fmt(d)} must be finite and >= 0")
    if any(b < a for a, b in zip(distances, distances[1:])):
        # stacklevel 4: the caller of Hierarchy(...) (through __init__ and __post_init__).
        warnings.warn(f"distances {':'.join(_fmt(d) for d in distances)} are not "
                      "non-decreasing from leaf to root; is the order reversed?", stacklevel=4)
    return distances


def check_capacities(capacities, k: int) -> np.ndarray:
    """Slots per PE as a read-only int64 array of length ``k``, each in ``0..MAX_SLOTS``."""
    if capacities is None:
        caps = np.ones(k, dtype=np.int64)
    else:
        caps = np.asarray(capacities)
        if caps.ndim == 0:
            caps = np.full(k, caps)
        if caps.shape != (k,):
            raise TopologyError(f"capacities have shape {caps.shape}, expected ({k},) for {k:,} PEs")
        if caps.dtype.kind not in "iu":
            raise TopologyError(f"capacities must be non-negative integers, got dtype {caps.dtype}")
        if caps.size and (caps.min() < 0 or caps.max() > MAX_SLOTS):
            bad = int(np.argmin(caps)) if caps.min() < 0 else int(np.argmax(caps))
            raise TopologyError(f"capacity of PE {bad} is {int(caps[bad]):,}; capacities must "
                                f"lie in 0..{MAX_SLOTS:,}")
        # Each capacity <= MAX_SLOTS and k <= MAX_PES: int64 totals cannot overflow.
        caps = caps.astype(np.int64)
    caps.setflags(write=False)
    return caps


def common_level(p, q, prefix_sizes) -> np.ndarray:
    """Level of the deepest common group of PEs ``p`` and ``q`` in a hierarchy whose
    level-t groups hold ``prefix_sizes[t - 1]`` PEs (0 when ``p == q``; vectorised)."""
    p = np.asarray(p, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    level = np.zeros(np.broadcast(p, q).shape, dtype=np.int64)
    differ = p != q
    for t, size in enumerate(prefix_sizes, start=1):
        level[differ] = t
        differ = differ & ((p // size) != (q // size))
    return level


@dataclass(frozen=True)
class Hierarchy:
    """A regular machine hierarchy.

    Parameters
    ----------
    levels : sequence of int
        ``(a1, ..., al)``, leaf first: ``a1`` PEs per processor, ``a2`` processors per
        node, ``a3`` nodes, ... Every entry is a positive integer, and their product
        (the number of PEs ``k``) is at most ``procmap.limits.MAX_PES`` (2^24).
    distances : sequence of float
        ``(d1, ..., dl)``: the cost of one unit of traffic between two PEs whose
        deepest common group is at level ``t``. Defaults to ``1, 10, 100, ...``.
    capacities : array of int, optional
        Slots per PE (defaults to 1 everywhere), each in ``0..procmap.limits.MAX_SLOTS``.
        A PE of capacity 0 is not part of the allocation.
    node_level : int, optional
        How many levels lie inside one node (PEs per node = ``a1 * ... * a_node_level``).
        Defaults to 2 for hierarchies of 3 levels or more, else 1.
    """

    levels: tuple
    distances: tuple
    capacities: np.ndarray = field(default=None, compare=False)
    node_level: int = None

    def __post_init__(self):
        levels = _check_levels(tuple(self.levels))
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "distances", _check_distances(self.distances, levels))
        self._set_capacities(self.capacities, self.node_level)

    def _set_capacities(self, capacities, node_level) -> None:
        """Check and store capacities and node level (levels are already checked)."""
        levels = self.levels
        caps = check_capacities(capacities, math.prod(levels))
        if node_level is None:
            node_level = 2 if len(levels) >= 3 else 1
        if not 0 <= node_level <= len(levels):
            raise TopologyError(f"node level {node_level} outside 0..{len(levels)}")
        object.__setattr__(self, "capacities", caps)
        object.__setattr__(self, "node_level", int(node_level))

    # ----------------------------------------------------------------- parse
    @classmethod
    def parse(cls, levels: str, distances: str | None = None, **kwargs) -> "Hierarchy":
        """Parse ``"4:8:6"`` and ``"1:10:100"`` as given on the command line.

        Levels are whole numbers and distances numbers >= 0, both in ASCII digits
        (``"4_0"`` and fullwidth digits are refused); the product of the levels is
        checked against ``MAX_PES`` before anything is allocated.
        """
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
        """Slots of all PEs (exact: at most ``MAX_PES * MAX_SLOTS < 2**55``)."""
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
        return common_level(p, q, self.prefix_sizes)

    def distance(self, p, q) -> np.ndarray:
        """``D(p, q)`` for PEs ``p``, ``q`` (vectorised)."""
        table = np.concatenate([[0.0], np.asarray(self.distances)])
        return table[self.level_of(p, q)]

    def distance_matrix(self) -> np.ndarray:
        """The dense ``k x k`` matrix (only for small ``k``: tests, exports)."""
        pes = np.arange(self.k)
        return self.distance(pes[:, None], pes[None, :])

    def with_capacities(self, capacities, node_level: int | None = None) -> "Hierarchy":
        """The same levels and distances with other capacities (and node level).

        Only the new capacities and node level are checked: the distances were
        checked, and warned about, when this hierarchy was built, so a derived
        machine does not repeat the warning.
        """
        derived = copy.copy(self)  # a frozen dataclass: copy.copy skips __post_init__
        derived._set_capacities(capacities, self.node_level if node_level is None else node_level)
        return derived


def _fmt(d: float) -> str:
    return str(int(d)) if float(d).is_integer() else repr(float(d))
