"""Slurm: ``SLURM_HOSTFILE`` for ``srun --distribution=arbitrary``, ``map_cpu`` lists,
the rank map read by the TaskProlog, and what a prolog may do when things go wrong.

``srun --distribution=arbitrary`` places task ``r`` on the host named by line ``r``
of ``$SLURM_HOSTFILE`` (verified), and ``SLURM_LOCALID`` counts
the tasks of a host in rank order, so ``--cpu-bind=map_cpu:<list>`` -- one list for
every node, indexed by ``SLURM_LOCALID`` (verified) -- binds each task to
its core when all nodes need the same list. When they do not, the TaskProlog shipped
here (``procmap_taskprolog.sh``, see :func:`taskprolog_path`) exports each task's core
from the *rank map* (:func:`rank_map_text`) as ``PROCMAP_CPU``, and the launch wrapper
``procmap_bind.sh`` (:func:`bind_wrapper_path`) binds the task to it before it execs
the application (a TaskProlog cannot bind: Slurm sets affinity before it runs).

Anything run from a prolog must exit 0 within its time budget (docs/design.md
section 6): a failing Prolog drains the node. :func:`fallback_nodes` is the default
placement used then; :func:`run_with_deadline` runs the reading and the mapping in
a child process that is killed at the deadline, so that neither a slow read, a
kernel holding the GIL nor a compilation can overrun the budget.
"""
from __future__ import annotations

import os
import pickle
import selectors
import shlex
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

import numpy as np

from procmap.errors import ProcmapError
from procmap.formats import atomic_write

from .context import PROLOG_ENV, PROLOG_TIMEOUT, is_prolog_context  # noqa: F401 (re-exported)
from .placement import common_list, cpu_lists, format_cpus

__all__ = ["PROLOG_ENV", "hostfile_text", "write_hostfile", "rank_map_text", "write_rank_map",
           "srun_line", "per_node_cpu_lists", "common_cpu_list", "is_prolog_context", "fallback_nodes",
           "call_with_deadline", "run_with_deadline", "fork_is_safe", "process_age",
           "MappingTimeout", "ChildFailed", "PROLOG_TIMEOUT", "taskprolog_path", "bind_wrapper_path",
           "one_line", "step_is_partial"]


T = TypeVar("T")


# --------------------------------------------------------------------- files
def hostfile_text(hosts: Sequence[str], node_of_rank: np.ndarray) -> str:
    """``SLURM_HOSTFILE`` content: the host of every rank, one per line, in rank order."""
    return "".join(f"{hosts[node]}\n" for node in np.asarray(node_of_rank).tolist())


def write_hostfile(path: str | os.PathLike, hosts: Sequence[str], node_of_rank: np.ndarray) -> None:
    """Write :func:`hostfile_text` atomically."""
    text = hostfile_text(hosts, node_of_rank)
    with atomic_write(path) as fh:
        fh.write(text)


def rank_map_text(hosts: Sequence[str], node_of_rank: np.ndarray, cores: np.ndarray,
                  new_ranks: np.ndarray | None = None) -> str:
    """The rank map read by ``procmap_taskprolog.sh``.

    ``#`` comment lines, then line ``i`` (``i = SLURM_PROCID``) holds
    ``<new rank> <host> <node-local cpu>``. Launched with ``--distribution=arbitrary``
    process ``i`` runs task ``i``, so the new rank is ``i`` unless ``new_ranks`` says
    otherwise (in-application reordering, ``comm.Split(0, key=new_rank)``).
    """
    node_of_rank = np.asarray(node_of_rank).tolist()
    cores = np.asarray(cores).tolist()
    ranks = range(len(node_of_rank)) if new_ranks is None else np.asarray(new_ranks).tolist()
    lines = ["# procmap rank map: line i (i = SLURM_PROCID, comments skipped) = "
             "new_rank host node_local_cpu\n"]
    lines += [f"{r} {hosts[node]} {core}\n" for r, node, core in zip(ranks, node_of_rank, cores)]
    return "".join(lines)


def write_rank_map(path: str | os.PathLike, hosts: Sequence[str], node_of_rank: np.ndarray,
                   cores: np.ndarray) -> None:
    """Write :func:`rank_map_text` atomically."""
    text = rank_map_text(hosts, node_of_rank, cores)
    with atomic_write(path) as fh:
        fh.write(text)


def taskprolog_path() -> str:
    """Absolute path of the shipped TaskProlog script (``srun --task-prolog=...``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "procmap_taskprolog.sh")


def bind_wrapper_path() -> str:
    """Absolute path of the shipped launch wrapper that binds a task to ``PROCMAP_CPU``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "procmap_bind.sh")


# ----------------------------------------------------------------- binding
def per_node_cpu_lists(hosts: Sequence[str], node_of_rank: np.ndarray,
                       cores: np.ndarray) -> list[tuple[str, list[int]]]:
    """``(host, cpus)`` per used node in node order; ``cpus[i]`` is the core of ``SLURM_LOCALID`` ``i``."""
    return [(hosts[node], cpus) for node, cpus in sorted(cpu_lists(node_of_rank, cores).items())]


def srun_line(n: int, cpus: Sequence[int] | None = None, app: str = "./app",
              task_prolog: str | None = None, wrapper: str | None = None) -> str:
    """``srun -n N --distribution=arbitrary [--cpu-bind=map_cpu:L] [--task-prolog=P] APP``.

    With ``wrapper`` (see :func:`bind_wrapper_path`): ``... --cpu-bind=none WRAPPER APP``,
    Slurm binds nothing and the wrapper binds each task itself.
    """
    words = ["srun", "-n", str(n), "--distribution=arbitrary"]
    if cpus is not None:
        words.append(f"--cpu-bind=map_cpu:{format_cpus(cpus)}")
    if task_prolog is not None:
        words.append(f"--task-prolog={task_prolog}")
    if wrapper is not None:
        words += ["--cpu-bind=none", wrapper]
    return shlex.join(words) + f" {app}"


def step_is_partial(online_file: str = "/sys/devices/system/cpu/online") -> bool:
    """Inside a Slurm job, whether this process may use only part of this node's CPUs.

    A job step (the batch script too) is confined to the CPUs its job holds on the
    node. When that is a part of the node, ``--cpu-bind=map_cpu:`` with node-local
    core numbers fails ("CPU binding outside of job step allocation", verified on
    22.05): the step owns CPU 1, say, and the list names CPU 0. ``False`` outside a
    job (``SLURM_JOB_ID`` unset) or where the affinity or the online CPUs are unknown.
    """
    if not os.environ.get("SLURM_JOB_ID") or not hasattr(os, "sched_getaffinity"):
        return False
    try:
        allowed = os.sched_getaffinity(0)
        with open(online_file) as fh:
            online = _cpu_set(fh.read())
    except (OSError, ValueError):
        return False
    return bool(online) and allowed < online


def _cpu_set(text: str) -> set[int]:
    """``0-3,8`` (a Linux CPU list) as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def common_cpu_list(lists: Sequence[tuple[str, list[int]]]) -> list[int] | None:
    """The one ``map_cpu`` list that fits every node (see :func:`~.placement.common_list`)."""
    return common_list([cpus for _, cpus in lists])


# ------------------------------------------------------------------ prolog
def fallback_nodes(n: int, nhosts: int, slots: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Slurm's default (block) placement of ``n`` ranks: ``(node, core)`` per rank.

    As srun's block distribution (``_task_layout_block``, Slurm's
    ``src/common/slurm_step_layout.c``): the tasks per node are dealt out in rounds,
    one to every node that still has a free CPU (``slots``) in each round, and the
    ranks then fill the nodes in order with those counts -- 4 ranks on three nodes of
    2 CPUs go 2, 1, 1. Without ``slots`` the nodes count as unlimited: as even as
    possible, the first nodes taking one more. Cores are the node-local ranks
    (0, 1, 2, ... on every node).

    Raises :class:`ProcmapError` for no hosts, a slot list of another length, or
    more ranks than slots (Slurm refuses to oversubscribe without ``--overcommit``).
    """
    if n < 0 or nhosts < 1:
        raise ProcmapError(f"cannot place {n} ranks on {nhosts} hosts")
    caps = (np.full(nhosts, n, dtype=np.int64) if slots is None
            else np.asarray(slots, dtype=np.int64))
    if caps.shape != (nhosts,):
        raise ProcmapError(f"{caps.size} slot counts for {nhosts} hosts")
    if n > int(caps.sum()):
        raise ProcmapError(f"{n} ranks but only {int(caps.sum())} slots on {nhosts} hosts")
    counts = _dealt_counts(n, caps)
    node = np.repeat(np.arange(nhosts, dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    return node, np.arange(n, dtype=np.int64) - np.repeat(starts, counts)


def _dealt_counts(n: int, caps: np.ndarray) -> np.ndarray:
    """Tasks per node when ``n`` tasks are dealt one per round to the nodes with room."""
    # Full rounds: the largest r with sum(min(caps, r)) <= n (bisection, no loop over n).
    lo, hi = 0, int(caps.max(initial=0))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(np.minimum(caps, mid).sum()) <= n:
            lo = mid
        else:
            hi = mid - 1
    counts = np.minimum(caps, lo)
    # The last, partial round: one more task to the first nodes that still have room.
    left = n - int(counts.sum())
    room = np.flatnonzero(caps > lo)[:left]
    counts[room] += 1
    return counts


class MappingTimeout(ProcmapError):
    """The time budget (``--timeout``) ran out before the work finished."""


class ChildFailed(ProcmapError):
    """The child process of :func:`run_with_deadline` raised, or died without a result.

    The message is the child's one-line description of what happened.
    """


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or ``None`` where unknown.

    Lets ``--timeout`` count from the process's start, interpreter start-up and
    imports included: that is the wall clock a prolog is judged by.
    """
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        # Field 22 (starttime, clock ticks after boot); the command name before it,
        # in parentheses, may itself hold spaces and parentheses.
        start_ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def call_with_deadline(fn: Callable[[], T], deadline: float | None) -> T:
    """Run ``fn()`` and return its result, or raise :class:`MappingTimeout` at ``deadline``.

    ``deadline`` is a :func:`time.monotonic` value (``None``: no limit). ``fn`` runs
    in a daemon thread so that the caller regains control at the deadline; the thread
    is abandoned (it finishes or dies with the process). ``signal.alarm`` would not
    do: its handler only runs between Python bytecodes of the main thread.
    Exceptions of ``fn`` are re-raised here. Granularity: a compiled kernel that
    holds the GIL delays the return until it yields it -- for pure-Python or
    I/O-bound work only (the cheap steps of a prolog); :func:`run_with_deadline`
    bounds the mapping itself.
    """
    if deadline is None:
        return fn()
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise MappingTimeout("the time budget ran out before the mapping started")
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="procmap-mapping", daemon=True)
    worker.start()
    worker.join(remaining)
    if worker.is_alive():
        raise MappingTimeout("the mapping did not finish within the time budget")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def fork_is_safe() -> bool:
    """Whether :func:`run_with_deadline` may fork this process.

    Not where ``os.fork`` is missing, nor once this process has started Numba's
    thread pool (GNU OpenMP aborts a forked child that uses it) or imported CuPy (a
    CUDA context does not survive a fork). A ``procmap`` command has done neither
    before it maps; a long-lived process that has mapped before falls back to a thread.
    """
    if not hasattr(os, "fork"):
        return False
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    # Numba's internal flag; if it ever goes away, fork anyway: a child that aborts
    # or hangs is still stopped at the deadline.
    if parallel is not None and getattr(parallel, "_is_initialized", False):
        return False
    return "cupy" not in sys.modules


_HELD_AT_FORK = (signal.SIGINT, signal.SIGTERM)


def run_with_deadline(fn: Callable[[], T], deadline: float | None, *, quiet: bool = False) -> T:
    """Run ``fn()`` in a child process; return its result or raise at ``deadline``.

    ``deadline`` is a :func:`time.monotonic` value; ``None`` calls ``fn()`` here. The
    child is a fork of this process (``fn`` needs no pickling, only its result does)
    in a process group of its own; at the deadline the whole group is killed and
    :class:`MappingTimeout` is raised, so reading, compiling and mapping are all
    bounded, whatever holds the GIL. An exception of ``fn`` becomes
    :class:`ChildFailed` with its one-line text. ``quiet`` sends the child's stdout
    and stderr to ``/dev/null`` (a prolog's stderr carries one line). Where forking
    is not safe (:func:`fork_is_safe`) this is :func:`call_with_deadline`.
    """
    if deadline is None:
        return fn()
    if not fork_is_safe():
        return call_with_deadline(fn, deadline)
    if deadline - time.monotonic() <= 0:
        raise MappingTimeout("the time budget ran out before the work started")
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    # SIGINT/SIGTERM wait until fork() has returned: a Python handler that raises
    # inside fork's own bookkeeping (its at-fork hooks) leaves "Exception ignored"
    # noise and half-run hooks; the pending signal is delivered right after.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_AT_FORK)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: a fork beside threads
            pid = os.fork()
        if pid == 0:
            for signum in _HELD_AT_FORK:  # the child dies of them, as a plain process does
                signal.signal(signum, signal.SIG_DFL)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if pid == 0:
        _child_main(fn, parent, read_fd, write_fd, quiet)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)  # also done by the child: whichever runs first wins
    except OSError:
        pass
    try:
        data = _read_until(read_fd, deadline)
    finally:
        os.close(read_fd)
        status = _end_child(pid)
    if data is None:
        raise MappingTimeout("the time budget ran out")
    try:
        kind, value = pickle.loads(data)
    except Exception:  # noqa: BLE001 - nothing, or a truncated answer: the child died
        how = (f"was killed by signal {os.WTERMSIG(status)}" if status is not None
               and os.WIFSIGNALED(status) else "ended without a result")
        raise ChildFailed(f"the mapping process {how}") from None
    if kind == "error":
        raise ChildFailed(value)
    return value


def _child_main(fn: Callable[[], object], parent: int, read_fd: int, write_fd: int,
                quiet: bool) -> NoReturn:
    """The forked child: run ``fn``, send ``("value", result)`` or ``("error", text)``."""
    try:
        os.close(read_fd)
        os.setpgid(0, 0)
        _die_with_parent(parent)
        if quiet:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
        try:
            payload = pickle.dumps(("value", fn()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent, whatever it is
            payload = pickle.dumps(("error", one_line(exc)))
        with os.fdopen(write_fd, "wb") as fh:
            fh.write(payload)
    finally:
        os._exit(0)  # never run the parent's cleanup (atexit, pytest, buffered output)


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this child when the parent dies (e.g. killed at a prolog timeout)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: its message, led by its type unless it is a
    :class:`ProcmapError` or an :class:`OSError` with a message (those read as sentences)."""
    text = str(exc).replace("\n", " ").strip()
    if isinstance(exc, (ProcmapError, OSError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything written to ``fd`` until its end; ``None`` if ``deadline`` comes first."""
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not selector.select(min(remaining, 3600.0)):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _end_child(pid: int) -> int | None:
    """Kill the child's process group (stragglers included) and reap it; its status.

    Waits at most 0.2 s: a child stuck in uninterruptible I/O is left to ``init``.
    """
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except OSError:
            pass
    give_up = time.monotonic() + 0.2
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if time.monotonic() > give_up:
            return None
        time.sleep(0.002)
