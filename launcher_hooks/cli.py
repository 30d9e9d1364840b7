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
from dataclasses import dataclass
from typing import Callable

import numpy as np

from procmap import baselines
from procmap.api import ENGINES, map_tasks
from procmap.errors import CapacityError, ProcmapError, TopologyError
from procmap.formats import GRAPH_FORMATS, read_graph
from procmap.objective import Evaluation, evaluate
from procmap.topology import (Hierarchy, SlurmAllocation, describe, detect_slurm,
                              expand_hostlist, read_hostfile)

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


def _read_graph(args, ntasks: int | None, ntasks_source: str):
    """Read the graph; pad it with silent ranks up to ``ntasks`` when the job has more."""
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


# ----------------------------------------------------------------- rankfile
def _cmd_rankfile(args, *, machine: Callable, progress_class) -> int:
    # Check what can fail cheaply before the (possibly long) mapping.
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


def _slurm_run(args, machine: Callable, progress_class, deadline: float | None,
               state: dict) -> int:
    """The normal path; ``state`` records what is known for a prolog fallback."""
    hosts, alloc = _slurm_hosts(args)
    state["hosts"] = hosts
    ntasks, source = _slurm_ntasks(args, alloc)
    state["ntasks"] = ntasks
    layout = _layout(args, _slurm_machine(args, machine, hosts, alloc), hosts)
    state["layout"] = layout
    graph = _read_graph(args, ntasks, source)
    state["graph"] = graph
    _check_slots(graph, layout, hosts)
    placed = _place(args, layout, graph, _progress(args, progress_class), deadline)
    out = _slurm_outputs(args, placed.node, placed.core, layout.hosts)
    _print_slurm(args, placed, hosts, out, None)
    return 0


def _slurm_fallback(args, reason: str, state: dict) -> int:
    """Prolog context: write the block placement and say why, in exactly one stderr line."""
    hosts: HostSpec | None = state.get("hosts")
    layout: HostLayout | None = state.get("layout")
    graph = state.get("graph")
    try:
        if hosts is None:
            raise ProcmapError("no host list")
        placed = None
        if layout is not None and graph is not None and graph.n <= layout.hierarchy.total_slots:
            placed = _block_placed(layout, graph, "block (fallback)")
            node, core, names = placed.node, placed.core, layout.hosts
        else:
            n = graph.n if graph is not None else state.get("ntasks")
            if n is None:
                raise ProcmapError("the task count is unknown (no graph, no SLURM_NTASKS)")
            node, core = slurm.fallback_nodes(n, len(hosts.names), hosts.slots)
            names = hosts.names
        out = _slurm_outputs(args, node, core, names)
    except Exception as exc:  # noqa: BLE001 - a prolog must not fail, whatever happened
        print(f"procmap: prolog: {reason}; no fallback written ({_one_line(exc)})", file=sys.stderr)
        return 0
    print(f"procmap: prolog: {reason}; fell back to the block placement in {args.output}",
          file=sys.stderr)
    try:
        _print_slurm(args, placed, hosts, out, reason)
    except Exception:  # noqa: BLE001 - e.g. a closed stdout; the files are written
        pass
    return 0


def _one_line(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ").strip()
    if isinstance(exc, (ProcmapError, OSError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cmd_slurm(args, *, machine: Callable, progress_class) -> int:
    start = time.monotonic()
    if args.timeout is not None and args.timeout <= 0:
        raise ProcmapError(f"--timeout {args.timeout}: must be > 0 seconds")
    deadline = None if args.timeout is None else start + args.timeout
    state: dict = {}
    if not slurm.is_prolog_context(args.prolog):
        try:
            return _slurm_run(args, machine, progress_class, deadline, state)
        except slurm.MappingTimeout:
            raise ProcmapError(f"the mapping did not finish within --timeout {args.timeout:g} s; "
                               "nothing written (in a prolog, --prolog falls back instead)") from None
    # Prolog: stderr carries exactly one line, and only on fallback.
    args.quiet = True
    args._silent = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _slurm_run(args, machine, progress_class, deadline, state)
        except slurm.MappingTimeout:
            return _slurm_fallback(args, f"the mapping did not finish within --timeout "
                                         f"{args.timeout:g} s", state)
        except Exception as exc:  # noqa: BLE001 - ANY failure falls back in a prolog
            return _slurm_fallback(args, _one_line(exc), state)


def _prolog_safe_error(parser: argparse.ArgumentParser, message: str):
    """``error`` of the ``slurm`` subparser: in a prolog a usage error must not fail either.

    Only the subparser's own errors pass here (a missing graph, a bad number);
    unknown options are reported by the top-level parser and still exit 2.
    """
    if slurm.is_prolog_context("--prolog" in sys.argv[1:]):
        print(f"procmap: prolog: {message}; nothing written, launch with the default placement",
              file=sys.stderr)
        sys.exit(0)
    argparse.ArgumentParser.error(parser, message)


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
                    "rank in rank order). In a prolog (--prolog or PROCMAP_PROLOG=1) every failure "
                    "or a --timeout overrun falls back to the block placement, writes one line on "
                    "stderr and exits 0."))
    _add_common(p, add_machine_args, "hostfile", hosts_required=False)
    add_device_arg(p)
    p.add_argument("--cpu-bind", action="store_true",
                   help="also give --cpu-bind=map_cpu: lists (node-local rank -> core)")
    p.add_argument("--rank-map", metavar="FILE",
                   help="also write the rank map read by procmap_taskprolog.sh (PROCMAP_RANK_MAP)")
    p.add_argument("--timeout", type=float, metavar="SEC",
                   help="time budget from the start; overrun is an error (a fallback with --prolog)")
    p.add_argument("--prolog", action="store_true",
                   help="prolog context (also PROCMAP_PROLOG=1): never fail, fall back to block")
    p.error = functools.partial(_prolog_safe_error, p)  # type: ignore[method-assign]
    p.set_defaults(func=functools.partial(_cmd_slurm, **helpers))
