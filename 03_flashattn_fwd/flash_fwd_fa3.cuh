// The bf16 forward as FlashAttention-3 lays it out on Hopper (sm_90a), head dims 64 and 128:
// warp specialisation, TMA loads into an mbarrier ring, wgmma for both products, two consumer
// warpgroups in ping-pong, and the next tile's Q K^T overlapped with this tile's softmax.
//
// Block (query tile i of Bq = 64 NC rows, batch*head), NC + 1 warpgroups, one block per SM (NC,
// the consumers: 3 at d 64, the default there, FlashAttention-3's own d-64 tile, Bq 192; 2 at
// d 128, Bq 128; the text below says 2 where it means NC):
//   warpgroup 0, the producer: gives its registers back (setmaxnreg 40) and one thread issues
//     every load: Q_i once, then K_j and V_j per key tile (Bk = 128) into a 2-stage ring, each
//     stage with a "full" mbarrier (TMA counts its bytes in) and an "empty" one (the consumers'
//     warps arrive when their wgmma have read it). No thread of a consumer issues a load, and no
//     block-wide barrier runs inside the key loop.
//   warpgroups 1 and 2, the consumers (setmaxnreg 232): 64 query rows each. Per key tile j:
//     wait K_j and V_{j-1} full; take the turn (named barrier); issue S_j = Q K_j^T (2 x D/16 wgmma
//     m64n64k16 from shared memory) and O += P~_{j-1} V_{j-1} (8 x D/64 wgmma, P~ from
//     registers); pass the turn; wait for S_j only, release K_j; mask and softmax S_j (the
//     exponentials run while the tensor cores finish P~_{j-1} V_{j-1} and the other warpgroup's
//     products); wait for the rest, release V_{j-1}; rescale O; pack P~_j as bf16.
//   The turn (FA3's ping-pong): consumer c waits on named barrier 1 + c and, once it has issued,
//   arrives on the other's, so the two issue their products alternately and one's softmax runs
//   under the other's matrix products. All run the block's number of tiles, which keeps the
//   turns paired; the last consumer opens the first turn for consumer 0 and skips its own last
//   hand-over, so every barrier ends balanced.
// With 3 consumers (setmaxnreg 32 / 160) the turns go round the three, and each K_j, V_j load
// feeds 192 rows: 1.06-1.15 ms at the leaderboard point against 1.30-1.33 with 2 (H100).
// Shared memory is the 128-byte swizzle TMA writes and wgmma reads (common/tma.cuh): each
// [rows][D] tile is D/64 boxes of [rows][64]. Q and K are K-major operands (k = d), V is MN-major
// (k = the keys). Block positions and Params are flash_fwd_bf16.cuh's; the P~ packing common/wgmma.cuh's.
// Tensor maps: common/tma.h (rows past N arrive as zeros, so ragged tiles need no special load).
//
// The kernel template and its launcher; flash_fwd_bf16_fa3.cu instantiates the two that ship.
#pragma once
#include "03_flashattn_fwd/flash_fwd_bf16.cuh"
#include "common/tma.cuh"
#include "common/tma.h"
#include "common/wgmma.cuh"
#include <type_traits>

extern "C" void flash_fwd_mma_d64_launch(const attn_args_t* a, cudaStream_t stream);   // flash_fwd_bf16_d64.cu
extern "C" void flash_fwd_mma_d128_launch(const attn_args_t* a, cudaStream_t stream);  // flash_fwd_bf16_d128.cu

namespace {

// O_i = diag(l)^-1 O_i and L_i = m scale + ln(l), for this thread's two rows.
template <int DH>
__device__ __forceinline__ void wg_epilogue(const Params& p, const float (&o)[DH][32], const float (&m)[2],
                                            const float (&l)[2], int b, int h, int bh, int row0, int t) {
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
            for (int hh = 0; hh < DH; hh++)
#pragma unroll
                for (int n = 0; n < 8; n++)
                    *reinterpret_cast<uint32_t*>(orow + hh * 64 + n * 8 + 2 * t) =
                        pack_bf16(o[hh][4 * n + 2 * hf] * inv, o[hh][4 * n + 2 * hf + 1] * inv);
            if (t == 0) p.lse[(int64_t)bh * p.Nq + row] = m[hf] * p.scale + logf(lt);
        }
    }
}


// PINGPONG: the consumers take turns (named barriers); OVERLAP: tile j's softmax runs while
// P~_{j-1} V_{j-1} does (else the consumer waits for both products first). Both on is the kernel;
// the variants with one off (lab/03_flashattn_fwd/) measured what each bought.
// NC: consumer warpgroups, 64 query rows each (2: Bq 128, the d-64 and d-128 kernel; 3: Bq 192,
// FlashAttention-3's own tile for d 64, the turns going round the three).
template <int D_, bool PINGPONG_ = true, bool OVERLAP_ = true, int NC_ = 2>
struct Fa3Cfg {
    static constexpr bool PINGPONG = PINGPONG_, OVERLAP = OVERLAP_;
    static constexpr int D = D_, DH = D_ / 64;  // 64-column boxes per row
    static constexpr int NC = NC_;
    static constexpr int BQ = 64 * NC, BK = 128, THREADS = 128 * (NC + 1), STAGES = 2;
    static constexpr uint32_t kBoxQ = BQ * 128, kBoxKV = BK * 128;  // bytes of one [rows][64] box
    static constexpr uint32_t kTileQ = DH * kBoxQ, kTileKV = DH * kBoxKV;
    static constexpr uint32_t kOffK = kTileQ, kOffV = kOffK + STAGES * kTileKV, kOffBar = kOffV + STAGES * kTileKV;
    static constexpr int kBars = 1 + 4 * STAGES + 1;  // Q full; K full, K empty, V full, V empty per stage; a scratch word
    // + 1024: the dynamic shared memory's base is rounded up to the swizzle's 1024-byte period.
    static constexpr size_t SMEM = kOffBar + kBars * 8 + 1024;  // d 64: 81 KB; d 128: 161 KB
    // 2 consumers: 128 x 40 + 256 x 232 <= 64 K; 3: 128 x 32 + 384 x 160 = 64 K (entry 128, the
    // most __launch_bounds__(512, 1) allows)
    static constexpr int kRegsProducer = NC == 2 ? 40 : 32, kRegsConsumer = NC == 2 ? 232 : 160;
    static constexpr int kTurnThreads = 256;  // a turn barrier: the waiting and the arriving warpgroup
    static_assert((NC == 2 || NC == 3) && D * NC <= 256, "2 or 3 consumer warpgroups (3 only at d 64)");
    static_assert(kRegsProducer * 128 + kRegsConsumer * 128 * NC <= 65536, "register file");
};

__device__ __forceinline__ void fence_regs_u32(uint32_t (&r)[2][4][4]) {
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) asm volatile("" : "+r"(r[a][b][c])::"memory");
}
// Pins the rescaled O and the packed P~ before wgmma.fence, so the compiler cannot sink their
// last writes below it (ptxas would then inject a second fence before O += P~ V).
template <int DH>
__device__ __forceinline__ void fa3_fence_operands(float (&o)[DH][32], uint32_t (&pa)[2][4][4]) {
#pragma unroll
    for (int hh = 0; hh < DH; hh++) fence_regs(o[hh]);
    fence_regs_u32(pa);
    wg_fence();
}

// A basic-block boundary ptxas cannot remove, between tile j's softmax and the wait for
// P~_{j-1} V_{j-1}: a store that never happens (sums of exponentials are never negative, and a
// NaN fails the test) to a scratch word. Without it ptxas's scheduler hoists that wait above the
// exponentials (it treats the wait as free) and nothing overlaps; a branch keeps the wait below
// them. (A trap in its place, being noreturn, made ptxas spill the d-128 kernel.)
__device__ __forceinline__ void fa3_keep_wait_below(const float (&rs)[2], uint32_t scratch) {
    if (rs[0] < 0.0f || rs[1] < 0.0f) asm volatile("st.shared.u32 [%0], 0;\n" ::"r"(scratch) : "memory");
}

// S = Q K_j^T for this warpgroup's 64 rows and the tile's 128 keys, as two 64-key halves
// (issued and committed, not waited). q: this warpgroup's rows in the first Q box.
template <class C>
__device__ __forceinline__ void fa3_issue_scores(float (&s)[2][32], uint32_t q, uint32_t k) {
#pragma unroll
    for (int kc = 0; kc < 2; kc++)
#pragma unroll
        for (int kk = 0; kk < C::D / 16; kk++) {
            const uint32_t off = (kk & 3) * 32;  // the k-step within a 128-byte row
            const uint64_t dq = wg_desc_sw(kDescSw128KMajor, q + (kk >> 2) * C::kBoxQ + off);
            const uint64_t dk = wg_desc_sw(kDescSw128KMajor, k + (kk >> 2) * C::kBoxKV + kc * 64 * 128 + off);
            wg_m64n64_ss<0, 0>(s[kc], dq, dk, kk > 0);
        }
    wg_commit();
}

// O += P~ V for a 128-key tile: k-step kq takes keys 16kq.. (A: P~'s bf16 fragment), each
// 64-column half hh of O reads box hh of V (MN-major, 16 key rows = 2048 bytes per k-step).
template <class C>
__device__ __forceinline__ void fa3_issue_pv(float (&o)[C::DH][32], const uint32_t (&pa)[2][4][4], uint32_t v) {
    constexpr uint64_t kDescV = wg_desc_sw128(C::kBoxKV, 1024);
#pragma unroll
    for (int hh = 0; hh < C::DH; hh++)
#pragma unroll
        for (int kq = 0; kq < 8; kq++)
            wg_m64n64_rs<1>(o[hh], pa[kq >> 2][kq & 3], wg_desc_sw(kDescV, v + hh * C::kBoxKV + kq * 2048), 1);
    wg_commit();
}

// Masks (causal, keys past Nk) where MASK, then P~ = 2^(S scale log2e - m_new scale log2e) in
// place, the new row max m, the factor alpha that rescales the old O and l, and the tile's row
// sums. O itself is not touched: the previous tile's P~ V may still be writing it. Whether a
// tile is masked is a template argument, not a test per tile: only a block's last tiles (from
// j_mask in the kernel: the last one when Bq = Bk) can hold the diagonal or keys past Nk, so
// the other tiles carry no mask code at all.
template <class C, bool MASK>
__device__ __forceinline__ void fa3_softmax(const Params& p, float (&s)[2][32], float (&m)[2], float (&alpha)[2],
                                            float (&rs)[2], int j0, int row0, int t) {
    // STUDENT-BEGIN(03.flash_fwd_fa3_softmax): the online softmax of one 64 x 128 score tile held as two wgmma accumulators s[2][32] (s[kc][4n + e]: row row0 + 8(e / 2), key j0 + 64kc + 8n + 2t + e % 2): where MASK, -inf for keys >= Nk and (causal) keys > row; per row half hf the new max m over the quad (shfl_xor 1, 2), alpha = 2^(m_old·scale·log2e − m_new·scale·log2e), P~ = 2^(S·scale·log2e − m_new·scale·log2e) in place and its row sum rs; O and l are the caller's | see 03_flashattn_fwd/README.md §Algorithm 1 | test: test_03 cuda/*bf16*
    if (MASK) {
#pragma unroll
        for (int kc = 0; kc < 2; kc++)
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int row = row0 + 8 * (e >> 1), col = j0 + 64 * kc + 8 * n + 2 * t + (e & 1);
                    s[kc][4 * n + e] = (col >= p.Nk || (p.causal && col > row)) ? -INFINITY : s[kc][4 * n + e];
                }
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float mx = m[hf];
#pragma unroll
        for (int kc = 0; kc < 2; kc++)
#pragma unroll
            for (int n = 0; n < 8; n++) mx = fmaxf(mx, fmaxf(s[kc][4 * n + 2 * hf], s[kc][4 * n + 2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mbase = (mx == -INFINITY) ? 0.0f : mx * p.scale_log2;  // a row with no key yet
        alpha[hf] = ex2_approx(m[hf] * p.scale_log2 - mbase);
        float sum = 0.0f;
#pragma unroll
        for (int kc = 0; kc < 2; kc++)
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                    const float pe = ex2_approx(fmaf(s[kc][4 * n + e], p.scale_log2, -mbase));
                    s[kc][4 * n + e] = pe;
                    sum += pe;
                }
        rs[hf] = sum;
        m[hf] = mx;
    }
    // STUDENT-END(03.flash_fwd_fa3_softmax)
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1)
    flash_fwd_fa3_kernel(const Params p, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                         const __grid_constant__ CUtensorMap tv) {
    // STUDENT-BEGIN(03.flash_fwd_fa3_kernel): FlashAttention-3's forward (sm_90a, d 64 and 128): a producer warpgroup (setmaxnreg down) whose one thread loads Q_i, then K_j, V_j by TMA into a 2-stage ring of full / empty mbarriers; two or three consumer warpgroups (C::NC, setmaxnreg up) of 64 rows taking turns through named barriers to issue S_j = Q K_j^T and O += P~_{j-1} V_{j-1} on wgmma, then the softmax of S_j while those run; masks, P~ packing and epilogue as the wgmma kernel | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*bf16* | uses: C::PINGPONG C::OVERLAP C::D C::DH C::NC C::BQ C::BK C::STAGES C::kBoxQ C::kBoxKV C::kTileQ C::kTileKV C::kOffK C::kOffV C::kOffBar C::kRegsProducer C::kRegsConsumer C::kTurnThreads fence_regs_u32 fa3_fence_operands<C::DH> fa3_keep_wait_below fa3_issue_scores<C> fa3_issue_pv<C> fa3_softmax<C,true>
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_fa3[];
    const uint32_t sbase = (smem_u32(smem_fa3) + 1023u) & ~1023u;  // the swizzle's period
    // The barriers, 8 bytes each: Q full, then per stage K full, K empty, V full, V empty.
    const uint32_t bar_q = sbase + C::kOffBar;
    auto k_full = [&](int st) { return bar_q + 8 * (1 + 4 * st); };
    auto k_empty = [&](int st) { return bar_q + 8 * (2 + 4 * st); };
    auto v_full = [&](int st) { return bar_q + 8 * (3 + 4 * st); };
    auto v_empty = [&](int st) { return bar_q + 8 * (4 + 4 * st); };
    const uint32_t scratch = bar_q + 8 * (1 + 4 * C::STAGES);
    auto k_tile = [&](int st) { return sbase + C::kOffK + (uint32_t)st * C::kTileKV; };
    auto v_tile = [&](int st) { return sbase + C::kOffV + (uint32_t)st * C::kTileKV; };

    const BlockPos bp = block_pos(p, C::BQ);  // long causal tiles first
    const int Tk = (p.Nk + C::BK - 1) / C::BK;
    const int n_tiles = p.causal ? min(Tk, (bp.i0 + C::BQ - 1) / C::BK + 1) : Tk;
    // The first key tile that takes the mask: the one holding the block's first row (causal),
    // and at the latest the last one (keys past Nk). With Bq = Bk that is the block's last tile;
    // with Bq 192 the diagonal crosses two or three. Every consumer runs all n_tiles (a tile
    // wholly above one warpgroup's rows comes out as P~ = 0 there), which keeps the turns paired.
    const int j_mask = p.causal ? min(bp.i0 / C::BK, Tk - 1) : Tk - 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;

    if (threadIdx.x == 0) {
        mbar_init(bar_q, 1);
        for (int st = 0; st < C::STAGES; st++) {
            mbar_init(k_full(st), 1);  // the producer's arrive; the bytes are TMA's
            mbar_init(v_full(st), 1);
            mbar_init(k_empty(st), 4 * C::NC);  // one arrival per consumer warp
            mbar_init(v_empty(st), 4 * C::NC);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {  // ------------------------------------------------ producer
        regs_dealloc<C::kRegsProducer>();
        if (warp == 0 && lane == 0) {
            tma_prefetch_map(&tq);
            tma_prefetch_map(&tk);
            tma_prefetch_map(&tv);
            mbar_arrive_expect_tx(bar_q, C::kTileQ);
#pragma unroll
            for (int hh = 0; hh < C::DH; hh++) tma_load_4d(sbase + hh * C::kBoxQ, &tq, bar_q, 64 * hh, bp.i0, bp.h, bp.b);
            for (int j = 0; j < n_tiles; j++) {
                const int st = j % C::STAGES;
                const uint32_t free_parity = ((j / C::STAGES) & 1) ^ 1;  // first pass: a fresh barrier's
                mbar_wait(k_empty(st), free_parity);
                mbar_arrive_expect_tx(k_full(st), C::kTileKV);
#pragma unroll
                for (int hh = 0; hh < C::DH; hh++)
                    tma_load_4d(k_tile(st) + hh * C::kBoxKV, &tk, k_full(st), 64 * hh, j * C::BK, bp.h, bp.b);
                mbar_wait(v_empty(st), free_parity);
                mbar_arrive_expect_tx(v_full(st), C::kTileKV);
#pragma unroll
                for (int hh = 0; hh < C::DH; hh++)
                    tma_load_4d(v_tile(st) + hh * C::kBoxKV, &tv, v_full(st), 64 * hh, j * C::BK, bp.h, bp.b);
            }
        }
        return;
    }

    // ---------------------------------------------------------------- consumers
    regs_alloc<C::kRegsConsumer>();
    const int c = wg - 1, g = lane / 4, t = lane % 4;
    const int wrow0 = bp.i0 + 64 * c;              // this warpgroup's first query row
    const int row0 = wrow0 + (warp & 3) * 16 + g;  // this thread's rows: row0, row0 + 8
    const uint32_t q = sbase + c * 64 * 128;       // its 64 rows of the first Q box
    const int my_turn = 1 + c, next_turn = 1 + (c + 1) % C::NC;
    const bool last_consumer = c == C::NC - 1;
    // The turns (ping-pong); without PINGPONG the warpgroups issue whenever they are ready.
    auto take_turn = [&]() {
        if (C::PINGPONG) named_sync(my_turn, C::kTurnThreads);
    };
    auto pass_turn = [&]() {
        if (C::PINGPONG) named_arrive(next_turn, C::kTurnThreads);
    };
    if (C::PINGPONG && last_consumer) named_arrive(1, C::kTurnThreads);  // consumer 0 goes first

    float o[C::DH][32], s[2][32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2], rs[2];
    uint32_t pa[2][4][4];
#pragma unroll
    for (int hh = 0; hh < C::DH; hh++)
#pragma unroll
        for (int e = 0; e < 32; e++) o[hh][e] = 0.0f;

    // Tile 0: its scores alone (nothing to multiply by V yet); masked if it is also the last.
    mbar_wait(bar_q, 0);
    mbar_wait(k_full(0), 0);
    take_turn();
    wg_fence();
    fa3_issue_scores<C>(s, q, k_tile(0));
    pass_turn();  // not the last turn: there is still tile 0's P~ V
    wg_wait<0>();
    fence_regs(s[0]);
    fence_regs(s[1]);
    mbar_arrive_if(k_empty(0), lane == 0);
    if (j_mask == 0) fa3_softmax<C, true>(p, s, m, alpha, rs, 0, row0, t);
    else fa3_softmax<C, false>(p, s, m, alpha, rs, 0, row0, t);
    l[0] = rs[0];
    l[1] = rs[1];
    wg_pack_p(s[0], pa[0]);
    wg_pack_p(s[1], pa[1]);

    // Tile j >= 1: S_j and P~_{j-1} V_{j-1} on the tensor cores while tile j's softmax runs.
    // Between the issue and the last wait there is no branch (see fa3_softmax).
    auto step = [&](int j, auto masked) {
        const int st = j % C::STAGES, sp = (j - 1) % C::STAGES;
        // Both waits before the fence: a wait is a loop, and control flow between wgmma.fence and
        // a wgmma makes ptxas inject another fence (C7519). V_{j-1} landed long ago in practice.
        mbar_wait(k_full(st), (j / C::STAGES) & 1);
        mbar_wait(v_full(sp), ((j - 1) / C::STAGES) & 1);
        take_turn();
        fa3_fence_operands(o, pa);
        fa3_issue_scores<C>(s, q, k_tile(st));  // S_j
        fa3_issue_pv<C>(o, pa, v_tile(sp));     // O += P~_{j-1} V_{j-1}
        pass_turn();
        if (C::OVERLAP) wg_wait<1>();  // S_j is in; P~_{j-1} V_{j-1} may still run
        else wg_wait<0>();             // both in: the softmax below overlaps nothing of its own
        fence_regs(s[0]);
        fence_regs(s[1]);
        mbar_arrive_if(k_empty(st), lane == 0);
        fa3_softmax<C, decltype(masked)::value>(p, s, m, alpha, rs, j * C::BK, row0, t);
        fa3_keep_wait_below(rs, scratch);
        wg_wait<0>();
#pragma unroll
        for (int hh = 0; hh < C::DH; hh++) fence_regs(o[hh]);
        fence_regs_u32(pa);  // the registers P~_{j-1} V_{j-1} read stay untouched until here
        mbar_arrive_if(v_empty(sp), lane == 0);
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            l[hf] = l[hf] * alpha[hf] + rs[hf];
#pragma unroll
            for (int hh = 0; hh < C::DH; hh++)
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    o[hh][4 * n + 2 * hf] *= alpha[hf];
                    o[hh][4 * n + 2 * hf + 1] *= alpha[hf];
                }
        }
        wg_pack_p(s[0], pa[0]);
        wg_pack_p(s[1], pa[1]);
    };
    for (int j = 1; j < j_mask; j++) step(j, std::false_type());
    for (int j = max(1, j_mask); j < n_tiles; j++) step(j, std::true_type());  // diagonal, ragged keys

    // The last tile's P~ V.
    const int sl = (n_tiles - 1) % C::STAGES;
    mbar_wait(v_full(sl), ((n_tiles - 1) / C::STAGES) & 1);
    take_turn();
    fa3_fence_operands(o, pa);
    fa3_issue_pv<C>(o, pa, v_tile(sl));
    if (!last_consumer) pass_turn();  // the last consumer's last turn opens nothing
    wg_wait<0>();
#pragma unroll
    for (int hh = 0; hh < C::DH; hh++) fence_regs(o[hh]);
    fence_regs_u32(pa);

    wg_epilogue<C::DH>(p, o, m, l, bp.b, bp.h, bp.bh, row0, t);
#else
    __trap();  // built without sm_90a: the launchers below never launch it
#endif
    // STUDENT-END(03.flash_fwd_fa3_kernel)
}

}  // namespace

// The launcher: the kernel where the code was built for sm_90a, else the mma.sync kernel at this
// head dim, which also runs a view TMA cannot describe (a zero stride on an axis longer than 1:
// heads or batches broadcast, which flash_fwd_supports accepts). Three tensor maps per call (a
// few microseconds of host time).
template <int D, bool PINGPONG = true, bool OVERLAP = true, int NC = 2, class C = Fa3Cfg<D, PINGPONG, OVERLAP, NC>>
static void launch_fa3(const attn_args_t* a, cudaStream_t stream) {
    // STUDENT-BEGIN(03.flash_fwd_fa3_launch): where wgmma_built() and tma_view_bhnd describes q, k and v, three tensor maps (tma_map_bf16_4d: boxes of 64 columns x Bq rows for Q, x Bk rows for K and V), Params from params_from_args, C::SMEM bytes of dynamic shared memory, flash_fwd_fa3_kernel on Tq·B·H blocks of C::THREADS, CUDA_CHECK_LAST; elsewhere the mma.sync launcher of this head dim | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*bf16* test_03 cuda/many_heads_every_variant_d64_d128 | uses: flash_fwd_fa3_kernel<C>
    tma_view_t vq, vk, vv;
    char err[256];
    if (!wgmma_built() || tma_view_bhnd(a->B, a->H, a->Nq, D, a->sq, &vq, err, sizeof err) ||
        tma_view_bhnd(a->B, a->H, a->Nk, D, a->sk, &vk, err, sizeof err) ||
        tma_view_bhnd(a->B, a->H, a->Nk, D, a->sv, &vv, err, sizeof err)) {
        if (D == 64) flash_fwd_mma_d64_launch(a, stream);
        else flash_fwd_mma_d128_launch(a, stream);
        return;
    }
    // The register split (setmaxnreg) assumes the entry count __launch_bounds__ gives: a build
    // that changed it would leave the consumers' setmaxnreg.inc waiting for registers forever.
    static int checked = 0;  // per instantiation
    if (!checked) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, flash_fwd_fa3_kernel<C>));
        const int entry = (C::kRegsProducer * 128 + C::kRegsConsumer * 128 * C::NC) / C::THREADS;
        if (fa.numRegs != entry)
            DIE("flash_fwd_fa3_kernel<%d> was built with %d registers per thread at entry; its setmaxnreg split "
                "(%d / %d) needs %d", D, fa.numRegs, C::kRegsProducer, C::kRegsConsumer, entry);
        checked = 1;
    }
    const Params p = params_from_args<C>(a);

    CUtensorMap tq, tk, tv;
    const uint32_t box_q[2] = {64, (uint32_t)C::BQ}, box_kv[2] = {64, (uint32_t)C::BK};
    if (tma_map_bf16_4d(&tq, a->q, &vq, box_q, err, sizeof err) || tma_map_bf16_4d(&tk, a->k, &vk, box_kv, err, sizeof err) ||
        tma_map_bf16_4d(&tv, a->v, &vv, box_kv, err, sizeof err))
        DIE("flash forward (fa3): %s", err);  // the view was checked above: the driver refused it

    CUDA_CHECK(cudaFuncSetAttribute(flash_fwd_fa3_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    const unsigned blocks = (unsigned)p.Tq * (unsigned)p.BH;  // 1-D grid: no 65535 limit on B*H
    flash_fwd_fa3_kernel<C><<<blocks, C::THREADS, C::SMEM, stream>>>(p, tq, tk, tv);
    CUDA_CHECK_LAST();
    // STUDENT-END(03.flash_fwd_fa3_launch)
}
