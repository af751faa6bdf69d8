// The roofline of every kernel of the repository: the pure accounting behind
// build/04_flashattn_bwd/roofline (roofline_main.c times the kernels; this file only counts).
//
// The model. A kernel that does F floating-point operations and moves B bytes between HBM and
// the chip cannot take less than
//     t_bound = max(F / P, B / W)        (P: peak FLOP/s of its compute unit, W: peak bytes/s)
// so at arithmetic intensity I = F / B its throughput is at most min(P, I · W): the roof.
// "% of bound" is t_bound / t_measured (the same as achieved FLOP/s over the roof when F > 0,
// and achieved bytes/s over W for a kernel with no arithmetic, such as the embedding gather).
// P and W are MEASURED on the GPU by the program (cuBLAS GEMM, device-to-device copy), not taken
// from the datasheet: they are what this code can reach, so a kernel can sit slightly above
// 100 % (a copy kernel faster than our copy, a GEMM shape cuBLAS likes better than the square).
//
// Conventions for the counts (README "Roofline" says the same):
//   bytes  minimum compulsory traffic: every input read once, every output written once, at
//          the dtype the kernel uses. Scratch (workspaces, partial sums, fp32 accumulators) is
//          not counted: a perfect kernel would keep it on chip. An in-place operand counts
//          once read and once written. Gathered or scattered rows (embedding) count once per
//          token, duplicates included (a model of the traffic, not of the L2's luck).
//   FLOPs  the algorithmic count, every add, multiply, compare, divide, exp, sqrt as one FLOP;
//          a multiply-add is 2 (so a GEMM is 2·M·N·K). Terms of one per row (a row's rsqrt,
//          log, 1/sum) are left out: they are O(rows) against O(rows·cols). Attention counts
//          only its matmuls (as stage 03/04's benchmarks and the FlashAttention papers do), a
//          causal product of N×N×d counting as half of 2·N²·d.
//   roof   each kernel names the compute unit it runs on: bf16 tensor cores (bf16 GEMMs, bf16
//          flash attention) use the measured bf16 GEMM peak; everything else (fp32 GEMMs,
//          which are true fp32 on CUDA cores: common/matmul.h keeps TF32 off; fp32 flash
//          attention, which is SIMT; every elementwise or reduction kernel, whose arithmetic
//          is fp32 whatever the storage dtype) uses the measured fp32 GEMM peak.
// Dimension letters as in common/model.h: B batch, T sequence, C d_model, NH heads, HS head
// size, F d_ff, V vocab, N = B·T rows; attention: BH batch·heads, Nq = Nk = S sequence, d.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// Which compute roof a kernel sits under.
typedef enum { RL_ROOF_F32 = 0, RL_ROOF_BF16 = 1 } rl_roof_t;
const char* rl_roof_name(rl_roof_t r);  // "fp32", "bf16-tc"

// What the program runs for an entry (roofline_main.c switches on it).
typedef enum {
    RL_GEMM,            // dim: M, N, K      C[M,N] = A[M,K]·B[N,K]ᵀ (the model's y = x Wᵀ)
    RL_RMSNORM_FWD,     // dim: N, C
    RL_RMSNORM_BWD,     // dim: N, C
    RL_ROPE,            // dim: B, T, NH, HS
    RL_SWIGLU_FWD,      // dim: N, F
    RL_SWIGLU_BWD,      // dim: N, F
    RL_SOFTMAX_FWD,     // dim: BH, T        causal softmax of the naive attention's scores
    RL_SOFTMAX_BWD,     // dim: BH, T
    RL_XENT_FWD,        // dim: N, V
    RL_XENT_BWD,        // dim: N, V
    RL_EMBED_FWD,       // dim: N, C, V
    RL_EMBED_BWD,       // dim: N, C, V
    RL_ADAMW,           // dim: n            with the bf16 copy of the parameters written
    RL_WS_FWD,          // dim: ROWS, D      stage 02
    RL_WS_BWD,          // dim: ROWS, D
    RL_FLASH_FWD,       // dim: BH, S, d, causal   stage 03
    RL_FLASH_BWD,       // dim: BH, S, d, causal   stage 04
} rl_kind_t;

typedef struct {
    char name[40];      // the --only name, e.g. "gemm_qkv_bf16"
    char shape[80];     // for people, e.g. "M 2048 N 4800 K 1600"
    rl_kind_t kind;
    dtype_t dt;         // storage dtype of the activations / operands
    rl_roof_t roof;
    int64_t dim[4];     // as listed in rl_kind_t
    double flops, bytes;
} rl_entry_t;

// The counts, one function per kernel (formulas in roofline.c, next to each).
double rl_gemm_flops(int64_t M, int64_t N, int64_t K);
double rl_gemm_bytes(int64_t M, int64_t N, int64_t K, dtype_t dt);
// Fills e->flops and e->bytes from e->kind, e->dt and e->dim. 0, or -1 for an unknown kind.
int rl_count(rl_entry_t* e);

// The roofline: I = F / B (0 when B is 0); the roof min(P, I·W) in FLOP/s; the bound time
// max(F/P, B/W) in seconds; and 100 · t_bound / t (0 when t <= 0).
double rl_intensity(double flops, double bytes);
double rl_roof_flops(double peak_flops, double peak_bw, double intensity);
double rl_bound_time_s(double flops, double bytes, double peak_flops, double peak_bw);
double rl_percent_of_bound(double flops, double bytes, double time_s, double peak_flops, double peak_bw);

// The representative shapes: the model kernels at a model size (common/model_config; the
// program uses "xl" at batch 4 × context 512), stage 02's weighted sum at ROWS × D, and
// flash attention at BH × S × d (causal or not).
typedef struct {
    int B, T, C, NH, F, V;
    int64_t ws_rows, ws_d;
    int attn_bh, attn_s, attn_d, attn_causal;
} rl_shapes_t;

// Every entry, in the order of the table, counted. Returns the count (at most max; the list
// has RL_MAX_ENTRIES at most).
#define RL_MAX_ENTRIES 40
int rl_entries(const rl_shapes_t* s, rl_entry_t* out, int max);
// "a|b|c" of every entry name (for --only's check), into buf. Returns buf.
const char* rl_names(const rl_entry_t* e, int n, char* buf, size_t len);

// ---- the bandwidth probe (roofline_copy.cu): dst[i] = src[i] over n floats, 16-byte loads
// where n and the pointers allow. Asynchronous on `stream`; the launch is checked.
void rl_copy_cuda(float* dst, const float* src, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
