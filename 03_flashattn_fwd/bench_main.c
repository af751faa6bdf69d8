// bench: stage 03's two sweeps and the leaderboard point, timed with CUDA events (median of
// --reps runs after warm-up, L2 flushed before each run).
//   --sweep naive   batch 8, one head, fp32, non-causal, d x N: our cuBLAS naive attention's
//                   forward and backward time and the memory live before the backward
//                   (inputs, O, L, S and P); a failed allocation is an OOM row.
//   --sweep flash   batch B, H heads, causal, d x N x dtype: our flash forward vs our naive
//                   forward, TFLOP/s with causal forward FLOPs = 2 N^2 d per head.
// Tables go to stdout (Markdown) and results/03_<sweep>.csv / .json.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/tensor.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/model_kernels.h"
#include "common/rng.h"
#include "common/stats.h"
#include "common/table.h"
#include "common/timer.h"
#include "03_flashattn_fwd/attn_naive.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "03_flashattn_fwd/flash_fwd_internal.h"

static int g_reps, g_warmup;
static int g_variant[129];  // bf16 kernel variant per head dim (--variants; -1: the default)
static double g_budget_ms;  // per measurement: fewer reps when one run is slow

// Median ms of fn(ctx) over the reps (at least 3 under the budget), L2 flushed before each.
static double time_ms(gpu_timed_fn fn, void* ctx) { return gpu_time_fn(fn, ctx, g_warmup, g_reps, g_budget_ms).median; }

typedef struct {
    cublasHandle_t h;
    dtype_t dt;
    int BH, N, d, causal;
    float scale;
    void *q, *k, *v, *o, *P, *dO, *dq, *dk, *dv;
    float *lse, *S;
    attn_args_t a;
} ctx_t;

static void run_naive_fwd(void* p) {
    ctx_t* c = p;
    attn_naive_forward_cuda(c->h, c->dt, c->q, c->k, c->v, c->o, c->lse, c->S, c->P, c->BH, c->N, c->N, c->d, c->causal,
                            c->scale, 0);
}
static void run_naive_bwd(void* p) {
    ctx_t* c = p;
    attn_naive_backward_cuda(c->h, c->q, c->k, c->v, c->P, c->dO, c->S, c->dq, c->dk, c->dv, c->BH, c->N, c->N, c->d,
                             c->scale, 0);
}
static void run_flash_fwd(void* p) {
    ctx_t* c = p;
    flash_forward_cuda(&c->a, 0);
}

static void free_ctx(ctx_t* c) {
    void* ps[] = {c->q, c->k, c->v, c->o, c->P, c->dO, c->dq, c->dk, c->dv, c->lse, c->S};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) mem_free(ps[i]);
    cublasHandle_t h = c->h;
    memset(c, 0, sizeof *c);
    c->h = h;
}

static void sweep_naive(cublasHandle_t h, const int64_t* Ns, int nN, const int64_t* ds, int nd, const char* csv) {
    const char* hdr[] = {"d", "N", "fwd ms", "bwd ms", "mem before bwd (MiB)", "status"};
    table_t* t = table_new("naive attention (cuBLAS, S and P materialised), batch 8, 1 head, fp32, non-causal", 6, hdr);
    for (int di = 0; di < nd; di++)
        for (int ni = 0; ni < nN; ni++) {
            ctx_t c = {0};
            c.h = h, c.dt = DT_F32, c.BH = 8, c.N = (int)Ns[ni], c.d = (int)ds[di], c.causal = 0;
            c.scale = 1.0f / sqrtf((float)c.d);
            const size_t nqd = (size_t)c.BH * c.N * c.d, nss = (size_t)c.BH * c.N * c.N;
            CUDA_CHECK(cudaDeviceSynchronize());
            const size_t live0 = mem_stats(DEV_CUDA).live;
            int ok = (c.q = tensor_randn_dev(DT_F32, nqd, 1, MEM_OTHER)) && (c.k = tensor_randn_dev(DT_F32, nqd, 2, MEM_OTHER)) &&
                     (c.v = tensor_randn_dev(DT_F32, nqd, 3, MEM_OTHER)) &&
                     (c.o = mem_try_alloc(DEV_CUDA, nqd * 4, MEM_ACTS)) &&
                     (c.lse = mem_try_alloc(DEV_CUDA, (size_t)c.BH * c.N * 4, MEM_ACTS)) &&
                     (c.S = mem_try_alloc(DEV_CUDA, nss * 4, MEM_ACTS)) && (c.P = mem_try_alloc(DEV_CUDA, nss * 4, MEM_ACTS));
            double fwd = 0.0, bwd = 0.0, mem = 0.0;
            if (ok) {
                fwd = time_ms(run_naive_fwd, &c);
                CUDA_CHECK(cudaDeviceSynchronize());
                mem = (double)(mem_stats(DEV_CUDA).live - live0) / (1024.0 * 1024.0);
                ok = (c.dO = tensor_randn_dev(DT_F32, nqd, 4, MEM_OTHER)) && (c.dq = mem_try_alloc(DEV_CUDA, nqd * 4, MEM_GRADS)) &&
                     (c.dk = mem_try_alloc(DEV_CUDA, nqd * 4, MEM_GRADS)) &&
                     (c.dv = mem_try_alloc(DEV_CUDA, nqd * 4, MEM_GRADS));
                // The backward overwrites S with dS, so each timed backward runs on the same P.
                if (ok) bwd = time_ms(run_naive_bwd, &c);
            }
            table_row(t);
            table_cell(t, "%d", c.d);
            table_cell(t, "%d", c.N);
            if (ok) {
                table_cell(t, "%.3f", fwd);
                table_cell(t, "%.3f", bwd);
                table_cell(t, "%.1f", mem);
                table_cell(t, "ok");
            } else {
                table_cell(t, "%s", fwd > 0 ? "" : "OOM");
                table_cell(t, "OOM");
                table_cell(t, "%s", mem > 0 ? "" : "-");
                table_cell(t, "OOM");
            }
            free_ctx(&c);
            fflush(stdout);
        }
    table_print_md(t, stdout);
    table_write_csv(t, csv);
    char json[512];
    snprintf(json, sizeof json, "%.*s.json", (int)(strlen(csv) - 4), csv);
    table_write_json(t, json);
    table_free(t);
}

// One row of the flash table: our flash forward (and, if N <= naive_max_N, our naive forward)
// at one (dtype, d, N), with the bf16 variant already selected.
static void flash_point(table_t* t, cublasHandle_t h, dtype_t dt, int B, int H, int N, int d, int causal,
                        int naive_max_N, const char* variant) {
    ctx_t c = {0};
    c.h = h, c.dt = dt, c.BH = B * H, c.N = N, c.d = d, c.causal = causal;
    c.scale = 1.0f / sqrtf((float)d);
    const size_t nqd = (size_t)c.BH * N * d, es = dtype_size(dt);
    const int ok = (c.q = tensor_randn_dev(dt, nqd, 1, MEM_OTHER)) && (c.k = tensor_randn_dev(dt, nqd, 2, MEM_OTHER)) &&
                   (c.v = tensor_randn_dev(dt, nqd, 3, MEM_OTHER)) && (c.o = mem_try_alloc(DEV_CUDA, nqd * es, MEM_ACTS)) &&
                   (c.lse = mem_try_alloc(DEV_CUDA, (size_t)c.BH * N * 4, MEM_ACTS));
    const double flops = 4.0 * c.BH * (double)N * N * d / (causal ? 2.0 : 1.0);
    double fl = 0.0, nv = 0.0;
    if (ok) {
        attn_args_t* a = &c.a;
        a->B = B, a->H = H, a->Nq = a->Nk = N, a->d = d, a->dtype = dt, a->causal = causal, a->scale = c.scale;
        a->q = c.q, a->k = c.k, a->v = c.v, a->o = c.o, a->lse = c.lse;
        attn_contiguous_strides(a->sq, H, N, d);
        memcpy(a->sk, a->sq, sizeof a->sq), memcpy(a->sv, a->sq, sizeof a->sq), memcpy(a->so, a->sq, sizeof a->sq);
        fl = time_ms(run_flash_fwd, &c);
        const size_t nss = (size_t)c.BH * N * N;  // S (fp32) and P (dtype) of the naive forward
        if (N <= naive_max_N && (c.S = mem_try_alloc(DEV_CUDA, nss * 4, MEM_WORKSPACE)) &&
            (c.P = mem_try_alloc(DEV_CUDA, nss * es, MEM_ACTS)))
            nv = time_ms(run_naive_fwd, &c);
    }
    table_row(t);
    table_cell(t, "%s", dtype_name(dt));
    table_cell(t, "%d", d);
    table_cell(t, "%d", N);
    table_cell(t, "%s", variant);
    if (fl > 0) {
        table_cell(t, "%.4f", fl);
        table_cell(t, "%.1f", flops / (fl * 1e-3) / 1e12);
    } else {
        table_cell(t, "OOM");
        table_cell(t, "-");
    }
    if (nv > 0) {
        table_cell(t, "%.4f", nv);
        table_cell(t, "%.1f", flops / (nv * 1e-3) / 1e12);
        table_cell(t, "%.2f", nv / fl);
    } else {
        table_cell(t, "%s", N > naive_max_N ? "skipped" : "OOM");
        table_cell(t, "-");
        table_cell(t, "-");
    }
    fprintf(stderr, "  %s d %d N %d %s: flash %.4f ms, naive %.4f ms\n", dtype_name(dt), d, N, variant, fl, nv);
    free_ctx(&c);
}

static void sweep_flash(cublasHandle_t h, int B, int H, const int64_t* Ns, int nN, const int64_t* ds, int nd,
                        const char* dtypes, int causal, int naive_max_N, int scan, const char* csv) {
    const char* hdr[] = {"dtype", "d", "N", "variant", "flash ms", "flash TFLOP/s", "naive ms", "naive TFLOP/s", "naive/flash"};
    char title[256];
    snprintf(title, sizeof title, "attention forward, batch %d, %d heads, %s", B, H, causal ? "causal" : "non-causal");
    table_t* t = table_new(title, 9, hdr);
    for (int pass = 0; pass < 2; pass++) {
        const dtype_t dt = pass == 0 ? DT_BF16 : DT_F32;
        if (!strstr(dtypes, dtype_name(dt))) continue;
        for (int di = 0; di < nd; di++) {
            const int d = (int)ds[di];
            const flash_variant_t* vl = NULL;
            const int nvar = dt == DT_BF16 ? flash_fwd_bf16_variants(d, &vl) : 1;
            const int v0 = dt == DT_BF16 ? g_variant[d] : 0;
            for (int ni = 0; ni < nN; ni++)
                // --scan-variants: every bf16 kernel of the table, one row each (naive only once)
                for (int v = scan ? 0 : v0; v < (scan ? nvar : v0 + 1); v++) {
                    if (dt == DT_BF16) flash_fwd_bf16_set_variant(d, v);
                    // The name comes from the dispatch (flash_fwd_kernel_name), not from the table
                    // entry asked for: a wgmma variant in a build without sm_90a runs entry 0.
                    // The whole call's shape: the TMA variants also look at the strides.
                    attn_args_t which = {0};
                    which.dtype = dt, which.d = d, which.B = B, which.H = H, which.Nq = which.Nk = (int)Ns[ni];
                    attn_contiguous_strides(which.sq, H, (int)Ns[ni], d);
                    attn_contiguous_strides(which.sk, H, (int)Ns[ni], d);
                    attn_contiguous_strides(which.sv, H, (int)Ns[ni], d);
                    flash_point(t, h, dt, B, H, (int)Ns[ni], d, causal, scan && v > 0 ? 0 : naive_max_N,
                                flash_fwd_kernel_name(&which));
                }
            if (dt == DT_BF16) flash_fwd_bf16_set_variant(d, v0);
        }
    }
    table_print_md(t, stdout);
    table_write_csv(t, csv);
    char json[512];
    snprintf(json, sizeof json, "%.*s.json", (int)(strlen(csv) - 4), csv);
    table_write_json(t, json);
    table_free(t);
}

// --csv names a file ending in .csv (the JSON goes beside it) in a place that can take it.
static void check_csv_path(const char* csv) {
    const size_t n = strlen(csv);
    if (n < 5 || strcmp(csv + n - 4, ".csv") != 0) fail("--csv %s: the name must end in .csv (the JSON goes beside it)", csv);
    char dir[512], err[512];
    const char* slash = strrchr(csv, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == csv ? 1 : (int)(slash - csv), csv);
    if (dir_check_writable(dir, err, sizeof err) != 0) fail("--csv %s: %s", csv, err);
}

int main(int argc, char** argv) {
    const char *sweep = NULL, *Ns_s = NULL, *ds_s = NULL, *dtypes = NULL, *csv = NULL, *variants = NULL;
    int B = 0, H = 0, causal = 0, naive_max_N = 0, scan = 0;
    cli_opt_t opts[] = {
        {"sweep", CLI_CHOICE, &sweep, "flash", "which sweep", "naive|flash"},
        {"N", CLI_STR, &Ns_s, "", "sequence lengths (comma list); empty: the sweep's default", NULL},
        {"d", CLI_STR, &ds_s, "16,32,64,128", "head dims (comma list)", NULL},
        {"dtype", CLI_STR, &dtypes, "bf16,f32", "flash sweep dtypes (comma list of bf16, f32)", NULL},
        {"B", CLI_INT, &B, "1", "flash sweep batch", NULL},
        {"H", CLI_INT, &H, "1", "flash sweep heads", NULL},
        {"causal", CLI_INT, &causal, "1", "flash sweep: 1 causal, 0 not", NULL},
        {"naive-max-N", CLI_INT, &naive_max_N, "16384", "flash sweep: skip the naive forward above this N", NULL},
        {"reps", CLI_INT, &g_reps, "20", "timed runs per point (median reported; fewer if one run is slow)", NULL},
        {"warmup", CLI_INT, &g_warmup, "3", "untimed runs first", NULL},
        {"budget-ms", CLI_DOUBLE, &g_budget_ms, "2000", "cap on the timed ms per point (at least 3 runs)", NULL},
        {"variants", CLI_STR, &variants, "", "bf16 kernel variant per head dim, e.g. 64:0,128:1 (default: fa3 at d 64/128 on sm_90a, else 0)", NULL},
        {"scan-variants", CLI_FLAG, &scan, "0", "flash sweep: time every bf16 kernel that ships (the mma.sync kernel, and fa3 at d 64/128)", NULL},
        {"csv", CLI_STR, &csv, "", "CSV path (JSON beside it); empty: results/03_<sweep>.csv", NULL},
    };
    cli_parse(argc, argv, "Stage 03 benchmarks: naive attention sweep and flash forward sweep.", opts, CLI_COUNT(opts));
    // Every flag is checked before the GPU is asked for: a typo is named as such on
    // any machine, not hidden behind "needs a CUDA GPU".
    if (g_reps < 1 || g_warmup < 1) fail("--reps and --warmup must be >= 1");
    if (B < 1 || H < 1) fail("--B and --H must be >= 1 (got %d, %d)", B, H);
    if ((double)B * H > 2147483647.0) fail("--B x --H = %.0f is more than 2^31 - 1 heads", (double)B * H);
    if (causal != 0 && causal != 1) fail("--causal must be 1 (causal) or 0 (not), got %d", causal);
    if (!(g_budget_ms >= 0)) fail("--budget-ms must be >= 0 (0: no cap), got %g", g_budget_ms);
    if (naive_max_N < 0) fail("--naive-max-N must be >= 0 (0: never the naive forward), got %d", naive_max_N);
    char err[512];
    if (choice_list_check("dtype", dtypes, "bf16|f32", err, sizeof err) != 0) fail("%s", err);
    int64_t Ns[32], ds[8];
    const int is_naive = strcmp(sweep, "naive") == 0;
    if (!Ns_s[0]) Ns_s = is_naive ? "256,1024,4096,8192,16384" : "128,256,512,1024,2048,4096,8192,16384,32768,65536";
    const int nN = parse_size_list(Ns_s, Ns, 32), nd = parse_size_list(ds_s, ds, 8);
    if (nN < 1) fail("--N: not a comma list of sizes: '%s'", Ns_s);
    if (nd < 1) fail("--d: not a comma list of head dims: '%s'", ds_s);
    for (int i = 0; i < nd; i++)
        if (ds[i] != 16 && ds[i] != 32 && ds[i] != 64 && ds[i] != 128)
            fail("--d: head dim %lld not supported (allowed: 16, 32, 64, 128)", (long long)ds[i]);
    for (int i = 0; i < nN; i++)
        if (Ns[i] < 1 || Ns[i] > (1 << 20)) fail("--N: %lld out of range (1 .. 1M)", (long long)Ns[i]);
    char verr[256];
    for (int d = 0; d <= 128; d++) g_variant[d] = FLASH_FWD_DEFAULT_VARIANT;
    if (flash_fwd_select_variants(variants, g_variant, verr, sizeof verr) != 0) fail("--variants: %s", verr);
    char path[512];
    if (!csv[0]) {
        snprintf(path, sizeof path, "results/03_%s.csv", sweep);
        csv = path;
    }
    check_csv_path(csv);
    gpu_require("bench");
    gpu_info_t gi;
    if (gpu_info(0, &gi) == 0) printf("# GPU: %s\n", gi.name);
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    if (is_naive)
        sweep_naive(h, Ns, nN, ds, nd, csv);
    else
        sweep_flash(h, B, H, Ns, nN, ds, nd, dtypes, causal, naive_max_N, scan, csv);
    CUBLAS_CHECK(cublasDestroy(h));
    return 0;
}
