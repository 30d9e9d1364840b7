// Device-side control of the GPU refinement loop (kernels/refinement/jet_gpu.py, _Refiner): the
// bookkeeping the CPU loops do in Python after each iteration -- sum the traffic change,
// the max block weight, the cost, keep the best partition, count iterations without
// improvement, decide whether the next iteration is another round the device runs --
// done on the device, so runs of iterations can be one CUDA graph
// (kernels/cuda_graphs.py). One loop serves both refiners: the balanced round (MODE_LP)
// is Jet's LP round (jet_cpu.jet_refine) or an ISR step (isr_cpu.isr_refine); they
// differ here only in LP's locks and ISR's iteration cap.
//
// Every decision uses the CPU loop's arithmetic in the CPU's order (__dadd_rn /
// __dmul_rn, no fused multiply-adds), so with integer weights the decisions, and the
// partition, are those of the CPU loops.
#include "common.cuh"

typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

// Partial sums of the move-delta rows: `rows` holds (nlev1 levels) x (nrows) values;
// block b sums its contiguous slice of every level into partial[lev * gridDim.x + b].
// Fixed grid and block shape plus a fixed tree: deterministic for floats too.
#define REDUCE_THREADS 256

template <typename W>
__device__ W block_sum(W v, W* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = REDUCE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    W total = shared[0];
    __syncthreads();
    return total;
}

template <typename W>
__device__ void row_partials(const W* __restrict__ rows, i64 nrows, i64 nlev1,
                             W* __restrict__ partial) {
    __shared__ W shared[REDUCE_THREADS];
    const i64 per = (nrows + gridDim.x - 1) / gridDim.x;
    const i64 lo = (i64)blockIdx.x * per;
    const i64 hi = lo + per < nrows ? lo + per : nrows;
    for (i64 lev = 0; lev < nlev1; ++lev) {
        W acc = 0;
        for (i64 r = lo + threadIdx.x; r < hi; r += REDUCE_THREADS) acc += rows[lev * nrows + r];
        W total = block_sum<W>(acc, shared);
        if (threadIdx.x == 0) partial[lev * gridDim.x + blockIdx.x] = total;
    }
}

extern "C" __global__ void row_partials_i64(const i64* rows, i64 nrows, i64 nlev1, i64* partial) {
    row_partials<i64>(rows, nrows, nlev1, partial);
}

extern "C" __global__ void row_partials_f64(const double* rows, i64 nrows, i64 nlev1,
                                            double* partial) {
    row_partials<double>(rows, nrows, nlev1, partial);
}

// Words of the control block `ctl` (int64) and `fctl` (double); jet_gpu._State mirrors
// the offsets.
#define C_IT 0         // iterations since the last improvement (the CPU's `it`)
#define C_LAST_LP 1    // moves of the last balanced round
#define C_MAXW 2       // max block weight now
#define C_BEST_MAXW 3  // max block weight of the best partition
#define C_IMPROVED 4   // 1: copy the partition into `best` (copy_if_flag)
#define C_STOP 5       // 1: the balanced round moved nothing and nothing was locked
#define C_ROUNDS 6     // iterations run (the ISR loop's cap applies to it)
#define C_MODE CTL_MODE  // kind of the next iteration: MODE_LP / MODE_WEAK / MODE_STRONG
#define C_WEAK 8       // weak rebalancing iterations in a row (the CPU's weak_runs)
#define C_STEPS 9      // 3 words: iterations of each kind (MODE_*) run so far; the ISR
                       // step's hash key derives from C_STEPS + MODE_LP
#define C_MOVES 12     // 3 words: moves applied by the iterations of each kind
#define C_PROGRESSED 15  // 1 once an iteration made progress (the CPU's `progressed`)
#define F_COST 0
#define F_BEST 1

// Status words written to pinned host memory for the host (cuda_graphs.DeviceLoop).
#define S_CONTINUE 0
#define S_IT 1
#define S_MAXW 2
#define S_STOP 3
#define S_ROUNDS 4
#define S_MODE 5
#define S_PROGRESSED 6

// One block of REDUCE_THREADS threads, after commit_moves and row_partials: finishes
// the iteration exactly as the CPU loop's tail does, picks the kind of the next
// iteration as the CPU loop's branches do (the balanced round when balanced, else weak
// rebalancing up to max_weak times in a row, else strong) and sets the loop condition
// "the loop goes on with an iteration the device runs" (balanced or weak; strong is
// the host's).
// kind: the iteration just run (MODE_*), or -1 to read it from ctl[C_MODE].
// locking: 1 when the balanced round locks the vertices it moved (Jet's LP: a round
// that moves nothing ends the loop only if the round before it moved nothing either,
// as no vertex was locked), 0 when it does not (ISR: a step that moves nothing ends it).
// max_rounds: the loop stops after that many iterations (isr_cpu.HARD_CAP).
// start_iters: until an iteration makes progress, the loop stops after this many
// iterations (max_iters applies once one has).
template <typename W>
__device__ void loop_control(const W* __restrict__ partial, i64 nparts, W* traffic, i64 nlev,
                             const double* __restrict__ dist, const i64* __restrict__ bw, i64 k,
                             i64 lmax, i64* ctl, double* fctl, i64* count, i64 kind,
                             i64 max_iters, i64 start_iters, i64 max_weak, double phi,
                             i64 locking, i64 max_rounds, u64 handle, volatile i64* status) {
    __shared__ W wsum[REDUCE_THREADS];
    __shared__ i64 wmax[REDUCE_THREADS];
    for (i64 lev = 0; lev <= nlev; ++lev) {
        W acc = 0;
        for (i64 b = threadIdx.x; b < nparts; b += REDUCE_THREADS) acc += partial[lev * nparts + b];
        W total = block_sum<W>(acc, wsum);
        if (threadIdx.x == 0) traffic[lev] += total;
    }
    i64 m = 0;
    for (i64 b = threadIdx.x; b < k; b += REDUCE_THREADS) m = bw[b] > m ? bw[b] : m;
    wmax[threadIdx.x] = m;
    __syncthreads();
    for (int s = REDUCE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && wmax[threadIdx.x + s] > wmax[threadIdx.x])
            wmax[threadIdx.x] = wmax[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    __threadfence();  // traffic written by this thread above; nothing else to wait for
    const i64 maxw = wmax[0];
    const i64 moved = *count;
    *count = 0;
    // jet_cpu.traffic_cost: sum of d_t * traffic[t + 1], left to right
    double cost = 0.0;
    for (i64 t = 0; t < nlev; ++t) cost = __dadd_rn(cost, __dmul_rn(dist[t], (double)traffic[t + 1]));
    const i64 mode = kind >= 0 ? kind : ctl[C_MODE];
    i64 it = ctl[C_IT] + 1;
    i64 stop = 0;
    i64 improved = 0;
    if (mode == MODE_LP) {
        const bool had_locks = locking && ctl[C_LAST_LP] > 0;
        ctl[C_LAST_LP] = moved;
        if (moved == 0 && !had_locks) stop = 1;  // unlocked fixed point
    }
    if (!stop) {
        const double best_cost = fctl[F_BEST];
        const i64 best_maxw = ctl[C_BEST_MAXW];
        const bool best_ok = best_maxw <= lmax;
        if (maxw <= lmax) {
            if (!best_ok || cost < best_cost) {
                if (!best_ok || cost < __dmul_rn(phi, best_cost)) it = 0;
                improved = 1;
            }
        } else if (!best_ok && (maxw < best_maxw || (maxw == best_maxw && cost < best_cost))) {
            if (maxw < best_maxw) it = 0;
            improved = 1;
        }
        if (improved) {
            fctl[F_BEST] = cost;
            ctl[C_BEST_MAXW] = maxw;
        }
    }
    fctl[F_COST] = cost;
    if (it == 0) ctl[C_PROGRESSED] = 1;
    ctl[C_IT] = it;
    ctl[C_MAXW] = maxw;
    ctl[C_IMPROVED] = improved;
    ctl[C_STOP] = stop;
    ctl[C_ROUNDS] += 1;
    ctl[C_STEPS + mode] += 1;
    ctl[C_MOVES + mode] += moved;
    const i64 weak = mode == MODE_WEAK ? ctl[C_WEAK] + 1 : 0;
    const i64 next = maxw <= lmax ? MODE_LP : (weak < max_weak ? MODE_WEAK : MODE_STRONG);
    ctl[C_WEAK] = weak;
    ctl[C_MODE] = next;
    const i64 patience = ctl[C_PROGRESSED] ? max_iters : start_iters;
    const i64 go_on =
        !stop && it < patience && ctl[C_ROUNDS] < max_rounds && next != MODE_STRONG;
    status[S_CONTINUE] = go_on;
    status[S_MODE] = next;
    status[S_IT] = it;
    status[S_MAXW] = maxw;
    status[S_STOP] = stop;
    status[S_ROUNDS] = ctl[C_ROUNDS];
    status[S_PROGRESSED] = ctl[C_PROGRESSED];
    if (handle != 0) cudaGraphSetConditional((cudaGraphConditionalHandle)handle, (unsigned)go_on);
}

extern "C" __global__ void loop_control_i64(const i64* partial, i64 nparts, i64* traffic, i64 nlev,
                                            const double* dist, const i64* bw, i64 k, i64 lmax,
                                            i64* ctl, double* fctl, i64* count, i64 kind,
                                            i64 max_iters, i64 start_iters, i64 max_weak,
                                            double phi, i64 locking, i64 max_rounds,
                                            u64 handle, i64* status) {
    loop_control<i64>(partial, nparts, traffic, nlev, dist, bw, k, lmax, ctl, fctl, count,
                      kind, max_iters, start_iters, max_weak, phi, locking, max_rounds, handle,
                      status);
}

extern "C" __global__ void loop_control_f64(const double* partial, i64 nparts, double* traffic,
                                            i64 nlev, const double* dist, const i64* bw, i64 k,
                                            i64 lmax, i64* ctl, double* fctl, i64* count,
                                            i64 kind, i64 max_iters, i64 start_iters,
                                            i64 max_weak, double phi, i64 locking,
                                            i64 max_rounds, u64 handle, i64* status) {
    loop_control<double>(partial, nparts, traffic, nlev, dist, bw, k, lmax, ctl, fctl, count,
                         kind, max_iters, start_iters, max_weak, phi, locking, max_rounds,
                         handle, status);
}

// best[u] = part[u] when the last control step found an improvement.
extern "C" __global__ void copy_if_improved(int* __restrict__ best, const int* __restrict__ part,
                                            i64 n, const i64* __restrict__ ctl) {
    if (ctl[C_IMPROVED] == 0) return;
    GRID_STRIDE(u, n) best[u] = part[u];
}

// The vertices moved by this LP round stay locked during the next one.
extern "C" __global__ void copy_locks(unsigned char* __restrict__ locked,
                                      const unsigned char* __restrict__ moved, i64 n,
                                      const i64* __restrict__ gate) {
    if (gated_off(gate, MODE_LP)) return;
    GRID_STRIDE(u, n) locked[u] = moved[u];
}
