// Swap refinement for rank placement: the kernels of one parallel round of
// kernels/refinement/swap_gpu.py (the GPU twin of kernels/refinement/swap_cpu.py).
//
// A round is: task_costs -> propose -> mark_actions -> select_actions -> (host:
// free-slot limit) -> apply_actions. Every kernel is one thread per task (or per
// selected action) with a grid-stride loop; nothing depends on thread scheduling:
// the only atomics are integer atomicMax calls, whose result is order-independent.
//
// Float arithmetic that feeds a decision uses __dadd_rn / __dsub_rn / __dmul_rn:
// NVRTC contracts a * b + c into a fused multiply-add by default, the CPU twin never
// does, and the gains below must match the CPU's formula operation by operation.
#include "common.cuh"

// ------------------------------------------------------------------ gains
// sum_w C_uw D(q, pe[w]) with every neighbour where it is now (swap_cpu._cost_at,
// same summation order).
__device__ double cost_at(i64 u, i64 q, const i64* __restrict__ xadj,
                          const int* __restrict__ adjncy, const double* __restrict__ w,
                          const int* __restrict__ pe, const i64* __restrict__ prefix,
                          const double* __restrict__ dist) {
    double c = 0.0;
    for (i64 e = xadj[u]; e < xadj[u + 1]; ++e)
        c = __dadd_rn(c, __dmul_rn(w[e], distance(q, pe[adjncy[e]], prefix, dist)));
    return c;
}

// C_uv (0 when u and v are not adjacent); rows are sorted, so binary search.
__device__ double edge_weight(i64 u, i64 v, const i64* __restrict__ xadj,
                              const int* __restrict__ adjncy, const double* __restrict__ w) {
    i64 lo = xadj[u], hi = xadj[u + 1];
    while (lo < hi) {
        const i64 mid = (lo + hi) >> 1;
        if (adjncy[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return (lo < xadj[u + 1] && adjncy[lo] == v) ? w[lo] : 0.0;
}

// True when an earlier entry of u's row already has its neighbour on PE q: every
// candidate PE is evaluated once (the CPU twin's `seen` array; a thread has no k-sized
// scratch, and this scan costs no more than the cost_at call it saves).
__device__ bool seen_before(i64 q, i64 e, i64 row_begin, const int* __restrict__ adjncy,
                            const int* __restrict__ pe) {
    for (i64 f = row_begin; f < e; ++f)
        if (pe[adjncy[f]] == q) return true;
    return false;
}

// Best action so far; ties (equal gain) go to the smaller PE, then to the free-slot
// move (v = -1), then to the smaller partner, so the winner does not depend on the
// order in which the candidates are listed.
struct Best {
    double gain;
    i64 q;
    i64 v;
};

__device__ __forceinline__ void consider(Best& b, double g, i64 q, i64 v) {
    if (g > b.gain || (b.q >= 0 && g == b.gain && (q < b.q || (q == b.q && v < b.v)))) {
        b.gain = g;
        b.q = q;
        b.v = v;
    }
}

// base[u] = cost_at(u, pe[u]) for every task: computed once per round, it is the
// "cost_at(v, q)" term of every swap with v.
extern "C" __global__ void task_costs(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                      const double* __restrict__ w, const int* __restrict__ pe,
                                      const i64* __restrict__ prefix,
                                      const double* __restrict__ dist, i64 n,
                                      double* __restrict__ base) {
    GRID_STRIDE(u, n) { base[u] = cost_at(u, pe[u], xadj, adjncy, w, pe, prefix, dist); }
}

// ------------------------------------------------------------------ proposals
// The best single action of every task u that is not done in this pass, exactly as
// the CPU twin evaluates it for u against the current placement: move to a free slot
// of a candidate PE q (free_slots[q] > 0), or swap with a task v on q (tasks on q:
// tasks[tstart[q] .. tstart[q + 1])); candidate PEs are the PEs of u's neighbours.
// Only gains > min_gain count. Writes dest[u] (-1: none), partner[u] (-1: free-slot
// move) and gain[u] for every u.
extern "C" __global__ void propose(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                   const double* __restrict__ w, const int* __restrict__ pe,
                                   const i64* __restrict__ prefix, const double* __restrict__ dist,
                                   const i64* __restrict__ tstart, const int* __restrict__ tasks,
                                   const i64* __restrict__ free_slots,
                                   const double* __restrict__ base,
                                   const unsigned char* __restrict__ done, i64 n, double min_gain,
                                   double* __restrict__ gain, int* __restrict__ dest,
                                   int* __restrict__ partner) {
    GRID_STRIDE(u, n) {
        dest[u] = -1;
        partner[u] = -1;
        gain[u] = 0.0;
        const double base_u = base[u];
        if (done[u] || base_u == 0.0) continue;  // all neighbours on u's PE: nothing to gain
        const i64 p = pe[u];
        Best best = {min_gain, -1, -1};
        const i64 lo = xadj[u], hi = xadj[u + 1];
        for (i64 e = lo; e < hi; ++e) {
            const i64 q = pe[adjncy[e]];
            if (q == p || seen_before(q, e, lo, adjncy, pe)) continue;
            const double gain_u =
                __dsub_rn(base_u, cost_at(u, q, xadj, adjncy, w, pe, prefix, dist));
            if (free_slots[q] > 0) consider(best, gain_u, q, -1);
            const double d_pq = distance(p, q, prefix, dist);
            for (i64 s = tstart[q]; s < tstart[q + 1]; ++s) {
                const i64 v = tasks[s];
                const double c_uv = edge_weight(u, v, xadj, adjncy, w);
                const double gain_v =
                    __dsub_rn(base[v], cost_at(v, p, xadj, adjncy, w, pe, prefix, dist));
                // u and v keep their mutual distance: the two cost_at terms that saw the
                // partner in place counted 0 for the (u, v) edge
                const double g = __dsub_rn(__dadd_rn(gain_u, gain_v),
                                           __dmul_rn(__dmul_rn(2.0, c_uv), d_pq));
                consider(best, g, q, v);
            }
        }
        if (best.q >= 0) {
            dest[u] = (int)best.q;
            partner[u] = (int)best.v;
            gain[u] = best.gain;
        }
    }
}

// ------------------------------------------------------------------ selection
// A bijection of 32-bit words keyed by `salt` (xor, multiplications by odd constants
// and xor-shifts are each invertible): distinct tasks get distinct tie-breakers, and
// a fresh salt per round reshuffles them, so chains of equal gains do not serialise.
__device__ __forceinline__ unsigned tie_hash(unsigned x, unsigned salt) {
    x ^= salt;
    x *= 0x9E3779B1u;
    x ^= x >> 16;
    x *= 0x85EBCA77u;
    x ^= x >> 13;
    return x;
}

// Priority of u's action: the top 32 bits of the gain's order-preserving bit pattern
// (sign, exponent, 20 mantissa bits: gains within ~1e-6 relative tie), then the
// tie hash of u. Unique per task, so at most one action wins any comparison.
__device__ __forceinline__ u64 action_key(double g, i64 u, u64 salt) {
    u64 b = (u64)__double_as_longlong(g);
    b = (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
    return (b & 0xFFFFFFFF00000000ULL) | (u64)tie_hash((unsigned)u, (unsigned)mix64(salt));
}

// key[u] for every proposer, and mark[x] = max key of the actions that move task x
// (as proposer or as swap partner). mark must be zero on entry.
extern "C" __global__ void mark_actions(const double* __restrict__ gain, const int* __restrict__ dest,
                                        const int* __restrict__ partner, i64 n, u64 salt,
                                        u64* __restrict__ key, u64* mark) {
    GRID_STRIDE(u, n) {
        if (dest[u] < 0) continue;
        const u64 k = action_key(gain[u], u, salt);
        key[u] = k;
        atomicMax(&mark[u], k);
        const int v = partner[u];
        if (v >= 0) atomicMax(&mark[v], k);
    }
}

// True when no task of x's closed neighbourhood is moved by an action of higher
// priority than k.
__device__ bool dominates(i64 x, u64 k, const i64* __restrict__ xadj,
                          const int* __restrict__ adjncy, const u64* __restrict__ mark) {
    if (mark[x] > k) return false;
    for (i64 e = xadj[x]; e < xadj[x + 1]; ++e)
        if (mark[adjncy[e]] > k) return false;
    return true;
}

// Local-maximum rule: u's action (tasks T = {u} or {u, v}) is selected when no other
// action that moves a task of T or of T's neighbourhood has a higher key. Two selected
// actions therefore never share a task and never move adjacent tasks, so every gain,
// computed against the round's starting placement, stays exact when all are applied.
// The highest key of all is always selected: a round with a proposal makes progress.
extern "C" __global__ void select_actions(const i64* __restrict__ xadj,
                                          const int* __restrict__ adjncy,
                                          const int* __restrict__ dest,
                                          const int* __restrict__ partner,
                                          const u64* __restrict__ key,
                                          const u64* __restrict__ mark, i64 n,
                                          unsigned char* __restrict__ flag) {
    GRID_STRIDE(u, n) {
        flag[u] = 0;
        if (dest[u] < 0) continue;
        const u64 k = key[u];
        const int v = partner[u];
        bool ok = dominates(u, k, xadj, adjncy, mark);
        if (ok && v >= 0) ok = dominates(v, k, xadj, adjncy, mark);
        flag[u] = ok ? 1 : 0;
    }
}

// ------------------------------------------------------------------ applying
// Execute the selected actions sel[0 .. count): u goes to dest[u], its partner (if
// any) to u's old PE; u is done for the rest of the pass. The actions move disjoint
// tasks, so no thread reads a PE another thread writes.
extern "C" __global__ void apply_actions(const i64* __restrict__ sel, i64 count,
                                         const int* __restrict__ dest,
                                         const int* __restrict__ partner, int* __restrict__ pe,
                                         unsigned char* __restrict__ done) {
    GRID_STRIDE(i, count) {
        const i64 u = sel[i];
        const int p = pe[u];
        const int v = partner[u];
        if (v >= 0) pe[v] = p;
        pe[u] = dest[u];
        done[u] = 1;
    }
}
