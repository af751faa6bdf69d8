// The CUDA Transformer (common/model_gpu.h) against the CPU reference (common/model_cpu.h) on
// the same parameters and tokens, and against the PyTorch fixture (tests/fixtures/model/):
// loss, logits, every gradient, parameters after AdamW steps, the grad-ready hook, the
// attention plug-in plumbing, and clean failure on out-of-memory. Odd sequence length (T = 17)
// and batch (3). Every test needs a GPU and skips without one.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "common/adamw_cpu.h"
#include "common/check.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"

#define SEED 20251122u
#define B_TEST 3
#define T_TEST 17

static float max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void make_tokens(int32_t* x, size_t n, int V, uint64_t seed) {
    rng_t r = rng_make(seed);
    rng_fill_int(&r, x, n, 0, V);
}

// The GPU model and the CPU reference at the same parameters (the CPU's, copied over) and
// tokens; forward done on both.
typedef struct {
    model_config_t cfg;
    int B, T;
    model_cpu_t cpu;
    model_gpu_t* gpu;
    int32_t *in, *tg;   // host (B, T)
    float cpu_loss, gpu_loss;
} pair_t;

static void pair_make(pair_t* p, model_precision_t prec) {
    memset(p, 0, sizeof *p);
    cr_assert_eq(model_config_by_name("tiny", 32, &p->cfg), 0);
    p->B = B_TEST;
    p->T = T_TEST;
    model_cpu_create(&p->cpu, &p->cfg, p->B, p->T, SEED);
    char err[256] = "";
    p->gpu = model_gpu_create(&p->cfg, p->B, p->T, prec, NULL, SEED, err, sizeof err);
    cr_assert_not_null(p->gpu, "model_gpu_create: %s", err);
    cr_assert_eq(model_gpu_layout(p->gpu)->total, p->cpu.layout.total);
    model_gpu_set_params(p->gpu, p->cpu.params);
    const size_t n = (size_t)p->B * p->T;
    p->in = malloc(n * 4);
    p->tg = malloc(n * 4);
    make_tokens(p->in, n, p->cfg.vocab, 1);
    make_tokens(p->tg, n, p->cfg.vocab, 2);
    model_gpu_set_tokens(p->gpu, p->in, p->tg);
}

static void pair_forward(pair_t* p) {
    p->cpu_loss = model_cpu_forward(&p->cpu, p->in, p->tg, p->B, p->T);
    p->gpu_loss = model_gpu_forward(p->gpu, model_gpu_inputs(p->gpu), model_gpu_targets(p->gpu));
}

static void pair_free(pair_t* p) {
    model_gpu_destroy(p->gpu);
    model_cpu_destroy(&p->cpu);
    free(p->in);
    free(p->tg);
}

// Every parameter's gradient, one comparison each (the message names the parameter).
// atol is relative to the largest |gradient| of that parameter, so one tolerance fits the
// embedding (tiny gradients) and the LM head alike.
static void check_grads(const param_layout_t* lay, const float* got, const float* want,
                        double rtol, double atol_rel) {
    for (int i = 0; i < lay->n; i++) {
        const param_info_t* pi = &lay->p[i];
        const float scale = max_abs(want + pi->offset, pi->numel);
        char what[96];
        snprintf(what, sizeof what, "grad %s", pi->name);
        ASSERT_ALLCLOSE(got + pi->offset, want + pi->offset, pi->numel, rtol, atol_rel * scale, what);
    }
}

// Writes 0xFF (NaN) over every parameter's gradient (not the padding, which the backward never
// writes), so that an element the backward forgot fails the comparison.
static void poison_grads(model_gpu_t* m) {
    const param_layout_t* lay = model_gpu_layout(m);
    for (int i = 0; i < lay->n; i++)
        CUDA_CHECK(cudaMemsetAsync(model_gpu_grads(m) + lay->p[i].offset, 0xFF, lay->p[i].numel * 4,
                                   model_gpu_stream(m)));
}

static void backward_ok(model_gpu_t* m, grad_ready_fn hook, void* ctx) {
    char err[256] = "";
    cr_assert_eq(model_gpu_backward(m, hook, ctx, err, sizeof err), 0, "backward: %s", err);
}

static void compare_with_cpu(model_precision_t prec, double loss_rtol, double logit_rtol,
                             double logit_atol_rel, double grad_rtol, double grad_atol_rel) {
    pair_t p;
    pair_make(&p, prec);
    pair_forward(&p);
    cr_assert(fabsf(p.gpu_loss - p.cpu_loss) <= loss_rtol * fabsf(p.cpu_loss),
              "loss: gpu %.7f cpu %.7f", p.gpu_loss, p.cpu_loss);
    const size_t nlog = (size_t)p.B * p.T * p.cfg.vocab;
    float* logits = malloc(nlog * 4);
    memset(logits, 0xFF, nlog * 4);
    model_gpu_get_logits(p.gpu, logits);
    ASSERT_ALLCLOSE(logits, p.cpu.a.logits, nlog, logit_rtol,
                    logit_atol_rel * max_abs(p.cpu.a.logits, nlog), "logits");
    free(logits);

    model_cpu_backward(&p.cpu, NULL, NULL);
    backward_ok(p.gpu, NULL, NULL);
    // Second pass with poisoned gradients: every gradient element must be rewritten.
    poison_grads(p.gpu);
    pair_forward(&p);
    backward_ok(p.gpu, NULL, NULL);
    const size_t total = p.cpu.layout.total;
    float* g = malloc(total * 4);
    model_gpu_get_grads(p.gpu, g);
    check_grads(&p.cpu.layout, g, p.cpu.grads, grad_rtol, grad_atol_rel);
    free(g);
    pair_free(&p);
}

// fp32: both sides are fp32; they differ only in the order of the sums (cuBLAS's blocked
// GEMMs vs the reference's loops, over K up to V = 512), about 1e-6 relative to each tensor's
// scale, so 1e-4 of the scale leaves room without hiding a wrong index.
Test(model_gpu, fp32_matches_cpu_reference) {
    SKIP_WITHOUT_GPU();
    compare_with_cpu(MP_FP32, 1e-5, 1e-4, 1e-5, 1e-3, 1e-4);
}

// bf16: activations and matmul operands are rounded to 8 significant bits (relative 2^-9 per
// rounding) several times per layer, so a few percent of each tensor's scale; a wrong formula
// is off by O(1) of the scale and still fails.
Test(model_gpu, bf16_matches_cpu_reference) {
    SKIP_WITHOUT_GPU();
    compare_with_cpu(MP_BF16, 2e-2, 5e-2, 3e-2, 1e-1, 5e-2);
}

// The hook: called once per parameter, in the order model_cpu.h documents, and only when the
// gradient is final: a copy taken inside the hook (after waiting for the stream) must equal
// the gradient at the end of the backward.
typedef struct {
    model_gpu_t* m;
    int* calls;
    int* order;
    int n_calls;
    float* snapshot;
} hook_ctx_t;

static void record_hook(void* vctx, int idx) {
    hook_ctx_t* h = vctx;
    const param_info_t* pi = &model_gpu_layout(h->m)->p[idx];
    h->calls[idx]++;
    h->order[h->n_calls++] = idx;
    CUDA_CHECK(cudaStreamSynchronize(model_gpu_stream(h->m)));
    CUDA_CHECK(cudaMemcpy(h->snapshot + pi->offset, model_gpu_grads(h->m) + pi->offset,
                          pi->numel * 4, cudaMemcpyDeviceToHost));
}

static void cpu_order_hook(void* vctx, int idx) {
    hook_ctx_t* h = vctx;
    h->order[h->n_calls++] = idx;
}

Test(model_gpu, grad_ready_hook_once_per_parameter_when_final) {
    SKIP_WITHOUT_GPU();
    pair_t p;
    pair_make(&p, MP_FP32);
    const param_layout_t* lay = model_gpu_layout(p.gpu);
    const int n = lay->n;
    hook_ctx_t h = {.m = p.gpu, .calls = calloc(n, sizeof(int)), .order = calloc(n + 8, sizeof(int)),
                    .snapshot = calloc(lay->total, 4)};
    // A first backward allocates the gradients; the second (poisoned) is the one checked.
    pair_forward(&p);
    backward_ok(p.gpu, NULL, NULL);
    poison_grads(p.gpu);
    pair_forward(&p);
    backward_ok(p.gpu, record_hook, &h);
    for (int i = 0; i < n; i++)
        cr_expect_eq(h.calls[i], 1, "hook for %s called %d times", lay->p[i].name, h.calls[i]);
    cr_assert_eq(h.n_calls, n);
    hook_ctx_t c = {.order = calloc(n + 8, sizeof(int))};
    model_cpu_forward(&p.cpu, p.in, p.tg, p.B, p.T);
    model_cpu_backward(&p.cpu, cpu_order_hook, &c);
    cr_assert_eq(c.n_calls, n);
    for (int i = 0; i < n; i++)
        cr_expect_eq(h.order[i], c.order[i], "hook call %d: gpu %s, cpu %s", i,
                     lay->p[h.order[i]].name, lay->p[c.order[i]].name);
    float* g = malloc(lay->total * 4);
    model_gpu_get_grads(p.gpu, g);
    for (int i = 0; i < n; i++)
        cr_assert(memcmp(g + lay->p[i].offset, h.snapshot + lay->p[i].offset, lay->p[i].numel * 4) == 0,
                  "gradient of %s changed after its hook", lay->p[i].name);
    free(g);
    free(h.calls);
    free(h.order);
    free(h.snapshot);
    free(c.order);
    pair_free(&p);
}

// Three training steps (forward, backward, AdamW) on both. fp32: AdamW normalises each
// gradient element (m̂ / sqrt(v̂)), so an element whose gradient is ~1e-3 of its tensor's scale
// gets a full-size update whose value fp32 reassociation noise can move by a few % of lr (seen
// on an H100: one element of 172352 off by 0.09·lr). atol = 0.25·lr allows that and still
// fails a wrong update, which is off by about lr on many elements (a sign flip is 2·lr).
Test(model_gpu, fp32_adamw_steps_match_cpu_reference) {
    SKIP_WITHOUT_GPU();
    pair_t p;
    pair_make(&p, MP_FP32);
    adamw_config_t opt = adamw_default();
    char err[256] = "";
    for (int step = 1; step <= 3; step++) {
        pair_forward(&p);
        cr_assert(fabsf(p.gpu_loss - p.cpu_loss) <= 1e-5f * fabsf(p.cpu_loss),
                  "step %d loss: gpu %.7f cpu %.7f", step, p.gpu_loss, p.cpu_loss);
        model_cpu_backward(&p.cpu, NULL, NULL);
        backward_ok(p.gpu, NULL, NULL);
        model_cpu_adamw_step(&p.cpu, &opt);
        cr_assert_eq(model_gpu_adamw(p.gpu, &opt, step, err, sizeof err), 0, "%s", err);
    }
    float* w = malloc(p.cpu.layout.total * 4);
    model_gpu_get_params(p.gpu, w);
    ASSERT_ALLCLOSE(w, p.cpu.params, p.cpu.layout.total, 1e-4, 0.25 * opt.lr, "params after 3 AdamW steps");
    free(w);
    pair_free(&p);
}

// bf16: the optimizer itself is fp32 on fp32 master weights, so check it exactly against
// adamw_cpu_step applied to the GPU's own gradients; then check that the bf16 weight copy it
// refreshes gives the same loss as a fresh cast of the same parameters.
Test(model_gpu, bf16_adamw_and_weight_copy) {
    SKIP_WITHOUT_GPU();
    pair_t p;
    pair_make(&p, MP_BF16);
    const size_t total = p.cpu.layout.total;
    adamw_config_t opt = adamw_default();
    float *w = malloc(total * 4), *g = malloc(total * 4), *m = calloc(total, 4), *v = calloc(total, 4),
          *w_gpu = malloc(total * 4);
    char err[256] = "";
    for (int step = 1; step <= 2; step++) {
        pair_forward(&p);
        backward_ok(p.gpu, NULL, NULL);
        model_gpu_get_params(p.gpu, w);
        model_gpu_get_grads(p.gpu, g);
        adamw_cpu_step(&opt, w, g, m, v, total, step);
        cr_assert_eq(model_gpu_adamw(p.gpu, &opt, step, err, sizeof err), 0, "%s", err);
        model_gpu_get_params(p.gpu, w_gpu);
        // Same fp32 formula on the same inputs; sqrtf and division are correctly rounded on both
        // sides, only contraction into FMAs differs: a few ulp.
        ASSERT_ALLCLOSE(w_gpu, w, total, 1e-6, 1e-7, "params after a bf16-mode AdamW step");
    }
    const float loss_fused = model_gpu_forward(p.gpu, model_gpu_inputs(p.gpu), model_gpu_targets(p.gpu));
    model_gpu_params_changed(p.gpu);
    const float loss_recast = model_gpu_forward(p.gpu, model_gpu_inputs(p.gpu), model_gpu_targets(p.gpu));
    // Same bf16 weights either way, same kernels: the same loss to rounding of the GEMM order.
    cr_assert(fabsf(loss_fused - loss_recast) <= 1e-6f * fabsf(loss_recast),
              "loss with AdamW's bf16 copy %.7f, with a fresh cast %.7f", loss_fused, loss_recast);
    free(w); free(g); free(m); free(v); free(w_gpu);
    pair_free(&p);
}

// ---- The PyTorch fixture (float64 torch, stored as float32): tests/fixtures/model/.
static int load_f32(const char* rel, float* dst, size_t n) {
    char path[512], err[512];
    fixture_path(rel, path, sizeof path);
    npy_array_t a;
    if (npy_read(path, &a, err, sizeof err) != 0) return -1;
    cr_assert_eq(a.dtype, DT_F32, "%s: not float32", path);
    cr_assert_eq(a.nbytes, n * 4, "%s: %zu bytes, want %zu", path, a.nbytes, n * 4);
    memcpy(dst, a.data, n * 4);
    npy_array_free(&a);
    return 0;
}
static void load_i32(const char* rel, int32_t* dst, size_t n) {
    char path[512], err[512];
    fixture_path(rel, path, sizeof path);
    npy_array_t a;
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.dtype, DT_I32);
    cr_assert_eq(a.nbytes, n * 4);
    memcpy(dst, a.data, n * 4);
    npy_array_free(&a);
}
// Loads "<dir>/<name>.npy" for every parameter into a flat buffer (padding 0).
static void load_flat(const param_layout_t* lay, const char* dir, float* flat) {
    memset(flat, 0, lay->total * 4);
    for (int i = 0; i < lay->n; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "model/%s/%s.npy", dir, lay->p[i].name);
        cr_assert_eq(load_f32(rel, flat + lay->p[i].offset, lay->p[i].numel), 0, "fixture %s", rel);
    }
}

// fp32 against float64 PyTorch: the difference is our fp32 rounding (about 1e-6 relative),
// so a tight tolerance holds: 1e-4 of each tensor's scale.
Test(model_gpu, fp32_matches_pytorch_fixture) {
    SKIP_WITHOUT_GPU();
    char probe[512];
    fixture_path("model/loss.npy", probe, sizeof probe);
    FILE* f = fopen(probe, "rb");
    if (!f) cr_skip_test("no PyTorch fixture at %s (python3 tests/fixtures/gen_model.py)", probe);
    fclose(f);
    // meta.json's config: vocab 61, context 16, d_model 32, 2 layers, 4 heads, d_ff 88; B 2, T 16.
    model_config_t cfg = {.vocab = 61, .context = 16, .d_model = 32, .n_layers = 2, .n_heads = 4, .d_ff = 88};
    snprintf(cfg.name, sizeof cfg.name, "fixture");
    const int B = 2, T = 16, V = 61;
    char err[256] = "";
    model_gpu_t* m = model_gpu_create(&cfg, B, T, MP_FP32, NULL, 1, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    const param_layout_t* lay = model_gpu_layout(m);
    float* flat = malloc(lay->total * 4);
    float* got = malloc(lay->total * 4);
    load_flat(lay, "params", flat);
    model_gpu_set_params(m, flat);
    int32_t in[2 * 16], tg[2 * 16];
    load_i32("model/inputs.npy", in, (size_t)B * T);
    load_i32("model/targets.npy", tg, (size_t)B * T);
    model_gpu_set_tokens(m, in, tg);

    float loss_want;
    load_f32("model/loss.npy", &loss_want, 1);
    const float loss = model_gpu_forward(m, model_gpu_inputs(m), model_gpu_targets(m));
    cr_assert(fabsf(loss - loss_want) <= 1e-5f * loss_want, "loss %.7f, torch %.7f", loss, loss_want);
    float* lg = malloc((size_t)B * T * V * 4), *lg_want = malloc((size_t)B * T * V * 4);
    load_f32("model/logits.npy", lg_want, (size_t)B * T * V);
    model_gpu_get_logits(m, lg);
    ASSERT_ALLCLOSE(lg, lg_want, (size_t)B * T * V, 1e-4, 1e-4 * max_abs(lg_want, (size_t)B * T * V), "logits vs torch");
    backward_ok(m, NULL, NULL);
    model_gpu_get_grads(m, got);
    load_flat(lay, "grads", flat);
    check_grads(lay, got, flat, 1e-3, 1e-4);

    // meta.json: AdamW lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1; three steps of
    // forward, backward, step on the same batch; adamw3/ holds the parameters after them.
    const adamw_config_t opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    const double losses_want[3] = {4.402062940298298, 3.0661323070526123, 2.205174446105957};
    for (int step = 1; step <= 3; step++) {
        const float l = model_gpu_forward(m, model_gpu_inputs(m), model_gpu_targets(m));
        cr_assert(fabs(l - losses_want[step - 1]) <= 1e-4 * losses_want[step - 1],
                  "loss before step %d: %.7f, torch %.7f", step, l, losses_want[step - 1]);
        backward_ok(m, NULL, NULL);
        cr_assert_eq(model_gpu_adamw(m, &opt, step, err, sizeof err), 0, "%s", err);
    }
    model_gpu_get_params(m, got);
    load_flat(lay, "adamw3", flat);
    // Three steps move weights by about 3·lr; a sign flip of one update is 2·lr.
    ASSERT_ALLCLOSE(got, flat, lay->total, 1e-4, 0.05 * opt.lr, "params after 3 AdamW steps vs torch");
    free(lg); free(lg_want); free(flat); free(got);
    model_gpu_destroy(m);
}

// ---- The attention plug-in plumbing: a fake plug-in records what the model passes it.
static attn_args_t g_seen;
static int g_fwd_calls;
static int fake_supports(const attn_args_t* a, char* err, size_t errlen) {
    if (a->d != 16) {
        snprintf(err, errlen, "head dim %d not supported", a->d);
        return -1;
    }
    return 0;
}
static int reject_all(const attn_args_t* a, char* err, size_t errlen) {
    (void)a;
    snprintf(err, errlen, "nothing is supported");
    return -1;
}
static void fake_forward(const attn_args_t* a, cudaStream_t s) {
    g_seen = *a;
    g_fwd_calls++;
    // O and lse must be written for the rest of the forward to be finite: zeros will do.
    for (int b = 0; b < a->B; b++)
        CUDA_CHECK(cudaMemsetAsync((char*)a->o + (size_t)b * a->so[0] * dtype_size(a->dtype), 0,
                                   (size_t)a->Nq * a->H * a->d * dtype_size(a->dtype), s));
    CUDA_CHECK(cudaMemsetAsync(a->lse, 0, (size_t)a->B * a->H * a->Nq * 4, s));
}

Test(model_gpu, attention_plugin_gets_strided_qkv_views) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 32, &cfg), 0);
    const int C = cfg.d_model, NH = cfg.n_heads, HS = C / NH;
    char err[256] = "";
    attention_impl_t no = {.name = "reject", .supports = reject_all, .forward = fake_forward};
    cr_assert_null(model_gpu_create(&cfg, B_TEST, T_TEST, MP_FP32, &no, SEED, err, sizeof err));
    cr_assert(strstr(err, "nothing is supported") != NULL, "reason: %s", err);

    attention_impl_t fake = {.name = "fake", .supports = fake_supports, .forward = fake_forward};
    model_gpu_t* m = model_gpu_create(&cfg, B_TEST, T_TEST, MP_BF16, &fake, SEED, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    cr_assert_eq(model_gpu_can_train(m, err, sizeof err), 0, "a plug-in without backward must not train");
    cr_assert(strstr(err, "fake") != NULL && strstr(err, "backward") != NULL, "reason: %s", err);
    g_fwd_calls = 0;
    const float loss = model_gpu_forward(m, model_gpu_inputs(m), model_gpu_targets(m));
    cr_assert(isfinite(loss), "forward with the plug-in gave loss %f", loss);
    cr_assert_eq(g_fwd_calls, cfg.n_layers);
    cr_assert_eq(g_seen.B, B_TEST);
    cr_assert_eq(g_seen.H, NH);
    cr_assert_eq(g_seen.Nq, T_TEST);
    cr_assert_eq(g_seen.Nk, T_TEST);
    cr_assert_eq(g_seen.d, HS);
    cr_assert_eq(g_seen.dtype, DT_BF16);
    cr_assert_eq(g_seen.causal, 1);
    cr_assert_float_eq(g_seen.scale, 1.0f / sqrtf((float)HS), 1e-7);
    // Fused QKV (B, T, 3, NH, HS): k and v are C and 2C elements after q.
    const size_t es = 2;
    cr_assert_eq((const char*)g_seen.k - (const char*)g_seen.q, (ptrdiff_t)(C * es));
    cr_assert_eq((const char*)g_seen.v - (const char*)g_seen.q, (ptrdiff_t)(2 * C * es));
    const int64_t want_qkv[3] = {(int64_t)T_TEST * 3 * C, HS, 3 * C}, want_o[3] = {(int64_t)T_TEST * C, HS, C};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(g_seen.sq[i], want_qkv[i]);
        cr_assert_eq(g_seen.sk[i], want_qkv[i]);
        cr_assert_eq(g_seen.sv[i], want_qkv[i]);
        cr_assert_eq(g_seen.so[i], want_o[i]);
    }
    cr_assert_not_null(g_seen.lse);
    model_gpu_destroy(m);
}

// Out of memory at creation: NULL and a reason naming the bytes, no crash, nothing leaked.
Test(model_gpu, create_out_of_memory_fails_cleanly) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("2.7B", 8192, &cfg), 0);
    const mem_stats_t before = mem_stats(DEV_CUDA);
    char err[256] = "";
    model_gpu_t* m = model_gpu_create(&cfg, 64, 8192, MP_FP32, NULL, SEED, err, sizeof err);
    cr_assert_null(m, "a 2.7B model at batch 64 x 8192 should not fit");
    cr_assert(strstr(err, "out of memory") != NULL, "reason: %s", err);
    cr_assert_eq(mem_stats(DEV_CUDA).live, before.live, "memory leaked after a failed create");
}
