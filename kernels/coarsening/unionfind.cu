// Union-find (G-kway) coarsening with a weight cap: the CUDA twins of
// kernels/coarsening/unionfind_cpu.py. Every kernel mirrors one Numba loop (one thread per
// vertex or per parent, the same comparisons in the same order), and nothing here
// depends on thread scheduling: each thread writes only entries it owns, the
// pointer-jumping rounds are double-buffered, and the only atomics are integer
// sums and minima (order-independent). So the output is bit-identical to the CPU.
//
// Weight-typed kernels come in two flavours, *_i64 and *_f64, from one template body.
#include "common.cuh"

// ----------------------------------------------------------------------- picks
// Tie-break key of the undirected edge {u, v}: symmetric, seeded (coarsen_cpu.edge_hash).
__device__ __forceinline__ u64 pair_hash(i64 u, i64 v, u64 seed) {
    u64 a = (u64)(u < v ? u : v);
    u64 b = (u64)(u < v ? v : u);
    return mix64(((a << 32) | b) ^ seed);
}

// pick[u] = best eligible neighbour of u by (w desc, deg asc, hash desc, id asc),
// or -1 (unionfind_cpu.cluster_picks). The hash is computed only for exact (w, deg) ties,
// as on the CPU; it would not change the result if it were computed always.
template <typename W>
__device__ __forceinline__ void pick_body(i64 n, const i64* __restrict__ xadj,
                                          const int* __restrict__ adjncy,
                                          const W* __restrict__ adjwgt,
                                          const i64* __restrict__ vwgt, i64 cap, u64 seed,
                                          int* __restrict__ pick) {
    GRID_STRIDE(u, n) {
        i64 cu = vwgt[u];
        int best = -1;
        W best_w = 0;
        i64 best_d = 0;
        u64 best_h = 0;
        bool have_h = false;
        for (i64 e = xadj[u]; e < xadj[u + 1]; ++e) {
            int v = adjncy[e];
            if ((i64)v == u || cu + vwgt[v] > cap) continue;
            W w = adjwgt[e];
            i64 d = xadj[v + 1] - xadj[v];
            if (best < 0 || w > best_w || (w == best_w && d < best_d)) {
                best = v;
                best_w = w;
                best_d = d;
                have_h = false;
            } else if (w == best_w && d == best_d) {
                if (!have_h) {
                    best_h = pair_hash(u, best, seed);
                    have_h = true;
                }
                u64 h = pair_hash(u, v, seed);
                if (h > best_h || (h == best_h && v < best)) {
                    best = v;
                    best_h = h;
                }
            }
        }
        pick[u] = best;
    }
}

extern "C" __global__ void uf_pick_i64(i64 n, const i64* xadj, const int* adjncy,
                                       const i64* adjwgt, const i64* vwgt, i64 cap, u64 seed,
                                       int* pick) {
    pick_body<i64>(n, xadj, adjncy, adjwgt, vwgt, cap, seed, pick);
}

extern "C" __global__ void uf_pick_f64(i64 n, const i64* xadj, const int* adjncy,
                                       const double* adjwgt, const i64* vwgt, i64 cap,
                                       u64 seed, int* pick) {
    pick_body<double>(n, xadj, adjncy, adjwgt, vwgt, cap, seed, pick);
}

// Forest of the picks (unionfind_cpu._parents): the only cycles are mutual picks,
// rooted at their smaller vertex; a vertex without a pick is its own root.
extern "C" __global__ void uf_parents(i64 n, const int* __restrict__ pick,
                                      int* __restrict__ parent) {
    GRID_STRIDE(u, n) {
        int v = pick[u];
        bool root = v < 0 || ((i64)pick[v] == u && u < (i64)v);
        parent[u] = root ? (int)u : v;
    }
}

// ------------------------------------------------------------ pointer jumping
// One round (unionfind_cpu._jump_round): anc_out = anc[anc], dist_out = dist +
// dist[anc], reading one buffer and writing the other, so the result does not
// depend on the order of the threads. progress[round] = 1 when some ancestor was
// not yet a root. A round after one that changed nothing returns at once: the
// host launches a fixed number of rounds and never waits (the round that changed
// nothing copied its input, so both buffers then hold the result). Every thread
// reaches the __syncthreads_or: the early return is uniform over the grid and the
// grid-stride loop has no exits.
extern "C" __global__ void uf_jump(i64 n, const int* __restrict__ anc,
                                   const int* __restrict__ dist, int* __restrict__ anc_out,
                                   int* __restrict__ dist_out, int* __restrict__ progress,
                                   i64 round) {
    if (round > 0 && progress[round - 1] == 0) return;
    int changed = 0;
    GRID_STRIDE(u, n) {
        int a = anc[u];
        int b = anc[a];
        anc_out[u] = b;
        dist_out[u] = dist[u] + dist[a];
        if (b != a) changed = 1;
    }
    int any = __syncthreads_or(changed);
    if (any && threadIdx.x == 0) progress[round] = 1;
}

// tree_w[root[u]] += vwgt[u]: integer atomics, exact in any order.
extern "C" __global__ void uf_tree_weights(i64 n, const int* __restrict__ root,
                                           const i64* __restrict__ vwgt,
                                           i64* __restrict__ tree_w) {
    GRID_STRIDE(u, n) { atomicAdd((u64*)&tree_w[root[u]], (u64)vwgt[u]); }
}

// ------------------------------------------------------------------------ cap
// Summed residual weight of the children kids[lo:hi] weighing at most t.
__device__ __forceinline__ i64 weight_upto(i64 t, i64 lo, i64 hi, const int* kids,
                                           const i64* acc) {
    i64 s = 0;
    for (i64 i = lo; i < hi; ++i) {
        i64 a = acc[kids[i]];
        if (a <= t) s += a;
    }
    return s;
}

// Kundu-Misra step of every parent p = level[i] of one depth (unionfind_cpu._absorb):
// keep the lightest children pieces (ties: smaller id) while p's piece stays <= cap,
// cut the others. Children (one depth deeper) were finished by the previous launch;
// a thread writes only acc[p] and the cut flags of p's own children.
extern "C" __global__ void uf_absorb(i64 count, const int* __restrict__ level,
                                     const i64* __restrict__ cptr, const int* __restrict__ kids,
                                     i64* acc, const i64* __restrict__ vwgt, i64 cap,
                                     bool* __restrict__ cut) {
    GRID_STRIDE(i, count) {
        int p = level[i];
        i64 lo = cptr[p];
        i64 hi = cptr[p + 1];
        if (lo == hi) continue;
        i64 budget = cap - vwgt[p];  // >= 0: p's children found p eligible
        i64 total = 0;
        i64 top = 0;
        for (i64 k = lo; k < hi; ++k) {
            i64 a = acc[kids[k]];
            total += a;
            top = a > top ? a : top;
        }
        if (total <= budget) {
            acc[p] = vwgt[p] + total;
            continue;
        }
        // weight_upto(t_lo) <= budget < weight_upto(t_hi)
        i64 t_lo = 0;
        i64 t_hi = top;
        while (t_hi - t_lo > 1) {
            i64 mid = t_lo + (t_hi - t_lo) / 2;
            if (weight_upto(mid, lo, hi, kids, acc) > budget) t_hi = mid;
            else t_lo = mid;
        }
        i64 t = t_hi;
        i64 base = weight_upto(t_lo, lo, hi, kids, acc);
        i64 q = (budget - base) / t;  // both >= 0: truncation is floor, as in Python
        i64 kept = base + q * t;
        for (i64 k = lo; k < hi; ++k) {  // kids[lo:hi] are in id order
            int c = kids[k];
            i64 a = acc[c];
            if (a < t) continue;
            if (a == t && q > 0) --q;
            else cut[c] = true;
        }
        acc[p] = vwgt[p] + kept;
    }
}

// ------------------------------------------------------------------ numbering
// minv[root[u]] = smallest vertex of u's cluster (minimum: order-independent).
extern "C" __global__ void uf_cluster_min(i64 n, const int* __restrict__ root,
                                          int* __restrict__ minv) {
    GRID_STRIDE(u, n) { atomicMin(&minv[root[u]], (int)u); }
}
