"""Seeded generators of the benchmark families (grids, random geometric and Delaunay graphs,
Chung-Lu power-law graphs).

Task ids follow the natural order: in a grid, ``(r, c) -> r * cols + c``.
"""
from __future__ import annotations

import itertools

import numba as nb
import numpy as np

from .graph import CommGraph


def grid_graph(shape: tuple[int, ...], weight: int = 1, *, diagonal: bool = False) -> CommGraph:
    """A d-dimensional grid: the 5-point (2D) or 7-point (3D) stencil with unit weights.

    ``diagonal=True`` connects every vertex to all ``3^d - 1`` neighbours of its
    surrounding cube (9-point stencil in 2D). Vertex ``(i0, i1, ...)`` has the
    row-major id. The CSR is built directly (rows sorted), so grids of tens of
    millions of vertices are cheap.
    """
    shape = tuple(int(s) for s in shape)
    dims = len(shape)
    n = int(np.prod(shape))
    if diagonal:
        offsets = [o for o in itertools.product((-1, 0, 1), repeat=dims) if any(o)]
    else:
        offsets = []
        for d in range(dims):
            for s in (-1, 1):
                o = [0] * dims
                o[d] = s
                offsets.append(tuple(o))
    strides = np.cumprod((1,) + shape[:0:-1])[::-1]  # row-major strides
    deltas = np.array([int(np.dot(o, strides)) for o in offsets], dtype=np.int64)
    order = np.argsort(deltas)  # sorted deltas give sorted neighbour rows
    offsets = [offsets[i] for i in order]
    deltas = deltas[order]
    coords = np.indices(shape, dtype=np.int32).reshape(dims, n)
    valid = np.ones((n, len(offsets)), dtype=bool)
    for j, o in enumerate(offsets):
        for d in range(dims):
            if o[d] == -1:
                valid[:, j] &= coords[d] > 0
            elif o[d] == 1:
                valid[:, j] &= coords[d] < shape[d] - 1
    del coords
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(valid.sum(axis=1), out=xadj[1:])
    adjncy = (np.arange(n, dtype=np.int32)[:, None] + deltas.astype(np.int32)[None, :])[valid]
    return CommGraph(xadj=xadj, adjncy=adjncy,
                     adjwgt=np.full(adjncy.size, weight, dtype=np.int64),
                     vwgt=np.ones(n, dtype=np.int64))


# --------------------------------------------------------------------------- spatial numbering
def _rgg_radius(n: int, radius_factor: float) -> float:
    return float(radius_factor) * float(np.sqrt(np.log(n) / n)) if n > 1 else 1.0


def _cells_per_side(cell: float) -> int:
    return max(1, int(np.ceil(1.0 / cell)))


def _lexsort_order(points: np.ndarray, cell: float) -> np.ndarray:
    """:func:`spatial_order` by one ``np.lexsort``: its fallback for cells far smaller
    than the point spacing (the bucket sort would then have more buckets than points)."""
    cells_per_side = _cells_per_side(cell)
    cx = np.minimum((points[:, 0] / cell).astype(np.int64), cells_per_side - 1)
    cy = np.minimum((points[:, 1] / cell).astype(np.int64), cells_per_side - 1)
    key = cy * cells_per_side + cx
    return np.lexsort((points[:, 1], points[:, 0], key))


@nb.njit(cache=True, nogil=True)
def _cell_keys(points, cell, cps):
    """Row-major cell id of every point, with the same float operations as the numpy
    reference (``x / cell`` truncated, clamped to the last cell), so ids agree bit for bit."""
    n = points.shape[0]
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        cx = min(np.int64(points[i, 0] / cell), cps - 1)
        cy = min(np.int64(points[i, 1] / cell), cps - 1)
        keys[i] = cy * cps + cx
    return keys


@nb.njit(cache=True, nogil=True)
def _counting_sort(keys, ncells):
    """Stable bucket sort: cell ``c`` holds ``perm[start[c]:start[c + 1]]``, in index order."""
    start = np.zeros(ncells + 1, dtype=np.int64)
    for k in keys:
        start[k + 1] += 1
    for c in range(ncells):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    perm = np.empty(keys.size, dtype=np.int64)
    for i in range(keys.size):
        perm[fill[keys[i]]] = i
        fill[keys[i]] += 1
    return start, perm


@nb.njit(cache=True, nogil=True)
def _xy_before(points, i, j):
    """Strict (x, y, index) order: what ``np.lexsort`` (stable) gives inside a cell."""
    if points[i, 0] != points[j, 0]:
        return points[i, 0] < points[j, 0]
    if points[i, 1] != points[j, 1]:
        return points[i, 1] < points[j, 1]
    return i < j


@nb.njit(cache=True, nogil=True)
def _insertion_sort_xy(points, perm, lo, hi):
    for k in range(lo + 1, hi):
        p = perm[k]
        q = k
        while q > lo and _xy_before(points, p, perm[q - 1]):
            perm[q] = perm[q - 1]
            q -= 1
        perm[q] = p


@nb.njit(parallel=True, cache=True)
def _sort_cells_xy(points, start, perm):
    """Sort every cell's points by (x, y, index), cells in parallel.

    Cells hold a handful of points, so insertion sort is cheapest. A crowded cell
    (large ``radius_factor``) is first put in x order by a stable merge sort, which
    leaves insertion sort only the ties in x to fix (linear work).
    """
    for c in nb.prange(start.size - 1):
        lo, hi = start[c], start[c + 1]
        if hi - lo > 32:
            seg = perm[lo:hi].copy()
            perm[lo:hi] = seg[np.argsort(points[seg, 0], kind="mergesort")]
        _insertion_sort_xy(points, perm, lo, hi)


def _spatial_cells(points: np.ndarray, cell: float):
    """Spatial order plus its cell structure: ``(order, start, cells_per_side)``.

    Cell ``c`` (row-major) holds new vertices ``start[c]:start[c + 1]``; the Delaunay
    tiles use this to collect the points of a box quickly and in a local order.
    """
    cps = _cells_per_side(cell)
    start, order = _counting_sort(_cell_keys(points, cell, cps), cps * cps)
    _sort_cells_xy(points, start, order)
    return order, start, cps


def spatial_order(points: np.ndarray, cell: float) -> np.ndarray:
    """The vertex numbering of the rgg and Delaunay families: a permutation listing the
    points cell by cell.

    ``points`` is an ``(n, 2)`` float64 array in the unit square; the cells are squares
    of side ``cell`` (same unit), numbered row-major from the origin (``x / cell``
    truncated, the last row and column clamped to hold 1.0). Inside a cell the points
    are ordered by x, then y, then index, so the order is fully determined by the
    coordinates: it is ``np.lexsort((y, x, cell id))``. ``order[i]`` is the old index
    of new vertex ``i``. Computed by a bucket sort; cells far smaller than the point
    spacing would make the buckets outnumber the points, and then by the lexsort.
    """
    if _cells_per_side(cell) ** 2 > 4 * len(points) + 64:
        return _lexsort_order(points, cell)
    return _spatial_cells(points, cell)[0]


def _inverse(order: np.ndarray) -> np.ndarray:
    new_id = np.empty(order.size, dtype=np.int64)
    new_id[order] = np.arange(order.size, dtype=np.int64)
    return new_id


def _unit_graph(xadj: np.ndarray, adjncy: np.ndarray) -> CommGraph:
    """CommGraph from a symmetric CSR with sorted rows, unit weights (what from_edges gives)."""
    return CommGraph(xadj=xadj, adjncy=adjncy,
                     adjwgt=np.ones(adjncy.size, dtype=np.int64),
                     vwgt=np.ones(xadj.size - 1, dtype=np.int64))


@nb.njit(cache=True, nogil=True)
def _sort_segment(a, lo, hi):
    """Sort ``a[lo:hi]`` in place: insertion sort for the short rows of these graphs."""
    if hi - lo > 32:
        a[lo:hi] = np.sort(a[lo:hi])
        return
    for k in range(lo + 1, hi):
        v = a[k]
        q = k
        while q > lo and a[q - 1] > v:
            a[q] = a[q - 1]
            q -= 1
        a[q] = v


def random_points(n: int, seed: int = 0) -> np.ndarray:
    """``n`` points uniform in the unit square (the point set of the rgg and Delaunay families)."""
    return np.random.default_rng(seed).random((int(n), 2))


# --------------------------------------------------------------------------- random geometric
def _search_cells_per_side(radius: float, n: int) -> int:
    """Cells per side of the pair-search grid: cells strictly wider than ``radius``.

    With side ``1 / cps >= radius / (1 - 1e-9)``, two points closer than ``radius`` get
    cell indices ``int(x * cps)`` at most one apart even after rounding (the products
    are off by far less than the 1e-9 slack), so the 3 x 3 neighbourhood finds every
    close pair. Coarser grids stay correct; the count is capped near ``n`` cells.
    """
    cps = max(1, int(np.floor((1.0 - 1e-9) / radius)))
    return min(cps, max(1, int(np.sqrt(2.0 * n))))


@nb.njit(cache=True, nogil=True)
def _close_points(k, sx, sy, scell, start, cps, r2, sid, out, pos, fill):
    """Count (or, with ``fill``, write to ``out[pos:]`` the new ids of) the points within
    ``sqrt(r2)`` of sorted point ``k``, scanning its own and the 8 neighbouring cells.

    The test is the reference's: ``dx * dx + dy * dy < r2`` in float64 (numpy's two-term
    sum over axis 1); ``fl(a - b) == -fl(b - a)``, so it is symmetric in the two points.
    """
    c = scell[k]
    cy = c // cps
    cx = c - cy * cps
    x0 = max(cx - 1, 0)
    x1 = min(cx + 1, cps - 1)
    xk = sx[k]
    yk = sy[k]
    count = 0
    for row in range(max(cy - 1, 0), min(cy + 1, cps - 1) + 1):
        for q in range(start[row * cps + x0], start[row * cps + x1 + 1]):
            dx = xk - sx[q]
            dy = yk - sy[q]
            if dx * dx + dy * dy < r2 and q != k:
                if fill:
                    out[pos + count] = sid[q]
                count += 1
    return count


@nb.njit(parallel=True, cache=True)
def _rgg_csr(sx, sy, scell, start, cps, r2, sid):
    """CSR of the rgg in the new numbering, rows sorted: count, prefix sum, fill.

    Every point finds all its neighbours itself (each pair is seen from both ends),
    so both passes run over points in parallel and write only their own row.
    """
    n = sx.size
    empty = np.empty(0, dtype=np.int32)
    xadj = np.zeros(n + 1, dtype=np.int64)
    for k in nb.prange(n):
        xadj[sid[k] + 1] = _close_points(k, sx, sy, scell, start, cps, r2, sid, empty, 0, False)
    for v in range(n):
        xadj[v + 1] += xadj[v]
    adjncy = np.empty(xadj[n], dtype=np.int32)
    for k in nb.prange(n):
        row = sid[k]
        _close_points(k, sx, sy, scell, start, cps, r2, sid, adjncy, xadj[row], True)
        _sort_segment(adjncy, xadj[row], xadj[row + 1])
    return xadj, adjncy


def _rgg_from_points(points: np.ndarray, radius: float, search_cells: int | None = None) -> CommGraph:
    """The rgg of ``points``: bucket them into a search grid, find close pairs per point
    (``search_cells``: see :func:`random_geometric_graph`)."""
    n = len(points)
    finest = _search_cells_per_side(radius, n)
    cps = finest if search_cells is None else int(search_cells)
    if not 1 <= cps <= finest:
        raise ValueError(f"search_cells must be 1..{finest} (cells not narrower than the radius), "
                         f"got {search_cells}")
    order = spatial_order(points, radius)
    new_id = _inverse(order)
    scell = np.minimum((points[:, 0] * cps).astype(np.int64), cps - 1) \
        + cps * np.minimum((points[:, 1] * cps).astype(np.int64), cps - 1)
    start, perm = _counting_sort(scell, cps * cps)
    xadj, adjncy = _rgg_csr(np.ascontiguousarray(points[perm, 0]),
                            np.ascontiguousarray(points[perm, 1]),
                            scell[perm], start, cps, radius * radius, new_id[perm])
    return _unit_graph(xadj, adjncy)


def random_geometric_graph(n: int, seed: int = 0, radius_factor: float = 0.55, *,
                           search_cells: int | None = None) -> CommGraph:
    """Random geometric graph (rgg): ``n`` uniform points in the unit square
    (:func:`random_points`), an edge of weight 1 between every two points closer than
    ``radius_factor * sqrt(ln n / n)`` (1 for ``n = 1``).

    This is the rgg family of the KaHIP / SharedMap benchmarks (factor 0.55 gives an
    average degree of about 0.95 ln n). Vertices are numbered in a spatially local
    order (:func:`spatial_order` with cells of side = radius), as a locality-preserving
    input order of real applications would be.

    The close pairs come from a parallel cell-list search (Numba) on a grid of
    ``search_cells x search_cells`` cells: by default the finest grid whose cells are
    wider than the radius (capped near ``n`` cells). A coarser grid (1 up to that
    default) finds the same pairs, only slower; the graph is the same, array for
    array, as the k-d tree definition (``tests/reference_generators.py``).
    """
    n = int(n)
    if n < 1:
        raise ValueError("random_geometric_graph needs n >= 1")
    return _rgg_from_points(random_points(n, seed), _rgg_radius(n, radius_factor), search_cells)


# --------------------------------------------------------------------------- Delaunay
# Tiled Delaunay. Qhull is the slow part (superlinear in practice: about 20 us per
# point at 2^20 points, 2-3 us on a few thousand) and runs in one thread; tiles of a
# few thousand points, listed in a spatially local order, triangulate faster and in
# parallel threads (Qhull releases the GIL).
# A triangle of a tile's triangulation is kept when it is certainly a triangle of
# the whole set: its circumdisc meets no part of the unit square outside the tile's
# box (so no missing point can lie in it). Thin triangles along the convex hull can
# be longer than a tile; they come from a frame (the band along the square's sides)
# triangulated as one more piece. The result must hold exactly 2n - 2 - h triangles
# (h: hull vertices) forming a proper triangulation, else a wider margin, and
# finally the global triangulation, are used.

_TILE_POINTS = 2 ** 12   # points per tile: Qhull runs 2-3x faster per point on small inputs
_MARGIN = 1.0            # tile margin, in units of sqrt(ln n / n) (about 3 point spacings)
_EPS = np.finfo(np.float64).eps


def delaunay_tiles(n: int) -> int:
    """Tiles per side that :func:`delaunay_graph` uses for ``n`` points: about 4096 points
    per tile, ``floor(sqrt(n / 4096))``, at least 1 (1: one global triangulation)."""
    return max(1, int(np.sqrt(n / _TILE_POINTS)))


@nb.njit(cache=True, nogil=True)
def _tile_box(tiles, i, j, margin):
    """Box of tile (i, j) widened by ``margin``; unbounded on the square's outer sides
    (no points there), so thin triangles along the boundary may bulge out freely."""
    x0 = i / tiles - margin if i > 0 else -np.inf
    x1 = (i + 1) / tiles + margin if i < tiles - 1 else np.inf
    y0 = j / tiles - margin if j > 0 else -np.inf
    y1 = (j + 1) / tiles + margin if j < tiles - 1 else np.inf
    return x0, x1, y0, y1


@nb.njit(cache=True, nogil=True)
def _outside_box(x0, x1, y0, y1):
    """The parts of the unit square outside the box, as rows ``(x0, x1, y0, y1)``:
    where the points that a piece did not get can lie."""
    rects = np.empty((4, 4))
    k = 0
    for a, b, c, d in ((0.0, x0, 0.0, 1.0), (x1, 1.0, 0.0, 1.0),
                       (0.0, 1.0, 0.0, y0), (0.0, 1.0, y1, 1.0)):
        if a < b and c < d:
            rects[k, 0], rects[k, 1], rects[k, 2], rects[k, 3] = a, b, c, d
            k += 1
    return rects[:k].copy()


@nb.njit(cache=True, nogil=True)
def _circle(points, a, b, c):
    """The circumcircle of triangle (a, b, c) as a convex quadratic that is negative
    exactly inside it: ``F(p) = k2 |p - a|^2 + kx (px - ax) + ky (py - ay)``.

    This is the incircle determinant expanded along the row of ``p``; its
    coefficients (2 x 2 minors) have small absolute errors even for a nearly flat
    triangle, whose centre and radius are themselves ill-conditioned (a thin
    triangle along the hull can have a radius of 10^5 and a centre known only to
    10^-4). Returns ``(k2, kx, ky, err, ox, oy)``: ``err`` bounds the rounding error
    of ``F`` on the unit square, ``(ox, oy)`` is the computed centre (used only to
    pick an owner and a test point, so its error does not matter). ``k2 == 0`` flags
    a degenerate triangle. Depends only on the sorted ids: every piece agrees.
    """
    ax, ay = points[a, 0], points[a, 1]
    bx, by = points[b, 0] - ax, points[b, 1] - ay
    cx, cy = points[c, 0] - ax, points[c, 1] - ay
    bb = bx * bx + by * by
    cc = cx * cx + cy * cy
    d = bx * cy - by * cx
    m1 = by * cc - bb * cy
    m2 = bx * cc - bb * cx
    sign = 1.0 if d > 0 else -1.0
    k2, kx, ky = abs(d), sign * m1, -sign * m2
    size = (2.0 * (abs(bx * cy) + abs(by * cx)) + abs(by) * cc + bb * abs(cy)
            + abs(bx) * cc + bb * abs(cx))
    err = 64.0 * _EPS * size
    ox = ax - kx / (2.0 * k2) if k2 > 0.0 else np.inf
    oy = ay - ky / (2.0 * k2) if k2 > 0.0 else np.inf
    if not (np.isfinite(ox) and np.isfinite(oy)):
        return 0.0, 0.0, 0.0, err, ax, ay
    return k2, kx, ky, err, ox, oy


@nb.njit(cache=True, nogil=True)
def _disc_misses(points, a, circle, rects):
    """True when no point of any rectangle is inside the circle (beyond rounding).

    ``F`` is convex, so on a rectangle it is at least its tangent plane at any point
    ``p0``, whose minimum is at a corner. With ``p0`` the point of the rectangle
    nearest the computed centre this bound is tight, whatever the centre's error.
    """
    k2, kx, ky, err, ox, oy = circle
    if k2 == 0.0:
        return False
    ax, ay = points[a, 0], points[a, 1]
    for k in range(rects.shape[0]):
        px = min(max(ox, rects[k, 0]), rects[k, 1]) - ax
        py = min(max(oy, rects[k, 2]), rects[k, 3]) - ay
        at_p0 = k2 * (px * px + py * py) + kx * px + ky * py
        gx = 2.0 * k2 * px + kx  # gradient of F at p0
        gy = 2.0 * k2 * py + ky
        low = at_p0
        for qx in (rects[k, 0] - ax, rects[k, 1] - ax):
            for qy in (rects[k, 2] - ay, rects[k, 3] - ay):
                low = min(low, at_p0 + gx * (qx - px) + gy * (qy - py))
        if low <= err:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _owner_tile(ox, oy, tiles):
    """The tile whose (half-open) core holds the circumcentre: one owner per triangle.
    Centres outside the square go to the nearest boundary tile."""
    i = min(max(np.floor(ox * tiles), 0.0), tiles - 1.0)  # clamp before the int conversion
    j = min(max(np.floor(oy * tiles), 0.0), tiles - 1.0)
    return np.int64(i), np.int64(j)


@nb.njit(cache=True, nogil=True)
def _sorted_triangle(ids, simplex):
    a, b, c = ids[simplex[0]], ids[simplex[1]], ids[simplex[2]]
    if a > b:
        a, b = b, a
    if b > c:
        b, c = c, b
    if a > b:
        a, b = b, a
    return a, b, c


@nb.njit(cache=True, nogil=True)
def _tile_keeps(points, a, circle, tiles, margin, ti, tj):
    """Tile (ti, tj) keeps a triangle when it owns the circumcentre and the circumdisc
    stays inside the tile's box (no point the tile lacks can be in it: Delaunay).
    A disc of radius ``r`` centred in the core fits when ``r < margin``."""
    i, j = _owner_tile(circle[4], circle[5], tiles)
    if i != ti or j != tj:
        return False
    x0, x1, y0, y1 = _tile_box(tiles, i, j, margin)
    return _disc_misses(points, a, circle, _outside_box(x0, x1, y0, y1))


@nb.njit(cache=True, nogil=True)
def _keep_tile_triangles(points, ids, simplices, tiles, margin, ti, tj):
    out = np.empty((simplices.shape[0], 3), dtype=np.int64)
    m = 0
    for t in range(simplices.shape[0]):
        a, b, c = _sorted_triangle(ids, simplices[t])
        if _tile_keeps(points, a, _circle(points, a, b, c), tiles, margin, ti, tj):
            out[m, 0], out[m, 1], out[m, 2] = a, b, c
            m += 1
    return out[:m].copy()


@nb.njit(cache=True, nogil=True)
def _keep_band_triangles(points, ids, simplices, tiles, margin, width):
    """Frame triangles whose circumdisc avoids the inner square ``[width, 1 - width]^2``
    and that their owner tile does not keep already (so none is kept twice)."""
    inner = np.empty((0, 4))
    if width < 0.5:
        inner = np.array([[width, 1.0 - width, width, 1.0 - width]])
    out = np.empty((simplices.shape[0], 3), dtype=np.int64)
    m = 0
    for t in range(simplices.shape[0]):
        a, b, c = _sorted_triangle(ids, simplices[t])
        circle = _circle(points, a, b, c)
        if not _disc_misses(points, a, circle, inner):
            continue
        i, j = _owner_tile(circle[4], circle[5], tiles)
        if _tile_keeps(points, a, circle, tiles, margin, i, j):
            continue
        out[m, 0], out[m, 1], out[m, 2] = a, b, c
        m += 1
    return out[:m].copy()


@nb.njit(cache=True, nogil=True)
def _points_in_box(points, order, start, cps, cell, x0, x1, y0, y1):
    """Ids of the points in the closed box, in the spatial order (good for Qhull's cache)."""
    cx0 = max(np.int64(max(x0, 0.0) / cell) - 1, 0)
    cx1 = min(np.int64(min(x1, 1.0) / cell) + 1, cps - 1)
    cy0 = max(np.int64(max(y0, 0.0) / cell) - 1, 0)
    cy1 = min(np.int64(min(y1, 1.0) / cell) + 1, cps - 1)
    out = np.empty(16, dtype=np.int64)
    m = 0
    for row in range(cy0, cy1 + 1):
        for k in range(start[row * cps + cx0], start[row * cps + cx1 + 1]):
            p = order[k]
            x, y = points[p, 0], points[p, 1]
            if x0 <= x <= x1 and y0 <= y <= y1:
                if m == out.size:
                    grown = np.empty(2 * m, dtype=np.int64)
                    grown[:m] = out
                    out = grown
                out[m] = p
                m += 1
    return out[:m].copy()


def _hull_size(points: np.ndarray, band: np.ndarray, width: float) -> int:
    """Number of convex hull vertices. The hull of the frame points is the hull of all
    points when it contains the inner square (checked), and is much cheaper."""
    from scipy.spatial import ConvexHull, QhullError

    if width < 0.5 and band.size >= 3:
        try:
            hull = ConvexHull(points[band])
        except QhullError:
            hull = None
        if hull is not None:
            corners = np.array([[width, width], [1 - width, width],
                                [width, 1 - width], [1 - width, 1 - width]])
            eq = hull.equations
            if np.all(corners @ eq[:, :2].T + eq[:, 2] < -1e-9):
                return len(hull.vertices)
    return len(ConvexHull(points).vertices)


def _tiled_triangles(points, order, start, cps, cell, tiles, margin, workers=None):
    """Delaunay triangles of ``points`` from ``tiles x tiles`` tiles plus the frame, as
    sorted id triples, and the hull size; ``None`` when they are not provably complete."""
    from concurrent.futures import ThreadPoolExecutor

    from scipy.spatial import Delaunay, QhullError

    n = len(points)
    width = 2.0 * margin
    x, y = points[order, 0], points[order, 1]
    band = order[~((x > width) & (x < 1 - width) & (y > width) & (y < 1 - width))]
    del x, y

    def triangulate(ids):
        return Delaunay(points[ids]).simplices if ids.size >= 3 else np.empty((0, 3), np.int32)

    def tile_job(ti, tj):
        box = _tile_box(tiles, ti, tj, margin)
        ids = _points_in_box(points, order, start, cps, cell, *box)
        return _keep_tile_triangles(points, ids, triangulate(ids), tiles, margin, ti, tj)

    def band_job():
        return _keep_band_triangles(points, band, triangulate(band), tiles, margin, width)

    workers = workers or max(1, nb.get_num_threads())
    try:
        with ThreadPoolExecutor(workers) as pool:
            jobs = [pool.submit(band_job)]  # the largest piece first
            jobs += [pool.submit(tile_job, i, j) for j in range(tiles) for i in range(tiles)]
            parts = [job.result() for job in jobs]
    except QhullError:  # a degenerate piece (e.g. all collinear): use the global triangulation
        return None
    hull = _hull_size(points, band, width)
    triangles = np.concatenate(parts)
    if len(triangles) != 2 * n - 2 - hull:
        return None
    return triangles, hull


@nb.njit(cache=True, nogil=True)
def _triangle_rows(triangles, new_id, n):
    """Both directions of the 3 edges of every triangle, bucketed by row (new ids)."""
    start = np.zeros(n + 1, dtype=np.int64)
    for t in range(triangles.shape[0]):
        for s in range(3):
            start[new_id[triangles[t, s]] + 1] += 2
    for v in range(n):
        start[v + 1] += start[v]
    fill = start[:-1].copy()
    entries = np.empty(start[n], dtype=np.int32)
    for t in range(triangles.shape[0]):
        for s in range(3):
            u = new_id[triangles[t, s]]
            v = new_id[triangles[t, (s + 1) % 3]]
            entries[fill[u]] = v
            fill[u] += 1
            entries[fill[v]] = u
            fill[v] += 1
    return start, entries


@nb.njit(parallel=True, cache=True)
def _dedup_rows(start, entries):
    """Sort every row, drop repeated neighbours; returns the CSR and the largest number
    of triangles sharing an edge (2 in a triangulation)."""
    n = start.size - 1
    xadj = np.zeros(n + 1, dtype=np.int64)
    most = np.zeros(n, dtype=np.int64)
    for v in nb.prange(n):
        lo, hi = start[v], start[v + 1]
        _sort_segment(entries, lo, hi)
        distinct = 0
        run = 0
        for k in range(lo, hi):
            if k > lo and entries[k] == entries[k - 1]:
                run += 1
            else:
                distinct += 1
                run = 1
            most[v] = max(most[v], run)
        xadj[v + 1] = distinct
    for v in range(n):
        xadj[v + 1] += xadj[v]
    adjncy = np.empty(xadj[n], dtype=np.int32)
    for v in nb.prange(n):
        m = xadj[v]
        for k in range(start[v], start[v + 1]):
            if k == start[v] or entries[k] != entries[k - 1]:
                adjncy[m] = entries[k]
                m += 1
    return xadj, adjncy, (most.max() if n else 0)


def _triangle_graph(triangles: np.ndarray, new_id: np.ndarray, n: int):
    """CSR (sorted rows, unit weights) of the triangles' edges; also the edge multiplicity."""
    start, entries = _triangle_rows(triangles, new_id, n)
    xadj, adjncy, most = _dedup_rows(start, entries)
    return _unit_graph(xadj, adjncy), most


def tiled_delaunay_graph(points: np.ndarray, tiles: int, margin_factor: float = _MARGIN,
                         workers: int | None = None) -> CommGraph | None:
    """The Delaunay graph of ``points`` (``(n, 2)`` float64 in the unit square) from
    ``tiles x tiles`` tiles triangulated in parallel, or ``None`` when the pieces do not
    provably add up to the triangulation (see the notes above ``_TILE_POINTS``).

    Each tile sees the points of its square widened by ``margin_factor * sqrt(ln n / n)``
    (unit square units); a too small margin loses triangles, which the checks detect
    (``None``), never a wrong graph. ``workers``: threads (default: Numba's thread
    count). Numbering and weights as :func:`delaunay_graph`, which calls this with
    :func:`delaunay_tiles` tiles and falls back when it returns ``None``.
    """
    n = len(points)
    cell = _rgg_radius(n, 0.55)
    order, start, cps = _spatial_cells(points, cell)
    margin = margin_factor * float(np.sqrt(np.log(n) / n))
    found = _tiled_triangles(points, order, start, cps, cell, tiles, margin, workers)
    if found is None:
        return None
    triangles, hull = found
    graph, most = _triangle_graph(triangles, _inverse(order), n)
    if most > 2 or graph.m != 3 * n - 3 - hull:  # a triangulation: each edge in <= 2 triangles
        return None
    return graph


def delaunay_graph(n: int, seed: int = 0) -> CommGraph:
    """Delaunay triangulation of ``n`` uniform random points in the unit square, unit weights.

    The edges of the triangles (about ``3n``), numbered in the same spatially local
    order as :func:`random_geometric_graph` (:func:`spatial_order`, cell side
    ``0.55 * sqrt(ln n / n)``).

    Inputs with :func:`delaunay_tiles` above 1 are triangulated in parallel tiles
    (:func:`tiled_delaunay_graph`), then, if its checks refuse, with a doubled margin,
    then in one global Qhull call; the graph is the global triangulation's in every
    case (``tests/reference_generators.py`` holds the definition).
    """
    n = int(n)
    if n < 3:
        raise ValueError("delaunay_graph needs n >= 3")
    points = random_points(n, seed)
    tiles = delaunay_tiles(n)
    if tiles > 1:
        for factor in (1, 2):  # then a doubled margin, then the global triangulation
            graph = tiled_delaunay_graph(points, tiles, factor * _MARGIN)
            if graph is not None:
                return graph
    from scipy.spatial import Delaunay

    order = spatial_order(points, _rgg_radius(n, 0.55))
    return _triangle_graph(Delaunay(points).simplices, _inverse(order), n)[0]


def chung_lu_graph(n: int, avg_degree: float = 16.0, exponent: float = 2.5, seed: int = 0,
                   offset: float = 1.0) -> CommGraph:
    """Chung-Lu power-law graph: expected degrees ``w_i ~ (i + offset)^(-1 / (exponent - 1))``.

    ``round(avg_degree * n / 2)`` edges are drawn with both endpoints chosen independently
    with probability proportional to ``w`` (the edge-sampling form of Chung-Lu), so the
    degree sequence follows a power law with the given ``exponent`` (2 < exponent, 2.5 by
    default). With ``offset = 1`` the largest expected degree is about
    ``avg_degree * (1 - 1/(exponent-1)) * n^(1/(exponent-1))`` (exponent 2.5: ~n^(2/3) * 5,
    tens of thousands at 2^20, a little less after merging); a larger ``offset`` caps the
    hubs. Ids are permuted by a seeded permutation, self loops dropped, duplicates merged
    with weight 1 (unit vertex weights). n is exactly ``n``; m is below
    ``avg_degree * n / 2`` (duplicates among the hubs merge); low-weight vertices that
    draw no edge stay isolated.
    """
    if exponent <= 2:
        raise ValueError("exponent must be > 2")
    rng = np.random.default_rng(seed)
    w = (np.arange(n, dtype=np.float64) + offset) ** (-1.0 / (exponent - 1.0))
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    pairs = int(round(avg_degree * n / 2))
    src = np.searchsorted(cdf, rng.random(pairs), side="right")
    dst = np.searchsorted(cdf, rng.random(pairs), side="right")
    np.minimum(src, n - 1, out=src)
    np.minimum(dst, n - 1, out=dst)
    perm = rng.permutation(n).astype(np.int64)
    src, dst = perm[src], perm[dst]
    keep = src != dst
    g = CommGraph.from_edges(src[keep], dst[keep], None, n=n)
    return CommGraph(g.xadj, g.adjncy, np.ones(g.adjncy.size, dtype=np.int64), g.vwgt)
