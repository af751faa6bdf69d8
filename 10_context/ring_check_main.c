// ring_check: ring attention on the CPU (MPI backend) against one process, checked on every rank.
//   scripts/mpirun.sh P build/10_context/ring_check --N 53 --d 16 --causal 1 --split zigzag
// Every rank draws the whole Q, K, V, dO (the same numbers everywhere, from --seed), computes the
// single-process references over the whole sequence (stage 03's flash_forward_cpu, stage 04's
// flash_backward_cpu, and the float64 naive attention of ref64.c), runs the ring forward and
// backward on its own chunks, and compares. Rank 0 prints one line of scale-free errors
// (max |got - want| / max |want|, over every rank) and "ok" or "FAIL"; the exit status is 1 on
// FAIL.
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

#define BASE_BOUND 2e-6
#define PER_MERGE_BOUND 2.4e-7  // 4 roundings of fp32, 4 x 2^-24

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

int main(int argc, char** argv) {
    int N = 53, d = 16, BH = 2, causal = 1, seed = 1, fault = 0;
    const char* split_s = "zigzag";
    double timeout_s = 0;
    cli_opt_t opts[] = {
        {"N", CLI_INT, &N, "53", "sequence length (need not divide by the chunks)", NULL},
        {"d", CLI_INT, &d, "16", "head dim", NULL},
        {"BH", CLI_INT, &BH, "2", "batch x heads", NULL},
        {"causal", CLI_INT, &causal, "1", "1: causal attention, 0: not", NULL},
        {"split", CLI_CHOICE, &split_s, "zigzag", "how the sequence is cut over the ranks", CP_SPLIT_CHOICES},
        {"seed", CLI_INT, &seed, "1", "seed of the inputs", NULL},
        {"fault", CLI_INT, &fault, "0", "1: a broken ring that computes on a stale block (the check must FAIL)", NULL},
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
    comm_t* c = comm_init(COMM_MPI, comm_timeout_flag(timeout_s));
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
    }
    attn_forward_f64(q64, k64, v64, o64, l64, BH, N, d, causal, (double)g.scale);
    attn_backward_f64(q64, k64, v64, o64, l64, do64, dq64, dk64, dv64, BH, N, d, causal, (double)g.scale);
    float *q = to_f32(q64, nG), *k = to_f32(k64, nG), *v = to_f32(v64, nG), *dO = to_f32(do64, nG);
    // one process, fp32 flash (stages 03 and 04)
    float *o1 = xalloc(nG), *l1 = xalloc((size_t)BH * N), *dq1 = xalloc(nG), *dk1 = xalloc(nG), *dv1 = xalloc(nG);
    flash_forward_cpu(q, k, v, o1, l1, BH, N, N, d, causal, g.scale, g.Bq, g.Bk);
    flash_backward_cpu(q, k, v, o1, dO, l1, dq1, dk1, dv1, BH, N, N, d, causal, g.scale, g.Bq, g.Bk);

    // this rank's chunks
    const int nt = cp_rank_tokens(split, N, P, r);
    const size_t nl = (size_t)nt * BH * d, nll = (size_t)nt * BH;
    float *lq = xalloc(nl), *lk = xalloc(nl), *lv = xalloc(nl), *ldo = xalloc(nl);
    gather_local(q, lq, &g, P, r, d);
    gather_local(k, lk, &g, P, r, d);
    gather_local(v, lv, &g, P, r, d);
    gather_local(dO, ldo, &g, P, r, d);
    float *o = xalloc(nl), *lse = xalloc(nll), *dq = xalloc(nl), *dk = xalloc(nl), *dv = xalloc(nl);
    ring_forward_cpu(c, &g, lq, lk, lv, o, lse);
    ring_backward_cpu(c, &g, lq, lk, lv, o, lse, ldo, dq, dk, dv);

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
    const double bound = BASE_BOUND + PER_MERGE_BOUND * merges;
    int ok = 1;
    char line[1024];
    int at = snprintf(line, sizeof line, "ring_check: P %d N %d d %d BH %d causal %d split %s merges %d: vs float64",
                      P, N, d, BH, causal, split_s, merges);
    for (int e = 0; e < N_E; e++) {
        const double rel = e64[2 * e] / (e64[2 * e + 1] + 1e-30);
        if (!(rel <= bound)) ok = 0;
        at += snprintf(line + at, sizeof line - at, " %s %.2e", e_name[e], rel);
    }
    at += snprintf(line + at, sizeof line - at, "; vs flash_cpu");
    for (int e = 0; e < N_E; e++) {
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
