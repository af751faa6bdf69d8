// Stage 05 tests: emulated nodes (common/comm.h "Nodes"; scripts/mpirun.sh --emulate-nodes K).
// One machine plays K machines: the job's ranks are cut into K blocks, each a node of its own
// for the communicator (its own flight-recorder window, its own deadline line, no shared-memory
// all-reduce across blocks), and MPI's messages go over TCP on the loopback interface.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

static char g_out[1 << 16];

// Runs `<env> scripts/mpirun.sh <launcher flags> np 05_collectives/collectives_check <args>`;
// returns its exit status (output in g_out) and, in *seconds, how long it took.
static int run_job(const char* env, const char* flags, int np, const char* args, double* seconds) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s MPIRUN_TIMEOUT=120 scripts/mpirun.sh %s %d %s/05_collectives/collectives_check %s",
             env, flags, np, build_dir(), args);
    return run_capture_timed(cmd, g_out, sizeof g_out, seconds);
}

static int count(const char* what) {
    int n = 0;
    for (const char* p = g_out; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    return n;
}

// Every operation of the communicator, 4 ranks on 2 emulated nodes, counts around the chunk and
// block boundaries (the shared-memory all-reduce is off: MPI's own collectives over TCP).
Test(emulated_mpi, every_operation_4_ranks_on_2_nodes) {
    int st = run_job("", "--emulate-nodes 2", 4, "--counts 0,1,2,3,5,7,1000,65537,1000003", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%s", g_out);
}

// The report at start: one line per node from rank 0, each naming the ranks of its block.
Test(emulated_mpi, the_node_report_names_the_ranks_of_each_node) {
    int st = run_job("", "--emulate-nodes 2", 4, "--counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert_eq(count("comm: node "), 2, "not one line per node:\n%s", g_out);
    cr_assert(strstr(g_out, "comm: node 0 of 2 (emulated): ranks 0,1 on "), "%s", g_out);
    cr_assert(strstr(g_out, "comm: node 1 of 2 (emulated): ranks 2,3 on "), "%s", g_out);
    st = run_job("", "--emulate-nodes 3", 6, "--counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert_eq(count("comm: node "), 3, "not one line per node:\n%s", g_out);
    cr_assert(strstr(g_out, "comm: node 0 of 3 (emulated): ranks 0,1 on ") &&
              strstr(g_out, "comm: node 1 of 3 (emulated): ranks 2,3 on ") &&
              strstr(g_out, "comm: node 2 of 3 (emulated): ranks 4,5 on "), "%s", g_out);
    // blocks of 3 or more are written as a range; the environment variable alone does it too
    st = run_job("CS336_EMULATE_NODES=1", "", 3, "--counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "comm: node 0 of 1 (emulated): ranks 0-2 on "), "%s", g_out);
}

Test(emulated_mpi, the_machine_report_on_request_and_not_otherwise) {
    int st = run_job("COMM_VERBOSE=1", "", 3, "--counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert_eq(count("comm: node "), 1, "%s", g_out);
    cr_assert(strstr(g_out, "comm: node 0 of 1: ranks 0-2 on "), "%s", g_out);
    st = run_job("", "", 3, "--counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert_eq(count("comm: node "), 0, "a report nobody asked for:\n%s", g_out);
}

// A node count that does not divide the job: one line, exit 2, from the launcher or (plain
// mpirun with the variable) from the program.
Test(emulated_mpi, a_bad_node_count_is_refused_in_one_line) {
    static const char* const bad[] = {"3", "0", "two", "-2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char flags[64];
        snprintf(flags, sizeof flags, "--emulate-nodes %s", bad[i]);
        int st = run_job("", flags, 4, "--counts 1", NULL);
        ASSERT_REFUSED(st, g_out, "mpirun.sh", flags, "give a node count that divides 4");
    }
    int st = run_job("CS336_EMULATE_NODES=3", "", 4, "--counts 1", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "CS336_EMULATE_NODES=3", "divides the job's 4 ranks");
    st = run_job("CS336_EMULATE_NODES=x", "", 2, "--counts 1", NULL);
    ASSERT_REFUSED(st, g_out, "collectives_check", "CS336_EMULATE_NODES=x");
}

// A hostfile and a host list reach OpenMPI (this machine under its own name); a missing
// hostfile is refused in one line.
Test(emulated_mpi, hostfile_and_host_list) {
    const char* hf = test_path("hosts");
    FILE* f = fopen(hf, "w");
    cr_assert(f);
    fprintf(f, "localhost slots=4\n");
    fclose(f);
    char flags[512];
    snprintf(flags, sizeof flags, "--hostfile %s --emulate-nodes 2", hf);
    int st = run_job("", flags, 4, "--counts 1,1000", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && strstr(g_out, "ranks 2,3"), "%s", g_out);
    st = run_job("", "-H localhost:2", 2, "--counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    // a host that does not exist: the job does not start
    st = run_job("", "-H no-such-host.invalid", 2, "--counts 1", NULL);
    cr_assert_neq(st, 0, "2 ranks on a host that does not exist ran:\n%s", g_out);
    snprintf(flags, sizeof flags, "--hostfile %s/none", test_tmpdir());
    st = run_job("", flags, 2, "--counts 1", NULL);
    ASSERT_REFUSED(st, g_out, "mpirun.sh", "--hostfile", "no such readable file");
}

// A rank that stops answering under emulation: each emulated node that waits says so at most
// once (its ranks share one recorder window and one claim; nodes share nothing), the job ends
// at the deadline and leaves nothing behind. Rank 3 (node 1) is silent: rank 2, its node
// mate, names it; node 0 may add its own line, which cannot see node 1's ranks.
static void check_hang(int silent, const char* tag, const char* want) {
    char args[256];
    snprintf(args, sizeof args, "--counts 1000 --comm-timeout 3 --hang-rank %d --tag %s", silent, tag);
    double s = 0;
    int st = run_job("", "--emulate-nodes 2", 4, args, &s);
    cr_assert_neq(st, 0, "a rank stalled but the job exited 0:\n%s", g_out);
    const int n0 = count(") on rank 0:") + count(") on rank 1:"), n1 = count(") on rank 2:") + count(") on rank 3:");
    cr_assert(n0 <= 1 && n1 <= 1, "a node printed more than one deadline line:\n%s", g_out);
    cr_assert(count("comm: deadline") == n0 + n1 && n0 + n1 >= 1, "deadline lines:\n%s", g_out);
    cr_assert(strstr(g_out, want), "no '%s' in:\n%s", want, g_out);
    cr_assert_lt(s, 40.0, "the job took %.1f s with a deadline of 3 s", s);
    char cmd[256], out[4096];
    snprintf(cmd, sizeof cmd, "sleep 2; pgrep -f -- '--tag %s' | grep -v $$ || true", tag);
    run_capture(cmd, out, sizeof out);
    cr_assert(out[0] == '\0', "processes left behind: %s", out);
}

Test(emulated_mpi, a_silent_rank_is_named_once_by_its_node) {
    check_hang(3, "t05emu3", "on rank 2: rank 3 never entered");
    check_hang(1, "t05emu1", "on rank 0: rank 1 never entered");
}

// ---- GPU: NCCL across emulated nodes (2+ GPUs). Each emulated node has its own NCCL_HOSTID,
// so NCCL must connect the nodes through its network transport (sockets on lo), never through
// NVLink/PCIe peer access or shared memory as it would on one host.
Test(emulated_nccl, every_operation_across_2_emulated_nodes) {
    NEED_GPU_RANKS();  // 2 ranks, or TEST_GPU_RANKS (even)
    const int np = test_gpu_ranks();
    if (np % 2) cr_skip_test("TEST_GPU_RANKS=%d: 2 emulated nodes need an even number of ranks", np);
    int st = run_job("", "--emulate-nodes 2", np, "--backend nccl --counts 0,1,7,1000,65537,1000003", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%s", g_out);
    cr_assert(strstr(g_out, "comm: node 1 of 2 (emulated)"), "%s", g_out);
    // NCCL's own log of a short job: the host id taken from the environment, the network between nodes
    st = run_job("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV", "--emulate-nodes 2", np, "--backend nccl --counts 1", NULL);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "NCCL_HOSTID set by environment to cs336-emulated-node-1"), "%s", g_out);
    cr_assert(strstr(g_out, "via NET/Socket"), "no connection through NCCL's socket transport:\n%s", g_out);
    if (np == 2) cr_assert(!strstr(g_out, "via P2P") && !strstr(g_out, "via SHM"), "one rank a node, yet:\n%s", g_out);
}

// make test-emulated-gpu's script: an unknown argument is one line, exit 2; without 2 GPUs the
// GPU suite says so in one line and exits 0 (CI runs the CPU suite instead).
Test(emulated_mpi, the_gpu_suite_script_refuses_and_skips_in_one_line) {
    int st = run_capture("scripts/test_emulated.sh --bogus", g_out, sizeof g_out);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "test_emulated.sh: error: unknown argument '--bogus'; allowed: --gpu"), "%s", g_out);
    if (gpu_count() >= 2) return;  // with them, --gpu runs the whole GPU suite
    st = run_capture("scripts/test_emulated.sh --gpu", g_out, sizeof g_out);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "test-emulated-gpu: skipped: needs 2 GPUs") && !strchr(strchr(g_out, '\n') + 1, '\n'),
              "one line:\n%s", g_out);
}
