// Bucket assignment (ddp_assign_buckets) and the parameter-table checks: pure functions, no
// communicator. The rules under test (ddp.h): reverse parameter order; a bucket's slice is at
// most the cap in bytes, padding included; a tensor over the cap alone; frozen parameters in
// no bucket, and closing the one being filled; every bucket one contiguous slice.
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "06_ddp/ddp.h"
#include "common/toymodel.h"
#include "common/rng.h"

#define MAXP 64

// The ToyModel's table, as ddp_toy builds it.
static int toy_table(toy_kind_t kind, param_ref_t* t) {
    static toy_model_t m[2];
    toy_model_t* mm = &m[kind];
    if (!mm->params) toy_create(mm, kind, 1);
    for (int i = 0; i < mm->n_params; i++)
        t[i] = (param_ref_t){mm->p[i].name, mm->p[i].offset, mm->p[i].numel, mm->p[i].trainable};
    return mm->n_params;
}

// Expects buckets whose members are exactly the (p_hi, p_lo) pairs given, in order.
static void expect_buckets(const param_ref_t* t, int n, double mb, int nb_want, const int* hi_lo) {
    ddp_bucket_t b[MAXP];
    const int nb = ddp_assign_buckets(t, n, ddp_bucket_bytes(mb), b, MAXP);
    cr_assert_eq(nb, nb_want, "cap %g MiB: %d buckets, expected %d", mb, nb, nb_want);
    for (int k = 0; k < nb; k++) {
        cr_assert_eq(b[k].p_hi, hi_lo[2 * k], "cap %g MiB: bucket %d ends at parameter %d, expected %d",
                     mb, k, b[k].p_hi, hi_lo[2 * k]);
        cr_assert_eq(b[k].p_lo, hi_lo[2 * k + 1], "cap %g MiB: bucket %d starts at parameter %d, "
                     "expected %d", mb, k, b[k].p_lo, hi_lo[2 * k + 1]);
        // one contiguous slice from the lowest member's start to the highest member's end
        cr_assert_eq(b[k].begin, t[b[k].p_lo].offset);
        cr_assert_eq(b[k].end, t[b[k].p_hi].offset + t[b[k].p_hi].numel);
    }
}

// ToyModel: 0 no_grad_fixed_param (frozen) [2], 1 fc1 [100], 2 fc2.fc.weight [500],
// 3 fc2.fc.bias (frozen) [50], 4 fc3 [250]. Bytes: 400, 2000, 1000.
Test(buckets_toy, cap_below_every_tensor_puts_each_alone_in_reverse_order) {
    param_ref_t t[8];
    const int n = toy_table(TOY_MODEL, t);
    const int want[] = {4, 4, 2, 2, 1, 1};
    expect_buckets(t, n, 0.0001, 3, want);  // 104 bytes < 400
}

Test(buckets_toy, frozen_bias_closes_a_bucket_that_the_cap_would_allow) {
    param_ref_t t[8];
    const int n = toy_table(TOY_MODEL, t);
    // 10485 bytes hold everything, but fc2.fc.bias (frozen) lies between fc3 and fc2.fc.weight
    const int want[] = {4, 4, 2, 1};
    expect_buckets(t, n, 0.01, 2, want);
}

Test(buckets_toy, cap_between_groups_what_fits) {
    param_ref_t t[8];
    const int n = toy_table(TOY_MODEL, t);
    const int alone[] = {4, 4, 2, 2, 1, 1};
    expect_buckets(t, n, 0.0016, 3, alone);  // 1677 bytes: fc2.fc.weight (2000) alone, fc1 can't join
    const int two[] = {4, 4, 2, 1};
    expect_buckets(t, n, 0.004, 2, two);     // 4194 bytes: fc2.fc.weight + fc1 = 2400 bytes
}

// Tied: 0 fc1 [100], 1 fc2 (= fc4) [500], 2 fc3 [500], 3 fc5 [250], all trainable.
Test(buckets_tied, caps_below_between_and_above) {
    param_ref_t t[8];
    const int n = toy_table(TOY_TIED, t);
    const int each[] = {3, 3, 2, 2, 1, 1, 0, 0};
    expect_buckets(t, n, 0.0001, 4, each);
    expect_buckets(t, n, 0.0016, 4, each);  // 1677 bytes: no two neighbours fit together
    const int pairs[] = {3, 2, 1, 0};
    expect_buckets(t, n, 0.004, 2, pairs);  // 3000 and 2400 bytes
    const int one[] = {3, 0};
    expect_buckets(t, n, 0.01, 1, one);     // 5400 bytes, the whole buffer
}

Test(buckets, cap_zero_puts_every_parameter_alone) {
    const param_ref_t t[] = {{"a", 0, 1, 1}, {"b", 1, 1, 1}, {"c", 2, 1, 1}};
    ddp_bucket_t b[4];
    cr_assert_eq(ddp_assign_buckets(t, 3, 0, b, 4), 3);
    for (int k = 0; k < 3; k++) cr_assert_eq(b[k].p_lo, 2 - k);
}

Test(buckets, oversize_tensor_alone_and_neighbours_regroup_after_it) {
    // cap 100 floats: [3,2] fit (20), 1 is over the cap (alone), 0 cannot join 1, so alone
    const param_ref_t t[] = {{"a", 0, 10, 1}, {"big", 10, 1000, 1}, {"c", 1010, 10, 1}, {"d", 1020, 10, 1}};
    const int want[] = {3, 2, 1, 1, 0, 0};
    expect_buckets(t, 4, 100 * 4 / 1048576.0, 3, want);
    // the big tensor's bucket holds it alone even though it is 10x the cap
    ddp_bucket_t b[4];
    ddp_assign_buckets(t, 4, 400, b, 4);
    cr_assert_eq(b[1].end - b[1].begin, 1000);
}

Test(buckets, padding_counts_against_the_cap) {
    // a [0,10) gap b [16,26) gap c [32,42): b+c span 26 floats, a+b+c 42
    const param_ref_t t[] = {{"a", 0, 10, 1}, {"b", 16, 10, 1}, {"c", 32, 10, 1}};
    ddp_bucket_t b[4];
    cr_assert_eq(ddp_assign_buckets(t, 3, 26 * 4, b, 4), 2, "b and c (26 floats with padding) fit a 26-float cap");
    cr_assert_eq(b[0].begin, 16);
    cr_assert_eq(b[0].end, 42);
    cr_assert_eq(ddp_assign_buckets(t, 3, 25 * 4, b, 4), 3,
                 "20 floats of data but 26 of slice: must not fit a 25-float cap");
    cr_assert_eq(ddp_assign_buckets(t, 3, 42 * 4, b, 4), 1);
    cr_assert_eq(b[0].begin, 0);
    cr_assert_eq(b[0].end, 42);
}

Test(buckets, frozen_parameters_are_in_no_bucket) {
    const param_ref_t t[] = {{"f0", 0, 5, 0}, {"a", 5, 5, 1}, {"f1", 10, 5, 0}, {"f2", 15, 5, 0},
                             {"b", 20, 5, 1}, {"f3", 25, 5, 0}};
    ddp_bucket_t b[8];
    const int nb = ddp_assign_buckets(t, 6, 1 << 20, b, 8);
    cr_assert_eq(nb, 2);
    cr_assert(b[0].p_lo == 4 && b[0].p_hi == 4 && b[0].begin == 20 && b[0].end == 25);
    cr_assert(b[1].p_lo == 1 && b[1].p_hi == 1 && b[1].begin == 5 && b[1].end == 10);
    const param_ref_t all_frozen[] = {{"f", 0, 5, 0}, {"g", 5, 5, 0}};
    cr_assert_eq(ddp_assign_buckets(all_frozen, 2, 1 << 20, b, 8), 0);
}

Test(buckets, count_query_and_short_output) {
    const param_ref_t t[] = {{"a", 0, 1, 1}, {"b", 1, 1, 1}, {"c", 2, 1, 1}};
    cr_assert_eq(ddp_assign_buckets(t, 3, 0, NULL, 0), 3);
    ddp_bucket_t b[3];
    memset(b, 0x5a, sizeof b);
    cr_assert_eq(ddp_assign_buckets(t, 3, 0, b, 2), 3, "the full count is returned");
    cr_assert_eq(b[1].p_lo, 1);
    ddp_bucket_t untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    cr_assert(memcmp(&b[2], &untouched, sizeof untouched) == 0, "wrote past max_out");
}

Test(buckets, invalid_tables_are_refused) {
    char err[256];
    const param_ref_t overlap[] = {{"a", 0, 10, 1}, {"b", 5, 10, 1}};
    cr_assert_eq(ddp_assign_buckets(overlap, 2, 100, NULL, 0), -1);
    cr_assert_eq(ddp_check_params(overlap, 2, 100, err, sizeof err), -1);
    cr_assert(strstr(err, "b") && strstr(err, "offset order"), "%s", err);
    const param_ref_t unsorted[] = {{"a", 10, 5, 1}, {"b", 0, 5, 1}};
    cr_assert_eq(ddp_assign_buckets(unsorted, 2, 100, NULL, 0), -1);
    const param_ref_t empty[] = {{"a", 0, 0, 1}};
    cr_assert_eq(ddp_check_params(empty, 1, 100, err, sizeof err), -1);
    cr_assert(strstr(err, "0 elements"), "%s", err);
    cr_assert_eq(ddp_assign_buckets(empty, 0, 100, NULL, 0), -1);
    const param_ref_t past[] = {{"a", 0, 10, 1}, {"b", 10, 10, 1}};
    cr_assert_eq(ddp_check_params(past, 2, 19, err, sizeof err), -1);
    cr_assert(strstr(err, "past the buffer"), "%s", err);
    cr_assert_eq(ddp_check_params(past, 2, 20, err, sizeof err), 0);
}

// Random tables (fixed seed): every invariant of the assignment, for many caps.
Test(buckets, random_tables_keep_every_invariant) {
    rng_t r = rng_make(6);
    for (int trial = 0; trial < 500; trial++) {
        param_ref_t t[MAXP];
        int32_t v[3];
        rng_fill_int(&r, v, 1, 1, MAXP + 1);
        const int n = v[0];
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            rng_fill_int(&r, v, 3, 0, 1 << 30);
            off += (size_t)(v[0] % 3 == 0 ? v[0] % 17 : 0);        // padding now and then
            const size_t numel = 1 + (size_t)(v[1] % 300);
            t[i] = (param_ref_t){"p", off, numel, v[2] % 5 != 0};  // one in five frozen
            off += numel;
        }
        rng_fill_int(&r, v, 1, 0, 2000 * 4);
        const size_t cap = (size_t)v[0];
        ddp_bucket_t b[MAXP];
        const int nb = ddp_assign_buckets(t, n, cap, b, MAXP);
        cr_assert_geq(nb, 0);
        int owner[MAXP];
        for (int i = 0; i < n; i++) owner[i] = -1;
        for (int k = 0; k < nb; k++) {
            cr_assert_leq(b[k].p_lo, b[k].p_hi);
            if (k > 0) cr_assert_lt(b[k].p_hi, b[k - 1].p_lo, "trial %d: buckets not in reverse order", trial);
            cr_assert_eq(b[k].begin, t[b[k].p_lo].offset);
            cr_assert_eq(b[k].end, t[b[k].p_hi].offset + t[b[k].p_hi].numel);
            const size_t bytes = (b[k].end - b[k].begin) * sizeof(float);
            cr_assert(bytes <= cap || b[k].p_lo == b[k].p_hi,
                      "trial %d: bucket %d is %zu bytes over a %zu cap with several members", trial, k, bytes, cap);
            for (int i = b[k].p_lo; i <= b[k].p_hi; i++) {
                cr_assert(t[i].trainable, "trial %d: frozen parameter %d inside bucket %d", trial, i, k);
                owner[i] = k;
            }
            // greedy: the next bucket's top parameter could not have joined this one, unless
            // a frozen parameter separates them
            if (k + 1 < nb && b[k + 1].p_hi == b[k].p_lo - 1)
                cr_assert_gt((b[k].end - t[b[k + 1].p_hi].offset) * sizeof(float), cap,
                             "trial %d: bucket %d closed although the next parameter fit", trial, k);
        }
        for (int i = 0; i < n; i++)
            cr_assert_eq(owner[i] >= 0, t[i].trainable != 0, "trial %d: parameter %d %s", trial, i,
                         t[i].trainable ? "in no bucket" : "frozen but in a bucket");
    }
}

// PyTorch's default plan: a small first bucket so communication starts early, then the cap.
Test(buckets, first_bucket_small_then_the_cap) {
    // 6 tensors of 10 floats (40 bytes each), contiguous. First cap 80 bytes, then 160:
    // bucket 0 = {5, 4}; below it {3, 2, 1, 0} fits 160 bytes exactly.
    param_ref_t t[6];
    for (int i = 0; i < 6; i++) t[i] = (param_ref_t){"p", (size_t)i * 10, 10, 1};
    ddp_bucket_t b[8];
    cr_assert_eq(ddp_assign_buckets_first(t, 6, 80, 160, b, 8), 2);
    cr_assert_eq(b[0].p_hi, 5); cr_assert_eq(b[0].p_lo, 4);
    cr_assert_eq(b[1].p_hi, 3); cr_assert_eq(b[1].p_lo, 0);
    cr_assert_eq(b[1].begin, 0); cr_assert_eq(b[1].end, 40);
    // the same caps with one cap are one bucket of 240 bytes > 160: two of 160 and 80
    cr_assert_eq(ddp_assign_buckets(t, 6, 160, b, 8), 2);
    cr_assert_eq(b[0].p_lo, 2);
    // a first cap at or above the cap is the plain plan; the count query works as there
    cr_assert_eq(ddp_assign_buckets_first(t, 6, 1000, 160, NULL, 0), 2);
    cr_assert_eq(ddp_assign_buckets_first(t, 6, 80, 160, NULL, 0), 2);
    cr_assert_eq(ddp_assign_buckets_first(t, 6, 80, 160, b, 1), 2);
    cr_assert_eq(b[0].p_lo, 4);
    // an oversize last tensor fills bucket 0 alone whatever the first cap (the XL model's
    // lm_head): then the rest is the plain plan of the table below it
    param_ref_t u[4] = {{"a", 0, 10, 1}, {"b", 10, 10, 1}, {"c", 20, 10, 1}, {"head", 30, 500, 1}};
    ddp_bucket_t x[8], y[8];
    const int nx = ddp_assign_buckets_first(u, 4, 4, 400, x, 8);
    const int ny = ddp_assign_buckets(u, 4, 400, y, 8);
    cr_assert_eq(nx, ny);
    for (int k = 0; k < nx; k++) cr_assert(x[k].p_lo == y[k].p_lo && x[k].p_hi == y[k].p_hi);
    // a frozen parameter right below bucket 0 is in no bucket
    param_ref_t f[4] = {{"a", 0, 10, 1}, {"frozen", 10, 10, 0}, {"c", 20, 10, 1}, {"d", 30, 10, 1}};
    cr_assert_eq(ddp_assign_buckets_first(f, 4, 40, 4000, b, 8), 3);
    cr_assert_eq(b[0].p_lo, 3); cr_assert_eq(b[1].p_lo, 2); cr_assert_eq(b[2].p_lo, 0);
}

Test(buckets, bucket_mb_is_mebibytes_rounded_down) {
    cr_assert_eq(ddp_bucket_bytes(1), 1048576u);
    cr_assert_eq(ddp_bucket_bytes(0), 0u);
    cr_assert_eq(ddp_bucket_bytes(0.0016), 1677u);  // 1677.7216
    cr_assert_eq(ddp_bucket_bytes(25), 25u << 20);
}

Test(buckets, variant_names_round_trip) {
    for (int v = 0; v < DDP_NVARIANTS; v++) {
        ddp_variant_t got;
        cr_assert_eq(ddp_variant_parse(ddp_variant_name((ddp_variant_t)v), &got), 0);
        cr_assert_eq(got, (ddp_variant_t)v);
        cr_assert(strstr(DDP_VARIANT_CHOICES, ddp_variant_name((ddp_variant_t)v)));
    }
    ddp_variant_t got;
    cr_assert_eq(ddp_variant_parse("bucket", &got), -1);
    cr_assert_eq(ddp_variant_parse(NULL, &got), -1);
}
