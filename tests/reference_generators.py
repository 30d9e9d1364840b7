"""Test oracles for procmap.generators: the original, plainly written definitions of the
rgg and Delaunay families that the fast (bucket-sorted, cell-list, tiled) versions in
the package must reproduce array for array, dtypes included.

They use only the package's public pieces (``random_points``, ``CommGraph.from_edges``)
and scipy (k-d tree pairs, one global Qhull call, ``np.lexsort`` numbering), so a bug
in the fast code cannot hide in a shared helper.
"""
from __future__ import annotations

import numpy as np

from procmap.generators import random_points
from procmap.graph import CommGraph

#: The cell side of the families' numbering, in units of ``sqrt(ln n / n)``
#: (documented by ``delaunay_graph``; the rgg uses its radius instead).
DELAUNAY_CELL_FACTOR = 0.55


def rgg_radius(n: int, radius_factor: float) -> float:
    """The rgg radius ``radius_factor * sqrt(ln n / n)`` (1.0 for a single point), computed
    with the package's float operations so that the bit patterns agree."""
    return float(radius_factor) * float(np.sqrt(np.log(n) / n)) if n > 1 else 1.0


def spatial_order_reference(points: np.ndarray, cell: float) -> np.ndarray:
    """The defining form of :func:`procmap.generators.spatial_order`: cells of side
    ``cell`` row-major (``x / cell`` truncated, clamped to the last cell), then x, then y,
    then index (``np.lexsort`` is stable)."""
    cells_per_side = max(1, int(np.ceil(1.0 / cell)))
    cx = np.minimum((points[:, 0] / cell).astype(np.int64), cells_per_side - 1)
    cy = np.minimum((points[:, 1] / cell).astype(np.int64), cells_per_side - 1)
    key = cy * cells_per_side + cx
    return np.lexsort((points[:, 1], points[:, 0], key))


def renumbered_unit_graph(n: int, u: np.ndarray, v: np.ndarray, order: np.ndarray) -> CommGraph:
    """Unit-weight CommGraph from undirected pairs (each listed once), renumbered so that
    old vertex ``order[i]`` becomes ``i``."""
    new_id = np.empty(order.size, dtype=np.int64)
    new_id[order] = np.arange(order.size, dtype=np.int64)
    # from_edges stores C + C^T: one entry per undirected pair gives weight 1 both ways
    return CommGraph.from_edges(new_id[u], new_id[v], np.ones(u.size, dtype=np.int64), n=n)


def rgg_reference(n: int, seed: int = 0, radius_factor: float = 0.55) -> CommGraph:
    """The original rgg (k-d tree pairs, lexsort numbering, from_edges): the definition
    ``procmap.generators.random_geometric_graph`` must reproduce exactly."""
    from scipy.spatial import cKDTree

    points = random_points(n, seed)
    radius = rgg_radius(n, radius_factor)
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray")
    # query_pairs uses <= r; the definition is strict (a tie has probability zero anyway)
    if pairs.size:
        d2 = ((points[pairs[:, 0]] - points[pairs[:, 1]]) ** 2).sum(axis=1)
        pairs = pairs[d2 < radius * radius]
    order = spatial_order_reference(points, radius)
    return renumbered_unit_graph(n, pairs[:, 0], pairs[:, 1], order)


def delaunay_reference(n: int, seed: int = 0) -> CommGraph:
    """The original Delaunay graph (one global Qhull call, lexsort numbering, from_edges):
    the definition ``procmap.generators.delaunay_graph`` (tiled or not) must reproduce."""
    from scipy.spatial import Delaunay

    points = random_points(n, seed)
    tri = Delaunay(points).simplices.astype(np.int64)
    u = np.concatenate([tri[:, 0], tri[:, 1], tri[:, 2]])
    v = np.concatenate([tri[:, 1], tri[:, 2], tri[:, 0]])
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    keys = np.unique(lo * n + hi)  # every interior edge belongs to two triangles
    order = spatial_order_reference(points, rgg_radius(n, DELAUNAY_CELL_FACTOR))
    return renumbered_unit_graph(n, keys // n, keys % n, order)
