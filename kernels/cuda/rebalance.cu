// Jet rebalancing (weak and strong): the per-vertex kernels of kernels/rebalance_gpu.py,
// twins of _rebalance_propose (and the block-weight / room bookkeeping) in jet_cpu.py.
// The selection and assignment steps are sorts and prefix sums done with CuPy.
#include "common.cuh"

// Gain bucket of a rebalancing move, bit-identical to jet_cpu._gain_bucket.
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

// One thread per vertex: the twin of jet_cpu._rebalance_propose.
// A vertex of an overloaded block with vwgt < heavy[block] proposes its best-connected
// adjacent block with dest_ok (ties: smallest id), else (fallback != 0) a hashed block
// of the nearest level group, else -2 ("anywhere"). dest[u] = -1 marks non-candidates.
// Connectivities are summed in neighbour order into a table of (block, sum) pairs with
// room for deg(u) entries (at most deg(u) distinct blocks): in the thread's local memory
// when deg(u) <= LOCAL_TABLE, else at spill[u] in skey/sval (gpu_common.TableScratch).
// So the float sums are the CPU's, bit for bit, with no cap on the degree.
extern "C" __global__ void rebalance_propose(
    const i64* __restrict__ xadj, const int* __restrict__ adjncy,
    const double* __restrict__ fwgt, const i64* __restrict__ vwgt,
    const int* __restrict__ part, const i64* __restrict__ bw, i64 lmax,
    const double* __restrict__ heavy, const unsigned char* __restrict__ dest_ok,
    i64 fallback, const i64* __restrict__ prefix, i64 nlev,
    const i64* __restrict__ valid_cum, const int* __restrict__ valid_ids, u64 seed_key,
    const double* __restrict__ thr, i64 nthr, i64 n, const i64* __restrict__ spill,
    int* __restrict__ skey, double* __restrict__ sval,
    int* __restrict__ dest, int* __restrict__ bucket) {
    for (i64 u = blockIdx.x * (i64)blockDim.x + threadIdx.x; u < n;
         u += (i64)gridDim.x * blockDim.x) {
        dest[u] = -1;
        bucket[u] = 0;
        int a = part[u];
        if (bw[a] <= lmax || !((double)vwgt[u] < heavy[a])) continue;
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
            tval[i] += fwgt[e];
        }
        double own = 0.0;
        int best_b = -1;
        double best_c = 0.0;
        for (i64 i = 0; i < nt; ++i) {
            int b = tkey[i];
            double c = tval[i];
            if (b == a) {
                own = c;
            } else if (dest_ok[b] && (best_b < 0 || c > best_c || (c == best_c && b < best_b))) {
                best_b = b;
                best_c = c;
            }
        }
        if (best_b < 0) {
            best_c = 0.0;
            if (fallback) {
                best_b = fallback_block(u, a, prefix, nlev, valid_cum, valid_ids, seed_key);
                if (best_b < 0) continue;  // no block can take anything
            } else {
                best_b = -2;
            }
        }
        dest[u] = best_b;
        bucket[u] = gain_bucket(best_c - own, vwgt[u], thr, (int)nthr);
    }
}

// bw[part[u]] += vwgt[u] (bw zeroed by the caller). Integer atomics: exact and
// order-independent.
extern "C" __global__ void add_block_weights(const int* __restrict__ part,
                                             const i64* __restrict__ vwgt, i64 n,
                                             i64* __restrict__ bw) {
    for (i64 u = blockIdx.x * (i64)blockDim.x + threadIdx.x; u < n;
         u += (i64)gridDim.x * blockDim.x) {
        atomicAdd((u64*)&bw[part[u]], (u64)vwgt[u]);
    }
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
