"""Shared test configuration: tests marked ``gpu`` are skipped where CuPy sees no GPU."""
from __future__ import annotations

import pytest


def _have_gpu() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # CuPy missing, no driver, no device
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _have_gpu():
        skip = pytest.mark.skip(reason="needs CuPy and a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)
