// Rung "tile shapes": the lesson's mma.sync kernel (03_flashattn_fwd/flash_fwd_bf16.cuh) at the
// other tile shapes tried per head dim; none beat the one that ships (NOTES.md, "Versions").
// Run: build/lab/03_flashattn_fwd/rungs --d 64 --rung "w8 mt1 bk64"   (--list names them all)
// Names: w = warps, mt = 16-row m-tiles per warp (Bq = 16 mt w), bk = key-tile rows; the last
// Cfg argument is the blocks per SM asked of the register allocator.
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"

#define MMA_TILE(name, D, W, MT, BK, MINB) \
    extern "C" void name(const attn_args_t* a, cudaStream_t s) { launch<Cfg<D, W, MT, BK, MINB>>(a, s); }

MMA_TILE(lab03_mma_d16_w4_mt2_bk128, 16, 4, 2, 128, 2)
MMA_TILE(lab03_mma_d16_w4_mt1_bk128, 16, 4, 1, 128, 3)
MMA_TILE(lab03_mma_d32_w4_mt2_bk128, 32, 4, 2, 128, 2)
MMA_TILE(lab03_mma_d32_w4_mt1_bk64, 32, 4, 1, 64, 4)
MMA_TILE(lab03_mma_d64_w8_mt1_bk64, 64, 8, 1, 64, 2)
MMA_TILE(lab03_mma_d64_w4_mt2_bk32, 64, 4, 2, 32, 3)
MMA_TILE(lab03_mma_d64_w4_mt1_bk64, 64, 4, 1, 64, 4)
MMA_TILE(lab03_mma_d64_w8_mt2_bk64, 64, 8, 2, 64, 1)
MMA_TILE(lab03_mma_d128_w4_mt1_bk64, 128, 4, 1, 64, 3)
MMA_TILE(lab03_mma_d128_w8_mt1_bk32, 128, 8, 1, 32, 2)
MMA_TILE(lab03_mma_d128_w4_mt1_bk32, 128, 4, 1, 32, 3)
