"""Scotch ``tleaf`` target architectures <-> procmap hierarchies.

Scotch describes a tree-leaf machine root first::

    tleaf <levlnbr> <size_0> <link_0> ... <size_{L-1}> <link_{L-1}>

where ``size_0`` is the fan-out of the root and ``link_i`` is "the communication
cost between two nodes whose highest common ancestor" is at level ``i``.
procmap writes hierarchies leaf first (docs/design.md section 2), so the two orders
are reverses of each other::

    --hierarchy 4:8:6 --distances 1:10:100   <=>   tleaf 3 6 100 8 10 4 1

Cost convention. procmap distances are *absolute per level*, as in Scotch: two
PEs on different nodes of the example are at distance 100. TreeMatch (Open MPI's
topo/treematch) reads the same ``tleaf`` line but *accumulates* the costs from the
leaves up (``cost[i] += cost[i+1]``, launchers notes section 6), so for TreeMatch
the same line means an inter-node cost of 100 + 10 + 1 = 111. The functions here
use Scotch's reading; to feed TreeMatch the same distances, give it per-level
differences instead (``1:9:90`` for ``1:10:100``).

Capacities are not part of the format: :func:`to_tleaf` drops them and
:func:`from_tleaf` returns capacities of 1.
"""
from __future__ import annotations

import math
import os

from procmap.errors import TopologyError
from procmap.limits import is_decimal_int, is_decimal_number

from .hierarchy import Hierarchy

__all__ = ["to_tleaf", "from_tleaf", "read_tleaf", "write_tleaf"]


def _fmt_cost(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def to_tleaf(h: Hierarchy, *, strict: bool = True) -> str:
    """The Scotch ``tleaf`` line of a hierarchy (no trailing newline).

    >>> to_tleaf(Hierarchy.parse("4:8:6", "1:10:100"))
    'tleaf 3 6 100 8 10 4 1'

    Parameters
    ----------
    strict:
        Scotch reads link costs as integers. With ``strict`` (the default)
        non-integer distances raise :class:`TopologyError` instead of producing a
        file Scotch would misread; with ``strict=False`` they are written in
        Python's shortest round-trip form (readable by :func:`from_tleaf`).
    """
    if not isinstance(h, Hierarchy):
        raise TopologyError(f"tleaf describes hierarchies only, got {type(h).__name__}")
    if strict:
        for d in h.distances:
            if not float(d).is_integer():
                raise TopologyError(f"distance {d!r} is not an integer and Scotch reads tleaf "
                                    "costs as integers; scale the distances or pass strict=False")
    parts = ["tleaf", str(h.num_levels)]
    # Root first: the last (most significant) procmap level comes first.
    for size, cost in zip(reversed(h.levels), reversed(h.distances)):
        parts += [str(size), _fmt_cost(cost)]
    return " ".join(parts)


def from_tleaf(text: str, **kwargs) -> Hierarchy:
    """Parse a Scotch ``tleaf`` description into a :class:`Hierarchy`.

    Tokens may be separated by any white space (Scotch files often put the
    keyword on its own line); a trailing newline is fine. Extra keyword arguments
    (``node_level=``, ``capacities=``) go to :class:`Hierarchy`.

    Raises
    ------
    TopologyError
        One line naming what is wrong: another architecture keyword, a level
        count that does not match the numbers that follow, non-positive or
        non-integer sizes, costs that are not numbers >= 0 (numbers in ASCII
        digits only), or more than ``MAX_PES`` PEs in all (checked before any
        per-PE array exists).
    """
    if not isinstance(text, str):
        raise TopologyError(f"tleaf text must be a string, got {type(text).__name__}")
    tokens = text.split()
    if not tokens:
        raise TopologyError("empty tleaf description")
    keyword = tokens[0]
    if keyword != "tleaf":
        if keyword == "ltleaf":
            raise TopologyError("ltleaf (tleaf with a core permutation) is not supported; "
                                "renumber the cores and use tleaf")
        raise TopologyError(f"expected a Scotch 'tleaf' description, got {keyword!r}")
    if len(tokens) < 2:
        raise TopologyError("tleaf: missing the number of levels")
    # Numbers are plain ASCII decimals: int() and float() would also take "4_0" and
    # fullwidth digits.
    if not is_decimal_int(tokens[1]):
        raise TopologyError(f"tleaf: level count {tokens[1]!r} is not an integer in digits 0-9")
    nlev = int(tokens[1])
    if nlev < 1:
        raise TopologyError(f"tleaf: level count must be >= 1, got {nlev}")
    values = tokens[2:]
    if len(values) != 2 * nlev:
        raise TopologyError(f"tleaf: {nlev:,} level{'s' if nlev != 1 else ''} need {2 * nlev:,} "
                            f"numbers (size and cost per level), got {len(values):,}")
    sizes, costs = [], []
    for i in range(nlev):
        size_tok, cost_tok = values[2 * i], values[2 * i + 1]
        if not is_decimal_int(size_tok):
            raise TopologyError(f"tleaf: size {size_tok!r} of level {i} is not an integer in "
                                "digits 0-9")
        size = int(size_tok)
        if size < 1:
            raise TopologyError(f"tleaf: size of level {i} must be >= 1, got {size}")
        if not is_decimal_number(cost_tok):
            raise TopologyError(f"tleaf: cost {cost_tok!r} of level {i} is not a number >= 0 "
                                "in digits 0-9")
        cost = float(cost_tok)
        if not math.isfinite(cost) or cost < 0:
            raise TopologyError(f"tleaf: cost {cost_tok!r} of level {i} must be finite and >= 0")
        sizes.append(size)
        costs.append(cost)
    # Reverse to procmap's leaf-first order.
    try:
        return Hierarchy(tuple(reversed(sizes)), tuple(reversed(costs)), **kwargs)
    except TopologyError as exc:  # e.g. too many PEs: say that it came from the tleaf text
        raise TopologyError(f"tleaf: {exc}") from None


def read_tleaf(path: str | os.PathLike, **kwargs) -> Hierarchy:
    """Read a Scotch ``tleaf`` target file; errors are prefixed with the file name."""
    path_str = os.fspath(path)
    with open(path_str, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return from_tleaf(text, **kwargs)
    except TopologyError as exc:
        raise TopologyError(f"{path_str}: {exc}") from None


def write_tleaf(path: str | os.PathLike, h: Hierarchy, *, strict: bool = True) -> None:
    """Write ``to_tleaf(h)`` and a newline to ``path`` (atomically: temp file + rename)."""
    path_str = os.fspath(path)
    line = to_tleaf(h, strict=strict) + "\n"
    tmp = f"{path_str}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(line)
        os.replace(tmp, path_str)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
