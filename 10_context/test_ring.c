// Stage 10 tests of the ring on the CPU: build/10_context/ring_check under scripts/mpirun.sh
// (MPI backend, ranks oversubscribed, every job bounded by MPIRUN_TIMEOUT and --comm-timeout).
// ring_check compares O, L, dQ, dK, dV of ring attention with one process's stage-03/04 flash
// functions and with float64 naive attention, and fails above BASE + PER_MERGE x merges (its
// header says why the bound may grow with the number of merges and no faster).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/harness.h"

static char g_out[1 << 16];

static int ring_check(int np, const char* args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/10_context/ring_check --comm-timeout 30 %s",
             np, build_dir(), args);
    return run_capture_timed(cmd, g_out, sizeof g_out, NULL);
}

// Every split and mask at P ranks, on lengths that the chunks do not divide (53 = 2*26+1 =
// 3*17+2 = 4*13+1; 37 over 8 zigzag chunks), and the error line logged (the error as a
// function of P).
static void all_cases(int P) {
    const char* splits[2] = {"plain", "zigzag"};
    const int Ns[2] = {53, 37};
    for (int s = 0; s < 2; s++)
        for (int causal = 0; causal <= 1; causal++)
            for (int n = 0; n < 2; n++) {
                char args[256];
                snprintf(args, sizeof args, "--N %d --d %d --BH 2 --causal %d --split %s --seed %d", Ns[n],
                         n ? 32 : 16, causal, splits[s], 3 + n);
                const int st = ring_check(P, args);
                cr_assert(st == 0 && strstr(g_out, ": ok"), "P %d %s: exit %d:\n%s", P, args, st, g_out);
                cr_log_info("%s", g_out);
            }
}

Test(ring, p2_every_split_and_mask, .timeout = 300) { all_cases(2); }
Test(ring, p3_every_split_and_mask, .timeout = 300) { all_cases(3); }
Test(ring, p4_every_split_and_mask, .timeout = 300) { all_cases(4); }

// Each half of the ring alone (ring_check --only): the forward checked on O and L with no
// backward run; the backward on dQ, dK, dV, fed one process's O and L. 2 and 3 ranks, both
// splits, causal (every block kind) on a length the chunks do not divide.
static void one_half(const char* only) {
    const char* splits[2] = {"plain", "zigzag"};
    for (int P = 2; P <= 3; P++)
        for (int s = 0; s < 2; s++) {
            char args[256];
            snprintf(args, sizeof args, "--N 37 --d 16 --BH 2 --causal 1 --split %s --only %s", splits[s], only);
            const int st = ring_check(P, args);
            cr_assert(st == 0 && strstr(g_out, ": ok"), "P %d %s: exit %d:\n%s", P, args, st, g_out);
            const int fwd = !strcmp(only, "fwd");
            cr_assert(strstr(g_out, fwd ? "(forward alone)" : "(backward alone)"), "%s", g_out);
            cr_assert(fwd == !strstr(g_out, " dQ ") && fwd == !!strstr(g_out, " O "), "only %s:\n%s", only, g_out);
        }
}
Test(ring_region, forward_alone, .timeout = 300) { one_half("fwd"); }
Test(ring_region, backward_alone, .timeout = 300) { one_half("bwd"); }
// Each half's check still sees a stale block.
static void stale(const char* only) {
    char args[128];
    snprintf(args, sizeof args, "--N 53 --causal 1 --split zigzag --fault 1 --only %s", only);
    const int st = ring_check(3, args);
    cr_assert(st == 1 && strstr(g_out, "FAIL"), "%s: exit %d:\n%s", args, st, g_out);
}
Test(ring_region, forward_sees_a_stale_block, .timeout = 120) { stale("fwd"); }
Test(ring_region, backward_sees_a_stale_block, .timeout = 120) { stale("bwd"); }

// One rank: the ring degenerates to the plain call (zigzag: one merge of two chunks).
Test(ring, p1_is_one_process, .timeout = 120) {
    const int st = ring_check(1, "--N 40 --causal 1 --split plain");
    cr_assert(st == 0 && strstr(g_out, "vs flash_cpu O 0.00e+00"), "exit %d:\n%s", st, g_out);
}

// The check can fail: a ring that keeps computing on the block of step 0 (stale K/V) is caught.
Test(ring, a_stale_block_fails_the_check, .timeout = 120) {
    const int st = ring_check(3, "--N 53 --causal 1 --split zigzag --fault 1");
    cr_assert(st == 1 && strstr(g_out, "FAIL"), "a stale ring passed (exit %d):\n%s", st, g_out);
}

Test(ring, too_short_a_sequence_is_one_line, .timeout = 120) {
    const int st = ring_check(2, "--N 3 --split zigzag");
    ASSERT_REFUSED(st, g_out, "ring_check", "--N", "4 zigzag chunks");
}

// ring_bench on the CPU ring: one row per rank in the table and in the CSV (with its header).
Test(programs, ring_bench_mpi_writes_a_row_per_rank, .timeout = 120) {
    char cmd[1024];
    const char* csv = test_path("ring.csv");
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 MPIRUN_TIMEOUT=120 scripts/mpirun.sh 3 %s/10_context/ring_bench --backend mpi --dtype f32 "
             "--N 200 --d 16 --heads 2 --warmup 1 --iters 2 --comm-timeout 30 --csv %s",
             build_dir(), csv);
    const int st = run_capture_timed(cmd, g_out, sizeof g_out, NULL);
    cr_assert(st == 0 && strstr(g_out, "exposed_ms"), "exit %d:\n%s", st, g_out);
    FILE* f = fopen(csv, "r");
    cr_assert(f, "no CSV written");
    char line[512];
    int rows = 0;
    cr_assert(fgets(line, sizeof line, f) && !strncmp(line, "backend,dtype,N", 15), "header: %s", line);
    while (fgets(line, sizeof line, f)) rows += strncmp(line, "mpi,f32,200,16,2,1,1,zigzag,3,fwd+bwd,", 38) == 0;
    fclose(f);
    cr_assert_eq(rows, 3, "want 3 rows of P 3 in the CSV, found %d", rows);
}

Test(programs, ring_bench_refuses_bf16_on_the_cpu, .timeout = 120) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=60 scripts/mpirun.sh 2 %s/10_context/ring_bench --backend mpi --dtype bf16", build_dir());
    const int st = run_capture_timed(cmd, g_out, sizeof g_out, NULL);
    ASSERT_REFUSED(st, g_out, "ring_bench", "--dtype bf16", "f32");
}

// ring_balance: the plain split's busiest rank near 2 - 1/P times the mean, the zigzag's at 1.
Test(programs, ring_balance_prints_the_imbalance, .timeout = 60) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/10_context/ring_balance --N 32768 --P 4 --tile 128", build_dir());
    const int st = run_capture(cmd, g_out, sizeof g_out);
    cr_assert(st == 0 && strstr(g_out, "max/mean        1.747        1.000"), "exit %d:\n%s", st, g_out);
    snprintf(cmd, sizeof cmd, "%s/10_context/ring_balance --P 0", build_dir());
    ASSERT_REFUSED(run_capture(cmd, g_out, sizeof g_out), g_out, "ring_balance", "--P");
}
