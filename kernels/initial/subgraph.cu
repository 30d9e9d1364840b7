// Subgraph extraction (paper Algorithm 1): the CUDA twin of kernels/initial/subgraph_cpu.py.
//
// One thread per fine CSR entry (source row found by binary search on xadj, so
// skewed degrees cost nothing extra): first flag the entries whose endpoints share
// a block, then, after scans on the Python side, copy each kept entry to its place
// in the block-ordered output. Entries keep their row order, so rows stay sorted.
#include "common.cuh"

// keep[e] = 1 iff both endpoints of entry e lie in the same block.
extern "C" __global__ void subgraph_keep(i64 n, i64 m2, const i64* __restrict__ xadj,
                                         const int* __restrict__ adjncy,
                                         const i64* __restrict__ part,
                                         unsigned char* __restrict__ keep) {
    GRID_STRIDE(e, m2) {
        keep[e] = part[adjncy[e]] == part[row_of(xadj, n, e)] ? 1 : 0;
    }
}

// Copy kept entry e of row u to rowstart[pos[u]] + (kept entries of row u before e);
// kept_before[e] counts kept entries before e in the whole fine CSR. Weights are
// copied as raw 8-byte words (int64 and float64 alike).
extern "C" __global__ void subgraph_fill(i64 n, i64 m2, const i64* __restrict__ xadj,
                                         const int* __restrict__ adjncy,
                                         const u64* __restrict__ adjwgt,
                                         const unsigned char* __restrict__ keep,
                                         const i64* __restrict__ kept_before,
                                         const i64* __restrict__ pos,
                                         const int* __restrict__ local,
                                         const i64* __restrict__ rowstart,
                                         int* __restrict__ sub_adjncy,
                                         u64* __restrict__ sub_adjwgt) {
    GRID_STRIDE(e, m2) {
        if (!keep[e]) continue;
        i64 u = row_of(xadj, n, e);
        i64 out = rowstart[pos[u]] + kept_before[e] - kept_before[xadj[u]];
        sub_adjncy[out] = local[adjncy[e]];
        sub_adjwgt[out] = adjwgt[e];
    }
}

// Internal edges (the CSR without the edges between blocks, ids unchanged): copy kept
// entry e to kept_before[e]. Weights as raw 8-byte words.
extern "C" __global__ void internal_fill(i64 m2, const int* __restrict__ adjncy,
                                         const u64* __restrict__ adjwgt,
                                         const unsigned char* __restrict__ keep,
                                         const i64* __restrict__ kept_before,
                                         int* __restrict__ out_adjncy,
                                         u64* __restrict__ out_adjwgt) {
    GRID_STRIDE(e, m2) {
        if (!keep[e]) continue;
        out_adjncy[kept_before[e]] = adjncy[e];
        out_adjwgt[kept_before[e]] = adjwgt[e];
    }
}
