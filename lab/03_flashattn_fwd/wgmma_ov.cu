// Rung "wgmma-ov": wgmma with the next tile's scores issued before this tile's softmax.
// Run: build/lab/03_flashattn_fwd/rungs --d 64,128 --rung "wgmma-ov w8 mt1 bk64"
//
// The bf16 forward on wgmma with the score product of the next key tile overlapped with this
// tile's softmax (FlashAttention-3's "intra-warpgroup overlap"), head dims 64 and 128 (sm_90a).
// wgmma.cu runs S = Q K_j^T, waits, does the softmax, runs O += P~ V_j, waits:
// the tensor cores idle during the softmax. Here each warpgroup issues S_{j+1} = Q K_{j+1}^T
// (asynchronous) before it starts tile j's softmax, so the exponentials of tile j run while the
// tensor cores compute tile j+1's scores; then O += P~ V_j, and one wait for both.
//   block = WG warpgroups x 64 query rows (Bq 64 WG: 128 or 192), Bk 64; every [rows][D] tile is stored as D/64
//   column halves of [rows][64] core matrices (common/wgmma.cuh: a wgmma descriptor has one
//   stride per direction, so a 128-wide tile is two 64-wide ones);
//   S = Q_i K_j^T     D/16 x wgmma m64n64k16, both from shared memory (K-major: k = d);
//   O += P~ V_j       4 x (D/64) x wgmma m64n64k16, A = P~ from registers, B = V_j half (MN-major).
// K needs to be one tile ahead of V: at the top of iteration j, K_{j+1} and V_j are in shared
// memory; the iteration loads K_{j+2} into K_j's buffer (S_j finished in iteration j-1) and
// V_{j+1} into V_{j-1}'s (P~V_{j-1} finished), so two buffers each suffice and every load has a
// whole iteration to land. One barrier per key tile.
// Masks, the online softmax and the epilogue: wg_softmax.cuh (shared with
// wgmma.cu); rungs.c lists its three instances.
#include "lab/03_flashattn_fwd/wg_softmax.cuh"
#include "common/wgmma.cuh"

namespace {

template <int D_, int WG_>
struct WgOvCfg {
    static constexpr int D = D_, DH = D_ / 64, BQ = 64 * WG_, BK = 64, THREADS = 128 * WG_;
    static constexpr uint32_t kHalfQ = BQ * 128, kHalfKV = BK * 128;  // bytes of one [rows][64] half
    static constexpr uint32_t kTileQ = DH * kHalfQ, kTileKV = DH * kHalfKV;
    static constexpr uint32_t kOffK = kTileQ, kOffV = kOffK + 2 * kTileKV;
    static constexpr size_t SMEM = kOffV + 2 * kTileKV;  // d 64: 48 KB (WG 2), 56 KB (WG 3); d 128: 96 KB
};

// Rows [r0, r0 + ROWS) of a [N, D] bf16 view into DH core-matrix halves (rows >= n zero-filled),
// by T threads: thread x copies the 16-byte chunk (x / 8) % 8 of row 8 (x / 64) + x % 8 of
// every T / 8 rows, so eight consecutive threads fill one 128-byte core matrix.
template <int ROWS, int DH, int T>
__device__ __forceinline__ void load_tile_halves(uint32_t dst, const bf16* g, int64_t rs, int r0, int n) {
    const int rt = ((threadIdx.x >> 6) << 3) | (threadIdx.x & 7), ct = ((threadIdx.x >> 3) & 7) * 8;
#pragma unroll
    for (int hh = 0; hh < DH; hh++)
#pragma unroll
        for (int it = 0; it < (ROWS * 8 + T - 1) / T; it++) {
            const int rl = it * (T / 8) + rt;  // the tile's row
            if ((ROWS * 8) % T != 0 && rl >= ROWS) break;
            const int r = r0 + rl;
            const bool valid = r < n;
            cp_async16(dst + hh * ROWS * 128 + core_off(rl, ct), valid ? g + (int64_t)r * rs + hh * 64 + ct : g, valid);
        }
}

// S = Q K^T for this warpgroup's 64 rows against one 64-key tile (issued, not waited).
template <class C>
__device__ __forceinline__ void issue_scores(float (&s)[32], uint32_t q_base, uint32_t k_base) {
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < C::D / 16; kk++) {
        const uint64_t dq = wg_desc(kDescKMajor, q_base + (kk >> 2) * C::kHalfQ) + (kk & 3) * 16;
        const uint64_t dk = wg_desc(kDescKMajor, k_base + (kk >> 2) * C::kHalfKV) + (kk & 3) * 16;
        wg_m64n64_ss<0, 0>(s, dq, dk, kk > 0);
    }
    wg_commit();
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) flash_fwd_wgmma_ov_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(16) unsigned char smem_ov[];
    const uint32_t sbase = smem_u32(smem_ov);

    const BlockPos bp = block_pos(p, C::BQ);  // long causal tiles first
    const int bh = bp.bh, b = bp.b, h = bp.h, i0 = bp.i0;
    const bf16 *Q = bp.Q, *K = bp.K, *V = bp.V;
    const int Tk = (p.Nk + C::BK - 1) / C::BK;
    const int n_tiles = p.causal ? min(Tk, (i0 + C::BQ - 1) / C::BK + 1) : Tk;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wg = warp / 4;
    const int wrow0 = i0 + wg * 64;                // this warpgroup's first query row
    const int row0 = wrow0 + (warp & 3) * 16 + g;  // this thread's rows: row0, row0 + 8
    // Tile j has work for this warpgroup unless (causal) all its 64 rows lie above the tile;
    // false from some j on, and the same for the whole warpgroup.
    auto active = [&](int j) { return j < n_tiles && (!p.causal || j * C::BK <= wrow0 + 63); };

    const uint32_t q_base = sbase + wg * 8192;  // this warpgroup's 64 rows within each Q half
    auto k_buf = [&](int j) { return sbase + C::kOffK + (uint32_t)(j & 1) * C::kTileKV; };
    auto v_buf = [&](int j) { return sbase + C::kOffV + (uint32_t)(j & 1) * C::kTileKV; };

    // Prologue: Q, K_0, V_0, K_1; then S_0.
    load_tile_halves<C::BQ, C::DH, C::THREADS>(sbase, Q, p.sq[2], i0, p.Nq);
    load_tile_halves<C::BK, C::DH, C::THREADS>(k_buf(0), K, p.sk[2], 0, p.Nk);
    load_tile_halves<C::BK, C::DH, C::THREADS>(v_buf(0), V, p.sv[2], 0, p.Nk);
    if (n_tiles > 1) load_tile_halves<C::BK, C::DH, C::THREADS>(k_buf(1), K, p.sk[2], C::BK, p.Nk);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();

    float o[C::DH][32], s[32], sn[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int hh = 0; hh < C::DH; hh++)
#pragma unroll
        for (int e = 0; e < 32; e++) o[hh][e] = 0.0f;
    if (active(0)) {
        issue_scores<C>(s, q_base, k_buf(0));
        wg_wait<0>();
        fence_regs(s);
    }
    __syncthreads();  // every warpgroup's S_0 has read K_0 before iteration 0 refills its buffer

    for (int j = 0; j < n_tiles; j++) {
        const int j0 = j * C::BK;
        // K_{j+2} into K_j's buffer, V_{j+1} into V_{j-1}'s: both freed by the barrier that
        // ended iteration j-1 (or the prologue's).
        if (j + 2 < n_tiles) load_tile_halves<C::BK, C::DH, C::THREADS>(k_buf(j), K, p.sk[2], j0 + 2 * C::BK, p.Nk);
        if (j + 1 < n_tiles) load_tile_halves<C::BK, C::DH, C::THREADS>(v_buf(j + 1), V, p.sv[2], j0 + C::BK, p.Nk);
        cp_async_commit();

        const bool next = active(j + 1);
        if (next) issue_scores<C>(sn, q_base, k_buf(j + 1));  // runs under the softmax below

        if (active(j)) {
            wg_softmax_tile<C::DH>(p, s, o, m, l, j0, C::BK, wrow0, row0, t);
            uint32_t pa[4][4];
            wg_pack_p(s, pa);  // O += P~ V_j
            wg_fence();
#pragma unroll
            for (int hh = 0; hh < C::DH; hh++) {
                const uint64_t dV = wg_desc(kDescMNMajor, v_buf(j) + hh * C::kHalfKV);
#pragma unroll
                for (int kq = 0; kq < 4; kq++) wg_m64n64_rs<1>(o[hh], pa[kq], dV + kq * 128, 1);
            }
            wg_commit();
        }
        wg_wait<0>();  // S_{j+1} and O += P~ V_j
#pragma unroll
        for (int hh = 0; hh < C::DH; hh++) fence_regs(o[hh]);
        if (next) {
            fence_regs(sn);
#pragma unroll
            for (int e = 0; e < 32; e++) s[e] = sn[e];
        }
        cp_async_wait<0>();  // K_{j+2}, V_{j+1} landed
        fence_proxy_async();
        __syncthreads();  // ... for every thread; every warpgroup is done with K_{j+1} and V_j
    }

    wg_epilogue<C::DH>(p, o, m, l, b, h, bh, row0, t);
#else
    __trap();  // built without sm_90a: the launchers below never launch it
#endif
}

}  // namespace

// The rung's launchers; lab03_run (rungs.c) calls them only where the code was built for sm_90a.
// WG: warpgroups (64 query rows each) per block; one block per SM (162 registers at d 64, 204 at
// d 128: ptxas -v).
template <int D, int WG>
static void launch_ov(const attn_args_t* a, cudaStream_t stream) {
    if (!wgmma_built()) DIE("rung wgmma-ov: this build has no sm_90a code");
    launch_with<WgOvCfg<D, WG>, flash_fwd_wgmma_ov_kernel<WgOvCfg<D, WG>>>(a, stream);
}
extern "C" void lab03_wgmma_ov_d64_wg2_launch(const attn_args_t* a, cudaStream_t s) { launch_ov<64, 2>(a, s); }
extern "C" void lab03_wgmma_ov_d64_wg3_launch(const attn_args_t* a, cudaStream_t s) { launch_ov<64, 3>(a, s); }
extern "C" void lab03_wgmma_ov_d128_wg2_launch(const attn_args_t* a, cudaStream_t s) { launch_ov<128, 2>(a, s); }
