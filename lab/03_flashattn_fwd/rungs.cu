// The lab's rung table (rungs.h) and its runner. Names as in the lesson's tables: w = warps,
// mt = 16-row m-tiles per warp (Bq = 16 mt w), bq / bk = query / key-tile rows; "pipe" = pipe.cu,
// "wgmma" = wgmma.cu, "wgmma-ov" = wgmma_ov.cu, "fa3-*" = fa3_ablations.cu, the rest mma_tiles.cu.
// Run: build/lab/03_flashattn_fwd/rungs --list
#include <stdint.h>
#include <string.h>
#include "common/check.h"
#include "common/tma.h"
#include "common/wgmma.cuh"  // wgmma_built
#include "lab/03_flashattn_fwd/rungs.h"

#define L(x) extern "C" void x(const attn_args_t* a, cudaStream_t s);
L(lab03_mma_d16_w4_mt2_bk128) L(lab03_mma_d16_w4_mt1_bk128) L(lab03_mma_d32_w4_mt2_bk128) L(lab03_mma_d32_w4_mt1_bk64)
L(lab03_mma_d64_w8_mt1_bk64) L(lab03_mma_d64_w4_mt2_bk32) L(lab03_mma_d64_w4_mt1_bk64) L(lab03_mma_d64_w8_mt2_bk64)
L(lab03_mma_d128_w4_mt1_bk64) L(lab03_mma_d128_w8_mt1_bk32) L(lab03_mma_d128_w4_mt1_bk32)
L(lab03_pipe_d16_w4_mt1_bk64) L(lab03_pipe_d16_w4_mt2_bk64) L(lab03_pipe_d32_w4_mt1_bk64) L(lab03_pipe_d32_w4_mt2_bk64)
L(lab03_pipe_d64_w4_mt1_bk64) L(lab03_pipe_d64_w8_mt1_bk64) L(lab03_pipe_d64_w4_mt2_bk32) L(lab03_pipe_d64_w4_mt1_bk128)
L(lab03_pipe_d128_w4_mt1_bk64) L(lab03_pipe_d128_w8_mt1_bk64) L(lab03_pipe_d128_w4_mt1_bk32)
L(lab03_wgmma_d64_launch) L(lab03_wgmma_ov_d64_wg2_launch) L(lab03_wgmma_ov_d64_wg3_launch)
L(lab03_wgmma_ov_d128_wg2_launch)
L(lab03_fa3_wg2_d64_launch) L(lab03_fa3_nopp_d64_launch) L(lab03_fa3_nopp_d128_launch) L(lab03_fa3_noov_d64_launch)
L(lab03_fa3_noov_d128_launch)
#undef L

// {name, Bq, launcher, wgmma, tma, dflt = 0}
static const flash_variant_t rungs_d16[] = {
    {"w4 mt2 bk128", 16 * 2 * 4, lab03_mma_d16_w4_mt2_bk128, 0, 0, 0},
    {"w4 mt1 bk128", 16 * 1 * 4, lab03_mma_d16_w4_mt1_bk128, 0, 0, 0},
    {"pipe w4 mt1 bk64", 16 * 1 * 4, lab03_pipe_d16_w4_mt1_bk64, 0, 0, 0},
    {"pipe w4 mt2 bk64", 16 * 2 * 4, lab03_pipe_d16_w4_mt2_bk64, 0, 0, 0},
};
static const flash_variant_t rungs_d32[] = {
    {"w4 mt2 bk128", 16 * 2 * 4, lab03_mma_d32_w4_mt2_bk128, 0, 0, 0},
    {"w4 mt1 bk64", 16 * 1 * 4, lab03_mma_d32_w4_mt1_bk64, 0, 0, 0},
    {"pipe w4 mt1 bk64", 16 * 1 * 4, lab03_pipe_d32_w4_mt1_bk64, 0, 0, 0},
    {"pipe w4 mt2 bk64", 16 * 2 * 4, lab03_pipe_d32_w4_mt2_bk64, 0, 0, 0},
};
static const flash_variant_t rungs_d64[] = {
    {"w8 mt1 bk64", 16 * 1 * 8, lab03_mma_d64_w8_mt1_bk64, 0, 0, 0},
    {"w4 mt2 bk32", 16 * 2 * 4, lab03_mma_d64_w4_mt2_bk32, 0, 0, 0},
    {"w4 mt1 bk64", 16 * 1 * 4, lab03_mma_d64_w4_mt1_bk64, 0, 0, 0},
    {"w8 mt2 bk64", 16 * 2 * 8, lab03_mma_d64_w8_mt2_bk64, 0, 0, 0},
    {"pipe w4 mt1 bk64", 16 * 1 * 4, lab03_pipe_d64_w4_mt1_bk64, 0, 0, 0},
    {"pipe w8 mt1 bk64", 16 * 1 * 8, lab03_pipe_d64_w8_mt1_bk64, 0, 0, 0},
    {"pipe w4 mt2 bk32", 16 * 2 * 4, lab03_pipe_d64_w4_mt2_bk32, 0, 0, 0},
    {"pipe w4 mt1 bk128", 16 * 1 * 4, lab03_pipe_d64_w4_mt1_bk128, 0, 0, 0},
    {"wgmma w8 mt1 bk64", 16 * 1 * 8, lab03_wgmma_d64_launch, 1, 0, 0},
    {"wgmma-ov w8 mt1 bk64", 128, lab03_wgmma_ov_d64_wg2_launch, 1, 0, 0},
    {"wgmma-ov w12 mt1 bk64", 192, lab03_wgmma_ov_d64_wg3_launch, 1, 0, 0},
    {"fa3 w12 bq128 bk128", 128, lab03_fa3_wg2_d64_launch, 1, 1, 0},
    {"fa3-nopp w12 bq128 bk128", 128, lab03_fa3_nopp_d64_launch, 1, 1, 0},
    {"fa3-noov w12 bq128 bk128", 128, lab03_fa3_noov_d64_launch, 1, 1, 0},
};
static const flash_variant_t rungs_d128[] = {
    {"w4 mt1 bk64", 16 * 1 * 4, lab03_mma_d128_w4_mt1_bk64, 0, 0, 0},
    {"w8 mt1 bk32", 16 * 1 * 8, lab03_mma_d128_w8_mt1_bk32, 0, 0, 0},
    {"w4 mt1 bk32", 16 * 1 * 4, lab03_mma_d128_w4_mt1_bk32, 0, 0, 0},
    {"pipe w4 mt1 bk64", 16 * 1 * 4, lab03_pipe_d128_w4_mt1_bk64, 0, 0, 0},
    {"pipe w8 mt1 bk64", 16 * 1 * 8, lab03_pipe_d128_w8_mt1_bk64, 0, 0, 0},
    {"pipe w4 mt1 bk32", 16 * 1 * 4, lab03_pipe_d128_w4_mt1_bk32, 0, 0, 0},
    {"wgmma-ov w8 mt1 bk64", 128, lab03_wgmma_ov_d128_wg2_launch, 1, 0, 0},
    {"fa3-nopp w12 bq128 bk128", 128, lab03_fa3_nopp_d128_launch, 1, 1, 0},
    {"fa3-noov w12 bq128 bk128", 128, lab03_fa3_noov_d128_launch, 1, 1, 0},
};
#define COUNT(x) ((int)(sizeof(x) / sizeof((x)[0])))

extern "C" int lab03_rungs(int d, const flash_variant_t** list) {
    switch (d) {
        case 16: *list = rungs_d16; return COUNT(rungs_d16);
        case 32: *list = rungs_d32; return COUNT(rungs_d32);
        case 64: *list = rungs_d64; return COUNT(rungs_d64);
        case 128: *list = rungs_d128; return COUNT(rungs_d128);
        default: *list = NULL; return 0;
    }
}

extern "C" const flash_variant_t* lab03_find(int d, const char* name, int* shipped) {
    const flash_variant_t* list;
    if (!name) return NULL;
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass == 0 ? lab03_rungs(d, &list) : flash_fwd_bf16_variants(d, &list);
        for (int i = 0; i < n; i++)
            if (strcmp(list[i].name, name) == 0) {
                if (shipped) *shipped = pass;
                return &list[i];
            }
    }
    return NULL;
}

extern "C" int lab03_can_run(const flash_variant_t* r, const attn_args_t* a, int wgmma_built, char* err,
                             size_t errlen) {
    if (!r || !a) return set_err(err, errlen, "lab03: no rung or no arguments");
    if (r->wgmma && !wgmma_built)
        return set_err(err, errlen, "rung '%s' needs sm_90a code (wgmma), and this build or GPU has none", r->name);
    if (r->tma) {
        tma_view_t view;
        char why[200];
        if (tma_view_bhnd(a->B, a->H, a->Nq, a->d, a->sq, &view, why, sizeof why) ||
            tma_view_bhnd(a->B, a->H, a->Nk, a->d, a->sk, &view, why, sizeof why) ||
            tma_view_bhnd(a->B, a->H, a->Nk, a->d, a->sv, &view, why, sizeof why))
            return set_err(err, errlen, "rung '%s' loads by TMA, which cannot describe this view: %s", r->name, why);
    }
    const int64_t blocks = (int64_t)((a->Nq + r->bq - 1) / r->bq) * a->B * a->H;
    if (blocks > INT32_MAX)
        return set_err(err, errlen, "rung '%s': a grid of %lld blocks exceeds 2^31 - 1", r->name, (long long)blocks);
    return 0;
}

extern "C" int lab03_run(const flash_variant_t* r, const attn_args_t* a, cudaStream_t stream, char* err,
                         size_t errlen) {
    if (flash_fwd_check_call(a, err, errlen) != 0) return -1;
    if (a->dtype != DT_BF16) return set_err(err, errlen, "lab03: the rungs are bf16 kernels (got %s)", dtype_name(a->dtype));
    if (lab03_can_run(r, a, r && r->wgmma ? (int)wgmma_built() : 1, err, errlen) != 0) return -1;
    r->launch(a, stream);
    return 0;
}
