// The mma.sync FlashAttention-2 kernel (flash_fwd_bf16.cuh) at head dim 128, in its own
// translation unit so that the head dims compile in parallel: tile "w8 mt1 bk64" (8 warps of
// 1 16-row m-tiles, Bq 128, Bk 64, 1 block(s) per SM asked of the register allocator);
// the fallback where the FlashAttention-3-layout kernel (flash_fwd_bf16_fa3.cu) cannot run (no
// sm_90a code, or a view TMA cannot describe).
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"

extern "C" void flash_fwd_mma_d128_launch(const attn_args_t* a, cudaStream_t stream) {
    launch<Cfg<128, 8, 1, 64, 1>>(a, stream);
}
