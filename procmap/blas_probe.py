"""Numba without its SciPy BLAS probe: the first kernel call of a process starts faster.

When Numba's CPU target registers its NumPy implementations (at the first dispatch of
any kernel, compiled or loaded from the cache), ``numba.np.arraymath`` probes for BLAS
by importing ``scipy.linalg.cython_blas``, hence the whole of ``scipy.linalg``:
the largest single cost of a small command's start-up. procmap's kernels use no BLAS.

:func:`install` adds an import finder that fails exactly those imports when they come
from the probe (a calling frame is ``_check_blas`` of ``numba/np/arraymath.py``, in
the importing thread). Numba then records that BLAS is absent, which only matters to
``np.correlate`` and ``np.convolve`` in jitted code (they use a plain loop instead).
Every other import of ``scipy.linalg``, and ``np.dot`` or ``np.linalg`` in jitted code
(which import it when they compile), are unaffected. ``PROCMAP_NUMBA_BLAS_PROBE=1``
leaves the probe alone.
"""
from __future__ import annotations

import os
import sys

#: What the probe imports: the package first (the costly part), then the module.
_TARGETS = ("scipy.linalg", "scipy.linalg.cython_blas")


class _SkipBlasProbe:
    """``sys.meta_path`` finder: ``ModuleNotFoundError`` for :data:`_TARGETS` when
    Numba's BLAS probe asks for them, no opinion on anything else."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in _TARGETS:
            return None
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_check_blas" and code.co_filename.endswith(
                    os.path.join("numba", "np", "arraymath.py")):
                raise ModuleNotFoundError(f"{name} skipped for Numba's BLAS probe "
                                          "(procmap.blas_probe)", name=name)
            frame = frame.f_back
        return None


def install() -> None:
    """Install the finder once (no-op when ``PROCMAP_NUMBA_BLAS_PROBE=1``)."""
    if os.environ.get("PROCMAP_NUMBA_BLAS_PROBE", "").strip() == "1":
        return
    if not any(isinstance(f, _SkipBlasProbe) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipBlasProbe())
