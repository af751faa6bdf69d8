// ring_bench: times ring attention, forward and backward, per rank: the blocks' kernels
// (compute) and the rest of the call (communication the compute did not hide), median of
// --iters calls after --warmup.
//   scripts/mpirun.sh 2 build/10_context/ring_bench --N 32768 --d 128 --heads 16 --causal 1
//       --split zigzag --dtype bf16 --backend nccl [--csv results/.../ring.csv]
// With --backend mpi the CPU ring (fp32) is timed by the wall clock: total only.
// Rank 0 prints one row per rank: its work (visible tile pairs of 128 tokens), compute, total
// and exposed milliseconds; with --csv it appends the rows to the file (header when new).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/comm.h"
#include "common/gpu.h"
#include "common/rng.h"
#include "common/stats.h"
#include "common/timer.h"
#include "10_context/context.h"
#include "10_context/cp_gpu.h"

#define MAX_ITERS 1000

typedef struct {
    double compute[MAX_ITERS], total[MAX_ITERS];
} samples_t;

int main(int argc, char** argv) {
    int N = 32768, d = 128, heads = 16, batch = 1, causal = 1, warmup = 3, iters = 10;
    const char *split_s = "zigzag", *backend_s = "nccl", *dtype_s = "bf16", *pass_s = "fwd+bwd", *csv = "";
    double timeout_s = 0;
    cli_opt_t opts[] = {
        {"N", CLI_INT, &N, "32768", "the whole sequence length", NULL},
        {"d", CLI_INT, &d, "128", "head dim", NULL},
        {"heads", CLI_INT, &heads, "16", "attention heads", NULL},
        {"batch", CLI_INT, &batch, "1", "batch size", NULL},
        {"causal", CLI_INT, &causal, "1", "1: causal, 0: not", NULL},
        {"split", CLI_CHOICE, &split_s, "zigzag", "how the sequence is cut over the ranks", CP_SPLIT_CHOICES},
        {"backend", CLI_CHOICE, &backend_s, "nccl", "nccl: the GPU ring; mpi: the CPU ring (fp32, wall clock)", COMM_BACKEND_CHOICES},
        {"dtype", CLI_CHOICE, &dtype_s, "bf16", "inputs and outputs (GPU ring)", "f32|bf16"},
        {"pass", CLI_CHOICE, &pass_s, "fwd+bwd", "what is timed", "fwd|bwd|fwd+bwd"},
        {"warmup", CLI_INT, &warmup, "3", "untimed calls first", NULL},
        {"iters", CLI_INT, &iters, "10", "timed calls (the median is reported)", NULL},
        {"csv", CLI_STR, &csv, "", "append the rows to this CSV file (rank 0)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv,
                   "Times ring attention per rank: compute and exposed communication (run under mpirun: "
                   "scripts/mpirun.sh P prog).",
                   opts, CLI_COUNT(opts));
    cp_split_t split;
    cp_split_parse(split_s, &split);
    comm_backend_t backend;
    comm_backend_parse(backend_s, &backend);
    const dtype_t dt = strcmp(dtype_s, "bf16") ? DT_F32 : DT_BF16;
    if (N < 1) comm_bad_input("--N: %d; give a length >= 1", N);
    if (d < 1 || d > 256) comm_bad_input("--d: %d; give 1..256", d);
    if (heads < 1 || batch < 1) comm_bad_input("--heads %d, --batch %d: give at least 1 each", heads, batch);
    if (causal != 0 && causal != 1) comm_bad_input("--causal: %d; give 0 or 1", causal);
    if (warmup < 0 || iters < 1 || iters > MAX_ITERS) comm_bad_input("--warmup %d, --iters %d: give warmup >= 0 and 1..%d iters", warmup, iters, MAX_ITERS);
    if (backend == COMM_MPI && dt != DT_F32) comm_bad_input("--dtype %s: the CPU ring (--backend mpi) is f32", dtype_s);
    comm_t* c = comm_init(backend, comm_timeout_flag(timeout_s));
    const int P = c->world, r = c->rank;
    char err[256];
    if (cp_check_sizes(split, N, P, err, sizeof err)) comm_refuse(c, "--N: %s", err);
    const int BH = batch * heads;
    const cp_ring_t g = {.BH = BH, .N = N, .d = d, .causal = causal, .scale = 1.0f / sqrtf((float)d),
                         .split = split, .Bq = 64, .Bk = 64, .fault = 0};
    const int nt = cp_rank_tokens(split, N, P, r);
    const size_t nl = (size_t)nt * BH * d, nll = (size_t)nt * BH;
    const int do_fwd = strcmp(pass_s, "bwd") != 0, do_bwd = strcmp(pass_s, "fwd") != 0;
    float* h = malloc(sizeof(float) * nl);
    if (!h) DIE("ring_bench: out of host memory");
    for (size_t i = 0; i < nl; i++) h[i] = rng_normal((uint64_t)r * 7 + 1, i);
    samples_t* S = calloc(1, sizeof *S);
    if (!S) DIE("ring_bench: out of host memory");

    if (backend == COMM_NCCL) {
        cp_gpu_t* rg = cp_gpu_create(c, &g, dt);
        const size_t es = dtype_size(dt);
        void* buf[8];
        for (int i = 0; i < 8; i++) buf[i] = mem_alloc(DEV_CUDA, nl * es, MEM_OTHER);
        float* L = mem_alloc(DEV_CUDA, nll * sizeof(float), MEM_OTHER);
        // q, k, v, dout from the same random numbers (the timing does not depend on them)
        void* hb = malloc(nl * es);
        if (!hb) DIE("ring_bench: out of host memory");
        if (dt == DT_BF16) bf16_from_f32_array(hb, h, nl); else memcpy(hb, h, nl * es);
        for (int i = 0; i < 4; i++) CUDA_CHECK(cudaMemcpy(buf[i], hb, nl * es, cudaMemcpyHostToDevice));
        free(hb);
        ring_forward_gpu(rg, buf[0], buf[1], buf[2], buf[4], L);  // O and L for the backward
        for (int it = -warmup; it < iters; it++) {
            double cm = 0, tm = 0, a, b;
            comm_barrier(c);
            if (do_fwd) {
                ring_forward_gpu(rg, buf[0], buf[1], buf[2], buf[4], L);
                cp_gpu_last_times(rg, &a, &b);
                cm += a;
                tm += b;
            }
            if (do_bwd) {
                ring_backward_gpu(rg, buf[0], buf[1], buf[2], buf[4], L, buf[3], buf[5], buf[6], buf[7]);
                cp_gpu_last_times(rg, &a, &b);
                cm += a;
                tm += b;
            }
            if (it >= 0) {
                S->compute[it] = cm;
                S->total[it] = tm;
            }
        }
        for (int i = 0; i < 8; i++) mem_free(buf[i]);
        mem_free(L);
        cp_gpu_destroy(rg);
    } else {
        float *o = malloc(sizeof(float) * nl), *lse = malloc(sizeof(float) * nll), *g3 = malloc(sizeof(float) * 3 * nl);
        if (!o || !lse || !g3) DIE("ring_bench: out of host memory");
        ring_forward_cpu(c, &g, h, h, h, o, lse);
        for (int it = -warmup; it < iters; it++) {
            comm_barrier(c);
            const double t0 = time_now_s();
            if (do_fwd) ring_forward_cpu(c, &g, h, h, h, o, lse);
            if (do_bwd) ring_backward_cpu(c, &g, h, h, h, o, lse, h, g3, g3 + nl, g3 + 2 * nl);
            if (it >= 0) {
                S->compute[it] = NAN;
                S->total[it] = 1e3 * (time_now_s() - t0);
            }
        }
        free(o);
        free(lse);
        free(g3);
    }
    // per rank medians, gathered on rank 0 (a sum of vectors that are zero but at the own rank)
    double* row = calloc((size_t)3 * P, sizeof(double));
    if (!row) DIE("ring_bench: out of host memory");
    row[3 * r + 0] = stats_compute(S->compute, iters).median;
    row[3 * r + 1] = stats_compute(S->total, iters).median;
    row[3 * r + 2] = (double)cp_rank_work(split, N, P, r, causal, 128) * BH;
    comm_host_allreduce_f64(c, row, 3 * P, COMM_SUM);
    if (r == 0) {
        printf("ring attention: %s %s N %d d %d heads %d batch %d causal %d split %s P %d pass %s (median of %d)\n",
               backend_s, dtype_s, N, d, heads, batch, causal, split_s, P, pass_s, iters);
        printf("%4s %14s %12s %12s %12s\n", "rank", "work(tiles)", "compute_ms", "total_ms", "exposed_ms");
        FILE* f = NULL;
        if (*csv) {
            const int fresh = access(csv, F_OK) != 0;
            f = fopen(csv, "a");
            if (!f) comm_fatal(c, 2, "--csv %s: cannot open for appending", csv);
            if (fresh) fprintf(f, "backend,dtype,N,d,heads,batch,causal,split,P,pass,rank,work_tiles,compute_ms,total_ms,exposed_ms\n");
        }
        for (int p = 0; p < P; p++) {
            const double cm = row[3 * p], tm = row[3 * p + 1], ex = tm - cm;
            printf("%4d %14.0f %12.3f %12.3f %12.3f\n", p, row[3 * p + 2], cm, tm, ex);
            if (f)
                fprintf(f, "%s,%s,%d,%d,%d,%d,%d,%s,%d,%s,%d,%.0f,%.4f,%.4f,%.4f\n", backend_s, dtype_s, N, d, heads,
                        batch, causal, split_s, P, pass_s, p, row[3 * p + 2], cm, tm, ex);
        }
        if (f) fclose(f);
        fflush(stdout);
    }
    free(row);
    free(S);
    free(h);
    comm_destroy(c, 1);
    return 0;
}
