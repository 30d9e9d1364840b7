"""CuPy plumbing shared by the ``*_gpu`` kernel modules: loading the ``.cu`` files that
sit beside them (``refinement/jet.cu`` beside ``refinement/jet_gpu.py``) as
``cupy.RawModule`` and launching their kernels. Headers shared by every module
(``common.cuh``, ``conn_table.cuh``) are in ``cuda/``.

Importing this module imports CuPy; the CPU path never does (the dispatch layer in
:mod:`procmap.kernels.backend` imports the GPU modules only when asked for them).

Conventions for every CUDA twin
-------------------------------
* Arrays are CuPy arrays with the dtypes of the CPU twins (``xadj`` int64,
  ``adjncy`` int32, ``adjwgt`` int64 or float64, ``vwgt`` int64, parts int32).
* Scalars are passed with explicit NumPy types (``np.int64(n)``, ``np.float64(x)``):
  CuPy hands a kernel the bytes of what it is given, and a Python ``int`` is not an
  ``int`` of the kernel's signature.
* Kernels are ``extern "C"`` (no C++ name mangling), one thread per item with a
  grid-stride loop, so any launch geometry is correct.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import pathlib
import threading

import cupy as cp
import numba as nb
import numpy as np

#: The kernels package: ``.cu`` files are named relative to it (``"refinement/jet.cu"``).
KERNELS_DIR = pathlib.Path(__file__).parent
#: The headers every ``.cu`` file may include (``-I``).
HEADERS_DIR = KERNELS_DIR / "cuda"
#: Threads per block of the one-thread-per-item kernels.
BLOCK = 256
#: Grid cap of grid-stride kernels (enough blocks to fill an H100/H200 several times).
MAX_BLOCKS = 65535
#: Grid cap of the histogram kernels (``SHARED_BINS`` in cuda/common.cuh): every block
#: clears and flushes its shared bins, so fewer, longer-striding blocks do less of that
#: (about 8 blocks per multiprocessor of an H100).
HISTOGRAM_BLOCKS = 1024


def module_source(filename: str, root: pathlib.Path = KERNELS_DIR) -> str:
    """The source of ``<root>/<filename>`` as compiled: a first line with a digest of
    the headers in ``<root>/cuda``, then the file.

    CuPy keys its on-disk cache of compiled modules by the source text and options; a
    header reached through ``-I`` is not part of that text. The digest line puts the
    headers into the key, so that an edited (or upgraded) header never runs with a
    module compiled against the old one.
    """
    digest = hashlib.sha256()
    for header in sorted((root / "cuda").glob("*.cuh")):
        digest.update(header.name.encode() + b"\0" + header.read_bytes() + b"\0")
    return f"// headers {digest.hexdigest()}\n" + (root / filename).read_text()


@functools.lru_cache(maxsize=None)
def module(filename: str) -> cp.RawModule:
    """The compiled ``kernels/<filename>`` (compiled once per process, cached on disk by
    CuPy under a key that covers the headers too: :func:`module_source`)."""
    return cp.RawModule(code=module_source(filename), options=("--std=c++17", f"-I{HEADERS_DIR}"))


def kernel(filename: str, name: str) -> cp.RawKernel:
    """Kernel ``name`` of ``kernels/<filename>`` (``"refinement/jet.cu"``)."""
    return module(filename).get_function(name)


def launch(fn, items: int, *args, max_blocks: int = MAX_BLOCKS) -> None:
    """Launch ``fn`` over ``items`` work items (grid-stride kernels), if there are any,
    on at most ``max_blocks`` blocks of :data:`BLOCK` threads."""
    if items <= 0:
        return
    blocks = min(max_blocks, -(-int(items) // BLOCK))
    fn((blocks,), (BLOCK,), args)


def i64(x) -> np.int64:
    return np.int64(x)


def f64(x) -> np.float64:
    return np.float64(x)


def gain_weights(w) -> tuple[cp.ndarray, np.int64]:
    """Edge weights as the gain kernels take them: ``(weights, w_int)``, the weights as
    int64 or float64 (no copy when they already are) and ``w_int`` = 1 for int64 (see
    ``weight_at`` in cuda/common.cuh). The kernels compute in float64 either way."""
    w = cp.asarray(w)
    if w.dtype.kind == "f":
        w = w.astype(cp.float64, copy=False)
    else:
        w = w.astype(cp.int64, copy=False)
    return cp.ascontiguousarray(w), np.int64(w.dtype == cp.int64)


def as_device(a, dtype=None) -> cp.ndarray:
    """``a`` as a contiguous CuPy array (no copy when it already is one of ``dtype``)."""
    return cp.ascontiguousarray(cp.asarray(a, dtype=dtype))


# ----------------------------------------------------------------- worker streams
_FREE_STREAMS: list = []  # idle worker streams, reused (see own_stream)
_STREAMS_LOCK = threading.Lock()


def mark() -> cp.cuda.Event:
    """An event after the work queued so far on the calling thread's current stream."""
    return cp.cuda.get_current_stream().record()


@contextlib.contextmanager
def own_stream(after: cp.cuda.Event | None = None):
    """Run the body on a non-blocking stream of its own (the current stream inside).

    For GPU work in a worker thread, concurrent with other threads' streams. The stream
    first waits for ``after`` (see :func:`mark`: the inputs the submitting thread
    queued), and is synchronised on exit, so what the body made is complete when the
    worker's result is read. Streams come from a pool and go back to it: CuPy's
    memory pool keeps freed blocks per stream, so reusing streams reuses that memory.
    """
    with _STREAMS_LOCK:
        stream = _FREE_STREAMS.pop() if _FREE_STREAMS else cp.cuda.Stream(non_blocking=True)
    try:
        if after is not None:
            stream.wait_event(after)
        with stream:
            yield stream
    finally:
        stream.synchronize()
        with _STREAMS_LOCK:
            _FREE_STREAMS.append(stream)


def free_bytes() -> int:
    """Device memory available to new allocations: free on the device plus the blocks
    CuPy's memory pool holds unused."""
    return int(cp.cuda.runtime.memGetInfo()[0]) + int(cp.get_default_memory_pool().free_bytes())


def adopt(a: cp.ndarray) -> cp.ndarray:
    """A copy of ``a`` (made by a worker on its own stream) owned by the current stream.

    CuPy returns a freed block to the pool of the stream that allocated it. If this
    thread freed ``a`` while its own kernels reading ``a`` were still queued, a worker
    reusing ``a``'s stream could receive the block and overwrite it. The copy, with the
    synchronisation after it, ends every use of ``a`` here."""
    out = a.copy()
    cp.cuda.get_current_stream().synchronize()
    return out


# ----------------------------------------------------------------- per-vertex tables
#: Connectivity tables of at most this many entries live in the thread's local memory
#: (``LOCAL_TABLE`` in cuda/common.cuh, which must match).
LOCAL_TABLE = 64


class TableScratch:
    """Global scratch for the per-vertex connectivity tables that do not fit in a
    thread's local memory.

    Vertex ``u`` needs a table of ``deg(u) * per_edge`` entries (``per_edge`` keys per
    neighbour: the number of hierarchy levels for LP, 1 for rebalancing). Tables of at
    most :data:`LOCAL_TABLE` entries are kernel-local arrays and take no memory here;
    the others get ``keys`` (int32) / ``vals`` (float64) slots from ``offset[u]``
    (-1 for the local ones). On low-degree graphs (grids, meshes) nothing is allocated
    where a slice per CSR entry would cost ``12 * per_edge`` bytes per directed edge.
    One host synchronisation (the total size).
    """

    def __init__(self, xadj: cp.ndarray, per_edge: int):
        size = cp.diff(xadj) * int(per_edge)
        size[size <= LOCAL_TABLE] = 0
        end = cp.cumsum(size)
        total = int(end[-1]) if end.size else 0
        self.offset = cp.where(size > 0, end - size, -1)
        self.keys = cp.empty(max(total, 1), dtype=cp.int32)
        self.vals = cp.empty(max(total, 1), dtype=cp.float64)


# ----------------------------------------------------------------- uploading graphs
#: Bytes per pinned staging buffer (two are used, alternately).
STAGING_BYTES = 64 << 20


@nb.njit(parallel=True, cache=True, nogil=True)
def _max_int(a):
    """Maximum of a non-empty integer array (parallel: the host side of an upload)."""
    chunks = 64
    best = np.full(chunks, a[0])
    for c in nb.prange(chunks):
        lo = c * a.size // chunks
        hi = (c + 1) * a.size // chunks
        m = a[lo] if hi > lo else a[0]
        for i in range(lo, hi):
            if a[i] > m:
                m = a[i]
        best[c] = m
    return best.max()


@nb.njit(parallel=True, cache=True, nogil=True)
def _cast_into(src, dst):
    for i in nb.prange(src.size):
        dst[i] = src[i]


def _narrow_dtype(a: np.ndarray) -> np.dtype:
    """The smallest unsigned/int32 dtype holding the non-negative integers of ``a``."""
    if a.dtype.kind not in "iu" or a.size == 0:
        return a.dtype
    top = int(_max_int(a))
    for dt in (np.uint8, np.uint16, np.int32):
        if top <= np.iinfo(dt).max:
            return np.dtype(dt)
    return a.dtype


@functools.lru_cache(maxsize=1)
def _staging(nbytes: int):
    import cupyx
    return [cupyx.empty_pinned(nbytes, dtype=np.uint8) for _ in range(2)]


def upload(a: np.ndarray, dtype) -> cp.ndarray:
    """Copy the host array ``a`` (non-negative integers or floats) to the device as ``dtype``.

    Pageable host memory crosses PCIe at a few GB/s; this path narrows integers to
    the smallest type that holds them (unit weights travel as one byte), casts them
    chunk by chunk into two pinned staging buffers with all CPU cores, and copies
    each chunk asynchronously while the next one is cast; the device widens the
    result to ``dtype``. Measured on an H200 host: rgg23's CSR arrays (1.7 GB) took
    0.78 s with plain ``cupy.asarray`` and take 0.07 s this way.
    """
    a = np.ascontiguousarray(a)
    if a.size == 0:
        return cp.empty(0, dtype=dtype)
    wire = _narrow_dtype(a) if np.dtype(dtype).kind in "iu" else np.dtype(a.dtype)
    dev = cp.empty(a.size, dtype=wire)
    per_chunk = STAGING_BYTES // wire.itemsize
    buffers = _staging(STAGING_BYTES)
    stream = cp.cuda.Stream(non_blocking=True)
    events = [None, None]
    for i, lo in enumerate(range(0, a.size, per_chunk)):
        hi = min(a.size, lo + per_chunk)
        slot = i % 2
        if events[slot] is not None:
            events[slot].synchronize()  # the copy that last used this buffer is done
        staged = buffers[slot].view(wire)[: hi - lo]
        _cast_into(a[lo:hi], staged)
        dev[lo:hi].set(staged, stream=stream)
        events[slot] = stream.record()
    stream.synchronize()
    return dev if wire == np.dtype(dtype) else dev.astype(dtype)


def upload_graph(xadj, adjncy, adjwgt, vwgt):
    """The CSR arrays on the device with the kernels' dtypes (see :func:`upload`)."""
    wdt = np.float64 if np.asarray(adjwgt).dtype.kind == "f" else np.int64
    return (upload(xadj, np.int64), upload(adjncy, np.int32), upload(adjwgt, wdt),
            upload(vwgt, np.int64))
