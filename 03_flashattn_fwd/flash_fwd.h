// Stage 03: FlashAttention-2 forward. CPU references (naive and tiled, fp32) and the CUDA
// kernel (bf16 tensor-core path and fp32 path) behind common/attention.h's attention_impl_t.
//
// Conventions shared by every function here (see common/attention.h):
//   S = scale * Q K^T; causal is top-left aligned (query i sees keys j <= i, also when
//   Nq != Nk); in the references masked scores are -1e6 (as the course's tests), so every
//   row has a finite L. In the kernel, key tiles wholly above the diagonal are skipped and
//   masked elements inside a visible tile contribute exp(-inf) = 0; since key 0 is always
//   visible, every row sees at least one key and the two conventions agree (Nk >= 1).
//   O = softmax(S) V and L_i = log sum_j exp(S_ij) (natural log), L fp32 [B, H, Nq].
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// CPU references, contiguous fp32 arrays: q [BH, Nq, d], k/v [BH, Nk, d], o [BH, Nq, d],
// lse [BH, Nq].
void attn_naive_forward_cpu(const float* q, const float* k, const float* v, float* o, float* lse,
                            int BH, int Nq, int Nk, int d, int causal, float scale);
// FlashAttention-2 Algorithm 1 with query tiles of Bq rows and key tiles of Bk rows.
void flash_forward_cpu(const float* q, const float* k, const float* v, float* o, float* lse,
                       int BH, int Nq, int Nk, int d, int causal, float scale, int Bq, int Bk);

// CUDA. Returns 0 if the kernel handles *a, else -1 with a one-line reason in err
// (head dim not in {16,32,64,128}, dtype not f32/bf16, bad sizes/strides, NULL pointers).
int flash_fwd_supports(const attn_args_t* a, char* err, size_t errlen);
// Writes a->o and a->lse (device pointers). Asynchronous on stream. Calls fail() (exit 2)
// if flash_fwd_supports rejects *a.
void flash_forward_cuda(const attn_args_t* a, cudaStream_t stream);
// The kernel flash_forward_cuda runs for *a (dtype, head dim, and for the TMA variants the
// sizes and strides) with this process's variant selection: the bf16 variant's name
// ("w4 mt2 bk64", "w8 mt1 bk64", "fa3 w16 bq192 bk128", "fa3 w12 bq128 bk128") or "f32 cuda-core";
// "unsupported" where flash_fwd_supports would refuse the dtype or head dim. What benchmarks
// print, so that the name is the dispatch's own answer. Asks the GPU only when the selected
// variant is an sm_90a one (was it built?).
const char* flash_fwd_kernel_name(const attn_args_t* a);
// Selects bf16 forward variants (the tables `bench --scan-variants` walks: entry 0, the mma.sync
// kernel, at every head dim; entry 1, fa3, at d 64 and 128 and the default there where it can
// run) from a list "d:v,d:v" such as "64:0,128:0": 0, or -1 with a one-line reason (a
// malformed list, a head dim other than 16, 32, 64, 128, a variant past the table). An empty list
// selects nothing. Process-wide, like flash_fwd_bf16_set_variant; chosen (if not NULL, indexed
// by head dim, 129 entries) receives the selection.
int flash_fwd_select_variants(const char* list, int* chosen, char* err, size_t errlen);
// {"flash2_fwd", supports, forward, backward = NULL, bwd_workspace_bytes = NULL}.
const attention_impl_t* flash_attention_fwd_impl(void);

#ifdef __cplusplus
}
#endif
