// Token embedding and the fused cross-entropy of the CUDA Transformer. The loss is computed
// from the logits in fp32 whatever their storage type (autocast runs cross_entropy in fp32);
// the forward keeps logsumexp per row so that the backward writes the gradient in one pass,
// in place over the logits (the logits are not needed after that).
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

__global__ void embedding_fwd_kernel(const int32_t* __restrict__ tok, const float* __restrict__ E,
                                     float* __restrict__ x, int N, int C, int V) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    const size_t n = idx / C, c = idx % C;
    const int t = tok[n];
    x[idx] = (t >= 0 && t < V) ? E[(size_t)t * C + c] : NAN;
}

// dE[t] += dx[n] for every position n whose token is t, deterministically: no atomics, so two
// runs (or a run and its resume from a checkpoint) give the same bits. One block per position
// n; only the block of a token's FIRST position writes its row, adding the rows of all its
// positions in increasing n — the CPU reference's order, so a zeroed dE gets the CPU's bits.
// The block walks positions n..N-1 in chunks of blockDim: each thread tests one position, an
// ordered compaction (warp ballots, then the warps' counts in order) lists the chunk's hits in
// shared memory, and each thread then adds those rows for its columns. Work per distinct token
// ~ N token reads spread over the block + its hits x C adds. (The first version had every
// thread re-read the token ids for each of its columns, ~ N x C per distinct token: 1.8 ms at
// N 2048, C 1600 on an H100, 0.7 % of its bandwidth bound, found by the roofline.)
// Launch with EMB_BWD_THREADS threads (a multiple of 32).
#define EMB_BWD_THREADS 256
__global__ void embedding_bwd_kernel(const int32_t* __restrict__ tok, const float* __restrict__ dx,
                                     float* __restrict__ dE, int N, int C, int V) {
    __shared__ int pos[EMB_BWD_THREADS];
    __shared__ int warp_hits[EMB_BWD_THREADS / 32];
    const int n = blockIdx.x;
    const int t = tok[n];
    if (t < 0 || t >= V) return;  // uniform over the block
    int seen = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) seen |= tok[j] == t;
    if (__syncthreads_or(seen)) return;  // not this token's first position
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    float* row = dE + (size_t)t * C;
    for (int base = n; base < N; base += blockDim.x) {
        const int j = base + threadIdx.x;
        const bool hit = j < N && tok[j] == t;
        const unsigned mask = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_hits[warp] = __popc(mask);
        __syncthreads();
        int before = 0, hits = 0;  // hits of the warps before this one, and of the whole chunk
        for (int w = 0; w < n_warps; w++) {
            before += w < warp ? warp_hits[w] : 0;
            hits += warp_hits[w];
        }
        if (hit) pos[before + __popc(mask & ((1u << lane) - 1u))] = j;  // increasing j
        __syncthreads();
        if (hits > 0)  // uniform: every thread read the same counts
            for (int c = threadIdx.x; c < C; c += blockDim.x) {
                float acc = row[c];  // an fp32 store and reload is exact: chunks add up as one loop
                for (int k = 0; k < hits; k++) acc += dx[(size_t)pos[k] * C + c];
                row[c] = acc;
            }
        __syncthreads();  // pos and warp_hits are rewritten by the next chunk
    }
}

// One block per row: an online (max, sum) per thread, then block reductions.
template <typename X>
__global__ void ce_fwd_kernel(const X* __restrict__ logits, const int32_t* __restrict__ targets,
                              float* __restrict__ lse, float* __restrict__ losses, int V) {
    __shared__ float sh[32];
    const int n = blockIdx.x;
    const X* row = logits + (size_t)n * V;
    float m = -INFINITY, l = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float z = to_f(row[j]);
        if (z > m) { l = l * expf(m - z) + 1.0f; m = z; }
        else l += expf(z - m);
    }
    const float M = block_max(m, sh);
    l = (m == -INFINITY) ? 0.0f : l * expf(m - M);
    const float Lsum = block_sum(l, sh);
    if (threadIdx.x == 0) {
        const float lz = M + logf(Lsum);
        const int t = targets[n];
        lse[n] = lz;
        losses[n] = (t >= 0 && t < V) ? lz - to_f(row[t]) : NAN;
    }
}

// loss = mean(losses), summed by one block in a fixed order (deterministic).
__global__ void mean_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float sh[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) out[0] = acc / (float)n;
}

template <typename X>
__global__ void ce_bwd_kernel(X* __restrict__ logits, const int32_t* __restrict__ targets,
                              const float* __restrict__ lse, float scale, int N, int V) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * V) return;
    const int n = (int)(idx / V), j = (int)(idx % V);
    const float p = expf(to_f(logits[idx]) - lse[n]);
    logits[idx] = from_f<X>((p - (j == targets[n] ? 1.0f : 0.0f)) * scale);
}

template <typename X>
static void ce_fwd_launch(const void* logits, const int32_t* targets, float* lse, float* losses,
                          float* loss, int N, int V, cudaStream_t s) {
    ce_fwd_kernel<X><<<N, 256, 0, s>>>((const X*)logits, targets, lse, losses, V);
    CUDA_CHECK_LAST();
    mean_kernel<<<1, 1024, 0, s>>>(losses, loss, N);
    CUDA_CHECK_LAST();
}
template <typename X>
static void ce_bwd_launch(void* logits, const int32_t* targets, const float* lse, float scale, int N,
                          int V, cudaStream_t s) {
    ce_bwd_kernel<X><<<cdiv_u((size_t)N * V, 256), 256, 0, s>>>((X*)logits, targets, lse, scale, N, V);
    CUDA_CHECK_LAST();
}

extern "C" void k_embedding_fwd(const int32_t* tokens, const float* E, float* x, int N, int C, int V,
                                cudaStream_t s) {
    embedding_fwd_kernel<<<cdiv_u((size_t)N * C, 256), 256, 0, s>>>(tokens, E, x, N, C, V);
    CUDA_CHECK_LAST();
}
extern "C" void k_embedding_bwd(const int32_t* tokens, const float* dx, float* dE, int N, int C,
                                int V, cudaStream_t s) {
    if (N > 0) embedding_bwd_kernel<<<N, EMB_BWD_THREADS, 0, s>>>(tokens, dx, dE, N, C, V);
    CUDA_CHECK_LAST();
}
extern "C" void k_cross_entropy_fwd(dtype_t adt, const void* logits, const int32_t* targets,
                                    float* lse, float* losses, float* loss, int N, int V,
                                    cudaStream_t s) {
    DISPATCH_ACT(adt, ce_fwd_launch, logits, targets, lse, losses, loss, N, V, s);
}
template <typename X>
static void ce_rows_launch(const void* logits, const int32_t* targets, float* lse, float* losses, int N, int V,
                           cudaStream_t s) {
    ce_fwd_kernel<X><<<N, 256, 0, s>>>((const X*)logits, targets, lse, losses, V);
    CUDA_CHECK_LAST();
}
extern "C" void k_cross_entropy_rows(dtype_t adt, const void* logits, const int32_t* targets, float* lse,
                                     float* losses, int N, int V, cudaStream_t s) {
    DISPATCH_ACT(adt, ce_rows_launch, logits, targets, lse, losses, N, V, s);
}
extern "C" void k_loss_mean(const float* losses, float* loss, int N, cudaStream_t s) {
    mean_kernel<<<1, 1024, 0, s>>>(losses, loss, N);
    CUDA_CHECK_LAST();
}
extern "C" void k_cross_entropy_bwd(dtype_t adt, void* logits, const int32_t* targets,
                                    const float* lse, float scale, int N, int V, cudaStream_t s) {
    DISPATCH_ACT(adt, ce_bwd_launch, logits, targets, lse, scale, N, V, s);
}
