// Device helpers shared by the model's kernels (kernels_*.cu): fp32 <-> activation-type
// conversion and warp/block reductions. Activations are `float` (fp32 precision) or
// `__nv_bfloat16` (bf16 mixed precision); every kernel loads them into fp32 registers, does
// its arithmetic in fp32 and rounds once on the store.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "common/check.h"
#include "common/dtype.h"

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename X> __device__ __forceinline__ X from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over a block of at most 1024 threads; every thread gets the result. `sh` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    v = warp_sum(v);
    __syncthreads();  // sh may still be read by an earlier call
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

static inline unsigned cdiv_u(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// Calls F<float>(...) or F<__nv_bfloat16>(...) by the activation dtype.
#define DISPATCH_ACT(dt, F, ...)                                                     \
    do {                                                                             \
        if ((dt) == DT_F32) F<float>(__VA_ARGS__);                                   \
        else if ((dt) == DT_BF16) F<__nv_bfloat16>(__VA_ARGS__);                     \
        else DIE("activation dtype must be f32 or bf16, got %d", (int)(dt));         \
    } while (0)
