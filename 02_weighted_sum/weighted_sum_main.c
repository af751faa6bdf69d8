// weighted_sum: runs y = (x * w).sum(-1) and its backward once, on random data or on .npy
// inputs, and writes y, grad_x, grad_w as .npy files.
//
//   build/02_weighted_sum/weighted_sum --rows 1000 --d 37 --dtype bf16 --check
//   build/02_weighted_sum/weighted_sum --x x.npy --w w.npy --grad-y gy.npy --out outdir
//
// .npy inputs: x [..., D] float32 ('<f4') or bf16 bits ('<u2'); w [D] and grad_y (x's shape
// without D) of the same dtype. Without --grad-y, grad_y is all ones (what y.sum().backward()
// would pass). --check also runs the CPU reference and exits 1 if the results disagree.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "02_weighted_sum/weighted_sum.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/npy.h"
#include "common/rng.h"

static tensor_t random_tensor(dtype_t dt, int rank, const int64_t* shape, rng_t* rng) {
    tensor_t f = tensor_alloc(DEV_CPU, DT_F32, rank, shape, MEM_OTHER);
    rng_fill_uniform(rng, (float*)f.data, (size_t)tensor_numel(&f), -1.0f, 1.0f);
    if (dt == DT_F32) return f;
    tensor_t b = tensor_alloc(DEV_CPU, DT_BF16, rank, shape, MEM_OTHER);
    bf16_from_f32_array((uint16_t*)b.data, (const float*)f.data, (size_t)tensor_numel(&f));
    tensor_free(&f);
    return b;
}

// Largest |a - b| over two tensors of the same shape (both widened to f32 on the host), and
// the largest |b| (the scale the error is judged against).
static double max_err(const tensor_t* a, const tensor_t* b, double* scale) {
    tensor_t fa = tensor_to_host_f32(a), fb = tensor_to_host_f32(b);
    const float* pa = (const float*)fa.data;
    const float* pb = (const float*)fb.data;
    double m = 0.0, s = 0.0;
    for (int64_t i = 0; i < tensor_numel(&fa); i++) {
        const double e = fabs((double)pa[i] - (double)pb[i]);
        m = (e > m || isnan(e)) ? e : m;
        s = fabs((double)pb[i]) > s ? fabs((double)pb[i]) : s;
    }
    tensor_free(&fa), tensor_free(&fb);
    *scale = s;
    return m;
}

int main(int argc, char** argv) {
    const char *xp, *wp, *gyp, *dtype_s, *device_s, *mode_s, *outdir;
    int64_t rows, d;
    int seed, rows_tile, d_tile, check;
    cli_opt_t opts[] = {
        {"x", CLI_STR, &xp, "", "x as .npy [..., D] (f32 or bf16 bits as <u2); empty: random", NULL},
        {"w", CLI_STR, &wp, "", "w as .npy [D] (needed with --x)", NULL},
        {"grad-y", CLI_STR, &gyp, "", "grad_y as .npy, x's shape without D; empty: ones", NULL},
        {"rows", CLI_SIZE, &rows, "1000", "ROWS of random x (K/M suffixes allowed)", NULL},
        {"d", CLI_SIZE, &d, "37", "D of random x", NULL},
        {"dtype", CLI_CHOICE, &dtype_s, "f32", "dtype of random inputs", "f32|bf16"},
        {"seed", CLI_INT, &seed, "0", "seed of random inputs", NULL},
        {"device", CLI_CHOICE, &device_s, "auto", "where to run (auto: cuda if a GPU is present)",
         "auto|cuda|cpu"},
        {"rows-tile", CLI_INT, &rows_tile, "0", "ROWS_TILE (0: default)", NULL},
        {"d-tile", CLI_INT, &d_tile, "0", "D_TILE (0: default; " WS_D_TILE_CHOICES ")", NULL},
        {"grad-w", CLI_CHOICE, &mode_s, "partials", "how grad_w's row sum is finished",
         "partials|atomic"},
        {"out", CLI_STR, &outdir, "", "directory for y.npy, grad_x.npy, grad_w.npy (empty: none)",
         NULL},
        {"check", CLI_FLAG, &check, "0", "compare with the CPU reference; exit 1 if they differ",
         NULL},
    };
    cli_parse(argc, argv,
              "y = (x * w).sum(-1) and its backward, on random data or .npy files; writes .npy",
              opts, CLI_COUNT(opts));

    // ---- every flag first, then the GPU, the output place, the inputs
    char err[512];
    if (rows_tile < 0) fail("--rows-tile must be >= 0 (0: default), got %d", rows_tile);
    ws_config_t cfg = ws_config_default();
    cfg.rows_tile = rows_tile;
    cfg.d_tile = d_tile;
    cfg.gradw_mode = strcmp(mode_s, "atomic") ? WS_GRADW_PARTIALS : WS_GRADW_ATOMIC;
    {
        ws_plan_t p;  // the tile flags alone (sizes come later): ROWS_TILE and D_TILE in range
        if (ws_plan_forward(1, 1, DT_F32, &cfg, &p, err, sizeof err)) fail("%s", err);
    }
    if (xp[0] && !wp[0]) fail("--w is required with --x (w must be a .npy of shape [D])");
    if (!xp[0] && (wp[0] || gyp[0])) fail("--w and --grad-y need --x (or give none of them for random data)");
    if (!xp[0] && (rows < 1 || d < 1))
        fail("--rows and --d must be at least 1 (got %lld and %lld)", (long long)rows, (long long)d);
    const dtype_t rdt = strcmp(dtype_s, "bf16") ? DT_F32 : DT_BF16;
    device_t dev = DEV_CPU;
    if (!strcmp(device_s, "cuda") || (!strcmp(device_s, "auto") && gpu_count() > 0)) dev = DEV_CUDA;
    if (dev == DEV_CUDA) gpu_require("weighted_sum --device cuda");
    if (!xp[0]) {
        // Random x: sizes that can never fit are bad input, said before anything is allocated.
        // Host: x drawn in f32 (and rounded), grad_x, and with --check the reference's copies.
        const double n = (double)rows * (double)d, es = (double)dtype_size(rdt);
        const double host = n * (4.0 + es + (dev == DEV_CPU ? es : 0.0) + (check ? es + 8.0 : 0.0));
        if (!mem_fits(DEV_CPU, host, err, sizeof err))
            fail("--rows %lld --d %lld: x is %.3g elements; the run %s", (long long)rows, (long long)d, n, err);
        if (dev == DEV_CUDA && !mem_fits(DEV_CUDA, 2.0 * n * es, err, sizeof err))
            fail("--rows %lld --d %lld: x and grad_x on the GPU %s", (long long)rows, (long long)d, err);
    }
    // The output place before the work: y, grad_x and grad_w appear together, or none of them.
    outset_t* outs = NULL;
    if (outdir[0] && !(outs = outset_open(outdir, err, sizeof err))) fail("--out %s: %s", outdir, err);

    // ---- inputs, on the host
    tensor_t x, w, gy;
    if (xp[0]) {
        x = npy_load(xp, -1, -1, NULL);
        if (x.dtype != DT_F32 && x.dtype != DT_BF16)
            fail("%s: dtype %s is not supported (float32 '<f4', or bf16 bits as uint16 '<u2')", xp,
                 dtype_name(x.dtype));
        if (x.rank < 1) fail("%s: x must have at least one axis [..., D], got a scalar", xp);
        w = npy_load(wp, -1, -1, NULL);
        if (gyp[0]) {
            gy = npy_load(gyp, -1, -1, NULL);
        } else {
            gy = tensor_alloc(DEV_CPU, x.dtype, x.rank - 1, x.shape, MEM_OTHER);
            for (int64_t i = 0; i < tensor_numel(&gy); i++) {
                if (x.dtype == DT_F32) ((float*)gy.data)[i] = 1.0f;
                else ((uint16_t*)gy.data)[i] = bf16_from_f32(1.0f);
            }
        }
    } else {
        rng_t rng = rng_make((uint64_t)seed);
        const int64_t xs[2] = {rows, d};
        x = random_tensor(rdt, 2, xs, &rng);
        w = random_tensor(rdt, 1, &d, &rng);
        gy = random_tensor(rdt, 1, &rows, &rng);
    }

    // ---- outputs on the run device
    const int64_t D = x.shape[x.rank - 1];
    tensor_t xd = tensor_to(&x, dev), wd = tensor_to(&w, dev), gyd = tensor_to(&gy, dev);
    tensor_t y = tensor_alloc(dev, x.dtype, x.rank - 1, x.shape, MEM_OTHER);
    tensor_t gx = tensor_alloc(dev, x.dtype, x.rank, x.shape, MEM_OTHER);
    tensor_t gw = tensor_alloc(dev, x.dtype, 1, &D, MEM_OTHER);
    if (weighted_sum_forward(&xd, &wd, &y, &cfg, err, sizeof err)) fail("%s", err);
    if (weighted_sum_backward(&xd, &wd, &gyd, &gx, &gw, &cfg, err, sizeof err)) fail("%s", err);
    if (dev == DEV_CUDA) CUDA_CHECK(cudaDeviceSynchronize());

    char sh[128];
    printf("x %s %s on %s, grad_w by %s\n", tensor_shape_str(&x, sh, sizeof sh),
           dtype_name(x.dtype), device_name(dev), mode_s);
    tensor_t yh = tensor_to_host_f32(&y), gwh = tensor_to_host_f32(&gw);
    printf("y[0] = %.6g   grad_w[0] = %.6g\n", ((float*)yh.data)[0], ((float*)gwh.data)[0]);
    tensor_free(&yh), tensor_free(&gwh);

    int status = 0;
    if (check) {
        // The reference on the host copies (bf16 is widened, computed, rounded back).
        tensor_t ry = tensor_alloc(DEV_CPU, x.dtype, x.rank - 1, x.shape, MEM_OTHER);
        tensor_t rgx = tensor_alloc(DEV_CPU, x.dtype, x.rank, x.shape, MEM_OTHER);
        tensor_t rgw = tensor_alloc(DEV_CPU, x.dtype, 1, &D, MEM_OTHER);
        if (weighted_sum_forward(&x, &w, &ry, NULL, err, sizeof err)) fail("%s", err);
        if (weighted_sum_backward(&x, &w, &gy, &rgx, &rgw, NULL, err, sizeof err)) fail("%s", err);
        const char* names[3] = {"y", "grad_x", "grad_w"};
        tensor_t* got[3] = {&y, &gx, &gw};
        tensor_t* want[3] = {&ry, &rgx, &rgw};
        // Same tolerance as the tests: fp32 sums in another order (or one bf16 rounding).
        const double rtol = x.dtype == DT_F32 ? 1e-5 : 1e-2;
        for (int i = 0; i < 3; i++) {
            double scale, e = max_err(got[i], want[i], &scale);
            const int ok = e <= rtol * (scale + 1.0);
            printf("check %-6s max |err| %.3g (scale %.3g) %s\n", names[i], e, scale,
                   ok ? "ok" : "FAILED");
            if (!ok) status = 1;
        }
        tensor_free(&ry), tensor_free(&rgx), tensor_free(&rgw);
    }

    if (outs) {
        npy_save(outset_path(outs, "y.npy"), &y);  // a failed write dies: the set is removed
        npy_save(outset_path(outs, "grad_x.npy"), &gx);
        npy_save(outset_path(outs, "grad_w.npy"), &gw);
        if (outset_commit(outs, err, sizeof err) != 0) fail("--out %s: %s", outdir, err);
        printf("wrote y.npy, grad_x.npy, grad_w.npy to %s\n", outdir);
    }
    tensor_free(&x), tensor_free(&w), tensor_free(&gy), tensor_free(&xd), tensor_free(&wd);
    tensor_free(&gyd), tensor_free(&y), tensor_free(&gx), tensor_free(&gw);
    return status;
}
