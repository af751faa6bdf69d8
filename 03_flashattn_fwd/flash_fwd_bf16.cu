// Dispatch of the bf16 forward by head dim and variant. The default is the table's `dflt` entry
// (fa3, flash_fwd_bf16_fa3.cu, at d 64 and 128) where it can run, else entry 0 (the mma.sync
// FlashAttention-2 kernel, flash_fwd_bf16.cuh); tests run every variant and `bench --variant`
// times them.
#include <cuda_runtime.h>
#include "common/check.h"
#include "common/wgmma.cuh"  // wgmma_built
#include "03_flashattn_fwd/flash_fwd.h"
#include "03_flashattn_fwd/flash_fwd_internal.h"
#include "common/tma.h"  // tma_view_bhnd: which views the TMA variants take

extern "C" {
extern const flash_variant_t flash_fwd_bf16_variants_d16[], flash_fwd_bf16_variants_d32[],
    flash_fwd_bf16_variants_d64[], flash_fwd_bf16_variants_d128[];
extern const int flash_fwd_bf16_n_variants_d16, flash_fwd_bf16_n_variants_d32, flash_fwd_bf16_n_variants_d64,
    flash_fwd_bf16_n_variants_d128;
}

// Per head dim, the selected index + 1 (0: the default); process-wide; only tests and benchmarks
// change it.
static int g_variant[129];

extern "C" int flash_fwd_bf16_variants(int d, const flash_variant_t** list) {
    switch (d) {
        case 16: *list = flash_fwd_bf16_variants_d16; return flash_fwd_bf16_n_variants_d16;
        case 32: *list = flash_fwd_bf16_variants_d32; return flash_fwd_bf16_n_variants_d32;
        case 64: *list = flash_fwd_bf16_variants_d64; return flash_fwd_bf16_n_variants_d64;
        case 128: *list = flash_fwd_bf16_variants_d128; return flash_fwd_bf16_n_variants_d128;
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
