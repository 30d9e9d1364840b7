"""The ``slurm`` command's normal path: ``SLURM_HOSTFILE`` (and ``map_cpu`` lists, a
rank map) from the allocation in the Slurm environment or ``--hosts``/``--hostfile``.

The allocation gives the hosts, their CPUs and the task count (:func:`slurm_hosts`,
:func:`slurm_ntasks`) and, without ``--hierarchy``, the machine itself
(:func:`slurm_machine`); reading and mapping run under ``--timeout`` in a child
process (:func:`.slurm.run_with_deadline`); :func:`slurm_outputs` writes the files
and :func:`print_slurm` reports them. Prolog mode (:mod:`.prolog`) reuses these
steps with its own fallback; this module does not know about it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable

import numpy as np

from procmap.errors import ProcmapError, TopologyError
from procmap.limits import is_decimal_number
from procmap.topology import SlurmAllocation, detect_slurm

from . import slurm
from .pipeline import (HostSpec, Placed, check_ntasks, check_outputs, check_slots,
                       hosts_from_args, layout_hosts, place, print_commands, print_lists,
                       progress_for, read_job_graph, summary, summary_json)
from .placement import HostLayout

__all__ = ["slurm_hosts", "slurm_ntasks", "slurm_machine", "slurm_outputs", "print_slurm",
           "slurm_map", "parse_timeout", "budget_start", "cmd_slurm"]


def slurm_hosts(args) -> tuple[HostSpec, SlurmAllocation | None]:
    """``--hosts``/``--hostfile`` override the allocation read from the environment."""
    given = hosts_from_args(args)
    if given is not None:
        try:
            alloc = detect_slurm()  # still wanted for SLURM_NTASKS
        except TopologyError:
            alloc = None  # the hosts were given: a broken node list does not matter
        return given, alloc
    alloc = detect_slurm()
    if alloc is None:
        raise TopologyError("not inside a Slurm job (neither SLURM_JOB_NODELIST nor SLURM_NODELIST "
                            "is set): give --hosts or --hostfile")
    var = "SLURM_JOB_NODELIST" if os.environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    return HostSpec(alloc.hosts, alloc.cpus_per_node, f"Slurm ({var})"), alloc


def slurm_ntasks(args, alloc: SlurmAllocation | None) -> tuple[int | None, str]:
    if args.ntasks is not None:
        return args.ntasks, "--ntasks"
    if alloc is not None and alloc.ntasks is not None:
        return alloc.ntasks, "SLURM_NTASKS"
    return None, ""


def slurm_machine(args, machine: Callable, hosts: HostSpec, alloc: SlurmAllocation | None):
    """``--hierarchy`` if given; else the allocation itself (cpus:nodes, node level 1)."""
    from_env = alloc is not None and hosts.names == alloc.hosts
    if (args.hierarchy or args.distance_matrix or getattr(args, "topology", None) or not from_env
            or alloc.cpus_per_node is None):
        return machine(args)
    h = alloc.hierarchy(distances=args.distance)
    if args.node_level is None:
        args.node_level = h.node_level  # one node per allocated host, by construction
    return h


def slurm_outputs(args, placed_node: np.ndarray, placed_core: np.ndarray,
                   hosts: tuple[str, ...]) -> dict:
    """Write the hostfile (and the rank map) and work out the srun lines."""
    n = int(placed_node.size)
    lists = slurm.per_node_cpu_lists(hosts, placed_node, placed_core)
    common = slurm.common_cpu_list(lists)
    # A partial node: map_cpu's node-local cores are not the step's CPUs there, and
    # srun refuses the step; the wrapper binds core c to the c-th CPU the step owns.
    partial = args.cpu_bind and common is not None and slurm.step_is_partial()
    wrap = args.cpu_bind and (common is None or partial)
    rank_map = args.rank_map
    if wrap and rank_map is None:
        rank_map = args.output + ".ranks"  # needed by the TaskProlog to bind per task
    hostfile = os.path.abspath(args.output)
    commands: list[tuple[str, str]] = []
    notes: list[str] = []
    if partial:
        notes.append("this job holds only part of this node's CPUs, where srun refuses "
                     "--cpu-bind=map_cpu: with node-local cores ('CPU binding outside of job "
                     "step allocation'): procmap_bind.sh binds instead")
    if wrap:
        exports = (f"export SLURM_HOSTFILE={hostfile} PROCMAP_RANK_MAP={os.path.abspath(rank_map)} "
                   "PROCMAP_BIND=1")
        commands.append(("", exports))
        commands.append(("", slurm.srun_line(n, None, args.app, slurm.taskprolog_path(),
                                             slurm.bind_wrapper_path())))
        if common is None:
            notes.append("the nodes need different map_cpu lists, but srun applies one list "
                         "to every node: the TaskProlog exports each task's core from the rank "
                         "map (PROCMAP_CPU) and procmap_bind.sh binds the task to it before it "
                         "execs the application (works on Slurm 22.05 to 24.x)")
    else:
        commands.append(("", f"export SLURM_HOSTFILE={hostfile}"))
        commands.append(("", slurm.srun_line(n, common if args.cpu_bind else None, args.app)))
        if rank_map is not None:
            notes.append(f"for in-application use, export PROCMAP_RANK_MAP={os.path.abspath(rank_map)} "
                         f"and add --task-prolog={slurm.taskprolog_path()}")
    if wrap:
        notes.append("on a partial node procmap_bind.sh binds core c to the c-th CPU the step "
                     "owns there; a task it cannot bind runs unbound after one "
                     "'procmap_bind: ...' line on stderr")
    elif args.cpu_bind:
        notes.append("map_cpu bindings are honoured only when the step has every CPU of its nodes "
                     "(whole nodes, e.g. sbatch --exclusive); check with --cpu-bind=verbose")
    notes.append("export SLURM_HOSTFILE only around this srun: at submission it clashes with "
                 "--nodes")
    check_outputs(args, rank_map)  # again here: the prolog fallback writes through this too
    slurm.write_hostfile(args.output, hosts, placed_node)
    if rank_map is not None:
        slurm.write_rank_map(rank_map, hosts, placed_node, placed_core)
    return {"hostfile": args.output, "rank_map": rank_map, "cpu_lists": lists,
            "common_cpu_list": common, "commands": commands, "notes": notes}


def print_slurm(args, placed: Placed | None, hosts: HostSpec, out: dict,
                 fallback: str | None) -> None:
    if args.json:
        result = summary_json(args, placed, hosts) if placed is not None else {
            "graph": args.graph, "hosts": list(hosts.names), "host_source": hosts.source}
        result.update({"output": out["hostfile"], "rank_map": out["rank_map"],
                       "cpu_lists": [{"group": h, "cpus": c} for h, c in out["cpu_lists"]],
                       "common_cpu_list": out["common_cpu_list"],
                       "commands": [c for _, c in out["commands"]], "notes": out["notes"],
                       "fallback": fallback})
        print(json.dumps(result, indent=2))
        return
    if placed is not None:
        for line in summary(args, placed, hosts):
            print(line)
    n = sum(len(c) for _, c in out["cpu_lists"])
    print(f"wrote     {out['hostfile']}: one host per rank ({n} ranks)"
          + (f", rank map {out['rank_map']}" if out["rank_map"] else "")
          + (" [fallback: block placement]" if fallback else ""))
    if args.cpu_bind:
        print_lists("cpus      node-local rank (SLURM_LOCALID) -> core, per node", out["cpu_lists"])
    print_commands(out["commands"])
    for note in out["notes"]:
        print(f"note: {note}")


def slurm_map(args, layout: HostLayout, hosts: HostSpec, graph, progress) -> Placed:
    """Check the slots and map ``graph``: with :func:`.pipeline.read_job_graph`, what runs under
    the deadline (in a child process, see :func:`.slurm.run_with_deadline`)."""
    check_slots(graph, layout, hosts)
    return place(args, layout, graph, progress)


def _slurm_run(args, machine: Callable, progress_class, deadline: float | None) -> int:
    """The normal path: allocation and layout here, reading and mapping under
    ``deadline`` (``None``: no limit), then the outputs and the report."""
    check_outputs(args)  # before anything is read
    hosts, alloc = slurm_hosts(args)
    ntasks, source = slurm_ntasks(args, alloc)
    layout = layout_hosts(args, slurm_machine(args, machine, hosts, alloc), hosts)
    if ntasks is not None:
        check_ntasks(ntasks, source, layout)  # before the (possibly long) read
    progress = progress_for(args, progress_class)

    def read_and_map() -> Placed:
        return slurm_map(args, layout, hosts, read_job_graph(args, ntasks, source, layout), progress)
    placed = slurm.run_with_deadline(read_and_map, deadline)
    out = slurm_outputs(args, placed.node, placed.core, layout.hosts)
    print_slurm(args, placed, hosts, out, None)
    return 0


# The largest --timeout: a day is more than any launcher step needs.
_MAX_TIMEOUT = 86400.0


def parse_timeout(text: str | float) -> float:
    """``--timeout``: seconds, a finite number > 0 (plain notation, at most a day)."""
    value = str(text).strip()
    seconds = float(value) if is_decimal_number(value) else float("nan")
    if not 0 < seconds <= _MAX_TIMEOUT:  # also false for nan
        raise ProcmapError(f"--timeout {text}: expected a number of seconds > 0 and at most "
                           f"{_MAX_TIMEOUT:g}, e.g. 20 or 2.5")
    return seconds


def budget_start() -> float:
    """The :func:`time.monotonic` value ``--timeout`` counts from: the start of this
    process when it is the ``procmap`` command (start-up and imports count, as they
    do for a prolog's wall clock), else now (called from Python)."""
    now = time.monotonic()
    program = sys.argv[0] if sys.argv else ""
    is_procmap = (os.path.basename(program) == "procmap"
                  or program.endswith(os.path.join("procmap", "__main__.py")))
    age = slurm.process_age() if is_procmap else None
    return now - age if age is not None else now


def cmd_slurm(args, *, machine: Callable, progress_class) -> int:
    """``procmap slurm`` outside a prolog context (``procmap.launcher_hooks.cli`` sends
    a prolog's run to :func:`.prolog.slurm_prolog` instead)."""
    timeout = None if args.timeout is None else parse_timeout(args.timeout)
    deadline = None if timeout is None else budget_start() + timeout
    try:
        return _slurm_run(args, machine, progress_class, deadline)
    except slurm.MappingTimeout:
        from procmap.kernels.backend import kernel_cache_is_warm

        hint = ("" if kernel_cache_is_warm() else
                " (the kernel cache is cold: the first run compiles for about a minute; run "
                "procmap warmup first)")
        raise ProcmapError(f"reading and mapping did not finish within --timeout {timeout:g} s; "
                           f"nothing written{hint} (with --prolog, procmap falls back to the "
                           "block placement instead)") from None
