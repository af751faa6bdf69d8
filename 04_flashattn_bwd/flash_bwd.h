// Stage 04: FlashAttention-2 backward. CPU references (naive and tiled Algorithm 2, fp32) and the
// CUDA kernels behind common/attention.h's attention_impl_t together with stage 03's forward.
//
// Which kernels run: the first row of the dispatch table (flash_bwd_dispatch.c) that applies.
//   fa3           bf16, d 64, 16-byte rows, sm_90a build, views a tensor map describes:
//                 FlashAttention-3's layout (TMA producer warpgroup, two wgmma consumer
//                 warpgroups, dQ by TMA reduce-add), flash_bwd_tma.cu
//   wgmma         bf16, d 64 or 128, 16-byte rows, sm_90a build: the single pass on wgmma,
//                 flash_bwd_wgmma.cu
//   mma           bf16, d 16, 32, 64, 16-byte rows: the single pass on mma.sync laid out as
//                 FlashAttention-2, flash_bwd_mma.cu
//   mma_two_pass  bf16, d 128, 16-byte rows: a dK/dV kernel and a dQ kernel on mma.sync, no
//                 atomics, flash_bwd_mma_two_pass.cu
//   simt          everything else (fp32, unaligned rows): two passes, fp32 arithmetic,
//                 flash_bwd_simt.cu
// Every row starts with the D pre-pass (flash_bwd_prepass.cu); the single-pass rows end with the
// cast of the fp32 dQ accumulator into dq (flash_bwd_dq_cast.cu).
//
// Conventions (the same as stage 03's flash_fwd.h): S = scale * Q K^T; causal is top-left
// aligned (query i sees keys j <= i, also when Nq != Nk); L_i = log sum_j exp(S_ij) (natural
// log) comes from the forward; the loss is any function of O, whose gradient dO is given.
// Backward by recomputation:
//   D = rowsum(dO o O)            (Nq)       P = exp(S - L)           (Nq, Nk)
//   dV = P^T dO                   (Nk, d)    dP = dO V^T              (Nq, Nk)
//   dS = P o (dP - D)             (Nq, Nk)   dQ = scale * dS K        (Nq, d)
//   dK = scale * dS^T Q           (Nk, d)
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// CPU references, contiguous fp32 arrays: q, o, dout, dq [BH, Nq, d]; k, v, dk, dv [BH, Nk, d];
// lse [BH, Nq] (the forward's logsumexp). dq, dk, dv are written, not accumulated into.
void attn_naive_backward_cpu(const float* q, const float* k, const float* v, const float* o,
                             const float* dout, const float* lse, float* dq, float* dk, float* dv,
                             int BH, int Nq, int Nk, int d, int causal, float scale);
// FlashAttention-2 Algorithm 2: key tiles of Bk rows outside, query tiles of Bq rows inside,
// dQ accumulated across key tiles (what the GPU needs atomics for).
void flash_backward_cpu(const float* q, const float* k, const float* v, const float* o,
                        const float* dout, const float* lse, float* dq, float* dk, float* dv,
                        int BH, int Nq, int Nk, int d, int causal, float scale, int Bq, int Bk);

// CUDA. Returns 0 if the backward kernels handle *a, else -1 with a one-line reason in err
// (head dim above 128 or zero, dtype not f32/bf16, bad sizes or strides, NULL pointers).
int flash_bwd_supports(const attn_args_t* a, char* err, size_t errlen);
// Device scratch of flash_backward_cuda in a->workspace: D, fp32 [B, H, Nq], and the fp32 dQ
// accumulator [B, H, Nq, d] of the single-pass rows.
size_t flash_bwd_workspace_bytes(const attn_args_t* a);
// The backward: the kernels of the row flash_bwd_choose picks for *a and this build. Reads q, k,
// v, o, dout, lse; writes dq, dk, dv. The single-pass rows (fa3, wgmma, mma) add dQ from several
// blocks into an fp32 accumulator, so dq may differ run to run in the last bits; the two-pass
// rows are deterministic. Asynchronous on stream; fail() (exit 2) if flash_bwd_supports rejects *a.
void flash_backward_cuda(const attn_args_t* a, cudaStream_t stream);

// The dispatch table. What the build holds: sm90a = 1 if the wgmma and TMA kernels were compiled
// for this GPU (sm_90a code).
typedef struct {
    int sm90a;
} flash_bwd_build_t;
typedef struct {
    const char* name;   // "fa3", "wgmma", "mma", "mma_two_pass", "simt"
    const char* file;   // where its kernel is
    int single_pass;    // 1: one kernel adds dQ into the fp32 accumulator, then a cast; 0: two passes
    int (*applies)(const attn_args_t* a, const flash_bwd_build_t* b);  // pure, no GPU
    void (*launch)(const attn_args_t* a, cudaStream_t stream);         // after the pre-pass
} flash_bwd_row_t;
// The rows in order (*n of them).
const flash_bwd_row_t* flash_bwd_rows(int* n);
// The first row that applies to *a in build *b. Pure: the CPU tests call it with any build.
const flash_bwd_row_t* flash_bwd_choose(const attn_args_t* a, const flash_bwd_build_t* b);
// This process's build (asks the GPU whether its sm_90a code loads; needs one).
flash_bwd_build_t flash_bwd_this_build(void);
// The name of the row flash_backward_cuda runs for *a here (needs a GPU).
const char* flash_bwd_kernel_name(const attn_args_t* a);
// 1 if the tensor-core kernels take *a (bf16, d in {16, 32, 64, 128}, 16-byte aligned rows).
int flash_bwd_mma_ok(const attn_args_t* a);
// 1 if a tensor map describes the q, dout, k and v views of *a (common/tma.h's tma_view_bhnd).
int flash_bwd_tma_ok(const attn_args_t* a);
// The rows' launches (flash_bwd_cuda.cu): D pre-pass, kernels, cast; a->workspace as above.
void flash_bwd_launch_fa3(const attn_args_t* a, cudaStream_t stream);
void flash_bwd_launch_wgmma(const attn_args_t* a, cudaStream_t stream);
void flash_bwd_launch_mma(const attn_args_t* a, cudaStream_t stream);
void flash_bwd_launch_mma_two_pass(const attn_args_t* a, cudaStream_t stream);
void flash_bwd_launch_simt(const attn_args_t* a, cudaStream_t stream);

// Stage 03's forward and this stage's two-pass backward:
// {"flash2", flash_bwd_supports (which also asks stage 03), forward, backward, workspace}.
const attention_impl_t* flash_attention_impl(void);

#ifdef __cplusplus
}
#endif
