// Independent-set refinement (G-kway): the CUDA kernels of kernels/refinement/isr_gpu.py, twins of
// isr_propose, isr_independent and isr_prefix_fit in kernels/refinement/jet_cpu.py. The sorts and
// prefix sums between them are CuPy calls. All launches cover n, 2n or k items (never a
// data-dependent count), and every kernel is a grid-stride loop.
//
// In the refinement loop (jet_gpu._Refiner) an ISR step is the balanced round: every
// kernel takes the loop's control block as `gate` and skips itself unless the block
// names a balanced round (MODE_LP; gate == nullptr: always run, for calls outside the
// loop), and the step number behind the hash key is read from device memory.
//
// Float arithmetic that feeds a decision uses __dadd_rn / __dmul_rn / __dsub_rn: NVRTC
// would contract a * b + c into a fused multiply-add, the CPU never does, and one
// rounding less is enough to flip a comparison.
#include "common.cuh"
#include "conn_table.cuh"

#define LLONG_MAX_ 0x7FFFFFFFFFFFFFFFLL

// ------------------------------------------------------------------ step 1: candidates
// Twin of jet_cpu.isr_propose: best legal destination (gain > 0, vwgt[u] + bw[dst] <=
// lmax; largest gain, then smallest block) of every boundary vertex. div[t] = P_t
// (P_0 = 1), delta[t] = d_{t+1} - d_t; nlev = 1 in cut mode. Writes dest (-1: none), gain.
extern "C" __global__ void isr_propose(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                       const void* __restrict__ w, i64 w_int,
                                       const i64* __restrict__ vwgt,
                                       const int* __restrict__ part, const i64* __restrict__ bw,
                                       i64 lmax, const i64* __restrict__ div,
                                       const double* __restrict__ delta, i64 n, i64 k, i64 nlev,
                                       i64 cut_mode, const i64* __restrict__ spill,
                                       int* __restrict__ keys, double* __restrict__ vals,
                                       int* __restrict__ dest,
                                       double* __restrict__ gain,
                                       const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    GRID_STRIDE(u, n) {
        dest[u] = -1;
        gain[u] = 0.0;
        const i64 a = part[u];
        const i64 lo = xadj[u], hi = xadj[u + 1];
        if (!on_boundary(lo, hi, adjncy, part, a)) continue;

        int local_keys[LOCAL_TABLE];
        double local_vals[LOCAL_TABLE];
        const i64 cap = (hi - lo) * nlev;
        ConnTable T = spill[u] < 0 ? table_open(local_keys, local_vals, 0, cap)
                                   : table_open(keys, vals, spill[u], cap);
        table_fill(T, lo, hi, adjncy, part, w, w_int, k, nlev, div);
        const double own = table_get(T, (int)a);
        const i64 room = lmax - vwgt[u];
        i64 best_b = -1;
        double best_g = 0.0;
        // level-0 keys (< k) are the adjacent blocks; the winner does not depend on the
        // order in which the table lists them
        const i64 extent = table_extent(T);
        for (i64 i = 0; i < extent; ++i) {
            const int key = T.keys[i];
            if (key < 0 || key >= k || key == a || bw[key] > room) continue;
            const i64 b = key;
            const double g = move_gain(T, i, a, b, own, cut_mode, k, nlev, div, delta);
            if (g > 0.0 && (best_b < 0 || g > best_g || (g == best_g && b < best_b))) {
                best_b = b;
                best_g = g;
            }
        }
        if (best_b >= 0) {
            dest[u] = (int)best_b;
            gain[u] = best_g;
        }
    }
}

// ------------------------------------------------------------------ step 2: independent set
// Twin of isr_cpu.step_key: the hash key of ISR step `step` from the seed's key
// (common_cpu.seed_key), in wrapping 64-bit arithmetic as the host's masked Python ints.
__device__ __forceinline__ u64 isr_step_key(u64 seed_key, i64 step) {
    return mix64(seed_key + 0x9E3779B97F4A7C15ULL * (u64)(step + 1));
}

// Twin of jet_cpu.isr_independent: a candidate is selected when its priority (larger
// gain, then larger mix64(id ^ key)) beats every candidate neighbour, key =
// isr_step_key(seed_key, *step). Reads only dest and gain, so the result does not depend
// on thread scheduling.
extern "C" __global__ void isr_independent(const i64* __restrict__ xadj,
                                           const int* __restrict__ adjncy,
                                           const int* __restrict__ dest,
                                           const double* __restrict__ gain, u64 seed_key,
                                           const i64* __restrict__ step, i64 n,
                                           unsigned char* __restrict__ sel,
                                           const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const u64 key = isr_step_key(seed_key, *step);
    GRID_STRIDE(u, n) {
        sel[u] = 0;
        if (dest[u] < 0) continue;
        const double gu = gain[u];
        const u64 hu = mix64((u64)u ^ key);
        bool wins = true;
        for (i64 e = xadj[u]; e < xadj[u + 1] && wins; ++e) {
            const i64 v = adjncy[e];
            if (v == u || dest[v] < 0) continue;
            const double gv = gain[v];
            wins = !(gv > gu || (gv == gu && mix64((u64)v ^ key) > hu));
        }
        if (wins) sel[u] = 1;
    }
}

// ------------------------------------------------------------------ step 3: selection
// Sort key of every vertex: selected ones by gain descending (the bits of a positive
// double order like its value), the rest last. A stable argsort of these keys over the
// ids 0..n-1 gives the CPU's (gain desc, id asc) order.
extern "C" __global__ void isr_sort_keys(const unsigned char* __restrict__ sel,
                                         const double* __restrict__ gain, i64 n,
                                         i64* __restrict__ skey, const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    GRID_STRIDE(u, n) {
        skey[u] = sel[u] ? -__double_as_longlong(gain[u]) : LLONG_MAX_;
    }
}

// Two balance events per move position j (order[j] = the j-th vertex in selection
// order): event 2j leaves the source block, 2j+1 enters the destination. Event i of
// block b gets the unique key b * 2n + i; positions past the last move get block k.
extern "C" __global__ void isr_events(const i64* __restrict__ order,
                                      const unsigned char* __restrict__ sel,
                                      const int* __restrict__ part, const int* __restrict__ dest,
                                      i64 n, i64 k, i64* __restrict__ ekey,
                                      const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const i64 E = 2 * n;
    GRID_STRIDE(j, n) {
        const i64 u = order[j];
        const bool real = sel[u] != 0;
        ekey[2 * j] = (real ? (i64)part[u] : k) * E + 2 * j;
        ekey[2 * j + 1] = (real ? (i64)dest[u] : k) * E + 2 * j + 1;
    }
}

// Over the sorted event keys: the weight change of each event (0 for padding) and the
// first position of each block's run (seg_start, -1 beforehand: blocks without events
// keep -1).
extern "C" __global__ void isr_event_deltas(const i64* __restrict__ skeys,
                                            const i64* __restrict__ order,
                                            const i64* __restrict__ vwgt, i64 n, i64 k,
                                            i64* __restrict__ sdelta, i64* __restrict__ seg_start,
                                            const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const i64 E = 2 * n;
    GRID_STRIDE(i, E) {
        const i64 b = skeys[i] / E;
        if (b == k) {
            sdelta[i] = 0;
            continue;
        }
        const i64 ev = skeys[i] % E;
        const i64 x = vwgt[order[ev / 2]];
        sdelta[i] = (ev & 1) ? x : -x;
        if (i == 0 || skeys[i - 1] / E != b) seg_start[b] = i;
    }
}

__device__ __forceinline__ void add_interval(i64* diff, i64 lo, i64 hi) {
    atomicAdd((u64*)&diff[lo], 1ULL);
    atomicAdd((u64*)&diff[hi], (u64)0 - 1ULL);  // two's complement: subtracts 1
}

// Infeasible prefixes. Block b weighs bw[b] + (its deltas up to event i) from the move of
// event i up to (excluding) the move of its next event, or to the end. Every such stretch
// above lmax adds +1 on [start, end) to the difference array diff (n + 1 entries, zeroed
// by the caller), as does the stretch before the first event of a block that starts
// overloaded. cs: inclusive cumsum of sdelta.
extern "C" __global__ void isr_violations(const i64* __restrict__ skeys,
                                          const i64* __restrict__ sdelta,
                                          const i64* __restrict__ cs,
                                          const i64* __restrict__ seg_start,
                                          const i64* __restrict__ bw, i64 lmax, i64 n, i64 k,
                                          i64* __restrict__ diff, const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const i64 E = 2 * n;
    GRID_STRIDE(i, E) {
        const i64 b = skeys[i] / E;
        if (b == k) continue;
        const i64 j = (skeys[i] % E) / 2;
        const i64 f = seg_start[b];
        if (i == f && bw[b] > lmax && j > 0) add_interval(diff, 0, j);
        const i64 weight = bw[b] + (cs[i] - cs[f] + sdelta[f]);
        if (weight <= lmax) continue;
        const bool more = i + 1 < E && skeys[i + 1] / E == b;
        add_interval(diff, j, more ? (skeys[i + 1] % E) / 2 : n);
    }
}

// Overloaded blocks without any event make every prefix infeasible.
extern "C" __global__ void isr_idle_overload(const i64* __restrict__ seg_start,
                                             const i64* __restrict__ bw, i64 lmax, i64 n, i64 k,
                                             i64* __restrict__ diff, const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    GRID_STRIDE(b, k) {
        if (seg_start[b] < 0 && bw[b] > lmax) add_interval(diff, 0, n);
    }
}

// jstar[0] = 1 + the largest move position j with no infeasibility (cnt: inclusive
// cumsum of diff), 0 when none: an order-independent atomic maximum.
extern "C" __global__ void isr_last_feasible(const i64* __restrict__ order,
                                             const unsigned char* __restrict__ sel,
                                             const i64* __restrict__ cnt, i64 n,
                                             u64* __restrict__ jstar,
                                             const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    GRID_STRIDE(j, n) {
        if (sel[order[j]] && cnt[j] == 0) atomicMax(jstar, (u64)(j + 1));
    }
}

// Mark the selected prefix for jet.cu's move_delta / commit_moves: target[u] = dest[u].
extern "C" __global__ void isr_mark_targets(const i64* __restrict__ order,
                                            const int* __restrict__ dest,
                                            const u64* __restrict__ jstar, i64 n,
                                            int* __restrict__ target,
                                            const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const i64 m = (i64)jstar[0];
    GRID_STRIDE(j, m) {
        const i64 u = order[j];
        target[u] = dest[u];
    }
}
