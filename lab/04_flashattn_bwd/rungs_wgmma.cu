// Rungs 16-20: rung 10's single pass on wgmma (warpgroups per block, blocks per SM, staged dQ).
// Run: build/lab/04_flashattn_bwd/bench_rungs --rung 16   (16 to 20; sm_90a)
// Versions 16-19: the single-pass backward (version 10's schedule) on Hopper's warpgroup MMA
// (wgmma, sm_90a); bf16, d = 64. 19 is what the default (version 20) runs at d 64 (flash_bwd.h);
// 16-18 are kept experiments. Version 20: 19's kernel for d = 128 (the same template, D = 128;
// below), the default: 7.98 ms at N 16384, 16 heads, causal, against version 1's 15.69 (H100).
//
// Why: versions 6-15 issue mma.sync, whose B operands every warp reads again from shared memory
// with ldmatrix (NOTES.md: ~59% of the shared-memory budget, the L1 pipe 71% busy in ncu) and
// whose results wait on registers, with 2 warps per scheduler to hide it. wgmma reads its shared
// operands itself, once per warpgroup (4 warps, a 64-row tile), and runs asynchronously: the
// warps compute P and dS while the tensor cores work on the previous products.
//
// Block (bh, j): 2 warpgroups, 128 keys (64 each); K_j, V_j in shared memory as core matrices
// (common/wgmma.cuh). Per query tile i of 64 rows (Q_i, dO_i, L_i, D_i double-buffered with cp.async):
//   G1  S^T = K_j Q_i^T, dP^T = V_j dO_i^T     m64n64k16 x 4 each, both operands from shared memory
//   G2  dQ_{i-1} += scale dS_{i-1} K_j        m64n32k16 x 8: warpgroup w takes d columns 32w..;
//                                             A = dS^T of the previous tile (MN-major), B = K_j
//                                             (MN-major); runs while this tile's P, dS are computed
//       P^T = 2^(S^T scale log2e - L), dS^T = P^T o (dP^T - D)  (registers; masks on the diagonal)
//       dS^T -> shared memory (bf16, two buffers)
//   G3  dV_j += P^T dO_i, dK_j += dS^T Q_i      m64n64k16 x 4 each, A = P^T / dS^T from registers
//                                             (the accumulator layout is the A layout), B MN-major
//       dQ_{i-1} (G2's result) added to the fp32 accumulator with 16-byte reductions
// One barrier per step, as version 10. The accumulator of each warpgroup's 64 x 64 products has
// the layout of version 10's per-warp tiles (warp w of the block: keys 16w..16w+15), so the
// masks, the exponentials and the epilogue are version 10's.
//
// Version 20 (D = 128; 19's block: 2 warpgroups, 128 keys, STAGE): every [rows][128] tile (K_j,
// V_j, Q_i, dO_i) is two [rows][64] core-matrix halves (a descriptor has one stride per
// direction), so G1 is 8 k-steps of m64n64k16 per product, the second 4 in the second half; G2
// gives warpgroup w the 64 dQ columns of half w (m64n64k16 x 8, 32 registers); G3 is two
// m64n64k16 per k-step and product, one per half, into dK[h], dV[h] (64 + 64 registers). dS^T
// stays keys x 64 queries. Registers: dK, dV 128 + S^T, dP^T 64 + dQ 32 = 224 accumulators, so
// G2 moves from before the softmax to behind G3 (then S^T, dP^T are dead and G3's A operands are
// 32 registers): the softmax no longer overlaps G2 inside a warpgroup. ptxas (CUDA 13.0,
// sm_90a): 255 registers, 0 spills, no C7512; shared memory 199 680 bytes (195 KB: K_j, V_j
// 32 KB each, Q_i, dO_i 2 x 16 KB each, dS^T 2 x 16 KB, L_i, D_i 1 KB, dQ staging 34 KB), one
// block per SM. The d 64 kernels (16-19) compile to the same SASS as before the template
// (scripts/sass_diff.sh -m, NOTES.md).
#include <type_traits>
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/wgmma.cuh"
#include "common/check.h"
#include "lab/04_flashattn_bwd/rungs.cuh"

namespace lab04 {

namespace {

typedef __nv_bfloat16 bf16;
constexpr int kBQ = 64;
// NWG warpgroups per block, 64 keys each; head dim D (64, or 128 for version 20). Shared memory:
// Ks | Vs | Qs[2] | dOs[2] | dSs[2] (dS^T: keys x 64 queries) | Ls[2][64] | Ds[2][64] (| staging)
// A [rows][128] tile (D = 128) is two [rows][64] core-matrix halves, kHalf* bytes apart: a
// descriptor has one stride per direction (common/wgmma.cuh), and the k-steps over d (S^T, dP^T)
// and the N = 64 column blocks of dK, dV, dQ each stay inside one half.
template <int NWG, int D = 64>
struct WgCfg {
    static constexpr int kT = 128 * NWG, kBK = 64 * NWG, kDQN = D / NWG;  // dQ columns per warpgroup
    static constexpr int kDH = D / 64;                                     // 64-column halves
    static constexpr uint32_t kTileQ = kBQ * D * 2;   // bytes of a 64-row tile: 8 KB (d 64), 16 KB
    static constexpr uint32_t kTileK = kBK * D * 2;
    static constexpr uint32_t kHalfQ = kBQ * 128, kHalfK = kBK * 128;  // bytes of one [rows][64] half
    static constexpr uint32_t kTileS = kBK * kBQ * 2;  // dS^T, keys x 64 queries (= kTileK at d 64)
    static constexpr uint32_t kOffV = kTileK, kOffQ = 2 * kTileK, kOffdO = kOffQ + 2 * kTileQ,
                              kOffdS = kOffdO + 2 * kTileQ, kOffL = kOffdS + 2 * kTileS, kOffD = kOffL + 2 * kBQ * 4,
                              kOffStg = kOffD + 2 * kBQ * 4;
    // STAGE: each warp's 16 x kDQN share of dQ passes through shared memory (rows padded by 4
    // floats: the 8-byte fragment stores hit distinct banks) to leave as whole-row reductions.
    static constexpr int kStgLD = kDQN + 4;
    static constexpr size_t kSmemStg = kOffStg + (size_t)NWG * 4 * 16 * kStgLD * 4;
    static_assert(D == 64 || (D == 128 && kDQN == 64), "d 128: two warpgroups, each dQ's columns in one half");
};

// Rows [r0, r0 + ROWS) of a [N, 64] bf16 view into a core-matrix tile; rows at or past N are
// zero-filled. With kT threads, thread tid copies the 16-byte chunks (row it * kT/8 + rt, column
// ct), rt = 8 (tid / 64) + tid % 8, ct = 8 ((tid / 8) % 8): eight consecutive threads fill one core
// matrix (128 contiguous bytes), and the offsets are the same every tile (soff, computed once).
template <int ROWS, int kT>
__device__ __forceinline__ void load_core(unsigned char* dst, uint32_t soff, const bf16* src, int64_t rs,
                                          int r0, int N) {
    const int rt = ((threadIdx.x >> 6) << 3) | (threadIdx.x & 7), ct = ((threadIdx.x >> 3) & 7) * 8;
    const bf16* base = src + (int64_t)r0 * rs + (int64_t)rt * rs + ct;  // r0 * rs: the same for all threads
#pragma unroll
    for (int it = 0; it < ROWS * 8 / kT; it++) {
        const bool valid = r0 + it * (kT / 8) + rt < N;
        cp_async16(dst + soff + it * kT * 16, valid ? base + (int64_t)(it * (kT / 8)) * rs : src, valid);
    }
}

// The same for a [N, D] view: D / 64 halves of [ROWS][64], ROWS * 128 bytes apart.
template <int D, int ROWS, int kT>
__device__ __forceinline__ void load_core_d(unsigned char* dst, uint32_t soff, const bf16* src, int64_t rs, int r0,
                                            int N) {
    if constexpr (D == 64) {
        load_core<ROWS, kT>(dst, soff, src, rs, r0, N);
    } else {
#pragma unroll
        for (int hh = 0; hh < D / 64; hh++) load_core<ROWS, kT>(dst + hh * ROWS * 128, soff, src + hh * 64, rs, r0, N);
    }
}

// 4-byte global -> shared copy; valid == false writes 0.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 4 : 0));
}

// STAGE (version 19): L_i and D_i arrive by cp.async like the tiles (no warp waits on a global
// load after the barrier), and dQ leaves through shared memory as whole-row reductions (a warp's
// 16-byte reductions cover 4 rows of 128 bytes, not 16 rows of 32: a quarter of the L2 requests).

template <int NWG, int MINB, bool STAGE, int D>
__global__ void __launch_bounds__(NWG * 128, MINB) bwd_wgmma_kernel(BwdParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WgCfg<NWG, D> C;
    constexpr int kT = C::kT, kBK = C::kBK, kDQN = C::kDQN, kStgLD = C::kStgLD, kDH = C::kDH;
    // d 128: G2 is issued after G3, not before the softmax: its 32 accumulators beside S^T, dP^T
    // and the 128 of dK, dV would not fit in 255 registers.
    constexpr bool kLateDQ = D == 128;
    constexpr uint32_t kTileQ = C::kTileQ, kTileS = C::kTileS, kOffV = C::kOffV, kOffQ = C::kOffQ,
                       kOffdO = C::kOffdO, kOffdS = C::kOffdS, kOffL = C::kOffL, kOffD = C::kOffD;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sbase = smem_u32(smem);
    float* Ls = (float*)(smem + kOffL);
    float* Ds = (float*)(smem + kOffD);

    const int bh = blockIdx.x, k0 = blockIdx.y * kBK;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int wg = warp / 4;
    const int kw = warp * 16;  // this warp's 16 key rows in the tile
    const bf16* Qg = (const bf16*)p.q + view_off(p.sq, bh, p.H, 0);
    const bf16* dOg = (const bf16*)p.dout + view_off(p.sdo, bh, p.H, 0);
    const float* Lg = p.lse + (int64_t)bh * p.Nq;
    const float* Dg = p.D + (int64_t)bh * p.Nq;
    float* dQacc = p.dq_accum + (int64_t)bh * p.Nq * D;
    const int Tq = (p.Nq + kBQ - 1) / kBQ;
    const int i_start = p.causal ? k0 / kBQ : 0;
    const float sl2 = p.scale * LOG2E_F;

    const uint32_t soff = core_off(((tid >> 6) << 3) | (tid & 7), ((tid >> 3) & 7) * 8);  // load_core's
    auto load_q_tile = [&](int i, int buf) {
        const int q0 = i * kBQ;
        load_core_d<D, kBQ, kT>(smem + kOffQ + buf * kTileQ, soff, Qg, p.sq[2], q0, p.Nq);
        load_core_d<D, kBQ, kT>(smem + kOffdO + buf * kTileQ, soff, dOg, p.sdo[2], q0, p.Nq);
        if constexpr (STAGE) {
            // L (unscaled) and D; past Nq both 0, harmless: those rows of Q and dO are zeros, so
            // S = 0, P = 1, dP = 0, dS = 0, and P^T dO adds nothing.
            if (tid < 2 * kBQ) {
                const int r = q0 + (tid & (kBQ - 1));
                const bool valid = r < p.Nq;
                cp_async4((tid < kBQ ? Ls : Ds) + buf * kBQ + (tid & (kBQ - 1)), (tid < kBQ ? Lg : Dg) + (valid ? r : 0), valid);
            }
        } else if (tid < kBQ) {
            const int r = q0 + tid;
            Ls[buf * kBQ + tid] = r < p.Nq ? Lg[r] * LOG2E_F : INFINITY;  // P = 0 past Nq
            Ds[buf * kBQ + tid] = r < p.Nq ? Dg[r] : 0.0f;
        }
    };
    load_core_d<D, kBK, kT>(smem, soff, (const bf16*)p.k + view_off(p.sk, bh, p.H, 0), p.sk[2], k0, p.Nk);
    load_core_d<D, kBK, kT>(smem + kOffV, soff, (const bf16*)p.v + view_off(p.sv, bh, p.H, 0), p.sv[2], k0, p.Nk);
    if (i_start < Tq) load_q_tile(i_start, 0);
    cp_async_commit();

    // Descriptors of this warpgroup's K_j, V_j rows (K-major: S^T, dP^T; in the first half at
    // d 128) and of its dQ columns of K_j (MN-major: K = the keys; d 128: warpgroup w's 64
    // columns are half w).
    const uint32_t dKk = wg_desc_lo(kDescKMajor, sbase + wg * 8192), dVk = wg_desc_lo(kDescKMajor, sbase + kOffV + wg * 8192);
    const uint32_t dKmn = wg_desc_lo(kDescMNMajor, sbase + (D == 64 ? wg * (kDQN / 8) * 128 : wg * C::kHalfK));
    // dK, dV: this warpgroup's 64 keys x D, one [32] accumulator per 64-column half.
    float dK[kDH][32], dV[kDH][32], S[32], dP[32], dq[kDQN / 2];
#pragma unroll
    for (int h = 0; h < kDH; h++)
#pragma unroll
        for (int e = 0; e < 32; e++) dK[h][e] = dV[h][e] = 0.0f;

    // G2: dQ share of the tile whose dS^T is in buffer dsb (64 queries x this warpgroup's kDQN
    // columns, over all kBK keys).
    auto issue_dq = [&](int dsb) {
        wg_fence();
        const uint32_t da0 = wg_desc_lo(kDescMNMajor, sbase + kOffdS + dsb * kTileS);
#pragma unroll
        for (int kk = 0; kk < kBK / 16; kk++) {
            const uint64_t da = wg_desc_join(kDescMNMajor, da0 + kk * 128), db = wg_desc_join(kDescMNMajor, dKmn + kk * 128);
            if constexpr (kDQN == 32) wg_m64n32_ss<1, 1>(dq, da, db, kk > 0);
            else wg_m64n64_ss<1, 1>(dq, da, db, kk > 0);
        }
        wg_commit();
    };
    // dq (rows q0 + 16 (warp % 4) + g (+8), columns kDQN wg + 8 n + 2t, +1) into the accumulator:
    // lanes t and t^1 swap halves so each thread adds 4 consecutive floats.
    auto reduce_dq = [&](int q0) {
        fence_regs(dq);
        if constexpr (STAGE) {
            // This warp's 16 rows x kDQN columns through its own staging tile, then each lane
            // adds 4 consecutive floats of a row: a warp instruction covers 32 * 4 / kDQN rows.
            float* stg = (float*)(smem + C::kOffStg) + warp * 16 * kStgLD;
#pragma unroll
            for (int n = 0; n < kDQN / 8; n++) {
                *(float2*)(stg + g * kStgLD + n * 8 + 2 * t) = make_float2(dq[4 * n] * p.scale, dq[4 * n + 1] * p.scale);
                *(float2*)(stg + (g + 8) * kStgLD + n * 8 + 2 * t) =
                    make_float2(dq[4 * n + 2] * p.scale, dq[4 * n + 3] * p.scale);
            }
            __syncwarp();
            constexpr int kCh = kDQN / 4;  // 16-byte chunks per row
            if constexpr (D == 128) {
                // The same, written so that the 8 reductions share one address and one row
                // bound (lane: row lane / 16 + 2 it, chunk lane % 16): computed per reduction,
                // ptxas kept 8 of each across the loop and spilled them.
                const int r0 = (warp & 3) * 16 + (lane >> 4), ch = lane & (kCh - 1), left = p.Nq - q0 - r0;
                const float* src = stg + (lane >> 4) * kStgLD + ch * 4;
                float* dst = dQacc + (int64_t)(q0 + r0) * D + wg * kDQN + ch * 4;
#pragma unroll
                for (int it = 0; it < 16 * kCh / 32; it++) {
                    const float4 v = *(const float4*)(src + 2 * it * kStgLD);
                    if (2 * it < left) red_add_v4_f32(dst + 2 * it * D, v.x, v.y, v.z, v.w);
                }
            } else {
#pragma unroll
                for (int it = 0; it < 16 * kCh / 32; it++) {
                    const int x = it * 32 + lane, r = x / kCh, ch = x % kCh;
                    const float4 v = *(const float4*)(stg + r * kStgLD + ch * 4);
                    const int row = q0 + (warp & 3) * 16 + r;
                    if (row < p.Nq) red_add_v4_f32(dQacc + (int64_t)row * D + wg * kDQN + ch * 4, v.x, v.y, v.z, v.w);
                }
            }
            __syncwarp();
            return;
        }
        const bool odd = t & 1;
        const int row = q0 + (warp & 3) * 16 + g + (odd ? 8 : 0);
#pragma unroll
        for (int n = 0; n < kDQN / 8; n++) {
            const float* a = dq + 4 * n;
            const float s0 = odd ? a[0] : a[2], s1 = odd ? a[1] : a[3];
            const float x0 = __shfl_xor_sync(0xffffffffu, s0, 1), x1 = __shfl_xor_sync(0xffffffffu, s1, 1);
            const int c = wg * kDQN + n * 8 + 2 * (t & 2);
            if (row < p.Nq) {
                float* dst = dQacc + (int64_t)row * D + c;
                if (odd) red_add_v4_f32(dst, x0 * p.scale, x1 * p.scale, a[2] * p.scale, a[3] * p.scale);
                else red_add_v4_f32(dst, a[0] * p.scale, a[1] * p.scale, x0 * p.scale, x1 * p.scale);
            }
        }
    };

    for (int i = i_start; i < Tq; i++) {
        const int buf = (i - i_start) & 1, q0 = i * kBQ;
        cp_async_wait<0>();   // tile i (issued a step ago; K_j, V_j at the first step)
        fence_proxy_async();  // this thread's cp.async data and dS^T stores -> wgmma's reads
        __syncthreads();      // (A) tile i and the previous tile's dS^T complete; every wgmma
                              // that read buffer buf^1 has finished (waited below, last step)
        if (i + 1 < Tq) load_q_tile(i + 1, buf ^ 1);
        cp_async_commit();

        // Descriptors: a base plus (byte offset >> 4) per k-step (common/wgmma.cuh); k-step kk
        // over d is 16 columns of half kk / 4.
        const uint32_t qa = sbase + kOffQ + buf * kTileQ, oa = sbase + kOffdO + buf * kTileQ;
        const uint32_t dQk = wg_desc_lo(kDescKMajor, qa), dOk = wg_desc_lo(kDescKMajor, oa);
        auto km = [](uint32_t lo) { return wg_desc_join(kDescKMajor, lo); };
        auto kstep_k = [](int kk) { return (kk >> 2) * (C::kHalfK >> 4) + (kk & 3) * 16; };  // in K_j, V_j
        auto kstep_q = [](int kk) { return (kk >> 2) * (C::kHalfQ >> 4) + (kk & 3) * 16; };  // in Q_i, dO_i
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)  // G1
            wg_m64n64_ss<0, 0>(S, km(dKk + kstep_k(kk)), km(dQk + kstep_q(kk)), kk > 0);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_m64n64_ss<0, 0>(dP, km(dVk + kstep_k(kk)), km(dOk + kstep_q(kk)), kk > 0);
        wg_commit();
        if (!kLateDQ && i > i_start) {
            issue_dq(buf ^ 1);  // G2 for tile i-1
            wg_wait<1>();       // G1 done, G2 may run on
        } else {
            wg_wait<0>();
        }
        fence_regs(S);
        fence_regs(dP);

        // P^T and dS^T: S[4n + e] is key kw + g + 8 (e / 2), query 8n + 2t + e % 2 (as version 10).
        const float* Lb = Ls + buf * kBQ;
        const float* Db = Ds + buf * kBQ;
        // Two copies of the loop: the masks cost 4 instructions an element, and only the tiles on
        // the diagonal or at the ragged end need them.
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const float2 l2 = *(const float2*)(Lb + n * 8 + 2 * t), d2 = *(const float2*)(Db + n * 8 + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int kl = kw + g + ((e >> 1) << 3), ql = n * 8 + 2 * t + (e & 1);
                    const float l = (e & 1) ? l2.y : l2.x;
                    float pr = ex2_approx(fmaf(S[4 * n + e], sl2, STAGE ? -l * LOG2E_F : -l));
                    if constexpr (decltype(masked)::value) {
                        const int kg = k0 + kl, qg = q0 + ql;
                        if (kg >= p.Nk || (p.causal && kg > qg)) pr = 0.0f;
                    }
                    S[4 * n + e] = pr;
                    dP[4 * n + e] = pr * (dP[4 * n + e] - ((e & 1) ? d2.y : d2.x));
                }
            }
        };
        if ((p.causal && k0 + kw + 15 > q0) || (k0 + kw + 16 > p.Nk)) p_ds(std::true_type{});
        else p_ds(std::false_type{});
        // dS^T (bf16) to shared memory, core-matrix layout: key rows, query columns.
        wg_store_core_bf16(smem + kOffdS + buf * kTileS, dP, kw + g, t);

        // G3: dV += P^T dO_i, dK += dS^T Q_i; k-step kq = queries 16kq..16kq+15; N = 64 columns
        // of half h (d 128: two products per k-step, the same A).
        uint32_t ap[4][4], as[4][4];
        wg_pack_p(S, ap);
        wg_pack_p(dP, as);
        wg_fence();
#pragma unroll
        for (int kq = 0; kq < 4; kq++)
#pragma unroll
            for (int h = 0; h < kDH; h++)
                wg_m64n64_rs<1>(dV[h], ap[kq],
                                wg_desc_join(kDescMNMajor, wg_desc_lo(kDescMNMajor, oa + h * C::kHalfQ) + kq * 128), 1);
#pragma unroll
        for (int kq = 0; kq < 4; kq++)
#pragma unroll
            for (int h = 0; h < kDH; h++)
                wg_m64n64_rs<1>(dK[h], as[kq],
                                wg_desc_join(kDescMNMajor, wg_desc_lo(kDescMNMajor, qa + h * C::kHalfQ) + kq * 128), 1);
        wg_commit();
        if (kLateDQ && i > i_start) issue_dq(buf ^ 1);  // G2 for tile i-1 (d 128), behind G3
        // G2 and G3 done: buffer buf is free for the prefetch after the next barrier. (Leaving G3
        // in flight under the reductions, wait_group 1, makes ptxas serialise every wgmma
        // (warning C7514) together with the wait_group 1 above, which is worth more.)
        wg_wait<0>();
        if (i > i_start) reduce_dq(q0 - kBQ);
#pragma unroll
        for (int h = 0; h < kDH; h++) {
            fence_regs(dK[h]);
            fence_regs(dV[h]);
        }
    }
    if (i_start < Tq) {  // the last tile's dQ share
        fence_proxy_async();
        __syncthreads();
        issue_dq((Tq - 1 - i_start) & 1);
        wg_wait<0>();
        reduce_dq((Tq - 1) * kBQ);
    }
    cp_async_wait<0>();

    // dK_j (scaled) and dV_j, once; keys past Nk are not written.
    bf16* dk = (bf16*)p.dk + view_off(p.sdk, bh, p.H, 0);
    bf16* dv = (bf16*)p.dv + view_off(p.sdv, bh, p.H, 0);
#pragma unroll
    for (int hh = 0; hh < kDH; hh++)  // 64-column half
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int kg = k0 + kw + g + 8 * h, c = hh * 64 + n * 8 + 2 * t;
                if (kg < p.Nk) {
                    *(uint32_t*)(dk + (int64_t)kg * p.sdk[2] + c) =
                        pack_bf16(dK[hh][4 * n + 2 * h] * p.scale, dK[hh][4 * n + 2 * h + 1] * p.scale);
                    *(uint32_t*)(dv + (int64_t)kg * p.sdv[2] + c) =
                        pack_bf16(dV[hh][4 * n + 2 * h], dV[hh][4 * n + 2 * h + 1]);
                }
            }
#else
    __trap();  // built without sm_90a: the host does not launch it (rung_wgmma_available)
#endif
}

}  // namespace

bool rung_wgmma_available() { return wgmma_built(); }

template <int NWG, int MINB, bool STAGE = false, int D = 64>
void launch_wgmma(const BwdParams& p, cudaStream_t s) {
    typedef WgCfg<NWG, D> C;
    auto kern = bwd_wgmma_kernel<NWG, MINB, STAGE, D>;
    const size_t smem = STAGE ? C::kSmemStg : C::kOffStg;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(p.B * p.H, (p.Nk + C::kBK - 1) / C::kBK);  // x = head: the longest causal tiles start first
    kern<<<grid, C::kT, smem, s>>>(p);
    CUDA_CHECK_LAST();
}

void rung_launch_wgmma(const BwdParams& p, int version, cudaStream_t s) {
    if (version == 20) {  // d 128: 19's kernel with [rows][128] tiles as two halves
        if (p.d != 128) DIE("rung_launch_wgmma: head dim %d (version 20 is built for d = 128)", p.d);
        launch_wgmma<2, 1, true, 128>(p, s);
        return;
    }
    if (p.d != 64) DIE("rung_launch_wgmma: head dim %d (versions 16-19 are built for d = 64)", p.d);
    if (version == 16) launch_wgmma<2, 1>(p, s);       // 128 keys per block, 1 block per SM
    else if (version == 17) launch_wgmma<1, 2>(p, s);  // 64 keys per block, 2 blocks per SM
    else if (version == 18) launch_wgmma<1, 3>(p, s);  // 64 keys per block, 3 blocks per SM
    else launch_wgmma<2, 1, true>(p, s);               // 16 + L/D by cp.async, staged dQ reductions
}

}  // namespace lab04
