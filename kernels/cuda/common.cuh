// Device helpers shared by procmap's CUDA kernels: the twins of kernels/common_cpu.py.
// Compiled by NVRTC through cupy.RawModule (kernels/gpu_common.py adds this folder
// to the include path), so no CUDA runtime headers are included.
#pragma once

typedef long long i64;
typedef unsigned long long u64;

// splitmix64 finaliser: bijective scramble of a 64-bit word (deterministic tie noise);
// bit-identical to common_cpu.mix64.
__device__ __forceinline__ u64 mix64(u64 x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

// Index t (0-based) of the deepest common level of PEs p != q:
// prefix[t] = a1 * ... * a_{t+1}, the last entry is k, so the loop always ends.
// Block ids and k fit in 32 bits (part is int32): 32-bit division is exact and several
// times cheaper than 64-bit division, which the gain kernels do per edge and level.
__device__ __forceinline__ int level_index(i64 p, i64 q, const i64* __restrict__ prefix) {
    int t = 0;
    while ((unsigned)p / (unsigned)prefix[t] != (unsigned)q / (unsigned)prefix[t]) ++t;
    return t;
}

// Level of the pair (p, q) in traffic arrays: 0 on the same PE, else 1 + the deepest
// common level.
__device__ __forceinline__ int pair_level(i64 p, i64 q, const i64* __restrict__ prefix) {
    return p == q ? 0 : level_index(p, q, prefix) + 1;
}

// D(p, q) of the hierarchy prefix/dist (0 when p == q).
__device__ __forceinline__ double distance(i64 p, i64 q, const i64* __restrict__ prefix,
                                           const double* __restrict__ dist) {
    return p == q ? 0.0 : dist[level_index(p, q, prefix)];
}

// Per-vertex connectivity tables of at most LOCAL_TABLE entries live in the thread's
// local memory (stack arrays: no global scratch, interleaved across a warp by the
// hardware); larger ones live in global scratch at the offset that
// gpu_common.TableScratch assigns (LOCAL_TABLE there must match).
#define LOCAL_TABLE 64

// Kind of a Jet refinement iteration, kept at word CTL_MODE of the loop's control block
// (jet_loop.cu) for the next iteration. The kernels of LP rounds and of weak rebalancing
// are all in one captured loop body and skip themselves when the block names the other
// kind (gate == nullptr: always run, for calls outside the loop).
#define CTL_MODE 7
#define MODE_LP 0
#define MODE_WEAK 1
#define MODE_STRONG 2

__device__ __forceinline__ bool gated_off(const i64* gate, i64 mode) {
    return gate != nullptr && gate[CTL_MODE] != mode;
}

// Edge weight e as the gain kernels read it, from int64 (w_int != 0) or float64 weights.
// An int64 weight converts to the same double as a float64 copy would hold (exactly,
// below 2^53), so the kernels need no float64 copy of the weights (8 bytes per entry).
__device__ __forceinline__ double weight_at(const void* __restrict__ w, i64 w_int, i64 e) {
    return w_int ? (double)((const i64*)w)[e] : ((const double*)w)[e];
}

// Appends `value` to list[0 .. *count) where `keep`, with one atomic per warp: one
// counter taken by every vertex of a graph serialises at the memory (1.4M boundary
// vertices of a 3D grid took 0.58 ms on an H100). Lanes of a warp land next to each
// other, in lane order; the order across warps depends on scheduling. Every lane of
// the warp that is still running must call it (no lane may have left the loop early).
__device__ __forceinline__ void warp_append(bool keep, int value, int* __restrict__ list,
                                            unsigned long long* __restrict__ count) {
    const unsigned active = __activemask();
    const unsigned take = __ballot_sync(active, keep);
    if (take == 0) return;
    const int lane = threadIdx.x & 31;
    const int leader = __ffs(take) - 1;
    unsigned long long base = 0;
    if (lane == leader) base = atomicAdd(count, (unsigned long long)__popc(take));
    base = __shfl_sync(active, base, leader);
    if (keep) list[base + __popc(take & ((1u << lane) - 1u))] = value;
}

// One thread per item with a grid-stride loop: correct for any launch geometry.
#define GRID_STRIDE(i, count)                                                   \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (i64)(count); \
         i += (i64)blockDim.x * gridDim.x)

// Integer histograms with many items on few bins (block weights, bucket sums): adding
// straight to global memory serialises the atomics on each bin (1M vertices into 6
// blocks took 0.4 ms on an H100). A thread block sums into shared memory first when
// the bins fit, then adds its nonzero bins to global memory. All threads of the block
// must call begin and end (they hold __syncthreads); sums are exact either way.
#define SHARED_BINS 2048

// Clears the block's shared bins; false (use global memory) when bins > SHARED_BINS.
__device__ __forceinline__ bool shared_bins_begin(i64* local, i64 bins) {
    if (bins > SHARED_BINS) return false;
    for (i64 i = threadIdx.x; i < bins; i += blockDim.x) local[i] = 0;
    __syncthreads();
    return true;
}

__device__ __forceinline__ void bin_add(i64* local, bool shared, i64* global, i64 bin, i64 w) {
    atomicAdd((u64*)(shared ? &local[bin] : &global[bin]), (u64)w);  // two's complement
}

__device__ __forceinline__ void shared_bins_end(const i64* local, bool shared, i64* global,
                                                i64 bins) {
    if (!shared) return;
    __syncthreads();
    for (i64 i = threadIdx.x; i < bins; i += blockDim.x)
        if (local[i] != 0) atomicAdd((u64*)&global[i], (u64)local[i]);
}

// Row (source vertex) of CSR entry e: the last u in [0, n) with xadj[u] <= e.
// Empty rows share their xadj value with the next row, so "last" picks the
// non-empty row that really holds e.
__device__ __forceinline__ i64 row_of(const i64* __restrict__ xadj, i64 n, i64 e) {
    i64 lo = 0, hi = n - 1;
    while (lo < hi) {
        i64 mid = (lo + hi + 1) >> 1;
        if (xadj[mid] <= e) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
