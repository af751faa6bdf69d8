// bench: stage 04's timings with CUDA events (median of --reps runs after warm-up, L2 flushed
// before each run).
//   --mode sweep        batch B, H heads, causal, dtype x d x N: our forward (stage 03), our
//                       backward, forward+backward, and our
//                       cuBLAS naive attention's forward+backward (fp32 only: its backward is fp32).
//   --mode leaderboard  batch 1, 16 heads, N 16384, d 64, bf16, causal: forward+backward, many reps
//                       forward+backward under the course leaderboard's own statistic, triton's
//                       do_bench(fn, rep=10000, warmup=1000): the mean of every run that fits in
//                       10 s after 1 s of warm-up, 256 MB cache clear before each (dobench.h).
// Every kernel name printed is flash_fwd_kernel_name / flash_bwd_kernel_name's: the dispatch's
// own answer (the row of its table) for these shapes and dtype, not a separate guess.
// FLOPs (README): one causal N x N x d product per head is N^2 d (2 N^2 d / 2); the forward
// does 2 of them, the two-pass backward 7 (S and dP twice), the single-pass backward 5.
// TFLOP/s below count the algorithmic minimum (forward 2, backward 5) so the rows compare.
// Tables go to stdout (Markdown) and results/04_<mode>.csv / .json.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublas_v2.h>
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
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/dobench.h"

static int g_reps, g_warmup;
static double g_budget_ms;

// Median ms of fn(ctx) over the reps (at least 3 under the budget), L2 flushed before each; the
// fastest in *min_out.
static double time_ms(gpu_timed_fn fn, void* ctx, double* min_out) {
    const stats_t s = gpu_time_fn(fn, ctx, g_warmup, g_reps, g_budget_ms);
    if (min_out) *min_out = s.min;
    return s.median;
}

typedef struct {
    attn_args_t a;
    cublasHandle_t h;      // naive attention
    float *S, *P;          // naive: (BH, N, N) fp32 each
} ctx_t;

static void run_fwd(void* p) { flash_forward_cuda(&((ctx_t*)p)->a, 0); }
static void run_bwd(void* p) { flash_backward_cuda(&((ctx_t*)p)->a, 0); }
static void run_fwd_bwd(void* p) {
    run_fwd(p);
    run_bwd(p);
}
static void run_naive_fwd_bwd(void* p) {
    ctx_t* c = p;
    const attn_args_t* a = &c->a;
    const int BH = a->B * a->H;
    attn_naive_forward_cuda(c->h, DT_F32, a->q, a->k, a->v, a->o, a->lse, c->S, c->P, BH, a->Nq, a->Nk, a->d,
                            a->causal, a->scale, 0);
    attn_naive_backward_cuda(c->h, a->q, a->k, a->v, c->P, a->dout, c->S, a->dq, a->dk, a->dv, BH, a->Nq, a->Nk,
                             a->d, a->scale, 0);
}

// Allocates every buffer of one point; 0 on OOM (whatever was allocated is freed by free_ctx).
static int make_ctx(ctx_t* c, dtype_t dt, int B, int H, int N, int d, int causal) {
    attn_args_t* a = &c->a;
    a->B = B, a->H = H, a->Nq = a->Nk = N, a->d = d, a->dtype = dt, a->causal = causal;
    a->scale = 1.0f / sqrtf((float)d);
    int64_t* all[8] = {a->sq, a->sk, a->sv, a->so, a->sdo, a->sdq, a->sdk, a->sdv};
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], H, N, d);
    const size_t n = (size_t)B * H * N * d, es = dtype_size(dt);
    return (a->q = tensor_randn_dev(dt, n, 1, MEM_OTHER)) && (a->k = tensor_randn_dev(dt, n, 2, MEM_OTHER)) && (a->v = tensor_randn_dev(dt, n, 3, MEM_OTHER)) &&
           (a->dout = tensor_randn_dev(dt, n, 4, MEM_OTHER)) && (a->o = mem_try_alloc(DEV_CUDA, n * es, MEM_ACTS)) &&
           (a->lse = mem_try_alloc(DEV_CUDA, (size_t)B * H * N * 4, MEM_ACTS)) &&
           (a->dq = mem_try_alloc(DEV_CUDA, n * es, MEM_GRADS)) && (a->dk = mem_try_alloc(DEV_CUDA, n * es, MEM_GRADS)) &&
           (a->dv = mem_try_alloc(DEV_CUDA, n * es, MEM_GRADS)) &&
           (a->workspace = mem_try_alloc(DEV_CUDA, flash_bwd_workspace_bytes(a), MEM_WORKSPACE));
}

static void free_ctx(ctx_t* c) {
    attn_args_t* a = &c->a;
    void* ps[] = {(void*)a->q, (void*)a->k, (void*)a->v, (void*)a->dout, a->o, a->lse, a->dq, a->dk, a->dv,
                  a->workspace, c->S, c->P};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) mem_free(ps[i]);
    cublasHandle_t h = c->h;
    memset(c, 0, sizeof *c);
    c->h = h;
}

static double causal_matmul_flops(int B, int H, int N, int d, int causal) {
    return 2.0 * B * H * (double)N * N * d / (causal ? 2.0 : 1.0);
}

static void write_table(table_t* t, const char* csv) {
    table_print_md(t, stdout);
    table_write_csv(t, csv);
    char json[512];
    snprintf(json, sizeof json, "%.*s.json", (int)(strlen(csv) - 4), csv);
    table_write_json(t, json);
}

static void sweep(cublasHandle_t h, int B, int H, const int64_t* Ns, int nN, const int64_t* ds, int nd,
                  const char* dtypes, int causal, int f32_max_N, int naive_max_N, const char* csv) {
    const char* hdr[] = {"dtype", "d", "N", "kernel", "fwd ms", "bwd ms", "fwd+bwd ms",
                         "fwd+bwd TFLOP/s", "naive fwd+bwd ms"};
    char title[256];
    snprintf(title, sizeof title, "flash attention forward + backward, batch %d, %d heads, %s", B, H,
             causal ? "causal" : "non-causal");
    table_t* t = table_new(title, 9, hdr);
    for (int pass = 0; pass < 2; pass++) {
        const dtype_t dt = pass == 0 ? DT_BF16 : DT_F32;
        if (!strstr(dtypes, dtype_name(dt))) continue;
        for (int di = 0; di < nd; di++)
            for (int ni = 0; ni < nN; ni++) {
                const int N = (int)Ns[ni], d = (int)ds[di];
                if (dt == DT_F32 && N > f32_max_N) continue;
                ctx_t c = {0};
                c.h = h;
                const int ok = make_ctx(&c, dt, B, H, N, d, causal);
                double fwd = 0, bwd = 0, fb = 0, nv = 0;
                if (ok) {
                    fwd = time_ms(run_fwd, &c, NULL);
                    bwd = time_ms(run_bwd, &c, NULL);
                    fb = time_ms(run_fwd_bwd, &c, NULL);
                    const size_t nss = (size_t)B * H * N * N;
                    if (dt == DT_F32 && N <= naive_max_N && (c.S = mem_try_alloc(DEV_CUDA, nss * 4, MEM_WORKSPACE)) &&
                        (c.P = mem_try_alloc(DEV_CUDA, nss * 4, MEM_ACTS)))
                        nv = time_ms(run_naive_fwd_bwd, &c, NULL);
                }
                const double flops = 7.0 * causal_matmul_flops(B, H, N, d, causal);  // fwd 2 + bwd 5
                table_row(t);
                table_cell(t, "%s", dtype_name(dt));
                table_cell(t, "%d", d);
                table_cell(t, "%d", N);
                table_cell(t, "%s", flash_bwd_kernel_name(&c.a));
                if (ok) {
                    table_cell(t, "%.4f", fwd);
                    table_cell(t, "%.4f", bwd);
                    table_cell(t, "%.4f", fb);
                    table_cell(t, "%.1f", flops / (fb * 1e-3) / 1e12);
                } else {
                    for (int i = 0; i < 4; i++) table_cell(t, "OOM");
                }
                if (nv > 0) table_cell(t, "%.4f", nv);
                else table_cell(t, "%s", dt == DT_BF16 ? "n/a" : (N > naive_max_N ? "skipped" : "OOM"));
                fprintf(stderr, "  %s d %d N %d: fwd %.4f bwd %.4f fwd+bwd %.4f naive %.4f ms\n",
                        dtype_name(dt), d, N, fwd, bwd, fb, nv);
                table_write_csv(t, csv);  // after every point: a run cut short keeps what it measured
                free_ctx(&c);
            }
    }
    write_table(t, csv);
    table_free(t);
}

static void leaderboard(cublasHandle_t h, int reps, double db_warmup_ms, double db_rep_ms,
                        const char* csv) {
    const int B = 1, H = 16, N = 16384, d = 64;
    ctx_t c = {0};
    c.h = h;
    if (!make_ctx(&c, DT_BF16, B, H, N, d, 1)) DIE("leaderboard: out of GPU memory");
    g_reps = reps;
    g_budget_ms = 1e9;  // all the reps asked for
    double mn[3];
    const double fwd = time_ms(run_fwd, &c, &mn[0]), bwd = time_ms(run_bwd, &c, &mn[1]);
    const double fb = time_ms(run_fwd_bwd, &c, &mn[2]);
    const char* hdr[] = {"what", "median ms", "min ms", "TFLOP/s (median)"};
    table_t* t = table_new("leaderboard: batch 1, 16 heads, N 16384, d 64, bf16, causal", 4, hdr);
    const double m = causal_matmul_flops(B, H, N, d, 1);
    // The names are the dispatch's (the row of its table that ran).
    char nf[128], nb[160], nfb[256];
    snprintf(nf, sizeof nf, "forward (stage 03: %s)", flash_fwd_kernel_name(&c.a));
    snprintf(nb, sizeof nb, "backward, flash_backward_cuda: %s", flash_bwd_kernel_name(&c.a));
    snprintf(nfb, sizeof nfb, "forward + backward (%s; %s)", flash_fwd_kernel_name(&c.a), flash_bwd_kernel_name(&c.a));
    const char* names[3] = {nf, nb, nfb};
    const double ms[3] = {fwd, bwd, fb}, fl[3] = {2 * m, 5 * m, 7 * m};
    for (int i = 0; i < 3; i++) {
        table_row(t);
        table_cell(t, "%s", names[i]);
        table_cell(t, "%.3f", ms[i]);
        table_cell(t, "%.3f", mn[i]);
        table_cell(t, "%.1f", fl[i] / (ms[i] * 1e-3) / 1e12);
    }
    if (db_rep_ms > 0) {
        // The leaderboard's statistic on the same forward + backward: a mean over ~10 s of runs,
        // so one slow run moves it more than it moves our median.
        const dobench_result_t r = dobench_gpu(run_fwd_bwd, &c, db_warmup_ms, db_rep_ms, DOBENCH_MEAN);
        char nd[256];
        snprintf(nd, sizeof nd, "forward + backward, do_bench statistic: mean %.3f ms (%d runs in rep %g ms after %d)",
                 r.value, r.n_repeat, db_rep_ms, r.n_warmup);
        table_row(t);
        table_cell(t, "%s", nd);
        table_cell(t, "%.3f", r.median);
        table_cell(t, "%.3f", r.min);
        table_cell(t, "%.1f", 7 * m / (r.median * 1e-3) / 1e12);
        printf("# do_bench statistic (triton.testing.do_bench(fn, rep=%g, warmup=%g), return_mode mean): "
               "%.3f ms mean of %d runs (median %.3f, min %.3f; estimate %.3f ms per run incl. the cache clear)\n",
               db_rep_ms, db_warmup_ms, r.value, r.n_repeat, r.median, r.min, r.estimate_ms);
    }
    write_table(t, csv);
    table_free(t);

    free_ctx(&c);
}

int main(int argc, char** argv) {
    const char *mode = NULL, *Ns_s = NULL, *ds_s = NULL, *dtypes = NULL, *csv = NULL, *fwd_variants = NULL;
    int B = 0, H = 0, causal = 0, f32_max_N = 0, naive_max_N = 0, lb_reps = 0;
    double db_rep_ms = 0, db_warmup_ms = 0;
    cli_opt_t opts[] = {
        {"mode", CLI_CHOICE, &mode, "sweep", "what to time", "sweep|leaderboard"},
        {"N", CLI_STR, &Ns_s, "128,256,512,1024,2048,4096,8192,16384,32768,65536", "sequence lengths (comma list)",
         NULL},
        {"d", CLI_STR, &ds_s, "16,32,64,128", "head dims (comma list)", NULL},
        {"dtype", CLI_STR, &dtypes, "bf16,f32", "dtypes (comma list of bf16, f32)", NULL},
        {"B", CLI_INT, &B, "1", "batch", NULL},
        {"H", CLI_INT, &H, "16", "heads", NULL},
        {"causal", CLI_INT, &causal, "1", "1 causal, 0 not", NULL},
        {"f32-max-N", CLI_INT, &f32_max_N, "8192", "skip fp32 points above this N (the SIMT path is slow)", NULL},
        {"naive-max-N", CLI_INT, &naive_max_N, "8192", "skip the naive attention above this N", NULL},
        {"reps", CLI_INT, &g_reps, "20", "timed runs per point (median; fewer if one run is slow)", NULL},
        {"warmup", CLI_INT, &g_warmup, "3", "untimed runs first", NULL},
        {"budget-ms", CLI_DOUBLE, &g_budget_ms, "1000", "cap on the timed ms per measurement (>= 3 runs)", NULL},
        {"lb-reps", CLI_INT, &lb_reps, "100", "leaderboard: timed runs (median)", NULL},
        {"dobench-rep-ms", CLI_DOUBLE, &db_rep_ms, "10000",
         "leaderboard: triton do_bench's rep (ms of timed runs; the course uses 10000); 0: skip that row", NULL},
        {"dobench-warmup-ms", CLI_DOUBLE, &db_warmup_ms, "1000", "leaderboard: triton do_bench's warmup (ms)", NULL},
        {"fwd-variants", CLI_STR, &fwd_variants, "",
         "stage 03's bf16 forward variant per head dim, e.g. 64:12,128:8 (03's bench --scan-variants lists them); "
         "empty: the defaults", NULL},
        {"csv", CLI_STR, &csv, "", "CSV path (JSON beside it); empty: results/04_<mode>.csv", NULL},
    };
    cli_parse(argc, argv, "Stage 04 benchmarks: flash backward sweep and the leaderboard point.", opts,
              CLI_COUNT(opts));
    // Every flag is checked before the GPU is asked for: a typo is named as such on
    // any machine, not hidden behind "needs a CUDA GPU".
    if (g_reps < 1 || g_warmup < 1 || lb_reps < 3) fail("--reps and --warmup must be >= 1, --lb-reps >= 3");
    if (B < 1 || H < 1) fail("--B and --H must be >= 1 (got %d, %d)", B, H);
    if ((double)B * H > 2147483647.0) fail("--B x --H = %.0f is more than 2^31 - 1 heads", (double)B * H);
    if (causal != 0 && causal != 1) fail("--causal must be 1 (causal) or 0 (not), got %d", causal);
    if (!(g_budget_ms >= 0)) fail("--budget-ms must be >= 0 (0: no cap), got %g", g_budget_ms);
    if (f32_max_N < 0 || naive_max_N < 0)
        fail("--f32-max-N and --naive-max-N must be >= 0 (got %d, %d)", f32_max_N, naive_max_N);
    if (!(db_rep_ms >= 0) || !(db_warmup_ms >= 0) || !isfinite(db_rep_ms) || !isfinite(db_warmup_ms))
        fail("--dobench-rep-ms and --dobench-warmup-ms must be finite and >= 0 (got %g, %g)", db_rep_ms, db_warmup_ms);
    char err[512];
    if (choice_list_check("dtype", dtypes, "bf16|f32", err, sizeof err) != 0) fail("%s", err);
    if (flash_fwd_select_variants(fwd_variants, NULL, err, sizeof err) != 0) fail("--fwd-variants: %s", err);
    int64_t Ns[32], ds[8];
    const int nN = parse_size_list(Ns_s, Ns, 32), nd = parse_size_list(ds_s, ds, 8);
    if (nN < 1) fail("--N: not a comma list of sizes: '%s'", Ns_s);
    if (nd < 1) fail("--d: not a comma list of head dims: '%s'", ds_s);
    for (int i = 0; i < nd; i++)
        if (ds[i] != 16 && ds[i] != 32 && ds[i] != 64 && ds[i] != 128)
            fail("--d: head dim %lld not supported (allowed: 16, 32, 64, 128)", (long long)ds[i]);
    for (int i = 0; i < nN; i++)
        if (Ns[i] < 1 || Ns[i] > (1 << 20)) fail("--N: %lld out of range (1 .. 1M)", (long long)Ns[i]);
    char path[512];
    if (!csv[0]) {
        snprintf(path, sizeof path, "results/04_%s.csv", mode);
        csv = path;
    }
    {
        // --csv ends in .csv (the JSON goes beside it), in a place that can take it.
        const size_t n = strlen(csv);
        if (n < 5 || strcmp(csv + n - 4, ".csv") != 0) fail("--csv %s: the name must end in .csv (the JSON goes beside it)", csv);
        char dir[512];
        const char* slash = strrchr(csv, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else snprintf(dir, sizeof dir, "%.*s", slash == csv ? 1 : (int)(slash - csv), csv);
        if (dir_check_writable(dir, err, sizeof err) != 0) fail("--csv %s: %s", csv, err);
    }
    gpu_require("bench");
    gpu_info_t gi;
    if (gpu_info(0, &gi) == 0) printf("# GPU: %s\n", gi.name);
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    if (strcmp(mode, "leaderboard") == 0) leaderboard(h, lb_reps, db_warmup_ms, db_rep_ms, csv);
    else sweep(h, B, H, Ns, nN, ds, nd, dtypes, causal, f32_max_N, naive_max_N, csv);
    CUBLAS_CHECK(cublasDestroy(h));
    return 0;
}
