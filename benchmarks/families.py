"""Seeded generators of the robustness families of issue #22 (docs/design.md section 9).

Every generator returns a :class:`procmap.CommGraph` (symmetric CSR, rows sorted, no self
loops, duplicates merged, integer edge weights > 0, unit vertex weights) and is vectorised
with numpy, so that 2^20 vertices generate in seconds and 2^22 in well under a minute.
The same arguments (seed included) always give the same graph.

* :func:`rmat` -- R-MAT power-law graph (Graph500 parameters by default), ids permuted;
* :func:`chung_lu` -- Chung-Lu power-law graph with a given degree exponent
  (:func:`procmap.generators.chung_lu_graph`, which ``procmap warmup`` maps too);
* :func:`stencil27` -- 3D 27-point stencil with unequal face / edge / corner volumes;
* :func:`road_like` -- Delaunay graph pruned to a random spanning tree + 20% of the rest;
* :func:`spread_weights` -- same structure, volumes log-uniform over several decades;
* :func:`with_isolated` -- adds isolated vertices and many small components.

``m`` always means undirected edges (``graph.m``); J counts each of them twice.

    python benchmarks/families.py      # sizes and generation times of small examples
"""
from __future__ import annotations

import numpy as np

from procmap.generators import chung_lu_graph as chung_lu  # noqa: F401 (one of the families)
from procmap.generators import delaunay_graph
from procmap.graph import CommGraph


def _pairs(graph: CommGraph):
    """The undirected edges ``u < v`` of ``graph`` (each once) and their weights."""
    src = graph.edge_sources()
    upper = src < graph.adjncy
    return src[upper].astype(np.int64), graph.adjncy[upper].astype(np.int64), graph.adjwgt[upper]


def _unit(graph: CommGraph) -> CommGraph:
    """``graph`` with every edge weight set to 1 (same CSR)."""
    return CommGraph(graph.xadj, graph.adjncy, np.ones(graph.adjncy.size, dtype=np.int64),
                     graph.vwgt)


# ---------------------------------------------------------------------------------- power law
def rmat(scale: int, edge_factor: int = 8, a: float = 0.57, b: float = 0.19, c: float = 0.19,
         seed: int = 0, weights: str = "unit") -> CommGraph:
    """R-MAT graph (Chakrabarti, Zhan, Faloutsos 2004) with ``n = 2**scale`` vertices.

    ``edge_factor * n`` directed edges are drawn independently: each one descends ``scale``
    levels of the adjacency matrix, choosing the top-left / top-right / bottom-left /
    bottom-right quadrant with probabilities ``a, b, c, d = 1 - a - b - c`` (defaults
    0.57 / 0.19 / 0.19 / 0.05, Graph500's; no noise). Vertex ids are then renamed by a
    seeded random permutation (as Graph500 does), so ids carry no locality and the hubs
    are spread over the id range. Self loops are dropped; the edges are taken as
    undirected and duplicates (both orders included) are merged.

    ``weights="unit"`` (default): every merged edge has weight 1 (the graph issue #22
    measured). ``weights="count"``: the weight is the number of drawn edges merged into it.

    n = 2**scale exactly, including the many vertices that no edge touches (38-52%
    of them at scale 16-22 with the defaults: isolated vertices of the graph).
    m < edge_factor * n: duplicates and self loops go; with the defaults and seed 1, scale 16:
    m = 477,824 of 524,288 (25,050 isolated vertices), scale 20: 8,042,776 (501,477
    isolated), scale 22: 32,623,118 (2,185,875 isolated); benchmarks/README.md lists the
    registered sizes. The degree distribution is heavy-tailed: max degree 6,368 / 39,717 /
    97,612 at scale 16 / 20 / 22 against a mean of 14.6 / 15.3 / 15.6 over all n.
    """
    if not 0 < scale <= 30:
        raise ValueError("scale must be in 1..30")
    d = 1.0 - a - b - c
    if min(a, b, c, d) < 0:
        raise ValueError("a + b + c must be <= 1 and each >= 0")
    if weights not in ("unit", "count"):
        raise ValueError("weights is 'unit' or 'count'")
    n = 1 << scale
    edges = int(edge_factor) * n
    rng = np.random.default_rng(seed)
    src = np.zeros(edges, dtype=np.int64)
    dst = np.zeros(edges, dtype=np.int64)
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    fa = np.float32(a)
    chunk = 1 << 22  # bounded temporaries at 2^22+
    for lo in range(0, edges, chunk):
        hi = min(edges, lo + chunk)
        s, t = src[lo:hi], dst[lo:hi]
        for _ in range(scale):
            r = rng.random(hi - lo, dtype=np.float32)
            down = r >= ab                                  # bottom half: source bit 1
            right = (r >= abc) | ((r >= fa) & (r < ab))     # right half: destination bit 1
            s <<= 1
            t <<= 1
            s |= down
            t |= right
    perm = rng.permutation(n).astype(np.int64)
    src = perm[src]
    dst = perm[dst]
    keep = src != dst
    graph = CommGraph.from_edges(src[keep], dst[keep], None, n=n)  # counts summed, C + C^T
    if weights == "unit":
        return _unit(graph)
    # from_edges stored C + C^T: an edge drawn once has 1 in each direction after the
    # symmetric sum, so counts are exact: entry (u, v) = #draws u->v + #draws v->u
    return graph


def stencil27(nx: int, ny: int, nz: int, face: int = 16, edge: int = 4, corner: int = 1) -> CommGraph:
    """3D 27-point stencil on an ``nx x ny x nz`` grid (not periodic), unequal volumes.

    Vertex ``(i, j, k)`` (0 <= i < nx, ...) has id ``(i * ny + j) * nz + k`` (row-major,
    as procmap.generators.grid_graph). It is joined to every vertex of its 3x3x3 cube:
    the 6 face neighbours (one coordinate differs) with weight ``face``, the 12 edge
    neighbours (two differ) with ``edge`` and the 8 corner neighbours (three differ) with
    ``corner`` (defaults 16 / 4 / 1, like the face / edge / corner areas of an FE
    element's halo). An interior vertex has 26 neighbours; boundary vertices fewer.

    n = nx*ny*nz; m = sum over the 13 offsets o with o > 0 lexicographically of
    prod_d (n_d - |o_d|) = 3 F + 6 E + 4 K for a cube of side s (F = (s-1) s^2,
    E = (s-1)^2 s, K = (s-1)^3), e.g. 160^3: n = 4,096,000, m = 52,559,676 (12.8 n).
    """
    shape = (int(nx), int(ny), int(nz))
    if min(shape) < 1:
        raise ValueError("grid sides must be >= 1")
    n = int(np.prod(shape))
    if n * 26 >= 2**31:
        raise ValueError("too many CSR entries for this generator (int32 row offsets of the "
                         "temporary)")
    offsets = [o for o in np.ndindex(3, 3, 3) if o != (1, 1, 1)]
    offsets = [tuple(x - 1 for x in o) for o in offsets]
    strides = (shape[1] * shape[2], shape[2], 1)
    deltas = np.array([o[0] * strides[0] + o[1] * strides[1] + o[2] for o in offsets], dtype=np.int64)
    order = np.argsort(deltas, kind="stable")  # sorted deltas: sorted rows (when sides >= 3 or not)
    offsets = [offsets[i] for i in order]
    deltas = deltas[order]
    vol = {1: face, 2: edge, 3: corner}
    wcol = np.array([vol[sum(1 for x in o if x)] for o in offsets], dtype=np.int64)
    valid = np.ones((n, 26), dtype=bool)
    idx = np.arange(n, dtype=np.int64)
    coords = (idx // strides[0], (idx // strides[1]) % shape[1], idx % shape[2])
    del idx
    for d in range(3):
        low = coords[d] > 0
        high = coords[d] < shape[d] - 1
        for j, o in enumerate(offsets):
            if o[d] == -1:
                valid[:, j] &= low
            elif o[d] == 1:
                valid[:, j] &= high
    del coords
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(valid.sum(axis=1), out=xadj[1:])
    adjncy = (np.arange(n, dtype=np.int32)[:, None] + deltas.astype(np.int32)[None, :])[valid]
    adjwgt = np.broadcast_to(wcol[None, :], (n, 26))[valid]
    # neighbour id = u + delta, so rows sorted by delta are sorted by id (two offsets whose
    # deltas collide on a side < 3 are never both valid for one vertex)
    return CommGraph(xadj=xadj, adjncy=adjncy, adjwgt=np.ascontiguousarray(adjwgt),
                     vwgt=np.ones(n, dtype=np.int64))


# --------------------------------------------------------------------------------- road-like
def road_like(n: int, keep: float = 0.2, seed: int = 0, *, point_seed: int | None = None) -> CommGraph:
    """Road-like graph: low degree, long diameter, spatially local ids.

    The Delaunay graph of ``n`` random points (procmap.generators.delaunay_graph with
    ``point_seed``, default ``seed``; its spatially local numbering is kept) is pruned to a
    random spanning tree (scipy's minimum spanning tree on uniform random edge weights,
    seeded by ``seed``) plus a seeded random ``keep`` fraction (``round(keep * r)``) of
    the ``r = m_del - (n - 1)`` remaining edges. Unit weights.

    n = ``n``; m = n - 1 + round(keep * (m_del - n + 1)), about 1.4 n for keep = 0.2
    (average degree ~2.8); connected (the tree spans the Delaunay graph, which is
    connected); the diameter grows like a random spanning tree's of a planar graph,
    far beyond the Delaunay graph's.
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import minimum_spanning_tree

    base = delaunay_graph(n, seed=seed if point_seed is None else point_seed)
    u, v, _ = _pairs(base)
    rng = np.random.default_rng(seed)
    rw = rng.random(u.size) + 1e-9  # strictly positive: scipy drops explicit zeros
    mst = minimum_spanning_tree(sp.coo_matrix((rw, (u, v)), shape=(n, n)).tocsr()).tocoo()
    tu = np.minimum(mst.row, mst.col).astype(np.int64)
    tv = np.maximum(mst.row, mst.col).astype(np.int64)
    in_tree = np.zeros(u.size, dtype=bool)
    key = u * n + v  # sorted: rows ascending, columns ascending within a row
    in_tree[np.searchsorted(key, tu * n + tv)] = True
    rest = np.flatnonzero(~in_tree)
    extra = rng.choice(rest, size=int(round(keep * rest.size)), replace=False)
    chosen = np.concatenate([np.flatnonzero(in_tree), extra])
    return CommGraph.from_edges(u[chosen], v[chosen], None, n=n)


# ---------------------------------------------------------------------------------- volumes
def spread_weights(graph: CommGraph, decades: float = 4, seed: int = 0) -> CommGraph:
    """The same structure with volumes spread log-uniformly over ``decades`` orders.

    Every undirected edge {u, v} gets ``w = round(10 ** U)`` with ``U`` uniform in
    ``[0, decades]`` (seeded, one draw per edge, the same in both directions): integers
    1 .. 10**decades, each decade equally likely. n, m and the CSR structure are those of
    ``graph``; vertex weights are kept.
    """
    u, v, _ = _pairs(graph)
    rng = np.random.default_rng(seed)
    w = np.rint(10.0 ** (rng.random(u.size) * decades)).astype(np.int64)
    np.maximum(w, 1, out=w)
    # the upper triangle keeps the CSR order of its rows; mirror by one sparse transpose
    out = CommGraph.from_edges(u, v, w, n=graph.n, vwgt=graph.vwgt)
    assert out.m == graph.m
    return out


# -------------------------------------------------------------------- isolated / components
def with_isolated(graph: CommGraph, fraction: float = 0.2, components: int = 1000,
                  seed: int = 0, max_size: int = 16) -> CommGraph:
    """``graph`` plus isolated vertices and many small components, interleaved in id order.

    Adds ``isolated = round(fraction * graph.n)`` vertices without edges and ``components``
    small connected components of ``s`` vertices each (``s`` uniform in 2..``max_size``),
    the shapes cycling path, clique and star (component i: ``i % 3``), unit edge weights.
    The new vertices are inserted at seeded random positions among the old ones, and the
    old vertices keep their relative order (the base graph's locality stays; the islands
    are scattered over the id range). Vertex weights are 1 for the new vertices.

    n = graph.n + isolated + sum(s); m = graph.m + sum over components of (s - 1) for
    paths and stars, s (s - 1) / 2 for cliques. The result has exactly ``isolated`` more
    degree-0 vertices than ``graph`` and ``components`` more connected components besides
    those.
    """
    rng = np.random.default_rng(seed)
    isolated = int(round(fraction * graph.n))
    sizes = rng.integers(2, max_size + 1, size=int(components))
    new_n = int(sizes.sum())
    total = graph.n + isolated + new_n
    # positions: which of the total ids belong to the old graph (kept in order)
    old_ids = np.sort(rng.choice(total, size=graph.n, replace=False))
    is_old = np.zeros(total, dtype=bool)
    is_old[old_ids] = True
    free = np.flatnonzero(~is_old)
    rng.shuffle(free)  # new vertices scattered: first the components' vertices, then isolated
    us, vs = [], []
    u, v, w = _pairs(graph)
    us.append(old_ids[u])
    vs.append(old_ids[v])
    ws = [w]
    start = 0
    offs = np.concatenate([[0], np.cumsum(sizes)])
    # build component edges in local numbering, grouped by shape for vectorisation
    for shape in range(3):
        idx = np.arange(shape, sizes.size, 3)
        if idx.size == 0:
            continue
        for s in np.unique(sizes[idx]):
            sel = idx[sizes[idx] == s]
            base = offs[sel][:, None]
            if shape == 0:      # path 0-1-...-(s-1)
                a, b = np.arange(s - 1), np.arange(1, s)
            elif shape == 1:    # clique
                a, b = np.triu_indices(int(s), 1)
            else:               # star centred on 0
                a, b = np.zeros(s - 1, dtype=np.int64), np.arange(1, s)
            us.append(free[(base + a[None, :]).ravel()])
            vs.append(free[(base + b[None, :]).ravel()])
            ws.append(np.ones(sel.size * a.size, dtype=np.int64))
    del start
    vwgt = np.ones(total, dtype=np.int64)
    vwgt[old_ids] = graph.vwgt
    return CommGraph.from_edges(np.concatenate(us), np.concatenate(vs),
                                np.concatenate(ws).astype(graph.adjwgt.dtype), n=total, vwgt=vwgt)


def components_count(graph: CommGraph) -> int:
    """Number of connected components (isolated vertices included)."""
    from scipy.sparse.csgraph import connected_components

    return int(connected_components(graph.to_scipy(), directed=False)[0])


def main() -> None:
    import time

    cases = {
        "rmat(16)": lambda: rmat(16, seed=1),
        "chung_lu(2^16)": lambda: chung_lu(2**16, seed=1),
        "stencil27(40^3)": lambda: stencil27(40, 40, 40),
        "road_like(2^16)": lambda: road_like(2**16, seed=1),
        "spread_weights(del 2^16)": lambda: spread_weights(delaunay_graph(2**16, seed=1), seed=1),
        "with_isolated(del 2^16)": lambda: with_isolated(delaunay_graph(2**16, seed=1), 0.2, 1000, seed=1),
    }
    for name, fn in cases.items():
        t0 = time.perf_counter()
        g = fn()
        t = time.perf_counter() - t0
        deg = g.degrees()
        print(f"{name:28s} n={g.n:>9} m={g.m:>10} avg deg {2 * g.m / g.n:5.2f} max deg {deg.max():>6} "
              f"isolated {int((deg == 0).sum()):>7} weights {g.adjwgt.min()}..{g.adjwgt.max()} {t:.2f} s")


if __name__ == "__main__":
    main()
