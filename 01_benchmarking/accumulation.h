// The handout's mixed-precision accumulation demo (§1.1.5): add 0.01 one thousand times with
// different accumulator and addend types and compare the sum with the exact 10.
// Two extra rows show the same thing for bf16, the type the model's mixed precision uses.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ACC_F32_F32 = 0,     // float s; s += 0.01f                       (handout loop 1)
    ACC_F16_F16,         // half s;  s += (half)0.01  — every add rounded to fp16    (loop 2)
    ACC_F32_F16,         // float s; s += (half)0.01  — the half widens implicitly   (loop 3)
    ACC_F32_F16_CAST,    // float s; s += (float)(half)0.01 — the explicit cast      (loop 4)
    ACC_BF16_BF16,       // bf16 s;  s += (bf16)0.01 — every add rounded to bf16
    ACC_F32_BF16,        // float s; s += (float)(bf16)0.01
    ACC_NCASES
} acc_case_t;

typedef struct {
    const char* accumulator;  // "fp32", "fp16", "bf16"
    const char* addend;       // "fp32", "fp16", "fp16 -> fp32", ...
} acc_case_info_t;
acc_case_info_t acc_case_info(acc_case_t c);

// Every case on the CPU: fp16 through gcc's _Float16 where the compiler has it (x86-64 gcc
// 12+), else through the emulated rounding below. out[ACC_NCASES] holds the sums as float.
void accum_cpu(int n, float value, float* out);
// The same with the emulation forced (the test checks it against _Float16 and numpy).
void accum_cpu_emulated(int n, float value, float* out);
int accum_cpu_has_native_f16(void);  // 1 when accum_cpu used _Float16

// fp32 <-> fp16 in software: round to nearest even, subnormals, infinities and NaN included.
uint16_t f16_from_f32_soft(float f);
float f32_from_f16_soft(uint16_t h);

// Every case in one GPU thread with __half / __nv_bfloat16 and their intrinsics (__hadd).
// Returns 0, or -1 when there is no GPU (out untouched).
int accum_gpu(int n, float value, float* out);

#ifdef __cplusplus
}
#endif
