// Per-vertex connectivity tables of the LP and ISR kernels (jet.cu, isr.cu).
//
// Per-vertex map key -> summed weight, key = t * k + (level-t group of a neighbour's
// block); t = 0 holds plain block connectivities. At most deg(u) * nlev distinct keys
// can occur, so a table of that capacity never overflows. Tables of up to LOCAL_TABLE
// entries are arrays in the thread's local memory, searched linearly (entries packed
// at the front, `used` of them); larger ones live in global scratch at spill[u]
// (gpu_common.TableScratch) as open-addressing hash tables with linear probing (empty
// slot: key -1). Either way a key's value is summed in neighbour order, as the CPU's
// dense table is.
#pragma once
#include "common.cuh"

#define LINEAR_MAX LOCAL_TABLE

struct ConnTable {
    int* keys;
    double* vals;
    i64 cap;
    i64 used;
    bool hashed;
};

__device__ __forceinline__ ConnTable table_open(int* keys, double* vals, i64 begin, i64 cap) {
    ConnTable T;
    T.keys = keys + begin;
    T.vals = vals + begin;
    T.cap = cap;
    T.used = 0;
    T.hashed = cap > LINEAR_MAX;
    if (T.hashed)
        for (i64 i = 0; i < cap; ++i) T.keys[i] = -1;
    return T;
}

// Slot of `key`, or -1 when absent (inserted with value 0 when `insert`).
__device__ i64 table_slot(ConnTable& T, int key, bool insert) {
    if (!T.hashed) {
        for (i64 i = 0; i < T.used; ++i)
            if (T.keys[i] == key) return i;
        if (!insert) return -1;
        T.keys[T.used] = key;
        T.vals[T.used] = 0.0;
        return T.used++;
    }
    i64 h = (i64)(mix64((u64)(unsigned)key) % (u64)T.cap);
    // at most cap probes: a lookup of an absent key in a full table must stop
    for (i64 step = 0; step < T.cap; ++step) {
        const int kk = T.keys[h];
        if (kk == key) return h;
        if (kk == -1) {
            if (!insert) return -1;
            T.keys[h] = key;
            T.vals[h] = 0.0;
            return h;
        }
        h = (h + 1 == T.cap) ? 0 : h + 1;
    }
    return -1;  // unreachable for inserts (distinct keys <= cap)
}

__device__ __forceinline__ void table_add(ConnTable& T, int key, double w) {
    const i64 s = table_slot(T, key, true);
    T.vals[s] = __dadd_rn(T.vals[s], w);
}

__device__ __forceinline__ double table_get(ConnTable& T, int key) {
    const i64 s = table_slot(T, key, false);
    return s < 0 ? 0.0 : T.vals[s];
}

// Number of slots to scan when listing the keys (packed prefix or whole hash table).
__device__ __forceinline__ i64 table_extent(const ConnTable& T) {
    return T.hashed ? T.cap : T.used;
}

__device__ __forceinline__ int group_key(i64 t, i64 b, i64 k, const i64* __restrict__ div) {
    return (int)(t * k + (unsigned)b / (unsigned)div[t]);  // 32-bit: see level_index
}

// A neighbour of u (CSR entries [lo, hi)) lies in another block than a = part[u];
// interior vertices have nowhere to go, so the proposal kernels skip them before any
// table work.
__device__ __forceinline__ bool on_boundary(i64 lo, i64 hi, const int* __restrict__ adjncy,
                                            const int* __restrict__ part, i64 a) {
    for (i64 e = lo; e < hi; ++e)
        if (part[adjncy[e]] != a) return true;
    return false;
}

// Sum the weights of u's CSR entries [lo, hi) into T by level group, in neighbour order.
__device__ __forceinline__ void table_fill(ConnTable& T, i64 lo, i64 hi,
                                          const int* __restrict__ adjncy,
                                          const int* __restrict__ part,
                                          const void* __restrict__ w, i64 w_int, i64 k,
                                          i64 nlev, const i64* __restrict__ div) {
    for (i64 e = lo; e < hi; ++e) {
        const i64 b = part[adjncy[e]];
        const double we = weight_at(w, w_int, e);
        for (i64 t = 0; t < nlev; ++t) table_add(T, group_key(t, b, k, div), we);
    }
}

// Gain of moving u from block a to the adjacent block b, whose level-0 entry is slot i:
// conn(b) - conn(a) in cut mode, else paper equation 1 through the group
// connectivities, sum_t delta[t] * (W_t(b) - W_t(a)) (the CPU's operation order).
__device__ __forceinline__ double move_gain(ConnTable& T, i64 i, i64 a, i64 b, double own,
                                            i64 cut_mode, i64 k, i64 nlev,
                                            const i64* __restrict__ div,
                                            const double* __restrict__ delta) {
    if (cut_mode) return __dsub_rn(T.vals[i], own);
    double g = 0.0;
    for (i64 t = 0; t < nlev; ++t) {
        const double wb = table_get(T, group_key(t, b, k, div));
        const double wa = table_get(T, group_key(t, a, k, div));
        g = __dadd_rn(g, __dmul_rn(delta[t], __dsub_rn(wb, wa)));
    }
    return g;
}

// ------------------------------------------------------------------ heavy rows
// A row is scanned by the one thread that holds its vertex, so a hub of a power-law
// graph (tens of thousands of neighbours) holds up its whole kernel, and with it every
// iteration of the refinement loop. Rows of more than HEAVY_DEGREE entries of integer
// weights are therefore scanned by all 32 lanes of the warp that holds the vertex, one
// such row after another, before each lane takes its own light row
// (WARP_GRID_STRIDE, warp_heavy_rows). The lanes sum into one table with atomics:
// sums of integers (as doubles, exact below 2^53) do not depend on the order, so the
// results are those of one thread, and the CPU's. Float sums would depend on the
// order: float-weighted rows stay with one thread.
#define HEAVY_DEGREE 512
#define WARP_ALL 0xffffffffu

// Grid-stride loop in which every lane of a warp runs the same number of iterations
// (launch geometry: whole warps), so that the warp can work together inside it; `i`
// may pass `count` (such a lane has no item). Used with warp_heavy_rows.
#define WARP_GRID_STRIDE(i, count)                                                        \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x,                             \
             i##_end = ((i64)(count) + 31) & ~(i64)31;                                    \
         i < i##_end; i += (i64)blockDim.x * gridDim.x)

// Whether a row of lo..hi with weights w goes to the whole warp.
__device__ __forceinline__ bool heavy_row(i64 lo, i64 hi, i64 w_int) {
    return w_int && hi - lo > HEAVY_DEGREE;
}

// Calls body(v) with all 32 lanes for the vertex v of every lane whose `heavy` is
// true, in lane order. Every lane of the warp must call it.
template <typename Body>
__device__ __forceinline__ void warp_heavy_rows(bool heavy, i64 u, Body body) {
    unsigned todo = __ballot_sync(WARP_ALL, heavy);
    while (todo) {
        const int src = __ffs(todo) - 1;
        todo &= todo - 1;
        body(__shfl_sync(WARP_ALL, u, src));
    }
}

// The warp's table of a heavy row at `begin` in global scratch, with room for `cap`
// keys (at most the scratch's deg * nlev), cleared by the lanes together.
__device__ __forceinline__ ConnTable warp_table_open(int* keys, double* vals, i64 begin,
                                                     i64 cap) {
    ConnTable T;
    T.keys = keys + begin;
    T.vals = vals + begin;
    T.cap = cap;
    T.used = 0;
    T.hashed = true;
    for (i64 s = threadIdx.x & 31; s < cap; s += 32) {
        T.keys[s] = -1;
        T.vals[s] = 0.0;
    }
    __syncwarp();
    return T;
}

// Atomic table_add for the lanes of one warp (integer-valued w: exact in any order).
__device__ __forceinline__ void warp_table_add(ConnTable& T, int key, double w) {
    i64 h = (i64)(mix64((u64)(unsigned)key) % (u64)T.cap);
    for (i64 step = 0; step < T.cap; ++step) {
        const int old = atomicCAS(&T.keys[h], -1, key);
        if (old == -1 || old == key) {
            atomicAdd(&T.vals[h], w);
            return;
        }
        h = (h + 1 == T.cap) ? 0 : h + 1;
    }
}

// Keys a lane sums privately before it adds them to the warp's table: atomics on the
// few keys of a hub (its adjacent blocks) would serialise the lanes.
#define LANE_KEYS 16

// The lanes of the warp fill T with the row lo..hi, as table_fill does alone: each
// lane sums its entries (lo + lane, lo + lane + 32, ...) by key, privately for its first
// LANE_KEYS keys, then adds its sums with atomics.
__device__ __forceinline__ void warp_table_fill(ConnTable& T, i64 lo, i64 hi,
                                               const int* __restrict__ adjncy,
                                               const int* __restrict__ part,
                                               const void* __restrict__ w, i64 w_int, i64 k,
                                               i64 nlev, const i64* __restrict__ div) {
    int lane_keys[LANE_KEYS];
    double lane_sums[LANE_KEYS];
    int used = 0;
    for (i64 e = lo + (threadIdx.x & 31); e < hi; e += 32) {
        const i64 b = part[adjncy[e]];
        const double we = weight_at(w, w_int, e);
        for (i64 t = 0; t < nlev; ++t) {
            const int key = group_key(t, b, k, div);
            int i = 0;
            while (i < used && lane_keys[i] != key) ++i;
            if (i < used) {
                lane_sums[i] += we;  // integers: exact
            } else if (used < LANE_KEYS) {
                lane_keys[used] = key;
                lane_sums[used++] = we;
            } else {
                warp_table_add(T, key, we);
            }
        }
    }
    for (int i = 0; i < used; ++i) warp_table_add(T, lane_keys[i], lane_sums[i]);
    __syncwarp();  // the lanes' atomics are seen by every lane after this
}

// Number of distinct keys a table of k blocks over nlev levels can hold:
// sum over t of the level-t groups, ceil(k / div[t]).
__device__ __forceinline__ i64 table_keys(i64 k, i64 nlev, const i64* __restrict__ div) {
    i64 keys = 0;
    for (i64 t = 0; t < nlev; ++t) keys += (k + div[t] - 1) / div[t];
    return keys;
}

// Best of two (gain, block) candidates: the larger gain, then the smaller block id
// (block -1: none), so that the winner does not depend on the order of comparison.
__device__ __forceinline__ void keep_best(i64& best_b, double& best_g, i64 b, double g) {
    if (b >= 0 && (best_b < 0 || g > best_g || (g == best_g && b < best_b))) {
        best_b = b;
        best_g = g;
    }
}

// The warp's best candidate: every lane brings its own, lane 0 ends with the winner.
__device__ __forceinline__ void warp_best(i64& best_b, double& best_g) {
    for (int off = 16; off > 0; off >>= 1) {
        const i64 b = __shfl_down_sync(WARP_ALL, best_b, off);
        const double g = __shfl_down_sync(WARP_ALL, best_g, off);
        keep_best(best_b, best_g, b, g);
    }
}
