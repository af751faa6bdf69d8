// Rung "pipe": the mma.sync kernel with the next tile's Q K^T interleaved with this tile's
// exponentials (pipe.cuh), at the tile shapes tried; slower than the plain kernel (NOTES.md).
// Run: build/lab/03_flashattn_fwd/rungs --d 64 --rung "pipe w4 mt1 bk64"
#include "lab/03_flashattn_fwd/pipe.cuh"

#define PIPE_TILE(name, D, W, MT, BK, MINB) \
    extern "C" void name(const attn_args_t* a, cudaStream_t s) { launch_pipe<Cfg<D, W, MT, BK, MINB>>(a, s); }

PIPE_TILE(lab03_pipe_d16_w4_mt1_bk64, 16, 4, 1, 64, 3)
PIPE_TILE(lab03_pipe_d16_w4_mt2_bk64, 16, 4, 2, 64, 2)
PIPE_TILE(lab03_pipe_d32_w4_mt1_bk64, 32, 4, 1, 64, 3)
PIPE_TILE(lab03_pipe_d32_w4_mt2_bk64, 32, 4, 2, 64, 2)
PIPE_TILE(lab03_pipe_d64_w4_mt1_bk64, 64, 4, 1, 64, 3)
PIPE_TILE(lab03_pipe_d64_w8_mt1_bk64, 64, 8, 1, 64, 2)
PIPE_TILE(lab03_pipe_d64_w4_mt2_bk32, 64, 4, 2, 32, 2)
PIPE_TILE(lab03_pipe_d64_w4_mt1_bk128, 64, 4, 1, 128, 2)
PIPE_TILE(lab03_pipe_d128_w4_mt1_bk64, 128, 4, 1, 64, 2)
PIPE_TILE(lab03_pipe_d128_w8_mt1_bk64, 128, 8, 1, 64, 1)
PIPE_TILE(lab03_pipe_d128_w4_mt1_bk32, 128, 4, 1, 32, 3)
