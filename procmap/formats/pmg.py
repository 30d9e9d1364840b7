"""procmap's binary graph format ``.pmg``: the CSR arrays as they lie in memory.

Written by ``procmap convert x.comm x.pmg``, read by every command like any other
graph format; loading is a read of the file and one validation pass, at disk
speed (``benchmarks/bench_formats.py`` measures it).

Layout (version 1), every number little-endian::

    offset  size  field
         0     8  magic b"\\x93PMG\\r\\n\\x1a\\n" (a text transfer or a truncated
                  first line is seen at once)
         8     2  uint16  format version (1)
        10     1  uint8   edge weight dtype: 0 = int64, 1 = float64
        11     1  uint8   flags; none defined in version 1, must be 0
        12     4  reserved, zero
        16     8  uint64  n, the number of tasks
        24     8  uint64  nnz = 2m, the number of directed CSR entries
        32     4  uint32  CRC-32 (zlib.crc32) of bytes 0..31, then of every byte
                          from offset 64 to the end of the file
        36    28  reserved, zero
        64        xadj    int64 [n + 1]
                  adjncy  int32 [nnz], zero-padded to a multiple of 8 bytes
                  adjwgt  int64 or float64 [nnz]
                  vwgt    int64 [n]

Every array starts at a multiple of 8 bytes; the file ends after ``vwgt``.

The reader gives the same guarantees as the text readers (the invariants of
:class:`~procmap.graph.CommGraph`): before anything is allocated, the header is
checked (magic, version, dtype code, flags, reserved bytes, ``1 <= n <= MAX_TASKS``)
and the file size must equal the size the header implies exactly. Then the file
is read once, in pieces by several threads, each piece checksummed by the thread
that read it (:class:`PendingRead`; the pieces' CRCs are joined with
:func:`crc32_combine`), and :mod:`procmap.kernels.io.validate_cpu` checks ``xadj``
(``xadj[0] == 0``, monotone, ``xadj[n] == nnz``), every row (ids in ``0..n-1``,
no self loop, strictly increasing, weights finite and ``> 0``) and symmetry
(every ``(u, v, w)`` has a reverse ``(v, u, w)``), and numpy checks ``vwgt >= 0``,
the padding and the totals (:func:`~procmap.limits.check_total`); the totals
computed are handed to the graph (``total_edge_weight`` for integer weights,
``total_vertex_weight``). The first violation is reported as one line naming the
file and the task ids; a wrong checksum takes precedence over the structural
problems it may cause (it is checked first). Float weights that are all integral
become int64, as in every other reader. ``n = 0`` is refused, as by the text
formats.
"""
from __future__ import annotations

import os
import struct
import threading
import zlib

import numpy as np

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import MAX_TASKS, check_total, exact_sum

from .atomic import as_format_error, atomic_write

#: The first 8 bytes of every ``.pmg`` file.
MAGIC = b"\x93PMG\r\n\x1a\n"
#: The format version this module writes and reads.
VERSION = 1
#: Size of the fixed header.
HEADER_SIZE = 64
# magic, version, dtype code, flags, reserved, n, nnz, crc, reserved
_HEADER = struct.Struct("<8sHBBIQQI28s")
_DTYPES = {0: np.dtype("<i8"), 1: np.dtype("<f8")}
_CODES = {np.dtype(np.int64): 0, np.dtype(np.float64): 1}
_INT_EXACT = 2.0 ** 53


def _pad(nbytes: int) -> int:
    return -nbytes % 8


def _body_size(n: int, nnz: int, weight_size: int = 8) -> int:
    """Bytes after the header for ``n`` tasks and ``nnz`` entries."""
    return 8 * (n + 1) + 4 * nnz + _pad(4 * nnz) + weight_size * nnz + 8 * n


# ------------------------------------------------------------------------- writer
def write_pmg(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` as a ``.pmg`` file (atomically; ``"-"`` is standard output)."""
    write_arrays(path, graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt)


def write_arrays(path: str | os.PathLike, xadj, adjncy, adjwgt, vwgt, *,
                 version: int = VERSION, flags: int = 0, dtype_code: int | None = None,
                 n: int | None = None, nnz: int | None = None, checksum: int | None = None) -> None:
    """Write raw CSR arrays as a ``.pmg`` file without checking them.

    :func:`write_pmg` uses it for a :class:`CommGraph`. The keyword arguments
    override header fields (defaults: what the arrays show, the true checksum),
    so that tests can produce files that lie; they are never needed otherwise.
    """
    xadj = np.ascontiguousarray(xadj, dtype="<i8")
    adjncy = np.ascontiguousarray(adjncy, dtype="<i4")
    adjwgt = np.ascontiguousarray(adjwgt)
    if adjwgt.dtype not in _CODES:
        raise ValueError(f"adjwgt must be int64 or float64, not {adjwgt.dtype}")
    code = _CODES[adjwgt.dtype] if dtype_code is None else dtype_code
    adjwgt = adjwgt.astype(adjwgt.dtype.newbyteorder("<"), copy=False)
    vwgt = np.ascontiguousarray(vwgt, dtype="<i8")
    parts = [memoryview(xadj).cast("B"), memoryview(adjncy).cast("B"),
             bytes(_pad(adjncy.nbytes)), memoryview(adjwgt).cast("B"), memoryview(vwgt).cast("B")]
    n = xadj.size - 1 if n is None else n
    nnz = adjncy.size if nnz is None else nnz
    head = _HEADER.pack(MAGIC, version, code, flags, 0, n, nnz, 0, bytes(28))
    if checksum is None:
        checksum = zlib.crc32(head[:32])
        for part in parts:
            checksum = zlib.crc32(part, checksum)
    head = head[:32] + struct.pack("<I", checksum) + head[36:]
    with atomic_write(path, "wb") as handle:
        handle.write(head)
        for part in parts:
            handle.write(part)


# ------------------------------------------------------------------------- reader
def read_header(handle, size: int, path) -> tuple[int, int, np.dtype, int, bytes]:
    """Read and check the header of an open ``.pmg`` file of ``size`` bytes.

    Returns ``(n, nnz, weight dtype, checksum, the header's bytes)``. Allocates nothing of size ``n``:
    the file size must equal the size the header implies.
    """
    head = handle.read(HEADER_SIZE)
    if len(head) < 8 or head[:8] != MAGIC:
        raise FormatError("not a procmap .pmg graph (bad magic bytes)", path)
    if len(head) < HEADER_SIZE:
        raise FormatError(f"truncated .pmg header: {len(head)} of {HEADER_SIZE} bytes", path)
    _, version, code, flags, reserved, n, nnz, checksum, tail = _HEADER.unpack(head)
    if version != VERSION:
        raise FormatError(f"unsupported .pmg version {version} (this procmap reads version "
                          f"{VERSION}; convert the file with the procmap that wrote it)", path)
    if code not in _DTYPES:
        raise FormatError(f"unknown edge weight dtype code {code} (0 = int64, 1 = float64)", path)
    if flags != 0 or reserved != 0 or any(tail):
        raise FormatError("reserved .pmg header fields are not zero (a newer version or a "
                          "corrupt file)", path)
    if n == 0:
        raise FormatError("empty graph: n = 0", path)
    if n > MAX_TASKS:
        raise FormatError(f"header declares {n:,} tasks; procmap handles at most {MAX_TASKS:,}",
                          path)
    # nnz is at most what the file can hold (12 bytes an entry): checked before the
    # products below can exceed anything but Python ints
    expected = HEADER_SIZE + _body_size(n, nnz)
    if expected != size:
        raise FormatError(f"header declares {n:,} tasks and {nnz:,} entries ({expected:,} "
                          f"bytes) but the file holds {size:,} bytes", path)
    return n, nnz, _DTYPES[code], checksum, head


def read_pmg(path: str | os.PathLike) -> CommGraph:
    """Read a ``.pmg`` file into a :class:`CommGraph` (see the module docstring).

    Raises :class:`FormatError` naming the file for any violation; memory use is
    the file's size plus O(n / 4096).
    """
    return PendingRead(path, background=False).result()


#: Bytes per piece of the parallel read: each piece is read and checksummed by one
#: thread, while it is still in that core's cache.
CHUNK_BYTES = 32 << 20
#: At most this many reading threads (a copy from the page cache saturates memory
#: bandwidth well before).
MAX_READ_THREADS = 16


def start_read(path: str | os.PathLike) -> "PendingRead":
    """Start reading the ``.pmg`` file ``path`` in background threads; the returned
    :class:`PendingRead`'s :meth:`~PendingRead.result` validates it and returns the
    graph (or raises what :func:`read_pmg` raises).

    ``procmap map`` starts the read before its imports and Numba's set-up, which
    hold the interpreter lock while the read does not need it (docs/design.md
    section 9): the file is read while they run.
    """
    return PendingRead(path)


class PendingRead:
    """A ``.pmg`` file being read (:func:`start_read`), or read (``background=False``,
    :func:`read_pmg`: the caller's thread does what the first thread would).

    One thread opens the file and checks the header; the body is then read by up
    to :data:`MAX_READ_THREADS` threads in :data:`CHUNK_BYTES` pieces with
    ``os.preadv`` (the copy from the page cache and the page faults run on several
    cores; neither holds the interpreter lock), each piece checksummed by the
    thread that read it (``zlib.crc32`` releases the lock too); the pieces' CRCs
    are joined with :func:`crc32_combine`. Nothing is validated until
    :meth:`result`, which runs in the caller's thread.
    """

    def __init__(self, path: str | os.PathLike, background: bool = True):
        self.path = path
        self._cancelled = threading.Event()
        self._outcome: tuple | None = None
        self._error: BaseException | None = None
        self._thread = None
        if background:
            self._thread = threading.Thread(target=self._run, name="procmap-pmg-read",
                                            daemon=True)
            self._thread.start()
        else:  # read here and now (read_pmg): pieces in parallel only beyond one piece
            self._run()

    def cancel(self) -> None:
        """Stop reading after the pieces in flight (the caller gave up: its result is
        never asked for). Harmless after the read ended."""
        self._cancelled.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (``None``: until it ends) for the read to end:
        done, failed or cancelled (:meth:`cancel`); return whether it has ended. A read
        made with ``background=False`` has ended when the object exists."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def result(self) -> CommGraph:
        """Wait for the read, then check the checksum and validate (see the module
        docstring); raises :class:`FormatError` naming the file for any violation."""
        self.wait()
        if self._error is not None:
            raise self._error
        buffer, n, nnz, wdtype, checksum, crc = self._outcome
        self._outcome = None  # the graph owns the buffer from here
        return _from_buffer(buffer, n, nnz, wdtype, checksum, crc, self.path)

    def _run(self) -> None:
        try:
            self._outcome = self._read()
        except OSError as exc:
            self._error = FormatError(f"cannot read: {exc.strerror or exc}", self.path)
        except BaseException as exc:  # noqa: BLE001 -- handed to result()
            self._error = exc

    def _read(self) -> tuple:
        path = self.path
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            n, nnz, wdtype, checksum, head = read_header(handle, size, path)
            buffer = np.empty(size, dtype=np.uint8)
            view = memoryview(buffer)
            view[:HEADER_SIZE] = head
            # In the background the caller's thread is busy (imports): one core is left to it.
            crc = _read_body(handle.fileno(), view, HEADER_SIZE, size, self._cancelled, path,
                             spare=1 if self._thread is not None else 0)
        if self._cancelled.is_set():
            raise FormatError("read cancelled", path)
        crc = crc32_combine(zlib.crc32(head[:32]), crc, size - HEADER_SIZE)
        return buffer, n, nnz, wdtype, checksum, crc


def _threads_for(nchunks: int, spare: int = 0) -> int:
    """Reading threads for ``nchunks`` pieces: one per usable core but ``spare``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores - spare, MAX_READ_THREADS, nchunks))


def _read_body(fd: int, view: memoryview, start: int, size: int, cancelled: threading.Event,
               path, spare: int = 0) -> int:
    """Fill ``view[start:size]`` from ``fd`` (positional reads, in parallel pieces) and
    return the CRC-32 of those bytes. A short file is a :class:`FormatError`."""
    bounds = [(lo, min(lo + CHUNK_BYTES, size)) for lo in range(start, size, CHUNK_BYTES)]
    crcs = [0] * len(bounds)
    errors: list[BaseException] = []
    pieces = iter(range(len(bounds)))  # next() on it is atomic under the interpreter lock

    def work() -> None:
        try:
            for i in pieces:
                if cancelled.is_set() or errors:
                    return
                lo, hi = bounds[i]
                _read_exactly(fd, view[lo:hi], lo, size, path)
                crcs[i] = zlib.crc32(view[lo:hi])
        except BaseException as exc:  # noqa: BLE001 -- re-raised by the caller
            errors.append(exc)

    workers = [threading.Thread(target=work, daemon=True, name="procmap-pmg-piece")
               for _ in range(_threads_for(len(bounds), spare) - 1)]
    for worker in workers:
        worker.start()
    work()  # this thread reads pieces too
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    crc = 0
    for (lo, hi), piece in zip(bounds, crcs):
        crc = crc32_combine(crc, piece, hi - lo)
    return crc


def _read_exactly(fd: int, view: memoryview, offset: int, size: int, path) -> None:
    got = 0
    preadv = getattr(os, "preadv", None)  # not on every platform
    while got < len(view):
        if preadv is not None:
            count = preadv(fd, [view[got:]], offset + got)
        else:  # no preadv on this platform: pread, then copy
            data = os.pread(fd, len(view) - got, offset + got)
            view[got:got + len(data)] = data
            count = len(data)
        if not count:
            raise FormatError(f"file shrank while being read ({offset + got:,} of {size:,} "
                              "bytes)", path)
        got += count


# -------------------------------------------------------------- CRC-32 combination
# zlib's crc32_combine (not exposed by Python's zlib), as zlib 1.2.12 computes it:
# polynomials over GF(2) in reflected bit order, x^(2^k) mod p tabulated.
_POLY = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    """``a * b mod p`` (CRC-32 polynomial, reflected)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x2n_table() -> list[int]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return table


_X2N = _x2n_table()


def _x2nmodp(n: int, k: int) -> int:
    """``x^(n * 2^k) mod p``."""
    p = 1 << 31  # x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1 = zlib.crc32(A)``, ``crc2 = zlib.crc32(B)``
    and ``len2 = len(B)`` (zlib's ``crc32_combine``)."""
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ crc2


def _from_buffer(buffer: np.ndarray, n: int, nnz: int, wdtype: np.dtype, checksum: int,
                 crc: int, path) -> CommGraph:
    """Validate and wrap the arrays of a whole ``.pmg`` file in ``buffer``, whose
    checksum (header and body, as stored) is ``crc``."""
    from procmap.kernels.io import validate_cpu as kv

    # A wrong checksum takes precedence over the structural problems it may cause.
    if crc != checksum:
        raise FormatError(f"checksum mismatch (stored {checksum:#010x}, computed "
                          f"{crc:#010x}): the file is corrupt", path)
    offset = HEADER_SIZE
    xadj = buffer[offset:offset + 8 * (n + 1)].view(np.int64)
    offset += 8 * (n + 1)
    adjncy = buffer[offset:offset + 4 * nnz].view(np.int32)
    offset += 4 * nnz
    padding = buffer[offset:offset + _pad(4 * nnz)]
    offset += _pad(4 * nnz)
    adjwgt = buffer[offset:offset + 8 * nnz].view(wdtype.newbyteorder("="))
    offset += 8 * nnz
    vwgt = buffer[offset:offset + 8 * n].view(np.int64)
    if padding.any():
        raise FormatError("non-zero padding after adjncy", path)
    bad = kv.check_xadj(xadj, nnz)
    if bad >= 0:
        raise FormatError(f"xadj[{bad}] = {int(xadj[bad]):,} breaks xadj[0] = 0 <= ... <= "
                          f"xadj[n] = nnz = {nnz:,} (row pointers must be non-decreasing)", path)
    result = kv.check_rows(xadj, adjncy, adjwgt, 1)
    entry, code, upper, largest, total, fractional = result
    if code == kv.OK and 2 * upper != nnz:
        # some entry below the diagonal has no reverse: name the first one
        entry, code, *_ = kv.check_rows(xadj, adjncy, adjwgt, 2)
    if code != kv.OK:
        # a symmetry violation may come from a broken row elsewhere: report the
        # first structural problem of the whole graph before it
        if code in (kv.MISSING_REVERSE, kv.ASYMMETRIC):
            first, first_code, *_ = kv.check_rows(xadj, adjncy, adjwgt, 0)
            if first_code != kv.OK:
                entry, code = first, first_code
        raise FormatError(_violation(int(entry), int(code), xadj, adjncy, adjwgt), path)
    edge_total = None  # the exact total edge weight, where the validation gave it
    try:
        if wdtype.kind == "i":
            if largest * nnz > 2.0 ** 62:
                edge_total = exact_sum(adjwgt)
                check_total(edge_total, "total edge weight (both directions)")
        else:
            if not np.isfinite(total):
                check_total(exact_sum(adjwgt), "total edge weight (both directions)")
            if fractional == 0 and largest < _INT_EXACT:
                adjwgt = adjwgt.astype(np.int64)  # as every reader: integral weights are int64
        if adjwgt.dtype.kind == "i" and edge_total is None and total < _INT_EXACT:
            # Positive integers, every partial sum of the kernel's float64 total below
            # 2^53: that total is exact (map_tasks needs it; a pass over adjwgt saved).
            edge_total = int(total)
        if n and vwgt.min() < 0:
            u = int(np.argmin(vwgt))
            raise InputError(f"negative vertex weight {int(vwgt[u])} (task {u})")
        vertex_total = exact_sum(vwgt)
        check_total(vertex_total, "total vertex weight")
    except InputError as exc:
        raise as_format_error(exc, path) from None
    # the totals just computed: the exact ints the graph's properties would give
    return CommGraph(xadj, adjncy, adjwgt, vwgt).keep_totals(edge=edge_total, vertex=vertex_total)


def _violation(entry: int, code: int, xadj, adjncy, adjwgt) -> str:
    """The one-line description of the violation at CSR ``entry``."""
    from procmap.kernels.io import validate_cpu as kv

    u = int(np.searchsorted(xadj, entry, side="right") - 1)
    v = int(adjncy[entry])
    w = adjwgt[entry].item()
    n = xadj.size - 1
    if code == kv.BAD_ID:
        return f"task {u}: neighbour id {v} out of range 0..{n - 1}"
    if code == kv.SELF_LOOP:
        return f"task {u}: self loop ({u}, {u}) stored (self loops are never stored)"
    if code == kv.DUPLICATE:
        return f"task {u}: duplicate neighbour {v}"
    if code == kv.UNSORTED:
        return (f"task {u}: neighbours not in increasing order ({int(adjncy[entry - 1])} "
                f"before {v})")
    if code == kv.BAD_WEIGHT:
        what = ("zero (zero entries are never stored)" if w == 0 else
                "negative" if w < 0 else "not finite")
        return f"edge ({u}, {v}): weight {w} is {what}"
    if code == kv.MISSING_REVERSE:
        return (f"edge ({u}, {v}) has no reverse entry ({v}, {u}): the graph must be "
                "symmetric")
    lo, hi = int(xadj[v]), int(xadj[v + 1])
    r = lo + int(np.searchsorted(adjncy[lo:hi], u))
    return f"asymmetric weights: C[{u},{v}] = {w} but C[{v},{u}] = {adjwgt[r].item()}"
