"""Engine variants for side-by-side benchmark runs: a preset with context fields replaced.

A variant is written ``preset[path=value;path=value]``::

    hm[initial.stalled_start=random]
    im[fm.max_work=3;initial.uncoarsened.fm.passes=4]

Each dotted path names a field of the preset's frozen :class:`procmap.engines.context.Context`,
through its nested contexts; a value is read as a Python literal (numbers, tuples,
``True``/``False``/``None``) or else taken as a string. A plain engine name (``hm``,
``hm-ultra``, ``im``, ``auto``) is its preset. Comparing a variant with its preset in one
run, on one machine, is how a tuning change is measured (ratios, not absolute times).
"""
from __future__ import annotations

import ast
import dataclasses

from procmap.engines.context import Context, preset


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of engine specs; commas inside brackets stay."""
    out, depth, word = [], 0, []
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append("".join(word).strip())
            word = []
        else:
            word.append(ch)
    out.append("".join(word).strip())
    return [w for w in out if w]


def context_of(spec: str) -> Context:
    """The context of an engine spec (``hm``, or ``hm[initial.stalled_start=random]``).

    Raises ``ValueError`` for an unknown preset, field path or malformed spec.
    """
    name, _, rest = spec.partition("[")
    ctx = preset(name.strip())
    if not rest:
        return ctx
    if not rest.endswith("]"):
        raise ValueError(f"engine spec {spec!r}: missing ']'")
    for assignment in filter(None, (a.strip() for a in rest[:-1].split(";"))):
        path, eq, raw = assignment.partition("=")
        if not eq:
            raise ValueError(f"engine spec {spec!r}: {assignment!r} is not path=value")
        ctx = _replace_path(ctx, path.strip().split("."), _value(raw.strip()), spec)
    return ctx


def _value(raw: str):
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def _replace_path(obj, path: list[str], value, spec: str):
    """``obj`` (a frozen dataclass) with the field at ``path`` set to ``value``."""
    field = path[0]
    if not dataclasses.is_dataclass(obj) or field not in {f.name for f in dataclasses.fields(obj)}:
        raise ValueError(f"engine spec {spec!r}: {type(obj).__name__} has no field {field!r}")
    if len(path) > 1:
        value = _replace_path(getattr(obj, field), path[1:], value, spec)
    return dataclasses.replace(obj, **{field: value})
