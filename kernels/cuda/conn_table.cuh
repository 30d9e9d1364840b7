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
