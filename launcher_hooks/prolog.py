"""Prolog mode of ``procmap slurm`` (``--prolog`` or ``PROCMAP_PROLOG=1``).

Anything run from a prolog must exit 0 within its time budget (docs/design.md
section 6): a failing Prolog drains the node. So here every failure, a usage error
included, falls back to Slurm's block placement, written as soon as the hosts and
the task count are known (:func:`slurm_prolog`); reading and mapping run in a child
process killed at the deadline and replace the fallback when they land in time.
The allocation is read leniently (:func:`_lenient_allocation`): one bad variable or
argument loses only itself. stderr carries one line, and only when the mapping did
not land. :func:`prolog_safe_error` (with ``parse_known_args`` of the ``slurm`` subparser,
in :mod:`.cli`) keeps argparse from exiting 2 in a prolog.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from procmap.errors import ProcmapError
from procmap.formats import read_graph
from procmap.limits import MAX_TASKS, is_decimal_int
from procmap.topology import SlurmAllocation, check_host_name, detect_slurm, expand_hostlist

from . import slurm
from .pipeline import (HostSpec, Placed, check_ntasks, check_outputs, hostfile_hosts,
                       layout_hosts, read_job_graph)
from .placement import HostLayout
from .slurm import one_line
from .slurm_command import (budget_start, parse_timeout, print_slurm, slurm_hosts, slurm_machine,
                            slurm_map, slurm_ntasks, slurm_outputs)

__all__ = ["slurm_prolog", "prolog_safe_error"]

# Slurm's variables for CPUs and tasks, in detect_slurm's order of preference.
_SLURM_CPU_VARS = ("SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE")
_SLURM_TASK_VARS = ("SLURM_NTASKS", "SLURM_JOB_NTASKS")
# Seconds kept back at the end of a prolog's budget for killing the child, writing
# the mapping and the interpreter's shutdown; twice the time the fallback took to
# write is added.
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
    written: dict | None = None        # the fallback's outputs (slurm_outputs), once written
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


def slurm_prolog(args, machine: Callable, progress_class) -> int:
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
            budget = parse_timeout(args.timeout)
        except ProcmapError as exc:
            problem = f"{exc}; used {budget:g} s"
    st = _Prolog(args, budget_start() + budget)
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
            st.fail(one_line(exc))
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
                "run `procmap warmup` once outside the prolog to fill it")
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
        st.fail(one_line(exc))
        return
    if placed is None:
        st.fail(why)
        if st.ntasks is None and n is not None:
            st.ntasks, st.ntasks_source = n, args.graph
        return
    out = slurm_outputs(args, placed.node, placed.core, layout.hosts)
    try:
        print_slurm(args, placed, hosts, out, None)
    except Exception:  # noqa: BLE001 - e.g. a closed stdout; the files are written
        pass


def _prolog_child(args, layout: HostLayout, hosts: HostSpec, ntasks: int | None, source: str,
                  progress) -> tuple[Placed | None, int | None, str | None]:
    """The prolog's child process: ``(placed, n, None)`` or ``(None, n, why)``; ``n`` is
    the graph's task count once read (the fallback's when the job gives none)."""
    n = None
    try:
        graph = read_job_graph(args, ntasks, source, layout)
        n = graph.n
        return slurm_map(args, layout, hosts, graph, progress), n, None
    except Exception as exc:  # noqa: BLE001 - the parent falls back, whatever it was
        return None, n, one_line(exc)


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
        check_outputs(args)
        hosts, alloc = slurm_hosts(args)
        ntasks, source = slurm_ntasks(args, alloc)
        layout = layout_hosts(args, slurm_machine(args, machine, hosts, alloc), hosts)
        if ntasks is not None:
            check_ntasks(ntasks, source, layout)
    except Exception as exc:  # noqa: BLE001 - any problem falls back
        st.fail(one_line(exc))
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
            problem = problem or one_line(exc)
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
            problems.append(one_line(exc))
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
        return hostfile_hosts(args.hostfile), None
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
        st.written = slurm_outputs(st.args, node, core, st.hosts.names)
    except Exception as exc:  # noqa: BLE001 - a mapping could not be written either
        st.fail(one_line(exc))
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
            print_slurm(args, None, st.hosts, st.written, st.reason)
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


def prolog_safe_error(parser: argparse.ArgumentParser, message: str):
    """``error`` of the ``slurm`` subparser: in a prolog a usage error must not fail either.

    It falls back as any other failure does, from the arguments that could be read
    (:func:`_lenient_args`), and exits 0. Outside a prolog: argparse's usage error.
    """
    argv = getattr(parser, "_procmap_argv", None)
    argv = list(sys.argv[1:] if argv is None else argv)
    if slurm.is_prolog_context(any(_is_prolog_flag(a) for a in argv)):
        try:
            args = _lenient_args(argv)
            st = _Prolog(args, budget_start() + slurm.PROLOG_TIMEOUT, reason=message)
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
