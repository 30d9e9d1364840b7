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
is read once, its checksum computed (in a second thread) while
:mod:`procmap.kernels.validate_cpu` checks ``xadj`` (``xadj[0] == 0``, monotone,
``xadj[n] == nnz``), every row (ids in ``0..n-1``, no self loop, strictly
increasing, weights finite and ``> 0``) and symmetry (every ``(u, v, w)`` has a
reverse ``(v, u, w)``), and numpy checks ``vwgt >= 0``, the padding and the totals
(:func:`~procmap.limits.check_total`). The first violation is reported as one
line naming the file and the task ids; a wrong checksum takes precedence over the
structural problems it may cause. Float weights that are all integral become
int64, as in every other reader. ``n = 0`` is refused, as by the text formats.
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
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            n, nnz, wdtype, checksum, head = read_header(handle, size, path)
            buffer = np.empty(size, dtype=np.uint8)
            view = memoryview(buffer)
            view[:HEADER_SIZE] = head
            got = HEADER_SIZE
            while got < size:
                count = handle.readinto(view[got:])
                if not count:
                    raise FormatError(f"file shrank while being read ({got:,} of {size:,} "
                                      "bytes)", path)
                got += count
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", path) from None
    return _from_buffer(buffer, n, nnz, wdtype, checksum, path)


def _from_buffer(buffer: np.ndarray, n: int, nnz: int, wdtype: np.dtype, checksum: int,
                 path) -> CommGraph:
    """Checksum, validate and wrap the arrays of a whole ``.pmg`` file in ``buffer``."""
    from procmap.kernels import validate_cpu as kv

    header = memoryview(buffer)[:32]
    body = memoryview(buffer)[HEADER_SIZE:]
    crc: list[int] = []
    worker = threading.Thread(target=lambda: crc.append(zlib.crc32(body, zlib.crc32(header))))
    worker.start()
    try:
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
        bad = kv.check_xadj(xadj, nnz)
        result = None if bad >= 0 else kv.check_rows(xadj, adjncy, adjwgt, 1)
    finally:
        worker.join()
    if crc[0] != checksum:
        raise FormatError(f"checksum mismatch (stored {checksum:#010x}, computed "
                          f"{crc[0]:#010x}): the file is corrupt", path)
    if padding.any():
        raise FormatError("non-zero padding after adjncy", path)
    if bad >= 0:
        raise FormatError(f"xadj[{bad}] = {int(xadj[bad]):,} breaks xadj[0] = 0 <= ... <= "
                          f"xadj[n] = nnz = {nnz:,} (row pointers must be non-decreasing)", path)
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
    try:
        if wdtype.kind == "i":
            if largest * nnz > 2.0 ** 62:
                check_total(exact_sum(adjwgt), "total edge weight (both directions)")
        else:
            if not np.isfinite(total):
                check_total(exact_sum(adjwgt), "total edge weight (both directions)")
            if fractional == 0 and largest < _INT_EXACT:
                adjwgt = adjwgt.astype(np.int64)  # as every reader: integral weights are int64
        if n and vwgt.min() < 0:
            u = int(np.argmin(vwgt))
            raise InputError(f"negative vertex weight {int(vwgt[u])} (task {u})")
        check_total(exact_sum(vwgt), "total vertex weight")
    except InputError as exc:
        raise as_format_error(exc, path) from None
    return CommGraph(xadj, adjncy, adjwgt, vwgt)


def _violation(entry: int, code: int, xadj, adjncy, adjwgt) -> str:
    """The one-line description of the violation at CSR ``entry``."""
    from procmap.kernels import validate_cpu as kv

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
