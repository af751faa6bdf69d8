// Activation checkpointing (model_cpu.h "activation checkpointing", model_gpu.h): with `block`
// and `every-K` the loss and EVERY gradient are bit-for-bit those of `none` (the recompute runs
// the same operations on the same inputs), for K dividing L and not, K = L and K > L; two steps
// in a row (the recompute must not depend on stale buffers); the activation bytes shrink as the
// formula says; the policy parser. CPU tests run everywhere; the GPU ones skip without a GPU.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "01_benchmarking/acts_peak.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "common/rng.h"
#include "tests/harness.h"

// L = 6 layers: K = 2, 3 divide it, K = 4 does not (segments of 4 and 2), K = 6 is one
// segment, K = 8 > L. Odd vocab and T to catch a wrong stride.
static const model_config_t CK_CFG = {"ckpt", 67, 16, 32, 6, 4, 72};
enum { CK_B = 2, CK_T = 13 };

static void make_tokens(int32_t* x, size_t n, int V, uint64_t seed) {
    rng_t r = rng_make(seed);
    rng_fill_int(&r, x, n, 0, V);
}

// Two forward/backward steps (an AdamW step between) with policy k; returns the second loss,
// the gradients of both steps in g1, g2 (layout.total floats each) and the logits of step 2.
static float cpu_run(int k, float* g1, float* g2, float* logits) {
    model_cpu_t m;
    model_cpu_create_ckpt(&m, &CK_CFG, CK_B, CK_T, 7, k);
    const size_t n = (size_t)CK_B * CK_T;
    int32_t in[CK_B * CK_T], tg[CK_B * CK_T];
    make_tokens(in, n, CK_CFG.vocab, 1);
    make_tokens(tg, n, CK_CFG.vocab, 2);
    const adamw_config_t opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    model_cpu_forward(&m, in, tg, CK_B, CK_T);
    model_cpu_backward(&m, NULL, NULL);
    memcpy(g1, m.grads, m.layout.total * sizeof(float));
    model_cpu_adamw_step(&m, &opt);
    make_tokens(in, n, CK_CFG.vocab, 3);
    const float loss = model_cpu_forward(&m, in, tg, CK_B, CK_T);
    memcpy(logits, m.a.logits, n * CK_CFG.vocab * sizeof(float));
    model_cpu_backward(&m, NULL, NULL);
    memcpy(g2, m.grads, m.layout.total * sizeof(float));
    model_cpu_destroy(&m);
    return loss;
}

// The first index where two float arrays differ in their bits, or -1.
static long first_diff(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) return (long)i;
    return -1;
}

Test(checkpoint, cpu_gradients_bit_identical_to_none) {
    param_layout_t lay = param_layout_make(&CK_CFG);
    const size_t P = lay.total, NL = (size_t)CK_B * CK_T * CK_CFG.vocab;
    float* ref1 = malloc(P * 4);
    float* ref2 = malloc(P * 4);
    float* g1 = malloc(P * 4);
    float* g2 = malloc(P * 4);
    float* lref = malloc(NL * 4);
    float* lg = malloc(NL * 4);
    const float loss0 = cpu_run(0, ref1, ref2, lref);
    const int ks[] = {1, 2, 3, 4, 6, 8};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const float loss = cpu_run(ks[i], g1, g2, lg);
        cr_assert(memcmp(&loss, &loss0, 4) == 0, "K=%d: loss %.9g vs none %.9g", ks[i], loss, loss0);
        long d = first_diff(lg, lref, NL);
        cr_assert(d < 0, "K=%d: logits differ at %ld", ks[i], d);
        d = first_diff(g1, ref1, P);
        cr_assert(d < 0, "K=%d: step-1 gradient differs at flat index %ld", ks[i], d);
        d = first_diff(g2, ref2, P);
        cr_assert(d < 0, "K=%d: step-2 gradient differs at flat index %ld", ks[i], d);
    }
    free(ref1), free(ref2), free(g1), free(g2), free(lref), free(lg);
    param_layout_free(&lay);
}

// The grad-ready hook (DDP's overlap seam) fires in the same order with and without.
typedef struct {
    int order[512];
    int n;
} hook_log_t;
static void log_hook(void* ctx, int param) {
    hook_log_t* h = ctx;
    if (h->n < 512) h->order[h->n] = param;
    h->n++;
}
Test(checkpoint, cpu_grad_ready_hooks_in_the_same_order) {
    hook_log_t ref = {{0}, 0};
    const size_t n = (size_t)CK_B * CK_T;
    int32_t in[CK_B * CK_T], tg[CK_B * CK_T];
    make_tokens(in, n, CK_CFG.vocab, 1);
    make_tokens(tg, n, CK_CFG.vocab, 2);
    const int ks[] = {0, 1, 4};
    for (int i = 0; i < 3; i++) {
        hook_log_t h = {{0}, 0};
        model_cpu_t m;
        model_cpu_create_ckpt(&m, &CK_CFG, CK_B, CK_T, 7, ks[i]);
        model_cpu_forward(&m, in, tg, CK_B, CK_T);
        model_cpu_backward(&m, log_hook, &h);
        cr_assert_eq(h.n, m.layout.n, "K=%d: %d hook calls for %d parameters", ks[i], h.n, m.layout.n);
        if (i == 0) ref = h;
        else cr_assert(memcmp(h.order, ref.order, sizeof h.order) == 0, "K=%d: another hook order", ks[i]);
        model_cpu_destroy(&m);
    }
}

// Activation bytes (tag acts) of the model with policy K, from the allocator.
static size_t cpu_act_bytes(int k) {
    const size_t before = mem_stats(DEV_CPU).live_by_tag[MEM_ACTS];
    model_cpu_t m;
    model_cpu_create_ckpt(&m, &CK_CFG, CK_B, CK_T, 7, k);
    const size_t got = mem_stats(DEV_CPU).live_by_tag[MEM_ACTS] - before;
    model_cpu_destroy(&m);
    return got;
}

// Bytes with policy K, for N = B·T rows (floats x 4):
//   residual slices R·N·C with R = L + 1 (none) or ceil(L/K) + min(K, L) (checkpoints, the
//   output, the segment's interior inputs), plus per kept block (L for none, min(K, L) else)
//   N·(4C + 2 + 3C + 3F) + B·NH·T² (ln1, atty, res_mid, ln2; two rstds; qkv; h13 and gate;
//   attention probabilities), plus the head's N·(C + 2 + V).
// So bytes(K) ~ (L/K)·r + K·I with r a residual slice and I one block's internals: the minimum
// is at K = sqrt(L·r/I); here (and for every model of the spec) I is many r, so `block` or a
// small K is the smallest, and K >= L only adds the recompute.
Test(checkpoint, cpu_activation_bytes_follow_the_formula) {
    const double L = CK_CFG.n_layers, C = CK_CFG.d_model, F = CK_CFG.d_ff, V = CK_CFG.vocab;
    const double NH = CK_CFG.n_heads, N = (double)CK_B * CK_T;
    const double per_block = N * (4 * C + 2 + 3 * C + 3 * F) + CK_B * NH * CK_T * CK_T;
    const int ks[] = {0, 1, 2, 3, 4, 6, 8};
    size_t prev = 0;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const int k = ks[i];
        const double R = k == 0 ? L + 1 : (double)((CK_CFG.n_layers + k - 1) / k) + (k < L ? k : L);
        const double kept = k == 0 ? L : (k < L ? k : L);
        const double want = 4.0 * (R * N * C + kept * per_block + N * (C + 2 + V));
        const size_t got = cpu_act_bytes(k);
        cr_assert_eq(got, (size_t)want, "K=%d: %zu activation bytes, the formula says %.0f", k, got, want);
        cr_assert_eq((double)got, model_cpu_bytes_ckpt(&CK_CFG, CK_B, CK_T, k) - model_cpu_bytes_ckpt(&CK_CFG, CK_B, CK_T, 0) + (double)cpu_act_bytes(0),
                     "K=%d: model_cpu_bytes_ckpt disagrees with the allocations", k);
        if (k == 0) prev = got;
        else if (k < CK_CFG.n_layers) cr_assert_lt(got, prev, "K=%d keeps fewer bytes than none", k);
    }
}

Test(checkpoint, policy_parse_and_name) {
    int k = -1;
    char err[160], buf[32];
    cr_assert_eq(model_ckpt_parse("none", &k, err, sizeof err), 0);
    cr_assert_eq(k, 0);
    cr_assert_eq(model_ckpt_parse("block", &k, err, sizeof err), 0);
    cr_assert_eq(k, 1);
    cr_assert_eq(model_ckpt_parse("every-4", &k, err, sizeof err), 0);
    cr_assert_eq(k, 4);
    cr_assert_str_eq(model_ckpt_name(4, buf, sizeof buf), "every-4");
    cr_assert_str_eq(model_ckpt_name(1, buf, sizeof buf), "block");
    cr_assert_str_eq(model_ckpt_name(0, buf, sizeof buf), "none");
    const char* bad[] = {"", "every-", "every-0", "every-x", "every-3x", "every--2", "blocks", "4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(model_ckpt_parse(bad[i], &k, err, sizeof err), -1, "'%s' accepted", bad[i]);
        cr_assert(strstr(err, "none|block|every-K"), "the error names the choices: %s", err);
    }
}

// ---- GPU: the same policies through model_gpu_create_ckpt, fp32 and bf16 ------------------
// Same parameters, same tokens, two steps; the recompute runs the same kernels on the same
// inputs, so the bits must be those of `none` (the embedding backward is deterministic).
static float gpu_run(model_precision_t prec, int k, float* g1, float* g2) {
    char err[256] = "";
    model_gpu_t* m = model_gpu_create_ckpt(&CK_CFG, CK_B, CK_T, prec, NULL, 7, k, err, sizeof err);
    cr_assert_not_null(m, "model_gpu_create_ckpt(K=%d): %s", k, err);
    const size_t n = (size_t)CK_B * CK_T;
    int32_t in[CK_B * CK_T], tg[CK_B * CK_T];
    make_tokens(in, n, CK_CFG.vocab, 1);
    make_tokens(tg, n, CK_CFG.vocab, 2);
    const adamw_config_t opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    model_gpu_set_tokens(m, in, tg);
    model_gpu_forward(m, model_gpu_inputs(m), model_gpu_targets(m));
    cr_assert_eq(model_gpu_backward(m, NULL, NULL, err, sizeof err), 0, "%s", err);
    model_gpu_get_grads(m, g1);
    cr_assert_eq(model_gpu_adamw(m, &opt, 1, err, sizeof err), 0, "%s", err);
    make_tokens(in, n, CK_CFG.vocab, 3);
    model_gpu_set_tokens(m, in, tg);
    const float loss = model_gpu_forward(m, model_gpu_inputs(m), model_gpu_targets(m));
    cr_assert_eq(model_gpu_backward(m, NULL, NULL, err, sizeof err), 0, "%s", err);
    model_gpu_get_grads(m, g2);
    model_gpu_destroy(m);
    return loss;
}

static void gpu_compare(model_precision_t prec) {
    param_layout_t lay = param_layout_make(&CK_CFG);
    const size_t P = lay.total;
    float *ref1 = malloc(P * 4), *ref2 = malloc(P * 4), *g1 = malloc(P * 4), *g2 = malloc(P * 4);
    const float loss0 = gpu_run(prec, 0, ref1, ref2);
    const int ks[] = {1, 2, 4, 6, 8};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const float loss = gpu_run(prec, ks[i], g1, g2);
        cr_assert(memcmp(&loss, &loss0, 4) == 0, "%s K=%d: loss %.9g vs none %.9g", model_precision_name(prec),
                  ks[i], loss, loss0);
        long d = first_diff(g1, ref1, P);
        cr_assert(d < 0, "%s K=%d: step-1 gradient differs at flat index %ld", model_precision_name(prec), ks[i], d);
        d = first_diff(g2, ref2, P);
        cr_assert(d < 0, "%s K=%d: step-2 gradient differs at flat index %ld", model_precision_name(prec), ks[i], d);
    }
    free(ref1), free(ref2), free(g1), free(g2);
    param_layout_free(&lay);
}

Test(checkpoint, gpu_fp32_gradients_bit_identical_to_none) {
    SKIP_WITHOUT_GPU();
    gpu_compare(MP_FP32);
}

Test(checkpoint, gpu_bf16_gradients_bit_identical_to_none) {
    SKIP_WITHOUT_GPU();
    gpu_compare(MP_BF16);
}

// The allocator shows the saving on the GPU too: at L = 6, block, every-2 and every-3 each keep
// fewer activation bytes than none. NOT that every-2 < block: every-K keeps ceil(L/K) block
// inputs (B·T·C each) plus K blocks' full activations for the recompute, so K trades inputs for
// whole blocks and the optimum is K* ≈ sqrt(L · input / block) — below 2 here, where a block's
// activations (the T x T attention probabilities among them) dwarf its input, as at XL on the
// H100 (01 README, "Activation checkpointing": block was the smallest and the fastest).
Test(checkpoint, gpu_activation_bytes_shrink) {
    SKIP_WITHOUT_GPU();
    const int ks[] = {0, 1, 2, 3};
    size_t got[4];
    for (int i = 0; i < 4; i++) {
        char err[256] = "";
        const size_t before = mem_stats(DEV_CUDA).live_by_tag[MEM_ACTS];
        model_gpu_t* m = model_gpu_create_ckpt(&CK_CFG, CK_B, CK_T, MP_FP32, NULL, 7, ks[i], err, sizeof err);
        cr_assert_not_null(m, "%s", err);
        got[i] = mem_stats(DEV_CUDA).live_by_tag[MEM_ACTS] - before;
        model_gpu_destroy(m);
    }
    for (int i = 1; i < 4; i++) cr_assert_lt(got[i], got[0], "every-%d %zu vs none %zu", ks[i], got[i], got[0]);
    // every-3 keeps 2 inputs and 3 blocks, every-2 3 inputs and 2 blocks: one block more, one input less.
    cr_assert_gt(got[3], got[2], "every-3 %zu vs every-2 %zu: a block outweighs an input", got[3], got[2]);
}

// ---- nested (binary recursive) checkpointing: model_cpu.h "nested" -------------------------
// L = 1, 2, 3, 5, 8: one block, an even split, odd splits (the lower half takes the extra
// block), a power of two. Each against `none` at the same L: two steps, loss, logits and every
// gradient bit for bit; the activation bytes (the allocator's peak over the whole step) and the
// block forwards equal the formulas; the grad-ready hooks in the same order.
static const int NEST_LS[] = {1, 2, 3, 5, 8};
#define NEST_NL ((int)(sizeof NEST_LS / sizeof NEST_LS[0]))
static model_config_t cfg_with_layers(int L) {
    model_config_t c = CK_CFG;
    c.n_layers = L;
    return c;
}


typedef struct {
    float loss;
    float *g1, *g2, *logits;
    size_t acts_peak;  // the acts tag's peak from create to the end of step 2
    long fwds;         // block forwards of step 1 (forward + backward)
    hook_log_t hooks;  // grad-ready order of step 1
} nest_run_t;

static void nest_run(const model_config_t* c, int k, nest_run_t* o) {
    acts_peak_t ap = {0, 0};
    mem_set_observer(acts_peak_observe, &ap);
    model_cpu_t m;
    model_cpu_create_ckpt(&m, c, CK_B, CK_T, 7, k);
    const size_t n = (size_t)CK_B * CK_T;
    int32_t in[CK_B * CK_T], tg[CK_B * CK_T];
    make_tokens(in, n, c->vocab, 1);
    make_tokens(tg, n, c->vocab, 2);
    const adamw_config_t opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    o->g1 = malloc(m.layout.total * 4);
    o->g2 = malloc(m.layout.total * 4);
    o->logits = malloc(n * c->vocab * 4);
    memset(&o->hooks, 0, sizeof o->hooks);
    m.block_fwds = 0;
    model_cpu_forward(&m, in, tg, CK_B, CK_T);
    model_cpu_backward(&m, log_hook, &o->hooks);
    o->fwds = m.block_fwds;
    memcpy(o->g1, m.grads, m.layout.total * 4);
    model_cpu_adamw_step(&m, &opt);
    make_tokens(in, n, c->vocab, 3);
    o->loss = model_cpu_forward(&m, in, tg, CK_B, CK_T);
    memcpy(o->logits, m.a.logits, n * c->vocab * 4);
    model_cpu_backward(&m, NULL, NULL);
    memcpy(o->g2, m.grads, m.layout.total * 4);
    model_cpu_destroy(&m);
    mem_set_observer(NULL, NULL);
    o->acts_peak = ap.peak;
}
static void nest_free(nest_run_t* o) { free(o->g1), free(o->g2), free(o->logits); }

Test(checkpoint, nested_gradients_bit_identical_to_none) {
    for (int i = 0; i < NEST_NL; i++) {
        const model_config_t c = cfg_with_layers(NEST_LS[i]);
        param_layout_t lay = param_layout_make(&c);
        const size_t P = lay.total, NL = (size_t)CK_B * CK_T * c.vocab;
        nest_run_t ref, got;
        nest_run(&c, 0, &ref);
        nest_run(&c, MODEL_CKPT_NESTED, &got);
        cr_assert(memcmp(&got.loss, &ref.loss, 4) == 0, "L=%d: loss %.9g vs none %.9g", c.n_layers, got.loss, ref.loss);
        long d = first_diff(got.logits, ref.logits, NL);
        cr_assert(d < 0, "L=%d: logits differ at %ld", c.n_layers, d);
        d = first_diff(got.g1, ref.g1, P);
        cr_assert(d < 0, "L=%d: step-1 gradient differs at flat index %ld", c.n_layers, d);
        d = first_diff(got.g2, ref.g2, P);
        cr_assert(d < 0, "L=%d: step-2 gradient differs at flat index %ld", c.n_layers, d);
        cr_assert_eq(got.hooks.n, lay.n, "L=%d: %d hook calls for %d parameters", c.n_layers, got.hooks.n, lay.n);
        cr_assert(memcmp(got.hooks.order, ref.hooks.order, sizeof got.hooks.order) == 0, "L=%d: another hook order", c.n_layers);
        nest_free(&ref), nest_free(&got);
        param_layout_free(&lay);
    }
}

// The formulas, written out here independently of model_cpu.c's:
//   residual slices 2 + floor(log2 L) (input, output, the recursion's stack), ONE block of
//   internals, so bytes = 4·((2 + floor(log2 L))·N·C + per_block + N·(C + 2 + V));
//   block forwards L + R(L), R(1) = 1, R(n) = ceil(n/2) + R(ceil(n/2)) + R(floor(n/2)):
//   L = 1: 2, 2: 5, 3: 3 + (2 + R(2) + R(1)) = 3 + 2 + 3 + 1 = 9, 5: 5 + 3 + R(3) + R(2) = 8 + 6 + 3 = 17,
//   8: 8 + 4 + 2R(4) = 12 + 2·(2 + 2R(2)) = 12 + 2·8 = 28 (= 2L + (L/2)·log2 L).
// The measured peak is the allocator's over two whole steps (so no buffer appears mid-backward).
Test(checkpoint, nested_activation_bytes_and_forwards_follow_the_formula) {
    const int slices[NEST_NL] = {2, 3, 3, 4, 5};
    const long fwds[NEST_NL] = {2, 5, 9, 17, 28};
    const double C = CK_CFG.d_model, F = CK_CFG.d_ff, V = CK_CFG.vocab, NH = CK_CFG.n_heads, N = (double)CK_B * CK_T;
    const double per_block = N * (4 * C + 2 + 3 * C + 3 * F) + CK_B * NH * CK_T * CK_T;
    for (int i = 0; i < NEST_NL; i++) {
        const int L = NEST_LS[i];
        const model_config_t c = cfg_with_layers(L);
        const double want = 4.0 * (slices[i] * N * C + per_block + N * (C + 2 + V));
        cr_assert_eq(model_ckpt_res_slices(L, MODEL_CKPT_NESTED), slices[i], "L=%d", L);
        cr_assert_eq(model_ckpt_slots(L, MODEL_CKPT_NESTED), 1, "L=%d", L);
        cr_assert_eq(model_ckpt_block_forwards(L, MODEL_CKPT_NESTED), fwds[i], "L=%d", L);
        cr_assert_eq(model_cpu_acts_bytes(&c, CK_B, CK_T, MODEL_CKPT_NESTED), (size_t)want, "L=%d", L);
        nest_run_t o, none;
        nest_run(&c, MODEL_CKPT_NESTED, &o);
        nest_run(&c, 0, &none);
        cr_assert_eq(o.acts_peak, (size_t)want, "L=%d: measured peak %zu activation bytes, the formula says %.0f", L,
                     o.acts_peak, want);
        cr_assert_eq(o.fwds, fwds[i], "L=%d: %ld block forwards, the formula says %ld", L, o.fwds, fwds[i]);
        cr_assert_eq(none.fwds, L, "L=%d: none ran %ld block forwards", L, none.fwds);
        cr_assert_eq(none.acts_peak, model_cpu_acts_bytes(&c, CK_B, CK_T, 0), "L=%d", L);
        if (L >= 2) cr_assert_lt(o.acts_peak, none.acts_peak, "L=%d: nested keeps fewer bytes than none", L);
        nest_free(&o), nest_free(&none);
    }
    // Against block and every-K at L = 8: fewer bytes than both, for more forwards.
    const model_config_t c8 = cfg_with_layers(8);
    const size_t nb = model_cpu_acts_bytes(&c8, CK_B, CK_T, MODEL_CKPT_NESTED);
    const int ks[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        cr_assert_lt(nb, model_cpu_acts_bytes(&c8, CK_B, CK_T, ks[i]), "L=8: nested vs K=%d", ks[i]);
        cr_assert_gt(model_ckpt_block_forwards(8, MODEL_CKPT_NESTED), model_ckpt_block_forwards(8, ks[i]));
    }
}

Test(checkpoint, nested_parse_and_name) {
    int k = 0;
    char err[160], buf[32];
    cr_assert_eq(model_ckpt_parse("nested", &k, err, sizeof err), 0);
    cr_assert_eq(k, MODEL_CKPT_NESTED);
    cr_assert_str_eq(model_ckpt_name(MODEL_CKPT_NESTED, buf, sizeof buf), "nested");
    cr_assert_eq(model_ckpt_parse("nest", &k, err, sizeof err), -1);
    cr_assert(strstr(err, "|nested"), "the error names nested among the choices: %s", err);
    cr_assert(!model_ckpt_hooks_ok(MODEL_CKPT_NESTED) && !model_ckpt_hooks_ok(2));
    cr_assert(model_ckpt_hooks_ok(0) && model_ckpt_hooks_ok(1));
}

// Unit hooks (ZeRO-2/3) on a nested model: one line, exit 2, saying why (in a child process:
// fail() exits).
static void no_op_unit(void* ctx, int u) { (void)ctx, (void)u; }
Test(checkpoint, nested_with_unit_hooks_is_refused_in_one_line) {
    const char* path = test_path("hooks_refusal.txt");
    fflush(NULL);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (!freopen(path, "w", stderr)) _exit(99);
        const model_config_t c = cfg_with_layers(3);
        model_cpu_t m;
        model_cpu_create_ckpt(&m, &c, CK_B, CK_T, 7, MODEL_CKPT_NESTED);
        const model_unit_hooks_t h = {no_op_unit, no_op_unit, no_op_unit, NULL};
        model_cpu_set_unit_hooks(&m, &h);
        _exit(0);  // not refused
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d: not refused", WEXITSTATUS(st));
    char out[1024] = "";
    FILE* f = fopen(path, "r");
    cr_assert_not_null(f);
    const size_t got = fread(out, 1, sizeof out - 1, f);
    fclose(f);
    out[got] = 0;
    cr_assert(strstr(out, "error: ") && strstr(out, "supports block or none only") && strstr(out, "nested"), "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "not one line: %s", out);
}

// The GPU model has no nested policy yet: model_gpu_create_ckpt refuses it (NULL and one
// line in err), never a silently different schedule.
Test(checkpoint, gpu_refuses_nested_in_one_line) {
    SKIP_WITHOUT_GPU();
    char err[256] = "";
    model_gpu_t* m = model_gpu_create_ckpt(&CK_CFG, CK_B, CK_T, MP_FP32, NULL, 7, MODEL_CKPT_NESTED, err, sizeof err);
    cr_assert_null(m, "nested accepted by the GPU model");
    cr_assert_str_eq(err, MODEL_GPU_NESTED_REFUSAL);
    cr_assert(!strchr(err, '\n'));
}
