// The partitioner (partition.h): contiguous block ranges per stage that minimise the slowest
// stage, by dynamic programming over (stages, blocks). L ≤ a few hundred, so O(S·L²) is nothing.
#include "08_pipeline/partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

double partition_block_flops(const model_config_t* c, int B, int T) {
    const double C = c->d_model, F = c->d_ff, BT = (double)B * T;
    return BT * (8.0 * C * C + 6.0 * C * F) + 4.0 * (double)B * T * T * C;
}
double partition_head_flops(const model_config_t* c, int B, int T) {
    return (double)B * T * 2.0 * c->d_model * c->vocab;
}
double partition_embed_flops(const model_config_t* c, int B, int T) {
    (void)c, (void)B, (void)T;
    return 0.0;  // a lookup: see partition.h
}

static int alloc_out(partition_t* out, int S, int L) {
    memset(out, 0, sizeof *out);
    out->S = S;
    out->L = L;
    out->l0 = calloc((size_t)S, sizeof(int));
    out->l1 = calloc((size_t)S, sizeof(int));
    out->cost = calloc((size_t)S, sizeof(double));
    if (!out->l0 || !out->l1 || !out->cost) DIE("out of host memory");
    return 0;
}

static void finish(partition_t* out, const double* block_cost, double embed, double head) {
    double mx = 0, sum = 0;
    for (int s = 0; s < out->S; s++) {
        double c = (s == 0 ? embed : 0) + (s == out->S - 1 ? head : 0);
        for (int l = out->l0[s]; l < out->l1[s]; l++) c += block_cost[l];
        out->cost[s] = c;
        mx = c > mx ? c : mx;
        sum += c;
    }
    out->imbalance = sum > 0 ? mx / (sum / out->S) : 1.0;
}

int partition_balance(int L, const double* block_cost, double embed, double head, int S,
                      int min_blocks, partition_t* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (S < 1 || L < 0 || min_blocks < 0) {
        snprintf(err, errlen, "stages %d, blocks %d, min blocks %d: need stages >= 1, the others >= 0", S, L, min_blocks);
        return -1;
    }
    if ((long long)S * min_blocks > L) {
        snprintf(err, errlen, "%d blocks cannot give %d stages %d block%s each (need at least %lld layers)", L, S,
                 min_blocks, min_blocks == 1 ? "" : "s", (long long)S * min_blocks);
        return -1;
    }
    for (int l = 0; l < L; l++)
        if (!(block_cost[l] >= 0) || !isfinite(block_cost[l])) {
            snprintf(err, errlen, "block %d has cost %g (must be finite and >= 0)", l, block_cost[l]);
            return -1;
        }
    if (!(embed >= 0) || !(head >= 0) || !isfinite(embed) || !isfinite(head)) {
        snprintf(err, errlen, "embedding cost %g, head cost %g (must be finite and >= 0)", embed, head);
        return -1;
    }
    // pre[j] = cost of blocks [0, j). Stage cost of [i, j) as stage s:
    double* pre = calloc((size_t)L + 1, sizeof(double));
    // mx[s][j]: the smallest max cost of stages 0..s covering blocks [0, j); then sq[s][j]: the
    // smallest Σ cost² among splits whose max stays within that optimum (pass 2).
    const size_t W = (size_t)L + 1;
    double* mx = malloc((size_t)S * W * sizeof(double));
    double* sq = malloc((size_t)S * W * sizeof(double));
    int* arg = malloc((size_t)S * W * sizeof(int));
    if (!pre || !mx || !sq || !arg) DIE("out of host memory");
    for (int l = 0; l < L; l++) pre[l + 1] = pre[l] + block_cost[l];
#define STAGE_COST(s, i, j) (pre[j] - pre[i] + ((s) == 0 ? embed : 0) + ((s) == S - 1 ? head : 0))
    for (int pass = 0; pass < 2; pass++) {
        // Pass 0 finds the optimum max M; pass 1 minimises Σ cost² subject to max <= M (a
        // relative slack of 1e-12 absorbs the rounding of the prefix sums).
        const double M = pass ? mx[(size_t)(S - 1) * W + L] * (1 + 1e-12) : 0;
        for (int s = 0; s < S; s++)
            for (int j = 0; j <= L; j++) {
                double best = INFINITY;
                int bi = -1;
                // The last stage s takes blocks [i, j): stage 0 starts at 0, and stages 0..s-1
                // before it need min_blocks each.
                const int ilo = s == 0 ? 0 : min_blocks * s, ihi = s == 0 ? 0 : j - min_blocks;
                for (int i = ilo; i <= ihi; i++) {
                    if (j - i < min_blocks) continue;
                    const double c = STAGE_COST(s, i, j);
                    const double before = s == 0 ? 0 : (pass ? sq : mx)[(size_t)(s - 1) * W + i];
                    if (!isfinite(before)) continue;  // no valid split of [0, i) into s stages
                    double v;
                    if (pass == 0) {
                        v = c > before ? c : before;
                    } else {
                        if (c > M) continue;
                        v = before + c * c;
                    }
                    if (v < best) { best = v; bi = i; }
                }
                (pass ? sq : mx)[(size_t)s * W + j] = best;
                if (pass) arg[(size_t)s * W + j] = bi;
            }
    }
#undef STAGE_COST
    alloc_out(out, S, L);
    int j = L;
    for (int s = S - 1; s >= 0; s--) {
        const int i = arg[(size_t)s * W + j];
        if (i < 0) DIE("partition_balance: no split found (S %d, L %d)", S, L);  // cannot happen
        out->l0[s] = i;
        out->l1[s] = j;
        j = i;
    }
    finish(out, block_cost, embed, head);
    free(pre);
    free(mx);
    free(sq);
    free(arg);
    return 0;
}

static double* model_block_costs(const model_config_t* c, int B, int T) {
    double* bc = malloc((size_t)(c->n_layers > 0 ? c->n_layers : 1) * sizeof(double));
    if (!bc) DIE("out of host memory");
    for (int l = 0; l < c->n_layers; l++) bc[l] = partition_block_flops(c, B, T);
    return bc;
}

int partition_model(const model_config_t* c, int B, int T, int S, partition_t* out, char* err, size_t errlen) {
    double* bc = model_block_costs(c, B, T);
    int rc = partition_balance(c->n_layers, bc, partition_embed_flops(c, B, T), partition_head_flops(c, B, T), S, 1,
                               out, err, errlen);
    free(bc);
    return rc;
}

int partition_even(const model_config_t* c, int B, int T, int S, partition_t* out, char* err, size_t errlen) {
    const int L = c->n_layers;
    if (S < 1 || L < S) {
        snprintf(err, errlen, "%d blocks cannot give %d stages a block each (need at least %d layers)", L, S, S);
        memset(out, 0, sizeof *out);
        return -1;
    }
    alloc_out(out, S, L);
    for (int s = 0, l = 0; s < S; s++) {
        out->l0[s] = l;
        l += L / S + (s < L % S);
        out->l1[s] = l;
    }
    double* bc = model_block_costs(c, B, T);
    finish(out, bc, partition_embed_flops(c, B, T), partition_head_flops(c, B, T));
    free(bc);
    return 0;
}

void partition_free(partition_t* p) {
    free(p->l0);
    free(p->l1);
    free(p->cost);
    memset(p, 0, sizeof *p);
}

model_range_t partition_range(const partition_t* p, int s) {
    model_range_t r = {p->l0[s], p->l1[s], s == 0, s == p->S - 1};
    return r;
}

void partition_format(const partition_t* p, char* buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int s = 0; s < p->S && n < len; s++)
        n += (size_t)snprintf(buf + n, len - n, "%s[%d,%d)%s%s", s ? " " : "", p->l0[s], p->l1[s],
                              s == 0 ? "+emb" : "", s == p->S - 1 ? "+head" : "");
    if (n < len) snprintf(buf + n, len - n, "  imbalance %.3f", p->imbalance);
}
