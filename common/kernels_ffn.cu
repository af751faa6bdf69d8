// SwiGLU for the CUDA Transformer: the fused W1/W3 GEMM writes h13 (N, 2F) = [h1 | h3] per row
// (w1 and w3 are adjacent in the flat parameter buffer, so they form one [2F, C] matrix).
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename X>
__global__ void swiglu_fwd_kernel(const X* __restrict__ h13, X* __restrict__ g, int N, int F) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    const size_t n = idx / F, f = idx % F;
    const float h1 = to_f(h13[n * 2 * F + f]), h3 = to_f(h13[n * 2 * F + F + f]);
    g[idx] = from_f<X>(h1 * sigmoidf_(h1) * h3);
}

// SiLU(x) = x σ(x);  SiLU'(x) = σ(x) (1 + x (1 − σ(x))).
template <typename X>
__global__ void swiglu_bwd_kernel(const X* __restrict__ h13, const X* __restrict__ dg,
                                  X* __restrict__ dh13, int N, int F) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    const size_t n = idx / F, f = idx % F;
    const float h1 = to_f(h13[n * 2 * F + f]), h3 = to_f(h13[n * 2 * F + F + f]);
    const float d = to_f(dg[idx]);
    const float sg = sigmoidf_(h1);
    dh13[n * 2 * F + f] = from_f<X>(d * h3 * sg * (1.0f + h1 * (1.0f - sg)));
    dh13[n * 2 * F + F + f] = from_f<X>(d * h1 * sg);
}

template <typename X>
static void swiglu_fwd_launch(const void* h13, void* g, int N, int F, cudaStream_t s) {
    swiglu_fwd_kernel<X><<<cdiv_u((size_t)N * F, 256), 256, 0, s>>>((const X*)h13, (X*)g, N, F);
    CUDA_CHECK_LAST();
}
template <typename X>
static void swiglu_bwd_launch(const void* h13, const void* dg, void* dh13, int N, int F,
                              cudaStream_t s) {
    swiglu_bwd_kernel<X><<<cdiv_u((size_t)N * F, 256), 256, 0, s>>>((const X*)h13, (const X*)dg, (X*)dh13, N, F);
    CUDA_CHECK_LAST();
}

extern "C" void k_swiglu_fwd(dtype_t adt, const void* h13, void* g, int N, int F, cudaStream_t s) {
    DISPATCH_ACT(adt, swiglu_fwd_launch, h13, g, N, F, s);
}
extern "C" void k_swiglu_bwd(dtype_t adt, const void* h13, const void* dg, void* dh13, int N, int F,
                             cudaStream_t s) {
    DISPATCH_ACT(adt, swiglu_bwd_launch, h13, dg, dh13, N, F, s);
}
