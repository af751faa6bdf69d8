// The CPU reference of the Transformer LM: the model's forward and backward passes, written
// as the sequence of operations in common/ops_cpu.h, one line per step of the maths in
// common/model.h. fp32 throughout, no cleverness: this is the ground truth for the GPU code.
#include "common/model_cpu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/ops_cpu.h"

static float* alloc_f32(size_t n, mem_tag_t tag) {
    return (float*)mem_alloc(DEV_CPU, (n ? n : 1) * sizeof(float), tag);
}

// Mirrors the allocations of model_cpu_create below (keep the two together), in doubles so that
// no product of sizes can overflow.
double model_cpu_bytes(const model_config_t* c, int B, int T) {
    const double L = c->n_layers, C = c->d_model, F = c->d_ff, V = c->vocab, NH = c->n_heads;
    const double HS = C / NH, BT = (double)B * T;
    param_layout_t lay = param_layout_make(c);
    const double P = (double)lay.total;
    param_layout_free(&lay);
    double floats = 4.0 * P;                                   // params, grads, AdamW m and v
    floats += 2.0 * BT + 2.0 * c->context * HS / 2;            // inputs, targets (int32); RoPE tables
    floats += (L + 1) * BT * C + 4.0 * L * BT * C + 2.0 * L * BT  // res; ln1, atty, res_mid, ln2; rstds
              + L * BT * 3 * C + L * BT * 3 * F                 // qkv; h13 and gate
              + L * B * NH * (double)T * T                      // attention probabilities (B, NH, T, T)
              + BT * C + 2.0 * BT + BT * V;                     // lnf, lnf_rstd, lse; logits
    floats += BT * (6.0 * C + 3.0 * F + V);                    // backward scratch
    return floats * 4.0;
}

void model_cpu_create(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed) {
    char err[160];
    if (model_config_check(c, err, sizeof err) != 0) fail("model config: %s", err);
    if (B < 1) fail("batch size is %d, must be >= 1", B);
    if (T < 1) fail("sequence length is %d, must be >= 1", T);
    if (T > c->context) fail("sequence length %d is longer than the context %d", T, c->context);
    // Impossible sizes are the caller's input, said before anything is allocated (not an
    // out-of-memory death after minutes of allocating and touching pages).
    if (!mem_fits(DEV_CPU, model_cpu_bytes(c, B, T), err, sizeof err))
        fail("the %s model at batch %d x sequence %d (context %d) on the CPU %s; the attention scores "
             "grow as batch x heads x sequence^2", c->name, B, T, c->context, err);
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->layout = param_layout_make(c);
    m->B = B;
    m->T = T;
    const size_t P = m->layout.total;
    m->params = alloc_f32(P, MEM_PARAMS);
    m->grads = alloc_f32(P, MEM_GRADS);
    m->adam_m = alloc_f32(P, MEM_OPTIM);
    m->adam_v = alloc_f32(P, MEM_OPTIM);
    model_init_params(&m->layout, m->params, seed);
    memset(m->grads, 0, P * sizeof(float));
    memset(m->adam_m, 0, P * sizeof(float));
    memset(m->adam_v, 0, P * sizeof(float));

    const size_t L = (size_t)c->n_layers, C = (size_t)c->d_model, F = (size_t)c->d_ff;
    const size_t V = (size_t)c->vocab, NH = (size_t)c->n_heads, HS = C / NH;
    const size_t BT = (size_t)B * T;
    m->inputs = (int32_t*)mem_alloc(DEV_CPU, BT * sizeof(int32_t), MEM_OTHER);
    m->targets = (int32_t*)mem_alloc(DEV_CPU, BT * sizeof(int32_t), MEM_OTHER);
    m->rope_cos = alloc_f32((size_t)c->context * HS / 2, MEM_OTHER);
    m->rope_sin = alloc_f32((size_t)c->context * HS / 2, MEM_OTHER);
    rope_tables_cpu(m->rope_cos, m->rope_sin, c->context, (int)HS);

    model_cpu_acts_t* a = &m->a;
    a->res = alloc_f32((L + 1) * BT * C, MEM_ACTS);
    a->ln1 = alloc_f32(L * BT * C, MEM_ACTS);
    a->ln1_rstd = alloc_f32(L * BT, MEM_ACTS);
    a->qkv = alloc_f32(L * BT * 3 * C, MEM_ACTS);
    a->att = alloc_f32(L * (size_t)B * NH * T * T, MEM_ACTS);
    a->atty = alloc_f32(L * BT * C, MEM_ACTS);
    a->res_mid = alloc_f32(L * BT * C, MEM_ACTS);
    a->ln2 = alloc_f32(L * BT * C, MEM_ACTS);
    a->ln2_rstd = alloc_f32(L * BT, MEM_ACTS);
    a->h13 = alloc_f32(L * BT * 2 * F, MEM_ACTS);
    a->gate = alloc_f32(L * BT * F, MEM_ACTS);
    a->lnf = alloc_f32(BT * C, MEM_ACTS);
    a->lnf_rstd = alloc_f32(BT, MEM_ACTS);
    a->logits = alloc_f32(BT * V, MEM_ACTS);
    a->lse = alloc_f32(BT, MEM_ACTS);

    model_cpu_scratch_t* s = &m->s;
    s->dres = alloc_f32(BT * C, MEM_WORKSPACE);
    s->dln = alloc_f32(BT * C, MEM_WORKSPACE);
    s->dqkv = alloc_f32(BT * 3 * C, MEM_WORKSPACE);
    s->datty = alloc_f32(BT * C, MEM_WORKSPACE);
    s->dh13 = alloc_f32(BT * 2 * F, MEM_WORKSPACE);
    s->dgate = alloc_f32(BT * F, MEM_WORKSPACE);
    s->dlogits = alloc_f32(BT * V, MEM_WORKSPACE);
}

void model_cpu_destroy(model_cpu_t* m) {
    float** bufs[] = {&m->params, &m->grads, &m->adam_m, &m->adam_v, &m->rope_cos, &m->rope_sin,
                      &m->a.res, &m->a.ln1, &m->a.ln1_rstd, &m->a.qkv, &m->a.att, &m->a.atty,
                      &m->a.res_mid, &m->a.ln2, &m->a.ln2_rstd, &m->a.h13, &m->a.gate, &m->a.lnf,
                      &m->a.lnf_rstd, &m->a.logits, &m->a.lse, &m->s.dres, &m->s.dln, &m->s.dqkv,
                      &m->s.datty, &m->s.dh13, &m->s.dgate, &m->s.dlogits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        mem_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    mem_free(m->inputs);
    mem_free(m->targets);
    m->inputs = m->targets = NULL;
    param_layout_free(&m->layout);
}

// Pointer to parameter `kind` of `layer` inside a flat buffer (params or grads).
static float* param_ptr(const model_cpu_t* m, float* flat, param_kind_t kind, int layer) {
    const int i = param_index(&m->layout, kind, layer);
    if (i < 0) DIE("model_cpu: no parameter of kind %d in layer %d", (int)kind, layer);
    return flat + m->layout.p[i].offset;
}

static void check_tokens(const int32_t* x, int B, int T, int V, const char* what) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t id = x[(size_t)b * T + t];
            if (id < 0 || id >= V)
                fail("%s token id %d at [%d, %d] is out of range [0, %d) (vocab %d)", what, id, b,
                     t, V, V);
        }
}

float model_cpu_forward(model_cpu_t* m, const int32_t* inputs, const int32_t* targets, int B,
                        int T) {
    const model_config_t* c = &m->c;
    if (B < 1) fail("batch size is %d, must be >= 1", B);
    if (T < 1) fail("sequence length is %d, must be >= 1", T);
    if (T > c->context) fail("sequence length %d is longer than the context %d", T, c->context);
    if (B > m->B || T > m->T)
        fail("batch %d x sequence %d does not fit the %d x %d this model was created for", B, T,
             m->B, m->T);
    check_tokens(inputs, B, T, c->vocab, "input");
    if (targets) check_tokens(targets, B, T, c->vocab, "target");

    const int L = c->n_layers, C = c->d_model, F = c->d_ff, V = c->vocab, NH = c->n_heads;
    const int HS = C / NH, N = B * T;
    const size_t NC = (size_t)N * C;
    m->cur_B = B;
    m->cur_T = T;
    memcpy(m->inputs, inputs, (size_t)N * sizeof(int32_t));
    m->have_targets = targets != NULL;
    if (targets) memcpy(m->targets, targets, (size_t)N * sizeof(int32_t));

    model_cpu_acts_t* a = &m->a;
    // x = E[inputs]
    embedding_fwd_cpu(a->res, inputs, param_ptr(m, m->params, PK_EMBED, -1), N, C);
    for (int l = 0; l < L; l++) {
        float* x = a->res + (size_t)l * NC;              // (B, T, C) layer input
        float* ln1 = a->ln1 + (size_t)l * NC;            // (B, T, C)
        float* ln1_rstd = a->ln1_rstd + (size_t)l * N;   // (B, T)
        float* qkv = a->qkv + (size_t)l * NC * 3;        // (B, T, 3C)
        float* att = a->att + (size_t)l * B * NH * T * T;  // (B, NH, T, T)
        float* atty = a->atty + (size_t)l * NC;          // (B, T, C)
        float* mid = a->res_mid + (size_t)l * NC;        // (B, T, C)
        float* ln2 = a->ln2 + (size_t)l * NC;            // (B, T, C)
        float* ln2_rstd = a->ln2_rstd + (size_t)l * N;   // (B, T)
        float* h13 = a->h13 + (size_t)l * N * 2 * F;     // (B, T, 2F)
        float* gate = a->gate + (size_t)l * N * F;       // (B, T, F)
        float* out = a->res + (size_t)(l + 1) * NC;      // (B, T, C) layer output

        // Attention block: x_mid = x + Wo · Attn(RoPE(q), RoPE(k), v), q|k|v = Wqkv · RMSNorm1(x)
        rmsnorm_fwd_cpu(ln1, ln1_rstd, x, param_ptr(m, m->params, PK_LN1, l), N, C);
        // q_proj, k_proj, v_proj are adjacent: together one (3C, C) weight.
        matmul_fwd_cpu(qkv, ln1, param_ptr(m, m->params, PK_Q, l), N, C, 3 * C);
        rope_fwd_cpu(qkv, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);      // q
        rope_fwd_cpu(qkv + C, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);  // k
        attention_fwd_cpu(atty, att, qkv, B, T, C, NH);
        matmul_fwd_cpu(mid, atty, param_ptr(m, m->params, PK_O, l), N, C, C);
        for (size_t i = 0; i < NC; i++) mid[i] += x[i];

        // FFN block: out = x_mid + W2 · (SiLU(W1 · RMSNorm2(x_mid)) * W3 · RMSNorm2(x_mid))
        rmsnorm_fwd_cpu(ln2, ln2_rstd, mid, param_ptr(m, m->params, PK_LN2, l), N, C);
        // w1 and w3 are adjacent: together one (2F, C) weight.
        matmul_fwd_cpu(h13, ln2, param_ptr(m, m->params, PK_W1, l), N, C, 2 * F);
        swiglu_fwd_cpu(gate, h13, N, F);
        matmul_fwd_cpu(out, gate, param_ptr(m, m->params, PK_W2, l), N, F, C);
        for (size_t i = 0; i < NC; i++) out[i] += mid[i];
    }
    // logits = lm_head · RMSNorm_final(x_L)
    rmsnorm_fwd_cpu(a->lnf, a->lnf_rstd, a->res + (size_t)L * NC,
                    param_ptr(m, m->params, PK_LNF, -1), N, C);
    matmul_fwd_cpu(a->logits, a->lnf, param_ptr(m, m->params, PK_HEAD, -1), N, C, V);
    if (!targets) return NAN;
    return cross_entropy_fwd_cpu(a->lse, a->logits, targets, N, V);
}

static void ready(const model_cpu_t* m, grad_ready_fn hook, void* ctx, param_kind_t kind,
                  int layer) {
    if (hook) hook(ctx, param_index(&m->layout, kind, layer));
}

void model_cpu_backward(model_cpu_t* m, grad_ready_fn hook, void* ctx) {
    if (!m->have_targets) DIE("model_cpu_backward: the last forward had no targets (no loss)");
    const model_config_t* c = &m->c;
    const int B = m->cur_B, T = m->cur_T;
    const int L = c->n_layers, C = c->d_model, F = c->d_ff, V = c->vocab, NH = c->n_heads;
    const int HS = C / NH, N = B * T;
    const size_t NC = (size_t)N * C;
    model_cpu_acts_t* a = &m->a;
    model_cpu_scratch_t* s = &m->s;
    float* P = m->params;
    float* G = m->grads;
    // Padding stays 0; every parameter's gradient is overwritten below.
    memset(G, 0, m->layout.total * sizeof(float));

    // Loss -> logits -> lm_head and the final norm.
    cross_entropy_bwd_cpu(s->dlogits, a->logits, a->lse, m->targets, N, V);
    matmul_bwd_cpu(s->dln, param_ptr(m, G, PK_HEAD, -1), s->dlogits, a->lnf,
                   param_ptr(m, P, PK_HEAD, -1), N, C, V);
    ready(m, hook, ctx, PK_HEAD, -1);
    memset(s->dres, 0, NC * sizeof(float));
    rmsnorm_bwd_cpu(s->dres, param_ptr(m, G, PK_LNF, -1), s->dln, a->res + (size_t)L * NC,
                    param_ptr(m, P, PK_LNF, -1), a->lnf_rstd, N, C);
    ready(m, hook, ctx, PK_LNF, -1);

    for (int l = L - 1; l >= 0; l--) {
        const float* x = a->res + (size_t)l * NC;
        const float* ln1 = a->ln1 + (size_t)l * NC;
        const float* ln1_rstd = a->ln1_rstd + (size_t)l * N;
        const float* qkv = a->qkv + (size_t)l * NC * 3;
        const float* att = a->att + (size_t)l * B * NH * T * T;
        const float* atty = a->atty + (size_t)l * NC;
        const float* mid = a->res_mid + (size_t)l * NC;
        const float* ln2 = a->ln2 + (size_t)l * NC;
        const float* ln2_rstd = a->ln2_rstd + (size_t)l * N;
        const float* h13 = a->h13 + (size_t)l * N * 2 * F;
        const float* gate = a->gate + (size_t)l * N * F;
        // Here s->dres (B, T, C) is the gradient of this layer's output.

        // FFN block, in reverse. The skip path passes dres through unchanged, so dres
        // becomes the gradient of x_mid once the norm's contribution is added.
        matmul_bwd_cpu(s->dgate, param_ptr(m, G, PK_W2, l), s->dres, gate,
                       param_ptr(m, P, PK_W2, l), N, F, C);
        ready(m, hook, ctx, PK_W2, l);
        swiglu_bwd_cpu(s->dh13, s->dgate, h13, N, F);
        // One (2F, C) product gives dW1 and dW3 (adjacent) and dRMSNorm2 in one go.
        matmul_bwd_cpu(s->dln, param_ptr(m, G, PK_W1, l), s->dh13, ln2,
                       param_ptr(m, P, PK_W1, l), N, C, 2 * F);
        ready(m, hook, ctx, PK_W3, l);
        ready(m, hook, ctx, PK_W1, l);
        rmsnorm_bwd_cpu(s->dres, param_ptr(m, G, PK_LN2, l), s->dln, mid,
                        param_ptr(m, P, PK_LN2, l), ln2_rstd, N, C);
        ready(m, hook, ctx, PK_LN2, l);

        // Attention block, in reverse; afterwards dres is the gradient of the layer input.
        matmul_bwd_cpu(s->datty, param_ptr(m, G, PK_O, l), s->dres, atty,
                       param_ptr(m, P, PK_O, l), N, C, C);
        ready(m, hook, ctx, PK_O, l);
        attention_bwd_cpu(s->dqkv, s->datty, qkv, att, B, T, C, NH);
        rope_bwd_cpu(s->dqkv, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);      // dq
        rope_bwd_cpu(s->dqkv + C, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);  // dk
        // One (3C, C) product: dWq, dWk, dWv (adjacent) and dRMSNorm1.
        matmul_bwd_cpu(s->dln, param_ptr(m, G, PK_Q, l), s->dqkv, ln1, param_ptr(m, P, PK_Q, l),
                       N, C, 3 * C);
        ready(m, hook, ctx, PK_V, l);
        ready(m, hook, ctx, PK_K, l);
        ready(m, hook, ctx, PK_Q, l);
        rmsnorm_bwd_cpu(s->dres, param_ptr(m, G, PK_LN1, l), s->dln, x,
                        param_ptr(m, P, PK_LN1, l), ln1_rstd, N, C);
        ready(m, hook, ctx, PK_LN1, l);
    }
    // dres is now the gradient of the embedding output.
    embedding_bwd_cpu(param_ptr(m, G, PK_EMBED, -1), s->dres, m->inputs, N, C, V);
    ready(m, hook, ctx, PK_EMBED, -1);
}

void model_cpu_adamw_step(model_cpu_t* m, const adamw_config_t* cfg) {
    m->adam_t++;
    adamw_cpu_step(cfg, m->params, m->grads, m->adam_m, m->adam_v, m->layout.total, m->adam_t);
}
