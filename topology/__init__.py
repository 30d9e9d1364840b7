"""Machine model of procmap (installed as ``procmap.topology``).

- :class:`Hierarchy` -- regular hierarchies ``a1:...:al`` with per-level distances;
- :class:`DistanceMatrix` -- general machines given by an explicit distance matrix;
- host lists (Slurm hostlist expressions, CPU counts, MPI hostfiles);
- Scotch ``tleaf`` import/export;
- detection of the local node (sysfs) and of a Slurm allocation (environment);
- hwloc XML exports (``lstopo --of xml``, v1 and v2).
"""
from .hierarchy import Hierarchy
from .distance_matrix import DistanceMatrix, Topology, is_hierarchy
from .hostlist import (check_host_name, compress_hostlist, expand_hostlist, parse_cpus_per_node,
                       read_hostfile)
from .tleaf import from_tleaf, read_tleaf, to_tleaf, write_tleaf
from .detect import (LocalMachine, SlurmAllocation, describe, detect_local, detect_slurm,
                     parse_cpu_list)
from .hwloc import HwlocMachine, read_hwloc

__all__ = [
    "Hierarchy",
    "DistanceMatrix", "Topology", "is_hierarchy",
    "check_host_name", "expand_hostlist", "compress_hostlist", "parse_cpus_per_node",
    "read_hostfile",
    "to_tleaf", "from_tleaf", "read_tleaf", "write_tleaf",
    "LocalMachine", "SlurmAllocation", "detect_local", "detect_slurm", "describe",
    "parse_cpu_list",
    "HwlocMachine", "read_hwloc",
]
