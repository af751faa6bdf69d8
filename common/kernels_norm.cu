// RMSNorm forward and backward for the CUDA Transformer (launchers in model_kernels.h).
// One warp per row: C is at most a few thousand, so a warp's 32 lanes stride over the row and
// a shuffle reduction gives the sum of squares without shared memory.
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

#define NORM_WARPS 8          // rows per block in the row kernels
#define DW_ROWS_PER_CHUNK 32  // rows summed by one block of the dw partial kernel

template <typename X>
__global__ void rmsnorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   X* __restrict__ y, float* __restrict__ rstd, int N, int C,
                                   float eps) {
    const int row = blockIdx.x * NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* xr = x + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    const float r = rsqrtf(ss / (float)C + eps);
    if (lane == 0) rstd[row] = r;
    X* yr = y + (size_t)row * C;
    for (int c = lane; c < C; c += 32) yr[c] = from_f<X>(xr[c] * r * w[c]);
}

// With xhat = x·rstd and g = dy·w:  dx = rstd · (g − xhat · mean(g ∘ xhat)).
template <typename X>
__global__ void rmsnorm_bwd_dx_kernel(const X* __restrict__ dy, const float* __restrict__ x,
                                      const float* __restrict__ w, const float* __restrict__ rstd,
                                      float* __restrict__ dres, X* __restrict__ dres_lp,
                                      int accumulate, int N, int C) {
    const int row = blockIdx.x * NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += to_f(dy[o + c]) * w[c] * x[o + c] * r;
    dot = warp_sum(dot) / (float)C;
    for (int c = lane; c < C; c += 32) {
        const float dx = r * (to_f(dy[o + c]) * w[c] - x[o + c] * r * dot);
        const float d = accumulate ? dres[o + c] + dx : dx;
        dres[o + c] = d;
        if (dres_lp) dres_lp[o + c] = from_f<X>(d);
    }
}

// dw[c] = Σ_rows dy[r, c] · xhat[r, c], in two deterministic steps: block (cx, k) sums rows
// k*32 .. k*32+31 for its 256 columns into partial[k, c]; then one thread per column adds the
// chunks in order.
template <typename X>
__global__ void rmsnorm_dw_partial_kernel(const X* __restrict__ dy, const float* __restrict__ x,
                                          const float* __restrict__ rstd,
                                          float* __restrict__ partial, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.y * DW_ROWS_PER_CHUNK;
    const int r1 = min(N, r0 + DW_ROWS_PER_CHUNK);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) acc += to_f(dy[(size_t)r * C + c]) * x[(size_t)r * C + c] * rstd[r];
    partial[(size_t)blockIdx.y * C + c] = acc;
}

__global__ void column_sum_kernel(const float* __restrict__ partial, float* __restrict__ out,
                                  int nchunk, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < nchunk; k++) acc += partial[(size_t)k * C + c];
    out[c] = acc;
}

template <typename X>
static void rmsnorm_fwd_launch(const float* x, const float* w, void* y, float* rstd, int N, int C,
                               float eps, cudaStream_t s) {
    rmsnorm_fwd_kernel<X><<<cdiv_u(N, NORM_WARPS), NORM_WARPS * 32, 0, s>>>(x, w, (X*)y, rstd, N, C, eps);
    CUDA_CHECK_LAST();
}

template <typename X>
static void rmsnorm_bwd_launch(const void* dy, const float* x, const float* w, const float* rstd,
                               float* dres, void* dres_lp, int accumulate, float* dw,
                               float* partial, int N, int C, cudaStream_t s) {
    rmsnorm_bwd_dx_kernel<X><<<cdiv_u(N, NORM_WARPS), NORM_WARPS * 32, 0, s>>>(
        (const X*)dy, x, w, rstd, dres, (X*)dres_lp, accumulate, N, C);
    CUDA_CHECK_LAST();
    const int nchunk = (int)cdiv_u(N, DW_ROWS_PER_CHUNK);
    dim3 grid(cdiv_u(C, 256), nchunk);
    rmsnorm_dw_partial_kernel<X><<<grid, 256, 0, s>>>((const X*)dy, x, rstd, partial, N, C);
    CUDA_CHECK_LAST();
    column_sum_kernel<<<cdiv_u(C, 256), 256, 0, s>>>(partial, dw, nchunk, C);
    CUDA_CHECK_LAST();
}

extern "C" size_t k_rmsnorm_partial_len(int N, int C) {
    return (size_t)cdiv_u(N, DW_ROWS_PER_CHUNK) * (size_t)C;
}

extern "C" void k_rmsnorm_fwd(dtype_t adt, const float* x, const float* w, void* y, float* rstd,
                              int N, int C, float eps, cudaStream_t s) {
    DISPATCH_ACT(adt, rmsnorm_fwd_launch, x, w, y, rstd, N, C, eps, s);
}

extern "C" void k_rmsnorm_bwd(dtype_t adt, const void* dy, const float* x, const float* w,
                              const float* rstd, float* dres, void* dres_lp, int accumulate,
                              float* dw, float* partial, int N, int C, cudaStream_t s) {
    DISPATCH_ACT(adt, rmsnorm_bwd_launch, dy, x, w, rstd, dres, dres_lp, accumulate, dw, partial,
                 N, C, s);
}
