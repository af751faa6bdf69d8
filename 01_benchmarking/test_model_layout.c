// The model's shared definitions (common/model.h, common/model_config.c): sizes, config checks,
// the flat parameter layout and the initialisation's statistics.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "tests/harness.h"

static const char* ALL_SIZES[] = {"tiny", "small", "medium", "large", "xl", "2.7B", "8b"};

Test(model_config, sizes_from_the_spec) {
    struct { const char* name; int C, F, L, NH, V; } want[] = {
        {"tiny", 64, 192, 2, 4, 512},          {"small", 768, 3072, 12, 12, 10000},
        {"medium", 1024, 4096, 24, 16, 10000}, {"large", 1280, 5120, 36, 20, 10000},
        {"xl", 1600, 6400, 48, 25, 10000},     {"2.7B", 2560, 10240, 32, 32, 10000},
        {"8b", 4096, 11008, 34, 32, 151936},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        model_config_t c;
        cr_assert_eq(model_config_by_name(want[i].name, 333, &c), 0, "%s", want[i].name);
        cr_assert_str_eq(c.name, want[i].name);
        cr_assert(c.d_model == want[i].C && c.d_ff == want[i].F && c.n_layers == want[i].L &&
                  c.n_heads == want[i].NH && c.vocab == want[i].V && c.context == 333,
                  "%s: got C %d F %d L %d NH %d V %d ctx %d", want[i].name, c.d_model, c.d_ff,
                  c.n_layers, c.n_heads, c.vocab, c.context);
        char err[128];
        cr_assert_eq(model_config_check(&c, err, sizeof err), 0, "%s: %s", want[i].name, err);
    }
    model_config_t c;
    cr_assert_eq(model_config_by_name("huge", 128, &c), -1);
    cr_assert_eq(model_config_by_name("Small", 128, &c), -1, "names are case-sensitive");
    cr_assert_eq(model_config_by_name(NULL, 128, &c), -1);
}

static void expect_bad(model_config_t c, const char* text) {
    char err[160] = "";
    cr_assert_eq(model_config_check(&c, err, sizeof err), -1, "accepted; expected \"%s\"", text);
    cr_assert(strstr(err, text) != NULL, "reason \"%s\" lacks \"%s\"", err, text);
    cr_assert(strchr(err, '\n') == NULL, "one line: %s", err);
}

Test(model_config, check_gives_one_line_reasons) {
    const model_config_t ok = {"x", 61, 16, 32, 2, 4, 88};
    model_config_t c = ok;
    c.n_heads = 5;
    expect_bad(c, "n_heads 5 does not divide d_model 32");
    c = ok; c.d_model = 24; c.n_heads = 8;  // head size 3
    expect_bad(c, "head size d_model/n_heads = 3 is odd");
    c = ok; c.d_model = 36; c.n_heads = 2;  // head size 18, C not a multiple of 8
    expect_bad(c, "d_model 36 is not a multiple of 8");
    c = ok; c.d_ff = 90;
    expect_bad(c, "d_ff 90 is not a multiple of 8");
    c = ok; c.vocab = 0;
    expect_bad(c, "vocab is 0");
    c = ok; c.context = 0;
    expect_bad(c, "context is 0");
    c = ok; c.n_layers = 0;
    expect_bad(c, "n_layers is 0");
    c = ok; c.n_heads = 0;
    expect_bad(c, "n_heads is 0");
    c = ok; c.d_ff = -8;
    expect_bad(c, "d_ff is -8");
}

// Every invariant of the layout, for one config.
static void check_layout(const model_config_t* c) {
    param_layout_t l = param_layout_make(c);
    const int L = c->n_layers;
    const size_t V = c->vocab, C = c->d_model, F = c->d_ff;
    cr_assert_eq(l.n, 2 + 9 * L + 1, "%s: %d parameters", c->name, l.n);
    // The formula: embedding + head 2VC, per layer 2 norms + 4 attention + 3 FFN, final norm.
    const size_t formula = 2 * V * C + (size_t)L * (2 * C + 4 * C * C + 3 * C * F) + C;
    cr_assert_eq(param_count(&l), formula, "%s: param_count %zu, formula %zu", c->name,
                 param_count(&l), formula);
    size_t end = 0;
    for (int i = 0; i < l.n; i++) {
        const param_info_t* p = &l.p[i];
        cr_assert_eq(p->offset % 64, 0, "%s offset %zu not 64-aligned", p->name, p->offset);
        cr_assert(p->offset >= end, "%s overlaps the previous parameter", p->name);
        cr_assert(p->offset - end < 64, "%s: more padding than alignment needs", p->name);
        const size_t numel = (size_t)p->shape[0] * (p->rank == 2 ? (size_t)p->shape[1] : 1);
        cr_assert_eq(p->numel, numel, "%s numel", p->name);
        end = p->offset + p->numel;
        cr_assert_eq(param_index(&l, p->kind, p->layer), i, "param_index finds %s", p->name);
    }
    cr_assert(l.total >= end && l.total % 64 == 0 && l.total - end < 64, "%s total %zu end %zu",
              c->name, l.total, end);
    // Names, shapes and the adjacency that fused products rely on.
    const param_info_t* e = &l.p[0];
    cr_assert_str_eq(e->name, "token_embeddings.weight");
    cr_assert(e->kind == PK_EMBED && e->layer == -1 && e->shape[0] == (int64_t)V &&
              e->shape[1] == (int64_t)C && e->offset == 0);
    for (int li = 0; li < L; li++) {
        char want[64];
        const char* suffix[] = {"ln1.weight", "attn.q_proj.weight", "attn.k_proj.weight",
                                "attn.v_proj.weight", "attn.output_proj.weight", "ln2.weight",
                                "ffn.w1.weight", "ffn.w3.weight", "ffn.w2.weight"};
        const param_kind_t kinds[] = {PK_LN1, PK_Q, PK_K, PK_V, PK_O, PK_LN2, PK_W1, PK_W3, PK_W2};
        for (int k = 0; k < 9; k++) {
            const param_info_t* p = &l.p[1 + 9 * li + k];
            snprintf(want, sizeof want, "layers.%d.%s", li, suffix[k]);
            cr_assert_str_eq(p->name, want);
            cr_assert(p->kind == kinds[k] && p->layer == li, "%s kind/layer", p->name);
        }
        const param_info_t* q = &l.p[param_index(&l, PK_Q, li)];
        const param_info_t* kk = &l.p[param_index(&l, PK_K, li)];
        const param_info_t* v = &l.p[param_index(&l, PK_V, li)];
        cr_assert(kk->offset == q->offset + C * C && v->offset == kk->offset + C * C,
                  "layer %d: q, k, v are not one [3C, C] block", li);
        const param_info_t* w1 = &l.p[param_index(&l, PK_W1, li)];
        const param_info_t* w3 = &l.p[param_index(&l, PK_W3, li)];
        const param_info_t* w2 = &l.p[param_index(&l, PK_W2, li)];
        cr_assert(w3->offset == w1->offset + F * C, "layer %d: w1, w3 are not one [2F, C] block", li);
        cr_assert(w1->shape[0] == (int64_t)F && w1->shape[1] == (int64_t)C && w2->shape[0] == (int64_t)C &&
                  w2->shape[1] == (int64_t)F, "FFN shapes are [d_out, d_in]");
        cr_assert(l.p[param_index(&l, PK_LN1, li)].rank == 1);
    }
    cr_assert_str_eq(l.p[l.n - 2].name, "ln_final.weight");
    cr_assert_str_eq(l.p[l.n - 1].name, "lm_head.weight");
    cr_assert_eq(param_index(&l, PK_HEAD, -1), l.n - 1);
    cr_assert_eq(param_index(&l, PK_HEAD, 7), l.n - 1, "global parameters ignore the layer");
    cr_assert_eq(param_index(&l, PK_Q, L), -1, "no layer L");
    param_layout_free(&l);
    cr_assert_null(l.p);
}

Test(model_config, layout_invariants_at_every_size) {
    for (size_t i = 0; i < sizeof ALL_SIZES / sizeof ALL_SIZES[0]; i++) {
        model_config_t c;
        model_config_by_name(ALL_SIZES[i], 512, &c);
        check_layout(&c);
    }
    // Odd sizes where padding appears (C*C, F*C multiples of 64 but V*C and C are not).
    const model_config_t odd = {"odd", 61, 16, 32, 3, 4, 88};
    check_layout(&odd);
    const model_config_t odd2 = {"odd2", 1001, 16, 40, 1, 5, 24};
    check_layout(&odd2);
}

Test(model_config, known_parameter_counts) {
    // small: 2·10000·768 + 12·(2·768 + 4·768² + 3·768·3072) + 768
    model_config_t c;
    model_config_by_name("small", 128, &c);
    param_layout_t l = param_layout_make(&c);
    cr_assert_eq(param_count(&l), (size_t)128625408);
    param_layout_free(&l);
    // 8b: 2·151936·4096 + 34·(2·4096 + 4·4096² + 3·4096·11008) + 4096
    model_config_by_name("8b", 32768, &c);
    l = param_layout_make(&c);
    cr_assert_eq(param_count(&l), (size_t)8125698048);
    param_layout_free(&l);
}

Test(model_config, forward_flops_formula) {
    const model_config_t c = {"x", 100, 64, 16, 2, 2, 24};
    // Per token and layer 8C² + 6CF = 2048 + 2304; attention 4·B·T²·C per layer; head 2CV.
    const double B = 3, T = 5;
    const double want = 2 * (B * T * (8.0 * 16 * 16 + 6.0 * 16 * 24) + 4 * B * T * T * 16) +
                        B * T * 2 * 16 * 100;
    cr_assert(fabs(model_forward_flops(&c, 3, 5) - want) < 1e-6 * want, "%g vs %g",
              model_forward_flops(&c, 3, 5), want);
}

// ---------------------------------------------------------------- initialisation

// Standard deviation of N(0, 1) cut at ±a: sqrt(1 − 2a·φ(a) / (2Φ(a) − 1)).
static double trunc_std_factor(double a) {
    const double phi = exp(-0.5 * a * a) / sqrt(2.0 * M_PI);
    const double mass = erf(a / sqrt(2.0));  // 2Φ(a) − 1
    return sqrt(1.0 - 2.0 * a * phi / mass);
}

static void moments(const float* x, size_t n, double* mean, double* std, double* maxabs) {
    double s = 0, s2 = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
        if (fabs(x[i]) > m) m = fabs(x[i]);
    }
    *mean = s / n;
    *std = sqrt(s2 / n - *mean * *mean);
    *maxabs = m;
}

Test(model_init, truncated_normal_statistics) {
    // Big enough tensors for tight statistics: embedding and head 4096 x 256 (1M each),
    // w1 [512, 256].
    const model_config_t c = {"init", 4096, 16, 256, 1, 4, 512};
    param_layout_t l = param_layout_make(&c);
    float* x = malloc(l.total * sizeof(float));
    memset(x, 0xFF, l.total * sizeof(float));  // poison: padding and every element get written
    model_init_params(&l, x, 2024);
    const double factor = trunc_std_factor(3.0);
    cr_assert(fabs(factor - 0.98658) < 1e-4, "cut at 3 std keeps %.5f of the std", factor);
    for (int i = 0; i < l.n; i++) {
        const param_info_t* p = &l.p[i];
        const float* w = x + p->offset;
        double mean, sd, mx;
        moments(w, p->numel, &mean, &sd, &mx);
        if (p->kind == PK_LN1 || p->kind == PK_LN2 || p->kind == PK_LNF) {
            for (size_t k = 0; k < p->numel; k++) cr_assert_eq(w[k], 1.0f, "%s[%zu]", p->name, k);
            continue;
        }
        const double std0 = (p->kind == PK_EMBED) ? 1.0 : sqrt(2.0 / (double)(p->shape[0] + p->shape[1]));
        const double want = std0 * factor;  // the embedding's: 0.9866
        // The relative standard error of a sample std is ~1/sqrt(2n): 0.28% at n = 65536,
        // 0.07% at 1M. 0.5% at 1M elements (7 standard errors) still tells the truncated
        // std from the untruncated one (1.35% apart); smaller tensors get 1.5% (5 s.e.).
        const double tol = p->numel >= (1u << 20) ? 0.005 : 0.015;
        cr_assert(fabs(sd / want - 1.0) < tol, "%s: std %.5f, want %.5f (tolerance %.1f%%)", p->name,
                  sd, want, 100 * tol);
        cr_assert(fabs(mean) < 5.0 * std0 / sqrt((double)p->numel), "%s: mean %g", p->name, mean);
        // Cut at exactly 3 std (float std times |z| <= 3); 1e-6 for the float product.
        cr_assert(mx <= 3.0 * (float)std0 * (1.0 + 1e-6), "%s: max |x| %.6f > 3 std %.6f", p->name,
                  mx, 3.0 * std0);
        cr_assert(mx > 2.9 * std0, "%s: max |x| %.4f: tails missing", p->name, mx);
    }
    // Padding is 0.
    size_t end = 0;
    for (int i = 0; i < l.n; i++) {
        for (size_t k = end; k < l.p[i].offset; k++) cr_assert_eq(x[k], 0.0f, "padding [%zu]", k);
        end = l.p[i].offset + l.p[i].numel;
    }
    for (size_t k = end; k < l.total; k++) cr_assert_eq(x[k], 0.0f, "tail padding [%zu]", k);
    free(x);
    param_layout_free(&l);
}

Test(model_init, deterministic_and_distinct) {
    const model_config_t c = {"tiny", 512, 64, 64, 2, 4, 192};
    param_layout_t l = param_layout_make(&c);
    const size_t n = l.total;
    float* a = malloc(n * sizeof(float));
    float* b = malloc(n * sizeof(float));
    model_init_params(&l, a, 7);
    model_init_params(&l, b, 7);
    cr_assert(memcmp(a, b, n * sizeof(float)) == 0, "same seed, different numbers");
    model_init_params(&l, b, 8);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += (a[i] == b[i] && a[i] != 0.0f && a[i] != 1.0f);
    cr_assert_eq(same, 0, "seeds 7 and 8 share %zu values", same);
    // Each parameter has its own stream: q and k of one layer (same shape) differ.
    const param_info_t* q = &l.p[param_index(&l, PK_Q, 0)];
    const param_info_t* k = &l.p[param_index(&l, PK_K, 0)];
    cr_assert(memcmp(a + q->offset, a + k->offset, q->numel * sizeof(float)) != 0);
    // Element i of parameter p depends only on (seed, p, i): a model with one more layer keeps
    // the numbers of the parameters it shares (same index and shape).
    model_config_t c3 = c;
    c3.n_layers = 3;
    param_layout_t l3 = param_layout_make(&c3);
    float* d = malloc(l3.total * sizeof(float));
    model_init_params(&l3, d, 7);
    for (int i = 0; i < l.n - 2; i++)  // embedding and layers (the final two move)
        cr_assert(memcmp(a + l.p[i].offset, d + l3.p[i].offset, l.p[i].numel * sizeof(float)) == 0,
                  "%s differs when a layer is added", l.p[i].name);
    free(a);
    free(b);
    free(d);
    param_layout_free(&l);
    param_layout_free(&l3);
}

// model_init_params_range (ZeRO-3's sharded construction): every slice is the full buffer's
// slice, bit for bit, where the cuts fall inside parameters, inside padding, at the end and
// past it (a padded buffer's tail is 0).
Test(model_init, range_slices_equal_the_full_buffer) {
    // C = 72, F = 200, V = 100: no size a multiple of 64, so there is padding between
    // parameters (after each norm weight, after the embedding) for cuts to fall into.
    const model_config_t c = {"odd", 100, 16, 72, 2, 4, 200};
    param_layout_t l = param_layout_make(&c);
    const size_t n = l.total, extra = 200;  // a padded buffer 200 elements longer
    size_t gaps = 0, end = 0;
    for (int i = 0; i < l.n; i++) gaps += l.p[i].offset > end, end = l.p[i].offset + l.p[i].numel;
    cr_assert(gaps >= 3, "the layout must have padding between parameters (%zu gaps)", gaps);
    float* full = calloc(n + extra, sizeof(float));
    float* part = malloc((n + extra) * sizeof(float));
    model_init_params(&l, full, 11);
    // Cut points: every parameter's first element and one past it, mid-parameter points, the
    // padding before a parameter, 0, n, n + extra; then slices between pseudo-random pairs.
    size_t cuts[256];
    int nc = 0;
    cuts[nc++] = 0, cuts[nc++] = n, cuts[nc++] = n + extra;
    for (int i = 0; i < l.n && nc < 250; i++) {
        const size_t o = l.p[i].offset;
        cuts[nc++] = o + 1;
        cuts[nc++] = o + l.p[i].numel / 2 + 3;
        if (o) cuts[nc++] = o - 1;
    }
    uint64_t x = 12345;
    for (int k = 0; k < 400; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t lo = cuts[(x >> 33) % nc], hi = cuts[(x >> 13) % nc];
        if (lo > hi) { const size_t t = lo; lo = hi; hi = t; }
        memset(part, 0xFF, (n + extra) * sizeof(float));  // poison: every element must be written
        model_init_params_range(&l, part, lo, hi, 11);
        cr_assert(memcmp(part, full + lo, (hi - lo) * sizeof(float)) == 0, "slice [%zu, %zu) differs from the full buffer", lo, hi);
        if (hi < n + extra) cr_assert_eq(((uint32_t*)part)[hi - lo], 0xFFFFFFFFu, "slice [%zu, %zu) wrote past its end", lo, hi);
    }
    // The whole buffer in one range; another seed differs.
    model_init_params_range(&l, part, 0, n, 11);
    cr_assert(memcmp(part, full, n * sizeof(float)) == 0);
    model_init_params_range(&l, part, 0, n, 12);
    cr_assert(memcmp(part, full, n * sizeof(float)) != 0, "the seed must matter");
    free(full);
    free(part);
    param_layout_free(&l);
}
