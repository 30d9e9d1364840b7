"""Loops whose end the GPU decides: a loop body captured once as a CUDA graph.

A refinement loop on the GPU is a handful of small kernels per iteration plus a
decision (go on or stop) that depends on results computed on the device. Driving it
from Python costs a launch per kernel (~7 us each) and a device-to-host readback per
iteration (~100 us with the synchronisation). :class:`DeviceLoop` removes both: the
body is captured once, and its last kernel decides whether to go on.

Modes (``PROCMAP_CUDA_GRAPHS`` overrides the default, ``"auto"``):

``"while"``
    The captured body becomes the child of a CUDA *while* conditional node (CUDA
    12.4+); the body's last kernel sets the condition with
    ``cudaGraphSetConditional``. One graph launch runs the whole loop: no host work
    per iteration. Built with ``cuda.bindings`` (CuPy 14 has no conditional nodes;
    see docs/design.md section 5).
``"replay"``
    The captured body is replayed from Python, one graph launch per iteration; the
    body's last kernel writes the condition into pinned host memory, which the host
    reads after a stream synchronisation (no copy).
``"off"``
    The body's kernels are launched one by one each iteration, then the pinned
    condition is read: the plain host-driven loop, kept to measure against and as
    the fallback where capture is impossible.
``"auto"``
    ``"while"`` where ``cuda.bindings`` and the driver support it, else ``"replay"``.

The body receives the condition handle (``np.uint64``; 0 outside ``"while"``) and a
pointer to a small pinned int64 status array (:attr:`DeviceLoop.status`); its last
kernel must call ``cudaGraphSetConditional`` when the handle is non-zero and always
store the condition in ``status[0]`` (see ``loop_control`` in ``refinement/jet_loop.cu``); the
other words are the body's to report what the host needs after the loop. A body must not allocate memory (a capture would bake the address
of a temporary that the pool later hands to someone else) and must not synchronise.

Every mode runs the same kernels in the same order, so the results are identical;
tests check this.
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Callable

import cupy as cp
import numpy as np
import cupyx

MODES = ("auto", "while", "replay", "off")

Body = Callable[[np.uint64, np.uint64], None]


def mode_from_env() -> str:
    """The loop mode asked for by ``PROCMAP_CUDA_GRAPHS`` (default ``"auto"``)."""
    mode = os.environ.get("PROCMAP_CUDA_GRAPHS", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"PROCMAP_CUDA_GRAPHS must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def loop_stream() -> cp.cuda.Stream:
    """The stream the loops run on: capture needs a stream other than the legacy
    default one. A worker thread's own stream (``gpu_common.own_stream``) is used as it
    is; a thread on the default stream (the main thread) gets :func:`_main_loop_stream`."""
    current = cp.cuda.get_current_stream()
    return current if current.ptr else _main_loop_stream()


@functools.lru_cache(maxsize=None)
def _main_loop_stream() -> cp.cuda.Stream:
    """The non-blocking loop stream of threads on the default stream (one per process:
    only the main thread runs GPU work on the default stream)."""
    return cp.cuda.Stream(non_blocking=True)


@functools.lru_cache(maxsize=None)
def cudart():
    """``cuda.bindings.runtime`` (or the older ``cuda.cudart``), or ``None`` where neither
    is installed: then the ``"while"`` mode is unavailable (``"auto"`` replays)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime
        except ImportError:
            return None
    return runtime


def _check(result):
    """Unpack a ``cuda.bindings`` result tuple, raising on an error code."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA runtime call failed: {err!r}")
    return rest[0] if len(rest) == 1 else tuple(rest)


class _WhileGraph:
    """Outer graph = one while node whose body is the captured body graph."""

    def __init__(self, body: Body, status_ptr: np.uint64, stream: cp.cuda.Stream):
        rt = cudart()
        self._rt = rt
        self.graph = _check(rt.cudaGraphCreate(0))
        # default value 1: the first iteration always runs (the caller only launches
        # the loop when an iteration is due), cudaGraphCondAssignDefault = 1
        self.handle = _check(rt.cudaGraphConditionalHandleCreate(self.graph, 1, 1))
        params = rt.cudaGraphNodeParams()
        params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
        params.conditional.handle = self.handle
        params.conditional.type = rt.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile
        params.conditional.size = 1
        try:  # CUDA 13 bindings take per-edge data; CUDA 12 ones do not
            self.node = _check(rt.cudaGraphAddNode(self.graph, None, None, 0, params))
        except TypeError:
            self.node = _check(rt.cudaGraphAddNode(self.graph, None, 0, params))
        body_graph = params.conditional.phGraph_out[0]
        self.body = _capture(body, np.uint64(int(self.handle)), status_ptr, stream)
        child = rt.cudaGraph_t(init_value=int(self.body.graph))
        _check(rt.cudaGraphAddChildGraphNode(body_graph, None, 0, child))
        self.exec = _check(rt.cudaGraphInstantiate(self.graph, 0))

    def launch(self, stream: cp.cuda.Stream) -> None:
        _check(self._rt.cudaGraphLaunch(self.exec, stream.ptr))

    def __del__(self):
        rt = getattr(self, "_rt", None)
        if rt is None:
            return
        if getattr(self, "exec", None) is not None:
            rt.cudaGraphExecDestroy(self.exec)
        if getattr(self, "graph", None) is not None:
            rt.cudaGraphDestroy(self.graph)


def _capture(body: Body, handle: np.uint64, status_ptr: np.uint64,
             stream: cp.cuda.Stream) -> cp.cuda.graph.Graph:
    """``body``'s kernels as a CuPy graph (relaxed capture: CuPy may touch its
    caches while capturing)."""
    with stream:
        stream.begin_capture(cp.cuda.runtime.streamCaptureModeRelaxed)
        try:
            body(handle, status_ptr)
        finally:
            graph = stream.end_capture()
    return graph


_WHILE_BROKEN: list[str] = []  # the first failure of the while mode, reported once


class DeviceLoop:
    """Run ``body`` on :func:`loop_stream` until its last kernel says stop.

    ``body(handle, status_ptr)`` enqueues one iteration; see the module docstring.
    Construct inside ``with loop_stream():`` after all arrays the body touches exist.

    Until the graph exists, the first iteration of a :meth:`run` is launched directly
    and its status read back; only when it asks for more is the graph captured. A
    loop whose runs are single iterations -- iterations alternating with work the
    host must do -- so never pays for a capture (measured: capturing for such runs
    made ``im`` slower). Once captured, every run starts with the graph.
    """

    def __init__(self, body: Body, mode: str | None = None, status_words: int = 8):
        mode = mode_from_env() if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode in ("auto", "while") and (cudart() is None or _WHILE_BROKEN):
            if mode == "while":
                raise RuntimeError("CUDA while nodes are unavailable: "
                                   + (_WHILE_BROKEN[0] if _WHILE_BROKEN
                                      else "cuda.bindings is not installed"))
            mode = "replay"
        self.mode = mode
        self.stream = loop_stream()
        # mapped pinned memory: the device writes it, the host reads it after a
        # synchronisation without a copy
        self.status = cupyx.empty_pinned(max(1, status_words), dtype=np.int64)
        self.status[:] = 0
        self.status_ptr = np.uint64(self.status.ctypes.data)
        self._body = body
        self._graph = None
        self.launches = 0  # host launches (graphs, or bodies run directly) made by run()

    @property
    def captured(self) -> bool:
        """Whether the body has been captured as a CUDA graph (by a :meth:`run` whose
        first iteration asked for more; never in mode ``"off"``)."""
        return self._graph is not None

    def _build(self) -> None:
        if self.mode == "auto":
            try:
                self._graph = _WhileGraph(self._body, self.status_ptr, self.stream)
                self.mode = "while"
                return
            except Exception as exc:  # driver or bindings too old: fall back, say so once
                _WHILE_BROKEN.append(f"{type(exc).__name__}: {exc}")
                warnings.warn(f"procmap: CUDA while nodes unavailable ({_WHILE_BROKEN[0]}); "
                              "replaying graphs from the host instead", RuntimeWarning,
                              stacklevel=4)
                self.mode = "replay"
        if self.mode == "while":
            self._graph = _WhileGraph(self._body, self.status_ptr, self.stream)
        else:
            self._graph = _capture(self._body, np.uint64(0), self.status_ptr, self.stream)

    def _direct(self) -> bool:
        with self.stream:
            self._body(np.uint64(0), self.status_ptr)
        self.stream.synchronize()
        return bool(self.status[0])

    def run(self, max_rounds: int = 1_000_000) -> int:
        """Run iterations until the body's condition is 0; returns the host launches made.

        ``max_rounds`` bounds the host-driven modes (a body that never stops is a bug).
        """
        s = self.stream
        launches = 1
        if self._graph is not None:
            # captured already: the graph runs the first iteration too (one launch
            # instead of the body's dozen; a while graph's condition starts at 1)
            go_on = True
            launches = 0
        else:
            go_on = self._direct()
            if go_on and self.mode != "off":
                self._build()
        if go_on and self.mode == "while":
            self._graph.launch(s)
            launches += 1
            s.synchronize()
        else:
            while go_on and launches < max_rounds:
                if self.mode == "replay":
                    self._graph.launch(s)
                    s.synchronize()
                    go_on = bool(self.status[0])
                else:
                    go_on = self._direct()
                launches += 1
        self.launches += launches
        return launches
