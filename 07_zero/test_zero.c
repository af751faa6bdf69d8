// Stage 07, ZeRO-1 and ZeRO-2:
// - the layout helpers: zero_shard_range (equal 64-aligned shards covering the padded
//   buffer) and zero_assign_buckets (buckets tile the padded buffer, each n equal aligned
//   pieces, the cap respected, the compact offsets q adding up to one shard);
// - ZeRO-1/2 on both ToyModels (build/07_zero/zero_toy): a parameter count (902, 1350) that
//   is not a multiple of n·64 (padding) and shard boundaries through parameters, frozen
//   parameters, 1-4 ranks, against unsharded AdamW and PyTorch, optimizer bytes == formula;
// - the tiny Transformer (build/07_zero/zero_train): every level and the course's version
//   against DDP (same global batch) on 2-4 ranks, ranks bitwise identical, optimizer state per
//   rank == 8 bytes x the trainable elements it owns (allocator, tag optim), shard boundaries
//   through parameters (3 and 4 ranks), bad flags;
// - ZeRO-2 on ZeRO-3's engine (zero3.h, level 2: no flat gradient buffer): zero_train's zero2
//   equals DDP on 2-4 ranks beside the older staging ZeRO-2 (zero2s), with grads == the per-unit
//   shard of zero3_plan's S elements, the working buffers exact, params + grads + optimizer
//   state == 4 x padded flat + 4S + 8 x owned (4Psi + 12Psi/n with the padding); on 2 GPUs its
//   setup peak holds the shard as its only gradient memory, below ZeRO-1's;
// - ZeRO-3 (07_zero/zero3.h): the per-unit plan; the CPU model run unit by unit through
//   parameter and gradient windows over copies gives the bits of the model without them;
//   zero_train's zero3 run equals DDP on 2-4 ranks, with params + grads + optimizer state per
//   rank == 8 x its shard + 8 x its owned trainable elements (16Psi/n with the padding);
// - sharded construction (a single level, lean): every level trains to the bits of the path that
//   builds the whole model first, on 2-4 ranks; on 2 GPUs its setup peak holds only the level's
//   own parameters and gradients.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "07_zero/zero.h"
#include "07_zero/zero3.h"
#include "common/model_cpu.h"
#include "common/gpu.h"
#include "tests/harness.h"

static char g_out[1 << 17];

static int run_prog(const char* prog, int np, const char* args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/07_zero/%s %s", np, build_dir(), prog, args);
    return run_capture(cmd, g_out, sizeof g_out);
}

// ------------------------------------------------------------------ layout
Test(zero_layout, shards_are_equal_aligned_and_cover_the_padded_buffer) {
    const size_t totals[] = {1, 63, 64, 902, 1350, 172352, 1000003};
    for (size_t ti = 0; ti < sizeof totals / sizeof totals[0]; ti++)
        for (int n = 1; n <= 8; n++) {
            size_t P = 0, prev_end = 0;
            for (int r = 0; r < n; r++) {
                size_t b, e, p;
                zero_shard_range(totals[ti], n, r, &b, &e, &p);
                if (r == 0) P = p;
                cr_assert_eq(p, P);
                cr_assert_eq(b, prev_end, "total %zu, n %d: shard %d starts at %zu, not %zu", totals[ti], n, r, b, prev_end);
                cr_assert_eq(b % ZERO_ALIGN, 0, "shard %d of %d not aligned", r, n);
                cr_assert_eq(e - b, P / n, "unequal shards");
                prev_end = e;
            }
            cr_assert_eq(prev_end, P);
            cr_assert(P >= totals[ti] && P - totals[ti] < (size_t)n * ZERO_ALIGN, "total %zu, n %d: padded to %zu", totals[ti], n, P);
            cr_assert_eq(zero_padded_total(totals[ti], n), P);
        }
}

Test(zero_layout, buckets_tile_the_buffer_in_equal_aligned_pieces) {
    const int ns[] = {1, 2, 3, 4, 7};
    const size_t caps[] = {0, 1000, 4096, 1 << 20, (size_t)1 << 40};
    for (size_t ni = 0; ni < 5; ni++)
        for (size_t ci = 0; ci < 5; ci++) {
            const int n = ns[ni];
            const size_t P = zero_padded_total(172352, n);
            zero_bucket_t b[4096];
            const int nb = zero_assign_buckets(P, n, caps[ci], b, 4096);
            cr_assert(nb >= 1 && nb <= 4096);
            size_t hi = P, q = 0;
            for (int k = 0; k < nb; k++) {
                cr_assert_eq(b[k].end, hi, "n %d cap %zu: bucket %d ends at %zu, not %zu", n, caps[ci], k, b[k].end, hi);
                cr_assert_eq(b[k].end - b[k].begin, (size_t)n * b[k].piece);
                cr_assert_eq(b[k].piece % ZERO_ALIGN, 0);
                cr_assert(b[k].piece * n * 4 <= caps[ci] || b[k].piece == ZERO_ALIGN, "bucket over the cap");
                cr_assert_eq(b[k].q, q);
                q += b[k].piece;
                hi = b[k].begin;
            }
            cr_assert_eq(hi, 0, "buckets must reach the start");
            cr_assert_eq(q, P / n, "a rank's pieces add up to one shard");
        }
}

// ------------------------------------------------------------------ ToyModels
Test(zero_toy, zero1_zero2_both_models_1_to_4_ranks) {
    for (int np = 1; np <= 4; np++) {
        const int st = run_prog("zero_toy", np, "--mode all");
        cr_assert_eq(st, 0, "%d ranks: exit %d:\n%s", np, st, g_out);
        cr_assert(strstr(g_out, "OK: all 6 runs"), "%d ranks:\n%s", np, g_out);
        if (np == 3) cr_assert(strstr(g_out, "902 parameters in a buffer of 960 (58 padding)"), "%s", g_out);
    }
}

// ------------------------------------------------------------------ the tiny Transformer
static void against_ddp(int np, const char* args) {
    char a[512];
    snprintf(a, sizeof a, "--model tiny --context 16 --batch 2 --steps 2 --warmup 1 --check-ddp 1 %s", args);
    const int st = run_prog("zero_train", np, a);
    cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, args, st, g_out);
    cr_assert(!strstr(g_out, "DIFFERENT") && !strstr(g_out, "!= the formula"), "%s", g_out);
}

static int count(const char* s, const char* what) {
    int n = 0;
    for (const char* q = s; (q = strstr(q, what)); q++) n++;
    return n;
}

Test(zero_train_mpi, every_level_equals_ddp_2_3_4_ranks) {
    for (int np = 2; np <= 4; np++) {
        against_ddp(np, "--zero all --bucket-mb 0.05");
        cr_assert_eq(count(g_out, "replicas bitwise identical on every rank"), 4, "%s", g_out);
        cr_assert_eq(count(g_out, "== the formula on every rank"), 4, "%s", g_out);
        cr_assert(strstr(g_out, "check-ddp: zero1: 0 of") && strstr(g_out, "check-ddp: zero2: 0 of"), "%s", g_out);
        // ZeRO-3: the same tolerance (CHECK_RTOL/ATOL in zero_train: the same gradients averaged
        // in another grouping, amplified by AdamW's normalisation; on the CPU over MPI it ends
        // bitwise equal in practice), its state == 16Psi/n with the padding on every rank.
        cr_assert(strstr(g_out, "check-ddp: zero3: 0 of"), "%s", g_out);
        cr_assert(strstr(g_out, "params + grads + optimizer state == 16Psi/n on every rank"), "%s", g_out);
        cr_assert(!strstr(g_out, " 0 piece boundaries cut"), "%d ranks: a piece boundary must cut a parameter:\n%s", np, g_out);
        if (np == 3) cr_assert(!strstr(g_out, "(unit padding 0)"), "%d ranks: units not divisible by n must be padded:\n%s", np, g_out);
        if (np >= 3) cr_assert(!strstr(g_out, " 0 shard boundaries cut"), "%d ranks: a shard boundary must cut a parameter:\n%s", np, g_out);
        if (np == 4) cr_assert(strstr(g_out, "padding 192"), "%s", g_out);
    }
}

// HSDP (--zero hsdp): ZeRO-3 over each node's ranks, the gradient shards averaged across the
// nodes. Against DDP with the same band as ZeRO-3 (the same gradients averaged in another
// grouping: a node's reduce-scatter, then an all-reduce across nodes), at 4 ranks as 2 emulated
// nodes x 2, 2 nodes x 1 (shards of one: DDP across nodes), 1 node x 4 (ZeRO-3 alone), 6 ranks
// as 3 x 2; its state is 16Psi/l a rank with l the ranks of a node. Alone (lean) it runs too.
static int run_emulated(int nodes, int np, const char* args) {
    char cmd[1024], flags[64] = "";
    if (nodes > 0) snprintf(flags, sizeof flags, "--emulate-nodes %d", nodes);
    snprintf(cmd, sizeof cmd, "MPIRUN_EMULATE_NODES= MPIRUN_TIMEOUT=180 timeout -k 5 200 scripts/mpirun.sh %s %d %s/07_zero/zero_train "
             "--model tiny --context 16 --batch 2 --steps 2 --warmup 1 --backend mpi %s", flags, np, build_dir(), args);
    return run_capture(cmd, g_out, sizeof g_out);
}
Test(zero_train_mpi, hsdp_equals_ddp_on_emulated_nodes, .timeout = 600) {
    static const struct { int nodes, np; const char* layout; } cases[] = {
        {2, 4, "(l = 2 ranks a node, 2 nodes;"}, {2, 2, "(l = 1 rank a node, 2 nodes;"},
        {0, 4, "(l = 4 ranks a node, 1 node;"}, {3, 6, "(l = 2 ranks a node, 3 nodes;"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int st = run_emulated(cases[i].nodes, cases[i].np, "--zero 0,hsdp --check-ddp 1");
        cr_assert_eq(st, 0, "%d ranks on %d nodes: exit %d:\n%s", cases[i].np, cases[i].nodes, st, g_out);
        cr_assert(strstr(g_out, "check-ddp: hsdp: 0 of"), "%s", g_out);
        cr_assert(strstr(g_out, "params + grads + optimizer state == 16Psi/l on every rank") &&
                  strstr(g_out, cases[i].layout), "%s", g_out);
        cr_assert(!strstr(g_out, "DIFFERENT") && !strstr(g_out, "!= the formula"), "%s", g_out);
    }
    const int st = run_emulated(2, 4, "--zero hsdp");
    cr_assert_eq(st, 0, "hsdp alone: exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "hsdp    done:") && strstr(g_out, "replicas bitwise identical on every rank"), "%s", g_out);
}

Test(zero_train_mpi, course_version_equals_ddp_2_3_4_ranks) {
    for (int np = 2; np <= 4; np++) {
        against_ddp(np, "--zero 1 --shard course");
        cr_assert(strstr(g_out, "check-ddp: course: 0 of"), "%s", g_out);
        cr_assert_eq(count(g_out, "== the formula on every rank"), 2, "%s", g_out);
    }
}

// S of zero3_plan for the tiny model's units (context 16) on n ranks: what zero_train's zero2 and
// zero3 must report as their shard, computed here from the plan, not read from the program.
static size_t tiny_shard_elems(int n) {
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 16, &cfg), 0);
    param_layout_t lay = param_layout_make(&cfg);
    const int U = model_n_units(&cfg);
    size_t bounds[64];
    cr_assert(U < 64);
    for (int u = 0; u < U; u++) model_unit_span(&lay, &cfg, u, &bounds[u], &bounds[u + 1]);
    bounds[U] = lay.total;
    const size_t S = zero3_plan(bounds, U, n, NULL);
    param_layout_free(&lay);
    return S;
}

// The MiB value in column `col` (0 = run name) of a run's rank-0 row of zero_train's memory table.
static double mem_table(const char* out, const char* run, int col) {
    char key[64];
    snprintf(key, sizeof key, "| %-6s |    0 |", run);
    const char* q = strstr(out, key);
    cr_assert(q, "no memory row for %s:\n%s", run, out);
    for (int k = 0; k < col; k++) {
        q = strchr(q + 1, '|');
        cr_assert(q, "%s", out);
    }
    return atof(q + 1);
}

// The number after `key` in a line of zero_train's output (a setup-peak line: "grads 12.34").
static double after_field(const char* line, const char* key) {
    const char* q = strstr(line, key);
    cr_assert(q, "no '%s' in %s", key, line);
    return atof(q + strlen(key));
}

// ZeRO-2 on ZeRO-3's engine against DDP (the same tolerance as every level, CHECK_RTOL/ATOL in
// zero_train: the same gradients averaged per unit instead of per DDP bucket, which AdamW's
// normalisation can amplify for near-zero second moments; on the CPU over MPI it ends bitwise
// equal in practice), beside the older staging ZeRO-2 (zero2s), on 2, 3 and 4 ranks: Psi =
// 172352 is not a multiple of 3 x 64 (padding at 3 ranks) nor are the units of 4 x 64, and piece
// boundaries cut through parameters. The accounting: optimizer state == 8 bytes x owned on every
// rank; grads == 4 x S bytes exactly, S from zero3_plan (no flat 4Psi gradient buffer); the
// working buffers == zero3_work_bytes; params + grads + optim == 4 x padded flat + 4S + 8 x owned.
Test(zero_train_mpi, zero2_on_units_equals_ddp_2_3_4_ranks) {
    for (int np = 2; np <= 4; np++) {
        against_ddp(np, "--zero 2 --zero2 both --bucket-mb 0.05");
        cr_assert(strstr(g_out, "check-ddp: zero2: 0 of") && strstr(g_out, "check-ddp: zero2s: 0 of"), "%s", g_out);
        cr_assert_eq(count(g_out, "replicas bitwise identical on every rank"), 3, "%d ranks:\n%s", np, g_out);
        cr_assert_eq(count(g_out, "== the formula on every rank"), 3, "%d ranks:\n%s", np, g_out);
        cr_assert(strstr(g_out, "zero2   params + grads + optimizer state == 4Psi+12Psi/n on every rank"), "%s", g_out);
        const size_t S = tiny_shard_elems(np);
        char want[160];
        snprintf(want, sizeof want, "zero2   grads == the shard on every rank (4 x %zu = %zu bytes", S, 4 * S);
        cr_assert(strstr(g_out, want), "%d ranks: want '%s':\n%s", np, want, g_out);
        cr_assert(strstr(g_out, "working buffers == "), "%s", g_out);
        snprintf(want, sizeof want, "a shard of %zu elements a rank", S);
        cr_assert(strstr(g_out, want), "%d ranks: want '%s':\n%s", np, want, g_out);
        cr_assert(!strstr(g_out, " 0 piece boundaries cut"), "%d ranks: a piece boundary must cut a parameter:\n%s", np, g_out);
        if (np == 3) cr_assert(!strstr(g_out, "(unit padding 0)"), "%d ranks: units not divisible by n must be padded:\n%s", np, g_out);
        // The table: zero2's grads are the shard (4S bytes), the staging one's the flat buffer +
        // its shard, above a whole 4Psi; params are the whole flat buffer in both.
        const double MiB = 1048576.0, psi4 = 4.0 * 172352 / MiB;
        cr_assert(fabs(mem_table(g_out, "zero2", 3) - 4.0 * S / MiB) < 0.006, "%d ranks:\n%s", np, g_out);
        cr_assert(mem_table(g_out, "zero2s", 3) > psi4, "%d ranks:\n%s", np, g_out);
        cr_assert(mem_table(g_out, "zero2", 2) >= psi4 - 0.006, "%d ranks:\n%s", np, g_out);
    }
}

Test(zero_train_mpi, tables_and_bad_flags) {
    int st = run_prog("zero_train", 2, "--context 16 --zero 0,2 --steps 1 --warmup 0");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "| zero2  |") && strstr(g_out, "4Psi+12Psi/n") && strstr(g_out, "16Psi"), "%s", g_out);
    // --layers: a deeper model of the size's width (tiny has 2 blocks), named so in the header
    // --zero2 staging: the older ZeRO-2 alone, under its own name and formula
    st = run_prog("zero_train", 2, "--context 16 --zero 2 --zero2 staging --steps 1 --warmup 0");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "| zero2s |") && strstr(g_out, "8Psi+12Psi/n") && !strstr(g_out, "| zero2  |"), "%s", g_out);
    st = run_prog("zero_train", 2, "--context 16 --layers 3 --zero 1 --steps 1 --warmup 0");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "zero_train: tiny/L3,"), "%s", g_out);
    const char* cases[][2] = {
        {"--zero 4", "--zero: '4' is not a level"},
        {"--zero2 half", "--zero2"},
        {"--zero 3 --precision fp32 --reduce-dtype bf16 --backend mpi", "--reduce-dtype bf16: applies to"},
        {"--zero ''", "--zero: empty list"},
        {"--shard half", "--shard"},
        {"--check-ddp 2", "--check-ddp: 2 must be 0 or 1"},
        {"--layers -1", "--layers: -1 is out of range"},
        {"--check-single 2", "--check-single: 2 must be 0 or 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = run_prog("zero_train", 2, cases[i][0]);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cases[i][0], st, g_out);
        cr_assert(strstr(g_out, cases[i][1]), "%s:\n%s", cases[i][0], g_out);
        cr_assert_eq(count(g_out, "error:"), 1, "%s: one line:\n%s", cases[i][0], g_out);
    }
}

// Bad input under MPI: one line from the whole job, exit 2, naming the flag and the value; the
// --csv place is checked before any work, with the system's reason.
Test(zero_train_mpi, bad_input_is_one_line_from_the_whole_job, .timeout = 120) {
    char args[1024];
    const char* plain = test_plain_file("plain07");
    snprintf(args, sizeof args, "--context 16 --zero 1 --steps 1 --warmup 0 --csv %s/x.csv", plain);
    int st = run_prog("zero_train", 2, args);
    ASSERT_REFUSED(st, g_out, "zero_train", "--csv: cannot write", plain, "Not a directory");
    st = run_prog("zero_train", 3, "--context 16 --zero 1,,2 --steps 1");
    ASSERT_REFUSED(st, g_out, "zero_train", "--zero: '1,,2' has an empty item");
    st = run_prog("zero_train", 2, "--context 16 --zero 1 --steps 1 --comm-timeout -3");
    ASSERT_REFUSED(st, g_out, "zero_train", "--comm-timeout: -3 is negative");
}

// The MiB value in column `col` of a run's rank-0 row of zero_train's peaks-by-phase table
// (1 after init, 2 step 1 before the optimizer step, 3 step 1 optimizer step, 4 step 1 live
// after, 5 later steps' peak, 6 later steps' live after).
static double phase_table(const char* out, const char* run, int col) {
    const char* t = strstr(out, "| after init |");
    cr_assert(t, "no peaks-by-phase table:\n%s", out);
    char key[64];
    snprintf(key, sizeof key, "| %-6s |    0 |", run);
    const char* q = strstr(t, key);
    cr_assert(q, "no phase row for %s:\n%s", run, out);
    for (int k = 0; k < col + 1; k++) {
        q = strchr(q + 1, '|');
        cr_assert(q, "%s", out);
    }
    return atof(q + 1);
}

// The handout's peaks "after initialisation, before and after the optimizer step": AdamW's
// moments appear in the first optimizer step, so that step's peak exceeds the peak before it by
// exactly the optimizer state of the memory table (DDP 8Psi, ZeRO-1 8Psi/n), and nothing else
// grows afterwards: the live bytes after step 1 are those after every later step. Tolerance
// 0.02 MiB: the three numbers are printed rounded to 0.01 MiB (0.005 each).
Test(zero_train_mpi, peaks_by_phase_show_the_optimizer_state_appear) {
    const int st = run_prog("zero_train", 2, "--zero 0,1 --steps 2 --warmup 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    const char* runs[] = {"ddp", "zero1"};
    for (int i = 0; i < 2; i++) {
        const double before = phase_table(g_out, runs[i], 2), opt = phase_table(g_out, runs[i], 3);
        const double optim = mem_table(g_out, runs[i], 4);
        cr_assert(optim > 0.1, "%s:\n%s", runs[i], g_out);
        cr_assert(fabs((opt - before) - optim) < 0.02, "%s: step 1 grew by %.2f MiB, optimizer state %.2f:\n%s", runs[i],
                  opt - before, optim, g_out);
        cr_assert(fabs(phase_table(g_out, runs[i], 4) - phase_table(g_out, runs[i], 6)) < 0.006, "%s:\n%s", runs[i], g_out);
        cr_assert(phase_table(g_out, runs[i], 5) >= phase_table(g_out, runs[i], 6), "%s:\n%s", runs[i], g_out);
        cr_assert(phase_table(g_out, runs[i], 1) > 0, "%s:\n%s", runs[i], g_out);
    }
    // ZeRO-1 keeps half of DDP's moments on 2 ranks
    cr_assert(fabs(2 * mem_table(g_out, "zero1", 4) - mem_table(g_out, "ddp", 4)) < 0.02, "%s", g_out);
}

Test(zero_train_nccl, every_level_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    against_ddp(test_gpu_ranks(), "--backend nccl --zero all --bucket-mb 0.05");
    cr_assert(strstr(g_out, "check-ddp: zero3: 0 of"), "%s", g_out);
    cr_assert(strstr(g_out, "params + grads + optimizer state == 16Psi/n on every rank"), "%s", g_out);
    cr_assert(strstr(g_out, "check-ddp: zero2: 0 of"), "%s", g_out);
    cr_assert(strstr(g_out, "zero2   params + grads + optimizer state == 4Psi+12Psi/n on every rank"), "%s", g_out);
    against_ddp(2, "--backend nccl --zero 1 --shard course");
}

// ZeRO-2 on the GPUs: equal to DDP beside the staging one, the same exact accounting as on the
// CPU (grads == 4S from zero3_plan, working buffers, 4 x flat + 4S + 8 x owned), a context and
// batch that are not powers of two; then lean (a single level): its setup peak's gradient memory
// is the shard alone (the model made with MODEL_GPU_NO_FLAT_GRADS), params the padded flat
// buffer, and its grads below lean ZeRO-1's (4P); bf16 refused in one line.
Test(zero_train_nccl, zero2_on_units_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    const int np = test_gpu_ranks();
    int st = run_prog("zero_train", np, "--backend nccl --model tiny --context 16 --batch 3 --steps 3 --warmup 1 --zero 2 --zero2 both --check-ddp 1 --bucket-mb 0.05");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "check-ddp: zero2: 0 of") && strstr(g_out, "check-ddp: zero2s: 0 of") && !strstr(g_out, "DIFFERENT"), "%s", g_out);
    cr_assert_eq(count(g_out, "== the formula on every rank"), 3, "%s", g_out);
    cr_assert(strstr(g_out, "zero2   params + grads + optimizer state == 4Psi+12Psi/n on every rank"), "%s", g_out);
    const size_t S2 = tiny_shard_elems(np);
    char want[160];
    snprintf(want, sizeof want, "zero2   grads == the shard on every rank (4 x %zu = %zu bytes", S2, 4 * S2);
    cr_assert(strstr(g_out, want) && strstr(g_out, "working buffers == "), "want '%s':\n%s", want, g_out);

    const double MiB = 1048576.0;
    st = run_prog("zero_train", np, "--backend nccl --model small --context 64 --batch 2 --steps 1 --warmup 1 --zero 2");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    const char* line = strstr(g_out, "zero2   setup peak");
    cr_assert(line && strstr(line, "lean: built sharded"), "%s", g_out);
    cr_assert(!strstr(g_out, "!= ") && strstr(g_out, "zero2   grads == the shard"), "%s", g_out);
    const char* sh = strstr(g_out, "a shard of ");
    const char* pt = strstr(g_out, "padded total ");
    cr_assert(sh && pt, "%s", g_out);
    const double S = atof(sh + strlen("a shard of ")), P = atof(pt + strlen("padded total "));
    const double z2_grads = after_field(line, "grads ");
    cr_assert(fabs(z2_grads - 4 * S / MiB) < 0.006, "grads at the setup peak, want %.2f MiB:\n%s", 4 * S / MiB, g_out);
    cr_assert(fabs(after_field(line, "params ") - 4 * P / MiB) < 0.006, "params at the setup peak, want %.2f MiB:\n%s", 4 * P / MiB, g_out);
    st = run_prog("zero_train", np, "--backend nccl --model small --context 64 --batch 2 --steps 1 --warmup 1 --zero 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    line = strstr(g_out, "zero1   setup peak");
    cr_assert(line, "%s", g_out);
    const double z1_grads = after_field(line, "grads ");
    cr_assert(z2_grads < 0.75 * z1_grads, "ZeRO-2's setup-peak grads %.2f MiB must be well below ZeRO-1's %.2f MiB", z2_grads, z1_grads);

    st = run_prog("zero_train", np, "--backend nccl --zero 2 --precision bf16");
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "--zero 2 runs fp32 only") && count(g_out, "error:") == 1, "%s", g_out);
}

Test(zero_train_nccl, zero3_alone_and_bf16_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    const int np = test_gpu_ranks();
    // ZeRO-3 without DDP before it (the model's flat buffers freed from its first step), a
    // context and batch that are not powers of two, more steps: equal to DDP.
    int st = run_prog("zero_train", np, "--backend nccl --model tiny --context 24 --batch 3 --steps 4 --warmup 1 --zero 3 --check-ddp 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "check-ddp: zero3: 0 of") && !strstr(g_out, "DIFFERENT"), "%s", g_out);
    // bf16 (FSDP with bf16 parameters, fp32 masters: zero3_set_mixed) runs, lean, with the
    // bf16 all-gather's bytes printed (test_fsdp.c compares it with fp32 and a referee)
    st = run_prog("zero_train", np, "--backend nccl --zero 3 --precision bf16");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "(bf16 parameters)") && strstr(g_out, "replicas bitwise identical on every rank"), "%s", g_out);
}

// ------------------------------------------------------------------ sharded construction
// The "parameter hash" zero_train prints after a run (a sum of per-element hashes of the layout's parameters,
// taken unit by unit for a lean ZeRO-3 run): into out, or fail.
static void run_hash(const char* out, char* hash, size_t len) {
    const char* q = strstr(out, "parameter hash ");
    cr_assert(q, "no parameter hash:\n%s", out);
    cr_assert_eq(sscanf(q, "parameter hash %16s", hash), 1, "%s", out);
    cr_assert_eq(strlen(hash), len - 1, "%s", out);
}

// A single level is built sharded (lean): levels 0-2 with padded flat buffers from the start,
// ZeRO-3 with no flat buffers at all and its shard made piece by piece by
// model_init_params_range from rank 0's seed. It must train to the bits of the path that builds
// the whole model, pads it and copies rank 0's broadcast parameters into the shard
// (--keep-full 1), on 2-4 ranks (3 and 4: piece boundaries through parameters, unit padding).
Test(zero_train_mpi, sharded_construction_equals_the_whole_model_2_3_4_ranks) {
    const char* levels[] = {"3", "1", "2", "0"};
    for (int np = 2; np <= 4; np++)
        for (int k = 0; k < 4; k++) {
            char a[256], lean[17], full[17];
            snprintf(a, sizeof a, "--backend mpi --model tiny --context 16 --batch 2 --steps 2 --warmup 1 --zero %s", levels[k]);
            int st = run_prog("zero_train", np, a);
            cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, a, st, g_out);
            cr_assert(strstr(g_out, "setup peak") && strstr(g_out, "(lean;"), "%d ranks, %s: not lean:\n%s", np, a, g_out);
            cr_assert(!strstr(g_out, "DIFFERENT") && !strstr(g_out, "!= the formula") && !strstr(g_out, "!= 16Psi/n") &&
                          !strstr(g_out, "!= 4Psi+12Psi/n") && !strstr(g_out, "grads != the shard") && !strstr(g_out, "working buffers !="),
                      "%s", g_out);
            run_hash(g_out, lean, sizeof lean);
            snprintf(a + strlen(a), sizeof a - strlen(a), " --keep-full 1");
            st = run_prog("zero_train", np, a);
            cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, a, st, g_out);
            cr_assert(strstr(g_out, "whole model built first"), "%s", g_out);
            run_hash(g_out, full, sizeof full);
            cr_assert_str_eq(lean, full, "%d ranks, --zero %s: sharded construction %s, whole model %s", np, levels[k], lean, full);
        }
    // Another seed must give another hash (the hash sees the parameters at all).
    char h1[17], h2[17];
    cr_assert_eq(run_prog("zero_train", 2, "--context 16 --steps 1 --warmup 0 --zero 3"), 0, "%s", g_out);
    run_hash(g_out, h1, sizeof h1);
    cr_assert_eq(run_prog("zero_train", 2, "--context 16 --steps 1 --warmup 0 --zero 3 --seed 2"), 0, "%s", g_out);
    run_hash(g_out, h2, sizeof h2);
    cr_assert_str_neq(h1, h2);
    cr_assert_eq(run_prog("zero_train", 2, "--keep-full 2"), 2, "%s", g_out);
    cr_assert(strstr(g_out, "--keep-full: 2 must be 0 or 1") && count(g_out, "error:") == 1, "%s", g_out);
}

// On the GPUs a lean run's setup peak holds only the level's own state: ZeRO-3's parameters and
// gradients at the peak are its two shards (4S bytes each, no whole-model buffer ever), ZeRO-1's
// the padded flat buffers once (4P each, no padded copy beside the unpadded ones).
Test(zero_train_nccl, lean_setup_peak_is_the_levels_own_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    const int np = test_gpu_ranks();
    const double MiB = 1048576.0;
    int st = run_prog("zero_train", np, "--backend nccl --model small --context 64 --batch 2 --steps 1 --warmup 1 --zero 3");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    const char* line = strstr(g_out, "zero3   setup peak");
    cr_assert(line && strstr(line, "lean: built sharded"), "%s", g_out);
    const char* sh = strstr(g_out, "a shard of ");
    cr_assert(sh, "%s", g_out);
    const double S = atof(sh + strlen("a shard of "));
    cr_assert(fabs(after_field(line, "params ") - 4 * S / MiB) < 0.006, "params at the setup peak, want %.2f MiB:\n%s", 4 * S / MiB, g_out);
    cr_assert(fabs(after_field(line, "grads ") - 4 * S / MiB) < 0.006, "grads at the setup peak, want %.2f MiB:\n%s", 4 * S / MiB, g_out);
    st = run_prog("zero_train", np, "--backend nccl --model small --context 64 --batch 2 --steps 1 --warmup 1 --zero 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    line = strstr(g_out, "zero1   setup peak");
    const char* pt = strstr(g_out, "padded total ");
    cr_assert(line && pt, "%s", g_out);
    const double P = atof(pt + strlen("padded total "));
    cr_assert(fabs(after_field(line, "params ") - 4 * P / MiB) < 0.006, "params at the setup peak, want %.2f MiB:\n%s", 4 * P / MiB, g_out);
    cr_assert(fabs(after_field(line, "grads ") - 4 * P / MiB) < 0.006, "grads at the setup peak, want %.2f MiB:\n%s", 4 * P / MiB, g_out);
}

// ------------------------------------------------------------------ activation checkpointing
// The activation bytes zero_train reports for its policy ("activations on every rank == the acts
// formula (checkpoint block: N bytes)"), asserting the == (the allocator's acts tag on every rank).
static size_t run_acts(const char* out, const char* policy) {
    char key[64];
    snprintf(key, sizeof key, "(checkpoint %s: ", policy);
    const char* q = strstr(out, key);
    cr_assert(q, "no acts line for %s:\n%s", policy, out);
    cr_assert(!strstr(out, "!= the acts formula"), "%s", out);
    return (size_t)strtoull(q + strlen(key), NULL, 10);
}

// ZeRO-3 and ZeRO-2 with --checkpoint block against the same run with none, lean (the level
// alone), on `np` ranks: the same parameter hash after the steps (the recompute of block l runs
// inside unit 1 + l's backward window, on the parameters it gathered, with the same operations
// on the same inputs), and the activations shrunk by exactly (L - 1) blocks' internals, computed
// here from the shape (CPU: 7BTC + 2BT + 3BTF + B·NH·T² floats a block; GPU fp32: the SwiGLU
// output is not kept, 7BTC + 2BT + 2BTF + B·NH·T²). tiny with 3 blocks, context 16, batch 2.
static void ckpt_block_equals_none(int np, const char* level, int gpu) {
    char a[256], h0[17], h1[17];
    size_t acts[2];
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s--model tiny --layers 3 --context 16 --batch 2 --steps 3 --warmup 1 --zero %s --checkpoint %s",
                 gpu ? "--backend nccl " : "--backend mpi ", level, k ? "block" : "none");
        const int st = run_prog("zero_train", np, a);
        cr_assert_eq(st, 0, "%d ranks, %s: exit %d:\n%s", np, a, st, g_out);
        cr_assert(!strstr(g_out, "DIFFERENT") && !strstr(g_out, "!= "), "%s:\n%s", a, g_out);
        run_hash(g_out, k ? h1 : h0, sizeof h0);
        acts[k] = run_acts(g_out, k ? "block" : "none");
    }
    cr_assert_str_eq(h0, h1, "%d ranks, --zero %s: --checkpoint block %s, none %s", np, level, h1, h0);
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 16, &cfg), 0);
    const size_t B = 2, T = 16, BT = B * T, C = (size_t)cfg.d_model, F = (size_t)cfg.d_ff, NH = (size_t)cfg.n_heads;
    const size_t slot = 4 * (7 * BT * C + 2 * BT + (gpu ? 2 : 3) * BT * F + B * NH * T * T);
    cr_assert_eq(acts[0] - acts[1], 2 * slot, "%d ranks, --zero %s: acts %zu -> %zu, want %zu less", np, level, acts[0], acts[1],
                 2 * slot);
}

Test(zero_train_mpi, checkpoint_block_equals_none_zero3_zero2_2_3_ranks) {
    for (int np = 2; np <= 3; np++) {
        ckpt_block_equals_none(np, "3", 0);
        ckpt_block_equals_none(np, "2", 0);
    }
    // Every level with block checkpointing against DDP with it (one shared model, --check-ddp).
    against_ddp(2, "--zero all --checkpoint block --bucket-mb 0.05");
    cr_assert(strstr(g_out, "check-ddp: zero1: 0 of") && strstr(g_out, "check-ddp: zero2: 0 of") &&
                  strstr(g_out, "check-ddp: zero3: 0 of"), "%s", g_out);
    cr_assert_eq(count(g_out, "activations on every rank == the acts formula (checkpoint block"), 4, "%s", g_out);
}

// What is not supported is refused in one line, exit 2: every-K (K > 1) or nested with the unit
// hooks of ZeRO-2/3 (a recompute would need several units gathered at once), a bad policy. Without
// hooks (DDP, ZeRO-1, the staging ZeRO-2) every-K runs, and the acts follow its formula.
Test(zero_train_mpi, checkpoint_every_k_refused_with_unit_hooks) {
    const char* cases[][2] = {
        {"--zero 3 --checkpoint every-2", "supports block or none only"},
        {"--zero 2 --checkpoint every-3", "supports block or none only"},
        {"--zero 3 --checkpoint nested", "--checkpoint nested with --zero 2 or 3"},
        {"--zero all --checkpoint every-2", "--checkpoint every-2 with --zero 2 or 3"},
        {"--zero 3 --checkpoint half", "--checkpoint: checkpoint policy 'half' is not one of"},
        {"--zero 1 --checkpoint every-0", "--checkpoint"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int st = run_prog("zero_train", 2, cases[i][0]);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cases[i][0], st, g_out);
        cr_assert(strstr(g_out, cases[i][1]), "%s:\n%s", cases[i][0], g_out);
        cr_assert_eq(count(g_out, "error:"), 1, "%s: one line:\n%s", cases[i][0], g_out);
    }
    const int st = run_prog("zero_train", 2, "--context 16 --layers 3 --zero 0,1 --zero2 staging --steps 1 --warmup 0 --checkpoint every-2");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert_eq(count(g_out, "activations on every rank == the acts formula (checkpoint every-2"), 2, "%s", g_out);
}

// Block checkpointing under ZeRO-3's (and ZeRO-2's) unit hooks on the GPUs: the same parameter
// hash as without it, the acts tag shrunk by exactly two blocks' internals (ckpt_block_equals_none).
Test(zero_train_nccl, checkpoint_block_equals_none_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    ckpt_block_equals_none(test_gpu_ranks(), "3", 1);
    ckpt_block_equals_none(test_gpu_ranks(), "2", 1);
}

// ------------------------------------------------------------------ ZeRO-3's plan and windows
Test(zero3_plan, units_split_in_equal_aligned_pieces) {
    const size_t bounds[] = {0, 640, 704, 10000 * 64, 10000 * 64 + 1000};  // 4 units, odd lengths
    for (int n = 1; n <= 5; n++) {
        zero3_unit_t u[4];
        const size_t S = zero3_plan(bounds, 4, n, u);
        size_t q = 0;
        for (int k = 0; k < 4; k++) {
            cr_assert_eq(u[k].begin, bounds[k]);
            cr_assert_eq(u[k].end, bounds[k + 1]);
            cr_assert_eq(u[k].piece % ZERO_ALIGN, 0, "n %d unit %d: piece %zu not aligned", n, k, u[k].piece);
            cr_assert(n * u[k].piece >= u[k].end - u[k].begin && n * u[k].piece - (u[k].end - u[k].begin) < (size_t)n * ZERO_ALIGN,
                      "n %d unit %d: %zu x %d for %zu elements", n, k, u[k].piece, n, u[k].end - u[k].begin);
            cr_assert_eq(u[k].q, q);
            q += u[k].piece;
        }
        cr_assert_eq(S, q);
    }
}

// Windows over copies: the hooks copy unit u's parameters into a separate buffer (as ZeRO-3's
// all-gather would) and collect its gradient from another, then copy it out.
typedef struct {
    model_cpu_t* m;
    const float* params;  // (total) the real values
    float* grads_out;     // (total) assembled from the units
    float *pw, *gw;       // (total) the window buffers (a unit at their start)
    int calls[3];
    int log[256], nlog;   // every hook call in order: 1000 x kind (0 fwd, 1 bwd, 2 after) + unit
} win_ctx_t;
static void win_log(win_ctx_t* w, int kind, int u) {
    cr_assert(w->nlog < 256);
    w->log[w->nlog++] = 1000 * kind + u;
}

static void win_set(win_ctx_t* w, int u, int bwd) {
    size_t b, e;
    model_unit_span(&w->m->layout, &w->m->c, u, &b, &e);
    for (size_t i = 0; i < w->m->layout.total; i++) w->pw[i] = NAN;  // anything outside is poison
    memcpy(w->pw, w->params + b, (e - b) * sizeof(float));
    w->m->pwin = (model_window_t){w->pw, b, e};
    if (bwd) {
        for (size_t i = 0; i < w->m->layout.total; i++) w->gw[i] = NAN;  // every element must be written
        w->m->gwin = (model_window_t){w->gw, b, e};
    }
}
static void win_fwd(void* ctx, int u) { win_ctx_t* w = ctx; w->calls[0]++; win_log(w, 0, u); win_set(w, u, 0); }
static void win_bwd(void* ctx, int u) { win_ctx_t* w = ctx; w->calls[1]++; win_log(w, 1, u); win_set(w, u, 1); }
static void win_after(void* ctx, int u) {
    win_ctx_t* w = ctx;
    w->calls[2]++;
    win_log(w, 2, u);
    size_t b, e;
    model_unit_span(&w->m->layout, &w->m->c, u, &b, &e);
    memcpy(w->grads_out + b, w->gw, (e - b) * sizeof(float));
}

Test(zero3_window, cpu_model_through_windows_is_bitwise_the_model) {
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 16, &cfg), 0);
    const int B = 2, T = 13;
    model_cpu_t a, m;
    model_cpu_create(&a, &cfg, B, T, 7);
    model_cpu_create(&m, &cfg, B, T, 7);
    const size_t total = a.layout.total;
    int32_t in[2 * 13], tg[2 * 13];
    for (int i = 0; i < B * T; i++) in[i] = (i * 37 + 5) % cfg.vocab, tg[i] = (i * 101 + 3) % cfg.vocab;
    const float la = model_cpu_forward(&a, in, tg, B, T);
    model_cpu_backward(&a, NULL, NULL);

    float* params = malloc(total * sizeof(float));
    win_ctx_t w = {&m, params, calloc(total, sizeof(float)), malloc(total * sizeof(float)), malloc(total * sizeof(float)), {0}, {0}, 0};
    cr_assert(params && w.grads_out && w.pw && w.gw);
    memcpy(params, m.params, total * sizeof(float));
    for (size_t i = 0; i < total; i++) m.params[i] = m.grads[i] = NAN;  // the model's own buffers are never read
    const model_unit_hooks_t h = {win_fwd, win_bwd, win_after, &w};
    model_cpu_set_unit_hooks(&m, &h);
    const float lm = model_cpu_forward(&m, in, tg, B, T);
    model_cpu_backward(&m, NULL, NULL);
    const int U = model_n_units(&cfg);
    cr_assert_eq(w.calls[0], U);
    cr_assert_eq(w.calls[1], U);
    cr_assert_eq(w.calls[2], U);
    cr_assert_eq(memcmp(&la, &lm, sizeof la), 0, "loss %.9g vs %.9g", la, lm);
    cr_assert_eq(memcmp(a.a.logits, m.a.logits, (size_t)B * T * cfg.vocab * sizeof(float)), 0, "logits differ");
    cr_assert_eq(memcmp(a.grads, w.grads_out, total * sizeof(float)), 0, "gradients differ");
    for (size_t i = 0; i < total; i++) cr_assert(isnan(m.grads[i]), "the model wrote its own gradient buffer at %zu", i);
    model_cpu_set_unit_hooks(&m, NULL);
    free(params);
    free(w.grads_out);
    free(w.pw);
    free(w.gw);
    model_cpu_destroy(&a);
    model_cpu_destroy(&m);
}

// Activation checkpointing under the unit hooks (`block`): the model made with K = 1, run through
// the same poisoned windows, must give the loss, logits and every gradient of the model with
// neither checkpointing nor hooks, bit for bit, with the hooks called in exactly the sequence
// of the unhooked-checkpoint-free run (so the recompute of block l ran inside unit 1 + l's
// backward window: any read of a parameter outside the window dies, and everything else in the
// window buffer is NaN). Tiny with 4 blocks (more than one checkpoint between units). every-2
// with hooks is refused (zero_train_mpi/checkpoint_* checks the one-line exit 2).
static void hooked_run(model_cpu_t* m, const float* init, const int32_t* in, const int32_t* tg, int B, int T,
                       float* loss, float* grads_out, win_ctx_t* w) {
    const size_t total = m->layout.total;
    *w = (win_ctx_t){m, init, grads_out, malloc(total * sizeof(float)), malloc(total * sizeof(float)), {0}, {0}, 0};
    cr_assert(w->pw && w->gw);
    for (size_t i = 0; i < total; i++) m->params[i] = m->grads[i] = NAN;  // the model's own buffers are never read
    const model_unit_hooks_t h = {win_fwd, win_bwd, win_after, w};
    model_cpu_set_unit_hooks(m, &h);
    *loss = model_cpu_forward(m, in, tg, B, T);
    model_cpu_backward(m, NULL, NULL);
    model_cpu_set_unit_hooks(m, NULL);
    free(w->pw);
    free(w->gw);
}

Test(zero3_window, cpu_block_checkpointing_through_windows_is_bitwise_the_model) {
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 16, &cfg), 0);
    cfg.n_layers = 4;
    const int B = 2, T = 11;
    model_cpu_t a, m0, m1;
    model_cpu_create(&a, &cfg, B, T, 5);
    model_cpu_create_ckpt(&m0, &cfg, B, T, 5, 0);
    model_cpu_create_ckpt(&m1, &cfg, B, T, 5, 1);
    const size_t total = a.layout.total;
    int32_t in[2 * 11], tg[2 * 11];
    for (int i = 0; i < B * T; i++) in[i] = (i * 53 + 1) % cfg.vocab, tg[i] = (i * 29 + 7) % cfg.vocab;
    const float la = model_cpu_forward(&a, in, tg, B, T);
    model_cpu_backward(&a, NULL, NULL);

    float* init = malloc(total * sizeof(float));
    float* g0 = calloc(total, sizeof(float));
    float* g1 = calloc(total, sizeof(float));
    cr_assert(init && g0 && g1);
    memcpy(init, a.params, total * sizeof(float));
    win_ctx_t w0, w1;
    float l0, l1;
    hooked_run(&m0, init, in, tg, B, T, &l0, g0, &w0);
    hooked_run(&m1, init, in, tg, B, T, &l1, g1, &w1);
    const int U = model_n_units(&cfg);
    cr_assert_eq(w1.nlog, 3 * U, "%d hook calls, want %d", w1.nlog, 3 * U);
    cr_assert_eq(w0.nlog, w1.nlog);
    for (int i = 0; i < w1.nlog; i++) cr_assert_eq(w0.log[i], w1.log[i], "hook call %d: %d, without checkpointing %d", i, w1.log[i], w0.log[i]);
    cr_assert_eq(memcmp(&la, &l1, sizeof la), 0, "loss %.9g vs %.9g", la, l1);
    cr_assert_eq(memcmp(a.a.logits, m1.a.logits, (size_t)B * T * cfg.vocab * sizeof(float)), 0, "logits differ");
    cr_assert_eq(memcmp(a.grads, g0, total * sizeof(float)), 0, "gradients through windows differ from the model's");
    for (size_t i = 0; i < total; i++)
        cr_assert_eq(memcmp(&a.grads[i], &g1[i], sizeof(float)), 0, "checkpointed gradient %zu: %.9g, the model's %.9g", i, g1[i], a.grads[i]);
    // The activations kept: one block's internals instead of four (model_cpu_acts_bytes, checked
    // against the allocator's acts tag by zero_train), i.e. 3 slots of 7BTC + 2BT + 3BTF + B·NH·T² floats less.
    const size_t BT = (size_t)B * T, C = (size_t)cfg.d_model, F = (size_t)cfg.d_ff, NH = (size_t)cfg.n_heads;
    const size_t slot = 4 * (7 * BT * C + 2 * BT + 3 * BT * F + (size_t)B * NH * T * T);
    cr_assert_eq(model_cpu_acts_bytes(&cfg, B, T, 0) - model_cpu_acts_bytes(&cfg, B, T, 1), 3 * slot);
    free(init);
    free(g0);
    free(g1);
    model_cpu_destroy(&a);
    model_cpu_destroy(&m0);
    model_cpu_destroy(&m1);
}

// ------------------------------------------------------------------ the chunked LM head
// --head-chunk through every level (ZeRO-3's head unit read and written through its windows):
// the CPU's chunked head gives the bits of the whole logits, so each level's parameter hash
// after the steps is the one without the flag, and the activations fall by N·V·4 bytes
// (tiny: N = 2 x 16 rows, V = 512).
static void hashes(const char* args, char out[4][17], long* acts) {
    char a[512];
    // The CPU model: its chunked head gives the whole logits' bits (the GPU's need not: its dW_head
    // sums chunk by chunk in cuBLAS; test_common head_chunk/gpu_* holds it to a tolerance).
    snprintf(a, sizeof a, "--model tiny --context 16 --batch 2 --steps 2 --warmup 1 --zero all --backend mpi --comm-timeout 60 %s", args);
    const int st = run_prog("zero_train", 2, a);
    cr_assert_eq(st, 0, "%s: exit %d:\n%s", args, st, g_out);
    const char* q = g_out;
    for (int k = 0; k < 4; k++) {
        q = strstr(q, "parameter hash ");
        cr_assert_not_null(q, "%s: %d hashes:\n%s", args, k, g_out);
        q += strlen("parameter hash ");
        cr_assert_eq(sscanf(q, "%16s", out[k]), 1);
    }
    const char* f = strstr(g_out, "activations a rank by the formula: ");
    cr_assert_not_null(f, "%s", g_out);
    cr_assert_eq(sscanf(f + strlen("activations a rank by the formula: "), "%ld", acts), 1);
}

Test(zero_train_mpi, head_chunk_gives_every_level_the_bits_of_the_whole_logits) {
    char want[4][17], got[4][17];
    long acts_whole = 0, acts = 0;
    hashes("", want, &acts_whole);
    hashes("--head-chunk 5", got, &acts);
    for (int k = 0; k < 4; k++) cr_assert_str_eq(got[k], want[k], "run %d: parameter hash %s, without the chunked head %s", k, got[k], want[k]);
    cr_assert_eq(acts_whole - acts, 2L * 16 * 512 * 4, "activations %ld, without the chunked head %ld", acts, acts_whole);
    const int st = run_prog("zero_train", 2, "--model tiny --head-chunk -1");
    ASSERT_REFUSED(st, g_out, "zero_train", "--head-chunk: -1 is out of range");
}
