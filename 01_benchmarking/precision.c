// benchmarking_mixed_precision in C (see precision.h): the dtype table as Markdown, and
// RMSNorm's statistics accumulated in 16 and 32 bits. fp16 rounding is accumulation.h's
// f16_from_f32_soft, bf16's common/dtype.h's (both round to nearest even, as the GPU's
// intrinsics do); a product or sum of two 16-bit numbers computed in fp32 and rounded once is
// the correctly rounded 16-bit result (accumulation_cpu.c says why).
#include "01_benchmarking/precision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "01_benchmarking/accumulation.h"
#include "common/check.h"
#include "common/dtype.h"
#include "common/model_dtypes.h"
#include "common/rng.h"

#define NORM_EPS 1e-5f  // the model's RMSNorm eps (common/model.h)
#define LANES 32        // one warp per row (common/kernels_norm.cu)

char* precision_dtype_markdown(void) {
    size_t cap = 1 << 15, len = 0;
    char* s = malloc(cap);
    if (!s) DIE("out of host memory");
#define PUT(...)                                                                          \
    do {                                                                                  \
        int k_ = snprintf(s + len, cap - len, __VA_ARGS__);                               \
        if (k_ < 0 || (size_t)k_ >= cap - len) DIE("precision_dtype_markdown: table too long"); \
        len += (size_t)k_;                                                                \
    } while (0)
    PUT("| tensor | buffers | fp32 | bf16 (ours) | torch.autocast(bf16) | why (our bf16 path) |\n");
    PUT("|---|---|---|---|---|---|\n");
    for (int t = 0; t < MT_COUNT; t++) {
        const model_tensor_info_t* i = model_tensor_info((model_tensor_t)t);
        PUT("| %s | %s%s%s | %s | %s | %s | %s |\n", i->name, i->buffers[0] == '(' ? "" : "`", i->buffers,
            i->buffers[0] == '(' ? "" : "`", model_dtype_label(i->dt[MP_FP32]), model_dtype_label(i->dt[MP_BF16]),
            i->autocast, i->why);
    }
#undef PUT
    return s;
}

const char* norm_case_name(norm_case_t c) {
    static const char* names[NS_COUNT] = {
        "fp16 x, x², sum", "bf16 x, x², sum", "fp16 x, x²; fp32 sum", "fp16 x; fp32 x², sum", "fp32 (ours)",
    };
    if ((int)c < 0 || c >= NS_COUNT) DIE("norm_case_name: no case %d", (int)c);
    return names[c];
}

// One value rounded to the case's storage type (the activation as the kernel reads it).
static float round_in(norm_case_t c, float v) {
    switch (c) {
    case NS_F16: case NS_F16SQ_F32: case NS_F16IN_F32: return f32_from_f16_soft(f16_from_f32_soft(v));
    case NS_BF16: return f32_from_bf16(bf16_from_f32(v));
    default: return v;
    }
}
// The square, rounded where the case keeps it.
static float round_sq(norm_case_t c, float v) {
    switch (c) {
    case NS_F16: case NS_F16SQ_F32: return f32_from_f16_soft(f16_from_f32_soft(v));
    case NS_BF16: return f32_from_bf16(bf16_from_f32(v));
    default: return v;
    }
}
// The running sum, rounded after every add where the accumulator is 16-bit.
static float round_acc(norm_case_t c, float v) {
    switch (c) {
    case NS_F16: return f32_from_f16_soft(f16_from_f32_soft(v));
    case NS_BF16: return f32_from_bf16(bf16_from_f32(v));
    default: return v;
    }
}

float norm_sumsq(norm_case_t c, const float* x, int d) {
    // lane l sums x[l], x[l+32], ... (the kernel's strided loop), then warp_sum's butterfly:
    // v[i] += v[i ^ o] for o = 16, 8, 4, 2, 1; lane 0's value is the row's sum.
    float v[LANES];
    for (int l = 0; l < LANES; l++) {
        float acc = 0.0f;
        for (int i = l; i < d; i += LANES) {
            const float xi = round_in(c, x[i]);
            acc = round_acc(c, acc + round_sq(c, xi * xi));
        }
        v[l] = acc;
    }
    for (int o = LANES / 2; o > 0; o >>= 1) {
        float nv[LANES];
        for (int l = 0; l < LANES; l++) nv[l] = round_acc(c, v[l] + v[l ^ o]);
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

float norm_rstd(float sumsq, int d) {
    if (isinf(sumsq)) return 0.0f;  // 1/sqrt(inf): the norm's output becomes 0 for the whole row
    return 1.0f / sqrtf(sumsq / (float)d + NORM_EPS);
}

double norm_rstd_ref(const float* x, int d) {
    double s = 0.0;
    for (int i = 0; i < d; i++) s += (double)x[i] * (double)x[i];
    return 1.0 / sqrt(s / d + (double)NORM_EPS);
}

void norm_measure(int d, double rms, int rows, uint64_t seed, norm_result_t out[NS_COUNT]) {
    float* x = malloc((size_t)d * sizeof *x);
    if (!x) DIE("out of host memory");
    memset(out, 0, NS_COUNT * sizeof *out);
    rng_t r = rng_make(seed);
    for (int row = 0; row < rows; row++) {
        rng_fill_normal(&r, x, (size_t)d, 0.0f, (float)rms);
        const double ref = norm_rstd_ref(x, d);
        for (int c = 0; c < NS_COUNT; c++) {
            const float ss = norm_sumsq((norm_case_t)c, x, d);
            if (isinf(ss)) {
                out[c].overflow_rows++;
                continue;
            }
            const double e = fabs((double)norm_rstd(ss, d) - ref) / ref;
            if (e > out[c].max_rel_err) out[c].max_rel_err = e;
        }
    }
    free(x);
}

table_t* norm_table(const int* ds, int nd, const double* rms, int nr, int rows, uint64_t seed) {
    const char* hdr[3 + NS_COUNT] = {"d_model", "rms", "d·rms²"};
    for (int c = 0; c < NS_COUNT; c++) hdr[3 + c] = norm_case_name((norm_case_t)c);
    table_t* t = table_new("", 3 + NS_COUNT, hdr);
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nr; j++) {
            norm_result_t res[NS_COUNT];
            norm_measure(ds[i], rms[j], rows, seed + (uint64_t)(i * 1000 + j), res);
            table_row(t);
            table_cell(t, "%d", ds[i]);
            table_cell(t, "%g", rms[j]);
            table_cell(t, "%.3g", ds[i] * rms[j] * rms[j]);
            for (int c = 0; c < NS_COUNT; c++) {
                if (res[c].overflow_rows == rows) table_cell(t, "inf (every row)");
                else if (res[c].overflow_rows) table_cell(t, "inf in %d/%d rows", res[c].overflow_rows, rows);
                else table_cell(t, "%.1e", res[c].max_rel_err);
            }
        }
    return t;
}
