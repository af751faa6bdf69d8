// The two-pass bf16 tensor-core backward (mma.sync.m16n8k16, ldmatrix, cp.async) at d = 128:
// what runs there in a build without sm_90a code. No atomics: two kernels after the D pre-pass.
//   dK/dV: block (bh, j) keeps K_j, V_j in shared memory and dK_j, dV_j in registers while it
//          walks the query tiles i (causal: from the diagonal down), double-buffering Q_i, dO_i.
//          It computes the transposed tile S^T = K_j Q_i^T so that P^T and dS^T come out of the
//          mma already in the register layout of the next mma's A operand (dV += P^T dO_i,
//          dK += dS^T Q_i): no trip through shared memory.
//   dQ:    block (bh, i) keeps Q_i, dO_i and dQ_i, walks key tiles j (causal: up to the
//          diagonal), recomputing P, and writes dQ_i once.
// Each of the 4 warps owns 16 rows of the block's tile; at d = 128 the query tiles of the dK/dV
// kernel are 32 rows, which keeps S^T, dP^T, dK_j and dV_j within the register file.
// Shared-memory rows are padded by 8 elements (16 bytes) so the 8 row addresses of one
// ldmatrix fall in 8 different bank groups.
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"

namespace {

typedef __nv_bfloat16 bf16;
constexpr int kWarps = kMmaWarps, kThreads = kMmaThreads, kBQ = 32;

template <int D>
struct DkdvCfg {  // tile sizes and shared memory of bwd_dkdv_mma_kernel
    static constexpr int BQ = kBQ, BK = kWarps * 16, LD = D + 8;
    static constexpr size_t smem = sizeof(bf16) * ((size_t)2 * BK * LD + 4 * BQ * LD) + sizeof(float) * 4 * BQ;
};

template <int D>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_mma_kernel(BwdParams p) {
    // STUDENT-BEGIN(04.dkdv_mma_kernel): the two-pass dK/dV kernel (d 128): one block per (batch*head, key tile K_j), each warp 16 keys; K_j, V_j in shared memory, Q_i, dO_i, L_i, D_i double-buffered by cp.async; per query tile S^T, dP^T by mma, P^T = exp(S^T - L), dS^T = P^T o (dP^T - D) in registers, packed to bf16 as A fragments of dV += P^T dO_i and dK += dS^T Q_i | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_mma_two_pass bwd_cuda/sanitize_bf16_mma_two_pass
    typedef DkdvCfg<D> C;
    constexpr int BQ = C::BQ, BK = C::BK, LD = C::LD;
    constexpr int NT_Q = BQ / 8, NT_D = D / 8, KC_D = D / 16, KC_Q = BQ / 16;
    static_assert(D % 16 == 0 && D <= 128, "head dim must be a multiple of 16, at most 128");
    static_assert(BQ % 16 == 0, "query tile must be a multiple of the mma's 16");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* Ks = (bf16*)smem_raw;            // K_j (BK, LD)
    bf16* Vs = Ks + BK * LD;               // V_j (BK, LD)
    bf16* Qs = Vs + BK * LD;               // Q_i, two buffers (2, BQ, LD)
    bf16* dOs = Qs + 2 * BQ * LD;          // dO_i, two buffers (2, BQ, LD)
    float* Ls = (float*)(dOs + 2 * BQ * LD);  // L_i * log2(e) (2, BQ)
    float* Ds = Ls + 2 * BQ;                  // D_i (2, BQ)

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

        // S^T = K_j Q_i^T and dP^T = V_j dO_i^T: (16 keys of this warp) x BQ queries.
        float S[NT_Q][4], dP[NT_Q][4];
#pragma unroll
        for (int n = 0; n < NT_Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[n][e] = dP[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC_D; kc++) {
            uint32_t ak[4], av[4];  // K_j's and V_j's A fragments, read from shared memory
            ldmatrix_x4(ak, Ks + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
            ldmatrix_x4(av, Vs + (kw + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
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
        __syncthreads();  // everyone is done with buffer buf (and dSs) before they are refilled
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
    // STUDENT-END(04.dkdv_mma_kernel)
}

// One m-tile (16 query rows) per warp, 64 keys per step.
constexpr int MT = 1;
template <int D>
struct DqCfg {
    static constexpr int BQ = kWarps * 16 * MT, BK = 64, LD = D + 8;
    static constexpr size_t smem = sizeof(bf16) * ((size_t)2 * BQ * LD + 4 * BK * LD);
};

template <int D>
__global__ void __launch_bounds__(kThreads) bwd_dq_mma_kernel(BwdParams p) {
    // STUDENT-BEGIN(04.dq_mma_kernel): the tensor-core dQ kernel: one block per (batch*head, query tile Q_i), K_j, V_j double-buffered by cp.async; per key tile S and dP by mma, dS = P o (dP - D) packed as the A fragment of dQ += dS K_j; dQ = scale · dQ written in bf16 | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_mma_two_pass bwd_cuda/sanitize_bf16_mma_two_pass
    typedef DqCfg<D> C;
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
    // STUDENT-END(04.dq_mma_kernel)
}

template <int D>
void launch_dkdv(const BwdParams& p, cudaStream_t s) {
    // STUDENT-BEGIN(04.launch_dkdv_mma): launch bwd_dkdv_mma_kernel<D> on grid (B·H, key tiles) with DkdvCfg's shared memory (opted in by cudaFuncSetAttribute), then CUDA_CHECK_LAST | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_mma_two_pass bwd_cuda/sanitize_bf16_mma_two_pass | uses: bwd_dkdv_mma_kernel<D>
    typedef DkdvCfg<D> C;
    auto kern = bwd_dkdv_mma_kernel<D>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::smem));
    dim3 grid(p.B * p.H, (p.Nk + C::BK - 1) / C::BK);  // x = head: the longest causal tiles start first
    kern<<<grid, kThreads, C::smem, s>>>(p);
    CUDA_CHECK_LAST();
    // STUDENT-END(04.launch_dkdv_mma)
}

template <int D>
void launch_dq(const BwdParams& p, cudaStream_t s) {
    // STUDENT-BEGIN(04.launch_dq_mma): launch bwd_dq_mma_kernel<D> on grid (B·H, query tiles) with DqCfg's shared memory (opted in by cudaFuncSetAttribute), then CUDA_CHECK_LAST | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_mma_two_pass bwd_cuda/sanitize_bf16_mma_two_pass
    typedef DqCfg<D> C;
    auto kern = bwd_dq_mma_kernel<D>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::smem));
    dim3 grid(p.B * p.H, (p.Nq + C::BQ - 1) / C::BQ);
    kern<<<grid, kThreads, C::smem, s>>>(p);
    CUDA_CHECK_LAST();
    // STUDENT-END(04.launch_dq_mma)
}

}  // namespace

void bwd_launch_mma_two_pass(const BwdParams& p, cudaStream_t s) {
    if (p.d != 128) DIE("bwd_launch_mma_two_pass: head dim %d (the two-pass kernels are built for d 128)", p.d);
    launch_dkdv<128>(p, s);  // dK, dV
    launch_dq<128>(p, s);    // dQ
}
