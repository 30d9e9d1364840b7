"""Numbers, counts and hierarchy levels as the human-readable reports print them.

Import-free (no NumPy): ``procmap --help`` stays light. JSON output never goes
through here; it keeps plain numbers.

* :func:`num` -- integers with thousands separators (``427,408``); floats likewise
  with two decimals, or in ``%g`` form when very large or very small.
* :func:`plural` -- ``1 edge``, ``2 edges``, ``1,024 hosts``.
* :func:`level_names` -- what the traffic of each hierarchy level is called, from
  the node level ``L`` (levels inside one node):

  ========================  ==================================================
  level ``t``               name
  ========================  ==================================================
  0                         ``same core`` (the same PE)
  ``L - 1`` (``L >= 2``)    ``same processor`` (the group just below a node)
  ``L`` (``L >= 1``)        ``same node``
  ``L + 1``                 ``between nodes``
  ``L + 2``                 ``between racks``
  any other                 ``level t``
  ========================  ==================================================

  Without a node level (``None``) every level but 0 is ``level t``.
* :func:`show_number` -- a number quoted in an error message: ``4``, ``2.5``, ``nan``.
"""
from __future__ import annotations

__all__ = ["num", "plural", "runlength", "level_names", "traffic_text", "show_number"]


def num(value) -> str:
    """``value`` for a report: ``1,234,567`` for integers (NumPy's too), ``12,345.68``
    for floats, ``1.5e+20`` / ``0.0001`` in ``%g`` form when very large or small."""
    if isinstance(value, bool):
        return str(value)
    if hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu":
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:,.0f}"
    if abs(value) >= 1e15 or abs(value) < 0.01:
        return f"{value:.6g}"
    return f"{value:,.2f}"


def plural(count, word: str, many: str | None = None) -> str:
    """``"1 edge"``, ``"2 edges"``, ``"12,000 tasks"`` (``many`` for irregular plurals)."""
    count = int(count)
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def runlength(values) -> str:
    """Slurm-style run-length text: ``[32, 32, 16]`` -> ``"32(x2),16"``."""
    out, values = [], list(values)
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        out.append(f"{values[i]}(x{j - i})" if j - i > 1 else str(values[i]))
        i = j
    return ",".join(out)


def level_names(num_levels: int, node_level: int | None) -> list[str]:
    """Names of levels ``0..num_levels`` (0: the same PE); see the module docstring."""
    names = ["same core"]
    for t in range(1, num_levels + 1):
        if node_level is None:
            names.append(f"level {t}")
        elif t == node_level - 1:
            names.append("same processor")
        elif t == node_level:
            names.append("same node")
        elif t == node_level + 1:
            names.append("between nodes")
        elif t == node_level + 2:
            names.append("between racks")
        else:
            names.append(f"level {t}")
    return names


def traffic_text(level_traffic, topology) -> str:
    """``"same core 0 | same processor 1,200 | same node 300 | between nodes 80"``:
    traffic per level of ``topology`` (its ``node_level``, if any, names the levels)."""
    names = level_names(len(level_traffic) - 1, getattr(topology, "node_level", None))
    return " | ".join(f"{name} {num(v)}" for name, v in zip(names, level_traffic))


def show_number(value) -> str:
    """A number for an error message: ``4`` for integral values, else the float's repr."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)
