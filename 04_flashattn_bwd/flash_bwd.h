// Stage 04: FlashAttention-2 backward. CPU references (naive and tiled Algorithm 2, fp32) and the
// CUDA kernels behind common/attention.h's attention_impl_t together with stage 03's forward.
//
// Where the kernels are (the full table with measured times: NOTES.md, "Version table"):
//   DEFAULT: version 21 (FLASH_BWD_DEFAULT_VERSION below), for bf16 with 16-byte rows in sm_90a
//            builds: at d = 64 flash_bwd_tma.cu (FlashAttention-3's layout: TMA, warp
//            specialisation, wgmma), or version 19's kernel where TMA cannot describe a view;
//            at d = 128 version 20 (flash_bwd_wgmma.cu). The other bf16 head dims 16 and 32 (and
//            d 64 without sm_90a) run version 10 of flash_bwd_fa2.cu, d 128 without sm_90a
//            version 1's two passes (flash_bwd_mma.cu).
//   versions 1-5   two-pass mma.sync kernels: flash_bwd_mma.cu (5's dK/dV: flash_bwd_dkdv_mt2.cu);
//                  d = 128 runs these (version 1's two-pass kernels) for every version but 20
//   versions 6-15  single-pass mma.sync kernels laid out as FlashAttention-2: flash_bwd_fa2.cu
//   versions 16-19 single pass on wgmma, d 64: flash_bwd_wgmma.cu
//   version 20     19's single pass on wgmma for d 128 (flash_bwd_wgmma.cu, sm_90a builds; at d 64
//                  it runs 19): 7.98 ms at N 16384, 16 heads, causal against version 1's 15.69
//                  (H100, 2026-11-26); what the default runs at d 128.
//   version 21     FlashAttention-3's layout at d 64 (flash_bwd_tma.cu, sm_90a builds): a TMA
//                  producer warpgroup, two wgmma consumer warpgroups, dQ by TMA reduce-add; where
//                  TMA cannot describe a view, and at other head dims, it runs what 20 runs.
//                  3.26-3.37 ms at the leaderboard point against version 19's 4.17 (H100,
//                  2026-11-26): the default (NOTES.md "Version 21").
//   fp32, unaligned rows: the SIMT kernels, flash_bwd_simt.cu
//   the choice: flash_bwd_plan() (flash_bwd_dispatch.c); the launches: flash_bwd_cuda.cu
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
// Device scratch of flash_backward_cuda in a->workspace: D, fp32 [B, H, Nq], and an fp32 dQ
// accumulator [B, H, Nq, d] (the single-pass versions, now the default, need it).
size_t flash_bwd_workspace_bytes(const attn_args_t* a);
// The single-pass variant needs D and the fp32 dQ accumulator (the same size).
size_t flash_bwd_atomic_workspace_bytes(const attn_args_t* a);
// The backward. Versions 1-5 (and every version where the single-pass kernels do not apply):
// two passes, no atomics: D pre-pass, a key-tile-parallel kernel for dK and dV, a
// query-tile-parallel kernel for dQ (P recomputed in each). Versions 6-19 for bf16, d <= 64,
// and 20 for bf16, d 128 in sm_90a builds: the single pass of flash_backward_atomic_cuda (dQ
// run-to-run nondeterministic in the last bits). Reads q, k, v, o, dout, lse; writes dq, dk, dv. Asynchronous on stream; fail()
// (exit 2) if flash_bwd_supports rejects *a.
void flash_backward_cuda(const attn_args_t* a, cudaStream_t stream);
// Algorithm 2 as written: one key-tile-parallel kernel that also adds its share of dQ into an
// fp32 accumulator with atomicAdd, then a pass that scales and casts it into dq.
void flash_backward_atomic_cuda(const attn_args_t* a, cudaStream_t stream);
// Which family of kernels flash_backward_cuda picks for *a: "mma-bf16" (tensor cores) or "simt".
const char* flash_bwd_kernel_name(const attn_args_t* a);

// The dispatch as data. flash_bwd_plan is a pure function (no GPU): for *a (dtype, d, pointer
// alignment and strides), the requested version, the single pass (atomic = 1, as
// flash_backward_atomic_cuda) or not, and whether the build has the wgmma kernels, it says
// which kernels run. flash_backward_cuda and flash_backward_atomic_cuda launch what it says,
// and benchmarks print its name, so the printed name is the kernel that ran.
typedef enum {
    FLASH_BWD_PATH_SIMT,           // flash_bwd_simt.cu (fp32, or rows the tensor cores cannot take)
    FLASH_BWD_PATH_MMA_TWO_PASS,   // flash_bwd_mma.cu (+ flash_bwd_dkdv_mt2.cu for version 5)
    FLASH_BWD_PATH_MMA_SINGLE,     // flash_bwd_mma.cu, dQ by atomics / bulk reduce (versions 1-5)
    FLASH_BWD_PATH_FA2,            // flash_bwd_fa2.cu (versions 6-15; 10 stands in for 16-20)
    FLASH_BWD_PATH_WGMMA,          // flash_bwd_wgmma.cu (versions 16-19 at d 64, 20 at d 128; sm_90a)
    FLASH_BWD_PATH_TMA,            // flash_bwd_tma.cu (version 21 at d 64; sm_90a, views TMA describes)
} flash_bwd_path_t;
typedef struct {
    flash_bwd_path_t path;
    int version;      // the version whose kernels run (0: SIMT, which has no versions)
    int single_pass;  // 1: one kernel adds dQ into the fp32 accumulator, then a cast; 0: two passes
    const char* file; // where the kernels are
} flash_bwd_plan_t;
flash_bwd_plan_t flash_bwd_plan(const attn_args_t* a, int version, int atomic, int wgmma_built);
// What benchmarks print for a plan, e.g. "v19 wgmma single pass (flash_bwd_wgmma.cu)", into buf
// (96 bytes are enough); returns buf. Apart from the plan so that a launch formats nothing.
const char* flash_bwd_plan_name(const flash_bwd_plan_t* p, char* buf, size_t len);
// The plan for this process's version (flash_bwd_set_version) and build; asks the GPU whether
// the wgmma kernels were built (so it needs one).
flash_bwd_plan_t flash_bwd_current_plan(const attn_args_t* a, int atomic);
// 1 if the tensor-core kernels take *a (bf16, d in {16, 32, 64, 128}, 16-byte aligned rows).
int flash_bwd_mma_ok(const attn_args_t* a);
// 1 if a tensor map describes the q, dout, k and v views of *a (common/tma.h's tma_view_bhnd):
// version 21 runs its own kernel only then. Pure, no GPU.
int flash_bwd_tma_ok(const attn_args_t* a);
// Benchmark knobs (process-wide, not thread-safe; the defaults are what ships):
// version of the tensor-core kernels, 1 to FLASH_BWD_MAX_VERSION (flash_bwd_mma.cu,
// flash_bwd_fa2.cu, flash_bwd_wgmma.cu, flash_bwd_tma.cu and NOTES.md say what changed): 1-5
// two-pass, 6-21 single-pass (16-19: wgmma, d 64, sm_90a builds, version 10 at other d; 20:
// wgmma, d 128, sm_90a builds, 19 at d 64; 21: TMA + wgmma at d 64 where TMA describes the views,
// elsewhere as 20; for bf16, d <= 64 with 16-byte rows (20, 21: also d 128)
// flash_backward_cuda is then the single pass too; elsewhere they run version 1's kernels); parts of the two-pass tensor-core backward that run, 3 (both
// kernels, the default), 1 (pre-pass and dK/dV kernel only) or 2 (pre-pass and dQ kernel
// only): for per-kernel timings, the results are then incomplete. Bad values die.
// The default is version 21 (flash_bwd_tma.cu at d 64, version 20's kernel at d 128, version 10
// at d 16 and 32), the fastest measured with every test passing (NOTES.md).
#define FLASH_BWD_DEFAULT_VERSION 21
#define FLASH_BWD_MAX_VERSION 21
void flash_bwd_set_version(int version);
void flash_bwd_set_parts(int parts);

// Stage 03's forward and this stage's two-pass backward:
// {"flash2", flash_bwd_supports (which also asks stage 03), forward, backward, workspace}.
const attention_impl_t* flash_attention_impl(void);

#ifdef __cplusplus
}
#endif
