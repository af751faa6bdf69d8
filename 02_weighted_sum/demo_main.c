// demo: how the grid maps to the data (printed from the same tile plans the kernels use), then
// one small forward + backward on the GPU (or on the CPU reference when there is none) with its
// error against the reference. Finishes in well under a second on a CPU-only machine.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "02_weighted_sum/weighted_sum.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/gpu.h"
#include "common/rng.h"
#include "common/table.h"
#include "common/timer.h"

static char block_letter(int64_t k) {
    const char* s = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    return s[k % 62];
}

// One character per 16-byte vector (4 f32 columns) of a ROWS x D f32 input.
static void print_maps(int64_t ROWS, int64_t D, int rows_tile, int d_tile) {
    ws_config_t cfg = ws_config_default();
    cfg.rows_tile = rows_tile;
    cfg.d_tile = d_tile;
    ws_plan_t f, b;
    char err[256];
    if (ws_plan_forward(ROWS, D, DT_F32, &cfg, &f, err, sizeof err) ||
        ws_plan_backward(ROWS, D, DT_F32, &cfg, 132, &b, err, sizeof err))
        DIE("%s", err);
    const int VEC = ws_vec_elems(DT_F32, d_tile);
    printf("x is %lld x %lld f32; ROWS_TILE = %d, D_TILE = %d; one character = %d columns "
           "(one 16-byte load)\n\n", (long long)ROWS, (long long)D, rows_tile, d_tile, VEC);

    printf("forward: grid = %lld blocks (ceil(ROWS / ROWS_TILE)); block b owns rows "
           "[b*ROWS_TILE, (b+1)*ROWS_TILE),\nwarp w of it takes rows w, w+8, ...; each warp walks "
           "its row in %lld D tiles. Letter = block, digit = warp:\n", (long long)f.n_row_tiles,
           (long long)f.n_d_tiles);
    for (int64_t r = 0; r < ROWS; r++) {
        const int64_t blk = r / f.rows_tile, warp = (r % f.rows_tile) % (WS_THREADS / 32);
        printf("  row %2lld  %c%lld  ", (long long)r, block_letter(blk), (long long)warp);
        for (int64_t c = 0; c < D; c += VEC) {
            if (c % f.d_tile == 0 && c) putchar('|');
            putchar(block_letter(blk));
        }
        putchar('\n');
    }
    printf("  ('|' starts the next D tile: the same warp, one loop iteration later)\n\n");

    printf("backward: grid = %lld x %lld blocks (row tiles x D tiles); block (i, j) owns rows of "
           "row tile i and columns of D tile j,\nwrites grad_x there and one row of grad_w partial "
           "sums, partials[i, columns of j]. Letter = block:\n", (long long)b.n_row_tiles,
           (long long)b.n_d_tiles);
    for (int64_t r = 0; r < ROWS; r++) {
        printf("  row %2lld  ", (long long)r);
        for (int64_t c = 0; c < D; c += VEC)
            putchar(block_letter((c / b.d_tile) * b.n_row_tiles + r / b.rows_tile));
        putchar('\n');
    }
    const int64_t last_cols = D - (b.n_d_tiles - 1) * b.d_tile;
    const int64_t last_rows = ROWS - (b.n_row_tiles - 1) * b.rows_tile;
    printf("  boundaries: the last D tile has %lld of %d columns and the last row tile %lld of %d "
           "rows;\n  the threads beyond them load nothing and write nothing.\n", (long long)last_cols,
           b.d_tile, (long long)last_rows, b.rows_tile);
    printf("  partials buffer: [%lld, %lld] fp32, summed over its rows by a second kernel -> "
           "grad_w [%lld]\n\n", (long long)b.n_row_tiles, (long long)D, (long long)D);
}

static double max_err(const float* a, const float* b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (isnan(e)) return NAN;
        m = e > m ? e : m;
    }
    return m;
}

// The demo's largest example run: 2^28 elements of x (at most 6 GiB of host memory, 2 of GPU).
#define DEMO_MAX_ELEMENTS 268435456.0

int main(int argc, char** argv) {
    int64_t rows, d;
    cli_opt_t opts[] = {
        {"rows", CLI_SIZE, &rows, "4099", "ROWS of the example run", NULL},
        {"d", CLI_SIZE, &d, "1000", "D of the example run", NULL},
    };
    cli_parse(argc, argv, "weighted sum: the grid-to-data map, then a small checked run", opts,
              CLI_COUNT(opts));
    if (rows < 1 || d < 1) fail("--rows and --d must be at least 1");
    const device_t dev = gpu_count() > 0 ? DEV_CUDA : DEV_CPU;
    {
        // Sizes that cannot fit are bad input, said before anything is allocated. Per element of
        // x the host holds x, its f32 copy, the reference's grad_x, the widened result (and on
        // the CPU x and grad_x once more): at most 6 floats; the GPU holds x and grad_x.
        const double n = (double)rows * (double)d;
        // First a rule that is the same on every machine: the demo is a small run.
        if (n > DEMO_MAX_ELEMENTS)
            fail("--rows %lld --d %lld: %.3g elements; the demo runs at most 256M (ROWS x D <= 268435456; "
                 "weighted_sum takes larger sizes)", (long long)rows, (long long)d, n);
        char err[256];
        if (!mem_fits(DEV_CPU, 24.0 * n, err, sizeof err) || (dev == DEV_CUDA && !mem_fits(DEV_CUDA, 8.0 * n, err, sizeof err)))
            fail("--rows %lld --d %lld: %s", (long long)rows, (long long)d, err);
    }

    print_maps(20, 300, 8, 128);

    if (dev == DEV_CPU) printf("(no GPU: %s; running the CPU reference)\n\n", gpu_absent_reason());
    table_t* t = table_new("weighted sum: one forward + backward, max |error| vs the reference", 7,
                           (const char*[]){"dtype", "device", "ROWS x D", "y", "grad_x", "grad_w",
                                           "fwd+bwd ms"});
    const dtype_t dts[2] = {DT_F32, DT_BF16};
    for (int k = 0; k < 2; k++) {
        const dtype_t dt = dts[k];
        const int64_t xs[2] = {rows, d};
        rng_t rng = rng_make(2025);
        // Host inputs in f32, rounded to dt so that the reference sees what the kernels see.
        tensor_t hx[3];
        const int64_t* shp[3] = {xs, &d, &rows};
        const int rk[3] = {2, 1, 1};
        float* ref_in[3];
        for (int i = 0; i < 3; i++) {
            hx[i] = tensor_alloc(DEV_CPU, dt, rk[i], shp[i], MEM_OTHER);
            const size_t n = (size_t)tensor_numel(&hx[i]);
            ref_in[i] = malloc(n * sizeof(float));
            rng_fill_uniform(&rng, ref_in[i], n, -1.0f, 1.0f);
            if (dt == DT_F32) {
                memcpy(hx[i].data, ref_in[i], n * sizeof(float));
            } else {
                bf16_from_f32_array((uint16_t*)hx[i].data, ref_in[i], n);
                f32_from_bf16_array(ref_in[i], (const uint16_t*)hx[i].data, n);
            }
        }
        float* ry = malloc((size_t)rows * sizeof(float));
        float* rgx = malloc((size_t)(rows * d) * sizeof(float));
        float* rgw = malloc((size_t)d * sizeof(float));
        weighted_sum_forward_ref(ref_in[0], d, ref_in[1], ry, rows, d);
        weighted_sum_backward_ref(ref_in[0], d, ref_in[1], ref_in[2], rgx, d, rgw, rows, d);

        tensor_t x = tensor_to(&hx[0], dev), w = tensor_to(&hx[1], dev), gy = tensor_to(&hx[2], dev);
        tensor_t y = tensor_alloc(dev, dt, 1, &rows, MEM_OTHER);
        tensor_t gx = tensor_alloc(dev, dt, 2, xs, MEM_OTHER);
        tensor_t gw = tensor_alloc(dev, dt, 1, &d, MEM_OTHER);
        tensor_poison(&y), tensor_poison(&gx), tensor_poison(&gw);
        char err[256];
        const double t0 = time_now_s();
        if (weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err)) DIE("%s", err);
        if (weighted_sum_backward(&x, &w, &gy, &gx, &gw, NULL, err, sizeof err)) DIE("%s", err);
        if (dev == DEV_CUDA) CUDA_CHECK(cudaDeviceSynchronize());
        const double ms = (time_now_s() - t0) * 1e3;

        tensor_t fy = tensor_to_host_f32(&y), fgx = tensor_to_host_f32(&gx),
                 fgw = tensor_to_host_f32(&gw);
        table_row(t);
        table_cell(t, "%s", dtype_name(dt));
        table_cell(t, "%s", device_name(dev));
        table_cell(t, "%lld x %lld", (long long)rows, (long long)d);
        table_cell(t, "%.2e", max_err((float*)fy.data, ry, (size_t)rows));
        table_cell(t, "%.2e", max_err((float*)fgx.data, rgx, (size_t)(rows * d)));
        table_cell(t, "%.2e", max_err((float*)fgw.data, rgw, (size_t)d));
        table_cell(t, "%.2f", ms);
        for (int i = 0; i < 3; i++) tensor_free(&hx[i]), free(ref_in[i]);
        free(ry), free(rgx), free(rgw);
        tensor_free(&x), tensor_free(&w), tensor_free(&gy), tensor_free(&y), tensor_free(&gx);
        tensor_free(&gw), tensor_free(&fy), tensor_free(&fgx), tensor_free(&fgw);
    }
    table_print_md(t, stdout);
    printf("\n(the time includes the first launch; `make bench-02` times properly. bf16 errors are "
           "those of one rounding to 8 significant bits)\n");
    table_free(t);
    return 0;
}
