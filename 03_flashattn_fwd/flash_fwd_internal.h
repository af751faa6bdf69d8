// Internal to stage 03: the two kernel launchers behind flash_forward_cuda (flash_fwd_api.c).
// Both assume flash_fwd_check_call() accepted the arguments.
#pragma once
#include <cuda_runtime_api.h>
#include "common/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// flash_fwd_supports() plus what only a call can check: non-NULL pointers and bf16 alignment.
// 0, or -1 with a reason.
int flash_fwd_check_call(const attn_args_t* a, char* err, size_t errlen);

// Query-tile rows of each path (the grid has ceil(Nq / Bq) * B * H blocks).
int flash_fwd_bf16_block_rows(int d);
int flash_fwd_f32_block_rows(int d);
void flash_fwd_bf16_launch(const attn_args_t* a, cudaStream_t stream);  // mma.sync tensor cores

// The bf16 kernels that ship, per head dim (flash_fwd_bf16.cu). Entry 0 (mma.sync) runs
// anywhere; the entry marked `dflt` (fa3 at d 64 and 128) is the default where it can run, entry
// 0 elsewhere and at d 16/32.
typedef struct {
    const char* name;  // "w4 mt2 bk64": warps, 16-row m-tiles per warp, key-tile rows
    int bq;            // query-tile rows
    void (*launch)(const attn_args_t* a, cudaStream_t stream);
    int wgmma;         // 1: a wgmma kernel, which runs only where the code was built for sm_90a
                       // (elsewhere its launcher runs entry 0, and so does the dispatch below)
    int tma;           // 1: loads by TMA, which runs only on views a tensor map can describe
                       // (tma_view_bhnd; elsewhere entry 0 runs, as with wgmma above)
    int dflt;          // 1: the default at this head dim (at most one entry; none: entry 0)
} flash_variant_t;
int flash_fwd_bf16_variants(int d, const flash_variant_t** list);  // count; 0 for an unsupported d
// Selects variant v (an index into the list; FLASH_FWD_DEFAULT_VARIANT or out of range: the
// default) for head dim d. Tests and the benches only; process-wide, not thread-safe.
#define FLASH_FWD_DEFAULT_VARIANT (-1)
void flash_fwd_bf16_set_variant(int d, int v);
// The table's default entry at head dim d (its `dflt` entry, else 0), before the checks below.
int flash_fwd_bf16_default_variant(int d);
// The dispatch rule, as a pure function (no GPU; tested on the CPU): the index of the variant
// that runs at head dim d when variant `requested` is selected, in a build with or without the
// wgmma code. Out of range (FLASH_FWD_DEFAULT_VARIANT too): the default entry; a wgmma variant
// without the wgmma code: 0. -1 for an unsupported d. flash_fwd_bf16_launch and
// flash_fwd_kernel_name both go through it.
int flash_fwd_bf16_variant_that_runs(int d, int requested, int wgmma_built);
// The same rule for a call: also entry 0 where the variant loads by TMA and a's q, k or v view is
// one TMA cannot describe (a zero stride on an axis longer than 1). Pure; -1 for an unsupported d.
int flash_fwd_bf16_variant_for(const attn_args_t* a, int requested, int wgmma_built);
void flash_fwd_f32_launch(const attn_args_t* a, cudaStream_t stream);   // fp32 CUDA cores

#ifdef __cplusplus
}
#endif
