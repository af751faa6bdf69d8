// The CPU Transformer over a range of blocks (common/model_cpu.h, "a range of blocks"): the
// seam where pipeline parallelism (stage 08) cuts the model. The operations and their order
// are model_cpu.c's, step for step, so that the range [0, L) with embedding and head gives the
// whole model's bits, and a chain of ranges gives them too (08_pipeline/test_executor.c).
// What is new here: the input activation and the output gradient cross the range's edges, the
// activations live in one model_cpu_range_acts_t per micro-batch in flight, gradients can be
// ADDED (accumulation over micro-batches), the loss carries a scale (1/m), and the backward can
// run as two passes, input gradient then weight gradient (zero bubble's BI and W).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/model_cpu.h"
#include "common/ops_cpu.h"

static float* alloc_f32(size_t n, mem_tag_t tag) {
    return (float*)mem_alloc(DEV_CPU, (n ? n : 1) * sizeof(float), tag);
}

int model_range_check(const model_config_t* c, const model_range_t* r, char* err, size_t errlen) {
    if (r->l0 < 0 || r->l1 < r->l0 || r->l1 > c->n_layers) {
        snprintf(err, errlen, "block range [%d, %d) is not inside [0, %d)", r->l0, r->l1, c->n_layers);
        return -1;
    }
    if (r->embed && r->l0 != 0) {
        snprintf(err, errlen, "a range with the embedding must start at block 0 (got %d)", r->l0);
        return -1;
    }
    if (r->head && r->l1 != c->n_layers) {
        snprintf(err, errlen, "a range with the LM head must end at block %d (got %d)", c->n_layers, r->l1);
        return -1;
    }
    if (r->l0 == r->l1 && !r->embed && !r->head) {
        snprintf(err, errlen, "block range [%d, %d) is empty and holds neither embedding nor head", r->l0, r->l1);
        return -1;
    }
    return 0;
}

void model_range_span(const param_layout_t* lay, const model_config_t* c, const model_range_t* r,
                      size_t* begin, size_t* end) {
    // Layer l's parameters run from its ln1 to the next layer's ln1 (or ln_final): padding
    // between parameters belongs to the one before it.
    const int first = r->embed ? param_index(lay, PK_EMBED, -1)
                    : r->l0 < c->n_layers ? param_index(lay, PK_LN1, r->l0) : param_index(lay, PK_LNF, -1);
    *begin = lay->p[first].offset;
    *end = r->head ? lay->total
         : r->l1 < c->n_layers ? lay->p[param_index(lay, PK_LN1, r->l1)].offset
                               : lay->p[param_index(lay, PK_LNF, -1)].offset;
    if (*end < *begin) *end = *begin;  // an empty middle range (model_range_check refuses it)
}

// Mirrors model_cpu_range_acts_create below (keep the two together).
double model_cpu_range_acts_bytes(const model_config_t* c, const model_range_t* r, int B, int T,
                                  int split) {
    const double nL = r->l1 - r->l0, C = c->d_model, F = c->d_ff, V = c->vocab, NH = c->n_heads;
    const double BT = (double)B * T;
    double floats = 2.0 * BT;                                              // inputs, targets (int32)
    floats += (nL + 1) * BT * C + 4.0 * nL * BT * C + 2.0 * nL * BT        // res; ln1, atty, mid, ln2; rstds
              + nL * BT * 3 * C + nL * BT * 3 * F                           // qkv; h13 and gate
              + nL * B * NH * (double)T * T;                                // attention probabilities
    if (r->head) floats += BT * C + 2.0 * BT + BT * V;                     // lnf, rstd, lse; logits
    floats += 2.0 * BT * C;                                                // dy, dx
    if (split) floats += nL * BT * (5.0 * C + 2.0 * F) + (r->head ? BT * V : 0) + (r->embed ? BT * C : 0);
    return floats * 4.0;
}

void model_cpu_range_acts_create(model_cpu_range_acts_t* s, const model_config_t* c,
                                 const model_range_t* r, int B, int T, int split) {
    char err[160];
    if (model_config_check(c, err, sizeof err) != 0) fail("model config: %s", err);
    if (model_range_check(c, r, err, sizeof err) != 0) fail("model range: %s", err);
    if (B < 1 || T < 1 || T > c->context)
        fail("micro-batch %d x sequence %d: both must be >= 1 and the sequence <= the context %d", B, T, c->context);
    if (!mem_fits(DEV_CPU, model_cpu_range_acts_bytes(c, r, B, T, split), err, sizeof err))
        fail("the activations of blocks [%d, %d) at batch %d x sequence %d on the CPU %s", r->l0, r->l1, B, T, err);
    memset(s, 0, sizeof *s);
    s->r = *r;
    s->B = B;
    s->T = T;
    s->loss_scale = 1.0f;
    s->split = split;
    const size_t nL = (size_t)(r->l1 - r->l0), C = (size_t)c->d_model, F = (size_t)c->d_ff;
    const size_t V = (size_t)c->vocab, NH = (size_t)c->n_heads, BT = (size_t)B * T;
    s->inputs = (int32_t*)mem_alloc(DEV_CPU, BT * sizeof(int32_t), MEM_OTHER);
    s->targets = (int32_t*)mem_alloc(DEV_CPU, BT * sizeof(int32_t), MEM_OTHER);
    model_cpu_acts_t* a = &s->a;
    a->res = alloc_f32((nL + 1) * BT * C, MEM_ACTS);
    a->ln1 = alloc_f32(nL * BT * C, MEM_ACTS);
    a->ln1_rstd = alloc_f32(nL * BT, MEM_ACTS);
    a->qkv = alloc_f32(nL * BT * 3 * C, MEM_ACTS);
    a->att = alloc_f32(nL * (size_t)B * NH * T * T, MEM_ACTS);
    a->atty = alloc_f32(nL * BT * C, MEM_ACTS);
    a->res_mid = alloc_f32(nL * BT * C, MEM_ACTS);
    a->ln2 = alloc_f32(nL * BT * C, MEM_ACTS);
    a->ln2_rstd = alloc_f32(nL * BT, MEM_ACTS);
    a->h13 = alloc_f32(nL * BT * 2 * F, MEM_ACTS);
    a->gate = alloc_f32(nL * BT * F, MEM_ACTS);
    if (r->head) {
        a->lnf = alloc_f32(BT * C, MEM_ACTS);
        a->lnf_rstd = alloc_f32(BT, MEM_ACTS);
        a->logits = alloc_f32(BT * V, MEM_ACTS);
        a->lse = alloc_f32(BT, MEM_ACTS);
    }
    s->dy = alloc_f32(BT * C, MEM_ACTS);
    s->dx = alloc_f32(BT * C, MEM_ACTS);
    if (split) {
        s->d_out = alloc_f32(nL * BT * C, MEM_ACTS);
        s->d_h13 = alloc_f32(nL * BT * 2 * F, MEM_ACTS);
        s->d_mid = alloc_f32(nL * BT * C, MEM_ACTS);
        s->d_qkv = alloc_f32(nL * BT * 3 * C, MEM_ACTS);
        if (r->head) s->d_logits = alloc_f32(BT * V, MEM_ACTS);
        if (r->embed) s->d_emb = alloc_f32(BT * C, MEM_ACTS);
    }
}

void model_cpu_range_acts_destroy(model_cpu_range_acts_t* s) {
    model_cpu_acts_t* a = &s->a;
    float* bufs[] = {a->res, a->ln1, a->ln1_rstd, a->qkv, a->att, a->atty, a->res_mid, a->ln2,
                     a->ln2_rstd, a->h13, a->gate, a->lnf, a->lnf_rstd, a->logits, a->lse, s->dy,
                     s->dx, s->d_out, s->d_h13, s->d_mid, s->d_qkv, s->d_logits, s->d_emb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);  // NULL is fine
    mem_free(s->inputs);
    mem_free(s->targets);
    memset(s, 0, sizeof *s);
}

// ---- units and windows (model_cpu.h): ZeRO-3's seam
int model_n_units(const model_config_t* c) { return c->n_layers + 2; }

model_range_t model_unit_range(const model_config_t* c, int u) {
    const int L = c->n_layers;
    if (u < 0 || u > L + 1) DIE("model_unit_range: unit %d outside [0, %d)", u, L + 2);
    if (u == 0) return (model_range_t){0, 0, 1, 0};
    if (u == L + 1) return (model_range_t){L, L, 0, 1};
    return (model_range_t){u - 1, u, 0, 0};
}

void model_unit_span(const param_layout_t* lay, const model_config_t* c, int u, size_t* begin, size_t* end) {
    const model_range_t r = model_unit_range(c, u);
    model_range_span(lay, c, &r, begin, end);
}

void model_cpu_set_unit_hooks(model_cpu_t* m, const model_unit_hooks_t* hooks) {
    memset(&m->hooks, 0, sizeof m->hooks);
    memset(&m->pwin, 0, sizeof m->pwin);
    memset(&m->gwin, 0, sizeof m->gwin);
    char kn[24];
    if (hooks && !model_ckpt_hooks_ok(m->ckpt))
        fail("%s (this model was made with %s)", MODEL_CKPT_HOOKS_REFUSAL, model_ckpt_name(m->ckpt, kn, sizeof kn));
    if (hooks) m->hooks = *hooks;
}

static int hooked(const model_cpu_t* m) { return m->hooks.before_fwd || m->hooks.before_bwd || m->hooks.after_bwd; }
static void unit_hook(model_cpu_t* m, model_unit_fn f, int u) {
    if (f) f(m->hooks.ctx, u);
}

// Flat element range an access starting at parameter i covers: q|k|v and w1|w3 are read and
// written as one block (the fused products).
static size_t access_end(const param_layout_t* lay, int i, param_kind_t kind) {
    const int last = kind == PK_Q ? i + 2 : kind == PK_W1 ? i + 1 : i;
    return lay->p[last].offset + lay->p[last].numel;
}

// Pointer to parameter (kind, layer) in `flat`, or through the window w when it is set
// (checked: the whole access inside [lo, hi)).
static float* win_ptr(const model_cpu_t* m, const model_window_t* w, float* flat, param_kind_t kind, int layer,
                      const char* what) {
    const int i = param_index(&m->layout, kind, layer);
    if (i < 0) DIE("model_cpu_range: no parameter of kind %d in layer %d", (int)kind, layer);
    const size_t o = m->layout.p[i].offset;
    if (!w->base) return flat + o;
    const size_t e = access_end(&m->layout, i, kind);
    if (o < w->lo || e > w->hi)
        DIE("model_cpu: the %s of %s, elements [%zu, %zu), is outside the window [%zu, %zu)", what,
            m->layout.p[i].name, o, e, w->lo, w->hi);
    return w->base + (o - w->lo);
}
// The parameters the forward and backward read: m->params (its bf16-rounded copy with bf16
// parameters, model_cpu.h), or the window.
static float* wparam(model_cpu_t* m, param_kind_t kind, int layer) {
    return win_ptr(m, &m->pwin, m->params_lp ? m->params_lp : m->params, kind, layer, "parameter");
}

// With hooks, a WRITE backward zeroes unit u's span of the gradients (through the window)
// after before_bwd(u) instead of the range's span up front (model_cpu.h).
static void zero_unit_grads(model_cpu_t* m, const model_cpu_grad_sink_t* k, int u) {
    if (k->accumulate) return;
    size_t b, e;
    model_unit_span(&m->layout, &m->c, u, &b, &e);
    const model_window_t* w = &m->gwin;
    if (!w->base) {
        memset(k->grads + b, 0, (e - b) * sizeof(float));
        return;
    }
    if (b < w->lo || e > w->hi) DIE("model_cpu: unit %d's gradients [%zu, %zu) are outside the window [%zu, %zu)", u, b, e, w->lo, w->hi);
    memset(w->base + (b - w->lo), 0, (e - b) * sizeof(float));
}
static void bwd_unit_begin(model_cpu_t* m, const model_cpu_grad_sink_t* k, int u) {
    if (!hooked(m)) return;
    unit_hook(m, m->hooks.before_bwd, u);
    zero_unit_grads(m, k, u);
}
static void bwd_unit_end(model_cpu_t* m, int u) {
    if (hooked(m)) unit_hook(m, m->hooks.after_bwd, u);
}

static void check_tokens(const int32_t* x, int N, int V, const char* what) {
    for (int n = 0; n < N; n++)
        if (x[n] < 0 || x[n] >= V) fail("%s token id %d at row-major index %d is out of range [0, %d)", what, x[n], n, V);
}

// ---- activation checkpointing (model_cpu.h "checkpointing") ------------------------------
// With K = s->ckpt > 0 the activations hold: res slices [0, S) the inputs of blocks 0, K, 2K..
// (the checkpoints, S = ceil(nL/K) segments), slice S the range's output, slices S+1 ..
// S+Kc-1 the inputs of blocks 1..Kc-1 inside the segment being computed (Kc = min(K, nL));
// the other per-block buffers hold Kc slots, one per block of that segment. K = 0: nL slots,
// res[li] the input of block li (as always). Nested (K = MODEL_CKPT_NESTED): res slice 0 the
// range's input, slice 1 its output, slices 2 .. 1 + floor(log2 nL) the recursion's stack (the
// input of each upper half being backpropagated); one slot of internals.
int model_ckpt_hooks_ok(int k) { return k == 0 || k == 1; }
int model_ckpt_depth(int nL) {
    int d = 0;
    while (nL >= 2) nL /= 2, d++;
    return d;
}
int model_ckpt_segments(int nL, int K) {
    if (K == MODEL_CKPT_NESTED) return 1;
    return K > 0 ? (nL + K - 1) / K : nL;
}
int model_ckpt_slots(int nL, int K) {
    if (K == MODEL_CKPT_NESTED) return nL < 1 ? nL : 1;
    return K > 0 && K < nL ? K : nL;
}
int model_ckpt_res_slices(int nL, int K) {
    if (K == MODEL_CKPT_NESTED) return 2 + model_ckpt_depth(nL);
    return K > 0 ? model_ckpt_segments(nL, K) + model_ckpt_slots(nL, K) : nL + 1;
}
// Block forwards the nested backward runs over n blocks: recompute the lower ceil(n/2) to the
// middle, then both halves; one block is one (partial) recompute.
static long nested_recomputes(int n) {
    if (n <= 1) return n;
    const int up = n / 2, low = n - up;
    return low + nested_recomputes(up) + nested_recomputes(low);
}
long model_ckpt_block_forwards(int nL, int K) {
    if (K == MODEL_CKPT_NESTED) return nL + nested_recomputes(nL);
    return K > 0 ? 2L * nL : nL;
}

// One block's activations: where block li of the range reads its input, keeps its internals
// and writes its output.
typedef struct {
    float *x, *ln1, *ln1_rstd, *qkv, *att, *atty, *mid, *ln2, *ln2_rstd, *h13, *gate, *out;
} cblk_t;

static float* range_out(const model_cpu_range_acts_t* s, size_t NC) {
    const int nL = s->r.l1 - s->r.l0;
    if (s->ckpt == MODEL_CKPT_NESTED) return s->a.res + NC;
    return s->a.res + (size_t)(s->ckpt > 0 ? model_ckpt_segments(nL, s->ckpt) : nL) * NC;
}

// Internals in slot `slot`, input in res slice xi, output in res slice oi.
static cblk_t blk_at(const model_config_t* c, const model_cpu_range_acts_t* s, size_t slot, size_t xi, size_t oi,
                     int B, int T) {
    const int C = c->d_model, F = c->d_ff, NH = c->n_heads, N = B * T;
    const size_t NC = (size_t)N * C;
    const model_cpu_acts_t* a = &s->a;
    cblk_t p;
    p.x = a->res + xi * NC;                                  // (B, T, C) block input
    p.ln1 = a->ln1 + slot * NC;                              // (B, T, C)
    p.ln1_rstd = a->ln1_rstd + slot * N;                     // (B, T)
    p.qkv = a->qkv + slot * NC * 3;                          // (B, T, 3C)
    p.att = a->att + slot * B * NH * T * T;                  // (B, NH, T, T)
    p.atty = a->atty + slot * NC;                            // (B, T, C)
    p.mid = a->res_mid + slot * NC;                          // (B, T, C)
    p.ln2 = a->ln2 + slot * NC;                              // (B, T, C)
    p.ln2_rstd = a->ln2_rstd + slot * N;                     // (B, T)
    p.h13 = a->h13 + slot * N * 2 * F;                       // (B, T, 2F)
    p.gate = a->gate + slot * N * F;                         // (B, T, F)
    p.out = a->res + oi * NC;                                // (B, T, C) block output
    return p;
}

// Block li of the range in the forward, none or every-K (nested: blk_at with its own slices).
static cblk_t cpu_block(const model_config_t* c, const model_cpu_range_acts_t* s, int li, int B, int T) {
    const int nL = s->r.l1 - s->r.l0;
    const int K = s->ckpt;
    size_t slot = (size_t)li, xi = (size_t)li, oi = (size_t)li + 1;
    if (K > 0) {
        const int S = model_ckpt_segments(nL, K), j = li % K, sg = li / K;
        slot = (size_t)j;
        xi = j == 0 ? (size_t)sg : (size_t)(S + j);                 // checkpoint or interior
        oi = li == nL - 1 ? (size_t)S : j == K - 1 ? (size_t)sg + 1 : (size_t)(S + 1 + j);
    }
    return blk_at(c, s, slot, xi, oi, B, T);
}

// Block l's forward over p (out NULL: the recompute of a segment's last block, whose output
// is already saved, stops before the W2 product). out may be x itself (nested's recompute
// advances one residual slice in place): x is last read by the attention's skip, before W2.
static void block_forward(model_cpu_t* m, int l, const cblk_t* p, int B, int T) {
    const model_config_t* c = &m->c;
    m->block_fwds++;
    const int C = c->d_model, F = c->d_ff, NH = c->n_heads, HS = C / NH, N = B * T;
    const size_t NC = (size_t)N * C;
    // Attention block: x_mid = x + Wo · Attn(RoPE(q), RoPE(k), v), q|k|v = Wqkv · RMSNorm1(x)
    rmsnorm_fwd_cpu(p->ln1, p->ln1_rstd, p->x, wparam(m, PK_LN1, l), N, C);
    matmul_fwd_cpu(p->qkv, p->ln1, wparam(m, PK_Q, l), N, C, 3 * C);  // q|k|v adjacent
    rope_fwd_cpu(p->qkv, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);      // q
    rope_fwd_cpu(p->qkv + C, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);  // k
    attention_fwd_cpu(p->atty, p->att, p->qkv, B, T, C, NH);
    matmul_fwd_cpu(p->mid, p->atty, wparam(m, PK_O, l), N, C, C);
    for (size_t i = 0; i < NC; i++) p->mid[i] += p->x[i];

    // FFN block: out = x_mid + W2 · (SiLU(W1 · RMSNorm2(x_mid)) * W3 · RMSNorm2(x_mid))
    rmsnorm_fwd_cpu(p->ln2, p->ln2_rstd, p->mid, wparam(m, PK_LN2, l), N, C);
    matmul_fwd_cpu(p->h13, p->ln2, wparam(m, PK_W1, l), N, C, 2 * F);  // w1|w3 adjacent
    swiglu_fwd_cpu(p->gate, p->h13, N, F);
    if (!p->out) return;
    matmul_fwd_cpu(p->out, p->gate, wparam(m, PK_W2, l), N, F, C);
    for (size_t i = 0; i < NC; i++) p->out[i] += p->mid[i];
}

// ---- the chunked LM head (model_cpu.h "the chunked LM head") ----------------------------------
// Rows [r0, r0 + n) of the logits into the (rows, V) buffer: the same per-row product as the
// whole-logits path.
static void head_chunk_logits(model_cpu_t* m, model_cpu_range_acts_t* s, int r0, int n) {
    const int C = m->c.d_model, V = m->c.vocab;
    matmul_fwd_cpu(s->a.logits, s->a.lnf + (size_t)r0 * C, wparam(m, PK_HEAD, -1), n, C, V);
}

// The mean cross-entropy over N rows, a chunk at a time; lse kept for every row. The sum runs
// over the rows in order, in double, as cross_entropy_fwd_cpu's: the same bits.
static float head_forward_chunked(model_cpu_t* m, model_cpu_range_acts_t* s, const int32_t* targets, int N) {
    const int V = m->c.vocab, R = s->head_chunk < N ? s->head_chunk : N;
    double total = 0.0;
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = N - r0 < R ? N - r0 : R;
        head_chunk_logits(m, s, r0, n);
        (void)cross_entropy_fwd_cpu(s->a.lse + r0, s->a.logits, targets + r0, n, V);  // lse of its rows
        for (int i = 0; i < n; i++)
            total += (double)s->a.lse[r0 + i] - (double)s->a.logits[(size_t)i * V + targets[r0 + i]];
    }
    return (float)(total / N);
}

// dlogits of n rows in place: (softmax − onehot) · invN with invN = 1/N of the WHOLE batch
// (cross_entropy_bwd_cpu's expression, whose N is its row count).
static void ce_bwd_rows_inplace(float* z, const float* lse, const int32_t* targets, int n, int V, float invN) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float* dz = z + (size_t)i * V;
        for (int v = 0; v < V; v++) dz[v] = expf(dz[v] - lse[i]) * invN;
        dz[targets[i]] -= invN;
    }
}

// dW (V, C) += dyᵀ · x over n rows: matmul_bwd_cpu's dW loop without its zeroing, so that the
// chunks, in order, add every row in the order of one whole product.
static void head_dw_add(float* dW, const float* dy, const float* x, int n, int C, int V) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < V; o++) {
        float* dw = dW + (size_t)o * C;
        for (int i = 0; i < n; i++) {
            const float go = dy[(size_t)i * V + o];
            const float* xi = x + (size_t)i * C;
#pragma omp simd
            for (int k = 0; k < C; k++) dw[k] += go * xi[k];
        }
    }
}

// The head's backward a chunk at a time: recompute the chunk's logits, dlogits in place,
// its rows of d(lnf) into sc->dln and its share of dW_head added into dw (zeroed here).
static void head_backward_chunked(model_cpu_t* m, model_cpu_range_acts_t* s, float* dw, int N) {
    const int C = m->c.d_model, V = m->c.vocab, R = s->head_chunk < N ? s->head_chunk : N;
    const float invN = 1.0f / (float)N;
    float* z = s->a.logits;
    memset(dw, 0, (size_t)V * C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = N - r0 < R ? N - r0 : R;
        head_chunk_logits(m, s, r0, n);
        ce_bwd_rows_inplace(z, s->a.lse + r0, s->targets + r0, n, V, invN);
        if (s->loss_scale != 1.0f)
            for (size_t i = 0; i < (size_t)n * V; i++) z[i] *= s->loss_scale;
        matmul_dinp_cpu(m->s.dln + (size_t)r0 * C, z, wparam(m, PK_HEAD, -1), n, C, V);
        head_dw_add(dw, z, s->a.lnf + (size_t)r0 * C, n, C, V);
    }
}

float model_cpu_range_forward(model_cpu_t* m, model_cpu_range_acts_t* s, const int32_t* inputs,
                              const int32_t* targets, float loss_scale, int B, int T) {
    const model_config_t* c = &m->c;
    const model_range_t* r = &s->r;
    if (B < 1 || T < 1 || B > s->B || T > s->T || B > m->B || T > m->T)
        fail("micro-batch %d x sequence %d does not fit the activations (%d x %d) or the model (%d x %d)",
             B, T, s->B, s->T, m->B, m->T);
    const int C = c->d_model, V = c->vocab, N = B * T, nL = r->l1 - r->l0;
    const size_t NC = (size_t)N * C;
    s->cur_B = B;
    s->cur_T = T;
    s->loss_scale = loss_scale;
    s->have_loss = 0;
    model_cpu_acts_t* a = &s->a;
    if (r->embed) {
        if (!inputs) DIE("model_cpu_range_forward: the embedding range needs token ids");
        check_tokens(inputs, N, V, "input");
        memcpy(s->inputs, inputs, (size_t)N * sizeof(int32_t));
        unit_hook(m, m->hooks.before_fwd, 0);
        embedding_fwd_cpu(a->res, inputs, wparam(m, PK_EMBED, -1), N, C);  // x = E[inputs]
    }
    // Else a->res[0] (B, T, C) holds the input the caller received from the stage before.
    // Checkpointing with unit hooks: block (K = 1) only (model_cpu.h; set_unit_hooks refuses
    // the rest with one line, this is the safety net for a caller that set them by hand).
    if (!model_ckpt_hooks_ok(s->ckpt) && hooked(m)) DIE("model_cpu_range: %s", MODEL_CKPT_HOOKS_REFUSAL);
    for (int li = 0; li < nL; li++) {
        const int l = r->l0 + li;  // block index in the model (parameters)
        unit_hook(m, m->hooks.before_fwd, 1 + l);
        // nested: block 0 reads the input (slice 0) and writes slice 1, the others advance
        // slice 1 in place; it ends as the output.
        const cblk_t p = s->ckpt == MODEL_CKPT_NESTED ? blk_at(c, s, 0, li == 0 ? 0 : 1, 1, B, T)
                                                      : cpu_block(c, s, li, B, T);
        block_forward(m, l, &p, B, T);
    }
    if (!r->head || !targets) return NAN;
    // logits = lm_head · RMSNorm_final(x_L); the mean cross-entropy over this micro-batch
    check_tokens(targets, N, V, "target");
    s->have_loss = 1;
    memcpy(s->targets, targets, (size_t)N * sizeof(int32_t));
    unit_hook(m, m->hooks.before_fwd, c->n_layers + 1);
    rmsnorm_fwd_cpu(a->lnf, a->lnf_rstd, range_out(s, NC), wparam(m, PK_LNF, -1), N, C);
    if (s->head_chunk > 0) return head_forward_chunked(m, s, targets, N);
    matmul_fwd_cpu(a->logits, a->lnf, wparam(m, PK_HEAD, -1), N, C, V);
    return cross_entropy_fwd_cpu(a->lse, a->logits, targets, N, V);
}


// Gradient writes through the sink: WRITE goes straight into the flat buffer; ADD computes
// into `tmp` and adds (the ops overwrite their dW outputs, as PyTorch's autograd would into a
// fresh tensor before accumulating into .grad).
typedef struct {
    model_cpu_t* m;
    const model_cpu_grad_sink_t* k;
    float* tmp;  // (largest parameter block of the range) only when accumulating
} gw_t;

static gw_t gw_open(model_cpu_t* m, const model_cpu_range_acts_t* s, const model_cpu_grad_sink_t* k) {
    gw_t g = {m, k, NULL};
    if (k->accumulate) {
        const model_config_t* c = &m->c;
        size_t n = (size_t)c->d_model * (size_t)(3 * c->d_model > 2 * c->d_ff ? 3 * c->d_model : 2 * c->d_ff);
        if ((s->r.embed || s->r.head) && (size_t)c->vocab * c->d_model > n) n = (size_t)c->vocab * c->d_model;
        g.tmp = alloc_f32(n, MEM_WORKSPACE);
    }
    return g;
}
static void gw_close(gw_t* g) { mem_free(g->tmp); }
static float* gw_begin(gw_t* g, param_kind_t kind, int layer) {
    return g->tmp ? g->tmp : win_ptr(g->m, &g->m->gwin, g->k->grads, kind, layer, "gradient");
}
// n: elements written from kind's offset on (q|k|v and w1|w3 are written as one block).
static void gw_end(gw_t* g, param_kind_t kind, int layer, size_t n) {
    if (!g->tmp) return;
    float* dst = win_ptr(g->m, &g->m->gwin, g->k->grads, kind, layer, "gradient");
    for (size_t i = 0; i < n; i++) dst[i] += g->tmp[i];
}
static void ready(gw_t* g, param_kind_t kind, int layer) {
    if (g->k->hook) g->k->hook(g->k->ctx, param_index(&g->m->layout, kind, layer));
}

// Block li of the range, in reverse: sc->dres holds the gradient of its output on entry and
// of its input on exit.
static void block_backward(model_cpu_t* m, model_cpu_range_acts_t* s, gw_t* gp,
                           int split, int li, const cblk_t* p) {
    const model_config_t* c = &m->c;
    const int B = s->cur_B, T = s->cur_T;
    const int C = c->d_model, F = c->d_ff, NH = c->n_heads, HS = C / NH, N = B * T;
    const size_t NC = (size_t)N * C;
    const int l = s->r.l0 + li;
    model_cpu_scratch_t* sc = &m->s;
    const float *x = p->x, *ln1 = p->ln1, *ln1_rstd = p->ln1_rstd, *qkv = p->qkv, *att = p->att;
    const float *atty = p->atty, *mid = p->mid, *ln2 = p->ln2, *ln2_rstd = p->ln2_rstd;
    const float *h13 = p->h13, *gate = p->gate;
    float* dw;
    // Here sc->dres (B, T, C) is the gradient of this block's output. The caller opened unit
    // 1 + l's backward window (bwd_unit_begin): with checkpointing, before the recompute that
    // reads the same parameters.

    // FFN block, in reverse; the skip path passes dres through, the norm adds to it.
    if (split) {
        memcpy(s->d_out + (size_t)li * NC, sc->dres, NC * sizeof(float));
        matmul_dinp_cpu(sc->dgate, sc->dres, wparam(m, PK_W2, l), N, F, C);
    } else {
        dw = gw_begin(gp, PK_W2, l);
        matmul_bwd_cpu(sc->dgate, dw, sc->dres, gate, wparam(m, PK_W2, l), N, F, C);
        gw_end(gp, PK_W2, l, (size_t)C * F);
        ready(gp, PK_W2, l);
    }
    swiglu_bwd_cpu(sc->dh13, sc->dgate, h13, N, F);
    if (split) {
        memcpy(s->d_h13 + (size_t)li * N * 2 * F, sc->dh13, (size_t)N * 2 * F * sizeof(float));
        matmul_dinp_cpu(sc->dln, sc->dh13, wparam(m, PK_W1, l), N, C, 2 * F);
    } else {
        dw = gw_begin(gp, PK_W1, l);  // dW1 and dW3 (adjacent) in one product
        matmul_bwd_cpu(sc->dln, dw, sc->dh13, ln2, wparam(m, PK_W1, l), N, C, 2 * F);
        gw_end(gp, PK_W1, l, (size_t)2 * F * C);
        ready(gp, PK_W3, l);
        ready(gp, PK_W1, l);
    }
    dw = gw_begin(gp, PK_LN2, l);
    rmsnorm_bwd_cpu(sc->dres, dw, sc->dln, mid, wparam(m, PK_LN2, l), ln2_rstd, N, C);
    gw_end(gp, PK_LN2, l, (size_t)C);
    ready(gp, PK_LN2, l);

    // Attention block, in reverse; afterwards dres is the gradient of the block input.
    if (split) {
        memcpy(s->d_mid + (size_t)li * NC, sc->dres, NC * sizeof(float));
        matmul_dinp_cpu(sc->datty, sc->dres, wparam(m, PK_O, l), N, C, C);
    } else {
        dw = gw_begin(gp, PK_O, l);
        matmul_bwd_cpu(sc->datty, dw, sc->dres, atty, wparam(m, PK_O, l), N, C, C);
        gw_end(gp, PK_O, l, (size_t)C * C);
        ready(gp, PK_O, l);
    }
    attention_bwd_cpu(sc->dqkv, sc->datty, qkv, att, B, T, C, NH);
    rope_bwd_cpu(sc->dqkv, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);      // dq
    rope_bwd_cpu(sc->dqkv + C, B, T, NH, HS, 3 * C, m->rope_cos, m->rope_sin);  // dk
    if (split) {
        memcpy(s->d_qkv + (size_t)li * NC * 3, sc->dqkv, NC * 3 * sizeof(float));
        matmul_dinp_cpu(sc->dln, sc->dqkv, wparam(m, PK_Q, l), N, C, 3 * C);
    } else {
        dw = gw_begin(gp, PK_Q, l);  // dWq, dWk, dWv (adjacent) in one product
        matmul_bwd_cpu(sc->dln, dw, sc->dqkv, ln1, wparam(m, PK_Q, l), N, C, 3 * C);
        gw_end(gp, PK_Q, l, (size_t)3 * C * C);
        ready(gp, PK_V, l);
        ready(gp, PK_K, l);
        ready(gp, PK_Q, l);
    }
    dw = gw_begin(gp, PK_LN1, l);
    rmsnorm_bwd_cpu(sc->dres, dw, sc->dln, x, wparam(m, PK_LN1, l), ln1_rstd, N, C);
    gw_end(gp, PK_LN1, l, (size_t)C);
    ready(gp, PK_LN1, l);
}

// Nested checkpointing's backward of blocks [lo, hi) of the range (model_cpu.h "nested"):
// their input is in res slice xi, slices sp and up are free; sc->dres holds the gradient of
// block hi-1's output on entry and of block lo's input on exit. No unit hooks (refused).
static void nested_backward(model_cpu_t* m, model_cpu_range_acts_t* s, gw_t* g, int lo, int hi, int xi, int sp) {
    const model_config_t* c = &m->c;
    const int B = s->cur_B, T = s->cur_T, l0 = s->r.l0;
    if (hi - lo == 1) {  // recompute the block's internals (not its output: W2 not run), backprop
        cblk_t p = blk_at(c, s, 0, (size_t)xi, (size_t)xi, B, T);
        p.out = NULL;
        block_forward(m, l0 + lo, &p, B, T);
        block_backward(m, s, g, 0, lo, &p);
        return;
    }
    // The lower half takes the extra block: it reuses this range's input, the upper half
    // pushes one slice, so the stack grows only by floor(log2 n).
    const int mid = lo + (hi - lo + 1) / 2;
    for (int li = lo; li < mid; li++) {  // input of mid into slice sp (in place after the first)
        const cblk_t p = blk_at(c, s, 0, (size_t)(li == lo ? xi : sp), (size_t)sp, B, T);
        block_forward(m, l0 + li, &p, B, T);
    }
    nested_backward(m, s, g, mid, hi, sp, sp + 1);
    nested_backward(m, s, g, lo, mid, xi, sp);
}

// The backward of model_cpu_backward over the range, fused (split = 0) or as the input pass
// (split = 1: every linear layer computes only its input gradient and saves its dy for W).
static void range_backward(model_cpu_t* m, model_cpu_range_acts_t* s, const model_cpu_grad_sink_t* k, int split) {
    const model_config_t* c = &m->c;
    const model_range_t* r = &s->r;
    const int B = s->cur_B, T = s->cur_T;
    if (B < 1) DIE("model_cpu_range_backward: no forward ran on these activations");
    if (r->head && !s->have_loss) DIE("model_cpu_range_backward: the last forward had no targets (no loss)");
    const int C = c->d_model, V = c->vocab, N = B * T, nL = r->l1 - r->l0;
    const size_t NC = (size_t)N * C;
    const model_cpu_acts_t* a = &s->a;
    model_cpu_scratch_t* sc = &m->s;
    gw_t g = gw_open(m, s, k);
    float* dw;
    if (hooked(m) && split) DIE("model_cpu_range: unit hooks (ZeRO-3) and the split backward do not go together");
    if (!k->accumulate && !hooked(m)) {
        // WRITE: the range's padding is 0 and every parameter of it is overwritten below.
        size_t b0, b1;
        model_range_span(&m->layout, c, r, &b0, &b1);
        memset(k->grads + b0, 0, (b1 - b0) * sizeof(float));
    }

    if (r->head) {
        // Loss -> logits -> lm_head and the final norm. The gradient is that of
        // loss_scale · mean loss (skipped at 1 so the whole model's bits stay the same).
        bwd_unit_begin(m, k, c->n_layers + 1);
        if (s->head_chunk > 0 && split)
            DIE("model_cpu_range: the chunked LM head and the split backward do not go together");
        if (s->head_chunk > 0) {
            dw = gw_begin(&g, PK_HEAD, -1);
            head_backward_chunked(m, s, dw, N);
            gw_end(&g, PK_HEAD, -1, (size_t)V * C);
            ready(&g, PK_HEAD, -1);
        } else {
            cross_entropy_bwd_cpu(sc->dlogits, a->logits, a->lse, s->targets, N, V);
            if (s->loss_scale != 1.0f)
                for (size_t i = 0; i < (size_t)N * V; i++) sc->dlogits[i] *= s->loss_scale;
            if (split) {
                memcpy(s->d_logits, sc->dlogits, (size_t)N * V * sizeof(float));
                matmul_dinp_cpu(sc->dln, sc->dlogits, wparam(m, PK_HEAD, -1), N, C, V);
            } else {
                dw = gw_begin(&g, PK_HEAD, -1);
                matmul_bwd_cpu(sc->dln, dw, sc->dlogits, a->lnf, wparam(m, PK_HEAD, -1), N, C, V);
                gw_end(&g, PK_HEAD, -1, (size_t)V * C);
                ready(&g, PK_HEAD, -1);
            }
        }
        memset(sc->dres, 0, NC * sizeof(float));
        dw = gw_begin(&g, PK_LNF, -1);
        rmsnorm_bwd_cpu(sc->dres, dw, sc->dln, range_out(s, NC), wparam(m, PK_LNF, -1),
                        a->lnf_rstd, N, C);
        gw_end(&g, PK_LNF, -1, (size_t)C);
        ready(&g, PK_LNF, -1);
        bwd_unit_end(m, c->n_layers + 1);
    } else {
        memcpy(sc->dres, s->dy, NC * sizeof(float));  // the gradient the next stage sent back
    }

    if (s->ckpt != 0 && split)
        DIE("model_cpu_range: activation checkpointing and the split backward do not go together");
    if (!model_ckpt_hooks_ok(s->ckpt) && hooked(m)) DIE("model_cpu_range: %s", MODEL_CKPT_HOOKS_REFUSAL);
    if (s->ckpt == MODEL_CKPT_NESTED) {
        if (nL > 0) nested_backward(m, s, &g, 0, nL, 0, 2);
    } else if (s->ckpt == 0) {
        for (int li = nL - 1; li >= 0; li--) {
            const cblk_t p = cpu_block(c, s, li, B, T);
            bwd_unit_begin(m, k, 1 + r->l0 + li);
            block_backward(m, s, &g, split, li, &p);
            bwd_unit_end(m, 1 + r->l0 + li);
        }
    } else {
        // Segment by segment from the last: recompute its blocks' internals forward from its
        // saved input (the same operations on the same inputs: the same bits), then backprop
        // through them. With unit hooks (ZeRO-2/3) K is 1, so a segment is one block, one
        // unit: its backward window opens FIRST (before_bwd gathers the block's parameters
        // and points the windows at them), then the recompute reads those parameters and the
        // backward follows in the same window — no gather beyond the backward's own. (Without
        // hooks bwd_unit_begin/end do nothing, so where they stand does not matter.)
        const int K = s->ckpt;
        for (int sg = model_ckpt_segments(nL, K) - 1; sg >= 0; sg--) {
            const int lo = sg * K, hi = lo + K < nL ? lo + K : nL;
            if (K == 1) bwd_unit_begin(m, k, 1 + r->l0 + lo);
            for (int li = lo; li < hi; li++) {
                cblk_t p = cpu_block(c, s, li, B, T);
                if (li == hi - 1) p.out = NULL;  // saved already (a checkpoint or the output)
                block_forward(m, r->l0 + li, &p, B, T);
            }
            for (int li = hi - 1; li >= lo; li--) {
                const cblk_t p = cpu_block(c, s, li, B, T);
                if (K > 1) bwd_unit_begin(m, k, 1 + r->l0 + li);
                block_backward(m, s, &g, split, li, &p);
                bwd_unit_end(m, 1 + r->l0 + li);
            }
        }
    }
    // dres is now the gradient of the range's input: the embedding output, or what goes back.
    if (r->embed) {
        if (split) {
            memcpy(s->d_emb, sc->dres, NC * sizeof(float));
        } else {
            bwd_unit_begin(m, k, 0);
            dw = gw_begin(&g, PK_EMBED, -1);
            embedding_bwd_cpu(dw, sc->dres, s->inputs, N, C, V);
            gw_end(&g, PK_EMBED, -1, (size_t)V * C);
            ready(&g, PK_EMBED, -1);
            bwd_unit_end(m, 0);
        }
    } else {
        memcpy(s->dx, sc->dres, NC * sizeof(float));
    }
    gw_close(&g);
}

void model_cpu_range_backward(model_cpu_t* m, model_cpu_range_acts_t* s, const model_cpu_grad_sink_t* sink) {
    range_backward(m, s, sink, 0);
}

void model_cpu_range_backward_input(model_cpu_t* m, model_cpu_range_acts_t* s, const model_cpu_grad_sink_t* sink) {
    if (!s->split) DIE("model_cpu_range_backward_input: the activations were created without split = 1");
    range_backward(m, s, sink, 1);
}

void model_cpu_range_backward_weight(model_cpu_t* m, model_cpu_range_acts_t* s, const model_cpu_grad_sink_t* sink) {
    if (!s->split) DIE("model_cpu_range_backward_weight: the activations were created without split = 1");
    if (s->ckpt != 0) DIE("model_cpu_range: activation checkpointing and the split backward do not go together");
    if (hooked(m)) DIE("model_cpu_range: unit hooks (ZeRO-3) and the split backward do not go together");
    const model_config_t* c = &m->c;
    const model_range_t* r = &s->r;
    const int C = c->d_model, F = c->d_ff, V = c->vocab, N = s->cur_B * s->cur_T, nL = r->l1 - r->l0;
    const size_t NC = (size_t)N * C;
    const model_cpu_acts_t* a = &s->a;
    gw_t g = gw_open(m, s, sink);
    float* dw;
    // dW = dyᵀ · x for every linear layer, with the dy the input pass saved and the x the
    // forward saved (matmul_bwd_cpu with no input gradient: the same dW loop as the fused call).
    if (r->head) {
        dw = gw_begin(&g, PK_HEAD, -1);
        matmul_bwd_cpu(NULL, dw, s->d_logits, a->lnf, wparam(m, PK_HEAD, -1), N, C, V);
        gw_end(&g, PK_HEAD, -1, (size_t)V * C);
        ready(&g, PK_HEAD, -1);
    }
    for (int li = nL - 1; li >= 0; li--) {
        const int l = r->l0 + li;
        dw = gw_begin(&g, PK_W2, l);
        matmul_bwd_cpu(NULL, dw, s->d_out + (size_t)li * NC, a->gate + (size_t)li * N * F,
                       wparam(m, PK_W2, l), N, F, C);
        gw_end(&g, PK_W2, l, (size_t)C * F);
        ready(&g, PK_W2, l);
        dw = gw_begin(&g, PK_W1, l);
        matmul_bwd_cpu(NULL, dw, s->d_h13 + (size_t)li * N * 2 * F, a->ln2 + (size_t)li * NC,
                       wparam(m, PK_W1, l), N, C, 2 * F);
        gw_end(&g, PK_W1, l, (size_t)2 * F * C);
        ready(&g, PK_W3, l);
        ready(&g, PK_W1, l);
        dw = gw_begin(&g, PK_O, l);
        matmul_bwd_cpu(NULL, dw, s->d_mid + (size_t)li * NC, a->atty + (size_t)li * NC,
                       wparam(m, PK_O, l), N, C, C);
        gw_end(&g, PK_O, l, (size_t)C * C);
        ready(&g, PK_O, l);
        dw = gw_begin(&g, PK_Q, l);
        matmul_bwd_cpu(NULL, dw, s->d_qkv + (size_t)li * NC * 3, a->ln1 + (size_t)li * NC,
                       wparam(m, PK_Q, l), N, C, 3 * C);
        gw_end(&g, PK_Q, l, (size_t)3 * C * C);
        ready(&g, PK_V, l);
        ready(&g, PK_K, l);
        ready(&g, PK_Q, l);
    }
    if (r->embed) {
        dw = gw_begin(&g, PK_EMBED, -1);
        embedding_bwd_cpu(dw, s->d_emb, s->inputs, N, C, V);
        gw_end(&g, PK_EMBED, -1, (size_t)V * C);
        ready(&g, PK_EMBED, -1);
    }
    gw_close(&g);
}
