// bf16 FlashAttention-2 forward, head dim 64: the tile-shape variants (see NOTES.md for
// their measured times). Entry 0 runs anywhere and is the fallback; the `dflt` entry (fa3) is the
// default where it can run; the others stay for the bench and tests.
// Names: w = warps, mt = 16-row m-tiles per warp (Bq = 16 * mt * w), bk = key-tile rows,
// pipe = the software-pipelined kernel (flash_fwd_bf16_pipe.cuh); wgmma = flash_fwd_bf16_wgmma.cu.
#include "03_flashattn_fwd/flash_fwd_bf16_pipe.cuh"

extern "C" void flash_fwd_wgmma_d64_launch(const attn_args_t* a, cudaStream_t stream);  // flash_fwd_bf16_wgmma.cu
// flash_fwd_bf16_wgmma_ov.cu: S_{j+1} overlapped with tile j's softmax; wg2 / wg3 = 2 / 3 warpgroups (Bq 128 / 192)
extern "C" void flash_fwd_wgmma_ov_d64_wg2_launch(const attn_args_t* a, cudaStream_t stream);
extern "C" void flash_fwd_wgmma_ov_d64_wg3_launch(const attn_args_t* a, cudaStream_t stream);
// flash_fwd_bf16_fa3.cu: FlashAttention-3's layout (TMA producer, 2 consumer warpgroups in ping-pong)
extern "C" void flash_fwd_fa3_d64_launch(const attn_args_t* a, cudaStream_t stream);
// ... and its ablations: fa3-nopp without the ping-pong turns, fa3-noov without the softmax / P~V overlap
extern "C" void flash_fwd_fa3_nopp_d64_launch(const attn_args_t* a, cudaStream_t stream);
extern "C" void flash_fwd_fa3_noov_d64_launch(const attn_args_t* a, cudaStream_t stream);
// ... and with three consumer warpgroups (Bq 192, FlashAttention-3's d-64 tile)
extern "C" void flash_fwd_fa3_wg3_d64_launch(const attn_args_t* a, cudaStream_t stream);

extern "C" const flash_variant_t flash_fwd_bf16_variants_d64[] = {
    {"w4 mt2 bk64", 16 * 2 * 4, launch<Cfg<64, 4, 2, 64, 2>>},
    {"w8 mt1 bk64", 16 * 1 * 8, launch<Cfg<64, 8, 1, 64, 2>>},
    {"w4 mt2 bk32", 16 * 2 * 4, launch<Cfg<64, 4, 2, 32, 3>>},
    {"w4 mt1 bk64", 16 * 1 * 4, launch<Cfg<64, 4, 1, 64, 4>>},
    {"w8 mt2 bk64", 16 * 2 * 8, launch<Cfg<64, 8, 2, 64, 1>>},
    {"pipe w4 mt1 bk64", 16 * 1 * 4, launch_pipe<Cfg<64, 4, 1, 64, 3>>},
    {"pipe w8 mt1 bk64", 16 * 1 * 8, launch_pipe<Cfg<64, 8, 1, 64, 2>>},
    {"pipe w4 mt2 bk32", 16 * 2 * 4, launch_pipe<Cfg<64, 4, 2, 32, 2>>},
    {"pipe w4 mt1 bk128", 16 * 1 * 4, launch_pipe<Cfg<64, 4, 1, 128, 2>>},
    // wgmma (sm_90a builds; elsewhere it runs entry 0): 2.00 ms against entry 0's 1.90 at the
    // leaderboard point (NOTES.md), so not the default.
    {"wgmma w8 mt1 bk64", 16 * 1 * 8, flash_fwd_wgmma_d64_launch, 1},
    {"wgmma-ov w8 mt1 bk64", 128, flash_fwd_wgmma_ov_d64_wg2_launch, 1},
    {"wgmma-ov w12 mt1 bk64", 192, flash_fwd_wgmma_ov_d64_wg3_launch, 1},
    // FlashAttention-3's layout, two consumer warpgroups (Bq 128), and its two ablations: for the
    // scan (NOTES.md has the times)
    {"fa3 w12 bq128 bk128", 128, flash_fwd_fa3_d64_launch, 1, 1},
    {"fa3-nopp w12 bq128 bk128", 128, flash_fwd_fa3_nopp_d64_launch, 1, 1},
    {"fa3-noov w12 bq128 bk128", 128, flash_fwd_fa3_noov_d64_launch, 1, 1},
    // ... with three (Bq 192, FlashAttention-3's own d-64 tile): the default (dflt) where it can
    // run (sm_90a, a TMA-describable view); 1.06-1.15 ms at the leaderboard point against the
    // two-warpgroup kernel's 1.30-1.33 (H100, 2026-11-26)
    {"fa3 w16 bq192 bk128", 192, flash_fwd_fa3_wg3_d64_launch, 1, 1, 1},
};
extern "C" const int flash_fwd_bf16_n_variants_d64 =
    (int)(sizeof flash_fwd_bf16_variants_d64 / sizeof flash_fwd_bf16_variants_d64[0]);
