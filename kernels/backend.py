"""Kernel dispatch (docs/design.md section 5): the engines call every hot kernel through a
:class:`Backend`, picked by where the graph's arrays live.

* :func:`cpu` -- NumPy arrays, the Numba kernels of the ``*_cpu`` modules.
* :func:`gpu` -- CuPy arrays, the CUDA kernels of the ``*_gpu`` modules (imported on
  first use only, so the CPU path never imports CuPy).
* :func:`of` -- the backend of an array (CuPy array: GPU, anything else: CPU).

Both backends expose the same functions with the same signatures and semantics;
``fm_refine`` and the initial partitioner are CPU-only steps that the engines run
on host copies. :func:`to_host` and :meth:`Backend.asarray` move arrays between the
two. :func:`resolve_device` turns the user's ``device="auto" | "gpu" | "cpu"`` into a
concrete device.
"""
from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

from procmap.options import AUTO_GPU_MIN_EDGES, DEVICES  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Backend:
    """The kernels of one device. ``xp`` is NumPy or CuPy."""

    name: str
    xp: ModuleType
    two_hop_matching: Callable
    coarse_ids: Callable
    contract: Callable
    jet_refine: Callable
    block_weights: Callable
    cost: Callable
    extract_subgraphs: Callable
    level_traffic: Callable
    upload_graph: Callable  # (xadj, adjncy, adjwgt, vwgt) -> the same on this device
    cluster_ids: Callable   # G-kway union-find coarsening (--coarsening unionfind)
    isr_refine: Callable    # G-kway independent-set refinement (--refinement isr)
    ultra_refine: Callable  # jet_refine passes over a schedule of filter ratios
    internal_edges: Callable  # the CSR without the edges between blocks (V-cycles)
    place_in_groups: Callable  # PEs for the vertices a group refinement moved (im)

    @property
    def on_device(self) -> bool:
        """Whether this backend's arrays live in device memory: its work runs on
        streams, is bounded by the device's memory, and small graphs move to the host."""
        return self.name == "gpu"

    @property
    def runs_sequential_refiners(self) -> bool:
        """Whether the sequential steps (FM, localized FM, the streaming start of a graph
        that does not coarsen) run on this backend's graphs; where they do not, Jet
        refines alone and longer, and such a graph starts from random."""
        return self.name == "cpu"

    def asarray(self, a, dtype=None):
        """``a`` on this backend's device (no copy when it is already there)."""
        if self.name == "cpu":
            return np.ascontiguousarray(to_host(a), dtype=dtype)
        return self.xp.ascontiguousarray(self.xp.asarray(a, dtype=dtype))

    def refiner(self, refinement: str) -> Callable:
        """The J/cut refinement of a scheme name (``"jet"`` or ``"isr"``, see
        ``multilevel.REFINEMENTS``); both take the arguments of :attr:`jet_refine`."""
        return self.jet_refine if refinement == "jet" else self.isr_refine

    def adopt(self, a):
        """``a``, made by a worker thread (:func:`in_worker`), made safe to keep in
        this thread: on the GPU a copy owned by this thread's stream (see
        :func:`.gpu_common.adopt`); on the CPU ``a`` itself."""
        if self.name == "cpu":
            return a
        from . import gpu_common
        return gpu_common.adopt(a)

    def synchronize(self) -> None:
        """Wait for queued device work (timing only; results synchronise themselves)."""
        if self.name == "gpu":
            self.xp.cuda.get_current_stream().synchronize()


def is_device_array(a: Any) -> bool:
    """True for a CuPy array (checked without importing CuPy)."""
    return type(a).__module__.startswith("cupy")


def to_host(a):
    """``a`` as a NumPy array (copies a CuPy array to the host)."""
    return a.get() if is_device_array(a) else np.asarray(a)


def threading_layer() -> str:
    """Numba's threading layer; before the first parallel call, the configured one.

    The engines run CPU kernels from several Python threads at once only when this is
    not ``"workqueue"`` (the one layer that cannot run parallel loops concurrently).
    """
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel function has run yet: the layer is chosen on first use
        return str(numba.config.THREADING_LAYER)


def in_worker(fn: Callable, numba_threads: int, gpu: bool = False) -> Callable:
    """``fn`` wrapped to run in a worker thread, concurrently with other workers.

    Call this in the submitting thread. The wrapper gives the worker ``numba_threads``
    Numba threads (a thread-local setting: its parallel loops only) and, with ``gpu``,
    a CUDA stream of its own (:func:`.gpu_common.own_stream`), which first waits for
    what the submitting thread queued so far and is synchronised before ``fn``'s
    result is returned. Device arrays in that result belong to the worker's stream:
    the thread that keeps one should take it with :meth:`Backend.adopt`.
    """
    ready = None
    if gpu:
        from . import gpu_common
        ready = gpu_common.mark()

    def run(*args):
        import numba

        numba.set_num_threads(numba_threads)
        if not gpu:
            return fn(*args)
        from . import gpu_common
        with gpu_common.own_stream(ready):
            return fn(*args)

    return run


def gpu_free_bytes() -> int:
    """GPU memory available to new allocations (see :func:`.gpu_common.free_bytes`)."""
    from . import gpu_common
    return gpu_common.free_bytes()


def kernel_cache_is_warm() -> bool:
    """Whether Numba's on-disk cache holds the CPU refinement loop (the largest kernel).

    A cold cache means the first mapping compiles the kernels first (about a minute);
    the CLI says so instead of staying silent. Reads Numba's cache locator, an internal
    API: anything unexpected counts as warm (no message rather than a wrong one).
    """
    try:
        from .refinement import jet_cpu

        index = jet_cpu._jet_loop._cache._cache_file._index_path
    except Exception:  # noqa: BLE001 -- internal API; see above
        return True
    return os.path.exists(index)


@functools.lru_cache(maxsize=None)
def cpu() -> Backend:
    from .coarsening import coarsen_cpu, unionfind_cpu
    from .initial import subgraph_cpu
    from .objective import objective_cpu
    from .refinement import groups_cpu, isr_cpu, jet_cpu
    return Backend("cpu", np, coarsen_cpu.two_hop_matching, coarsen_cpu.coarse_ids,
                   coarsen_cpu.contract, jet_cpu.jet_refine, jet_cpu.block_weights, jet_cpu.cost,
                   subgraph_cpu.extract_subgraphs, objective_cpu.level_traffic,
                   lambda *arrays: tuple(to_host(a) for a in arrays),
                   unionfind_cpu.cluster_ids, isr_cpu.isr_refine, jet_cpu.ultra_refine,
                   subgraph_cpu.internal_edges, groups_cpu.place_in_groups)


@functools.lru_cache(maxsize=None)
def gpu() -> Backend:
    import cupy

    from . import gpu_common
    from .coarsening import coarsen_gpu, unionfind_gpu
    from .initial import subgraph_gpu
    from .objective import objective_gpu
    from .refinement import groups_gpu, isr_gpu, jet_gpu

    def upload_graph(*arrays):
        if any(is_device_array(a) for a in arrays):
            return tuple(cupy.ascontiguousarray(cupy.asarray(a)) for a in arrays)
        return gpu_common.upload_graph(*arrays)

    return Backend("gpu", cupy, coarsen_gpu.two_hop_matching, coarsen_gpu.coarse_ids,
                   coarsen_gpu.contract, jet_gpu.jet_refine, jet_gpu.block_weights, jet_gpu.cost,
                   subgraph_gpu.extract_subgraphs, objective_gpu.level_traffic, upload_graph,
                   unionfind_gpu.cluster_ids, isr_gpu.isr_refine, jet_gpu.ultra_refine,
                   subgraph_gpu.internal_edges, groups_gpu.place_in_groups)


def of(a) -> Backend:
    """The backend whose device holds ``a``."""
    return gpu() if is_device_array(a) else cpu()


def for_size(device: str, large: bool) -> Backend:
    """Backend for a (sub)graph on the concrete ``device`` ("cpu"/"gpu"): the GPU's only
    for a ``large`` one (the engines decide with ``DeviceContext.on_gpu``); small graphs
    stay on the CPU."""
    return gpu() if device == "gpu" and large else cpu()


def gpu_available() -> bool:
    """True when CuPy is installed and sees a CUDA device."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device, broken install: all mean "no GPU"
        return False


def warm_numba() -> None:
    """Set up Numba's CPU target now, in the calling thread.

    The first dispatch of any kernel in a process pays Numba's one-time target set-up
    (``load_additional_registries``: it imports ``numba.np.arraymath`` and through it
    SciPy's linear algebra; about half a second), whichever kernel it is. This
    dispatches the smallest cached kernel (:func:`.validate_cpu.check_xadj`, serial,
    with the argument types the ``.pmg`` reader passes) so that the set-up can run
    in a background thread while the main thread reads a file (``procmap map``).
    Later dispatches in any thread find the target ready; one that comes while this
    runs waits for it on Numba's compiler lock. Computes nothing that anyone keeps.
    """
    from .io import validate_cpu

    validate_cpu.check_xadj(np.zeros(1, dtype=np.int64), 0)


def warm_gpu() -> None:
    """Import CuPy and create the CUDA context of the current device (``cudaFree(0)``),
    the one-time cost (a few tenths of a second) that the first GPU operation of a
    process pays otherwise. The context is the process's primary context: every
    thread that then uses the device shares it. Allocates and launches nothing.
    Raises whatever CuPy raises (no CuPy, no driver, no device)."""
    import cupy

    cupy.cuda.runtime.free(0)


def resolve_device(device: str, directed_edges: int,
                   auto_gpu_min_edges: int = AUTO_GPU_MIN_EDGES) -> str:
    """The concrete device ("cpu" or "gpu") for the user's ``device`` choice.

    ``"gpu"`` without a usable GPU raises :class:`RuntimeError` (the caller turns it
    into a clear error); ``"auto"`` picks the GPU for graphs of at least
    ``auto_gpu_min_edges`` directed edges when one is usable (the engines pass
    ``DeviceContext.auto_gpu_min_edges``), else the CPU, silently.
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    if device == "gpu":
        if not gpu_available():
            raise RuntimeError("device 'gpu' needs CuPy and a CUDA GPU, and none is usable "
                               "here (from the procmap checkout: python -m pip install -e "
                               "'.[gpu]'; check nvidia-smi)")
        return "gpu"
    return "gpu" if directed_edges >= auto_gpu_min_edges and gpu_available() else "cpu"
