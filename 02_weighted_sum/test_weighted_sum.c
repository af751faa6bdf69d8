// Tests of the weighted sum: the reference against PyTorch's fixture, the tensor API on the CPU
// (shapes, strides, bf16), its error messages for bad input, and the tile plans. The CUDA
// kernels are tested in test_weighted_sum_cuda.c, the program in test_weighted_sum_cli.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "02_weighted_sum/weighted_sum.h"
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"

static tensor_t fixture(const char* name) {
    char path[256], rel[128];
    snprintf(rel, sizeof rel, "weighted_sum/%s.npy", name);
    return npy_load(fixture_path(rel, path, sizeof path), DT_F32, -1, NULL);
}

static float* f32(const tensor_t* t) { return (float*)t->data; }

// The reference accumulates in double like the fixture (float64 autograd), so both round the
// same exact sum once: they may differ only in the last bit (sums in another order).
#define FIX_RTOL 1e-6
#define FIX_ATOL 1e-6

// forward: y only; backward: grad_x and grad_w only (so each reference is tested on its own).
static void ref_matches_fixture(const char* c, int backward) {
    char n[32];
#define LOAD(v) (snprintf(n, sizeof n, "%s_" #v, c), fixture(n))
    tensor_t x = LOAD(x), w = LOAD(w), gy = LOAD(grad_y), y = LOAD(y), gx = LOAD(grad_x),
             gw = LOAD(grad_w);
#undef LOAD
    const int64_t D = x.shape[x.rank - 1], ROWS = tensor_numel(&x) / D;
    float* ry = malloc((size_t)ROWS * sizeof(float));
    float* rgx = malloc((size_t)(ROWS * D) * sizeof(float));
    float* rgw = malloc((size_t)D * sizeof(float));
    if (!backward) {
        weighted_sum_forward_ref(f32(&x), D, f32(&w), ry, ROWS, D);
        ASSERT_ALLCLOSE(ry, f32(&y), (size_t)ROWS, FIX_RTOL, FIX_ATOL, "ref y vs torch");
    } else {
        weighted_sum_backward_ref(f32(&x), D, f32(&w), f32(&gy), rgx, D, rgw, ROWS, D);
        // grad_x is one float product: torch's float64 product rounded to float is the same number.
        ASSERT_ALLCLOSE(rgx, f32(&gx), (size_t)(ROWS * D), 0.0, 0.0, "ref grad_x vs torch");
        ASSERT_ALLCLOSE(rgw, f32(&gw), (size_t)D, FIX_RTOL, FIX_ATOL, "ref grad_w vs torch");
    }
    free(ry), free(rgx), free(rgw);
    tensor_free(&x), tensor_free(&w), tensor_free(&gy), tensor_free(&y), tensor_free(&gx);
    tensor_free(&gw);
}

Test(ws_ref, forward_matches_torch_3d_odd_d) { ref_matches_fixture("a", 0); }
Test(ws_ref, forward_matches_torch_2d) { ref_matches_fixture("b", 0); }
Test(ws_ref, backward_matches_torch_3d_odd_d) { ref_matches_fixture("a", 1); }
Test(ws_ref, backward_matches_torch_2d) { ref_matches_fixture("b", 1); }

// The tensor API on CPU tensors: a 3-D x, outputs poisoned first so an unwritten element fails.
Test(ws_api_cpu, matches_torch_through_tensors) {
    tensor_t x = fixture("a_x"), w = fixture("a_w"), gy = fixture("a_grad_y");
    tensor_t y_want = fixture("a_y"), gx_want = fixture("a_grad_x"), gw_want = fixture("a_grad_w");
    const int64_t D = 37;
    tensor_t y = tensor_alloc(DEV_CPU, DT_F32, 2, x.shape, MEM_OTHER);
    tensor_t gx = tensor_alloc(DEV_CPU, DT_F32, 3, x.shape, MEM_OTHER);
    tensor_t gw = tensor_alloc(DEV_CPU, DT_F32, 1, &D, MEM_OTHER);
    tensor_poison(&y), tensor_poison(&gx), tensor_poison(&gw);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(weighted_sum_backward(&x, &w, &gy, &gx, &gw, NULL, err, sizeof err), 0, "%s", err);
    ASSERT_ALLCLOSE(f32(&y), f32(&y_want), 15, FIX_RTOL, FIX_ATOL, "api y");
    ASSERT_ALLCLOSE(f32(&gx), f32(&gx_want), 15 * 37, 0.0, 0.0, "api grad_x (one product: exact)");
    ASSERT_ALLCLOSE(f32(&gw), f32(&gw_want), 37, FIX_RTOL, FIX_ATOL, "api grad_w");
    tensor_free(&x), tensor_free(&w), tensor_free(&gy), tensor_free(&y_want);
    tensor_free(&gx_want), tensor_free(&gw_want), tensor_free(&y), tensor_free(&gx);
    tensor_free(&gw);
}

// x given as a slice of the rows of a wider buffer (row stride D + 5), and a grad_x with its own
// row stride: the same numbers as the contiguous case, and the padding is never written.
Test(ws_api_cpu, strided_rows) {
    enum { ROWS = 13, D = 21, PAD = 5, SX = D + PAD };
    float* buf = malloc(ROWS * SX * sizeof(float));
    float* gxbuf = malloc(ROWS * SX * sizeof(float));
    float xc[ROWS * D], wv[D], gyv[ROWS], y1[ROWS], y2[ROWS], gx1[ROWS * D], gw1[D], gw2[D];
    rng_t rng = rng_make(7);
    rng_fill_uniform(&rng, buf, ROWS * SX, -1.0f, 1.0f);
    rng_fill_uniform(&rng, wv, D, -1.0f, 1.0f);
    rng_fill_uniform(&rng, gyv, ROWS, -1.0f, 1.0f);
    for (int r = 0; r < ROWS; r++) memcpy(xc + r * D, buf + r * SX, D * sizeof(float));
    memset(gxbuf, 0xFF, ROWS * SX * sizeof(float));

    const int64_t xs[2] = {ROWS, D}, xst[2] = {SX, 1}, ds = D, rs = ROWS;
    tensor_t x = tensor_view(buf, DEV_CPU, DT_F32, 2, xs, xst);
    tensor_t gx = tensor_view(gxbuf, DEV_CPU, DT_F32, 2, xs, xst);
    tensor_t w = tensor_view(wv, DEV_CPU, DT_F32, 1, &ds, NULL);
    tensor_t gy = tensor_view(gyv, DEV_CPU, DT_F32, 1, &rs, NULL);
    tensor_t y = tensor_view(y2, DEV_CPU, DT_F32, 1, &rs, NULL);
    tensor_t gw = tensor_view(gw2, DEV_CPU, DT_F32, 1, &ds, NULL);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(weighted_sum_backward(&x, &w, &gy, &gx, &gw, NULL, err, sizeof err), 0, "%s", err);
    weighted_sum_forward_ref(xc, D, wv, y1, ROWS, D);
    weighted_sum_backward_ref(xc, D, wv, gyv, gx1, D, gw1, ROWS, D);
    // Same arithmetic in the same order on the same numbers: exactly equal.
    ASSERT_ALLCLOSE(y2, y1, ROWS, 0.0, 0.0, "strided y");
    ASSERT_ALLCLOSE(gw2, gw1, D, 0.0, 0.0, "strided grad_w");
    for (int r = 0; r < ROWS; r++) {
        ASSERT_ALLCLOSE(gxbuf + r * SX, gx1 + r * D, D, 0.0, 0.0, "strided grad_x row");
        for (int p = 0; p < PAD; p++)
            cr_assert(isnan(gxbuf[r * SX + D + p]), "grad_x padding at row %d was written", r);
    }
    free(buf), free(gxbuf);
}

// bf16 tensors on the CPU: the reference on the widened inputs, rounded once to bf16.
Test(ws_api_cpu, bf16_rounds_the_reference_once) {
    enum { ROWS = 9, D = 40 };
    float xf[ROWS * D], wf[D], gyf[ROWS], ry[ROWS], rgx[ROWS * D], rgw[D];
    uint16_t xb[ROWS * D], wb[D], gyb[ROWS], yb[ROWS], gxb[ROWS * D], gwb[D];
    rng_t rng = rng_make(11);
    rng_fill_uniform(&rng, xf, ROWS * D, -1.0f, 1.0f);
    rng_fill_uniform(&rng, wf, D, -1.0f, 1.0f);
    rng_fill_uniform(&rng, gyf, ROWS, -1.0f, 1.0f);
    bf16_from_f32_array(xb, xf, ROWS * D), bf16_from_f32_array(wb, wf, D);
    bf16_from_f32_array(gyb, gyf, ROWS);
    f32_from_bf16_array(xf, xb, ROWS * D), f32_from_bf16_array(wf, wb, D);
    f32_from_bf16_array(gyf, gyb, ROWS);
    weighted_sum_forward_ref(xf, D, wf, ry, ROWS, D);
    weighted_sum_backward_ref(xf, D, wf, gyf, rgx, D, rgw, ROWS, D);
    memset(yb, 0xFF, sizeof yb), memset(gxb, 0xFF, sizeof gxb), memset(gwb, 0xFF, sizeof gwb);

    const int64_t xs[2] = {ROWS, D}, ds = D, rs = ROWS;
    tensor_t x = tensor_view(xb, DEV_CPU, DT_BF16, 2, xs, NULL);
    tensor_t gx = tensor_view(gxb, DEV_CPU, DT_BF16, 2, xs, NULL);
    tensor_t w = tensor_view(wb, DEV_CPU, DT_BF16, 1, &ds, NULL);
    tensor_t gy = tensor_view(gyb, DEV_CPU, DT_BF16, 1, &rs, NULL);
    tensor_t y = tensor_view(yb, DEV_CPU, DT_BF16, 1, &rs, NULL);
    tensor_t gw = tensor_view(gwb, DEV_CPU, DT_BF16, 1, &ds, NULL);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(weighted_sum_backward(&x, &w, &gy, &gx, &gw, NULL, err, sizeof err), 0, "%s", err);
    // One rounding to bf16 (8 significant bits): at most half a unit, up to 2^-8 relative.
    cr_assert(allclose_bf16_report(yb, ry, ROWS, 1.0 / 256, 0.0, "bf16 y"));
    cr_assert(allclose_bf16_report(gxb, rgx, ROWS * D, 1.0 / 256, 0.0, "bf16 grad_x"));
    cr_assert(allclose_bf16_report(gwb, rgw, D, 1.0 / 256, 0.0, "bf16 grad_w"));
}

// A 1-D x is one row; y is then a 0-D tensor (one number).
Test(ws_api_cpu, one_dim_x_gives_scalar_y) {
    float xv[3] = {1, 2, 3}, wv[3] = {4, 5, 6}, yv = NAN;
    const int64_t ds = 3;
    tensor_t x = tensor_view(xv, DEV_CPU, DT_F32, 1, &ds, NULL);
    tensor_t w = tensor_view(wv, DEV_CPU, DT_F32, 1, &ds, NULL);
    tensor_t y = tensor_view(&yv, DEV_CPU, DT_F32, 0, NULL, NULL);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(yv, 32.0f, "1*4 + 2*5 + 3*6 = 32, got %g", yv);
}

// ---------------------------------------------------------------- bad input
typedef struct {
    float xv[6 * 5], wv[6], gyv[6], yv[6], gxv[6 * 5], gwv[6];
    uint16_t wb[5];
    tensor_t x, w, gy, y, gx, gw;
} bad_setup_t;

// A valid call: x [6, 5], w [5], y and grad_y [6]. Each test breaks one thing.
static void setup(bad_setup_t* s) {
    memset(s, 0, sizeof *s);
    const int64_t xs[2] = {6, 5}, d = 5, r = 6;
    s->x = tensor_view(s->xv, DEV_CPU, DT_F32, 2, xs, NULL);
    s->w = tensor_view(s->wv, DEV_CPU, DT_F32, 1, &d, NULL);
    s->gy = tensor_view(s->gyv, DEV_CPU, DT_F32, 1, &r, NULL);
    s->y = tensor_view(s->yv, DEV_CPU, DT_F32, 1, &r, NULL);
    s->gx = tensor_view(s->gxv, DEV_CPU, DT_F32, 2, xs, NULL);
    s->gw = tensor_view(s->gwv, DEV_CPU, DT_F32, 1, &d, NULL);
    memset(s->yv, 0xFF, sizeof s->yv);
}

static void expect_fwd_error(bad_setup_t* s, const char* want) {
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&s->x, &s->w, &s->y, NULL, err, sizeof err), -1,
                 "bad input accepted (wanted an error with \"%s\")", want);
    cr_assert(strstr(err, want), "error \"%s\" does not say \"%s\"", err, want);
    for (int i = 0; i < 6; i++) cr_assert(isnan(s->yv[i]), "y was written on an error");
}

static void expect_bwd_error(bad_setup_t* s, const char* want) {
    char err[256] = "";
    cr_assert_eq(weighted_sum_backward(&s->x, &s->w, &s->gy, &s->gx, &s->gw, NULL, err, sizeof err),
                 -1, "bad input accepted (wanted an error with \"%s\")", want);
    cr_assert(strstr(err, want), "error \"%s\" does not say \"%s\"", err, want);
}

Test(ws_bad_input, the_good_setup_is_accepted) {
    bad_setup_t s;
    setup(&s);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&s.x, &s.w, &s.y, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(weighted_sum_backward(&s.x, &s.w, &s.gy, &s.gx, &s.gw, NULL, err, sizeof err), 0,
                 "%s", err);
}

Test(ws_bad_input, w_length_not_d) {
    bad_setup_t s;
    setup(&s);
    s.w.shape[0] = 6;
    expect_fwd_error(&s, "w has shape [6], but x's last axis is D = 5");
    expect_bwd_error(&s, "w must have shape [5]");
    setup(&s);
    s.gw.shape[0] = 4;
    expect_bwd_error(&s, "grad_w has shape [4]");
}

Test(ws_bad_input, empty_tensors) {
    bad_setup_t s;
    setup(&s);
    s.x.shape[1] = 0;  // D = 0
    expect_fwd_error(&s, "x is empty (shape [6, 0])");
    setup(&s);
    s.x.shape[0] = 0;  // ROWS = 0
    expect_fwd_error(&s, "x is empty (shape [0, 5])");
    expect_bwd_error(&s, "x is empty");
}

Test(ws_bad_input, mismatched_dtypes) {
    bad_setup_t s;
    setup(&s);
    const int64_t d = 5;
    s.w = tensor_view(s.wb, DEV_CPU, DT_BF16, 1, &d, NULL);
    expect_fwd_error(&s, "dtype mismatch: x is f32 but w is bf16");
    setup(&s);
    s.gy.dtype = DT_BF16;
    expect_bwd_error(&s, "dtype mismatch: x is f32 but grad_y is bf16");
    setup(&s);
    s.x.dtype = s.w.dtype = s.y.dtype = DT_I32;
    expect_fwd_error(&s, "x has dtype i32; the weighted sum supports f32 and bf16");
}

Test(ws_bad_input, wrong_output_shapes_and_strides) {
    bad_setup_t s;
    setup(&s);
    s.y.shape[0] = 5;
    expect_fwd_error(&s, "y has shape [5], expected [6]");
    setup(&s);
    s.gx.shape[0] = 3;
    expect_bwd_error(&s, "grad_x has shape [3, 5], expected x's shape [6, 5]");
    setup(&s);
    s.x.stride[1] = 2;
    s.x.stride[0] = 10;
    expect_fwd_error(&s, "unit stride along its last axis");
    setup(&s);
    s.x.stride[0] = 3;
    expect_fwd_error(&s, "rows overlap");
    setup(&s);
    s.x.rank = 0;
    expect_fwd_error(&s, "at least one axis");
}

Test(ws_bad_input, leading_axes_that_do_not_flatten) {
    float buf[2 * 3 * 8];
    float yv[6], wv[4];
    const int64_t xs[3] = {2, 3, 4}, st[3] = {8 * 3 + 1, 8, 1}, ys[2] = {2, 3}, d = 4;
    tensor_t x = tensor_view(buf, DEV_CPU, DT_F32, 3, xs, st);
    x.stride[0] = 25;  // not 3 * 8: the two row axes cannot become one
    tensor_t w = tensor_view(wv, DEV_CPU, DT_F32, 1, &d, NULL);
    tensor_t y = tensor_view(yv, DEV_CPU, DT_F32, 2, ys, NULL);
    char err[256] = "";
    cr_assert_eq(weighted_sum_forward(&x, &w, &y, NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "do not flatten to rows with one stride"), "%s", err);
}

Test(ws_bad_input, bad_tile_sizes) {
    bad_setup_t s;
    setup(&s);
    ws_config_t cfg = ws_config_default();
    char err[256] = "";
    cfg.d_tile = 100;
    cr_assert_eq(weighted_sum_forward(&s.x, &s.w, &s.y, &cfg, err, sizeof err), -1);
    cr_assert(strstr(err, "D_TILE 100 is not allowed (one of 128|256|512|1024"), "%s", err);
    cfg.d_tile = 0;
    cfg.rows_tile = -3;
    cr_assert_eq(weighted_sum_backward(&s.x, &s.w, &s.gy, &s.gx, &s.gw, &cfg, err, sizeof err), -1);
    cr_assert(strstr(err, "ROWS_TILE -3 is out of range"), "%s", err);
}

// ---------------------------------------------------------------- tile plans
Test(ws_plan, defaults_cover_every_row_and_column) {
    const int64_t shapes[][2] = {{1, 1}, {1000003, 37}, {4096, 1024}, {1 << 20, 1024}, {7, 5000}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t R = shapes[i][0], D = shapes[i][1];
        ws_plan_t f, b;
        char err[256];
        cr_assert_eq(ws_plan_forward(R, D, DT_F32, NULL, &f, err, sizeof err), 0, "%s", err);
        cr_assert_eq(ws_plan_backward(R, D, DT_BF16, NULL, 132, &b, err, sizeof err), 0, "%s", err);
        cr_assert_eq(f.rows_tile, 8);
        cr_assert_eq(f.d_tile, 512);
        cr_assert(b.rows_tile >= 32 && b.rows_tile <= 512, "auto ROWS_TILE %d", b.rows_tile);
        // Enough tiles for every row, and not one more than needed.
        cr_assert(f.n_row_tiles * f.rows_tile >= R && (f.n_row_tiles - 1) * f.rows_tile < R);
        cr_assert(b.n_row_tiles * b.rows_tile >= R && (b.n_row_tiles - 1) * b.rows_tile < R);
        cr_assert(b.n_d_tiles * b.d_tile >= D && (b.n_d_tiles - 1) * b.d_tile < D);
    }
    // Large inputs get tall row tiles: the partials buffer stays under 1% of x.
    ws_plan_t b;
    char err[256];
    cr_assert_eq(ws_plan_backward(1 << 20, 1024, DT_F32, NULL, 132, &b, err, sizeof err), 0);
    cr_assert_lt(ws_workspace_bytes(&b, 1024, DT_F32, WS_GRADW_PARTIALS),
                 (size_t)((1 << 20) * 1024.0 * 4 / 100));
    cr_assert_eq(ws_workspace_bytes(&b, 1024, DT_F32, WS_GRADW_ATOMIC), 0);
    cr_assert_eq(ws_workspace_bytes(&b, 1024, DT_BF16, WS_GRADW_ATOMIC), 1024 * 4);
}

Test(ws_plan, vector_width_and_alignment) {
    cr_assert_eq(ws_vec_elems(DT_F32, 128), 4);
    cr_assert_eq(ws_vec_elems(DT_BF16, 128), 4);   // a warp spans the D tile: 128 / 32
    cr_assert_eq(ws_vec_elems(DT_BF16, 1024), 8);  // 16 bytes
    static float buf[64] __attribute__((aligned(16)));
    const void* ok[] = {buf, buf + 8};
    const void* off[] = {buf, buf + 1};
    const int64_t s_ok[] = {40}, s_bad[] = {42};
    cr_assert_eq(ws_uses_vector_path(DT_F32, 512, ok, 2, s_ok, 1, 40), 1);
    cr_assert_eq(ws_uses_vector_path(DT_F32, 512, off, 2, s_ok, 1, 40), 0, "unaligned pointer");
    cr_assert_eq(ws_uses_vector_path(DT_F32, 512, ok, 2, s_bad, 1, 40), 0, "unaligned row stride");
    cr_assert_eq(ws_uses_vector_path(DT_F32, 512, ok, 2, s_ok, 1, 37), 0, "odd D");
}
