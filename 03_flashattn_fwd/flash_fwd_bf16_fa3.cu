// The FlashAttention-3-layout forward's two instances that ship (flash_fwd_fa3.cuh has the
// kernel and its launcher): the default at head dims 64 and 128 where sm_90a code and TMA can run.
#include "03_flashattn_fwd/flash_fwd_fa3.cuh"

// d 64: three consumer warpgroups (Bq 192, FlashAttention-3's own d-64 tile).
extern "C" void flash_fwd_fa3_d64_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<64, true, true, 3>(a, s); }
// d 128: two consumer warpgroups (Bq 128; three do not fit the register file at d 128).
extern "C" void flash_fwd_fa3_d128_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<128>(a, s); }
