// Row fa3 of the dispatch table, the default at d 64: the single-pass backward laid out as
// FlashAttention-3 lays it out on Hopper (sm_90a), bf16, d = 64: warp specialisation, TMA loads
// into an mbarrier ring, wgmma for all five products, dQ added by TMA's reduce-add. The maths of
// the wgmma row (flash_bwd_wgmma.cu) kept as it is: the products, the fragment layouts, the masks
// only on diagonal/ragged tiles, L and D past Nq = 0.
//
// Why: the wgmma kernel has its 8 warps load Q_i, dO_i, L_i, D_i with cp.async, meet at a
// block-wide barrier every step and add dQ with 16-byte reductions from every warp (8 x 4 REDs
// per step). Here one producer thread issues every load, the consumers
// meet only where they exchange dS^T, and dQ leaves as two 8 KB TMA reductions per step.
//
// Block (bh, j): 3 warpgroups, 128 keys (Bk), one block per SM (__launch_bounds__(384, 1)).
//   warpgroup 0, the producer (setmaxnreg 40): thread 0 loads K_j, V_j once, then Q_i, dO_i per
//     query tile (Bq = 64) into a STAGES-deep ring, and L_i, D_i too where Nq is a multiple of 4
//     (LDT: an fp32 row of Nq floats is then the 16-byte multiple a tensor map needs); "full"
//     mbarriers count TMA's bytes, and "empty" ones the 8 consumer warps' releases. Other Nq:
//     warp 0's 32 lanes store L_i, D_i themselves (plain loads, 0 past Nq), "full" counts their
//     arrivals too, and "empty" counts the 256 consumer threads' releases (see the release).
//   warpgroups 1 and 2, the consumers (setmaxnreg 232): 64 keys each (warpgroup c: keys 64c..).
//     Per query tile i (step n = i - i_start, ring slot n % STAGES):
//       wait full
//       G1  S^T = K_j Q_i^T, dP^T = V_j dO_i^T  (m64n64k16 x 4 each; K, V, Q, dO K-major swizzled)
//       named barrier while G1 runs (both warpgroups' dS^T of tile i-1 written; dQ of tile i-2
//         staged, whose reductions the first thread of each warpgroup now issues)
//       G2  dQ_{i-1} = dS_{i-1} K_j, columns 32c..32c+31 (m64n32k16 x 8 over the 128 keys; A = dS^T
//           from shared memory, B = a no-swizzle copy of K_j, both MN-major: the wgmma kernel's
//           descriptors); runs under the softmax
//       P^T, dS^T in registers (the wgmma kernel's code); dS^T -> shared memory (core matrices)
//       G3  dV += P^T dO_i, dK += dS^T Q_i (A from registers, B = dO_i, Q_i MN-major swizzled,
//           the descriptors of the forward's P~ V)
//       wait all; release the slot; dQ_{i-1} * scale -> this warpgroup's 64 x 32 fp32 staging box
//         (128-byte swizzle, so the 8-byte stores hit distinct banks), fenced for the async proxy
//   After the last tile: dQ of the last tile the same way; dK_j (scaled), dV_j stored (as the wgmma kernel).
// dQ: the staging box is added into p.dq_accum ([B*H, Nq, 64] fp32, zeroed by the caller) by
// cp.reduce.async.bulk.tensor over a 3-D map (64, Nq, B*H): rows past Nq are outside the map and
// are not written. Two staging buffers per warpgroup: a box is written one step, reduced after
// the next step's barrier, and its buffer rewritten two steps later, once the issuing thread has
// seen the read finish (cp.async.bulk.wait_group.read before that barrier).
// Why the copy of K_j: G2 needs K_j as an MN-major operand cut at column 32 (half a 128-byte
// swizzled row); the no-swizzle core-matrix layout is the one the wgmma kernel proved for exactly that
// use, and the copy costs 4 16-byte moves per thread once per block.
// The dS^T exchange: G2 of warpgroup c reads both warpgroups' dS^T, so one 256-thread named
// barrier per step orders the stores (fence.proxy.async first) before the reads, and the reads
// of buffer n&1 (tile n-2's G2, waited in step n-1) before the stores of tile n.
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"
#include "common/tma.cuh"
#include "common/tma.h"
#include "common/wgmma.cuh"
#include <type_traits>

namespace {

typedef __nv_bfloat16 bf16;

struct TmaCfg {
    static constexpr int Bq = 64, Bk = 128, NC = 2, THREADS = 128 * (NC + 1), STAGES = 3;
    static constexpr uint32_t kTileQ = Bq * 128;    // a [64 rows][64] bf16 box: 8 KB
    static constexpr uint32_t kTileK = Bk * 128;    // [128][64]: 16 KB
    static constexpr uint32_t kTileS = Bk * Bq * 2;  // dS^T, 128 keys x 64 queries: 16 KB
    static constexpr uint32_t kTileStg = Bq * 128;  // a warpgroup's dQ share, 64 rows x 32 fp32: 8 KB
    // Every tile starts on a 1024-byte boundary (the swizzle's period).
    static constexpr uint32_t kOffK = 0, kOffV = kTileK, kOffKc = 2 * kTileK, kOffQ = 3 * kTileK,
                              kOffdO = kOffQ + STAGES * kTileQ, kOffdS = kOffdO + STAGES * kTileQ,
                              kOffStg = kOffdS + 2 * kTileS, kOffL = kOffStg + NC * 2 * kTileStg,
                              kOffD = kOffL + STAGES * Bq * 4, kOffBar = kOffD + STAGES * Bq * 4;
    static constexpr int kBars = 1 + 2 * STAGES;  // K/V full; per stage full, empty
    // + 1024: the dynamic shared memory's base is rounded up to the swizzle's period.
    static constexpr size_t SMEM = kOffBar + kBars * 8 + 1024;  // 3 stages: 165 KB
    static constexpr int kRegsProducer = 40, kRegsConsumer = 232;  // 128 x 40 + 256 x 232 = 64 K
    // Arrivals per stage. L/D by TMA (LDT): "full" thread 0's expect_tx, "empty" one per consumer
    // warp; else "full" also warp 0's 32 lanes (their L/D stores), "empty" every consumer thread.
    static constexpr int kFullArrivals = 1 + 32, kFullArrivalsLdt = 1;
    static constexpr int kEmptyArrivals = 128 * NC, kEmptyArrivalsLdt = 4 * NC;
    static constexpr int kBarDS = 1;              // the consumers' named barrier (0 is __syncthreads')
    static_assert(kRegsProducer * 128 + kRegsConsumer * 128 * NC <= 65536, "register file");
    static_assert(kOffK % 1024 == 0 && kOffV % 1024 == 0 && kOffKc % 1024 == 0 && kOffQ % 1024 == 0 &&
                      kOffdO % 1024 == 0 && kOffdS % 1024 == 0 && kOffStg % 1024 == 0,
                  "every tile on the swizzle's 1024-byte period");
    static_assert(kOffL % 128 == 0 && kOffD % 128 == 0 && Bq * 4 % 128 == 0, "L, D boxes on TMA's 128-byte alignment");
    static_assert(kFullArrivals == 33 && kBarDS >= 1 && kBarDS <= 15, "arrivals per stage; a named barrier id");
};

// LDT: L and D come by TMA too (tl, td: [B*H][Nq] fp32 maps, Nq a multiple of 4), so the full
// barrier counts TMA's bytes only and each consumer warp releases a slot once; else (tl, td
// unused) warp 0 of the producer stores them and every consumer thread releases.
template <bool LDT>
__global__ void __launch_bounds__(TmaCfg::THREADS, 1)
    bwd_tma_kernel(const BwdParams p, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                   const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                   const __grid_constant__ CUtensorMap tdq, const __grid_constant__ CUtensorMap tl,
                   const __grid_constant__ CUtensorMap td) {
    // STUDENT-BEGIN(04.tma_kernel): the FA3-layout single pass (sm_90a, d 64): warpgroup 0 the producer (setmaxnreg 40; thread 0 loads K_j, V_j once, then Q_i, dO_i, and L_i, D_i with LDT, into a 3-stage mbarrier ring by TMA), warpgroups 1 and 2 the consumers (setmaxnreg 232; 64 keys each): G1 S^T, dP^T; G2 the previous tile's dQ from dS^T and a no-swizzle copy of K_j; P^T, dS^T in registers, dS^T to shared memory behind one named barrier; G3 dV += P^T dO_i, dK += dS^T Q_i; dQ staged and added into the accumulator by TMA reduce-add | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_fa3 bwd_cuda/fixture_bf16_fa3 bwd_cuda/shapes_bf16_fa3 bwd_cuda/strided_bf16_fa3 bwd_cuda/sanitize_bf16_fa3
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef TmaCfg C;
    extern __shared__ unsigned char smem_tma[];
    const uint32_t sraw = smem_u32(smem_tma), sbase = (sraw + 1023u) & ~1023u;
    unsigned char* smem = smem_tma + (sbase - sraw);  // the same place as a generic pointer
    const uint32_t bar_kv = sbase + C::kOffBar;
    auto full = [&](int st) { return bar_kv + 8 * (1 + 2 * st); };
    auto empty = [&](int st) { return bar_kv + 8 * (2 + 2 * st); };
    auto q_tile = [&](int st) { return sbase + C::kOffQ + (uint32_t)st * C::kTileQ; };
    auto do_tile = [&](int st) { return sbase + C::kOffdO + (uint32_t)st * C::kTileQ; };

    const int bh = blockIdx.x, hh = bh % p.H, bb = bh / p.H, k0 = blockIdx.y * C::Bk;
    const int Tq = (p.Nq + C::Bq - 1) / C::Bq;
    const int i_start = p.causal ? k0 / C::Bq : 0;  // causal: the first query tile that sees key k0
    const int n_tiles = i_start < Tq ? Tq - i_start : 0;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;

    if (threadIdx.x == 0) {
        mbar_init(bar_kv, 1);
        for (int st = 0; st < C::STAGES; st++) {
            mbar_init(full(st), LDT ? C::kFullArrivalsLdt : C::kFullArrivals);
            mbar_init(empty(st), LDT ? C::kEmptyArrivalsLdt : C::kEmptyArrivals);  // see the release
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {  // ------------------------------------------------ producer
        regs_dealloc<C::kRegsProducer>();
        if (warp == 0 && n_tiles > 0) {
            if (lane == 0) {
                tma_prefetch_map(&tq);
                tma_prefetch_map(&tdo);
                mbar_arrive_expect_tx(bar_kv, 2 * C::kTileK);
                tma_load_4d(sbase + C::kOffK, &tk, bar_kv, 0, k0, hh, bb);  // rows past Nk arrive as zeros
                tma_load_4d(sbase + C::kOffV, &tv, bar_kv, 0, k0, hh, bb);
            }
            const float* Lg = p.lse + (int64_t)bh * p.Nq;
            const float* Dg = p.D + (int64_t)bh * p.Nq;
            for (int n = 0; n < n_tiles; n++) {
                const int st = n % C::STAGES, q0 = (i_start + n) * C::Bq;
                mbar_wait(empty(st), ((n / C::STAGES) & 1) ^ 1);  // first pass: a fresh barrier's
                // L (unscaled) and D; past Nq both 0, harmless (as in the wgmma kernel): those rows of Q and
                // dO arrive as zeros, so S = 0, P = 1, dP = 0, dS = 0, and P^T dO adds nothing.
                if constexpr (LDT) {
                    if (lane == 0) {
                        mbar_arrive_expect_tx(full(st), 2 * C::kTileQ + 2 * C::Bq * 4);
                        tma_load_4d(q_tile(st), &tq, full(st), 0, q0, hh, bb);
                        tma_load_4d(do_tile(st), &tdo, full(st), 0, q0, hh, bb);
                        tma_load_2d(sbase + C::kOffL + st * C::Bq * 4, &tl, full(st), q0, bh);  // zeros past Nq
                        tma_load_2d(sbase + C::kOffD + st * C::Bq * 4, &td, full(st), q0, bh);
                    }
                    continue;
                }
                if (lane == 0) {
                    mbar_arrive_expect_tx(full(st), 2 * C::kTileQ);
                    tma_load_4d(q_tile(st), &tq, full(st), 0, q0, hh, bb);
                    tma_load_4d(do_tile(st), &tdo, full(st), 0, q0, hh, bb);
                }
                float* Ls = (float*)(smem + C::kOffL) + st * C::Bq;
                float* Ds = (float*)(smem + C::kOffD) + st * C::Bq;
#pragma unroll
                for (int r = lane; r < C::Bq; r += 32) {
                    const bool ok = q0 + r < p.Nq;
                    Ls[r] = ok ? Lg[q0 + r] : 0.0f;
                    Ds[r] = ok ? Dg[q0 + r] : 0.0f;
                }
                mbar_arrive(full(st));  // release: the stores above are seen by whoever waits
            }
        }
        return;
    }

    // ---------------------------------------------------------------- consumers
    regs_alloc<C::kRegsConsumer>();
    const int c = wg - 1, cw = warp - 4, g = lane >> 2, t = lane & 3;
    const int kw = cw * 16;                         // this warp's 16 keys in the block's 128
    const bool issuer = (threadIdx.x & 127) == 0;  // issues this warpgroup's dQ reductions
    const float sl2 = p.scale * LOG2E_F;
    float dK[32], dV[32], S[32], dP[32], dq[16];
#pragma unroll
    for (int e = 0; e < 32; e++) dK[e] = dV[e] = 0.0f;

    auto fence_regs_u32 = [](uint32_t (&r)[4][4]) {  // fence_regs for G3's packed A operands
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) asm volatile("" : "+r"(r[a][b])::"memory");
    };
    // G2 for the tile of step m: dQ (64 queries x this warpgroup's 32 columns) over the 128 keys.
    auto issue_dq = [&](int m) {
        const uint32_t da0 = wg_desc_lo(kDescMNMajor, sbase + C::kOffdS + (uint32_t)(m & 1) * C::kTileS);
        const uint32_t db0 = wg_desc_lo(kDescMNMajor, sbase + C::kOffKc + c * 4 * 128);  // columns 32c..
#pragma unroll
        for (int kk = 0; kk < C::Bk / 16; kk++)
            wg_m64n32_ss<1, 1>(dq, wg_desc_join(kDescMNMajor, da0 + kk * 128), wg_desc_join(kDescMNMajor, db0 + kk * 128),
                               kk > 0);
        wg_commit();
    };
    // dQ of step m (scaled) into this warpgroup's staging box m & 1: row r, column 8n + 2t of
    // the share at 16-byte chunk (2n + t/2) ^ (r % 8) of the 128-byte row (TMA's 128-byte swizzle).
    auto stage_dq = [&](int m) {
        fence_regs(dq);
        unsigned char* stg = smem + C::kOffStg + (c * 2 + (m & 1)) * C::kTileStg;
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = (warp & 3) * 16 + g + 8 * h;  // r % 8 == g
                *(float2*)(stg + r * 128 + (((2 * n + (t >> 1)) ^ g) << 4) + (t & 1) * 8) =
                    make_float2(dq[4 * n + 2 * h] * p.scale, dq[4 * n + 2 * h + 1] * p.scale);
            }
        fence_proxy_async();  // the generic stores -> the bulk engine's reads, before the barrier
    };
    // The consumers' barrier in three parts, so that no branch sits between it and the wgmma
    // around it (a branch between wgmma.fence and a wgmma makes ptxas inject a fence, C7519).
    // Before it, the issuing thread sees its last reduction's reads done (the buffer is
    // rewritten after this barrier); after it, it reduces the box staged for step m (-1: none)
    // into rows q0.. of dQ.
    auto before_sync = [&]() {
        if (issuer) tma_bulk_wait_read<0>();
        __syncwarp();  // bar.sync is .aligned: the warp reconverged after the issuer's branch
    };
    auto sync = [&]() { named_sync(C::kBarDS, 128 * C::NC); };
    auto after_sync = [&](int m) {
        if (issuer && m >= 0) {
            tma_reduce_add_3d(&tdq, sbase + C::kOffStg + (uint32_t)(c * 2 + (m & 1)) * C::kTileStg, 32 * c,
                              (i_start + m) * C::Bq, bh);
            tma_bulk_commit();
        }
    };

    if (n_tiles > 0) {
        mbar_wait(bar_kv, 0);
        // K_j for G2: this warpgroup's 32 columns (chunks 4c..4c+3) of all 128 rows from the
        // swizzled tile into core matrices (common/wgmma.cuh), as the wgmma kernel loads it.
#pragma unroll
        for (int it = 0; it < 4; it++) {
            const int x = it * 128 + (threadIdx.x & 127), r = x >> 2, ch = 4 * c + (x & 3);
            const uint4 v = *(const uint4*)(smem + C::kOffK + r * 128 + ((ch ^ (r & 7)) << 4));
            *(uint4*)(smem + C::kOffKc + core_off(r, ch * 8)) = v;
        }
        fence_proxy_async();  // read by G2 after the next consumer barrier
    }
    // Descriptors of this warpgroup's 64 rows of K_j, V_j (K-major, 128-byte swizzle); the
    // k-step of 16 moves 32 bytes along the row.
    const uint32_t kA = sbase + C::kOffK + c * 64 * 128, vA = sbase + C::kOffV + c * 64 * 128;
    constexpr uint64_t kDescMN = wg_desc_sw128(C::kTileQ, 1024);  // Q_i, dO_i as B with K = the queries

    // Step n (query tile i_start + n). FIRST (n = 0): no previous tile, so no barrier and no G2;
    // a template argument rather than a test, since a branch between wgmma.fence and G2 makes
    // ptxas inject another fence (C7519).
    auto step = [&](int n, auto first) {
        constexpr bool kFirst = decltype(first)::value;
        const int st = n % C::STAGES, q0 = (i_start + n) * C::Bq;
        mbar_wait(full(st), (n / C::STAGES) & 1);
        if (!kFirst) before_sync();
        const uint32_t qa = q_tile(st), oa = do_tile(st);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)  // G1
            wg_m64n64_ss<0, 0>(S, wg_desc_sw(kDescSw128KMajor, kA + kk * 32), wg_desc_sw(kDescSw128KMajor, qa + kk * 32),
                               kk > 0);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_m64n64_ss<0, 0>(dP, wg_desc_sw(kDescSw128KMajor, vA + kk * 32), wg_desc_sw(kDescSw128KMajor, oa + kk * 32),
                               kk > 0);
        wg_commit();
        if constexpr (!kFirst) {
            // The barrier while G1 runs (it needs nothing the barrier orders): dS^T of step n-1
            // in, dQ of step n-2 staged. Then a second wgmma.fence, so that G2 follows the
            // barrier in the order the wgmma kernel proved (fence.proxy.async, barrier, wgmma.fence,
            // wgmma); it does not wait for G1.
            sync();
            wg_fence();
            issue_dq(n - 1);  // G2 for tile i-1
            after_sync(n >= 2 ? n - 2 : -1);
            wg_wait<1>();     // G1 done, G2 may run on
        } else {
            wg_wait<0>();
        }
        fence_regs(S);
        fence_regs(dP);

        // P^T and dS^T: S[4n + e] is key kw + g + 8 (e / 2), query 8n + 2t + e % 2 (the wgmma kernel's).
        const float* Lb = (const float*)(smem + C::kOffL) + st * C::Bq;
        const float* Db = (const float*)(smem + C::kOffD) + st * C::Bq;
        auto p_ds = [&](auto masked) {
#pragma unroll
            for (int nn = 0; nn < 8; nn++) {
                const float2 l2 = *(const float2*)(Lb + nn * 8 + 2 * t), d2 = *(const float2*)(Db + nn * 8 + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float l = (e & 1) ? l2.y : l2.x;
                    float pr = ex2_approx(fmaf(S[4 * nn + e], sl2, -l * LOG2E_F));
                    if constexpr (decltype(masked)::value) {
                        const int kg = k0 + kw + g + ((e >> 1) << 3), qg = q0 + nn * 8 + 2 * t + (e & 1);
                        if (kg >= p.Nk || (p.causal && kg > qg)) pr = 0.0f;
                    }
                    S[4 * nn + e] = pr;
                    dP[4 * nn + e] = pr * (dP[4 * nn + e] - ((e & 1) ? d2.y : d2.x));
                }
            }
        };
        if ((p.causal && k0 + kw + 15 > q0) || (k0 + kw + 16 > p.Nk)) p_ds(std::true_type{});
        else p_ds(std::false_type{});
        // dS^T (bf16) to buffer n & 1, core matrices: key rows, query columns (the wgmma kernel's).
        wg_store_core_bf16(smem + C::kOffdS + (n & 1) * C::kTileS, dP, kw + g, t);

        // G3: dV += P^T dO_i, dK += dS^T Q_i; k-step kq = queries 16kq.. = 16 rows = 2048 bytes.
        uint32_t ap[4][4], as[4][4];
        wg_pack_p(S, ap);
        wg_pack_p(dP, as);
        // Pins G3's operands before the fence: without it the zeros dK, dV start from are
        // copied between the first step's wgmma and ptxas injects a fence (C7519).
        fence_regs(dK);
        fence_regs(dV);
        fence_regs_u32(ap);
        fence_regs_u32(as);
        wg_fence();
#pragma unroll
        for (int kq = 0; kq < 4; kq++) wg_m64n64_rs<1>(dV, ap[kq], wg_desc_sw(kDescMN, oa + kq * 2048), 1);
#pragma unroll
        for (int kq = 0; kq < 4; kq++) wg_m64n64_rs<1>(dK, as[kq], wg_desc_sw(kDescMN, qa + kq * 2048), 1);
        wg_commit();
        // G2 and G3 done (a wait_group 1 here as well made ptxas serialise every wgmma in
        // an earlier form of the wgmma kernel, C7514): the slot's Q_i, dO_i, L_i, D_i are no longer read.
        wg_wait<0>();
        fence_regs(dK);
        fence_regs(dV);
        // Without LDT, warp 0 stored L_i, D_i into the slot and every thread read them with plain
        // loads, so every thread releases it
        // (as CUTLASS's and FlashAttention-3's pipelines do): its own arrive orders its own reads
        // before the producer's next writes into the slot. One arrive per warp after a
        // __syncwarp is enough by the memory model, but racecheck reported the slot's reuse as a
        // race that way (333 x 201 causal: 4 hazards), and this way it has nothing to
        // take on trust.
        // With L/D by TMA no thread wrote the slot with a generic store: one arrive per warp,
        // after the warp's reads (__syncwarp), as the forward releases K_j and V_j.
        if constexpr (LDT) {
            __syncwarp();
            mbar_arrive_if(empty(st), lane == 0);
        } else {
            mbar_arrive(empty(st));
        }
        if constexpr (!kFirst) stage_dq(n - 1);
        else fence_proxy_async();  // this step's dS^T stores -> G2's reads after the next barrier
    };
    if (n_tiles > 0) step(0, std::true_type{});
    for (int n = 1; n < n_tiles; n++) step(n, std::false_type{});
    if (n_tiles > 0) {  // the last tile's dQ
        before_sync();
        sync();
        after_sync(n_tiles >= 2 ? n_tiles - 2 : -1);
        wg_fence();
        issue_dq(n_tiles - 1);
        wg_wait<0>();
        stage_dq(n_tiles - 1);
        before_sync();
        sync();
        after_sync(n_tiles - 1);
        if (issuer) tma_bulk_wait<0>();  // the reductions are done before the block's shared memory goes
    }

    // dK_j (scaled) and dV_j, once; keys past Nk are not written.
    bf16* dk = (bf16*)p.dk + view_off(p.sdk, bh, p.H, 0);
    bf16* dv = (bf16*)p.dv + view_off(p.sdv, bh, p.H, 0);
#pragma unroll
    for (int nn = 0; nn < 8; nn++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int kg = k0 + kw + g + 8 * h, col = nn * 8 + 2 * t;
            if (kg < p.Nk) {
                *(uint32_t*)(dk + (int64_t)kg * p.sdk[2] + col) =
                    pack_bf16(dK[4 * nn + 2 * h] * p.scale, dK[4 * nn + 2 * h + 1] * p.scale);
                *(uint32_t*)(dv + (int64_t)kg * p.sdv[2] + col) = pack_bf16(dV[4 * nn + 2 * h], dV[4 * nn + 2 * h + 1]);
            }
        }
#else
    __trap();  // built without sm_90a: the dispatch never picks the fa3 row there
#endif
    // STUDENT-END(04.tma_kernel)
}

}  // namespace

// The fa3 row's launch (the dispatch chose it: bf16, d 64, 16-byte rows, an sm_90a build, views a tensor
// map describes): the kernel, then the cast of p.dq_accum (zeroed by the caller) into dq.
void bwd_launch_tma(const BwdParams& p, cudaStream_t s) {
    // STUDENT-BEGIN(04.launch_tma): check d 64 and the kernel's entry register count (the setmaxnreg split needs it), describe Q, dO, K, V and the dQ accumulator (and L, D where Nq is a multiple of 4) by tensor maps (common/tma.h), launch bwd_tma_kernel<LDT> on grid (B·H, key tiles of 128) with TmaCfg::SMEM, then the cast of the accumulator into dq | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_bf16_fa3 bwd_cuda/fixture_bf16_fa3 bwd_cuda/shapes_bf16_fa3 bwd_cuda/strided_bf16_fa3 bwd_cuda/sanitize_bf16_fa3 | uses: bwd_tma_kernel<true> bwd_tma_kernel<false> TmaCfg::SMEM TmaCfg::kFullArrivalsLdt TmaCfg::kEmptyArrivals TmaCfg::kEmptyArrivalsLdt
    typedef TmaCfg C;
    if (p.d != 64) DIE("bwd_launch_tma: head dim %d (the fa3 kernel is built for d = 64)", p.d);
    // The register split (setmaxnreg) assumes the entry count __launch_bounds__ gives (as the fa3
    // forward checks): a build that changed it would leave setmaxnreg.inc waiting forever.
    // L and D by TMA where a tensor map can hold their rows (Nq a multiple of 4: 16-byte rows).
    const bool ldt = p.Nq % 4 == 0;
    const void* kernel = ldt ? (const void*)bwd_tma_kernel<true> : (const void*)bwd_tma_kernel<false>;
    static int checked[2] = {0, 0};
    if (!checked[ldt]) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
        const int entry = (C::kRegsProducer * 128 + C::kRegsConsumer * 128 * C::NC) / C::THREADS;
        if (fa.numRegs != entry)
            DIE("bwd_tma_kernel<%d> was built with %d registers per thread at entry; its setmaxnreg split (%d / %d) needs %d",
                (int)ldt, fa.numRegs, C::kRegsProducer, C::kRegsConsumer, entry);
        checked[ldt] = 1;
    }
    tma_view_t vq, vdo, vk, vv;
    char err[256];
    if (tma_view_bhnd(p.B, p.H, p.Nq, 64, p.sq, &vq, err, sizeof err) ||
        tma_view_bhnd(p.B, p.H, p.Nq, 64, p.sdo, &vdo, err, sizeof err) ||
        tma_view_bhnd(p.B, p.H, p.Nk, 64, p.sk, &vk, err, sizeof err) ||
        tma_view_bhnd(p.B, p.H, p.Nk, 64, p.sv, &vv, err, sizeof err))
        DIE("bwd_launch_tma: %s (the dispatch sends such views to the wgmma row)", err);
    CUtensorMap tq, tdo, tk, tv, tdq;
    const uint32_t box_q[2] = {64, (uint32_t)C::Bq}, box_k[2] = {64, (uint32_t)C::Bk}, box_dq[2] = {32, (uint32_t)C::Bq};
    const uint64_t dq_dims[3] = {64, (uint64_t)p.Nq, (uint64_t)p.B * p.H};
    if (tma_map_bf16_4d(&tq, p.q, &vq, box_q, err, sizeof err) || tma_map_bf16_4d(&tdo, p.dout, &vdo, box_q, err, sizeof err) ||
        tma_map_bf16_4d(&tk, p.k, &vk, box_k, err, sizeof err) || tma_map_bf16_4d(&tv, p.v, &vv, box_k, err, sizeof err) ||
        tma_map_f32_3d(&tdq, p.dq_accum, dq_dims, box_dq, err, sizeof err))
        DIE("bwd_launch_tma: %s", err);
    CUtensorMap tl = tq, td = tq;  // unused without L/D by TMA
    if (ldt && (tma_map_f32_rows(&tl, p.lse, (uint64_t)p.Nq, (uint64_t)p.B * p.H, C::Bq, err, sizeof err) ||
                tma_map_f32_rows(&td, p.D, (uint64_t)p.Nq, (uint64_t)p.B * p.H, C::Bq, err, sizeof err)))
        DIE("bwd_launch_tma: L/D: %s", err);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    dim3 grid(p.B * p.H, (p.Nk + C::Bk - 1) / C::Bk);  // x = head: the longest causal tiles start first
    if (ldt) bwd_tma_kernel<true><<<grid, C::THREADS, C::SMEM, s>>>(p, tq, tdo, tk, tv, tdq, tl, td);
    else bwd_tma_kernel<false><<<grid, C::THREADS, C::SMEM, s>>>(p, tq, tdo, tk, tv, tdq, tl, td);
    CUDA_CHECK_LAST();

    bwd_launch_dq_cast(p, DT_BF16, s);  // the 16-byte cast of the accumulator into dq (flash_bwd_dq_cast.cu)
    // STUDENT-END(04.launch_tma)
}
