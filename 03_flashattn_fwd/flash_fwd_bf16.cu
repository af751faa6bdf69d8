// Dispatch of the bf16 forward by head dim. Each head dim has a short table of the kernels that
// ship: entry 0, the mma.sync FlashAttention-2 kernel (flash_fwd_bf16.cuh), runs anywhere; at d 64
// and 128 the table's `dflt` entry, the FlashAttention-3-layout kernel (flash_fwd_bf16_fa3.cu), is
// the default where it can run (sm_90a code, a view TMA can describe). Tests run every entry;
// `bench --variants` and `flash_fwd --variant` select one.
#include <cuda_runtime.h>
#include "common/check.h"
#include "common/wgmma.cuh"  // wgmma_built
#include "03_flashattn_fwd/flash_fwd.h"
#include "03_flashattn_fwd/flash_fwd_internal.h"
#include "common/tma.h"  // tma_view_bhnd: which views the TMA variants take

extern "C" {
// flash_fwd_bf16_d{16,32,64,128}.cu: the mma.sync kernel's tile at each head dim
void flash_fwd_mma_d16_launch(const attn_args_t* a, cudaStream_t stream);
void flash_fwd_mma_d32_launch(const attn_args_t* a, cudaStream_t stream);
void flash_fwd_mma_d64_launch(const attn_args_t* a, cudaStream_t stream);
void flash_fwd_mma_d128_launch(const attn_args_t* a, cudaStream_t stream);
// flash_fwd_bf16_fa3.cu: TMA producer warpgroup, wgmma consumers in ping-pong (sm_90a)
void flash_fwd_fa3_d64_launch(const attn_args_t* a, cudaStream_t stream);
void flash_fwd_fa3_d128_launch(const attn_args_t* a, cudaStream_t stream);
}

// Names: w = warps, mt = 16-row m-tiles per warp (Bq = 16 * mt * w), bq / bk = query / key-tile
// rows; fa3's w counts the producer warpgroup's warps too.
static const flash_variant_t variants_d16[] = {
    {"w4 mt2 bk64", 16 * 2 * 4, flash_fwd_mma_d16_launch, 0, 0, 0},
};
static const flash_variant_t variants_d32[] = {
    {"w4 mt2 bk64", 16 * 2 * 4, flash_fwd_mma_d32_launch, 0, 0, 0},
};
static const flash_variant_t variants_d64[] = {
    {"w4 mt2 bk64", 16 * 2 * 4, flash_fwd_mma_d64_launch, 0, 0, 0},
    {"fa3 w16 bq192 bk128", 192, flash_fwd_fa3_d64_launch, 1, 1, 1},  // 3 consumer warpgroups
};
static const flash_variant_t variants_d128[] = {
    {"w8 mt1 bk64", 16 * 1 * 8, flash_fwd_mma_d128_launch, 0, 0, 0},
    {"fa3 w12 bq128 bk128", 128, flash_fwd_fa3_d128_launch, 1, 1, 1},  // 2 consumer warpgroups
};
#define COUNT(x) ((int)(sizeof(x) / sizeof((x)[0])))

// Per head dim, the selected index + 1 (0: the default); process-wide; only tests and benchmarks
// change it.
static int g_variant[129];

extern "C" int flash_fwd_bf16_variants(int d, const flash_variant_t** list) {
    switch (d) {
        case 16: *list = variants_d16; return COUNT(variants_d16);
        case 32: *list = variants_d32; return COUNT(variants_d32);
        case 64: *list = variants_d64; return COUNT(variants_d64);
        case 128: *list = variants_d128; return COUNT(variants_d128);
        default: *list = NULL; return 0;
    }
}
extern "C" void flash_fwd_bf16_set_variant(int d, int v) {
    if (d >= 0 && d <= 128) g_variant[d] = v < 0 ? 0 : v + 1;
}

extern "C" int flash_fwd_bf16_default_variant(int d) {
    const flash_variant_t* list;
    const int n = flash_fwd_bf16_variants(d, &list);
    for (int i = 0; i < n; i++)
        if (list[i].dflt) return i;
    return n > 0 ? 0 : -1;
}

extern "C" int flash_fwd_bf16_block_rows(int d) {
    const flash_variant_t* list;
    const int n = flash_fwd_bf16_variants(d, &list);
    int bq = 0;  // the smallest Bq of any variant: the grid-size check must hold for all
    for (int i = 0; i < n; i++)
        if (bq == 0 || list[i].bq < bq) bq = list[i].bq;
    return bq;
}

extern "C" int flash_fwd_bf16_variant_that_runs(int d, int requested, int wgmma_built) {
    const flash_variant_t* list;
    const int n = flash_fwd_bf16_variants(d, &list);
    if (n == 0) return -1;
    if (requested < 0 || requested >= n) requested = flash_fwd_bf16_default_variant(d);
    if (list[requested].wgmma && !wgmma_built) return 0;  // what its launcher falls back to
    return requested;
}

extern "C" int flash_fwd_bf16_variant_for(const attn_args_t* a, int requested, int wgmma_built) {
    const int v = flash_fwd_bf16_variant_that_runs(a->d, requested, wgmma_built);
    if (v <= 0) return v;
    const flash_variant_t* list;
    flash_fwd_bf16_variants(a->d, &list);
    if (list[v].tma) {
        tma_view_t view;
        if (tma_view_bhnd(a->B, a->H, a->Nq, a->d, a->sq, &view, NULL, 0) ||
            tma_view_bhnd(a->B, a->H, a->Nk, a->d, a->sk, &view, NULL, 0) ||
            tma_view_bhnd(a->B, a->H, a->Nk, a->d, a->sv, &view, NULL, 0))
            return 0;  // what its launcher falls back to
    }
    return v;
}

// The selected variant's index for this call; wgmma_built() (a device query) is asked only
// when that variant is a wgmma one.
static int variant_now(const attn_args_t* a) {
    const flash_variant_t* list;
    const int n = flash_fwd_bf16_variants(a->d, &list);
    int v = g_variant[a->d] - 1;  // -1: the default
    if (n > 0 && (v < 0 || v >= n)) v = flash_fwd_bf16_default_variant(a->d);
    const int needs_wgmma = n > 0 && list[v].wgmma;
    return flash_fwd_bf16_variant_for(a, v, needs_wgmma ? (int)wgmma_built() : 1);
}

extern "C" void flash_fwd_bf16_launch(const attn_args_t* a, cudaStream_t stream) {
    const flash_variant_t* list;
    if (flash_fwd_bf16_variants(a->d, &list) == 0) DIE("flash_fwd_bf16_launch: head dim %d not supported", a->d);
    list[variant_now(a)].launch(a, stream);
}

extern "C" const char* flash_fwd_kernel_name(const attn_args_t* a) {
    if (!a || (a->d != 16 && a->d != 32 && a->d != 64 && a->d != 128)) return "unsupported";
    if (a->dtype == DT_F32) return "f32 cuda-core";  // flash_forward_cuda's other branch
    if (a->dtype != DT_BF16) return "unsupported";
    const flash_variant_t* list;
    flash_fwd_bf16_variants(a->d, &list);
    return list[variant_now(a)].name;
}
