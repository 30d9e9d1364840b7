"""A point-to-point communication profiler for mpi4py programs (docs/design.md section 6).

Wrap the communicator once and use the wrapper everywhere; every point-to-point send
is counted on the *sender* side (row = sender, as in the ``.comm`` format), in bytes
and in messages, per destination rank::

    from mpi4py import MPI
    from procmap.launcher_hooks.profiler import CommProfiler

    comm = CommProfiler(MPI.COMM_WORLD)
    ...                                   # comm.Send / comm.Isend / comm.sendrecv ...
    comm.write("app.comm")                # collective: rank 0 writes the whole matrix

What is counted
    Buffer sends ``Send Ssend Bsend Rsend Isend Issend Ibsend Irsend Sendrecv
    Sendrecv_replace Isendrecv Isendrecv_replace``: the bytes the buffer specification
    describes (``count * datatype size``; a plain numpy array or bytes object counts
    its ``nbytes``). Pickle sends ``send ssend bsend isend issend ibsend sendrecv``:
    the length of ``MPI.pickle.dumps(obj)`` (what mpi4py transmits; the object is
    pickled once more for counting). Sends to ``MPI.PROC_NULL`` are not counted. A
    message of 0 bytes still counts as a message.

What is not
    Receives (the sender already counted them), collectives (``Bcast``, ``Alltoall``,
    ``Allreduce``, neighbourhood collectives, ...), one-sided communication,
    persistent and partitioned sends (``Send_init``/``Start``, ``Psend_init``): their
    traffic cannot be attributed to peers here. Record such traffic yourself with
    :meth:`CommProfiler.record` (e.g. ``record(peer, nbytes)`` for every peer of an
    ``Alltoall``) when it belongs in the matrix.

Derived communicators
    ``Split``, ``Split_type``, ``Dup``, ``Clone``, ``Create``, ``Create_group``,
    ``Create_cart``, ``Create_graph``, ``Create_dist_graph`` and
    ``Create_dist_graph_adjacent`` called on a profiler return a profiler for the new
    communicator that records into the *same* tallies, with peers translated to ranks
    of the outermost profiled communicator: the matrix of a program that talks inside
    row communicators is still one matrix over ``COMM_WORLD`` ranks. Everything else
    (``Get_rank``, ``Barrier``, ``Shift``, ``Allreduce``, ...) is delegated unchanged.
    mpi4py functions that insist on a real ``MPI.Comm`` need ``profiler.comm``.

The profiler is not thread safe: in ``MPI_THREAD_MULTIPLE`` programs, profile one
thread's communicator per profiler.
"""
from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from procmap.errors import InputError, ProcmapError

__all__ = ["CommProfiler", "buffer_bytes", "WEIGHTS"]

#: The two weights a profile can be written with.
WEIGHTS = ("bytes", "messages")

# mpi4py method name -> index of (buffer or object, destination) in the positional
# arguments, and the keyword names of both.
_BUFFER_SENDS = {
    name: ("buf", "dest") for name in
    ("Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend",
     "Sendrecv_replace", "Isendrecv_replace")
}
_BUFFER_SENDS.update({name: ("sendbuf", "dest") for name in ("Sendrecv", "Isendrecv")})
_PICKLE_SENDS = {
    name: ("obj", "dest") for name in ("send", "ssend", "bsend", "isend", "issend", "ibsend")
}
_PICKLE_SENDS["sendrecv"] = ("sendobj", "dest")
_DERIVING = ("Split", "Split_type", "Dup", "Clone", "Create", "Create_group", "Create_cart",
             "Create_graph", "Create_dist_graph", "Create_dist_graph_adjacent",
             "Dup_with_info")


def _mpi():
    """The mpi4py.MPI module if it is loaded (never imported, never initialises MPI)."""
    return sys.modules.get("mpi4py.MPI")


def _datatype_size(datatype) -> int:
    """Size in bytes of an MPI datatype or a typecode string such as ``"d"``."""
    if isinstance(datatype, str):
        mpi = _mpi()
        if mpi is not None:
            typedict = getattr(mpi, "_typedict", {})
            if datatype in typedict:
                return int(typedict[datatype].Get_size())
        import numpy as np
        return int(np.dtype(datatype).itemsize)
    get_size = getattr(datatype, "Get_size", None)
    if get_size is not None:
        return int(get_size())
    return int(datatype.size)


def _is_datatype(value) -> bool:
    if isinstance(value, str):
        return True
    mpi = _mpi()
    if mpi is not None and isinstance(value, mpi.Datatype):
        return True
    return hasattr(value, "Get_size") and hasattr(value, "Get_extent")


def _raw_nbytes(buf) -> tuple[int, int]:
    """``(nbytes, itemsize)`` of a buffer-like object (numpy, CuPy, bytes, memoryview...)."""
    nbytes = getattr(buf, "nbytes", None)
    itemsize = getattr(buf, "itemsize", None)
    if nbytes is not None and itemsize is not None:
        return int(nbytes), int(itemsize)
    view = memoryview(buf)
    return int(view.nbytes), int(view.itemsize)


def buffer_bytes(spec) -> int:
    """Bytes described by an mpi4py buffer specification.

    Accepted forms (mpi4py's): ``buf``; ``[buf, datatype]``; ``[buf, count]``;
    ``[buf, (count, displ)]``; ``[buf, count, datatype]``;
    ``[buf, (count, displ), datatype]``; ``[buf, count, displ, datatype]``. ``None``
    and ``MPI.BOTTOM`` alone describe nothing (0 bytes).
    """
    if spec is None:
        return 0
    mpi = _mpi()
    if mpi is not None and (spec is mpi.BOTTOM or spec is mpi.IN_PLACE):
        return 0
    if isinstance(spec, (list, tuple)):
        if not 1 <= len(spec) <= 4:
            raise InputError(f"buffer specification with {len(spec)} items")
        buf = spec[0]
        datatype = spec[-1] if len(spec) >= 2 and _is_datatype(spec[-1]) else None
        middle = list(spec[1:-1] if datatype is not None else spec[1:])
        count = None
        if middle:
            first = middle[0]
            count = int(first[0]) if isinstance(first, (list, tuple)) else int(first)
        if datatype is not None:
            size = _datatype_size(datatype)
            if count is None:
                # [buf, datatype]: as many whole elements as fit (mpi4py: nbytes // extent)
                nbytes, _ = _raw_nbytes(buf)
                extent = datatype.Get_extent()[1] if hasattr(datatype, "Get_extent") else size
                count = nbytes // extent if extent else 0
            return count * size
        if count is None:
            return buffer_bytes(buf)
        _, itemsize = _raw_nbytes(buf)
        return count * itemsize
    return _raw_nbytes(spec)[0]


def _pickled_size(obj) -> int:
    mpi = _mpi()
    if mpi is not None:
        return len(mpi.pickle.dumps(obj))
    return len(pickle.dumps(obj, protocol=5))


class _Tally:
    """Per-destination byte and message counts of one profiled process."""

    __slots__ = ("nbytes", "messages", "enabled")

    def __init__(self) -> None:
        self.nbytes: dict[int, int] = {}
        self.messages: dict[int, int] = {}
        self.enabled = True

    def add(self, peer: int, nbytes: int, messages: int) -> None:
        self.nbytes[peer] = self.nbytes.get(peer, 0) + nbytes
        self.messages[peer] = self.messages.get(peer, 0) + messages


class CommProfiler:
    """Wrap an mpi4py intracommunicator and count point-to-point sends per destination.

    Parameters
    ----------
    comm : the communicator to wrap (``MPI.COMM_WORLD``, a sub-communicator, ...).
    parent : a profiler of a communicator that contains ``comm``: this profiler then
        records into the parent's tallies, with ranks translated to the parent's
        ranks (done for you by ``Split``, ``Create_cart``, ... on a profiler).

    Attributes
    ----------
    comm : the wrapped communicator.
    enabled : set to False to stop counting for a while (warm-up, I/O phases).
    """

    def __init__(self, comm, parent: "CommProfiler | None" = None) -> None:
        if isinstance(comm, CommProfiler):
            parent, comm = comm, comm.comm
        object.__setattr__(self, "comm", comm)
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_to_top", None)
        if parent is None:
            object.__setattr__(self, "_tally", _Tally())
            object.__setattr__(self, "_top", self)
        else:
            top = parent._top
            object.__setattr__(self, "_parent", parent)
            object.__setattr__(self, "_tally", parent._tally)
            object.__setattr__(self, "_top", top)
            object.__setattr__(self, "_to_top", _translate(comm, top.comm))

    # ------------------------------------------------------------- delegation
    def __getattr__(self, name: str) -> Any:
        # Only called for names not found on the profiler itself.
        if name.startswith("__") or name in ("comm", "_tally", "_top", "_to_top", "_parent"):
            raise AttributeError(name)
        return getattr(self.comm, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "enabled":
            self._tally.enabled = bool(value)
        else:
            object.__setattr__(self, name, value)

    @property
    def enabled(self) -> bool:
        return self._tally.enabled

    def __repr__(self) -> str:
        return f"CommProfiler({self.comm!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, CommProfiler):
            other = other.comm
        return self.comm == other

    __hash__ = None  # like mpi4py communicators (mutable handles)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    # --------------------------------------------------------------- counting
    def record(self, dest: int, nbytes: int, messages: int = 1) -> None:
        """Count ``nbytes`` in ``messages`` messages sent to ``dest`` (a rank of this
        communicator). Use it for traffic the wrapper cannot see (collectives)."""
        if not self._tally.enabled:
            return
        dest = int(dest)
        if dest < 0:  # MPI.PROC_NULL (and ANY_SOURCE etc.): nothing was sent
            return
        if self._to_top is not None:
            dest = self._to_top[dest]
            if dest < 0:
                return
        self._tally.add(dest, int(nbytes), int(messages))

    def _send(self, name: str, table: dict, count, args: tuple, kwargs: dict):
        result = getattr(self.comm, name)(*args, **kwargs)
        if self._tally.enabled:
            what_key, dest_key = table[name]
            what = args[0] if args else kwargs[what_key]
            dest = args[1] if len(args) > 1 else kwargs[dest_key]
            self.record(dest, count(what))
        return result

    # buffer sends
    def Send(self, *args, **kwargs):
        return self._send("Send", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Ssend(self, *args, **kwargs):
        return self._send("Ssend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Bsend(self, *args, **kwargs):
        return self._send("Bsend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Rsend(self, *args, **kwargs):
        return self._send("Rsend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Isend(self, *args, **kwargs):
        return self._send("Isend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Issend(self, *args, **kwargs):
        return self._send("Issend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Ibsend(self, *args, **kwargs):
        return self._send("Ibsend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Irsend(self, *args, **kwargs):
        return self._send("Irsend", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Sendrecv(self, *args, **kwargs):
        return self._send("Sendrecv", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Sendrecv_replace(self, *args, **kwargs):
        return self._send("Sendrecv_replace", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Isendrecv(self, *args, **kwargs):
        return self._send("Isendrecv", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    def Isendrecv_replace(self, *args, **kwargs):
        return self._send("Isendrecv_replace", _BUFFER_SENDS, buffer_bytes, args, kwargs)

    # pickle sends
    def send(self, *args, **kwargs):
        return self._send("send", _PICKLE_SENDS, _pickled_size, args, kwargs)

    def ssend(self, *args, **kwargs):
        return self._send("ssend", _PICKLE_SENDS, _pickled_size, args, kwargs)

    def bsend(self, *args, **kwargs):
        return self._send("bsend", _PICKLE_SENDS, _pickled_size, args, kwargs)

    def isend(self, *args, **kwargs):
        return self._send("isend", _PICKLE_SENDS, _pickled_size, args, kwargs)

    def issend(self, *args, **kwargs):
        return self._send("issend", _PICKLE_SENDS, _pickled_size, args, kwargs)

    def ibsend(self, *args, **kwargs):
        return self._send("ibsend", _PICKLE_SENDS, _pickled_size, args, kwargs)

    def sendrecv(self, *args, **kwargs):
        return self._send("sendrecv", _PICKLE_SENDS, _pickled_size, args, kwargs)

    # ---------------------------------------------------- derived communicators
    def _derive(self, name: str, args, kwargs):
        new = getattr(self.comm, name)(*args, **kwargs)
        if isinstance(new, tuple):  # Idup-like (comm, request)
            return new
        mpi = _mpi()
        if new is None or (mpi is not None and new == mpi.COMM_NULL):
            return new
        return CommProfiler(new, parent=self)

    def Split(self, *args, **kwargs):
        return self._derive("Split", args, kwargs)

    def Split_type(self, *args, **kwargs):
        return self._derive("Split_type", args, kwargs)

    def Dup(self, *args, **kwargs):
        return self._derive("Dup", args, kwargs)

    def Dup_with_info(self, *args, **kwargs):
        return self._derive("Dup_with_info", args, kwargs)

    def Clone(self, *args, **kwargs):
        return self._derive("Clone", args, kwargs)

    def Create(self, *args, **kwargs):
        return self._derive("Create", args, kwargs)

    def Create_group(self, *args, **kwargs):
        return self._derive("Create_group", args, kwargs)

    def Create_cart(self, *args, **kwargs):
        return self._derive("Create_cart", args, kwargs)

    def Create_graph(self, *args, **kwargs):
        return self._derive("Create_graph", args, kwargs)

    def Create_dist_graph(self, *args, **kwargs):
        return self._derive("Create_dist_graph", args, kwargs)

    def Create_dist_graph_adjacent(self, *args, **kwargs):
        return self._derive("Create_dist_graph_adjacent", args, kwargs)

    # ------------------------------------------------------------------ results
    def reset(self) -> None:
        """Forget everything counted so far (shared with derived profilers)."""
        self._tally.nbytes.clear()
        self._tally.messages.clear()

    def matrix(self, weight: str = "bytes") -> dict[int, int]:
        """This process's row: ``{destination rank: bytes}`` (or messages), ranks of the
        outermost profiled communicator. Local; no communication."""
        _check_weight(weight)
        table = self._tally.nbytes if weight == "bytes" else self._tally.messages
        return dict(sorted(table.items()))

    def gather(self, weight: str = "bytes", root: int = 0):
        """Collective over the outermost profiled communicator: every row on ``root``
        (a list of dicts, index = sender), ``None`` elsewhere."""
        return self._top.comm.gather(self.matrix(weight), root=root)

    def write(self, path: str | os.PathLike, root: int = 0, weight: str = "bytes") -> str | None:
        """Collective: gather all rows on ``root``, which writes a ``.comm`` file.

        The file holds ``# tasks: N`` (N = size of the outermost profiled communicator)
        and one directed ``src dst volume`` line per (sender, destination) pair with
        traffic, in rank order (sends to oneself are left out);
        :func:`procmap.formats.read_graph` sums them into ``C + C^T``. Written
        atomically (no half-written file). Returns the path on root, None elsewhere;
        a write error is raised on every rank.
        """
        _check_weight(weight)
        top = self._top.comm
        rows = top.gather(self.matrix(weight), root=root)
        error = None
        if top.Get_rank() == root:
            try:
                _write_rows(path, rows, weight)
            except Exception as exc:  # noqa: BLE001 - reported on every rank
                error = f"{type(exc).__name__}: {exc}"
                top.bcast(error, root=root)
                raise
        error = top.bcast(error, root=root)
        if error is not None:
            raise ProcmapError(f"writing {os.fspath(path)} on rank {root} failed: {error}")
        return os.fspath(path) if top.Get_rank() == root else None


def _check_weight(weight: str) -> None:
    if weight not in WEIGHTS:
        raise InputError(f"weight must be one of {', '.join(WEIGHTS)}, not {weight!r}")


def _write_rows(path, rows: list, weight: str) -> None:
    from procmap.formats import atomic_write

    lines = [
        "# procmap comm: profiled by procmap.launcher_hooks.profiler (point-to-point sends)\n",
        f"# 'src dst {weight}' per line, row = sender, directed; readers sum into C + C^T\n",
        f"# tasks: {len(rows)}\n",
    ]
    for src, row in enumerate(rows):
        for dst, value in sorted(row.items()):
            if value and dst != src:  # sends to oneself do not matter for placement
                lines.append(f"{src} {dst} {value}\n")
    with atomic_write(path, "w") as fh:
        fh.writelines(lines)


def _translate(comm, top) -> list[int]:
    """Rank of every member of ``comm`` in ``top`` (-1 where not a member)."""
    mpi = _mpi()
    group = comm.Get_group()
    top_group = top.Get_group()
    try:
        ranks = group.Translate_ranks(list(range(group.Get_size())), top_group)
    finally:
        group.Free()
        top_group.Free()
    undefined = mpi.UNDEFINED if mpi is not None else None
    return [-1 if r == undefined or r is None or r < 0 else int(r) for r in ranks]
