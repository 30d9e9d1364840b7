"""Application-like communication patterns for rank placement (issue #22, item 4).

Every generator returns a symmetric :class:`procmap.CommGraph` on exactly ``n`` ranks with
positive integer volumes (bytes per iteration, unless said otherwise). Directed volumes
are listed as the application sends them and summed into ``C + C^T`` by
``CommGraph.from_edges`` (so a pair that exchanges ``x`` each way has weight ``2x``).

Rank numbering: process grids are numbered as ``MPI_Cart_create`` (no reorder) numbers
them, row-major with the last coordinate fastest: rank ``(i * py + j) * pz + k`` for grid
coordinates ``(i, j, k)`` on a ``px x py x pz`` grid (``i * py + j`` in 2D). Grids are not
periodic unless ``periodic=True``.

* :func:`halo2d` -- 2D halo exchange, 4 or 8 neighbours;
* :func:`halo3d` -- 3D halo exchange, 6 or 26 neighbours, face / edge / corner volumes;
* :func:`amg_like` -- algebraic multigrid: fine 26-point halo plus coarse levels whose
  active ranks talk to ranks far away in rank order;
* :func:`cg_like` -- CG on an unstructured mesh cut by METIS (the quotient graph);
* :func:`lu_wavefront` -- NPB-LU-like SSOR wavefront on a 2D process grid;
* :func:`amr_like` -- adaptive octree (quadtree) mesh, blocks distributed along a Morton
  curve, neighbours across refinement levels.

:data:`PATTERNS` maps ``"<pattern>_<n>"`` to ``(callable, n)`` for n in 64, 256, 1024, 4096.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from procmap.graph import CommGraph

SIZES = (64, 256, 1024, 4096)


def dims_create(n: int, d: int) -> tuple[int, ...]:
    """A balanced ``d``-dimensional factorisation of ``n``, largest first (as
    ``MPI_Dims_create``): 1024, 3 -> (16, 8, 8); 4096, 2 -> (64, 64)."""
    dims = [1] * d
    f, rest, primes = 2, int(n), []
    while f * f <= rest:
        while rest % f == 0:
            primes.append(f)
            rest //= f
        f += 1
    if rest > 1:
        primes.append(rest)
    for p in sorted(primes, reverse=True):
        dims[int(np.argmin(dims))] *= p
    return tuple(sorted(dims, reverse=True))


def _grid_pairs(shape, offsets, periodic):
    """(src, dst, offset index) of every rank and every offset whose target exists."""
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape))
    coords = np.indices(shape).reshape(len(shape), n)
    srcs, dsts, kinds = [], [], []
    for j, o in enumerate(offsets):
        c = coords + np.array(o)[:, None]
        if periodic:
            c %= np.array(shape)[:, None]
            ok = np.ones(n, dtype=bool)
        else:
            ok = np.all((c >= 0) & (c < np.array(shape)[:, None]), axis=0)
        dst = np.ravel_multi_index(tuple(c[:, ok]), shape)
        src = np.flatnonzero(ok)
        keep = src != dst  # a periodic side of 1
        srcs.append(src[keep])
        dsts.append(dst[keep])
        kinds.append(np.full(int(keep.sum()), j))
    return np.concatenate(srcs), np.concatenate(dsts), np.concatenate(kinds)


def _stencil(shape, neighbours: str, volumes: dict[int, int], periodic: bool) -> CommGraph:
    """Halo exchange on a process grid: every rank sends ``volumes[#nonzero coords]`` to
    each neighbour of its 3^d cube (``neighbours="faces"``: the 2d face ones only)."""
    d = len(shape)
    offsets = [o for o in np.ndindex(*(3,) * d)]
    offsets = [tuple(x - 1 for x in o) for o in offsets if any(x != 1 for x in o)]
    if neighbours == "faces":
        offsets = [o for o in offsets if sum(1 for x in o if x) == 1]
    src, dst, kind = _grid_pairs(shape, offsets, periodic)
    vol = np.array([volumes[sum(1 for x in o if x)] for o in offsets], dtype=np.int64)
    # each direction is listed by its sender: from_edges sums C + C^T, so a pair's weight is
    # the sum of what both send (2 x volume), once per direction in the CSR
    return CommGraph.from_edges(src, dst, vol[kind], n=int(np.prod(shape)))


def halo2d(px: int, py: int, neighbours: int = 4, face: int = 1024, corner: int = 8,
           periodic: bool = False) -> CommGraph:
    """2D halo exchange on a ``px x py`` process grid (rank ``i * py + j``).

    Every rank sends ``face`` bytes to each of its 4 edge-sharing neighbours and, with
    ``neighbours=8``, ``corner`` bytes to each of its 4 diagonal neighbours (defaults: a
    128 x 128 double-precision subdomain with one ghost layer: 1024 / 8 bytes). Pair weight
    in the graph: 2 x face (or 2 x corner). n = px * py; an interior rank has 4 (8)
    neighbours, boundary ranks fewer (none missing with ``periodic=True`` and sides >= 3).
    """
    if neighbours not in (4, 8):
        raise ValueError("neighbours is 4 or 8")
    return _stencil((px, py), "faces" if neighbours == 4 else "all", {1: face, 2: corner}, periodic)


def halo3d(px: int, py: int, pz: int, neighbours: int = 26, face: int = 8192, edge: int = 256,
           corner: int = 8, periodic: bool = False) -> CommGraph:
    """3D halo exchange on a ``px x py x pz`` process grid (rank ``(i * py + j) * pz + k``).

    Every rank sends ``face`` bytes to each of its 6 face neighbours and, with
    ``neighbours=26``, ``edge`` bytes to its 12 edge neighbours and ``corner`` bytes to its
    8 corner neighbours (defaults: a 32^3 double-precision subdomain, one ghost layer:
    32*32*8 = 8192 / 32*8 = 256 / 8 bytes). n = px * py * pz; an interior rank has 6 (26)
    neighbours.
    """
    if neighbours not in (6, 26):
        raise ValueError("neighbours is 6 or 26")
    return _stencil((px, py, pz), "faces" if neighbours == 6 else "all",
                    {1: face, 2: edge, 3: corner}, periodic)


def amg_like(n: int, levels: int = 4, seed: int = 0, extra: int = 2) -> CommGraph:
    """Algebraic-multigrid-like pattern on ``n`` ranks (a 3D process grid ``dims_create(n, 3)``).

    * Level 0 (fine): the 26-neighbour halo of :func:`halo3d` (8192 / 256 / 8 bytes).
    * Level l = 1 .. levels-1: stride ``s = 2^l``; the *active* ranks are those whose grid
      coordinates are all multiples of ``s`` (coarse rows are agglomerated onto fewer
      ranks, as BoomerAMG's and GAMG's coarse levels are). Each active rank exchanges a
      26-neighbour halo with the active ranks ``s`` grid steps away (``8192 // 2^l``,
      ``256 // 2^l``, ``max(1, 8 // 2^l)`` bytes): far away in rank order, since a step in
      i skips ``s * py * pz`` ranks. Every rank active on level l-1 sends its restricted
      residual (``4096 // 2^l`` bytes) to its owner on level l (coordinates rounded down to
      multiples of ``s``), which sends the same back in the prolongation. From level 2 on,
      each active rank also sends 64 bytes to ``extra`` seeded random active ranks (the
      long-range fill-in of the Galerkin products).
    * The coarsest level's active ranks (if more than one) talk all-to-all, 8 bytes each.

    n ranks exactly; about 26 neighbours per interior rank plus the coarse-level pairs.
    """
    shape = dims_create(n, 3)
    rng = np.random.default_rng(seed)
    coords = np.indices(shape).reshape(3, n)
    srcs, dsts, vols = [], [], []
    offsets = [tuple(x - 1 for x in o) for o in np.ndindex(3, 3, 3) if o != (1, 1, 1)]
    fine = {1: 8192, 2: 256, 3: 8}
    prev_active = np.arange(n)
    for lev in range(levels):
        s = 1 << lev
        active = np.flatnonzero(np.all(coords % s == 0, axis=0))
        if active.size == 0:
            break
        ac = coords[:, active]
        for o in offsets:
            c = ac + s * np.array(o)[:, None]
            ok = np.all((c >= 0) & (c < np.array(shape)[:, None]), axis=0)
            if not ok.any():
                continue
            srcs.append(active[ok])
            dsts.append(np.ravel_multi_index(tuple(c[:, ok]), shape))
            nz = sum(1 for x in o if x)
            vols.append(np.full(int(ok.sum()), max(1, fine[nz] // s), dtype=np.int64))
        if lev > 0:
            pc = coords[:, prev_active]
            owner = np.ravel_multi_index(tuple((pc // s) * s), shape)
            ok = owner != prev_active
            for a, b in ((prev_active[ok], owner[ok]), (owner[ok], prev_active[ok])):
                srcs.append(a)
                dsts.append(b)
                vols.append(np.full(a.size, 4096 // s, dtype=np.int64))
        if lev >= 2 and active.size > 1 and extra > 0:
            partners = rng.choice(active, size=(active.size, extra))
            a = np.repeat(active, extra)
            b = partners.ravel()
            ok = a != b
            srcs.append(a[ok])
            dsts.append(b[ok])
            vols.append(np.full(int(ok.sum()), 64, dtype=np.int64))
        prev_active = active
    if prev_active.size > 1:
        a, b = np.meshgrid(prev_active, prev_active, indexing="ij")
        ok = a != b
        srcs.append(a[ok])
        dsts.append(b[ok])
        vols.append(np.full(int(ok.sum()), 8, dtype=np.int64))
    return CommGraph.from_edges(np.concatenate(srcs), np.concatenate(dsts), np.concatenate(vols), n=n)


def cg_like(n_ranks: int, seed: int = 0, per_rank: int = 1000, bytes_per_edge: int = 8) -> CommGraph:
    """CG on an unstructured 2D mesh distributed by METIS: the quotient graph of the cut.

    The mesh is ``procmap.generators.delaunay_graph(n_ranks * per_rank, seed)``; it is
    partitioned into ``n_ranks`` parts by pymetis (k-way, 3% imbalance, seed ``seed``,
    the call of benchmarks/peers.py ``metis_identity``) when pymetis is installed, else
    into ``n_ranks`` blocks of consecutive vertex ids of the Delaunay graph's spatially
    local numbering (cells of the point grid, row by row: strips rather than compact
    parts). Rank r owns part r. The volume between two ranks is ``bytes_per_edge`` times
    the number of mesh edges between their parts (one double per cut edge for the
    matrix-vector product's halo, each way). n = n_ranks; degrees ~ 6 (a planar
    partition's quotient), volumes of a few tens to a few hundred bytes.
    """
    from procmap.generators import delaunay_graph

    mesh = delaunay_graph(int(n_ranks) * int(per_rank), seed=seed)
    try:
        import peers

        parts = peers.metis_identity(mesh, int(n_ranks), eps=0.03, seed=seed)
    except Exception:  # noqa: BLE001  (pymetis missing)
        parts = (np.arange(mesh.n, dtype=np.int64) * n_ranks // mesh.n).astype(np.int32)
    src = mesh.edge_sources()
    pu, pv = parts[src].astype(np.int64), parts[mesh.adjncy].astype(np.int64)
    cut = pu != pv
    # both directions of every cut edge are in the CSR: each is one send of bytes_per_edge,
    # and from_edges' C + C^T doubles it once more; halve by taking u < v only
    upper = cut & (src < mesh.adjncy)
    return CommGraph.from_edges(pu[upper], pv[upper],
                                np.full(int(upper.sum()), bytes_per_edge, dtype=np.int64), n=int(n_ranks))


def cg_partitioner() -> str:
    """Which partitioner :func:`cg_like` uses here: ``"pymetis"`` or ``"block"``."""
    try:
        import pymetis  # noqa: F401
        return "pymetis"
    except ImportError:
        return "block"


def lu_wavefront(px: int, py: int, problem: int = 408, reverse_fraction: float = 0.1) -> CommGraph:
    """NPB-LU-like SSOR wavefront on a ``px x py`` process grid (rank ``i * py + j``, i =
    row from north to south, j = column from west to east).

    The ``problem^3`` grid (408: class E) is split into ``px x py`` pencils of
    ``ceil(problem/px) x ceil(problem/py) x problem`` points. The lower-triangular sweep
    (NPB's blts) sends 5 doubles per boundary point of every k-plane to the south
    (``40 * ceil(problem/py) * problem`` bytes) and to the east (``40 * ceil(problem/px) *
    problem``); the reverse (upper) sweep sends ``reverse_fraction`` of that to the north
    and to the west. Pair weights: (1 + reverse_fraction) x the sweep volume. n = px * py;
    an interior rank has 4 neighbours; no diagonals.
    """
    n = px * py
    i, j = np.divmod(np.arange(n), py)
    south = 40 * -(-problem // py) * problem
    east = 40 * -(-problem // px) * problem
    srcs, dsts, vols = [], [], []
    for ok, step, vol in (((i + 1) < px, py, south), ((j + 1) < py, 1, east)):
        a = np.flatnonzero(ok)
        srcs += [a, a + step]
        dsts += [a + step, a]
        vols += [np.full(a.size, vol, dtype=np.int64),
                 np.full(a.size, max(1, int(round(reverse_fraction * vol))), dtype=np.int64)]
    return CommGraph.from_edges(np.concatenate(srcs), np.concatenate(dsts), np.concatenate(vols), n=n)


def _morton(coords: np.ndarray, bits: int) -> np.ndarray:
    """Morton (Z-order) key of integer coordinates ``coords`` (d x N), ``bits`` per axis."""
    d = coords.shape[0]
    key = np.zeros(coords.shape[1], dtype=np.int64)
    for b in range(bits):
        for a in range(d):
            key |= ((coords[a] >> b) & 1).astype(np.int64) << (b * d + (d - 1 - a))
    return key


def amr_like(n: int, seed: int = 0, blocks_per_rank: int = 8, dim: int = 3, cells: int = 8,
             bytes_per_cell: int = 8) -> CommGraph:
    """Adaptive-mesh (block-structured AMR) pattern on ``n`` ranks.

    An octree (``dim=3``; quadtree for ``dim=2``) of blocks of ``cells^dim`` cells is
    refined uniformly to the first level with ``>= n`` blocks, then adaptively: repeatedly,
    a seeded random subset of the finest blocks that the surface of a seeded random sphere
    (circle) crosses is split, just enough to reach ``blocks_per_rank * n`` blocks (no 2:1
    balance, so neighbours may differ by more than one level). The leaf blocks are sorted
    along the Morton curve and dealt to ranks in contiguous runs of equal count (p4est's
    distribution), so rank numbering follows the curve.

    Neighbours are blocks that share a face (of positive area). Each face contact carries
    ``cells^(dim-1) * bytes_per_cell`` bytes per direction (the finer block's face of
    ghost cells), so a coarse block that touches four finer ones exchanges four times what
    it exchanges with a same-level neighbour: volumes scale with the face size. Rank volume
    = the sum over the contacts between their blocks. n ranks exactly; degrees vary (6-30
    in 3D).
    """
    if dim not in (2, 3):
        raise ValueError("dim is 2 or 3")
    rng = np.random.default_rng(seed)
    target = int(blocks_per_rank) * int(n)
    base = 0
    while (1 << (dim * base)) < n:
        base += 1
    # leaves: (level, integer coords at their level)
    grid = np.indices((1 << base,) * dim).reshape(dim, -1).T
    levels = [np.full(grid.shape[0], base)]
    coords = [grid]
    center = rng.uniform(0.3, 0.7, dim)
    radius = rng.uniform(0.2, 0.3)
    count = grid.shape[0]
    lev_arr, co_arr = levels[0], coords[0]
    while count < target:
        top = int(lev_arr.max())
        h = 1.0 / (1 << top)
        fin = np.flatnonzero(lev_arr == top)
        cen = (co_arr[fin] + 0.5) * h
        dist = np.abs(np.linalg.norm(cen - center, axis=1) - radius)
        cand = fin[dist <= 0.5 * h * np.sqrt(dim)]
        if cand.size == 0:
            cand = fin
        need = -(-(target - count) // ((1 << dim) - 1))
        pick = rng.choice(cand, size=min(need, cand.size), replace=False)
        children = (co_arr[pick][:, None, :] * 2
                    + np.indices((2,) * dim).reshape(dim, -1).T[None, :, :]).reshape(-1, dim)
        keep = np.ones(lev_arr.size, dtype=bool)
        keep[pick] = False
        lev_arr = np.concatenate([lev_arr[keep], np.full(children.shape[0], top + 1)])
        co_arr = np.concatenate([co_arr[keep], children])
        count = lev_arr.size
    finest = int(lev_arr.max())
    size = 1 << (finest - lev_arr)                  # side in finest units
    lo = co_arr * size[:, None]                     # lower corner in finest units
    key = _morton(lo.T, finest)
    order = np.argsort(key, kind="stable")
    lev_arr, size, lo = lev_arr[order], size[order], lo[order]
    nb = lev_arr.size
    owner = (np.arange(nb, dtype=np.int64) * n // nb)
    # label every finest cell with its leaf, then compare neighbours along each axis
    side = 1 << finest
    if side ** dim > 2**27:
        raise ValueError("refinement too deep for the label grid; lower blocks_per_rank")
    label = np.empty((side,) * dim, dtype=np.int32)
    for b in range(nb):
        sl = tuple(slice(int(lo[b, a]), int(lo[b, a] + size[b])) for a in range(dim))
        label[sl] = b
    face_area = size.astype(np.int64) ** (dim - 1)
    pa_all, pb_all, w_all = [], [], []
    for a in range(dim):
        x = np.take(label, np.arange(side - 1), axis=a).ravel()
        y = np.take(label, np.arange(1, side), axis=a).ravel()
        diff = x != y
        x, y = x[diff].astype(np.int64), y[diff].astype(np.int64)
        keys, area = np.unique(x * nb + y, return_counts=True)
        u, v = keys // nb, keys % nb
        contacts = area // np.minimum(face_area[u], face_area[v])  # finer faces touched
        pa_all.append(u)
        pb_all.append(v)
        w_all.append(contacts * cells ** (dim - 1) * bytes_per_cell)
    u, v, w = np.concatenate(pa_all), np.concatenate(pb_all), np.concatenate(w_all)
    ru, rv = owner[u], owner[v]
    off = ru != rv
    # each contact is listed once (lower block first): both directions send w, so list both
    return CommGraph.from_edges(np.concatenate([ru[off], rv[off]]), np.concatenate([rv[off], ru[off]]),
                                np.concatenate([w[off], w[off]]), n=int(n))


def _grid2(n):
    return dims_create(n, 2)


def _grid3(n):
    return dims_create(n, 3)


def _registry() -> dict[str, tuple[Callable[[], CommGraph], int]]:
    reg: dict[str, tuple[Callable[[], CommGraph], int]] = {}
    for n in SIZES:
        p2, p3 = _grid2(n), _grid3(n)
        reg[f"halo2d-4_{n}"] = (lambda p2=p2: halo2d(*p2, neighbours=4), n)
        reg[f"halo2d-8_{n}"] = (lambda p2=p2: halo2d(*p2, neighbours=8), n)
        reg[f"halo3d-6_{n}"] = (lambda p3=p3: halo3d(*p3, neighbours=6), n)
        reg[f"halo3d-26_{n}"] = (lambda p3=p3: halo3d(*p3, neighbours=26), n)
        reg[f"amg_{n}"] = (lambda n=n: amg_like(n, levels=4, seed=1), n)
        reg[f"cg_{n}"] = (lambda n=n: cg_like(n, seed=1), n)
        reg[f"lu_{n}"] = (lambda p2=p2: lu_wavefront(*p2), n)
        reg[f"amr_{n}"] = (lambda n=n: amr_like(n, seed=1), n)
    return reg


#: name -> (generator, number of ranks); names ``<pattern>_<n>`` for n in :data:`SIZES`
PATTERNS: dict[str, tuple[Callable[[], CommGraph], int]] = _registry()
PATTERN_KINDS = ("halo2d-4", "halo2d-8", "halo3d-6", "halo3d-26", "amg", "cg", "lu", "amr")


def main() -> None:
    import sys
    import time

    names = sys.argv[1:] or list(PATTERNS)
    print("| pattern | n | m | max degree | volumes |")
    print("|---|---:|---:|---:|---|")
    for name in names:
        fn, n = PATTERNS[name]
        t0 = time.perf_counter()
        g = fn()
        t = time.perf_counter() - t0
        print(f"| {name} | {g.n} | {g.m} | {int(g.degrees().max())} | {g.adjwgt.min()}..{g.adjwgt.max()} |"
              f" ({t:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
