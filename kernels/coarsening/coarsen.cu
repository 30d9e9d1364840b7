// Coarsening kernels: the CUDA twins of kernels/coarsening/coarsen_cpu.py (matching and contraction).
//
// Matching kernels mirror the Numba loops one to one (one thread per vertex, anchor
// or twin run, the same comparisons in the same order), so their output is
// bit-identical to the CPU twin. The contraction is paper Algorithm 3 with real
// atomics: the edges of a coarse vertex's members are hashed by one group of lanes,
// in shared memory when its region is small, and the rows come out sorted.
//
// Weight-typed kernels come in two flavours, *_i64 (int64 edge weights) and *_f64
// (float64), generated from one template body.
#include "common.cuh"

// ------------------------------------------------------------------------ HEM
// Tie-break key of the undirected edge {u, v}: symmetric, seeded (coarsen_cpu.edge_hash).
__device__ __forceinline__ u64 edge_hash(i64 u, i64 v, u64 seed) {
    u64 a = (u64)(u < v ? u : v);
    u64 b = (u64)(u < v ? v : u);
    return mix64(((a << 32) | b) ^ seed);
}

// One proposal round (coarsen_cpu._hem_propose). Instead of an active list, a vertex
// is skipped when it is matched (avail < 0) or retired (pref == -1: it found no
// eligible neighbour in an earlier round, and eligibility only shrinks). pref
// starts at -2 ("not retired"). The round is skipped entirely when the previous
// round matched nothing (the CPU loop breaks there): a device-side stop, so the
// host never has to read anything back between rounds.
template <typename W>
__device__ __forceinline__ void hem_propose_body(
    i64 n, const i64* __restrict__ xadj, const int* __restrict__ adjncy,
    const W* __restrict__ adjwgt, const i64* __restrict__ avail, i64 cap, u64 seed,
    const int* __restrict__ progress, i64 round, int* __restrict__ pref) {
    if (round > 0 && progress[round - 1] == 0) return;  // same value for every thread
    GRID_STRIDE(u, n) {
        i64 cu = avail[u];
        if (cu < 0 || pref[u] == -1) continue;
        double fu = (double)(cu > 1 ? cu : 1);  // weight-0 vertices rate as weight 1
        int best = -1;
        double best_r = -1.0;
        u64 best_h = 0;
        for (i64 e = xadj[u]; e < xadj[u + 1]; ++e) {
            int v = adjncy[e];
            i64 cv = avail[v];
            if (cv < 0 || cu + cv > cap) continue;
            double w = (double)adjwgt[e];
            // no addition in the expression, so no FMA contraction: same rounding as Numba
            double r = w * w / (fu * (double)(cv > 1 ? cv : 1));
            u64 h = edge_hash(u, v, seed);
            if (best < 0 || r > best_r ||
                (r == best_r && (h > best_h || (h == best_h && v < best)))) {
                best = v;
                best_r = r;
                best_h = h;
            }
        }
        pref[u] = best;
    }
}

extern "C" __global__ void hem_propose_i64(i64 n, const i64* xadj, const int* adjncy,
                                           const i64* adjwgt, const i64* avail, i64 cap,
                                           u64 seed, const int* progress, i64 round,
                                           int* pref) {
    hem_propose_body<i64>(n, xadj, adjncy, adjwgt, avail, cap, seed, progress, round, pref);
}

extern "C" __global__ void hem_propose_f64(i64 n, const i64* xadj, const int* adjncy,
                                           const double* adjwgt, const i64* avail, i64 cap,
                                           u64 seed, const int* progress, i64 round,
                                           int* pref) {
    hem_propose_body<double>(n, xadj, adjncy, adjwgt, avail, cap, seed, progress, round, pref);
}

// Handshake (coarsen_cpu._hem_resolve): u and pref[u] match iff they prefer each
// other. Reads only pref (frozen here) and its own avail. progress[round] = 1 when
// anything matched; a block-wide OR keeps it to one store per block. Every thread
// reaches the __syncthreads_or: the early return is uniform over the grid and the
// grid-stride loop has no exits.
extern "C" __global__ void hem_resolve(i64 n, const int* __restrict__ pref,
                                       int* __restrict__ match, i64* __restrict__ avail,
                                       int* __restrict__ progress, i64 round) {
    if (round > 0 && progress[round - 1] == 0) return;
    int found = 0;
    GRID_STRIDE(u, n) {
        if (avail[u] < 0) continue;  // matched in an earlier round: its pref is stale
        int v = pref[u];
        if (v >= 0 && (i64)pref[v] == u) {
            match[u] = v;
            avail[u] = -1;
            found = 1;
        }
    }
    int any = __syncthreads_or(found);
    if (any && threadIdx.x == 0) progress[round] = 1;
}

// ------------------------------------------------------ two-hop: anchors, pairs
// anchor[v] = matchmaker of unmatched v with 1 <= deg(v) <= max_degree, else -1
// (coarsen_cpu._anchors): minimum-degree neighbour, then heavier edge, then smaller id.
template <typename W>
__device__ __forceinline__ void anchors_body(i64 n, const i64* __restrict__ xadj,
                                             const int* __restrict__ adjncy,
                                             const W* __restrict__ adjwgt,
                                             const int* __restrict__ match, i64 max_degree,
                                             int* __restrict__ anchor) {
    GRID_STRIDE(v, n) {
        anchor[v] = -1;
        i64 deg = xadj[v + 1] - xadj[v];
        if ((i64)match[v] != v || deg == 0 || deg > max_degree) continue;
        int best = -1;
        i64 best_d = 0;
        W best_w = adjwgt[xadj[v]];
        for (i64 e = xadj[v]; e < xadj[v + 1]; ++e) {
            int x = adjncy[e];
            i64 d = xadj[x + 1] - xadj[x];
            W w = adjwgt[e];
            if (best < 0 || d < best_d ||
                (d == best_d && (w > best_w || (w == best_w && x < best)))) {
                best = x;
                best_d = d;
                best_w = w;
            }
        }
        anchor[v] = best;
    }
}

extern "C" __global__ void anchors_i64(i64 n, const i64* xadj, const int* adjncy,
                                       const i64* adjwgt, const int* match, i64 max_degree,
                                       int* anchor) {
    anchors_body<i64>(n, xadj, adjncy, adjwgt, match, max_degree, anchor);
}

extern "C" __global__ void anchors_f64(i64 n, const i64* xadj, const int* adjncy,
                                       const double* adjwgt, const int* match, i64 max_degree,
                                       int* anchor) {
    anchors_body<double>(n, xadj, adjncy, adjwgt, match, max_degree, anchor);
}

// One thread per anchor x scans its row in CSR order and pairs the vertices anchored
// at x greedily, keeping one pending (coarsen_cpu._pair_by_anchor). Every candidate
// has one anchor, so every match entry has one writer; match is not read here.
extern "C" __global__ void pair_by_anchor(i64 n, const i64* __restrict__ xadj,
                                          const int* __restrict__ adjncy,
                                          const i64* __restrict__ vwgt, i64 cap,
                                          const int* __restrict__ anchor,
                                          int* __restrict__ match) {
    GRID_STRIDE(x, n) {
        int pending = -1;
        for (i64 e = xadj[x]; e < xadj[x + 1]; ++e) {
            int v = adjncy[e];
            if ((i64)anchor[v] != x) continue;
            if (pending < 0) {
                pending = v;
            } else if (vwgt[pending] + vwgt[v] <= cap) {
                match[pending] = v;
                match[v] = pending;
                pending = -1;
            } else if (vwgt[v] < vwgt[pending]) {
                pending = v;  // the lighter one has the better chance to fit the next
            }
        }
    }
}

// ------------------------------------------------------------- two-hop: twins
// Order-independent hash of N(v) of unmatched v, 0 otherwise (wraps mod 2^64).
extern "C" __global__ void neighbourhood_hash(i64 n, const i64* __restrict__ xadj,
                                              const int* __restrict__ adjncy,
                                              const int* __restrict__ match, u64 seed,
                                              u64* __restrict__ out) {
    GRID_STRIDE(v, n) {
        u64 h = 0;
        if ((i64)match[v] == v) {
            for (i64 e = xadj[v]; e < xadj[v + 1]; ++e) h += mix64((u64)adjncy[e] ^ seed);
        }
        out[v] = h;
    }
}

__device__ __forceinline__ bool same_neighbourhood(const i64* __restrict__ xadj,
                                                   const int* __restrict__ adjncy, int u,
                                                   int v) {
    i64 du = xadj[u + 1] - xadj[u];
    if (du != xadj[v + 1] - xadj[v]) return false;
    const int* a = adjncy + xadj[u];
    const int* b = adjncy + xadj[v];
    for (i64 i = 0; i < du; ++i) {  // rows are sorted: equal sets are equal sequences
        if (a[i] != b[i]) return false;
    }
    return true;
}

// One thread per run of equal hashes (order[starts[r]:starts[r+1]], ids increasing):
// pairs consecutive verified twins (coarsen_cpu._pair_twins).
extern "C" __global__ void pair_twins(i64 runs, const i64* __restrict__ xadj,
                                      const int* __restrict__ adjncy,
                                      const i64* __restrict__ vwgt, i64 cap,
                                      const int* __restrict__ order,
                                      const i64* __restrict__ starts,
                                      int* __restrict__ match) {
    GRID_STRIDE(r, runs) {
        i64 i = starts[r];
        i64 end = starts[r + 1];
        while (i + 1 < end) {
            int u = order[i];
            int v = order[i + 1];
            if (vwgt[u] + vwgt[v] <= cap && same_neighbourhood(xadj, adjncy, u, v)) {
                match[u] = v;
                match[v] = u;
                i += 2;
            } else {
                i += 1;
            }
        }
    }
}

// ------------------------------------------------------------------ contraction
// Algorithm 3 lines 1-3: bound[c] = summed fine degrees of c's members, the coarse
// vertex weights and the member counts. Integer atomics: exact and order-independent.
extern "C" __global__ void contract_bounds(i64 n, const i64* __restrict__ xadj,
                                           const i64* __restrict__ vwgt,
                                           const int* __restrict__ cmap,
                                           i64* __restrict__ bound, i64* __restrict__ cvwgt,
                                           i64* __restrict__ members) {
    GRID_STRIDE(u, n) {
        int c = cmap[u];
        atomicAdd((u64*)&bound[c], (u64)(xadj[u + 1] - xadj[u]));
        atomicAdd((u64*)&cvwgt[c], (u64)vwgt[u]);
        atomicAdd((u64*)&members[c], 1ULL);
    }
}

// The members of every coarse vertex c at member[moff[c] .. moff[c+1]), filled from
// the back: left[c] starts as c's member count (contract_bounds) and ends at 0, so no
// copy of moff is needed as a cursor. Their order depends on scheduling, which only
// the summation order of float weights can see (the rows come out sorted).
extern "C" __global__ void contract_members(i64 n, const int* __restrict__ cmap,
                                            const i64* __restrict__ moff, i64* __restrict__ left,
                                            int* __restrict__ member) {
    GRID_STRIDE(u, n) {
        const int c = cmap[u];
        const i64 slot = (i64)atomicAdd((u64*)&left[c], (u64)0 - 1ULL) - 1;  // two's complement
        member[moff[c] + slot] = (int)u;
    }
}

__device__ __forceinline__ void add_weight(i64* p, i64 w) {
    atomicAdd((u64*)p, (u64)w);  // two's complement: exact for any int64 sum
}

__device__ __forceinline__ void add_weight(double* p, double w) {
    atomicAdd(p, w);  // the summation order, hence the last bits, depend on scheduling
}

// Algorithm 3 lines 7-10 for fine edge (u, v) of weight w, c = cmap[u], d = cmap[v] != c:
// insert key d into region off[c]:off[c+1] (linear probing, empty slot = -1, claimed
// by atomicCAS) and add the weight. The region holds at least as many slots as c has
// distinct neighbours, so probing always ends. Slot hash as in
// coarsen_cpu._hash_insert (multiply-shift onto the region).
template <typename W>
__device__ __forceinline__ void hash_insert(int* __restrict__ hkey, W* __restrict__ hwgt,
                                            i64 lo, i64 size, int d, W w) {
    const u64 h = ((u64)d * 0x9E3779B1ULL) & 0xFFFFFFFFULL;
    i64 j = lo + (i64)((h * (u64)size) >> 32);
    for (;;) {
        const int old = atomicCAS(&hkey[j], -1, d);
        if (old == -1 || old == d) {
            add_weight(&hwgt[j], w);
            return;
        }
        if (++j == lo + size) j = lo;
    }
}

// The same in a power-of-two table of 2^bits slots in shared memory.
template <typename W>
__device__ __forceinline__ void shared_insert(int* skey, W* swgt, int bits, int d, W w) {
    const unsigned mask = (1u << bits) - 1u;
    unsigned j = ((unsigned)d * 0x9E3779B1u) >> (32 - bits);
    for (;;) {
        const int old = atomicCAS(&skey[j], -1, d);
        if (old == -1 || old == d) {
            add_weight(&swgt[j], w);
            return;
        }
        j = (j + 1) & mask;
    }
}

// One group of G lanes (4, 8, 16 or 32: the host picks it from the average region size,
// coarsen_gpu._row_lanes) per coarse row, a grid stride over groups. Rows are short (a
// few to a few dozen slots), so several rows per warp hide more latency than one. The
// loops are uniform within a group, as the group's shuffles need.
#define FULL_MASK 0xffffffffu

template <int G>
__device__ __forceinline__ unsigned group_mask() {
    return G == 32 ? FULL_MASK : ((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1));
}

// Sum over the group's lanes, in every lane.
template <int G>
__device__ __forceinline__ int group_sum(unsigned mask, int x) {
    for (int d = G / 2; d > 0; d >>= 1) x += __shfl_xor_sync(mask, x, d, G);
    return x;
}

// ---- building the coarse rows. The group of coarse vertex c inserts the edges of c's
// members (their rows in the fine CSR; edges inside c are self loops: dropped), so
// every neighbour is summed once per row:
// * a region of at most `shared_max` slots (ROW_SLOTS_PER_LANE * G at most) is hashed
//   in the group's table in shared memory, then its distinct neighbours are written,
//   in neighbour order, to the start of the region: (tkey, twgt)[off[c] ..
//   off[c] + cnt[c]). No global hash table is filled and read back.
// * a larger region is the hash table itself (cleared, then filled with global
//   atomics); the emit kernel (or, over SMALL_REGION slots, a sort) orders it.
// cnt[c] = the number of distinct neighbours, the coarse degree of c; *large counts
// the regions over `sort_above` slots (the host sorts those), so that it is read back
// with the coarse edge count instead of being counted by extra passes.
#define ROW_SLOTS_PER_LANE 8
#define ROW_BLOCK 256  // threads per block (gpu_common.BLOCK)

template <int G, typename W>
__device__ __forceinline__ void contract_rows_body(
    i64 nc, i64 shared_max, const i64* __restrict__ moff, const int* __restrict__ member,
    const i64* __restrict__ xadj, const int* __restrict__ adjncy, const W* __restrict__ adjwgt,
    const int* __restrict__ cmap, const i64* __restrict__ off, int* __restrict__ tkey,
    W* __restrict__ twgt, i64* __restrict__ cnt, i64 sort_above, u64* __restrict__ large) {
    constexpr int S = ROW_SLOTS_PER_LANE * G;
    __shared__ int skey_all[ROW_BLOCK * ROW_SLOTS_PER_LANE];
    __shared__ W swgt_all[ROW_BLOCK * ROW_SLOTS_PER_LANE];
    __shared__ i64 sfirst_all[ROW_BLOCK];  // per group: its current members' first edge
    __shared__ int sstart_all[ROW_BLOCK];  // ... and where their edges start in the batch
    int* skey = skey_all + (threadIdx.x / G) * S;
    W* swgt = swgt_all + (threadIdx.x / G) * S;
    i64* sfirst = sfirst_all + (threadIdx.x / G) * G;
    int* sstart = sstart_all + (threadIdx.x / G) * G;
    const int lane = threadIdx.x & (G - 1);
    const unsigned mask = group_mask<G>();
    const int shift = (threadIdx.x & 31) & ~(G - 1);  // the group's first lane in its warp
    const i64 groups = ((i64)gridDim.x * blockDim.x) / G;
    for (i64 c = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / G; c < nc; c += groups) {
        const i64 lo = off[c];
        const i64 size = off[c + 1] - lo;
        if (lane == 0 && size > sort_above) atomicAdd(large, 1ULL);
        if (size <= shared_max) {
            int bits = 1;  // a table of at least twice the region's slots, at most S
            while ((1 << bits) < 2 * size && (1 << bits) < S) ++bits;
            const int slots = 1 << bits;
            for (int j = lane; j < slots; j += G) {
                skey[j] = -1;
                swgt[j] = (W)0;
            }
            __syncwarp(mask);
            // the members' edges, G members at a time: lane q fetches member q's edge
            // range, then the lanes share the batch's edges evenly, so that all of a
            // batch's loads are independent (not one member's edges after another's)
            for (i64 mb = moff[c]; mb < moff[c + 1]; mb += G) {
                i64 first = 0;
                int deg = 0;
                if (mb + lane < moff[c + 1]) {
                    const int u = member[mb + lane];
                    first = xadj[u];
                    deg = (int)(xadj[u + 1] - first);
                }
                int incl = deg;  // inclusive prefix sum of the degrees over the group
                for (int s = 1; s < G; s <<= 1) {
                    const int t = __shfl_up_sync(mask, incl, s, G);
                    if (lane >= s) incl += t;
                }
                const int total = __shfl_sync(mask, incl, G - 1, G);
                sfirst[lane] = first;
                sstart[lane] = incl - deg;
                __syncwarp(mask);
                for (int j = lane; j < total; j += G) {
                    int q = 0;  // the member whose edges hold position j
                    while (q + 1 < G && sstart[q + 1] <= j) ++q;
                    const i64 e = sfirst[q] + (j - sstart[q]);
                    const int d = cmap[adjncy[e]];
                    if (d != (int)c) shared_insert(skey, swgt, bits, d, adjwgt[e]);
                }
                __syncwarp(mask);
            }
            // compact the occupied slots to the front of the table, in slot order (a
            // slot moves only to a place already read)
            int k = 0;
            for (int j0 = 0; j0 < slots; j0 += G) {
                const bool mine = j0 + lane < slots;  // tables smaller than G exist
                const int key = mine ? skey[j0 + lane] : -1;
                const W w = mine ? swgt[j0 + lane] : (W)0;
                const unsigned used = (__ballot_sync(mask, key >= 0) >> shift) &
                                      (G == 32 ? FULL_MASK : (1u << G) - 1u);
                __syncwarp(mask);
                if (key >= 0) {
                    const int at = k + __popc(used & ((1u << lane) - 1u));
                    skey[at] = key;
                    swgt[at] = w;
                }
                k += __popc(used);
                __syncwarp(mask);
            }
            // every distinct neighbour's place in the row: the number of smaller ones
            for (int i = lane; i < k; i += G) {
                const int key = skey[i];
                int rank = 0;
                for (int j = 0; j < k; ++j) rank += skey[j] < key;
                tkey[lo + rank] = key;
                twgt[lo + rank] = swgt[i];
            }
            if (lane == 0) cnt[c] = k;
            __syncwarp(mask);
        } else {
            for (i64 j = lane; j < size; j += G) {
                tkey[lo + j] = -1;
                twgt[lo + j] = (W)0;
            }
            __syncwarp(mask);
            for (i64 m = moff[c]; m < moff[c + 1]; ++m) {
                const int u = member[m];
                for (i64 e = xadj[u] + lane; e < xadj[u + 1]; e += G) {
                    const int d = cmap[adjncy[e]];
                    if (d != (int)c) hash_insert(tkey, twgt, lo, size, d, adjwgt[e]);
                }
            }
            __syncwarp(mask);
            int k = 0;
            for (i64 j = lane; j < size; j += G) k += __ldcg(&tkey[lo + j]) >= 0;  // past L1
            k = group_sum<G>(mask, k);
            if (lane == 0) cnt[c] = k;
        }
    }
}

// ---- the coarse CSR: rows built in shared memory are copied (already in order);
// rows hashed in their region, up to `small` slots, are written in neighbour order:
// every occupied slot's place is the number of occupied slots of the region with a
// smaller neighbour id (the keys of a region are distinct), counted by the group G
// slots at a time through shuffles, (size/G)^2 * G steps per lane. Larger regions are
// left to the caller (a sort of their slots).
template <int G, typename W>
__device__ __forceinline__ void contract_emit_body(
    i64 nc, i64 shared_max, i64 small, const i64* __restrict__ off, const int* __restrict__ hkey,
    const W* __restrict__ hwgt, const i64* __restrict__ cxadj, int* __restrict__ cadjncy,
    W* __restrict__ cadjwgt) {
    const int lane = threadIdx.x & (G - 1);
    const unsigned mask = group_mask<G>();
    const i64 groups = ((i64)gridDim.x * blockDim.x) / G;
    for (i64 c = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / G; c < nc; c += groups) {
        const i64 lo = off[c];
        const i64 size = off[c + 1] - lo;
        const i64 out = cxadj[c];
        if (size <= shared_max) {
            const i64 k = cxadj[c + 1] - out;
            for (i64 j = lane; j < k; j += G) {
                cadjncy[out + j] = hkey[lo + j];
                cadjwgt[out + j] = hwgt[lo + j];
            }
            continue;
        }
        if (size > small) continue;
        for (i64 i0 = 0; i0 < size; i0 += G) {
            const int key = i0 + lane < size ? hkey[lo + i0 + lane] : -1;
            int rank = 0;
            for (i64 j0 = 0; j0 < size; j0 += G) {
                const int other = j0 + lane < size ? hkey[lo + j0 + lane] : -1;
                for (int t = 0; t < G; ++t) {
                    const int o = __shfl_sync(mask, other, t, G);
                    rank += (o >= 0) & (o < key);
                }
            }
            if (key >= 0) {
                cadjncy[out + rank] = key;
                cadjwgt[out + rank] = hwgt[lo + i0 + lane];
            }
        }
    }
}

#define CONTRACT_KERNELS(G, SFX, W)                                                         \
    extern "C" __global__ void contract_rows_##SFX##_##G(                                   \
        i64 nc, i64 shared_max, const i64* moff, const int* member, const i64* xadj,        \
        const int* adjncy, const W* adjwgt, const int* cmap, const i64* off, int* tkey,     \
        W* twgt, i64* cnt, i64 sort_above, u64* large) {                                    \
        contract_rows_body<G, W>(nc, shared_max, moff, member, xadj, adjncy, adjwgt, cmap,  \
                                 off, tkey, twgt, cnt, sort_above, large);                  \
    }                                                                                       \
    extern "C" __global__ void contract_emit_##SFX##_##G(                                   \
        i64 nc, i64 shared_max, i64 small, const i64* off, const int* hkey, const W* hwgt,  \
        const i64* cxadj, int* cadjncy, W* cadjwgt) {                                       \
        contract_emit_body<G, W>(nc, shared_max, small, off, hkey, hwgt, cxadj, cadjncy,    \
                                 cadjwgt);                                                  \
    }

CONTRACT_KERNELS(4, i64, i64)
CONTRACT_KERNELS(8, i64, i64)
CONTRACT_KERNELS(16, i64, i64)
CONTRACT_KERNELS(32, i64, i64)
CONTRACT_KERNELS(4, f64, double)
CONTRACT_KERNELS(8, f64, double)
CONTRACT_KERNELS(16, f64, double)
CONTRACT_KERNELS(32, f64, double)
