// The softmax the two wgmma rungs share (wgmma.cu, wgmma_ov.cu).
// Run: build/lab/03_flashattn_fwd/rungs --d 64 --rung "wgmma w8 mt1 bk64"
//
// What the two wgmma rungs (wgmma.cu, wgmma_ov.cu) share: the per-tile masks and online softmax
// on a warpgroup's 64 x 64 score accumulator (the P~ packing is common/wgmma.cuh's, the epilogue
// the lesson's 03_flashattn_fwd/flash_fwd_fa3.cuh's). A warpgroup's 64 x 64 accumulator has
// mma.sync's per-warp layout (warp w of the group: rows 16w..16w+15), so all of this is
// flash_fwd_bf16.cuh's arithmetic in wgmma's register order:
//   s[4n + e]: row row0 + 8 (e / 2), key j0 + 8n + 2t + e % 2   (n = 0..7, t = lane % 4);
//   o[hh][4n + e]: the same rows, output column 64 hh + 8n + 2t + e % 2.
#pragma once
#include "03_flashattn_fwd/flash_fwd_fa3.cuh"  // Params, block_pos, wg_epilogue

namespace {

// Masks (causal, and keys past Nk) on a tile that needs them, then the online softmax per row:
// s becomes P~, O is rescaled by alpha, m and l move on. Each row's 16 values of the tile live
// in the 4 threads of a quad.
template <int DH>
__device__ __forceinline__ void wg_softmax_tile(const Params& p, float (&s)[32], float (&o)[DH][32], float (&m)[2],
                                                float (&l)[2], int j0, int bk, int wrow0, int row0, int t) {
    if ((p.causal && j0 + bk - 1 > wrow0) || j0 + bk > p.Nk) {
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = row0 + 8 * (e >> 1), col = j0 + 8 * n + 2 * t + (e & 1);
                if (col >= p.Nk || (p.causal && col > row)) s[4 * n + e] = -INFINITY;
            }
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float mx = m[hf];
#pragma unroll
        for (int n = 0; n < 8; n++) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * hf], s[4 * n + 2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mbase = (mx == -INFINITY) ? 0.0f : mx * p.scale_log2;  // a row with no key yet
        const float alpha = ex2_approx(m[hf] * p.scale_log2 - mbase);
        float rs = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                const float pe = ex2_approx(fmaf(s[4 * n + e], p.scale_log2, -mbase));
                s[4 * n + e] = pe;
                rs += pe;
            }
        l[hf] = l[hf] * alpha + rs;
        m[hf] = mx;
#pragma unroll
        for (int hh = 0; hh < DH; hh++)
#pragma unroll
            for (int n = 0; n < 8; n++) {
                o[hh][4 * n + 2 * hf] *= alpha;
                o[hh][4 * n + 2 * hf + 1] *= alpha;
            }
    }
}

// P~ as the A operand of O += P~ V_j: wg_pack_p (common/wgmma.cuh, shared with stage 04's
// backward, which packs P^T and dS^T the same way).

}  // namespace
