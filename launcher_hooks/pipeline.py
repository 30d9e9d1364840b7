"""What every launcher command (``rankfile``, ``machinefile``, ``slurm``) shares.

One pipeline: hosts (``--hosts``, ``--hostfile`` or the Slurm environment) and a
hierarchy give a :class:`~.placement.HostLayout` (:func:`layout_hosts`); the graph
is read and padded to the job's task count (:func:`read_job_graph`) and mapped with
rank placement (:func:`place`: never more ranks than slots, never worse than the
block placement); the cores inside every node are renumbered canonically (same J,
see :func:`~.placement.canonical_cores`). Also here: the checks made before any
work (:func:`check_ntasks`, :func:`check_slots`, :func:`check_outputs`), the
summaries (text and JSON) and the printing helpers for launch lines and CPU lists.
Each command then writes its launcher's file atomically and prints the launch line.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from procmap import baselines
from procmap.api import map_tasks
from procmap.errors import CapacityError, TopologyError
from procmap.formats import read_graph
from procmap.formats.atomic import check_output
from procmap.limits import MAX_TASKS
from procmap.objective import Evaluation, evaluate
from procmap.textfmt import num, plural, runlength, traffic_text
from procmap.topology import Hierarchy, describe, expand_hostlist, read_hostfile

from .placement import (HostLayout, canonical_cores, check_one_rank_per_core, format_cpus,
                        host_layout, locate, merge_host_slots)

__all__ = ["HostSpec", "Placed", "warn", "hosts_from_args", "hostfile_hosts", "layout_hosts",
           "read_job_graph", "check_ntasks", "check_slots", "check_outputs", "place", "summary",
           "summary_json", "print_commands", "print_lists", "progress_for"]

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


def warn(args, text: str) -> None:
    """A warning on stderr; only prolog mode silences it (its stderr is one line)."""
    if not getattr(args, "_silent", False):
        print(f"procmap: warning: {text}", file=sys.stderr)


def hosts_from_args(args) -> HostSpec | None:
    """``--hosts`` (a Slurm hostlist expression) or ``--hostfile``; None if neither."""
    if args.hosts is not None:
        return HostSpec(tuple(expand_hostlist(args.hosts)), None, f"--hosts {args.hosts}")
    if args.hostfile is not None:
        return hostfile_hosts(args.hostfile)
    return None


def hostfile_hosts(path: str) -> HostSpec:
    """The hosts of a hostfile in first-seen order, a repeated host's slots summed."""
    entries = merge_host_slots(read_hostfile(path))
    return HostSpec(tuple(h for h, _ in entries), tuple(s for _, s in entries), f"hostfile {path}")


def layout_hosts(args, topology, hosts: HostSpec) -> HostLayout:
    """Validate the machine for launcher use and put the hosts on its nodes."""
    if not isinstance(topology, Hierarchy):
        raise TopologyError("launcher files need a --hierarchy (its levels give hosts and cores); "
                            "an explicit distance matrix has no node boundary")
    check_one_rank_per_core(topology)
    return host_layout(topology, hosts.names, hosts.slots, args.node_level)


def _note_layout(args, layout: HostLayout) -> None:
    """What :func:`layout_hosts` decided on its own, said once the input has proved
    good (from :func:`place`): a bad graph is then one error line, not notes + error."""
    if layout.node_level_inferred:
        h = layout.hierarchy
        levels = ":".join(map(str, h.levels[:h.node_level])) or "none"
        _note(args, f"node level {h.node_level} inferred from "
                    f"{plural(len(layout.hosts), 'host')}: {layout.pes_per_node} PEs per host "
                    f"(levels {levels} inside a node; --node-level L to choose)")
    if layout.unused_hosts:
        extra = layout.unused_hosts
        _note(args, f"{plural(len(extra), 'host')} beyond the hierarchy's "
                    f"{len(layout.hosts)} nodes not used: {', '.join(extra[:4])}"
                    f"{', ...' if len(extra) > 4 else ''}")


def read_job_graph(args, ntasks: int | None, ntasks_source: str, layout: HostLayout | None = None):
    """Read the graph; pad it with silent ranks up to ``ntasks`` when the job has more.

    ``ntasks`` is checked first (:func:`check_ntasks`: at most ``MAX_TASKS`` and,
    given ``layout``, at most its slots), so that a huge ``SLURM_NTASKS`` costs a
    one-line error, not an allocation of that many tasks.
    """
    if ntasks is not None:
        check_ntasks(ntasks, ntasks_source, layout)
    graph = read_graph(args.graph, args.format)
    if ntasks is not None:
        if ntasks < graph.n:
            raise CapacityError(f"{ntasks_source} = {ntasks} tasks but {args.graph} has {graph.n} "
                                "ranks")
        # Ranks that never communicate are absent from a profile: add them.
        graph = graph.with_num_tasks(ntasks)
    return graph


def check_ntasks(ntasks: int, source: str, layout: HostLayout | None) -> None:
    """A job's task count (``--ntasks``, ``SLURM_NTASKS``), checked before anything of
    that size exists: at most ``MAX_TASKS``, and at most the slots of ``layout``."""
    if not 1 <= ntasks <= MAX_TASKS:
        raise CapacityError(f"{source} = {ntasks:,}: expected 1 to {MAX_TASKS:,} tasks")
    if layout is not None and ntasks > layout.hierarchy.total_slots:
        raise CapacityError(f"{source} = {ntasks:,} tasks but only "
                            f"{layout.hierarchy.total_slots:,} slots on {len(layout.hosts)} hosts "
                            f"({layout.pes_per_node} PEs per node); procmap never oversubscribes")


def check_slots(graph, layout: HostLayout, hosts: HostSpec) -> None:
    slots = layout.hierarchy.total_slots
    if graph.n <= slots:
        return
    per_host = layout.slots_per_host().tolist()
    detail = f"slots per host {runlength(per_host)}"
    if hosts.slots is not None:
        detail += " (a hostfile line without slots= counts 1)"
    raise CapacityError(f"{graph.n} ranks but only {slots} slots on {len(layout.hosts)} hosts "
                        f"({layout.pes_per_node} PEs per node; {detail}); procmap never "
                        "oversubscribes")


def place(args, layout: HostLayout, graph, progress) -> Placed:
    """Map, renumber cores canonically, evaluate against the block placement."""
    from procmap.warmup import cold_cache_notice

    _note_layout(args, layout)
    notice = cold_cache_notice()
    if notice:
        _note(args, notice)  # terminal or not: a silent minute looks like a hang
    topo = layout.hierarchy
    t0 = time.perf_counter()
    mapping = map_tasks(graph, topo, engine=args.engine, seed=args.seed, device=args.device,
                        progress=progress)
    pes = canonical_cores(mapping.pes, topo)
    ev = evaluate(graph, topo, pes)
    j_block = evaluate(graph, topo, baselines.block(graph.n, topo)).J
    node, core = locate(pes, layout)
    seconds = {"mapping": time.perf_counter() - t0}
    return Placed(layout, graph.n, graph.m, pes, node, core, mapping.engine, ev, j_block, seconds)


def summary(args, placed: Placed, hosts: HostSpec) -> list[str]:
    layout = placed.layout
    ev = placed.evaluation
    slots = layout.slots_per_host().tolist()
    how = "inferred" if layout.node_level_inferred else "given"
    lines = [
        f"graph     {args.graph}: {plural(placed.n, 'task')}, {plural(placed.edges, 'edge')}",
        f"machine   {describe(layout.hierarchy)}",
        f"hosts     {len(layout.hosts):,} from {hosts.source}; node level "
        f"{layout.hierarchy.node_level} ({how}): {plural(layout.pes_per_node, 'core')} per "
        f"host, slots {runlength(slots)}",
        f"engine    {placed.engine} (seed {args.seed}); cores renumbered per node (same J)",
    ]
    if getattr(args, "engine", None) == "im":
        # Launcher files are rank placement: say that im (partition mapping) was not used.
        _note(args, "note: --engine im: rank placement uses hm + swaps (im is for partition "
                    "mapping, more tasks than slots)")
    gain = placed.improvement
    verdict = f"{100 * gain:.1f}% lower" if gain >= 0 else f"{-100 * gain:.1f}% higher"
    lines.append(f"J         {num(ev.J)}   (block placement {num(placed.j_block)}: procmap is "
                 f"{verdict})")
    if ev.level_traffic is not None:
        lines.append(f"traffic   {traffic_text(ev.level_traffic, layout.hierarchy)}")
    return lines


def summary_json(args, placed: Placed, hosts: HostSpec) -> dict:
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


def print_commands(commands: list[tuple[str, str]]) -> None:
    print("launch with:")
    for label, command in commands:
        print(f"  {command}" + (f"      # {label}" if label else ""))


def print_lists(label: str, lists: list[tuple[str, list[int]]]) -> None:
    print(f"{label}:")
    for name, cpus in lists[:_MAX_LISTED]:
        print(f"  {name}: {format_cpus(cpus)}")
    if len(lists) > _MAX_LISTED:
        print(f"  ... {len(lists) - _MAX_LISTED} more (--json lists all)")


def progress_for(args, progress_class):
    return progress_class(not args.quiet and sys.stderr.isatty())


def check_outputs(args, rank_map: str | None = None) -> None:
    """Refuse an unwritable output, or one that is also an input (the graph,
    --hostfile, --distance-matrix) or the other output, before anything is read.
    ``rank_map`` defaults to ``--rank-map`` (slurm). Standard output is refused:
    the launch line names the file."""
    inputs = [args.graph, args.hostfile, args.distance_matrix]
    check_output(args.output, inputs, stdout=False)
    rank_map = rank_map if rank_map is not None else getattr(args, "rank_map", None)
    if rank_map is not None:
        check_output(rank_map, inputs, outputs=[args.output], stdout=False)
