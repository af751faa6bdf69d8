// The chunked LM head + cross-entropy (model_cpu.h "the chunked LM head", lm.h head_chunk):
// against the whole-logits head, the loss and every gradient over a few training steps, for
// chunks of 1 row, a divisor of N = B·T, a non-divisor, N and more than N; the activation
// memory it saves, to the byte, from the counting allocator; the refusals. The CPU versions
// run everywhere; the GPU versions (fp32 and bf16) skip without a GPU.
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/lm.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "tests/harness.h"

#define BATCH 2
#define SEQ 16
#define N_ROWS (BATCH * SEQ)
#define VOCAB 97  // small and prime: no chunk of rows lines up with anything
#define SEED 11
#define STEPS 3

// 1 row, a divisor of N (8), a non-divisor (5), N, more than N.
static const int CHUNKS[] = {1, 8, 5, N_ROWS, N_ROWS + 13};
#define N_CHUNKS (int)(sizeof CHUNKS / sizeof CHUNKS[0])

static model_config_t small_vocab(void) {
    model_config_t c;
    cr_assert_eq(model_config_by_name("tiny", SEQ, &c), 0);
    c.vocab = VOCAB;
    return c;
}

static void tokens(int k, int32_t* in, int32_t* tg) {
    uint32_t x = 4242u + 131u * (uint32_t)k;
    for (int i = 0; i < N_ROWS; i++) {
        x = x * 1664525u + 1013904223u;
        in[i] = (int32_t)((x >> 8) % VOCAB);
        x = x * 1664525u + 1013904223u;
        tg[i] = (int32_t)((x >> 8) % VOCAB);
    }
}

static lm_t* make(const model_config_t* c, lm_backend_t be, model_precision_t prec, int ckpt, int head_chunk) {
    lm_options_t o = lm_options(be, BATCH, SEQ);
    o.seed = SEED;
    o.precision = prec;
    o.ckpt = ckpt;
    o.head_chunk = head_chunk;
    char err[512] = "";
    lm_t* m = lm_create(c, &o, err, sizeof err);
    cr_assert(m, "lm_create (head chunk %d): %s", head_chunk, err);
    return m;
}

// One training step: tokens of step k, forward, backward, the loss and the gradients to the
// host, then AdamW (so the next step's parameters depend on every gradient).
static float step(lm_t* m, int k, float* grads) {
    int32_t in[N_ROWS], tg[N_ROWS];
    char err[256];
    tokens(k, in, tg);
    lm_set_tokens(m, in, tg);
    lm_forward_async(m);
    const float loss = lm_loss(m);
    cr_assert_eq(lm_backward(m, NULL, NULL, err, sizeof err), 0, "%s", err);
    lm_get_grads(m, grads);
    const adamw_config_t opt = adamw_default();
    cr_assert_eq(lm_adamw(m, &opt, k + 1, err, sizeof err), 0, "%s", err);
    return loss;
}

static const param_info_t* head_info(const param_layout_t* lay) {
    return &lay->p[param_index(lay, PK_HEAD, -1)];
}

// CPU: the same operations row by row, and dW_head's rows added in the same order chunk after
// chunk (head_dw_add continues matmul_bwd_cpu's loop): every bit the same, dW_head included.
static void cpu_bits(int ckpt) {
    const model_config_t c = small_vocab();
    lm_t* ref = make(&c, LM_CPU, MP_FP32, ckpt, 0);
    const size_t n = lm_layout(ref)->total;
    float* want = malloc(STEPS * n * sizeof(float));
    float* got = malloc(n * sizeof(float));
    cr_assert(want && got);
    float want_loss[STEPS];
    for (int k = 0; k < STEPS; k++) want_loss[k] = step(ref, k, want + k * n);
    lm_destroy(ref);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += want[i] != 0.0f;
    cr_assert(nonzero > n / 2, "the reference's gradients are mostly zero (%zu of %zu)", nonzero, n);
    for (int ci = 0; ci < N_CHUNKS; ci++) {
        lm_t* m = make(&c, LM_CPU, MP_FP32, ckpt, CHUNKS[ci]);
        for (int k = 0; k < STEPS; k++) {
            const float loss = step(m, k, got);
            cr_assert(memcmp(&loss, &want_loss[k], sizeof loss) == 0, "chunk %d, step %d: loss %.9g, whole logits %.9g",
                      CHUNKS[ci], k, loss, want_loss[k]);
            const param_layout_t* lay = lm_layout(m);
            for (int p = 0; p < lay->n; p++) {
                const param_info_t* pi = &lay->p[p];
                cr_assert(memcmp(got + pi->offset, want + k * n + pi->offset, pi->numel * sizeof(float)) == 0,
                          "chunk %d, step %d: the gradient of %s differs (max |diff| %g)", CHUNKS[ci], k, pi->name,
                          max_abs_diff(got + pi->offset, want + k * n + pi->offset, pi->numel));
            }
        }
        lm_destroy(m);
    }
    free(want);
    free(got);
}

Test(head_chunk, cpu_loss_and_every_gradient_are_bitwise_the_whole_logits) { cpu_bits(0); }
// With block checkpointing (the recompute of the blocks and of the head's chunks together).
Test(head_chunk, cpu_bitwise_with_block_checkpointing) { cpu_bits(1); }

// The counting allocator: creating the chunked model allocates exactly N·V·4 fewer bytes of
// activations (the logits) and (N − R)·V·4 fewer of workspace (the (N, V) dlogits gone, one
// (R, V) chunk buffer instead); lm_acts_bytes says the same; a step allocates nothing more.
Test(head_chunk, cpu_memory_falls_by_the_logits_exactly) {
    const model_config_t c = small_vocab();
    const size_t NV4 = (size_t)N_ROWS * VOCAB * sizeof(float);
    mem_stats_t s0 = mem_stats(DEV_CPU);
    lm_t* whole = make(&c, LM_CPU, MP_FP32, 0, 0);
    mem_stats_t s1 = mem_stats(DEV_CPU);
    const size_t acts_whole = s1.live_by_tag[MEM_ACTS] - s0.live_by_tag[MEM_ACTS];
    const size_t ws_whole = s1.live_by_tag[MEM_WORKSPACE] - s0.live_by_tag[MEM_WORKSPACE];
    cr_assert_eq(acts_whole, lm_acts_bytes(whole), "whole logits: %zu acts bytes allocated, lm_acts_bytes %zu",
                 acts_whole, lm_acts_bytes(whole));
    for (int ci = 0; ci < N_CHUNKS; ci++) {
        const int R = CHUNKS[ci], rows = R < N_ROWS ? R : N_ROWS;
        mem_stats_t a0 = mem_stats(DEV_CPU);
        lm_t* m = make(&c, LM_CPU, MP_FP32, 0, R);
        mem_stats_t a1 = mem_stats(DEV_CPU);
        const size_t acts = a1.live_by_tag[MEM_ACTS] - a0.live_by_tag[MEM_ACTS];
        const size_t ws = a1.live_by_tag[MEM_WORKSPACE] - a0.live_by_tag[MEM_WORKSPACE];
        cr_assert_eq(acts_whole - acts, NV4, "chunk %d: activations fell by %zu bytes, N·V·4 = %zu", R,
                     acts_whole - acts, NV4);
        cr_assert_eq(acts, lm_acts_bytes(m), "chunk %d: %zu acts bytes allocated, lm_acts_bytes %zu", R, acts,
                     lm_acts_bytes(m));
        cr_assert_eq(ws_whole - ws, (size_t)(N_ROWS - rows) * VOCAB * sizeof(float),
                     "chunk %d: workspace fell by %zu bytes, (N - rows)·V·4 = %zu", R, ws_whole - ws,
                     (size_t)(N_ROWS - rows) * VOCAB * sizeof(float));
        cr_assert_eq(model_cpu_acts_bytes(&c, BATCH, SEQ, 0) - model_cpu_acts_bytes_head(&c, BATCH, SEQ, 0, R), NV4);
        float* g = malloc(lm_layout(m)->total * sizeof(float));
        cr_assert_not_null(g);
        mem_reset_peak(DEV_CPU);
        const size_t live = mem_stats(DEV_CPU).live;
        (void)step(m, 0, g);
        cr_assert_eq(mem_stats(DEV_CPU).peak, live, "chunk %d: a step allocated %zu bytes more", R,
                     mem_stats(DEV_CPU).peak - live);
        free(g);
        lm_destroy(m);
    }
    lm_destroy(whole);
}

Test(head_chunk, refusals_name_the_option) {
    const model_config_t c = small_vocab();
    char err[512] = "";
    lm_options_t o = lm_options(LM_CPU, BATCH, SEQ);
    o.head_chunk = -1;
    cr_assert_null(lm_create(&c, &o, err, sizeof err));
    cr_assert(strstr(err, "head chunk -1") && strstr(err, ">= 0"), "%s", err);
    o = lm_options(LM_CPU, BATCH, SEQ);
    o.head_chunk = 4;
    o.ranges = 1;
    err[0] = '\0';
    cr_assert_null(lm_create(&c, &o, err, sizeof err));
    cr_assert(strstr(err, "chunked LM head") && strstr(err, "pipeline"), "%s", err);
}

// A forward without targets would want the logits: one line, exit 2.
Test(head_chunk, cpu_forward_without_targets_is_refused, .exit_code = 2) {
    const model_config_t c = small_vocab();
    model_cpu_t m;
    model_cpu_create_head(&m, &c, BATCH, SEQ, SEED, 0, 8);
    int32_t in[N_ROWS], tg[N_ROWS];
    tokens(0, in, tg);
    (void)model_cpu_forward(&m, in, NULL, BATCH, SEQ);
}

// ---- GPU (skipped without one) -------------------------------------------------------------
// The chunk's GEMMs have M = rows instead of N (cuBLAS may block them differently) and dW_head
// is a sum of ceil(N/R) GEMMs: its N-term sums are regrouped. A sum of N fp32 terms regrouped
// moves by at most about N·ε·Σ|terms|, and Σ|terms| <= N·max|dy|·max|x|; with dlogits ~ 1/N
// and x of unit RMS, |dW| itself is O(1): the bound taken is 4·N·ε·max|dW| (ε = 2^-23 in
// fp32). Everything downstream of d(lnf) moves by a GEMM's rounding: rtol 1e-4 of each
// parameter's largest gradient. bf16 (activations and the logits buffer in bf16, fp32
// accumulation): a logit that lands one bf16 ulp (2^-8) away moves its row's loss and dlogits
// by ~2^-8 relative, so 2e-2 of each parameter's largest gradient, 1e-2 of the loss.
static void gpu_close(model_precision_t prec) {
    const model_config_t c = small_vocab();
    lm_t* ref = make(&c, LM_GPU, prec, 0, 0);
    const size_t n = lm_layout(ref)->total;
    const param_info_t* head = head_info(lm_layout(ref));
    float* want = malloc(n * sizeof(float));
    float* got = malloc(n * sizeof(float));
    cr_assert(want && got);
    const float want_loss = step(ref, 0, want);
    lm_destroy(ref);
    const double eps = FLT_EPSILON;  // dW_head accumulates in fp32 in both precisions
    const double loss_rtol = prec == MP_BF16 ? 1e-2 : 1e-5, grad_rtol = prec == MP_BF16 ? 2e-2 : 1e-4;
    for (int ci = 0; ci < N_CHUNKS; ci++) {
        lm_t* m = make(&c, LM_GPU, prec, 0, CHUNKS[ci]);
        const float loss = step(m, 0, got);
        cr_assert(fabsf(loss - want_loss) <= loss_rtol * fabsf(want_loss), "%s chunk %d: loss %.9g, whole logits %.9g",
                  model_precision_name(prec), CHUNKS[ci], loss, want_loss);
        const param_layout_t* lay = lm_layout(m);
        for (int p = 0; p < lay->n; p++) {
            const param_info_t* pi = &lay->p[p];
            double big = 0.0, diff = 0.0;
            for (size_t i = 0; i < pi->numel; i++) {
                const double w = want[pi->offset + i], g = got[pi->offset + i];
                big = fabs(w) > big ? fabs(w) : big;
                diff = fabs(g - w) > diff ? fabs(g - w) : diff;
            }
            double tol = grad_rtol * big;
            if (pi->offset == head->offset) tol += 4.0 * N_ROWS * eps * big;
            cr_assert(diff <= tol, "%s chunk %d: the gradient of %s moved by %g (largest %g, tolerance %g)",
                      model_precision_name(prec), CHUNKS[ci], pi->name, diff, big, tol);
        }
        lm_destroy(m);
    }
    free(want);
    free(got);
}

Test(head_chunk, gpu_fp32_loss_and_gradients_close_to_the_whole_logits) {
    SKIP_WITHOUT_GPU();
    gpu_close(MP_FP32);
}
Test(head_chunk, gpu_bf16_loss_and_gradients_close_to_the_whole_logits) {
    SKIP_WITHOUT_GPU();
    gpu_close(MP_BF16);
}

// The GPU's activations fall by N·V·(bytes of the activation type) exactly, and lm_acts_bytes
// agrees with the counting allocator.
static void gpu_memory(model_precision_t prec) {
    const model_config_t c = small_vocab();
    const size_t es = prec == MP_BF16 ? 2 : 4;
    mem_stats_t s0 = mem_stats(DEV_CUDA);
    lm_t* whole = make(&c, LM_GPU, prec, 0, 0);
    mem_stats_t s1 = mem_stats(DEV_CUDA);
    const size_t acts_whole = s1.live_by_tag[MEM_ACTS] - s0.live_by_tag[MEM_ACTS];
    cr_assert_eq(acts_whole, lm_acts_bytes(whole));
    for (int ci = 0; ci < N_CHUNKS; ci++) {
        mem_stats_t a0 = mem_stats(DEV_CUDA);
        lm_t* m = make(&c, LM_GPU, prec, 0, CHUNKS[ci]);
        mem_stats_t a1 = mem_stats(DEV_CUDA);
        const size_t acts = a1.live_by_tag[MEM_ACTS] - a0.live_by_tag[MEM_ACTS];
        cr_assert_eq(acts_whole - acts, (size_t)N_ROWS * VOCAB * es, "%s chunk %d: activations fell by %zu bytes",
                     model_precision_name(prec), CHUNKS[ci], acts_whole - acts);
        cr_assert_eq(acts, lm_acts_bytes(m));
        lm_destroy(m);
    }
    lm_destroy(whole);
}
Test(head_chunk, gpu_memory_falls_by_the_logits_exactly) {
    SKIP_WITHOUT_GPU();
    gpu_memory(MP_FP32);
    gpu_memory(MP_BF16);
}
