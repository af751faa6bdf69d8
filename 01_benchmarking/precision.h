// The handout's benchmarking_mixed_precision (a), (b) in C (build/01_benchmarking/precision):
//   1. the dtype of every tensor of the CUDA model under fp32 and bf16 (common/model_dtypes.h),
//      as the Markdown table the README carries;
//   2. why the norm's statistics stay fp32: RMSNorm's sum of squares over d_model accumulated
//      in fp16, bf16 and fp32, emulated on the CPU bit for bit (round after every multiply and
//      every add, as a 16-bit accumulator would), in the order our kernel sums (32 lanes
//      strided over the row, then a butterfly of shuffles: common/kernels_norm.cu).
#pragma once
#include <stdint.h>
#include "common/table.h"

#ifdef __cplusplus
extern "C" {
#endif

// The dtype table as Markdown (header, separator, one line per tensor class), malloc'd.
char* precision_dtype_markdown(void);

typedef enum {
    NS_F16 = 0,     // fp16 x, fp16 x², fp16 running sum: a half-precision kernel end to end
    NS_BF16,        // bf16 x, bf16 x², bf16 running sum
    NS_F16SQ_F32,   // fp16 x and x², fp32 running sum (the squares themselves still overflow)
    NS_F16IN_F32,   // fp16 x widened, fp32 x² and sum: a careful kernel reading fp16 activations
    NS_F32,         // fp32 x, x², sum: our kernel (the residual stream is fp32)
    NS_COUNT
} norm_case_t;
const char* norm_case_name(norm_case_t c);  // column header

// Σ x² over the row in case c (the kernel's order), returned as a float (inf on overflow).
float norm_sumsq(norm_case_t c, const float* x, int d);
// 1/rms = 1/sqrt(sumsq/d + eps) in fp32 (eps 1e-5, the model's); 0 when sumsq is inf.
float norm_rstd(float sumsq, int d);
// The same in double from the fp32 row: the reference.
double norm_rstd_ref(const float* x, int d);

typedef struct {
    int overflow_rows;   // rows whose sum of squares became inf
    double max_rel_err;  // max |rstd - ref| / ref over the other rows (0 if none)
} norm_result_t;

// `rows` Gaussian rows of length d, standard deviation rms (seeded), every case.
void norm_measure(int d, double rms, int rows, uint64_t seed, norm_result_t out[NS_COUNT]);
// The README's table: one row per (d, rms), one column per case.
table_t* norm_table(const int* ds, int nd, const double* rms, int nr, int rows, uint64_t seed);

#ifdef __cplusplus
}
#endif
