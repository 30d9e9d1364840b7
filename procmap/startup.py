"""``procmap map``'s start-up overlap: reading a large input while the engines are
imported, and paying Numba's and CUDA's one-time set-up in a background thread.

The command line (:func:`procmap.cli._cmd_map`) calls these in order:
:func:`overlap_wanted` (is the input large enough?), :func:`start_prefetch` (begin
reading it before the imports), :class:`WarmUp` (the one-time set-ups in one
background thread while the main thread reads). :func:`process_age` gives the
time line its ``start-up`` phase. ``PROCMAP_OVERLAP=0`` turns the overlap off (the
same mapping; for measurements).
"""
from __future__ import annotations

import os
import threading
import time

from procmap.errors import ProcmapError
from procmap.options import AUTO_GPU_MIN_EDGES

#: ``procmap map`` overlaps its one-time set-up with reading inputs of at least this
#: many bytes (smaller ones are read in less time than a thread takes to pay off).
OVERLAP_MIN_BYTES = 16 << 20


def process_age() -> float | None:
    """Seconds since this process started (``/proc/self/stat``'s start time against
    ``CLOCK_BOOTTIME``, to the kernel's clock tick, 10 ms at most early); ``None``
    where either is missing (not Linux)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME)
                   - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def overlap_wanted(args) -> int | None:
    """The input's size in bytes when ``map`` should overlap its one-time set-up with
    reading it (a file of at least :data:`OVERLAP_MIN_BYTES`, and ``PROCMAP_OVERLAP``
    not ``0``), else ``None``."""
    if os.environ.get("PROCMAP_OVERLAP", "1").strip() == "0":
        return None
    try:
        size = os.stat(args.graph).st_size
    except (OSError, ValueError):
        return None  # the reader reports it
    return size if size >= OVERLAP_MIN_BYTES else None


#: Formats whose reader reads the file whole with ``procmap.formats.atomic.read_bytes``
#: once, then parses it: their bytes can be read ahead (:func:`prefetch_bytes`).
TEXT_PREFETCH = ("metis", "comm", "mtx")


def start_prefetch(args, size: int | None):
    """Start reading a large input in background threads while the engines are
    imported. Returns a :class:`procmap.formats.pmg.PendingRead` for a ``.pmg`` file
    (its bytes read in parallel, validated by ``result()``), ``"bytes"`` for a text
    format whose reader takes over the bytes (``atomic.prefetch_bytes``), else
    ``None``. A name the format cannot be told from is left to the reader."""
    if size is None:
        return None
    from procmap.formats import detect_format

    try:
        fmt = detect_format(args.graph, args.format)
    except ProcmapError:
        return None
    if fmt == "pmg":
        from procmap.formats.pmg import start_read

        return start_read(args.graph)
    if fmt in TEXT_PREFETCH:
        from procmap.formats.atomic import prefetch_bytes

        prefetch_bytes(args.graph)
        return "bytes"
    return None


class WarmUp:
    """The one-time costs of a large ``procmap map``, paid in a background thread while
    the main thread reads the input: Numba's CPU target set-up (about half a second
    of the first kernel dispatch), then, when the GPU may be used, CuPy's import and
    the CUDA context (:func:`procmap.kernels.backend.warm_numba`, ``warm_gpu``).

    Reading a file and running the validation kernels release the interpreter lock,
    so the set-up runs meanwhile. One thread, one job after the other: both jobs
    hold the interpreter lock for most of their time, so two threads would only
    slow each other and the reader.
    Nothing the jobs do is kept by the mapping (no array, no random state), so
    mappings do not depend on them. A failure is recorded in :attr:`errors` and
    otherwise ignored: the main path then does the same work itself, and reports
    any error as it always did (e.g. ``--device gpu`` without a GPU). A kernel
    dispatched on the main path meanwhile waits on Numba's compiler lock.
    """

    def __init__(self, gpu: bool):
        from procmap.kernels import backend

        self.errors: dict[str, BaseException] = {}
        self.jobs = [("numba", backend.warm_numba)] + ([("gpu", backend.warm_gpu)] if gpu else [])
        self.done = {name: threading.Event() for name, _ in self.jobs}
        self.thread = threading.Thread(target=self._run, daemon=True, name="procmap-warm-up")
        self.thread.start()

    def _run(self) -> None:
        for name, fn in self.jobs:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 -- redone on the main path
                self.errors[name] = exc
            finally:
                self.done[name].set()

    def wait(self, job: str | None = None) -> None:
        """Wait until ``job`` (every job when ``None``) has ended."""
        if job is None:
            self.thread.join()
        else:
            self.done[job].wait()


def warm_gpu_wanted(args, size: int) -> bool:
    """Whether the warm-up should create the CUDA context: ``--device gpu``, or
    ``auto`` with CuPy installed and a file large enough to hold
    ``AUTO_GPU_MIN_EDGES`` directed edges (2 bytes each at least, in any format)."""
    if args.device == "gpu":
        return True
    if args.device != "auto" or size < 2 * AUTO_GPU_MIN_EDGES:
        return False
    import importlib.util

    return importlib.util.find_spec("cupy") is not None
