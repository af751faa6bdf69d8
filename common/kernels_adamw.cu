// Fused AdamW over the whole flat parameter buffer (one kernel for every parameter: the flat
// layout of model.h makes the optimizer one elementwise pass), and dtype casts.
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

// torch.optim.AdamW's arithmetic (and adamw_cpu.c's): p = p·(1 − lr·wd);
// p −= step_size · m / (sqrt(v) / bc2_sqrt + eps), step_size = lr / (1 − β1^t),
// bc2_sqrt = sqrt(1 − β2^t) (both computed in double on the host).
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v,
                             __nv_bfloat16* __restrict__ p_lp, size_t n, float b1, float b2,
                             float eps, float decay, float step_size, float bc2_sqrt) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    float pi = p[i] * decay;  // decoupled weight decay, before the Adam update (as torch)
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    pi -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    p[i] = pi;
    if (p_lp) p_lp[i] = __float2bfloat16_rn(pi);
}

__global__ void cast_f32_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                     size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

template <typename X>
__global__ void cast_to_f32_kernel(const X* __restrict__ x, float* __restrict__ y, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = to_f(x[i]);
}

extern "C" void k_adamw(float* p, const float* g, float* m, float* v, uint16_t* p_lp, size_t n,
                        float beta1, float beta2, float eps, float decay, float step_size,
                        float bc2_sqrt, cudaStream_t s) {
    if (n == 0) return;
    adamw_kernel<<<cdiv_u(n, 256), 256, 0, s>>>(p, g, m, v, (__nv_bfloat16*)p_lp, n, beta1, beta2,
                                                 eps, decay, step_size, bc2_sqrt);
    CUDA_CHECK_LAST();
}

extern "C" void k_cast_f32_bf16(const float* x, uint16_t* y, size_t n, cudaStream_t s) {
    if (n == 0) return;
    cast_f32_bf16_kernel<<<cdiv_u(n, 256), 256, 0, s>>>(x, (__nv_bfloat16*)y, n);
    CUDA_CHECK_LAST();
}

template <typename X>
static void cast_to_f32_launch(const void* x, float* y, size_t n, cudaStream_t s) {
    if (n == 0) return;
    cast_to_f32_kernel<X><<<cdiv_u(n, 256), 256, 0, s>>>((const X*)x, y, n);
    CUDA_CHECK_LAST();
}
extern "C" void k_cast_act_f32(dtype_t adt, const void* x, float* y, size_t n, cudaStream_t s) {
    DISPATCH_ACT(adt, cast_to_f32_launch, x, y, n, s);
}

// Parameter initialisation on the device, element for element model_init_params (model.h):
// x[i] = std · trunc_normal(seed_p, i) cut at ±3, with the same counter-based generator, so
// the values match the host's up to the last bits of logf/cosf (rng.h). Done here because the
// host loop takes seconds for the larger models.
#include "common/rng.h"
__global__ void init_trunc_normal_kernel(float* __restrict__ x, size_t n, uint64_t seed_p, float stdf) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = stdf * rng_trunc_normal(seed_p, (uint64_t)i, 3.0f);
}
__global__ void fill_kernel(float* __restrict__ x, size_t n, float v) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
extern "C" void k_init_param(float* x, size_t n, uint64_t seed_p, float stdf, cudaStream_t s) {
    if (n == 0) return;
    if (stdf == 0.0f) fill_kernel<<<cdiv_u(n, 256), 256, 0, s>>>(x, n, 1.0f);
    else init_trunc_normal_kernel<<<cdiv_u(n, 256), 256, 0, s>>>(x, n, seed_p, stdf);
    CUDA_CHECK_LAST();
}
