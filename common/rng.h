// A counter-based random generator: element i of a stream is a pure function of (seed, i),
// so the CPU and the GPU produce the same numbers, in any order, from any thread.
// It is SplitMix64 (Steele, Lea, Flood 2014) used in random-access form:
//   u64(seed, i) = mix64(mix64(seed) + (i + 1) * 0x9E3779B97F4A7C15).
// Uniform and integer draws are bit-identical on CPU and GPU. Normal draws use Box-Muller
// with float logf/cosf, whose last bits differ between the host libm and the GPU (a few ulp).
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <cuda_runtime_api.h>

#if defined(__CUDACC__)
#define RNG_HD __host__ __device__ __forceinline__
#else
#define RNG_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

RNG_HD uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
RNG_HD uint64_t rng_u64(uint64_t seed, uint64_t i) {
    return rng_mix64(rng_mix64(seed) + (i + 1) * 0x9E3779B97F4A7C15ull);
}
// Uniform in [0, 1): 24 random bits, exact in float.
RNG_HD float rng_uniform(uint64_t seed, uint64_t i) {
    return (float)(rng_u64(seed, i) >> 40) * (1.0f / 16777216.0f);
}
// Integer uniform in [0, n), n < 2^32 (multiply-shift; bias below 2^-32 * n).
RNG_HD uint32_t rng_below(uint64_t seed, uint64_t i, uint32_t n) {
    return (uint32_t)(((rng_u64(seed, i) >> 32) * (uint64_t)n) >> 32);
}
// Standard normal by Box-Muller from one 64-bit draw (two 24-bit uniforms).
RNG_HD float rng_normal(uint64_t seed, uint64_t i) {
    uint64_t r = rng_u64(seed, i);
    float u1 = ((float)(r >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1): log is finite
    float u2 = (float)((r >> 16) & 0xFFFFFFu) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}
// Normal truncated to [-a, a] by rejection: attempt k of element i uses counter i*32 + k.
// At a = 3 a draw is rejected with probability 0.27%, so 32 attempts never run out in
// practice; if they did, the value is clamped.
RNG_HD float rng_trunc_normal(uint64_t seed, uint64_t i, float a) {
    float z = 0.0f;
    for (int k = 0; k < 32; k++) {
        z = rng_normal(seed, i * 32u + (uint64_t)k);
        if (fabsf(z) <= a) return z;
    }
    return fminf(fmaxf(z, -a), a);
}

// A stream: fills consume counters from `offset` on, so consecutive fills differ.
typedef struct {
    uint64_t seed;
    uint64_t offset;
} rng_t;

static inline rng_t rng_make(uint64_t seed) { rng_t r = {seed, 0}; return r; }

// Host fills.
void rng_fill_uniform(rng_t* r, float* x, size_t n, float lo, float hi);
void rng_fill_normal(rng_t* r, float* x, size_t n, float mean, float std);
void rng_fill_trunc_normal(rng_t* r, float* x, size_t n, float std, float a);  // cut at ±a·std
void rng_fill_int(rng_t* r, int32_t* x, size_t n, int32_t lo, int32_t hi);     // [lo, hi)

// Device fills (same numbers as the host fills for the same rng_t state); asynchronous on
// `stream`, errors checked at launch.
void rng_fill_uniform_cuda(rng_t* r, float* d_x, size_t n, float lo, float hi, cudaStream_t stream);
void rng_fill_normal_cuda(rng_t* r, float* d_x, size_t n, float mean, float std, cudaStream_t stream);
void rng_fill_trunc_normal_cuda(rng_t* r, float* d_x, size_t n, float std, float a, cudaStream_t stream);
void rng_fill_int_cuda(rng_t* r, int32_t* d_x, size_t n, int32_t lo, int32_t hi, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
