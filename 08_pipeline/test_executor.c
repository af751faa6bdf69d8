// Stage 08 against the stage before: the model seam (common/model_cpu_range.c) against the
// whole CPU model, in process; then the executor under mpirun (pp_train, MPI on the CPU):
// for every schedule, p = 2, 3, 4 and m = 1..8, the parameters after 3 AdamW steps equal
// single-process training on the same global batch; 2D (pipeline x data parallel); a rank that
// dies mid-schedule; bad flags.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/model_cpu.h"
#include "common/rng.h"
#include "tests/harness.h"

// ---------------------------------------------------------------- the seam, in process
#define TB 2  // micro-batch rows
#define TT 8  // sequence length

typedef struct {
    int order[256];
    int n;
} hooks_t;
static void record(void* ctx, int idx) {
    hooks_t* h = ctx;
    if (h->n < 256) h->order[h->n] = idx;
    h->n++;
}

static model_config_t tiny3(void) {
    model_config_t c;
    cr_assert_eq(model_config_by_name("tiny", 16, &c), 0);
    c.n_layers = 3;
    return c;
}
static void tokens(int32_t* in, int32_t* tg, int n, int V, uint64_t seed) {
    rng_t r = rng_make(seed);
    rng_fill_int(&r, in, (size_t)n, 0, V);
    rng_fill_int(&r, tg, (size_t)n, 0, V);
}
static void assert_bits(const float* got, const float* want, size_t n, const char* what) {
    for (size_t i = 0; i < n; i++)
        cr_assert(memcmp(&got[i], &want[i], sizeof(float)) == 0, "%s: element %zu differs: %.9g vs %.9g", what, i,
                  (double)got[i], (double)want[i]);
}

// The whole model as one range: the same operations in the same order, so the same bits
// (loss, logits, every gradient), and the hooks in model_cpu_backward's order.
Test(model_range, whole_range_is_the_whole_model_bit_for_bit) {
    const model_config_t c = tiny3();
    int32_t in[TB * TT], tg[TB * TT];
    tokens(in, tg, TB * TT, c.vocab, 11);
    model_cpu_t a, b;
    model_cpu_create(&a, &c, TB, TT, 5);
    model_cpu_create(&b, &c, TB, TT, 5);
    hooks_t ha = {{0}, 0}, hb = {{0}, 0};
    const float la = model_cpu_forward(&a, in, tg, TB, TT);
    model_cpu_backward(&a, record, &ha);
    model_cpu_range_acts_t s;
    const model_range_t r = {0, c.n_layers, 1, 1};
    model_cpu_range_acts_create(&s, &c, &r, TB, TT, 0);
    for (size_t i = 0; i < b.layout.total; i++) b.grads[i] = NAN;  // poisoned: WRITE must cover all
    const float lb = model_cpu_range_forward(&b, &s, in, tg, 1.0f, TB, TT);
    const model_cpu_grad_sink_t sink = {b.grads, 0, record, &hb};
    model_cpu_range_backward(&b, &s, &sink);
    cr_assert(memcmp(&la, &lb, sizeof la) == 0, "loss %.9g vs %.9g", (double)lb, (double)la);
    assert_bits(s.a.logits, a.a.logits, (size_t)TB * TT * c.vocab, "logits");
    assert_bits(b.grads, a.grads, a.layout.total, "gradients");
    cr_assert_eq(hb.n, ha.n);
    cr_assert_eq(ha.n, a.layout.n, "every parameter reported once");
    for (int i = 0; i < ha.n; i++) cr_assert_eq(hb.order[i], ha.order[i], "hook %d: %d vs %d", i, hb.order[i], ha.order[i]);
    model_cpu_range_acts_destroy(&s);
    model_cpu_destroy(&a);
    model_cpu_destroy(&b);
}

// Three stages [0,1)+embedding, [1,2), [2,3)+head, activations and gradients handed over by
// copy (what the executor sends): the same bits as the whole model. split = 1 runs each
// backward as BI then W (zero bubble) and must give the same bits too, WRITE and ADD.
static void chain(int split, int accumulate) {
    const model_config_t c = tiny3();
    int32_t in[TB * TT], tg[TB * TT];
    tokens(in, tg, TB * TT, c.vocab, 12);
    model_cpu_t a, b;
    model_cpu_create(&a, &c, TB, TT, 6);
    model_cpu_create(&b, &c, TB, TT, 6);
    const float la = model_cpu_forward(&a, in, tg, TB, TT);
    model_cpu_backward(&a, NULL, NULL);
    const model_range_t r[3] = {{0, 1, 1, 0}, {1, 2, 0, 0}, {2, 3, 0, 1}};
    model_cpu_range_acts_t s[3];
    const size_t NC = (size_t)TB * TT * c.d_model;
    for (int k = 0; k < 3; k++) model_cpu_range_acts_create(&s[k], &c, &r[k], TB, TT, split);
    for (size_t i = 0; i < b.layout.total; i++) b.grads[i] = accumulate ? 0.0f : NAN;
    float lb = NAN;
    for (int k = 0; k < 3; k++) {
        if (k > 0) memcpy(s[k].a.res, s[k - 1].a.res + NC, NC * sizeof(float));  // res[nL] of a 1-block range
        lb = model_cpu_range_forward(&b, &s[k], k == 0 ? in : NULL, k == 2 ? tg : NULL, 1.0f, TB, TT);
    }
    cr_assert(memcmp(&la, &lb, sizeof la) == 0, "loss %.9g vs %.9g", (double)lb, (double)la);
    hooks_t h = {{0}, 0};
    const model_cpu_grad_sink_t sink = {b.grads, accumulate, record, &h};
    for (int k = 2; k >= 0; k--) {
        if (k < 2) memcpy(s[k].dy, s[k + 1].dx, NC * sizeof(float));
        if (split) model_cpu_range_backward_input(&b, &s[k], &sink);
        else model_cpu_range_backward(&b, &s[k], &sink);
    }
    if (split)  // every W after every BI: the weight passes may run in any order
        for (int k = 0; k < 3; k++) model_cpu_range_backward_weight(&b, &s[k], &sink);
    assert_bits(b.grads, a.grads, a.layout.total, split ? "gradients (BI then W)" : "gradients");
    cr_assert_eq(h.n, a.layout.n, "every parameter reported once (got %d hooks, %d parameters)", h.n, a.layout.n);
    for (int k = 0; k < 3; k++) model_cpu_range_acts_destroy(&s[k]);
    model_cpu_destroy(&a);
    model_cpu_destroy(&b);
}
Test(model_range, three_stages_chained_bit_for_bit) { chain(0, 0); }
Test(model_range, split_backward_bit_for_bit_write) { chain(1, 0); }
Test(model_range, split_backward_bit_for_bit_add) { chain(1, 1); }

// Accumulation: ADD twice the same micro-batch is exactly twice the WRITE (x + x is exact);
// two micro-batches of one row with loss scale 1/2 give the gradient of the two-row batch.
Test(model_range, gradients_accumulate_over_micro_batches) {
    const model_config_t c = tiny3();
    int32_t in[TB * TT], tg[TB * TT];
    tokens(in, tg, TB * TT, c.vocab, 13);
    model_cpu_t a, b;
    model_cpu_create(&a, &c, TB, TT, 7);
    model_cpu_create(&b, &c, TB, TT, 7);
    model_cpu_forward(&a, in, tg, TB, TT);
    model_cpu_backward(&a, NULL, NULL);
    const model_range_t r = {0, c.n_layers, 1, 1};
    model_cpu_range_acts_t s;
    model_cpu_range_acts_create(&s, &c, &r, TB, TT, 0);
    const size_t P = b.layout.total;
    memset(b.grads, 0, P * sizeof(float));
    const model_cpu_grad_sink_t add = {b.grads, 1, NULL, NULL};
    for (int k = 0; k < 2; k++) {
        model_cpu_range_forward(&b, &s, in, tg, 1.0f, TB, TT);
        model_cpu_range_backward(&b, &s, &add);
    }
    float* twice = malloc(P * sizeof(float));
    cr_assert_not_null(twice);
    for (size_t i = 0; i < P; i++) twice[i] = 2.0f * a.grads[i];
    assert_bits(b.grads, twice, P, "two ADDs of one micro-batch");
    memset(b.grads, 0, P * sizeof(float));
    float sum = 0;
    for (int mb = 0; mb < TB; mb++) {
        sum += 0.5f * model_cpu_range_forward(&b, &s, in + mb * TT, tg + mb * TT, 0.5f, 1, TT);
        model_cpu_range_backward(&b, &s, &add);
    }
    // The same sums over rows in two halves, then added: fp32 reordering only (about 1e-7
    // relative on gradients of size 1e-4..1e-1); 1e-5 relative with a 1e-8 floor for
    // gradients that cancel to near zero.
    ASSERT_ALLCLOSE(b.grads, a.grads, P, 1e-5, 1e-8, "accumulated gradients");
    const float la = model_cpu_forward(&a, in, tg, TB, TT);
    cr_assert_float_eq(sum, la, 1e-6f * la, "scaled losses sum to %.9g, the batch mean is %.9g", (double)sum, (double)la);
    free(twice);
    model_cpu_range_acts_destroy(&s);
    model_cpu_destroy(&a);
    model_cpu_destroy(&b);
}

Test(model_range, ranges_checked_and_spans_tile_the_layout) {
    const model_config_t c = tiny3();
    char err[256];
    const model_range_t bad[] = {{-1, 2, 0, 0}, {2, 1, 0, 0}, {0, 4, 0, 0}, {1, 2, 1, 0}, {1, 2, 0, 1}, {1, 1, 0, 0}};
    const char* why[] = {"not inside", "not inside", "not inside", "must start at block 0", "must end at block 3", "is empty"};
    for (int k = 0; k < 6; k++) {
        cr_assert_eq(model_range_check(&c, &bad[k], err, sizeof err), -1, "range %d accepted", k);
        cr_assert(strstr(err, why[k]), "range %d: %s", k, err);
    }
    param_layout_t lay = param_layout_make(&c);
    // Any cut: the slices are contiguous, disjoint, and cover the flat buffer.
    const model_range_t cut[4] = {{0, 0, 1, 0}, {0, 2, 0, 0}, {2, 3, 0, 0}, {3, 3, 0, 1}};
    size_t prev = 0;
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(model_range_check(&c, &cut[k], err, sizeof err), 0, "%s", err);
        size_t b, e;
        model_range_span(&lay, &c, &cut[k], &b, &e);
        cr_assert_eq(b, prev, "range %d starts at %zu, the previous ended at %zu", k, b, prev);
        cr_assert(e > b, "range %d is empty", k);
        prev = e;
    }
    cr_assert_eq(prev, lay.total);
    param_layout_free(&lay);
}

// ---------------------------------------------------------------- the executor, under mpirun
static char g_out[1 << 16];

static int run_pp(int np, const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/08_pipeline/pp_train %s 2>&1", np, build_dir(), args);
    return run_capture(cmd, g_out, sizeof g_out);
}

// One run with --check-single: exit 0, every parameter within the tolerance (pp_train states
// it: rtol 1e-4, atol 1e-5, stage 06's), bitwise equal for m = 1 (one micro-batch, one
// replica: the same operations in the same order). Returns the parameters' hash.
static unsigned long long equal_to_single(int np, const char* sched, int m, const char* extra) {
    char args[512];
    // Two rows per micro-batch (per replica), 8 blocks (p·v up to 8 stages), 3 steps.
    int dp = 1;
    const char* q = strstr(extra, "--dp ");
    if (q) dp = atoi(q + 5);
    snprintf(args, sizeof args, "--layers 8 --context 16 --batch %d --micro-batches %d --schedule %s --steps 3 --check-single 1 %s",
             2 * m * dp, m, sched, extra);
    const int st = run_pp(np, args);
    cr_assert_eq(st, 0, "%s, %d ranks, m %d %s: exit %d:\n%s", sched, np, m, extra, st, g_out);
    cr_assert(strstr(g_out, "check-single: 0 of"), "%s, %d ranks, m %d: differs from single-process training:\n%s", sched,
              np, m, g_out);
    if (m == 1 && dp == 1)
        cr_assert(strstr(g_out, "; 0 not bitwise equal"), "%s, %d ranks, m 1: not bit for bit:\n%s", sched, np, g_out);
    const char* h = strstr(g_out, "parameters hash ");
    cr_assert_not_null(h, "%s", g_out);
    return strtoull(h + 16, NULL, 16);
}

// Every schedule, m = 1..8 (interleaved: the multiples of p, v = 2). For one m every schedule
// gives the same bits: each block computes the same sums whatever the cut and the order of
// micro-batches through it (gradients are added in micro-batch order everywhere).
static void every_schedule(int np) {
    for (int m = 1; m <= 8; m++) {
        const unsigned long long h = equal_to_single(np, "gpipe", m, "");
        cr_assert_eq(equal_to_single(np, "1f1b", m, ""), h, "1f1b differs from gpipe at p %d m %d", np, m);
        cr_assert_eq(equal_to_single(np, "zbh1", m, ""), h, "zbh1 differs from gpipe at p %d m %d", np, m);
        if (m % np == 0)
            cr_assert_eq(equal_to_single(np, "interleaved", m, "--chunks 2"), h, "interleaved differs at p %d m %d", np, m);
    }
}
Test(pp_train_mpi, every_schedule_p2_m1_to_8, .timeout = 200) { every_schedule(2); }
Test(pp_train_mpi, every_schedule_p3_m1_to_8, .timeout = 200) { every_schedule(3); }
Test(pp_train_mpi, every_schedule_p4_m1_to_8, .timeout = 200) { every_schedule(4); }

// Where the model is cut does not change the bits either: p = 1 (one rank, every stage local;
// interleaved with v = 4 hands over by copy), 2, 3, 4 at m = 4.
Test(pp_train_mpi, the_cut_does_not_change_the_bits) {
    const unsigned long long h = equal_to_single(1, "1f1b", 4, "");
    cr_assert_eq(equal_to_single(1, "interleaved", 4, "--chunks 4"), h);
    for (int np = 2; np <= 4; np++) cr_assert_eq(equal_to_single(np, "1f1b", 4, "--partition even"), h, "p %d", np);
}

// 2D: 2 stages x 2 replicas on 4 ranks; the replicas of each stage end bitwise identical.
Test(pp_train_mpi, pipeline_x_data_parallel_4_ranks) {
    const char* sch[] = {"1f1b", "zbh1", "interleaved"};
    for (int k = 0; k < 3; k++) {
        equal_to_single(4, sch[k], 2, k == 2 ? "--dp 2 --chunks 2" : "--dp 2");
        cr_assert(strstr(g_out, "replicas: bitwise identical for every stage"), "%s", g_out);
        cr_assert(strstr(g_out, "data parallel: gradient sum over 2 replicas"), "%s", g_out);
    }
}

// The forward-only lists (evaluation) under mpirun, pp_train --check-forward: after 2 steps,
// a forward-only pass on a fresh batch leaves every gradient element of every rank with its
// bits (the slices hold the last step's gradients, not zeros), and its loss equals the training
// flush's on that batch bit for bit. Every schedule at p = 2 (m = 1, 3, 4), ZB-H1 at p = 3
// (m = 5), interleaved at p = 4 (v = 2) and at p = 1 (v = 4: every hand-over a local copy), and
// 2 stages x 2 replicas.
Test(pp_train_mpi, forward_only_leaves_gradients_and_equals_the_flush_loss, .timeout = 200) {
    const struct {
        int np, m;
        const char* args;
    } cases[] = {
        {2, 1, "--schedule gpipe"}, {2, 3, "--schedule 1f1b"}, {2, 4, "--schedule zbh1"},
        {2, 4, "--schedule interleaved --chunks 2"}, {3, 5, "--schedule zbh1"},
        {4, 4, "--schedule interleaved --chunks 2"}, {1, 4, "--schedule interleaved --chunks 4"},
        {4, 2, "--schedule 1f1b --dp 2"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[512];
        const int dp = strstr(cases[k].args, "--dp 2") ? 2 : 1;
        snprintf(args, sizeof args, "--layers 8 --context 16 --batch %d --micro-batches %d --steps 2 --check-forward 1 %s",
                 2 * cases[k].m * dp, cases[k].m, cases[k].args);
        const int st = run_pp(cases[k].np, args);
        cr_assert_eq(st, 0, "%d ranks %s: exit %d:\n%s", cases[k].np, args, st, g_out);
        cr_assert(strstr(g_out, "training flush (bitwise equal)"), "%d ranks %s:\n%s", cases[k].np, args, g_out);
        cr_assert(strstr(g_out, "pass: 0 of ") && strstr(g_out, "non-zero (untouched)"), "%d ranks %s:\n%s", cases[k].np,
                  args, g_out);
    }
    cr_assert_eq(run_pp(2, "--check-forward 2"), 2, "%s", g_out);
    cr_assert(strstr(g_out, "--check-forward: 2 must be 0 or 1"), "%s", g_out);
}

// The timing lines: one per rank with busy and idle, the measured bubble beside the formula
// ((p-1)/(m+p-1) = 1/5 for p 2, m 4) and the simulator, peak live equal to the simulator's.
Test(pp_train_mpi, timing_lines_and_bubble) {
    const int st = run_pp(2, "--layers 4 --batch 8 --micro-batches 4 --schedule 1f1b --steps 3");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "rank 0 (replica 0, pipeline rank 0): step") && strstr(g_out, "rank 1 (replica 0, pipeline rank 1): step"),
              "%s", g_out);
    cr_assert(strstr(g_out, "peak live 2 (simulated 2)") && strstr(g_out, "peak live 1 (simulated 1)"), "%s", g_out);
    cr_assert(strstr(g_out, "formula 0.200"), "%s", g_out);
    const char* b = strstr(g_out, "measured bubble ");
    cr_assert_not_null(b, "%s", g_out);
    const double mb = atof(b + 16);
    cr_assert(mb > 0 && mb < 1, "measured bubble %g is not a fraction", mb);
}

// A rank that dies in the middle of the first step ends the whole job non-zero, in bounded
// time (the communicator's deadline, here 10 s, or mpirun ending the others).
Test(pp_train_mpi, a_dead_rank_ends_the_job) {
    const char* cases[][2] = {{"3", "--die-rank 1 --schedule 1f1b"}, {"4", "--die-rank 3 --schedule zbh1 --dp 2"}};
    for (int k = 0; k < 2; k++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "COMM_TIMEOUT=10 MPIRUN_TIMEOUT=60 scripts/mpirun.sh %s %s/08_pipeline/pp_train --layers 8 --batch 8 "
                 "--micro-batches 4 --steps 2 %s 2>&1",
                 cases[k][0], build_dir(), cases[k][1]);
        const double t0 = (double)time(NULL);
        const int st = run_capture(cmd, g_out, sizeof g_out);
        const double dt = (double)time(NULL) - t0;
        cr_assert(st != 0 && st != 124 && st != 137, "%s: exit %d (0: nobody died; 124/137: the job hung):\n%s", cases[k][1],
                  st, g_out);
        cr_assert(strstr(g_out, "--die-rank: exiting"), "%s", g_out);
        cr_assert(dt < 45, "the job took %.0f s to end", dt);
    }
}

Test(pp_train_mpi, bad_flags_one_line_exit_2) {
    struct {
        int np;
        const char* args;
        const char* want;
    } cases[] = {
        {2, "--batch 7", "--batch: 7 is not a multiple of micro-batches x dp = 4 x 1"},
        {2, "--schedule interleaved --micro-batches 3 --batch 6 --layers 4", "needs m to be a multiple of p"},
        {4, "--micro-batches 2", "need at least 4 layers"},
        {4, "--dp 3", "--dp: 3 does not divide the 4 ranks"},
        {2, "--die-rank 2", "--die-rank: 2 is not a rank"},
        {2, "--warmup 3 --steps 3", "--warmup: 3 must be in 0..steps-1"},
        {2, "--schedule zb", "--schedule"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int st = run_pp(cases[k].np, cases[k].args);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cases[k].args, st, g_out);
        cr_assert(strstr(g_out, cases[k].want), "%s: expected '%s' in:\n%s", cases[k].args, cases[k].want, g_out);
        cr_assert(strstr(g_out, "pp_train: error: "), "%s", g_out);
    }
    // --timeline inside a plain file: one line from the whole job, the path and the reason
    char args[1024];
    const char* plain = test_plain_file("plain08pp");
    snprintf(args, sizeof args, "--timeline %s/x", plain);
    const int st = run_pp(2, args);
    ASSERT_REFUSED(st, g_out, "pp_train", "--timeline", plain, "Not a directory");
}
