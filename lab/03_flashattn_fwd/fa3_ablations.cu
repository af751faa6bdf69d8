// Rung "fa3 ablations": the lesson's FlashAttention-3-layout kernel (03_flashattn_fwd/
// flash_fwd_fa3.cuh) with one idea taken out, to measure what it buys: fa3-nopp without the
// ping-pong turns, fa3-noov without the softmax / P~V overlap, and at d 64 two consumer
// warpgroups (Bq 128) instead of the three that ship (NOTES.md, "Versions").
// Run: build/lab/03_flashattn_fwd/rungs --d 64 --rung "fa3-nopp w12 bq128 bk128"
#include "03_flashattn_fwd/flash_fwd_fa3.cuh"

extern "C" void lab03_fa3_wg2_d64_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<64>(a, s); }
extern "C" void lab03_fa3_nopp_d64_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<64, false>(a, s); }
extern "C" void lab03_fa3_nopp_d128_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<128, false>(a, s); }
extern "C" void lab03_fa3_noov_d64_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<64, true, false>(a, s); }
extern "C" void lab03_fa3_noov_d128_launch(const attn_args_t* a, cudaStream_t s) { launch_fa3<128, true, false>(a, s); }
