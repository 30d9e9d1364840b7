// Mapping objective kernels: the CUDA twins of kernels/objective/objective_cpu.py.
//
// Every CSR entry (u, v) is visited once, so each undirected edge counts twice (the
// convention of J). Sums are deterministic without float atomics: the vertices are
// dealt to R "rows" (row r owns vertices r, r + R, r + 2R, ..., summed in that order
// by one thread) and the host side reduces the R row sums with a CuPy reduction.
// Output arrays are column-major per row, out[c * R + r], so that neighbouring
// threads write neighbouring words.
#include "common.cuh"

template <typename W>
__device__ void level_traffic_rows(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                   const W* __restrict__ adjwgt, const int* __restrict__ pe,
                                   const i64* __restrict__ prefix, i64 n, i64 rows,
                                   W* __restrict__ out) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        for (i64 u = r; u < n; u += rows) {
            const i64 p = pe[u];
            for (i64 e = xadj[u]; e < xadj[u + 1]; ++e) {
                const int lev = pair_level(p, pe[adjncy[e]], prefix);
                out[lev * rows + r] += adjwgt[e];
            }
        }
    }
}

// out: (l + 1) x rows, zeroed by the caller; traffic[t] = sum over r of out[t * rows + r].
extern "C" __global__ void level_traffic_i64(const i64* xadj, const int* adjncy, const i64* adjwgt,
                                             const int* pe, const i64* prefix, i64 n, i64 rows,
                                             i64* out) {
    level_traffic_rows<i64>(xadj, adjncy, adjwgt, pe, prefix, n, rows, out);
}

extern "C" __global__ void level_traffic_f64(const i64* xadj, const int* adjncy,
                                             const double* adjwgt, const int* pe,
                                             const i64* prefix, i64 n, i64 rows, double* out) {
    level_traffic_rows<double>(xadj, adjncy, adjwgt, pe, prefix, n, rows, out);
}

template <typename W>
__device__ void matrix_cost_rows(const i64* __restrict__ xadj, const int* __restrict__ adjncy,
                                 const W* __restrict__ adjwgt, const int* __restrict__ pe,
                                 const double* __restrict__ dist, i64 k, i64 n, i64 rows,
                                 double* __restrict__ out) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        double j = 0.0;
        double cut = 0.0;
        for (i64 u = r; u < n; u += rows) {
            const i64 p = pe[u];
            for (i64 e = xadj[u]; e < xadj[u + 1]; ++e) {
                const i64 q = pe[adjncy[e]];
                if (p == q) continue;
                const double w = (double)adjwgt[e];
                // explicit rounding: no fused multiply-add, as on the CPU
                j = __dadd_rn(j, __dmul_rn(w, dist[p * k + q]));
                cut += w;
            }
        }
        out[r] = j;
        out[rows + r] = cut;
    }
}

// out: 2 x rows (J partial sums, then off-PE volume partial sums).
extern "C" __global__ void matrix_cost_i64(const i64* xadj, const int* adjncy, const i64* adjwgt,
                                           const int* pe, const double* dist, i64 k, i64 n,
                                           i64 rows, double* out) {
    matrix_cost_rows<i64>(xadj, adjncy, adjwgt, pe, dist, k, n, rows, out);
}

extern "C" __global__ void matrix_cost_f64(const i64* xadj, const int* adjncy,
                                           const double* adjwgt, const int* pe,
                                           const double* dist, i64 k, i64 n, i64 rows,
                                           double* out) {
    matrix_cost_rows<double>(xadj, adjncy, adjwgt, pe, dist, k, n, rows, out);
}

// Per-PE task weight and task count; integer atomics, so exact and order-free. The
// counts sit after the loads in the shared bins (2k of them).
extern "C" __global__ void pe_loads(const int* __restrict__ pe, const i64* __restrict__ vwgt,
                                    i64 n, i64 k, i64* loads, i64* counts) {
    __shared__ i64 local[SHARED_BINS];
    const bool shared = shared_bins_begin(local, 2 * k);
    i64* local_counts = shared ? local + k : local;
    GRID_STRIDE(u, n) {
        const int p = pe[u];
        bin_add(local, shared, loads, p, vwgt[u]);
        bin_add(local_counts, shared, counts, p, 1);
    }
    shared_bins_end(local, shared, loads, k);
    shared_bins_end(local_counts, shared, counts, k);
}
