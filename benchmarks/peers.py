"""Peer mappers from PyPI, called in memory (how each is installed and called: benchmarks/README.md).

Each function returns a task -> PE array (int32) for the hierarchy ``levels`` = [a1, ..., al]
(leaf first, e.g. [4, 8, 6]) with distances ``dists`` = [d1, ..., dl] (e.g. [1, 10, 100]); PE
numbering is procmap's (a1 fastest digit), which KaHIP and Scotch's tleaf share.

* :func:`kahip_process_mapping` -- KaHIP ``process_mapping`` (C API of the ``libkahip.so`` that the
  ``kahip`` wheel bundles), MULTISECTION mode: the ``global_multisection`` algorithm.
* :func:`scotch_tleaf` -- Scotch static mapping onto a ``tleaf`` architecture (``pyscotch``).
* :func:`metis_identity` -- METIS k-way partition (``pymetis``), block i -> PE i.

The packages are benchmark-only dependencies (benchmarks/requirements-peers.txt), imported
lazily; a missing one raises :class:`PeerUnavailable` with the pip line to fix it.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import io
import math
import os
import sys

import numpy as np

KAHIP_MODES = {"fast": 0, "eco": 1, "strong": 2, "fastsocial": 3, "ecosocial": 4, "strongsocial": 5}
KAHIP_MAPMODES = {"multisection": 0, "bisection": 1}


class PeerUnavailable(RuntimeError):
    """A peer package is not installed (or its library cannot be loaded)."""


def _require(module: str, pip_name: str):
    try:
        sink = io.StringIO()  # pyscotch prints a banner on import
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return __import__(module)
    except ImportError as exc:
        raise PeerUnavailable(
            f"peer {pip_name!r} is not installed ({exc}); "
            f"run: pip install -r benchmarks/requirements-peers.txt") from None


def _check_graph(graph):
    if graph.adjwgt.dtype.kind != "i":
        raise ValueError("the peers take integer edge weights only")
    if graph.n >= 2**31 - 1 or graph.num_directed_edges >= 2**31 - 1:
        raise ValueError("graph too large for 32-bit peer indices")


# ------------------------------------------------------------------------------------ KaHIP
_KAHIP_LIB = None


def _kahip_lib():
    global _KAHIP_LIB
    if _KAHIP_LIB is not None:
        return _KAHIP_LIB
    kahip = _require("kahip", "kahip")
    candidates = []
    for root in {os.path.dirname(os.path.dirname(kahip.__file__)), *sys.path}:
        if root and os.path.isdir(root):
            candidates += glob.glob(os.path.join(root, "lib", "libkahip.so*"))
    if not candidates:
        raise PeerUnavailable("the kahip wheel is installed but lib/libkahip.so was not found next "
                              "to it (site-packages/lib/libkahip.so); reinstall: pip install kahip")
    lib = ctypes.CDLL(sorted(candidates)[0])
    lib.kahip_sizeof_idx.restype = ctypes.c_int
    if lib.kahip_sizeof_idx() != 4:
        raise PeerUnavailable(f"libkahip.so uses {lib.kahip_sizeof_idx()}-byte indices; expected 4")
    i32 = ctypes.POINTER(ctypes.c_int32)
    lib.process_mapping.restype = None
    lib.process_mapping.argtypes = [
        i32, i32, i32, i32, i32,            # n, vwgt, xadj, adjcwgt, adjncy
        i32, i32, ctypes.c_int,             # hierarchy, distances, depth
        ctypes.c_int, ctypes.c_int,         # mode_partitioning, mode_mapping
        ctypes.POINTER(ctypes.c_double),    # imbalance
        ctypes.c_bool, ctypes.c_int,        # suppress_output, seed
        i32, i32, i32,                      # edgecut, qap, part
    ]
    _KAHIP_LIB = lib
    return lib


def _i32(a) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.int64)
    if a.size and (a.max() > np.iinfo(np.int32).max or a.min() < np.iinfo(np.int32).min):
        raise ValueError("value outside the 32-bit range of KaHIP's kahip_idx")
    return np.ascontiguousarray(a, dtype=np.int32)


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


def kahip_process_mapping(graph, levels, dists, eps: float = 0.03, mode: str = "eco",
                          seed: int = 0, mapping: str = "multisection") -> np.ndarray:
    """KaHIP ``process_mapping`` (``mode`` fast / eco / strong, MULTISECTION by default).

    Note (peers.md section 5): multisection ignores ``eps`` and uses 1% per level itself;
    callers must re-check balance with procmap's L_max. Distances must be integers.
    """
    lib = _kahip_lib()
    _check_graph(graph)
    if any(float(d) != int(d) for d in dists):
        raise ValueError("KaHIP takes integer distances only")
    n = ctypes.c_int32(graph.n)
    vwgt, xadj = _i32(graph.vwgt), _i32(graph.xadj)
    adjwgt, adjncy = _i32(graph.adjwgt), _i32(graph.adjncy)
    hier, dist = _i32(list(levels)), _i32([int(d) for d in dists])
    imbalance = ctypes.c_double(eps)
    edgecut, qap = ctypes.c_int32(0), ctypes.c_int32(0)
    part = np.zeros(graph.n, dtype=np.int32)
    lib.process_mapping(ctypes.byref(n), _ptr(vwgt), _ptr(xadj), _ptr(adjwgt), _ptr(adjncy),
                        _ptr(hier), _ptr(dist), len(levels),
                        KAHIP_MODES[mode], KAHIP_MAPMODES[mapping], ctypes.byref(imbalance),
                        True, int(seed), ctypes.byref(edgecut), ctypes.byref(qap), _ptr(part))
    return part


# ------------------------------------------------------------------------------------ Scotch
def scotch_tleaf(graph, levels, dists, eps: float = 0.03, quality: bool = True,
                 seed: int = 0, balance_flag: bool = True) -> np.ndarray:
    """Scotch static mapping onto ``tleaf`` (pyscotch), strategy QUALITY (or default) | BALANCE.

    Scotch's tleaf distance is cumulative along the tree (peers.md section 2), so the link
    costs passed are the increments ``d_l - d_{l-1}, ..., d_2 - d_1, d_1`` (top level
    first); that needs strictly increasing integer distances. Threads: the
    ``SCOTCH_PTHREAD_NUMBER`` environment variable (set it before the first call). Unset, Scotch
    uses every core and its result changes from run to run even with a fixed seed; with
    ``SCOTCH_PTHREAD_NUMBER=1`` it is deterministic (and the seed has no visible effect).
    """
    pyscotch = _require("pyscotch", "pyscotch")
    _check_graph(graph)
    d = [int(x) for x in dists]
    if any(float(x) != int(x) for x in dists) or d[0] < 1 or any(b <= a for a, b in zip(d, d[1:])):
        raise ValueError(f"Scotch tleaf needs strictly increasing positive integer distances, got {dists}")
    sizes = np.array(list(levels)[::-1], dtype=np.int64)                 # top level first
    incr = [d[0]] + [b - a for a, b in zip(d, d[1:])]                       # leaf first
    links = np.array(incr[::-1], dtype=np.int64)                            # top level first
    sink = io.StringIO()  # the shared library is loaded lazily, with a banner on stderr
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        from pyscotch import Architecture, Graph, Strategy, StrategyFlags

        pyscotch.random_seed(int(seed))
        pyscotch.random_reset()
    g = Graph()
    g.build(graph.xadj, graph.adjncy, graph.vwgt, graph.adjwgt)
    arch = Architecture()
    arch.tree_leaf(len(levels), sizes, links)
    strat = Strategy()
    flags = StrategyFlags.QUALITY if quality else StrategyFlags.DEFAULT
    if balance_flag:
        flags |= StrategyFlags.BALANCE
    strat.request_mapping(flags, balance=eps)
    return np.asarray(g.map(arch, strat), dtype=np.int32)


# ------------------------------------------------------------------------------------- METIS
def metis_identity(graph, k: int, eps: float = 0.03, seed: int = 0) -> np.ndarray:
    """METIS k-way partition (ufactor = 1000*eps) with the identity map block i -> PE i."""
    pymetis = _require("pymetis", "pymetis")
    _check_graph(graph)
    adjacency = pymetis.CSRAdjacency(graph.xadj, graph.adjncy)
    opts = pymetis.Options(ufactor=max(1, int(math.floor(1000 * eps + 1e-9))), seed=int(seed))
    _, parts = pymetis.part_graph(int(k), adjacency, vweights=graph.vwgt.tolist(),
                                  eweights=graph.adjwgt.tolist(), recursive=False, options=opts)
    return np.asarray(parts, dtype=np.int32)
