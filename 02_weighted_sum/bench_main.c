// bench: forward and backward of the weighted sum over sizes from L2-resident to several GB,
// in GB/s, beside the GPU's own device-to-device copy bandwidth measured in the same run.
//
// Method (the same in bench_torch.py): every repetition first overwrites an L2-sized buffer
// (gpu_flush_l2, so no repetition finds its input in L2), then records a CUDA event, launches,
// records another; the median over --reps repetitions after --warmup untimed ones is reported.
// Bytes counted (README, "Bandwidth"): each input read once and each output written once,
//   forward  (ROWS*D + D + ROWS) * elt       read x, w; write y
//   backward (2*ROWS*D + ROWS + 2*D) * elt   read x, grad_y, w; write grad_x, grad_w
//   copy     2 * |x|                         cudaMemcpy of x's bytes: read + write
// Before timing, each size is checked against the CPU reference (up to --check-max elements).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "02_weighted_sum/weighted_sum.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/stats.h"
#include "common/table.h"
#include "common/timer.h"

typedef enum { OP_COPY, OP_FWD, OP_BWD, OP_BWD_ATOMIC } op_t;

typedef struct {
    dtype_t dt;
    int64_t ROWS, D;
    void *x, *w, *gy, *y, *gx, *gw, *ws, *copy_dst;  // device buffers
    ws_plan_t fplan, bplan;
} bufs_t;

static int g_reps, g_warmup;

static void run_op(bufs_t* b, op_t op) {
    const size_t es = dtype_size(b->dt);
    switch (op) {
        case OP_COPY:
            CUDA_CHECK(cudaMemcpyAsync(b->copy_dst, b->x, (size_t)(b->ROWS * b->D) * es,
                                       cudaMemcpyDeviceToDevice, 0));
            break;
        case OP_FWD:
            ws_forward_cuda(b->dt, b->x, b->D, b->w, b->y, b->ROWS, b->D, &b->fplan, 0);
            break;
        case OP_BWD:
        case OP_BWD_ATOMIC:
            ws_backward_cuda(b->dt, b->x, b->D, b->w, b->gy, b->gx, b->D, b->gw, b->ROWS, b->D,
                             &b->bplan, op == OP_BWD ? WS_GRADW_PARTIALS : WS_GRADW_ATOMIC, b->ws,
                             0);
            break;
    }
}

// Median milliseconds of one op over `reps` cold-L2 repetitions.
typedef struct {
    bufs_t* b;
    op_t op;
} op_call_t;
static void run_op_call(void* p) {
    const op_call_t* c = p;
    run_op(c->b, c->op);
}
static double time_op(bufs_t* b, op_t op, int reps) {
    op_call_t c = {b, op};
    return gpu_time_fn(run_op_call, &c, g_warmup, reps, 0.0).median;
}

static double fwd_bytes(int64_t R, int64_t D, size_t es) { return (double)(R * D + D + R) * es; }
static double bwd_bytes(int64_t R, int64_t D, size_t es) {
    return (double)(2 * R * D + R + 2 * D) * es;
}

static float* to_host_f32(const void* d, size_t n, dtype_t dt) {
    void* raw = malloc(n * dtype_size(dt));
    float* f = malloc(n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(raw, d, n * dtype_size(dt), cudaMemcpyDeviceToHost));
    if (dt == DT_F32) memcpy(f, raw, n * sizeof(float));
    else f32_from_bf16_array(f, (const uint16_t*)raw, n);
    free(raw);
    return f;
}

// |got - want| <= rtol * (|want| + max|want| * 1e-3)? Same tolerances as the tests.
static int close_enough(const float* got, const float* want, size_t n, double rtol) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(want[i]) > m ? fabs(want[i]) : m;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= rtol * (fabs(want[i]) + m + 1.0))) return 0;
    return 1;
}

// Runs forward and both backward variants once and compares with the reference. 1 = ok.
static int check(bufs_t* b) {
    const size_t n = (size_t)(b->ROWS * b->D), R = (size_t)b->ROWS, D = (size_t)b->D;
    float* x = to_host_f32(b->x, n, b->dt);
    float* w = to_host_f32(b->w, D, b->dt);
    float* gy = to_host_f32(b->gy, R, b->dt);
    float* ry = malloc(R * sizeof(float));
    float* rgx = malloc(n * sizeof(float));
    float* rgw = malloc(D * sizeof(float));
    weighted_sum_forward_ref(x, b->D, w, ry, b->ROWS, b->D);
    weighted_sum_backward_ref(x, b->D, w, gy, rgx, b->D, rgw, b->ROWS, b->D);
    const double rtol = b->dt == DT_F32 ? 1e-5 : 1.0 / 128;
    int ok = 1;
    for (int v = 0; v < 2; v++) {
        CUDA_CHECK(cudaMemset(b->y, 0xFF, R * dtype_size(b->dt)));
        CUDA_CHECK(cudaMemset(b->gx, 0xFF, n * dtype_size(b->dt)));
        CUDA_CHECK(cudaMemset(b->gw, 0xFF, D * dtype_size(b->dt)));
        run_op(b, OP_FWD);
        run_op(b, v == 0 ? OP_BWD : OP_BWD_ATOMIC);
        float* y = to_host_f32(b->y, R, b->dt);
        float* gx = to_host_f32(b->gx, n, b->dt);
        float* gw = to_host_f32(b->gw, D, b->dt);
        ok = ok && close_enough(y, ry, R, rtol) && close_enough(gx, rgx, n, rtol) &&
             close_enough(gw, rgw, D, rtol);
        free(y), free(gx), free(gw);
    }
    free(x), free(w), free(gy), free(ry), free(rgx), free(rgw);
    return ok;
}

static void free_bufs(bufs_t* b) {
    void* ps[] = {b->x, b->w, b->gy, b->y, b->gx, b->gw, b->ws, b->copy_dst};
    for (int i = 0; i < 8; i++) mem_free(ps[i]);
    memset(b, 0, sizeof *b);
}

// Allocates and fills everything for one size; 0 on out-of-memory (nothing left allocated).
static int alloc_bufs(bufs_t* b, dtype_t dt, int64_t R, int64_t D, const ws_config_t* fcfg,
                      const ws_config_t* bcfg) {
    char err[256];
    memset(b, 0, sizeof *b);
    b->dt = dt, b->ROWS = R, b->D = D;
    if (ws_plan_forward(R, D, dt, fcfg, &b->fplan, err, sizeof err) ||
        ws_plan_backward(R, D, dt, bcfg, ws_sm_count(), &b->bplan, err, sizeof err))
        fail("%s", err);
    const size_t es = dtype_size(dt), nx = (size_t)(R * D) * es;
    size_t wsb = ws_workspace_bytes(&b->bplan, D, dt, WS_GRADW_PARTIALS);
    const size_t wsa = ws_workspace_bytes(&b->bplan, D, dt, WS_GRADW_ATOMIC);
    wsb = wsb > wsa ? wsb : wsa;
    void** ps[] = {&b->x, &b->gx, &b->copy_dst, &b->w, &b->gw, &b->gy, &b->y, &b->ws};
    const size_t sz[] = {nx, nx, nx, (size_t)D * es, (size_t)D * es, (size_t)R * es,
                         (size_t)R * es, wsb ? wsb : 16};
    for (int i = 0; i < 8; i++) {
        *ps[i] = mem_try_alloc(DEV_CUDA, sz[i], i == 7 ? MEM_WORKSPACE : MEM_OTHER);
        if (!*ps[i]) {
            free_bufs(b);
            return 0;
        }
    }
    ws_fill_uniform_cuda(dt, b->x, R * D, 1, -1.0f, 1.0f, 0);
    ws_fill_uniform_cuda(dt, b->w, D, 2, -1.0f, 1.0f, 0);
    ws_fill_uniform_cuda(dt, b->gy, R, 3, -1.0f, 1.0f, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    return 1;
}

int main(int argc, char** argv) {
    const char *rows_s, *dtype_s, *outdir;
    int64_t D, check_max, sweep_rows;
    cli_opt_t opts[] = {
        {"d", CLI_SIZE, &D, "1024", "D (length of w, last axis of x)", NULL},
        {"rows", CLI_STR, &rows_s, "256,1K,4K,16K,64K,256K,1M,2M", "ROWS values (comma list, K/M)",
         NULL},
        {"dtype", CLI_CHOICE, &dtype_s, "both", "dtypes to time", "f32|bf16|both"},
        {"reps", CLI_INT, &g_reps, "50", "timed repetitions per measurement (median reported)",
         NULL},
        {"warmup", CLI_INT, &g_warmup, "5", "untimed repetitions first", NULL},
        {"check-max", CLI_SIZE, &check_max, "16M",
         "check against the CPU reference when ROWS*D is at most this", NULL},
        {"sweep-rows", CLI_SIZE, &sweep_rows, "1M",
         "ROWS at which to sweep ROWS_TILE x D_TILE (0: no sweep)", NULL},
        {"out", CLI_STR, &outdir, "results/02_weighted_sum", "directory for CSV/JSON", NULL},
    };
    cli_parse(argc, argv, "weighted sum: forward/backward GB/s vs device copy bandwidth", opts,
              CLI_COUNT(opts));
    // Every flag is checked before the GPU is asked for: a typo is named as such on
    // any machine, not hidden behind "needs a CUDA GPU".
    int64_t rows_list[64];
    const int nrows = parse_size_list(rows_s, rows_list, 64);
    if (nrows <= 0) fail("--rows: cannot parse \"%s\" (a comma list like 256,1K,1M, at most 64 sizes)", rows_s);
    if (D < 1) fail("--d must be at least 1");
    if (g_reps < 1 || g_warmup < 0) fail("--reps must be >= 1 and --warmup >= 0");
    char err[512];
    for (int i = 0; i < nrows; i++) {
        ws_plan_t p;
        if (rows_list[i] < 1) fail("--rows: %lld is not a row count (each must be >= 1)", (long long)rows_list[i]);
        if (ws_plan_forward(rows_list[i], D, DT_F32, NULL, &p, err, sizeof err))
            fail("--rows %lld --d %lld: %s", (long long)rows_list[i], (long long)D, err);
    }
    if (dir_check_writable(outdir, err, sizeof err) != 0) fail("--out %s: %s", outdir, err);
    gpu_require("bench (the weighted-sum benchmark)");
    gpu_info_t gi;
    gpu_info(0, &gi);
    printf("# weighted sum benchmark on %s (%d SMs, L2 %d MiB); D = %lld; median of %d reps after "
           "%d warm-up, L2 flushed before each\n", gi.name, gi.sm_count, gi.l2_bytes >> 20,
           (long long)D, g_reps, g_warmup);
    if (mkdir_p(outdir)) fail("--out %s: cannot create the directory: %s", outdir, strerror(errno));

    const dtype_t all[2] = {DT_F32, DT_BF16};
    const int dt0 = !strcmp(dtype_s, "bf16") ? 1 : 0, dt1 = !strcmp(dtype_s, "f32") ? 1 : 2;
    table_t* t = table_new("weighted sum (ours, CUDA): GB/s = bytes read + written / median time",
                           15, (const char*[]){"dtype", "ROWS", "D", "x MiB", "copy GB/s",
                                               "fwd us", "fwd GB/s", "fwd %copy", "bwd us",
                                               "bwd GB/s", "bwd %copy", "bwd-atomic us",
                                               "bwd-atomic GB/s", "bwd ROWS_TILE", "check"});
    int failed = 0;
    for (int k = dt0; k < dt1; k++) {
        const dtype_t dt = all[k];
        const size_t es = dtype_size(dt);
        for (int i = 0; i < nrows; i++) {
            const int64_t R = rows_list[i];
            bufs_t b;
            table_row(t);
            table_cell(t, "%s", dtype_name(dt));
            table_cell(t, "%lld", (long long)R);
            table_cell(t, "%lld", (long long)D);
            table_cell(t, "%.1f", (double)(R * D) * es / 1048576.0);
            if (!alloc_bufs(&b, dt, R, D, NULL, NULL)) {
                for (int c = 0; c < 11; c++) table_cell(t, "OOM");
                continue;
            }
            const int checked = R * D <= check_max;
            const int ok = checked ? check(&b) : 1;
            failed |= !ok;
            const double tc = time_op(&b, OP_COPY, g_reps), tf = time_op(&b, OP_FWD, g_reps);
            const double tb = time_op(&b, OP_BWD, g_reps), ta = time_op(&b, OP_BWD_ATOMIC, g_reps);
            const double copy = 2.0 * (double)(R * D) * es / (tc * 1e6);
            const double gf = fwd_bytes(R, D, es) / (tf * 1e6), gb = bwd_bytes(R, D, es) / (tb * 1e6);
            table_cell(t, "%.0f", copy);
            table_cell(t, "%.1f", tf * 1e3);
            table_cell(t, "%.0f", gf);
            table_cell(t, "%.0f%%", 100.0 * gf / copy);
            table_cell(t, "%.1f", tb * 1e3);
            table_cell(t, "%.0f", gb);
            table_cell(t, "%.0f%%", 100.0 * gb / copy);
            table_cell(t, "%.1f", ta * 1e3);
            table_cell(t, "%.0f", bwd_bytes(R, D, es) / (ta * 1e6));
            table_cell(t, "%d", b.bplan.rows_tile);
            table_cell(t, "%s", !checked ? "-" : ok ? "ok" : "FAILED");
            free_bufs(&b);
        }
    }
    table_print_md(t, stdout);
    char path[1024];
    snprintf(path, sizeof path, "%s/cuda.csv", outdir);
    table_write_csv(t, path);
    snprintf(path, sizeof path, "%s/cuda.json", outdir);
    table_write_json(t, path);
    table_free(t);

    if (sweep_rows > 0) {
        // Tile sizes at one large size: which (ROWS_TILE, D_TILE) the defaults should be.
        table_t* s = table_new("tile sweep (ours, CUDA): GB/s and % of the copy bandwidth", 8,
                               (const char*[]){"dtype", "kernel", "ROWS", "ROWS_TILE", "D_TILE",
                                               "us", "GB/s", "%copy"});
        const int dts[4] = {128, 256, 512, 1024}, frt[3] = {8, 16, 32},
                  brt[5] = {0, 64, 128, 256, 512};
        for (int k = dt0; k < dt1; k++) {
            const dtype_t dt = all[k];
            const size_t es = dtype_size(dt);
            bufs_t b;
            if (!alloc_bufs(&b, dt, sweep_rows, D, NULL, NULL)) continue;
            const double copy =
                2.0 * (double)(sweep_rows * D) * es / (time_op(&b, OP_COPY, g_reps) * 1e6);
            for (int a = 0; a < 4; a++)
                for (int kind = 0; kind < 2; kind++)
                    for (int r = 0; r < (kind == 0 ? 3 : 5); r++) {
                        ws_config_t cfg = ws_config_default();
                        cfg.d_tile = dts[a];
                        cfg.rows_tile = kind == 0 ? frt[r] : brt[r];
                        char err[256];
                        if (kind == 0 &&
                            ws_plan_forward(sweep_rows, D, dt, &cfg, &b.fplan, err, sizeof err))
                            continue;
                        if (kind == 1 && ws_plan_backward(sweep_rows, D, dt, &cfg, ws_sm_count(),
                                                          &b.bplan, err, sizeof err))
                            continue;
                        if (kind == 1 && ws_workspace_bytes(&b.bplan, D, dt, WS_GRADW_PARTIALS) >
                                             ws_workspace_bytes(&b.bplan, D, dt, WS_GRADW_ATOMIC)) {
                            // A smaller ROWS_TILE than the default needs a larger partials buffer.
                            mem_free(b.ws);
                            b.ws = mem_alloc(DEV_CUDA,
                                             ws_workspace_bytes(&b.bplan, D, dt, WS_GRADW_PARTIALS),
                                             MEM_WORKSPACE);
                        }
                        const double ms = time_op(&b, kind == 0 ? OP_FWD : OP_BWD, g_reps);
                        const double gbs =
                            (kind == 0 ? fwd_bytes(sweep_rows, D, es) : bwd_bytes(sweep_rows, D, es)) /
                            (ms * 1e6);
                        table_row(s);
                        table_cell(s, "%s", dtype_name(dt));
                        table_cell(s, "%s", kind == 0 ? "forward" : "backward");
                        table_cell(s, "%lld", (long long)sweep_rows);
                        if (kind == 1 && cfg.rows_tile == 0)
                            table_cell(s, "auto (%d)", b.bplan.rows_tile);
                        else
                            table_cell(s, "%d", cfg.rows_tile);
                        table_cell(s, "%d", dts[a]);
                        table_cell(s, "%.1f", ms * 1e3);
                        table_cell(s, "%.0f", gbs);
                        table_cell(s, "%.0f%%", 100.0 * gbs / copy);
                    }
            free_bufs(&b);
        }
        printf("\n");
        table_print_md(s, stdout);
        snprintf(path, sizeof path, "%s/cuda_tiles.csv", outdir);
        table_write_csv(s, path);
        table_free(s);
    }
    if (failed) {
        fprintf(stderr, "bench: FAILED: a size disagreed with the CPU reference (see 'check')\n");
        return 1;
    }
    return 0;
}
