// Jet rebalancing (weak and strong): the per-vertex kernels of kernels/rebalancing/rebalance_gpu.py,
// twins of rebalance_propose (and the block-weight / room bookkeeping) in rebalance_cpu.py.
// Outside the captured Jet loop the selection and assignment steps are sorts and prefix
// sums done with CuPy; the loop's weak step selects with its own kernels (below).
#include "common.cuh"
#include "conn_table.cuh"

// Gain bucket of a rebalancing move, bit-identical to rebalance_cpu.gain_bucket.
// Positive gain -> 0, zero gain -> 1, a loss x = -gain / max(w, 1) -> 2 + the number of
// thresholds below x. thr[j] (j = 0 .. nthr-1) is the largest double whose CPU bucket is
// <= j + 2 (tabulated on the host from the CPU function itself), so the host's libm log
// decides every boundary: CUDA's log() may differ from it by an ulp, which would move
// exact powers of 1.5 (losses like 3/2) into the next bucket.
__device__ __forceinline__ int gain_bucket(double gain, i64 w, const double* __restrict__ thr,
                                           int nthr) {
    if (gain > 0.0) return 0;
    if (gain == 0.0) return 1;
    double x = -gain / (double)(w > 1 ? w : 1);
    int b = 2;
    for (int j = 0; j < nthr; ++j) b += x > thr[j] ? 1 : 0;
    return b;
}

// Block of the level group nearest to block a that holds a destination block
// (dest_ok), picked by a hash of (u, seed); -1 when no block anywhere qualifies.
__device__ __forceinline__ int fallback_block(i64 u, int a, const i64* __restrict__ prefix,
                                              i64 nlev, const i64* __restrict__ valid_cum,
                                              const int* __restrict__ valid_ids, u64 seed_key) {
    for (i64 t = 0; t < nlev; ++t) {
        i64 size = prefix[t];
        i64 glo = ((i64)a / size) * size;
        i64 cnt = valid_cum[glo + size] - valid_cum[glo];
        if (cnt > 0) {
            u64 h = mix64((u64)u ^ seed_key);
            i64 j = (i64)(h % (u64)cnt);
            return valid_ids[valid_cum[glo] + j];
        }
    }
    return -1;
}

// The proposal of u (block a) from its best-connected destination block best_b
// (connection best_c; -1: none) and its connection own to a: dest[u] and the bucket of
// the move's gain; without a destination, a fallback block or -2 ("anywhere").
__device__ __forceinline__ void propose_move(
    i64 u, int a, int best_b, double best_c, double own, const i64* __restrict__ vwgt,
    i64 fallback, const i64* __restrict__ prefix, i64 nlev,
    const i64* __restrict__ valid_cum, const int* __restrict__ valid_ids, u64 seed_key,
    const double* __restrict__ thr, i64 nthr, int* __restrict__ dest, int* __restrict__ bucket) {
    if (best_b < 0) {
        best_c = 0.0;
        if (fallback) {
            best_b = fallback_block(u, a, prefix, nlev, valid_cum, valid_ids, seed_key);
            if (best_b < 0) return;  // no block can take anything
        } else {
            best_b = -2;
        }
    }
    dest[u] = best_b;
    bucket[u] = gain_bucket(best_c - own, vwgt[u], thr, (int)nthr);
}

// One thread per vertex: the twin of rebalance_cpu.rebalance_propose.
// A vertex of an overloaded block with vwgt < heavy[block] proposes its best-connected
// adjacent block with dest_ok (ties: smallest id), else (fallback != 0) a hashed block
// of the nearest level group, else -2 ("anywhere"). dest[u] = -1 marks non-candidates.
// Connectivities are summed in neighbour order into a table of (block, sum) pairs with
// room for deg(u) entries (at most deg(u) distinct blocks): in the thread's local memory
// when deg(u) <= LOCAL_TABLE, else at spill[u] in skey/sval (gpu_common.TableScratch).
// So the float sums are the CPU's, bit for bit, with no cap on the degree. Rows of
// integer weights above HEAVY_DEGREE are summed by the whole warp (conn_table.cuh), with
// the same sums.
extern "C" __global__ void rebalance_propose(
    const i64* __restrict__ xadj, const int* __restrict__ adjncy,
    const void* __restrict__ w, i64 w_int, const i64* __restrict__ vwgt,
    const int* __restrict__ part, const i64* __restrict__ bw, i64 lmax,
    const double* __restrict__ heavy, const unsigned char* __restrict__ dest_ok,
    i64 fallback, const i64* __restrict__ prefix, i64 nlev,
    const i64* __restrict__ valid_cum, const int* __restrict__ valid_ids, u64 seed_key,
    const double* __restrict__ thr, i64 nthr, i64 n, const i64* __restrict__ spill,
    int* __restrict__ skey, double* __restrict__ sval,
    int* __restrict__ dest, int* __restrict__ bucket, const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    WARP_GRID_STRIDE(u, n) {
        bool candidate = false;
        if (u < n) {
            dest[u] = -1;
            bucket[u] = 0;
            const int a = part[u];
            candidate = bw[a] > lmax && (double)vwgt[u] < heavy[a];
        }
        const bool big = candidate && heavy_row(xadj[u], xadj[u + 1], w_int);
        warp_heavy_rows(big, u, [&](i64 v) {
            // the lanes sum the row into a table of its blocks (at most k of them)
            const i64 lo = xadj[v], hi = xadj[v + 1], k = prefix[nlev - 1];
            const i64 cap = hi - lo < k ? hi - lo : k;
            ConnTable T = warp_table_open(skey, sval, spill[v], cap);
            const i64 one = 1;  // one level whose groups are the blocks: keys are block ids
            warp_table_fill(T, lo, hi, adjncy, part, w, w_int, k, 1, &one);
            const int a = part[v];
            i64 best_b = -1;
            double best_c = 0.0;
            for (i64 s = threadIdx.x & 31; s < cap; s += 32) {
                const int b = T.keys[s];
                if (b >= 0 && b != a && dest_ok[b]) keep_best(best_b, best_c, b, T.vals[s]);
            }
            warp_best(best_b, best_c);
            if ((threadIdx.x & 31) == 0)
                propose_move(v, a, (int)best_b, best_c, table_get(T, a), vwgt, fallback,
                             prefix, nlev, valid_cum, valid_ids, seed_key, thr, nthr, dest,
                             bucket);
        });
        if (!candidate || big) continue;
        const int a = part[u];
        int local_keys[LOCAL_TABLE];
        double local_vals[LOCAL_TABLE];
        int* tkey = spill[u] < 0 ? local_keys : skey + spill[u];
        double* tval = spill[u] < 0 ? local_vals : sval + spill[u];
        i64 nt = 0;
        for (i64 e = xadj[u]; e < xadj[u + 1]; ++e) {
            int b = part[adjncy[e]];
            i64 i = 0;
            while (i < nt && tkey[i] != b) ++i;
            if (i == nt) {
                tkey[nt] = b;
                tval[nt] = 0.0;
                ++nt;
            }
            tval[i] += weight_at(w, w_int, e);
        }
        double own = 0.0;
        i64 best_b = -1;
        double best_c = 0.0;
        for (i64 i = 0; i < nt; ++i) {
            const int b = tkey[i];
            if (b == a)
                own = tval[i];
            else if (dest_ok[b])
                keep_best(best_b, best_c, b, tval[i]);
        }
        propose_move(u, a, (int)best_b, best_c, own, vwgt, fallback, prefix, nlev, valid_cum,
                     valid_ids, seed_key, thr, nthr, dest, bucket);
    }
}

// bw[part[u]] += vwgt[u] (bw zeroed by the caller). Integer atomics: exact and
// order-independent.
extern "C" __global__ void add_block_weights(const int* __restrict__ part,
                                             const i64* __restrict__ vwgt, i64 n, i64 k,
                                             i64* __restrict__ bw) {
    __shared__ i64 local[SHARED_BINS];
    const bool shared = shared_bins_begin(local, k);
    GRID_STRIDE(u, n) bin_add(local, shared, bw, part[u], vwgt[u]);
    shared_bins_end(local, shared, bw, k);
}

// rem[target[u]] -= vwgt[u] for the m vertices ids[0..m) (two's complement add).
extern "C" __global__ void take_room(const int* __restrict__ ids, i64 m,
                                     const int* __restrict__ target,
                                     const i64* __restrict__ vwgt, i64* __restrict__ rem) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < m;
         i += (i64)gridDim.x * blockDim.x) {
        int u = ids[i];
        atomicAdd((u64*)&rem[target[u]], (u64)(-vwgt[u]));
    }
}

// wmax[grp[i]] = max(wmax[grp[i]], w[i]) (wmax zeroed by the caller; weights are
// non-negative, so the unsigned maximum is the signed one).
extern "C" __global__ void group_max_weight(const i64* __restrict__ grp,
                                            const i64* __restrict__ w, i64 m,
                                            i64* __restrict__ wmax) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < m;
         i += (i64)gridDim.x * blockDim.x) {
        atomicMax((u64*)&wmax[grp[i]], (u64)w[i]);
    }
}

// ------------------------------------------------------------------ weak step in a loop
// Weak rebalancing with fixed launch sizes and no host readback, for the captured Jet
// loop (rebalance_gpu.WeakStep): the same moves as rebalance_cpu.weak_moves / weak_moves, selected
// without sorting. Every kernel skips unless gate[CTL_MODE] == MODE_WEAK.
//
// The CPU selection (rebalance_cpu.select_prefix) takes, per overloaded block, the candidates in
// (bucket, id) order while the weight ordered before them is below the excess
// bw - lmax. With before[j] = weight of the block's candidates in buckets < j and c =
// the last bucket with before[c] < excess, every candidate of a bucket below c is
// taken (its weight before is at most before[j + 1] <= before[c]), none above c, and
// in bucket c the test needs the weight of the earlier ids: a prefix sum by block
// over the vertices in id order, done in chunks (per-chunk block sums, a scan over the
// chunks, then each chunk's vertices in order).

// The block-level inputs of the proposal kernel, as rebalance_cpu.weak_moves computes them (same
// IEEE operations), by one thread; the whole grid zeroes wsum (k * nbuckets entries).
extern "C" __global__ void weak_prep(const i64* __restrict__ bw, i64 k, i64 lmax,
                                     unsigned char* __restrict__ dest_ok,
                                     i64* __restrict__ valid_cum, int* __restrict__ valid_ids,
                                     double* __restrict__ heavy, i64* __restrict__ wsum,
                                     i64 nbuckets, const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    GRID_STRIDE(i, k * nbuckets) wsum[i] = 0;
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    i64 total = 0;
    for (i64 b = 0; b < k; ++b) total += bw[b];
    const double opt = (double)total / (double)k;
    const double a = 0.99 * (double)lmax, c = (double)lmax - 100.0;
    const double sigma = a > c ? a : c;
    i64 valid = 0;
    valid_cum[0] = 0;
    for (i64 b = 0; b < k; ++b) {
        const bool ok = (double)bw[b] < sigma;
        dest_ok[b] = ok ? 1 : 0;
        if (ok) valid_ids[valid++] = (int)b;
        valid_cum[b + 1] = valid;
        heavy[b] = __dmul_rn(1.5, __dsub_rn((double)bw[b], opt));
    }
}

// wsum[block * nbuckets + bucket] += vwgt of every candidate (dest != -1).
extern "C" __global__ void weak_bucket_sums(const int* __restrict__ part,
                                            const int* __restrict__ dest,
                                            const int* __restrict__ bucket,
                                            const i64* __restrict__ vwgt, i64 n, i64 k,
                                            i64 nbuckets, i64* __restrict__ wsum,
                                            const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    __shared__ i64 local[SHARED_BINS];
    const bool shared = shared_bins_begin(local, k * nbuckets);
    GRID_STRIDE(u, n) {
        if (dest[u] == -1) continue;
        bin_add(local, shared, wsum, (i64)part[u] * nbuckets + bucket[u], vwgt[u]);
    }
    shared_bins_end(local, shared, wsum, k * nbuckets);
}

// Per block: the cut-off bucket c (-1: not overloaded) and before[c].
extern "C" __global__ void weak_cutoffs(const i64* __restrict__ bw, i64 k, i64 lmax,
                                        const i64* __restrict__ wsum, i64 nbuckets,
                                        i64* __restrict__ cut, i64* __restrict__ cut_base,
                                        const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    GRID_STRIDE(b, k) {
        const i64 excess = bw[b] - lmax;
        i64 c = -1, base = 0, before = 0;
        if (excess > 0) {
            for (i64 j = 0; j < nbuckets; ++j) {
                if (before < excess) {
                    c = j;
                    base = before;
                }
                before += wsum[b * nbuckets + j];
            }
        }
        cut[b] = c;
        cut_base[b] = base;
    }
}

// Vertices [ch * span, (ch + 1) * span) form chunk ch; one warp per chunk walks them 32
// at a time (coalesced). csum[b * nchunks + ch] holds block b's running sum over the
// chunks; only overloaded blocks (cut[b] >= 0) have candidates in a cut-off bucket, so
// only their rows are touched.
__device__ __forceinline__ bool in_cut_bucket(i64 u, const int* __restrict__ part,
                                              const int* __restrict__ dest,
                                              const int* __restrict__ bucket,
                                              const i64* __restrict__ cut) {
    return dest[u] != -1 && bucket[u] == cut[part[u]];
}

#define WARP_FULL 0xffffffffu
#define WARP_LOOP(ch, count)                                                           \
    for (i64 ch = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; ch < (i64)(count); \
         ch += ((i64)gridDim.x * blockDim.x) >> 5)

// csum[b * nchunks + ch] = weight of chunk ch's candidates in block b's cut-off bucket.
extern "C" __global__ void weak_chunk_sums(const int* __restrict__ part,
                                           const int* __restrict__ dest,
                                           const int* __restrict__ bucket,
                                           const i64* __restrict__ vwgt,
                                           const i64* __restrict__ cut, i64 n, i64 k, i64 span,
                                           i64 nchunks, i64* __restrict__ csum,
                                           const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    const int lane = threadIdx.x & 31;
    WARP_LOOP(ch, nchunks) {
        for (i64 b = lane; b < k; b += 32)
            if (cut[b] >= 0) csum[b * nchunks + ch] = 0;
        __syncwarp();
        const i64 hi = (ch + 1) * span < n ? (ch + 1) * span : n;
        for (i64 u = ch * span + lane; u < hi; u += 32)
            if (in_cut_bucket(u, part, dest, bucket, cut))
                atomicAdd((u64*)&csum[(i64)part[u] * nchunks + ch], (u64)vwgt[u]);
    }
}

// One thread block per overloaded block b: exclusive prefix sums of its row of csum
// (over the chunks, in order), blockDim.x entries at a time (warp scans by shuffles,
// then a scan of the warp totals).
extern "C" __global__ void weak_chunk_scan(const i64* __restrict__ cut, i64 k, i64 nchunks,
                                           i64* __restrict__ csum,
                                           const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    __shared__ i64 warp_total[32];
    __shared__ i64 carry;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (i64 b = blockIdx.x; b < k; b += gridDim.x) {
        if (cut[b] < 0) continue;  // the same for the whole thread block
        i64* row = csum + b * nchunks;
        if (threadIdx.x == 0) carry = 0;
        __syncthreads();
        for (i64 base = 0; base < nchunks; base += blockDim.x) {
            const i64 i = base + threadIdx.x;
            const i64 v = i < nchunks ? row[i] : 0;
            i64 x = v;  // inclusive scan within the warp
            for (int d = 1; d < 32; d <<= 1) {
                const i64 y = __shfl_up_sync(WARP_FULL, x, d);
                if (lane >= d) x += y;
            }
            if (lane == 31) warp_total[w] = x;
            __syncthreads();
            if (w == 0) {
                i64 t = lane < warps ? warp_total[lane] : 0;
                for (int d = 1; d < 32; d <<= 1) {
                    const i64 y = __shfl_up_sync(WARP_FULL, t, d);
                    if (lane >= d) t += y;
                }
                if (lane < warps) warp_total[lane] = t;  // inclusive over the warps
            }
            __syncthreads();
            const i64 before = carry + (w ? warp_total[w - 1] : 0) + x - v;
            if (i < nchunks) row[i] = before;
            __syncthreads();  // every thread has read carry
            if (threadIdx.x == blockDim.x - 1) carry = before + v;
            __syncthreads();
        }
    }
}

// One warp per chunk, its vertices in id order, 32 at a time: the selection test of
// select_prefix; selected candidates get target[u] = dest[u] (target is -1 everywhere
// before). A candidate below its block's cut-off bucket is taken; those in the cut-off
// bucket are tested one by one in id order against the running sum of the chunk.
extern "C" __global__ void weak_select(const int* __restrict__ part, const int* __restrict__ dest,
                                       const int* __restrict__ bucket,
                                       const i64* __restrict__ vwgt, const i64* __restrict__ bw,
                                       i64 lmax, const i64* __restrict__ cut,
                                       const i64* __restrict__ cut_base, i64 n, i64 k, i64 span,
                                       i64 nchunks, i64* __restrict__ csum,
                                       int* __restrict__ target, const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_WEAK)) return;
    const int lane = threadIdx.x & 31;
    WARP_LOOP(ch, nchunks) {
        const i64 hi = (ch + 1) * span < n ? (ch + 1) * span : n;
        for (i64 first = ch * span; first < hi; first += 32) {
            const i64 u = first + lane;
            const int d = u < hi ? dest[u] : -1;
            i64 b = 0, j = 0, c = -1;
            if (d != -1) {
                b = part[u];
                j = bucket[u];
                c = cut[b];
            }
            bool take = d != -1 && j < c;
            unsigned ties = __ballot_sync(WARP_FULL, d != -1 && j == c);
            while (ties) {  // the same loop in every lane
                const int l = __ffs(ties) - 1;
                ties &= ties - 1;
                if (lane == l) {
                    i64* acc = &csum[b * nchunks + ch];
                    take = cut_base[b] + *acc < bw[b] - lmax;
                    *acc += vwgt[u];
                }
                __syncwarp();
            }
            if (take) target[u] = d;
        }
    }
}
