// The tensor-parallel Transformer (tp.h): every rank of the group holds its shards of the one
// model that model_init_params(seed) makes, runs the forward and backward of common/
// model_cpu.c with each matmul on its slice and the group's collectives where the maths needs
// them (tp_layers.c), and AdamW on its shards alone.
#include "09_tensor/tp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/ops_cpu.h"

static float* xalloc(size_t n) {
    if (n == 0) return NULL;
    float* p = calloc(n, sizeof(float));
    if (!p) DIE("tp_model: out of memory (%zu floats)", n);
    return p;
}

static const tp_param_t* entry(const tp_model_t* m, param_kind_t k, int layer) {
    const int i = param_index(&m->layout, k, layer);
    if (i < 0) DIE("tp_model: no parameter of kind %d in layer %d", (int)k, layer);
    return &m->p[i];
}
static float* W(tp_model_t* m, param_kind_t k, int layer) { return m->params + entry(m, k, layer)->off; }
static float* G(tp_model_t* m, param_kind_t k, int layer) { return m->grads + entry(m, k, layer)->off; }

// How each parameter of the layout is cut (tp.h tp_split_t), and the local shard's shape.
static void shard_of(const tp_dims_t* d, const param_info_t* pi, tp_split_t* s, int* rows, int* cols) {
    switch (pi->kind) {
    case PK_EMBED: case PK_HEAD:  *s = TP_VOCAB; *rows = d->Vl; *cols = d->C; break;
    case PK_Q: case PK_K: case PK_V: *s = TP_ROWS; *rows = d->Cl; *cols = d->C; break;
    case PK_W1: case PK_W3:        *s = TP_ROWS; *rows = d->Fl; *cols = d->C; break;
    case PK_O:                     *s = TP_COLS; *rows = d->C; *cols = d->Cl; break;
    case PK_W2:                    *s = TP_COLS; *rows = d->C; *cols = d->Fl; break;
    default:                       *s = TP_REPL; *rows = 1; *cols = (int)pi->numel; break;
    }
}

// This rank's shard of parameter e, straight from model_init_params_range (bitwise the slice
// of the whole model's buffer, without making that buffer).
static void init_shard(const tp_model_t* m, const tp_param_t* e, float* dst, uint64_t seed) {
    const param_info_t* pi = &m->layout.p[e->gidx];
    const size_t g0 = pi->offset;
    const tp_dims_t* d = &m->d;
    switch (e->split) {
    case TP_REPL: model_init_params_range(&m->layout, dst, g0, g0 + e->numel, seed); break;
    case TP_ROWS: {
        const size_t lo = g0 + (size_t)d->r * e->numel;
        model_init_params_range(&m->layout, dst, lo, lo + e->numel, seed);
        break;
    }
    case TP_COLS: {
        const int gcols = (int)pi->shape[1];
        for (int i = 0; i < e->rows; i++) {
            const size_t lo = g0 + (size_t)i * gcols + (size_t)d->r * e->cols;
            model_init_params_range(&m->layout, dst + (size_t)i * e->cols, lo, lo + e->cols, seed);
        }
        break;
    }
    case TP_VOCAB: {
        const size_t lo = g0 + (size_t)d->v0 * d->C, len = (size_t)d->Vvalid * d->C;
        if (len) model_init_params_range(&m->layout, dst, lo, lo + len, seed);
        memset(dst + len, 0, (e->numel - len) * sizeof(float));  // masked rows stay 0
        break;
    }
    }
}

void tp_model_create(tp_model_t* m, comm_t* g, const model_config_t* c, int B, int T, int sp, uint64_t seed) {
    memset(m, 0, sizeof *m);
    char err[512];
    if (model_config_check(c, err, sizeof err) != 0) comm_refuse(g, "model: %s", err);
    if (tp_dims_make(c, g->world, g->rank, &m->d, err, sizeof err) != 0) comm_refuse(g, "%s", err);
    if (B < 1 || T < 1 || T > c->context)
        comm_refuse(g, "batch %d x sequence %d: give B >= 1 and 1 <= T <= the context %d", B, T, c->context);
    if (sp && T % g->world != 0)
        comm_refuse(g, "sequence parallelism cuts each sequence of T = %d positions into %d equal pieces; give a T divisible by the tensor-parallel size %d",
                    T, g->world, g->world);
    m->c = *c;
    m->g = g;
    m->sp = sp;
    m->sp_norm_sum = 1;
    m->B = B;
    m->T = T;
    m->layout = param_layout_make(c);
    m->p = calloc((size_t)m->layout.n, sizeof *m->p);
    if (!m->p) DIE("tp_model: out of memory");
    size_t off = 0;
    for (int i = 0; i < m->layout.n; i++) {
        tp_param_t* e = &m->p[i];
        e->gidx = i;
        shard_of(&m->d, &m->layout.p[i], &e->split, &e->rows, &e->cols);
        e->off = off;
        e->numel = (size_t)e->rows * e->cols;
        off += e->numel;
    }
    m->total = off;
    m->params = xalloc(off);
    m->grads = xalloc(off);
    // AdamW's moments: allocated by the first tp_model_adamw (ZeRO-1 keeps its own instead).
    for (int i = 0; i < m->layout.n; i++) init_shard(m, &m->p[i], m->params + m->p[i].off, seed);
    const tp_dims_t* d = &m->d;
    m->rope_cos = xalloc((size_t)c->context * d->HS / 2);
    m->rope_sin = xalloc((size_t)c->context * d->HS / 2);
    rope_tables_cpu(m->rope_cos, m->rope_sin, c->context, d->HS);

    const int L = c->n_layers, C = d->C, n = d->n;
    const size_t N = (size_t)B * T, Nr = sp ? (size_t)B * (T / n) : N;
    // What the forward saves for the backward (counted in acts_bytes), then the backward's scratch.
#define ACT(p, n) ((p) = xalloc(n), m->acts_bytes += (n) * sizeof(float))
    ACT(m->res, (size_t)(L + 1) * Nr * C);
    ACT(m->ln1, (size_t)L * Nr * C);
    ACT(m->ln1_rstd, (size_t)L * Nr);
    ACT(m->mid, (size_t)L * Nr * C);
    ACT(m->ln2, (size_t)L * Nr * C);
    ACT(m->ln2_rstd, (size_t)L * Nr);
    if (sp == TP_SP_KEEP) {  // the gathered norm outputs the column-parallel dW reads, kept
        ACT(m->ln1_full, (size_t)L * N * C);
        ACT(m->ln2_full, (size_t)L * N * C);
        ACT(m->lnf_full, N * C);
    } else if (sp) {  // one buffer, gathered into again by the backward
        m->hfull = xalloc(N * C);
    }
    if (sp) m->dfull = xalloc(N * C);
    ACT(m->qkv, (size_t)L * N * 3 * d->Cl);
    ACT(m->att, (size_t)L * B * d->nh * T * T);
    ACT(m->atty, (size_t)L * N * d->Cl);
    ACT(m->h13, (size_t)L * N * 2 * d->Fl);
    ACT(m->gate, (size_t)L * N * d->Fl);
    ACT(m->lnf, Nr * C);
    ACT(m->lnf_rstd, Nr);
    ACT(m->logits, N * d->Vl);
    ACT(m->lse, N);
#undef ACT
    m->part = xalloc(N * C);
    m->scratch = xalloc(N * C);
    m->dres = xalloc(Nr * C);
    m->dln = xalloc(Nr * C);
    m->datty = xalloc(N * d->Cl);
    m->dqkv = xalloc(N * 3 * d->Cl);
    m->dh13 = xalloc(N * 2 * d->Fl);
    m->dgate = xalloc(N * d->Fl);
    m->dlogits = xalloc(N * d->Vl);
    m->inputs = calloc(N, sizeof(int32_t));
    m->targets = calloc(N, sizeof(int32_t));
    if (!m->inputs || !m->targets) DIE("tp_model: out of memory");
}

void tp_model_destroy(tp_model_t* m) {
    mem_free(m->adam_m), mem_free(m->adam_v);
    float* bufs[] = {m->params, m->grads, m->rope_cos, m->rope_sin, m->res, m->ln1,
                     m->ln1_rstd, m->ln1_full, m->qkv, m->att, m->atty, m->mid, m->ln2, m->ln2_rstd,
                     m->ln2_full, m->h13, m->gate, m->lnf, m->lnf_rstd, m->lnf_full, m->hfull, m->logits, m->lse,
                     m->part, m->scratch, m->dres, m->dln, m->dfull, m->datty, m->dqkv, m->dh13, m->dgate,
                     m->dlogits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(m->inputs);
    free(m->targets);
    free(m->p);
    param_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

// The sum over the group of a (N, C) partial result, into the residual rows this rank keeps:
// all of them (an all-reduce), or under SP its positions (a reduce-scatter).
static void sum_rows(tp_model_t* m, float* dst, float* part, int B, int T) {
    if (m->sp) tp_sp_reduce_scatter(m->g, dst, part, B, T, m->d.C, m->scratch);
    else tp_allreduce(m->g, part, dst, (size_t)B * T * m->d.C, COMM_SUM);
}
// The whole (N, C) rows a column-parallel matmul reads: under SP gathered into full, else the
// rows themselves.
static const float* whole_rows(tp_model_t* m, float* full, const float* rows, int B, int T) {
    if (!m->sp) return rows;
    tp_sp_allgather(m->g, full, rows, B, T, m->d.C, m->scratch);
    return full;
}

// In the backward, the whole rows of a norm output that the forward gathered: kept (keep, SP
// kept), gathered again into the one buffer (SP), or the rows themselves (no SP).
static const float* saved_whole(tp_model_t* m, const float* keep, const float* rows, int B, int T) {
    if (!m->sp) return rows;
    if (keep) return keep;
    return whole_rows(m, m->hfull, rows, B, T);
}

float tp_model_forward(tp_model_t* m, const int32_t* inputs, const int32_t* targets, int B, int T) {
    const tp_dims_t* d = &m->d;
    if (B < 1 || T < 1 || B > m->B || T > m->T || (m->sp && T % d->n))
        DIE("tp_model_forward: %d x %d does not fit the capacity %d x %d (or T does not split over %d ranks)", B, T,
            m->B, m->T, d->n);
    const int L = m->c.n_layers, C = d->C;
    const int N = B * T, Nr = m->sp ? B * (T / d->n) : N;
    const size_t NC = (size_t)N * C, NrC = (size_t)Nr * C;
    for (int i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= d->V || targets[i] < 0 || targets[i] >= d->V)
            fail("token id %d (input) / %d (target) at %d is outside [0, %d)", inputs[i], targets[i], i, d->V);
    memcpy(m->inputs, inputs, (size_t)N * sizeof(int32_t));
    memcpy(m->targets, targets, (size_t)N * sizeof(int32_t));
    m->cur_B = B;
    m->cur_T = T;

    // Embedding: each rank its vocabulary rows, summed over the group.
    if (m->sp) {
        tp_embed_fwd(m->g, m->part, inputs, W(m, PK_EMBED, -1), d, N, 0);
        tp_sp_reduce_scatter(m->g, m->res, m->part, B, T, C, m->scratch);
    } else {
        tp_embed_fwd(m->g, m->res, inputs, W(m, PK_EMBED, -1), d, N, 1);
    }
    for (int l = 0; l < L; l++) {
        float* x = m->res + (size_t)l * NrC;
        float* mid = m->mid + (size_t)l * NrC;
        float* out = m->res + (size_t)(l + 1) * NrC;
        // Attention: norm on the rows held, heads split (column-parallel QKV, row-parallel Wo).
        float* ln1 = m->ln1 + (size_t)l * NrC;
        rmsnorm_fwd_cpu(ln1, m->ln1_rstd + (size_t)l * Nr, x, W(m, PK_LN1, l), Nr, C);
        const float* h1 = whole_rows(m, m->sp == TP_SP_KEEP ? m->ln1_full + (size_t)l * NC : m->hfull, ln1, B, T);
        tp_attn_fwd(d, m->part, m->qkv + (size_t)l * N * 3 * d->Cl, m->att + (size_t)l * B * d->nh * T * T,
                    m->atty + (size_t)l * N * d->Cl, h1, W(m, PK_Q, l), W(m, PK_O, l), m->rope_cos, m->rope_sin, B, T);
        sum_rows(m, mid, m->part, B, T);                 // all-reduce #1 (SP: reduce-scatter)
        for (size_t i = 0; i < NrC; i++) mid[i] += x[i];  // the skip connection
        // FFN: W1/W3 column-parallel, W2 row-parallel.
        float* ln2 = m->ln2 + (size_t)l * NrC;
        rmsnorm_fwd_cpu(ln2, m->ln2_rstd + (size_t)l * Nr, mid, W(m, PK_LN2, l), Nr, C);
        const float* h2 = whole_rows(m, m->sp == TP_SP_KEEP ? m->ln2_full + (size_t)l * NC : m->hfull, ln2, B, T);
        tp_ffn_fwd(d, m->part, m->h13 + (size_t)l * N * 2 * d->Fl, m->gate + (size_t)l * N * d->Fl, h2,
                   W(m, PK_W1, l), W(m, PK_W2, l), N);
        sum_rows(m, out, m->part, B, T);                  // all-reduce #2
        for (size_t i = 0; i < NrC; i++) out[i] += mid[i];
    }
    rmsnorm_fwd_cpu(m->lnf, m->lnf_rstd, m->res + (size_t)L * NrC, W(m, PK_LNF, -1), Nr, C);
    const float* hf = whole_rows(m, m->sp == TP_SP_KEEP ? m->lnf_full : m->hfull, m->lnf, B, T);
    matmul_fwd_cpu(m->logits, hf, W(m, PK_HEAD, -1), N, C, d->Vl);  // this rank's vocabulary columns
    return tp_ce_fwd(m->g, m->lse, m->logits, targets, d, N);
}

// Under SP each rank's norm-weight gradient covers only its rows: the weight is shared by all
// rows, so its gradient is the sum over the group (without SP every rank saw every row).
void tp_model_sum_norm_grads(tp_model_t* m) {
    // STUDENT-BEGIN(09.sp_norm_sum): under SP, the RMSNorm weight gradients (the TP_REPL entries) summed over the group: one all-reduce of all of them | see 09_tensor/README.md §Sequence parallelism | test: test_09 tp_region/sp_norm_sum
    size_t n = 0;
    for (int i = 0; i < m->layout.n; i++)
        if (m->p[i].split == TP_REPL) n += m->p[i].numel;
    float* buf = xalloc(n);
    size_t k = 0;
    for (int i = 0; i < m->layout.n; i++)
        if (m->p[i].split == TP_REPL) {
            memcpy(buf + k, m->grads + m->p[i].off, m->p[i].numel * sizeof(float));
            k += m->p[i].numel;
        }
    tp_allreduce(m->g, buf, buf, n, COMM_SUM);
    k = 0;
    for (int i = 0; i < m->layout.n; i++)
        if (m->p[i].split == TP_REPL) {
            memcpy(m->grads + m->p[i].off, buf + k, m->p[i].numel * sizeof(float));
            k += m->p[i].numel;
        }
    free(buf);
    // STUDENT-END(09.sp_norm_sum)
}

void tp_model_backward(tp_model_t* m) {
    const tp_dims_t* d = &m->d;
    const int B = m->cur_B, T = m->cur_T, L = m->c.n_layers, C = d->C;
    if (B < 1) DIE("tp_model_backward: no forward before it");
    const int N = B * T, Nr = m->sp ? B * (T / d->n) : N;
    const size_t NC = (size_t)N * C, NrC = (size_t)Nr * C;

    // Head: cross-entropy on this rank's columns, then the vocabulary-parallel matmul's
    // backward (column-parallel: dW local, the input gradient summed over the group).
    tp_ce_bwd(m->dlogits, m->logits, m->lse, m->targets, d, N);
    const float* hf = saved_whole(m, m->lnf_full, m->lnf, B, T);
    matmul_bwd_cpu(m->part, G(m, PK_HEAD, -1), m->dlogits, hf, W(m, PK_HEAD, -1), N, C, d->Vl);
    sum_rows(m, m->dln, m->part, B, T);
    memset(m->dres, 0, NrC * sizeof(float));
    rmsnorm_bwd_cpu(m->dres, G(m, PK_LNF, -1), m->dln, m->res + (size_t)L * NrC, W(m, PK_LNF, -1), m->lnf_rstd, Nr, C);
    for (int l = L - 1; l >= 0; l--) {
        const float* x = m->res + (size_t)l * NrC;
        const float* mid = m->mid + (size_t)l * NrC;
        // FFN: W2 row-parallel (its input gradient local), W1/W3 column-parallel (summed).
        const float* dy = whole_rows(m, m->dfull, m->dres, B, T);  // SP: all-gather (conjugate of the reduce-scatter)
        const float* h2 = saved_whole(m, m->ln2_full ? m->ln2_full + (size_t)l * NC : NULL, m->ln2 + (size_t)l * NrC, B, T);
        tp_ffn_bwd(d, m->part, G(m, PK_W1, l), G(m, PK_W2, l), m->dgate, m->dh13, dy, h2,
                   m->h13 + (size_t)l * N * 2 * d->Fl, m->gate + (size_t)l * N * d->Fl, W(m, PK_W1, l), W(m, PK_W2, l), N);
        sum_rows(m, m->dln, m->part, B, T);  // backward all-reduce #1
        rmsnorm_bwd_cpu(m->dres, G(m, PK_LN2, l), m->dln, mid, W(m, PK_LN2, l), m->ln2_rstd + (size_t)l * Nr, Nr, C);
        // Attention.
        dy = whole_rows(m, m->dfull, m->dres, B, T);
        const float* h1 = saved_whole(m, m->ln1_full ? m->ln1_full + (size_t)l * NC : NULL, m->ln1 + (size_t)l * NrC, B, T);
        tp_attn_bwd(d, m->part, G(m, PK_Q, l), G(m, PK_O, l), m->datty, m->dqkv, dy, h1, m->qkv + (size_t)l * N * 3 * d->Cl,
                    m->att + (size_t)l * B * d->nh * T * T, m->atty + (size_t)l * N * d->Cl, W(m, PK_Q, l), W(m, PK_O, l),
                    m->rope_cos, m->rope_sin, B, T);
        sum_rows(m, m->dln, m->part, B, T);  // backward all-reduce #2
        rmsnorm_bwd_cpu(m->dres, G(m, PK_LN1, l), m->dln, x, W(m, PK_LN1, l), m->ln1_rstd + (size_t)l * Nr, Nr, C);
    }
    const float* demb = whole_rows(m, m->dfull, m->dres, B, T);
    tp_embed_bwd(G(m, PK_EMBED, -1), demb, m->inputs, d, N);
    if (m->sp && m->sp_norm_sum) tp_model_sum_norm_grads(m);
}

void tp_model_adamw(tp_model_t* m, const adamw_config_t* cfg) {
    if (!m->adam_m) {  // counted as optimizer state (common/alloc.h), as torch allocates it lazily
        m->adam_m = mem_alloc(DEV_CPU, m->total * sizeof(float), MEM_OPTIM);
        m->adam_v = mem_alloc(DEV_CPU, m->total * sizeof(float), MEM_OPTIM);
        memset(m->adam_m, 0, m->total * sizeof(float));
        memset(m->adam_v, 0, m->total * sizeof(float));
    }
    m->adam_t++;
    adamw_cpu_step(cfg, m->params, m->grads, m->adam_m, m->adam_v, m->total, m->adam_t);
}

void tp_model_pad_flat(tp_model_t* m, size_t P) {
    if (P < m->total) DIE("tp_model_pad_flat: %zu elements is less than the shard's %zu", P, m->total);
    float* bufs[2] = {m->params, m->grads};
    for (int k = 0; k < 2; k++) {
        float* q = realloc(bufs[k], (P ? P : 1) * sizeof(float));
        if (!q) DIE("tp_model: out of memory (%zu floats)", P);
        memset(q + m->total, 0, (P - m->total) * sizeof(float));
        bufs[k] = q;
    }
    m->params = bufs[0], m->grads = bufs[1];
}

double tp_model_grad_sq(tp_model_t* m) {
    double s = 0.0;
    for (int i = 0; i < m->layout.n; i++) {
        const tp_param_t* e = &m->p[i];
        if (e->split == TP_REPL && m->d.r != 0) continue;  // counted once, by rank 0
        const float* gp = m->grads + e->off;
        for (size_t k = 0; k < e->numel; k++) s += (double)gp[k] * gp[k];
    }
    comm_host_allreduce_f64(m->g, &s, 1, COMM_SUM);
    return s;
}

void tp_model_gather(tp_model_t* m, const float* local, float* out) {
    const tp_dims_t* d = &m->d;
    const int n = d->n;
    size_t most = 0;
    for (int i = 0; i < m->layout.n; i++) most = m->p[i].numel > most ? m->p[i].numel : most;
    float* tmp = xalloc(most * n);
    memset(out, 0, m->layout.total * sizeof(float));
    for (int i = 0; i < m->layout.n; i++) {
        const tp_param_t* e = &m->p[i];
        const param_info_t* pi = &m->layout.p[i];
        float* dst = out + pi->offset;
        comm_allgather(m->g, local + e->off, tmp, e->numel, COMM_F32, NULL);
        switch (e->split) {
        case TP_REPL: memcpy(dst, tmp, e->numel * sizeof(float)); break;
        case TP_ROWS: memcpy(dst, tmp, e->numel * n * sizeof(float)); break;
        case TP_COLS:
            for (int k = 0; k < n; k++) tp_put_cols(dst, tmp + k * e->numel, e->rows, (int)pi->shape[1], k * e->cols, e->cols);
            break;
        case TP_VOCAB:
            for (int k = 0; k < n; k++) {
                int Vl, v0, valid;
                tp_vocab_shard(d->V, n, k, &Vl, &v0, &valid);
                if (valid > 0) memcpy(dst + (size_t)v0 * d->C, tmp + k * e->numel, (size_t)valid * d->C * sizeof(float));
            }
            break;
        }
    }
    free(tmp);
}

size_t tp_model_param_bytes(const tp_model_t* m) { return m->total * sizeof(float); }
size_t tp_model_acts_bytes(const tp_model_t* m) { return m->acts_bytes; }
