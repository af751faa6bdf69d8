// allreduce_bench: collectives timed the way nccl-tests' all_reduce_perf does it.
//
//   scripts/mpirun.sh 2 build/05_collectives/allreduce_bench                 # GPUs: NCCL rows
//   scripts/mpirun.sh 4 build/05_collectives/allreduce_bench --backends mpi  # CPU: MPI rows
//
// One driver, two small tables: the operations (what a size means, the bus-bandwidth factor)
// and the backends (how to run an operation). For each backend × operation × size: warm-up,
// then `iters` timed runs (CUDA events on the GPU; a host clock after a barrier on the CPU);
// per rank the median, then the slowest rank; algbw = S / t and busbw = algbw · factor, out of
// place and in place; then an untimed check on fresh data whose sum is exact in any order
// (small integers), counted in #wrong. Exits 1 if any element is wrong.
// S is the size of the larger buffer (nccl-tests' convention): an all-reduce of S bytes, a
// reduce-scatter from S to S/n, an all-gather from S/n to S.
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "05_collectives/hier.h"
#include "05_collectives/ring.h"
#include "common/check.h"
#include "common/check_mpi.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/stats.h"
#include "common/table.h"
#include "common/timer.h"
#if HAVE_NCCL
#include <nccl.h>
#include "common/check_nccl.h"
#endif

// ------------------------------------------------------------------ the operations
typedef enum { OP_ALLREDUCE, OP_REDUCESCATTER, OP_ALLGATHER, OP_BROADCAST, OP_COUNT } op_t;
static const char* const OP_NAMES[OP_COUNT] = {"allreduce", "reducescatter", "allgather", "broadcast"};
#define OP_CHOICES "allreduce|reducescatter|allgather|broadcast|all"

// busbw = algbw × factor: the bytes each rank's busiest link carries, over S (README.md).
static double bus_factor(op_t op, int n) {
    switch (op) {
    case OP_ALLREDUCE: return 2.0 * (n - 1) / n;
    case OP_REDUCESCATTER: case OP_ALLGATHER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

// Elements per rank of the call for a size of S bytes (the smaller buffer for RS/AG).
static size_t op_count(op_t op, size_t bytes, int n) {
    size_t elems = bytes / sizeof(float);
    return (op == OP_REDUCESCATTER || op == OP_ALLGATHER) ? elems / (size_t)n : elems;
}

// ------------------------------------------------------------------ the backends
typedef struct bench bench_t;
typedef void (*run_fn)(bench_t* b, op_t op, const float* send, float* recv, size_t count);
typedef struct {
    const char* name;
    comm_backend_t backend;
    unsigned ops;  // bit mask of op_t it implements
    run_fn run;
    const char* what;
} backend_entry_t;

struct bench {
    comm_t* c;  // the communicator of the backend being measured
    cudaStream_t stream;
    size_t ring_chunk;  // bytes per pipelined chunk of the GPU ring
    hier_t* hier;       // the hierarchical all-reduce's groups (hier rows), made once
};

// The communicator's non-blocking calls, enqueued back to back as a training loop issues
// them (the request is let go: the stream orders the work, comm_stream_sync waits for it).
static void run_library(bench_t* b, op_t op, const float* s, float* r, size_t count) {
    comm_req_t* q = NULL;
    switch (op) {
    case OP_ALLREDUCE: q = comm_iallreduce(b->c, s, r, count, COMM_F32, COMM_SUM, b->stream); break;
    case OP_REDUCESCATTER: q = comm_ireduce_scatter(b->c, s, r, count, COMM_F32, COMM_SUM, b->stream); break;
    case OP_ALLGATHER: q = comm_iallgather(b->c, s, r, count, COMM_F32, b->stream); break;
    case OP_BROADCAST: q = comm_ibroadcast(b->c, s, r, count, COMM_F32, 0, b->stream); break;
    default: break;
    }
    comm_detach(b->c, q);
}

// The blocking calls: what the "mpi" rows time. On MPI the all-reduce is the communicator's
// shared-memory all-reduce where every rank is on one node (common/comm_shm.c; COMM_SHM=0:
// MPI's), the other operations MPI's tuned blocking collectives (faster than the non-blocking
// ones).
static void run_library_blocking(bench_t* b, op_t op, const float* s, float* r, size_t count) {
    switch (op) {
    case OP_ALLREDUCE: comm_allreduce(b->c, s, r, count, COMM_F32, COMM_SUM, b->stream); break;
    case OP_REDUCESCATTER: comm_reduce_scatter(b->c, s, r, count, COMM_F32, COMM_SUM, b->stream); break;
    case OP_ALLGATHER: comm_allgather(b->c, s, r, count, COMM_F32, b->stream); break;
    case OP_BROADCAST: comm_broadcast(b->c, s, r, count, COMM_F32, 0, b->stream); break;
    default: break;
    }
}

// NCCL called directly, no communicator layer in between: the GPU rows must match it.
static void run_nccl_direct(bench_t* b, op_t op, const float* s, float* r, size_t count) {
#if HAVE_NCCL
    ncclComm_t nc = (ncclComm_t)comm_nccl_handle(b->c);
    // The communicator is non-blocking: comm_nccl_settle waits for the launch (the first call
    // between peers connects them) under the deadline, as the communicator's own calls do.
    switch (op) {
    case OP_ALLREDUCE: comm_nccl_settle(b->c, ncclAllReduce(s, r, count, ncclFloat32, ncclSum, nc, b->stream), "nccl-direct all-reduce"); break;
    case OP_REDUCESCATTER: comm_nccl_settle(b->c, ncclReduceScatter(s, r, count, ncclFloat32, ncclSum, nc, b->stream), "nccl-direct reduce-scatter"); break;
    case OP_ALLGATHER: comm_nccl_settle(b->c, ncclAllGather(s, r, count, ncclFloat32, nc, b->stream), "nccl-direct all-gather"); break;
    case OP_BROADCAST: comm_nccl_settle(b->c, ncclBroadcast(s, r, count, ncclFloat32, 0, nc, b->stream), "nccl-direct broadcast"); break;
    default: break;
    }
#else
    (void)b; (void)op; (void)s; (void)r; (void)count;
#endif
}

// MPI's own MPI_Allreduce on MPI_COMM_WORLD, no communicator in between: the "mpi-lib" rows,
// to compare the shared-memory path with (on 3+ ranks its results may differ in the last bits
// from rank to rank: see comm.c's mpi_allreduce).
static void run_mpi_lib(bench_t* b, op_t op, const float* s, float* r, size_t count) {
    (void)op;
    if (count > (size_t)0x7fffffff) DIE("mpi-lib: %zu elements do not fit MPI's int count", count);
    comm_watchdog_arm(b->c, "MPI_Allreduce (mpi-lib)", b->c->timeout_s);
    MPI_CHECK(MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    comm_watchdog_disarm(b->c);
}

static void run_ring(bench_t* b, op_t op, const float* s, float* r, size_t count) {
    (void)op;
    if (b->c->backend == COMM_NCCL) ring_allreduce_gpu(b->c, s, r, count, COMM_SUM, b->stream, b->ring_chunk);
    else ring_allreduce_host(b->c, s, r, count, COMM_SUM);
}

static void run_alt_ring(bench_t* b, op_t op, const float* s, float* r, size_t count) {
    (void)op;
    alt_ring_allreduce_host(b->c, s, r, count, COMM_SUM);
}

// The hierarchical all-reduce (hier.h) on the communicator's nodes (real, or emulated:
// scripts/mpirun.sh --emulate-nodes K).
static void run_hier(bench_t* b, op_t op, const float* s, float* r, size_t count) {
    (void)op;
    hier_allreduce(b->hier, s, r, count, COMM_F32, COMM_SUM, b->stream);
}

#define ALL_OPS ((1u << OP_COUNT) - 1)
static const backend_entry_t BACKENDS[] = {
    {"mpi", COMM_MPI, ALL_OPS, run_library_blocking, "the communicator on host memory (all-reduce: shared memory on one node)"},
    {"mpi-lib", COMM_MPI, 1u << OP_ALLREDUCE, run_mpi_lib, "MPI_Allreduce called directly (the MPI library's own)"},
    {"ring-mpi", COMM_MPI, 1u << OP_ALLREDUCE, run_ring, "the hand-written ring over MPI send/recv"},
    {"alt-ring-mpi", COMM_MPI, 1u << OP_ALLREDUCE, run_alt_ring, "the 2026 handout's alternate ring: whole inputs round the ring, (n-1)S a rank"},
    {"hier-mpi", COMM_MPI, 1u << OP_ALLREDUCE, run_hier, "hierarchical: reduce-scatter in the node, all-reduce across nodes, all-gather (MPI)"},
    {"nccl", COMM_NCCL, ALL_OPS, run_library, "NCCL through the communicator"},
    {"nccl-direct", COMM_NCCL, ALL_OPS, run_nccl_direct, "NCCL called directly"},
    {"ring-nccl", COMM_NCCL, 1u << OP_ALLREDUCE, run_ring, "the hand-written ring over NCCL send/recv + an add kernel"},
    {"hier-nccl", COMM_NCCL, 1u << OP_ALLREDUCE, run_hier, "hierarchical: reduce-scatter in the node, all-reduce across nodes, all-gather (NCCL)"},
};
#define N_BACKENDS ((int)(sizeof BACKENDS / sizeof BACKENDS[0]))

// ------------------------------------------------------------------ data
// Rank r's element i (seed: one pattern for timing, another for the check).
static float value(int seed, int r, size_t i) {
    return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)seed * 5) % 17) - 8);
}

typedef struct {
    float *send, *recv;     // backend memory, S bytes each
    float *h_in, *h_out;    // host staging (GPU backends)
    size_t cap;             // elements
} bufs_t;

// Host data into the backend's buffer. On the GPU the copy is ordered on the communicator's
// stream and waited for: a plain cudaMemcpy runs on the legacy default stream, which a
// non-blocking stream does not wait for, and from pageable memory it may return before the
// data has landed — the collective could then read stale data.
static void to_backend(comm_t* c, float* dst, const float* src, size_t n) {
    if (c->backend == COMM_NCCL) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, comm_stream(c)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(c)));
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

static void fill(comm_t* c, bufs_t* bf, float* dst, size_t n, int seed, size_t offset) {
    for (size_t i = 0; i < n; i++) bf->h_in[i] = value(seed, c->rank, offset + i);
    to_backend(c, dst, bf->h_in, n);
}

// The untimed check: fresh data, one call, every element compared with the exact answer.
static long long check_once(bench_t* b, const backend_entry_t* be, op_t op, size_t count, bufs_t* bf,
                            int inplace) {
    comm_t* c = b->c;
    const int n = c->world, r = c->rank, seed = 3;
    const size_t out_n = (op == OP_ALLGATHER) ? count * (size_t)n : count;
    const size_t in_n = (op == OP_REDUCESCATTER) ? count * (size_t)n : count;
    float* in = bf->send;
    float* out = bf->recv;
    // NaN-poisoned output: an element nobody wrote counts as wrong.
    for (size_t i = 0; i < out_n; i++) bf->h_in[i] = NAN;
    to_backend(c, out, bf->h_in, out_n);
    if (inplace) {
        if (op == OP_REDUCESCATTER) { in = out; out = in + (size_t)r * count; }
        else if (op == OP_ALLGATHER) { in = out + (size_t)r * count; }
        else { in = out; }
    }
    fill(c, bf, in, in_n, seed, 0);
    be->run(b, op, in, out, count);
    comm_stream_sync(c, b->stream, "the check");
    const float* got = out;
    if (c->backend == COMM_NCCL) {
        CUDA_CHECK(cudaMemcpyAsync(bf->h_out, out, out_n * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
        CUDA_CHECK(cudaStreamSynchronize(b->stream));
        got = bf->h_out;
    }
    long long wrong = 0;
    for (size_t i = 0; i < out_n; i++) {
        float want = 0;
        switch (op) {
        case OP_ALLREDUCE: for (int k = 0; k < n; k++) want += value(seed, k, i); break;
        case OP_REDUCESCATTER: for (int k = 0; k < n; k++) want += value(seed, k, (size_t)r * count + i); break;
        case OP_ALLGATHER: want = value(seed, (int)(i / count), i % count); break;
        case OP_BROADCAST: want = value(seed, 0, i); break;
        default: break;
        }
        if (!(got[i] == want)) wrong++;
    }
    comm_host_allreduce_i64(c, &wrong, 1, COMM_SUM);
    return wrong;
}

// Median time in microseconds of `iters` calls after `warmup`, slowest rank.
static double time_op(bench_t* b, const backend_entry_t* be, op_t op, size_t count, bufs_t* bf,
                      int inplace, int warmup, int iters) {
    comm_t* c = b->c;
    float* in = bf->send;
    float* out = bf->recv;
    if (inplace) {
        if (op == OP_REDUCESCATTER) { in = out; out = in + (size_t)c->rank * count; }
        else if (op == OP_ALLGATHER) { in = out + (size_t)c->rank * count; }
        else { in = out; }
    }
    double* us = malloc((size_t)iters * sizeof(double));
    if (!us) DIE("out of host memory");
    if (c->backend == COMM_NCCL) {
        cudaEvent_t* ev = malloc(((size_t)iters + 1) * sizeof(cudaEvent_t));
        if (!ev) DIE("out of host memory");
        for (int i = 0; i <= iters; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
        for (int i = 0; i < warmup; i++) be->run(b, op, in, out, count);
        comm_stream_sync(c, b->stream, "the warm-up");
        comm_barrier(c);
        // Back to back, as a training loop would issue them; each call between two events.
        CUDA_CHECK(cudaEventRecord(ev[0], b->stream));
        for (int i = 0; i < iters; i++) {
            be->run(b, op, in, out, count);
            CUDA_CHECK(cudaEventRecord(ev[i + 1], b->stream));
        }
        comm_stream_sync(c, b->stream, "the timed runs");
        for (int i = 0; i < iters; i++) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
            us[i] = 1000.0 * ms;
        }
        for (int i = 0; i <= iters; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
        free(ev);
    } else {
        for (int i = 0; i < warmup; i++) be->run(b, op, in, out, count);
        for (int i = 0; i < iters; i++) {
            comm_barrier(c);  // every rank starts together: the time is the operation's own
            double t0 = time_now_s();
            be->run(b, op, in, out, count);
            us[i] = 1e6 * (time_now_s() - t0);
        }
    }
    double med = stats_compute(us, iters).median;
    free(us);
    comm_host_allreduce_f64(c, &med, 1, COMM_MAX);
    return med;
}

// ------------------------------------------------------------------ main
static int is_course_size(size_t bytes) {
    return bytes == (1u << 20) || bytes == (10u << 20) || bytes == (100u << 20) || bytes == (1u << 30);
}

static const backend_entry_t* find_backend(const char* name) {
    for (int i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i].name, name) == 0) return &BACKENDS[i];
    return NULL;
}

static void header(comm_t* any, int nranks) {
    char nccl_v[64], cpu[256] = "unknown";
    version_nccl(nccl_v, sizeof nccl_v);
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char* p = strchr(line, ':');
                if (p) snprintf(cpu, sizeof cpu, "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    const char* nvls = getenv("NCCL_NVLS_ENABLE");
    // Every rank's GPU, in rank order (rank k broadcasts its name).
    char names[1024] = "";
    for (int k = 0; k < nranks; k++) {
        char nm[256] = "none";
        if (any->rank == k && any->device >= 0) {
            gpu_info_t gi;
            if (gpu_info(any->device, &gi) == 0) memcpy(nm, gi.name, sizeof nm);
        }
        comm_host_bcast(any, nm, sizeof nm, k);
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%d: %s", k ? ", " : "", k, nm);
    }
    if (any->rank == 0) {
        printf("# allreduce_bench: %d ranks, fp32\n", nranks);
        printf("# NCCL %s, NCCL_NVLS_ENABLE=%s\n", nccl_v, nvls ? nvls : "(unset)");
        printf("# GPUs by rank: %s\n", names);
        printf("# CPU: %s\n", cpu);
        printf("# time: median of the timed runs on each rank, then the slowest rank; algbw = S/t;"
               " busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (reducescatter, allgather), 1 (broadcast)\n");
        printf("# * marks the course's sizes (1 MiB, 10 MiB, 100 MiB, 1 GiB)\n\n");
    }
}

int main(int argc, char** argv) {
    const char* backends_s = "auto";
    const char* op_s = "allreduce";
    int64_t minb = 1024, maxb = INT64_C(1) << 30;
    int factor = 2, iters = 20, warmup = 5, check = 1;
    const char* sizes_s = "";
    const char* out_dir = "results/05_collectives";
    const char* tag = "";
    double timeout_s = 0;
    int64_t ring_chunk = (int64_t)RING_CHUNK_BYTES_DEFAULT;
    cli_opt_t opts[] = {
        {"ring-chunk", CLI_SIZE, &ring_chunk, "512M", "ring-nccl: bytes per pipelined chunk (a transfer and an add kernel each)", NULL},
        {"backends", CLI_STR, &backends_s, "auto", "comma list of mpi, mpi-lib, ring-mpi, alt-ring-mpi, hier-mpi, nccl, nccl-direct, ring-nccl, hier-nccl; auto: the GPU ones with a GPU per rank, else the MPI ones", NULL},
        {"op", CLI_CHOICE, &op_s, "allreduce", "operation", OP_CHOICES},
        {"minbytes", CLI_SIZE, &minb, "1K", "smallest size S (bytes; K/M/G)", NULL},
        {"maxbytes", CLI_SIZE, &maxb, "1G", "largest size S", NULL},
        {"stepfactor", CLI_INT, &factor, "2", "multiply the size by this between rows (10M and 100M are added when in range)", NULL},
        {"sizes", CLI_STR, &sizes_s, "", "explicit comma list of sizes instead (e.g. 1M,10M,100M,1G)", NULL},
        {"iters", CLI_INT, &iters, "20", "timed runs per row (the median is reported)", NULL},
        {"warmup", CLI_INT, &warmup, "5", "untimed runs first", NULL},
        {"check", CLI_INT, &check, "1", "1: check every row on exact data (#wrong); 0: skip", NULL},
        {"out", CLI_STR, &out_dir, "results/05_collectives", "directory for the CSV and JSON", NULL},
        {"tag", CLI_STR, &tag, "", "file name of the results (default: allreduce_<backends>_np<N>)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv,
                   "Times the communicator's collectives (and the hand-written ring) per size, as "
                   "nccl-tests does. Run under mpirun: scripts/mpirun.sh N prog.",
                   opts, CLI_COUNT(opts));
#define BAD(...) comm_bad_input(__VA_ARGS__)
    if (iters < 1 || iters > 100000) BAD("--iters: %d is out of range (1..100000)", iters);
    if (warmup < 0 || warmup > 10000) BAD("--warmup: %d is out of range (0..10000)", warmup);
    if (factor < 2) BAD("--stepfactor: %d must be at least 2", factor);
    if (ring_chunk < 4) BAD("--ring-chunk: %lld is below one element (4 bytes)", (long long)ring_chunk);
    if (check != 0 && check != 1) BAD("--check: %d must be 0 or 1", check);
    if (minb < 4) BAD("--minbytes: %lld is below one element (4 bytes)", (long long)minb);
    if (maxb < minb) BAD("--maxbytes: %lld is below --minbytes %lld", (long long)maxb, (long long)minb);
    if (maxb > (INT64_C(8) << 30)) BAD("--maxbytes: %lld is above 8G", (long long)maxb);
    {  // where the results go, checked before any work (rank 0 writes them at the end)
        char why[1024];
        if (dir_check_writable(out_dir, why, sizeof why) != 0) BAD("--out: cannot write into %s: %s", out_dir, why);
        if (*tag && file_name_check(tag, why, sizeof why) != 0) BAD("--tag: %s (a file name inside --out)", why);
    }

    // Sizes: min, min·f, ... up to max, plus the course's 10M and 100M; or the explicit list.
    int64_t sizes[128];
    int nsizes = 0;
    if (*sizes_s) {
        nsizes = parse_size_list(sizes_s, sizes, 128);
        if (nsizes < 0) BAD("--sizes: '%s' is not a comma list of sizes (e.g. 1M,10M,1G)", sizes_s);
        for (int i = 0; i < nsizes; i++)
            if (sizes[i] < 4 || sizes[i] > (INT64_C(8) << 30)) BAD("--sizes: %lld is out of range (4 bytes..8G)", (long long)sizes[i]);
    } else {
        for (int64_t s = minb; s <= maxb && nsizes < 120; s *= factor) sizes[nsizes++] = s;
        const int64_t extra[2] = {INT64_C(10) << 20, INT64_C(100) << 20};
        for (int e = 0; e < 2; e++) {
            if (extra[e] < minb || extra[e] > maxb) continue;
            int have = 0;
            for (int i = 0; i < nsizes; i++) have |= sizes[i] == extra[e];
            if (!have) sizes[nsizes++] = extra[e];
        }
        for (int i = 1; i < nsizes; i++)  // insertion sort: a handful of entries
            for (int j = i; j > 0 && sizes[j] < sizes[j - 1]; j--) {
                int64_t t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t;
            }
    }
    int64_t max_size = 0;
    for (int i = 0; i < nsizes; i++) if (sizes[i] > max_size) max_size = sizes[i];

    // Backends.
    const backend_entry_t* chosen[N_BACKENDS];
    int nchosen = 0;
    if (strcmp(backends_s, "auto") == 0) {
        const char* const gpu_set[] = {"nccl", "nccl-direct", "ring-nccl", "hier-nccl"};
        const char* const cpu_set[] = {"mpi", "mpi-lib", "ring-mpi", "hier-mpi"};
        comm_backend_t kind;
        comm_backend_choose("auto", &kind);
        const int use_gpu = kind == COMM_NCCL;
        for (int i = 0; i < 4; i++) chosen[nchosen++] = find_backend(use_gpu ? gpu_set[i] : cpu_set[i]);
    } else {
        char buf[256], why[320];
        if (list_check_items("backends", backends_s, why, sizeof why) != 0) BAD("%s", why);
        if (strlen(backends_s) >= sizeof buf) BAD("--backends: longer than %zu characters", sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", backends_s);
        for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            const backend_entry_t* be = find_backend(tok);
            if (!be) BAD("--backends: unknown backend '%s' (allowed: mpi, mpi-lib, ring-mpi, alt-ring-mpi, hier-mpi, nccl, nccl-direct, ring-nccl, hier-nccl, auto)", tok);
            if (nchosen < N_BACKENDS) chosen[nchosen++] = be;
        }
    }
    int want_op[OP_COUNT] = {0};
    for (int o = 0; o < OP_COUNT; o++) want_op[o] = strcmp(op_s, "all") == 0 || strcmp(op_s, OP_NAMES[o]) == 0;

    // One communicator per backend kind, made once.
    comm_t* comms[2] = {NULL, NULL};
    for (int i = 0; i < nchosen; i++) {
        comm_backend_t k = chosen[i]->backend;
        if (!comms[k]) comms[k] = comm_init(k, comm_timeout_flag(timeout_s));
    }
    comm_t* any = comms[COMM_NCCL] ? comms[COMM_NCCL] : comms[COMM_MPI];
    const int nranks = any->world;
    header(any, nranks);

    const char* cols[] = {"op", "backend", "size", "count", "course", "oop_us", "oop_algbw_GBs",
                          "oop_busbw_GBs", "ip_us", "ip_algbw_GBs", "ip_busbw_GBs", "wrong", "ranks",
                          "nodes", "intra_B", "intra_formula_B", "inter_B", "inter_formula_B", "flat_ring_B"};
    table_t* t = table_new("collectives", 19, cols);
    long long total_wrong = 0;
    for (int k = 0; k < 2; k++) {
        if (!comms[k]) continue;
        comm_t* c = comms[k];
        bufs_t bf = {0};
        bf.cap = (size_t)max_size / sizeof(float) + 1;
        bf.send = comm_alloc(c, bf.cap * sizeof(float), MEM_OTHER);
        bf.recv = comm_alloc(c, bf.cap * sizeof(float), MEM_OTHER);
        bf.h_in = mem_alloc(DEV_CPU, bf.cap * sizeof(float), MEM_OTHER);
        bf.h_out = c->backend == COMM_NCCL ? mem_alloc(DEV_CPU, bf.cap * sizeof(float), MEM_OTHER) : NULL;
        bench_t b = {.c = c, .stream = comm_stream(c), .ring_chunk = (size_t)ring_chunk};
        for (int i = 0; i < nchosen; i++)  // the groups, once, where a hier row is asked for
            if (chosen[i]->backend == (comm_backend_t)k && chosen[i]->run == run_hier && !b.hier) b.hier = hier_create(c, 0);
        for (int i = 0; i < nchosen; i++) {
            const backend_entry_t* be = chosen[i];
            if (be->backend != (comm_backend_t)k) continue;
            for (int o = 0; o < OP_COUNT; o++) {
                if (!want_op[o] || !(be->ops & (1u << o))) continue;
                for (int si = 0; si < nsizes; si++) {
                    const size_t bytes = (size_t)sizes[si];
                    const size_t count = op_count((op_t)o, bytes, nranks);
                    if (count == 0) continue;  // a size below one element per rank
                    fill(c, &bf, bf.send, bf.cap > bytes / 4 ? bytes / 4 : bf.cap, 1, 0);
                    fill(c, &bf, bf.recv, bf.cap > bytes / 4 ? bytes / 4 : bf.cap, 2, 0);
                    if (b.hier) hier_bytes_reset(b.hier);
                    double t_oop = time_op(&b, be, (op_t)o, count, &bf, 0, warmup, iters);
                    double t_ip = time_op(&b, be, (op_t)o, count, &bf, 1, warmup, iters);
                    long long wrong = 0;
                    if (check) wrong = check_once(&b, be, (op_t)o, count, &bf, 0) + check_once(&b, be, (op_t)o, count, &bf, 1);
                    total_wrong += wrong;
                    // S counts whole elements: the bytes actually moved.
                    const size_t full = (o == OP_REDUCESCATTER || o == OP_ALLGATHER) ? count * (size_t)nranks : count;
                    const double S = (double)full * sizeof(float);
                    const double f = bus_factor((op_t)o, nranks);
                    table_row(t);
                    table_cell(t, "%s", OP_NAMES[o]);
                    table_cell(t, "%s", be->name);
                    table_cell(t, "%zu", (size_t)S);
                    table_cell(t, "%zu", count);
                    table_cell(t, "%s", is_course_size(bytes) ? "*" : "");
                    table_cell(t, "%.1f", t_oop);
                    table_cell(t, "%.2f", S / t_oop / 1e3);
                    table_cell(t, "%.2f", S / t_oop / 1e3 * f);
                    table_cell(t, "%.1f", t_ip);
                    table_cell(t, "%.2f", S / t_ip / 1e3);
                    table_cell(t, "%.2f", S / t_ip / 1e3 * f);
                    if (check) table_cell(t, "%lld", wrong);
                    else table_cell(t, "n/a");
                    table_cell(t, "%d", nranks);
                    // Bytes a rank sends per call on each link: counted (hier rows: the sizes
                    // handed to the groups' collectives, by the ring model) and the formula.
                    const int hk = b.hier ? b.hier->k : 0, hl = b.hier ? b.hier->l : 0;
                    char bytes_line[512] = "";
                    table_cell(t, "%d", b.hier ? hk : c->local_world ? nranks / c->local_world : 1);
                    if (be->run == run_hier && b.hier->bytes.calls > 0) {
                        double f_intra, f_inter;
                        hier_bytes_formula(S, hl, hk, &f_intra, &f_inter);
                        const double calls = (double)b.hier->bytes.calls;
                        const double m_intra = b.hier->bytes.intra_link / calls, m_inter = b.hier->bytes.inter_link / calls;
                        table_cell(t, "%.0f", m_intra);
                        table_cell(t, "%.0f", f_intra);
                        table_cell(t, "%.0f", m_inter);
                        table_cell(t, "%.0f", f_inter);
                        snprintf(bytes_line, sizeof bytes_line, "  bytes a rank sends per call: intra-node %.0f (formula 2(l-1)/l*S %.0f), inter-node %.0f "
                                 "(formula 2(k-1)/k*S/l %.0f); the flat ring: %.0f on each link of its ring, the slowest included "
                                 "(counted from the buffers handed to the groups' collectives: intra %.0f, inter %.0f a call)\n",
                                 m_intra, f_intra, m_inter, f_inter, flat_ring_bytes(S, nranks),
                                 b.hier->bytes.intra_handed / calls, b.hier->bytes.inter_handed / calls);
                    } else {
                        for (int q = 0; q < 4; q++) table_cell(t, "-");
                    }
                    table_cell(t, "%.0f", o == OP_ALLREDUCE ? flat_ring_bytes(S, nranks) : 0.0);
                    if (c->rank == 0) {
                        printf("%-13s %-11s %12zu %s  oop %10.1f us %8.2f GB/s busbw  ip %10.1f us %8.2f GB/s busbw  #wrong %lld\n",
                               OP_NAMES[o], be->name, (size_t)S, is_course_size(bytes) ? "*" : " ", t_oop,
                               S / t_oop / 1e3 * f, t_ip, S / t_ip / 1e3 * f, wrong);
                        if (*bytes_line) printf("%s", bytes_line);
                        fflush(stdout);
                    }
                }
            }
        }
        mem_free(bf.send); mem_free(bf.recv); mem_free(bf.h_in); mem_free(bf.h_out);
        hier_destroy(b.hier);
    }
    if (any->rank == 0) {
        printf("\n");
        table_print_md(t, stdout);
        char path[512], base[256];
        if (*tag) snprintf(base, sizeof base, "%s", tag);
        else {
            snprintf(base, sizeof base, "allreduce_%s_np%d", backends_s, nranks);
            for (char* p = base; *p; p++) if (*p == ',') *p = '+';
        }
        if (mkdir_p(out_dir) != 0) DIE("--out: cannot create the directory %s: %s", out_dir, strerror(errno));
        snprintf(path, sizeof path, "%s/%s.csv", out_dir, base);
        if (table_write_csv(t, path) != 0) DIE("cannot write %s: %s", path, strerror(errno));
        snprintf(path, sizeof path, "%s/%s.json", out_dir, base);
        if (table_write_json(t, path) != 0) DIE("cannot write %s: %s", path, strerror(errno));
        printf("\n# %s: %s/%s.{csv,json}\n", total_wrong ? "FAILED: wrong elements" : "OK", out_dir, base);
    }
    table_free(t);
    // The last communicator destroyed finalizes MPI.
    const int last = comms[COMM_MPI] ? COMM_MPI : COMM_NCCL;
    if (comms[1 - last]) comm_destroy(comms[1 - last], 0);
    comm_destroy(comms[last], 1);
    return total_wrong ? 1 : 0;
}
