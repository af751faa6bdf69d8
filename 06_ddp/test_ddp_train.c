// Stage 06 against the stage before: the Transformer trained data-parallel (ddp_train) must
// equal single-process training on the concatenated batch (rank 0 checks, --check-single),
// and every rank must end with bitwise identical parameters — for every variant, on 2, 3 and
// 4 ranks (CPU model over MPI), and on 2 GPUs over NCCL where there are 2 GPUs.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/gpu.h"
#include "tests/harness.h"

static char g_out[1 << 16];

static int run_train(int np, const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/06_ddp/ddp_train %s", np, build_dir(), args);
    return run_capture(cmd, g_out, sizeof g_out);
}

static void equal_to_single(int np, const char* variant, const char* extra) {
    char args[512];
    snprintf(args, sizeof args, "--model tiny --context 16 --batch 2 --steps 3 --warmup 1 --check-single 1 --variant %s %s",
             variant, extra);
    int st = run_train(np, args);
    cr_assert_eq(st, 0, "%s on %d ranks exited %d:\n%s", variant, np, st, g_out);
    cr_assert(strstr(g_out, "replicas: bitwise identical"), "%s on %d ranks: replicas differ:\n%s", variant, np, g_out);
    cr_assert(strstr(g_out, "check-single: 0 of"), "%s on %d ranks: differs from single-process training:\n%s",
              variant, np, g_out);
}

Test(ddp_train_mpi, naive_2_3_4_ranks) { for (int np = 2; np <= 4; np++) equal_to_single(np, "naive", ""); }
Test(ddp_train_mpi, flat_2_3_4_ranks) { for (int np = 2; np <= 4; np++) equal_to_single(np, "flat", ""); }
Test(ddp_train_mpi, overlap_2_3_4_ranks) { for (int np = 2; np <= 4; np++) equal_to_single(np, "overlap", ""); }
// Caps below any tensor (one bucket a parameter), between, and above all (one bucket).
Test(ddp_train_mpi, bucketed_caps_2_3_4_ranks) {
    for (int np = 2; np <= 4; np++) {
        equal_to_single(np, "bucketed", "--bucket-mb 0.0001");
        equal_to_single(np, "bucketed", "--bucket-mb 0.05");
        equal_to_single(np, "bucketed", "--bucket-mb 100");
    }
}

Test(ddp_train_mpi, timing_table_and_bad_flags) {
    int st = run_train(2, "--model tiny --context 16 --variant all --bucket-mb 0.01,1 --steps 2 --warmup 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "| none ") && strstr(g_out, "| bucketed |") && strstr(g_out, "replicas: bitwise identical"),
              "%s", g_out);
    // "none" named first still runs last, after the replicas are compared (run first, its
    // drifted AdamW moments would make the DDP runs after it differ across ranks).
    st = run_train(2, "--model tiny --context 16 --variant none,flat --steps 2 --warmup 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "replicas: bitwise identical"), "%s", g_out);
    st = run_train(2, "--variant fast");
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "--variant: unknown 'fast'"), "%s", g_out);
    st = run_train(2, "--precision bf16 --backend mpi");
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "needs the GPU"), "%s", g_out);
}

// Bad input under MPI: one line from the whole job, exit 2, under this program's own name, naming
// the flag and the value; an output place that cannot exist is said before any work, with the
// system's reason.
Test(ddp_train_mpi, bad_input_is_one_line_from_the_whole_job, .timeout = 240) {
    char args[1024];
    const char* plain = test_plain_file("plain06");
    snprintf(args, sizeof args, "--model tiny --context 16 --steps 1 --warmup 0 --csv %s/x.csv", plain);
    int st = run_train(2, args);
    ASSERT_REFUSED(st, g_out, "ddp_train", "--csv: cannot write", plain, "Not a directory");
    st = run_train(2, "--model tiny --context 16 --steps 1 --variant naive,,flat");
    ASSERT_REFUSED(st, g_out, "ddp_train", "--variant: 'naive,,flat' has an empty item");
    st = run_train(2, "--model tiny --context 16 --steps 1 --bucket-mb 1,,2");
    ASSERT_REFUSED(st, g_out, "ddp_train", "--bucket-mb: '1,,2' has an empty item");
    // --zero hands the run to stage 07's zero_train: its refusals still speak as ddp_train
    char zt[600];
    snprintf(zt, sizeof zt, "%s/07_zero/zero_train", build_dir());
    if (access(zt, X_OK) != 0) cr_skip_test("%s is not built (make build-07): the hand-off has nothing to run", zt);
    st = run_train(2, "--model tiny --context 16 --steps 1 --zero 5");
    ASSERT_REFUSED(st, g_out, "ddp_train", "--zero: '5'", "0, 1, 2, 3, or all");
    st = run_train(2, "--model tiny --context 16 --zero 1 --steps 0");
    ASSERT_REFUSED(st, g_out, "ddp_train", "--steps: 0 is out of range");
}

Test(ddp_train_nccl, every_variant_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    const char* variants[] = {"naive", "flat", "overlap", "bucketed"};
    for (int i = 0; i < 4; i++) equal_to_single(test_gpu_ranks(), variants[i], "--backend nccl --bucket-mb 0.05");
}

// --zero / --shard hand the run to stage 07's zero_train (a stage links only earlier stages):
// the same flags reach it, its checks run (replicas identical, state == its formula), and a
// ddp_train-only flag beside --zero is one line, exit 2.
Test(ddp_train_mpi, zero_and_shard_run_stage_07) {
    char zt[600];
    snprintf(zt, sizeof zt, "%s/07_zero/zero_train", build_dir());
    if (access(zt, X_OK) != 0) cr_skip_test("%s is not built (make build-07): the hand-off has nothing to run", zt);
    int st = run_train(2, "--zero 1 --model tiny --context 16 --steps 1 --warmup 0");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "running ") && strstr(g_out, "07_zero/zero_train with the same flags"), "%s", g_out);
    cr_assert(strstr(g_out, "zero1   done:") && strstr(g_out, "replicas bitwise identical on every rank") &&
                  strstr(g_out, "optimizer state == the formula on every rank"),
              "%s", g_out);
    st = run_train(2, "--shard course --model tiny --context 16 --steps 1 --warmup 0");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "course  done:"), "%s", g_out);
    st = run_train(2, "--zero 1 --variant flat");
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    ASSERT_REFUSED(st, g_out, "ddp_train", "--variant is not a flag of stage 07's zero_train");
}
