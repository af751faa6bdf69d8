// Stage 07, the course's sharded optimizer and the optimizer seam:
// - optim_t (CPU): any split of the flat buffer into ranges gives the whole-buffer AdamW's
//   bits; state is exactly 8 bytes per element (allocator, tag optim); ranges added later
//   start their own step count; SGD keeps no state;
// - sharded_assign: PyTorch's greedy order (largest first, lowest rank on ties), frozen
//   parameters owned by no rank, groups added on top of the loads so far;
// - the course's test (build/07_zero/zero_toy under mpirun): both ToyModels, 1-4 ranks,
//   bitwise equal to unsharded AdamW and to PyTorch's trajectory; SGD; a second group; bad flags.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "07_zero/sharded_optim.h"
#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/rng.h"
#include "tests/harness.h"

static char g_out[1 << 16];

static int run_toy(int np, const char* args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/07_zero/zero_toy %s", np, build_dir(), args);
    return run_capture(cmd, g_out, sizeof g_out);
}

// ------------------------------------------------------------------ optim_t
Test(optim, ranges_give_the_whole_buffer_bits_and_exact_state_bytes) {
    const size_t n = 1000;
    const adamw_config_t cfg = {0.01f, 0.9f, 0.999f, 1e-8f, 0.1f};
    float *p0 = malloc(n * 4), *p1 = malloc(n * 4), *g = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    rng_t r = rng_make(7);
    rng_fill_normal(&r, p0, n, 0, 1);
    memcpy(p1, p0, n * 4);
    optim_t o;
    optim_init(&o, OPT_ADAMW, &cfg, DEV_CPU);
    // odd cuts, one gap [600, 650) left out, added out of order
    optim_add_range(&o, 0, 0, 333);
    optim_add_range(&o, 333, 333, 267);  // merges with the first (contiguous, no step yet)
    optim_add_range(&o, 900, 900, 100);
    optim_add_range(&o, 650, 650, 250);
    cr_assert_eq(o.n, 3, "contiguous ranges merge: %d ranges", o.n);
    const size_t before = mem_stats(DEV_CPU).live_by_tag[MEM_OPTIM];
    for (int t = 1; t <= 5; t++) {
        rng_fill_normal(&r, g, n, 0, 1);
        optim_step(&o, p1, g, NULL);
        adamw_cpu_step(&cfg, p0, g, m, v, 600, t);
        adamw_cpu_step(&cfg, p0 + 650, g + 650, m + 650, v + 650, 350, t);
    }
    cr_assert_eq(memcmp(p0, p1, n * 4), 0, "ranged AdamW differs from the whole-buffer step");
    cr_assert_eq(mem_stats(DEV_CPU).live_by_tag[MEM_OPTIM] - before, 8 * 950, "state bytes");
    cr_assert_eq(optim_state_bytes(&o), 8 * 950);
    optim_free(&o);
    cr_assert_eq(mem_stats(DEV_CPU).live_by_tag[MEM_OPTIM], before - 0, "state freed");
    free(p0); free(p1); free(g); free(m); free(v);
}

Test(optim, a_range_added_later_starts_at_step_one_and_sgd_keeps_no_state) {
    const adamw_config_t cfg = {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f};
    float p[128] = {0}, g[128], want[128] = {0}, m[64] = {0}, v[64] = {0};
    for (int i = 0; i < 128; i++) g[i] = (float)(i % 7) - 3.0f;
    optim_t o;
    optim_init(&o, OPT_ADAMW, &cfg, DEV_CPU);
    optim_add_range(&o, 0, 0, 64);
    optim_step(&o, p, g, NULL);
    optim_step(&o, p, g, NULL);
    optim_add_range(&o, 64, 64, 64);  // a group added after two steps: its own t = 1
    optim_step(&o, p, g, NULL);
    for (int t = 1; t <= 3; t++) adamw_cpu_step(&cfg, want, g, m, v, 64, t);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    adamw_cpu_step(&cfg, want + 64, g + 64, m, v, 64, 1);
    cr_assert_eq(memcmp(p, want, sizeof p), 0, "a late range must start at t = 1 with zero moments");
    cr_assert_eq(optim_state_bytes(&o), 8 * 128);
    optim_free(&o);

    optim_init(&o, OPT_SGD, &cfg, DEV_CPU);
    optim_add_range(&o, 0, 0, 128);
    float q[128] = {0};
    optim_step(&o, q, g, NULL);
    for (int i = 0; i < 128; i++) cr_assert_eq(q[i], -0.1f * g[i], "SGD element %d", i);
    cr_assert_eq(optim_state_bytes(&o), 0, "SGD keeps no state");
    optim_free(&o);
}

// ------------------------------------------------------------------ assignment
Test(sharded_assign, greedy_largest_first_like_zero_redundancy_optimizer) {
    // sizes 10, 50, 50 (frozen), 30, 20, 40 on 2 ranks: sorted 50(b) 40(e) 30(c) 20(d) 10(a);
    // b->0 (0 vs 0: lowest), e->1, c->1 (40 < 50), d->0 (50 < 70), a->0 (70 vs 70: lowest)
    const param_ref_t t[] = {{"a", 0, 10, 1}, {"b", 10, 50, 1}, {"f", 60, 50, 0}, {"c", 110, 30, 1}, {"d", 140, 20, 1}, {"e", 160, 40, 1}};
    size_t load[2] = {0, 0};
    int owner[6];
    sharded_assign(t, 6, 2, load, owner);
    const int want[6] = {0, 0, -1, 1, 0, 1};
    for (int i = 0; i < 6; i++) cr_assert_eq(owner[i], want[i], "parameter %s: owner %d, expected %d", t[i].name, owner[i], want[i]);
    cr_assert_eq(load[0], 80);
    cr_assert_eq(load[1], 70);
    // a second group lands on the lighter rank first
    const param_ref_t t2[] = {{"g", 200, 5, 1}};
    sharded_assign(t2, 1, 2, load, owner);
    cr_assert_eq(owner[0], 1, "the added group's parameter goes to the rank with fewer elements");
}

// ------------------------------------------------------------------ the course's test
static void course_ok(int np, const char* args, int runs) {
    const int st = run_toy(np, args);
    cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, args, st, g_out);
    char want[64];
    snprintf(want, sizeof want, "OK: all %d runs", runs);
    cr_assert(strstr(g_out, want), "%d ranks, %s:\n%s", np, args, g_out);
    cr_assert(!strstr(g_out, "FAILED"), "%s", g_out);
}

Test(sharded_optim_course, both_toymodels_adamw_1_to_4_ranks_bitwise) {
    for (int np = 1; np <= 4; np++) course_ok(np, "--mode course", 2);
}
Test(sharded_optim_course, sgd_and_a_group_added_after_construction) {
    course_ok(3, "--mode course --optimizer sgd", 2);
    course_ok(3, "--mode course --groups 2", 2);
    course_ok(2, "--mode course --optimizer sgd --groups 2", 2);
}
// The checks can fail: another starting point (the tied model's fc1, the same shape) gives
// another trajectory, which the comparison with PyTorch's must catch.
Test(sharded_optim_course, a_wrong_starting_point_fails) {
    const char* dir = test_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s/fx && cp -r tests/fixtures/toymodel %s/fx && "
             "cp tests/fixtures/toymodel/tied/init/fc1.weight.npy %s/fx/toy/init/fc1.weight.npy", dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    char args[512];
    snprintf(args, sizeof args, "--mode course --model toy --fixture %s/fx", dir);
    const int st = run_toy(2, args);
    cr_assert_eq(st, 1, "a wrong starting point must fail the PyTorch check, got exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "sharded vs PyTorch") && strstr(g_out, "FAILED"), "%s", g_out);
}

Test(sharded_optim_course, bad_flags_exit_2_with_one_line) {
    const char* cases[][2] = {
        {"--mode zero3", "--mode"},
        {"--steps 11", "--steps: 11 is out of range"},
        {"--optimizer sgd --mode zero1", "--optimizer sgd: only with --mode course"},
        {"--groups 3", "--groups: 3 must be 1 or 2"},
        {"--fixture /nonexistent", "/nonexistent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int st = run_toy(2, cases[i][0]);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cases[i][0], st, g_out);
        cr_assert(strstr(g_out, cases[i][1]), "%s:\n%s", cases[i][0], g_out);
        int lines = 0;  // one error line (mpirun's own banner aside)
        for (const char* q = g_out; (q = strstr(q, "error:")); q++) lines++;
        cr_assert_eq(lines, 1, "%s: %d error lines:\n%s", cases[i][0], lines, g_out);
    }
}
