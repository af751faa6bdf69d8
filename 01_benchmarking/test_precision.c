// benchmarking_mixed_precision (a), (b): the dtype table (common/model_dtypes.h) is complete,
// agrees with the README's memory formula and with the README's copy, and — on a GPU — with
// what the CUDA model really allocates, buffer by buffer; RMSNorm's sum of squares overflows
// in fp16 exactly where the arithmetic says, never in bf16, and matches a double reference in
// fp32 (01_benchmarking/precision.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "01_benchmarking/precision.h"
#include "common/alloc.h"
#include "common/model.h"
#include "common/model_dtypes.h"
#include "common/model_gpu.h"
#include "common/rng.h"
#include "tests/harness.h"

// ---------------------------------------------------------------- the table itself

Test(precision, table_complete) {
    int absent_fp32 = 0;
    for (int t = 0; t < MT_COUNT; t++) {
        const model_tensor_info_t* i = model_tensor_info((model_tensor_t)t);
        cr_assert(i->name && i->name[0], "tensor class %d has no name", t);
        cr_assert(i->buffers && i->buffers[0], "%s: no buffers named", i->name);
        cr_assert(i->autocast && i->autocast[0], "%s: no autocast column", i->name);
        cr_assert(i->why && i->why[0], "%s: no reason", i->name);
        cr_assert(!strchr(i->name, '|') && !strchr(i->why, '|') && !strchr(i->autocast, '|'),
                  "%s: a '|' would break the Markdown table", i->name);
        const dtype_t f = i->dt[MP_FP32], b = i->dt[MP_BF16];
        // fp32 mode has no 16-bit tensor; bf16 mode has every tensor
        cr_assert(f == DT_F32 || f == DT_I32 || f == MT_ABSENT, "%s: fp32 mode is fp32 everywhere", i->name);
        cr_assert(b != MT_ABSENT, "%s: absent in bf16", i->name);
        if (f == MT_ABSENT) {
            absent_fp32++;
            cr_assert_eq(b, DT_BF16, "%s: only bf16 copies are missing in fp32 mode", i->name);
        }
    }
    cr_assert_eq(absent_fp32, 2, "the bf16 copies (weights, residual gradient) and nothing else");
    // The handout's point: reductions, statistics, master weights, gradients, optimizer state stay
    // fp32 under bf16; matmul operands and outputs do not.
    const model_tensor_t fp32_in_bf16[] = {MT_MASTER, MT_NORM_GAINS, MT_RESIDUAL, MT_MATMUL_ACC, MT_NORM_STATS,
                                           MT_ATT_LSE, MT_LOSS_STATS, MT_LOSS, MT_GRADS, MT_DRES, MT_OPTIM};
    for (size_t k = 0; k < sizeof fp32_in_bf16 / sizeof fp32_in_bf16[0]; k++)
        cr_assert_eq(model_tensor_dtype(MP_BF16, fp32_in_bf16[k]), DT_F32, "%s must stay fp32 under bf16",
                     model_tensor_info(fp32_in_bf16[k])->name);
    const model_tensor_t bf16_in_bf16[] = {MT_WEIGHTS_LP, MT_NORM_OUT, MT_QKV, MT_ATT_P, MT_ATT_OUT, MT_H13,
                                           MT_SWIGLU, MT_LOGITS, MT_DRES_LP, MT_ACT_GRADS};
    for (size_t k = 0; k < sizeof bf16_in_bf16 / sizeof bf16_in_bf16[0]; k++)
        cr_assert_eq(model_tensor_dtype(MP_BF16, bf16_in_bf16[k]), DT_BF16, "%s is a bf16 matmul operand/output",
                     model_tensor_info(bf16_in_bf16[k])->name);
}

static size_t tag_bytes(const model_buffer_t* b, int n, mem_tag_t tag, model_buffer_phase_t ph) {
    size_t s = 0;
    for (int i = 0; i < n; i++)
        if (b[i].tag == tag && b[i].phase == ph) s += b[i].bytes;
    return s;
}

// The buffers the table predicts add up to the README's activation formula (§Memory):
// per layer N·(8C + e·(6C + 2F)) + e·B·NH·T² + 8N, plus the head's.
Test(precision, buffers_match_readme_formula) {
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("small", 256, &cfg), 0);
    const int B = 4, T = 256;
    const size_t N = (size_t)B * T, C = cfg.d_model, F = cfg.d_ff, V = cfg.vocab, L = cfg.n_layers,
                 NH = cfg.n_heads;
    for (int p = 0; p < 2; p++) {
        model_buffer_t b[64];
        const int n = model_dtype_buffers(&cfg, B, T, (model_precision_t)p, 1, b, 64);
        cr_assert(n > 0 && n <= 64);
        const size_t e = p == MP_BF16 ? 2 : 4;
        const size_t want = L * (N * (8 * C + e * (6 * C + 2 * F)) + e * B * NH * T * T + 8 * N)  // blocks
                            + 4 * N * C + e * N * C + e * N * V + 12 * N;  // final residual, lnf, logits, rstdf/lse/loss
        cr_assert_eq(tag_bytes(b, n, MEM_ACTS, MB_CREATE), want, "%s: acts %zu, README formula %zu",
                     model_precision_name((model_precision_t)p), tag_bytes(b, n, MEM_ACTS, MB_CREATE), want);
        const param_layout_t lay = param_layout_make(&cfg);
        cr_assert_eq(tag_bytes(b, n, MEM_PARAMS, MB_CREATE), lay.total * (p == MP_BF16 ? 6 : 4));
        cr_assert_eq(tag_bytes(b, n, MEM_GRADS, MB_BACKWARD), lay.total * 4);
        cr_assert_eq(tag_bytes(b, n, MEM_OPTIM, MB_STEP), lay.total * 8);
    }
}

static char* read_all(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

Test(precision, readme_has_the_printed_table) {
    char* readme = read_all("01_benchmarking/README.md");
    cr_assert_not_null(readme, "01_benchmarking/README.md not found (run from the repository root)");
    char* md = precision_dtype_markdown();
    cr_assert_not_null(strstr(readme, md),
                       "01_benchmarking/README.md does not carry the dtype table as printed: paste the "
                       "output of build/01_benchmarking/precision --mode dtypes:\n%s", md);
    free(md);
    free(readme);
}

Test(precision, program_prints_both_tables) {
    char cmd[512], out[1 << 16];
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/precision --rows 4", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "%s failed:\n%s", cmd, out);
    cr_assert_not_null(strstr(out, "| RMSNorm statistics (1/rms per row) |"), "%s", out);
    cr_assert_not_null(strstr(out, "inf (every row)"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/precision --rows 0", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "--rows 0 is bad input (exit 2):\n%s", out);
}

// ---------------------------------------------------------------- RMSNorm's statistics

static float sumsq_const(norm_case_t c, float a, int d) {
    float* x = malloc((size_t)d * sizeof *x);
    cr_assert_not_null(x);
    for (int i = 0; i < d; i++) x[i] = a;
    const float s = norm_sumsq(c, x, d);
    free(x);
    return s;
}

// fp16's largest finite value is 65504 (sums from 65520 on round to inf). Rows whose partial
// sums are all exact in fp16, so the only question is the total:
//   65504 ones: 2047 per lane, 2047·32 = 65504 exactly: finite, the maximum;
//   65536 ones: 2048·32 = 65536: inf;
//   2560 fives: 80·25 = 2000 per lane, ·32 = 64000: finite and exact;
//   2624 fives: 82·25 = 2050 per lane, ·32 = 65600 > 65504: inf. 2624·25 = 65600 in exact arithmetic
//   too, so the fp16 norm of a d_model 2624 row of fives — rms 5 — has no statistics at all.
Test(precision, fp16_overflows_where_the_arithmetic_says) {
    cr_assert_eq(sumsq_const(NS_F16, 1.0f, 65504), 65504.0f);
    cr_assert(isinf(sumsq_const(NS_F16, 1.0f, 65536)));
    cr_assert_eq(sumsq_const(NS_F16, 5.0f, 2560), 64000.0f);
    cr_assert(isinf(sumsq_const(NS_F16, 5.0f, 2624)));
    cr_assert_eq(norm_rstd(INFINITY, 2624), 0.0f, "an overflowed row's 1/rms is 0: the norm zeroes it");
    // The squares alone overflow from |x| = 256 (256² = 65536), even with an fp32 sum:
    cr_assert(isinf(sumsq_const(NS_F16SQ_F32, 256.0f, 32)));
    cr_assert_eq(sumsq_const(NS_F16SQ_F32, 248.0f, 32), 32.0f * 61504.0f);  // 248² is exact in fp16
    // ... and with the square done in fp32, not at all:
    cr_assert_eq(sumsq_const(NS_F16IN_F32, 256.0f, 32), 32.0f * 65536.0f);
    // bf16 and fp32 hold these sums (bf16 to its 8 bits)
    cr_assert_eq(sumsq_const(NS_F32, 5.0f, 2624), 65600.0f);
    // bf16 is finite but low: past 1024 its spacing is 8, so each lane's +25 rounds to +24 or +32
    // and the lane sums drift (63488, 3.2% under 65600: the worst case of a constant row).
    const float b = sumsq_const(NS_BF16, 5.0f, 2624);
    cr_assert(isfinite(b) && b != 65600.0f && fabsf(b - 65600.0f) / 65600.0f < 5e-2f, "bf16 %g", (double)b);
}

// Gaussian rows: fp16 overflows in every row once d·rms² is well past 65504, in none well
// below it; bf16 never overflows and stays within ~1%; fp32 matches double to ~1e-7.
Test(precision, gaussian_rows) {
    const int ds[] = {1600, 2560};
    const double rms[] = {1, 4, 8, 16, 64, 256, 1024};
    const int rows = 16;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 7; j++) {
            norm_result_t r[NS_COUNT];
            norm_measure(ds[i], rms[j], rows, 7 + (uint64_t)(i * 100 + j), r);
            const double ss = ds[i] * rms[j] * rms[j];
            if (ss > 2 * 65504.0) cr_assert_eq(r[NS_F16].overflow_rows, rows, "d %d rms %g", ds[i], rms[j]);
            if (ss < 65504.0 / 2) {
                cr_assert_eq(r[NS_F16].overflow_rows, 0, "d %d rms %g", ds[i], rms[j]);
                cr_assert_lt(r[NS_F16].max_rel_err, 2e-3, "d %d rms %g", ds[i], rms[j]);
            }
            cr_assert_eq(r[NS_BF16].overflow_rows, 0, "bf16 overflowed at d %d rms %g", ds[i], rms[j]);
            cr_assert_lt(r[NS_BF16].max_rel_err, 2e-2, "d %d rms %g", ds[i], rms[j]);
            cr_assert_eq(r[NS_F16IN_F32].overflow_rows, 0);
            cr_assert_lt(r[NS_F16IN_F32].max_rel_err, 1e-4, "d %d rms %g", ds[i], rms[j]);
            cr_assert_eq(r[NS_F32].overflow_rows, 0);
            cr_assert_lt(r[NS_F32].max_rel_err, 1e-6, "fp32 vs double at d %d rms %g: %g", ds[i], rms[j],
                         r[NS_F32].max_rel_err);
        }
}

// ---------------------------------------------------------------- the real model (GPU)

typedef struct {
    int n;
    mem_tag_t tag[256];
    size_t bytes[256];
} seen_t;

static void observe(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live_after) {
    (void)live_after;
    seen_t* s = ctx;
    if (dev != DEV_CUDA || delta <= 0 || s->n >= 256) return;
    s->tag[s->n] = tag;
    s->bytes[s->n] = (size_t)delta;
    s->n++;
}

// Every buffer the table predicts for this phase is among the allocations seen (each matched
// once); for the tags in `exact` nothing else was allocated either.
static void check_phase(const char* what, const model_buffer_t* b, int nb, model_buffer_phase_t ph, seen_t* s,
                        const mem_tag_t* exact, int nexact) {
    int used[256] = {0};
    for (int i = 0; i < nb; i++) {
        if (b[i].phase != ph) continue;
        int found = -1;
        for (int k = 0; k < s->n && found < 0; k++)
            if (!used[k] && s->tag[k] == b[i].tag && s->bytes[k] == b[i].bytes) found = k;
        cr_assert(found >= 0, "%s: the table predicts %s (%s, %s) of %zu bytes; the model allocated no such buffer",
                  what, b[i].field, model_tensor_info(b[i].t)->name, mem_tag_name(b[i].tag), b[i].bytes);
        used[found] = 1;
    }
    for (int k = 0; k < s->n; k++)
        for (int e = 0; e < nexact; e++)
            cr_assert(used[k] || s->tag[k] != exact[e],
                      "%s: the model allocated %zu bytes tagged %s that the table does not predict", what,
                      s->bytes[k], mem_tag_name(s->tag[k]));
    s->n = 0;
}

static void real_buffers_match(model_precision_t prec) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 32, &cfg), 0);
    const int B = 3, T = 17;
    model_buffer_t b[64];
    const int nb = model_dtype_buffers(&cfg, B, T, prec, 1, b, 64);
    cr_assert(nb > 0 && nb <= 64);

    static seen_t s;
    memset(&s, 0, sizeof s);
    mem_set_observer(observe, &s);
    char err[256] = "";
    model_gpu_t* m = model_gpu_create(&cfg, B, T, prec, NULL, 1, err, sizeof err);
    cr_assert_not_null(m, "model_gpu_create: %s", err);
    const mem_tag_t create_exact[] = {MEM_PARAMS, MEM_ACTS, MEM_OTHER};
    check_phase("create", b, nb, MB_CREATE, &s, create_exact, 3);

    const size_t n = (size_t)B * T;
    int32_t* tok = malloc(2 * n * sizeof *tok);
    cr_assert_not_null(tok);
    rng_t r = rng_make(3);
    rng_fill_int(&r, tok, 2 * n, 0, cfg.vocab);
    model_gpu_set_tokens(m, tok, tok + n);
    const float loss = model_gpu_forward(m, model_gpu_inputs(m), model_gpu_targets(m));
    cr_assert(isfinite(loss));
    s.n = 0;  // the forward allocates nothing the table describes
    cr_assert_eq(model_gpu_backward(m, NULL, NULL, err, sizeof err), 0, "backward: %s", err);
    const mem_tag_t bwd_exact[] = {MEM_GRADS};
    check_phase("backward", b, nb, MB_BACKWARD, &s, bwd_exact, 1);

    adamw_config_t opt = adamw_default();
    cr_assert_eq(model_gpu_adamw(m, &opt, 1, err, sizeof err), 0, "adamw: %s", err);
    const mem_tag_t step_exact[] = {MEM_OPTIM};
    check_phase("AdamW", b, nb, MB_STEP, &s, step_exact, 1);

    mem_set_observer(NULL, NULL);
    model_gpu_destroy(m);
    free(tok);
}

Test(precision, gpu_bf16_buffers_match_table) { real_buffers_match(MP_BF16); }
Test(precision, gpu_fp32_buffers_match_table) { real_buffers_match(MP_FP32); }
