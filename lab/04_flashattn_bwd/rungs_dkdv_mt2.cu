// Rung 5: the dK/dV kernel with two m-tiles (32 keys) per warp.
// Run: build/lab/04_flashattn_bwd/bench_rungs --rung 5
// Version 5's key-tile-parallel dK/dV kernel (two-pass backward only, bf16, d in {16, 32, 64}):
// the kernel of flash_bwd_mma.cu with two m-tiles (32 keys) per warp and 32-query steps, so a
// block owns 128 keys. Every Q_i / dO_i fragment read from shared memory then feeds two mma
// instead of one: 48 ldmatrix per 128 mma instead of 72 (version 1) or 64 (version 2's register
// cache), for the price of 192 fp32 accumulators per thread (dK_j, dV_j: 128; S^T, dP^T: 64).
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"
#include "lab/04_flashattn_bwd/rungs.cuh"

namespace lab04 {

namespace {

typedef __nv_bfloat16 bf16;
constexpr int kWarps = kMmaWarps, kThreads = kMmaThreads;
constexpr int MT = 2, BQ = 32;

template <int D>
struct Cfg {
    static constexpr int BK = kWarps * 16 * MT, LD = D + 8;
    static constexpr size_t smem = sizeof(bf16) * ((size_t)2 * BK * LD + 4 * BQ * LD) + sizeof(float) * 4 * BQ;
};

template <int D>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_mt2_kernel(BwdParams p) {
    constexpr int BK = Cfg<D>::BK, LD = Cfg<D>::LD;
    constexpr int NT_Q = BQ / 8, NT_D = D / 8, KC_D = D / 16, KC_Q = BQ / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* Ks = (bf16*)smem_raw;    // K_j (BK, LD)
    bf16* Vs = Ks + BK * LD;       // V_j (BK, LD)
    bf16* Qs = Vs + BK * LD;       // Q_i, two buffers (2, BQ, LD)
    bf16* dOs = Qs + 2 * BQ * LD;  // dO_i, two buffers (2, BQ, LD)
    float* Ls = (float*)(dOs + 2 * BQ * LD);  // L_i * log2(e) (2, BQ)
    float* Ds = Ls + 2 * BQ;                  // D_i (2, BQ)

    const int bh = blockIdx.x, k0 = blockIdx.y * BK;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int kw = warp * 16 * MT;  // this warp's first key row within the tile
    const bf16* Qg = (const bf16*)p.q + view_off(p.sq, bh, p.H, 0);
    const bf16* dOg = (const bf16*)p.dout + view_off(p.sdo, bh, p.H, 0);
    const int Tq = (p.Nq + BQ - 1) / BQ;
    const int i_start = p.causal ? k0 / BQ : 0;
    const float sl2 = p.scale * LOG2E_F;

    auto load_q_tile = [&](int i, int buf) {
        const int q0 = i * BQ;
        load_rows_async<D, BQ>(Qs + buf * BQ * LD, Qg, p.sq[2], q0, p.Nq);
        load_rows_async<D, BQ>(dOs + buf * BQ * LD, dOg, p.sdo[2], q0, p.Nq);
        for (int x = tid; x < BQ; x += kThreads) {
            const int r = q0 + x;
            Ls[buf * BQ + x] = r < p.Nq ? p.lse[(int64_t)bh * p.Nq + r] * LOG2E_F : INFINITY;
            Ds[buf * BQ + x] = r < p.Nq ? p.D[(int64_t)bh * p.Nq + r] : 0.0f;
        }
    };
    load_rows_async<D, BK>(Ks, (const bf16*)p.k + view_off(p.sk, bh, p.H, 0), p.sk[2], k0, p.Nk);
    load_rows_async<D, BK>(Vs, (const bf16*)p.v + view_off(p.sv, bh, p.H, 0), p.sv[2], k0, p.Nk);
    if (i_start < Tq) load_q_tile(i_start, 0);
    cp_async_commit();

    float dK[MT][NT_D][4], dV[MT][NT_D][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT_D; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dK[mt][n][e] = dV[mt][n][e] = 0.0f;

    for (int i = i_start; i < Tq; i++) {
        const int buf = (i - i_start) & 1, q0 = i * BQ;
        if (i + 1 < Tq) load_q_tile(i + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* Qb = Qs + buf * BQ * LD;
        const bf16* dOb = dOs + buf * BQ * LD;
        const float* Lb = Ls + buf * BQ;
        const float* Db = Ds + buf * BQ;

        // S^T = K_j Q_i^T, dP^T = V_j dO_i^T: this warp's 32 keys x BQ queries.
        float S[MT][NT_Q][4], dP[MT][NT_Q][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NT_Q; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[mt][n][e] = dP[mt][n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC_D; kc++) {
            uint32_t ak[MT][4], av[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ldmatrix_x4(ak[mt], Ks + (kw + mt * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
                ldmatrix_x4(av[mt], Vs + (kw + mt * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            }
#pragma unroll
            for (int np = 0; np < BQ / 16; np++) {
                const int n = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                const int kk = kc * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bq[4], bo[4];
                ldmatrix_x4(bq, Qb + n * LD + kk);
                ldmatrix_x4(bo, dOb + n * LD + kk);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_m16n8k16_bf16(S[mt][2 * np], ak[mt], bq[0], bq[1]);
                    mma_m16n8k16_bf16(S[mt][2 * np + 1], ak[mt], bq[2], bq[3]);
                    mma_m16n8k16_bf16(dP[mt][2 * np], av[mt], bo[0], bo[1]);
                    mma_m16n8k16_bf16(dP[mt][2 * np + 1], av[mt], bo[2], bo[3]);
                }
            }
        }
        const bool need_mask = (p.causal && k0 + BK - 1 > q0) || (k0 + BK > p.Nk);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NT_Q; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int kl = kw + mt * 16 + g + ((e >> 1) << 3), ql = n * 8 + 2 * t + (e & 1);
                    float pr = exp2f(S[mt][n][e] * sl2 - Lb[ql]);
                    if (need_mask) {
                        const int kg = k0 + kl, qg = q0 + ql;
                        if (kg >= p.Nk || (p.causal && kg > qg)) pr = 0.0f;
                    }
                    S[mt][n][e] = pr;
                    dP[mt][n][e] = pr * (dP[mt][n][e] - Db[ql]);
                }
        // dV_j += P^T dO_i, dK_j += dS^T Q_i.
#pragma unroll
        for (int kq = 0; kq < KC_Q; kq++) {
            uint32_t ap[MT][4], as[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ap[mt][0] = pack_bf16(S[mt][2 * kq][0], S[mt][2 * kq][1]);
                ap[mt][1] = pack_bf16(S[mt][2 * kq][2], S[mt][2 * kq][3]);
                ap[mt][2] = pack_bf16(S[mt][2 * kq + 1][0], S[mt][2 * kq + 1][1]);
                ap[mt][3] = pack_bf16(S[mt][2 * kq + 1][2], S[mt][2 * kq + 1][3]);
                as[mt][0] = pack_bf16(dP[mt][2 * kq][0], dP[mt][2 * kq][1]);
                as[mt][1] = pack_bf16(dP[mt][2 * kq][2], dP[mt][2 * kq][3]);
                as[mt][2] = pack_bf16(dP[mt][2 * kq + 1][0], dP[mt][2 * kq + 1][1]);
                as[mt][3] = pack_bf16(dP[mt][2 * kq + 1][2], dP[mt][2 * kq + 1][3]);
            }
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                const int kr = kq * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int nc = dn * 16 + (lane >> 4) * 8;
                uint32_t bo[4], bq[4];
                ldmatrix_x4_trans(bo, dOb + kr * LD + nc);
                ldmatrix_x4_trans(bq, Qb + kr * LD + nc);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_m16n8k16_bf16(dV[mt][2 * dn], ap[mt], bo[0], bo[1]);
                    mma_m16n8k16_bf16(dV[mt][2 * dn + 1], ap[mt], bo[2], bo[3]);
                    mma_m16n8k16_bf16(dK[mt][2 * dn], as[mt], bq[0], bq[1]);
                    mma_m16n8k16_bf16(dK[mt][2 * dn + 1], as[mt], bq[2], bq[3]);
                }
            }
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    bf16* dk = (bf16*)p.dk + view_off(p.sdk, bh, p.H, 0);
    bf16* dv = (bf16*)p.dv + view_off(p.sdv, bh, p.H, 0);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT_D; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int kg = k0 + kw + mt * 16 + g + 8 * h, c = n * 8 + 2 * t;
                if (kg < p.Nk) {
                    *(uint32_t*)(dk + (int64_t)kg * p.sdk[2] + c) =
                        pack_bf16(dK[mt][n][2 * h] * p.scale, dK[mt][n][2 * h + 1] * p.scale);
                    *(uint32_t*)(dv + (int64_t)kg * p.sdv[2] + c) = pack_bf16(dV[mt][n][2 * h], dV[mt][n][2 * h + 1]);
                }
            }
}

template <int D>
void launch(const BwdParams& p, cudaStream_t s) {
    auto kern = bwd_dkdv_mt2_kernel<D>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Cfg<D>::smem));
    dim3 grid(p.B * p.H, (p.Nk + Cfg<D>::BK - 1) / Cfg<D>::BK);
    kern<<<grid, kThreads, Cfg<D>::smem, s>>>(p);
    CUDA_CHECK_LAST();
}

}  // namespace

void rung_launch_dkdv_mt2(const BwdParams& p, cudaStream_t s) {
    switch (p.d) {
    case 16: launch<16>(p, s); break;
    case 32: launch<32>(p, s); break;
    case 64: launch<64>(p, s); break;
    default: DIE("rung_launch_dkdv_mt2: head dim %d (16, 32 or 64)", p.d);
    }
}

}  // namespace lab04
