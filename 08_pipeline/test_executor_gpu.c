// Stage 08 on the GPU: the CUDA model's range pass (common/model_gpu_range.c) against its
// whole-model pass on one GPU, in process; then pp_train --backend nccl --check-single on two
// GPUs (the GPU executor, executor_gpu.c). Every test skips with the reason when the GPUs are
// not there. The refusal (--dp on the GPU) runs anywhere.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpu.h"
#include "common/model_gpu.h"
#include "common/rng.h"
#include "tests/harness.h"

#define GB 2  // rows
#define GT 8  // sequence length

static model_config_t tiny3(void) {
    model_config_t c;
    cr_assert_eq(model_config_by_name("tiny", 16, &c), 0);
    c.n_layers = 3;
    return c;
}
static void toks(int32_t* in, int32_t* tg, int n, int V, uint64_t seed) {
    rng_t r = rng_make(seed);
    rng_fill_int(&r, in, (size_t)n, 0, V);
    rng_fill_int(&r, tg, (size_t)n, 0, V);
}
static model_gpu_t* make(const model_config_t* c) {
    char err[256];
    model_gpu_t* m = model_gpu_create(c, GB, GT, MP_FP32, NULL, 5, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    return m;
}
// Gradients compared element by element: `bitwise` everywhere but the embedding, whose
// gradient is summed with atomics (k_embedding_bwd) in an order the GPU decides; there and
// when !bitwise, within rtol (atol rtol·1e-2).
static void compare(model_gpu_t* m, const float* got, const float* want, int bitwise, double rtol, const char* what) {
    const param_layout_t* lay = model_gpu_layout(m);
    const param_info_t* E = &lay->p[param_index(lay, PK_EMBED, -1)];
    for (size_t i = 0; i < lay->total; i++) {
        const int in_embed = i >= E->offset && i < E->offset + E->numel;
        if (bitwise && !in_embed) {
            cr_assert(memcmp(&got[i], &want[i], 4) == 0, "%s: element %zu differs: %.9g vs %.9g", what, i, (double)got[i],
                      (double)want[i]);
        } else {
            const double e = fabs((double)got[i] - want[i]), tol = rtol * 1e-2 + rtol * fabs((double)want[i]);
            cr_assert(e <= tol, "%s: element %zu: %.9g vs %.9g (|diff| %.3g > %.3g)", what, i, (double)got[i],
                      (double)want[i], e, tol);
        }
    }
}

// The whole model as one range: the same per-block functions on the same buffers' shapes, so
// the same bits (loss and every gradient but the embedding's atomics).
Test(model_gpu_range, whole_range_is_the_whole_model_bit_for_bit) {
    SKIP_WITHOUT_GPU();
    const model_config_t c = tiny3();
    int32_t in[GB * GT], tg[GB * GT];
    toks(in, tg, GB * GT, c.vocab, 11);
    model_gpu_t* a = make(&c);
    model_gpu_t* b = make(&c);
    char err[256];
    model_gpu_set_tokens(a, in, tg);
    const float la = model_gpu_forward(a, model_gpu_inputs(a), model_gpu_targets(a));
    cr_assert_eq(model_gpu_backward(a, NULL, NULL, err, sizeof err), 0, "%s", err);
    model_gpu_range_acts_t s;
    const model_range_t r = {0, c.n_layers, 1, 1};
    cr_assert_eq(model_gpu_range_acts_create(b, &s, &r, 0, err, sizeof err), 0, "%s", err);
    model_gpu_set_tokens(b, in, tg);
    model_gpu_range_forward(b, &s, model_gpu_inputs(b), model_gpu_targets(b), 1.0f);
    const float lb = model_gpu_range_loss(b, &s);
    cr_assert(memcmp(&la, &lb, 4) == 0, "loss %.9g vs %.9g", (double)lb, (double)la);
    cr_assert_eq(model_gpu_range_backward(b, &s, 0, NULL, NULL, err, sizeof err), 0, "%s", err);
    const size_t n = model_gpu_layout(a)->total;
    float* ga = malloc(n * 4);
    float* gb = malloc(n * 4);
    model_gpu_get_grads(a, ga);
    model_gpu_get_grads(b, gb);
    compare(a, gb, ga, 1, 1e-6, "whole range");
    model_gpu_range_acts_destroy(&s);
    model_gpu_destroy(a);
    model_gpu_destroy(b);
    free(ga);
    free(gb);
}

// Two ranges chained by copying the activation forward and the gradient back, each run on
// the same shapes (N x C per block) as the whole pass: cuBLAS sees the same problems, so the
// bits should agree as well; the test allows rtol 1e-5 all the same (cuBLAS may choose its
// algorithm by pointer alignment too, and the CPU reference's whole-vs-chained test is the
// one that pins bits). Then gradient accumulation: two micro-batches ADDed equal the sum of
// the two WRITTEN ones (beta = 1 in the GEMM epilogue, one saxpy for the norm weights).
Test(model_gpu_range, two_ranges_chained_and_accumulated) {
    SKIP_WITHOUT_GPU();
    const model_config_t c = tiny3();
    int32_t in[GB * GT], tg[GB * GT], in2[GB * GT], tg2[GB * GT];
    toks(in, tg, GB * GT, c.vocab, 12);
    toks(in2, tg2, GB * GT, c.vocab, 13);
    model_gpu_t* a = make(&c);
    model_gpu_t* b = make(&c);
    char err[256];
    model_gpu_set_tokens(a, in, tg);
    const float la = model_gpu_forward(a, model_gpu_inputs(a), model_gpu_targets(a));
    cr_assert_eq(model_gpu_backward(a, NULL, NULL, err, sizeof err), 0, "%s", err);
    const size_t n = model_gpu_layout(a)->total, NC = (size_t)GB * GT * c.d_model;
    float* g1 = malloc(n * 4);
    float* g2 = malloc(n * 4);
    float* gc = malloc(n * 4);
    model_gpu_get_grads(a, g1);

    const model_range_t r0 = {0, 1, 1, 0}, r1 = {1, c.n_layers, 0, 1};
    model_gpu_range_acts_t s0, s1;
    cr_assert_eq(model_gpu_range_acts_create(b, &s0, &r0, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_gpu_range_acts_create(b, &s1, &r1, 0, err, sizeof err), 0, "%s", err);
    int32_t *d_in, *d_tg;
    cr_assert_eq(cudaMalloc((void**)&d_in, sizeof in), cudaSuccess);
    cr_assert_eq(cudaMalloc((void**)&d_tg, sizeof tg), cudaSuccess);
    cudaStream_t st = model_gpu_stream(b);
    for (int k = 0; k < 2; k++) {  // k = 0: micro-batch 1 WRITTEN; k = 1: both ADDed from zero
        for (int j = 0; j <= k; j++) {
            cr_assert_eq(cudaMemcpy(d_in, j ? in2 : in, sizeof in, cudaMemcpyHostToDevice), cudaSuccess);
            cr_assert_eq(cudaMemcpy(d_tg, j ? tg2 : tg, sizeof tg, cudaMemcpyHostToDevice), cudaSuccess);
            model_gpu_range_forward(b, &s0, d_in, NULL, 1.0f);
            cr_assert_eq(cudaMemcpyAsync(s1.res, s0.res + (size_t)s0.nL * NC, NC * 4, cudaMemcpyDeviceToDevice, st), cudaSuccess);
            model_gpu_range_forward(b, &s1, NULL, d_tg, 1.0f);
            const float lb = model_gpu_range_loss(b, &s1);
            if (k == 0) cr_assert(fabsf(lb - la) <= 1e-5f * fabsf(la), "chained loss %.9g vs %.9g", (double)lb, (double)la);
            if (k == 1 && j == 0) {  // zero the buffer, then ADD both
                cr_assert_eq(cudaMemsetAsync(model_gpu_grads(b), 0, n * 4, st), cudaSuccess);
            }
            cr_assert_eq(model_gpu_range_backward(b, &s1, k, NULL, NULL, err, sizeof err), 0, "%s", err);
            cr_assert_eq(cudaMemcpyAsync(s0.dy, s1.dx, NC * 4, cudaMemcpyDeviceToDevice, st), cudaSuccess);
            cr_assert_eq(model_gpu_range_backward(b, &s0, k, NULL, NULL, err, sizeof err), 0, "%s", err);
            cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
        }
        if (k == 0) {
            model_gpu_get_grads(b, gc);
            compare(a, gc, g1, 0, 1e-5, "two ranges chained");
        }
    }
    // The second micro-batch through the whole model, for the expected sum.
    model_gpu_set_tokens(a, in2, tg2);
    model_gpu_forward(a, model_gpu_inputs(a), model_gpu_targets(a));
    cr_assert_eq(model_gpu_backward(a, NULL, NULL, err, sizeof err), 0, "%s", err);
    model_gpu_get_grads(a, g2);
    for (size_t i = 0; i < n; i++) g2[i] += g1[i];
    model_gpu_get_grads(b, gc);
    compare(a, gc, g2, 0, 1e-5, "two micro-batches accumulated");
    cudaFree(d_in);
    cudaFree(d_tg);
    model_gpu_range_acts_destroy(&s0);
    model_gpu_range_acts_destroy(&s1);
    model_gpu_destroy(a);
    model_gpu_destroy(b);
    free(g1);
    free(g2);
    free(gc);
}

// ---------------------------------------------------------------- the split backward (ZB-H1)
// The parameter indices a backward's grad_ready hook reported, in order.
typedef struct {
    int idx[256];
    int n;
} hook_log_t;
static void log_hook(void* ctx, int i) {
    hook_log_t* h = ctx;
    cr_assert_lt(h->n, 256);
    h->idx[h->n++] = i;
}
static int is_norm(const param_layout_t* lay, int i) {
    const param_kind_t k = lay->p[i].kind;
    return k == PK_LN1 || k == PK_LN2 || k == PK_LNF;
}

// One range's backward three times from one forward state, WRITE then ADD (the same micro-batch
// twice): fused (model_gpu_range_backward) on a set made with split 0, BI then W on a set made
// with split 1. The gradient buffer is filled with NaN bytes first, so an element one of them
// forgets to write shows. Checks: the same gradient bits everywhere (every product is the
// fused one on the same values and shapes, slots aligned as the fused buffers; the embedding's
// scatter is deterministic), the same input gradient bits, and the hooks: BI reports exactly
// the fused order's norms, W exactly its other parameters, each in the fused order.
static void split_equals_fused(const model_config_t* c, const model_range_t* r) {
    model_gpu_t* m = make(c);
    char err[256];
    const param_layout_t* lay = model_gpu_layout(m);
    const size_t n = lay->total, NC = (size_t)GB * GT * c->d_model;
    cudaStream_t st = model_gpu_stream(m);
    int32_t in[GB * GT], tg[GB * GT];
    toks(in, tg, GB * GT, c->vocab, 21 + r->l0);
    model_gpu_set_tokens(m, in, tg);
    float* x0 = malloc(NC * 4);  // a range's input and output gradient: N(0, 1)
    float* dy = malloc(NC * 4);
    rng_t g = rng_make(31 + r->l0);
    rng_fill_normal(&g, x0, NC, 0.0f, 1.0f);
    rng_fill_normal(&g, dy, NC, 0.0f, 1e-2f);
    float* G[2] = {malloc(n * 4), malloc(n * 4)};  // [fused, split]
    float* DX[2] = {malloc(NC * 4), malloc(NC * 4)};
    hook_log_t fused = {{0}, 0}, bi = {{0}, 0}, w = {{0}, 0};
    for (int split = 0; split < 2; split++) {
        model_gpu_range_acts_t s;
        cr_assert_eq(model_gpu_range_acts_create(m, &s, r, split, err, sizeof err), 0, "%s", err);
        cr_assert_eq(model_gpu_prepare_backward(m, err, sizeof err), 0, "%s", err);
        cr_assert_eq(cudaMemsetAsync(model_gpu_grads(m), 0xff, n * 4, st), cudaSuccess);  // NaN
        for (int acc = 0; acc < 2; acc++) {  // WRITE, then ADD the same micro-batch again
            if (!r->embed) cr_assert_eq(cudaMemcpyAsync(s.res, x0, NC * 4, cudaMemcpyHostToDevice, st), cudaSuccess);
            if (!r->head) cr_assert_eq(cudaMemcpyAsync(s.dy, dy, NC * 4, cudaMemcpyHostToDevice, st), cudaSuccess);
            model_gpu_range_forward(m, &s, r->embed ? model_gpu_inputs(m) : NULL, r->head ? model_gpu_targets(m) : NULL,
                                    0.5f);
            hook_log_t* hf = acc ? NULL : &fused;  // the hooks of the WRITE pass
            if (!split) {
                cr_assert_eq(model_gpu_range_backward(m, &s, acc, hf ? log_hook : NULL, hf, err, sizeof err), 0, "%s", err);
            } else {
                cr_assert_eq(model_gpu_range_backward_input(m, &s, acc, acc ? NULL : log_hook, acc ? NULL : &bi, err,
                                                            sizeof err),
                             0, "%s", err);
                model_gpu_range_backward_weight(m, &s, acc, acc ? NULL : log_hook, acc ? NULL : &w);
            }
        }
        cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
        model_gpu_get_grads(m, G[split]);
        if (!r->embed) cr_assert_eq(cudaMemcpy(DX[split], s.dx, NC * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        model_gpu_range_acts_destroy(&s);
    }
    const char* what = r->embed ? "first range (embedding)" : r->head ? "last range (head)" : "middle range";
    size_t b0, b1;
    model_range_span(lay, c, r, &b0, &b1);
    for (size_t i = 0; i < n; i++)  // (elements neither wrote are NaN bytes in both)
        cr_assert(memcmp(&G[1][i], &G[0][i], 4) == 0, "%s: gradient element %zu differs: split %.9g, fused %.9g", what, i,
                  (double)G[1][i], (double)G[0][i]);
    for (int k = 0; k < lay->n; k++) {  // every parameter of the range was written by both
        const param_info_t* P = &lay->p[k];
        if (P->offset < b0 || P->offset >= b1) continue;
        for (size_t i = P->offset; i < P->offset + P->numel; i++)
            cr_assert(isfinite(G[1][i]), "%s: %s element %zu not written", what, P->name, i - P->offset);
    }
    if (!r->embed)
        for (size_t i = 0; i < NC; i++)
            cr_assert(memcmp(&DX[1][i], &DX[0][i], 4) == 0, "%s: input gradient element %zu: split %.9g, fused %.9g",
                      what, i, (double)DX[1][i], (double)DX[0][i]);
    // Hooks: BI the fused order's norms, W its other parameters, nothing twice or missing.
    cr_assert_eq(bi.n + w.n, fused.n, "%s: %d + %d hooks, fused %d", what, bi.n, w.n, fused.n);
    int kb = 0, kw = 0;
    for (int k = 0; k < fused.n; k++) {
        const int i = fused.idx[k];
        if (is_norm(lay, i)) {
            cr_assert(kb < bi.n && bi.idx[kb] == i, "%s: BI hook %d is not %s", what, kb, lay->p[i].name);
            kb++;
        } else {
            cr_assert(kw < w.n && w.idx[kw] == i, "%s: W hook %d is not %s", what, kw, lay->p[i].name);
            kw++;
        }
    }
    free(x0);
    free(dy);
    for (int k = 0; k < 2; k++) free(G[k]), free(DX[k]);
    model_gpu_destroy(m);
}

// model_gpu_range_backward_input + _weight against model_gpu_range_backward, per kind of range
// of a 3-block model: the first stage (embedding + block 0), a middle one (block 1), the last
// (block 2 + head); and the whole model as one range.
Test(model_gpu_range, split_backward_equals_fused_bit_for_bit) {
    SKIP_WITHOUT_GPU();
    const model_config_t c = tiny3();
    const model_range_t rs[] = {{0, 1, 1, 0}, {1, 2, 0, 0}, {2, 3, 0, 1}, {0, 3, 1, 1}};
    for (size_t k = 0; k < sizeof rs / sizeof rs[0]; k++) split_equals_fused(&c, &rs[k]);
}

// ---------------------------------------------------------------- pp_train on two GPUs
static char g_out[1 << 16];
static int run_pp(const char* args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh 2 %s/08_pipeline/pp_train %s 2>&1", build_dir(), args);
    return run_capture(cmd, g_out, sizeof g_out);
}

// GPipe, 1F1B (m = 1, 4, 8) and interleaved (v = 2, m = 4, 8): the parameters after 3 AdamW
// steps equal one CUDA model trained on the whole global batch (pp_train's tolerance, stated
// there), and every rank prints its CUDA-event timing and peak GPU memory.
Test(pp_train_nccl, gpipe_1f1b_interleaved_equal_single_gpu, .timeout = 300) {
    if (gpu_count() < 2) cr_skip_test("needs 2 CUDA GPUs (found %d)%s%s", gpu_count(), gpu_count() ? "" : ": ", gpu_absent_reason());
    const struct {
        const char* sched;
        int m;
        const char* extra;
    } cases[] = {{"gpipe", 1, ""}, {"gpipe", 4, ""}, {"1f1b", 4, ""}, {"1f1b", 8, ""}, {"interleaved", 4, "--chunks 2"},
                 {"interleaved", 8, "--chunks 2"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[512];
        snprintf(args, sizeof args,
                 "--backend nccl --layers 8 --context 16 --batch %d --micro-batches %d --schedule %s --steps 3 --check-single 1 %s",
                 2 * cases[k].m, cases[k].m, cases[k].sched, cases[k].extra);
        const int st = run_pp(args);
        cr_assert_eq(st, 0, "%s: exit %d:\n%s", args, st, g_out);
        cr_assert(strstr(g_out, "check-single: 0 of"), "%s: differs from single-GPU training:\n%s", args, g_out);
        cr_assert(strstr(g_out, "# CUDA events"), "%s", g_out);
        cr_assert(strstr(g_out, "peak GPU memory"), "%s", g_out);
        cr_assert(strstr(g_out, "measured bubble "), "%s", g_out);
    }
}

// A rank's timing line lists "KIND <ms> x<count>" for each compute kind it ran.
static int ran_kind(const char* out, const char* kind) {
    char pat[8];
    snprintf(pat, sizeof pat, "%s ", kind);
    for (const char* p = strstr(out, pat); p; p = strstr(p + 1, pat)) {
        char fmt[32];
        double ms;
        int n;
        snprintf(fmt, sizeof fmt, "%s %%lf x%%d", kind);
        if ((p == out || p[-1] == ' ' || p[-1] == '(') && sscanf(p, fmt, &ms, &n) == 2 && n > 0) return 1;
    }
    return 0;
}

// ZB-H1 (BI and W: the CUDA model's split backward) for m = 1 (m < p), 2, 4, 8: the parameters
// after 3 AdamW steps equal one CUDA model trained on the whole global batch, as above.
Test(pp_train_nccl, zbh1_equals_single_gpu, .timeout = 300) {
    if (gpu_count() < 2) cr_skip_test("needs 2 CUDA GPUs (found %d)%s%s", gpu_count(), gpu_count() ? "" : ": ", gpu_absent_reason());
    const int ms[] = {1, 2, 4, 8};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        char args[512];
        snprintf(args, sizeof args,
                 "--backend nccl --layers 8 --context 16 --batch %d --micro-batches %d --schedule zbh1 --steps 3 --check-single 1",
                 2 * ms[k], ms[k]);
        const int st = run_pp(args);
        cr_assert_eq(st, 0, "%s: exit %d:\n%s", args, st, g_out);
        cr_assert(strstr(g_out, "check-single: 0 of"), "%s: differs from single-GPU training:\n%s", args, g_out);
        cr_assert(ran_kind(g_out, "BI") && ran_kind(g_out, "W"), "%s: no BI / W in the timing lines:\n%s", args, g_out);
        cr_assert(strstr(g_out, "measured bubble "), "%s", g_out);
    }
}

// The forward-only lists on two GPUs (pp_exec_gpu_forward, the trainer's --pp evaluation):
// pp_train --check-forward after 2 steps: no gradient element changes, and the loss equals the
// training flush's on the same batch (within rtol 1e-6, pp_train says why). GPipe m = 1 (one
// send, nothing to reuse), 1F1B m = 4 and 8 (stage 0 reuses a set right after its send: the
// wait executor.h describes), ZB-H1 (sets made split) and interleaved v = 2 (rank 1 sends to
// rank 0's next chunk).
Test(pp_train_nccl, forward_only_leaves_gradients_and_equals_the_flush_loss, .timeout = 300) {
    if (gpu_count() < 2) cr_skip_test("needs 2 CUDA GPUs (found %d)%s%s", gpu_count(), gpu_count() ? "" : ": ", gpu_absent_reason());
    const struct {
        const char* sched;
        int m;
        const char* extra;
    } cases[] = {{"gpipe", 1, ""}, {"1f1b", 4, ""}, {"1f1b", 8, ""}, {"zbh1", 4, ""}, {"interleaved", 4, "--chunks 2"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[512];
        snprintf(args, sizeof args,
                 "--backend nccl --layers 8 --context 16 --batch %d --micro-batches %d --schedule %s --steps 2 --check-forward 1 %s",
                 2 * cases[k].m, cases[k].m, cases[k].sched, cases[k].extra);
        const int st = run_pp(args);
        cr_assert_eq(st, 0, "%s: exit %d:\n%s", args, st, g_out);
        cr_assert(strstr(g_out, "training flush (equal within rtol 1e-6)"), "%s:\n%s", args, g_out);
        cr_assert(strstr(g_out, "pass: 0 of ") && strstr(g_out, "non-zero (untouched)"), "%s:\n%s", args, g_out);
    }
}

// What the GPU executor does not do is refused with one line, before any GPU is touched.
Test(pp_train_nccl, refusals_one_line_exit_2) {
    const char* cases[][2] = {
        {"--backend nccl --dp 2", "pipeline x data parallel runs on the CPU only"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int st = run_pp(cases[k][0]);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cases[k][0], st, g_out);
        cr_assert(strstr(g_out, cases[k][1]), "%s: expected '%s' in:\n%s", cases[k][0], cases[k][1], g_out);
    }
}
