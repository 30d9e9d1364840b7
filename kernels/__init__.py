"""Compute kernels of procmap (installed as ``procmap.kernels``).

Each hot kernel has a Numba twin for the CPU (``*_cpu`` modules) and, with the GPU
backend, a CUDA twin in ``cuda/``. The functions exported here are the dispatch
layer: engines call them with NumPy arrays (CPU) and, once the GPU backend exists,
CuPy arrays select the CUDA kernels. Kernels import nothing from the engines.
"""
from .objective_cpu import level_traffic, matrix_cost, pe_loads

__all__ = ["level_traffic", "matrix_cost", "pe_loads"]
