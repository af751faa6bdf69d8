// Stage 09, tensor and sequence parallelism, on the CPU over MPI:
// - every layer of tp.h against its unsplit self on 1-4 ranks (build/09_tensor/tp_check), and
//   each layer alone (tp_check --only, suite tp_region: one test per layer a student writes);
//   bitwise where no sum is split, within n·eps·Σ|terms| where one is (the bound and its reason
//   are in tp_check_main.c); the check must see a missing sum of the norm weight gradient;
// - the tiny Transformer trained 5 steps tensor-parallel (build/09_tensor/tp_train --check)
//   with TP 2 and 4, with and without SP, with a vocabulary that TP does not divide, and DP x TP
//   on 4 ranks, against one process (loss and gradient norm every step, step 0's gradient of
//   every parameter, every parameter at the end; the tolerances are derived in tp_train_main.c);
//   TP 1 equals one process bit for bit; the replicated norm weights equal across the group;
// - ZeRO-1 over the data-parallel group (--zero 1): DP 2 x TP 2 with and without SP the same
//   bits as without ZeRO, DP 3 x TP 1 equal to one process, DP 1 plain TP; the optimizer bytes
//   counted against 8 x (the shard padded, over dp);
// - SP without the norm-gradient sum is caught (the replicas drift, the gradients differ);
// - refusals in one line, exit 2: heads or d_ff not divisible, T not divisible under SP, a TP
//   size that does not divide the ranks, the NCCL backend.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "09_tensor/tp.h"
#include "tests/harness.h"

static char g_out[1 << 17];

// Every job has a deadline: the communicator's (--comm-timeout) and mpirun.sh's timeout.
static int run_prog(const char* prog, int np, const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/09_tensor/%s --comm-timeout 30 %s", np,
             build_dir(), prog, args);
    return run_capture(cmd, g_out, sizeof g_out);
}

static int count(const char* s, const char* what) {
    int n = 0;
    for (const char* q = s; (q = strstr(q, what)); q++) n++;
    return n;
}

// ------------------------------------------------------------------ shard sizes
Test(tp_dims, heads_and_dff_must_divide_vocabulary_pads) {
    model_config_t c = {"t", 50, 16, 48, 1, 12, 96};
    tp_dims_t d;
    char err[256];
    for (int n = 1; n <= 4; n++) {
        int covered = 0;
        for (int r = 0; r < n; r++) {
            cr_assert_eq(tp_dims_make(&c, n, r, &d, err, sizeof err), 0, "%s", err);
            cr_assert_eq(d.nh * n, 12);
            cr_assert_eq(d.Cl, d.nh * 4);
            cr_assert_eq(d.Fl * n, 96);
            cr_assert_eq(d.v0, covered, "n %d rank %d: shard starts at %d, not %d", n, r, d.v0, covered);
            cr_assert(d.Vvalid >= 0 && d.Vvalid <= d.Vl);
            covered += d.Vvalid;
        }
        cr_assert_eq(covered, 50, "n %d: the shards cover %d of 50 rows", n, covered);
    }
    c.n_heads = 25, c.d_model = 100;  // the course's XL has 25 heads
    cr_assert_eq(tp_dims_make(&c, 2, 0, &d, err, sizeof err), -1);
    cr_assert(strstr(err, "25 heads do not split over 2"), "%s", err);
    c.n_heads = 4, c.d_ff = 100;
    cr_assert_eq(tp_dims_make(&c, 3, 0, &d, err, sizeof err), -1);
    cr_assert(strstr(err, "4 heads"), "%s", err);
    c.n_heads = 6;
    cr_assert_eq(tp_dims_make(&c, 3, 1, &d, err, sizeof err), -1);
    cr_assert(strstr(err, "d_ff 100 does not split over 3"), "%s", err);
    int Vl, v0, valid;
    tp_vocab_shard(5, 4, 3, &Vl, &v0, &valid);  // 2 rows a rank: the last shard is all padding
    cr_assert(Vl == 2 && v0 == 6 && valid == 0);
}

// ------------------------------------------------------------------ layers
Test(tp_layers, every_layer_equals_its_unsplit_self_on_1_to_4_ranks, .timeout = 300) {
    for (int np = 1; np <= 4; np++) {
        const int st = run_prog("tp_check", np, "");
        cr_assert_eq(st, 0, "%d ranks: exit %d:\n%s", np, st, g_out);
        char want[64];
        snprintf(want, sizeof want, "tp_check: %d ranks: 28 checks, 0 wrong", np);
        cr_assert(strstr(g_out, want), "%d ranks:\n%s", np, g_out);
        cr_assert_eq(count(g_out, " ok\n"), 28, "%d ranks:\n%s", np, g_out);
    }
    // 3 and 4 ranks pad the last vocabulary shard (50 = 17 + 17 + 16, 13 + 13 + 13 + 11)
    cr_assert(strstr(g_out, "13 rows a rank, 11 valid on the last"), "%s", g_out);
}

Test(tp_layers, a_missing_norm_gradient_sum_under_sp_is_seen, .timeout = 120) {
    const int st = run_prog("tp_check", 2, "--skip-norm-sum");
    cr_assert_eq(st, 1, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "SP norm weight gradient: equal across the group") &&
              strstr(g_out, "tp_check: 2 ranks: 28 checks, 2 wrong"), "%s", g_out);
}

// ------------------------------------------------------------------ one layer at a time
// Each region of tp_layers.c (and the model's norm-gradient sum) has a test of its own:
// tp_check --only <group> calls that one function of the stage and nothing else of it, so
// it passes as soon as that function is right, whatever the others are. 2 ranks and 3 (3
// pads the last vocabulary shard: 50 = 17 + 17 + 16).
static void only(const char* group, int nchecks) {
    for (int np = 2; np <= 3; np++) {
        char a[128], want[96];
        snprintf(a, sizeof a, "--only %s", group);
        const int st = run_prog("tp_check", np, a);
        cr_assert_eq(st, 0, "--only %s, %d ranks: exit %d:\n%s", group, np, st, g_out);
        snprintf(want, sizeof want, "tp_check: %d ranks: %d checks, 0 wrong", np, nchecks);
        cr_assert(strstr(g_out, want), "--only %s, %d ranks: want '%s':\n%s", group, np, want, g_out);
        cr_assert_eq(count(g_out, " ok\n"), nchecks, "--only %s, %d ranks:\n%s", group, np, g_out);
    }
}

Test(tp_region, sp_allgather, .timeout = 120) { only("sp_allgather", 1); }
Test(tp_region, sp_reduce_scatter, .timeout = 120) { only("sp_reduce_scatter", 1); }
Test(tp_region, col_bwd, .timeout = 120) { only("col", 3); }
Test(tp_region, row_fwd, .timeout = 120) { only("row", 3); }
Test(tp_region, embed_fwd, .timeout = 120) { only("embed_fwd", 1); }
Test(tp_region, embed_bwd, .timeout = 120) { only("embed_bwd", 1); }
Test(tp_region, ce_fwd, .timeout = 120) { only("ce_fwd", 2); }
Test(tp_region, ce_bwd, .timeout = 120) {
    only("ce_bwd", 2);  // from the reference forward's lse: tp_ce_fwd is not called
    cr_assert(strstr(g_out, "vocab-parallel padding: zero gradient") && !strstr(g_out, "cross-entropy lse"), "%s", g_out);
}
Test(tp_region, sp_norm_sum, .timeout = 120) { only("sp_norm_sum", 3); }

Test(tp_region, only_names_known_groups, .timeout = 120) {
    int st = run_prog("tp_check", 2, "--only col,bogus");
    ASSERT_REFUSED(st, g_out, "tp_check", "--only bogus", "sp_norm_sum");
    st = run_prog("tp_check", 2, "--only embed_fwd,embed_bwd");
    cr_assert(st == 0 && strstr(g_out, "tp_check: 2 ranks: 2 checks, 0 wrong"), "exit %d:\n%s", st, g_out);
}

// ------------------------------------------------------------------ the tiny Transformer
static void against_one_process(int np, const char* args) {
    char a[512];
    snprintf(a, sizeof a, "--model tiny --context 16 --batch 2 --steps 5 --warmup 0 --check %s", args);
    const int st = run_prog("tp_train", np, a);
    cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, args, st, g_out);
    cr_assert(strstr(g_out, "check: OK: tp"), "%d ranks, %s:\n%s", np, args, g_out);
    cr_assert(!strstr(g_out, "DIFFERENT"), "%s", g_out);
    cr_assert_eq(count(g_out, "check: step "), 5 + 1, "5 steps and step 0's gradients:\n%s", g_out);
    cr_assert(strstr(g_out, "replicated norm weights: bitwise identical across each tensor group"), "%s", g_out);
}

Test(tp_train, tp_2_and_4_equal_one_process, .timeout = 300) {
    against_one_process(2, "");
    cr_assert(strstr(g_out, "tp 2 x dp 1 equals one process over 5 steps"), "%s", g_out);
    cr_assert(strstr(g_out, "parameters per rank: 86336"), "weights are ~1/2 per rank:\n%s", g_out);
    against_one_process(4, "");
    cr_assert(strstr(g_out, "tp 4 x dp 1 equals one process"), "%s", g_out);
}

Test(tp_train, tp_2_and_4_with_sequence_parallelism_equal_one_process, .timeout = 300) {
    against_one_process(2, "--sp");
    cr_assert(strstr(g_out, "tp 2 + SP x dp 1 equals one process"), "%s", g_out);
    against_one_process(4, "--sp");
    cr_assert(strstr(g_out, "tp 4 + SP x dp 1 equals one process"), "%s", g_out);
    against_one_process(4, "--sp --sp-keep-gathered");
    cr_assert(strstr(g_out, "tp 4 + SP x dp 1 equals one process"), "%s", g_out);
}

Test(tp_train, a_vocabulary_tp_does_not_divide, .timeout = 300) {
    against_one_process(4, "--vocab 1001");
    cr_assert(strstr(g_out, "vocabulary rows 251 a rank, 3 padding"), "%s", g_out);
    against_one_process(2, "--vocab 1001 --sp");
    cr_assert(strstr(g_out, "vocabulary rows 501 a rank, 1 padding"), "%s", g_out);
}

Test(tp_train, tp_1_is_one_process_bit_for_bit, .timeout = 120) {
    against_one_process(1, "");
    cr_assert(strstr(g_out, "||p_tp - p_one|| / ||p_one - p_init|| = 0 ") &&
              strstr(g_out, "||g_tp - g_one|| / ||g_one|| = 0\n"), "%s", g_out);
}

Test(tp_train, dp_2_x_tp_2_equals_one_process_on_the_global_batch, .timeout = 300) {
    against_one_process(4, "--tp 2");
    cr_assert(strstr(g_out, "tp 2 x dp 2 equals one process") &&
              strstr(g_out, "shards: bitwise identical across each data-parallel group"), "%s", g_out);
    against_one_process(4, "--tp 2 --sp");
    cr_assert(strstr(g_out, "tp 2 + SP x dp 2 equals one process"), "%s", g_out);
}

Test(tp_train, sp_without_the_norm_gradient_sum_is_caught, .timeout = 120) {
    const int st = run_prog("tp_train", 2, "--model tiny --context 16 --steps 2 --warmup 0 --check --sp --sp-norm-sum 0");
    cr_assert_eq(st, 1, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "replicated norm weights: DIFFERENT across a tensor group"), "%s", g_out);
    cr_assert(strstr(g_out, "check: step 0 gradients: worst parameter") && strstr(g_out, "DIFFERENT"), "%s", g_out);
}

// The tiny model (L = 2, B·T·C = 2·16·64 = 2048 = M, N = 32 rows, C = 64):
//   no SP: 4L + 4 = 12 all-reduces: 10 of M (embedding, 2 per block forward and backward, the
//          head's dX) + the cross-entropy's N (max) and 2N (Σ exp | target) = 20576 elements;
//   SP kept: 4L + 2 = 10 all-gathers and 10 reduce-scatters of M, and 3 all-reduces: the
//          cross-entropy's 3N and the 2L + 1 norm weights' 5·64 = 416 elements;
//   SP:    the same and 2L + 1 = 5 more all-gathers of M (the norm outputs gathered again).
// A ring sends 2(n-1)/n of an all-reduce's tensor, (n-1)/n of the others': at n = 2, 4 bytes a
// float, 82304 B = 0.0785 MiB without SP, 83584 B = 0.0797 MiB with the outputs kept and
// 104064 B = 0.0992 MiB with them gathered again.
Test(tp_train, collectives_per_step_are_the_formula, .timeout = 120) {
    static const char* const args[3] = {"", "--sp --sp-keep-gathered", "--sp"};
    static const char* const want[3] = {
        "12 all-reduces (20576 elements), 0 all-gathers (0), 0 reduce-scatters (0); a ring sends 0.0785 MiB",
        "3 all-reduces (416 elements), 10 all-gathers (20480), 10 reduce-scatters (20480); a ring sends 0.0797 MiB",
        "3 all-reduces (416 elements), 15 all-gathers (30720), 10 reduce-scatters (20480); a ring sends 0.0992 MiB"};
    for (int k = 0; k < 3; k++) {
        char a[256];
        snprintf(a, sizeof a, "--model tiny --context 16 --batch 2 --steps 1 --warmup 0 %s", args[k]);
        const int st = run_prog("tp_train", 2, a);
        cr_assert_eq(st, 0, "%s: exit %d:\n%s", args[k], st, g_out);
        cr_assert(strstr(g_out, want[k]), "%s: want '%s':\n%s", args[k], want[k], g_out);
    }
}

// The floats a rank saves for the backward (tp_model.c's allocations, README "Memory per rank"):
// Nr = the residual rows held (N, or N/n under SP).
static long long acts_floats(int L, int B, int T, int C, int NH, int F, int V, int n, int sp) {
    const long long N = (long long)B * T, Nr = sp ? N / n : N, Vl = (V + n - 1) / n;
    long long f = (L + 1) * Nr * C                        // residual stream entering each block and the head
      + 3LL * L * Nr * C + 2LL * L * Nr         // ln1, mid, ln2 and the two norms' 1/rms
      + (long long)L * N * (3LL * C / n + C / n + 3LL * F / n)  // q|k|v, attention output, h1|h3, gate
      + (long long)L * B * (NH / n) * T * T      // attention probabilities
      + Nr * C + Nr + N * Vl + N;               // final norm, its 1/rms, logits, lse
    if (sp == 2) f += 2LL * L * N * C + N * C;  // the gathered norm outputs, kept
    return f;
}

Test(tp_train, activations_per_rank_are_the_formula_and_sp_divides_the_residual, .timeout = 300) {
    static const char* const args[3] = {"", "--sp", "--sp --sp-keep-gathered"};
    for (int n = 2; n <= 4; n += 2)
        for (int k = 0; k < 3; k++) {
            char a[256], want[96];
            snprintf(a, sizeof a, "--model tiny --context 16 --batch 2 --steps 1 --warmup 0 %s", args[k]);
            const int st = run_prog("tp_train", n, a);
            cr_assert_eq(st, 0, "%d ranks %s: exit %d:\n%s", n, args[k], st, g_out);
            snprintf(want, sizeof want, "activations per rank: %lld bytes", 4 * acts_floats(2, 2, 16, 64, 4, 192, 512, n, k));
            cr_assert(strstr(g_out, want), "%d ranks %s: want '%s':\n%s", n, args[k], want, g_out);
        }
}

// ------------------------------------------------------------------ ZeRO-1 inside the grid
// One --check run's numbers: the loss and gradient norm of every step, the gathered
// parameters' fingerprint, the optimizer bytes counted.
typedef struct {
    int steps;
    double loss[8], gnorm[8];
    char loss_txt[8][16];
    unsigned long long fp;
    long long opt_bytes;
    size_t psi_tp;  // parameters per rank
    char out[1 << 17];
} zrun_t;

static void zrun(zrun_t* z, int np, const char* args) {
    char a[512];
    snprintf(a, sizeof a, "--model tiny --context 16 --batch 2 --steps 5 --warmup 0 --check %s", args);
    const int st = run_prog("tp_train", np, a);
    cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, args, st, g_out);
    cr_assert(strstr(g_out, "check: OK: tp") && !strstr(g_out, "DIFFERENT"), "%d ranks, %s:\n%s", np, args, g_out);
    snprintf(z->out, sizeof z->out, "%s", g_out);
    z->steps = 0;
    for (const char* q = g_out; (q = strstr(q, "  step ")); q++) {
        int k;
        char lt[16];
        double g;
        if (sscanf(q, "  step %d  loss %15s  grad norm %lf", &k, lt, &g) != 3 || k != z->steps || k >= 8) continue;
        snprintf(z->loss_txt[k], sizeof z->loss_txt[k], "%s", lt);
        z->loss[k] = strtod(lt, NULL), z->gnorm[k] = g;
        z->steps++;
    }
    cr_assert_eq(z->steps, 5, "%s", g_out);
    const char* f = strstr(g_out, "check: gathered parameters fnv1a ");
    cr_assert(f && sscanf(f, "check: gathered parameters fnv1a %llx", &z->fp) == 1, "%s", g_out);
    const char* o = strstr(g_out, "optimizer state per rank: counted ");
    cr_assert(o && sscanf(o, "optimizer state per rank: counted %lld bytes (MEM_OPTIM, the same on every rank)", &z->opt_bytes) == 1,
              "%s", g_out);
    const char* pp = strstr(g_out, "parameters per rank: ");
    cr_assert(pp && sscanf(pp, "parameters per rank: %zu", &z->psi_tp) == 1, "%s", g_out);
}

// ZeRO-1's optimizer state, by the layout's own arithmetic (tp.h): the shard of psi elements
// padded to a multiple of dp·64, split dp ways, 2 moments of 4 bytes.
static long long zero1_bytes(size_t psi, int dp) {
    const size_t unit = (size_t)dp * 64, P = (psi + unit - 1) / unit * unit;
    return 8LL * (long long)(P / (size_t)dp);
}

// At dp 2 every element of the reduce-scatter is a + b, as in the all-reduce (fp32 addition
// commutes), and AdamW is element-wise: the trained model must be the same bits. The gradient
// norm is the same squares summed in double in another grouping (pieces, then dp, then tp):
// they may differ by ~2e5·1.1e-16 relative, and are printed to 6 decimals, so they must agree
// within one unit of the last digit printed.
static void zero1_bitwise(int np, const char* grid) {
    static zrun_t a, b;
    char args[256];
    zrun(&a, np, grid);
    snprintf(args, sizeof args, "%s --zero 1", grid);
    zrun(&b, np, args);
    cr_assert(strstr(b.out, "with ZeRO-1 equals one process"), "%s", b.out);
    cr_assert_eq(a.fp, b.fp, "%s: parameters %016llx without ZeRO, %016llx with ZeRO-1:\n%s", grid, a.fp, b.fp, b.out);
    for (int k = 0; k < 5; k++) {
        cr_assert_str_eq(a.loss_txt[k], b.loss_txt[k], "%s: step %d's loss", grid, k);
        cr_assert(fabs(a.gnorm[k] - b.gnorm[k]) <= 1.0001e-6, "%s: step %d's grad norm %.6f vs %.6f", grid, k, a.gnorm[k], b.gnorm[k]);
    }
    cr_assert_eq(a.opt_bytes, 8LL * (long long)a.psi_tp, "%s: without ZeRO 8 x %zu:\n%s", grid, a.psi_tp, a.out);
    cr_assert_eq(b.opt_bytes, zero1_bytes(b.psi_tp, np / 2), "%s: ZeRO-1 8 x S:\n%s", grid, b.out);
}

Test(tp_zero, dp_2_x_tp_2_with_zero_1_is_the_same_bits_as_without, .timeout = 300) {
    zero1_bitwise(4, "--tp 2");
    zero1_bitwise(4, "--tp 2 --sp");
}

// The tiny model at TP 2: 86336 elements a rank, padded to 86400 = 675·128, S = 43200, so 8·S
// = 345600 bytes of moments per rank (against 690688 without ZeRO); the data-parallel group
// moves the padded 86400 elements once each way.
Test(tp_zero, the_optimizer_state_is_a_dp_th_of_the_shard_plus_padding, .timeout = 120) {
    static zrun_t z;
    zrun(&z, 4, "--tp 2 --zero 1");
    cr_assert_eq(z.psi_tp, 86336);
    cr_assert_eq(z.opt_bytes, 345600, "%s", z.out);
    cr_assert(strstr(z.out, "formula 8 x S = 8 x 43200 = 345600 bytes"), "%s", z.out);
    cr_assert(strstr(z.out, "1 reduce-scatter (gradients) + 1 all-gather (parameters) of 86400 elements"), "%s", z.out);
}

// At dp 3 a reduce-scatter may add three gradients in another order than the all-reduce, so the
// two runs may differ in the last bits; each must equal one process within --check's derived
// tolerances. Step 0's loss is computed before any update: the same on both.
Test(tp_zero, dp_3_x_tp_1_with_zero_1_equals_one_process, .timeout = 300) {
    static zrun_t a, b;
    zrun(&a, 3, "--tp 1");
    zrun(&b, 3, "--tp 1 --zero 1");
    cr_assert(strstr(b.out, "tp 1 x dp 3 with ZeRO-1 equals one process"), "%s", b.out);
    cr_assert_str_eq(a.loss_txt[0], b.loss_txt[0]);
    cr_assert_eq(a.opt_bytes, 8LL * (long long)a.psi_tp);
    cr_assert_eq(b.opt_bytes, zero1_bytes(b.psi_tp, 3), "%s", b.out);
    cr_assert(b.opt_bytes * 3 >= a.opt_bytes && b.opt_bytes * 3 < a.opt_bytes + 3 * 8 * 64, "a third, plus padding");
}

// --zero 1 without data parallelism is allowed: one piece, the collectives of a one-rank group,
// the whole shard's moments (no padding for 86336 = 1349·64): plain TP bit for bit.
Test(tp_zero, zero_1_at_dp_1_is_plain_tp, .timeout = 120) {
    static zrun_t a, b;
    zrun(&a, 2, "");
    zrun(&b, 2, "--zero 1");
    cr_assert_eq(a.fp, b.fp, "%016llx vs %016llx:\n%s", a.fp, b.fp, b.out);
    cr_assert_eq(a.opt_bytes, b.opt_bytes);
    cr_assert(!strstr(b.out, "data-parallel collectives"), "%s", b.out);
}

// ------------------------------------------------------------------ refusals
Test(tp_train, refusals_in_one_line, .timeout = 300) {
    int st = run_prog("tp_train", 4, "--model tiny --tp 3");
    ASSERT_REFUSED(st, g_out, "tp_train", "--tp 3 does not divide the 4 ranks");
    st = run_prog("tp_train", 3, "--model tiny");
    ASSERT_REFUSED(st, g_out, "tp_train", "4 heads do not split over 3", "divides the head count 4");
    st = run_prog("tp_train", 2, "--model xl --context 8");
    ASSERT_REFUSED(st, g_out, "tp_train", "25 heads do not split over 2");
    st = run_prog("tp_train", 4, "--model tiny --sp --context 10");
    ASSERT_REFUSED(st, g_out, "tp_train", "--context 10", "4 equal pieces", "divisible by --tp 4");
    st = run_prog("tp_train", 2, "--model tiny --backend nccl");
    ASSERT_REFUSED(st, g_out, "tp_train", "--backend nccl", "not built yet");
    st = run_prog("tp_train", 2, "--model tiny --sp-norm-sum 2");
    ASSERT_REFUSED(st, g_out, "tp_train", "--sp-norm-sum");
    st = run_prog("tp_train", 2, "--model tiny --sp-keep-gathered");
    ASSERT_REFUSED(st, g_out, "tp_train", "--sp-keep-gathered", "--sp");
    st = run_prog("tp_train", 4, "--model tiny --tp 2 --zero 2");
    ASSERT_REFUSED(st, g_out, "tp_train", "--zero: 2", "give 0", "or 1");
    st = run_prog("tp_train", 2, "--model tiny --zero -1");
    ASSERT_REFUSED(st, g_out, "tp_train", "--zero: -1");
}
