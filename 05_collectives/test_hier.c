// Stage 05 tests of the hierarchical all-reduce (hier.h), through collectives_check and
// allreduce_bench under scripts/mpirun.sh: 2 emulated nodes of 2 ranks, 1 node of 4 (only the
// intra-node steps), 2 nodes of 1 (only the inter-node all-reduce), 3 nodes of 2, counts that
// do not divide by the node size; exact data bit for bit (the flat all-reduce's answer), random
// data within n·2^-23·sum|x| of the exact sum; the bytes against the formula; unequal nodes
// refused in one line. The layout check and the formula also in-process. NCCL on 2 and 4 GPUs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "05_collectives/hier.h"
#include "common/gpu.h"
#include "tests/harness.h"

static char g_out[1 << 17];

static int run_prog(const char* prog, const char* flags, int np, const char* args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPIRUN_EMULATE_NODES= MPIRUN_TIMEOUT=180 timeout -k 5 200 scripts/mpirun.sh %s %d %s/05_collectives/%s %s",
             flags, np, build_dir(), prog, args);
    return run_capture(cmd, g_out, sizeof g_out);
}

static int count(const char* what) {
    int n = 0;
    for (const char* p = g_out; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    return n;
}

// Counts 0..65537 with remainders modulo 2, 3 and 4; every hier line ok, every check right.
#define COUNTS "0,1,2,3,5,7,1000,65537"
#define NCOUNTS 8
static void check_hier(const char* flags, int np, const char* extra, const char* layout) {
    char args[256];
    snprintf(args, sizeof args, "--counts " COUNTS " --comm-timeout 30 %s", extra);
    int st = run_prog("collectives_check", flags, np, args);
    cr_assert_eq(st, 0, "%s %d ranks: exit %d:\n%s", flags, np, st, g_out);
    cr_assert(strstr(g_out, layout), "no '%s' in:\n%s", layout, g_out);
    cr_assert(strstr(g_out, " 0 wrong") && !strstr(g_out, "WRONG"), "%s", g_out);
    // per count, in place and out of place: sum, avg, max, random and the bytes, each ok
    static const char* const rows[] = {"hier all-reduce sum ", "hier all-reduce avg ", "hier all-reduce max ",
                                       "hier all-reduce random ", "hier bytes = formula "};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(count(rows[i]), 2 * NCOUNTS, "'%s' is not on %d lines:\n%s", rows[i], 2 * NCOUNTS, g_out);
}

Test(hier_mpi, two_emulated_nodes_of_two_ranks, .timeout = 240) {
    check_hier("--emulate-nodes 2", 4, "", "# hier: 2 nodes x 2 ranks");
}
Test(hier_mpi, one_node_of_four_ranks, .timeout = 240) {
    check_hier("", 4, "", "# hier: 1 node x 4 ranks");
}
Test(hier_mpi, two_emulated_nodes_of_one_rank, .timeout = 240) {
    check_hier("--emulate-nodes 2", 2, "", "# hier: 2 nodes x 1 rank");
}
Test(hier_mpi, three_emulated_nodes_of_two_ranks, .timeout = 240) {
    check_hier("--emulate-nodes 3", 6, "", "# hier: 3 nodes x 2 ranks");
}
// Blocks given on the command line instead of the communicator's nodes: 4 ranks as 2 x 2 on
// one machine (the shared-memory all-reduce may serve the groups; the answer is the same).
Test(hier_mpi, blocks_from_the_command_line, .timeout = 240) {
    check_hier("", 4, "--hier-node-size 2", "# hier: 2 nodes x 2 ranks");
    check_hier("", 4, "--hier-node-size 1", "# hier: 4 nodes x 1 rank");
}

// Nodes of unequal size, or a size out of range: one line, exit 2.
Test(hier_mpi, unequal_nodes_are_refused_in_one_line, .timeout = 120) {
    int st = run_prog("collectives_check", "", 3, "--counts 5 --hier-node-size 2");
    ASSERT_REFUSED(st, g_out, "collectives_check", "--hier-node-size 2", "nodes of unequal size",
                   "node 0 has 2 ranks, node 1 has 1", "the same number of ranks on every node");
    st = run_prog("collectives_check", "", 2, "--counts 5 --hier-node-size 3");
    ASSERT_REFUSED(st, g_out, "collectives_check", "--hier-node-size: 3 is out of range for 2 ranks");
}

// The layout check on its own: equal blocks pass, unequal or interleaved nodes do not.
Test(hier_layout, equal_blocks_pass_others_are_refused) {
    char why[256];
    int l = 0, k = 0;
    const int two_by_two[4] = {0, 0, 1, 1};
    cr_assert_eq(hier_layout(4, two_by_two, &l, &k, why, sizeof why), 0, "%s", why);
    cr_assert(l == 2 && k == 2, "l %d k %d", l, k);
    const int one[3] = {0, 0, 0};
    cr_assert_eq(hier_layout(3, one, &l, &k, why, sizeof why), 0, "%s", why);
    cr_assert(l == 3 && k == 1, "l %d k %d", l, k);
    const int singles[3] = {0, 1, 2};
    cr_assert_eq(hier_layout(3, singles, &l, &k, why, sizeof why), 0, "%s", why);
    cr_assert(l == 1 && k == 3, "l %d k %d", l, k);
    const int unequal[5] = {0, 0, 0, 1, 1};
    cr_assert_eq(hier_layout(5, unequal, &l, &k, why, sizeof why), -1);
    cr_assert(strstr(why, "nodes of unequal size (node 0 has 3 ranks, node 1 has 2)"), "%s", why);
    const int short_last[3] = {0, 0, 1};
    cr_assert_eq(hier_layout(3, short_last, &l, &k, why, sizeof why), -1);
    cr_assert(strstr(why, "unequal size"), "%s", why);
    const int interleaved[4] = {0, 1, 0, 1};
    cr_assert_eq(hier_layout(4, interleaved, &l, &k, why, sizeof why), -1);
    cr_assert(strstr(why, "not consecutive"), "%s", why);
}

// The formula: per rank 2(l-1)/l·S inside a node, 2(k-1)/k·S/l across; their sum never exceeds
// the flat ring's 2(n-1)/n·S, and what crosses the slow link is at most 1/l of the flat ring's.
Test(hier_formula, bytes_per_link) {
    double intra, inter;
    const double S = 1 << 20;
    hier_bytes_formula(S, 2, 2, &intra, &inter);
    cr_assert(intra == S && inter == S / 2, "2x2: intra %g inter %g", intra, inter);
    hier_bytes_formula(S, 8, 4, &intra, &inter);
    cr_assert(intra == 2.0 * 7 / 8 * S && inter == 2.0 * 3 / 4 * S / 8, "4x8: intra %g inter %g", intra, inter);
    hier_bytes_formula(S, 1, 4, &intra, &inter);  // one rank a node: the flat ring across nodes
    cr_assert(intra == 0 && inter == flat_ring_bytes(S, 4), "4x1: intra %g inter %g", intra, inter);
    hier_bytes_formula(S, 4, 1, &intra, &inter);  // one node: nothing crosses
    cr_assert(intra == flat_ring_bytes(S, 4) && inter == 0, "1x4: intra %g inter %g", intra, inter);
    cr_assert(flat_ring_bytes(S, 32) == 2.0 * 31 / 32 * S);
    for (int l = 1; l <= 8; l++)
        for (int k = 1; k <= 8; k++) {
            hier_bytes_formula(S, l, k, &intra, &inter);
            cr_assert(inter <= flat_ring_bytes(S, l * k) / l + 1e-9, "l %d k %d", l, k);
        }
}

// The benchmark's hier row at 2 x 2: right answers, and the bytes it counted are the formula's.
Test(hier_mpi, benchmark_row_and_bytes, .timeout = 240) {
    char args[512];
    snprintf(args, sizeof args, "--backends ring-mpi,hier-mpi --sizes 4K,64K --iters 2 --warmup 1 "
             "--comm-timeout 30 --out %s --tag hier", test_tmpdir());
    int st = run_prog("allreduce_bench", "--emulate-nodes 2", 4, args);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert_eq(count("allreduce     hier-mpi "), 2, "%s", g_out);  // one row a size
    cr_assert(!strstr(g_out, "FAILED"), "%s", g_out);
    const double sizes[2] = {4096, 65536};
    for (int i = 0; i < 2; i++) {
        double intra, inter;
        hier_bytes_formula(sizes[i], 2, 2, &intra, &inter);
        char want[256];
        snprintf(want, sizeof want, "intra-node %.0f (formula 2(l-1)/l*S %.0f), inter-node %.0f (formula 2(k-1)/k*S/l %.0f); "
                 "the flat ring: %.0f", intra, intra, inter, inter, flat_ring_bytes(sizes[i], 4));
        cr_assert(strstr(g_out, want), "no '%s' in:\n%s", want, g_out);
    }
}

// ---- NCCL across emulated nodes (socket transport between them): 2 nodes of 1 on 2 GPUs, and
// 1 node of 2; 2 nodes of 2 on 4 GPUs.
Test(emulated_nccl, hier_two_nodes_of_one_rank, .timeout = 300) {
    if (gpu_count() < 2) cr_skip_test("needs 2 CUDA GPUs (found %d)", gpu_count());
    check_hier("--emulate-nodes 2", 2, "--backend nccl", "# hier: 2 nodes x 1 rank");
    check_hier("", 2, "--backend nccl", "# hier: 1 node x 2 ranks");
}
Test(emulated_nccl, hier_two_nodes_of_two_ranks, .timeout = 300) {
    if (gpu_count() < 4) cr_skip_test("needs 4 CUDA GPUs (found %d)", gpu_count());
    check_hier("--emulate-nodes 2", 4, "--backend nccl", "# hier: 2 nodes x 2 ranks");
}
