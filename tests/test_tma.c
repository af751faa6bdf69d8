// Tests of the TMA view arithmetic (common/tma.c): what a [B, H, N, d] view becomes as a 4-D
// tensor map, and which views the tensor memory accelerator cannot describe. Pure: no GPU, no
// driver. The encoder itself (tma_map_bf16_4d) needs a driver and is exercised by the fa3
// forward's GPU tests (test_03 cuda/*).
#include <string.h>

#include "common/attention.h"
#include "common/tma.h"
#include "tests/harness.h"

static void expect_view(const tma_view_t* v, uint64_t d, uint64_t n, uint64_t h, uint64_t b, uint64_t s_row,
                        uint64_t s_head, uint64_t s_batch) {
    cr_assert_eq(v->dims[0], d);
    cr_assert_eq(v->dims[1], n);
    cr_assert_eq(v->dims[2], h);
    cr_assert_eq(v->dims[3], b);
    cr_assert_eq(v->strides[0], s_row, "row stride %llu bytes, want %llu", (unsigned long long)v->strides[0],
                 (unsigned long long)s_row);
    cr_assert_eq(v->strides[1], s_head, "head stride %llu bytes, want %llu", (unsigned long long)v->strides[1],
                 (unsigned long long)s_head);
    cr_assert_eq(v->strides[2], s_batch, "batch stride %llu bytes, want %llu", (unsigned long long)v->strides[2],
                 (unsigned long long)s_batch);
}

Test(tma, contiguous_bhnd) {
    int64_t s[3];
    attn_contiguous_strides(s, 16, 1000, 64);  // B 2, H 16, N 1000, d 64
    tma_view_t v;
    char err[200] = "";
    cr_assert_eq(tma_view_bhnd(2, 16, 1000, 64, s, &v, err, sizeof err), 0, "%s", err);
    expect_view(&v, 64, 1000, 16, 2, 128, 128 * 1000, 128 * 1000 * 16);
}

// The model's fused QKV buffer (B, T, 3, H, d): strides (T*3*H*d, d, 3*H*d). The head stride
// (d elements) is smaller than the row stride; TMA takes strides in any order.
Test(tma, fused_qkv_view) {
    const int B = 3, T = 256, H = 12, d = 128;
    const int64_t s[3] = {(int64_t)T * 3 * H * d, d, 3 * H * d};
    tma_view_t v;
    char err[200] = "";
    cr_assert_eq(tma_view_bhnd(B, H, T, d, s, &v, err, sizeof err), 0, "%s", err);
    expect_view(&v, d, T, H, B, 2ull * 3 * H * d, 2ull * d, 2ull * T * 3 * H * d);
}

// An axis of extent 1 never moves, so its stride may be anything the caller had (0 included);
// the view gives the driver a legal one: the span of the axes inside it, in 16-byte units.
Test(tma, extent_one_axes_take_any_stride) {
    const int64_t s[3] = {0, 0, 64};  // B 1, H 1: batch and head strides 0
    tma_view_t v;
    char err[200] = "";
    cr_assert_eq(tma_view_bhnd(1, 1, 77, 64, s, &v, err, sizeof err), 0, "%s", err);
    expect_view(&v, 64, 77, 1, 1, 128, 128 * 77, 128 * 77);
    const int64_t s1[3] = {0, 0, 0};  // N 1 too
    cr_assert_eq(tma_view_bhnd(1, 1, 1, 8, s1, &v, err, sizeof err), 0, "%s", err);
    expect_view(&v, 8, 1, 1, 1, 16, 16, 16);
}

static void expect_refused(int B, int H, int N, int d, const int64_t s[3], const char* needle) {
    tma_view_t v;
    char err[200] = "";
    cr_assert_eq(tma_view_bhnd(B, H, N, d, s, &v, err, sizeof err), -1, "B %d H %d N %d d %d accepted", B, H, N, d);
    cr_assert(strstr(err, needle) != NULL, "reason '%s' does not name '%s'", err, needle);
    cr_assert(strchr(err, '\n') == NULL, "one line: '%s'", err);
}

Test(tma, refuses_what_tma_cannot_describe) {
    const int64_t ok[3] = {2 * 64 * 64, 64 * 64, 64};
    expect_refused(2, 2, 64, 12, ok, "d 12");           // d not a multiple of 8
    expect_refused(2, 2, 64, 264, ok, "d 264");         // d above 256
    expect_refused(0, 2, 64, 64, ok, "B 0");
    const int64_t zero_head[3] = {2 * 64 * 64, 0, 64};  // heads broadcast: TMA has no zero stride
    expect_refused(2, 2, 64, 64, zero_head, "head stride 0");
    const int64_t odd_row[3] = {2 * 64 * 68, 64 * 68, 68};  // rows 136 bytes apart: not 16-aligned
    expect_refused(2, 2, 64, 64, odd_row, "row stride 68");
    const int64_t huge[3] = {(int64_t)1 << 40, 64 * 64, 64};  // 2^41 bytes
    expect_refused(2, 2, 64, 64, huge, "batch stride");
}

// The fp32 row map's shape checks come before the driver is asked, so they run without a GPU:
// a row that is not a multiple of 16 bytes, a box outside 4..256 columns or not a multiple of 4,
// a misaligned base; one line each.
Test(tma, f32_rows_refuses_what_tma_cannot_describe) {
    CUtensorMap m;
    char err[200] = "";
    static float buf[64];
    cr_assert_eq(tma_map_f32_rows(&m, buf, 1001, 2, 64, err, sizeof err), -1);
    cr_assert(strstr(err, "1001 columns") != NULL, "%s", err);
    cr_assert_eq(tma_map_f32_rows(&m, buf, 1000, 2, 66, err, sizeof err), -1);
    cr_assert(strstr(err, "box of 66") != NULL, "%s", err);
    cr_assert_eq(tma_map_f32_rows(&m, buf, 1000, 2, 260, err, sizeof err), -1);
    cr_assert(strstr(err, "box of 260") != NULL, "%s", err);
    cr_assert_eq(tma_map_f32_rows(&m, (char*)buf + 4, 1000, 2, 64, err, sizeof err), -1);
    cr_assert(strstr(err, "16-byte aligned") != NULL, "%s", err);
    cr_assert(strchr(err, '\n') == NULL, "one line: '%s'", err);
}
