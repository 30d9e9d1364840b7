"""HPE Cray MPICH rank-order files (``MPICH_RANK_REORDER_METHOD=3``) and launch lines.

Format (what procmap writes and :func:`parse_rank_order` reads back)
--------------------------------------------------------------------
A rank-order file lists MPI ranks, comma-separated, in *slot order*: the ``i``-th
rank listed goes into the ``i``-th slot (Slurm task) of the job step, the slots
numbered node by node as srun's default block distribution lays them out. procmap
writes one node per line (the node's slots in order), ranges of three or more
consecutive ids as ``a-b`` (``0,1,2,3,8`` -> ``0-3,8``), and one ``#`` comment
line on top. Cray MPICH reads the file named ``MPICH_RANK_ORDER`` in the job's
working directory, or the file named by ``MPICH_RANK_REORDER_FILE``.

Sources relied on (HPE documents by name, plus one site's user guide):

* HPE Cray MPICH man page ``intro_mpi(3)``, section on ``MPICH_RANK_REORDER_METHOD``
  (value 3: custom placement from the file ``MPICH_RANK_ORDER``), as referenced
  by the ``grid_order(1)`` man page of HPE Cray Performance Tools: ``grid_order``
  "generates rank order information in the appropriate format" for a file named
  ``MPICH_RANK_ORDER`` used with ``MPICH_RANK_REORDER_METHOD`` 3; its output, meant
  to be saved as that file unchanged, is comma-separated rank lists, one line per
  node, preceded by ``#`` comment lines (hence the header line procmap writes).
* LUMI user documentation, "MPI rank redistribution with Cray MPICH": method 3
  takes "a comma-separated list of the MPI ranks in the order they should be
  assigned to slots on the nodes"; "the default filename MPICH_RANK_ORDER can be
  overwritten through the environment variable MPICH_RANK_REORDER_FILE"; its
  example runs ``srun -n 8 ... -m block`` with the file ``0,1,4,5,2,3,6,7`` and
  warns that reordering "does not always work well if Slurm is not using the
  (default) block ordering". Ranges (``0-15``) are the intro_mpi form; procmap
  writes ascending ranges only.

The launch line is therefore ``srun`` (Cray EX systems with Slurm), with block
distribution and, when every node gets the same number of ranks,
``--ntasks-per-node`` so that the file's lines are the step's nodes. Node names
are not in the file: hosts, when given, only count the nodes.

Scattered orders
----------------
Cray MPICH's PMI describes which node every rank is on with a
``PMI_process_mapping`` value, ``(vector,(node,nodes,ranks_per_node),...)``: one
triple per block of consecutive ranks that fill consecutive nodes evenly (the
format of PMI-1 / Flux RFC 13). A PMI value is at most 1024 bytes by the de-facto
PMI-1 limit, and a field report has cray-mpich 9.1 fail in ``MPI_Init`` once a
reordered job's mapping is longer. procmap calls an order *scattered* when the
estimated mapping (:func:`pmi_process_mapping`, built from the runs of
consecutive ranks that share a node) exceeds :data:`PMI_VALUE_MAX` bytes, and
warns. A node-contiguous order (every node's ranks one range) encodes in one
triple per group of equal nodes, so it never is; a 3D stencil's blocks spread
over more than 16 nodes usually are (each node holds many short rank ranges).
The rank ids are the application's, so procmap cannot make the order contiguous
without renumbering the application's ranks.
"""
from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from procmap.errors import FormatError, ProcmapError
from procmap.formats import atomic_write
from procmap.textfmt import plural, runlength

__all__ = ["DEFAULT_NAME", "PMI_VALUE_MAX", "RankOrderPlan", "compress_ranges", "parse_rank_order",
           "slot_lines", "rank_order_text", "write_rank_order", "pmi_process_mapping",
           "placeholder_hosts", "plan_rankorder"]

#: The file Cray MPICH reads with method 3 unless MPICH_RANK_REORDER_FILE names another.
DEFAULT_NAME = "MPICH_RANK_ORDER"

#: The de-facto PMI-1 limit on one value (bytes), PMI_process_mapping included.
PMI_VALUE_MAX = 1024

# A run of at least this many consecutive ids is written a-b ("4,5" is as short as "4-5").
_MIN_RANGE = 3

_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")


# ------------------------------------------------------------------- format
def compress_ranges(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``: runs of three or more ascending
    consecutive ids as ``a-b``, the order of ``ranks`` kept."""
    ranks = [int(r) for r in ranks]
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i + 1 >= _MIN_RANGE:
            out.append(f"{ranks[i]}-{ranks[j]}")
        else:
            out.extend(str(r) for r in ranks[i:j + 1])
        i = j + 1
    return ",".join(out)


def parse_rank_order(text: str, path: str | None = None) -> list[list[int]]:
    """The ranks of every non-empty, non-comment line of a rank-order file.

    Accepts what :func:`rank_order_text` writes: comma-separated ids and ascending
    ``a-b`` ranges, ``#`` comment lines. Raises :class:`FormatError` otherwise."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        ranks: list[int] = []
        for item in line.split(","):
            match = _ITEM.match(item.strip())
            if not match:
                raise FormatError(f"bad rank or range {item.strip()!r}", path, number)
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            if last < first:
                raise FormatError(f"descending range {item.strip()!r}", path, number)
            ranks.extend(range(first, last + 1))
        lines.append(ranks)
    return lines


def slot_lines(node_of_rank, core_of_rank) -> list[list[int]]:
    """One list per *used* node, in node order: its ranks by node-local core.

    That is slot order: srun's block layout numbers a node's tasks 0, 1, ... and
    procmap's canonical core numbering keeps the node's ranks in core order.
    Nodes without ranks are left out (the step runs on the used nodes only)."""
    node = np.asarray(node_of_rank, dtype=np.int64)
    core = np.asarray(core_of_rank, dtype=np.int64)
    order = np.lexsort((core, node))
    lines, start = [], 0
    for count in np.bincount(node)[np.unique(node)] if node.size else []:
        lines.append(order[start:start + count].tolist())
        start += count
    return lines


def rank_order_text(lines: Sequence[Sequence[int]]) -> str:
    """The file: a ``#`` header, then one line of :func:`compress_ranges` per node."""
    n = sum(len(line) for line in lines)
    header = (f"# procmap rankorder: {plural(n, 'rank')} on {plural(len(lines), 'node')}, "
              "one line per node in slot order (MPICH_RANK_REORDER_METHOD=3)\n")
    return header + "".join(compress_ranges(line) + "\n" for line in lines)


def write_rank_order(path: str | os.PathLike, lines: Sequence[Sequence[int]]) -> None:
    """Write :func:`rank_order_text` atomically (complete or not at all)."""
    text = rank_order_text(lines)
    with atomic_write(path) as fh:
        fh.write(text)


# ------------------------------------------------------------ PMI estimate
def pmi_process_mapping(lines: Sequence[Sequence[int]]) -> str:
    """The ``(vector,(node,nodes,ppn),...)`` value describing where each rank runs.

    Node ``i`` is line ``i``. Ranks are walked in id order; each maximal run of
    consecutive ranks on one node is a block, and a block that continues the
    previous triple (next node, same count) extends it. An estimate of what the
    PMI gives Cray MPICH, used to flag scattered orders."""
    n = sum(len(line) for line in lines)
    node_of = np.empty(n, dtype=np.int64)
    for i, line in enumerate(lines):
        node_of[np.asarray(line, dtype=np.int64)] = i
    triples: list[list[int]] = []
    r = 0
    while r < n:
        s = r
        while r + 1 < n and node_of[r + 1] == node_of[s]:
            r += 1
        node, count = int(node_of[s]), r - s + 1
        last = triples[-1] if triples else None
        if last is not None and last[2] == count and last[0] + last[1] == node:
            last[1] += 1
        else:
            triples.append([node, 1, count])
        r += 1
    return "(vector," + ",".join(f"({a},{b},{c})" for a, b, c in triples) + ")"


def rank_ranges(lines: Sequence[Sequence[int]]) -> int:
    """How many ranges of consecutive ids the nodes' rank sets form in total
    (equal to the node count for a node-contiguous order)."""
    total = 0
    for line in lines:
        ids = np.sort(np.asarray(line, dtype=np.int64))
        total += 1 + int(np.count_nonzero(np.diff(ids) != 1)) if ids.size else 0
    return total


# ------------------------------------------------------------------ hosts
def placeholder_hosts(nodes: int | None, node_level: int | None, topology):
    """``(names, source)`` of the nodes when no host list is given.

    The rank-order file names no host, so only the count matters: ``--nodes N``,
    or the nodes of the hierarchy above ``--node-level L``."""
    if nodes is None and node_level is None:
        raise ProcmapError("rankorder needs the node count: --nodes N, --node-level L, "
                           "--hosts or --hostfile")
    if nodes is None:
        levels = getattr(topology, "levels", None)
        if levels is None or not 0 <= node_level <= len(levels):
            return ["node0"], f"--node-level {node_level}"  # layout_hosts reports it
        nodes = int(np.prod(levels[node_level:], dtype=np.int64))
        source = f"--node-level {node_level}"
    else:
        if nodes < 1:
            raise ProcmapError(f"--nodes {nodes}: expected at least 1 node")
        source = f"--nodes {nodes}"
    return [f"node{i}" for i in range(nodes)], source


# -------------------------------------------------------------------- plan
@dataclass
class RankOrderPlan:
    """Everything the ``rankorder`` command reports.

    Attributes
    ----------
    lines:
        Ranks per used node, in slot order (the file's lines).
    counts:
        Ranks per used node.
    ranges:
        Rank ranges over all nodes (:func:`rank_ranges`).
    pmi_bytes:
        Length of the estimated ``PMI_process_mapping`` value.
    scattered:
        ``pmi_bytes > PMI_VALUE_MAX``.
    env:
        ``export`` lines to run before srun.
    commands, warnings, notes:
        Launch lines; lines for stderr; lines for stdout.
    """

    lines: list
    counts: list
    ranges: int
    pmi_bytes: int
    scattered: bool
    env: list = field(default_factory=list)
    commands: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def env_lines(output: str, cwd: str | None = None) -> list[str]:
    """``export MPICH_RANK_REORDER_METHOD=3``, plus ``MPICH_RANK_REORDER_FILE`` (absolute)
    unless ``output`` is ``MPICH_RANK_ORDER`` in ``cwd`` (the file Cray MPICH reads)."""
    cwd = os.getcwd() if cwd is None else cwd
    path = os.path.abspath(os.path.join(cwd, output))
    lines = ["export MPICH_RANK_REORDER_METHOD=3"]
    if path != os.path.join(os.path.abspath(cwd), DEFAULT_NAME):
        lines.append(f"export MPICH_RANK_REORDER_FILE={shlex.quote(path)}")
    return lines


def plan_rankorder(node_of_rank, core_of_rank, output: str, app: str = "./app",
                   cwd: str | None = None) -> RankOrderPlan:
    """Lines, environment, launch line, warnings for a placement (see module docstring)."""
    lines = slot_lines(node_of_rank, core_of_rank)
    counts = [len(line) for line in lines]
    mapping = pmi_process_mapping(lines)
    plan = RankOrderPlan(lines, counts, rank_ranges(lines), len(mapping),
                         len(mapping) > PMI_VALUE_MAX, env_lines(output, cwd))
    n, k = sum(counts), len(lines)
    if len(set(counts)) == 1:
        plan.commands.append(("", f"srun -N {k} -n {n} --ntasks-per-node={counts[0]} "
                                  f"--distribution=block {app}"))
    else:
        plan.commands.append(("", f"srun -N {k} -n {n} --distribution=block {app}"))
        plan.warnings.append(
            f"the nodes get different rank counts ({runlength(counts)}): srun must start "
            "exactly these counts, in this node order, or the file's lines will not be the "
            "nodes; fill every node (--ntasks equal to the slots) to get one count per node")
    if plan.scattered:
        plan.warnings.append(
            f"scattered rank order: the ranks of the {plural(k, 'node')} form "
            f"{plural(plan.ranges, 'range')} of consecutive ids, so the PMI_process_mapping "
            f"that describes them is about {plan.pmi_bytes:,} bytes, over the {PMI_VALUE_MAX} "
            "of a PMI value; cray-mpich 9.1 was reported to fail in MPI_Init for such orders: "
            "try a short job first, or keep the launch order and renumber the ranks inside "
            "the application (procmap.launcher_hooks.mpi.reorder)")
    plan.notes.append("method 3 needs srun's default block distribution; the file gives the "
                      "rank of every slot, the cores are srun's (--cpu-bind) choice")
    if len(plan.env) == 1:
        plan.notes.append(f"Cray MPICH reads {DEFAULT_NAME} in the job's working directory: "
                          "run srun from this directory")
    return plan
