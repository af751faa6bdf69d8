// groups_check: the communicator's groups (comm_split) and the process grid (common/grid.h).
//   scripts/mpirun.sh 4 build/05_collectives/groups_check --split parity
//   scripts/mpirun.sh 4 build/05_collectives/groups_check --grid 2x1x2 --names dp,pp,tp
// --split parity|halves|reverse|none: the world is split (parity: even and odd ranks; halves:
// the first and the second half; reverse: one group ordered by descending rank; none: the
// world itself, to compare with) and every operation runs on each group, checked on data
// whose right answer is exact in any order (small integers in fp32): all-reduce (sum, avg,
// max, min; blocking, non-blocking, in place), broadcast, reduce-scatter, all-gather, a ring
// of sends and receives, barrier, host all-reduce. The groups of odd color run the list
// backwards, so two groups run different collectives at the same time. Then an all-reduce
// of random floats that depend on the GROUP rank only: its FNV-1a hash is printed per group
// size ("hash of size n: ..."), so a group of n can be compared with a world of n; with
// --rank-order 1 it must also equal the left-to-right sum over the group's ranks, bit for bit
// (the MPI backend's shared-memory path, per group).
// --grid DIMS --names A,B,..: the grid; rank 0 prints every rank's coordinates and the world
// ranks of its group along each axis, "rank 3: (1,0,1) dp [1 3] pp [3] tp [2 3]", and the
// checks run on every axis's group.
// --hang-rank R --hang-at K: world rank R stops answering before its group's K-th check (the
// others must end the job at the deadline with a line that names the group).
// Rank 0 prints "N checks, N wrong"; exit 1 if anything is wrong.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/grid.h"
#include "common/hash.h"
#include "common/rng.h"

typedef struct {
    comm_t* g;
    float *d_a, *d_b;  // backend buffers of cap floats
    float *h_a, *h_b, *h_w;
    size_t cap;
    int hang_rank, hang_at, ops;
    long long checks, wrong;
} ctx_t;

static float value(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8); }

static void to_dev(ctx_t* x, float* d, const float* h, size_t n) {
    if (x->g->backend == COMM_NCCL) {
        CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, comm_stream(x->g)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(x->g)));
    } else if (n) {
        memcpy(d, h, n * sizeof(float));
    }
}
static void to_host(ctx_t* x, float* h, const float* d, size_t n) {
    if (x->g->backend == COMM_NCCL) {
        comm_stream_sync(x->g, comm_stream(x->g), "the check's copy");
        CUDA_CHECK(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, comm_stream(x->g)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(x->g)));
    } else if (n) {
        memcpy(h, d, n * sizeof(float));
    }
}

static void verdict(ctx_t* x, const char* what, size_t count, const float* got, const float* want, size_t n, double rtol) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - (double)want[i]) <= rtol * fabs((double)want[i]))) bad++;
    x->checks++;
    if (bad) {
        x->wrong++;
        char who[64];
        fprintf(stderr, "%s: %s, count %zu: %zu of %zu elements WRONG\n", comm_rank_label(x->g, who, sizeof who), what, count, bad, n);
    }
}

static void fill(ctx_t* x, int r, size_t n) {
    for (size_t i = 0; i < n; i++) x->h_a[i] = value(r, i);
    to_dev(x, x->d_a, x->h_a, n);
}

// The checks, by number, for one count; 0 when k is past the last.
#define N_CHECKS 10
static void one_check(ctx_t* x, int k, size_t n) {
    comm_t* g = x->g;
    const int W = g->world, r = g->rank;
    if (x->hang_rank == g->world_rank && ++x->ops == x->hang_at) {
        fprintf(stderr, "%s: stops answering (failure test)\n", g->name);
        for (;;) pause();
    }
    switch (k) {
    case 0: case 1: case 2: case 3: {  // all-reduce sum, avg, max, min (out of place)
        const comm_op_t op[] = {COMM_SUM, COMM_AVG, COMM_MAX, COMM_MIN};
        fill(x, r, n);
        comm_allreduce(g, x->d_a, x->d_b, n, COMM_F32, op[k], NULL);
        to_host(x, x->h_b, x->d_b, n);
        for (size_t i = 0; i < n; i++) {
            double s = 0, mx = -1e30, mn = 1e30;
            for (int q = 0; q < W; q++) {
                const double v = value(q, i);
                s += v; mx = v > mx ? v : mx; mn = v < mn ? v : mn;
            }
            x->h_w[i] = (float)(k == 0 ? s : k == 1 ? s / W : k == 2 ? mx : mn);
        }
        char what[48];
        snprintf(what, sizeof what, "all-reduce %s", comm_op_name(op[k]));
        verdict(x, what, n, x->h_b, x->h_w, n, k == 1 ? 1e-6 : 0);
        break;
    }
    case 4: {  // non-blocking all-reduce in place
        fill(x, r, n);
        comm_wait(g, comm_iallreduce(g, x->d_a, x->d_a, n, COMM_F32, COMM_SUM, NULL));
        to_host(x, x->h_b, x->d_a, n);
        for (size_t i = 0; i < n; i++) {
            double s = 0;
            for (int q = 0; q < W; q++) s += value(q, i);
            x->h_w[i] = (float)s;
        }
        verdict(x, "non-blocking all-reduce in place", n, x->h_b, x->h_w, n, 0);
        break;
    }
    case 5: {  // broadcast from the group's last rank
        fill(x, r, n);
        comm_broadcast(g, x->d_a, x->d_b, n, COMM_F32, W - 1, NULL);
        to_host(x, x->h_b, x->d_b, n);
        for (size_t i = 0; i < n; i++) x->h_w[i] = value(W - 1, i);
        verdict(x, "broadcast", n, x->h_b, x->h_w, n, 0);
        break;
    }
    case 6: {  // reduce-scatter: block r of the sum
        fill(x, r, n * (size_t)W);
        comm_reduce_scatter(g, x->d_a, x->d_b, n, COMM_F32, COMM_SUM, NULL);
        to_host(x, x->h_b, x->d_b, n);
        for (size_t i = 0; i < n; i++) {
            double s = 0;
            for (int q = 0; q < W; q++) s += value(q, (size_t)r * n + i);
            x->h_w[i] = (float)s;
        }
        verdict(x, "reduce-scatter", n, x->h_b, x->h_w, n, 0);
        break;
    }
    case 7: {  // all-gather: every rank's block in group-rank order
        fill(x, r, n);
        comm_allgather(g, x->d_a, x->d_b, n, COMM_F32, NULL);
        to_host(x, x->h_b, x->d_b, n * (size_t)W);
        for (int q = 0; q < W; q++)
            for (size_t i = 0; i < n; i++) x->h_w[(size_t)q * n + i] = value(q, i);
        verdict(x, "all-gather", n, x->h_b, x->h_w, n * (size_t)W, 0);
        break;
    }
    case 8: {  // a ring: send to the next group rank, receive from the previous
        fill(x, r, n);
        const int next = (r + 1) % W, prev = (r + W - 1) % W;
        comm_sendrecv(g, x->d_a, n, next, x->d_b, n, prev, COMM_F32, NULL);
        to_host(x, x->h_b, x->d_b, n);
        for (size_t i = 0; i < n; i++) x->h_w[i] = value(prev, i);
        verdict(x, "send/receive ring", n, x->h_b, x->h_w, n, 0);
        break;
    }
    case 9: {  // barrier and host all-reduce: the sum of group ranks
        comm_barrier(g);
        double v[2] = {(double)r, 1.0};
        comm_host_allreduce_f64(g, v, 2, COMM_SUM);
        const float got[2] = {(float)v[0], (float)v[1]}, want[2] = {(float)(W * (W - 1) / 2), (float)W};
        verdict(x, "barrier + host all-reduce", 2, got, want, 2, 0);
        break;
    }
    }
}

// Random floats of group rank r (the same for a group of n as for a world of n).
static uint64_t hash_allreduce(ctx_t* x, size_t n, int rank_order) {
    comm_t* g = x->g;
    float* mine = x->h_a;
    for (int q = 0; q < g->world; q++) {
        for (size_t i = 0; i < n; i++) {
            const float v = rng_normal(1000 + (uint64_t)q, i);
            if (q == 0) x->h_w[i] = v;
            else x->h_w[i] += v;  // left to right over ranks 0..n-1
            if (q == g->rank) mine[i] = v;
        }
    }
    to_dev(x, x->d_a, mine, n);
    comm_allreduce(g, x->d_a, x->d_b, n, COMM_F32, COMM_SUM, NULL);
    to_host(x, x->h_b, x->d_b, n);
    if (rank_order) {
        x->checks++;
        if (memcmp(x->h_b, x->h_w, n * sizeof(float)) != 0) {
            x->wrong++;
            fprintf(stderr, "%s rank %d: the all-reduce is not the left-to-right sum over the group's ranks: WRONG\n", g->name, g->rank);
        }
    }
    return fnv1a(FNV1A_INIT, x->h_b, n * sizeof(float));
}

static void run_checks(ctx_t* x, const int64_t* counts, int ncounts, int backwards) {
    for (int ci = 0; ci < ncounts; ci++)
        for (int j = 0; j < N_CHECKS; j++) one_check(x, backwards ? N_CHECKS - 1 - j : j, (size_t)counts[ci]);
}

static ctx_t ctx_make(comm_t* g, size_t max_count, int hang_rank, int hang_at) {
    ctx_t x = {.g = g, .hang_rank = hang_rank, .hang_at = hang_at};
    x.cap = max_count * (size_t)g->world + 1;
    x.d_a = comm_alloc(g, x.cap * sizeof(float), MEM_OTHER);
    x.d_b = comm_alloc(g, x.cap * sizeof(float), MEM_OTHER);
    x.h_a = mem_alloc(DEV_CPU, x.cap * sizeof(float), MEM_OTHER);
    x.h_b = mem_alloc(DEV_CPU, x.cap * sizeof(float), MEM_OTHER);
    x.h_w = mem_alloc(DEV_CPU, x.cap * sizeof(float), MEM_OTHER);
    return x;
}

static void ctx_free(ctx_t* x) {
    mem_free(x->d_a); mem_free(x->d_b); mem_free(x->h_a); mem_free(x->h_b); mem_free(x->h_w);
}

// The world ranks of g's members, in g's rank order, as "[1 3]".
static void members(comm_t* g, char* out, size_t len) {
    int32_t* d = comm_alloc(g, (size_t)g->world * sizeof(int32_t) + 4, MEM_OTHER);
    int32_t* h = malloc((size_t)g->world * sizeof(int32_t));
    if (!h) DIE("out of host memory");
    const int32_t me = g->world_rank;
    int32_t* slot = d + g->rank;
    if (g->backend == COMM_NCCL) CUDA_CHECK(cudaMemcpy(slot, &me, sizeof me, cudaMemcpyHostToDevice));
    else *slot = me;
    comm_allgather(g, slot, d, 1, COMM_I32, NULL);
    if (g->backend == COMM_NCCL) {
        comm_stream_sync(g, comm_stream(g), "the members' copy");
        CUDA_CHECK(cudaMemcpy(h, d, (size_t)g->world * sizeof(int32_t), cudaMemcpyDeviceToHost));
    } else {
        memcpy(h, d, (size_t)g->world * sizeof(int32_t));
    }
    size_t k = (size_t)snprintf(out, len, "[");
    for (int i = 0; i < g->world && k < len; i++) k += (size_t)snprintf(out + k, len - k, "%s%d", i ? " " : "", h[i]);
    if (k < len) snprintf(out + k, len - k, "]");
    free(h);
    mem_free(d);
}

int main(int argc, char** argv) {
    const char *backend_s = "mpi", *counts_s = "0,1,3,1000,65537", *split_s = "parity", *grid_s = "", *names_s = "";
    const char *name = "grp", *tag = "";
    int hang_rank = -1, hang_at = 1, rank_order = 0;
    double timeout_s = 0;
    cli_opt_t opts[] = {
        {"backend", CLI_CHOICE, &backend_s, "mpi", "communicator backend", COMM_BACKEND_CHOICES},
        {"counts", CLI_STR, &counts_s, "0,1,3,1000,65537", "element counts to check (comma list, K/M suffixes)", NULL},
        {"split", CLI_CHOICE, &split_s, "parity", "how the world is split into groups", "parity|halves|reverse|none"},
        {"name", CLI_STR, &name, "grp", "the groups' name (--split)", NULL},
        {"grid", CLI_STR, &grid_s, "", "a process grid instead of --split, e.g. 2x1x2", NULL},
        {"names", CLI_STR, &names_s, "", "the grid's axis names, e.g. dp,pp,tp", NULL},
        {"hang-rank", CLI_INT, &hang_rank, "-1", "this world rank stops answering (failure test)", NULL},
        {"hang-at", CLI_INT, &hang_at, "1", "before its group's K-th check (1, 2, ...)", NULL},
        {"rank-order", CLI_INT, &rank_order, "0", "1: a group's all-reduce must be the left-to-right sum over its ranks, bit for bit", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
        {"tag", CLI_STR, &tag, "", "ignored: lets a test find its processes", NULL},
    };
    comm_cli_parse(argc, argv,
                   "Checks the communicator's groups and the process grid on exact data (run under "
                   "mpirun: scripts/mpirun.sh N prog).",
                   opts, CLI_COUNT(opts));
    int64_t counts[16];
    const int ncounts = parse_size_list(counts_s, counts, 16);
    if (ncounts < 1) comm_bad_input("--counts: '%s' is not a comma list of sizes (e.g. 0,1,7,1M)", counts_s);
    int64_t max_count = 0;
    for (int i = 0; i < ncounts; i++) {
        if (counts[i] > (1 << 22)) comm_bad_input("--counts: %lld is above the largest count checked, 4M", (long long)counts[i]);
        if (counts[i] > max_count) max_count = counts[i];
    }
    if (rank_order != 0 && rank_order != 1) comm_bad_input("--rank-order: %d must be 0 or 1", rank_order);
    if (hang_at < 1) comm_bad_input("--hang-at: %d must be 1 or more", hang_at);
    int dims[GRID_MAX_AXES + 1], n_axes = 0;
    char names_buf[256];
    const char* names[GRID_MAX_AXES + 1] = {0};
    if (*grid_s) {
        for (const char* p = grid_s; *p && n_axes <= GRID_MAX_AXES;) {
            char* end = NULL;
            const long v = strtol(p, &end, 10);
            if (end == p || (*end && *end != 'x') || v < -1000000 || v > 1000000)
                comm_bad_input("--grid: '%s' is not sizes joined by 'x' (e.g. 2x1x2)", grid_s);
            dims[n_axes++] = (int)v;
            p = *end ? end + 1 : end;
        }
        snprintf(names_buf, sizeof names_buf, "%s", names_s);
        int nn = 0;
        for (char* t = strtok(names_buf, ","); t && nn <= GRID_MAX_AXES; t = strtok(NULL, ",")) names[nn++] = t;
        if (nn != n_axes) comm_bad_input("--names: %d names for a grid of %d axes; give one name an axis (e.g. dp,pp,tp)", nn, n_axes);
    }
    comm_backend_t backend;
    comm_backend_parse(backend_s, &backend);
    comm_t* c = comm_init(backend, comm_timeout_flag(timeout_s));
    long long tot[2] = {0, 0};

    if (*grid_s) {
        grid_t* gr = grid_create(c, dims, names, n_axes);
        char line[512], buf[128];
        size_t k = (size_t)snprintf(line, sizeof line, "rank %d: (", c->rank);
        for (int a = 0; a < gr->n_axes; a++) k += (size_t)snprintf(line + k, sizeof line - k, "%s%d", a ? "," : "", gr->coord[a]);
        k += (size_t)snprintf(line + k, sizeof line - k, ")");
        for (int a = 0; a < gr->n_axes; a++) {
            members(gr->group[a], buf, sizeof buf);
            k += (size_t)snprintf(line + k, sizeof line - k, " %s %s", gr->names[a], buf);
        }
        if (c->rank == 0) printf("grid %s\n", grid_describe(gr, buf, sizeof buf));
        for (int r = 0; r < c->world; r++) {  // in rank order, from rank 0
            char l[512];
            memcpy(l, line, sizeof l);
            comm_host_bcast(c, l, sizeof l, r);
            if (c->rank == 0) printf("%s\n", l);
        }
        for (int a = 0; a < gr->n_axes; a++) {
            // Every member of the group runs the same order: backwards when the sum of the
            // coordinates that name the group (all but axis a) is odd.
            int other = 0;
            for (int b = 0; b < gr->n_axes; b++) other += b == a ? 0 : gr->coord[b];
            ctx_t x = ctx_make(gr->group[a], (size_t)max_count, hang_rank, hang_at);
            run_checks(&x, counts, ncounts, other % 2);
            tot[0] += x.checks;
            tot[1] += x.wrong;
            ctx_free(&x);
        }
        grid_destroy(gr);
    } else {
        const int W = c->world, r = c->rank;
        int color = 0, key = r;
        if (strcmp(split_s, "parity") == 0) color = r % 2;
        else if (strcmp(split_s, "halves") == 0) color = r * 2 / W;
        else if (strcmp(split_s, "reverse") == 0) key = -r;
        comm_t* g = strcmp(split_s, "none") == 0 ? c : comm_split(c, color, key, name);
        if (strcmp(split_s, "reverse") == 0 && g->rank != W - 1 - r)
            comm_fatal(c, 1, "--split reverse: rank %d is %s rank %d, not %d", r, g->name, g->rank, W - 1 - r);
        ctx_t x = ctx_make(g, (size_t)max_count, hang_rank, hang_at);
        run_checks(&x, counts, ncounts, color % 2);
        const uint64_t h = hash_allreduce(&x, (size_t)max_count, rank_order && g->world > 1);
        if (g->rank == 0) printf("%s%shash of size %d: %016llx\n", g->name, g->name[0] ? " " : "", g->world, (unsigned long long)h);
        tot[0] = x.checks;
        tot[1] = x.wrong;
        ctx_free(&x);
        if (g != c) comm_destroy(g, 0);
    }
    // A failure test checks the stalled group's own deadline line: the ranks of the other groups
    // (the only ones that get here) wait out that deadline before the world's operation, so that
    // theirs can never expire first on a loaded machine.
    if (hang_rank >= 0) sleep((unsigned)(c->timeout_s + 2));
    comm_host_allreduce_i64(c, tot, 2, COMM_SUM);
    if (c->rank == 0) printf("%lld checks, %lld wrong\n", tot[0], tot[1]);
    comm_destroy(c, 1);
    return tot[1] ? 1 : 0;
}
