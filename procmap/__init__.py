"""procmap: communication-aware placement of MPI ranks on hierarchical machines.

Core objects: :class:`CommGraph` (symmetric communication matrix in CSR form),
:class:`~procmap.topology.Hierarchy` (machine model), :func:`evaluate` (J, cut,
traffic per level, balance), :func:`map_tasks` and :class:`Mapping`; the engines'
configuration: :class:`Context`, its named presets :data:`PRESETS` and :func:`preset`.

The heavy names (everything but the exceptions) are imported on first use
(PEP 562), so that ``import procmap.topology`` or ``procmap --version`` does not
load NumPy's sparse matrices, Numba or the engines (docs/design.md section 5).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import blas_probe
from .errors import CapacityError, FormatError, InputError, ProcmapError, TopologyError

blas_probe.install()

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    "CommGraph": ".graph",
    "Evaluation": ".objective",
    "evaluate": ".objective",
    "Mapping": ".mapping",
    "map_tasks": ".api",
    "Context": ".engines.context",
    "preset": ".engines.context",
    "PRESETS": ".engines.context",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported eagerly
    from .api import map_tasks
    from .engines.context import PRESETS, Context, preset
    from .graph import CommGraph
    from .mapping import Mapping
    from .objective import Evaluation, evaluate

__all__ = [
    "CommGraph", "Evaluation", "Mapping", "evaluate", "map_tasks", "Context", "preset",
    "PRESETS",
    "ProcmapError", "InputError", "FormatError", "TopologyError", "CapacityError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
