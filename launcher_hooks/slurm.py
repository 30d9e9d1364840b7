"""Slurm: ``SLURM_HOSTFILE`` for ``srun --distribution=arbitrary``, ``map_cpu`` lists,
the rank map read by the TaskProlog, and what a prolog may do when things go wrong.

``srun --distribution=arbitrary`` places task ``r`` on the host named by line ``r``
of ``$SLURM_HOSTFILE`` (launcher notes 3.1, verified), and ``SLURM_LOCALID`` counts
the tasks of a host in rank order, so ``--cpu-bind=map_cpu:<list>`` -- one list for
every node, indexed by ``SLURM_LOCALID`` (notes 3.2, verified) -- binds each task to
its core when all nodes need the same list. When they do not, the TaskProlog shipped
here (``procmap_taskprolog.sh``, see :func:`taskprolog_path`) can bind every task on
its own from the *rank map* (:func:`rank_map_text`).

Anything run from a prolog must finish fast and exit 0 (DESIGN.md section 6): a
failing Prolog drains the node. :func:`fallback_nodes` is the default placement used
then, and :func:`call_with_deadline` bounds the mapping's time.
"""
from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from procmap.errors import ProcmapError
from procmap.formats import atomic_write

from .placement import common_list, cpu_lists, format_cpus

__all__ = ["PROLOG_ENV", "hostfile_text", "write_hostfile", "rank_map_text", "write_rank_map",
           "srun_line", "per_node_cpu_lists", "common_cpu_list", "is_prolog_context", "fallback_nodes",
           "call_with_deadline", "MappingTimeout", "taskprolog_path"]

#: Set to 1 in a prolog's environment: ``procmap slurm`` then never fails.
PROLOG_ENV = "PROCMAP_PROLOG"

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


# ----------------------------------------------------------------- binding
def per_node_cpu_lists(hosts: Sequence[str], node_of_rank: np.ndarray,
                       cores: np.ndarray) -> list[tuple[str, list[int]]]:
    """``(host, cpus)`` per used node in node order; ``cpus[i]`` is the core of ``SLURM_LOCALID`` ``i``."""
    return [(hosts[node], cpus) for node, cpus in sorted(cpu_lists(node_of_rank, cores).items())]


def srun_line(n: int, cpus: Sequence[int] | None = None, app: str = "./app",
              task_prolog: str | None = None) -> str:
    """``srun -n N --distribution=arbitrary [--cpu-bind=map_cpu:L] [--task-prolog=P] APP``."""
    words = ["srun", "-n", str(n), "--distribution=arbitrary"]
    if cpus is not None:
        words.append(f"--cpu-bind=map_cpu:{format_cpus(cpus)}")
    if task_prolog is not None:
        words.append(f"--task-prolog={task_prolog}")
    return shlex.join(words) + f" {app}"


def common_cpu_list(lists: Sequence[tuple[str, list[int]]]) -> list[int] | None:
    """The one ``map_cpu`` list that fits every node (see :func:`~.placement.common_list`)."""
    return common_list([cpus for _, cpus in lists])


# ------------------------------------------------------------------ prolog
def is_prolog_context(flag: bool, environ: Mapping[str, str] | None = None) -> bool:
    """``--prolog`` given, or ``PROCMAP_PROLOG=1`` in the environment."""
    env = os.environ if environ is None else environ
    return bool(flag) or env.get(PROLOG_ENV, "").strip() in ("1", "yes", "true")


def fallback_nodes(n: int, nhosts: int, slots: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The default (block) placement when no hierarchy can be used: ``(node, core)`` per rank.

    With slot counts that fit ``n``, hosts are filled in order (Slurm's block
    distribution); otherwise the ranks are split as evenly as possible into
    consecutive blocks. Cores are the node-local ranks (0, 1, 2, ... on every node).
    """
    if n < 0 or nhosts < 1:
        raise ProcmapError(f"cannot place {n} ranks on {nhosts} hosts")
    ranks = np.arange(n, dtype=np.int64)
    if slots is not None and len(slots) == nhosts and sum(slots) >= n:
        ends = np.cumsum(np.asarray(slots, dtype=np.int64))
        node = np.searchsorted(ends, ranks, side="right")
    else:
        node = (ranks * nhosts) // max(n, 1)
    starts = np.searchsorted(node, node, side="left")
    return node, ranks - starts


class MappingTimeout(ProcmapError):
    """The time budget (``--timeout``) ran out before the mapping finished."""


def call_with_deadline(fn: Callable[[], T], deadline: float | None) -> T:
    """Run ``fn()`` and return its result, or raise :class:`MappingTimeout` at ``deadline``.

    ``deadline`` is a :func:`time.monotonic` value (``None``: no limit). ``fn`` runs
    in a daemon thread so that the caller regains control at the deadline even when
    ``fn`` is deep inside compiled code; the thread is abandoned (it finishes or dies
    with the process). ``signal.alarm`` would not do: its handler only runs between
    Python bytecodes of the main thread. Exceptions of ``fn`` are re-raised here.
    Granularity: a compiled kernel that holds the GIL delays the return until it
    yields it (between kernels).
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
