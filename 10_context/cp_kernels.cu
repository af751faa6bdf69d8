// The small kernels of the GPU ring: the LSE merge of a partial result into the fp32 running
// one, fp32 accumulation of a partial gradient, and the final cast to the inputs' dtype.
// Partial O and gradients come from stages 03/04 in the inputs' dtype (fp32 or bf16); every
// running value (O, L, dQ, and the travelling dK, dV) is fp32.
#include <cuda_bf16.h>
#include <math.h>
#include "common/check.h"
#include "10_context/cp_gpu.h"

__device__ __forceinline__ float load_x(const void* p, size_t i, int bf16) {
    return bf16 ? __bfloat162float(((const __nv_bfloat16*)p)[i]) : ((const float*)p)[i];
}

// One thread per (row, column); the row's weights are recomputed by every thread of the row
// (two exps: cheaper than a second pass).
__global__ void cp_merge_kernel(float* o, float* l, const void* ob, const float* lb, size_t rows, int d,
                                int bf16) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * (size_t)d) return;
    const size_t r = i / (size_t)d;
    const float la = l[r], lbr = lb[r];
    if (lbr == -INFINITY) return;
    const float xb = load_x(ob, i, bf16);
    if (la == -INFINITY) {
        o[i] = xb;
        return;
    }
    const float m = fmaxf(la, lbr);
    const float wa = __expf(la - m), wb = __expf(lbr - m);
    const float s = wa + wb;
    o[i] = (wa / s) * o[i] + (wb / s) * xb;
}

// L = logaddexp(L_a, L_b), after cp_merge_kernel has used the old L_a.
__global__ void cp_lse_kernel(float* l, const float* lb, size_t rows) {
    const size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float la = l[r], lbr = lb[r];
    if (lbr == -INFINITY) return;
    if (la == -INFINITY) {
        l[r] = lbr;
        return;
    }
    const float m = fmaxf(la, lbr);
    l[r] = m + __logf(__expf(la - m) + __expf(lbr - m));
}

__global__ void cp_add_kernel(float* acc, const void* x, size_t n, int bf16) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += load_x(x, i, bf16);
}

__global__ void cp_cast_kernel(void* out, const float* in, size_t n, int bf16) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (bf16)
        ((__nv_bfloat16*)out)[i] = __float2bfloat16(in[i]);
    else
        ((float*)out)[i] = in[i];
}

__global__ void cp_fill_kernel(float* p, float v, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

extern "C" void cp_merge_gpu(float* o, float* l, const void* ob, const float* lb, size_t rows, int d,
                             dtype_t dt, cudaStream_t s) {
    if (!rows) return;
    cp_merge_kernel<<<blocks_for(rows * (size_t)d), 256, 0, s>>>(o, l, ob, lb, rows, d, dt == DT_BF16);
    CUDA_CHECK_LAST();
    cp_lse_kernel<<<blocks_for(rows), 256, 0, s>>>(l, lb, rows);
    CUDA_CHECK_LAST();
}

extern "C" void cp_add_gpu(float* acc, const void* x, size_t n, dtype_t dt, cudaStream_t s) {
    if (!n) return;
    cp_add_kernel<<<blocks_for(n), 256, 0, s>>>(acc, x, n, dt == DT_BF16);
    CUDA_CHECK_LAST();
}

extern "C" void cp_cast_gpu(void* out, const float* in, size_t n, dtype_t dt, cudaStream_t s) {
    if (!n) return;
    cp_cast_kernel<<<blocks_for(n), 256, 0, s>>>(out, in, n, dt == DT_BF16);
    CUDA_CHECK_LAST();
}

extern "C" void cp_fill_gpu(float* p, float v, size_t n, cudaStream_t s) {
    if (!n) return;
    cp_fill_kernel<<<blocks_for(n), 256, 0, s>>>(p, v, n);
    CUDA_CHECK_LAST();
}
