"""Open MPI monitoring output (``.prof``), read only.

``mpirun --mca pml_monitoring_enable 2 --mca pml_monitoring_enable_output 3
--mca pml_monitoring_filename prof/app ...`` writes one file per rank,
``prof/app.<rank>.prof``, with lines such as::

    # POINT TO POINT
    E	0	1	80800 bytes	20 msgs sent	0,0,0,10,...
    I	0	2	8000 bytes	1 msgs sent
    # COLLECTIVES
    C	0	1	8000 bytes	1 msgs sent
    D	MPI_COMM_WORLD	procs: 0,1,2,3
    O2A	0	0 bytes	0 msgs sent

``E`` (application point-to-point, external tags) and ``I`` (internal tags:
collectives decomposed into point-to-point messages) lines give
``sender receiver <bytes> bytes <count> msgs sent [histogram]``; their bytes are
summed per (sender, receiver) into ``C`` (row = sender, unit: bytes) and the
graph is ``C + C^T``. ``C``, ``S``, ``R`` (collective and one-sided accounting)
and the per-communicator ``D``/``O2A``/``A2O``/``A2A`` lines are not
point-to-point traffic and are skipped, except that ``D MPI_COMM_WORLD procs:``
tells how many ranks the job had (ranks that never send still count).
``n`` is otherwise the largest rank seen + 1. Ranks beyond those the lines show
(the listed ``procs`` and two per E/I line) may number at most
``procmap.limits.MAX_SILENT_TASKS``. These files are small, so a regular
expression per line is fast enough.
"""
from __future__ import annotations

import os
import re
from typing import Iterable

import numpy as np

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import INT64_MAX, MAX_TASKS, check_declared_tasks

from .atomic import as_format_error, read_bytes

# Digit runs are bounded so that int() never meets a pathological 10^5-digit string.
_P2P = re.compile(r"([EI])[ \t]+(\d{1,12})[ \t]+(\d{1,12})[ \t]+(\d{1,20}) bytes[ \t]+(\d{1,20}) "
                  r"msgs sent(?:[ \t]+[\d,]*)?[ \t]*", re.ASCII)
_SKIPPED_KINDS = frozenset({"C", "S", "R", "D", "O2A", "A2O", "A2A"})
_WORLD = re.compile(r"D[ \t]+MPI_COMM_WORLD[ \t]+procs:[ \t]*"
                    r"(\d{1,12}(?:[, \t]+\d{1,12})*)?[, \t]*", re.ASCII)


def _parse_prof(path) -> tuple[list[int], list[int], list[int], int, int]:
    """Return ``(senders, receivers, bytes, ranks, listed)`` of one file: ``ranks`` from
    the D line (or 0), ``listed`` the number of ranks that line lists."""
    text = read_bytes(path).decode("utf-8", "replace")
    senders: list[int] = []
    receivers: list[int] = []
    volumes: list[int] = []
    ranks = listed = 0
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        kind = line.split(None, 1)[0]
        if kind in ("E", "I"):
            match = _P2P.fullmatch(line)
            if match is None:
                raise FormatError(f"malformed {kind} line: expected '{kind}<TAB>sender<TAB>receiver"
                                  "<TAB><n> bytes<TAB><k> msgs sent[<TAB>histogram]'", path, line_no)
            src, dst, volume = int(match.group(2)), int(match.group(3)), int(match.group(4))
            if max(src, dst) >= MAX_TASKS:
                raise FormatError(f"rank {max(src, dst)} exceeds the largest supported rank "
                                  f"{MAX_TASKS - 1}", path, line_no)
            if volume > INT64_MAX:
                raise FormatError(f"{volume:,} bytes exceed the int64 range (at most "
                                  f"{INT64_MAX:,})", path, line_no)
            senders.append(src)
            receivers.append(dst)
            volumes.append(volume)
        elif kind in _SKIPPED_KINDS:
            world = _WORLD.fullmatch(line)
            if world is not None:
                procs = [int(p) for p in re.split(r"[, \t]+", world.group(1) or "") if p]
                if procs and max(procs) >= MAX_TASKS:
                    raise FormatError(f"rank {max(procs)} exceeds the largest supported rank "
                                      f"{MAX_TASKS - 1}", path, line_no)
                if procs:
                    _check_count(max(procs) + 1, len(set(procs)), "'procs:' list", path, line_no)
                ranks = max([ranks, *(p + 1 for p in procs)])
                listed = max(listed, len(set(procs)))
        else:
            shown = kind if len(kind) <= 20 else kind[:20] + "..."
            raise FormatError(f"unknown monitoring record {shown!r} (expected E, I, C, S, R, D, O2A, "
                              "A2O, A2A or a '#' comment)", path, line_no)
    return senders, receivers, volumes, ranks, listed


def _check_count(declared: int, shown: int, what: str, path, line=None) -> None:
    """:func:`~procmap.limits.check_declared_tasks`, as a FormatError naming ``path``."""
    try:
        check_declared_tasks(declared, shown, what, path, line)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def read_prof_files(paths: Iterable[str | os.PathLike]) -> CommGraph:
    """Sum the point-to-point bytes of several ``.prof`` files (one per rank) into one graph.

    Returns ``C + C^T`` with ``C[i, j]`` = bytes rank ``i`` sent to rank ``j``
    (E and I lines). Raises :class:`FormatError` for malformed lines (file and
    line named), when no path is given, and when the files hold no
    point-to-point entries and no ``D MPI_COMM_WORLD`` line.
    """
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise FormatError("no .prof files given")
    senders: list[int] = []
    receivers: list[int] = []
    volumes: list[int] = []
    ranks = listed = 0
    for path in paths:
        s, r, v, k, shown = _parse_prof(path)
        senders += s
        receivers += r
        volumes += v
        ranks = max(ranks, k)
        listed = max(listed, shown)
    where = paths[0] if len(paths) == 1 else os.path.dirname(paths[0]) or "."
    if not senders and ranks == 0:
        raise FormatError("no point-to-point entries (E or I lines)", where)
    n = max([ranks, *(max(s, r) + 1 for s, r in zip(senders, receivers))])
    # every E/I line shows two ranks; the D line shows those it lists
    _check_count(n, min(n, listed + 2 * len(senders)), "the largest rank", where)
    src = np.array(senders, dtype=np.int64)
    dst = np.array(receivers, dtype=np.int64)
    volume = np.array(volumes, dtype=np.int64)
    try:  # from_edges checks the total bytes (both directions) against int64
        return CommGraph.from_edges(src, dst, volume, n=n)
    except InputError as exc:
        raise as_format_error(exc, where) from None


def prof_files_in(directory: str | os.PathLike) -> list[str]:
    """The ``*.prof`` files of ``directory``, sorted; FormatError if there are none."""
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".prof"))
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", directory) from None
    if not names:
        raise FormatError("directory holds no .prof files", directory)
    return [os.path.join(directory, name) for name in names]


def read_prof(path: str | os.PathLike) -> CommGraph:
    """Read one ``.prof`` file, or every ``*.prof`` file of a directory (summed)."""
    if os.path.isdir(path):
        return read_prof_files(prof_files_in(path))
    return read_prof_files([path])
