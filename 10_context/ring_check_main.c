// ring_check: ring attention against one process, checked on every rank: the CPU ring (MPI
// backend, fp32) or, with --backend nccl, the GPU ring (one GPU a rank, --dtype f32 or bf16).
//   scripts/mpirun.sh P build/10_context/ring_check --N 53 --d 16 --causal 1 --split zigzag
// Every rank draws the whole Q, K, V, dO (the same numbers everywhere, from --seed), computes the
// single-process references over the whole sequence (stage 03's flash_forward_cpu, stage 04's
// flash_backward_cpu, or with nccl one GPU's flash_forward_cuda and flash_backward_cuda; and the
// float64 naive attention of ref64.c), runs the ring forward and
// backward on its own chunks, and compares. Rank 0 prints one line of scale-free errors
// (max |got - want| / max |want|, over every rank) and "ok" or "FAIL"; the exit status is 1 on
// FAIL.
// --only fwd checks the ring forward alone (O, L; no backward is run); --only bwd the ring
// backward alone (dQ, dK, dV), fed the one-process forward's O and L instead of the ring's, so
// that each half has a check that needs nothing of the other.
//
// The bound against float64: fp32 flash attention over one process is within BASE of float64
// (the dot products and the running softmax of one block); the ring adds, per query row, one LSE
// merge per visible key chunk (forward) and one fp32 addition per block (dQ locally, dK and dV on
// the way round), each a few rounding errors of fp32 (2^-24 ~ 6e-8). So the bound is
//   BASE + PER_MERGE * merges,   merges = the number of key chunks (P plain, 2P zigzag);
// it grows with P only through the number of merges, never faster.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/check.h"
#include "common/comm.h"
#include "common/rng.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "10_context/context.h"
#include "10_context/cp_gpu.h"

#define BASE_BOUND 2e-6
#define PER_MERGE_BOUND 2.4e-7  // 4 roundings of fp32, 4 x 2^-24
// The GPU ring (--backend nccl): fp32 kernels use the fast exponential, so a wider base; bf16:
// outputs, partial O and the kernels' P are rounded to bf16 (2^-8 = 3.9e-3 relative, half of it
// per rounding to nearest), so the base is two such roundings and each merge adds one.
#define GPU_F32_BASE_BOUND 1e-5
#define GPU_F32_PER_MERGE_BOUND 1e-6
#define GPU_BF16_BASE_BOUND 8e-3
#define GPU_BF16_PER_MERGE_BOUND 2e-3

enum { E_O, E_L, E_DQ, E_DK, E_DV, N_E };
static const char* e_name[N_E] = {"O", "L", "dQ", "dK", "dV"};

// Copies rank r's chunks out of a global [BH, N, w] array into its chunk-major buffer.
static void gather_local(const float* glob, float* loc, const cp_ring_t* g, int P, int r, int w) {
    int ch[CP_MAX_CHUNKS], n = cp_rank_chunks(g->split, P, r, ch);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        int st, len;
        cp_chunk_range(g->N, cp_num_chunks(g->split, P), ch[i], &st, &len);
        for (int bh = 0; bh < g->BH; bh++) {
            memcpy(loc + o, glob + ((size_t)bh * g->N + st) * w, sizeof(float) * (size_t)len * w);
            o += (size_t)len * w;
        }
    }
}

static float* to_f32(const double* a, size_t n) {
    float* f = malloc(sizeof(float) * n);
    if (!f) DIE("ring_check: out of host memory");
    for (size_t i = 0; i < n; i++) f[i] = (float)a[i];
    return f;
}

// max |a - b| and max |b| over n, into err[0] (max diff) and err[1] (max |b|), kept as maxima.
static void diff_into(const float* a, const float* b, size_t n, double err[2]) {
    for (size_t i = 0; i < n; i++) {
        const double dlt = fabs((double)a[i] - (double)b[i]);
        if (!(dlt <= err[0])) err[0] = isnan(dlt) ? INFINITY : dlt;
        if (fabs((double)b[i]) > err[1]) err[1] = fabs((double)b[i]);
    }
}

static float* xalloc(size_t n) {
    float* p = calloc(n ? n : 1, sizeof(float));
    if (!p) DIE("ring_check: out of host memory");
    return p;
}

// Host fp32 -> device buffer of dt, and back.
static void* upload(const float* h, size_t n, dtype_t dt) {
    void* dptr = mem_alloc(DEV_CUDA, n * dtype_size(dt), MEM_OTHER);
    if (dt == DT_BF16) {
        uint16_t* b = malloc(n * sizeof(uint16_t));
        if (!b) DIE("ring_check: out of host memory");
        bf16_from_f32_array(b, h, n);
        CUDA_CHECK(cudaMemcpy(dptr, b, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
        free(b);
    } else {
        CUDA_CHECK(cudaMemcpy(dptr, h, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    return dptr;
}
static void download(float* h, const void* dptr, size_t n, dtype_t dt) {
    if (dt == DT_BF16) {
        uint16_t* b = malloc(n * sizeof(uint16_t));
        if (!b) DIE("ring_check: out of host memory");
        CUDA_CHECK(cudaMemcpy(b, dptr, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        f32_from_bf16_array(h, b, n);
        free(b);
    } else {
        CUDA_CHECK(cudaMemcpy(h, dptr, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
}

// One GPU's flash attention over the whole sequence ([BH, N, d], dtype dt): the GPU reference.
static void flash_gpu_whole(const float* q, const float* k, const float* v, const float* dO, float* o, float* l,
                            float* dq, float* dk, float* dv, int BH, int N, int d, int causal, float scale, dtype_t dt) {
    const size_t n = (size_t)BH * N * d;
    void *Q = upload(q, n, dt), *K = upload(k, n, dt), *V = upload(v, n, dt), *DO = upload(dO, n, dt);
    void *O = mem_alloc(DEV_CUDA, n * dtype_size(dt), MEM_OTHER), *DQ = mem_alloc(DEV_CUDA, n * dtype_size(dt), MEM_OTHER);
    void *DK = mem_alloc(DEV_CUDA, n * dtype_size(dt), MEM_OTHER), *DV = mem_alloc(DEV_CUDA, n * dtype_size(dt), MEM_OTHER);
    float* L = mem_alloc(DEV_CUDA, (size_t)BH * N * sizeof(float), MEM_OTHER);
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 1; a.H = BH; a.Nq = N; a.Nk = N; a.d = d; a.dtype = dt; a.causal = causal; a.scale = scale;
    attn_contiguous_strides(a.sq, BH, N, d);
    memcpy(a.sk, a.sq, sizeof a.sq); memcpy(a.sv, a.sq, sizeof a.sq); memcpy(a.so, a.sq, sizeof a.sq);
    memcpy(a.sdo, a.sq, sizeof a.sq); memcpy(a.sdq, a.sq, sizeof a.sq); memcpy(a.sdk, a.sq, sizeof a.sq);
    memcpy(a.sdv, a.sq, sizeof a.sq);
    a.q = Q; a.k = K; a.v = V; a.o = O; a.lse = L; a.dout = DO; a.dq = DQ; a.dk = DK; a.dv = DV;
    a.workspace = mem_alloc(DEV_CUDA, flash_bwd_workspace_bytes(&a) + 16, MEM_WORKSPACE);
    flash_forward_cuda(&a, NULL);
    flash_backward_cuda(&a, NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    download(o, O, n, dt); download(dq, DQ, n, dt); download(dk, DK, n, dt); download(dv, DV, n, dt);
    download(l, L, (size_t)BH * N, DT_F32);
    void* all[] = {Q, K, V, DO, O, DQ, DK, DV, L, a.workspace};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mem_free(all[i]);
}

int main(int argc, char** argv) {
    int N = 53, d = 16, BH = 2, causal = 1, seed = 1, fault = 0;
    const char *split_s = "zigzag", *backend_s = "mpi", *dtype_s = "f32", *only_s = "all";
    double timeout_s = 0;
    cli_opt_t opts[] = {
        {"N", CLI_INT, &N, "53", "sequence length (need not divide by the chunks)", NULL},
        {"d", CLI_INT, &d, "16", "head dim", NULL},
        {"BH", CLI_INT, &BH, "2", "batch x heads", NULL},
        {"causal", CLI_INT, &causal, "1", "1: causal attention, 0: not", NULL},
        {"split", CLI_CHOICE, &split_s, "zigzag", "how the sequence is cut over the ranks", CP_SPLIT_CHOICES},
        {"seed", CLI_INT, &seed, "1", "seed of the inputs", NULL},
        {"fault", CLI_INT, &fault, "0", "1: a broken ring that computes on a stale block (the check must FAIL)", NULL},
        {"backend", CLI_CHOICE, &backend_s, "mpi", "mpi: the CPU ring; nccl: the GPU ring (one GPU a rank)", COMM_BACKEND_CHOICES},
        {"dtype", CLI_CHOICE, &dtype_s, "f32", "inputs and outputs of the GPU ring (the CPU ring is f32)", "f32|bf16"},
        {"only", CLI_CHOICE, &only_s, "all", "all: forward and backward; fwd: the forward alone (O, L); bwd: the backward alone (dQ, dK, dV) on the one-process O, L", "all|fwd|bwd"},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv,
                   "Ring attention (forward and backward) on the CPU against one process and float64 "
                   "(run under mpirun: scripts/mpirun.sh P prog).",
                   opts, CLI_COUNT(opts));
    cp_split_t split;
    cp_split_parse(split_s, &split);
    if (N < 1 || N > 4096) comm_bad_input("--N: %d; give 1..4096", N);
    if (d < 1 || d > 256) comm_bad_input("--d: %d; give 1..256", d);
    if (BH < 1 || BH > 64) comm_bad_input("--BH: %d; give 1..64", BH);
    if (causal != 0 && causal != 1) comm_bad_input("--causal: %d; give 0 or 1", causal);
    if (fault != 0 && fault != 1) comm_bad_input("--fault: %d; give 0 or 1", fault);
    comm_backend_t backend;
    comm_backend_parse(backend_s, &backend);
    const dtype_t dt = strcmp(dtype_s, "bf16") ? DT_F32 : DT_BF16;
    if (backend == COMM_MPI && dt != DT_F32) comm_bad_input("--dtype %s: the CPU ring (--backend mpi) is f32; bf16 needs --backend nccl", dtype_s);
    if (backend == COMM_NCCL && fault) comm_bad_input("--fault: only the CPU ring (--backend mpi) has the broken variant");
    const int do_fwd = strcmp(only_s, "bwd") != 0, do_bwd = strcmp(only_s, "fwd") != 0;
    if (backend == COMM_NCCL && !(do_fwd && do_bwd)) comm_bad_input("--only %s: the GPU ring (--backend nccl) is checked whole; give --only all", only_s);
    comm_t* c = comm_init(backend, comm_timeout_flag(timeout_s));
    const int P = c->world, r = c->rank;
    char err[256];
    if (cp_check_sizes(split, N, P, err, sizeof err)) comm_refuse(c, "--N: %s", err);

    const cp_ring_t g = {.BH = BH, .N = N, .d = d, .causal = causal, .scale = 1.0f / sqrtf((float)d),
                         .split = split, .Bq = 16, .Bk = 16, .fault = fault};
    const size_t nG = (size_t)BH * N * d;
    double *q64 = malloc(sizeof(double) * nG), *k64 = malloc(sizeof(double) * nG),
           *v64 = malloc(sizeof(double) * nG), *do64 = malloc(sizeof(double) * nG);
    double *o64 = malloc(sizeof(double) * nG), *l64 = malloc(sizeof(double) * (size_t)BH * N);
    double *dq64 = malloc(sizeof(double) * nG), *dk64 = malloc(sizeof(double) * nG),
           *dv64 = malloc(sizeof(double) * nG);
    if (!q64 || !k64 || !v64 || !do64 || !o64 || !l64 || !dq64 || !dk64 || !dv64) DIE("ring_check: out of host memory");
    for (size_t i = 0; i < nG; i++) {
        // fp32 inputs, held exactly in double, so both references see the same numbers
        q64[i] = rng_normal((uint64_t)seed, i);
        k64[i] = rng_normal((uint64_t)seed + 1, i);
        v64[i] = rng_normal((uint64_t)seed + 2, i);
        do64[i] = rng_normal((uint64_t)seed + 3, i);
        if (dt == DT_BF16) {  // the references see the numbers the bf16 ring sees
            q64[i] = f32_from_bf16(bf16_from_f32((float)q64[i]));
            k64[i] = f32_from_bf16(bf16_from_f32((float)k64[i]));
            v64[i] = f32_from_bf16(bf16_from_f32((float)v64[i]));
            do64[i] = f32_from_bf16(bf16_from_f32((float)do64[i]));
        }
    }
    attn_forward_f64(q64, k64, v64, o64, l64, BH, N, d, causal, (double)g.scale);
    if (do_bwd) attn_backward_f64(q64, k64, v64, o64, l64, do64, dq64, dk64, dv64, BH, N, d, causal, (double)g.scale);
    float *q = to_f32(q64, nG), *k = to_f32(k64, nG), *v = to_f32(v64, nG), *dO = to_f32(do64, nG);
    // one process, fp32 flash (stages 03 and 04)
    float *o1 = xalloc(nG), *l1 = xalloc((size_t)BH * N), *dq1 = xalloc(nG), *dk1 = xalloc(nG), *dv1 = xalloc(nG);
    if (backend == COMM_MPI) {
        flash_forward_cpu(q, k, v, o1, l1, BH, N, N, d, causal, g.scale, g.Bq, g.Bk);
        if (do_bwd) flash_backward_cpu(q, k, v, o1, dO, l1, dq1, dk1, dv1, BH, N, N, d, causal, g.scale, g.Bq, g.Bk);
    } else {
        flash_gpu_whole(q, k, v, dO, o1, l1, dq1, dk1, dv1, BH, N, d, causal, g.scale, dt);
    }

    // this rank's chunks
    const int nt = cp_rank_tokens(split, N, P, r);
    const size_t nl = (size_t)nt * BH * d, nll = (size_t)nt * BH;
    float *lq = xalloc(nl), *lk = xalloc(nl), *lv = xalloc(nl), *ldo = xalloc(nl);
    gather_local(q, lq, &g, P, r, d);
    gather_local(k, lk, &g, P, r, d);
    gather_local(v, lv, &g, P, r, d);
    gather_local(dO, ldo, &g, P, r, d);
    float *o = xalloc(nl), *lse = xalloc(nll), *dq = xalloc(nl), *dk = xalloc(nl), *dv = xalloc(nl);
    if (backend == COMM_MPI) {
        if (do_fwd) {
            ring_forward_cpu(c, &g, lq, lk, lv, o, lse);
        } else {  // the backward alone: one process's forward, in this rank's layout
            gather_local(o1, o, &g, P, r, d);
            gather_local(l1, lse, &g, P, r, 1);
        }
        if (do_bwd) ring_backward_cpu(c, &g, lq, lk, lv, o, lse, ldo, dq, dk, dv);
    } else {
        cp_gpu_t* rg = cp_gpu_create(c, &g, dt);
        void *Q = upload(lq, nl, dt), *K = upload(lk, nl, dt), *V = upload(lv, nl, dt), *DO = upload(ldo, nl, dt);
        void *O = mem_alloc(DEV_CUDA, nl * dtype_size(dt), MEM_OTHER), *DQ = mem_alloc(DEV_CUDA, nl * dtype_size(dt), MEM_OTHER);
        void *DK = mem_alloc(DEV_CUDA, nl * dtype_size(dt), MEM_OTHER), *DV = mem_alloc(DEV_CUDA, nl * dtype_size(dt), MEM_OTHER);
        float* L = mem_alloc(DEV_CUDA, nll * sizeof(float), MEM_OTHER);
        ring_forward_gpu(rg, Q, K, V, O, L);
        ring_backward_gpu(rg, Q, K, V, O, L, DO, DQ, DK, DV);
        download(o, O, nl, dt); download(dq, DQ, nl, dt); download(dk, DK, nl, dt); download(dv, DV, nl, dt);
        download(lse, L, nll, DT_F32);
        void* all[] = {Q, K, V, DO, O, DQ, DK, DV, L};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mem_free(all[i]);
        cp_gpu_destroy(rg);
    }

    // references in this rank's layout
    const float* want64[N_E] = {to_f32(o64, nG), to_f32(l64, (size_t)BH * N), to_f32(dq64, nG), to_f32(dk64, nG), to_f32(dv64, nG)};
    const float* want1[N_E] = {o1, l1, dq1, dk1, dv1};
    const float* got[N_E] = {o, lse, dq, dk, dv};
    double e64[2 * N_E] = {0}, e1[2 * N_E] = {0};
    for (int e = 0; e < N_E; e++) {
        const int w = e == E_L ? 1 : d;
        const size_t n = e == E_L ? nll : nl;
        float* a = xalloc(n);
        float* b = xalloc(n);
        gather_local(want64[e], a, &g, P, r, w);
        gather_local(want1[e], b, &g, P, r, w);
        diff_into(got[e], a, n, e64 + 2 * e);
        diff_into(got[e], b, n, e1 + 2 * e);
        free(a);
        free(b);
    }
    comm_host_allreduce_f64(c, e64, 2 * N_E, COMM_MAX);
    comm_host_allreduce_f64(c, e1, 2 * N_E, COMM_MAX);
    const int merges = cp_num_chunks(split, P);
    const double bound = backend == COMM_MPI ? BASE_BOUND + PER_MERGE_BOUND * merges
                         : dt == DT_F32   ? GPU_F32_BASE_BOUND + GPU_F32_PER_MERGE_BOUND * merges
                                          : GPU_BF16_BASE_BOUND + GPU_BF16_PER_MERGE_BOUND * merges;
    int ok = 1;
    char line[1024];
    int at = snprintf(line, sizeof line, "ring_check: %s %s P %d N %d d %d BH %d causal %d split %s merges %d%s: vs float64",
                      backend_s, dtype_s, P, N, d, BH, causal, split_s, merges,
                      do_fwd && do_bwd ? "" : do_fwd ? " (forward alone)" : " (backward alone)");
    // O and L belong to the forward, dQ, dK and dV to the backward.
#define CHECKED(e) ((e) <= E_L ? do_fwd : do_bwd)
    for (int e = 0; e < N_E; e++) {
        if (!CHECKED(e)) continue;
        const double rel = e64[2 * e] / (e64[2 * e + 1] + 1e-30);
        if (!(rel <= bound)) ok = 0;
        at += snprintf(line + at, sizeof line - at, " %s %.2e", e_name[e], rel);
    }
    at += snprintf(line + at, sizeof line - at, "; vs %s", backend == COMM_MPI ? "flash_cpu" : "flash_gpu");
    for (int e = 0; e < N_E; e++) {
        if (!CHECKED(e)) continue;
        const double rel = e1[2 * e] / (e1[2 * e + 1] + 1e-30);
        if (!(rel <= bound)) ok = 0;
        at += snprintf(line + at, sizeof line - at, " %s %.2e", e_name[e], rel);
    }
    snprintf(line + at, sizeof line - at, "; bound %.2e: %s", bound, ok ? "ok" : "FAIL");
    if (r == 0) printf("%s\n", line);
    fflush(stdout);
    comm_destroy(c, 1);
    return ok ? 0 : 1;
}
