// common/lm.h, the one model interface: each backend gives the bits of the model it wraps used
// directly (loss, every gradient, the AdamW step, the hooks' order), the flat-buffer options
// hold what they promise, and what a backend cannot do is refused with a reason.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/lm.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "tests/harness.h"

#define BATCH 2
#define SEQ 16
#define SEED 7
#define STEPS 3
#define MAX_HOOKS 256

static model_config_t tiny(void) {
    model_config_t c;
    cr_assert_eq(model_config_by_name("tiny", SEQ, &c), 0);
    return c;
}

// Step k's tokens: a fixed pseudo-random pattern inside the vocabulary.
static void tokens(const model_config_t* c, int k, int32_t* in, int32_t* tg) {
    uint32_t x = 12345u + 977u * (uint32_t)k;
    for (int i = 0; i < BATCH * SEQ; i++) {
        x = x * 1664525u + 1013904223u;
        in[i] = (int32_t)((x >> 8) % (uint32_t)c->vocab);
        x = x * 1664525u + 1013904223u;
        tg[i] = (int32_t)((x >> 8) % (uint32_t)c->vocab);
    }
}

typedef struct {
    int n;
    int idx[MAX_HOOKS];
} hooks_seen_t;

static void record_hook(void* ctx, int i) {
    hooks_seen_t* h = ctx;
    if (h->n < MAX_HOOKS) h->idx[h->n] = i;
    h->n++;
}

static int bits_equal(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static size_t count_nonzero(const float* p, size_t lo, size_t hi) {
    size_t n = 0;
    for (size_t i = lo; i < hi; i++) n += p[i] != 0.0f;
    return n;
}

static lm_t* make(const model_config_t* c, lm_backend_t be, lm_flat_t flat, size_t flat_total) {
    lm_options_t o = lm_options(be, BATCH, SEQ);
    o.seed = SEED;
    o.flat = flat;
    o.flat_total = flat_total;
    char err[512] = "";
    lm_t* m = lm_create(c, &o, err, sizeof err);
    cr_assert(m, "lm_create: %s", err);
    return m;
}

// The CPU backend against model_cpu.h used directly: STEPS steps of forward, backward, AdamW.
Test(lm, cpu_backend_gives_the_bits_of_model_cpu) {
    const model_config_t c = tiny();
    model_cpu_t ref;
    model_cpu_create(&ref, &c, BATCH, SEQ, SEED);
    lm_t* m = make(&c, LM_CPU, LM_FLAT_WHOLE, 0);
    cr_assert_eq(lm_device(m), DEV_CPU);
    cr_assert_null(lm_stream(m));
    cr_assert_not_null(lm_cpu(m));
    cr_assert_null(lm_gpu(m));
    const size_t n = lm_layout(m)->total;
    cr_assert_eq(n, ref.layout.total);
    float* got = malloc(n * sizeof(float));
    cr_assert_not_null(got);
    lm_get_params(m, got);
    cr_assert(bits_equal(got, ref.params, n * sizeof(float)), "initial parameters differ");
    const adamw_config_t opt = adamw_default();
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
    char err[256];
    for (int k = 0; k < STEPS; k++) {
        tokens(&c, k, in, tg);
        hooks_seen_t h_ref = {0}, h_lm = {0};
        const float want = model_cpu_forward(&ref, in, tg, BATCH, SEQ);
        model_cpu_backward(&ref, record_hook, &h_ref);
        lm_set_tokens(m, in, tg);
        lm_forward_async(m);
        const float loss = lm_loss(m);
        cr_assert(bits_equal(&loss, &want, sizeof loss), "step %d: loss %.9g, model_cpu's %.9g", k, loss, want);
        cr_assert_eq(lm_backward(m, record_hook, &h_lm, err, sizeof err), 0, "%s", err);
        cr_assert_eq(h_lm.n, h_ref.n, "step %d: %d hooks, model_cpu's %d", k, h_lm.n, h_ref.n);
        cr_assert(h_ref.n > 0 && h_ref.n <= MAX_HOOKS);
        cr_assert(bits_equal(h_lm.idx, h_ref.idx, (size_t)h_ref.n * sizeof(int)), "step %d: the hooks' order differs", k);
        lm_get_grads(m, got);
        cr_assert(count_nonzero(ref.grads, 0, n) > 0, "the reference's gradients are all zero");
        cr_assert(bits_equal(got, ref.grads, n * sizeof(float)), "step %d: gradients differ", k);
        model_cpu_adamw_step(&ref, &opt);
        cr_assert_eq(lm_adamw(m, &opt, k + 1, err, sizeof err), 0, "%s", err);
        lm_get_params(m, got);
        cr_assert(bits_equal(got, ref.params, n * sizeof(float)), "step %d: parameters after AdamW differ", k);
    }
    free(got);
    lm_destroy(m);
    model_cpu_destroy(&ref);
}

// WHOLE: both buffers of the layout's length, the parameters model_cpu's.
Test(lm, cpu_flat_whole) {
    const model_config_t c = tiny();
    model_cpu_t ref;
    model_cpu_create(&ref, &c, BATCH, SEQ, SEED);
    lm_t* m = make(&c, LM_CPU, LM_FLAT_WHOLE, 0);
    cr_assert_not_null(lm_params(m));
    cr_assert_not_null(lm_grads(m));
    cr_assert(bits_equal(lm_params(m), ref.params, ref.layout.total * sizeof(float)));
    lm_destroy(m);
    model_cpu_destroy(&ref);
}

// PADDED: flat_total elements each, the padding zero, the contents model_cpu's; a backward
// writes the gradients of model_cpu and leaves the padding zero.
Test(lm, cpu_flat_padded) {
    const model_config_t c = tiny();
    model_cpu_t ref;
    model_cpu_create(&ref, &c, BATCH, SEQ, SEED);
    const size_t n = ref.layout.total, total = n + 3 * 64 + 5;
    lm_t* m = make(&c, LM_CPU, LM_FLAT_PADDED, total);
    const float *P = lm_params(m), *G = lm_grads(m);
    cr_assert_not_null(P);
    cr_assert_not_null(G);
    cr_assert(bits_equal(P, ref.params, n * sizeof(float)), "contents differ");
    cr_assert_eq(count_nonzero(P, n, total), 0, "parameter padding not zero");
    cr_assert_eq(count_nonzero(G, 0, total), 0, "gradients not zero before a backward");
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
    char err[256];
    tokens(&c, 0, in, tg);
    model_cpu_forward(&ref, in, tg, BATCH, SEQ);
    model_cpu_backward(&ref, NULL, NULL);
    lm_set_tokens(m, in, tg);
    lm_forward_async(m);
    cr_assert_eq(lm_backward(m, NULL, NULL, err, sizeof err), 0, "%s", err);
    G = lm_grads(m);
    cr_assert(bits_equal(G, ref.grads, n * sizeof(float)), "gradients differ");
    cr_assert_eq(count_nonzero(G, n, total), 0, "gradient padding not zero after a backward");
    lm_destroy(m);
    model_cpu_destroy(&ref);
}

// PARAMS: the parameters padded as PADDED's, no gradient buffer at all.
Test(lm, cpu_flat_params_has_no_gradient_buffer) {
    const model_config_t c = tiny();
    model_cpu_t ref;
    model_cpu_create(&ref, &c, BATCH, SEQ, SEED);
    const size_t n = ref.layout.total, total = n + 64;
    lm_t* m = make(&c, LM_CPU, LM_FLAT_PARAMS, total);
    cr_assert_not_null(lm_params(m));
    cr_assert_null(lm_grads(m), "LM_FLAT_PARAMS holds a gradient buffer");
    cr_assert(bits_equal(lm_params(m), ref.params, n * sizeof(float)), "contents differ");
    cr_assert_eq(count_nonzero(lm_params(m), n, total), 0, "parameter padding not zero");
    lm_destroy(m);
    model_cpu_destroy(&ref);
}

// NONE: neither buffer.
Test(lm, cpu_flat_none_has_no_buffers) {
    const model_config_t c = tiny();
    lm_t* m = make(&c, LM_CPU, LM_FLAT_NONE, 0);
    cr_assert_null(lm_params(m));
    cr_assert_null(lm_grads(m));
    lm_destroy(m);
}

// What the CPU backend cannot do: NULL, and the reason.
Test(lm, refusals_return_null_with_the_reason) {
    const model_config_t c = tiny();
    char err[512] = "";
    lm_options_t o = lm_options(LM_CPU, BATCH, SEQ);
    // (bf16 on the CPU is its bf16-parameter mode, model_cpu.h: accepted, with a rounded copy;
    // 07_zero/test_fsdp.c checks its bits)
    o.precision = MP_BF16;
    lm_t* mb = lm_create(&c, &o, err, sizeof err);
    cr_assert(mb && lm_cpu(mb)->params_lp, "bf16 on the CPU: %s", err);
    lm_destroy(mb);

    model_cpu_t ref;
    model_cpu_create(&ref, &c, BATCH, SEQ, SEED);
    const size_t n = ref.layout.total;
    model_cpu_destroy(&ref);
    const lm_flat_t flats[2] = {LM_FLAT_PADDED, LM_FLAT_PARAMS};
    for (int k = 0; k < 2; k++) {
        o = lm_options(LM_CPU, BATCH, SEQ);
        o.flat = flats[k];
        o.flat_total = n - 1;
        err[0] = '\0';
        cr_assert_null(lm_create(&c, &o, err, sizeof err), "flat %d: a flat_total below the layout's accepted", (int)flats[k]);
        cr_assert(strstr(err, "shorter") && strstr(err, "elements"), "flat %d: reason: '%s'", (int)flats[k], err);
    }
}

// lm_pad_flat: longer buffers with the same contents (parameters and the last gradients),
// the padding zero; a length below the layout's is refused with the reason.
Test(lm, pad_flat_keeps_the_contents) {
    const model_config_t c = tiny();
    lm_t* m = make(&c, LM_CPU, LM_FLAT_WHOLE, 0);
    const size_t n = lm_layout(m)->total, total = n + 2 * 64;
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
    char err[256];
    tokens(&c, 0, in, tg);
    lm_set_tokens(m, in, tg);
    lm_forward_async(m);
    cr_assert_eq(lm_backward(m, NULL, NULL, err, sizeof err), 0, "%s", err);
    float* p0 = malloc(n * sizeof(float));
    float* g0 = malloc(n * sizeof(float));
    cr_assert(p0 && g0);
    lm_get_params(m, p0);
    lm_get_grads(m, g0);
    cr_assert(count_nonzero(g0, 0, n) > 0);
    err[0] = '\0';
    cr_assert_eq(lm_pad_flat(m, n - 1, err, sizeof err), -1, "a length below the layout's accepted");
    cr_assert(strstr(err, "shorter"), "reason: '%s'", err);
    cr_assert_eq(lm_pad_flat(m, total, err, sizeof err), 0, "%s", err);
    cr_assert(bits_equal(lm_params(m), p0, n * sizeof(float)), "parameters changed");
    cr_assert(bits_equal(lm_grads(m), g0, n * sizeof(float)), "gradients changed");
    cr_assert_eq(count_nonzero(lm_params(m), n, total), 0, "parameter padding not zero");
    cr_assert_eq(count_nonzero(lm_grads(m), n, total), 0, "gradient padding not zero");
    free(p0);
    free(g0);
    lm_destroy(m);
}

// The GPU backend against model_gpu.h used directly: fp32, one forward, backward and AdamW.
Test(lm, gpu_backend_gives_the_bits_of_model_gpu) {
    SKIP_WITHOUT_GPU();
    const model_config_t c = tiny();
    char err[512] = "";
    model_gpu_t* g = model_gpu_create(&c, BATCH, SEQ, MP_FP32, NULL, SEED, err, sizeof err);
    cr_assert_not_null(g, "model_gpu_create: %s", err);
    lm_t* m = make(&c, LM_GPU, LM_FLAT_WHOLE, 0);
    cr_assert_eq(lm_device(m), DEV_CUDA);
    cr_assert_not_null(lm_stream(m));
    cr_assert_not_null(lm_gpu(m));
    cr_assert_null(lm_cpu(m));
    const size_t n = lm_layout(m)->total;
    cr_assert_eq(n, model_gpu_layout(g)->total);
    float* want = malloc(n * sizeof(float));
    float* got = malloc(n * sizeof(float));
    cr_assert(want && got);
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
    tokens(&c, 0, in, tg);
    hooks_seen_t h_ref = {0}, h_lm = {0};
    model_gpu_set_tokens(g, in, tg);
    const float loss_ref = model_gpu_forward(g, model_gpu_inputs(g), model_gpu_targets(g));
    cr_assert_eq(model_gpu_backward(g, record_hook, &h_ref, err, sizeof err), 0, "%s", err);
    lm_set_tokens(m, in, tg);
    lm_forward_async(m);
    const float loss = lm_loss(m);
    cr_assert_eq(lm_backward(m, record_hook, &h_lm, err, sizeof err), 0, "%s", err);
    cr_assert(isfinite(loss_ref));
    cr_assert(bits_equal(&loss, &loss_ref, sizeof loss), "loss %.9g, model_gpu's %.9g", loss, loss_ref);
    cr_assert_eq(h_lm.n, h_ref.n);
    cr_assert(h_ref.n > 0 && h_ref.n <= MAX_HOOKS);
    cr_assert(bits_equal(h_lm.idx, h_ref.idx, (size_t)h_ref.n * sizeof(int)), "the hooks' order differs");
    model_gpu_get_grads(g, want);
    lm_get_grads(m, got);
    cr_assert(count_nonzero(want, 0, n) > 0, "the reference's gradients are all zero");
    cr_assert(bits_equal(got, want, n * sizeof(float)), "gradients differ");
    const adamw_config_t opt = adamw_default();
    cr_assert_eq(model_gpu_adamw(g, &opt, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lm_adamw(m, &opt, 1, err, sizeof err), 0, "%s", err);
    model_gpu_get_params(g, want);
    lm_get_params(m, got);
    cr_assert(bits_equal(got, want, n * sizeof(float)), "parameters after AdamW differ");
    free(want);
    free(got);
    lm_destroy(m);
    model_gpu_destroy(g);
}
