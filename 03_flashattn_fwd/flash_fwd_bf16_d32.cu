// The mma.sync FlashAttention-2 kernel (flash_fwd_bf16.cuh) at head dim 32, in its own
// translation unit so that the head dims compile in parallel: tile "w4 mt2 bk64" (4 warps of
// 2 16-row m-tiles, Bq 128, Bk 64, 2 block(s) per SM asked of the register allocator);
// the default at this head dim.
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"

extern "C" void flash_fwd_mma_d32_launch(const attn_args_t* a, cudaStream_t stream) {
    launch<Cfg<32, 4, 2, 64, 2>>(a, stream);
}
