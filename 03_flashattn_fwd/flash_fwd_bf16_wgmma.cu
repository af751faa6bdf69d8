// The bf16 forward on Hopper's warpgroup MMA (wgmma, sm_90a), head dim 64: the d-64 variant
// "wgmma w8 bq128 bk64" (flash_fwd_bf16_d64.cu). Same algorithm as flash_fwd_bf16.cuh (online
// softmax over key tiles, P~ re-packed in registers as the A operand of P~ V); what changes is
// who reads the operands:
//   block = 2 warpgroups x 64 query rows (Bq 128); Q_i, K_j, V_j in shared memory as 8 x 8 core
//   matrices (common/wgmma.cuh), K_j, V_j double-buffered with cp.async (Bk 64);
//   S = Q_i K_j^T      4 x wgmma m64n64k16, both operands straight from shared memory (K-major);
//   O += P~ V_j        4 x wgmma m64n64k16, A = P~ from registers, B = V_j (MN-major: K = keys).
// No ldmatrix at all; 2 blocks (16 warps) per SM. The accumulator layout of a warpgroup's 64 x 64
// product is mma.sync's per warp (warp w of the group: rows 16w..16w+15), so the masks, the
// online softmax and the epilogue are flash_fwd_bf16.cuh's.
// Measured (H100, N 16384, 16 heads, causal): 2.00 ms against 1.90 for the mma.sync default, so
// it is the last variant, not the first: within a warpgroup S, softmax and P V run one after
// another, and nothing but the other block on the SM fills the gaps (NOTES.md).
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"
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
    // STUDENT-BEGIN(03.flash_fwd_wgmma_kernel): the bf16 forward at d = 64 on wgmma (sm_90a): 2 warpgroups x 64 query rows; Q_i, K_j, V_j in shared memory as 8 x 8 core matrices (common/wgmma.cuh), K_j, V_j double-buffered by cp.async; S = Q_i K_j^T and O += P~ V_j by wgmma m64n64k16 (P~ from registers); masks, online softmax and epilogue as flash_fwd_bf16_kernel | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*bf16*
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
    float o[32], s[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 32; e++) o[e] = 0.0f;

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

            // s[4n + e]: row row0 + 8 (e / 2), key j0 + 8n + 2t + e % 2.
            if ((p.causal && j0 + C::BK - 1 > wrow0) || j0 + C::BK > p.Nk) {
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = row0 + 8 * (e >> 1), col = j0 + 8 * n + 2 * t + (e & 1);
                        if (col >= p.Nk || (p.causal && col > row)) s[4 * n + e] = -INFINITY;
                    }
            }
            // Online softmax per row (its 16 values of this tile live in the 4 threads of a quad).
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
                for (int n = 0; n < 8; n++) {
                    o[4 * n + 2 * hf] *= alpha;
                    o[4 * n + 2 * hf + 1] *= alpha;
                }
            }
            // O += P~ V_j: k-step kq = keys 16kq..16kq+15; two 8-key n-tiles make one A fragment.
            uint32_t pa[4][4];
#pragma unroll
            for (int kq = 0; kq < 4; kq++)
#pragma unroll
                for (int x = 0; x < 4; x++) pa[kq][x] = pack_bf16(s[8 * kq + 2 * x], s[8 * kq + 2 * x + 1]);
            const uint64_t dV = wg_desc(kDescMNMajor, sbase + C::kOffV + stage * C::kTileKV);
            wg_fence();
#pragma unroll
            for (int kq = 0; kq < 4; kq++) wg_m64n64_rs<1>(o, pa[kq], dV + kq * 128, 1);
            wg_commit();
            wg_wait<0>();
            fence_regs(o);
        }
        __syncthreads();  // every warpgroup is done with this stage before it is refilled
    }

    // O_i = diag(l)^-1 O_i, L_i = m scale + ln(l)
    bf16* O = p.o + b * p.so[0] + h * p.so[1];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float lt = l[hf];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        const int row = row0 + 8 * hf;
        if (row < p.Nq) {
            const float inv = 1.0f / lt;
            bf16* orow = O + (int64_t)row * p.so[2];
#pragma unroll
            for (int n = 0; n < 8; n++)
                *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * t) = pack_bf16(o[4 * n + 2 * hf] * inv, o[4 * n + 2 * hf + 1] * inv);
            if (t == 0) p.lse[(int64_t)bh * p.Nq + row] = m[hf] * p.scale + logf(lt);
        }
    }
#else
    __trap();  // built without sm_90a: flash_fwd_wgmma_launch never launches it
#endif
    // STUDENT-END(03.flash_fwd_wgmma_kernel)
}

}  // namespace

extern "C" const flash_variant_t flash_fwd_bf16_variants_d64[];

// The d-64 variant's launcher: wgmma where the code was built for it (sm_90a), else the default
// (mma.sync) variant of the table.
extern "C" void flash_fwd_wgmma_d64_launch(const attn_args_t* a, cudaStream_t stream) {
    if (wgmma_built()) launch_with<WgFwdCfg, flash_fwd_wgmma_kernel>(a, stream);
    else flash_fwd_bf16_variants_d64[0].launch(a, stream);
}
