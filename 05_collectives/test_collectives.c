// Stage 05 tests: the communicator's operations and the ring all-reduce on 1-4 ranks (MPI
// backend on the CPU; NCCL on 2+ GPUs), and the failure paths — a rank that dies, a rank that
// stops answering, a set-up that cannot work — each ending the job in bounded time.
// The MPI programs run as children under scripts/mpirun.sh (bounded by `timeout`).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/gpu.h"
#include "tests/harness.h"

static char g_out[1 << 16];

// Runs `<env> scripts/mpirun.sh np <prog> <args>` and returns its exit status; the output is
// in g_out. `env`: variable assignments for the job ("" for none).
static int mpi_run_env(const char* env, int np, const char* prog, const char* args, double* seconds) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/05_collectives/%s %s", env, np,
             build_dir(), prog, args);
    return run_capture_timed(cmd, g_out, sizeof g_out, seconds);
}
static int mpi_run(int np, const char* prog, const char* args, double* seconds) {
    return mpi_run_env("", np, prog, args, seconds);
}

// No process of this run is left: every test run carries a unique --tag.
// Whether processes of the job tagged `tag` are still there after 10 s of grace (mpirun has
// returned; its daemon may still be reaping a rank that was stopped, which takes a moment).
static int leftovers(const char* tag) {
    char cmd[256], out[4096];
    snprintf(cmd, sizeof cmd, "pgrep -f -- '--tag %s' | grep -v $$ || true", tag);
    for (int i = 0; i < 20; i++) {
        run_capture(cmd, out, sizeof out);
        if (out[0] == '\0') return 0;
        usleep(500 * 1000);
    }
    return 1;
}

// Counts 0, 1, n-1, not divisible by n, and over 10^6, as the issue asks.
#define COUNTS "0,1,2,3,5,7,1000,65537,1000003"

static void check_np(int np) {
    int st = mpi_run(np, "collectives_check", "--backend mpi --counts " COUNTS, NULL);
    cr_assert_eq(st, 0, "collectives_check on %d ranks exited %d:\n%s", np, st, g_out);
    cr_assert(strstr(g_out, " 0 wrong"), "no '0 wrong' line on %d ranks:\n%s", np, g_out);
    cr_assert(!strstr(g_out, "WRONG"), "a wrong result on %d ranks:\n%s", np, g_out);
}

Test(collectives_mpi, every_operation_1_rank) { check_np(1); }
Test(collectives_mpi, every_operation_2_ranks) { check_np(2); }
Test(collectives_mpi, every_operation_3_ranks) { check_np(3); }
Test(collectives_mpi, every_operation_4_ranks) { check_np(4); }

// ---- the MPI backend's shared-memory all-reduce (common/comm_shm.c)
// Every op (sum, avg, max, min) in fp32 and fp64 on exact data, blocking, in place and out of
// place; on random floats every rank holds the same bits, and (--rank-order 1) they are the
// left-to-right reduction over ranks 0..n-1. With 4 KiB chunks (COMM_SHM_CHUNK) the counts
// cross the chunk boundary (1024 floats, 512 doubles) and the larger ones take many rounds;
// then the default 1 MiB chunk around its boundary (262144 floats).
#define SHM_COUNTS "0,1,2,3,5,7,511,512,513,1000,1024,1025,4099,65537"
static void check_shm(int np) {
    int st = mpi_run_env("COMM_SHM_CHUNK=4K", np, "collectives_check", "--rank-order 1 --counts " SHM_COUNTS, NULL);
    cr_assert_eq(st, 0, "shm, 4K chunks, %d ranks: exit %d:\n%s", np, st, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%d ranks:\n%s", np, g_out);
    cr_assert(strstr(g_out, "all-reduce f64 min") && strstr(g_out, "all-reduce random avg"), "%s", g_out);
    st = mpi_run(np, "collectives_check", "--rank-order 1 --counts 262143,262144,262145,1000003", NULL);
    cr_assert_eq(st, 0, "shm, default chunk, %d ranks: exit %d:\n%s", np, st, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%d ranks:\n%s", np, g_out);
}
Test(collectives_mpi, shm_allreduce_2_ranks) { check_shm(2); }
Test(collectives_mpi, shm_allreduce_3_ranks) { check_shm(3); }
Test(collectives_mpi, shm_allreduce_4_ranks) { check_shm(4); }

// COMM_SHM=0: MPI's own collectives, still correct and still the same bits on every rank (not
// necessarily in rank order on 4 ranks: no --rank-order).
Test(collectives_mpi, shm_off_falls_back_to_mpi) {
    for (int np = 3; np <= 4; np++) {
        int st = mpi_run_env("COMM_SHM=0", np, "collectives_check", "--counts 0,1,3,5,1000,65537", NULL);
        cr_assert_eq(st, 0, "COMM_SHM=0, %d ranks: exit %d:\n%s", np, st, g_out);
        cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%d ranks:\n%s", np, g_out);
    }
}

Test(collectives_mpi, shm_bad_setting_one_line_exit_2) {
    int st = mpi_run_env("COMM_SHM=yes", 2, "collectives_check", "--counts 10", NULL);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    const char* first = strstr(g_out, "COMM_SHM=yes: expected 0");
    cr_assert(first && !strstr(first + 1, "COMM_SHM=yes"), "not one line:\n%s", g_out);
    st = mpi_run_env("COMM_SHM_CHUNK=12", 2, "collectives_check", "--counts 10", NULL);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "COMM_SHM_CHUNK=12: expected a size"), "%s", g_out);
}

Test(collectives_mpi, without_mpirun_is_a_world_of_one) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/05_collectives/collectives_check --counts 0,1,17", build_dir());
    int st = run_capture(cmd, g_out, sizeof g_out);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "1 rank\n") && strstr(g_out, " 0 wrong"), "%s", g_out);
}

Test(collectives_mpi, a_dead_rank_ends_the_job) {
    double s = 0;
    int st = mpi_run(3, "collectives_check", "--counts 1000 --die-rank 1 --tag t05dead", &s);
    cr_assert_neq(st, 0, "a rank died but the job exited 0:\n%s", g_out);
    cr_assert_neq(st, 124, "the job was only ended by the outer timeout:\n%s", g_out);
    cr_assert_lt(s, 30.0, "the job took %.1f s to end (at most 30)", s);
    cr_assert(!leftovers("t05dead"), "processes left behind after a rank died");
}

// ---- deadlines: a rank that stops answering ends the job at the deadline with ONE line, from
// the lowest rank that waited, naming the silent rank (the flight recorder, common/comm_rec.h).

// Lines of g_out that contain `what`.
static int count_lines(const char* what) {
    int n = 0;
    for (const char* p = g_out; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    return n;
}

// What a job of np ranks costs to start and end here, without any fault (mpirun on a busy CI
// machine takes seconds; NCCL's initialisation more): the deadline tests allow the deadline
// + 5 s on top of it.
static double job_overhead(int np, int nccl) {
    static double cached[2] = {-1, -1};
    if (cached[nccl] < 0) {
        double s = 0;
        int st = mpi_run(np, "collectives_check", nccl ? "--backend nccl --counts 1" : "--counts 1", &s);
        cr_assert_eq(st, 0, "a job without faults failed:\n%s", g_out);
        cached[nccl] = s;
    }
    return cached[nccl];
}

// Runs a job whose rank(s) stall, with a deadline of `timeout` s; checks that it ended
// non-zero within timeout + 5 s (plus the start-up), left nothing behind, and printed exactly
// one deadline line that contains each of `want` (NULL-terminated).
static void check_stall(int np, const char* args, const char* tag, double timeout, const char* const* want) {
    const double base = job_overhead(np, strstr(args, "--backend nccl") != NULL);
    char a[512];
    snprintf(a, sizeof a, "--counts 1000 --comm-timeout %g %s --tag %s", timeout, args, tag);
    double s = 0;
    int st = mpi_run(np, "collectives_check", a, &s);
    cr_assert_neq(st, 0, "%s: a rank stalled but the job exited 0:\n%s", args, g_out);
    cr_assert_eq(count_lines("comm: deadline"), 1, "%s: not exactly one deadline line:\n%s", args, g_out);
    for (int i = 0; want[i]; i++) cr_assert(strstr(g_out, want[i]), "%s: no '%s' in:\n%s", args, want[i], g_out);
    cr_assert_lt(s, base + timeout + 5.0, "%s: the job took %.1f s (start-up %.1f s + deadline %g s + 5 s allowed)",
                 args, s, base, timeout);
    cr_assert(!leftovers(tag), "%s: processes left behind after the deadline", args);
}

// The number k of the collective named by "<op> #k" in the deadline line, -1 if none. How many
// collectives a rank runs before the program's own operations depends on the machine (set-up
// agrees on a few things more where there are GPUs), so the tests compare numbers, not constants.
static long op_number(const char* op) {
    char key[128];
    snprintf(key, sizeof key, "passed in %s #", op);
    const char* p = strstr(g_out, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

// The deadline line says the silent rank's last operation was the all-reduce just before the
// one it never entered: "passed in all-reduce #k ... (last: host all-reduce #k-1, done".
static void assert_last_was_the_one_before(int silent) {
    const long k = op_number("all-reduce");
    char last[96];
    snprintf(last, sizeof last, "(last: host all-reduce #%ld, done", k - 1);
    cr_assert(k > 1 && strstr(g_out, last), "rank %d's last operation is not the one before #%ld:\n%s", silent, k, g_out);
}

Test(collectives_mpi, a_silent_rank_ends_the_job_at_the_deadline) {
    // before the ring's first send/receive: rank 0 waits for rank 1's message
    const char* const want[] = {"comm: deadline 3 s passed in receive #1 from rank 1", "on rank 0:",
                                "rank 1 never entered the matching send (last: host all-reduce #", NULL};
    check_stall(2, "--hang-rank 1", "t05hang", 3, want);
}

Test(collectives_mpi, a_rank_silent_before_a_blocking_collective_is_named) {
    // before operation 5, a blocking all-reduce (the shared-memory path, under the watchdog): rank
    // 0 waits in all-reduce #k, and rank 2's last operation was the one before it, #k-1
    const char* const want[] = {"(3.9 KiB) on rank 0: rank 2 never entered it (last: host all-reduce #", NULL};
    check_stall(3, "--hang-rank 2 --hang-at 5", "t05hang5", 3, want);
    assert_last_was_the_one_before(2);
}

Test(collectives_mpi, a_silent_rank_0_is_named_by_rank_1) {
    const char* const want[] = {"on rank 1: rank 0 never entered", NULL};
    check_stall(3, "--hang-rank 0", "t05hang0", 3, want);
}

Test(collectives_mpi, a_stopped_rank_is_named_once) {
    const char* const want[] = {"on rank 0: rank 1 never entered the matching send", NULL};
    check_stall(2, "--stop-rank 1", "t05stop", 3, want);
}

// Rank 1 is stopped inside its wait for the silent rank 2; mpirun's teardown continues it after
// rank 0's line, past its own deadline: it must not add a second line.
Test(collectives_mpi, a_rank_stopped_inside_its_wait_adds_no_second_line) {
    const char* const want[] = {"on rank 0: rank 2 never entered", NULL};
    check_stall(3, "--hang-rank 2 --stop-rank 1 --stop-delay 1", "t05stop2", 3, want);
}

Test(collectives_mpi, bad_flags_one_line_exit_2) {
    int st = mpi_run(2, "collectives_check", "--counts abc", NULL);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "--counts: 'abc'"), "%s", g_out);
    // rank 0 alone speaks: the message appears once
    const char* first = strstr(g_out, "error:");
    cr_assert(first && !strstr(first + 1, "error:"), "more than one error line:\n%s", g_out);
    st = mpi_run(2, "allreduce_bench", "--backends tcp", NULL);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "unknown backend 'tcp'"), "%s", g_out);
}


// Bad input under MPI, one way out: ONE line from the whole job (rank 0's), exit 2 on every rank,
// no banner, no abort; the line names the flag, the value and what is allowed.
Test(collectives_mpi, bad_input_is_one_line_from_the_whole_job, .timeout = 240) {
    char args[1024];
    // a count that cannot be allocated: refused by a rule, before anything is allocated
    int st = mpi_run(2, "collectives_check", "--counts 1,100000G", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "--counts: 107374182400000", "64M");
    // ranks that are not in the job
    st = mpi_run(2, "collectives_check", "--counts 1 --die-rank 5", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "--die-rank: 5 is out of range", "0..1");
    st = mpi_run(2, "collectives_check", "--counts 1 --hang-rank 9", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "--hang-rank: 9 is out of range", "0..1");
    // a fault only one rank sees: its reason, in rank 0's one line
    st = mpi_run(3, "collectives_check", "--counts 1 --refuse-rank 2", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "--refuse-rank 2: rank 2 refused its input, alone");
    st = mpi_run(3, "collectives_check", "--counts 1 --hang-rank -2", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "--hang-rank: -2");
    // every rank finds it at once (the environment): still one line, not interleaved
    st = mpi_run_env("COMM_TIMEOUT=abc", 3, "collectives_check", "--counts 1", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "COMM_TIMEOUT=abc", "a positive number of seconds");
    st = mpi_run(2, "collectives_check", "--counts 1 --comm-timeout -1", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "--comm-timeout: -1 is negative");
    // an output place that cannot exist: said before any work, with the system's reason
    snprintf(args, sizeof args, "--backends mpi --maxbytes 1K --iters 1 --warmup 0 --out %s/x", test_plain_file("plain05"));
    st = mpi_run(2, "allreduce_bench", args, NULL);
    ASSERT_REFUSED(st, g_out, "allreduce_bench", "--out", test_plain_file("plain05"), "not a directory");
    // an empty item of a list is refused, not skipped
    st = mpi_run(2, "allreduce_bench", "--backends mpi,,ring-mpi --maxbytes 1K", NULL);
    ASSERT_REFUSED(st, g_out, "allreduce_bench", "--backends: 'mpi,,ring-mpi' has an empty item");
    st = mpi_run(2, "allreduce_bench", "--minbytes 2", NULL);
    ASSERT_REFUSED(st, g_out, "allreduce_bench", "--minbytes: 2");
}

// The demo started outside the repository's root still starts its 2 ranks (it finds
// scripts/mpirun.sh from its own path); a copy of it that cannot find the launcher refuses
// --np 2 in one line rather than running one rank.
Test(collectives_mpi, demo_np_2_from_anywhere, .timeout = 120) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "root=$PWD; cd %s && $root/%s/05_collectives/demo --np 2 --backend mpi", test_tmpdir(),
             build_dir());
    if (build_dir()[0] == '/')
        snprintf(cmd, sizeof cmd, "cd %s && %s/05_collectives/demo --np 2 --backend mpi", test_tmpdir(), build_dir());
    int st = run_capture(cmd, g_out, sizeof g_out);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "over 2 ranks"), "%s", g_out);
    snprintf(cmd, sizeof cmd, "cp %s/05_collectives/demo %s/demo_copy && cd %s && ./demo_copy --np 2", build_dir(),
             test_tmpdir(), test_tmpdir());
    st = run_capture(cmd, g_out, sizeof g_out);
    ASSERT_REFUSED(st, g_out, "demo_copy", "--np 2: cannot start 2 ranks", "mpirun.sh");
}

Test(collectives_mpi, nccl_without_a_gpu_is_a_clear_error) {
    if (gpu_count() > 0) cr_skip_test("this machine has a GPU: the no-GPU message cannot be seen here");
    int st = mpi_run(2, "collectives_check", "--backend nccl", NULL);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "needs a CUDA GPU"), "%s", g_out);
}

Test(collectives_mpi, bench_runs_and_checks) {
    char args[512];
    snprintf(args, sizeof args,
             "--backends mpi,mpi-lib,ring-mpi,alt-ring-mpi --op all --maxbytes 64K --iters 3 --warmup 1 --out %s --tag t",
             test_tmpdir());
    int st = mpi_run(3, "allreduce_bench", args, NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "# OK"), "%s", g_out);
    cr_assert(strstr(g_out, "| reducescatter | mpi") && strstr(g_out, "| allreduce     | ring-mpi") && strstr(g_out, "| allreduce     | mpi-lib") &&
                  strstr(g_out, "| allreduce     | alt-ring-mpi"), "%s", g_out);
    char path[512];
    snprintf(path, sizeof path, "%s/t.csv", test_tmpdir());
    FILE* f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    fclose(f);
}

// ---- GPU: NCCL and the ring on the GPU (2+ GPUs)
static void need_gpus(int n) {
    if (gpu_count() < n) cr_skip_test("needs %d CUDA GPUs (found %d)%s%s", n, gpu_count(),
                                      gpu_count() ? "" : ": ", gpu_absent_reason());
}

Test(collectives_nccl, every_operation_2_gpus) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    int st = mpi_run(test_gpu_ranks(), "collectives_check", "--backend nccl --counts " COUNTS, NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, " 0 wrong"), "%s", g_out);
}

Test(collectives_nccl, more_ranks_than_gpus_is_a_clear_error) {
    need_gpus(1);
    int st = mpi_run(gpu_count() + 1, "collectives_check", "--backend nccl --counts 1", NULL);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "one GPU per rank"), "%s", g_out);
}

// The first point-to-point contact between the pair (the ring's first send/receive): NCCL
// connects the peers inside that group's end, which must not block the host past the deadline.
Test(collectives_nccl, a_silent_rank_ends_the_job_at_the_deadline) {
    need_gpus(2);
    const char* const want[] = {"comm: deadline 5 s passed in", "on rank 0: rank 1 never entered the matching", NULL};
    check_stall(2, "--backend nccl --hang-rank 1", "t05nccl", 5, want);
}

// Before the first collective (NCCL may connect its channels there).
Test(collectives_nccl, a_rank_silent_before_the_first_collective_is_named) {
    need_gpus(2);
    const char* const want[] = {"comm: deadline 5 s passed in all-reduce #", "on rank 0: rank 1 never entered it", NULL};
    check_stall(2, "--backend nccl --hang-rank 1 --hang-at 1", "t05nccl1", 5, want);
    assert_last_was_the_one_before(1);
}

Test(collectives_nccl, a_stopped_rank_is_named_once) {
    need_gpus(2);
    const char* const want[] = {"on rank 0: rank 1 never entered the matching", NULL};
    check_stall(2, "--backend nccl --stop-rank 1", "t05nstop", 5, want);
}

Test(collectives_nccl, a_dead_rank_ends_the_job) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    double s = 0;
    int st = mpi_run(test_gpu_ranks(), "collectives_check", "--backend nccl --counts 1000 --die-rank 1 --tag t05ndead", &s);
    cr_assert_neq(st, 0, "exit 0:\n%s", g_out);
    cr_assert_lt(s, 40.0, "the job took %.1f s to end", s);
    cr_assert(!leftovers("t05ndead"), "processes left behind");
}

Test(collectives_nccl, bench_gpu_rows_check) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS
    char args[512];
    snprintf(args, sizeof args, "--backends nccl,nccl-direct,ring-nccl --op all --maxbytes 4M --iters 3 --warmup 1 --out %s --tag g",
             test_tmpdir());
    int st = mpi_run(test_gpu_ranks(), "allreduce_bench", args, NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "# OK"), "%s", g_out);
}
