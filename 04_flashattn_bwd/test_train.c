// Training with flash attention (the chain to the model): the Transformer with
// flash_attention_impl() (stage 03's forward, this stage's backward) gives the same loss and
// the same gradient for every parameter as with the model's own naive attention, trains the
// same over a few AdamW steps, and runs at a context where naive attention's scores do not fit.
#include <stdlib.h>
#include "common/model_gpu.h"
#include "04_flashattn_bwd/test_bwd_util.h"

typedef struct {
    model_gpu_t* m;
    float* grads;  // host copy, layout.total
    float loss;
} run_t;

static run_t forward_backward(const model_config_t* cfg, int B, int T, model_precision_t prec,
                              const attention_impl_t* attn, const int32_t* tok) {
    char err[256];
    run_t r;
    r.m = model_gpu_create(cfg, B, T, prec, attn, 1234, err, sizeof err);
    cr_assert_not_null(r.m, "%s", err);
    model_gpu_set_tokens(r.m, tok, tok + 1);
    r.loss = model_gpu_forward(r.m, model_gpu_inputs(r.m), model_gpu_targets(r.m));
    cr_assert_eq(model_gpu_backward(r.m, NULL, NULL, err, sizeof err), 0, "%s", err);
    const size_t total = model_gpu_layout(r.m)->total;
    r.grads = poisoned_f32(total);
    model_gpu_get_grads(r.m, r.grads);
    return r;
}

static int32_t* tokens(int n, int vocab) {
    int32_t* tok = malloc(sizeof(int32_t) * (size_t)(n + 1));
    cr_assert(tok);
    for (int i = 0; i <= n; i++) tok[i] = (int32_t)rng_below(99, (uint64_t)i, (uint32_t)vocab);
    return tok;
}

// Every parameter's gradient, per tensor, relative to that tensor's largest gradient. hs: the
// head dim (0: tiny's 16; 64 and 128 give tiny 2 heads of that size, so that the bf16 defaults
// the real models use, fa3's forward and the wgmma backwards, run inside the model).
static void grads_match(model_precision_t prec, double tol, int hs) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 128, &cfg), 0);
    if (hs) cfg.n_heads = 2, cfg.d_model = 2 * hs;
    const int B = 2, T = 77;  // T not a tile multiple
    int32_t* tok = tokens(B * T, cfg.vocab);
    run_t n = forward_backward(&cfg, B, T, prec, NULL, tok);
    run_t f = forward_backward(&cfg, B, T, prec, flash_attention_impl(), tok);
    ASSERT_ALLCLOSE(&f.loss, &n.loss, 1, tol, tol, "loss, flash vs naive attention");
    const param_layout_t* L = model_gpu_layout(n.m);
    for (int i = 0; i < L->n; i++) {
        const param_info_t* p = &L->p[i];
        const double atol = tol * (bwd_max_abs(n.grads + p->offset, p->numel) + 1e-12);
        char what[128];
        snprintf(what, sizeof what, "grad %s, flash vs naive attention", p->name);
        ASSERT_ALLCLOSE(f.grads + p->offset, n.grads + p->offset, p->numel, tol, atol, what);
    }
    free(tok); free(n.grads); free(f.grads);
    model_gpu_destroy(n.m);
    model_gpu_destroy(f.m);
}

// fp32: both attentions are exact up to summation order and exp vs exp2: 1e-3 of each
// tensor's largest gradient.
Test(train, flash_grads_match_naive_fp32, .timeout = 60) { grads_match(MP_FP32, 1e-3, 0); }
// bf16: P, dS and the attention outputs are rounded to bf16 at different points in the two
// attentions, and the difference flows through both layers: 5e-2.
Test(train, flash_grads_match_naive_bf16, .timeout = 60) { grads_match(MP_BF16, 5e-2, 0); }
// The same at head dims 64 and 128, where the dispatch runs fa3 (forward) and the fa3 / wgmma rows (backward).
Test(train, flash_grads_match_naive_bf16_hs64, .timeout = 60) { grads_match(MP_BF16, 5e-2, 64); }
Test(train, flash_grads_match_naive_bf16_hs128, .timeout = 60) { grads_match(MP_BF16, 5e-2, 128); }

// Five AdamW steps: the loss goes down, and the two models' losses stay together.
Test(train, flash_trains_like_naive, .timeout = 60) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 128, &cfg), 0);
    const int B = 2, T = 64;
    int32_t* tok = tokens(B * T, cfg.vocab);
    char err[256];
    model_gpu_t* ms[2] = {model_gpu_create(&cfg, B, T, MP_FP32, NULL, 7, err, sizeof err),
                          model_gpu_create(&cfg, B, T, MP_FP32, flash_attention_impl(), 7, err, sizeof err)};
    cr_assert(ms[0] && ms[1], "%s", err);
    float loss[2][6];
    adamw_config_t opt = adamw_default();
    opt.lr = 1e-2f;
    for (int k = 0; k < 2; k++) {
        model_gpu_set_tokens(ms[k], tok, tok + 1);
        for (int step = 1; step <= 6; step++) {
            loss[k][step - 1] = model_gpu_forward(ms[k], model_gpu_inputs(ms[k]), model_gpu_targets(ms[k]));
            if (step == 6) break;
            cr_assert_eq(model_gpu_backward(ms[k], NULL, NULL, err, sizeof err), 0, "%s", err);
            cr_assert_eq(model_gpu_adamw(ms[k], &opt, step, err, sizeof err), 0, "%s", err);
        }
    }
    cr_assert_lt(loss[1][5], loss[1][0], "flash: loss %g after 5 steps, %g before", loss[1][5], loss[1][0]);
    // fp32 all the way: the trajectories differ by rounding only.
    ASSERT_ALLCLOSE(loss[1], loss[0], 6, 1e-3, 1e-3, "losses over 5 AdamW steps, flash vs naive");
    model_gpu_destroy(ms[0]);
    model_gpu_destroy(ms[1]);
    free(tok);
}

// The course's "small" model at context 32768, batch 1, bf16: naive attention would keep
// L * NH * T^2 bf16 scores (12 * 12 * 32768^2 * 2 bytes = 288 GiB) and does not fit on an
// 80 GB GPU; flash attention keeps O(T) per head (about 20 GB of activations in all) and trains.
Test(train, long_context_flash_runs_where_naive_ooms, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    const int T = 32768, B = 1;
    cr_assert_eq(model_config_by_name("small", T, &cfg), 0);
    char err[256] = "";
    gpu_info_t gi;
    cr_assert_eq(gpu_info(0, &gi), 0);
    const double scores = (double)cfg.n_layers * cfg.n_heads * (double)T * T * 2;
    if (scores < (double)gi.total_bytes) cr_skip_test("this GPU has %zu bytes: naive would fit", gi.total_bytes);
    model_gpu_t* naive = model_gpu_create(&cfg, B, T, MP_BF16, NULL, 1, err, sizeof err);
    cr_assert_null(naive, "naive attention at T = %d should not fit", T);
    cr_assert(strstr(err, "out of memory"), "naive: '%s' is not an out-of-memory reason", err);
    int32_t* tok = tokens(B * T, cfg.vocab);
    run_t f = forward_backward(&cfg, B, T, MP_BF16, flash_attention_impl(), tok);
    cr_assert(isfinite(f.loss) && f.loss > 0.0f, "loss %g", f.loss);
    const size_t total = model_gpu_layout(f.m)->total;
    double s = 0.0;
    for (size_t i = 0; i < total; i++) s += fabs((double)f.grads[i]);
    cr_assert(isfinite(s) && s > 0.0, "gradient sum |g| = %g", s);
    printf("long context: small model, T %d, bf16, flash: loss %.4f, sum |grad| %.4g\n", T, f.loss, s);
    free(tok); free(f.grads);
    model_gpu_destroy(f.m);
}
