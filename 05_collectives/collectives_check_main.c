// collectives_check: every operation of the communicator (common/comm.h) and the ring
// all-reduce, checked on data whose right answer is exact in any summation order (small
// integers in fp32), for a list of counts, in place and out of place, blocking and not.
//   scripts/mpirun.sh 4 build/05_collectives/collectives_check --backend mpi
// The hierarchical all-reduce (hier.h) is checked last for each count, on the communicator's
// nodes or on blocks of --hier-node-size ranks.
// Prints one line per check on rank 0, then "N checks, N wrong"; exits 1 if anything is wrong.
// Failure injection for the tests: --die-rank R (that rank _exit()s in the middle of the run),
// --hang-rank R (that rank stops answering; the others must end the job by the deadline) and
// --stop-rank R (that rank stops itself with SIGSTOP, as `kill -STOP` would; with --stop-delay S
// it starts the operation and is stopped S seconds later, inside whatever it waits for then).
// --hang-at K (default 3, the ring's first send/receive) picks the operation before which
// they act; 1 is the first all-reduce.
// The blocking all-reduce is also checked for every op (sum, avg, max, min) in fp32 and fp64,
// and on random floats: every rank must hold the same bits; with --rank-order 1 (the MPI
// backend's shared-memory path, common/comm_shm.c) they must also be the left-to-right
// reduction over ranks 0..n-1, bit for bit.
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "05_collectives/hier.h"
#include "05_collectives/ring.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/hash.h"
#include "common/rng.h"

typedef struct {
    comm_t* c;
    float *d_send, *d_recv;   // backend buffers (host for MPI, device for NCCL)
    float *h_send, *h_recv, *h_want;
    size_t cap;               // elements in each buffer
    int die_rank, hang_rank, stop_rank, hang_at, ops_done;
    double stop_delay;
    int rank_order;           // --rank-order: expect the all-reduce to reduce in rank order
    int hier_node_size;       // --hier-node-size: ranks per node of the hierarchical all-reduce
    hier_t* hier;             // made at its first check (after the other operations of a count)
    long long checks, wrong;
} ctx_t;

// Rank r's element i: a small integer, so every sum is exact in fp32 in any order.
static float value(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8); }

// Copies ordered on the communicator's stream and waited for: a plain cudaMemcpy from pageable
// memory may return before the data has landed, and the non-blocking stream would not wait.
static void to_backend(ctx_t* x, float* dst, const float* src, size_t n) {
    if (x->c->backend == COMM_NCCL) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, comm_stream(x->c)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(x->c)));
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}
static void from_backend(ctx_t* x, float* dst, const float* src, size_t n) {
    if (x->c->backend == COMM_NCCL) {
        comm_stream_sync(x->c, comm_stream(x->c), "the check's copy");
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, comm_stream(x->c)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(x->c)));
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

// --stop-delay: the whole process stops that much later.
static double g_stop_delay;
static void* stop_later(void* arg) {
    (void)arg;
    usleep((useconds_t)(g_stop_delay * 1e6));
    kill(getpid(), SIGSTOP);
    return NULL;
}

// Called before every operation: the failure-injection points.
static void step(ctx_t* x) {
    x->ops_done++;
    if (x->c->rank == x->stop_rank && x->ops_done == x->hang_at) {
        fprintf(stderr, "rank %d: --stop-rank: stopping%s\n", x->c->rank, x->stop_delay > 0 ? " inside the next operation" : "");
        fflush(stderr);
        if (x->stop_delay > 0) {
            g_stop_delay = x->stop_delay;
            pthread_t t;
            if (pthread_create(&t, NULL, stop_later, NULL) != 0) DIE("--stop-rank: cannot start a thread");
            pthread_detach(t);
        } else {
            kill(getpid(), SIGSTOP);
        }
    }
    if (x->c->rank == x->die_rank && x->ops_done == x->hang_at) {
        fprintf(stderr, "rank %d: --die-rank: exiting in the middle of the run\n", x->c->rank);
        fflush(stderr);
        _exit(3);
    }
    if (x->c->rank == x->hang_rank && x->ops_done == x->hang_at) {
        fprintf(stderr, "rank %d: --hang-rank: no longer answering\n", x->c->rank);
        fflush(stderr);
        for (;;) pause();
    }
}

// Sums this rank's count of wrong elements over all ranks and prints one line on rank 0.
static void verdict_bad(ctx_t* x, const char* what, size_t count, int inplace, long long bad) {
    comm_host_allreduce_i64(x->c, &bad, 1, COMM_SUM);
    x->checks++;
    if (bad) x->wrong++;
    if (x->c->rank == 0)
        printf("%-22s count %-9zu %-12s %s\n", what, count, inplace ? "in place" : "out of place",
               bad ? "WRONG" : "ok");
    if (bad && x->c->rank == 0) printf("  %lld wrong elements over all ranks\n", bad);
}

// Compares n elements of got with want (bitwise for exact data; within tol for averages),
// counts the wrong ones over all ranks and prints one line on rank 0.
static void verdict(ctx_t* x, const char* what, size_t count, int inplace, size_t n, double tol) {
    long long bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = x->h_recv[i], w = x->h_want[i];
        if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w)))) bad++;  // NaN counts as wrong
    }
    verdict_bad(x, what, count, inplace, bad);
}

// Rank r's random element i: signed, exponents over 2^-10..2^10, so sums round differently
// in different orders.
static float random_value(int r, size_t i) {
    const float u = rng_uniform(1000 + (uint64_t)r, i) - 0.5f;
    return ldexpf(u, (int)rng_below(2000 + (uint64_t)r, i, 21) - 10);
}

static float op_f32(comm_op_t op, float acc, float y) {
    return op == COMM_MAX ? (y > acc ? y : acc) : op == COMM_MIN ? (y < acc ? y : acc) : acc + y;
}

// The blocking all-reduce for every op, fp32 and fp64, on exact data; then on random floats:
// the same bits on every rank (a hash of the result, min == max over ranks) and, with
// --rank-order, the bits of the reduction over ranks 0, 1, ..., n-1 in that order.
static void check_allreduce_ops(ctx_t* x, size_t count, int inplace) {
    comm_t* c = x->c;
    const int n = c->world, r = c->rank;
    cudaStream_t st = comm_stream(c);
    static const comm_op_t ops[4] = {COMM_SUM, COMM_AVG, COMM_MAX, COMM_MIN};
    static const char* const names32[4] = {"all-reduce sum", "all-reduce avg", "all-reduce max", "all-reduce min"};
    static const char* const names64[4] = {"all-reduce f64 sum", "all-reduce f64 avg", "all-reduce f64 max", "all-reduce f64 min"};
    for (int f64 = 0; f64 <= 1; f64++) {
        for (int o = f64 ? 0 : 1; o < 4; o++) {  // fp32 sum is the first check of check_count
            const comm_op_t op = ops[o];
            double* hs = (double*)x->h_send;
            double* hr = (double*)x->h_recv;
            for (size_t i = 0; i < count; i++) {
                if (f64) hs[i] = value(r, i); else x->h_send[i] = value(r, i);
            }
            to_backend(x, x->d_send, x->h_send, f64 ? 2 * count : count);
            void* out = inplace ? (void*)x->d_send : (void*)x->d_recv;
            step(x);
            comm_allreduce(c, x->d_send, out, count, f64 ? COMM_F64 : COMM_F32, op, st);
            from_backend(x, x->h_recv, out, f64 ? 2 * count : count);
            long long bad = 0;
            for (size_t i = 0; i < count; i++) {
                double w = value(0, i);
                for (int k = 1; k < n; k++) {
                    const double v = value(k, i);
                    w = op == COMM_MAX ? fmax(w, v) : op == COMM_MIN ? fmin(w, v) : w + v;
                }
                if (op == COMM_AVG) w /= n;
                const double g = f64 ? hr[i] : (double)x->h_recv[i];
                // sums, max, min of small integers are exact; an average is one rounding
                const double tol = op == COMM_AVG ? (f64 ? 1e-15 : 4e-7) : 0.0;
                if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w)))) bad++;
            }
            verdict_bad(x, f64 ? names64[o] : names32[o], count, inplace, bad);
        }
    }
    // Random floats, fp32: sum, avg, max, min.
    for (int o = 0; o < 4; o++) {
        const comm_op_t op = ops[o];
        for (size_t i = 0; i < count; i++) x->h_send[i] = random_value(r, i);
        to_backend(x, x->d_send, x->h_send, count);
        float* out = inplace ? x->d_send : x->d_recv;
        step(x);
        comm_allreduce(c, x->d_send, out, count, COMM_F32, op, st);
        from_backend(x, x->h_recv, out, count);
        // FNV-1a of the result's bytes: equal on every rank iff the bits are.
        const uint64_t h = fnv1a(FNV1A_INIT, x->h_recv, count * sizeof(float));
        long long lo = (long long)(h >> 1), hi = lo;
        comm_host_allreduce_i64(c, &lo, 1, COMM_MIN);
        comm_host_allreduce_i64(c, &hi, 1, COMM_MAX);
        long long bad = lo != hi ? (long long)count : 0;  // counted once per rank: all wrong
        if (x->rank_order) {
            const float scale = (float)(1.0 / n);  // comm_scale's factor
            for (size_t i = 0; i < count; i++) {
                float w = random_value(0, i);
                for (int k = 1; k < n; k++) w = op_f32(op, w, random_value(k, i));
                if (op == COMM_AVG) w *= scale;
                if (memcmp(&w, &x->h_recv[i], sizeof w) != 0) bad++;
            }
        }
        static const char* const names[4] = {"all-reduce random sum", "all-reduce random avg",
                                             "all-reduce random max", "all-reduce random min"};
        verdict_bad(x, names[o], count, inplace, bad);
    }
}

// The hierarchical all-reduce (hier.h): sum, avg, max on exact data (the flat all-reduce's answer,
// bit for bit, in any order), the sum of random floats (the same bits on every rank; within
// n·2^-23·sum|x| of the exact sum: any order of n-1 fp32 additions is off by at most
// (n-1)·2^-24·sum|x|, with a factor 2 to spare), and the bytes it handed to each group against
// the formula at the padded size (hier_bytes_formula).
static void check_hier(ctx_t* x, size_t count, int inplace) {
    comm_t* c = x->c;
    const int n = c->world, r = c->rank;
    cudaStream_t st = comm_stream(c);
    if (!x->hier) {
        x->hier = hier_create(c, x->hier_node_size);
        if (r == 0) printf("# hier: %d node%s x %d rank%s\n", x->hier->k, x->hier->k == 1 ? "" : "s",
                           x->hier->l, x->hier->l == 1 ? "" : "s");
    }
    hier_t* h = x->hier;
    static const comm_op_t ops[3] = {COMM_SUM, COMM_AVG, COMM_MAX};
    static const char* const names[3] = {"hier all-reduce sum", "hier all-reduce avg", "hier all-reduce max"};
    for (int o = 0; o < 3; o++) {
        for (size_t i = 0; i < count; i++) x->h_send[i] = value(r, i);
        for (size_t i = 0; i < count; i++) {
            double w = value(0, i);
            for (int k = 1; k < n; k++) w = ops[o] == COMM_MAX ? fmax(w, value(k, i)) : w + value(k, i);
            x->h_want[i] = (float)(ops[o] == COMM_AVG ? w / n : w);
        }
        to_backend(x, x->d_send, x->h_send, count);
        float* out = inplace ? x->d_send : x->d_recv;
        if (!inplace) {  // poison the output: every element must be written
            for (size_t i = 0; i < count; i++) x->h_recv[i] = NAN;
            to_backend(x, x->d_recv, x->h_recv, count);
        }
        hier_bytes_reset(h);
        step(x);
        hier_allreduce(h, x->d_send, out, count, COMM_F32, ops[o], st);
        from_backend(x, x->h_recv, out, count);
        // an average is the node's average averaged over the nodes: two roundings
        verdict(x, names[o], count, inplace, count, ops[o] == COMM_AVG ? 4e-7 : 0.0);
        if (o == 0) {  // the bytes of this one call against the formula
            const size_t l = (size_t)h->l, padded = count ? (count + l - 1) / l * l : 0;
            double f_intra, f_inter;
            hier_bytes_formula((double)(padded * sizeof(float)), h->l, h->k, &f_intra, &f_inter);
            long long bad = fabs(h->bytes.intra_link - f_intra) > 1e-6 * f_intra ||
                            fabs(h->bytes.inter_link - f_inter) > 1e-6 * f_inter;
            if (bad && r == 0)
                printf("  hier bytes: intra %.0f (formula %.0f), inter %.0f (formula %.0f)\n",
                       h->bytes.intra_link, f_intra, h->bytes.inter_link, f_inter);
            verdict_bad(x, "hier bytes = formula", count, inplace, bad);
        }
    }
    // random floats: same bits everywhere, within the summation bound of the exact sum
    for (size_t i = 0; i < count; i++) x->h_send[i] = random_value(r, i);
    to_backend(x, x->d_send, x->h_send, count);
    float* out = inplace ? x->d_send : x->d_recv;
    step(x);
    hier_allreduce(h, x->d_send, out, count, COMM_F32, COMM_SUM, st);
    from_backend(x, x->h_recv, out, count);
    const uint64_t hash = fnv1a(FNV1A_INIT, x->h_recv, count * sizeof(float));
    long long lo = (long long)(hash >> 1), hi = lo;
    comm_host_allreduce_i64(c, &lo, 1, COMM_MIN);
    comm_host_allreduce_i64(c, &hi, 1, COMM_MAX);
    long long bad = lo != hi ? (long long)count : 0;
    for (size_t i = 0; i < count; i++) {
        double w = 0, a = 0;
        for (int k = 0; k < n; k++) {
            w += random_value(k, i);
            a += fabs(random_value(k, i));
        }
        if (!(fabs(x->h_recv[i] - w) <= n * ldexp(a, -23))) bad++;
    }
    verdict_bad(x, "hier all-reduce random", count, inplace, bad);
}

static void check_count(ctx_t* x, size_t count) {
    comm_t* c = x->c;
    const int n = c->world, r = c->rank;
    cudaStream_t st = comm_stream(c);
    for (int inplace = 0; inplace <= 1; inplace++) {
        // ---- all-reduce (sum, blocking), all-reduce (avg, non-blocking), ring (sum, avg)
        for (int variant = 0; variant < 4; variant++) {
            for (size_t i = 0; i < count; i++) x->h_send[i] = value(r, i);
            for (size_t i = 0; i < count; i++) {
                double s = 0;
                for (int k = 0; k < n; k++) s += value(k, i);
                x->h_want[i] = (float)((variant & 1) ? s / n : s);
            }
            to_backend(x, x->d_send, x->h_send, count);
            float* out = inplace ? x->d_send : x->d_recv;
            step(x);
            const char* what = "all-reduce sum";
            if (variant == 0) {
                comm_allreduce(c, x->d_send, out, count, COMM_F32, COMM_SUM, st);
            } else if (variant == 1) {
                what = "iall-reduce avg";
                comm_wait(c, comm_iallreduce(c, x->d_send, out, count, COMM_F32, COMM_AVG, st));
            } else {
                what = variant == 2 ? "ring all-reduce sum" : "ring all-reduce avg";
                ring_allreduce(c, x->d_send, out, count, variant == 2 ? COMM_SUM : COMM_AVG, st);
                comm_stream_sync(c, st, "ring all-reduce");
            }
            from_backend(x, x->h_recv, out, count);
            // Sums of small integers are exact; an average is one rounding of the exact sum
            // (x 1/n, or per-input pre-scaling in NCCL): within a few ulps.
            verdict(x, what, count, inplace, count, (variant & 1) ? 4e-7 : 0.0);
        }
        // ---- blocking all-reduce: every op, fp32 and fp64, exact and random data
        check_allreduce_ops(x, count, inplace);
        // ---- broadcast from the last rank
        {
            const int root = n - 1;
            for (size_t i = 0; i < count; i++) x->h_send[i] = value(r, i);
            for (size_t i = 0; i < count; i++) x->h_want[i] = value(root, i);
            to_backend(x, x->d_send, x->h_send, count);
            float* out = inplace ? x->d_send : x->d_recv;
            if (!inplace) {  // poison the output: every element must be written
                for (size_t i = 0; i < count; i++) x->h_recv[i] = NAN;
                to_backend(x, x->d_recv, x->h_recv, count);
            }
            step(x);
            comm_broadcast(c, x->d_send, out, count, COMM_F32, root, st);
            from_backend(x, x->h_recv, out, count);
            verdict(x, "broadcast", count, inplace, count, 0.0);
        }
        // ---- reduce-scatter: count elements per rank (world·count in)
        {
            const size_t total = count * (size_t)n;
            for (size_t i = 0; i < total; i++) x->h_send[i] = value(r, i);
            for (size_t i = 0; i < count; i++) {
                double s = 0;
                for (int k = 0; k < n; k++) s += value(k, (size_t)r * count + i);
                x->h_want[i] = (float)s;
            }
            to_backend(x, x->d_send, x->h_send, total);
            float* out = inplace ? x->d_send + (size_t)r * count : x->d_recv;
            step(x);
            comm_reduce_scatter(c, x->d_send, out, count, COMM_F32, COMM_SUM, st);
            from_backend(x, x->h_recv, out, count);
            verdict(x, "reduce-scatter", count, inplace, count, 0.0);
        }
        // ---- all-gather (non-blocking): count elements from each rank
        {
            const size_t total = count * (size_t)n;
            for (size_t i = 0; i < count; i++) x->h_send[i] = value(r, i);
            for (int k = 0; k < n; k++)
                for (size_t i = 0; i < count; i++) x->h_want[(size_t)k * count + i] = value(k, i);
            for (size_t i = 0; i < total; i++) x->h_recv[i] = NAN;
            to_backend(x, x->d_recv, x->h_recv, total);
            const float* in = x->d_send;
            if (inplace) {
                in = x->d_recv + (size_t)r * count;
                to_backend(x, x->d_recv + (size_t)r * count, x->h_send, count);
            } else {
                to_backend(x, x->d_send, x->h_send, count);
            }
            step(x);
            comm_wait(c, comm_iallgather(c, in, x->d_recv, count, COMM_F32, st));
            from_backend(x, x->h_recv, x->d_recv, total);
            verdict(x, "iall-gather", count, inplace, total, 0.0);
        }
        // ---- send/receive around the ring (each rank gets its left neighbour's data)
        if (!inplace) {
            const int left = (r - 1 + n) % n, right = (r + 1) % n;
            for (size_t i = 0; i < count; i++) x->h_send[i] = value(r, i);
            for (size_t i = 0; i < count; i++) x->h_want[i] = value(left, i);
            to_backend(x, x->d_send, x->h_send, count);
            step(x);
            comm_sendrecv(c, x->d_send, count, right, x->d_recv, count, left, COMM_F32, st);
            from_backend(x, x->h_recv, x->d_recv, count);
            verdict(x, "send/recv", count, 0, count, 0.0);
        }
        // ---- the hierarchical all-reduce (last: the operations above keep their numbers)
        check_hier(x, count, inplace);
        // ---- the alternate ring (MPI, host buffers), sum and avg; outside step()'s count, so
        // that the fault options' operation numbers stay those of the operations above
        for (int avg = 0; c->backend == COMM_MPI && avg <= 1; avg++) {
            for (size_t i = 0; i < count; i++) x->h_send[i] = value(r, i);
            for (size_t i = 0; i < count; i++) {
                double w = 0;
                for (int k = 0; k < n; k++) w += value(k, i);
                x->h_want[i] = (float)(avg ? w / n : w);
            }
            to_backend(x, x->d_send, x->h_send, count);
            float* out = inplace ? x->d_send : x->d_recv;
            alt_ring_allreduce_host(c, x->d_send, out, count, avg ? COMM_AVG : COMM_SUM);
            from_backend(x, x->h_recv, out, count);
            verdict(x, avg ? "alternate ring all-reduce avg" : "alternate ring all-reduce sum", count, inplace, count,
                    avg ? 4e-7 : 0.0);
        }
        step(x);
        comm_barrier(c);
    }
}

#define COUNT_MAX (INT64_C(64) << 20)  // --counts: the largest count, in elements

int main(int argc, char** argv) {
    const char* backend_s = "mpi";
    const char* counts_s = "0,1,3,7,1000,65537,1000003";
    int hier_node_size = 0;
    int die_rank = -1, hang_rank = -1, stop_rank = -1, hang_at = 3, refuse_rank = -1, rank_order = 0;
    double stop_delay = 0;
    double timeout_s = 0;
    const char* tag = "";
    cli_opt_t opts[] = {
        {"backend", CLI_CHOICE, &backend_s, "mpi", "communicator backend", COMM_BACKEND_CHOICES},
        {"counts", CLI_STR, &counts_s, "0,1,3,7,1000,65537,1000003", "element counts to check (comma list, K/M suffixes)", NULL},
        {"die-rank", CLI_INT, &die_rank, "-1", "this rank exits in the middle of the run (failure test)", NULL},
        {"hang-rank", CLI_INT, &hang_rank, "-1", "this rank stops answering in the middle of the run (failure test)", NULL},
        {"stop-rank", CLI_INT, &stop_rank, "-1", "this rank is stopped (SIGSTOP) in the middle of the run (failure test)", NULL},
        {"stop-delay", CLI_DOUBLE, &stop_delay, "0", "seconds after it starts the operation that --stop-rank stops (0: before it)", NULL},
        {"hang-at", CLI_INT, &hang_at, "3", "the operation (1, 2, ...) before which --die-rank, --hang-rank, --stop-rank act; 3: the ring's first send/receive", NULL},
        {"refuse-rank", CLI_INT, &refuse_rank, "-1", "this rank alone refuses its input after start-up (test of the one line from rank 0)", NULL},
        {"rank-order", CLI_INT, &rank_order, "0", "1: the blocking all-reduce must reduce in rank order, bit for bit (MPI backend, shared-memory path)", NULL},
        {"hier-node-size", CLI_INT, &hier_node_size, "0", "ranks per node of the hierarchical all-reduce (0: the communicator's nodes, real or emulated)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
        {"tag", CLI_STR, &tag, "", "ignored: lets a test find its processes", NULL},
    };
    comm_cli_parse(argc, argv,
                   "Checks every collective of the communicator and the ring all-reduce on exact "
                   "data (run under mpirun: scripts/mpirun.sh N prog).",
                   opts, CLI_COUNT(opts));
    int64_t counts[32];
    int ncounts = parse_size_list(counts_s, counts, 32);
    if (ncounts < 0) comm_bad_input("--counts: '%s' is not a comma list of sizes (e.g. 0,1,7,1M)", counts_s);
    // A bound that does not depend on the machine, checked before anything is allocated: the
    // buffers hold world x count doubles (five of them), so 64M elements is already GBs a rank.
    for (int i = 0; i < ncounts; i++)
        if (counts[i] > COUNT_MAX)
            comm_bad_input("--counts: %lld is above the largest count checked, 64M elements", (long long)counts[i]);
    if (rank_order != 0 && rank_order != 1) comm_bad_input("--rank-order: %d must be 0 or 1", rank_order);
    if (die_rank < -1) comm_bad_input("--die-rank: %d is not a rank (-1: none)", die_rank);
    if (hang_rank < -1) comm_bad_input("--hang-rank: %d is not a rank (-1: none)", hang_rank);
    if (stop_rank < -1) comm_bad_input("--stop-rank: %d is not a rank (-1: none)", stop_rank);
    if (hang_at < 1) comm_bad_input("--hang-at: %d must be 1 or more", hang_at);
    if (!(stop_delay >= 0 && stop_delay <= 60)) comm_bad_input("--stop-delay: %g must be 0 to 60 seconds", stop_delay);
    comm_backend_t backend;
    comm_backend_parse(backend_s, &backend);
    comm_t* c = comm_init(backend, comm_timeout_flag(timeout_s));

    // Every rank knows the world now and gives the same verdict: one line from rank 0, exit 2.
    if (die_rank >= c->world)
        comm_refuse(c, "--die-rank: %d is out of range for %d ranks (0..%d, or -1: none)", die_rank, c->world, c->world - 1);
    if (hang_rank >= c->world)
        comm_refuse(c, "--hang-rank: %d is out of range for %d ranks (0..%d, or -1: none)", hang_rank, c->world, c->world - 1);
    if (stop_rank >= c->world)
        comm_refuse(c, "--stop-rank: %d is out of range for %d ranks (0..%d, or -1: none)", stop_rank, c->world, c->world - 1);
    // A fault only one rank sees (a file only it read, say): its reason reaches rank 0's line.
    comm_check_input(c, c->rank != refuse_rank, "--refuse-rank %d: rank %d refused its input, alone", refuse_rank, c->rank);
    if (hier_node_size < 0 || hier_node_size > c->world)
        comm_refuse(c, "--hier-node-size: %d is out of range for %d ranks (1..%d, or 0: the communicator's nodes)",
                    hier_node_size, c->world, c->world);
    if (hier_node_size > 0) {  // blocks of that many ranks: refused now if unequal, in one line
        int node_of[1024], l, k;
        char why[256];
        if (c->world > 1024) comm_refuse(c, "--hier-node-size: at most 1024 ranks (this job has %d)", c->world);
        for (int q = 0; q < c->world; q++) node_of[q] = q / hier_node_size;
        if (hier_layout(c->world, node_of, &l, &k, why, sizeof why) != 0) comm_refuse(c, "--hier-node-size %d: %s", hier_node_size, why);
    }
    ctx_t x = {.c = c, .die_rank = die_rank, .hang_rank = hang_rank, .stop_rank = stop_rank,
               .hang_at = hang_at, .stop_delay = stop_delay, .rank_order = rank_order,
               .hier_node_size = hier_node_size};
    for (int i = 0; i < ncounts; i++)
        if ((size_t)counts[i] > x.cap) x.cap = (size_t)counts[i];
    x.cap = x.cap * (size_t)c->world + 1;  // reduce-scatter input, all-gather output
    // Buffers of cap floats, or of cap doubles for the fp64 all-reduce (count <= cap).
    x.d_send = comm_alloc(c, x.cap * sizeof(double), MEM_OTHER);
    x.d_recv = comm_alloc(c, x.cap * sizeof(double), MEM_OTHER);
    x.h_send = mem_alloc(DEV_CPU, x.cap * sizeof(double), MEM_OTHER);
    x.h_recv = mem_alloc(DEV_CPU, x.cap * sizeof(double), MEM_OTHER);
    x.h_want = mem_alloc(DEV_CPU, x.cap * sizeof(float), MEM_OTHER);
    if (c->rank == 0)
        printf("# collectives_check: backend %s, %d rank%s\n", comm_backend_name(backend), c->world,
               c->world == 1 ? "" : "s");
    for (int i = 0; i < ncounts; i++) check_count(&x, (size_t)counts[i]);
    if (c->rank == 0) printf("%lld checks, %lld wrong\n", x.checks, x.wrong);
    hier_destroy(x.hier);
    const int status = x.wrong ? 1 : 0;
    mem_free(x.d_send); mem_free(x.d_recv);
    mem_free(x.h_send); mem_free(x.h_recv); mem_free(x.h_want);
    comm_destroy(c, 1);
    return status;
}
