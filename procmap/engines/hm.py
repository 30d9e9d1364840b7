"""Hierarchical multisection (paper Algorithm 2; SharedMap's scheme).

Partition the task graph along the hierarchy from the top level down: first into
``a_l`` node groups, then each group's subgraph into ``a_{l-1}`` parts, ..., down
to single PEs. Each split gets the adaptive imbalance of paper equation 2 so that
the leaves end within ``L_max``. Leaf ids follow docs/design.md section 2: the top split
is the most significant digit of the PE id.

Every split is delegated to a *splitter* ``f(xadj, adjncy, adjwgt, vwgt, targets,
limits, eps, seed, depth) -> part``: ``targets`` are the children's shares of the
weight, ``limits`` their hard maximum weights and ``depth`` the number of splits
above this one (0 for the top split, whose cut costs the most).

With ``device="gpu"`` the graph is uploaded once; splits and subgraph extraction run
on the GPU while a subgraph is large enough (``DeviceContext.on_gpu``: vertices or
directed edges), and smaller subgraphs (most of the deep splits) move to the host and
finish there.
"""
from __future__ import annotations

import math
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Callable

import numba as nb
import numpy as np

from procmap.kernels import backend
from procmap.kernels.backend import threading_layer, to_host

from .context import Context, DeviceContext
from .splitters import jet_splitter

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
                              eps: float, seed: int, ctx: Context,
                              caps: np.ndarray | None = None, progress=None,
                              device: str = "cpu", split: Splitter | None = None) -> np.ndarray:
    """Map tasks to PEs by recursive multisection; returns task -> PE (int32).

    Parameters
    ----------
    levels : hierarchy ``(a1, ..., al)``, leaf first.
    share : per-PE share of the load (capacity in slots, or 1 for every usable PE, 0 for
        unusable PEs); each child's target is the sum over its PEs.
    eps : the global imbalance; splits use the adaptive imbalance.
    ctx : the configuration (an ``hm`` pipeline, :mod:`procmap.engines.context`); each
        split is :func:`~procmap.engines.splitters.jet_splitter` of it unless ``split``
        gives another splitter, and ``ctx.device`` decides which subgraphs stay on the GPU.
    caps : per-PE hard capacity in vertex weight (rank placement); ``None`` means the
        limits come from ``eps`` alone.
    device : ``"cpu"`` or ``"gpu"`` (concrete; see :func:`procmap.kernels.backend.resolve_device`).
        The graph may be given on the device already (no second upload). The result is
        a host array either way.

    The splits below the top one run concurrently (:func:`_split_tasks`; device
    subgraphs on CUDA streams of their own); every split's seed depends only on its
    place in the hierarchy, so the result does not depend on the order in which they
    finish.
    """
    n = xadj.size - 1
    levels = tuple(int(a) for a in levels)
    k = math.prod(levels)
    share = np.asarray(share, dtype=np.float64)
    total_share = share.sum()
    total_weight = float(vwgt.sum())
    pes = np.zeros(n, dtype=np.int32)
    dev = ctx.device
    if split is None:
        split = jet_splitter(ctx)
    be = backend.for_size(device, dev.on_gpu(n, adjncy.size))
    graph = be.upload_graph(xadj, adjncy, adjwgt, vwgt)

    def split_item(item):
        """One split of a work item ``(subgraph arrays, global ids, level index, first PE)``;
        returns its children's work items, or writes the PEs of a leaf split."""
        (sx, sa, sw, sv), ids, lev, first = item
        if backend.is_device_array(sx) and not dev.on_gpu(ids.size, sa.size):
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
            pes[ids] = first + to_host(part)  # disjoint ids: concurrent leaves never collide
            return []
        blocks, members = backend.of(sx).extract_subgraphs(sx, sa, sw, sv, part, a)
        return [(blocks[b], ids[to_host(members[b])], lev - 1, first + b * child)
                for b in range(a)]

    done = 0

    def finished(item):
        nonlocal done
        if item[2] == 0:
            done += item[1].size
            if progress is not None:
                progress(done, n)

    _split_tasks((graph, np.arange(n, dtype=np.int64), len(levels) - 1, 0), split_item, finished,
                 dev)
    return pes


def _on_device(item, device: DeviceContext) -> bool:
    return backend.is_device_array(item[0][0]) and device.on_gpu(item[1].size, item[0][1].size)


def _split_tasks(root, split_item, finished, device: DeviceContext) -> None:
    """Run ``split_item`` on ``root`` and, recursively, on the work items it returns;
    ``finished(item)`` is called in the calling thread after each split.

    The top split runs first, in the calling thread with all Numba threads. The splits
    below it are independent, and run in worker threads (:func:`.backend.in_worker`),
    each with a share of the Numba threads: small graphs use many threads poorly
    (short parallel loops, Jet's mostly sequential loop), so splitting several
    subgraphs at once at few threads each beats one after another at all threads. The
    kernels release the GIL (``nogil``). The threads not held by running splits go to
    the splits that start, in proportion to their size (:func:`thread_shares`). Device
    subgraphs (at most ``device.device_splits`` at a time) get a CUDA stream each, so
    their kernels run concurrently with each other's and with the host work.

    Serial (depth first, calling thread) when the threading layer cannot run parallel
    loops from several threads at once (workqueue), or when Numba has one thread and
    there is no device subgraph; subgraphs below ``device.thread_min_vertices``
    vertices always split serially, in the thread that holds them.
    """
    def serially(items, threads: int | None = None) -> None:
        if not items:
            return
        before = nb.get_num_threads()
        if threads is not None:
            nb.set_num_threads(threads)  # this thread's parallel loops only
        try:
            stack = list(reversed(items))
            while stack:
                item = stack.pop()
                stack.extend(reversed(split_item(item)))
                finished(item)
        finally:
            nb.set_num_threads(before)

    if root[1].size < device.thread_min_vertices and not _on_device(root, device):
        serially([root], threads=1)
        return
    children = split_item(root)
    finished(root)
    threads = nb.get_num_threads()
    serial = threading_layer() == "workqueue" or (
        threads == 1 and not any(_on_device(it, device) for it in children))
    if serial:
        serially(children)
        return

    pending, running, held = children, {}, {}
    with ThreadPoolExecutor(max_workers=threads + device.device_splits,
                            thread_name_prefix="procmap-split") as pool:
        while pending or running:
            small = [it[1].size < device.thread_min_vertices and not _on_device(it, device)
                     for it in pending]
            serially([it for it, s in zip(pending, small) if s], threads=1)
            pending = [it for it, s in zip(pending, small) if not s]
            submit, waiting = [], []
            on_device = sum(_on_device(it, device) for it in running.values())
            for item in pending:
                gpu = _on_device(item, device)
                if gpu and on_device >= device.device_splits:
                    waiting.append(item)
                    continue
                on_device += gpu
                submit.append((item, gpu))
            free = threads - sum(held.values())
            # a device split's work is on the GPU: its host thread mostly waits for it
            shares = thread_shares([0 if gpu else _work(item) for item, gpu in submit], free)
            for (item, gpu), share in zip(submit, shares):
                fut = pool.submit(backend.in_worker(split_item, share, gpu), item)
                running[fut], held[fut] = item, share
            pending = waiting
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: running[f][3]):  # by first PE: fixed order
                item = running.pop(fut)
                del held[fut]
                pending.extend(fut.result())
                finished(item)


def _work(item) -> int:
    """A work item's size for :func:`thread_shares`: its vertices plus directed edges."""
    return int(item[1].size) + int(item[0][1].size)


def thread_shares(works: list[int], threads: int) -> list[int]:
    """Numba threads for subgraphs that start splitting together: ``threads`` shared in
    proportion to each one's ``works`` (vertices plus directed edges), at least 1 each.

    A split's time grows with its edges, and the subgraphs of one split can differ by
    orders of magnitude: on power-law graphs one block takes the dense core, most of
    the edges, and an equal share would leave it a few threads while the others finish
    at once. The shares may add up to a few more than
    ``threads`` (every subgraph gets one; a work of 0, a split on the GPU, gets just
    that one unless all are 0). The partition does not depend on them.
    """
    total = sum(works)
    if not works:
        return []
    if total <= 0:
        return [max(1, threads // len(works))] * len(works)
    return [max(1, threads * w // total) for w in works]
