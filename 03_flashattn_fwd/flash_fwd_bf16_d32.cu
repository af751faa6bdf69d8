// bf16 FlashAttention-2 forward, head dim 32: the tile-shape variants (see NOTES.md for
// their measured times). Entry 0 is the default; the others stay for the bench and tests.
// Names: w = warps, mt = 16-row m-tiles per warp (Bq = 16 * mt * w), bk = key-tile rows,
// pipe = the software-pipelined kernel (flash_fwd_bf16_pipe.cuh).
#include "03_flashattn_fwd/flash_fwd_bf16_pipe.cuh"

extern "C" const flash_variant_t flash_fwd_bf16_variants_d32[] = {
    {"w4 mt2 bk64", 16 * 2 * 4, launch<Cfg<32, 4, 2, 64, 2>>},
    {"w4 mt2 bk128", 16 * 2 * 4, launch<Cfg<32, 4, 2, 128, 2>>},
    {"w4 mt1 bk64", 16 * 1 * 4, launch<Cfg<32, 4, 1, 64, 4>>},
    {"pipe w4 mt1 bk64", 16 * 1 * 4, launch_pipe<Cfg<32, 4, 1, 64, 3>>},
    {"pipe w4 mt2 bk64", 16 * 2 * 4, launch_pipe<Cfg<32, 4, 2, 64, 2>>},
};
extern "C" const int flash_fwd_bf16_n_variants_d32 =
    (int)(sizeof flash_fwd_bf16_variants_d32 / sizeof flash_fwd_bf16_variants_d32[0]);
