// Element types and devices, and bf16 <-> fp32 conversion on the host.
// bf16 is stored as its 16 raw bits (uint16_t); on the GPU the same bits are __nv_bfloat16.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_F32 = 0, DT_BF16, DT_I32, DT_I64, DT_COUNT } dtype_t;
typedef enum { DEV_CPU = 0, DEV_CUDA = 1, DEV_COUNT } device_t;

size_t dtype_size(dtype_t dt);
const char* dtype_name(dtype_t dt);   // "f32", "bf16", "i32", "i64"
const char* device_name(device_t d);  // "cpu", "cuda"

// Round-to-nearest-even, NaN kept a (quiet) NaN: the same rounding as __float2bfloat16_rn.
static inline uint16_t bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float f32_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
void bf16_from_f32_array(uint16_t* dst, const float* src, size_t n);
void f32_from_bf16_array(float* dst, const uint16_t* src, size_t n);

#ifdef __cplusplus
}
#endif
