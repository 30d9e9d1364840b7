"""Seeded generators of the benchmark families (grids and stencils).

Task ids follow the natural order: in a grid, ``(r, c) -> r * cols + c``.
"""
from __future__ import annotations

import itertools

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


# --------------------------------------------------------------------------- random geometric
def _rgg_radius(n: int, radius_factor: float) -> float:
    return float(radius_factor) * float(np.sqrt(np.log(n) / n)) if n > 1 else 1.0


def _spatial_order(points: np.ndarray, cell: float) -> np.ndarray:
    """Permutation listing the points cell by cell (square cells of side ``cell``, row-major).

    Inside a cell the points are ordered by x, then y, so the order is fully
    determined by the coordinates. ``order[i]`` is the old index of new vertex ``i``.
    """
    cells_per_side = max(1, int(np.ceil(1.0 / cell)))
    cx = np.minimum((points[:, 0] / cell).astype(np.int64), cells_per_side - 1)
    cy = np.minimum((points[:, 1] / cell).astype(np.int64), cells_per_side - 1)
    key = cy * cells_per_side + cx
    return np.lexsort((points[:, 1], points[:, 0], key))


def _renumbered_unit_graph(n: int, u: np.ndarray, v: np.ndarray, order: np.ndarray) -> CommGraph:
    """Unit-weight CommGraph from undirected pairs (each listed once), renumbered by ``order``."""
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n, dtype=np.int64)
    # from_edges stores C + C^T: one entry per undirected pair gives weight 1 both ways
    return CommGraph.from_edges(new_id[u], new_id[v], np.ones(u.size, dtype=np.int64), n=n)


def random_points(n: int, seed: int = 0) -> np.ndarray:
    """``n`` points uniform in the unit square (the point set of the rgg and Delaunay families)."""
    return np.random.default_rng(seed).random((int(n), 2))


def random_geometric_graph(n: int, seed: int = 0, radius_factor: float = 0.55) -> CommGraph:
    """Random geometric graph (rgg): ``n`` uniform points in the unit square, an edge of
    weight 1 between every two points closer than ``radius_factor * sqrt(ln n / n)``.

    This is the rgg family of the KaHIP / SharedMap benchmarks (factor 0.55 gives an
    average degree of about 0.95 ln n). Vertices are numbered in a spatially local
    order (grid cells of side = radius, row-major), as a locality-preserving input
    order of real applications would be.
    """
    n = int(n)
    if n < 1:
        raise ValueError("random_geometric_graph needs n >= 1")
    from scipy.spatial import cKDTree

    points = random_points(n, seed)
    radius = _rgg_radius(n, radius_factor)
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray")
    # query_pairs uses <= r; the definition is strict (a tie has probability zero anyway)
    if pairs.size:
        d2 = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
        pairs = pairs[d2 < radius * radius]
    order = _spatial_order(points, radius)
    return _renumbered_unit_graph(n, pairs[:, 0], pairs[:, 1], order)


def delaunay_graph(n: int, seed: int = 0) -> CommGraph:
    """Delaunay triangulation of ``n`` uniform random points in the unit square, unit weights.

    The edges of the triangles (about ``3n``), numbered in the same spatially local
    order as :func:`random_geometric_graph` (cell side ``0.55 * sqrt(ln n / n)``).
    """
    n = int(n)
    if n < 3:
        raise ValueError("delaunay_graph needs n >= 3")
    from scipy.spatial import Delaunay

    points = random_points(n, seed)
    tri = Delaunay(points).simplices.astype(np.int64)
    u = np.concatenate([tri[:, 0], tri[:, 1], tri[:, 2]])
    v = np.concatenate([tri[:, 1], tri[:, 2], tri[:, 0]])
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    keys = np.unique(lo * n + hi)  # every interior edge belongs to two triangles
    order = _spatial_order(points, _rgg_radius(n, 0.55))
    return _renumbered_unit_graph(n, keys // n, keys % n, order)
