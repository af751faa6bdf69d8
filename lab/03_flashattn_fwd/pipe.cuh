// Rung "pipe" (kernel template; pipe.cu instantiates it): next tile's scores interleaved with this tile's exponentials.
// Run: build/lab/03_flashattn_fwd/rungs --d 64 --rung "pipe w4 mt1 bk64"
//
// The software-pipelined variant of the bf16 FlashAttention-2 forward (same maths, same tile
// shapes and fragments as flash_fwd_bf16.cuh). Within one warp, the tensor cores and the
// exp unit (MUFU) would otherwise take turns: S_j = Q K_j^T (mma) -> softmax (ex2) -> P V_j
// (mma). Here iteration j issues the mma of the NEXT tile's scores, S_{j+1} = Q K_{j+1}^T,
// interleaved pair by pair with the exponentials of the current tile, so both units work
// at once (the idea of FlashAttention-3's intra-warpgroup overlap, on mma.sync).
// Loads run one step further ahead for K than for V: iteration j reads K_{j+1} and V_j while
// K_{j+2} and V_{j+1} are in flight; two shared-memory stages each still suffice.
// Costs a second set of score registers, so it is used with 16 rows per warp (MT = 1).
#pragma once
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"

namespace {

// s[.][2np], s[.][2np+1] = Q_i K^T for keys 16np .. 16np+15 of the tile in sKt.
template <class C>
__device__ __forceinline__ void qk_pair(float (&s)[C::MT][C::NT_S][4], const uint32_t (&qf)[C::MT][C::KS_QK][4],
                                        const bf16* sKt, int np, int lane) {
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[mt][2 * np][e] = s[mt][2 * np + 1][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < C::KS_QK; ks++) {
        uint32_t kb[4];
        const int r = np * 16 + (lane % 8) + 8 * (lane / 16);
        const int c = ks * 16 + 8 * ((lane / 8) % 2);
        ldmatrix_x4(kb, smem_u32(sKt + r * C::LD + c));
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++) {
            mma_m16n8k16_bf16(s[mt][2 * np], qf[mt][ks], kb[0], kb[1]);
            mma_m16n8k16_bf16(s[mt][2 * np + 1], qf[mt][ks], kb[2], kb[3]);
        }
    }
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) flash_fwd_bf16_pipe_kernel(const Params p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // (BQ, LD)
    bf16* sK = sQ + C::BQ * C::LD;                 // (2 stages, BK, LD): K_j in stage j % 2
    bf16* sV = sK + 2 * C::BK * C::LD;             // (2 stages, BK, LD): V_j in stage j % 2

    const BlockPos w = block_pos(p, C::BQ);  // long causal tiles first
    const int bh = w.bh, b = w.b, h = w.h, i0 = w.i0;
    const bf16 *Q = w.Q, *K = w.K, *V = w.V;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wrow0 = warp * 16 * C::MT;
    const int Tk = (p.Nk + C::BK - 1) / C::BK;
    // Key tiles the block walks (its last row's diagonal) and the ones this warp needs.
    const int n_tiles = p.causal ? min(Tk, (i0 + C::BQ - 1) / C::BK + 1) : Tk;
    const int n_warp = p.causal ? min(Tk, (i0 + wrow0 + 16 * C::MT - 1) / C::BK + 1) : Tk;

    // Prologue: group 0 = {Q, K_0}, group 1 = {K_1, V_0}.
    load_tile<C, C::BQ>(sQ, Q, p.sq[2], i0, p.Nq);
    load_tile<C, C::BK>(sK, K, p.sk[2], 0, p.Nk);
    cp_async_commit();
    if (n_tiles > 1) load_tile<C, C::BK>(sK + C::BK * C::LD, K, p.sk[2], C::BK, p.Nk);
    load_tile<C, C::BK>(sV, V, p.sv[2], 0, p.Nk);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    uint32_t qf[C::MT][C::KS_QK][4];
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int ks = 0; ks < C::KS_QK; ks++) {
            const int r = wrow0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
            const int c = ks * 16 + 8 * (lane / 16);
            ldmatrix_x4(qf[mt][ks], smem_u32(sQ + r * C::LD + c));
        }
    float s[C::MT][C::NT_S][4];   // S_j (raw scores, then P~)
    float sn[C::MT][C::NT_S][4];  // S_{j+1}, being computed
#pragma unroll
    for (int np = 0; np < C::NT_S / 2; np++) qk_pair<C>(s, qf, sK, np, lane);
    __syncthreads();  // K_0's stage is refilled (with K_2) at the top of iteration 0

    float o[C::MT][C::NT_O][4];
    float m[C::MT][2], l[C::MT][2];
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < C::NT_O; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][nt][e] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int j = 0; j < n_tiles; j++) {
        // Group j+2 = {K_{j+2}, V_{j+1}} (possibly empty), then wait for group j+1 = {K_{j+1}, V_j}.
        if (j + 2 < n_tiles) load_tile<C, C::BK>(sK + (j & 1) * C::BK * C::LD, K, p.sk[2], (j + 2) * C::BK, p.Nk);
        if (j + 1 < n_tiles)
            load_tile<C, C::BK>(sV + ((j + 1) & 1) * C::BK * C::LD, V, p.sv[2], (j + 1) * C::BK, p.Nk);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        if (j < n_warp) {
            const bool has_next = j + 1 < n_warp;
            const bf16* sKn = sK + ((j + 1) & 1) * C::BK * C::LD;
            const bf16* sVj = sV + (j & 1) * C::BK * C::LD;
            const int j0 = j * C::BK;
            if ((j0 + C::BK > p.Nk) || (p.causal && j0 + C::BK - 1 > i0 + wrow0)) {
#pragma unroll
                for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < C::NT_S; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int row = i0 + wrow0 + mt * 16 + g + 8 * (e / 2);
                            const int col = j0 + nt * 8 + 2 * t + (e % 2);
                            if (col >= p.Nk || (p.causal && col > row)) s[mt][nt][e] = -INFINITY;
                        }
            }
            // Row max of S_j, rescale of l and O (see flash_fwd_bf16.cuh for the maths).
            float mbase[C::MT][2], rs[C::MT][2];
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    float mx = m[mt][hf];
#pragma unroll
                    for (int nt = 0; nt < C::NT_S; nt++)
                        mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    mbase[mt][hf] = (mx == -INFINITY) ? 0.0f : mx * p.scale_log2;
                    const float alpha = ex2_approx(m[mt][hf] * p.scale_log2 - mbase[mt][hf]);
                    l[mt][hf] *= alpha;
                    m[mt][hf] = mx;
                    rs[mt][hf] = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < C::NT_O; nt++) {
                        o[mt][nt][2 * hf] *= alpha;
                        o[mt][nt][2 * hf + 1] *= alpha;
                    }
                }
            // The overlap: mma for S_{j+1} (keys of pair np) beside ex2 for S_j (pair np).
#pragma unroll
            for (int np = 0; np < C::NT_S / 2; np++) {
                if (has_next) qk_pair<C>(sn, qf, sKn, np, lane);
#pragma unroll
                for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                    for (int nt = 2 * np; nt < 2 * np + 2; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float pe = ex2_approx(fmaf(s[mt][nt][e], p.scale_log2, -mbase[mt][e / 2]));
                            s[mt][nt][e] = pe;
                            rs[mt][e / 2] += pe;
                        }
            }
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++) l[mt][0] += rs[mt][0], l[mt][1] += rs[mt][1];
            // O += P~ V_j
#pragma unroll
            for (int ks = 0; ks < C::KS_PV; ks++) {
                uint32_t pa[C::MT][4];
#pragma unroll
                for (int mt = 0; mt < C::MT; mt++) {
                    pa[mt][0] = pack_bf16(s[mt][2 * ks][0], s[mt][2 * ks][1]);
                    pa[mt][1] = pack_bf16(s[mt][2 * ks][2], s[mt][2 * ks][3]);
                    pa[mt][2] = pack_bf16(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
                    pa[mt][3] = pack_bf16(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
                }
#pragma unroll
                for (int np = 0; np < C::NT_O / 2; np++) {
                    uint32_t vb[4];
                    const int r = ks * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
                    const int c = np * 16 + 8 * (lane / 16);
                    ldmatrix_x4_trans(vb, smem_u32(sVj + r * C::LD + c));
#pragma unroll
                    for (int mt = 0; mt < C::MT; mt++) {
                        mma_m16n8k16_bf16(o[mt][2 * np], pa[mt], vb[0], vb[1]);
                        mma_m16n8k16_bf16(o[mt][2 * np + 1], pa[mt], vb[2], vb[3]);
                    }
                }
            }
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                for (int nt = 0; nt < C::NT_S; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][nt][e] = sn[mt][nt][e];
        }
        __syncthreads();  // K_{j+1} and V_j are refilled at the top of the next iteration
    }
    cp_async_wait<0>();  // nothing may be in flight when the block exits

    bf16* O = p.o + b * p.so[0] + h * p.so[1];
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lt = l[mt][hf];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const int row = i0 + wrow0 + mt * 16 + g + 8 * hf;
            if (row < p.Nq) {
                const float inv = 1.0f / lt;
                bf16* orow = O + (int64_t)row * p.so[2];
#pragma unroll
                for (int nt = 0; nt < C::NT_O; nt++)
                    *reinterpret_cast<uint32_t*>(orow + nt * 8 + 2 * t) =
                        pack_bf16(o[mt][nt][2 * hf] * inv, o[mt][nt][2 * hf + 1] * inv);
                if (t == 0) p.lse[(int64_t)bh * p.Nq + row] = m[mt][hf] * p.scale + logf(lt);
            }
        }
}

template <class C>
void launch_pipe(const attn_args_t* a, cudaStream_t stream) {
    launch_with<C, flash_fwd_bf16_pipe_kernel<C>>(a, stream);
}

}  // namespace
