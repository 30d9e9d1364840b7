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
