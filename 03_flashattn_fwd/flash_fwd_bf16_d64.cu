// The mma.sync FlashAttention-2 kernel (flash_fwd_bf16.cuh) at head dim 64, in its own
// translation unit so that the head dims compile in parallel: tile "w4 mt2 bk64" (4 warps of
// 2 16-row m-tiles, Bq 128, Bk 64, 2 block(s) per SM asked of the register allocator);
// the fallback where the FlashAttention-3-layout kernel (flash_fwd_bf16_fa3.cu) cannot run (no
// sm_90a code, or a view TMA cannot describe).
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"

extern "C" void flash_fwd_mma_d64_launch(const attn_args_t* a, cudaStream_t stream) {
    launch<Cfg<64, 4, 2, 64, 2>>(a, stream);
}
