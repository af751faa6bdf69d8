// Stage 05 tests of the communicator's groups (comm_split) and the process grid (common/grid.h),
// through build/05_collectives/groups_check under scripts/mpirun.sh: every operation on groups
// split by parity, by halves and in reverse order at 2, 3 and 4 ranks (MPI backend on the CPU);
// a group of n against a world of n; a stalled group's deadline line; the grid's coordinates
// and groups; a bad grid refused in one line. NCCL versions on test_gpu_ranks() GPUs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gpu.h"
#include "tests/harness.h"

static char g_out[1 << 16];

static int run_env(const char* env, int np, const char* args, double* seconds) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/05_collectives/groups_check %s", env, np,
             build_dir(), args);
    return run_capture_timed(cmd, g_out, sizeof g_out, seconds);
}
static int run(int np, const char* args) { return run_env("", np, args, NULL); }

static void assert_all_right(int st, const char* what) {
    cr_assert_eq(st, 0, "%s: exit %d:\n%s", what, st, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%s:\n%s", what, g_out);
}

// Every operation on every group, exact; --rank-order 1: each group's all-reduce of random
// floats is the left-to-right sum over ITS ranks (the shared-memory path, one window a group).
static void check_split(int np, const char* split) {
    char a[256];
    snprintf(a, sizeof a, "--split %s --rank-order 1", split);
    assert_all_right(run(np, a), a);
    // checks: 5 counts x 10 checks on every rank, + the rank-order check on ranks of groups of 2+
    long long n = 0;
    const char* p = strstr(g_out, " checks, ");
    while (p > g_out && p[-1] >= '0' && p[-1] <= '9') p--;
    n = atoll(p);
    cr_assert(n >= 50LL * np, "%s on %d ranks: only %lld checks:\n%s", a, np, n, g_out);
}

Test(groups_mpi, split_by_parity_2_ranks) { check_split(2, "parity"); }
Test(groups_mpi, split_by_parity_3_ranks) { check_split(3, "parity"); }
Test(groups_mpi, split_by_parity_4_ranks) { check_split(4, "parity"); }
Test(groups_mpi, split_by_halves_2_ranks) { check_split(2, "halves"); }
Test(groups_mpi, split_by_halves_3_ranks) { check_split(3, "halves"); }
Test(groups_mpi, split_by_halves_4_ranks) { check_split(4, "halves"); }

// key orders the group: --split reverse makes world rank r group rank n-1-r (the program
// checks it and every operation then runs in that order).
Test(groups_mpi, key_orders_the_group) {
    for (int np = 3; np <= 4; np++) assert_all_right(run(np, "--split reverse --rank-order 1"), "reverse");
}

// The hash line of a group of `size` in g_out, or NULL.
static const char* hash_of(int size, char* buf, size_t len) {
    char key[64];
    snprintf(key, sizeof key, "hash of size %d: ", size);
    const char* p = strstr(g_out, key);
    if (!p) return NULL;
    snprintf(buf, len, "%.16s", p + strlen(key));
    return buf;
}

// The same all-reduce on a group of n and on a world of n: the same bits (the data depends on
// the group rank only). Groups of 2 (halves of 4, parity of 3) against a world of 2, groups of 3
// (parity of 6) against a world of 3, a group of 4 in reverse order against a world of 4 (its
// rank k holds what world rank k holds).
Test(groups_mpi, a_group_of_n_gives_the_bits_of_a_world_of_n) {
    char w2[32], w4[32], h[32];
    assert_all_right(run(2, "--split none"), "world of 2");
    cr_assert(hash_of(2, w2, sizeof w2), "%s", g_out);
    assert_all_right(run(4, "--split halves --name half"), "halves of 4");
    cr_assert(hash_of(2, h, sizeof h) && strcmp(h, w2) == 0, "a half of 4 differs from a world of 2 (%s):\n%s", w2, g_out);
    assert_all_right(run(3, "--split parity --name even"), "parity of 3");
    cr_assert(hash_of(2, h, sizeof h) && strcmp(h, w2) == 0, "the even ranks of 3 differ from a world of 2 (%s):\n%s", w2, g_out);
    char w3[32];
    assert_all_right(run(3, "--split none --rank-order 1"), "world of 3");
    cr_assert(hash_of(3, w3, sizeof w3), "%s", g_out);
    assert_all_right(run(6, "--split parity --rank-order 1"), "parity of 6");
    cr_assert(hash_of(3, h, sizeof h) && strcmp(h, w3) == 0, "a parity group of 6 differs from a world of 3 (%s):\n%s", w3, g_out);
    assert_all_right(run(4, "--split none"), "world of 4");
    cr_assert(hash_of(4, w4, sizeof w4), "%s", g_out);
    assert_all_right(run(4, "--split reverse"), "reverse of 4");
    cr_assert(hash_of(4, h, sizeof h) && strcmp(h, w4) == 0, "4 in reverse differ from a world of 4 (%s):\n%s", w4, g_out);
}

// Two groups at once running different collectives (the odd group runs the list backwards),
// each through its own shared-memory window, with 4 KiB chunks so that the larger counts take
// many rounds of both windows' barriers at the same time; and the same without the window
// (COMM_SHM=0: MPI's collectives on the group's communicator).
Test(groups_mpi, two_groups_run_different_collectives_at_once) {
    assert_all_right(run_env("COMM_SHM_CHUNK=4K", 4, "--split parity --rank-order 1 --counts 0,1,1000,4099,65537", NULL),
                     "parity, 4K chunks");
    assert_all_right(run_env("COMM_SHM=0", 4, "--split halves --counts 0,1,3,1000,65537", NULL), "halves, COMM_SHM=0");
    assert_all_right(run_env("COMM_SHM=0", 3, "--split reverse --counts 0,1,3,1000,65537", NULL), "reverse of 3, COMM_SHM=0");
}

static int count_lines(const char* what) {
    int n = 0;
    for (const char* p = g_out; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    return n;
}

// World rank 3 (dp rank 1 of the odd group) stops answering before its group's 5th check; its
// partner ends the job at the deadline with one line that names the group and both ranks.
Test(groups_mpi, a_stalled_group_names_itself_in_the_deadline_line, .timeout = 120) {
    double s = 0;
    int st = run_env("", 4, "--split parity --name dp --hang-rank 3 --hang-at 5 --comm-timeout 3 --tag t05grp", &s);
    cr_assert_neq(st, 0, "a rank stalled but the job exited 0:\n%s", g_out);
    cr_assert_eq(count_lines("comm: deadline"), 1, "not exactly one deadline line:\n%s", g_out);
    cr_assert(strstr(g_out, "comm: deadline 3 s passed in dp "), "the operation is not named as the group's:\n%s", g_out);
    cr_assert(strstr(g_out, " on dp rank 0 (world rank 1): dp rank 1 (world rank 3) never entered"),
              "the line does not name both ranks in the group and in the world:\n%s", g_out);
    cr_assert(strstr(g_out, "(last: dp "), "the silent rank's last operation is not the group's:\n%s", g_out);
    cr_assert_lt(s, 60.0, "the job took %.1f s to end", s);
}

// ---- the process grid
static void check_grid(int np, const char* dims, const char* names, const char* const* lines) {
    char a[256];
    snprintf(a, sizeof a, "--grid %s --names %s --counts 0,1,1000", dims, names);
    assert_all_right(run(np, a), a);
    for (int i = 0; lines[i]; i++) cr_assert(strstr(g_out, lines[i]), "%s: no line '%s' in:\n%s", a, lines[i], g_out);
}

Test(grid_mpi, grid_2x2) {
    const char* const want[] = {"grid 2x2 (dp x tp)\n",
                                "rank 0: (0,0) dp [0 2] tp [0 1]\n", "rank 1: (0,1) dp [1 3] tp [0 1]\n",
                                "rank 2: (1,0) dp [0 2] tp [2 3]\n", "rank 3: (1,1) dp [1 3] tp [2 3]\n", NULL};
    check_grid(4, "2x2", "dp,tp", want);
}

Test(grid_mpi, grid_1x4) {
    const char* const want[] = {"rank 0: (0,0) dp [0] tp [0 1 2 3]\n", "rank 2: (0,2) dp [2] tp [0 1 2 3]\n",
                                "rank 3: (0,3) dp [3] tp [0 1 2 3]\n", NULL};
    check_grid(4, "1x4", "dp,tp", want);
}

Test(grid_mpi, grid_4x1) {
    const char* const want[] = {"rank 0: (0,0) dp [0 1 2 3] pp [0]\n", "rank 1: (1,0) dp [0 1 2 3] pp [1]\n",
                                "rank 3: (3,0) dp [0 1 2 3] pp [3]\n", NULL};
    check_grid(4, "4x1", "dp,pp", want);
}

Test(grid_mpi, grid_2x1x2) {
    const char* const want[] = {"grid 2x1x2 (dp x pp x tp)\n",
                                "rank 0: (0,0,0) dp [0 2] pp [0] tp [0 1]\n", "rank 1: (0,0,1) dp [1 3] pp [1] tp [0 1]\n",
                                "rank 2: (1,0,0) dp [0 2] pp [2] tp [2 3]\n", "rank 3: (1,0,1) dp [1 3] pp [3] tp [2 3]\n",
                                NULL};
    check_grid(4, "2x1x2", "dp,pp,tp", want);
}

Test(grid_mpi, a_bad_grid_is_one_line_exit_2, .timeout = 120) {
    int st = run(4, "--grid 3x2 --names dp,tp");
    ASSERT_REFUSED(st, g_out, "groups_check", "process grid 3x2", "6 ranks, the job has 4");
    st = run(4, "--grid 2x1 --names dp,tp");
    ASSERT_REFUSED(st, g_out, "groups_check", "process grid 2x1", "2 ranks, the job has 4");
    st = run(2, "--grid 2x0x1 --names dp,pp,tp");
    ASSERT_REFUSED(st, g_out, "groups_check", "process grid 2x0x1", "axis 1 has 0 ranks");
    st = run(2, "--grid 1x2 --names dp,dp");
    ASSERT_REFUSED(st, g_out, "groups_check", "the axis name 'dp' repeats");
    st = run(2, "--grid 1x1x1x1x2 --names a,b,c,d,e");
    ASSERT_REFUSED(st, g_out, "groups_check", "5 axes", "1 to 4");
}

// ---- NCCL (ncclCommSplit): the same checks on test_gpu_ranks() GPUs
Test(groups_nccl, split_and_grid_on_gpus, .timeout = 300) {
    NEED_GPU_RANKS();
    const int n = test_gpu_ranks();
    assert_all_right(run(n, "--backend nccl --split halves"), "nccl halves");
    assert_all_right(run(n, "--backend nccl --split reverse"), "nccl reverse");
    assert_all_right(run(n, "--backend nccl --split parity"), "nccl parity");
    char a[128];
    snprintf(a, sizeof a, "--backend nccl --grid 1x%d --names dp,tp --counts 0,1,1000", n);
    assert_all_right(run(n, a), a);
    snprintf(a, sizeof a, "--backend nccl --grid %dx1 --names dp,tp --counts 0,1,1000", n);
    assert_all_right(run(n, a), a);
}

Test(groups_nccl, a_stalled_group_names_itself_in_the_deadline_line, .timeout = 180) {
    NEED_GPU_RANKS();
    const int n = test_gpu_ranks();
    char a[256];
    snprintf(a, sizeof a, "--backend nccl --split reverse --name tp --hang-rank %d --hang-at 2 --comm-timeout 5 --tag t05grpg", n - 1);
    int st = run(n, a);
    cr_assert_neq(st, 0, "a rank stalled but the job exited 0:\n%s", g_out);
    cr_assert_eq(count_lines("comm: deadline"), 1, "not exactly one deadline line:\n%s", g_out);
    char who[96];
    snprintf(who, sizeof who, "tp rank 0 (world rank %d) never entered", n - 1);
    cr_assert(strstr(g_out, "comm: deadline 5 s passed in tp ") && strstr(g_out, who), "%s", g_out);
}
