// rungs: the lab's bench for stage 03's forward. Times any rung (rungs.h) or shipped variant by
// name at causal bf16 shapes, each against the shipped default on the same inputs (largest
// |O - O_default|, so that a fast wrong rung shows), with CUDA events (median of --reps, L2
// flushed before each run). The ladder in README.md was measured with the stage's bench before
// the split; this is what re-measures it.
// Run: build/lab/03_flashattn_fwd/rungs --list
//      build/lab/03_flashattn_fwd/rungs --d 64,128 --N 4096,16384 --H 16 --rung all --csv results/lab03_rungs.csv
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/dtype.h"
#include "common/gpu.h"
#include "common/rng.h"
#include "common/timer.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "lab/03_flashattn_fwd/rungs.h"

typedef struct {
    attn_args_t a;
    const flash_variant_t* r;
} call_t;

static void run_rung(void* p) {
    call_t* c = p;
    char err[256];
    if (lab03_run(c->r, &c->a, 0, err, sizeof err) != 0) DIE("%s", err);  // checked before timing
}

static void list_rungs(const int64_t* ds, int nd) {
    for (int i = 0; i < nd; i++) {
        const flash_variant_t* l;
        int n = flash_fwd_bf16_variants((int)ds[i], &l);
        for (int v = 0; v < n; v++)
            printf("d %3lld  shipped  %-26s Bq %3d%s%s%s\n", (long long)ds[i], l[v].name, l[v].bq,
                   l[v].wgmma ? "  sm_90a" : "", l[v].tma ? "  TMA" : "", l[v].dflt ? "  (default)" : "");
        n = lab03_rungs((int)ds[i], &l);
        for (int v = 0; v < n; v++)
            printf("d %3lld  lab      %-26s Bq %3d%s%s\n", (long long)ds[i], l[v].name, l[v].bq,
                   l[v].wgmma ? "  sm_90a" : "", l[v].tma ? "  TMA" : "");
    }
}

// Largest |x - y| over n bf16 elements of two device buffers.
static double max_diff_bf16(const void* x, const void* y, size_t n) {
    uint16_t* hx = malloc(n * 2);
    uint16_t* hy = malloc(n * 2);
    if (!hx || !hy) DIE("out of host memory");
    CUDA_CHECK(cudaMemcpy(hx, x, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hy, y, n * 2, cudaMemcpyDeviceToHost));
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double dd = fabs((double)f32_from_bf16(hx[i]) - (double)f32_from_bf16(hy[i]));
        m = dd > m || isnan(dd) ? dd : m;
    }
    free(hx), free(hy);
    return m;
}

int main(int argc, char** argv) {
    const char *rung = NULL, *Ns_s = NULL, *ds_s = NULL, *csv = NULL;
    int B = 0, H = 0, causal = 0, reps = 0, warmup = 0, list = 0;
    double budget = 0;
    cli_opt_t opts[] = {
        {"list", CLI_FLAG, &list, "0", "list the shipped variants and the lab's rungs of the --d head dims", NULL},
        {"rung", CLI_STR, &rung, "all", "a variant or rung name as --list prints it, or all", NULL},
        {"d", CLI_STR, &ds_s, "16,32,64,128", "head dims (comma list of 16, 32, 64, 128)", NULL},
        {"N", CLI_STR, &Ns_s, "16384", "sequence lengths, Nq = Nk (comma list)", NULL},
        {"B", CLI_INT, &B, "1", "batch", NULL},
        {"H", CLI_INT, &H, "16", "heads", NULL},
        {"causal", CLI_INT, &causal, "1", "1 causal, 0 not", NULL},
        {"reps", CLI_INT, &reps, "20", "timed runs (median)", NULL},
        {"warmup", CLI_INT, &warmup, "3", "untimed runs first", NULL},
        {"budget-ms", CLI_DOUBLE, &budget, "2000", "cap on the timed ms per point (at least 3 runs)", NULL},
        {"csv", CLI_STR, &csv, "", "also write the rows to this CSV file", NULL},
    };
    cli_parse(argc, argv, "Stage 03's lab bench: every forward rung, timed against the shipped default.", opts,
              CLI_COUNT(opts));
    int64_t Ns[16], ds[4];
    const int nN = parse_size_list(Ns_s, Ns, 16), nd = parse_size_list(ds_s, ds, 4);
    if (nd < 1) fail("--d: not a comma list of head dims: '%s'; allowed 16, 32, 64, 128", ds_s);
    for (int i = 0; i < nd; i++)
        if (ds[i] != 16 && ds[i] != 32 && ds[i] != 64 && ds[i] != 128)
            fail("--d: head dim %lld not supported; allowed 16, 32, 64, 128", (long long)ds[i]);
    if (list) {
        list_rungs(ds, nd);
        return 0;
    }
    if (nN < 1) fail("--N: not a comma list of sizes: '%s'; allowed 1 .. 1M each", Ns_s);
    for (int i = 0; i < nN; i++)
        if (Ns[i] < 1 || Ns[i] > (1 << 20)) fail("--N: %lld out of range; allowed 1 .. 1M", (long long)Ns[i]);
    if (B < 1 || H < 1) fail("--B and --H must be >= 1 (got %d, %d)", B, H);
    if (causal != 0 && causal != 1) fail("--causal must be 1 or 0, got %d", causal);
    if (reps < 1 || warmup < 1) fail("--reps and --warmup must be >= 1 (got %d, %d)", reps, warmup);
    if (strcmp(rung, "all") != 0) {
        int found = 0;
        for (int i = 0; i < nd; i++) found += lab03_find((int)ds[i], rung, NULL) != NULL;
        if (!found) fail("--rung: no variant or rung '%s' at head dims %s; allowed: all, or a name --list prints", rung, ds_s);
    }
    FILE* out = NULL;
    if (csv[0] && !(out = fopen(csv, "w"))) fail("--csv %s: cannot write it; allowed: a path in a writable folder", csv);
    gpu_require("rungs");
    if (out) fprintf(out, "d,N,B,H,causal,name,kind,ms,tflops,max_abs_diff_vs_default,note\n");
    printf("| d | N | rung | kind | ms | TFLOP/s | max abs diff vs default |\n|---|---|---|---|---|---|---|\n");
    for (int di = 0; di < nd; di++)
        for (int ni = 0; ni < nN; ni++) {
            const int d = (int)ds[di], N = (int)Ns[ni];
            attn_args_t a = {0};
            a.B = B, a.H = H, a.Nq = N, a.Nk = N, a.d = d, a.dtype = DT_BF16, a.causal = causal;
            a.scale = 1.0f / sqrtf((float)d);
            attn_contiguous_strides(a.sq, H, N, d);
            memcpy(a.sk, a.sq, sizeof a.sk), memcpy(a.sv, a.sq, sizeof a.sv), memcpy(a.so, a.sq, sizeof a.so);
            const size_t n = (size_t)B * H * N * d;
            float* hf = malloc(n * sizeof(float));
            uint16_t* hb = malloc(n * 2);
            if (!hf || !hb) DIE("out of host memory");
            void* buf[3];
            rng_t g = rng_make(1234 + (uint64_t)d * 7 + (uint64_t)N);
            for (int t = 0; t < 3; t++) {
                rng_fill_normal(&g, hf, n, 0.0f, 1.0f);
                bf16_from_f32_array(hb, hf, n);
                buf[t] = mem_alloc(DEV_CUDA, n * 2, MEM_OTHER);
                CUDA_CHECK(cudaMemcpy(buf[t], hb, n * 2, cudaMemcpyHostToDevice));
            }
            free(hf), free(hb);
            a.q = buf[0], a.k = buf[1], a.v = buf[2];
            void* o_ref = mem_alloc(DEV_CUDA, n * 2, MEM_OTHER);
            a.o = mem_alloc(DEV_CUDA, n * 2, MEM_OTHER);
            a.lse = mem_alloc(DEV_CUDA, (size_t)B * H * N * sizeof(float), MEM_OTHER);
            attn_args_t ar = a;
            ar.o = o_ref;
            flash_forward_cuda(&ar, 0);  // the shipped default
            CUDA_CHECK(cudaDeviceSynchronize());
            const double flops = (causal ? 2.0 : 4.0) * (double)N * N * d * B * H;
            for (int pass = 0; pass < 2; pass++) {  // shipped variants, then the rungs
                const flash_variant_t* l;
                const int cnt = pass == 0 ? flash_fwd_bf16_variants(d, &l) : lab03_rungs(d, &l);
                for (int v = 0; v < cnt; v++) {
                    if (strcmp(rung, "all") != 0 && strcmp(rung, l[v].name) != 0) continue;
                    const char* kind = pass == 0 ? "shipped" : "lab";
                    char why[256];
                    call_t c = {a, &l[v]};
                    CUDA_CHECK(cudaMemset(a.o, 0xFF, n * 2));
                    if (lab03_run(&l[v], &a, 0, why, sizeof why) != 0) {
                        printf("| %d | %d | %s | %s | - | - | - |  (%s)\n", d, N, l[v].name, kind, why);
                        if (out) fprintf(out, "%d,%d,%d,%d,%d,%s,%s,,,,\"%s\"\n", d, N, B, H, causal, l[v].name, kind, why);
                        continue;
                    }
                    CUDA_CHECK(cudaDeviceSynchronize());
                    const double diff = max_diff_bf16(a.o, o_ref, n);
                    const double ms = gpu_time_fn(run_rung, &c, warmup, reps, budget).median;
                    printf("| %d | %d | %s | %s | %.3f | %.1f | %.3g |\n", d, N, l[v].name, kind, ms,
                           flops / (ms * 1e9), diff);
                    if (out)
                        fprintf(out, "%d,%d,%d,%d,%d,%s,%s,%.4f,%.2f,%.4g,\n", d, N, B, H, causal, l[v].name, kind, ms,
                                flops / (ms * 1e9), diff);
                }
            }
            for (int t = 0; t < 3; t++) mem_free(buf[t]);
            mem_free(o_ref), mem_free(a.o), mem_free(a.lse);
        }
    if (out) fclose(out);
    return 0;
}
