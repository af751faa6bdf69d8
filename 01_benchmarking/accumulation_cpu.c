// The accumulation demo on the CPU (see accumulation.h). A C compiler has no fp16 arithmetic
// in standard C11, so: gcc's _Float16 where available (each `s += x` rounds s to fp16, as the
// GPU's __hadd does), and a software conversion that rounds to fp16 after every add otherwise.
// Adding two fp16 numbers exactly in fp32 and rounding once to fp16 gives the correctly
// rounded fp16 sum (fp32's 24 bits hold the exact sum of two 11-bit significands close in
// magnitude, and when they are far apart the double rounding cannot change the result).
#include "01_benchmarking/accumulation.h"

#include <string.h>

#include "common/check.h"  // fail(): the student edition's stubs
#include "common/dtype.h"

acc_case_info_t acc_case_info(acc_case_t c) {
    static const acc_case_info_t info[ACC_NCASES] = {
        {"fp32", "fp32"},         {"fp16", "fp16"},         {"fp32", "fp16 (implicit widening)"},
        {"fp32", "fp16 -> fp32"}, {"bf16", "bf16"},         {"fp32", "bf16 -> fp32"},
    };
    return info[c];
}

uint16_t f16_from_f32_soft(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN stays a quiet NaN
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // rounds to >= 65520: infinity
    if (a < 0x38800000u) {
        // fp16 subnormal (|f| < 2^-14): value = m * 2^-24; shift the 24-bit significand.
        if (a < 0x33000000u) return (uint16_t)sign;  // below half the smallest subnormal: 0
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                    // 2^(e-127) * m * 2^-23 = q * 2^-24
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    // normal: rebias the exponent (127 -> 15), keep 10 of 23 mantissa bits, round to nearest even
    uint32_t h = ((a - 0x38000000u) >> 13);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;  // a carry into the exponent is right
    return (uint16_t)(sign | h);
}

float f32_from_f16_soft(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
    if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);  // inf / NaN
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) u = sign;
    else {  // subnormal: normalise
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// The four fp16-free or fp16 cases with the emulation, plus the bf16 pair (bf16 rounding is
// common/dtype.h's, the same as the GPU's __float2bfloat16_rn).
void accum_cpu_emulated(int n, float value, float* out) {
    // STUDENT-BEGIN(01.accum_cpu_emulated): the accumulation demo with software fp16 (f16_from_f32_soft) and bf16: 1000 adds of 0.01 in each acc_case_t, one out[] entry per case | see 01_benchmarking/README.md §Accumulation in low precision | test: test_01 accumulation/emulated_fp16_matches_numpy
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += value;
    out[ACC_F32_F32] = s;

    uint16_t x16 = f16_from_f32_soft(value), s16 = 0;
    for (int i = 0; i < n; i++) s16 = f16_from_f32_soft(f32_from_f16_soft(s16) + f32_from_f16_soft(x16));
    out[ACC_F16_F16] = f32_from_f16_soft(s16);

    s = 0.0f;  // in C, float + half promotes the half: loops 3 and 4 are the same computation
    for (int i = 0; i < n; i++) s += f32_from_f16_soft(x16);
    out[ACC_F32_F16] = s;
    s = 0.0f;
    for (int i = 0; i < n; i++) s += (float)f32_from_f16_soft(x16);
    out[ACC_F32_F16_CAST] = s;

    uint16_t xb = bf16_from_f32(value), sb = 0;
    for (int i = 0; i < n; i++) sb = bf16_from_f32(f32_from_bf16(sb) + f32_from_bf16(xb));
    out[ACC_BF16_BF16] = f32_from_bf16(sb);
    s = 0.0f;
    for (int i = 0; i < n; i++) s += f32_from_bf16(xb);
    out[ACC_F32_BF16] = s;
    // STUDENT-END(01.accum_cpu_emulated)
}

#ifdef __FLT16_MAX__
int accum_cpu_has_native_f16(void) { return 1; }

void accum_cpu(int n, float value, float* out) {
    // STUDENT-BEGIN(01.accum_cpu): the fp16 rows again with the compiler's _Float16 (fp16 + fp16 rounds each add; float + fp16 widens) | see 01_benchmarking/README.md §Accumulation in low precision | test: test_01 accumulation/cpu_sums_match_numpy accumulation/program_prints_the_table_and_rejects_bad_flags | needs: 01.accum_cpu_emulated
    accum_cpu_emulated(n, value, out);  // fp32 and bf16 rows; the fp16 rows are redone natively
    _Float16 x = (_Float16)value, s16 = 0;
    for (int i = 0; i < n; i++) s16 += x;  // the assignment rounds s16 to fp16 each time
    out[ACC_F16_F16] = (float)s16;
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x;  // x widens to float (usual arithmetic conversions)
    out[ACC_F32_F16] = s;
    s = 0.0f;
    for (int i = 0; i < n; i++) s += (float)x;
    out[ACC_F32_F16_CAST] = s;
    // STUDENT-END(01.accum_cpu)
}
#else
int accum_cpu_has_native_f16(void) { return 0; }
void accum_cpu(int n, float value, float* out) { accum_cpu_emulated(n, value, out); }
#endif
