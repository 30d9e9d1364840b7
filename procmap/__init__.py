"""procmap: communication-aware placement of MPI ranks on hierarchical machines.

Core objects: :class:`CommGraph` (symmetric communication matrix in CSR form),
:class:`~procmap.topology.Hierarchy` (machine model), :func:`evaluate` (J, cut,
traffic per level, balance) and :class:`Mapping`.
"""
__version__ = "0.1.0"

from .errors import CapacityError, FormatError, InputError, ProcmapError, TopologyError
from .graph import CommGraph
from .objective import Evaluation, evaluate
from .mapping import Mapping
from .api import map_tasks

__all__ = [
    "CommGraph", "Evaluation", "Mapping", "evaluate", "map_tasks",
    "ProcmapError", "InputError", "FormatError", "TopologyError", "CapacityError",
    "__version__",
]
