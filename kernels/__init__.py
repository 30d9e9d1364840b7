"""Compute kernels of procmap (installed as ``procmap.kernels``).

Each hot kernel has a Numba twin for the CPU (``*_cpu`` modules) and a CUDA twin
(``cuda/*.cu``, wrapped by the ``*_gpu`` modules, which import CuPy). Engines call
them through :mod:`procmap.kernels.backend`, which picks the twin by where the
arrays live. The objective kernels exported here are the CPU ones (evaluation
runs on the host). Kernels import nothing from the engines.
"""
from __future__ import annotations

from typing import Any

__all__ = ["level_traffic", "matrix_cost", "pe_loads"]


def __getattr__(name: str) -> Any:
    # Imported on first use: importing procmap.kernels.backend (device choice, cache
    # checks) must not compile or load any Numba kernel.
    if name in __all__:
        from .objective import objective_cpu

        value = getattr(objective_cpu, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
