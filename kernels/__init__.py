"""Compute kernels of procmap (installed as ``procmap.kernels``).

Each hot kernel has a Numba twin for the CPU (``*_cpu`` modules) and a CUDA twin
(``cuda/*.cu``, wrapped by the ``*_gpu`` modules, which import CuPy). Engines call
them through :mod:`procmap.kernels.backend`, which picks the twin by where the
arrays live. The objective kernels exported here are the CPU ones (evaluation
runs on the host). Kernels import nothing from the engines.
"""
from .objective_cpu import level_traffic, matrix_cost, pe_loads

__all__ = ["level_traffic", "matrix_cost", "pe_loads"]
