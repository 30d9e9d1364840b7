// Jet refinement kernels: the CUDA twins of the label propagation and move
// application kernels of kernels/refinement/jet_cpu.py (_lp_propose, _lp_afterburn,
// _move_delta, _commit). See kernels/refinement/jet_gpu.py for what is bit-identical.
//
// Float arithmetic that feeds a decision uses __dadd_rn / __dmul_rn / __dsub_rn:
// NVRTC contracts a * b + c into a fused multiply-add by default, the CPU never
// does, and one rounding less is enough to flip a tie.
#include "common.cuh"
#include "conn_table.cuh"

// ------------------------------------------------------------------ LP: boundary list
// An LP round starts here: every vertex's proposal and move are reset (dest = -1,
// move = 0, target = -1; gain[u] is read only where dest[u] >= 0, so it is left as it
// is: 8 bytes per vertex less to write), and the unlocked boundary vertices -- the only ones
// with somewhere to go -- are appended to list[0 .. *count) (*count zeroed by the
// caller). The proposal and afterburner kernels then run over the list alone, so a
// warp's threads all do table work instead of idling beside one boundary vertex
// (measured on an H100, grid2d_8M with 2% boundary vertices: the round took twice as
// long over all vertices). The list's order (warp_append) does not matter: every
// listed vertex's result depends only on the round's inputs.
extern "C" __global__ void lp_boundary(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                       const int* __restrict__ part,
                                       const unsigned char* __restrict__ locked, i64 n,
                                       int* __restrict__ dest,
                                       unsigned char* __restrict__ move, int* __restrict__ target,
                                       int* __restrict__ list, unsigned long long* __restrict__ count,
                                       const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    GRID_STRIDE(u, n) {
        dest[u] = -1;
        move[u] = 0;
        target[u] = -1;
        const bool listed = !locked[u] && on_boundary(xadj[u], xadj[u + 1], adjncy, part, part[u]);
        warp_append(listed, (int)u, list, count);
    }
}

// ------------------------------------------------------------------ LP: first filter
// The proposal of u from its best adjacent block (best_b, -1: none) and gain: kept when
// the gain is >= 0, or in cut mode when the loss is below the filter ratio times the
// connection to its own block.
__device__ __forceinline__ void propose_write(i64 u, i64 best_b, double best_g, double own,
                                              i64 cut_mode,
                                              const double* __restrict__ filter_ratio,
                                              int* __restrict__ dest, double* __restrict__ gain) {
    if (best_b < 0) return;
    bool ok = best_g >= 0.0;
    if (cut_mode && !ok) ok = -best_g < floor(__dmul_rn(*filter_ratio, own));
    if (ok) {
        dest[u] = (int)best_b;
        gain[u] = best_g;
    }
}

// Twin of jet_cpu._lp_propose: best adjacent block of every listed (unlocked boundary)
// vertex. div[t] = P_t (P_0 = 1), delta[t] = d_{t+1} - d_t; nlev = 1 in cut mode. The
// filter ratio is read from device memory, so one captured graph serves every ratio of
// Jet's ultra schedule. Writes dest[u] (-1: no candidate) and gain[u] of listed u.
// Rows of integer weights above HEAVY_DEGREE go to the whole warp (conn_table.cuh).
extern "C" __global__ void lp_propose(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                      const void* __restrict__ w, i64 w_int,
                                      const int* __restrict__ part,
                                      const i64* __restrict__ div, const double* __restrict__ delta,
                                      i64 k, i64 nlev, i64 cut_mode,
                                      const double* __restrict__ filter_ratio,
                                      const i64* __restrict__ spill, int* __restrict__ keys,
                                      double* __restrict__ vals,
                                      int* __restrict__ dest, double* __restrict__ gain,
                                      const int* __restrict__ list,
                                      const unsigned long long* __restrict__ count,
                                      const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const i64 listed = (i64)*count;
    WARP_GRID_STRIDE(i, listed) {
        const i64 u = i < listed ? list[i] : -1;
        const i64 lo = u < 0 ? 0 : xadj[u], hi = u < 0 ? 0 : xadj[u + 1];
        const bool heavy = u >= 0 && heavy_row(lo, hi, w_int);
        warp_heavy_rows(heavy, u, [&](i64 v) {
            // the warp's table holds at most the keys that exist (a hub meets few blocks)
            const i64 vlo = xadj[v], vhi = xadj[v + 1];
            const i64 cap = min((vhi - vlo) * nlev, table_keys(k, nlev, div));
            ConnTable T = warp_table_open(keys, vals, spill[v], cap);
            warp_table_fill(T, vlo, vhi, adjncy, part, w, w_int, k, nlev, div);
            const i64 a = part[v];
            i64 best_b = -1;
            double best_g = 0.0;
            const double own = table_get(T, (int)a);
            for (i64 s = threadIdx.x & 31; s < cap; s += 32) {
                const int key = T.keys[s];
                if (key < 0 || key >= k || key == a) continue;
                keep_best(best_b, best_g, key,
                          move_gain(T, s, a, key, own, cut_mode, k, nlev, div, delta));
            }
            warp_best(best_b, best_g);
            if ((threadIdx.x & 31) == 0)
                propose_write(v, best_b, best_g, own, cut_mode, filter_ratio, dest, gain);
        });
        if (u < 0 || heavy) continue;
        const i64 a = part[u];

        int local_keys[LOCAL_TABLE];
        double local_vals[LOCAL_TABLE];
        const i64 cap = (hi - lo) * nlev;
        ConnTable T = spill[u] < 0 ? table_open(local_keys, local_vals, 0, cap)
                                   : table_open(keys, vals, spill[u], cap);
        table_fill(T, lo, hi, adjncy, part, w, w_int, k, nlev, div);
        const double own = table_get(T, (int)a);
        i64 best_b = -1;
        double best_g = 0.0;
        // level-0 keys (< k) are exactly the adjacent blocks; the winner (largest gain,
        // then smallest id) does not depend on the order they are listed in
        const i64 extent = table_extent(T);
        for (i64 s = 0; s < extent; ++s) {
            const int key = T.keys[s];
            if (key < 0 || key >= k || key == a) continue;
            keep_best(best_b, best_g, key,
                      move_gain(T, s, a, key, own, cut_mode, k, nlev, div, delta));
        }
        propose_write(u, best_b, best_g, own, cut_mode, filter_ratio, dest, gain);
    }
}

// ------------------------------------------------------------------ LP: afterburner
// What CSR entry e of candidate u (moving from a to b, first-filter gain gu) adds to its
// afterburner gain: neighbour v counts in the block it moves to when it is a candidate
// of higher priority (larger gain; equal gain and smaller id), else in its own.
__device__ __forceinline__ double afterburn_term(i64 e, i64 u, i64 a, i64 b, double gu,
                                                 const int* __restrict__ adjncy,
                                                 const void* __restrict__ w, i64 w_int,
                                                 const int* __restrict__ part,
                                                 const i64* __restrict__ prefix,
                                                 const double* __restrict__ dist, i64 cut_mode,
                                                 const int* __restrict__ dest,
                                                 const double* __restrict__ gain) {
    const i64 v = adjncy[e];
    i64 cv = part[v];
    const i64 dv = dest[v];
    if (dv >= 0 && (gain[v] > gu || (gain[v] == gu && v < u))) cv = dv;
    const double we = weight_at(w, w_int, e);
    if (cut_mode) return cv == b ? we : (cv == a ? -we : 0.0);
    return __dmul_rn(we, __dsub_rn(distance(a, cv, prefix, dist), distance(b, cv, prefix, dist)));
}

// Twin of jet_cpu._lp_afterburn: candidate u re-evaluates its gain assuming every
// candidate neighbour of higher priority (larger gain; equal gain and smaller id)
// already moved; it moves when that gain is >= 0. Candidates are listed vertices with
// dest[u] >= 0; a moving one gets move[u] = 1 and target[u] = dest[u] (lp_boundary
// reset both for every vertex). Rows of integer weights above HEAVY_DEGREE go to the
// whole warp (conn_table.cuh).
extern "C" __global__ void lp_afterburn(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                        const void* __restrict__ w, i64 w_int,
                                        const int* __restrict__ part,
                                        const i64* __restrict__ prefix,
                                        const double* __restrict__ dist, i64 cut_mode,
                                        const int* __restrict__ dest,
                                        const double* __restrict__ gain,
                                        unsigned char* __restrict__ move,
                                        int* __restrict__ target,
                                        const int* __restrict__ list,
                                        const unsigned long long* __restrict__ count,
                                        const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    const i64 listed = (i64)*count;
    WARP_GRID_STRIDE(i, listed) {
        const i64 u = i < listed ? list[i] : -1;
        const bool candidate = u >= 0 && dest[u] >= 0;
        const bool heavy = candidate && heavy_row(xadj[u], xadj[u + 1], w_int);
        warp_heavy_rows(heavy, u, [&](i64 v) {
            // lanes sum strided entries, then a fixed reduction tree: integer terms (cut
            // mode, or integer distances) give exactly the one-thread sum
            const i64 b = dest[v], a = part[v];
            const double gv = gain[v];
            double g2 = 0.0;
            for (i64 e = xadj[v] + (threadIdx.x & 31); e < xadj[v + 1]; e += 32)
                g2 = __dadd_rn(g2, afterburn_term(e, v, a, b, gv, adjncy, w, w_int, part,
                                                  prefix, dist, cut_mode, dest, gain));
            for (int off = 16; off > 0; off >>= 1)
                g2 = __dadd_rn(g2, __shfl_down_sync(WARP_ALL, g2, off));
            if ((threadIdx.x & 31) == 0 && g2 >= 0.0) {
                move[v] = 1;
                target[v] = (int)b;
            }
        });
        if (!candidate || heavy) continue;
        const i64 b = dest[u];
        const i64 a = part[u];
        const double gu = gain[u];
        double g2 = 0.0;
        for (i64 e = xadj[u]; e < xadj[u + 1]; ++e)
            g2 = __dadd_rn(g2, afterburn_term(e, u, a, b, gu, adjncy, w, w_int, part, prefix,
                                              dist, cut_mode, dest, gain));
        if (g2 >= 0.0) {
            move[u] = 1;
            target[u] = (int)b;
        }
    }
}

// ------------------------------------------------------------------ applying moves
// Twin of jet_cpu._move_delta over all vertices (target[u] >= 0 marks a move): the
// traffic change per level of executing all moves at once. A pair with one moving
// end is seen only from that end (factor 2), one with two moving ends from each.
// Row sums as in objective.cu: out[lev * rows + r], zeroed by the caller; thread r
// sums the vertices r, r + rows, ... With integer weights (HEAVY), a moving vertex of
// more than HEAVY_DEGREE neighbours is scanned by its whole warp, which adds into the
// vertex's row with integer atomics (exact in any order).
template <typename W>
__device__ __forceinline__ void move_delta_entry(i64 e, i64 a, i64 b,
                                                 const int* __restrict__ adjncy,
                                                 const W* __restrict__ adjwgt,
                                                 const int* __restrict__ part,
                                                 const i64* __restrict__ prefix,
                                                 const int* __restrict__ target, i64& lev_old,
                                                 i64& lev_new, W& wf) {
    const i64 v = adjncy[e];
    const i64 old_v = part[v];
    i64 new_v = old_v;
    W f = 2;
    if (target[v] >= 0) {
        new_v = target[v];
        f = 1;
    }
    wf = adjwgt[e] * f;  // exact: f is 1 or 2
    lev_old = pair_level(a, old_v, prefix);
    lev_new = pair_level(b, new_v, prefix);
}

#define DELTA_LEVELS 8  // levels a lane sums privately in the warp's scan of a heavy row

template <typename W, bool HEAVY>
__device__ void move_delta_rows(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                const W* __restrict__ adjwgt, const int* __restrict__ part,
                                const i64* __restrict__ prefix, const int* __restrict__ target,
                                i64 n, i64 rows, W* __restrict__ out) {
    WARP_GRID_STRIDE(r, rows) {
        for (i64 u = r;; u += rows) {
            const bool valid = r < rows && u < n;
            if (!__any_sync(WARP_ALL, valid)) break;
            const i64 b = valid ? target[u] : -1;
            const bool heavy = HEAVY && b >= 0 && xadj[u + 1] - xadj[u] > HEAVY_DEGREE;
            warp_heavy_rows(heavy, u, [&](i64 x) {
                const i64 bx = target[x], ax = part[x], rx = x % rows;
                i64 acc[DELTA_LEVELS] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (i64 e = xadj[x] + (threadIdx.x & 31); e < xadj[x + 1]; e += 32) {
                    i64 lo_, ln_;
                    W wf;
                    move_delta_entry<W>(e, ax, bx, adjncy, adjwgt, part, prefix, target, lo_,
                                        ln_, wf);
                    if (lo_ == ln_) continue;
                    const i64 wi = (i64)wf;
                    if (lo_ < DELTA_LEVELS) acc[lo_] -= wi;
                    else atomicAdd((u64*)&out[lo_ * rows + rx], (u64)(-wi));
                    if (ln_ < DELTA_LEVELS) acc[ln_] += wi;
                    else atomicAdd((u64*)&out[ln_ * rows + rx], (u64)wi);
                }
                for (int l = 0; l < DELTA_LEVELS; ++l)
                    if (acc[l] != 0) atomicAdd((u64*)&out[l * rows + rx], (u64)acc[l]);
                __syncwarp();  // before the row's own thread adds to it again
            });
            if (b < 0 || heavy) continue;
            const i64 a = part[u];
            for (i64 e = xadj[u]; e < xadj[u + 1]; ++e) {
                i64 lev_old, lev_new;
                W wf;
                move_delta_entry<W>(e, a, b, adjncy, adjwgt, part, prefix, target, lev_old,
                                    lev_new, wf);
                if (lev_old != lev_new) {
                    out[lev_old * rows + r] -= wf;
                    out[lev_new * rows + r] += wf;
                }
            }
        }
    }
}

extern "C" __global__ void move_delta_i64(const i64* xadj, const int* adjncy, const i64* adjwgt,
                                          const int* part, const i64* prefix, const int* target,
                                          i64 n, i64 rows, i64* out) {
    move_delta_rows<i64, true>(xadj, adjncy, adjwgt, part, prefix, target, n, rows, out);
}

extern "C" __global__ void move_delta_f64(const i64* xadj, const int* adjncy, const double* adjwgt,
                                          const int* part, const i64* prefix, const int* target,
                                          i64 n, i64 rows, double* out) {
    move_delta_rows<double, false>(xadj, adjncy, adjwgt, part, prefix, target, n, rows, out);
}

// Twin of jet_cpu._commit: move every u with target[u] >= 0, update the block
// weights (integer atomics: exact; per thread block in shared memory first, see
// SHARED_BINS: a weak step moves thousands of vertices out of one block) and count the
// moves in *count (one atomic per warp); resets target to -1 so the buffer is ready
// for the next round.
extern "C" __global__ void commit_moves(int* __restrict__ part, int* __restrict__ target,
                                        const i64* __restrict__ vwgt, i64 n, i64 k, i64* bw,
                                        i64* count) {
    __shared__ i64 local[SHARED_BINS];
    const bool shared = shared_bins_begin(local, k);
    i64 moved = 0;
    GRID_STRIDE(u, n) {
        const int b = target[u];
        if (b < 0) continue;
        const i64 wu = vwgt[u];
        bin_add(local, shared, bw, part[u], -wu);
        bin_add(local, shared, bw, b, wu);
        part[u] = b;
        target[u] = -1;
        ++moved;
    }
    shared_bins_end(local, shared, bw, k);
    for (int d = 16; d > 0; d >>= 1) moved += __shfl_down_sync(0xffffffffu, moved, d);
    if ((threadIdx.x & 31) == 0 && moved) atomicAdd((u64*)count, (u64)moved);
}
