// Which backward kernels run for a call: one ordered table of named rows, each with the
// condition under which it applies and the launch that runs it. The first row whose condition
// holds runs (flash_bwd_choose); benchmarks and the demo print that row's name. Pure, no GPU:
// the CPU tests walk every row and every fallback.
#include <stdint.h>
#include <stdio.h>
#include "04_flashattn_bwd/flash_bwd.h"
#include "common/tma.h"

// The tensor-core kernels want bf16, a head dim they were built for, and 16-byte aligned rows
// (cp.async moves 16 bytes): every base pointer 16-byte aligned and every stride a multiple of
// 8 elements. Anything else takes the SIMT kernels.
int flash_bwd_mma_ok(const attn_args_t* a) {
    if (a->dtype != DT_BF16) return 0;
    if (a->d != 16 && a->d != 32 && a->d != 64 && a->d != 128) return 0;
    const void* ptrs[] = {a->q, a->k, a->v, a->dout, a->dq, a->dk, a->dv};
    for (int i = 0; i < 7; i++)
        if ((uintptr_t)ptrs[i] % 16) return 0;
    const int64_t* strides[] = {a->sq, a->sk, a->sv, a->sdo, a->sdq, a->sdk, a->sdv};
    for (int i = 0; i < 7; i++)
        for (int x = 0; x < 3; x++)
            if (strides[i][x] % 8) return 0;
    return 1;
}

// The FA3-layout kernel loads Q, dO, K and V by TMA: each [B, H, N, d] view must be one a
// tensor map describes (common/tma.h: no zero stride on an axis longer than 1, strides of
// 16-byte multiples).
int flash_bwd_tma_ok(const attn_args_t* a) {
    tma_view_t v;
    char err[160];
    return tma_view_bhnd(a->B, a->H, a->Nq, a->d, a->sq, &v, err, sizeof err) == 0 &&
           tma_view_bhnd(a->B, a->H, a->Nq, a->d, a->sdo, &v, err, sizeof err) == 0 &&
           tma_view_bhnd(a->B, a->H, a->Nk, a->d, a->sk, &v, err, sizeof err) == 0 &&
           tma_view_bhnd(a->B, a->H, a->Nk, a->d, a->sv, &v, err, sizeof err) == 0;
}

static int applies_fa3(const attn_args_t* a, const flash_bwd_build_t* b) {
    return b->sm90a && a->d == 64 && flash_bwd_mma_ok(a) && flash_bwd_tma_ok(a);
}
static int applies_wgmma(const attn_args_t* a, const flash_bwd_build_t* b) {
    return b->sm90a && (a->d == 64 || a->d == 128) && flash_bwd_mma_ok(a);
}
static int applies_mma(const attn_args_t* a, const flash_bwd_build_t* b) {
    (void)b;
    return a->d <= 64 && flash_bwd_mma_ok(a);
}
static int applies_mma_two_pass(const attn_args_t* a, const flash_bwd_build_t* b) {
    (void)b;
    return a->d == 128 && flash_bwd_mma_ok(a);
}
static int applies_simt(const attn_args_t* a, const flash_bwd_build_t* b) {
    (void)a, (void)b;
    return 1;
}

// The table, fastest first. The launches are in flash_bwd_cuda.cu.
static const flash_bwd_row_t rows[] = {
    {"fa3", "flash_bwd_tma.cu", 1, applies_fa3, flash_bwd_launch_fa3},
    {"wgmma", "flash_bwd_wgmma.cu", 1, applies_wgmma, flash_bwd_launch_wgmma},
    {"mma", "flash_bwd_mma.cu", 1, applies_mma, flash_bwd_launch_mma},
    {"mma_two_pass", "flash_bwd_mma_two_pass.cu", 0, applies_mma_two_pass, flash_bwd_launch_mma_two_pass},
    {"simt", "flash_bwd_simt.cu", 0, applies_simt, flash_bwd_launch_simt},
};

const flash_bwd_row_t* flash_bwd_rows(int* n) {
    *n = (int)(sizeof rows / sizeof rows[0]);
    return rows;
}

const flash_bwd_row_t* flash_bwd_choose(const attn_args_t* a, const flash_bwd_build_t* b) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].applies(a, b)) return &rows[i];
    return &rows[sizeof rows / sizeof rows[0] - 1];  // not reached: simt applies to everything
}
