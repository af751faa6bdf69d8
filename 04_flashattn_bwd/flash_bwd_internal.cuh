// Shared by the backward kernels (CUDA C++ only): the parameter block every kernel takes, the
// element-type helpers, and the PTX wrappers (ldmatrix, mma.sync, cp.async) of the tensor-core
// path. Names follow the paper: Q_i, dO_i (query tile i), K_j, V_j (key tile j), Bq, Bk.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/attention.h"
#include "common/kernels_util.cuh"
#include "common/mma_sync.cuh"

// What every backward kernel reads: the attn_args_t views, plus the workspace split into
// D [B*H*Nq] and (single-pass variant only) the fp32 dQ accumulator [B*H*Nq, d].
struct BwdParams {
    int B, H, Nq, Nk, d, causal;
    float scale;
    const void *q, *k, *v, *o, *dout;
    void *dq, *dk, *dv;
    int64_t sq[3], sk[3], sv[3], so[3], sdo[3], sdq[3], sdk[3], sdv[3];  // (batch, head, row)
    const float* lse;  // [B*H, Nq]
    float* D;          // [B*H, Nq]   rowsum(dO o O), written by the pre-pass
    float* dq_accum;   // [B*H, Nq, d] fp32, atomic variant only (else NULL)
};

// Offset of (batch*head index bh, row r) in a [B, H, N, d] view with strides s.
__device__ __forceinline__ int64_t view_off(const int64_t s[3], int bh, int H, int r) {
    return (int64_t)(bh / H) * s[0] + (int64_t)(bh % H) * s[1] + (int64_t)r * s[2];
}

// to_f / from_f<T> (element type <-> fp32): common/kernels_util.cuh.

#define LOG2E_F 1.4426950408889634f

// PTX wrappers (smem_u32, cp.async, ldmatrix, mma.sync, pack_bf16, ex2_approx, red_add_v4_f32):
// common/mma_sync.cuh, shared with stage 03's forward.

// ---------------------------------------------------------------- tensor-core kernels' helpers
constexpr int kMmaWarps = 4, kMmaThreads = kMmaWarps * 32;  // every tensor-core block: 4 warps

// rows [r0, r0 + ROWS) of a [N, D] bf16 view (row stride rs) into smem (ROWS, D + 8) with
// 16-byte cp.async; rows at or past N are zero-filled.
template <int D, int ROWS>
__device__ __forceinline__ void load_rows_async(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t rs,
                                                int r0, int N) {
    constexpr int CH = D / 8, LD = D + 8;  // 16-byte chunks per row
    for (int x = threadIdx.x; x < ROWS * CH; x += kMmaThreads) {
        const int r = x / CH, c = x % CH;
        const bool valid = r0 + r < N;
        cp_async16(dst + r * LD + c * 8, valid ? src + (int64_t)(r0 + r) * rs + c * 8 : src, valid);
    }
}

// Launchers (flash_bwd_simt.cu, flash_bwd_mma.cu), called by flash_bwd_cuda.cu.
void bwd_launch_prepass(const BwdParams& p, dtype_t dt, cudaStream_t s);
void bwd_launch_simt(const BwdParams& p, dtype_t dt, bool atomic_dq, cudaStream_t s);
// version: 1 to 5 (flash_bwd_mma.cu lists them; 6-19 are not passed here); parts: 3 both kernels, 1 only dK/dV, 2 only dQ.
void bwd_launch_mma(const BwdParams& p, bool atomic_dq, int version, int parts, cudaStream_t s);
void bwd_launch_dq_convert(const BwdParams& p, dtype_t dt, cudaStream_t s);
// Version 5's dK/dV kernel (flash_bwd_dkdv_mt2.cu): two m-tiles per warp, d in {16, 32, 64}.
void bwd_launch_dkdv_mt2(const BwdParams& p, cudaStream_t s);
// Versions 6-19 (flash_bwd_fa2.cu): the single-pass kernel (8 or 4 warps, 128 or 64 keys per
// block, dQ by vector reductions into p.dq_accum, which must be zeroed) and the cast of
// p.dq_accum into p.dq; bf16, d in {16, 32, 64}. 16-19 launch bwd_launch_wgmma's kernel where it
// was built (d 64, sm_90a), version 10's elsewhere (flash_bwd_plan names the same choice).
void bwd_launch_fa2(const BwdParams& p, int version, cudaStream_t s);
// The cast bwd_launch_fa2 ends with (p.dq_accum into p.dq, one 16-byte store per thread), for
// the other single-pass kernels at d 16, 32, 64 (version 21's).
void bwd_launch_dq_convert16(const BwdParams& p, cudaStream_t s);
// Versions 16-19 (flash_bwd_wgmma.cu): the single pass on wgmma, d = 64; version 20: the same
// for d = 128. The main kernel alone (the caller adds the cast: bwd_launch_fa2 at d 64,
// bwd_launch_dq_convert at d 128). Available where the code was built for sm_90a.
void bwd_launch_wgmma(const BwdParams& p, int version, cudaStream_t s);
bool bwd_wgmma_available();
// Version 21 (flash_bwd_tma.cu): the single pass with a TMA producer warpgroup and two wgmma
// consumer warpgroups, d = 64, sm_90a, views a tensor map describes (flash_bwd_tma_ok); the
// kernel, then the cast of p.dq_accum (which must be zeroed) into p.dq.
void bwd_launch_tma(const BwdParams& p, cudaStream_t s);
