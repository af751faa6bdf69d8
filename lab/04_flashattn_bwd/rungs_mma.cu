// Rungs 1-5: the two-pass mma.sync backward and its single pass by atomics (Algorithm 2 as written).
// Run: build/lab/04_flashattn_bwd/bench_rungs --rung 1   (rungs 1-5; --sweep for all)
// The bf16 tensor-core backward (mma.sync.m16n8k16, ldmatrix, cp.async), for head dims 16, 32,
// 64 and 128. Two kernels, as the two-pass scheme wants:
//   dK/dV: block (bh, j) keeps K_j, V_j in shared memory and dK_j, dV_j in registers while it
//          walks the query tiles i (causal: from the diagonal down), double-buffering Q_i, dO_i.
//          It computes the transposed tile S^T = K_j Q_i^T so that P^T and dS^T come out of the
//          mma already in the register layout of the next mma's A operand (dV += P^T dO_i,
//          dK += dS^T Q_i): no trip through shared memory.
//          With DQM != DQM_NONE (Algorithm 2's single pass) dS^T also goes to shared memory, and
//          the block adds dQ_i += dS K_j into an fp32 accumulator (atomics or a bulk reduce).
//   dQ:    block (bh, i) keeps Q_i, dO_i and dQ_i, walks key tiles j (causal: up to the
//          diagonal), recomputing P, and writes dQ_i once.
// Each of the 4 warps owns 16 rows (MT m-tiles of 16 in the dQ kernel) of the block's tile.
// Shared-memory rows are padded by 8 elements (16 bytes) so the 8 row addresses of one
// ldmatrix fall in 8 different bank groups. The kernel versions are listed above launch_all.
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"
#include "lab/04_flashattn_bwd/rungs.cuh"

namespace lab04 {

namespace {

typedef __nv_bfloat16 bf16;
constexpr int kWarps = kMmaWarps, kThreads = kMmaThreads;

// How the single-pass variant adds its dQ share (DQM): 0 it does not (two-pass), 1 scalar
// atomicAdd per element, 2 float2 atomicAdd (sm_90's vector atomics: half the operations),
// 3 the tile goes to shared memory and one thread hands it to the bulk-copy engine as a single
// reduce-add into global memory (cp.reduce.async.bulk, sm_90).
enum { DQM_NONE = 0, DQM_ATOMIC = 1, DQM_ATOMIC2 = 2, DQM_BULK = 3 };

template <int D, int BQ, int DQM>
struct DkdvCfg {  // tile sizes and shared memory of bwd_dkdv_mma_kernel
    static constexpr int BK = kWarps * 16, LD = D + 8, LDS = BQ + 8;
    static constexpr size_t smem = sizeof(bf16) * ((size_t)2 * BK * LD + 4 * BQ * LD +
                                                   (DQM != DQM_NONE ? (size_t)BK * LDS : 0)) +
                                   sizeof(float) * (4 * BQ + (DQM == DQM_BULK ? (size_t)BQ * D : 0));
};

__device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// global[0 .. bytes) += shared[0 .. bytes) as fp32, by the bulk-copy engine (asynchronous).
__device__ __forceinline__ void bulk_reduce_add_f32(float* gdst, const float* ssrc, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst),
                 "r"(smem_u32(ssrc)), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() {  // the source may be overwritten
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_all() {  // the writes are done
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// CACHE_KV (version 2): K_j's and V_j's A fragments stay in registers for the whole loop instead
// of being re-read from shared memory every query tile.
template <int D, int BQ, int DQM, bool CACHE_KV>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_mma_kernel(BwdParams p) {
    constexpr bool ATOMIC_DQ = DQM != DQM_NONE;
    typedef DkdvCfg<D, BQ, DQM> C;
    constexpr int BK = C::BK, LD = C::LD, LDS = C::LDS;
    constexpr int NT_Q = BQ / 8, NT_D = D / 8, KC_D = D / 16, KC_Q = BQ / 16;
    static_assert(D % 16 == 0 && D <= 128, "head dim must be a multiple of 16, at most 128");
    static_assert(BQ % 16 == 0, "query tile must be a multiple of the mma's 16");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* Ks = (bf16*)smem_raw;            // K_j (BK, LD)
    bf16* Vs = Ks + BK * LD;               // V_j (BK, LD)
    bf16* Qs = Vs + BK * LD;               // Q_i, two buffers (2, BQ, LD)
    bf16* dOs = Qs + 2 * BQ * LD;          // dO_i, two buffers (2, BQ, LD)
    bf16* dSs = dOs + 2 * BQ * LD;         // dS_ij^T (BK, LDS), ATOMIC_DQ only
    float* Ls = (float*)(dSs + (ATOMIC_DQ ? BK * LDS : 0));  // L_i * log2(e) (2, BQ)
    float* Ds = Ls + 2 * BQ;                                 // D_i (2, BQ)
    float* dQs = Ds + 2 * BQ;                                // dQ_i share (BQ, D), DQM_BULK only

    const int bh = blockIdx.x, j = blockIdx.y, k0 = j * BK;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int kw = warp * 16;  // this warp's key rows within the tile
    const bf16* Kg = (const bf16*)p.k + view_off(p.sk, bh, p.H, 0);
    const bf16* Vg = (const bf16*)p.v + view_off(p.sv, bh, p.H, 0);
    const bf16* Qg = (const bf16*)p.q + view_off(p.sq, bh, p.H, 0);
    const bf16* dOg = (const bf16*)p.dout + view_off(p.sdo, bh, p.H, 0);
    const int Tq = (p.Nq + BQ - 1) / BQ;
    const int i_start = p.causal ? k0 / BQ : 0;  // earlier query tiles see none of K_j
    const float sl2 = p.scale * LOG2E_F;         // exp(x) = exp2(x log2 e)

    auto load_q_tile = [&](int i, int buf) {
        const int q0 = i * BQ;
        load_rows_async<D, BQ>(Qs + buf * BQ * LD, Qg, p.sq[2], q0, p.Nq);
        load_rows_async<D, BQ>(dOs + buf * BQ * LD, dOg, p.sdo[2], q0, p.Nq);
        for (int x = tid; x < BQ; x += kThreads) {
            const int r = q0 + x;
            // Rows past Nq: L = +inf makes P = 0 with no branch in the inner loop.
            Ls[buf * BQ + x] = r < p.Nq ? p.lse[(int64_t)bh * p.Nq + r] * LOG2E_F : INFINITY;
            Ds[buf * BQ + x] = r < p.Nq ? p.D[(int64_t)bh * p.Nq + r] : 0.0f;
        }
    };
    load_rows_async<D, BK>(Ks, Kg, p.sk[2], k0, p.Nk);
    load_rows_async<D, BK>(Vs, Vg, p.sv[2], k0, p.Nk);
    if (i_start < Tq) load_q_tile(i_start, 0);
    cp_async_commit();

    float dK[NT_D][4], dV[NT_D][4];  // this warp's 16 rows of dK_j, dV_j (C fragments)
    uint32_t kf[CACHE_KV ? KC_D : 1][4], vf[CACHE_KV ? KC_D : 1][4];  // CACHE_KV: K_j, V_j A fragments (16 x D)
#pragma unroll
    for (int n = 0; n < NT_D; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dK[n][e] = dV[n][e] = 0.0f;

    for (int i = i_start; i < Tq; i++) {
        const int buf = (i - i_start) & 1, q0 = i * BQ;
        if (i + 1 < Tq) load_q_tile(i + 1, buf ^ 1);  // prefetch the next tile while this one runs
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* Qb = Qs + buf * BQ * LD;
        const bf16* dOb = dOs + buf * BQ * LD;
        const float* Lb = Ls + buf * BQ;
        const float* Db = Ds + buf * BQ;
        if (CACHE_KV && i == i_start) {  // K_j and V_j have landed with the first query tile
#pragma unroll
            for (int kc = 0; kc < KC_D; kc++) {
                ldmatrix_x4(kf[CACHE_KV ? kc : 0], Ks + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
                ldmatrix_x4(vf[CACHE_KV ? kc : 0], Vs + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            }
        }

        // S^T = K_j Q_i^T and dP^T = V_j dO_i^T: (16 keys of this warp) x BQ queries.
        float S[NT_Q][4], dP[NT_Q][4];
#pragma unroll
        for (int n = 0; n < NT_Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[n][e] = dP[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC_D; kc++) {
            uint32_t ak[4], av[4];
            if (CACHE_KV) {
#pragma unroll
                for (int x = 0; x < 4; x++) ak[x] = kf[CACHE_KV ? kc : 0][x], av[x] = vf[CACHE_KV ? kc : 0][x];
            } else {
                ldmatrix_x4(ak, Ks + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
                ldmatrix_x4(av, Vs + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            }
#pragma unroll
            for (int np = 0; np < BQ / 16; np++) {
                // B = Q_i^T (k = head dim, n = query): Q_i's rows hold k contiguously.
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
        // P^T = exp(S^T - L) (masked only on diagonal or ragged tiles); dS^T = P^T o (dP^T - D).
        const bool need_mask = (p.causal && k0 + BK - 1 > q0) || (k0 + BK > p.Nk);
#pragma unroll
        for (int n = 0; n < NT_Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int kl = kw + g + ((e >> 1) << 3), ql = n * 8 + 2 * t + (e & 1);
                float pr = exp2f(S[n][e] * sl2 - Lb[ql]);
                if (need_mask) {
                    const int kg = k0 + kl, qg = q0 + ql;
                    if (kg >= p.Nk || (p.causal && kg > qg)) pr = 0.0f;
                }
                S[n][e] = pr;
                dP[n][e] = pr * (dP[n][e] - Db[ql]);
            }
        // dV_j += P^T dO_i and dK_j += dS^T Q_i: the C fragments of two adjacent 8-query tiles are
        // exactly the A fragment of one 16-query k-chunk.
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
                // B = dO_i (k = query, n = head dim): rows hold n contiguously, hence .trans.
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
        if constexpr (ATOMIC_DQ) {
            // dS^T to shared memory, then dQ_i += scale dS K_j with the warps split over query
            // rows (MG groups of 16) and head-dim columns (WG groups of DW).
#pragma unroll
            for (int n = 0; n < NT_Q; n++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    *(uint32_t*)(dSs + (kw + g + 8 * h) * LDS + n * 8 + 2 * t) =
                        pack_bf16(dP[n][2 * h], dP[n][2 * h + 1]);
            if (DQM == DQM_BULK && tid == 0) bulk_wait_read();  // last tile's reduce has read dQs
            __syncthreads();
            constexpr int MG = BQ / 16, WG = kWarps / MG, DW = D / WG;
            static_assert(MG * WG == kWarps && DW % 16 == 0, "warp split of the dQ tile");
            const int m0 = (warp % MG) * 16, n0 = (warp / MG) * DW;
            float acc[DW / 8][4];
#pragma unroll
            for (int n = 0; n < DW / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < BK / 16; kc++) {
                // A = dS (m = query, k = key) read from dS^T (k rows): ldmatrix .trans.
                const int mi = lane >> 3;
                uint32_t a[4];
                ldmatrix_x4_trans(a, dSs + (kc * 16 + (lane & 7) + (mi >> 1) * 8) * LDS + m0 + (mi & 1) * 8);
#pragma unroll
                for (int dn = 0; dn < DW / 16; dn++) {
                    const int kr = kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    const int nc = n0 + dn * 16 + (lane >> 4) * 8;
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, Ks + kr * LD + nc);
                    mma_m16n8k16_bf16(acc[2 * dn], a, b[0], b[1]);
                    mma_m16n8k16_bf16(acc[2 * dn + 1], a, b[2], b[3]);
                }
            }
#pragma unroll
            for (int n = 0; n < DW / 8; n++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int ql = m0 + g + 8 * h, qg = q0 + ql, c = n0 + n * 8 + 2 * t;
                    const float2 v = make_float2(acc[n][2 * h] * p.scale, acc[n][2 * h + 1] * p.scale);
                    if (DQM == DQM_BULK) {
                        *(float2*)(dQs + ql * D + c) = v;  // rows past Nq are written but not sent
                        continue;
                    }
                    if (qg >= p.Nq) continue;
                    float* dst = &p.dq_accum[((int64_t)bh * p.Nq + qg) * D + c];
                    if (DQM == DQM_ATOMIC2) {
                        atomicAdd((float2*)dst, v);
                    } else {
                        atomicAdd(dst, v.x);
                        atomicAdd(dst + 1, v.y);
                    }
                }
            if constexpr (DQM == DQM_BULK) {
                // The (rows, D) tile is contiguous in dq_accum: one bulk reduce-add of its rows.
                fence_async_shared();  // make the generic-proxy stores visible to the bulk engine
                __syncthreads();
                if (tid == 0) {
                    const int rows = min(BQ, p.Nq - q0);
                    bulk_reduce_add_f32(p.dq_accum + ((int64_t)bh * p.Nq + q0) * D, dQs,
                                        (uint32_t)(rows * D * sizeof(float)));
                }
            }
        }
        __syncthreads();  // everyone is done with buffer buf (and dSs) before they are refilled
    }
    cp_async_wait<0>();
    if (DQM == DQM_BULK && tid == 0) bulk_wait_all();

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
}

// MT m-tiles (16 query rows each) per warp, BK keys per step. Version 1: MT = 1, BK = 64.
// Version 2 (d <= 64): MT = 2, BK = 32: each K_j / V_j fragment read from shared memory feeds two
// mma instead of one (40 ldmatrix per 96 mma instead of 56), with the same accumulator count.
template <int D, int MT, int BK_>
struct DqCfg {
    static constexpr int BQ = kWarps * 16 * MT, BK = BK_, LD = D + 8;
    static constexpr size_t smem = sizeof(bf16) * ((size_t)2 * BQ * LD + 4 * BK * LD);
};

template <int D, int MT, int BK_>
__global__ void __launch_bounds__(kThreads) bwd_dq_mma_kernel(BwdParams p) {
    typedef DqCfg<D, MT, BK_> C;
    constexpr int BQ = C::BQ, BK = C::BK, LD = C::LD;
    constexpr int NT_K = BK / 8, NT_D = D / 8, KC_D = D / 16, KC_K = BK / 16;
    static_assert(BK % 16 == 0 && D % 16 == 0, "tiles must be multiples of the mma's 16");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* Qs = (bf16*)smem_raw;   // Q_i (BQ, LD)
    bf16* dOs = Qs + BQ * LD;     // dO_i (BQ, LD)
    bf16* Ks = dOs + BQ * LD;     // K_j, two buffers (2, BK, LD)
    bf16* Vs = Ks + 2 * BK * LD;  // V_j, two buffers (2, BK, LD)

    const int bh = blockIdx.x;
    const int Tq = (p.Nq + BQ - 1) / BQ, Tk = (p.Nk + BK - 1) / BK;
    const int i = Tq - 1 - (int)blockIdx.y;  // the longest causal rows start first
    const int q0 = i * BQ;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int qw = warp * 16 * MT;  // this warp's first query row within the tile
    const bf16* Kg = (const bf16*)p.k + view_off(p.sk, bh, p.H, 0);
    const bf16* Vg = (const bf16*)p.v + view_off(p.sv, bh, p.H, 0);
    const float sl2 = p.scale * LOG2E_F;
    // Causal: key tiles past the one holding the tile's last query are wholly masked.
    const int j_end = p.causal ? min(Tk, (q0 + BQ - 1) / BK + 1) : Tk;

    load_rows_async<D, BQ>(Qs, (const bf16*)p.q + view_off(p.sq, bh, p.H, 0), p.sq[2], q0, p.Nq);
    load_rows_async<D, BQ>(dOs, (const bf16*)p.dout + view_off(p.sdo, bh, p.H, 0), p.sdo[2], q0, p.Nq);
    load_rows_async<D, BK>(Ks, Kg, p.sk[2], 0, p.Nk);
    load_rows_async<D, BK>(Vs, Vg, p.sv[2], 0, p.Nk);
    cp_async_commit();
    // This thread's rows (g and g + 8 of each of its m-tiles): L * log2(e) and D.
    float L2[MT][2], Dr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = q0 + qw + mt * 16 + g + 8 * h;
            L2[mt][h] = r < p.Nq ? p.lse[(int64_t)bh * p.Nq + r] * LOG2E_F : INFINITY;
            Dr[mt][h] = r < p.Nq ? p.D[(int64_t)bh * p.Nq + r] : 0.0f;
        }
    float dQ[MT][NT_D][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT_D; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dQ[mt][n][e] = 0.0f;

    for (int j = 0; j < j_end; j++) {
        const int buf = j & 1, k0 = j * BK;
        if (j + 1 < j_end) {
            load_rows_async<D, BK>(Ks + (buf ^ 1) * BK * LD, Kg, p.sk[2], k0 + BK, p.Nk);
            load_rows_async<D, BK>(Vs + (buf ^ 1) * BK * LD, Vg, p.sv[2], k0 + BK, p.Nk);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* Kb = Ks + buf * BK * LD;
        const bf16* Vb = Vs + buf * BK * LD;

        // S = Q_i K_j^T and dP = dO_i V_j^T: this warp's 16 MT queries x BK keys.
        float S[MT][NT_K][4], dP[MT][NT_K][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NT_K; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[mt][n][e] = dP[mt][n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC_D; kc++) {
            uint32_t aq[MT][4], ao[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ldmatrix_x4(aq[mt], Qs + (qw + mt * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
                ldmatrix_x4(ao[mt], dOs + (qw + mt * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            }
#pragma unroll
            for (int np = 0; np < BK / 16; np++) {
                // B = K_j^T (k = head dim, n = key): K_j's rows hold k contiguously.
                const int n = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                const int kk = kc * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bk[4], bv[4];
                ldmatrix_x4(bk, Kb + n * LD + kk);
                ldmatrix_x4(bv, Vb + n * LD + kk);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_m16n8k16_bf16(S[mt][2 * np], aq[mt], bk[0], bk[1]);
                    mma_m16n8k16_bf16(S[mt][2 * np + 1], aq[mt], bk[2], bk[3]);
                    mma_m16n8k16_bf16(dP[mt][2 * np], ao[mt], bv[0], bv[1]);
                    mma_m16n8k16_bf16(dP[mt][2 * np + 1], ao[mt], bv[2], bv[3]);
                }
            }
        }
        // Keys past Nk must be masked here (zero-filled K rows would give P = exp(-L) != 0).
        const bool need_mask = (p.causal && k0 + BK - 1 > q0) || (k0 + BK > p.Nk);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NT_K; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1;
                    float pr = exp2f(S[mt][n][e] * sl2 - L2[mt][h]);
                    if (need_mask) {
                        const int kg = k0 + n * 8 + 2 * t + (e & 1), qg = q0 + qw + mt * 16 + g + 8 * h;
                        if (kg >= p.Nk || (p.causal && kg > qg)) pr = 0.0f;
                    }
                    dP[mt][n][e] = pr * (dP[mt][n][e] - Dr[mt][h]);  // dS
                }
        // dQ_i += dS K_j (scale at the end).
#pragma unroll
        for (int kk = 0; kk < KC_K; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = pack_bf16(dP[mt][2 * kk][0], dP[mt][2 * kk][1]);
                a[mt][1] = pack_bf16(dP[mt][2 * kk][2], dP[mt][2 * kk][3]);
                a[mt][2] = pack_bf16(dP[mt][2 * kk + 1][0], dP[mt][2 * kk + 1][1]);
                a[mt][3] = pack_bf16(dP[mt][2 * kk + 1][2], dP[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                // B = K_j (k = key, n = head dim): rows hold n contiguously, hence .trans.
                const int kr = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int nc = dn * 16 + (lane >> 4) * 8;
                uint32_t b[4];
                ldmatrix_x4_trans(b, Kb + kr * LD + nc);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_m16n8k16_bf16(dQ[mt][2 * dn], a[mt], b[0], b[1]);
                    mma_m16n8k16_bf16(dQ[mt][2 * dn + 1], a[mt], b[2], b[3]);
                }
            }
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    bf16* dq = (bf16*)p.dq + view_off(p.sdq, bh, p.H, 0);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT_D; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int qg = q0 + qw + mt * 16 + g + 8 * h, c = n * 8 + 2 * t;
                if (qg < p.Nq)
                    *(uint32_t*)(dq + (int64_t)qg * p.sdq[2] + c) =
                        pack_bf16(dQ[mt][n][2 * h] * p.scale, dQ[mt][n][2 * h + 1] * p.scale);
            }
}

template <int D, int BQ, int DQM, bool CACHE_KV>
void launch_dkdv(const BwdParams& p, cudaStream_t s) {
    typedef DkdvCfg<D, BQ, DQM> C;
    auto kern = bwd_dkdv_mma_kernel<D, BQ, DQM, CACHE_KV>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::smem));
    dim3 grid(p.B * p.H, (p.Nk + C::BK - 1) / C::BK);  // x = head: the longest causal tiles start first
    kern<<<grid, kThreads, C::smem, s>>>(p);
    CUDA_CHECK_LAST();
}

template <int D, int MT, int BK>
void launch_dq(const BwdParams& p, cudaStream_t s) {
    typedef DqCfg<D, MT, BK> C;
    auto kern = bwd_dq_mma_kernel<D, MT, BK>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::smem));
    dim3 grid(p.B * p.H, (p.Nq + C::BQ - 1) / C::BQ);
    kern<<<grid, kThreads, C::smem, s>>>(p);
    CUDA_CHECK_LAST();
}

// The versions (NOTES.md has their timings):
//   1  dK/dV: K_j, V_j fragments re-read from shared memory; dQ: 1 m-tile per warp, 64-key steps;
//      single pass: scalar atomicAdd.
//   2  dK/dV: K_j, V_j fragments cached in registers; dQ: 2 m-tiles per warp, 32-key steps;
//      single pass: float2 atomicAdd.
//   3  as 2, but dK/dV without the register cache.
//   4  as 2, but the single pass adds dQ tiles with the bulk-copy engine (cp.reduce.async.bulk).
//   5  as 3, but dK/dV with two m-tiles (32 keys) per warp (flash_bwd_dkdv_mt2.cu).
// At d = 128 the registers are not there for the cache or the second m-tile: every version runs
// version 1's two-pass kernels there (the single pass still changes with the version).
// parts: 3 both kernels, 1 only dK/dV, 2 only dQ (the benchmark's per-kernel times).
template <int D, int BQ, int DQM>
void launch_dkdv_v(const BwdParams& p, bool cache, cudaStream_t s) {
    if constexpr (D <= 64) {
        if (cache) { launch_dkdv<D, BQ, DQM, true>(p, s); return; }
    }
    launch_dkdv<D, BQ, DQM, false>(p, s);
}

template <int D, int BQ>
void launch_all(const BwdParams& p, bool atomic_dq, int version, int parts, cudaStream_t s) {
    const bool cache = version == 2 || version == 4, mt2 = version >= 2;
    if (atomic_dq) {
        if (version == 1) launch_dkdv_v<D, BQ, DQM_ATOMIC>(p, false, s);
        else if (version == 4) launch_dkdv_v<D, BQ, DQM_BULK>(p, cache, s);
        else launch_dkdv_v<D, BQ, DQM_ATOMIC2>(p, cache, s);
        return;
    }
    if (parts & 1) {
        if (version == 5 && D <= 64) rung_launch_dkdv_mt2(p, s);
        else launch_dkdv_v<D, BQ, DQM_NONE>(p, cache, s);
    }
    if (parts & 2) {
        if constexpr (D <= 64) {
            if (mt2) { launch_dq<D, 2, 32>(p, s); return; }
        }
        launch_dq<D, 1, 64>(p, s);
    }
}

}  // namespace

void rung_launch_mma(const BwdParams& p, bool atomic_dq, int version, int parts, cudaStream_t s) {
    switch (p.d) {
    case 16: launch_all<16, 64>(p, atomic_dq, version, parts, s); break;
    case 32: launch_all<32, 64>(p, atomic_dq, version, parts, s); break;
    case 64: launch_all<64, 64>(p, atomic_dq, version, parts, s); break;
    // d = 128: 32-query tiles keep S^T, dP^T, dK_j and dV_j within the register file.
    case 128: launch_all<128, 32>(p, atomic_dq, version, parts, s); break;
    default: DIE("rung_launch_mma: head dim %d has no tensor-core kernel", p.d);
    }
}

}  // namespace lab04
