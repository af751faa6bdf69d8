// The CPU reference of the Transformer LM: creation, the whole-model forward and backward, and
// AdamW. The passes themselves live in common/model_cpu_range.c — the sequence of operations of
// common/ops_cpu.h, one line per step of the maths in common/model.h, over a range of blocks —
// and the whole model is the range [0, L) with the embedding and the head, so the pipeline
// stages of 08_pipeline run this very code. fp32 throughout, no cleverness: this is the ground
// truth for the GPU code.
#include "common/model_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/dtype.h"
#include "common/ops_cpu.h"

static float* alloc_f32(size_t n, mem_tag_t tag) {
    return (float*)mem_alloc(DEV_CPU, (n ? n : 1) * sizeof(float), tag);
}

// Mirrors the allocations of model_cpu_create below (keep the two together), in doubles so that
// no product of sizes can overflow.
double model_cpu_bytes(const model_config_t* c, int B, int T) { return model_cpu_bytes_ckpt(c, B, T, 0); }

double model_cpu_bytes_ckpt(const model_config_t* c, int B, int T, int ckpt) {
    return model_cpu_bytes_head(c, B, T, ckpt, 0);
}

// The rows of the chunked head's buffer: min(head_chunk, B·T), 0 for the whole logits.
static size_t head_rows(int B, int T, int head_chunk) {
    const size_t BT = (size_t)B * T;
    return head_chunk <= 0 ? 0 : (size_t)head_chunk < BT ? (size_t)head_chunk : BT;
}

double model_cpu_bytes_head(const model_config_t* c, int B, int T, int ckpt, int head_chunk) {
    const double R = model_ckpt_res_slices(c->n_layers, ckpt), L = model_ckpt_slots(c->n_layers, ckpt);
    const double C = c->d_model, F = c->d_ff, V = c->vocab, NH = c->n_heads;
    const double HS = C / NH, BT = (double)B * T;
    param_layout_t lay = param_layout_make(c);
    const double P = (double)lay.total;
    param_layout_free(&lay);
    double floats = 4.0 * P;                                   // params, grads, AdamW m and v
    floats += 2.0 * BT + 2.0 * c->context * HS / 2;            // inputs, targets (int32); RoPE tables
    floats += R * BT * C + 4.0 * L * BT * C + 2.0 * L * BT  // res; ln1, atty, res_mid, ln2; rstds
              + L * BT * 3 * C + L * BT * 3 * F                 // qkv; h13 and gate
              + L * B * NH * (double)T * T                      // attention probabilities (B, NH, T, T)
              + BT * C + 2.0 * BT + BT * V;                     // lnf, lnf_rstd, lse; logits
    floats += BT * (6.0 * C + 3.0 * F + V);                    // backward scratch
    if (head_chunk > 0) floats += (double)head_rows(B, T, head_chunk) * V - 2.0 * BT * V;  // (rows, V), not 2 (N, V)
    return floats * 4.0;
}

// The acts-tagged allocations of model_cpu_create_ckpt below, exactly (keep the two together):
// R residual slices (B, T, C); per slot (Lk of them) ln1, atty, res_mid, ln2 (B, T, C) each, two
// rstds (B, T), qkv (B, T, 3C), h13 and gate (B, T, 3F) together, probabilities (B, NH, T, T);
// then lnf (B, T, C), lnf_rstd and lse (B, T), logits (B, T, V).
size_t model_cpu_acts_bytes(const model_config_t* c, int B, int T, int ckpt) {
    return model_cpu_acts_bytes_head(c, B, T, ckpt, 0);
}

size_t model_cpu_acts_bytes_head(const model_config_t* c, int B, int T, int ckpt, int head_chunk) {
    const size_t R = (size_t)model_ckpt_res_slices(c->n_layers, ckpt), Lk = (size_t)model_ckpt_slots(c->n_layers, ckpt);
    const size_t C = (size_t)c->d_model, F = (size_t)c->d_ff, V = (size_t)c->vocab, NH = (size_t)c->n_heads;
    const size_t BT = (size_t)B * T;
    const size_t slot = 7 * BT * C + 2 * BT + 3 * BT * F + (size_t)B * NH * T * T;
    return (R * BT * C + Lk * slot + BT * C + 2 * BT + (head_chunk > 0 ? 0 : BT * V)) * sizeof(float);
}

int model_ckpt_parse(const char* s, int* k, char* err, size_t errlen) {
    char* end = NULL;
    long v = -1;
    if (s && strcmp(s, "none") == 0) v = 0;
    else if (s && strcmp(s, "block") == 0) v = 1;
    else if (s && strcmp(s, "nested") == 0) {
        *k = MODEL_CKPT_NESTED;
        return 0;
    }
    else if (s && strncmp(s, "every-", 6) == 0 && s[6] >= '0' && s[6] <= '9') {
        v = strtol(s + 6, &end, 10);
        if (*end || v < 1 || v > 1000000) v = -1;
    }
    if (v < 0) {
        snprintf(err, errlen, "checkpoint policy '%s' is not one of %s", s ? s : "(null)", MODEL_CKPT_CHOICES);
        return -1;
    }
    *k = (int)v;
    return 0;
}

const char* model_ckpt_name(int k, char* buf, size_t len) {
    if (k == MODEL_CKPT_NESTED) snprintf(buf, len, "nested");
    else if (k <= 0) snprintf(buf, len, "none");
    else if (k == 1) snprintf(buf, len, "block");
    else snprintf(buf, len, "every-%d", k);
    return buf;
}

void model_cpu_create(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed) {
    model_cpu_create_ckpt(m, c, B, T, seed, 0);
}

void model_cpu_create_ckpt(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed, int ckpt) {
    model_cpu_create_head(m, c, B, T, seed, ckpt, 0);
}

void model_cpu_create_head(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed, int ckpt,
                           int head_chunk) {
    char err[160];
    if (head_chunk < 0) fail("head chunk %d: must be >= 0 rows (0: the whole logits)", head_chunk);
    if (ckpt < 0 && ckpt != MODEL_CKPT_NESTED)
        fail("checkpoint policy %d: must be 0 (none), K >= 1 (every-K) or MODEL_CKPT_NESTED", ckpt);
    if (model_config_check(c, err, sizeof err) != 0) fail("model config: %s", err);
    if (B < 1) fail("batch size is %d, must be >= 1", B);
    if (T < 1) fail("sequence length is %d, must be >= 1", T);
    if (T > c->context) fail("sequence length %d is longer than the context %d", T, c->context);
    // Impossible sizes are the caller's input, said before anything is allocated (not an
    // out-of-memory death after minutes of allocating and touching pages).
    if (!mem_fits(DEV_CPU, model_cpu_bytes_head(c, B, T, ckpt, head_chunk), err, sizeof err))
        fail("the %s model at batch %d x sequence %d (context %d) on the CPU %s; the attention scores "
             "grow as batch x heads x sequence^2", c->name, B, T, c->context, err);
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->layout = param_layout_make(c);
    m->B = B;
    m->T = T;
    m->ckpt = ckpt;
    m->head_chunk = head_chunk;
    const size_t P = m->layout.total;
    m->params = alloc_f32(P, MEM_PARAMS);
    m->grads = alloc_f32(P, MEM_GRADS);
    m->adam_m = alloc_f32(P, MEM_OPTIM);
    m->adam_v = alloc_f32(P, MEM_OPTIM);
    model_init_params(&m->layout, m->params, seed);
    memset(m->grads, 0, P * sizeof(float));
    memset(m->adam_m, 0, P * sizeof(float));
    memset(m->adam_v, 0, P * sizeof(float));

    // Per-block buffers: L slots without checkpointing, one segment's (min(K, L)) with every-K,
    // one with nested.
    const size_t L = (size_t)model_ckpt_slots(c->n_layers, ckpt), C = (size_t)c->d_model, F = (size_t)c->d_ff;
    const size_t V = (size_t)c->vocab, NH = (size_t)c->n_heads, HS = C / NH;
    const size_t BT = (size_t)B * T;
    m->inputs = (int32_t*)mem_alloc(DEV_CPU, BT * sizeof(int32_t), MEM_OTHER);
    m->targets = (int32_t*)mem_alloc(DEV_CPU, BT * sizeof(int32_t), MEM_OTHER);
    m->rope_cos = alloc_f32((size_t)c->context * HS / 2, MEM_OTHER);
    m->rope_sin = alloc_f32((size_t)c->context * HS / 2, MEM_OTHER);
    rope_tables_cpu(m->rope_cos, m->rope_sin, c->context, (int)HS);

    model_cpu_acts_t* a = &m->a;
    a->res = alloc_f32((size_t)model_ckpt_res_slices(c->n_layers, ckpt) * BT * C, MEM_ACTS);
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
    // The chunked head: one (rows, V) buffer of workspace, logits and then dlogits in place.
    const size_t HR = head_rows(B, T, head_chunk);
    a->logits = HR ? alloc_f32(HR * V, MEM_WORKSPACE) : alloc_f32(BT * V, MEM_ACTS);
    a->lse = alloc_f32(BT, MEM_ACTS);

    model_cpu_scratch_t* s = &m->s;
    s->dres = alloc_f32(BT * C, MEM_WORKSPACE);
    s->dln = alloc_f32(BT * C, MEM_WORKSPACE);
    s->dqkv = alloc_f32(BT * 3 * C, MEM_WORKSPACE);
    s->datty = alloc_f32(BT * C, MEM_WORKSPACE);
    s->dh13 = alloc_f32(BT * 2 * F, MEM_WORKSPACE);
    s->dgate = alloc_f32(BT * F, MEM_WORKSPACE);
    s->dlogits = HR ? NULL : alloc_f32(BT * V, MEM_WORKSPACE);
}

void model_cpu_destroy(model_cpu_t* m) {
    float** bufs[] = {&m->params, &m->params_lp, &m->grads, &m->adam_m, &m->adam_v, &m->rope_cos, &m->rope_sin,
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

static void check_tokens(const int32_t* x, int B, int T, int V, const char* what) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t id = x[(size_t)b * T + t];
            if (id < 0 || id >= V)
                fail("%s token id %d at [%d, %d] is out of range [0, %d) (vocab %d)", what, id, b,
                     t, V, V);
        }
}

// The whole model is the block range [0, L) with the embedding and the head: one code path
// (common/model_cpu_range.c) serves it and the pipeline stages of 08_pipeline. This view
// points the range's activations at the model's own buffers (nothing is allocated).
static model_cpu_range_acts_t whole_model_view(model_cpu_t* m) {
    model_cpu_range_acts_t w;
    memset(&w, 0, sizeof w);
    w.r = (model_range_t){0, m->c.n_layers, 1, 1};
    w.B = m->B;
    w.T = m->T;
    w.inputs = m->inputs;
    w.targets = m->targets;
    w.a = m->a;
    w.ckpt = m->ckpt;
    w.head_chunk = m->head_chunk;
    return w;
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
    if (!targets && m->head_chunk > 0)
        fail("a forward without targets wants the logits, which the chunked LM head (head chunk %d) never holds; "
             "make the model with head chunk 0", m->head_chunk);

    // bf16 parameters: the compute copy from the current masters (with hooks the windows are read)
    if (!(m->hooks.before_fwd || m->hooks.before_bwd || m->hooks.after_bwd)) model_cpu_round_params(m);
    model_cpu_range_acts_t w = whole_model_view(m);
    const float loss = model_cpu_range_forward(m, &w, inputs, targets, 1.0f, B, T);
    m->cur_B = B;
    m->cur_T = T;
    m->have_targets = targets != NULL;
    return loss;
}

void model_cpu_backward(model_cpu_t* m, grad_ready_fn hook, void* ctx) {
    if (!m->have_targets) DIE("model_cpu_backward: the last forward had no targets (no loss)");
    model_cpu_range_acts_t w = whole_model_view(m);
    w.cur_B = m->cur_B;
    w.cur_T = m->cur_T;
    w.loss_scale = 1.0f;
    w.have_loss = 1;
    // WRITE: every gradient (and the padding, as 0) is overwritten.
    const model_cpu_grad_sink_t sink = {m->grads, 0, hook, ctx};
    model_cpu_range_backward(m, &w, &sink);
}

void model_cpu_set_bf16_params(model_cpu_t* m, int on) {
    mem_free(m->params_lp);
    m->params_lp = NULL;
    if (!on || !m->params) return;
    m->params_lp = alloc_f32(m->layout.total, MEM_PARAMS);
    model_cpu_round_params(m);
}

void model_cpu_round_params(model_cpu_t* m) {
    if (!m->params_lp || !m->params) return;
    const size_t n = m->layout.total;
    for (size_t i = 0; i < n; i++) m->params_lp[i] = f32_from_bf16(bf16_from_f32(m->params[i]));
}

void model_cpu_adamw_step(model_cpu_t* m, const adamw_config_t* cfg) {
    m->adam_t++;
    adamw_cpu_step(cfg, m->params, m->grads, m->adam_m, m->adam_v, m->layout.total, m->adam_t);
}
