"""MPICH (Hydra) and Intel MPI machinefiles, CPU lists and launch lines.

A machinefile lists ``host:count`` runs in rank order: the first ``count`` ranks on
``host``, the next run on the next line. Consecutive ranks on
one host are merged into one run.

The two launchers differ where the rank order *interleaves* hosts (a host
re-appears after another one; verified):

* MPICH's Hydra starts one proxy per contiguous block and treats every block as a
  separate node: no shared-memory transport between blocks of the same host, and
  node-local rank ids restart in every block. procmap warns and indexes MPICH CPU
  lists by the rank's position within its block.
* Intel MPI (``-machinefile``) merges the blocks of a host into one node; its CPU
  lists are indexed by the host-wide local rank.

Both bind through one list indexed by node-local rank (``-bind-to user:3,1,...``,
``I_MPI_PIN_PROCESSOR_LIST=3,1,...``) that applies to *every* node. When the nodes
need different lists there is no single-list form: Intel MPI takes one ``-host`` /
``-env`` pair per MPMD argument set, MPICH 5.0.2 rejected per-block ``-host``
(verified), so MPICH jobs then run unbound. The Intel MPI form follows Intel's
documented syntax (Intel MPI Library Developer Reference, "Local Hydra Options":
``-n``, ``-host`` and ``-env`` are local options that apply to the argument set they
appear in, sets separated by ``:``); it is **unverified**: neither procmap's tests nor
CI ran it against Intel MPI, nor checked that each set's ``I_MPI_PIN_PROCESSOR_LIST``
is honoured.

The launch lines start with the ``mpiexec`` name the caller passes (see
:func:`.mpi_detect.pick_launcher`): on a machine with both MPIs, ``mpiexec`` is often
Open MPI's and MPICH's Hydra is ``mpiexec.hydra``.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from procmap.formats import atomic_write
from procmap.options import MPICH_FLAVORS

from .placement import common_list, cpu_lists, format_cpus, interleaved_hosts, runs

__all__ = ["FLAVORS", "HydraPlan", "machinefile_text", "write_machinefile", "plan_hydra"]

FLAVORS = MPICH_FLAVORS


def machinefile_text(hosts: Sequence[str], run_list: Sequence[tuple[int, int]]) -> str:
    """``host:count`` per run, in rank order."""
    return "".join(f"{hosts[node]}:{count}\n" for node, count in run_list)


def write_machinefile(path: str | os.PathLike, hosts: Sequence[str],
                      run_list: Sequence[tuple[int, int]]) -> None:
    """Write :func:`machinefile_text` atomically."""
    text = machinefile_text(hosts, run_list)
    with atomic_write(path) as fh:
        fh.write(text)


@dataclass
class HydraPlan:
    """Everything the ``machinefile`` command reports.

    Attributes
    ----------
    flavor:
        ``"mpich"`` or ``"intel"``.
    runs:
        ``(node, count)`` per machinefile line.
    interleaved:
        Nodes that appear in more than one run.
    lists:
        ``(label, cpus)`` per binding group: per run for MPICH (Hydra's node = a
        block), per host for Intel MPI; ``cpus[i]`` is the core of the group's
        ``i``-th rank.
    common:
        The one list that serves every group, or ``None`` when the groups differ.
    commands:
        ``(label, command line)`` to print.
    warnings, notes:
        Lines for stderr (warnings) and stdout (how to use the lists).
    """

    flavor: str
    runs: list
    interleaved: list
    lists: list
    common: list | None
    commands: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def plan_hydra(flavor: str, hosts: Sequence[str], node_of_rank: np.ndarray, cores: np.ndarray,
               machinefile: str, app: str = "./app", mpiexec: str = "mpiexec") -> HydraPlan:
    """Work out runs, CPU lists and launch lines for ``flavor`` (see module docstring).

    ``mpiexec`` is the launcher printed as each line's first word (shell-quoted); the
    caller picks it, this function runs nothing.
    """
    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
    node_of_rank = np.asarray(node_of_rank)
    n = int(node_of_rank.size)
    run_list = runs(node_of_rank)
    repeated = interleaved_hosts(run_list)
    if flavor == "mpich":
        # Hydra's local rank restarts in every block: group ranks by run index.
        counts = [count for _, count in run_list]
        by_group = cpu_lists(np.repeat(np.arange(len(run_list)), counts), cores)
        lists, start = [], 0
        for i, (node, count) in enumerate(run_list):
            lists.append((f"{hosts[node]} (ranks {start}-{start + count - 1})", by_group[i]))
            start += count
    else:
        by_group = cpu_lists(node_of_rank, cores)
        lists = [(hosts[node], cpus) for node, cpus in sorted(by_group.items())]
    common = common_list([cpus for _, cpus in lists])
    plan = HydraPlan(flavor, run_list, repeated, lists, common)
    mf = shlex.quote(machinefile)
    mx = shlex.quote(mpiexec)

    if repeated and flavor == "mpich":
        names = ", ".join(hosts[i] for i in repeated[:4]) + (", ..." if len(repeated) > 4 else "")
        plan.warnings.append(
            f"the placement interleaves hosts ({names} appear in several runs of the machinefile): "
            "MPICH's Hydra treats every run as a separate node (no shared memory between runs of "
            "one host, local ranks restart per run); launch host-grouped and reorder ranks in the "
            "application (comm.Split), or use --flavor intel, which merges the runs of a host")

    if flavor == "mpich":
        if common is not None:
            binding = f"-bind-to user:{format_cpus(common)}"
            plan.commands.append(("MPICH", f"{mx} -f {mf} -n {n} {binding} {app}"))
            plan.notes.append("the -bind-to user: list is indexed by node-local rank and is the same "
                              "on every node")
        else:
            plan.commands.append(("MPICH", f"{mx} -f {mf} -n {n} {app}"))
            plan.notes.append("the nodes need different CPU lists (the cpus lists, indexed by local rank), but "
                              "Hydra applies one -bind-to user: list to every node and MPICH rejects "
                              "per-host -host in MPMD form: this launch places ranks on the right "
                              "hosts without binding; bind in the application, or use Slurm "
                              "(procmap slurm) or Intel MPI (--flavor intel)")
    else:
        if common is not None:
            plan.commands.append(("Intel MPI", f"I_MPI_PIN_PROCESSOR_LIST={format_cpus(common)} "
                                               f"{mx} -machinefile {mf} -n {n} {app}"))
            plan.notes.append("I_MPI_PIN_PROCESSOR_LIST is indexed by node-local rank and is the "
                              "same on every node; use -machinefile (-f ignores the :count suffixes)")
        else:
            # One MPMD argument set per run, each with its host's whole list: Intel MPI
            # indexes the list by the host-wide local rank (runs of a host are merged).
            per_host = dict(cpu_lists(node_of_rank, cores))
            sets = [f"-n {count} -host {shlex.quote(hosts[node])} -env I_MPI_PIN_PROCESSOR_LIST "
                    f"{format_cpus(per_host[node])} {app}" for node, count in run_list]
            plan.commands.append(("Intel MPI", f"{mx} " + " : ".join(sets)))
            plan.notes.append("the nodes need different CPU lists: one MPMD argument set per "
                              "machinefile run, each with -host and its host's "
                              "I_MPI_PIN_PROCESSOR_LIST; this form is UNVERIFIED: it follows "
                              "Intel MPI's documented syntax (-n, -host and -env are local "
                              "options of an argument set) but was never run against Intel MPI "
                              f"by procmap; without binding: {mx} -machinefile {mf} -n {n} {app}")
    return plan
