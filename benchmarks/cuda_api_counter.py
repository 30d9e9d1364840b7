"""Count CUDA API calls (kernel launches, synchronisations) with CUPTI callbacks.

A measuring aid for the benchmarks, not part of procmap: it loads ``libcupti``
through ctypes, subscribes to the runtime and driver API domains, and counts calls
by name while a ``with ApiCounter() as c:`` block runs. Counting happens on API
entry; the Python callback costs about a microsecond per call, so time the code
without the counter.

Categories (:meth:`ApiCounter.summary`). CUPTI reports some runtime calls together
with the driver calls they make (``cudaStreamSynchronize`` and ``cuStreamSynchronize``)
and others alone (a runtime ``cudaLaunchKernel``, as CUB uses, shows no driver
``cuLaunchKernel``), so calls are keyed by domain and counted once:

* ``launches``: driver ``cuLaunchKernel*`` (CuPy's kernels) + runtime
  ``cudaLaunchKernel*`` (CUB's) + graph launches (the larger of the runtime and the
  driver count, as one may forward to the other);
* ``syncs``: driver calls that make the host wait for the device: ``*Synchronize``
  and synchronous (non-``Async``) copies to the host.
"""
from __future__ import annotations

import collections
import ctypes
import ctypes.util
import glob
import os
import sys

_DOMAIN_DRIVER, _DOMAIN_RUNTIME = 1, 2
_API_ENTER = 0


class _CallbackData(ctypes.Structure):
    _fields_ = [("callbackSite", ctypes.c_int),
                ("functionName", ctypes.c_char_p),
                ("functionParams", ctypes.c_void_p),
                ("functionReturnValue", ctypes.c_void_p),
                ("symbolName", ctypes.c_char_p),
                ("context", ctypes.c_void_p),
                ("contextUid", ctypes.c_uint32),
                ("correlationData", ctypes.c_void_p),
                ("correlationId", ctypes.c_uint32)]


_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                             ctypes.POINTER(_CallbackData))


def _find_cupti() -> str:
    candidates = []
    for base in sys.path:
        candidates += glob.glob(os.path.join(base, "nvidia", "cuda_cupti", "lib", "libcupti.so*"))
        candidates += glob.glob(os.path.join(base, "nvidia", "cu*", "lib", "libcupti.so*"))
    for cuda in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if cuda:
            candidates += glob.glob(os.path.join(cuda, "extras", "CUPTI", "lib64", "libcupti.so*"))
            candidates += glob.glob(os.path.join(cuda, "lib64", "libcupti.so*"))
    found = ctypes.util.find_library("cupti")
    if found:
        candidates.append(found)
    if not candidates:
        raise RuntimeError("libcupti not found (pip package nvidia-cuda-cupti or a CUDA toolkit)")
    return sorted(candidates, key=len)[0]


def _launches(counts) -> int:
    kernels = sum(c for key, c in counts.items()
                  if key.startswith(("driver:cuLaunchKernel", "driver:cuLaunchCooperativeKernel",
                                     "runtime:cudaLaunchKernel")))
    graphs = max(sum(c for key, c in counts.items() if key.startswith(prefix))
                 for prefix in ("driver:cuGraphLaunch", "runtime:cudaGraphLaunch"))
    return kernels + graphs


def _is_sync(key: str) -> bool:
    if not key.startswith("driver:"):
        return False
    name = key[len("driver:"):]
    if "Synchronize" in name:
        return True
    return name.startswith("cuMemcpy") and "Async" not in name and (
        "DtoH" in name or name in ("cuMemcpy", "cuMemcpy_v2"))


class ApiCounter:
    """``with ApiCounter() as c: ...`` then ``c.counts`` ("domain:name" -> calls) and
    ``c.summary()``. Only one may be active per process (a CUPTI rule)."""

    def __init__(self):
        self._lib = ctypes.CDLL(_find_cupti())
        self.counts: collections.Counter = collections.Counter()
        self._cb = _CALLBACK(self._on_call)  # keep a reference: CUPTI holds the pointer
        self._sub = ctypes.c_void_p()
        self.active = False

    def _on_call(self, _userdata, domain, _cbid, data):
        if self.active and data and data.contents.callbackSite == _API_ENTER:
            name = data.contents.functionName
            if name:
                where = "driver" if domain == _DOMAIN_DRIVER else "runtime"
                self.counts[f"{where}:{name.decode()}"] += 1

    def __enter__(self) -> "ApiCounter":
        rc = self._lib.cuptiSubscribe(ctypes.byref(self._sub), self._cb, None)
        if rc != 0:
            raise RuntimeError(f"cuptiSubscribe failed with CUPTI error {rc}")
        for domain in (_DOMAIN_DRIVER, _DOMAIN_RUNTIME):
            rc = self._lib.cuptiEnableDomain(1, self._sub, domain)
            if rc != 0:
                raise RuntimeError(f"cuptiEnableDomain({domain}) failed with CUPTI error {rc}")
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        self._lib.cuptiUnsubscribe(self._sub)

    def snapshot(self) -> collections.Counter:
        return collections.Counter(self.counts)

    @staticmethod
    def summarise(counts) -> dict:
        """``{"launches": ..., "syncs": ...}`` of a counts mapping."""
        return {"launches": _launches(counts),
                "syncs": sum(c for key, c in counts.items() if _is_sync(key))}

    def summary(self) -> dict:
        return self.summarise(self.counts)
