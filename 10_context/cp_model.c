// The Transformer under context parallelism (cp_model.h): model_cpu.c's forward and backward,
// op for op (common/ops_cpu.h), on this rank's B·Tl tokens, with the ring in place of
// attention. The ring wants its q, k, v chunk-major ([chunk][b·NH + h][t][HS], context.h); the
// model's rows are (b, t) with heads side by side, so the attention's inputs and outputs are
// repacked on the way in and out.
#include "10_context/cp_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/adamw_cpu.h"
#include "common/check.h"
#include "common/ops_cpu.h"

static float* xalloc(size_t n) {
    float* p = calloc(n ? n : 1, sizeof(float));
    if (!p) DIE("cp_model: out of memory (%zu floats)", n);
    return p;
}

static float* W(cp_model_t* m, param_kind_t k, int layer) {
    const int i = param_index(&m->layout, k, layer);
    if (i < 0) DIE("cp_model: no parameter of kind %d in layer %d", (int)k, layer);
    return m->params + m->layout.p[i].offset;
}
static float* G(cp_model_t* m, param_kind_t k, int layer) {
    const int i = param_index(&m->layout, k, layer);
    if (i < 0) DIE("cp_model: no parameter of kind %d in layer %d", (int)k, layer);
    return m->grads + m->layout.p[i].offset;
}

static cp_ring_t ring_cfg(const cp_model_t* m) {
    const int HS = m->c.d_model / m->c.n_heads;
    const cp_ring_t g = {.BH = m->B * m->c.n_heads, .N = m->T, .d = HS, .causal = 1,
                         .scale = 1.0f / sqrtf((float)HS), .split = m->split, .Bq = 16, .Bk = 16, .fault = 0};
    return g;
}

void cp_model_create(cp_model_t* m, comm_t* g, const model_config_t* c, int B, int T, cp_split_t split, uint64_t seed) {
    memset(m, 0, sizeof *m);
    char err[512];
    if (g->backend != COMM_MPI)
        comm_refuse(g, "the context-parallel model runs on the CPU; give the MPI backend (--backend mpi)");
    if (model_config_check(c, err, sizeof err) != 0) comm_refuse(g, "model: %s", err);
    if (B < 1 || T < 1 || T > c->context)
        comm_refuse(g, "batch %d x sequence %d: give B >= 1 and 1 <= T <= the context %d", B, T, c->context);
    if (cp_check_sizes(split, T, g->world, err, sizeof err) != 0) comm_refuse(g, "%s", err);
    m->c = *c;
    m->g = g;
    m->split = split;
    m->B = B;
    m->T = T;
    const int P = g->world, r = g->rank;
    int ids[CP_MAX_CHUNKS];
    m->nch = cp_rank_chunks(split, P, r, ids);
    m->Tl = cp_rank_tokens(split, T, P, r);
    m->pos = calloc((size_t)m->Tl, sizeof(int));
    if (!m->pos) DIE("cp_model: out of memory");
    for (int i = 0; i < m->nch; i++) {
        int st;
        cp_chunk_range(T, cp_num_chunks(split, P), ids[i], &st, &m->ch_len[i]);
        m->ch_off[i] = cp_chunk_offset(split, T, P, r, i);
        for (int t = 0; t < m->ch_len[i]; t++) m->pos[m->ch_off[i] + t] = st + t;
    }
    m->layout = param_layout_make(c);
    const size_t tot = m->layout.total;
    m->params = xalloc(tot);
    m->grads = xalloc(tot);
    m->adam_m = xalloc(tot);
    m->adam_v = xalloc(tot);
    model_init_params(&m->layout, m->params, seed);  // the same bits on every rank

    const int C = c->d_model, NH = c->n_heads, HS = C / NH, F = c->d_ff, V = c->vocab, L = c->n_layers;
    const int Tl = m->Tl;
    // RoPE: the global tables' rows of this rank's tokens (position = the token's place in the
    // whole sequence, not in the rank's buffer).
    float* gcos = xalloc((size_t)T * HS / 2);
    float* gsin = xalloc((size_t)T * HS / 2);
    rope_tables_cpu(gcos, gsin, T, HS);
    m->rope_cos = xalloc((size_t)Tl * HS / 2);
    m->rope_sin = xalloc((size_t)Tl * HS / 2);
    for (int t = 0; t < Tl; t++) {
        memcpy(m->rope_cos + (size_t)t * HS / 2, gcos + (size_t)m->pos[t] * HS / 2, (size_t)HS / 2 * sizeof(float));
        memcpy(m->rope_sin + (size_t)t * HS / 2, gsin + (size_t)m->pos[t] * HS / 2, (size_t)HS / 2 * sizeof(float));
    }
    free(gcos);
    free(gsin);

    const size_t N = (size_t)B * Tl, NC = N * C;
    m->res = xalloc((size_t)(L + 1) * NC);
    m->ln1 = xalloc((size_t)L * NC);
    m->ln1_rstd = xalloc((size_t)L * N);
    m->qkv = xalloc((size_t)L * N * 3 * C);
    m->atty = xalloc((size_t)L * NC);
    m->mid = xalloc((size_t)L * NC);
    m->ln2 = xalloc((size_t)L * NC);
    m->ln2_rstd = xalloc((size_t)L * N);
    m->h13 = xalloc((size_t)L * N * 2 * F);
    m->gate = xalloc((size_t)L * N * F);
    m->lnf = xalloc(NC);
    m->lnf_rstd = xalloc(N);
    m->logits = xalloc(N * V);
    m->lse = xalloc(N);
    m->rq = xalloc((size_t)L * NC);
    m->rk = xalloc((size_t)L * NC);
    m->rv = xalloc((size_t)L * NC);
    m->ro = xalloc((size_t)L * NC);
    m->rlse = xalloc((size_t)L * N * NH);
    m->dres = xalloc(NC);
    m->dln = xalloc(NC);
    m->datty = xalloc(NC);
    m->dqkv = xalloc(N * 3 * C);
    m->dh13 = xalloc(N * 2 * F);
    m->dgate = xalloc(N * F);
    m->dlogits = xalloc(N * V);
    m->rdo = xalloc(NC);
    m->rdq = xalloc(NC);
    m->rdk = xalloc(NC);
    m->rdv = xalloc(NC);
    m->inputs = calloc(N, sizeof(int32_t));
    m->targets = calloc(N, sizeof(int32_t));
    if (!m->inputs || !m->targets) DIE("cp_model: out of memory");
}

void cp_model_destroy(cp_model_t* m) {
    float* bufs[] = {m->params, m->grads, m->adam_m, m->adam_v, m->rope_cos, m->rope_sin, m->res, m->ln1, m->ln1_rstd,
                     m->qkv, m->atty, m->mid, m->ln2, m->ln2_rstd, m->h13, m->gate, m->lnf, m->lnf_rstd, m->logits,
                     m->lse, m->rq, m->rk, m->rv, m->ro, m->rlse, m->dres, m->dln, m->datty, m->dqkv, m->dh13,
                     m->dgate, m->dlogits, m->rdo, m->rdq, m->rdk, m->rdv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(m->inputs);
    free(m->targets);
    free(m->pos);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

void cp_model_take_local(const cp_model_t* m, const int32_t* full, int32_t* local) {
    for (int b = 0; b < m->B; b++)
        for (int t = 0; t < m->Tl; t++) local[(size_t)b * m->Tl + t] = full[(size_t)b * m->T + m->pos[t]];
}

// Rows (b, t) of `rows` (stride floats a row, the heads' HS columns from col on) <-> the ring's
// chunk-major [chunk][b·NH + h][t][HS]. to_ring 1: rows -> ring; 0: ring -> rows.
static void repack(const cp_model_t* m, float* rows, int stride, int col, float* ring, int to_ring) {
    const int NH = m->c.n_heads, HS = m->c.d_model / NH, B = m->B, Tl = m->Tl;
    for (int i = 0; i < m->nch; i++) {
        const int off = m->ch_off[i], len = m->ch_len[i];
        float* base = ring + (size_t)B * NH * off * HS;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < len; t++) {
                    float* rp = base + (((size_t)b * NH + h) * len + t) * HS;
                    float* xp = rows + ((size_t)b * Tl + off + t) * stride + col + (size_t)h * HS;
                    if (to_ring) memcpy(rp, xp, (size_t)HS * sizeof(float));
                    else memcpy(xp, rp, (size_t)HS * sizeof(float));
                }
    }
}

float cp_model_forward(cp_model_t* m, const int32_t* inputs, const int32_t* targets) {
    const model_config_t* c = &m->c;
    const int B = m->B, Tl = m->Tl, C = c->d_model, NH = c->n_heads, HS = C / NH, F = c->d_ff, V = c->vocab;
    const int L = c->n_layers, N = B * Tl;
    const size_t NC = (size_t)N * C;
    for (size_t i = 0; i < (size_t)B * m->T; i++)
        if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V)
            fail("token id %d (input) / %d (target) at %zu is outside [0, %d)", inputs[i], targets[i], i, V);
    cp_model_take_local(m, inputs, m->inputs);
    cp_model_take_local(m, targets, m->targets);
    const cp_ring_t rc = ring_cfg(m);

    embedding_fwd_cpu(m->res, m->inputs, W(m, PK_EMBED, -1), N, C);
    for (int l = 0; l < L; l++) {
        const float* x = m->res + (size_t)l * NC;
        float* ln1 = m->ln1 + (size_t)l * NC;
        float* qkv = m->qkv + (size_t)l * NC * 3;
        float* atty = m->atty + (size_t)l * NC;
        float* mid = m->mid + (size_t)l * NC;
        float* out = m->res + (size_t)(l + 1) * NC;
        float *rq = m->rq + (size_t)l * NC, *rk = m->rk + (size_t)l * NC, *rv = m->rv + (size_t)l * NC;
        float *ro = m->ro + (size_t)l * NC, *rlse = m->rlse + (size_t)l * N * NH;
        rmsnorm_fwd_cpu(ln1, m->ln1_rstd + (size_t)l * N, x, W(m, PK_LN1, l), N, C);
        matmul_fwd_cpu(qkv, ln1, W(m, PK_Q, l), N, C, 3 * C);                       // q|k|v adjacent
        rope_fwd_cpu(qkv, B, Tl, NH, HS, 3 * C, m->rope_cos, m->rope_sin);          // global positions
        rope_fwd_cpu(qkv + C, B, Tl, NH, HS, 3 * C, m->rope_cos, m->rope_sin);
        repack(m, qkv, 3 * C, 0, rq, 1);
        repack(m, qkv, 3 * C, C, rk, 1);
        repack(m, qkv, 3 * C, 2 * C, rv, 1);
        ring_forward_cpu(m->g, &rc, rq, rk, rv, ro, rlse);  // causal over the whole sequence
        repack(m, atty, C, 0, ro, 0);
        matmul_fwd_cpu(mid, atty, W(m, PK_O, l), N, C, C);
        for (size_t i = 0; i < NC; i++) mid[i] += x[i];
        float* ln2 = m->ln2 + (size_t)l * NC;
        rmsnorm_fwd_cpu(ln2, m->ln2_rstd + (size_t)l * N, mid, W(m, PK_LN2, l), N, C);
        float* h13 = m->h13 + (size_t)l * N * 2 * F;
        float* gate = m->gate + (size_t)l * N * F;
        matmul_fwd_cpu(h13, ln2, W(m, PK_W1, l), N, C, 2 * F);  // w1|w3 adjacent
        swiglu_fwd_cpu(gate, h13, N, F);
        matmul_fwd_cpu(out, gate, W(m, PK_W2, l), N, F, C);
        for (size_t i = 0; i < NC; i++) out[i] += mid[i];
    }
    rmsnorm_fwd_cpu(m->lnf, m->lnf_rstd, m->res + (size_t)L * NC, W(m, PK_LNF, -1), N, C);
    matmul_fwd_cpu(m->logits, m->lnf, W(m, PK_HEAD, -1), N, C, V);
    (void)cross_entropy_fwd_cpu(m->lse, m->logits, m->targets, N, V);  // lse of the local rows
    // The mean over ALL B·T tokens: the local sum of lse − z_target, summed over the group.
    double s = 0.0;
    for (int n = 0; n < N; n++) s += (double)m->lse[n] - m->logits[(size_t)n * V + m->targets[n]];
    comm_host_allreduce_f64(m->g, &s, 1, COMM_SUM);
    m->have_fwd = 1;
    return (float)(s / ((double)B * m->T));
}

void cp_model_backward(cp_model_t* m, int sum) {
    if (!m->have_fwd) DIE("cp_model_backward: no forward before it");
    const model_config_t* c = &m->c;
    const int B = m->B, Tl = m->Tl, C = c->d_model, NH = c->n_heads, HS = C / NH, F = c->d_ff, V = c->vocab;
    const int L = c->n_layers, N = B * Tl;
    const size_t NC = (size_t)N * C;
    const cp_ring_t rc = ring_cfg(m);
    // The gradient of the GLOBAL mean: (softmax − onehot) / (B·T), not / (the local rows).
    const double inv = 1.0 / ((double)B * m->T);
    for (int n = 0; n < N; n++) {
        const float* z = m->logits + (size_t)n * V;
        float* dz = m->dlogits + (size_t)n * V;
        for (int v = 0; v < V; v++) {
            const double p = exp((double)z[v] - m->lse[n]);
            dz[v] = (float)((p - (v == m->targets[n])) * inv);
        }
    }
    matmul_bwd_cpu(m->dln, G(m, PK_HEAD, -1), m->dlogits, m->lnf, W(m, PK_HEAD, -1), N, C, V);
    memset(m->dres, 0, NC * sizeof(float));
    rmsnorm_bwd_cpu(m->dres, G(m, PK_LNF, -1), m->dln, m->res + (size_t)L * NC, W(m, PK_LNF, -1), m->lnf_rstd, N, C);
    for (int l = L - 1; l >= 0; l--) {
        const float* x = m->res + (size_t)l * NC;
        const float* mid = m->mid + (size_t)l * NC;
        matmul_bwd_cpu(m->dgate, G(m, PK_W2, l), m->dres, m->gate + (size_t)l * N * F, W(m, PK_W2, l), N, F, C);
        swiglu_bwd_cpu(m->dh13, m->dgate, m->h13 + (size_t)l * N * 2 * F, N, F);
        matmul_bwd_cpu(m->dln, G(m, PK_W1, l), m->dh13, m->ln2 + (size_t)l * NC, W(m, PK_W1, l), N, C, 2 * F);
        rmsnorm_bwd_cpu(m->dres, G(m, PK_LN2, l), m->dln, mid, W(m, PK_LN2, l), m->ln2_rstd + (size_t)l * N, N, C);
        matmul_bwd_cpu(m->datty, G(m, PK_O, l), m->dres, m->atty + (size_t)l * NC, W(m, PK_O, l), N, C, C);
        repack(m, m->datty, C, 0, m->rdo, 1);
        ring_backward_cpu(m->g, &rc, m->rq + (size_t)l * NC, m->rk + (size_t)l * NC, m->rv + (size_t)l * NC,
                          m->ro + (size_t)l * NC, m->rlse + (size_t)l * N * NH, m->rdo, m->rdq, m->rdk, m->rdv);
        repack(m, m->dqkv, 3 * C, 0, m->rdq, 0);
        repack(m, m->dqkv, 3 * C, C, m->rdk, 0);
        repack(m, m->dqkv, 3 * C, 2 * C, m->rdv, 0);
        rope_bwd_cpu(m->dqkv, B, Tl, NH, HS, 3 * C, m->rope_cos, m->rope_sin);
        rope_bwd_cpu(m->dqkv + C, B, Tl, NH, HS, 3 * C, m->rope_cos, m->rope_sin);
        matmul_bwd_cpu(m->dln, G(m, PK_Q, l), m->dqkv, m->ln1 + (size_t)l * NC, W(m, PK_Q, l), N, C, 3 * C);
        rmsnorm_bwd_cpu(m->dres, G(m, PK_LN1, l), m->dln, x, W(m, PK_LN1, l), m->ln1_rstd + (size_t)l * N, N, C);
    }
    embedding_bwd_cpu(G(m, PK_EMBED, -1), m->dres, m->inputs, N, C, V);
    // Each rank's gradient covers only its tokens; the weights serve all of them, so the
    // gradient is the sum over the group (one all-reduce of the flat buffer).
    if (sum) comm_allreduce(m->g, m->grads, m->grads, m->layout.total, COMM_F32, COMM_SUM, NULL);
}

void cp_model_adamw(cp_model_t* m, const adamw_config_t* cfg) {
    m->adam_t++;
    adamw_cpu_step(cfg, m->params, m->grads, m->adam_m, m->adam_v, m->layout.total, m->adam_t);
}
