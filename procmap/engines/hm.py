"""Hierarchical multisection (paper Algorithm 2; SharedMap's scheme).

Partition the task graph along the hierarchy from the top level down: first into
``a_l`` node groups, then each group's subgraph into ``a_{l-1}`` parts, ..., down
to single PEs. Each split gets the adaptive imbalance of paper equation 2 so that
the leaves end within ``L_max``. Leaf ids follow DESIGN.md section 2: the top split
is the most significant digit of the PE id.

Every split is delegated to a *splitter* ``f(xadj, adjncy, adjwgt, vwgt, targets,
limits, eps, seed, depth) -> part``: ``targets`` are the children's shares of the
weight, ``limits`` their hard maximum weights and ``depth`` the number of splits
above this one (0 for the top split, whose cut costs the most).

With ``device="gpu"`` the graph is uploaded once; splits and subgraph extraction run
on the GPU while a subgraph has at least ``backend.GPU_MIN_VERTICES`` vertices, and
smaller subgraphs (most of the deep splits) move to the host and finish there.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import to_host

Splitter = Callable[..., np.ndarray]


def adaptive_imbalance(eps: float, total_weight: float, k: int, sub_weight: float,
                       k_sub: int, remaining_levels: int) -> float:
    """Paper equation 2: ``((1+eps) k' c(V) / (k c(V')))^(1/d) - 1``, clamped at 0.001.

    ``k_sub`` is the number of PEs below this subgraph and ``remaining_levels`` the
    number of splits still to do, this one included. A negative value (an earlier
    split overfilled this subgraph) is clamped as in SharedMap.
    """
    if sub_weight <= 0:
        return eps
    value = ((1.0 + eps) * k_sub * total_weight / (k * sub_weight)) ** (1.0 / remaining_levels) - 1.0
    return max(value, 0.001)


def hierarchical_multisection(xadj, adjncy, adjwgt, vwgt, levels, share: np.ndarray,
                              eps: float, seed: int, split: Splitter,
                              caps: np.ndarray | None = None, progress=None,
                              device: str = "cpu") -> np.ndarray:
    """Map tasks to PEs by recursive multisection; returns task -> PE (int32).

    Parameters
    ----------
    levels : hierarchy ``(a1, ..., al)``, leaf first.
    share : per-PE share of the load (capacity in slots, or 1 for every usable PE, 0 for
        unusable PEs); each child's target is the sum over its PEs.
    eps : the global imbalance; splits use the adaptive imbalance.
    caps : per-PE hard capacity in vertex weight (rank placement); ``None`` means the
        limits come from ``eps`` alone.
    device : ``"cpu"`` or ``"gpu"`` (concrete; see :func:`procmap.kernels.backend.resolve_device`).
        The result is a host array either way.
    """
    n = xadj.size - 1
    levels = tuple(int(a) for a in levels)
    k = math.prod(levels)
    share = np.asarray(share, dtype=np.float64)
    total_share = share.sum()
    total_weight = float(vwgt.sum())
    pes = np.zeros(n, dtype=np.int32)
    be = backend.for_size(device, n)
    graph = be.upload_graph(xadj, adjncy, adjwgt, vwgt)
    # work items: (subgraph arrays, global ids, level index, first PE)
    stack = [(graph, np.arange(n, dtype=np.int64), len(levels) - 1, 0)]
    done = 0
    while stack:
        (sx, sa, sw, sv), ids, lev, first = stack.pop()
        if backend.is_device_array(sx) and ids.size < backend.GPU_MIN_VERTICES:
            sx, sa, sw, sv = (to_host(a) for a in (sx, sa, sw, sv))
        a = levels[lev]
        child = math.prod(levels[:lev])  # PEs per child group
        k_sub = a * child
        sub_share = share[first:first + k_sub]
        child_share = sub_share.reshape(a, child).sum(axis=1)
        weight = float(sv.sum())
        if a == 1 or ids.size == 0:
            part = backend.of(sx).xp.zeros(ids.size, dtype=np.int32)
        else:
            # the subgraph's expected weight is its share of the total; see equation 2
            usable_k = k * sub_share.sum() / total_share if total_share else k_sub
            e = adaptive_imbalance(eps, total_weight, k, weight, usable_k, lev + 1)
            targets = child_share / max(child_share.sum(), 1e-300)
            limits = np.ceil((1.0 + e) * weight * targets).astype(np.int64)
            if caps is not None:
                limits = caps[first:first + k_sub].reshape(a, child).sum(axis=1)
            part = split(sx, sa, sw, sv, targets, limits, e, seed + first + lev,
                             depth=len(levels) - 1 - lev)
        if lev == 0:
            pes[ids] = first + to_host(part)
            done += ids.size
            if progress is not None:
                progress(done, n)
            continue
        blocks, members = backend.of(sx).extract_subgraphs(sx, sa, sw, sv, part, a)
        # push in reverse so the lowest PE range is handled first (deterministic order)
        for b in range(a - 1, -1, -1):
            stack.append((blocks[b], ids[to_host(members[b])], lev - 1, first + b * child))
    return pes
