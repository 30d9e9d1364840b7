"""Compute kernels of procmap (installed as ``procmap.kernels``).

One subpackage per phase of the pipeline: :mod:`.io` (reading and writing graphs),
:mod:`.coarsening`, :mod:`.initial` (subgraph extraction for multisection),
:mod:`.refinement` (Jet/ISR, FM, swaps), :mod:`.rebalancing` and :mod:`.objective`.
In each, a hot kernel has a Numba twin for the CPU (``x_cpu``) and a CUDA twin
(``x.cu``, wrapped by ``x_gpu``, which imports CuPy) side by side; the headers the
``.cu`` files share are in ``cuda/``. Engines call them through
:mod:`procmap.kernels.backend`, which picks the twin by where the arrays live. The
objective kernels exported here are the CPU ones (evaluation runs on the host).
Kernels import nothing from the engines.
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
