// The model's sizes, its flat parameter layout and its initialisation (see common/model.h).
// Everything here is plain host C with no CUDA call: the CPU reference (model_cpu.c) and the
// CUDA model (model_gpu.*) both build their buffers from the layout made here, and the GPU
// model may copy the host-initialised buffer so that both start from the same bits.
//
// Initialisation, exactly (so that anyone can reproduce it, on any device):
//   seed_p  = rng_u64(seed, p)                       p = index of the parameter in the layout
//   x[i]    = std_p * rng_trunc_normal(seed_p, i, 3)  i = 0 .. numel_p - 1
// with std_p = 1 for the embedding and sqrt(2 / (d_in + d_out)) for a [d_out, d_in] linear
// weight; RMSNorm weights are 1; padding between parameters is 0. Each parameter has its own
// seed, so adding a layer does not change the numbers of the layers before it.
#include "common/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"

// Every parameter starts at a multiple of this many elements (256 bytes of fp32).
#define PARAM_ALIGN 64

typedef struct {
    const char* name;
    int d_model, d_ff, n_layers, n_heads;
} size_row_t;

// "tiny" is ours, sized so that the CPU reference trains a few steps in well under a second
// (HS = 16, F = 3C). The others are SPEC.md's table (the course's sizes), vocab 10000, but "8b":
// the class of the 2026 leaderboard's model (d_model 4096, d_ff 11008, 34 layers, 32 heads, an
// untied head over a vocabulary of 151936 tokens; 8.13 B parameters), which it trains at context
// 32768, batch 2, bf16, on two GPUs: 07_zero/README.md counts its memory.
static const size_row_t SIZES[] = {
    {"tiny", 64, 192, 2, 4},
    {"small", 768, 3072, 12, 12},
    {"medium", 1024, 4096, 24, 16},
    {"large", 1280, 5120, 36, 20},
    {"xl", 1600, 6400, 48, 25},
    {"2.7B", 2560, 10240, 32, 32},
    {"8b", 4096, 11008, 34, 32},
};
#define TINY_VOCAB 512
#define COURSE_VOCAB 10000
#define LB8B_VOCAB 151936

int model_config_by_name(const char* name, int context, model_config_t* out) {
    if (name == NULL) return -1;
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++) {
        if (strcmp(name, SIZES[i].name) != 0) continue;
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", SIZES[i].name);
        out->vocab = (i == 0) ? TINY_VOCAB : strcmp(name, "8b") == 0 ? LB8B_VOCAB : COURSE_VOCAB;
        out->context = context;
        out->d_model = SIZES[i].d_model;
        out->n_layers = SIZES[i].n_layers;
        out->n_heads = SIZES[i].n_heads;
        out->d_ff = SIZES[i].d_ff;
        return 0;
    }
    return -1;
}

int model_config_check(const model_config_t* c, char* err, size_t errlen) {
#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
    if (c->vocab < 1) BAD("vocab is %d, must be >= 1", c->vocab);
    if (c->context < 1) BAD("context is %d, must be >= 1", c->context);
    if (c->d_model < 1) BAD("d_model is %d, must be >= 1", c->d_model);
    if (c->n_layers < 1) BAD("n_layers is %d, must be >= 1", c->n_layers);
    if (c->n_heads < 1) BAD("n_heads is %d, must be >= 1", c->n_heads);
    if (c->d_ff < 1) BAD("d_ff is %d, must be >= 1", c->d_ff);
    if (c->d_model % c->n_heads != 0)
        BAD("n_heads %d does not divide d_model %d", c->n_heads, c->d_model);
    // RoPE rotates pairs (2i, 2i+1) inside a head, so a head needs an even size.
    if ((c->d_model / c->n_heads) % 2 != 0)
        BAD("head size d_model/n_heads = %d is odd; RoPE needs an even head size",
            c->d_model / c->n_heads);
    // Multiples of 8 keep q/k/v and w1/w3 adjacent under the 64-element alignment (C*C and
    // F*C are then multiples of 64) and keep rows 32-byte aligned for vector loads.
    if (c->d_model % 8 != 0) BAD("d_model %d is not a multiple of 8", c->d_model);
    if (c->d_ff % 8 != 0) BAD("d_ff %d is not a multiple of 8", c->d_ff);
    if (err && errlen) err[0] = '\0';
    return 0;
#undef BAD
}

static size_t align_up(size_t x) { return (x + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN; }

// Appends one parameter at the next aligned offset.
static void add_param(param_layout_t* l, size_t* cursor, const char* name, param_kind_t kind,
                      int layer, int rank, int64_t d0, int64_t d1) {
    param_info_t* p = &l->p[l->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    p->rank = rank;
    p->shape[0] = d0;
    p->shape[1] = (rank == 2) ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(rank == 2 ? d1 : 1);
    p->offset = align_up(*cursor);
    *cursor = p->offset + p->numel;
}

param_layout_t param_layout_make(const model_config_t* c) {
    char err[160];
    if (model_config_check(c, err, sizeof err) != 0) DIE("param_layout_make: bad config: %s", err);
    const int64_t V = c->vocab, C = c->d_model, F = c->d_ff;
    param_layout_t l;
    l.n = 0;
    l.p = calloc((size_t)(3 + 9 * c->n_layers), sizeof *l.p);
    if (!l.p) DIE("param_layout_make: out of host memory");
    size_t cur = 0;
    char nm[64];
    add_param(&l, &cur, "token_embeddings.weight", PK_EMBED, -1, 2, V, C);
    for (int i = 0; i < c->n_layers; i++) {
#define NAME(suffix) (snprintf(nm, sizeof nm, "layers.%d.%s", i, suffix), nm)
        add_param(&l, &cur, NAME("ln1.weight"), PK_LN1, i, 1, C, 0);
        add_param(&l, &cur, NAME("attn.q_proj.weight"), PK_Q, i, 2, C, C);
        add_param(&l, &cur, NAME("attn.k_proj.weight"), PK_K, i, 2, C, C);
        add_param(&l, &cur, NAME("attn.v_proj.weight"), PK_V, i, 2, C, C);
        add_param(&l, &cur, NAME("attn.output_proj.weight"), PK_O, i, 2, C, C);
        add_param(&l, &cur, NAME("ln2.weight"), PK_LN2, i, 1, C, 0);
        add_param(&l, &cur, NAME("ffn.w1.weight"), PK_W1, i, 2, F, C);
        add_param(&l, &cur, NAME("ffn.w3.weight"), PK_W3, i, 2, F, C);
        add_param(&l, &cur, NAME("ffn.w2.weight"), PK_W2, i, 2, C, F);
#undef NAME
    }
    add_param(&l, &cur, "ln_final.weight", PK_LNF, -1, 1, C, 0);
    add_param(&l, &cur, "lm_head.weight", PK_HEAD, -1, 2, V, C);
    // The end is aligned too, so a buffer of `total` can be split into aligned shards and
    // a second model's buffer could follow this one.
    l.total = align_up(cur);
    return l;
}

void param_layout_free(param_layout_t* l) {
    free(l->p);
    l->p = NULL;
    l->n = 0;
    l->total = 0;
}

int param_index(const param_layout_t* l, param_kind_t kind, int layer) {
    // Global parameters have layer -1 whatever the caller passes for them.
    int global = (kind == PK_EMBED || kind == PK_LNF || kind == PK_HEAD);
    for (int i = 0; i < l->n; i++)
        if (l->p[i].kind == kind && (global || l->p[i].layer == layer)) return i;
    return -1;
}

size_t param_count(const param_layout_t* l) {
    size_t n = 0;
    for (int i = 0; i < l->n; i++) n += l->p[i].numel;
    return n;
}

// std of the (untruncated) normal for one parameter; 0 means "fill with ones" (RMSNorm).
static double init_std(const param_info_t* p) {
    switch (p->kind) {
    case PK_EMBED: return 1.0;
    case PK_LN1: case PK_LN2: case PK_LNF: return 0.0;
    default: return sqrt(2.0 / (double)(p->shape[0] + p->shape[1]));  // [d_out, d_in]
    }
}

void model_init_params(const param_layout_t* l, float* params, uint64_t seed) {
    // Padding first (and everything else; the loop below overwrites the parameters).
    memset(params, 0, l->total * sizeof(float));
    for (int pi = 0; pi < l->n; pi++) {
        const param_info_t* p = &l->p[pi];
        float* x = params + p->offset;  // [numel]
        const double sd = init_std(p);
        if (sd == 0.0) {
            for (size_t i = 0; i < p->numel; i++) x[i] = 1.0f;
            continue;
        }
        const uint64_t seed_p = rng_u64(seed, (uint64_t)pi);
        const float stdf = (float)sd;
        const long long n = (long long)p->numel;
        // Each element is a pure function of (seed_p, i): threads do not change the numbers.
#pragma omp parallel for schedule(static) if (n > 65536)
        for (long long i = 0; i < n; i++) x[i] = stdf * rng_trunc_normal(seed_p, (uint64_t)i, 3.0f);
    }
}

// Elements [lo, hi) of what model_init_params writes, into out[0 .. hi-lo): the same three
// rules (padding 0, norm weights 1, element i of parameter p = std_p * rng_trunc_normal(seed_p,
// i, 3)) applied to the part of each parameter inside the range, so the slice is bit-identical.
// Why: a rank that keeps only a shard (ZeRO-3) makes its own elements without ever holding the
// whole buffer. Elements at or past the layout's total are padding (0): a caller's padded
// buffer may extend past it.
void model_init_params_range(const param_layout_t* l, float* out, size_t lo, size_t hi, uint64_t seed) {
    if (hi < lo) DIE("model_init_params_range: range [%zu, %zu) is reversed", lo, hi);
    if (hi == lo) return;
    memset(out, 0, (hi - lo) * sizeof(float));
    for (int pi = 0; pi < l->n; pi++) {
        const param_info_t* p = &l->p[pi];
        const size_t a = p->offset > lo ? p->offset : lo;                          // flat, inclusive
        const size_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;    // flat, exclusive
        if (a >= e) continue;
        float* x = out + (a - lo);                    // flat element a
        const size_t i0 = a - p->offset, n = e - a;   // the parameter's own element indices
        const double sd = init_std(p);
        if (sd == 0.0) {
            for (size_t i = 0; i < n; i++) x[i] = 1.0f;
            continue;
        }
        const uint64_t seed_p = rng_u64(seed, (uint64_t)pi);
        const float stdf = (float)sd;
        const long long nn = (long long)n;
#pragma omp parallel for schedule(static) if (nn > 65536)
        for (long long i = 0; i < nn; i++) x[i] = stdf * rng_trunc_normal(seed_p, (uint64_t)i0 + (uint64_t)i, 3.0f);
    }
}

double model_forward_flops(const model_config_t* c, int B, int T) {
    const double C = c->d_model, F = c->d_ff, V = c->vocab, L = c->n_layers;
    const double tokens = (double)B * (double)T;
    // Per token and layer: q, k, v, o projections 4 * 2*C*C; w1, w3, w2 3 * 2*C*F.
    const double per_token_layer = 8.0 * C * C + 6.0 * C * F;
    // Attention per layer: scores Q Kᵀ 2*B*T*T*C and P V 2*B*T*T*C, the full T x T square
    // (the causal half is not subtracted: the naive kernels compute all of it).
    const double attn_layer = 4.0 * (double)B * (double)T * (double)T * C;
    // LM head: 2*C*V per token. Embedding lookup, norms, RoPE, softmax: not counted (O(T*C)).
    return L * (tokens * per_token_layer + attn_layer) + tokens * 2.0 * C * V;
}
