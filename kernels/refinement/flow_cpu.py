"""Max-flow refinement of a k-way partition's edge cut (KaFFPa's pairwise flows), CPU only.

FM moves one vertex at a time and must pass through worse states to reshape a border;
a flow sees a whole region at once. For each pair of adjacent blocks ``(a, b)``, heaviest
cut first, the refiner grows a region around their common border by breadth-first
search, inside ``a`` from its vertices adjacent to ``b`` and inside ``b`` likewise. The
rest of ``a`` is contracted into the source, the rest of ``b`` into the sink, and a
minimum s-t cut of that network (Dinic's algorithm) redraws the border inside the region:
the present border is one s-t cut, so the minimum is never worse.

Balance: when each side of the region weighs at most what the other block can still take
under ``lmax``, every cut keeps both blocks within ``lmax``. A region may be allowed
``alpha`` times that room (KaFFPa's adaptive flow regions): larger regions find more, but
a minimum cut may then overload a block. Of the two extreme minimum cuts (the source side
as small as possible, or as large) the better balanced one that fits is taken; where
neither fits, the pair tries again with ``alpha`` halved, down to 1.

Only the cut changes: a move between ``a`` and ``b`` leaves the edges to other blocks cut,
so the objective is the edge cut (``prefix = [k]``, ``dist = [1]``), not J. Flows run on
integer capacities: integer weights as they are, others scaled (:func:`flow_refine`); the
gain of a change is computed from the true weights, and a change is kept only if it
lowers the cut, or keeps it and balances the pair better. Deterministic.
"""
from __future__ import annotations

import numba as nb
import numpy as np

#: Float edge weights are scaled so that all of a graph's capacities sum to at most this
#: (int64 flows never overflow); integer weights are used as they are below it.
CAPACITY_SUM_MAX = 2**50


def flow_refine(xadj, adjncy, adjwgt, vwgt, part, k: int, lmax: int, *, alpha: float = 4.0,
                rounds: int = 2) -> float:
    """Refine the ``k``-way partition ``part`` (int32, changed in place) by pairwise
    minimum cuts; a block never grows above ``lmax`` (one above it may only shrink).

    Each round visits the pairs of blocks joined by cut edges, heaviest cut first; a
    round that changes nothing ends the rounds. ``alpha`` (>= 1) scales the room of a
    region (module docstring). Returns the gain: the decrease of the edge cut counted
    once per undirected edge (the ``prefix = [k]``, ``dist = [1]`` objective falls by
    twice that).
    """
    if k < 2 or part.size == 0 or rounds < 1:
        return 0.0
    total = float(adjwgt.sum(dtype=np.float64))
    integral = adjwgt.dtype.kind in "iu" and total <= CAPACITY_SUM_MAX
    scale = 1.0 if integral or total <= 0 else CAPACITY_SUM_MAX / total
    return _flow_rounds(xadj, adjncy, adjwgt, vwgt, part, k, float(lmax), float(alpha),
                        rounds, scale)


@nb.njit(cache=True, nogil=True)
def _flow_rounds(xadj, adjncy, adjwgt, vwgt, part, k, lmax, alpha, rounds, scale):
    n = part.size
    loads = np.zeros(k, dtype=np.float64)
    for v in range(n):
        loads[part[v]] += vwgt[v]
    local = np.full(n, -1, dtype=np.int64)  # region-local ids; -1 outside every region
    region = np.empty(n, dtype=np.int64)    # the current pair's region (scratch)
    total = 0.0
    for _ in range(rounds):
        boundary = np.empty(n, dtype=np.int64)
        nb_count = 0
        pair_cut = np.zeros(k * k, dtype=np.float64)
        for u in range(n):
            pu = part[u]
            cut = False
            for e in range(xadj[u], xadj[u + 1]):
                pv = part[adjncy[e]]
                if pv != pu:
                    cut = True
                    if pu < pv:
                        pair_cut[pu * k + pv] += adjwgt[e]
            if cut:
                boundary[nb_count] = u
                nb_count += 1
        boundary = boundary[:nb_count]
        order = np.argsort(-pair_cut, kind="mergesort")
        gained = 0.0
        for idx in order:
            if pair_cut[idx] <= 0.0:
                break
            gained += _refine_pair(xadj, adjncy, adjwgt, vwgt, part, loads, lmax, idx // k,
                                   idx % k, alpha, scale, boundary, local, region)
        total += gained
        if gained <= 0.0:
            break
    return total


@nb.njit(cache=True, nogil=True)
def _seeds(xadj, adjncy, part, boundary, a, b):
    """The vertices of ``boundary`` in block ``a`` with a neighbour in ``b``."""
    out = np.empty(boundary.size, dtype=np.int64)
    count = 0
    for u in boundary:
        if part[u] != a:
            continue
        for e in range(xadj[u], xadj[u + 1]):
            if part[adjncy[e]] == b:
                out[count] = u
                count += 1
                break
    return out[:count]


@nb.njit(cache=True, nogil=True)
def _grow(xadj, adjncy, vwgt, part, block, seeds, room, local, region, count):
    """Append to ``region[count:]`` the vertices of ``block`` that breadth-first search
    from ``seeds`` reaches while their weight stays within ``room`` (marking them in
    ``local`` with their region index); returns the new count."""
    start = count
    weight = 0.0
    for u in seeds:
        if weight + vwgt[u] > room:
            return count
        weight += vwgt[u]
        local[u] = count
        region[count] = u
        count += 1
    head = start
    while head < count:
        u = region[head]
        head += 1
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            if local[v] >= 0 or part[v] != block:
                continue
            if weight + vwgt[v] > room:
                return count
            weight += vwgt[v]
            local[v] = count
            region[count] = v
            count += 1
    return count


@nb.njit(cache=True, nogil=True)
def _network(xadj, adjncy, adjwgt, part, region, r, a, b, local, scale):
    """The flow network of a region: a symmetric CSR of the edges inside it
    (``off``, ``nbr``, capacity ``cap``; each row sorted by neighbour), and the
    capacities from the source (``cs``: edges to the rest of ``a``) and to the sink
    (``ct``: edges to the rest of ``b``), all int64."""
    deg = np.zeros(r + 1, dtype=np.int64)
    cs = np.zeros(r, dtype=np.int64)
    ct = np.zeros(r, dtype=np.int64)
    for i in range(r):
        u = region[i]
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            c = np.int64(np.rint(adjwgt[e] * scale))
            j = local[v]
            if j >= 0:
                deg[j + 1] += 1
            elif part[v] == a:
                cs[i] += c
            elif part[v] == b:
                ct[i] += c
    off = np.cumsum(deg)
    nbr = np.empty(off[r], dtype=np.int64)
    cap = np.empty(off[r], dtype=np.int64)
    fill = off[:-1].copy()
    # row j receives i in ascending i: filling the transpose sorts every row
    for i in range(r):
        u = region[i]
        for e in range(xadj[u], xadj[u + 1]):
            j = local[adjncy[e]]
            if j >= 0:
                nbr[fill[j]] = i
                cap[fill[j]] = np.int64(np.rint(adjwgt[e] * scale))
                fill[j] += 1
    return off, nbr, cap, cs, ct


@nb.njit(cache=True, nogil=True)
def _twins(off, nbr, r):
    """For every edge ``i -> j`` the position of ``j -> i`` (rows are sorted)."""
    twin = np.empty(nbr.size, dtype=np.int64)
    for i in range(r):
        for p in range(off[i], off[i + 1]):
            j = nbr[p]
            lo, hi = off[j], off[j + 1]
            while lo < hi:  # binary search for i in row j
                mid = (lo + hi) // 2
                if nbr[mid] < i:
                    lo = mid + 1
                else:
                    hi = mid
            twin[p] = lo
    return twin


@nb.njit(cache=True, nogil=True)
def _max_flow(off, nbr, cap, cs, ct, twin, r):
    """Dinic's maximum flow from the source to the sink; returns the flows
    ``(f, fs, ft)`` on the region's edges (antisymmetric: ``f[twin[p]] == -f[p]``),
    from the source and to the sink."""
    f = np.zeros(nbr.size, dtype=np.int64)
    fs = np.zeros(r, dtype=np.int64)
    ft = np.zeros(r, dtype=np.int64)
    level = np.empty(r, dtype=np.int64)
    queue = np.empty(r, dtype=np.int64)
    it = np.empty(r, dtype=np.int64)
    path = np.empty(r, dtype=np.int64)   # vertices of the current path
    via = np.empty(r, dtype=np.int64)    # the edge into path[d] from path[d - 1]
    while True:
        level[:] = -1
        tail = 0
        for i in range(r):
            if cs[i] > fs[i]:
                level[i] = 1
                queue[tail] = i
                tail += 1
        sink_level = -1
        head = 0
        while head < tail:
            i = queue[head]
            head += 1
            if sink_level >= 0 and level[i] >= sink_level:
                break  # deeper vertices cannot lie on a shortest path
            if ct[i] > ft[i] and sink_level < 0:
                sink_level = level[i] + 1
            for p in range(off[i], off[i + 1]):
                j = nbr[p]
                if level[j] < 0 and cap[p] > f[p]:
                    level[j] = level[i] + 1
                    queue[tail] = j
                    tail += 1
        if sink_level < 0:
            return f, fs, ft
        for i in range(r):
            it[i] = off[i]
        # blocking flow: depth-first along the level graph from every source edge
        for s0 in range(r):
            if level[s0] != 1:
                continue
            while cs[s0] > fs[s0]:
                path[0] = s0
                depth = 0
                found = False
                while depth >= 0:
                    i = path[depth]
                    if level[i] + 1 == sink_level and ct[i] > ft[i]:
                        found = True
                        break
                    advanced = False
                    while it[i] < off[i + 1]:
                        p = it[i]
                        j = nbr[p]
                        if level[j] == level[i] + 1 and cap[p] > f[p] and level[j] < sink_level:
                            depth += 1
                            path[depth] = j
                            via[depth] = p
                            advanced = True
                            break
                        it[i] += 1
                    if not advanced:
                        level[i] = -1  # dead end for this phase
                        depth -= 1
                        if depth >= 0:
                            it[path[depth]] += 1
                if not found:
                    break
                amount = cs[s0] - fs[s0]
                last = path[depth]
                amount = min(amount, ct[last] - ft[last])
                for d in range(1, depth + 1):
                    p = via[d]
                    amount = min(amount, cap[p] - f[p])
                fs[s0] += amount
                ft[last] += amount
                for d in range(1, depth + 1):
                    p = via[d]
                    f[p] += amount
                    f[twin[p]] -= amount


@nb.njit(cache=True, nogil=True)
def _sides(off, nbr, cap, cs, ct, f, fs, ft, r):
    """The two extreme minimum cuts: the vertices the source reaches in the residual
    network, and those that do not reach the sink (both as region masks)."""
    near_source = _closure(off, nbr, cap, f, cs > fs, 1)
    # j reaches i through j -> i: the capacity of i -> j (symmetric), the flow -f[p]
    reaches_sink = _closure(off, nbr, cap, f, ct > ft, -1)
    return near_source, ~reaches_sink


@nb.njit(cache=True, nogil=True)
def _closure(off, nbr, cap, f, start, sign):
    """``start`` (a region mask, changed in place) and every vertex joined to it by
    residual edges: ``i -> j`` with ``cap[p] - f[p] > 0`` (``sign`` 1), or, to search
    backwards, ``j -> i`` with ``cap[p] + f[p] > 0`` (``sign`` -1)."""
    queue = np.flatnonzero(start)
    queue = np.concatenate((queue, np.empty(start.size - queue.size, dtype=queue.dtype)))
    tail = np.int64(start.sum())
    head = 0
    while head < tail:
        i = queue[head]
        head += 1
        for p in range(off[i], off[i + 1]):
            j = nbr[p]
            if not start[j] and cap[p] - sign * f[p] > 0:
                start[j] = True
                queue[tail] = j
                tail += 1
    return start


@nb.njit(cache=True, nogil=True)
def _gain(xadj, adjncy, adjwgt, part, region, r, to_a, a, b, local):
    """Decrease of the cut (true weights) if the region's vertices in ``to_a`` go to
    ``a`` and the others to ``b``."""
    gain = 0.0
    for i in range(r):
        u = region[i]
        side_u = a if to_a[i] else b
        for e in range(xadj[u], xadj[u + 1]):
            v = adjncy[e]
            j = local[v]
            if j >= 0:
                w = 0.5 * adjwgt[e]  # seen from both ends
                side_v = a if to_a[j] else b
            elif part[v] == a or part[v] == b:
                w = 1.0 * adjwgt[e]
                side_v = part[v]
            else:
                continue  # to a third block: cut either way
            if part[u] != part[v]:
                gain += w
            if side_u != side_v:
                gain -= w
    return gain


@nb.njit(cache=True, nogil=True)
def _refine_pair(xadj, adjncy, adjwgt, vwgt, part, loads, lmax, a, b, alpha, scale, boundary,
                 local, region):
    """One pair's flow step; applies the best change to ``part`` and ``loads`` and
    returns its gain (0 where it keeps the border). ``region`` is scratch of ``n``."""
    seeds_a = _seeds(xadj, adjncy, part, boundary, a, b)
    seeds_b = _seeds(xadj, adjncy, part, boundary, b, a)
    if seeds_a.size == 0:
        return 0.0  # an earlier pair of this round moved the border away
    avg = loads.sum() / loads.size
    old_max = max(loads[a], loads[b])
    while True:
        room = avg + alpha * (lmax - avg)
        ra = _grow(xadj, adjncy, vwgt, part, a, seeds_a, room - loads[b], local, region, 0)
        r = _grow(xadj, adjncy, vwgt, part, b, seeds_b, room - loads[a], local, region, ra)
        weight_a = 0.0
        for i in range(ra):
            weight_a += vwgt[region[i]]
        best_gain, best_max = 0.0, old_max
        best = np.zeros(0, dtype=np.bool_)
        fits = False
        if r > 0:
            off, nbr, cap, cs, ct = _network(xadj, adjncy, adjwgt, part, region, r, a, b,
                                             local, scale)
            twin = _twins(off, nbr, r)
            f, fs, ft = _max_flow(off, nbr, cap, cs, ct, twin, r)
            for to_a in _sides(off, nbr, cap, cs, ct, f, fs, ft, r):
                into_a = -weight_a
                for i in range(r):
                    if to_a[i]:
                        into_a += vwgt[region[i]]
                load_a, load_b = loads[a] + into_a, loads[b] - into_a
                if (load_a > lmax and load_a > loads[a]) or (load_b > lmax and load_b > loads[b]):
                    continue  # a block would grow above lmax
                new_max = max(load_a, load_b)
                fits = True
                gain = _gain(xadj, adjncy, adjwgt, part, region, r, to_a, a, b, local)
                if gain > best_gain or (gain == best_gain and new_max < best_max):
                    best_gain, best_max, best = gain, new_max, to_a
        for i in range(r):
            local[region[i]] = -1
        if fits or alpha <= 1.0:
            break
        alpha = max(1.0, alpha / 2.0)
    if best.size == 0:
        return 0.0
    for i in range(r):
        u = region[i]
        side = a if best[i] else b
        if part[u] != side:
            loads[part[u]] -= vwgt[u]
            loads[side] += vwgt[u]
            part[u] = side
    return best_gain
