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

// The kernels' launchers, one per file, called by flash_bwd_cuda.cu (the rows of the dispatch
// table, flash_bwd_dispatch.c). The single-pass ones add dQ into p.dq_accum, which the caller
// zeroes first and casts afterwards (bwd_launch_dq_cast).
void bwd_launch_prepass(const BwdParams& p, dtype_t dt, cudaStream_t s);   // flash_bwd_prepass.cu: D
void bwd_launch_dq_cast(const BwdParams& p, dtype_t dt, cudaStream_t s);   // flash_bwd_dq_cast.cu
void bwd_launch_simt(const BwdParams& p, dtype_t dt, cudaStream_t s);      // two passes, any d <= 128
void bwd_launch_mma_two_pass(const BwdParams& p, cudaStream_t s);          // bf16, d 128
void bwd_launch_mma(const BwdParams& p, cudaStream_t s);                   // bf16, d 16, 32, 64
// flash_bwd_wgmma.cu: bf16, d 64 and 128, sm_90a; bwd_wgmma_available: the build has that code.
void bwd_launch_wgmma(const BwdParams& p, cudaStream_t s);
bool bwd_wgmma_available();
// flash_bwd_tma.cu: bf16, d 64, sm_90a, views a tensor map describes (flash_bwd_tma_ok); the
// kernel, then the cast of p.dq_accum into p.dq.
void bwd_launch_tma(const BwdParams& p, cudaStream_t s);
