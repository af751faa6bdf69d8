// The CUDA kernels against the reference (and PyTorch's fixture): random shapes including
// ROWS = 1, D = 1, a prime number of rows, 3-D inputs, strided rows, every D_TILE, odd ROWS_TILEs,
// both ways of finishing grad_w, f32 and bf16. Every output is poisoned (NaN) before the run, so
// an element the kernels forget fails; padding between strided rows must stay poisoned.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "02_weighted_sum/weighted_sum.h"
#include "common/check.h"
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"

typedef struct {
    int rank;
    int64_t shape[3];
    int64_t pad;  // extra elements after each row of x and grad_x (strided rows)
    dtype_t dt;
    int rows_tile, d_tile;
    ws_gradw_mode_t mode;
} ws_case_t;

static double max_abs(const float* a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

// A host buffer of n elements of dt from f32 values; the f32 values are rounded to dt in place
// (so that the reference sees exactly the numbers the kernels see).
static void* to_dtype(float* v, size_t n, dtype_t dt) {
    void* out = malloc(n * dtype_size(dt));
    if (dt == DT_F32) {
        memcpy(out, v, n * sizeof(float));
    } else {
        bf16_from_f32_array((uint16_t*)out, v, n);
        f32_from_bf16_array(v, (const uint16_t*)out, n);
    }
    return out;
}

static tensor_t dev_copy(const void* host, size_t bytes, dtype_t dt, int rank, const int64_t* shape,
                         const int64_t* stride) {
    void* p = mem_alloc(DEV_CUDA, bytes, MEM_OTHER);
    CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    tensor_t t = tensor_view(p, DEV_CUDA, dt, rank, shape, stride);
    t.owns = 1;
    return t;
}

// Device buffer of `bytes`, every byte 0xFF (NaN in f32 and bf16).
static tensor_t dev_poisoned(size_t bytes, dtype_t dt, int rank, const int64_t* shape,
                             const int64_t* stride) {
    void* p = mem_alloc(DEV_CUDA, bytes, MEM_OTHER);
    CUDA_CHECK(cudaMemset(p, 0xFF, bytes));
    tensor_t t = tensor_view(p, DEV_CUDA, dt, rank, shape, stride);
    t.owns = 1;
    return t;
}

static float* host_f32(const void* dev, size_t n, dtype_t dt) {
    const size_t es = dtype_size(dt);
    void* raw = malloc(n * es);
    CUDA_CHECK(cudaMemcpy(raw, dev, n * es, cudaMemcpyDeviceToHost));
    if (dt == DT_F32) return (float*)raw;
    float* f = malloc(n * sizeof(float));
    f32_from_bf16_array(f, (const uint16_t*)raw, n);
    free(raw);
    return f;
}

static void run_case(const ws_case_t* c, uint64_t seed) {
    const int rank = c->rank;
    const int64_t D = c->shape[rank - 1];
    int64_t ROWS = 1;
    for (int i = 0; i < rank - 1; i++) ROWS *= c->shape[i];
    const int64_t SX = D + c->pad;  // row stride of x and grad_x
    int64_t stride[3];
    stride[rank - 1] = 1;
    if (rank >= 2) stride[rank - 2] = SX;
    if (rank == 3) stride[0] = c->shape[1] * SX;
    const size_t nx = (size_t)((ROWS - 1) * SX + D);  // elements spanned by x's rows
    char what[160];
    snprintf(what, sizeof what, "%s ROWS=%lld D=%lld pad=%lld ROWS_TILE=%d D_TILE=%d %s",
             dtype_name(c->dt), (long long)ROWS, (long long)D, (long long)c->pad, c->rows_tile,
             c->d_tile, c->mode == WS_GRADW_ATOMIC ? "atomic" : "partials");

    // ---- inputs (host f32, then rounded to dt) and the reference on exactly those numbers
    rng_t rng = rng_make(seed);
    float* xf = malloc(nx * sizeof(float));
    float* wf = malloc((size_t)D * sizeof(float));
    float* gyf = malloc((size_t)ROWS * sizeof(float));
    rng_fill_uniform(&rng, xf, nx, -1.0f, 1.0f);
    rng_fill_uniform(&rng, wf, (size_t)D, -1.0f, 1.0f);
    rng_fill_uniform(&rng, gyf, (size_t)ROWS, -1.0f, 1.0f);
    void* xh = to_dtype(xf, nx, c->dt);
    void* wh = to_dtype(wf, (size_t)D, c->dt);
    void* gyh = to_dtype(gyf, (size_t)ROWS, c->dt);
    float* ry = malloc((size_t)ROWS * sizeof(float));
    float* rgx = malloc((size_t)(ROWS * D) * sizeof(float));
    float* rgw = malloc((size_t)D * sizeof(float));
    weighted_sum_forward_ref(xf, SX, wf, ry, ROWS, D);
    weighted_sum_backward_ref(xf, SX, wf, gyf, rgx, D, rgw, ROWS, D);
    if (c->dt == DT_BF16) {  // the outputs are bf16: compare with the reference rounded to bf16
        void* t;
        t = to_dtype(ry, (size_t)ROWS, DT_BF16), free(t);
        t = to_dtype(rgx, (size_t)(ROWS * D), DT_BF16), free(t);
        t = to_dtype(rgw, (size_t)D, DT_BF16), free(t);
    }

    // ---- device tensors; outputs poisoned
    const size_t es = dtype_size(c->dt);
    tensor_t x = dev_copy(xh, nx * es, c->dt, rank, c->shape, stride);
    tensor_t w = dev_copy(wh, (size_t)D * es, c->dt, 1, &D, NULL);
    tensor_t gy = dev_copy(gyh, (size_t)ROWS * es, c->dt, rank - 1, c->shape, NULL);
    tensor_t y = dev_poisoned((size_t)ROWS * es, c->dt, rank - 1, c->shape, NULL);
    tensor_t gx = dev_poisoned((size_t)ROWS * SX * es, c->dt, rank, c->shape, stride);
    tensor_t gw = dev_poisoned((size_t)D * es, c->dt, 1, &D, NULL);

    ws_config_t cfg = ws_config_default();
    cfg.rows_tile = c->rows_tile;
    cfg.d_tile = c->d_tile;
    cfg.gradw_mode = c->mode;
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, &cfg, err, sizeof err), 0, "%s: %s", what, err);
    cr_assert_eq(weighted_sum_backward(&x, &w, &gy, &gx, &gw, &cfg, err, sizeof err), 0, "%s: %s",
                 what, err);
    CUDA_CHECK(cudaDeviceSynchronize());

    float* gotY = host_f32(y.data, (size_t)ROWS, c->dt);
    float* gotGX = host_f32(gx.data, (size_t)(ROWS * SX), c->dt);
    float* gotGW = host_f32(gw.data, (size_t)D, c->dt);
    // f32: the kernels add in another order than the double reference; the error of a float sum
    // grows with the size of the numbers summed, so atol is relative to the largest output.
    // bf16: the output is rounded once to 8 significant bits (up to 2^-8 relative), and the
    // reference rounds twice (double -> float -> bf16), which can differ by one bf16 unit.
    const double rtol = c->dt == DT_F32 ? 1e-5 : 1.0 / 128;
    const double ay = (c->dt == DT_F32 ? 1e-5 : 1e-3) * (max_abs(ry, (size_t)ROWS) + 1.0);
    const double aw = (c->dt == DT_F32 ? 1e-5 : 1e-3) * (max_abs(rgw, (size_t)D) + 1.0);
    char what2[200];
    snprintf(what2, sizeof what2, "y (%s)", what);
    cr_assert(allclose_report(gotY, ry, (size_t)ROWS, rtol, ay, what2), "%s", what2);
    snprintf(what2, sizeof what2, "grad_w (%s)", what);
    cr_assert(allclose_report(gotGW, rgw, (size_t)D, rtol, aw, what2), "%s", what2);
    for (int64_t r = 0; r < ROWS; r++) {
        // grad_x is one product rounded once, in the kernel and in the reference: exact.
        snprintf(what2, sizeof what2, "grad_x row %lld (%s)", (long long)r, what);
        cr_assert(allclose_report(gotGX + r * SX, rgx + r * D, (size_t)D, 0.0, 0.0, what2), "%s",
                  what2);
        for (int64_t p = 0; p < c->pad; p++)
            cr_assert(isnan(gotGX[r * SX + D + p]), "%s: padding after row %lld was written", what,
                      (long long)r);
    }
    free(xf), free(wf), free(gyf), free(xh), free(wh), free(gyh), free(ry), free(rgx), free(rgw);
    free(gotY), free(gotGX), free(gotGW);
    tensor_free(&x), tensor_free(&w), tensor_free(&gy), tensor_free(&y), tensor_free(&gx);
    tensor_free(&gw);
}

static void run_2d(int64_t rows, int64_t d, dtype_t dt, int64_t pad) {
    ws_case_t c = {2, {rows, d, 0}, pad, dt, 0, 0, WS_GRADW_PARTIALS};
    run_case(&c, (uint64_t)(rows * 31 + d));
    c.mode = WS_GRADW_ATOMIC;
    run_case(&c, (uint64_t)(rows * 31 + d + 1));
}

Test(ws_cuda, single_element) {
    SKIP_WITHOUT_GPU();
    run_2d(1, 1, DT_F32, 0);
    run_2d(1, 1, DT_BF16, 0);
}
Test(ws_cuda, one_row) {
    SKIP_WITHOUT_GPU();
    run_2d(1, 1000, DT_F32, 0);
    run_2d(1, 5003, DT_BF16, 0);
}
Test(ws_cuda, d_is_one) {
    SKIP_WITHOUT_GPU();
    run_2d(1000, 1, DT_F32, 0);
    run_2d(777, 1, DT_BF16, 0);
}
Test(ws_cuda, prime_rows_1000003_by_37) {
    SKIP_WITHOUT_GPU();
    run_2d(1000003, 37, DT_F32, 0);
    run_2d(1000003, 37, DT_BF16, 0);
}
Test(ws_cuda, vector_path_sizes) {
    SKIP_WITHOUT_GPU();
    run_2d(257, 1024, DT_F32, 0);
    run_2d(257, 1024, DT_BF16, 0);
    run_2d(100, 4100, DT_F32, 0);   // D % 4 == 0 but not a D_TILE multiple
    run_2d(100, 4100, DT_BF16, 0);  // D % 8 != 0: bf16 takes the scalar path
    run_2d(4099, 520, DT_BF16, 0);
}
Test(ws_cuda, three_d_inputs) {
    SKIP_WITHOUT_GPU();
    ws_case_t c = {3, {4, 7, 129}, 0, DT_F32, 0, 0, WS_GRADW_PARTIALS};
    run_case(&c, 1);
    c.dt = DT_BF16;
    run_case(&c, 2);
    ws_case_t v = {3, {3, 65, 256}, 0, DT_BF16, 0, 0, WS_GRADW_PARTIALS};
    run_case(&v, 3);
}
Test(ws_cuda, strided_rows) {
    SKIP_WITHOUT_GPU();
    run_2d(300, 260, DT_F32, 4);   // row stride 264: still 16-byte aligned, vector path
    run_2d(300, 260, DT_F32, 1);   // row stride 261: scalar path
    run_2d(300, 256, DT_BF16, 8);  // bf16, vector path
    run_2d(301, 256, DT_BF16, 3);  // bf16, scalar path
    ws_case_t c = {3, {5, 6, 64}, 16, DT_F32, 0, 0, WS_GRADW_PARTIALS};
    run_case(&c, 9);
}
// Every D_TILE with awkward ROWS_TILEs (1, 7, 64, and taller than ROWS) and both grad_w modes.
Test(ws_cuda, every_tile_size) {
    SKIP_WITHOUT_GPU();
    const int d_tiles[] = {128, 256, 512, 1024}, rows_tiles[] = {1, 7, 64, 5000};
    const dtype_t dts[] = {DT_F32, DT_BF16};
    uint64_t seed = 100;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int t = 0; t < 2; t++)
                for (int m = 0; m < 2; m++) {
                    ws_case_t c = {2, {999, dts[t] == DT_F32 ? 516 : 520, 0}, 0, dts[t],
                                   rows_tiles[b], d_tiles[a], (ws_gradw_mode_t)m};
                    run_case(&c, seed++);
                    c.shape[1] = 515;  // scalar path
                    run_case(&c, seed++);
                }
}

// The kernels against PyTorch's float64 answer (the fixture). Same tolerances as the reference.
static void cuda_matches_fixture(const char* cs) {
    char path[256], rel[128];
    tensor_t t[6];
    const char* names[6] = {"x", "w", "grad_y", "y", "grad_x", "grad_w"};
    for (int i = 0; i < 6; i++) {
        snprintf(rel, sizeof rel, "weighted_sum/%s_%s.npy", cs, names[i]);
        t[i] = npy_load(fixture_path(rel, path, sizeof path), DT_F32, -1, NULL);
    }
    tensor_t x = tensor_to(&t[0], DEV_CUDA), w = tensor_to(&t[1], DEV_CUDA);
    tensor_t gy = tensor_to(&t[2], DEV_CUDA);
    tensor_t y = tensor_alloc(DEV_CUDA, DT_F32, t[3].rank, t[3].shape, MEM_OTHER);
    tensor_t gx = tensor_alloc(DEV_CUDA, DT_F32, t[4].rank, t[4].shape, MEM_OTHER);
    tensor_t gw = tensor_alloc(DEV_CUDA, DT_F32, 1, t[5].shape, MEM_OTHER);
    tensor_poison(&y), tensor_poison(&gx), tensor_poison(&gw);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(weighted_sum_backward(&x, &w, &gy, &gx, &gw, NULL, err, sizeof err), 0, "%s", err);
    tensor_t hy = tensor_to(&y, DEV_CPU), hgx = tensor_to(&gx, DEV_CPU), hgw = tensor_to(&gw, DEV_CPU);
    // fp32 sums of at most 132 terms of size ~1 in another order than float64: ~1e-6 relative.
    ASSERT_ALLCLOSE((float*)hy.data, (float*)t[3].data, (size_t)tensor_numel(&hy), 1e-5, 1e-5,
                    "cuda y vs torch");
    ASSERT_ALLCLOSE((float*)hgx.data, (float*)t[4].data, (size_t)tensor_numel(&hgx), 0.0, 0.0,
                    "cuda grad_x vs torch (one product: exact)");
    ASSERT_ALLCLOSE((float*)hgw.data, (float*)t[5].data, (size_t)tensor_numel(&hgw), 1e-5, 1e-5,
                    "cuda grad_w vs torch");
    for (int i = 0; i < 6; i++) tensor_free(&t[i]);
    tensor_free(&x), tensor_free(&w), tensor_free(&gy), tensor_free(&y), tensor_free(&gx);
    tensor_free(&gw), tensor_free(&hy), tensor_free(&hgx), tensor_free(&hgw);
}

Test(ws_cuda, matches_torch_3d_odd_d) {
    SKIP_WITHOUT_GPU();
    cuda_matches_fixture("a");
}
Test(ws_cuda, matches_torch_2d) {
    SKIP_WITHOUT_GPU();
    cuda_matches_fixture("b");
}

// A caller-provided workspace that is too small is an error, not an overrun.
Test(ws_cuda, small_workspace_is_rejected) {
    SKIP_WITHOUT_GPU();
    const int64_t xs[2] = {4096, 256}, d = 256, r = 4096;
    tensor_t x = tensor_alloc(DEV_CUDA, DT_F32, 2, xs, MEM_OTHER);
    tensor_t gx = tensor_alloc(DEV_CUDA, DT_F32, 2, xs, MEM_OTHER);
    tensor_t w = tensor_alloc(DEV_CUDA, DT_F32, 1, &d, MEM_OTHER);
    tensor_t gw = tensor_alloc(DEV_CUDA, DT_F32, 1, &d, MEM_OTHER);
    tensor_t gy = tensor_alloc(DEV_CUDA, DT_F32, 1, &r, MEM_OTHER);
    ws_config_t cfg = ws_config_default();
    cfg.workspace = gw.data;
    cfg.workspace_bytes = 1024;
    char err[256] = "";
    cr_assert_eq(weighted_sum_backward(&x, &w, &gy, &gx, &gw, &cfg, err, sizeof err), -1);
    cr_assert(strstr(err, "workspace has 1024 bytes, the backward needs"), "%s", err);
    tensor_free(&x), tensor_free(&gx), tensor_free(&w), tensor_free(&gw), tensor_free(&gy);
}
