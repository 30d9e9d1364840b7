"""The launcher subcommands of ``procmap``: ``rankfile``, ``machinefile``, ``slurm``, ``rankorder``.

All four share one pipeline (:mod:`.pipeline`): hosts (``--hosts``, ``--hostfile``
or the Slurm environment) and a hierarchy give a :class:`~.placement.HostLayout`;
the graph is mapped with rank placement (never more ranks than slots, never worse
than the block placement); the cores inside every node are renumbered canonically
(same J, see :func:`~.placement.canonical_cores`); then each command writes its
launcher's file atomically and prints the launch line. Bad input is a
:class:`ProcmapError` (one line, exit 2, nothing written) -- except for ``procmap
slurm`` in a prolog, which falls back to the block placement and exits 0.

This module holds the ``rankfile`` and ``machinefile`` commands and the argparse
wiring (:func:`register`); the ``slurm`` command's normal path is in
:mod:`.slurm_command`, its prolog mode in :mod:`.prolog`. Imports flow one way:
``cli`` -> ``prolog`` -> ``slurm_command`` -> ``pipeline``.

:func:`register` is called by ``procmap.cli.build_parser`` with the helpers of
``procmap.cli`` as arguments, so that this module never imports ``procmap.cli``.
"""
from __future__ import annotations

import argparse
import functools
import json
import textwrap
from typing import Callable

import sys

from procmap.options import ENGINES, GRAPH_FORMATS, MPICH_FLAVORS
from procmap.textfmt import plural

# Building the parser (procmap --help) imports only light modules; each command
# imports the pipeline, the engines and its launcher's module when it runs.
from .context import PROLOG_TIMEOUT, is_prolog_context

__all__ = ["register"]


# ----------------------------------------------------------------- rankfile
def _cmd_rankfile(args, *, machine: Callable, progress_class) -> int:
    """``procmap rankfile``: the launch line starts with the Open MPI launcher found
    behind ``--mpirun`` (as given), or ``mpirun.openmpi`` when that name is another
    MPI's; ``--openmpi-version`` skips detection and prints ``--mpirun`` as given."""
    from . import mpi_detect, openmpi
    from .pipeline import (check_outputs, check_slots, hosts_from_args, layout_hosts, place,
                           print_commands, progress_for, read_job_graph, summary, summary_json)

    # Check what can fail cheaply before the (possibly long) mapping.
    check_outputs(args)
    forced = openmpi.parse_forced_version(args.openmpi_version) if args.openmpi_version else None
    hosts = hosts_from_args(args)
    layout = layout_hosts(args, machine(args), hosts)
    graph = read_job_graph(args, args.ntasks, "--ntasks")
    check_slots(graph, layout, hosts)
    launcher = None
    if forced is None:
        launcher = mpi_detect.pick_launcher(args.mpirun, mpi_detect.OPENMPI, option="--mpirun")
    version = forced or openmpi.version_of(launcher.info)
    mpirun = args.mpirun if launcher is None else launcher.name
    placed = place(args, layout, graph, progress_for(args, progress_class))
    commands = openmpi.launch_lines(version, placed.n, args.output, args.app, mpirun)
    # The launcher note first: it says whether the lines run here at all.
    notes = [launcher.note] if launcher is not None and launcher.note else []
    if not version.known:
        notes.append(f"Open MPI version unknown ({version.source}): both forms shown; "
                     "--openmpi-version 4|5 picks one")
    if version.major is None or version.major >= 5:
        notes.append(openmpi.OVERSUBSCRIBE_NOTE)
    notes.append("hosts must match the names the allocation uses (short names vs FQDN); "
                 "outside a resource manager, pass them to mpirun with --host or --hostfile")
    openmpi.write_rankfile(args.output, layout.hosts, placed.node, placed.core)

    if args.json:
        out = summary_json(args, placed, hosts)
        out.update({"output": args.output, "mpirun": mpirun,
                    "openmpi_version": version.version, "openmpi_source": version.source,
                    "commands": [c for _, c in commands], "notes": notes})
        print(json.dumps(out, indent=2))
        return 0
    for line in summary(args, placed, hosts):
        print(line)
    used = len(set(placed.node.tolist()))
    print(f"wrote     {args.output}: {plural(placed.n, 'rank')} on {plural(used, 'host')} "
          "(rank N=<host> slot=<node-local core>)")
    print_commands(commands)
    for note in notes:
        print(f"note: {note}")
    return 0


# -------------------------------------------------------------- machinefile
def _cmd_machinefile(args, *, machine: Callable, progress_class) -> int:
    """``procmap machinefile``: the launch line starts with the launcher of
    ``--flavor``'s MPI found behind ``--mpiexec`` or, when that name is another MPI's
    (Debian points ``mpiexec`` at Open MPI), ``mpiexec.hydra`` / ``mpiexec.mpich``;
    when none is found, a note says the line does not run here as printed."""
    from . import mpi_detect, mpich
    from .pipeline import (check_outputs, check_slots, hosts_from_args, layout_hosts, place,
                           print_commands, print_lists, progress_for, read_job_graph, summary,
                           summary_json, warn)

    check_outputs(args)
    hosts = hosts_from_args(args)
    layout = layout_hosts(args, machine(args), hosts)
    graph = read_job_graph(args, args.ntasks, "--ntasks")
    check_slots(graph, layout, hosts)
    want = mpi_detect.INTEL if args.flavor == "intel" else mpi_detect.MPICH
    launcher = mpi_detect.pick_launcher(args.mpiexec, want, option="--mpiexec")
    placed = place(args, layout, graph, progress_for(args, progress_class))
    plan = mpich.plan_hydra(args.flavor, layout.hosts, placed.node, placed.core, args.output,
                            args.app, launcher.name)
    if launcher.note:
        plan.notes.insert(0, launcher.note)
    for text in plan.warnings:
        warn(args, text)
    mpich.write_machinefile(args.output, layout.hosts, plan.runs)

    if args.json:
        out = summary_json(args, placed, hosts)
        out.update({"output": args.output, "flavor": args.flavor, "mpiexec": launcher.name,
                    "runs": [[layout.hosts[node], count] for node, count in plan.runs],
                    "interleaved_hosts": [layout.hosts[i] for i in plan.interleaved],
                    "cpu_lists": [{"group": name, "cpus": cpus} for name, cpus in plan.lists],
                    "common_cpu_list": plan.common,
                    "commands": [c for _, c in plan.commands], "notes": plan.notes,
                    "warnings": plan.warnings})
        print(json.dumps(out, indent=2))
        return 0
    for line in summary(args, placed, hosts):
        print(line)
    print(f"wrote     {args.output}: {plural(len(plan.runs), 'host:count line')} for "
          f"{plural(placed.n, 'rank')}"
          + (f" ({plural(len(plan.interleaved), 'host')} interleaved)" if plan.interleaved
             else ""))
    group = "per Hydra block (run)" if args.flavor == "mpich" else "per host"
    print_lists(f"cpus      node-local rank -> core, {group}", plan.lists)
    print_commands(plan.commands)
    for note in plan.notes:
        print(f"note: {note}")
    return 0


# -------------------------------------------------------------------- slurm
def _cmd_slurm(args, *, machine: Callable, progress_class) -> int:
    """``procmap slurm``: in a prolog context :func:`.prolog.slurm_prolog`, else
    :func:`.slurm_command.cmd_slurm`."""
    if is_prolog_context(args.prolog):
        from .prolog import slurm_prolog

        return slurm_prolog(args, machine, progress_class)
    from .slurm_command import cmd_slurm

    return cmd_slurm(args, machine=machine, progress_class=progress_class)


def _slurm_error(parser: argparse.ArgumentParser, message: str):
    """``error`` of the ``slurm`` subparser: :func:`.prolog.prolog_safe_error`."""
    from .prolog import prolog_safe_error

    prolog_safe_error(parser, message)


def _slurm_parse_known_args(parser: argparse.ArgumentParser, args=None, namespace=None):
    """``parse_known_args`` of the ``slurm`` subparser: remembers the words (for
    :func:`.prolog.prolog_safe_error`) and, in a prolog, keeps unknown options for
    :func:`.prolog.slurm_prolog` to report instead of argparse's exit 2."""
    words = list(sys.argv[1:] if args is None else args)
    parser._procmap_argv = words  # type: ignore[attr-defined]
    ns, extras = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
    if extras and is_prolog_context(getattr(ns, "prolog", False)):
        ns._prolog_extras = extras
        extras = []
    return ns, extras


# --------------------------------------------------------------- rankorder
def _cmd_rankorder(args, *, machine: Callable, progress_class) -> int:
    """``procmap rankorder``: an HPE Cray MPICH rank-order file (:mod:`.cray`)."""
    from procmap.errors import ProcmapError

    from . import cray
    from .pipeline import (HostSpec, check_outputs, check_slots, hosts_from_args, layout_hosts,
                           place, print_commands, progress_for, read_job_graph, summary,
                           summary_json, warn)

    check_outputs(args)
    if args.nodes is not None and (args.hosts is not None or args.hostfile is not None):
        raise ProcmapError("give --nodes or --hosts/--hostfile, not both")
    topology = machine(args)
    # The file names no host: hosts, when given, only count the nodes.
    hosts = hosts_from_args(args)
    if hosts is None:
        names, source = cray.placeholder_hosts(args.nodes, args.node_level, topology)
        hosts = HostSpec(tuple(names), None, source)
    layout = layout_hosts(args, topology, hosts)
    graph = read_job_graph(args, args.ntasks, "--ntasks")
    check_slots(graph, layout, hosts)
    placed = place(args, layout, graph, progress_for(args, progress_class))
    plan = cray.plan_rankorder(placed.node, placed.core, args.output, args.app)
    for text in plan.warnings:
        warn(args, text)
    cray.write_rank_order(args.output, plan.lines)

    if args.json:
        out = summary_json(args, placed, hosts)
        out.update({"output": args.output, "ranks_per_node": plan.counts,
                    "rank_ranges": plan.ranges, "pmi_mapping_bytes": plan.pmi_bytes,
                    "scattered": plan.scattered, "environment": plan.env,
                    "commands": [c for _, c in plan.commands], "notes": plan.notes,
                    "warnings": plan.warnings})
        print(json.dumps(out, indent=2))
        return 0
    for line in summary(args, placed, hosts):
        print(line)
    print(f"wrote     {args.output}: {plural(placed.n, 'rank')} on "
          f"{plural(len(plan.lines), 'node')}, one line per node "
          f"({plural(plan.ranges, 'rank range')})")
    print("set:")
    for line in plan.env:
        print(f"  {line}")
    print_commands(plan.commands)
    for note in plan.notes:
        print(f"note: {note}")
    return 0


# ---------------------------------------------------------------- register
_NODE_LEVEL = """
node level: the levels of --hierarchy below the node boundary become node-local
core numbers: 4:8:6 on 6 hosts = node level 2 = 32 cores per host. Without
--node-level it is inferred from the number of hosts (the level with exactly that
many nodes). Core numbers are logical cores in hierarchy order; they are renumbered
inside each node without changing J so that nodes with the same pattern share one
CPU list.
"""

#: The examples at the end of each command's --help (then the node-level text).
_EXAMPLES = {
    "rankfile": """\
examples:
  procmap rankfile app.comm --hierarchy 4:8:6 --hosts 'node[01-06]' -o app.rankfile
  procmap rankfile app.comm -H 4:8:6 --hostfile hosts.txt --openmpi-version 5
  procmap rankfile app.comm -H 4:8:6 -d 1:10:100 --hosts 'node[01-06]' --ntasks 192
""",
    "machinefile": """\
examples:
  procmap machinefile app.comm -H 4:8:6 --hosts 'node[01-06]' -o machinefile
  procmap machinefile app.comm -H 4:8:6 --hosts 'node[01-06]' --flavor intel
  procmap machinefile app.comm -H 4:8:6 --hostfile hosts.txt --app './app -in x'
""",
    "rankorder": """\
examples:
  procmap rankorder app.comm -H 4:8:6 --nodes 6 -o MPICH_RANK_ORDER
  procmap rankorder app.comm -H 4:8:6 --hosts 'nid[001-006]' -o order.txt
  procmap rankorder app.comm -H 4:8:6 --node-level 2 --ntasks 192
""",
    "slurm": """\
examples:
  procmap slurm app.comm -H 4:8:6 --cpu-bind -o hosts.$SLURM_JOB_ID   # inside a job
  procmap slurm app.comm -H 4:8:6 --rank-map ranks.$SLURM_JOB_ID -o hosts.$SLURM_JOB_ID
  procmap slurm app.comm -H 4:8:6 --hosts 'node[01-06]' -o hosts   # outside a job
  PROCMAP_PROLOG=1 procmap slurm app.comm -H 4:8:6 --timeout 20 -o hosts   # prolog
""",
}


def _epilog(command: str) -> str:
    return _EXAMPLES[command] + _NODE_LEVEL


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
        "rankfile", help="map and write an Open MPI rankfile", epilog=_epilog("rankfile"), formatter_class=fmt,
        description=_wrap("Map the ranks onto the hosts and cores, write an Open MPI rankfile "
                    "(rank N=<host> slot=<node-local core> for every rank) and print the mpirun "
                    "line for the installed Open MPI (4.x --rankfile, 5.x --map-by rankfile:file=)."))
    _add_common(p, add_machine_args, "rankfile", hosts_required=True)
    add_device_arg(p)
    p.add_argument("--mpirun", default="mpirun", metavar="PATH",
                   help="Open MPI launcher to print and whose --version picks the launch line "
                        "(default: mpirun on PATH; mpirun.openmpi when mpirun is another MPI's)")
    p.add_argument("--openmpi-version", metavar="4|5",
                   help="skip detection: the Open MPI major version (or x.y.z) to write the line for")
    p.set_defaults(func=functools.partial(_cmd_rankfile, **helpers))

    p = subparsers.add_parser(
        "machinefile", help="map and write an MPICH / Intel MPI machinefile",
        epilog=_epilog("machinefile"),
        formatter_class=fmt,
        description=_wrap("Map the ranks, write a Hydra machinefile of host:count runs in rank order, "
                    "and print the per-node CPU lists (-bind-to user: for MPICH, "
                    "I_MPI_PIN_PROCESSOR_LIST for Intel MPI) and the mpiexec line."))
    _add_common(p, add_machine_args, "machinefile", hosts_required=True)
    add_device_arg(p)
    p.add_argument("--flavor", choices=MPICH_FLAVORS, default="mpich",
                   help="mpich (Hydra mpiexec -f) or intel (mpiexec -machinefile); default mpich")
    p.add_argument("--mpiexec", default="mpiexec", metavar="PATH",
                   help="launcher to print, checked with --version (default: mpiexec on PATH; "
                        "mpiexec.hydra or mpiexec.mpich when mpiexec is another MPI's)")
    p.set_defaults(func=functools.partial(_cmd_machinefile, **helpers))

    p = subparsers.add_parser(
        "slurm", help="map and write SLURM_HOSTFILE (+ map_cpu lists) inside a Slurm job",
        epilog=_epilog("slurm"), formatter_class=fmt,
        description=_wrap("Read the allocation from the Slurm environment (or --hosts), map the ranks "
                    "and write the SLURM_HOSTFILE for srun --distribution=arbitrary (one host per "
                    "rank in rank order).") + "\n\n" + _wrap(
                    "In a prolog (--prolog or PROCMAP_PROLOG=1) procmap exits 0 within --timeout "
                    f"(default {PROLOG_TIMEOUT:g} s), whatever happens: Slurm's block "
                    "placement (hosts in order, each filled up to its CPUs) is written first, as "
                    "soon as the hosts and the task count (--ntasks, SLURM_NTASKS, else the "
                    "graph's) are known, and the mapping replaces it if it finishes in time. "
                    "Every failure, a bad argument included, keeps the fallback and writes one "
                    "line on stderr; nothing is written when the tasks outnumber the CPUs. A "
                    "prolog never compiles: with a cold kernel cache it falls back at once (run "
                    "procmap warmup once beforehand)."))
    _add_common(p, add_machine_args, "hostfile", hosts_required=False)
    add_device_arg(p)
    p.add_argument("--cpu-bind", action="store_true",
                   help="also give --cpu-bind=map_cpu: lists (node-local rank -> core)")
    p.add_argument("--rank-map", metavar="FILE",
                   help="also write the rank map read by procmap_taskprolog.sh (PROCMAP_RANK_MAP)")
    # --timeout is checked by slurm_command.parse_timeout (one line, and a fallback in a prolog).
    p.add_argument("--timeout", metavar="SEC",
                   help="wall-clock budget in seconds (> 0) from the start of procmap, reading "
                        "and mapping included; overrun is an error, with --prolog a fallback "
                        f"(default with --prolog: {PROLOG_TIMEOUT:g} s)")
    p.add_argument("--prolog", action="store_true",
                   help="prolog context (also PROCMAP_PROLOG=1): always exit 0 within the "
                        "budget, falling back to Slurm's block placement")
    p.error = functools.partial(_slurm_error, p)  # type: ignore[method-assign]
    p.parse_known_args = functools.partial(  # type: ignore[method-assign]
        _slurm_parse_known_args, p)
    p.set_defaults(func=functools.partial(_cmd_slurm, **helpers))

    p = subparsers.add_parser(
        "rankorder", help="map and write an HPE Cray MPICH rank-order file (MPICH_RANK_ORDER)",
        epilog=_epilog("rankorder"), formatter_class=fmt,
        description=_wrap("Map the ranks and write the rank-order file that HPE Cray MPICH "
                    "reads with MPICH_RANK_REORDER_METHOD=3: comma-separated rank ids (a-b "
                    "ranges) in slot order, one line per node. Node names are not in the "
                    "file: --nodes, --node-level, --hosts or --hostfile only give the node "
                    "count. Prints the environment to set and the srun line."))
    _add_common(p, add_machine_args, "MPICH_RANK_ORDER", hosts_required=False)
    add_device_arg(p)
    p.add_argument("--nodes", "-N", type=int, metavar="N",
                   help="number of nodes (instead of --hosts / --hostfile)")
    p.set_defaults(func=functools.partial(_cmd_rankorder, **helpers))
