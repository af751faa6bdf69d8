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
