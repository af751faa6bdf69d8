// dtype and device names, bulk bf16 conversion.
#include "common/dtype.h"

size_t dtype_size(dtype_t dt) {
    switch (dt) {
    case DT_F32: return 4;
    case DT_BF16: return 2;
    case DT_I32: return 4;
    case DT_I64: return 8;
    default: return 0;
    }
}

const char* dtype_name(dtype_t dt) {
    switch (dt) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_I32: return "i32";
    case DT_I64: return "i64";
    default: return "?";
    }
}

const char* device_name(device_t d) { return d == DEV_CUDA ? "cuda" : "cpu"; }

void bf16_from_f32_array(uint16_t* dst, const float* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}

void f32_from_bf16_array(float* dst, const uint16_t* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f32_from_bf16(src[i]);
}
