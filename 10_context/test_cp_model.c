// Stage 10 tests of the Transformer under context parallelism (cp_model.h): build/10_context/
// cp_train under scripts/mpirun.sh (MPI backend, ranks oversubscribed, every job bounded by
// MPIRUN_TIMEOUT and --comm-timeout). cp_train --check trains one process's model
// (common/model_cpu.h) beside the context group on the same batches and fails when a step's
// loss or gradient norm, step 0's gradient of any parameter (normwise) is off by more than 1e-4
// relative, or the parameters after K steps by more than 1e-3 of what training changed: its
// header derives both bounds (reordered fp32 sums of at most B·T terms in the merge of the
// ring and the all-reduce, and AdamW's sign noise on near-zero gradients).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/harness.h"

static char g_out[1 << 16];

static int cp_train(int np, const char* args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 MPIRUN_TIMEOUT=180 scripts/mpirun.sh %d %s/10_context/cp_train --comm-timeout 60 %s", np,
             build_dir(), args);
    return run_capture_timed(cmd, g_out, sizeof g_out, NULL);
}

// K = 5 steps of the tiny model at P ranks, both splits, against one process; a context that
// the chunks do not divide where the split allows (plain over 2, 3, 4 ranks: 31, 31, 33;
// zigzag over 4, 6, 8 chunks: 34, 37, 37), and the check's error line logged.
static void both_splits(int P, int n_plain, int n_zigzag) {
    const char* splits[2] = {"plain", "zigzag"};
    const int Ts[2] = {n_plain, n_zigzag};
    for (int s = 0; s < 2; s++) {
        char args[256], ok[128];
        snprintf(args, sizeof args, "--model tiny --context %d --batch 2 --warmup 0 --steps 5 --split %s --check", Ts[s],
                 splits[s]);
        snprintf(ok, sizeof ok, "check: OK: cp %d (%s) x dp 1 equals one process over 5 steps", P, splits[s]);
        const int st = cp_train(P, args);
        cr_assert(st == 0 && strstr(g_out, ok) && strstr(g_out, "bitwise identical on every rank"), "P %d %s: exit %d:\n%s",
                  P, args, st, g_out);
        const char* w = strstr(g_out, "check: worst");
        cr_log_info("cp %d %s T %d: %.*s", P, splits[s], Ts[s], w ? (int)strcspn(w, "\n") : 0, w ? w : "");
    }
}
Test(cp_model, cp2_equals_one_process, .timeout = 300) { both_splits(2, 31, 34); }
Test(cp_model, cp3_equals_one_process, .timeout = 300) { both_splits(3, 31, 37); }
Test(cp_model, cp4_equals_one_process, .timeout = 300) { both_splits(4, 33, 37); }

// CP 2 x DP 2 on 4 ranks: the dp groups split the global batch, the context groups the tokens.
Test(cp_model, cp2_by_dp2_equals_one_process, .timeout = 300) {
    const int st = cp_train(4, "--model tiny --cp 2 --context 33 --batch 1 --warmup 0 --steps 5 --check");
    cr_assert(st == 0 && strstr(g_out, "check: OK: cp 2 (zigzag) x dp 2 equals one process over 5 steps"), "exit %d:\n%s", st,
              g_out);
}

// The gradient sum over the context group is what keeps the replicas one model: without it
// each rank steps on its own tokens' gradient, the replicas part and the check fails.
Test(cp_model, unsummed_gradients_drift, .timeout = 300) {
    const int st = cp_train(2, "--model tiny --context 32 --warmup 0 --steps 3 --grad-sum 0 --check");
    cr_assert(st != 0, "exit 0 without the gradient sum:\n%s", g_out);
    cr_assert(strstr(g_out, "DIFFERENT across the ranks") && strstr(g_out, "DIFFERENT"), "%s", g_out);
}

Test(cp_model, refusals_in_one_line, .timeout = 120) {
    ASSERT_REFUSED(cp_train(2, "--backend nccl"), g_out, "cp_train", "--backend nccl", "mpi");
    ASSERT_REFUSED(cp_train(3, "--context 5"), g_out, "cp_train", "--context 5", "zigzag");
    ASSERT_REFUSED(cp_train(3, "--cp 2"), g_out, "cp_train", "--cp 2", "divides");
    ASSERT_REFUSED(cp_train(2, "--split ring"), g_out, "cp_train", "--split", "plain|zigzag");
    ASSERT_REFUSED(cp_train(2, "--context 100000"), g_out, "cp_train", "--context");
}
