"""CuPy plumbing shared by the ``*_gpu`` kernel modules: loading ``cuda/*.cu`` files
as ``cupy.RawModule`` and launching their kernels.

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

import functools
import pathlib

import cupy as cp
import numpy as np

CUDA_DIR = pathlib.Path(__file__).with_name("cuda")
#: Threads per block of the one-thread-per-item kernels.
BLOCK = 256
#: Grid cap of grid-stride kernels (enough blocks to fill an H100/H200 several times).
MAX_BLOCKS = 65535


@functools.lru_cache(maxsize=None)
def module(filename: str) -> cp.RawModule:
    """The compiled ``kernels/cuda/<filename>`` (compiled once per process, cached on disk by CuPy)."""
    source = (CUDA_DIR / filename).read_text()
    return cp.RawModule(code=source, options=("--std=c++17", f"-I{CUDA_DIR}"))


def kernel(filename: str, name: str) -> cp.RawKernel:
    """Kernel ``name`` of ``kernels/cuda/<filename>``."""
    return module(filename).get_function(name)


def launch(fn, items: int, *args) -> None:
    """Launch ``fn`` over ``items`` work items (grid-stride kernels), if there are any."""
    if items <= 0:
        return
    blocks = min(MAX_BLOCKS, -(-int(items) // BLOCK))
    fn((blocks,), (BLOCK,), args)


def i64(x) -> np.int64:
    return np.int64(x)


def f64(x) -> np.float64:
    return np.float64(x)


def as_device(a, dtype=None) -> cp.ndarray:
    """``a`` as a contiguous CuPy array (no copy when it already is one of ``dtype``)."""
    return cp.ascontiguousarray(cp.asarray(a, dtype=dtype))


def gpu_available() -> bool:
    """True when CuPy sees at least one CUDA device."""
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device, broken install: all mean "no GPU"
        return False
