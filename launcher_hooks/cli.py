"""The launcher subcommands of ``procmap``: ``rankfile``, ``machinefile`` and ``slurm``.

All three share one pipeline: hosts (``--hosts``, ``--hostfile`` or the Slurm
environment) and a hierarchy give a :class:`~.placement.HostLayout`; the graph is
mapped with rank placement (never more ranks than slots, never worse than the block
placement); the cores inside every node are renumbered canonically (same J, see
:func:`~.placement.canonical_cores`); then each command writes its launcher's file
atomically and prints the launch line. Bad input is a :class:`ProcmapError` (one
line, exit 2, nothing written) -- except for ``procmap slurm`` in a prolog, which
falls back to the block placement and exits 0.

:func:`register` is called by ``procmap.cli.build_parser`` with the helpers of
``procmap.cli`` as arguments, so that this module never imports ``procmap.cli``.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import textwrap
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from procmap import baselines
from procmap.api import ENGINES, map_tasks
from procmap.errors import CapacityError, ProcmapError, TopologyError
from procmap.formats import GRAPH_FORMATS, read_graph
from procmap.limits import MAX_TASKS, is_decimal_int, is_decimal_number
from procmap.formats.atomic import check_output
from procmap.objective import Evaluation, evaluate
from procmap.topology import (Hierarchy, SlurmAllocation, check_host_name, describe,
                              detect_slurm, expand_hostlist, read_hostfile)

from . import mpich, openmpi, slurm
from .placement import (HostLayout, canonical_cores, check_one_rank_per_core, format_cpus,
                        host_layout, locate, merge_host_slots)

__all__ = ["register"]

# Text reports list at most this many per-node CPU lists; --json lists all.
_MAX_LISTED = 8


# ------------------------------------------------------------------ helpers
@dataclass(frozen=True)
class HostSpec:
    """Hosts in node order, their slot counts if known, and where they came from."""

    names: tuple[str, ...]
    slots: tuple[int, ...] | None
    source: str


@dataclass
class Placed:
    """A mapped job: what every launcher file is written from."""

    layout: HostLayout
    n: int
    edges: int
    pes: np.ndarray           # task -> PE after canonical core numbering
    node: np.ndarray          # task -> node index (index into layout.hosts)
    core: np.ndarray          # task -> node-local core
    engine: str
    evaluation: Evaluation
    j_block: float | int
    seconds: dict

    @property
    def improvement(self) -> float:
        """Relative reduction of J against the block placement (0.3 = 30 % lower)."""
        return 1.0 - self.evaluation.J / self.j_block if self.j_block else 0.0


def _note(args, text: str) -> None:
    """An informational line on stderr (silenced by --quiet and in prolog mode)."""
    if not getattr(args, "quiet", False):
        print(f"procmap: {text}", file=sys.stderr)


def _warn(args, text: str) -> None:
    """A warning on stderr; only prolog mode silences it (its stderr is one line)."""
    if not getattr(args, "_silent", False):
        print(f"procmap: warning: {text}", file=sys.stderr)


def _runlength(values) -> str:
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


def _hosts_from_args(args) -> HostSpec | None:
    """``--hosts`` (a Slurm hostlist expression) or ``--hostfile``; None if neither."""
    if args.hosts is not None:
        return HostSpec(tuple(expand_hostlist(args.hosts)), None, f"--hosts {args.hosts}")
    if args.hostfile is not None:
        entries = merge_host_slots(read_hostfile(args.hostfile))
        return HostSpec(tuple(h for h, _ in entries), tuple(s for _, s in entries),
                        f"hostfile {args.hostfile}")
    return None


def _layout(args, topology, hosts: HostSpec) -> HostLayout:
    """Validate the machine for launcher use and put the hosts on its nodes."""
    if not isinstance(topology, Hierarchy):
        raise TopologyError("launcher files need a --hierarchy (its levels give hosts and cores); "
                            "an explicit distance matrix has no node boundary")
    check_one_rank_per_core(topology)
    layout = host_layout(topology, hosts.names, hosts.slots, args.node_level)
    if layout.node_level_inferred:
        levels = ":".join(map(str, topology.levels[:layout.hierarchy.node_level])) or "none"
        _note(args, f"node level {layout.hierarchy.node_level} inferred from {len(hosts.names)} "
                    f"host{'s' if len(hosts.names) != 1 else ''}: {layout.pes_per_node} PEs per host "
                    f"(levels {levels} inside a node; --node-level L to choose)")
    if layout.unused_hosts:
        extra = layout.unused_hosts
        _note(args, f"{len(extra)} host{'s' if len(extra) != 1 else ''} beyond the hierarchy's "
                    f"{len(layout.hosts)} nodes not used: {', '.join(extra[:4])}"
                    f"{', ...' if len(extra) > 4 else ''}")
    return layout


def _read_graph(args, ntasks: int | None, ntasks_source: str, layout: HostLayout | None = None):
    """Read the graph; pad it with silent ranks up to ``ntasks`` when the job has more.

    ``ntasks`` is checked first (:func:`_check_ntasks`: at most ``MAX_TASKS`` and,
    given ``layout``, at most its slots), so that a huge ``SLURM_NTASKS`` costs a
    one-line error, not an allocation of that many tasks.
    """
    if ntasks is not None:
        _check_ntasks(ntasks, ntasks_source, layout)
    graph = read_graph(args.graph, args.format)
    if ntasks is not None:
        if ntasks < graph.n:
            raise CapacityError(f"{ntasks_source} = {ntasks} tasks but {args.graph} has {graph.n} "
                                "ranks")
        # Ranks that never communicate are absent from a profile: add them.
        graph = graph.with_num_tasks(ntasks)
    return graph


def _check_slots(graph, layout: HostLayout, hosts: HostSpec) -> None:
    slots = layout.hierarchy.total_slots
    if graph.n <= slots:
        return
    per_host = layout.slots_per_host().tolist()
    detail = f"slots per host {_runlength(per_host)}"
    if hosts.slots is not None:
        detail += " (a hostfile line without slots= counts 1)"
    raise CapacityError(f"{graph.n} ranks but only {slots} slots on {len(layout.hosts)} hosts "
                        f"({layout.pes_per_node} PEs per node; {detail}); procmap never "
                        "oversubscribes")


def _place(args, layout: HostLayout, graph, progress, deadline: float | None = None) -> Placed:
    """Map, renumber cores canonically, evaluate against the block placement."""
    topo = layout.hierarchy
    t0 = time.perf_counter()
    mapping = slurm.call_with_deadline(
        lambda: map_tasks(graph, topo, engine=args.engine, seed=args.seed, device=args.device,
                          progress=progress),
        deadline)
    pes = canonical_cores(mapping.pes, topo)
    ev = evaluate(graph, topo, pes)
    j_block = evaluate(graph, topo, baselines.block(graph.n, topo)).J
    node, core = locate(pes, layout)
    seconds = {"mapping": time.perf_counter() - t0}
    return Placed(layout, graph.n, graph.m, pes, node, core, mapping.engine, ev, j_block, seconds)


def _block_placed(layout: HostLayout, graph, why: str) -> Placed:
    """The block placement as a :class:`Placed` (prolog fallback with a usable layout)."""
    topo = layout.hierarchy
    pes = baselines.block(graph.n, topo)
    ev = evaluate(graph, topo, pes)
    node, core = locate(pes, layout)
    return Placed(layout, graph.n, graph.m, pes, node, core, why, ev, ev.J, {})


def _summary(args, placed: Placed, hosts: HostSpec) -> list[str]:
    layout = placed.layout
    ev = placed.evaluation
    slots = layout.slots_per_host().tolist()
    how = "inferred" if layout.node_level_inferred else "given"
    lines = [
        f"graph     {args.graph}: {placed.n} tasks, {placed.edges} edges",
        f"machine   {describe(layout.hierarchy)}",
        f"hosts     {len(layout.hosts)} from {hosts.source}; node level {layout.hierarchy.node_level} "
        f"({how}): {layout.pes_per_node} cores per host, slots {_runlength(slots)}",
        f"engine    {placed.engine} (seed {args.seed}); cores renumbered per node (same J)",
    ]
    gain = placed.improvement
    verdict = f"{100 * gain:.1f}% lower" if gain >= 0 else f"{-100 * gain:.1f}% higher"
    lines.append(f"J         {ev.J}   (block placement {placed.j_block}: procmap is {verdict})")
    if ev.level_traffic is not None:
        parts = [f"same PE {ev.level_traffic[0]}"]
        parts += [f"level {t} {v}" for t, v in enumerate(ev.level_traffic[1:], start=1)]
        lines.append(f"traffic   {' | '.join(parts)}")
    return lines


def _summary_json(args, placed: Placed, hosts: HostSpec) -> dict:
    layout = placed.layout
    return {
        "graph": args.graph, "tasks": placed.n, "edges": placed.edges,
        "machine": describe(layout.hierarchy), "hierarchy": str(layout.hierarchy),
        "distance": layout.hierarchy.distance_string(),
        "hosts": list(layout.hosts), "host_source": hosts.source,
        "unused_hosts": list(layout.unused_hosts),
        "node_level": layout.hierarchy.node_level,
        "node_level_inferred": layout.node_level_inferred,
        "pes_per_node": layout.pes_per_node,
        "slots_per_host": layout.slots_per_host().tolist(),
        "engine": placed.engine, "seed": args.seed,
        "J": placed.evaluation.J, "J_block": placed.j_block,
        "improvement_over_block": placed.improvement,
        "level_traffic": placed.evaluation.level_traffic,
        "pes": placed.pes.tolist(),
        "seconds": placed.seconds,
    }


def _print_commands(commands: list[tuple[str, str]]) -> None:
    print("launch with:")
    for label, command in commands:
        print(f"  {command}" + (f"      # {label}" if label else ""))


def _print_lists(label: str, lists: list[tuple[str, list[int]]]) -> None:
    print(f"{label}:")
    for name, cpus in lists[:_MAX_LISTED]:
        print(f"  {name}: {format_cpus(cpus)}")
    if len(lists) > _MAX_LISTED:
        print(f"  ... {len(lists) - _MAX_LISTED} more (--json lists all)")


def _progress(args, progress_class):
    return progress_class(not args.quiet and sys.stderr.isatty())


def _check_outputs(args, rank_map: str | None = None) -> None:
    """Refuse an unwritable output, or one that is also an input (the graph,
    --hostfile, --distance-matrix) or the other output, before anything is read.
    ``rank_map`` defaults to ``--rank-map`` (slurm). Standard output is refused:
    the launch line names the file."""
    inputs = [args.graph, args.hostfile, args.distance_matrix]
    check_output(args.output, inputs, stdout=False)
    rank_map = rank_map if rank_map is not None else getattr(args, "rank_map", None)
    if rank_map is not None:
        check_output(rank_map, inputs, outputs=[args.output], stdout=False)


# ----------------------------------------------------------------- rankfile
def _cmd_rankfile(args, *, machine: Callable, progress_class) -> int:
    # Check what can fail cheaply before the (possibly long) mapping.
    _check_outputs(args)
    forced = openmpi.parse_forced_version(args.openmpi_version) if args.openmpi_version else None
    hosts = _hosts_from_args(args)
    layout = _layout(args, machine(args), hosts)
    graph = _read_graph(args, args.ntasks, "--ntasks")
    _check_slots(graph, layout, hosts)
    version = forced or openmpi.detect_openmpi(args.mpirun)
    placed = _place(args, layout, graph, _progress(args, progress_class))
    commands = openmpi.launch_lines(version, placed.n, args.output, args.app)
    notes = []
    if not version.known:
        notes.append(f"Open MPI version unknown ({version.source}): both forms shown; "
                     "--openmpi-version 4|5 picks one")
    if version.major is None or version.major >= 5:
        notes.append(openmpi.OVERSUBSCRIBE_NOTE)
    notes.append("hosts must match the names the allocation uses (short names vs FQDN); "
                 "outside a resource manager, pass them to mpirun with --host or --hostfile")
    openmpi.write_rankfile(args.output, layout.hosts, placed.node, placed.core)

    if args.json:
        out = _summary_json(args, placed, hosts)
        out.update({"output": args.output, "openmpi_version": version.version,
                    "openmpi_source": version.source,
                    "commands": [c for _, c in commands], "notes": notes})
        print(json.dumps(out, indent=2))
        return 0
    for line in _summary(args, placed, hosts):
        print(line)
    used = len(set(placed.node.tolist()))
    print(f"wrote     {args.output}: {placed.n} ranks on {used} host{'s' if used != 1 else ''} "
          "(rank N=<host> slot=<node-local core>)")
    _print_commands(commands)
    for note in notes:
        print(f"note: {note}")
    return 0


# -------------------------------------------------------------- machinefile
def _cmd_machinefile(args, *, machine: Callable, progress_class) -> int:
    _check_outputs(args)
    hosts = _hosts_from_args(args)
    layout = _layout(args, machine(args), hosts)
    graph = _read_graph(args, args.ntasks, "--ntasks")
    _check_slots(graph, layout, hosts)
    placed = _place(args, layout, graph, _progress(args, progress_class))
    plan = mpich.plan_hydra(args.flavor, layout.hosts, placed.node, placed.core, args.output,
                            args.app)
    for text in plan.warnings:
        _warn(args, text)
    mpich.write_machinefile(args.output, layout.hosts, plan.runs)

    if args.json:
        out = _summary_json(args, placed, hosts)
        out.update({"output": args.output, "flavor": args.flavor,
                    "runs": [[layout.hosts[node], count] for node, count in plan.runs],
                    "interleaved_hosts": [layout.hosts[i] for i in plan.interleaved],
                    "cpu_lists": [{"group": name, "cpus": cpus} for name, cpus in plan.lists],
                    "common_cpu_list": plan.common,
                    "commands": [c for _, c in plan.commands], "notes": plan.notes,
                    "warnings": plan.warnings})
        print(json.dumps(out, indent=2))
        return 0
    for line in _summary(args, placed, hosts):
        print(line)
    print(f"wrote     {args.output}: {len(plan.runs)} host:count lines for {placed.n} ranks"
          + (f" ({len(plan.interleaved)} hosts interleaved)" if plan.interleaved else ""))
    group = "per Hydra block (run)" if args.flavor == "mpich" else "per host"
    _print_lists(f"cpus      node-local rank -> core, {group}", plan.lists)
    _print_commands(plan.commands)
    for note in plan.notes:
        print(f"note: {note}")
    return 0


# -------------------------------------------------------------------- slurm
def _slurm_hosts(args) -> tuple[HostSpec, SlurmAllocation | None]:
    """``--hosts``/``--hostfile`` override the allocation read from the environment."""
    given = _hosts_from_args(args)
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


def _slurm_ntasks(args, alloc: SlurmAllocation | None) -> tuple[int | None, str]:
    if args.ntasks is not None:
        return args.ntasks, "--ntasks"
    if alloc is not None and alloc.ntasks is not None:
        return alloc.ntasks, "SLURM_NTASKS"
    return None, ""


def _slurm_machine(args, machine: Callable, hosts: HostSpec, alloc: SlurmAllocation | None):
    """``--hierarchy`` if given; else the allocation itself (cpus:nodes, node level 1)."""
    from_env = alloc is not None and hosts.names == alloc.hosts
    if args.hierarchy or args.distance_matrix or not from_env or alloc.cpus_per_node is None:
        return machine(args)
    h = alloc.hierarchy(distances=args.distance)
    if args.node_level is None:
        args.node_level = h.node_level  # one node per allocated host, by construction
    return h


def _slurm_outputs(args, placed_node: np.ndarray, placed_core: np.ndarray,
                   hosts: tuple[str, ...]) -> dict:
    """Write the hostfile (and the rank map) and work out the srun lines."""
    n = int(placed_node.size)
    lists = slurm.per_node_cpu_lists(hosts, placed_node, placed_core)
    common = slurm.common_cpu_list(lists)
    rank_map = args.rank_map
    if args.cpu_bind and common is None and rank_map is None:
        rank_map = args.output + ".ranks"  # needed by the TaskProlog to bind per task
    hostfile = os.path.abspath(args.output)
    commands: list[tuple[str, str]] = []
    notes: list[str] = []
    if args.cpu_bind and common is None:
        exports = (f"export SLURM_HOSTFILE={hostfile} PROCMAP_RANK_MAP={os.path.abspath(rank_map)} "
                   "PROCMAP_BIND=1")
        commands.append(("", exports))
        commands.append(("", slurm.srun_line(n, None, args.app, slurm.taskprolog_path())))
        notes.append("the nodes need different map_cpu lists, but srun applies one list "
                     "to every node: the TaskProlog binds each task from the rank map instead "
                     "(SLURM_PROLOG_CPU_MASK, per the Slurm docs)")
    else:
        commands.append(("", f"export SLURM_HOSTFILE={hostfile}"))
        commands.append(("", slurm.srun_line(n, common if args.cpu_bind else None, args.app)))
        if rank_map is not None:
            notes.append(f"for in-application use, export PROCMAP_RANK_MAP={os.path.abspath(rank_map)} "
                         f"and add --task-prolog={slurm.taskprolog_path()}")
    if args.cpu_bind:
        notes.append("map_cpu bindings are honoured only when the step has every CPU of its nodes "
                     "(whole nodes, e.g. sbatch --exclusive); check with --cpu-bind=verbose")
    notes.append("export SLURM_HOSTFILE only around this srun: at submission it clashes with "
                 "--nodes")
    _check_outputs(args, rank_map)  # again here: the prolog fallback writes through this too
    slurm.write_hostfile(args.output, hosts, placed_node)
    if rank_map is not None:
        slurm.write_rank_map(rank_map, hosts, placed_node, placed_core)
    return {"hostfile": args.output, "rank_map": rank_map, "cpu_lists": lists,
            "common_cpu_list": common, "commands": commands, "notes": notes}


def _print_slurm(args, placed: Placed | None, hosts: HostSpec, out: dict,
                 fallback: str | None) -> None:
    if args.json:
        result = _summary_json(args, placed, hosts) if placed is not None else {
            "graph": args.graph, "hosts": list(hosts.names), "host_source": hosts.source}
        result.update({"output": out["hostfile"], "rank_map": out["rank_map"],
                       "cpu_lists": [{"group": h, "cpus": c} for h, c in out["cpu_lists"]],
                       "common_cpu_list": out["common_cpu_list"],
                       "commands": [c for _, c in out["commands"]], "notes": out["notes"],
                       "fallback": fallback})
        print(json.dumps(result, indent=2))
        return
    if placed is not None:
        for line in _summary(args, placed, hosts):
            print(line)
    n = sum(len(c) for _, c in out["cpu_lists"])
    print(f"wrote     {out['hostfile']}: one host per rank ({n} ranks)"
          + (f", rank map {out['rank_map']}" if out["rank_map"] else "")
          + (" [fallback: block placement]" if fallback else ""))
    if args.cpu_bind:
        _print_lists("cpus      node-local rank (SLURM_LOCALID) -> core, per node", out["cpu_lists"])
    _print_commands(out["commands"])
    for note in out["notes"]:
        print(f"note: {note}")


def _slurm_map(args, layout: HostLayout, hosts: HostSpec, graph, progress) -> Placed:
    """Check the slots and map ``graph``: with :func:`_read_graph`, what runs under
    the deadline (in a child process, see :func:`.slurm.run_with_deadline`)."""
    _check_slots(graph, layout, hosts)
    return _place(args, layout, graph, progress)


def _slurm_run(args, machine: Callable, progress_class, deadline: float | None) -> int:
    """The normal path: allocation and layout here, reading and mapping under
    ``deadline`` (``None``: no limit), then the outputs and the report."""
    _check_outputs(args)  # before anything is read
    hosts, alloc = _slurm_hosts(args)
    ntasks, source = _slurm_ntasks(args, alloc)
    layout = _layout(args, _slurm_machine(args, machine, hosts, alloc), hosts)
    if ntasks is not None:
        _check_ntasks(ntasks, source, layout)  # before the (possibly long) read
    progress = _progress(args, progress_class)

    def read_and_map() -> Placed:
        return _slurm_map(args, layout, hosts, _read_graph(args, ntasks, source, layout), progress)
    placed = slurm.run_with_deadline(read_and_map, deadline)
    out = _slurm_outputs(args, placed.node, placed.core, layout.hosts)
    _print_slurm(args, placed, hosts, out, None)
    return 0


# The largest --timeout: a day is more than any launcher step needs.
_MAX_TIMEOUT = 86400.0


def _parse_timeout(text: str | float) -> float:
    """``--timeout``: seconds, a finite number > 0 (plain notation, at most a day)."""
    value = str(text).strip()
    seconds = float(value) if is_decimal_number(value) else float("nan")
    if not 0 < seconds <= _MAX_TIMEOUT:  # also false for nan
        raise ProcmapError(f"--timeout {text}: expected a number of seconds > 0 and at most "
                           f"{_MAX_TIMEOUT:g}, e.g. 20 or 2.5")
    return seconds


def _budget_start() -> float:
    """The :func:`time.monotonic` value ``--timeout`` counts from: the start of this
    process when it is the ``procmap`` command (start-up and imports count, as they
    do for a prolog's wall clock), else now (called from Python)."""
    now = time.monotonic()
    program = sys.argv[0] if sys.argv else ""
    is_procmap = (os.path.basename(program) == "procmap"
                  or program.endswith(os.path.join("procmap", "__main__.py")))
    age = slurm.process_age() if is_procmap else None
    return now - age if age is not None else now


def _cmd_slurm(args, *, machine: Callable, progress_class) -> int:
    """``procmap slurm``; in a prolog context see :func:`_slurm_prolog`."""
    if slurm.is_prolog_context(args.prolog):
        return _slurm_prolog(args, machine, progress_class)
    timeout = None if args.timeout is None else _parse_timeout(args.timeout)
    deadline = None if timeout is None else _budget_start() + timeout
    try:
        return _slurm_run(args, machine, progress_class, deadline)
    except slurm.MappingTimeout:
        from procmap.kernels.backend import kernel_cache_is_warm

        hint = ("" if kernel_cache_is_warm() else
                " (the kernel cache is cold: the first run compiles for about a minute; run "
                "once without --timeout)")
        raise ProcmapError(f"reading and mapping did not finish within --timeout {timeout:g} s; "
                           f"nothing written{hint} (with --prolog, procmap falls back to the "
                           "block placement instead)") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ").strip()
    if isinstance(exc, (ProcmapError, OSError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------- slurm prolog
# Slurm's variables for CPUs and tasks, in detect_slurm's order of preference.
_SLURM_CPU_VARS = ("SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE")
_SLURM_TASK_VARS = ("SLURM_NTASKS", "SLURM_JOB_NTASKS")
# Seconds kept back at the end of a prolog's budget for killing the child, writing
# the mapping and exiting (the interpreter's shutdown alone takes 0.1-0.3 s); twice
# the time the fallback took to write is added.
_PROLOG_RESERVE = 0.5
# Seconds the cheap steps (allocation, fallback) get when start-up spent the budget.
_CHEAP_GRACE = 0.1


@dataclass
class _Prolog:
    """What a prolog run has learnt so far. The first problem is the one reported."""

    args: argparse.Namespace
    deadline: float                    # time.monotonic() by which the process has exited
    reason: str | None = None          # the first problem: what the stderr line says
    hosts: HostSpec | None = None      # the allocation, read leniently, for the fallback
    ntasks: int | None = None
    ntasks_source: str = ""
    written: dict | None = None        # the fallback's outputs (_slurm_outputs), once written
    unwritten: str | None = None       # why no fallback can be written
    reserve: float = _PROLOG_RESERVE

    def fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def run(self, fn: Callable, *, child: bool):
        """``fn()`` under this prolog's deadline: in a child process, up to the
        reserve; or in a thread for the cheap steps (which no kernel delays), up to
        the deadline itself -- and briefly even past it when start-up has spent the
        budget: the fallback depends on them."""
        if child:
            return slurm.run_with_deadline(fn, self.deadline - self.reserve, quiet=True)
        return slurm.call_with_deadline(fn, max(self.deadline, time.monotonic() + _CHEAP_GRACE))


def _slurm_prolog(args, machine: Callable, progress_class) -> int:
    """``procmap slurm`` in a prolog: exit 0 within the budget, whatever happens.

    Cheap steps first, in this process: the budget (``--timeout``, default
    :data:`.slurm.PROLOG_TIMEOUT`, from the process's start), the allocation (read
    leniently, so that one bad variable or argument loses only itself) and, as soon
    as hosts and a task count are known, Slurm's block placement, written atomically.
    Reading and mapping then run in a child process killed at the deadline; on
    success their placement replaces the fallback. A prolog never compiles: with a
    cold kernel cache the fallback stays. stderr carries exactly one line, and only
    when the mapping did not land; the exit status is always 0.
    """
    args.quiet = True
    args._silent = True
    budget, problem = slurm.PROLOG_TIMEOUT, None
    if args.timeout is not None:
        try:
            budget = _parse_timeout(args.timeout)
        except ProcmapError as exc:
            problem = f"{exc}; used {budget:g} s"
    st = _Prolog(args, _budget_start() + budget)
    if problem is not None:
        st.fail(problem)
    extras = getattr(args, "_prolog_extras", None)
    if extras:
        st.fail(f"unrecognized arguments: {' '.join(extras)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _prolog_map(st, machine, progress_class, budget)
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not fail a prolog either
            st.fail(_one_line(exc))
        _prolog_finish(st)
    return 0


def _prolog_map(st: _Prolog, machine: Callable, progress_class, budget: float) -> None:
    """The prolog's steps; every problem goes to ``st.fail``, nothing raises on purpose."""
    args = st.args
    try:
        job = st.run(lambda: _prolog_allocation(st, machine), child=False)
    except slurm.MappingTimeout:
        st.fail("reading the allocation did not finish within the budget")
        return
    _slurm_fallback(st)
    if st.reason is not None or job is None:
        return
    from procmap.kernels.backend import kernel_cache_is_warm

    if not kernel_cache_is_warm():
        st.fail("the compiled-kernel cache is cold and a prolog never compiles (about a minute): "
                "run `procmap map` on any small graph once outside the prolog to fill it")
        return
    layout, hosts, ntasks, source = job
    progress = progress_class(False)
    try:
        placed, n, why = st.run(
            lambda: _prolog_child(args, layout, hosts, ntasks, source, progress), child=True)
    except slurm.MappingTimeout:
        limit = (f"--timeout {budget:g} s" if args.timeout is not None else
                 f"the default budget of {budget:g} s (--timeout)")
        st.fail(f"reading and mapping {args.graph} did not finish within {limit}")
        return
    except ProcmapError as exc:  # the child died
        st.fail(_one_line(exc))
        return
    if placed is None:
        st.fail(why)
        if st.ntasks is None and n is not None:
            st.ntasks, st.ntasks_source = n, args.graph
        return
    out = _slurm_outputs(args, placed.node, placed.core, layout.hosts)
    try:
        _print_slurm(args, placed, hosts, out, None)
    except Exception:  # noqa: BLE001 - e.g. a closed stdout; the files are written
        pass


def _prolog_child(args, layout: HostLayout, hosts: HostSpec, ntasks: int | None, source: str,
                  progress) -> tuple[Placed | None, int | None, str | None]:
    """The prolog's child process: ``(placed, n, None)`` or ``(None, n, why)``; ``n`` is
    the graph's task count once read (the fallback's when the job gives none)."""
    n = None
    try:
        graph = _read_graph(args, ntasks, source, layout)
        n = graph.n
        return _slurm_map(args, layout, hosts, graph, progress), n, None
    except Exception as exc:  # noqa: BLE001 - the parent falls back, whatever it was
        return None, n, _one_line(exc)


def _prolog_allocation(st: _Prolog, machine: Callable):
    """Read the allocation leniently into ``st`` (for the fallback), then strictly.

    Returns ``(layout, hosts, ntasks, source)`` for the mapping, or ``None`` once a
    problem has ruled the mapping out (recorded in ``st``).
    """
    args = st.args
    st.hosts, st.ntasks, st.ntasks_source, problem = _lenient_allocation(args)
    if problem is not None:
        st.fail(problem)
    if st.reason is not None:
        return None
    try:
        _check_outputs(args)
        hosts, alloc = _slurm_hosts(args)
        ntasks, source = _slurm_ntasks(args, alloc)
        layout = _layout(args, _slurm_machine(args, machine, hosts, alloc), hosts)
        if ntasks is not None:
            _check_ntasks(ntasks, source, layout)
    except Exception as exc:  # noqa: BLE001 - any problem falls back
        st.fail(_one_line(exc))
        return None
    return layout, hosts, ntasks, source


def _lenient_slurm_env() -> tuple[SlurmAllocation | None, str | None, frozenset]:
    """The Slurm allocation, losing only what is broken: ``(alloc, problem, lost)``.

    ``lost`` names what a bad variable cost (``"cpus"``, ``"tasks"``, ``"hosts"``);
    ``problem`` is the first error met.
    """
    env = dict(os.environ)
    attempts = ((frozenset(), ()), (frozenset({"cpus"}), _SLURM_CPU_VARS),
                (frozenset({"tasks"}), _SLURM_TASK_VARS),
                (frozenset({"cpus", "tasks"}), _SLURM_CPU_VARS + _SLURM_TASK_VARS))
    problem = None
    for lost, dropped in attempts:
        try:
            alloc = detect_slurm({k: v for k, v in env.items() if k not in dropped})
        except Exception as exc:  # noqa: BLE001 - lenient: whatever it is, try without
            problem = problem or _one_line(exc)
            continue
        return alloc, problem, lost
    return None, problem, frozenset({"hosts", "cpus", "tasks"})


def _lenient_allocation(args) -> tuple[HostSpec | None, int | None, str, str | None]:
    """Hosts (with CPUs or slots if known), task count, its source, and the first problem.

    Hosts: ``--hosts`` (each once, in first-seen order; the allocation's CPUs when it
    holds them all) or ``--hostfile``, else the Slurm node list -- also when the given
    ones are unusable. Tasks: ``--ntasks``, else ``SLURM_NTASKS``/``SLURM_JOB_NTASKS``;
    ``None`` when neither is usable (``SLURM_NTASKS=0`` included): the fallback then
    takes the graph's task count. More tasks than the hosts' CPUs is a problem.
    """
    problems: list[str] = []
    alloc, env_problem, lost = _lenient_slurm_env()
    hosts = None
    if args.hosts is not None or args.hostfile is not None:
        try:
            hosts, problem = _lenient_given_hosts(args, alloc)
            if problem is not None:
                problems.append(problem)
        except OSError as exc:
            problems.append(f"cannot read --hostfile {args.hostfile}: {exc.strerror or exc}")
        except ProcmapError as exc:
            problems.append(_one_line(exc))
    if env_problem is not None and (hosts is None or ("tasks" in lost and args.ntasks is None)):
        problems.append(env_problem)
    if hosts is None and alloc is not None:
        hosts = HostSpec(alloc.hosts, alloc.cpus_per_node, "Slurm")
    ntasks, source = None, ""
    if args.ntasks is not None:
        text = str(args.ntasks).strip()
        if is_decimal_int(text) and 1 <= int(text) <= MAX_TASKS:
            ntasks, source = int(text), "--ntasks"
        else:
            problems.append(f"--ntasks {args.ntasks}: expected a whole number of tasks from 1 "
                            f"to {MAX_TASKS:,}")
    if ntasks is None and alloc is not None and alloc.ntasks is not None:
        ntasks, source = alloc.ntasks, "SLURM_NTASKS"
    if hosts is not None and ntasks is not None:
        over = _oversubscribed(hosts, ntasks, source)
        if over is not None:
            problems.insert(0, over)  # the one that matters: nothing can be written
    return hosts, ntasks, source, (problems[0] if problems else None)


def _lenient_given_hosts(args, alloc: SlurmAllocation | None) -> tuple[HostSpec, str | None]:
    """``--hosts`` or ``--hostfile`` for the fallback, and a problem to report. A host
    listed twice in ``--hosts`` counts once (the mapping refuses the list)."""
    if args.hostfile is not None:
        entries = merge_host_slots(read_hostfile(args.hostfile))
        return HostSpec(tuple(h for h, _ in entries), tuple(s for _, s in entries),
                        f"hostfile {args.hostfile}"), None
    listed = [check_host_name(h) for h in expand_hostlist(args.hosts)]
    names = tuple(dict.fromkeys(listed))
    problem = None
    if len(names) < len(listed):
        counts = Counter(listed)
        twice = next(h for h in names if counts[h] > 1)
        problem = f"--hosts {args.hosts}: host {twice!r} is listed twice"
    cpus = dict(zip(alloc.hosts, alloc.cpus_per_node)) if alloc and alloc.cpus_per_node else {}
    slots = tuple(cpus[h] for h in names) if all(h in cpus for h in names) else None
    return HostSpec(names, slots, f"--hosts {args.hosts}"), problem


def _oversubscribed(hosts: HostSpec, ntasks: int, source: str) -> str | None:
    """Why ``ntasks`` tasks cannot be placed on ``hosts``' CPUs or slots, if they cannot."""
    if hosts.slots is None or ntasks <= sum(hosts.slots):
        return None
    return (f"{ntasks:,} tasks ({source}) but the allocation has {sum(hosts.slots):,} CPUs on "
            f"{len(hosts.names)} host{'s' if len(hosts.names) != 1 else ''}: the job "
            "oversubscribes, which Slurm refuses unless --overcommit")


def _check_ntasks(ntasks: int, source: str, layout: HostLayout | None) -> None:
    """A job's task count (``--ntasks``, ``SLURM_NTASKS``), checked before anything of
    that size exists: at most ``MAX_TASKS``, and at most the slots of ``layout``."""
    if not 1 <= ntasks <= MAX_TASKS:
        raise CapacityError(f"{source} = {ntasks:,}: expected 1 to {MAX_TASKS:,} tasks")
    if layout is not None and ntasks > layout.hierarchy.total_slots:
        raise CapacityError(f"{source} = {ntasks:,} tasks but only "
                            f"{layout.hierarchy.total_slots:,} slots on {len(layout.hosts)} hosts "
                            f"({layout.pes_per_node} PEs per node); procmap never oversubscribes")


def _slurm_fallback(st: _Prolog) -> None:
    """Write Slurm's block placement once hosts and a task count are known.

    Hosts in order, each filled up to its CPUs (or slots) where those are known;
    never more tasks than CPUs (:func:`_oversubscribed`: then nothing is written).
    Records the outputs in ``st.written``, or why not in ``st.unwritten``.
    """
    if st.written is not None or st.unwritten is not None:
        return
    if st.hosts is None or st.ntasks is None:
        return
    over = _oversubscribed(st.hosts, st.ntasks, st.ntasks_source)
    if over is not None:
        st.fail(over)
        st.unwritten = "no placement fits"
        return
    t0 = time.monotonic()
    node, core = slurm.fallback_nodes(st.ntasks, len(st.hosts.names), st.hosts.slots)
    try:
        st.written = _slurm_outputs(st.args, node, core, st.hosts.names)
    except Exception as exc:  # noqa: BLE001 - a mapping could not be written either
        st.fail(_one_line(exc))
        st.unwritten = "the output cannot be written"
        return
    # The mapping's outputs take about as long to write: keep that time back.
    st.reserve = _PROLOG_RESERVE + 2 * (time.monotonic() - t0)


def _prolog_finish(st: _Prolog) -> None:
    """After a failure: the fallback (if the graph gave the task count late) and the
    one stderr line; then the fallback's report on stdout."""
    if st.reason is None:
        return
    if st.written is None and st.unwritten is None and st.ntasks is None and st.hosts is not None:
        _prolog_count_tasks(st)
    _slurm_fallback(st)
    args = st.args
    if st.written is not None:
        n, nhosts = st.ntasks, len(st.hosts.names)
        line = (f"{st.reason}; fell back to Slurm's block placement in {args.output} "
                f"({n:,} task{'s' if n != 1 else ''} on {nhosts} host{'s' if nhosts != 1 else ''})")
    else:
        why = st.unwritten or (
            "no host list: give --hosts or --hostfile, or run inside a Slurm job"
            if st.hosts is None else "the task count is unknown: set --ntasks or SLURM_NTASKS")
        line = f"{st.reason}; nothing written ({why}): launch without SLURM_HOSTFILE"
    try:
        print(f"procmap: prolog: {line}", file=sys.stderr)
        if st.written is not None and hasattr(args, "graph"):
            _print_slurm(args, None, st.hosts, st.written, st.reason)
    except Exception:  # noqa: BLE001 - e.g. closed stdout or stderr: nothing more to do
        pass


def _prolog_count_tasks(st: _Prolog) -> None:
    """The fallback's task count from the graph, when the job gives none: read in a
    child under the deadline, and only with a warm kernel cache (readers use kernels)."""
    from procmap.kernels.backend import kernel_cache_is_warm

    args = st.args
    if not getattr(args, "graph", None) or not kernel_cache_is_warm():
        return
    try:
        st.ntasks = st.run(lambda: read_graph(args.graph, args.format).n, child=True)
        st.ntasks_source = args.graph
    except Exception:  # noqa: BLE001 - the task count stays unknown, as the line says
        pass


def _prolog_safe_error(parser: argparse.ArgumentParser, message: str):
    """``error`` of the ``slurm`` subparser: in a prolog a usage error must not fail either.

    It falls back as any other failure does, from the arguments that could be read
    (:func:`_lenient_args`), and exits 0. Outside a prolog: argparse's usage error.
    """
    argv = getattr(parser, "_procmap_argv", None)
    argv = list(sys.argv[1:] if argv is None else argv)
    if slurm.is_prolog_context(any(_is_prolog_flag(a) for a in argv)):
        try:
            args = _lenient_args(argv)
            st = _Prolog(args, _budget_start() + slurm.PROLOG_TIMEOUT, reason=message)
            if args is None:
                st.unwritten = "the output file is unknown"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    if args is not None:
                        st.hosts, st.ntasks, st.ntasks_source, _ = st.run(
                            lambda: _lenient_allocation(args), child=False)
                except Exception:  # noqa: BLE001 - the line says what could not be done
                    pass
                _prolog_finish(st)
        finally:
            sys.exit(0)
    argparse.ArgumentParser.error(parser, message)


def _is_prolog_flag(word: str) -> bool:
    # argparse accepts any unambiguous prefix of an option ("--prol").
    return len(word) >= 4 and "--prolog".startswith(word)


def _lenient_args(argv: list[str]) -> argparse.Namespace | None:
    """What a fallback needs from arguments argparse refused (output, hosts, tasks);
    ``None`` when even these cannot be read (``-o`` without a file name)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("-o", "--output", default="hostfile")
    p.add_argument("--hosts")
    p.add_argument("--hostfile")
    p.add_argument("-n", "--ntasks")
    p.add_argument("--rank-map")
    p.add_argument("--cpu-bind", action="store_true")
    p.add_argument("--app", default="./app")

    def refuse(message: str):
        raise ProcmapError(message)
    p.error = refuse  # type: ignore[method-assign]
    try:
        args, _ = p.parse_known_args(argv)
    except ProcmapError:
        return None
    # Not known here; the output checks skip None.
    args.graph = args.format = args.distance_matrix = None
    args.json = False
    return args


def _slurm_parse_known_args(parser: argparse.ArgumentParser, args=None, namespace=None):
    """``parse_known_args`` of the ``slurm`` subparser: remembers the words (for
    :func:`_prolog_safe_error`) and, in a prolog, keeps unknown options for
    :func:`_slurm_prolog` to report instead of argparse's exit 2."""
    words = list(sys.argv[1:] if args is None else args)
    parser._procmap_argv = words  # type: ignore[attr-defined]
    ns, extras = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
    if extras and slurm.is_prolog_context(getattr(ns, "prolog", False)):
        ns._prolog_extras = extras
        extras = []
    return ns, extras


# ---------------------------------------------------------------- register
_EPILOG = """\
examples:
  procmap rankfile app.comm --hierarchy 4:8:6 --hosts 'node[01-06]' -o app.rankfile
  procmap rankfile app.comm -H 4:8:6 --hostfile hosts.txt --openmpi-version 5
  procmap machinefile app.comm -H 4:8:6 --hosts 'node[01-06]' --flavor intel
  procmap slurm app.comm -H 4:8:6 --cpu-bind -o hosts.$SLURM_JOB_ID   # inside a job
  PROCMAP_PROLOG=1 procmap slurm app.comm -H 4:8:6 --timeout 20 -o hosts

node level: the levels of --hierarchy below the node boundary become node-local
core numbers: 4:8:6 on 6 hosts = node level 2 = 32 cores per host. Without
--node-level it is inferred from the number of hosts (the level with exactly that
many nodes). Core numbers are logical cores in hierarchy order; they are renumbered
inside each node without changing J so that nodes with the same pattern share one
CPU list.
"""


def _wrap(text: str) -> str:
    # The subcommands keep their epilog's line breaks (RawDescriptionHelpFormatter),
    # so the description is wrapped here.
    return textwrap.fill(text, width=80)


def _add_common(p: argparse.ArgumentParser, add_machine_args: Callable, default_output: str,
                hosts_required: bool) -> None:
    p.add_argument("graph", help="communication graph (.comm, .graph, .mtx, .npy, .csv, .npz, .prof)")
    p.add_argument("--format", choices=GRAPH_FORMATS, help="graph format (default: from the extension)")
    g = p.add_argument_group("hosts")
    src = g.add_mutually_exclusive_group(required=hosts_required)
    src.add_argument("--hosts", metavar="HOSTLIST",
                     help="hosts in node order, as a Slurm hostlist expression ('node[01-06]', 'a,b')")
    src.add_argument("--hostfile", metavar="FILE",
                     help="Open MPI hostfile or MPICH machinefile; 'slots=N' / 'host:N' below the "
                          "PEs per node leave the node's last PEs unused")
    g.add_argument("--node-level", type=int, metavar="L",
                   help="levels of --hierarchy inside one node (default: inferred from the host count)")
    p.add_argument("--ntasks", "-n", type=int, metavar="N",
                   help="number of ranks when the job has more than the graph (silent ranks added)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="mapping engine (default auto)")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed, same placement)")
    p.add_argument("-o", "--output", default=default_output, metavar="FILE",
                   help=f"file to write (default: {default_output})")
    p.add_argument("--app", default="./app", metavar="CMD",
                   help="application command shown in the launch lines (default ./app)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or notes on stderr")
    add_machine_args(p)


def register(subparsers, add_machine_args: Callable, machine: Callable, progress_class,
             add_device_arg: Callable) -> None:
    """Add ``rankfile``, ``machinefile`` and ``slurm`` to ``procmap``'s subcommands.

    Parameters
    ----------
    subparsers:
        The object returned by ``parser.add_subparsers()``.
    add_machine_args:
        ``procmap.cli._add_machine_args`` (adds --hierarchy, --distance, --slots, ...).
    machine:
        ``procmap.cli._machine``: parsed arguments -> topology.
    progress_class:
        ``procmap.cli._Progress``: ``progress_class(enabled)`` is a ``(phase, detail)``
        callback.
    add_device_arg:
        ``procmap.cli.add_device_arg`` (adds --device).
    """
    helpers = {"machine": machine, "progress_class": progress_class}
    fmt = argparse.RawDescriptionHelpFormatter

    p = subparsers.add_parser(
        "rankfile", help="map and write an Open MPI rankfile", epilog=_EPILOG, formatter_class=fmt,
        description=_wrap("Map the ranks onto the hosts and cores, write an Open MPI rankfile "
                    "(rank N=<host> slot=<node-local core> for every rank) and print the mpirun "
                    "line for the installed Open MPI (4.x --rankfile, 5.x --map-by rankfile:file=)."))
    _add_common(p, add_machine_args, "rankfile", hosts_required=True)
    add_device_arg(p)
    p.add_argument("--mpirun", default="mpirun", metavar="PATH",
                   help="mpirun whose --version picks the launch line (default: mpirun on PATH)")
    p.add_argument("--openmpi-version", metavar="4|5",
                   help="skip detection: the Open MPI major version (or x.y.z) to write the line for")
    p.set_defaults(func=functools.partial(_cmd_rankfile, **helpers))

    p = subparsers.add_parser(
        "machinefile", help="map and write an MPICH / Intel MPI machinefile", epilog=_EPILOG,
        formatter_class=fmt,
        description=_wrap("Map the ranks, write a Hydra machinefile of host:count runs in rank order, "
                    "and print the per-node CPU lists (-bind-to user: for MPICH, "
                    "I_MPI_PIN_PROCESSOR_LIST for Intel MPI) and the mpiexec line."))
    _add_common(p, add_machine_args, "machinefile", hosts_required=True)
    add_device_arg(p)
    p.add_argument("--flavor", choices=mpich.FLAVORS, default="mpich",
                   help="mpich (Hydra mpiexec -f) or intel (mpiexec -machinefile); default mpich")
    p.set_defaults(func=functools.partial(_cmd_machinefile, **helpers))

    p = subparsers.add_parser(
        "slurm", help="map and write SLURM_HOSTFILE (+ map_cpu lists) inside a Slurm job",
        epilog=_EPILOG, formatter_class=fmt,
        description=_wrap("Read the allocation from the Slurm environment (or --hosts), map the ranks "
                    "and write the SLURM_HOSTFILE for srun --distribution=arbitrary (one host per "
                    "rank in rank order).") + "\n\n" + _wrap(
                    "In a prolog (--prolog or PROCMAP_PROLOG=1) procmap exits 0 within --timeout "
                    f"(default {slurm.PROLOG_TIMEOUT:g} s), whatever happens: Slurm's block "
                    "placement (hosts in order, each filled up to its CPUs) is written first, as "
                    "soon as the hosts and the task count (--ntasks, SLURM_NTASKS, else the "
                    "graph's) are known, and the mapping replaces it if it finishes in time. "
                    "Every failure, a bad argument included, keeps the fallback and writes one "
                    "line on stderr; nothing is written when the tasks outnumber the CPUs. A "
                    "prolog never compiles: with a cold kernel cache it falls back at once (run "
                    "procmap map on any small graph once beforehand)."))
    _add_common(p, add_machine_args, "hostfile", hosts_required=False)
    add_device_arg(p)
    p.add_argument("--cpu-bind", action="store_true",
                   help="also give --cpu-bind=map_cpu: lists (node-local rank -> core)")
    p.add_argument("--rank-map", metavar="FILE",
                   help="also write the rank map read by procmap_taskprolog.sh (PROCMAP_RANK_MAP)")
    # --timeout is checked by _parse_timeout (one line, and a fallback in a prolog).
    p.add_argument("--timeout", metavar="SEC",
                   help="wall-clock budget in seconds (> 0) from the start of procmap, reading "
                        "and mapping included; overrun is an error, with --prolog a fallback "
                        f"(default with --prolog: {slurm.PROLOG_TIMEOUT:g} s)")
    p.add_argument("--prolog", action="store_true",
                   help="prolog context (also PROCMAP_PROLOG=1): always exit 0 within the "
                        "budget, falling back to Slurm's block placement")
    p.error = functools.partial(_prolog_safe_error, p)  # type: ignore[method-assign]
    p.parse_known_args = functools.partial(  # type: ignore[method-assign]
        _slurm_parse_known_args, p)
    p.set_defaults(func=functools.partial(_cmd_slurm, **helpers))
