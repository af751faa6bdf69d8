// The partitioner (partition.h): the cost model adds up to the model's FLOPs, the dynamic
// programme finds the best split (checked against brute force over every split), the head's
// weight moves blocks off the last stage, and bad requests are refused with a reason.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "08_pipeline/partition.h"
#include "common/rng.h"
#include "tests/harness.h"

static double stage_cost(const double* bc, int i, int j, int s, int S, double emb, double head) {
    double c = (s == 0 ? emb : 0) + (s == S - 1 ? head : 0);
    for (int l = i; l < j; l++) c += bc[l];
    return c;
}

// Smallest max stage cost over every split of L blocks into S ranges of >= mb blocks each.
static double brute_best(const double* bc, int L, int S, int mb, double emb, double head, int s, int i, double cur) {
    if (s == S - 1) {
        if (L - i < mb) return INFINITY;
        const double c = stage_cost(bc, i, L, s, S, emb, head);
        return c > cur ? c : cur;
    }
    double best = INFINITY;
    for (int j = i + mb; j <= L; j++) {
        const double c = stage_cost(bc, i, j, s, S, emb, head);
        const double v = brute_best(bc, L, S, mb, emb, head, s + 1, j, c > cur ? c : cur);
        best = v < best ? v : best;
    }
    return best;
}

Test(partition, stage_costs_add_up_to_the_model_flops) {
    const char* sizes[] = {"tiny", "small", "xl"};
    for (int k = 0; k < 3; k++) {
        model_config_t c;
        cr_assert_eq(model_config_by_name(sizes[k], 256, &c), 0);
        partition_t p;
        char err[256];
        const int S = c.n_layers >= 4 ? 4 : 2;
        cr_assert_eq(partition_model(&c, 3, 256, S, &p, err, sizeof err), 0, "%s", err);
        double sum = 0;
        for (int s = 0; s < S; s++) sum += p.cost[s];
        // Sums of a few dozen doubles of magnitude 1e12: relative rounding far below 1e-12.
        const double want = model_forward_flops(&c, 3, 256);
        cr_assert(fabs(sum - want) <= 1e-12 * want, "%s: stages add up to %.17g, the model is %.17g", sizes[k], sum, want);
        cr_assert_eq(p.l0[0], 0);
        cr_assert_eq(p.l1[S - 1], c.n_layers);
        for (int s = 0; s + 1 < S; s++) cr_assert_eq(p.l1[s], p.l0[s + 1], "stages must be contiguous");
        partition_free(&p);
    }
}

Test(partition, uniform_blocks_split_evenly) {
    double bc[12];
    for (int l = 0; l < 12; l++) bc[l] = 1;
    partition_t p;
    char err[256];
    cr_assert_eq(partition_balance(12, bc, 0, 0, 4, 1, &p, err, sizeof err), 0, "%s", err);
    for (int s = 0; s < 4; s++) cr_assert_eq(p.l1[s] - p.l0[s], 3, "stage %d has %d blocks", s, p.l1[s] - p.l0[s]);
    cr_assert_float_eq(p.imbalance, 1.0, 1e-15);
    partition_free(&p);
}

// A head worth 3 blocks, 9 blocks, 4 stages: the last stage keeps one block (the minimum) and
// the first three share the other eight as 3, 3, 2 — max 4 = 1 + 3, imbalance 4 / 3.
Test(partition, a_heavy_head_moves_blocks_off_the_last_stage) {
    double bc[9];
    for (int l = 0; l < 9; l++) bc[l] = 1;
    partition_t p;
    char err[256];
    cr_assert_eq(partition_balance(9, bc, 0, 3, 4, 1, &p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(p.l1[3] - p.l0[3], 1, "the head's stage has %d blocks", p.l1[3] - p.l0[3]);
    cr_assert_float_eq(p.cost[3], 4.0, 1e-15);
    cr_assert_float_eq(p.imbalance, 4.0 / 3.0, 1e-15);
    int total = 0;
    for (int s = 0; s < 3; s++) total += p.l1[s] - p.l0[s];
    cr_assert_eq(total, 8);
    partition_free(&p);
    // With empty stages allowed (min_blocks 0) the head stands alone: max 3, mean 3.
    cr_assert_eq(partition_balance(9, bc, 0, 3, 4, 0, &p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(p.l1[3] - p.l0[3], 0);
    cr_assert_float_eq(p.imbalance, 1.0, 1e-15);
    partition_free(&p);
}

// The tiny model's head is about 0.6 of a block at context 16 (2CV = 65536 FLOPs a token
// against 8C² + 6CF + 4TC = 110592): whatever L and S, the balanced split is never worse than
// the even one (the even split is one of the candidates the programme compares).
Test(partition, balanced_is_never_worse_than_even) {
    model_config_t c;
    cr_assert_eq(model_config_by_name("tiny", 16, &c), 0);
    char err[256];
    for (int L = 4; L <= 13; L++)
        for (int S = 1; S <= 4; S++) {
            c.n_layers = L;
            partition_t b, e;
            cr_assert_eq(partition_model(&c, 2, 16, S, &b, err, sizeof err), 0, "%s", err);
            cr_assert_eq(partition_even(&c, 2, 16, S, &e, err, sizeof err), 0, "%s", err);
            cr_assert(b.imbalance <= e.imbalance * (1 + 1e-12), "L %d S %d: balanced %.6f > even %.6f", L, S,
                      b.imbalance, e.imbalance);
            partition_free(&b);
            partition_free(&e);
        }
}

Test(partition, dynamic_programme_equals_brute_force) {
    uint64_t k = 0;  // counter into the fixed-seed stream (seed 7)
#define U() ((double)rng_uniform(7, k++))
    char err[256];
    for (int trial = 0; trial < 300; trial++) {
        const int L = 1 + (int)(U() * 9), S = 1 + (int)(U() * 4), mb = (int)(U() * 2);
        double bc[10];
        for (int l = 0; l < L; l++) bc[l] = 0.1 + U();
        const double emb = 0.5 * U(), head = 2 * U();
        partition_t p;
        const int rc = partition_balance(L, bc, emb, head, S, mb, &p, err, sizeof err);
        if (S * mb > L) {
            cr_assert_eq(rc, -1, "L %d S %d min %d must be refused", L, S, mb);
            cr_assert(strstr(err, "need at least"), "%s", err);
            continue;
        }
        cr_assert_eq(rc, 0, "%s", err);
        double mx = 0;
        for (int s = 0; s < S; s++) {
            cr_assert_geq(p.l1[s] - p.l0[s], mb);
            mx = p.cost[s] > mx ? p.cost[s] : mx;
        }
        const double want = brute_best(bc, L, S, mb, emb, head, 0, 0, 0);
        // The same few additions in another order: a few ulps.
        cr_assert(fabs(mx - want) <= 1e-12 * want, "trial %d (L %d S %d): DP max %.17g, brute force %.17g", trial, L, S,
                  mx, want);
        partition_free(&p);
    }
#undef U
}

Test(partition, bad_requests_and_ranges) {
    double bc[3] = {1, -1, 1};
    partition_t p;
    char err[256];
    cr_assert_eq(partition_balance(3, bc, 0, 0, 2, 1, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "block 1 has cost -1"), "%s", err);
    bc[1] = 1;
    cr_assert_eq(partition_balance(3, bc, 0, 0, 0, 1, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "stages >= 1"), "%s", err);
    cr_assert_eq(partition_balance(3, bc, 0, 0, 4, 1, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "need at least 4 layers"), "%s", err);
    model_config_t c;
    cr_assert_eq(model_config_by_name("tiny", 16, &c), 0);
    cr_assert_eq(partition_even(&c, 1, 16, 3, &p, err, sizeof err), -1);  // tiny has 2 blocks
    cr_assert(strstr(err, "need at least 3 layers"), "%s", err);
    // Ranges: the first stage holds the embedding, the last the head, and the text says so.
    c.n_layers = 5;
    cr_assert_eq(partition_model(&c, 1, 16, 3, &p, err, sizeof err), 0, "%s", err);
    model_range_t r0 = partition_range(&p, 0), r2 = partition_range(&p, 2), r1 = partition_range(&p, 1);
    cr_assert(r0.embed && !r0.head && !r1.embed && !r1.head && r2.head && !r2.embed);
    char buf[256];
    partition_format(&p, buf, sizeof buf);
    cr_assert(strstr(buf, "+emb") && strstr(buf, "+head") && strstr(buf, "imbalance"), "%s", buf);
    partition_free(&p);
}
