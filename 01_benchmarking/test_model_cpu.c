// The CPU reference Transformer (common/model_cpu.h) against PyTorch (tests/fixtures/model/,
// float64 torch stored as float32): logits, loss, every gradient, parameters after 3 AdamW
// steps; the grad-ready hook; a finite-difference check; bad input.
// Layout, init and data-loader tests are in test_model_layout.c and test_data.c.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/npy.h"
#include "common/rng.h"
#include "tests/child.h"
#include "tests/harness.h"

// The fixture's config (tests/fixtures/gen_model.py): odd vocab, head size 8, d_ff 88.
static const model_config_t FIX_CFG = {"fixture", 61, 16, 32, 2, 4, 88};
enum { FIX_B = 2, FIX_T = 16 };

static void poison(void* p, size_t bytes) { memset(p, 0xFF, bytes); }  // NaN for fp32

// Loads tests/fixtures/model/<dir>/<name>.npy (shape checked) into dst.
static void load_param_file(const char* dir, const param_info_t* p, float* dst) {
    char rel[256], path[300];
    snprintf(rel, sizeof rel, "model/%s/%s.npy", dir, p->name);
    fixture_path(rel, path, sizeof path);
    tensor_t t = npy_load(path, DT_F32, p->rank, p->shape);
    memcpy(dst, t.data, p->numel * sizeof(float));
    tensor_free(&t);
}

static tensor_t load_fixture(const char* name, int dtype, int rank, const int64_t* shape) {
    char rel[256], path[300];
    snprintf(rel, sizeof rel, "model/%s", name);
    return npy_load(fixture_path(rel, path, sizeof path), dtype, rank, shape);
}

// A model at the fixture's config holding the fixture's parameters, and its batch.
typedef struct {
    model_cpu_t m;
    tensor_t inputs, targets;  // int32 (B, T)
} fixture_t;

static void fixture_open(fixture_t* f) {
    // Our init (seed 99) is overwritten by torch's parameters; padding stays 0.
    model_cpu_create(&f->m, &FIX_CFG, FIX_B, FIX_T, 99);
    for (int i = 0; i < f->m.layout.n; i++)
        load_param_file("params", &f->m.layout.p[i], f->m.params + f->m.layout.p[i].offset);
    const int64_t bt[2] = {FIX_B, FIX_T};
    f->inputs = load_fixture("inputs.npy", DT_I32, 2, bt);
    f->targets = load_fixture("targets.npy", DT_I32, 2, bt);
}

static void fixture_close(fixture_t* f) {
    tensor_free(&f->inputs);
    tensor_free(&f->targets);
    model_cpu_destroy(&f->m);
}

static float fixture_forward(fixture_t* f) {
    return model_cpu_forward(&f->m, f->inputs.data, f->targets.data, FIX_B, FIX_T);
}

Test(model_cpu, forward_matches_torch) {
    fixture_t f;
    fixture_open(&f);
    const size_t nlog = (size_t)FIX_B * FIX_T * FIX_CFG.vocab;
    poison(f.m.a.logits, nlog * sizeof(float));
    const float loss = fixture_forward(&f);
    const int64_t lshape[3] = {FIX_B, FIX_T, FIX_CFG.vocab};
    tensor_t want = load_fixture("logits.npy", DT_F32, 3, lshape);
    // fp32 against a float64 reference: sums of at most 88 products in a 2-layer net; the
    // observed max error is ~1e-6 on logits of size ~3, so rtol 1e-4 / atol 1e-5 has a margin
    // of 10x while a wrong operation (errors ~1e-1) cannot pass.
    ASSERT_ALLCLOSE((float*)f.m.a.logits, (float*)want.data, nlog, 1e-4, 1e-5, "logits");
    const int64_t one[1] = {1};
    tensor_t wl = load_fixture("loss.npy", DT_F32, 1, one);
    // The loss is a mean summed in double: agrees to a few fp32 ulps of 4.4.
    ASSERT_ALLCLOSE(&loss, (float*)wl.data, 1, 1e-5, 1e-6, "loss");
    tensor_free(&want);
    tensor_free(&wl);
    fixture_close(&f);
}

Test(model_cpu, every_gradient_matches_torch) {
    fixture_t f;
    fixture_open(&f);
    fixture_forward(&f);
    poison(f.m.grads, f.m.layout.total * sizeof(float));  // every element must be written
    model_cpu_backward(&f.m, NULL, NULL);
    float* want = malloc(f.m.layout.total * sizeof(float));
    size_t end = 0;  // end of the previous parameter: what lies between is padding
    for (int i = 0; i < f.m.layout.n; i++) {
        const param_info_t* p = &f.m.layout.p[i];
        for (size_t k = end; k < p->offset; k++)
            cr_assert_eq(f.m.grads[k], 0.0f, "padding before %s: grads[%zu] = %g", p->name, k,
                         f.m.grads[k]);
        end = p->offset + p->numel;
        load_param_file("grads", p, want);
        char what[96];
        snprintf(what, sizeof what, "grad %s", p->name);
        // Gradients are at most ~0.1; fp32 backward vs float64 torch differ by at most ~3e-8
        // (observed). atol 1e-6 (1e-5 of the largest gradient) and rtol 1e-4 leave >= 30x margin;
        // a wrong term in any backward formula changes gradients by >= 1e-3.
        ASSERT_ALLCLOSE(f.m.grads + p->offset, want, p->numel, 1e-4, 1e-6, what);
    }
    free(want);
    fixture_close(&f);
}

Test(model_cpu, adamw_three_steps_match_torch) {
    fixture_t f;
    fixture_open(&f);
    const adamw_config_t opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};  // as gen_model.py
    for (int s = 0; s < 3; s++) {
        fixture_forward(&f);
        model_cpu_backward(&f.m, NULL, NULL);
        model_cpu_adamw_step(&f.m, &opt);
    }
    cr_assert_eq(f.m.adam_t, 3);
    float* want = malloc(f.m.layout.total * sizeof(float));
    for (int i = 0; i < f.m.layout.n; i++) {
        const param_info_t* p = &f.m.layout.p[i];
        load_param_file("adamw3", p, want);
        char what[96];
        snprintf(what, sizeof what, "params after 3 AdamW steps: %s", p->name);
        // Each step moves a parameter by ~lr = 1e-2; the update m/sqrt(v) amplifies the
        // gradients' relative error for the smallest gradients. Observed max error ~1e-6;
        // atol 1e-5 (1e-3 of one step) and rtol 1e-4 still catch a wrong bias correction or
        // weight decay (errors >= 1e-4).
        ASSERT_ALLCLOSE(f.m.params + p->offset, want, p->numel, 1e-4, 1e-5, what);
    }
    // Padding stays exactly 0 through the optimizer.
    for (size_t k = 0; k < f.m.layout.total; k++) {
        int inside = 0;
        for (int i = 0; i < f.m.layout.n && !inside; i++)
            inside = k >= f.m.layout.p[i].offset && k < f.m.layout.p[i].offset + f.m.layout.p[i].numel;
        if (!inside) cr_assert_eq(f.m.params[k], 0.0f, "padding params[%zu] = %g", k, f.m.params[k]);
    }
    free(want);
    fixture_close(&f);
}

// ---------------------------------------------------------------- the grad-ready hook

typedef struct {
    const model_cpu_t* m;
    int order[256];      // parameter indices in call order
    int calls[256];      // calls per parameter
    float* snapshot;     // (layout.total) each parameter's gradient as it was when announced
    int n;
} hook_log_t;

static void record_hook(void* ctx, int idx) {
    hook_log_t* h = ctx;
    cr_assert(idx >= 0 && idx < h->m->layout.n, "hook called with index %d", idx);
    h->order[h->n++] = idx;
    h->calls[idx]++;
    const param_info_t* p = &h->m->layout.p[idx];
    memcpy(h->snapshot + p->offset, h->m->grads + p->offset, p->numel * sizeof(float));
}

Test(model_cpu, grad_ready_hook_once_per_parameter_when_final) {
    fixture_t f;
    fixture_open(&f);
    fixture_forward(&f);
    hook_log_t h;
    memset(&h, 0, sizeof h);
    h.m = &f.m;
    h.snapshot = malloc(f.m.layout.total * sizeof(float));
    poison(h.snapshot, f.m.layout.total * sizeof(float));
    model_cpu_backward(&f.m, record_hook, &h);
    const param_layout_t* L = &f.m.layout;
    cr_assert_eq(h.n, L->n, "hook called %d times for %d parameters", h.n, L->n);
    for (int i = 0; i < L->n; i++)
        cr_assert_eq(h.calls[i], 1, "%s announced %d times", L->p[i].name, h.calls[i]);
    // "Final when announced": the gradient seen inside the hook is bit-identical to the end result.
    for (int i = 0; i < L->n; i++)
        cr_assert(memcmp(h.snapshot + L->p[i].offset, f.m.grads + L->p[i].offset,
                         L->p[i].numel * sizeof(float)) == 0,
                  "%s changed after its hook was called", L->p[i].name);
    // The documented order: lm_head, ln_final, then each layer from the last down
    // (w2, w3, w1, ln2, output_proj, v, k, q, ln1), token_embeddings last.
    int want[256], n = 0;
    want[n++] = param_index(L, PK_HEAD, -1);
    want[n++] = param_index(L, PK_LNF, -1);
    const param_kind_t per_layer[] = {PK_W2, PK_W3, PK_W1, PK_LN2, PK_O, PK_V, PK_K, PK_Q, PK_LN1};
    for (int l = FIX_CFG.n_layers - 1; l >= 0; l--)
        for (int k = 0; k < 9; k++) want[n++] = param_index(L, per_layer[k], l);
    want[n++] = param_index(L, PK_EMBED, -1);
    for (int i = 0; i < n; i++)
        cr_assert_eq(h.order[i], want[i], "hook call %d: got %s, expected %s", i,
                     L->p[h.order[i]].name, L->p[want[i]].name);
    free(h.snapshot);
    fixture_close(&f);
}

// ---------------------------------------------------------------- threads do not change bits

Test(model_cpu, same_bits_with_one_or_two_threads) {
    fixture_t f;
    fixture_open(&f);
    const size_t nlog = (size_t)FIX_B * FIX_T * FIX_CFG.vocab, P = f.m.layout.total;
    float* logits1 = malloc(nlog * sizeof(float));
    float* grads1 = malloc(P * sizeof(float));
    omp_set_num_threads(1);
    const float loss1 = fixture_forward(&f);
    model_cpu_backward(&f.m, NULL, NULL);
    memcpy(logits1, f.m.a.logits, nlog * sizeof(float));
    memcpy(grads1, f.m.grads, P * sizeof(float));
    omp_set_num_threads(3);  // more threads than rows of some loops: uneven splits
    const float loss3 = fixture_forward(&f);
    model_cpu_backward(&f.m, NULL, NULL);
    cr_assert_eq(loss1, loss3, "loss %.9g with 1 thread, %.9g with 3", loss1, loss3);
    cr_assert(memcmp(logits1, f.m.a.logits, nlog * sizeof(float)) == 0, "logits differ");
    cr_assert(memcmp(grads1, f.m.grads, P * sizeof(float)) == 0, "gradients differ");
    free(logits1);
    free(grads1);
    fixture_close(&f);
}

// ---------------------------------------------------------------- finite differences

// For each parameter tensor, the loss's change along a random ±1 direction d over the whole
// tensor: (L(p + h d) − L(p − h d)) / 2h against the backward's g · d. Moving every element at
// once makes the change (~h·sqrt(n)·|g|) large enough to measure in fp32, which single elements
// with gradients of ~1e-3 are not.
Test(model_cpu, finite_differences_along_random_directions) {
    const model_config_t cfg = {"fd", 37, 8, 16, 2, 2, 24};
    const int B = 2, T = 7;
    model_cpu_t m;
    model_cpu_create(&m, &cfg, B, T, 5);
    int32_t in[14], tg[14];
    rng_t r = rng_make(77);
    rng_fill_int(&r, in, 14, 0, cfg.vocab);
    rng_fill_int(&r, tg, 14, 0, cfg.vocab);
    model_cpu_forward(&m, in, tg, B, T);
    model_cpu_backward(&m, NULL, NULL);
    float* g = malloc(m.layout.total * sizeof(float));
    memcpy(g, m.grads, m.layout.total * sizeof(float));
    const float h = 1e-2f;
    for (int i = 0; i < m.layout.n; i++) {
        const param_info_t* p = &m.layout.p[i];
        float* x = m.params + p->offset;
        float* d = malloc(p->numel * sizeof(float));
        float* x0 = malloc(p->numel * sizeof(float));
        memcpy(x0, x, p->numel * sizeof(float));
        rng_t rd = {1000 + (uint64_t)i, 0};
        rng_fill_uniform(&rd, d, p->numel, 0.0f, 1.0f);
        double gd = 0.0;
        for (size_t k = 0; k < p->numel; k++) {
            d[k] = d[k] < 0.5f ? -1.0f : 1.0f;
            gd += (double)g[p->offset + k] * d[k];
        }
        for (size_t k = 0; k < p->numel; k++) x[k] = x0[k] + h * d[k];
        const double lp = model_cpu_forward(&m, in, tg, B, T);
        for (size_t k = 0; k < p->numel; k++) x[k] = x0[k] - h * d[k];
        const double lm = model_cpu_forward(&m, in, tg, B, T);
        memcpy(x, x0, p->numel * sizeof(float));
        const double fd = (lp - lm) / (2.0 * h);
        // fp32 loss noise ~1e-6 over 2h = 2e-2 gives ~1e-4 absolute (observed: at most 1.1e-4,
        // on the embedding); the O(h²) truncation of a central difference stays below 0.5% of
        // g·d here (observed). A wrong gradient formula is off by far more than 2%.
        cr_assert(fabs(fd - gd) <= 3e-4 + 2e-2 * fabs(gd),
                  "%s: finite difference %.6g, backward g·d %.6g", p->name, fd, gd);
        free(d);
        free(x0);
    }
    free(g);
    model_cpu_destroy(&m);
}

// ---------------------------------------------------------------- bad input

typedef struct {
    int32_t tok;     // value placed at inputs[1][3] (or targets when `in_targets`)
    int in_targets;
    int B, T;        // forward's shape
    int create_B;    // model_cpu_create's batch
} bad_call_t;

static void bad_forward(void* arg) {
    const bad_call_t* c = arg;
    set_progname("test_model");
    model_cpu_t m;
    model_cpu_create(&m, &FIX_CFG, c->create_B, FIX_T, 1);
    int32_t in[64] = {0}, tg[64] = {0};
    if (c->in_targets) tg[1 * FIX_T + 3] = c->tok; else in[1 * FIX_T + 3] = c->tok;
    model_cpu_forward(&m, in, tg, c->B, c->T);
}

static void expect_fail(bad_call_t c, const char* text) {
    char out[1024];
    const int st = run_child(bad_forward, &c, out, sizeof out);
    cr_assert_eq(st, EXIT_BAD_INPUT, "exit status %d (want 2); output: %s", st, out);
    cr_assert(strstr(out, text) != NULL, "output lacks \"%s\": %s", text, out);
    cr_assert(strstr(out, "test_model: error: ") == out, "not one fail() line: %s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
}

Test(model_cpu, bad_input_is_one_line_and_exit_2) {
    expect_fail((bad_call_t){61, 0, 2, 16, 2}, "input token id 61 at [1, 3] is out of range [0, 61)");
    expect_fail((bad_call_t){-1, 0, 2, 16, 2}, "input token id -1 at [1, 3] is out of range");
    expect_fail((bad_call_t){1000, 1, 2, 16, 2}, "target token id 1000 at [1, 3] is out of range");
    expect_fail((bad_call_t){0, 0, 0, 16, 2}, "batch size is 0, must be >= 1");
    expect_fail((bad_call_t){0, 0, 2, 17, 2}, "sequence length 17 is longer than the context 16");
    expect_fail((bad_call_t){0, 0, 2, 16, 0}, "batch size is 0, must be >= 1");    // at create
    expect_fail((bad_call_t){0, 0, 3, 16, 2}, "does not fit the 2 x 16");          // over capacity
    // And a good call through the same path exits 0.
    char out[512];
    bad_call_t ok = {5, 0, 2, 16, 2};
    cr_assert_eq(run_child(bad_forward, &ok, out, sizeof out), 0, "%s", out);
}

Test(model_cpu, demo_program_rejects_bad_flags) {
    char cmd[512], out[4096];
    const char* bd = build_dir();
    struct { const char* args; const char* text; } cases[] = {
        {"--batch 0", "batch size is 0, must be >= 1"},
        {"--context 0", "--context is 0, must be >= 1"},
        {"--model huge", "huge"},
        {"--steps 0", "--steps is 0"},
        {"--data /nonexistent/file.txt", "/nonexistent/file.txt: cannot open"},
        // One vocabulary with the benchmark (--model, --context); the old names say so.
        {"--size tiny", "--size is now --model"},
        {"--seq=32", "--seq is now --context"},
        {"--gpu-size small", "--gpu-size is now --gpu-model"},
        // Sizes that can never fit are bad input, said before anything is allocated.
        {"--context 100000000", "needs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/01_benchmarking/demo %s", bd, cases[i].args);
        const int st = run_capture(cmd, out, sizeof out);
        cr_assert_eq(st, EXIT_BAD_INPUT, "%s: exit %d; output: %s", cmd, st, out);
        cr_assert(strstr(out, cases[i].text) != NULL, "%s: output lacks \"%s\": %s", cmd,
                  cases[i].text, out);
    }
}

Test(model_cpu, demo_program_trains) {
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/demo --steps 4 --context 32 --model tiny", build_dir());
    const int st = run_capture(cmd, out, sizeof out);
    cr_assert_eq(st, 0, "%s: exit %d; output: %s", cmd, st, out);
    cr_assert(strstr(out, "going down") != NULL, "%s", out);
    cr_assert(strstr(out, "| step |") != NULL, "no table: %s", out);
}
