// RoPE for the CUDA Transformer: rotates pairs (2k, 2k+1) of every head of q and k by the
// angle pos · theta^(-2k/HS) (tables built on the host in double precision, model_gpu.c).
// The backward of a rotation is the rotation by the opposite angle, so one kernel does both.
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

// One thread per (b, t, q-or-k, head, pair). qkv (B, T, 3, NH, HS).
template <typename X>
__global__ void rope_kernel(X* __restrict__ qkv, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, int B, int T, int NH, int HS,
                            int inverse) {
    const int half = HS / 2;
    const size_t total = (size_t)B * T * 2 * NH * half;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int k = (int)(idx % half);
    const size_t rest = idx / half;           // (b, t, which, h) with which in {0 = q, 1 = k}
    const int h = (int)(rest % NH);
    const int which = (int)((rest / NH) % 2);
    const size_t bt = rest / ((size_t)NH * 2);
    const int t = (int)(bt % T);
    const size_t C = (size_t)NH * HS;
    X* p = qkv + bt * 3 * C + (size_t)which * C + (size_t)h * HS + 2 * k;
    const float c = cos_t[(size_t)t * half + k];
    const float sn = inverse ? -sin_t[(size_t)t * half + k] : sin_t[(size_t)t * half + k];
    const float x0 = to_f(p[0]), x1 = to_f(p[1]);
    p[0] = from_f<X>(x0 * c - x1 * sn);
    p[1] = from_f<X>(x0 * sn + x1 * c);
}

template <typename X>
static void rope_launch(void* qkv, const float* cos_t, const float* sin_t, int B, int T, int NH,
                        int HS, int inverse, cudaStream_t s) {
    const size_t total = (size_t)B * T * 2 * NH * (HS / 2);
    rope_kernel<X><<<cdiv_u(total, 256), 256, 0, s>>>((X*)qkv, cos_t, sin_t, B, T, NH, HS, inverse);
    CUDA_CHECK_LAST();
}

extern "C" void k_rope(dtype_t adt, void* qkv, const float* cos_t, const float* sin_t, int B,
                       int T, int NH, int HS, int inverse, cudaStream_t s) {
    DISPATCH_ACT(adt, rope_launch, qkv, cos_t, sin_t, B, T, NH, HS, inverse, s);
}
