// Shared pieces of the weighted-sum kernels: element types, 16-byte vector loads and stores
// that convert to and from fp32, and a warp sum. Included by weighted_sum.cu only.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

// Loads VEC consecutive elements of T starting at p (aligned to VEC * sizeof(T) bytes) as
// floats. With sizeof(T) * VEC == 16 this is one 128-bit load instruction per thread, the
// widest a thread can issue: fewer instructions per byte and more bytes in flight.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&out)[VEC]) {
    constexpr int BYTES = (int)sizeof(T) * VEC;
    static_assert(BYTES == 16 || BYTES == 8 || BYTES == 4 || VEC == 1,
                  "a vector must be 4, 8 or 16 bytes, or a single element");
    union {
        uint4 u4;
        uint2 u2;
        uint32_t u1;
        T e[VEC];
    } v;
    if constexpr (VEC == 1) {
        v.e[0] = p[0];
    } else if constexpr (BYTES == 16) {
        v.u4 = *reinterpret_cast<const uint4*>(p);
    } else if constexpr (BYTES == 8) {
        v.u2 = *reinterpret_cast<const uint2*>(p);
    } else {
        v.u1 = *reinterpret_cast<const uint32_t*>(p);
    }
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        if constexpr (sizeof(T) == 4)
            out[i] = (float)v.e[i];
        else
            out[i] = __bfloat162float(v.e[i]);
    }
}

// Rounds VEC floats to T (round to nearest even for bf16) and stores them with one instruction.
template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&in)[VEC]) {
    constexpr int BYTES = (int)sizeof(T) * VEC;
    union {
        uint4 u4;
        uint2 u2;
        uint32_t u1;
        T e[VEC];
    } v;
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        if constexpr (sizeof(T) == 4)
            v.e[i] = in[i];
        else
            v.e[i] = __float2bfloat16_rn(in[i]);
    }
    if constexpr (VEC == 1) {
        p[0] = v.e[0];
    } else if constexpr (BYTES == 16) {
        *reinterpret_cast<uint4*>(p) = v.u4;
    } else if constexpr (BYTES == 8) {
        *reinterpret_cast<uint2*>(p) = v.u2;
    } else {
        *reinterpret_cast<uint32_t*>(p) = v.u1;
    }
}

template <typename T>
__device__ __forceinline__ float to_f32(T v) {
    if constexpr (sizeof(T) == 4)
        return (float)v;
    else
        return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v) {
    if constexpr (sizeof(T) == 4)
        return v;
    else
        return __float2bfloat16_rn(v);
}

// Sum over the 32 lanes of a warp by butterfly shuffles; every lane gets the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
