// Rung "wgmma": the mma.sync kernel's algorithm on wgmma, operands from shared memory, steps in order.
// Run: build/lab/03_flashattn_fwd/rungs --d 64 --rung "wgmma w8 mt1 bk64"
//
// The bf16 forward on Hopper's warpgroup MMA (wgmma, sm_90a), head dim 64: the d-64 variant
// "wgmma w8 mt1 bk64" (rungs.c). Same algorithm as flash_fwd_bf16.cuh (online
// softmax over key tiles, P~ re-packed in registers as the A operand of P~ V); what changes is
// who reads the operands:
//   block = 2 warpgroups x 64 query rows (Bq 128); Q_i, K_j, V_j in shared memory as 8 x 8 core
//   matrices (common/wgmma.cuh), K_j, V_j double-buffered with cp.async (Bk 64);
//   S = Q_i K_j^T      4 x wgmma m64n64k16, both operands straight from shared memory (K-major);
//   O += P~ V_j        4 x wgmma m64n64k16, A = P~ from registers, B = V_j (MN-major: K = keys).
// No ldmatrix at all; 2 blocks (16 warps) per SM. The accumulator layout of a warpgroup's 64 x 64
// product is mma.sync's per warp (warp w of the group: rows 16w..16w+15), so the masks, the
// online softmax and the epilogue are flash_fwd_bf16.cuh's (wg_softmax.cuh holds them,
// shared with wgmma_ov.cu).
// Measured (H100, N 16384, 16 heads, causal): 2.00 ms against 1.90 for the mma.sync default, so
// it is the last variant, not the first: within a warpgroup S, softmax and P V run one after
// another, and nothing but the other block on the SM fills the gaps (NOTES.md).
#include "lab/03_flashattn_fwd/wg_softmax.cuh"
#include "common/wgmma.cuh"

namespace {

struct WgFwdCfg {
    static constexpr int D = 64, BQ = 128, BK = 64, THREADS = 256;
    static constexpr uint32_t kTileQ = BQ * D * 2, kTileKV = BK * D * 2;  // 16 KB, 8 KB
    static constexpr uint32_t kOffK = kTileQ, kOffV = kOffK + 2 * kTileKV;
    static constexpr size_t SMEM = kOffV + 2 * kTileKV;                   // 48 KB
};

// Rows [r0, r0 + ROWS) of a [N, 64] bf16 view into a core-matrix tile (rows >= n zero-filled);
// eight consecutive threads fill one 128-byte core matrix.
template <int ROWS>
__device__ __forceinline__ void load_core_tile(uint32_t dst, const bf16* g, int64_t rs, int r0, int n) {
    constexpr int T = WgFwdCfg::THREADS;
    const int rt = ((threadIdx.x >> 6) << 3) | (threadIdx.x & 7), ct = ((threadIdx.x >> 3) & 7) * 8;
    const uint32_t soff = core_off(rt, ct);
#pragma unroll
    for (int it = 0; it < ROWS * 8 / T; it++) {
        const int r = r0 + it * (T / 8) + rt;
        const bool valid = r < n;
        cp_async16(dst + soff + it * T * 16, valid ? g + (int64_t)r * rs + ct : g, valid);
    }
}

__global__ void __launch_bounds__(WgFwdCfg::THREADS, 2) flash_fwd_wgmma_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WgFwdCfg C;
    extern __shared__ __align__(16) unsigned char smem_wg[];  // 16-byte alignment: all common/wgmma.cuh's layout needs
    const uint32_t sbase = smem_u32(smem_wg);

    const BlockPos bp = block_pos(p, C::BQ);  // long causal tiles first
    const int bh = bp.bh, b = bp.b, h = bp.h, i0 = bp.i0;
    const bf16 *Q = bp.Q, *K = bp.K, *V = bp.V;
    const int Tk = (p.Nk + C::BK - 1) / C::BK;
    const int n_tiles = p.causal ? min(Tk, (i0 + C::BQ - 1) / C::BK + 1) : Tk;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wg = warp / 4;
    const int wrow0 = i0 + wg * 64;              // this warpgroup's first query row
    const int row0 = wrow0 + (warp & 3) * 16 + g;  // this thread's rows: row0, row0 + 8

    load_core_tile<C::BQ>(sbase, Q, p.sq[2], i0, p.Nq);
    load_core_tile<C::BK>(sbase + C::kOffK, K, p.sk[2], 0, p.Nk);
    load_core_tile<C::BK>(sbase + C::kOffV, V, p.sv[2], 0, p.Nk);
    cp_async_commit();

    const uint64_t dQ = wg_desc(kDescKMajor, sbase + wg * 8192);  // this warpgroup's 64 rows of Q_i
    float o[1][32], s[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 32; e++) o[0][e] = 0.0f;

    for (int j = 0; j < n_tiles; j++) {
        const int stage = j & 1, j0 = j * C::BK;
        if (j + 1 < n_tiles) {  // K_{j+1}, V_{j+1} into the other stage (freed by the barrier at the end of j-1)
            load_core_tile<C::BK>(sbase + C::kOffK + (stage ^ 1) * C::kTileKV, K, p.sk[2], j0 + C::BK, p.Nk);
            load_core_tile<C::BK>(sbase + C::kOffV + (stage ^ 1) * C::kTileKV, V, p.sv[2], j0 + C::BK, p.Nk);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();  // the cp.async data -> wgmma's operand reads
        __syncthreads();

        // Causal: a warpgroup whose 64 rows all lie above this key tile skips it (the other
        // warpgroup of the block may still need it).
        if (!p.causal || j0 <= wrow0 + 63) {
            const uint64_t dK = wg_desc(kDescKMajor, sbase + C::kOffK + stage * C::kTileKV);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < C::D / 16; kk++) wg_m64n64_ss<0, 0>(s, dQ + kk * 16, dK + kk * 16, kk > 0);
            wg_commit();
            wg_wait<0>();
            fence_regs(s);

            wg_softmax_tile<1>(p, s, o, m, l, j0, C::BK, wrow0, row0, t);
            uint32_t pa[4][4];
            wg_pack_p(s, pa);  // O += P~ V_j
            const uint64_t dV = wg_desc(kDescMNMajor, sbase + C::kOffV + stage * C::kTileKV);
            wg_fence();
#pragma unroll
            for (int kq = 0; kq < 4; kq++) wg_m64n64_rs<1>(o[0], pa[kq], dV + kq * 128, 1);
            wg_commit();
            wg_wait<0>();
            fence_regs(o[0]);
        }
        __syncthreads();  // every warpgroup is done with this stage before it is refilled
    }

    wg_epilogue<1>(p, o, m, l, b, h, bh, row0, t);
#else
    __trap();  // built without sm_90a: flash_fwd_wgmma_launch never launches it
#endif
}

}  // namespace

// The rung's launcher; lab03_run (rungs.c) calls it only where the code was built for sm_90a.
extern "C" void lab03_wgmma_d64_launch(const attn_args_t* a, cudaStream_t stream) {
    if (!wgmma_built()) DIE("rung wgmma: this build has no sm_90a code");
    launch_with<WgFwdCfg, flash_fwd_wgmma_kernel>(a, stream);
}
