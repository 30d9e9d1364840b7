"""The ``procmap`` command line.

Every command reports bad input as one line on stderr and exits with status 2;
``--debug`` shows the traceback instead. Outputs are written atomically.

``procmap map`` reads a large input (:mod:`procmap.startup`) while it imports
its engines and sets up Numba (and CuPy, for the GPU) in a background thread;
``PROCMAP_OVERLAP=0`` turns that off (same mapping, for measurements). Its time
line (the JSON's ``seconds``) accounts for the whole run, from the process's start.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
import warnings

# Only what building the parser needs is imported here (procmap --version and --help
# must not pay for NumPy, Numba or the engines); each command imports its own.
from . import __version__, startup
from .errors import ProcmapError
from .textfmt import num, plural, traffic_text
from .options import (AUTO_GPU_MIN_EDGES, BASELINES, COARSENINGS, DEVICES, ENGINES,
                      GRAPH_FORMATS, REFINEMENTS, WRITABLE_FORMATS)

CONVENTIONS = """\
conventions:
  --hierarchy a1:a2:...:al is given leaf first: 4:8:6 = 4 cores per processor,
  8 processors per node, 6 nodes (192 PEs). PE p and q share level t iff
  p // (a1*...*at) == q // (a1*...*at). --distance d1:...:dl is the cost of one
  unit of traffic between PEs whose deepest common group is level t.
  J = sum over ordered pairs C_ij * D(pe_i, pe_j): every undirected edge counts twice.
"""

#: The overview's examples (``procmap --help``): one or two per command.
EPILOG = """\
examples:
  procmap rankfile app.comm --hierarchy 4:8:6 --distance 1:10:100 --hosts 'node[01-06]'
  procmap machinefile app.comm -H 4:8:6 --hosts 'node[01-06]' --flavor intel
  procmap slurm app.comm -H 4:8:6 --cpu-bind -o hosts.$SLURM_JOB_ID   # inside a job
  procmap eval app.comm --baseline block --hierarchy 4:8:6 --distance 1:10:100
  procmap rankorder app.comm -H 4:8:6 --nodes 6 -o MPICH_RANK_ORDER   # HPE Cray MPICH
  procmap map app.comm --hierarchy 4:8:6 --distance 1:10:100 -o app.map
  procmap report app.comm --engine auto -H 4:8:6 -o report.html      # pictures
  procmap topology                 # hierarchy of this machine (or of the Slurm job)
  procmap topology --hwloc node.xml                 # from lstopo --of xml
  procmap convert app.comm app.pmg # binary: the fastest to read
  procmap warmup                   # compile every kernel once per installation

every command has its own examples: procmap COMMAND --help

""" + CONVENTIONS

#: Examples of each command of this module, shown at the end of its --help.
EXAMPLES = {
    "map": """\
examples:
  procmap map app.comm --hierarchy 4:8:6 --distance 1:10:100 -o app.map
  procmap map app.comm -H 4:8:6 --slots 2 -o app.map      # rank placement, 2 ranks per core
  procmap map mesh.graph -H 4:8:6 --engine im --imbalance 0.03 --seed 1 --json -o mesh.map
  procmap map big.graph -H 4:8:6 --device gpu -o - > big.map   # report on stderr
""",
    "eval": """\
examples:
  procmap eval app.comm --baseline block --hierarchy 4:8:6 --distance 1:10:100
  procmap eval grid.graph --mapping grid.map --hierarchy 4:8:6 --json
  procmap eval app.mtx --baseline random --hierarchy "tleaf 3 6 100 8 10 4 1"
  procmap eval app.comm --mapping app.map --distance-matrix dist.txt
""",
    "topology": """\
examples:
  procmap topology                 # this machine, or the Slurm job's nodes inside a job
  procmap topology --local --json  # this machine only, as JSON
  procmap topology --node-from-sysfs --tleaf   # Slurm nodes split like this one, as tleaf
  procmap topology --hwloc node.xml            # from lstopo --of xml: one PE per core
  procmap map app.comm --topology node.xml -o app.map
  procmap map app.comm --hierarchy "$(procmap topology)" -o app.map
""",
    "convert": """\
examples:
  procmap convert app.comm app.graph          # formats from the extensions
  procmap convert app.prof app.comm           # a profile to procmap's .comm
  procmap convert matrix.txt app.mtx --from comm
  procmap convert app.comm - --to metis | head
""",
    "warmup": """\
examples:
  procmap warmup                   # once per installation (or cluster image)
  NUMBA_CACHE_DIR=/shared/numba procmap warmup   # a cache the jobs will read
  procmap warmup --gpu --json
""",
}


# ---------------------------------------------------------------- machine
def add_device_arg(p: argparse.ArgumentParser) -> None:
    """``--device``: shared by every command that maps."""
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where to compute: gpu (CuPy and a CUDA GPU; error if none), cpu, or "
                        "auto (default: the GPU for graphs of at least "
                        f"{AUTO_GPU_MIN_EDGES:,} directed edges when one is usable). Rank "
                        "placement and small subproblems always run on the CPU")


def _add_machine_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    from .limits import MAX_SLOTS

    g = p.add_argument_group("machine")
    g.add_argument("--hierarchy", "-H", metavar="A1:A2:..",
                   help="machine hierarchy, leaf first (e.g. 4:8:6), or a Scotch "
                        "'tleaf L s0 c0 ...' string (root first)")
    g.add_argument("--distance", "-d", metavar="D1:D2:..",
                   help="distance per level, leaf first (default 1:10:100:...)")
    g.add_argument("--distance-matrix", metavar="FILE",
                   help="explicit k x k distance matrix (text or .npy) instead of a hierarchy")
    g.add_argument("--topology", metavar="FILE.xml",
                   help="hwloc XML export (lstopo --of xml; hwloc 1.x to 3.x) instead of a hierarchy: "
                        "one PE per core, levels cores:L3/NUMA:packages:... (see procmap "
                        "topology --hwloc); offline and disallowed CPUs get no slots")
    g.add_argument("--hwloc-pus", action="store_true",
                   help="with --topology: one PE per hardware thread (PU) instead of per core")
    # --slots is checked by _machine, not by argparse (type=int would also take
    # "4_0" and fullwidth digits, and its errors print the usage, not one line).
    g.add_argument("--slots", default=None, metavar="N",
                   help="slots per PE: tasks a PE may hold in rank placement (default 1, at "
                        f"most {MAX_SLOTS:,}). Giving it asks for rank placement: more tasks "
                        "than slots is then an error")
    p.set_defaults(_machine_required=required)


def _parse_slots(value: str | int | None) -> int:
    """``--slots``: ASCII digits, 0..MAX_SLOTS (1 when not given)."""
    from .limits import MAX_SLOTS, parse_count

    return 1 if value is None else parse_count(str(value), f"--slots {value}", 0, MAX_SLOTS)


def _machine(args):
    """The machine of ``--hierarchy``/``--distance``/``--distance-matrix``/``--topology``
    with ``--slots`` slots on every PE (on every usable PE of an hwloc ``--topology``). Every size is checked (``procmap.limits``) before
    a per-PE array exists; bad input raises a :class:`ProcmapError`."""
    import numpy as np

    from .topology import DistanceMatrix, Hierarchy, from_tleaf

    slots = _parse_slots(args.slots)
    hwloc = getattr(args, "topology", None)
    if hwloc:
        if args.hierarchy or args.distance_matrix:
            raise ProcmapError("give one of --hierarchy, --distance-matrix and --topology")
        from .topology import read_hwloc

        h = read_hwloc(hwloc, pus=args.hwloc_pus, distances=args.distance).hierarchy
        # PEs the file shows offline or disallowed keep capacity 0.
        return h.with_capacities(h.capacities * slots)
    if getattr(args, "hwloc_pus", False):
        raise ProcmapError("--hwloc-pus needs --topology FILE.xml")
    if args.distance_matrix:
        if args.hierarchy:
            raise ProcmapError("give either --hierarchy or --distance-matrix, not both")
        dm = DistanceMatrix.from_file(args.distance_matrix)
        return dm.with_capacities(np.full(dm.k, slots, dtype=np.int64))
    if not args.hierarchy:
        raise ProcmapError("--hierarchy (or --distance-matrix, or --topology) is required")
    if args.hierarchy.strip().startswith("tleaf"):
        if args.distance:
            raise ProcmapError("a tleaf string carries its distances; drop --distance")
        h = from_tleaf(args.hierarchy)
    else:
        h = Hierarchy.parse(args.hierarchy, args.distance)
    return h.with_capacities(np.full(h.k, slots, dtype=np.int64))


def _describe_machine(topo) -> str:
    if hasattr(topo, "prefix_sizes"):
        from .topology import describe
        return describe(topo)
    return f"explicit distance matrix, {topo.k} PEs"


# ------------------------------------------------------------------- eval
def _read_mapping_for(graph, path: str):
    """``(graph, pes)``: the mapping file ``path`` (one PE per task) read for ``graph``,
    which is padded with silent tasks when the mapping has more (ranks that never
    communicate are absent from a matrix); fewer entries than tasks is an error."""
    from .formats import read_mapping

    pes = read_mapping(path)
    if pes.size > graph.n:
        graph = graph.with_num_tasks(pes.size)
    elif pes.size < graph.n:
        raise ProcmapError(f"{path}: {plural(pes.size, 'entry', 'entries')} but the graph has "
                           f"{plural(graph.n, 'task')}")
    return graph, pes


def _cmd_eval(args) -> int:
    from . import baselines
    from .formats import read_graph
    from .objective import evaluate

    topo = _machine(args)
    t0 = time.perf_counter()
    graph = read_graph(args.graph, args.format)
    t_read = time.perf_counter() - t0
    if args.mapping:
        graph, pes = _read_mapping_for(graph, args.mapping)
        source = args.mapping
    else:
        pes = baselines.baseline(args.baseline, graph.n, topo, args.seed)
        source = f"{args.baseline} baseline"
    t0 = time.perf_counter()
    ev = evaluate(graph, topo, pes, eps=args.imbalance)
    t_eval = time.perf_counter() - t0
    if args.json:
        out = {"graph": args.graph, "tasks": graph.n, "edges": graph.m, "mapping": source,
               "machine": _describe_machine(topo), **ev.as_dict(),
               "seconds": {"read": t_read, "evaluate": t_eval}}
        print(json.dumps(out, indent=2))
        return 0
    _print_header(args.graph, graph, topo)
    print(f"mapping   {source}")
    _print_quality(ev, topo)
    print(f"time      read {t_read:.3f} s, evaluate {t_eval:.3f} s, "
          f"total {t_read + t_eval:.3f} s")
    return 0


# -------------------------------------------------------------------- map
class _Progress:
    """Phase-by-phase progress on stderr (only on a terminal unless forced)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.perf_counter()

    def __call__(self, phase: str, detail: str = "") -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.start
            print(f"procmap: [{elapsed:7.2f} s] {phase}{': ' + detail if detail else ''}",
                  file=sys.stderr, flush=True)


def _announce_compile(quiet: bool) -> None:
    """Say on stderr, terminal or not, that a first-run compile is about to start."""
    from .warmup import cold_cache_notice

    notice = None if quiet else cold_cache_notice()
    if notice:
        print(f"procmap: {notice}", file=sys.stderr, flush=True)


def _set_threads(n: int) -> None:
    """``--threads``: Numba's thread count for this process (at most NUMBA_NUM_THREADS,
    which is fixed when Numba starts)."""
    import numba

    from .errors import InputError

    limit = numba.config.NUMBA_NUM_THREADS
    if not 1 <= n <= limit:
        raise InputError(f"--threads {n}: must lie in 1..{limit} (NUMBA_NUM_THREADS; by default "
                         "the number of cores)")
    numba.set_num_threads(n)


#: Set by :func:`console`: the process is the ``procmap`` executable, so its start is
#: this command's start (the time line then has a ``start-up`` phase).
_STARTED_BY_CONSOLE = False


def _cmd_map(args) -> int:
    # The time line (JSON "seconds") covers the whole run, phase after phase of the
    # main thread: start-up (process start to here, for the procmap executable),
    # imports, machine, read, warm-up (waiting for the background set-up, when one
    # ran), mapping set-up (map_tasks outside its own "total"), the mapping's phases,
    # evaluate block, write.
    t_entry = time.perf_counter()
    age = startup.process_age() if _STARTED_BY_CONSOLE else None
    from .formats.atomic import check_output

    to_stdout = False
    if args.output is not None:
        # Before any input is read: a bad -o fails at once, not after the mapping.
        to_stdout = check_output(args.output, [args.graph, args.distance_matrix]).kind == "stdout"
    size = startup.overlap_wanted(args)
    # A large input is read while the interpreter imports the engines (the imports
    # hold the interpreter lock, the read does not).
    prefetch = startup.start_prefetch(args, size)
    try:
        return _map_command(args, t_entry, age, to_stdout, size,
                            None if prefetch == "bytes" else prefetch)
    finally:
        if prefetch == "bytes":
            from .formats.atomic import discard_prefetch

            discard_prefetch(args.graph)  # not taken (an error came first): dropped
        elif prefetch is not None:
            prefetch.cancel()  # an error before the read was used: stop reading


def _map_command(args, t_entry: float, age: float | None, to_stdout: bool, size: int | None,
                 prefetch) -> int:
    from . import baselines
    from .api import map_tasks
    from .engines.context import preset
    from .errors import CapacityError
    from .formats import read_graph, write_mapping
    from .objective import evaluate

    seconds: dict[str, float] = {}
    if age is not None:
        seconds["start-up"] = age
    stamp = time.perf_counter()
    seconds["imports"] = stamp - t_entry  # numba, scipy: most of start-up

    def lap(phase: str) -> None:
        nonlocal stamp
        now = time.perf_counter()
        seconds[phase] = now - stamp
        stamp = now

    def lap_add(phase: str) -> None:  # a phase the main thread enters more than once
        before = seconds[phase]
        lap(phase)
        seconds[phase] += before

    warm = startup.WarmUp(startup.warm_gpu_wanted(args, size)) if size is not None else None
    topo = _machine(args)
    if args.threads is not None:
        _set_threads(args.threads)
    lap("machine")
    progress = _Progress(not args.quiet and (args.progress or sys.stderr.isatty()))
    if prefetch is not None:
        # The file has been read since the start (its bytes only): the validation's
        # kernels would wait for Numba's set-up anyway, which is then its own phase;
        # the GPU's set-up goes on while they run.
        warm.wait("numba")
        lap("warm-up")
        graph = prefetch.result()
        lap("read")
    else:
        # The reader copies the file while the warm-up runs, then parses and checks
        # it with kernels that wait for Numba's set-up on its compiler lock.
        graph = read_graph(args.graph, args.format)
        from .formats.atomic import discard_prefetch

        discard_prefetch(args.graph)  # bytes read ahead that the reader did not take
        lap("read")
    if warm is not None:
        warm.wait()
        seconds["warm-up"] = seconds.get("warm-up", 0.0)  # placed here when not before
        lap_add("warm-up")
    progress("read", f"{plural(graph.n, 'task')}, {plural(graph.m, 'edge')}")
    if args.slots is not None and graph.n > topo.total_slots:
        raise CapacityError(f"{plural(graph.n, 'task')} but only "
                            f"{plural(topo.total_slots, 'slot')} ({plural(topo.k, 'PE')} x "
                            f"{args.slots}); rank placement needs tasks <= slots")
    _announce_compile(args.quiet)
    # --coarsening / --refinement derive the engine's preset (procmap.engines.context)
    context = preset(args.engine).with_schemes(args.coarsening, args.refinement)
    mapping = map_tasks(graph, topo, engine=args.engine, eps=args.imbalance, seed=args.seed,
                        device=args.device, context=context, progress=progress)
    now = time.perf_counter()
    # input checks and the device choice (the GPU probe) happen before the mapping's clock
    seconds["mapping set-up"] = max(0.0, now - stamp - mapping.seconds.get("total", 0.0))
    seconds.update(mapping.seconds)
    stamp = now
    block = evaluate(graph, topo, baselines.block(graph.n, topo), eps=args.imbalance)
    lap("evaluate block")  # for the "vs block" line
    if args.output is not None:
        write_mapping(mapping.pes, args.output)
        lap("write")
    # With -o - standard output carries the mapping: the report (text or JSON) goes
    # to stderr instead, so that `procmap map ... -o - > app.map` is a clean file.
    with contextlib.redirect_stdout(sys.stderr if to_stdout else sys.stdout):
        _print_map_report(args, graph, topo, mapping, block.J, seconds, to_stdout)
    _note_mode(args, graph, topo, mapping.evaluation)
    if args.engine == "im" and mapping.evaluation.mode == "placement":
        _note(args, f"--engine im: rank placement ({plural(graph.n, 'task')} <= "
                    f"{plural(topo.total_slots, 'slot')}) uses {mapping.engine} + swaps; im is "
                    "for partition mapping (more tasks than slots)")
    if args.output is None:
        _note(args, "mapping not written (give -o FILE)")
    return 0


def _note(args, text: str) -> None:
    """One ``procmap: note: ...`` line on stderr (silenced by --quiet)."""
    if not getattr(args, "quiet", False):
        print(f"procmap: note: {text}", file=sys.stderr, flush=True)


def _note_mode(args, graph, topo, ev) -> None:
    """Say so when more tasks than slots switched ``map`` to partition mapping without
    --slots: rank placement (--slots N, N tasks per PE at most) may have been meant."""
    if args.slots is not None or ev.mode != "partition":
        return
    import math

    _note(args, f"{plural(graph.n, 'task')} on {plural(topo.k, 'PE')}: partition mapping "
                f"(L_max {num(ev.limit)} task weight per PE); give --slots N (e.g. --slots "
                f"{math.ceil(graph.n / topo.k):,}) for rank placement")


def _print_map_report(args, graph, topo, mapping, j_block, seconds: dict, to_stdout: bool) -> None:
    ev = mapping.evaluation
    gain = (1.0 - ev.J / j_block) if j_block else 0.0
    if args.json:
        out = {"graph": args.graph, "tasks": graph.n, "edges": graph.m,
               "machine": _describe_machine(topo), "output": args.output,
               **mapping.as_dict(), "seconds": seconds, "J_block": j_block,
               "improvement_over_block": gain}
        print(json.dumps(out, indent=2))
        return
    _print_header(args.graph, graph, topo)
    print(f"engine    {mapping.engine} (seed {args.seed}, {mapping.device})")
    _print_quality(ev, topo)
    verdict = f"{100 * gain:.1f}% lower" if gain >= 0 else f"{-100 * gain:.1f}% higher"
    print(f"vs block  J {num(j_block)} for the block placement: procmap is {verdict}")
    print("time      " + _time_text(seconds))
    if args.output is not None:
        print(f"wrote     {'standard output' if to_stdout else args.output}")


#: The phases of ``procmap map``'s ``seconds`` (``--json``) timed around the mapping, not
#: inside it: ``seconds["total"]`` (the mapping's) leaves them out, so the time of the
#: whole run is ``seconds["total"]`` plus these (the report's time line adds them up).
OUTSIDE_MAPPING = ("start-up", "imports", "machine", "read", "warm-up", "mapping set-up",
                   "evaluate block", "write")


def _time_text(seconds: dict) -> str:
    """The map report's time line: each phase, then the total of everything timed
    (``seconds["total"]``, as in the JSON, is the mapping alone; the phases around it
    are added here). With a ``start-up`` phase (the ``procmap`` executable on Linux)
    the total runs from the process's start; what it leaves out is the report and
    the exit."""
    phases = {k: v for k, v in seconds.items() if k != "total"}
    text = ", ".join(f"{k} {v:.3f} s" for k, v in phases.items())
    if "total" in seconds:
        total = seconds["total"] + sum(seconds.get(k, 0.0) for k in OUTSIDE_MAPPING)
        since = ")" if "start-up" in seconds else ", interpreter start aside)"
        text += f"; total {total:.3f} s (start-up to written file{since}"
    return text


def _print_header(path, graph, topo) -> None:
    print(f"graph     {path}: {plural(graph.n, 'task')}, {plural(graph.m, 'edge')}")
    print(f"machine   {_describe_machine(topo)}")


def _print_quality(ev, topo=None) -> None:
    print(f"J         {num(ev.J)}   (every undirected edge counted twice)")
    print(f"edge cut  {num(ev.cut)}")
    if ev.level_traffic is not None:
        print(f"traffic   {traffic_text(ev.level_traffic, topo)}")
    if ev.mode == "placement":
        print(f"load      rank placement: at most {plural(ev.counts.max(initial=0), 'task')} on "
              f"a PE; {plural(ev.violations, 'PE')} over capacity")
    else:
        print(f"load      max {num(ev.loads.max(initial=0))} / L_max {num(ev.limit)} "
              f"(imbalance {100 * ev.imbalance:.2f}%); {plural(ev.violations, 'PE')} over the "
              "limit")


# --------------------------------------------------------------- topology
def _cmd_topology(args) -> int:
    from .topology import describe, detect_local, detect_slurm, to_tleaf

    source = "sysfs"
    h = None
    extra = {}
    if args.hwloc_pus and not args.hwloc:
        raise ProcmapError("--hwloc-pus needs --hwloc FILE.xml")
    if args.distance and not args.hwloc:
        raise ProcmapError("--distance needs --hwloc FILE.xml (detected machines use 1:10:100:...)")
    if args.hwloc:
        from .topology import read_hwloc

        found = read_hwloc(args.hwloc, pus=args.hwloc_pus, distances=args.distance)
        h = found.hierarchy
        extra = {"levels": list(found.level_names), "cpu_ids": found.cpu_ids.tolist()}
        source = (f"hwloc XML v{found.version} {args.hwloc} (levels "
                  f"{':'.join(found.level_names)}, one PE per {'PU' if found.pus else 'core'})")
    elif not args.local:
        alloc = detect_slurm()
        if alloc is not None:
            node = detect_local(args.sysfs).hierarchy if args.node_from_sysfs else None
            h = alloc.hierarchy(node)
            source = f"Slurm allocation ({plural(len(alloc.hosts), 'node')})"
    if h is None:
        h = detect_local(args.sysfs).hierarchy
        source = f"sysfs under {args.sysfs}"
    if args.json:
        print(json.dumps({"hierarchy": str(h), "distance": h.distance_string(), "pes": h.k,
                          "slots": h.total_slots, "source": source, "tleaf": to_tleaf(h),
                          **extra}))
    elif args.tleaf:
        print(to_tleaf(h))
    else:
        print(str(h))
        print(f"# {describe(h)}; found from {source}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- convert
def _cmd_convert(args) -> int:
    from .formats import detect_format, read_graph, write_graph
    from .formats.atomic import check_output

    # The output is checked before the (possibly large) input is read.
    dest = check_output(args.output, [args.input])
    detect_format(args.output, args.output_format)
    graph = read_graph(args.input, args.input_format)
    write_graph(graph, args.output, args.output_format)
    name = "standard output" if dest.kind == "stdout" else args.output
    print(f"wrote {name}: {plural(graph.n, 'task')}, {plural(graph.m, 'edge')}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------- warmup
def _cmd_warmup(args) -> int:
    from .warmup import cache_location, warmup

    if args.gpu:
        from .kernels.backend import gpu_available

        if not gpu_available():
            raise ProcmapError("--gpu: no usable GPU (CuPy and a CUDA device are needed)")
    print(f"procmap: compiling or loading every kernel; cache: {cache_location()}",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    seconds = warmup(lambda step: print(f"procmap: [{time.perf_counter() - t0:6.1f} s] {step}",
                                        file=sys.stderr, flush=True), gpu=args.gpu)
    total = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"cache": cache_location(), "seconds": seconds, "total": total},
                         indent=2))
    else:
        print(f"warm      kernels cached in {cache_location()} ({total:.1f} s)")
    return 0


# ----------------------------------------------------------------- report
_REPORT_EXAMPLES = """\
examples:
  procmap report examples/halo3d.comm --engine auto -H 4:8:6 -d 1:10:100 -o halo3d.html
  procmap report app.comm --mapping app.map -H 4:8:6 -o app.html --png figures/
  procmap report mesh.graph --engine im -H 4:8:6 --baseline block -o mesh.html --json > mesh.json
"""


def _report_baselines(text: str) -> tuple[str, ...]:
    """``--baseline block,roundrobin``: known names, each once, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BASELINES]
    if not names or unknown:
        raise ProcmapError(f"--baseline {text!r}: give comma-separated names from "
                           f"{', '.join(BASELINES)}")
    return tuple(dict.fromkeys(names))


def _report_png_paths(directory: str | None, inputs: list, html: str) -> dict[str, str]:
    """``--png DIR``: the path of every figure's PNG, checked like any output (DIR
    itself is created at write time when its parent can hold it)."""
    import os

    from .formats.atomic import check_output
    from .report.figures import FIGURES

    if directory is None:
        return {}
    directory = directory.rstrip(os.sep) or os.sep
    paths = {name: os.path.join(directory, f"{name}.png") for name in FIGURES}
    if os.path.isdir(directory):
        for path in paths.values():
            check_output(path, inputs, outputs=[html], stdout=False)
    elif os.path.lexists(directory):
        raise ProcmapError(f"cannot write {directory}: --png needs a directory")
    else:
        check_output(directory, inputs, stdout=False)  # a new entry of its parent
    return paths


def _cmd_report(args) -> int:
    import os

    from .formats import read_graph
    from .formats.atomic import atomic_write, check_output

    chosen = _report_baselines(args.baseline)
    # Before any input is read: a bad output or a missing matplotlib fails at once.
    inputs = [args.graph, args.mapping, args.distance_matrix]
    if args.json and args.output == "-":
        raise ProcmapError("-o - and --json would both write to standard output; give -o "
                           "a file name")
    check_output(args.output, inputs)
    pngs = _report_png_paths(args.png, inputs, args.output)
    from .report.figures import FIGURES, render_all, require_matplotlib

    require_matplotlib()
    from .report.data import build_report
    from .report.html import page

    topo = _machine(args)
    if not hasattr(topo, "prefix_sizes"):
        raise ProcmapError("procmap report needs --hierarchy (its levels name the bars and "
                           "its nodes the per-node view), not --distance-matrix")
    graph = read_graph(args.graph, args.format)
    if args.mapping:
        graph, pes = _read_mapping_for(graph, args.mapping)
        mapped = "mapping"
        info = {"graph": args.graph, "engine": f"file {args.mapping}"}
    else:
        from .api import map_tasks

        _announce_compile(False)
        result = map_tasks(graph, topo, engine=args.engine, eps=args.imbalance, seed=args.seed,
                           device=args.device)
        pes, mapped = result.pes, "procmap"
        info = {"graph": args.graph, "engine": f"{result.engine} ({result.device})",
                "seed": args.seed, "seconds": result.seconds.get("total")}
    t0 = time.perf_counter()
    data = build_report(graph, topo, pes, baselines=chosen, mapped=mapped, info=info,
                        eps=args.imbalance, seed=args.seed)
    t1 = time.perf_counter()
    images = render_all(data, topo)
    t2 = time.perf_counter()
    with atomic_write(args.output) as f:
        f.write(page(data, images, FIGURES))
    for name, path in pngs.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_write(path, "wb") as f:
            f.write(images[name])
    seconds = {"data": t1 - t0, "figures": t2 - t1, "write": time.perf_counter() - t2}
    if args.json:
        print(json.dumps({**data.as_dict(), "output": args.output, "png": pngs,
                          "report_seconds": seconds}))
    gain = data.summary["improvement"].get("block")
    versus = "" if gain is None else f"; J {100 * abs(gain):.1f}% " + \
        ("lower" if gain >= 0 else "higher") + " than block"
    print(f"procmap: wrote {args.output} ({len(images)} figures, made in "
          f"{seconds['data'] + seconds['figures']:.2f} s){versus}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------- parser
def _wrap(text: str) -> str:
    # Subcommands keep their epilog's line breaks (RawDescriptionHelpFormatter), which
    # also keeps the description's: it is wrapped here.
    import textwrap

    return textwrap.fill(text, width=80)


_DEBUG_HELP = "show tracebacks on errors (accepted before or after the command)"


def _add_debug_everywhere(sub) -> None:
    """``--debug`` on every subcommand too, with the same meaning as before the command.

    Its default there is SUPPRESS: not given after the command, the value set before
    it (or the top-level default False) stays.
    """
    for p in sub.choices.values():
        if "--debug" not in p._option_string_actions:
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                           help=_DEBUG_HELP)


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="procmap",
        description="Communication-aware placement of MPI ranks on hierarchical machines.",
        epilog=EPILOG, formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"procmap {__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("eval", help="evaluate J, traffic per level and balance of a mapping",
                       description=_wrap("Evaluate a mapping (from a file or a baseline "
                                         "placement) of a communication graph onto a machine."),
                       epilog=EXAMPLES["eval"] + "\n" + CONVENTIONS, formatter_class=raw)
    p.add_argument("graph", help="communication graph (.comm, .graph, .mtx, .npy, .csv, .npz, .prof)")
    p.add_argument("--format", choices=GRAPH_FORMATS, help="graph format (default: from the extension)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mapping", "-m", metavar="FILE", help="mapping file: one PE id per line")
    src.add_argument("--baseline", choices=BASELINES,
                     help="evaluate a default placement: block (mpirun's default), "
                          "roundrobin (over nodes) or random")
    p.add_argument("--seed", type=int, default=0, help="seed of the random baseline")
    p.add_argument("--imbalance", "-e", type=float, default=0.03, metavar="EPS",
                   help="eps of L_max = ceil((1+eps) c(V)/k) when tasks outnumber slots (default 0.03)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    _add_machine_args(p)
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("map", help="compute a mapping that minimises J",
                       description=_wrap("Map the tasks of a communication graph onto a "
                                         "hierarchical machine. With at most as many tasks as "
                                         "slots this is rank placement (no PE gets more tasks "
                                         "than its slots; never worse than the block "
                                         "placement); with more tasks it is partition mapping "
                                         "under L_max = ceil((1+eps) c(V)/k)."),
                       epilog=EXAMPLES["map"] + "\n" + CONVENTIONS, formatter_class=raw)
    p.add_argument("graph", help="communication graph (.comm, .graph, .mtx, .npy, .csv, .npz, .prof)")
    p.add_argument("--format", choices=GRAPH_FORMATS, help="graph format (default: from the extension)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="hm: hierarchical multisection; hm-ultra: hm with Jet's ultra refinement "
                        "and max-flow refinement (slower, better); im: integrated mapping "
                        "(fast); auto (default): im for partition mapping, the best of hm and "
                        "hm-ultra starts + swaps for rank placement")
    p.add_argument("--imbalance", "-e", type=float, default=0.03, metavar="EPS",
                   help="allowed imbalance eps in partition mapping (default 0.03)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed (same seed and device, same mapping)")
    add_device_arg(p)
    p.add_argument("--coarsening", choices=COARSENINGS, default="hem",
                   help="hem (default): heavy-edge and two-hop matching; unionfind: G-kway's "
                        "union-find clustering (fewer, coarser levels)")
    p.add_argument("--refinement", choices=REFINEMENTS, default="jet",
                   help="jet (default): Jet label propagation; isr: G-kway's independent-set "
                        "refinement (cheaper, lower quality)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads to use (default: all, i.e. NUMBA_NUM_THREADS); the "
                        "mapping does not depend on it")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the mapping: one PE id per line ('-': to stdout, and the report "
                        "to stderr)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--progress", action="store_true", help="progress lines even when not a terminal")
    _add_machine_args(p)
    p.set_defaults(func=_cmd_map)

    from procmap.launcher_hooks.cli import register as _register_launchers
    _register_launchers(sub, _add_machine_args, _machine, _Progress, add_device_arg)

    p = sub.add_parser("topology", help="print the hierarchy of this machine or Slurm job",
                       description=_wrap("Detect the machine hierarchy from the Slurm "
                                         "environment (inside a job) or from sysfs, and print "
                                         "it as a hierarchy string usable with --hierarchy "
                                         "(details on stderr)."),
                       epilog=EXAMPLES["topology"], formatter_class=raw)
    p.add_argument("--local", action="store_true", help="ignore Slurm variables; describe this machine")
    p.add_argument("--node-from-sysfs", action="store_true",
                   help="in a Slurm job, split each node by this machine's sysfs layout")
    p.add_argument("--sysfs", default="/sys", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--hwloc", metavar="FILE.xml",
                   help="read the machine from an hwloc XML export (lstopo --of xml; hwloc 1.x to 3.x) "
                        "instead: one PE per core, levels cores, L3 or NUMA groups, packages, "
                        "groups, machines (those of size 1 left out); offline and disallowed "
                        "CPUs become PEs without slots")
    p.add_argument("--hwloc-pus", action="store_true",
                   help="with --hwloc: one PE per hardware thread (PU) instead of per core")
    p.add_argument("--distance", "-d", metavar="D1:D2:..",
                   help="with --hwloc: distance per level, leaf first (default 1:10:100:...)")
    p.add_argument("--tleaf", action="store_true", help="print a Scotch tleaf string instead")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=_cmd_topology)

    p = sub.add_parser("convert", help="convert a communication graph between formats",
                       description=_wrap("Read a graph in one format and write it in another "
                                         "(formats from the extensions unless given). The "
                                         "output is written atomically: a failed conversion "
                                         "leaves nothing behind."),
                       epilog=EXAMPLES["convert"], formatter_class=raw)
    p.add_argument("input", help="graph to read (.comm, .graph, .mtx, .npy, .csv, .npz, .prof)")
    p.add_argument("output", help="file to write; its extension gives the format unless --to "
                                  "is given ('-': standard output, --to needed)")
    p.add_argument("--from", dest="input_format", choices=GRAPH_FORMATS, metavar="FORMAT",
                   help=f"format of input: {', '.join(GRAPH_FORMATS)} (default: from the "
                        "extension)")
    p.add_argument("--to", dest="output_format", choices=WRITABLE_FORMATS, metavar="FORMAT",
                   help=f"format of output: {', '.join(WRITABLE_FORMATS)} (default: from the "
                        "extension; prof is read only)")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser(
        "warmup", help="compile every kernel into the cache ahead of the first run",
        description=_wrap("Compile (or load) every CPU kernel that procmap commands use into "
                          "Numba's on-disk cache, so that no later run compiles: the step for "
                          "cluster images, shared installations and before jobs whose prologs "
                          "call procmap (a prolog never compiles). The cache is NUMBA_CACHE_DIR "
                          "when set, else __pycache__ beside the installed kernels, else (a "
                          "read-only installation) ~/.cache/numba; run it as the user whose "
                          "cache the jobs will read."),
        epilog=EXAMPLES["warmup"], formatter_class=raw)
    p.add_argument("--gpu", action="store_true",
                   help="also load the GPU backend's modules (needs CuPy and a GPU)")
    p.add_argument("--json", action="store_true", help="print a JSON object of step times")
    p.set_defaults(func=_cmd_warmup)

    p = sub.add_parser(
        "report", help="write an HTML page of figures comparing a mapping with the baselines",
        description=_wrap("Draw where the traffic goes under procmap's placement (--engine) "
                          "or a mapping file (--mapping) and under the baselines: the rank-"
                          "to-rank traffic matrix, traffic per hierarchy level, and traffic "
                          "and load per node, with a summary table. Writes one self-contained "
                          "HTML file (images inlined). Needs matplotlib: pip install -e "
                          "'.[report]' in a procmap checkout."),
        epilog=_REPORT_EXAMPLES + "\n" + CONVENTIONS, formatter_class=raw)
    p.add_argument("graph", help="communication graph (.comm, .graph, .mtx, .npy, .csv, .npz, .prof)")
    p.add_argument("--format", choices=GRAPH_FORMATS, help="graph format (default: from the extension)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mapping", "-m", metavar="FILE", help="mapping file: one PE id per line")
    src.add_argument("--engine", choices=ENGINES, help="compute procmap's mapping with this engine")
    p.add_argument("--baseline", default="block,roundrobin", metavar="NAMES",
                   help="placements to compare with, comma-separated from "
                        f"{', '.join(BASELINES)} (default block,roundrobin)")
    p.add_argument("--imbalance", "-e", type=float, default=0.03, metavar="EPS",
                   help="allowed imbalance eps in partition mapping (default 0.03)")
    p.add_argument("--seed", type=int, default=0, help="seed of the engine and of the random baseline")
    add_device_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the HTML report ('-': standard output, unless --json)")
    p.add_argument("--png", metavar="DIR", help="also write every figure as a PNG file into DIR")
    p.add_argument("--json", action="store_true",
                   help="print the figures' data as one JSON object on standard output")
    _add_machine_args(p)
    p.set_defaults(func=_cmd_report)
    _add_debug_everywhere(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"procmap: warning: {message}", file=sys.stderr)


class _Terminated(BaseException):
    """SIGTERM as an exception: ``finally`` blocks and :func:`atomic_write` clean up."""


#: The import system's frames. A signal handler that raises inside an import can lose
#: its exception: CPython's parser turns an exception raised during compile() of a
#: module's source into a SyntaxError, which code guarding an optional import takes for
#: an unusable module (seen: a prolog that went on mapping after its SIGTERM).
_IMPORT_FRAMES = frozenset(("<frozen importlib._bootstrap>",
                            "<frozen importlib._bootstrap_external>"))
#: Seconds after which a SIGTERM that arrived during an import is delivered again.
_SIGNAL_RETRY_S = 0.05


def _in_import(frame) -> bool:
    """Whether ``frame`` or a frame that called it belongs to the import system."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FRAMES:
            return True
        frame = frame.f_back
    return False


def _raise_terminated(signum, frame):
    if _in_import(frame):
        # delivered again once the import is over (see _IMPORT_FRAMES)
        retry = threading.Timer(_SIGNAL_RETRY_S, os.kill, (os.getpid(), signum))
        retry.daemon = True
        retry.start()
        return
    raise _Terminated


@contextlib.contextmanager
def _sigterm_raises():
    """Inside the block SIGTERM raises :class:`_Terminated` (main thread only, where
    handlers can be set; a handler set outside Python or SIG_IGN is left alone)."""
    previous = signal.getsignal(signal.SIGTERM)
    if (threading.current_thread() is not threading.main_thread() or previous is None
            or previous == signal.SIG_IGN):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Run ``procmap argv``; return the exit status.

    0 on success; 2 for bad input (one line ``procmap: error: ...`` on stderr);
    130 after SIGINT and 143 after SIGTERM (one line, no traceback; an output
    being written is discarded and no temporary file is left), except in prolog
    mode, which exits 0 whatever happens.
    """
    try:
        try:
            with _sigterm_raises():
                return _run(argv)
        except (KeyboardInterrupt, _Terminated) as exc:
            what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
            if _in_prolog(argv):
                # A prolog exits 0 whatever happens; its fallback, written first, stays.
                print(f"procmap: prolog: {what}; the fallback placement (if one was "
                      "written) stays", file=sys.stderr)
                return 0
            print(f"procmap: {what}", file=sys.stderr)
            return 130 if isinstance(exc, KeyboardInterrupt) else 143
    finally:
        if argv is None:  # the procmap process itself: only the interpreter's exit is left
            _ignore_signals_while_exiting()


def console() -> None:
    """The ``procmap`` executable: :func:`main`, then an immediate process exit.

    Every output has been written, closed and renamed by then, so the interpreter's
    teardown (freeing a large graph's arrays, Numba's and CuPy's clean-up, which take
    tenths of a second on large inputs) is skipped: the user gets the prompt back when
    the work is done. ``--help``, ``--version`` and ``--debug`` tracebacks leave the
    normal way.
    """
    global _STARTED_BY_CONSOLE
    _STARTED_BY_CONSOLE = True
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (procmap ... | head): nothing to lose
            pass
    os._exit(status)


def _in_prolog(argv: list[str] | None) -> bool:
    """Whether this run is ``procmap slurm`` in prolog mode (``--prolog`` or
    ``PROCMAP_PROLOG=1``), judged from the words alone (the parse may not have ended)."""
    from .launcher_hooks.context import is_prolog_context

    words = sys.argv[1:] if argv is None else argv
    flag = any(len(w) >= 4 and "--prolog".startswith(w) for w in words)
    return "slurm" in words and is_prolog_context(flag)


def _ignore_signals_while_exiting() -> None:
    """Ignore SIGINT and SIGTERM once the work is done and reported.

    The interpreter's shutdown still takes a few tenths of a second (Numba's and
    the threads' clean-up) after Python has put the default handlers back, so a
    signal then killed the process (status -2/-15, at times with a traceback)
    although every output was complete; ignored, the exit status stays the one
    ``main`` returned.
    """
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    warnings.showwarning = _show_warning
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. piped into `head`: not an error of the user's input
        sys.stderr.close()
        return 0
    except (ProcmapError, OSError) as exc:
        if args.debug:
            raise
        msg = str(exc).replace("\n", " ")
        print(f"procmap: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
