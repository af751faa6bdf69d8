// The naive attention's softmax, forward and backward, for the CUDA Transformer. The two
// matmuls around it (S = Q Kᵀ · scale and O = P V) are cuBLAS strided-batched GEMMs in
// model_gpu_attn.c; this file is the part between them. Scores are materialised: S and P are
// (B, NH, T, T), one row per (b, h, query i).
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

#define SM_WARPS 8  // rows per block, one warp per row

// In place S -> P. Row r is query i = r % T; keys j > i are masked (P = 0). fp32 arithmetic
// whatever the storage type (what autocast does for softmax).
template <typename X>
__global__ void softmax_causal_fwd_kernel(X* __restrict__ S, int rows, int T) {
    const int r = blockIdx.x * SM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int i = r % T;
    X* row = S + (size_t)r * T;
    float m = -INFINITY;
    for (int j = lane; j <= i; j += 32) m = fmaxf(m, to_f(row[j]));
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j <= i; j += 32) l += expf(to_f(row[j]) - m);
    l = warp_sum(l);
    const float inv_l = 1.0f / l;  // l >= 1: key j = 0 is never masked
    for (int j = lane; j < T; j += 32) row[j] = from_f<X>(j <= i ? expf(to_f(row[j]) - m) * inv_l : 0.0f);
}

// In place dP -> dS = P ∘ (dP − D), D = Σ_j P_j dP_j (the softmax Jacobian applied to dP).
template <typename X>
__global__ void softmax_causal_bwd_kernel(const X* __restrict__ P, X* __restrict__ dP, int rows,
                                          int T) {
    const int r = blockIdx.x * SM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int i = r % T;
    const X* p = P + (size_t)r * T;
    X* d = dP + (size_t)r * T;
    float D = 0.0f;
    for (int j = lane; j <= i; j += 32) D += to_f(p[j]) * to_f(d[j]);
    D = warp_sum(D);
    for (int j = lane; j < T; j += 32) d[j] = from_f<X>(j <= i ? to_f(p[j]) * (to_f(d[j]) - D) : 0.0f);
}

template <typename X>
static void softmax_fwd_launch(void* S, int rows, int T, cudaStream_t s) {
    softmax_causal_fwd_kernel<X><<<cdiv_u(rows, SM_WARPS), SM_WARPS * 32, 0, s>>>((X*)S, rows, T);
    CUDA_CHECK_LAST();
}
template <typename X>
static void softmax_bwd_launch(const void* P, void* dP, int rows, int T, cudaStream_t s) {
    softmax_causal_bwd_kernel<X><<<cdiv_u(rows, SM_WARPS), SM_WARPS * 32, 0, s>>>((const X*)P, (X*)dP, rows, T);
    CUDA_CHECK_LAST();
}

extern "C" void k_softmax_causal_fwd(dtype_t adt, void* S, int rows, int T, cudaStream_t s) {
    DISPATCH_ACT(adt, softmax_fwd_launch, S, rows, T, s);
}
extern "C" void k_softmax_causal_bwd(dtype_t adt, const void* P, void* dP, int rows, int T,
                                     cudaStream_t s) {
    DISPATCH_ACT(adt, softmax_bwd_launch, P, dP, rows, T, s);
}
