// The single-pass backward laid out for mma.sync the way FlashAttention-2 lays it out; bf16,
// d in {16, 32, 64}. What runs where the wgmma kernels cannot (d 16 and 32, or a build without
// sm_90a code).
//   Block (bh, j) owns 128 keys: 8 warps of 16 key rows. K_j and V_j sit in shared memory, and
//   each warp also keeps its 16 rows of them as A fragments in registers for the whole loop;
//   dK_j and dV_j are fp32 accumulators in registers. The block walks the query tiles i of 64
//   rows (causal: from the diagonal down), Q_i, dO_i, L_i, D_i double-buffered with cp.async,
//   and per tile:
//     S^T = K_j Q_i^T, dP^T = V_j dO_i^T      (transposed, so that P^T and dS^T come out of the
//     P^T = exp(S^T - L), dS^T = P^T o (dP^T - D)   mma in the A-fragment layout of the next mma)
//     dV_j += P^T dO_i, dK_j += dS^T Q_i      (registers only)
//     dS^T -> shared memory (bf16, two buffers)
//   One barrier per step: right after tile i's barrier every warp computes its share of tile
//   i-1's dQ_{i-1} += scale dS K_j (mma, A = dS via ldmatrix.trans; dS^T of tile i-1 was written
//   before that barrier, into the other buffer), so the warps never wait between writing dS^T
//   and reading it, and the reductions of tile i-1 leave while tile i's products run.
//   dQ is added into the fp32 accumulator p.dq_accum with 16-byte vector reductions: one
//   red.global.add.v4.f32 per 4 floats (sm_90), after a lane-pair shuffle that turns the mma's
//   C fragment (2 floats of a row per thread) into 4 consecutive floats.
// The cast of the accumulator into dq is flash_bwd_dq_cast.cu's. ptxas (d 64): 249 registers, one
// block per SM. The tile sizes, warp counts and register caches tried instead, with their
// times: lab/04_flashattn_bwd/README.md.
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"

namespace {

typedef __nv_bfloat16 bf16;
constexpr int kWarps = 8, kThreads = kWarps * 32, kBQ = 64;  // 8 warps, 128 keys, 64-query tiles
template <int D>
struct MmaCfg {
    static constexpr int kBK = kWarps * 16;
    static constexpr int LD = D + 8, LDS = kBQ + 8;  // padded rows: conflict-free ldmatrix
    static constexpr size_t smem = sizeof(bf16) * ((size_t)2 * kBK * LD + 4 * kBQ * LD + 2 * kBK * LDS) +
                                   sizeof(float) * 4 * kBQ;
};

// rows [r0, r0 + ROWS) of a [N, D] bf16 view (row stride rs) into smem (ROWS, D + 8); rows at or
// past N are zero-filled. All kT threads take part.
template <int D, int ROWS, int kT>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int64_t rs, int r0, int N) {
    constexpr int CH = D / 8, LD = D + 8;
#pragma unroll
    for (int x = threadIdx.x; x < ROWS * CH; x += kT) {
        const int r = x / CH, c = x % CH;
        const bool valid = r0 + r < N;
        cp_async16(dst + r * LD + c * 8, valid ? src + (int64_t)(r0 + r) * rs + c * 8 : src, valid);
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) bwd_mma_kernel(BwdParams p) {
    // STUDENT-BEGIN(04.mma_kernel): FlashAttention-2's single pass on mma.sync: a block of 8 warps owns 128 keys and walks the query tiles from the diagonal down (Q_i, dO_i, L_i, D_i double-buffered by cp.async, one barrier per step); per tile S^T, dP^T, P^T, dS^T per warp with K_j, V_j fragments held in registers, dV and dK by mma, dS^T to shared memory, the previous tile's dQ share by mma into the fp32 accumulator (red.global.add.v4.f32, scale folded in) | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_mma bwd_cuda/fixture_bf16_mma bwd_cuda/sanitize_bf16_mma | uses: ex2_approx red_add_v4_f32
    typedef MmaCfg<D> C;
    constexpr int BQ = kBQ, kW = kWarps, kT = kThreads, kBK = C::kBK;
    constexpr int LD = C::LD, LDS = C::LDS;
    constexpr int NT_Q = BQ / 8, NT_D = D / 8, KC_D = D / 16, KC_Q = BQ / 16;
    // dQ_i (BQ x D) = dS (BQ x BK) K_j (BK x D) split over the 8 warps: MG row groups of 16,
    // WG column groups of DW, KS slices of the 128 keys (each slice reduced by its own atomics).
    constexpr int MG = BQ / 16, WG = (kW / MG < D / 16) ? kW / MG : D / 16, KS = kW / (MG * WG);
    constexpr int DW = D / WG, KW = kBK / KS;
    static_assert(MG * WG * KS == kW && DW % 16 == 0 && KW % 16 == 0, "warp split of the dQ tile");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* Ks = (bf16*)smem_raw;            // K_j (BK, LD)
    bf16* Vs = Ks + kBK * LD;              // V_j (BK, LD)
    bf16* Qs = Vs + kBK * LD;              // Q_i, two buffers (2, BQ, LD)
    bf16* dOs = Qs + 2 * BQ * LD;          // dO_i, two buffers (2, BQ, LD)
    bf16* dSs = dOs + 2 * BQ * LD;         // dS_ij^T, two buffers (2, BK, LDS)
    float* Ls = (float*)(dSs + 2 * kBK * LDS);  // L_i * log2(e), two buffers (2, BQ)
    float* Ds = Ls + 2 * BQ;                    // D_i, two buffers (2, BQ)

    const int bh = blockIdx.x, k0 = blockIdx.y * kBK;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int kw = warp * 16;  // this warp's key rows within the tile
    const bf16* Kg = (const bf16*)p.k + view_off(p.sk, bh, p.H, 0);
    const bf16* Vg = (const bf16*)p.v + view_off(p.sv, bh, p.H, 0);
    const bf16* Qg = (const bf16*)p.q + view_off(p.sq, bh, p.H, 0);
    const bf16* dOg = (const bf16*)p.dout + view_off(p.sdo, bh, p.H, 0);
    const float* Lg = p.lse + (int64_t)bh * p.Nq;
    const float* Dg = p.D + (int64_t)bh * p.Nq;
    float* dQacc = p.dq_accum + (int64_t)bh * p.Nq * D;
    const int Tq = (p.Nq + BQ - 1) / BQ;
    const int i_start = p.causal ? k0 / BQ : 0;  // earlier query tiles see none of K_j
    const float sl2 = p.scale * LOG2E_F;

    auto load_q_tile = [&](int i, int buf) {
        const int q0 = i * BQ;
        load_rows<D, BQ, kT>(Qs + buf * BQ * LD, Qg, p.sq[2], q0, p.Nq);
        load_rows<D, BQ, kT>(dOs + buf * BQ * LD, dOg, p.sdo[2], q0, p.Nq);
        if (tid < BQ) {
            const int r = q0 + tid;
            // Rows past Nq: L = +inf makes P = 0 with no branch in the inner loop.
            Ls[buf * BQ + tid] = r < p.Nq ? Lg[r] * LOG2E_F : INFINITY;
            Ds[buf * BQ + tid] = r < p.Nq ? Dg[r] : 0.0f;
        }
    };
    load_rows<D, kBK, kT>(Ks, Kg, p.sk[2], k0, p.Nk);
    load_rows<D, kBK, kT>(Vs, Vg, p.sv[2], k0, p.Nk);
    if (i_start < Tq) load_q_tile(i_start, 0);
    cp_async_commit();

    float dK[NT_D][4], dV[NT_D][4];  // this warp's 16 rows of dK_j, dV_j (C fragments)
    uint32_t kf[KC_D][4], vf[KC_D][4];  // K_j, V_j A fragments, read once
#pragma unroll
    for (int n = 0; n < NT_D; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dK[n][e] = dV[n][e] = 0.0f;

    // dQ_i share of query tile q0 from dS^T in dSb: this warp's 16 query rows x DW columns over
    // its KW keys, added into the fp32 accumulator.
    auto dq_step = [&](const bf16* dSb, int q0) {
        const int m0 = (warp % MG) * 16, n0 = ((warp / MG) % WG) * DW, ks0 = (warp / (MG * WG)) * KW;
        float acc[DW / 8][4];
#pragma unroll
        for (int n = 0; n < DW / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KW / 16; kc++) {
            // A = dS (m = query, k = key) read from dS^T (key rows): ldmatrix .trans.
            const int mi = lane >> 3, kb = ks0 + kc * 16;
            uint32_t a[4];
            ldmatrix_x4_trans(a, dSb + (kb + (lane & 7) + (mi >> 1) * 8) * LDS + m0 + (mi & 1) * 8);
#pragma unroll
            for (int dn = 0; dn < DW / 16; dn++) {
                const int kr = kb + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int nc = n0 + dn * 16 + (lane >> 4) * 8;
                uint32_t b[4];
                ldmatrix_x4_trans(b, Ks + kr * LD + nc);
                mma_m16n8k16_bf16(acc[2 * dn], a, b[0], b[1]);
                mma_m16n8k16_bf16(acc[2 * dn + 1], a, b[2], b[3]);
            }
        }
        // Lanes t and t^1 swap halves: even t ends with row g, columns 2t..2t+3; odd t with
        // row g + 8, columns 2t-2..2t+1. Then one 16-byte reduction each.
        const bool odd = t & 1;
        const int row = q0 + m0 + g + (odd ? 8 : 0);
#pragma unroll
        for (int n = 0; n < DW / 8; n++) {
            const float s0 = odd ? acc[n][0] : acc[n][2], s1 = odd ? acc[n][1] : acc[n][3];
            const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
            const int c = n0 + n * 8 + 2 * (t & 2);
            if (row < p.Nq) {
                float* dst = dQacc + (int64_t)row * D + c;
                if (odd) red_add_v4_f32(dst, r0 * p.scale, r1 * p.scale, acc[n][2] * p.scale, acc[n][3] * p.scale);
                else red_add_v4_f32(dst, acc[n][0] * p.scale, acc[n][1] * p.scale, r0 * p.scale, r1 * p.scale);
            }
        }
    };

    for (int i = i_start; i < Tq; i++) {
        const int buf = (i - i_start) & 1, q0 = i * BQ;
        cp_async_wait<0>();  // tile i, issued one step ago
        __syncthreads();  // (A) tile i (and L_i, D_i) visible to every warp, and dS^T of tile i-1
        // One barrier per step: buffer buf^1 (tile i-1) was last read before (A), so tile
        // i+1 goes there now; then tile i-1's dQ share, whose dS^T every warp wrote before (A).
        if (i + 1 < Tq) load_q_tile(i + 1, buf ^ 1);
        cp_async_commit();
        if (i > i_start) dq_step(dSs + (buf ^ 1) * kBK * LDS, q0 - BQ);
        const bf16* Qb = Qs + buf * BQ * LD;
        const bf16* dOb = dOs + buf * BQ * LD;
        const float* Lb = Ls + buf * BQ;
        const float* Db = Ds + buf * BQ;
        bf16* dSb = dSs + buf * kBK * LDS;
        if (i == i_start) {  // K_j and V_j have landed with the first query tile
#pragma unroll
            for (int kc = 0; kc < KC_D; kc++) {
                ldmatrix_x4(kf[kc], Ks + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
                ldmatrix_x4(vf[kc], Vs + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            }
        }

        const bool need_mask = (p.causal && k0 + kw + 15 > q0) || (k0 + kw + 16 > p.Nk);
        // S^T = K_j Q_i^T and dP^T = V_j dO_i^T: (16 keys of this warp) x BQ queries.
        float S[NT_Q][4], dP[NT_Q][4];
#pragma unroll
        for (int n = 0; n < NT_Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[n][e] = dP[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC_D; kc++) {
            uint32_t ak[4], av[4];
#pragma unroll
            for (int x = 0; x < 4; x++) ak[x] = kf[kc][x], av[x] = vf[kc][x];
#pragma unroll
            for (int np = 0; np < BQ / 16; np++) {
                const int n = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                const int kk = kc * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bq[4], bo[4];
                ldmatrix_x4(bq, Qb + n * LD + kk);
                ldmatrix_x4(bo, dOb + n * LD + kk);
                mma_m16n8k16_bf16(S[2 * np], ak, bq[0], bq[1]);
                mma_m16n8k16_bf16(S[2 * np + 1], ak, bq[2], bq[3]);
                mma_m16n8k16_bf16(dP[2 * np], av, bo[0], bo[1]);
                mma_m16n8k16_bf16(dP[2 * np + 1], av, bo[2], bo[3]);
            }
        }
        // P^T = 2^(S^T scale log2e - L log2e); masks only where this warp's 16 keys meet the
        // diagonal or the ragged end. dS^T = P^T o (dP^T - D).
#pragma unroll
        for (int n = 0; n < NT_Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int kl = kw + g + ((e >> 1) << 3), ql = n * 8 + 2 * t + (e & 1);
                float pr = ex2_approx(fmaf(S[n][e], sl2, -Lb[ql]));
                if (need_mask) {
                    const int kg = k0 + kl, qg = q0 + ql;
                    if (kg >= p.Nk || (p.causal && kg > qg)) pr = 0.0f;
                }
                S[n][e] = pr;
                dP[n][e] = pr * (dP[n][e] - Db[ql]);
            }
        // dS^T to shared memory first, so that the barrier below is reached early.
#pragma unroll
        for (int n = 0; n < NT_Q; n++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                *(uint32_t*)(dSb + (kw + g + 8 * h) * LDS + n * 8 + 2 * t) = pack_bf16(dP[n][2 * h], dP[n][2 * h + 1]);
        // dV_j += P^T dO_i and dK_j += dS^T Q_i (C fragments of two 8-query tiles = one A fragment).
#pragma unroll
        for (int kq = 0; kq < KC_Q; kq++) {
            const uint32_t ap[4] = {pack_bf16(S[2 * kq][0], S[2 * kq][1]), pack_bf16(S[2 * kq][2], S[2 * kq][3]),
                                    pack_bf16(S[2 * kq + 1][0], S[2 * kq + 1][1]),
                                    pack_bf16(S[2 * kq + 1][2], S[2 * kq + 1][3])};
            const uint32_t as[4] = {pack_bf16(dP[2 * kq][0], dP[2 * kq][1]), pack_bf16(dP[2 * kq][2], dP[2 * kq][3]),
                                    pack_bf16(dP[2 * kq + 1][0], dP[2 * kq + 1][1]),
                                    pack_bf16(dP[2 * kq + 1][2], dP[2 * kq + 1][3])};
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                const int kr = kq * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int nc = dn * 16 + (lane >> 4) * 8;
                uint32_t bo[4], bq[4];
                ldmatrix_x4_trans(bo, dOb + kr * LD + nc);
                ldmatrix_x4_trans(bq, Qb + kr * LD + nc);
                mma_m16n8k16_bf16(dV[2 * dn], ap, bo[0], bo[1]);
                mma_m16n8k16_bf16(dV[2 * dn + 1], ap, bo[2], bo[3]);
                mma_m16n8k16_bf16(dK[2 * dn], as, bq[0], bq[1]);
                mma_m16n8k16_bf16(dK[2 * dn + 1], as, bq[2], bq[3]);
            }
        }
    }
    if (i_start < Tq) {  // the last tile's dQ share
        __syncthreads();
        dq_step(dSs + ((Tq - 1 - i_start) & 1) * kBK * LDS, (Tq - 1) * BQ);
    }
    cp_async_wait<0>();

    // Write dK_j (scaled) and dV_j once; keys past Nk are not written.
    bf16* dk = (bf16*)p.dk + view_off(p.sdk, bh, p.H, 0);
    bf16* dv = (bf16*)p.dv + view_off(p.sdv, bh, p.H, 0);
#pragma unroll
    for (int n = 0; n < NT_D; n++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int kg = k0 + kw + g + 8 * h, c = n * 8 + 2 * t;
            if (kg < p.Nk) {
                *(uint32_t*)(dk + (int64_t)kg * p.sdk[2] + c) =
                    pack_bf16(dK[n][2 * h] * p.scale, dK[n][2 * h + 1] * p.scale);
                *(uint32_t*)(dv + (int64_t)kg * p.sdv[2] + c) = pack_bf16(dV[n][2 * h], dV[n][2 * h + 1]);
            }
        }
    // STUDENT-END(04.mma_kernel)
}

template <int D>
void launch_mma(const BwdParams& p, cudaStream_t s) {
    // STUDENT-BEGIN(04.launch_mma): launch bwd_mma_kernel<D> on grid (B·H, key tiles of MmaCfg::kBK) with kThreads threads and MmaCfg::smem of shared memory (opted in by cudaFuncSetAttribute), then CUDA_CHECK_LAST | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_mma bwd_cuda/fixture_bf16_mma bwd_cuda/sanitize_bf16_mma | uses: bwd_mma_kernel<D>
    typedef MmaCfg<D> C;
    auto kern = bwd_mma_kernel<D>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::smem));
    dim3 grid(p.B * p.H, (p.Nk + C::kBK - 1) / C::kBK);  // x = head: the longest causal tiles start first
    kern<<<grid, kThreads, C::smem, s>>>(p);
    CUDA_CHECK_LAST();
    // STUDENT-END(04.launch_mma)
}

}  // namespace

void bwd_launch_mma(const BwdParams& p, cudaStream_t s) {
    switch (p.d) {
    case 16: launch_mma<16>(p, s); break;
    case 32: launch_mma<32>(p, s); break;
    case 64: launch_mma<64>(p, s); break;
    default: DIE("bwd_launch_mma: head dim %d has no single-pass mma.sync kernel (16, 32, 64)", p.d);
    }
}
