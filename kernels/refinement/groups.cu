// Placing the vertices a group refinement moved onto PEs of their new group: the CUDA
// twin of kernels/refinement/groups_cpu.py (same rule, same result, value for value).
#include "common.cuh"

// One thread per vertex (grid-stride). A vertex whose group is unchanged keeps its PE;
// a moved one takes the PE of its new group with the heaviest edges from it, among the
// PEs of its first max_candidates neighbours there (ties: the lower PE id), else the
// group's least-loaded PE (least[g]).
extern "C" __global__ void place_in_groups(i64 n, const i64* __restrict__ xadj,
                                           const int* __restrict__ adjncy,
                                           const double* __restrict__ adjwgt,
                                           const int* __restrict__ pes,
                                           const int* __restrict__ groups, i64 size,
                                           const i64* __restrict__ least,
                                           i64 max_candidates, int* __restrict__ out) {
    for (i64 u = blockIdx.x * (i64)blockDim.x + threadIdx.x; u < n;
         u += (i64)gridDim.x * blockDim.x) {
        const i64 g = groups[u];
        if (pes[u] / size == g) {
            out[u] = pes[u];
            continue;
        }
        i64 best = -1, seen = 0;
        double best_conn = -1.0;
        for (i64 i = xadj[u]; i < xadj[u + 1]; ++i) {
            const i64 p = pes[adjncy[i]];
            if (p / size != g || p == best) continue;
            if (++seen > max_candidates) break;
            double conn = 0.0;
            for (i64 j = xadj[u]; j < xadj[u + 1]; ++j)
                if (pes[adjncy[j]] == p) conn += adjwgt[j];
            if (conn > best_conn || (conn == best_conn && p < best)) {
                best = p;
                best_conn = conn;
            }
        }
        out[u] = (int)(best >= 0 ? best : least[g]);
    }
}
