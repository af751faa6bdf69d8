// The kernel template of the bf16 FlashAttention-2 forward on tensor cores (mma.sync.m16n8k16,
// bf16 in, fp32 accumulate): the fast path of flash_forward_cuda.
//
// One thread block per (query tile Q_i of Bq rows, batch*head). Each of WARPS warps owns
// 16*MT consecutive query rows and keeps, in registers for the whole key loop:
//   Q fragments   (MT, D/16) A-operands, loaded once from shared memory with ldmatrix;
//   O accumulator (MT, D/8) fp32 C-fragments;  m, l (the running row max and row sum).
// Per key tile K_j, V_j (BK rows, double-buffered in shared memory with cp.async so that the
// load of tile j+1 overlaps the maths of tile j):
//   S = Q_i K_j^T           mma, B-operand from K with ldmatrix (K rows are S's columns)
//   mask (diagonal / ragged tiles only), m_new, P~ = 2^(S*scale*log2e - m_new*scale*log2e)
//   l = alpha*l + rowsum(P~), O = alpha*O, alpha = 2^((m - m_new)*scale*log2e)
//   O += P~ V_j             P~'s C-fragments are re-packed as bf16 A-fragments in registers
//                           (no trip through shared memory); V via ldmatrix.trans
// Shared-memory rows are padded by 8 elements (16 bytes), so the 8 row addresses of an
// ldmatrix fall into 8 different 16-byte bank groups (conflict-free for every D here).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include "common/check.h"
#include "common/mma_sync.cuh"
#include "03_flashattn_fwd/flash_fwd_internal.h"

// Included by flash_fwd_bf16_d{16,32,64,128}.cu, each instantiating its head dim's tile (Cfg) in
// its own translation unit so that they compile in parallel.
namespace {

typedef __nv_bfloat16 bf16;

// PTX wrappers (cp.async, ldmatrix, mma.sync, pack_bf16, ex2_approx): common/mma_sync.cuh,
// shared with stage 04's backward.

// ---------------------------------------------------------------- tile shapes
template <int D_, int WARPS_, int MT_, int BK_, int MINB_>
struct Cfg {
    static constexpr int D = D_;          // head dim
    static constexpr int WARPS = WARPS_;
    static constexpr int MT = MT_;        // 16-row m-tiles per warp
    static constexpr int BK = BK_;        // key-tile rows (Bk)
    static constexpr int MINB = MINB_;    // blocks per SM asked of the register allocator
    static constexpr int BQ = 16 * MT * WARPS;  // query-tile rows (Bq)
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int LD = D + 8;      // padded shared-memory row, elements
    static constexpr int NT_S = BK / 8;   // n-tiles of S per m-tile
    static constexpr int KS_QK = D / 16;  // k-steps of Q K^T
    static constexpr int NT_O = D / 8;    // n-tiles of O per m-tile
    static constexpr int KS_PV = BK / 16; // k-steps of P V
    static constexpr size_t SMEM = (size_t)(BQ + 4 * BK) * LD * sizeof(bf16);  // Q + 2 stages of K, V
    static_assert(D % 16 == 0 && D >= 16, "head dim must be a multiple of 16 (k-steps of 16)");
    static_assert(NT_O % 2 == 0, "ldmatrix.x4 on V covers two 8-column n-tiles of O");
    static_assert(BK % 16 == 0, "key tiles are walked in k-steps of 16 keys");
};

struct Params {
    const bf16 *q, *k, *v;
    bf16* o;
    float* lse;
    int64_t sq[3], sk[3], sv[3], so[3];
    int H, BH, Nq, Nk, Tq, causal;
    float scale_log2;  // scale * log2(e): scores go straight into exp2
    float scale;
};

// What a block works on: query tile qt (rows i0 .. i0 + BQ - 1) of batch*head bh, and the base
// pointers of that head's Q, K, V. Long causal query tiles first: block 0 gets the last query
// tile, so the blocks with the most key tiles start early and the short ones fill in at the end.
struct BlockPos {
    int qt, bh, b, h, i0;
    const bf16 *Q, *K, *V;
};
__device__ __forceinline__ BlockPos block_pos(const Params& p, int bq) {
    BlockPos w;
    w.qt = p.Tq - 1 - (int)(blockIdx.x / p.BH);
    w.bh = (int)(blockIdx.x % p.BH);
    w.b = w.bh / p.H;
    w.h = w.bh % p.H;
    w.i0 = w.qt * bq;
    w.Q = p.q + w.b * p.sq[0] + w.h * p.sq[1];
    w.K = p.k + w.b * p.sk[0] + w.h * p.sk[1];
    w.V = p.v + w.b * p.sv[0] + w.h * p.sv[1];
    return w;
}

// Copies rows [r0, r0 + ROWS) of a [N, D] bf16 view (row stride rs) into shared memory with
// padded rows; rows >= n are zero-filled.
template <class C, int ROWS>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* g, int64_t rs, int r0, int n) {
    constexpr int CHUNKS = C::D / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += C::THREADS) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        const bool valid = r0 + r < n;
        const bf16* src = valid ? g + (int64_t)(r0 + r) * rs + col : g;
        cp_async16(smem_u32(s + r * C::LD + col), src, valid);
    }
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) flash_fwd_bf16_kernel(const Params p) {
    // STUDENT-BEGIN(03.flash_fwd_bf16_kernel): Algorithm 1 on tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate): one block per (query tile Q_i, batch*head), each warp 16·MT rows; Q_i fragments once by ldmatrix; K_j, V_j double-buffered by cp.async; S = Q_i K_j^T, masks only on diagonal / ragged tiles, online softmax in registers (m, l, alpha by exp2), O += P~ V_j with P~ re-packed as bf16 A fragments; O = O / l in bf16, L = m·scale + ln l | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*bf16*
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // (BQ, LD)
    bf16* sK = sQ + C::BQ * C::LD;                 // (2 stages, BK, LD)
    bf16* sV = sK + 2 * C::BK * C::LD;             // (2 stages, BK, LD)

    const BlockPos w = block_pos(p, C::BQ);
    const int bh = w.bh, b = w.b, h = w.h, i0 = w.i0;
    const bf16 *Q = w.Q, *K = w.K, *V = w.V;

    const int Tk = (p.Nk + C::BK - 1) / C::BK;
    // Causal: key tiles wholly above the diagonal (first key > last query of the tile) are skipped.
    const int n_tiles = p.causal ? min(Tk, (i0 + C::BQ - 1) / C::BK + 1) : Tk;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;        // mma fragment coordinates
    const int wrow0 = warp * 16 * C::MT;         // first tile row of this warp

    load_tile<C, C::BQ>(sQ, Q, p.sq[2], i0, p.Nq);
    load_tile<C, C::BK>(sK, K, p.sk[2], 0, p.Nk);
    load_tile<C, C::BK>(sV, V, p.sv[2], 0, p.Nk);
    cp_async_commit();

    uint32_t qf[C::MT][C::KS_QK][4];   // Q_i fragments (A operands)
    float o[C::MT][C::NT_O][4];        // O accumulator
    float m[C::MT][2], l[C::MT][2];    // rows g and g+8 of each m-tile; l is this thread's partial sum
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
        const int stage = j & 1;
        if (j + 1 < n_tiles) {  // prefetch K_{j+1}, V_{j+1} into the other stage
            load_tile<C, C::BK>(sK + (stage ^ 1) * C::BK * C::LD, K, p.sk[2], (j + 1) * C::BK, p.Nk);
            load_tile<C, C::BK>(sV + (stage ^ 1) * C::BK * C::LD, V, p.sv[2], (j + 1) * C::BK, p.Nk);
            cp_async_commit();
            cp_async_wait<1>();  // everything but the newest group: tile j (and Q) have landed
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        if (j == 0) {  // Q fragments, once: matrices (rows 0-7|8-15) x (cols 0-7|8-15)
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
                for (int ks = 0; ks < C::KS_QK; ks++) {
                    const int r = wrow0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
                    const int c = ks * 16 + 8 * (lane / 16);
                    ldmatrix_x4(qf[mt][ks], smem_u32(sQ + r * C::LD + c));
                }
        }

        // Causal: a warp whose rows all lie before the tile's first key has nothing to add
        // (its whole slice of the tile is masked); it skips the maths but not the barriers.
        const int j0 = j * C::BK;
        if (!(p.causal && j0 > i0 + wrow0 + 16 * C::MT - 1)) {
            const bf16* sKj = sK + stage * C::BK * C::LD;
            const bf16* sVj = sV + stage * C::BK * C::LD;

            // S = Q_i K_j^T (raw, unscaled)
            float s[C::MT][C::NT_S][4];
    #pragma unroll
            for (int mt = 0; mt < C::MT; mt++)
    #pragma unroll
                for (int nt = 0; nt < C::NT_S; nt++)
    #pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.0f;
    #pragma unroll
            for (int ks = 0; ks < C::KS_QK; ks++) {
    #pragma unroll
                for (int np = 0; np < C::NT_S / 2; np++) {
                    // matrices: keys (0-7 | 8-15 of this pair) x d (0-7 | 8-15 of this k-step)
                    uint32_t kb[4];
                    const int r = np * 16 + (lane % 8) + 8 * (lane / 16);
                    const int c = ks * 16 + 8 * ((lane / 8) % 2);
                    ldmatrix_x4(kb, smem_u32(sKj + r * C::LD + c));
    #pragma unroll
                    for (int mt = 0; mt < C::MT; mt++) {
                        mma_m16n8k16_bf16(s[mt][2 * np], qf[mt][ks], kb[0], kb[1]);
                        mma_m16n8k16_bf16(s[mt][2 * np + 1], qf[mt][ks], kb[2], kb[3]);
                    }
                }
            }

            // Mask only where needed: the ragged last key tile and tiles crossing the diagonal.
            const bool need_mask = (j0 + C::BK > p.Nk) || (p.causal && j0 + C::BK - 1 > i0 + wrow0);
            if (need_mask) {
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

            // Online softmax, per row (each row's 2*NT_S values live in the 4 threads of a quad).
    #pragma unroll
            for (int mt = 0; mt < C::MT; mt++) {
    #pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    float mx = m[mt][hf];
    #pragma unroll
                    for (int nt = 0; nt < C::NT_S; nt++)
                        mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    // mx is -inf only if this row has seen no key yet; cannot happen (key 0 is in
                    // tile 0 and visible to every row) but keeps 2^(-inf - -inf) = NaN out regardless.
                    const float mbase = (mx == -INFINITY) ? 0.0f : mx * p.scale_log2;
                    const float alpha = ex2_approx(m[mt][hf] * p.scale_log2 - mbase);
                    float rs = 0.0f;
    #pragma unroll
                    for (int nt = 0; nt < C::NT_S; nt++)
    #pragma unroll
                        for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                            const float pe = ex2_approx(fmaf(s[mt][nt][e], p.scale_log2, -mbase));
                            s[mt][nt][e] = pe;
                            rs += pe;
                        }
                    l[mt][hf] = l[mt][hf] * alpha + rs;
                    m[mt][hf] = mx;
    #pragma unroll
                    for (int nt = 0; nt < C::NT_O; nt++) {
                        o[mt][nt][2 * hf] *= alpha;
                        o[mt][nt][2 * hf + 1] *= alpha;
                    }
                }
            }

            // O += P~ V_j: two S n-tiles (16 keys) form one A fragment.
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
                    // matrices (transposed): keys (0-7 | 8-15 of this k-step) x d (0-7 | 8-15 of pair)
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
        }  // end of this warp's maths on tile j
        __syncthreads();  // every warp is done with this stage before it is refilled
    }

    // O_i = diag(l)^-1 O_i, L_i = m*scale + ln(l)
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
    // STUDENT-END(03.flash_fwd_bf16_kernel)
}

// The Params of a call, for a kernel whose query tiles have C::BQ rows (every bf16 launcher's,
// launch_with's below and the TMA forward's, flash_fwd_bf16_fa3.cu).
template <class C>
Params params_from_args(const attn_args_t* a) {
    // STUDENT-BEGIN(03.flash_fwd_bf16_params): fill Params from attn_args_t: pointers, strides, H, B·H, Nq, Nk, Tq = ceil(Nq / C::BQ), causal, scale and scale·log2(e) | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*bf16* | uses: C::BQ
    Params p;
    p.q = static_cast<const bf16*>(a->q);
    p.k = static_cast<const bf16*>(a->k);
    p.v = static_cast<const bf16*>(a->v);
    p.o = static_cast<bf16*>(a->o);
    p.lse = a->lse;
    for (int i = 0; i < 3; i++) {
        p.sq[i] = a->sq[i];
        p.sk[i] = a->sk[i];
        p.sv[i] = a->sv[i];
        p.so[i] = a->so[i];
    }
    p.H = a->H;
    p.BH = a->B * a->H;
    p.Nq = a->Nq;
    p.Nk = a->Nk;
    p.Tq = (a->Nq + C::BQ - 1) / C::BQ;
    p.causal = a->causal;
    p.scale = a->scale;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    return p;
    // STUDENT-END(03.flash_fwd_bf16_params)
}

template <class C, void (*KERNEL)(const Params)>
void launch_with(const attn_args_t* a, cudaStream_t stream) {
    // STUDENT-BEGIN(03.flash_fwd_bf16_launch): Params from params_from_args<C>, opt in to C::SMEM bytes of dynamic shared memory, launch KERNEL on Tq·B·H blocks of C::THREADS, then CUDA_CHECK_LAST | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*bf16* | uses: C::SMEM
    const Params p = params_from_args<C>(a);
    // Opt in to more than 48 KiB of dynamic shared memory (per device, so on every launch: cheap).
    CUDA_CHECK(cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)C::SMEM));
    const unsigned blocks = (unsigned)p.Tq * (unsigned)p.BH;  // 1-D grid: no 65535 limit on B*H
    KERNEL<<<blocks, C::THREADS, C::SMEM, stream>>>(p);
    CUDA_CHECK_LAST();
    // STUDENT-END(03.flash_fwd_bf16_launch)
}

template <class C>
void launch(const attn_args_t* a, cudaStream_t stream) {
    launch_with<C, flash_fwd_bf16_kernel<C>>(a, stream);
}

}  // namespace
