// tp_check: every tensor-parallel layer of tp.h against its unsplit self, forward and backward,
// on the ranks it is started with (the tensor-parallel size n = the world size).
//   scripts/mpirun.sh 3 build/09_tensor/tp_check
// Each rank computes the unsplit layer with common/ops_cpu.h on the same random data (a pure
// function of the seed) and compares its slice, or the group's sum, with it:
//   bitwise   where no sum is split: column-parallel outputs, row-parallel input gradients,
//             every weight gradient, the embedding, the heads' attention, the SwiGLU gate, the
//             sequence all-gather;
//   bounded   where a sum of n terms is cut over the ranks and its pieces added in another
//             order: |got − want| <= n · eps · Σ|terms| for each element. Each of the two fp32
//             sums of the same n products errs by at most (n − 1)·(eps/2)·Σ|terms| (recursive
//             summation, to first order), so their difference by at most (n − 1)·eps·Σ|terms|;
//             Σ|terms| is computed alongside (|A|·|B|ᵀ for a matmul).
// Sizes: B 2, T 12, d_model 48 in 12 heads of 4, d_ff 96, vocabulary 50: every n in 1..4
// divides heads, d_ff and T, and 50 is not a multiple of 3 or 4 (the last vocabulary shard is
// padded). --skip-norm-sum leaves out the sum of the RMSNorm weight gradient over the group
// under sequence parallelism, to show that the check sees it.
// --only a,b,... runs the checks of the layers named (each calls one layer of tp_layers.c and
// nothing else of this stage: its own test for the student who writes that layer); a backward
// alone reads the reference forward's output (the cross-entropy's lse), not the layer's. The
// names: col row embed_fwd embed_bwd ce_fwd ce_bwd attn ffn sp_allgather sp_reduce_scatter
// sp_norm, all of them by default, and sp_norm_sum (tp_model_sum_norm_grads on a model's
// gradient buffer; named only: tp_train's checks see it inside the model).
// Rank 0 prints one line per check and "tp_check: n ranks: K checks, W wrong"; exit 1 if any.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "09_tensor/tp.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/ops_cpu.h"
#include "common/rng.h"

enum { B = 2, T = 12, C = 48, NH = 12, HS = 4, F = 96, V = 50, N = B * T };

static comm_t* g_c;
static long long g_checks, g_wrong;

// The groups of checks --only can name; the default runs every one but the last.
static const char* const k_groups[] = {"col", "row", "embed_fwd", "embed_bwd", "ce_fwd", "ce_bwd", "attn", "ffn",
                                       "sp_allgather", "sp_reduce_scatter", "sp_norm", "sp_norm_sum"};
enum { N_GROUPS = sizeof k_groups / sizeof *k_groups, N_DEFAULT = N_GROUPS - 1 };
static int g_on[N_GROUPS];

static int on(const char* group) {
    for (int i = 0; i < N_GROUPS; i++)
        if (!strcmp(k_groups[i], group)) return g_on[i];
    DIE("tp_check: no group '%s'", group);
}
// --only's comma-separated names into g_on; 0, or -1 with the first unknown name in bad.
static int parse_only(const char* list, char* bad, size_t badlen) {
    if (!list || !*list) {
        for (int i = 0; i < N_DEFAULT; i++) g_on[i] = 1;
        return 0;
    }
    const char* p = list;
    for (;;) {
        const char* e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (int i = 0; i < N_GROUPS; i++)
            if (strlen(k_groups[i]) == len && !strncmp(k_groups[i], p, len)) g_on[i] = found = 1;
        if (!found) {
            snprintf(bad, badlen, "%.*s", (int)len, p);
            return -1;
        }
        if (!e) return 0;
        p = e + 1;
    }
}

static float* alloc_f(size_t n) {
    float* p = calloc(n ? n : 1, sizeof(float));
    if (!p) DIE("tp_check: out of memory");
    return p;
}
static void fill(float* x, size_t n, uint64_t seed, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(seed, i);
}
// |A| (rows, k) · |B| (cols, k)ᵀ: the Σ|terms| of each element of A·Bᵀ.
static void abs_matmul_t(float* out, const float* A, const float* Bm, int rows, int k, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0;
            for (int q = 0; q < k; q++) s += fabs((double)A[(size_t)i * k + q] * Bm[(size_t)j * k + q]);
            out[(size_t)i * cols + j] = (float)s;
        }
}
// |A| (rows, k) · |B| (k, cols).
static void abs_matmul(float* out, const float* A, const float* Bm, int rows, int k, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0;
            for (int q = 0; q < k; q++) s += fabs((double)A[(size_t)i * k + q] * Bm[(size_t)q * cols + j]);
            out[(size_t)i * cols + j] = (float)s;
        }
}

// One check's verdict on this rank, then the group's (a check is wrong if any rank found it so).
static void verdict(const char* name, int bad, const char* why) {
    if (bad) printf("rank %d: WRONG %s: %s\n", g_c->rank, name, why);
    long long b = bad;
    comm_host_allreduce_i64(g_c, &b, 1, COMM_MAX);
    g_checks++;
    if (b) g_wrong++;
    if (g_c->rank == 0) printf("%-44s %s\n", name, b ? "WRONG" : "ok");
    fflush(stdout);
}
static void check_bitwise(const char* name, const float* got, const float* want, size_t n) {
    char why[256] = "";
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            bad = 1;
            snprintf(why, sizeof why, "element %zu: %.9g, not bitwise %.9g", i, got[i], want[i]);
        }
    verdict(name, bad, why);
}
// |got − want| <= nterms · eps · bound[i] (bound NULL: tol alone), or <= tol[i] given directly.
static void check_bounded(const char* name, const float* got, const float* want, size_t n, const float* bound,
                          int nterms) {
    char why[256] = "";
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        const double tol = (double)nterms * FLT_EPSILON * bound[i];
        if (!(fabs((double)got[i] - want[i]) <= tol)) {
            bad = 1;
            snprintf(why, sizeof why, "element %zu: %.9g vs %.9g, beyond %d·eps·Σ|terms| = %.3g", i, got[i], want[i],
                     nterms, tol);
        }
    }
    verdict(name, bad, why);
}

int main(int argc, char** argv) {
    int skip_norm_sum = 0;
    double timeout = 0;
    const char* only = "";
    cli_opt_t opts[] = {
        {"only", CLI_STR, &only, "", "comma-separated groups of checks (col,row,embed_fwd,embed_bwd,ce_fwd,ce_bwd,attn,ffn,sp_allgather,sp_reduce_scatter,sp_norm,sp_norm_sum); empty: all but sp_norm_sum", NULL},
        {"skip-norm-sum", CLI_FLAG, &skip_norm_sum, "0", "under SP, do not sum the RMSNorm weight gradient over the group (the check must then find it wrong)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv, "Every tensor-parallel layer against its unsplit self (run under mpirun; n = the world size).",
                   opts, CLI_COUNT(opts));
    g_c = comm_init(COMM_MPI, comm_timeout_flag(timeout));
    comm_t* g = g_c;
    const int n = g->world, r = g->rank;
    char bad_group[64];
    if (parse_only(only, bad_group, sizeof bad_group) != 0)
        comm_refuse(g, "--only %s: no such group of checks; give a comma-separated list of col, row, embed_fwd, embed_bwd, ce_fwd, ce_bwd, attn, ffn, sp_allgather, sp_reduce_scatter, sp_norm, sp_norm_sum",
                    bad_group);
    model_config_t cfg = {"check", V, T, C, 1, NH, F};
    tp_dims_t d;
    char err[256];
    if (tp_dims_make(&cfg, n, r, &d, err, sizeof err) != 0) comm_refuse(g, "%s", err);
    if (T % n) comm_refuse(g, "%d ranks do not divide the check's sequence of %d", n, T);
    if (r == 0) printf("tp_check: %d ranks; B %d, T %d, d_model %d, %d heads, d_ff %d, vocabulary %d (%d rows a rank, %d valid on the last)\n",
                       n, B, T, C, NH, F, V, d.Vl, V - (n - 1) * d.Vl);
    const int Cl = d.Cl, Fl = d.Fl, Vl = d.Vl;
    float* x = alloc_f((size_t)N * F);
    float* Wf = alloc_f((size_t)F * F);
    float* dy = alloc_f((size_t)N * F);
    float* y = alloc_f((size_t)N * F);
    float* dx = alloc_f((size_t)N * F);
    float* dW = alloc_f((size_t)F * F);
    float* Wl = alloc_f((size_t)F * F);
    float* yl = alloc_f((size_t)N * F);
    float* dxl = alloc_f((size_t)N * F);
    float* dWl = alloc_f((size_t)F * F);
    float* want = alloc_f((size_t)F * F);
    float* bound = alloc_f((size_t)N * F);
    float* dyl = alloc_f((size_t)N * F);
    float* xl = alloc_f((size_t)N * F);

    // ---- column-parallel linear: W (F, C) split by output rows
    if (on("col")) {
    fill(x, (size_t)N * C, 1, 1.0f);
    fill(Wf, (size_t)F * C, 2, 0.2f);
    fill(dy, (size_t)N * F, 3, 1.0f);
    matmul_fwd_cpu(y, x, Wf, N, C, F);
    matmul_bwd_cpu(dx, dW, dy, x, Wf, N, C, F);
    memcpy(Wl, Wf + (size_t)r * Fl * C, (size_t)Fl * C * sizeof(float));
    tp_col_fwd(yl, x, Wl, N, C, Fl);
    tp_take_cols(want, y, N, F, r * Fl, Fl);
    check_bitwise("column-parallel forward (y slice)", yl, want, (size_t)N * Fl);
    tp_take_cols(dyl, dy, N, F, r * Fl, Fl);
    tp_col_bwd(g, dxl, dWl, dyl, x, Wl, N, C, Fl, 1);
    check_bitwise("column-parallel backward dW (rows)", dWl, dW + (size_t)r * Fl * C, (size_t)Fl * C);
    abs_matmul(bound, dy, Wf, N, F, C);  // dx = dy · W: F terms
    check_bounded("column-parallel backward dX (all-reduced)", dxl, dx, (size_t)N * C, bound, F);
    }

    // ---- row-parallel linear: W (C, F) split by input columns
    if (on("row")) {
    fill(x, (size_t)N * F, 4, 1.0f);
    fill(Wf, (size_t)C * F, 5, 0.2f);
    fill(dy, (size_t)N * C, 6, 1.0f);
    matmul_fwd_cpu(y, x, Wf, N, F, C);
    matmul_bwd_cpu(dx, dW, dy, x, Wf, N, F, C);
    tp_take_cols(xl, x, N, F, r * Fl, Fl);
    tp_take_cols(Wl, Wf, C, F, r * Fl, Fl);
    tp_row_fwd(g, yl, xl, Wl, N, Fl, C, 1);
    abs_matmul_t(bound, x, Wf, N, F, C);  // y = x · Wᵀ: F terms
    check_bounded("row-parallel forward y (all-reduced)", yl, y, (size_t)N * C, bound, F);
    tp_row_bwd(dxl, dWl, dy, xl, Wl, N, Fl, C);
    tp_take_cols(want, dx, N, F, r * Fl, Fl);
    check_bitwise("row-parallel backward dX (slice, no comm)", dxl, want, (size_t)N * Fl);
    tp_take_cols(want, dW, C, F, r * Fl, Fl);
    check_bitwise("row-parallel backward dW (columns)", dWl, want, (size_t)C * Fl);
    }

    // ---- vocabulary-parallel embedding (V = 50: the last shard padded)
    int32_t tok[N], tgt[N];
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)rng_below(7, (uint64_t)i, V);
        tgt[i] = (int32_t)rng_below(8, (uint64_t)i, V);
    }
    tgt[0] = V - 1;  // a target in the padded shard
    float* E = alloc_f((size_t)V * C);
    float* El = alloc_f((size_t)Vl * C);
    fill(E, (size_t)V * C, 9, 1.0f);
    memcpy(El, E + (size_t)d.v0 * C, (size_t)d.Vvalid * C * sizeof(float));
    if (on("embed_fwd")) {
        embedding_fwd_cpu(y, tok, E, N, C);
        tp_embed_fwd(g, yl, tok, El, &d, N, 1);
        check_bitwise("vocab-parallel embedding forward", yl, y, (size_t)N * C);
    }
    if (on("embed_bwd")) {
        fill(dy, (size_t)N * C, 10, 1.0f);
        embedding_bwd_cpu(dW, dy, tok, N, C, V);
        tp_embed_bwd(dWl, dy, tok, &d, N);
        memset(want, 0, (size_t)Vl * C * sizeof(float));
        memcpy(want, dW + (size_t)d.v0 * C, (size_t)d.Vvalid * C * sizeof(float));
        check_bitwise("vocab-parallel embedding backward (rows)", dWl, want, (size_t)Vl * C);
    }

    // ---- vocabulary-parallel cross-entropy: logits never gathered
    if (on("ce_fwd") || on("ce_bwd")) {
        float* z = alloc_f((size_t)N * V);
        float* zl = alloc_f((size_t)N * Vl);
        float* lse = alloc_f(N);
        float* lsel = alloc_f(N);
        float* dz = alloc_f((size_t)N * V);
        float* dzl = alloc_f((size_t)N * Vl);
        fill(z, (size_t)N * V, 11, 3.0f);
        for (int i = 0; i < N; i++)
            for (int v = 0; v < Vl; v++) zl[(size_t)i * Vl + v] = v < d.Vvalid ? z[(size_t)i * V + d.v0 + v] : 1e30f;  // garbage in masked columns
        const float loss = cross_entropy_fwd_cpu(lse, z, tgt, N, V);
        // lse = m + log s, s a sum of V positive terms reordered: |Δs| <= (V − 1)·eps·s, so
        // |Δ log s| <= V·eps; the final add and log round once more each (2·eps·|lse|):
        // tolerance (V + 2)·eps·max(1, |lse|) for lse and for the mean loss.
        float lmax = 1;
        for (int i = 0; i < N; i++) {
            bound[i] = fabsf(lse[i]) > 1 ? fabsf(lse[i]) : 1.0f;
            lmax = bound[i] > lmax ? bound[i] : lmax;
        }
        if (on("ce_fwd")) {
            const float loss_l = tp_ce_fwd(g, lsel, zl, tgt, &d, N);
            check_bounded("vocab-parallel cross-entropy lse", lsel, lse, N, bound, V + 2);
            check_bounded("vocab-parallel cross-entropy loss", &loss_l, &loss, 1, &lmax, V + 2);
        } else {
            memcpy(lsel, lse, N * sizeof(float));  // the backward alone: the reference forward's lse
        }
        cross_entropy_bwd_cpu(dz, z, lse, tgt, N, V);
        if (on("ce_bwd")) tp_ce_bwd(dzl, zl, lsel, tgt, &d, N);
        // d = (exp(z − lse) − onehot)/N: exp's argument moves by |Δlse| (a relative change of
        // p), expf and the products round a few times more: tolerance per element
        // (V + 6)·eps·max(1,|lse|)·(p + |d|) with p = exp(z − lse).
        float* wl = alloc_f((size_t)N * Vl);
        float* bl = alloc_f((size_t)N * Vl);
        int masked_bad = 0;
        for (int i = 0; i < N; i++)
            for (int v = 0; v < Vl; v++) {
                const size_t k = (size_t)i * Vl + v;
                if (v >= d.Vvalid) {
                    wl[k] = 0;
                    bl[k] = 0;
                    masked_bad |= dzl[k] != 0.0f;
                    continue;
                }
                wl[k] = dz[(size_t)i * V + d.v0 + v];
                const float p = expf(z[(size_t)i * V + d.v0 + v] - lse[i]);
                bl[k] = bound[i] * (p + fabsf(wl[k]) * N) / N;
            }
        if (on("ce_bwd")) {
            check_bounded("vocab-parallel cross-entropy dlogits", dzl, wl, (size_t)N * Vl, bl, V + 6);
            verdict("vocab-parallel padding: zero gradient", masked_bad, "a masked column got a gradient");
        }
        free(z), free(zl), free(lse), free(lsel), free(dz), free(dzl), free(wl), free(bl);
    }

    // ---- attention split by heads; the SwiGLU FFN split by d_ff
    if (on("attn") || on("ffn")) {
        float* cs = alloc_f((size_t)T * HS / 2);
        float* sn = alloc_f((size_t)T * HS / 2);
        rope_tables_cpu(cs, sn, T, HS);
        float* h = alloc_f((size_t)N * C);
        float* Wqkv = alloc_f((size_t)3 * C * C);
        float* Wo = alloc_f((size_t)C * C);
        fill(h, (size_t)N * C, 12, 1.0f);
        fill(Wqkv, (size_t)3 * C * C, 13, 0.3f);
        fill(Wo, (size_t)C * C, 14, 0.2f);
        fill(dy, (size_t)N * C, 15, 1.0f);
        // unsplit, as common/model_cpu.c
        float* qkv = alloc_f((size_t)N * 3 * C);
        float* P = alloc_f((size_t)B * NH * T * T);
        float* atty = alloc_f((size_t)N * C);
        float* yo = alloc_f((size_t)N * C);
        matmul_fwd_cpu(qkv, h, Wqkv, N, C, 3 * C);
        rope_fwd_cpu(qkv, B, T, NH, HS, 3 * C, cs, sn);
        rope_fwd_cpu(qkv + C, B, T, NH, HS, 3 * C, cs, sn);
        attention_fwd_cpu(atty, P, qkv, B, T, C, NH);
        matmul_fwd_cpu(yo, atty, Wo, N, C, C);
        float* datty = alloc_f((size_t)N * C);
        float* dqkv = alloc_f((size_t)N * 3 * C);
        float* dWo = alloc_f((size_t)C * C);
        float* dWqkv = alloc_f((size_t)3 * C * C);
        float* dh = alloc_f((size_t)N * C);
        matmul_bwd_cpu(datty, dWo, dy, atty, Wo, N, C, C);
        attention_bwd_cpu(dqkv, datty, qkv, P, B, T, C, NH);
        rope_bwd_cpu(dqkv, B, T, NH, HS, 3 * C, cs, sn);
        rope_bwd_cpu(dqkv + C, B, T, NH, HS, 3 * C, cs, sn);
        matmul_bwd_cpu(dh, dWqkv, dqkv, h, Wqkv, N, C, 3 * C);
        // this rank's heads
        float* Wqkv_l = alloc_f((size_t)3 * Cl * C);
        float* Wo_l = alloc_f((size_t)C * Cl);
        for (int p = 0; p < 3; p++)
            memcpy(Wqkv_l + (size_t)p * Cl * C, Wqkv + ((size_t)p * C + (size_t)r * Cl) * C, (size_t)Cl * C * sizeof(float));
        tp_take_cols(Wo_l, Wo, C, C, r * Cl, Cl);
        float* qkv_l = alloc_f((size_t)N * 3 * Cl);
        float* P_l = alloc_f((size_t)B * d.nh * T * T);
        float* atty_l = alloc_f((size_t)N * Cl);
        float* yp = alloc_f((size_t)N * C);
        tp_attn_fwd(&d, yp, qkv_l, P_l, atty_l, h, Wqkv_l, Wo_l, cs, sn, B, T);
        float* wq = alloc_f((size_t)N * 3 * C);
        for (int i = 0; i < N; i++)
            for (int p = 0; p < 3; p++)
                memcpy(wq + (size_t)i * 3 * Cl + (size_t)p * Cl, qkv + (size_t)i * 3 * C + (size_t)p * C + (size_t)r * Cl,
                       (size_t)Cl * sizeof(float));
        if (on("attn")) check_bitwise("attention by heads: q|k|v (rotated) slice", qkv_l, wq, (size_t)N * 3 * Cl);
        tp_take_cols(want, atty, N, C, r * Cl, Cl);
        if (on("attn")) check_bitwise("attention by heads: attention output slice", atty_l, want, (size_t)N * Cl);
        comm_allreduce(g, yp, yp, (size_t)N * C, COMM_F32, COMM_SUM, NULL);
        abs_matmul_t(bound, atty, Wo, N, C, C);
        if (on("attn")) check_bounded("attention by heads: forward (all-reduce #1)", yp, yo, (size_t)N * C, bound, C);
        float* dWqkv_l = alloc_f((size_t)3 * Cl * C);
        float* dWo_l = alloc_f((size_t)C * Cl);
        float* datty_l = alloc_f((size_t)N * Cl);
        float* dqkv_l = alloc_f((size_t)N * 3 * Cl);
        float* dhp = alloc_f((size_t)N * C);
        tp_attn_bwd(&d, dhp, dWqkv_l, dWo_l, datty_l, dqkv_l, dy, h, qkv_l, P_l, atty_l, Wqkv_l, Wo_l, cs, sn, B, T);
        tp_take_cols(want, dWo, C, C, r * Cl, Cl);
        if (on("attn")) check_bitwise("attention by heads: dWo (columns)", dWo_l, want, (size_t)C * Cl);
        for (int p = 0; p < 3; p++)
            memcpy(want + (size_t)p * Cl * C, dWqkv + ((size_t)p * C + (size_t)r * Cl) * C, (size_t)Cl * C * sizeof(float));
        if (on("attn")) check_bitwise("attention by heads: dWq|dWk|dWv (rows)", dWqkv_l, want, (size_t)3 * Cl * C);
        comm_allreduce(g, dhp, dhp, (size_t)N * C, COMM_F32, COMM_SUM, NULL);
        abs_matmul(bound, dqkv, Wqkv, N, 3 * C, C);  // dh = dqkv · Wqkv: 3C terms
        if (on("attn")) check_bounded("attention by heads: backward dh (all-reduce #1)", dhp, dh, (size_t)N * C, bound, 3 * C);

        // FFN
        float* W13 = alloc_f((size_t)2 * F * C);
        float* W2 = alloc_f((size_t)C * F);
        fill(W13, (size_t)2 * F * C, 16, 0.2f);
        fill(W2, (size_t)C * F, 17, 0.2f);
        float* h13 = alloc_f((size_t)N * 2 * F);
        float* gt = alloc_f((size_t)N * F);
        matmul_fwd_cpu(h13, h, W13, N, C, 2 * F);
        swiglu_fwd_cpu(gt, h13, N, F);
        matmul_fwd_cpu(yo, gt, W2, N, F, C);
        float* dgt = alloc_f((size_t)N * F);
        float* dh13 = alloc_f((size_t)N * 2 * F);
        float* dW13 = alloc_f((size_t)2 * F * C);
        float* dW2 = alloc_f((size_t)C * F);
        matmul_bwd_cpu(dgt, dW2, dy, gt, W2, N, F, C);
        swiglu_bwd_cpu(dh13, dgt, h13, N, F);
        matmul_bwd_cpu(dh, dW13, dh13, h, W13, N, C, 2 * F);
        float* W13_l = alloc_f((size_t)2 * Fl * C);
        float* W2_l = alloc_f((size_t)C * Fl);
        for (int p = 0; p < 2; p++)
            memcpy(W13_l + (size_t)p * Fl * C, W13 + ((size_t)p * F + (size_t)r * Fl) * C, (size_t)Fl * C * sizeof(float));
        tp_take_cols(W2_l, W2, C, F, r * Fl, Fl);
        float* h13_l = alloc_f((size_t)N * 2 * Fl);
        float* gt_l = alloc_f((size_t)N * Fl);
        tp_ffn_fwd(&d, yp, h13_l, gt_l, h, W13_l, W2_l, N);
        tp_take_cols(want, gt, N, F, r * Fl, Fl);
        if (on("ffn")) check_bitwise("FFN by d_ff: SwiGLU gate slice", gt_l, want, (size_t)N * Fl);
        comm_allreduce(g, yp, yp, (size_t)N * C, COMM_F32, COMM_SUM, NULL);
        abs_matmul_t(bound, gt, W2, N, F, C);
        if (on("ffn")) check_bounded("FFN by d_ff: forward (all-reduce #2)", yp, yo, (size_t)N * C, bound, F);
        float* dW13_l = alloc_f((size_t)2 * Fl * C);
        float* dW2_l = alloc_f((size_t)C * Fl);
        float* dgt_l = alloc_f((size_t)N * Fl);
        float* dh13_l = alloc_f((size_t)N * 2 * Fl);
        tp_ffn_bwd(&d, dhp, dW13_l, dW2_l, dgt_l, dh13_l, dy, h, h13_l, gt_l, W13_l, W2_l, N);
        tp_take_cols(want, dW2, C, F, r * Fl, Fl);
        if (on("ffn")) check_bitwise("FFN by d_ff: dW2 (columns)", dW2_l, want, (size_t)C * Fl);
        for (int p = 0; p < 2; p++)
            memcpy(want + (size_t)p * Fl * C, dW13 + ((size_t)p * F + (size_t)r * Fl) * C, (size_t)Fl * C * sizeof(float));
        if (on("ffn")) check_bitwise("FFN by d_ff: dW1|dW3 (rows)", dW13_l, want, (size_t)2 * Fl * C);
        comm_allreduce(g, dhp, dhp, (size_t)N * C, COMM_F32, COMM_SUM, NULL);
        abs_matmul(bound, dh13, W13, N, 2 * F, C);
        if (on("ffn")) check_bounded("FFN by d_ff: backward dh (all-reduce #2)", dhp, dh, (size_t)N * C, bound, 2 * F);
        free(cs), free(sn), free(h), free(Wqkv), free(Wo), free(qkv), free(P), free(atty), free(yo), free(datty);
        free(dqkv), free(dWo), free(dWqkv), free(dh), free(Wqkv_l), free(Wo_l), free(qkv_l), free(P_l), free(atty_l);
        free(yp), free(wq), free(dWqkv_l), free(dWo_l), free(datty_l), free(dqkv_l), free(dhp), free(W13), free(W2);
        free(h13), free(gt), free(dgt), free(dh13), free(dW13), free(dW2), free(W13_l), free(W2_l), free(h13_l);
        free(gt_l), free(dW13_l), free(dW2_l), free(dgt_l), free(dh13_l);
    }

    // ---- sequence parallelism: all-gather, reduce-scatter, the norm on local rows
    if (on("sp_allgather") || on("sp_reduce_scatter") || on("sp_norm")) {
        const int Tl = T / n, Nl = B * Tl;
        float* full = alloc_f((size_t)N * C);
        float* loc = alloc_f((size_t)Nl * C);
        float* got = alloc_f((size_t)N * C);
        float* scr = alloc_f((size_t)N * C);
        fill(full, (size_t)N * C, 20, 1.0f);
        for (int b = 0; b < B; b++)
            memcpy(loc + (size_t)b * Tl * C, full + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
        if (on("sp_allgather")) {
            tp_sp_allgather(g, got, loc, B, T, C, scr);
            check_bitwise("SP all-gather along the sequence", got, full, (size_t)N * C);
        }
        // reduce-scatter of rank-dependent partials: the serial sum over ranks, n terms
        float* sum = alloc_f((size_t)N * C);
        float* ab = alloc_f((size_t)N * C);
        for (int k = 0; k < n; k++) {
            fill(got, (size_t)N * C, 100 + (uint64_t)k, 1.0f);
            for (size_t i = 0; i < (size_t)N * C; i++) sum[i] += got[i], ab[i] += fabsf(got[i]);
        }
        fill(got, (size_t)N * C, 100 + (uint64_t)r, 1.0f);
        if (on("sp_reduce_scatter")) tp_sp_reduce_scatter(g, loc, got, B, T, C, scr);
        float* wl = alloc_f((size_t)Nl * C);
        float* bl = alloc_f((size_t)Nl * C);
        for (int b = 0; b < B; b++) {
            memcpy(wl + (size_t)b * Tl * C, sum + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
            memcpy(bl + (size_t)b * Tl * C, ab + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
        }
        if (on("sp_reduce_scatter")) check_bounded("SP reduce-scatter along the sequence", loc, wl, (size_t)Nl * C, bl, n);
        // RMSNorm on the local rows; its weight gradient summed over the group.
        float* w = alloc_f(C);
        float* rs = alloc_f(N);
        float* o = alloc_f((size_t)N * C);
        float* dxf = alloc_f((size_t)N * C);
        float* dwf = alloc_f(C);
        fill(w, C, 21, 1.0f);
        fill(dy, (size_t)N * C, 22, 1.0f);
        rmsnorm_fwd_cpu(o, rs, full, w, N, C);
        rmsnorm_bwd_cpu(dxf, dwf, dy, full, w, rs, N, C);
        float* xl2 = alloc_f((size_t)Nl * C);
        float* dyl2 = alloc_f((size_t)Nl * C);
        float* dxl2 = alloc_f((size_t)Nl * C);
        float* dwl = alloc_f(C);
        for (int b = 0; b < B; b++) {
            memcpy(xl2 + (size_t)b * Tl * C, full + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
            memcpy(dyl2 + (size_t)b * Tl * C, dy + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
        }
        float* rsl = alloc_f(Nl);
        float* ol = alloc_f((size_t)Nl * C);
        rmsnorm_fwd_cpu(ol, rsl, xl2, w, Nl, C);
        rmsnorm_bwd_cpu(dxl2, dwl, dyl2, xl2, w, rsl, Nl, C);
        float* dw0 = alloc_f(C);
        if (on("sp_norm")) {
            if (!skip_norm_sum) comm_allreduce(g, dwl, dwl, C, COMM_F32, COMM_SUM, NULL);
            // equal on every rank of the group: rank 0's copy against this rank's, bit for bit
            comm_broadcast(g, dwl, dw0, C, COMM_F32, 0, NULL);
            check_bitwise("SP norm weight gradient: equal across the group", dwl, dw0, C);
            // and equal to one process's: N rows' products summed in another order (N terms)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int i = 0; i < N; i++) s += fabs((double)dy[(size_t)i * C + c] * full[(size_t)i * C + c] * rs[i]);
                bl[c] = (float)s;
            }
            check_bounded("SP norm weight gradient: equal to one process's", dwl, dwf, C, bl, N);
            for (int b = 0; b < B; b++)
                memcpy(wl + (size_t)b * Tl * C, dxf + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
            check_bitwise("SP norm input gradient (local rows)", dxl2, wl, (size_t)Nl * C);
        }
        free(full), free(loc), free(got), free(scr), free(sum), free(ab), free(wl), free(bl), free(w), free(rs), free(o);
        free(dxf), free(dwf), free(xl2), free(dyl2), free(dxl2), free(dwl), free(dw0), free(rsl), free(ol);
    }

    // ---- the model's sum of the replicated (RMSNorm) weight gradients under SP
    if (on("sp_norm_sum")) {
        // A one-block model of the check's sizes; its gradient buffer filled with rank-dependent
        // values: the replicated entries must become the group's sum (n terms, reordered:
        // bounded), equal on every rank, and every sharded entry stay as it was (bitwise).
        tp_model_t m;
        tp_model_create(&m, g, &cfg, B, T, TP_SP, 1);
        float* keep = alloc_f(m.total);
        size_t nrepl = 0;
        for (int i = 0; i < m.layout.n; i++)
            if (m.p[i].split == TP_REPL) nrepl += m.p[i].numel;
        float* rsum = alloc_f(nrepl);
        float* rabs = alloc_f(nrepl);
        float* rgot = alloc_f(nrepl);
        float* rgot0 = alloc_f(nrepl);
        fill(m.grads, m.total, 200 + (uint64_t)r, 1.0f);
        memcpy(keep, m.grads, m.total * sizeof(float));
        size_t k = 0;
        for (int i = 0; i < m.layout.n; i++) {
            const tp_param_t* e = &m.p[i];
            if (e->split != TP_REPL) continue;
            for (size_t j = 0; j < e->numel; j++, k++) {
                double s = 0, sa = 0;
                for (int q = 0; q < n; q++) {
                    const float v = rng_normal(200 + (uint64_t)q, e->off + j);  // rank q's value
                    s += v, sa += fabsf(v);
                }
                rsum[k] = (float)s, rabs[k] = (float)sa;
            }
        }
        tp_model_sum_norm_grads(&m);
        int changed = 0;
        k = 0;
        for (int i = 0; i < m.layout.n; i++) {
            const tp_param_t* e = &m.p[i];
            if (e->split == TP_REPL) {
                memcpy(rgot + k, m.grads + e->off, e->numel * sizeof(float));
                k += e->numel;
            } else if (memcmp(m.grads + e->off, keep + e->off, e->numel * sizeof(float)) != 0) {
                changed = 1;
            }
        }
        check_bounded("SP norm-weight gradient sum: the group's sum", rgot, rsum, nrepl, rabs, n);
        comm_broadcast(g, rgot, rgot0, nrepl, COMM_F32, 0, NULL);
        check_bitwise("SP norm-weight gradient sum: equal across the group", rgot, rgot0, nrepl);
        verdict("SP norm-weight gradient sum: sharded gradients untouched", changed,
                "a gradient of a split parameter changed");
        free(keep), free(rsum), free(rabs), free(rgot), free(rgot0);
        tp_model_destroy(&m);
    }

    if (r == 0) printf("tp_check: %d ranks: %lld checks, %lld wrong\n", n, g_checks, g_wrong);
    free(x), free(Wf), free(dy), free(y), free(dx), free(dW), free(Wl), free(yl), free(dxl), free(dWl), free(want);
    free(bound), free(dyl), free(xl), free(E), free(El);
    const int st = g_wrong ? 1 : 0;
    comm_destroy(g, 1);
    return st;
}
