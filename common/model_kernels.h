// Launchers for the CUDA Transformer's kernels (common/kernels_*.cu), callable from C.
// Letters as in model.h: B batch, T sequence, C d_model, NH heads, HS head size, F d_ff, V vocab;
// N = B*T rows. `adt` is the activation dtype (DT_F32, or DT_BF16 for mixed precision):
// pointers typed `void*` hold activations of that dtype; `float*` is always fp32 (the residual
// stream, norm statistics, parameters, gradients, losses). Every launcher is asynchronous on
// `s` and checks its launch.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- kernels_norm.cu: RMSNorm, y = x / sqrt(mean(x²) + eps) * w
// x (N, C) fp32, w (C), y (N, C) adt, rstd (N) = 1/sqrt(mean(x²)+eps) saved for the backward.
void k_rmsnorm_fwd(dtype_t adt, const float* x, const float* w, void* y, float* rstd, int N, int C,
                   float eps, cudaStream_t s);
// dy (N, C) adt; dx is added to dres (N, C) fp32 (or written when accumulate == 0);
// dres_lp (N, C) adt, when not NULL, receives a copy of the updated dres (the bf16 operand of
// the next matmul). dw (C) fp32 is written; partial is scratch of k_rmsnorm_partial_len floats.
void k_rmsnorm_bwd(dtype_t adt, const void* dy, const float* x, const float* w, const float* rstd,
                   float* dres, void* dres_lp, int accumulate, float* dw, float* partial, int N,
                   int C, cudaStream_t s);
size_t k_rmsnorm_partial_len(int N, int C);

// ---- kernels_rope.cu: RoPE on the q and k parts of qkv (B, T, 3, NH, HS), in place.
// cos_t/sin_t (T_max, HS/2). inverse = 1 rotates by -angle (the backward of the rotation).
void k_rope(dtype_t adt, void* qkv, const float* cos_t, const float* sin_t, int B, int T, int NH,
            int HS, int inverse, cudaStream_t s);

// ---- kernels_attn.cu: causal softmax over rows of length T of S (B*NH*T rows), in place:
// row r is query i = r % T and keeps keys j <= i; P[j > i] = 0.
void k_softmax_causal_fwd(dtype_t adt, void* S, int rows, int T, cudaStream_t s);
// dS = P ∘ (dP − rowsum(P ∘ dP)), in place over dP; 0 above the diagonal.
void k_softmax_causal_bwd(dtype_t adt, const void* P, void* dP, int rows, int T, cudaStream_t s);

// ---- kernels_ffn.cu: SwiGLU on the fused W1/W3 output h13 (N, 2F) = [h1 | h3] per row.
// g (N, F) = SiLU(h1) * h3.
void k_swiglu_fwd(dtype_t adt, const void* h13, void* g, int N, int F, cudaStream_t s);
// dh13 (N, 2F) from dg (N, F): dh1 = dg h3 SiLU'(h1), dh3 = dg SiLU(h1).
void k_swiglu_bwd(dtype_t adt, const void* h13, const void* dg, void* dh13, int N, int F,
                  cudaStream_t s);

// ---- kernels_loss.cu: embedding and cross-entropy.
// x (N, C) fp32 = E[tokens]; an out-of-range token gives a row of NaN (it shows in the loss).
void k_embedding_fwd(const int32_t* tokens, const float* E, float* x, int N, int C, int V,
                     cudaStream_t s);
// dE (V, C) += dx rows (atomics); the caller zeroes dE first.
void k_embedding_bwd(const int32_t* tokens, const float* dx, float* dE, int N, int C, int V,
                     cudaStream_t s);
// Per row of logits (N, V): lse[n] = logsumexp, losses[n] = lse - logit[target] (NaN for a
// target out of range); loss[0] = mean of losses (one block, deterministic order).
void k_cross_entropy_fwd(dtype_t adt, const void* logits, const int32_t* targets, float* lse,
                         float* losses, float* loss, int N, int V, cudaStream_t s);
// The same per row, without the mean (the chunked LM head runs it chunk by chunk) ...
void k_cross_entropy_rows(dtype_t adt, const void* logits, const int32_t* targets, float* lse,
                          float* losses, int N, int V, cudaStream_t s);
// ... and then loss[0] = mean of the N losses (k_cross_entropy_fwd's own mean kernel).
void k_loss_mean(const float* losses, float* loss, int N, cudaStream_t s);
// In place: logits := (softmax(logits) - onehot(target)) * scale.
void k_cross_entropy_bwd(dtype_t adt, void* logits, const int32_t* targets, const float* lse,
                         float scale, int N, int V, cudaStream_t s);

// ---- kernels_adamw.cu
// AdamW over n elements with torch's arithmetic (see adamw_cpu.h): decay = 1 − lr·wd,
// step_size = lr / (1 − β1^t), bc2_sqrt = sqrt(1 − β2^t). When p_lp is not NULL it receives
// the bf16 copy of the updated parameters (the next step's weights).
void k_adamw(float* p, const float* g, float* m, float* v, uint16_t* p_lp, size_t n, float beta1,
             float beta2, float eps, float decay, float step_size, float bc2_sqrt, cudaStream_t s);
void k_cast_f32_bf16(const float* x, uint16_t* y, size_t n, cudaStream_t s);
// One parameter of model_init_params on the device: std 0 means "fill with ones" (norms).
void k_init_param(float* x, size_t n, uint64_t seed_p, float stdf, cudaStream_t s);
// Host-side convenience used by tests: y (n) fp32 from activations of dtype adt.
void k_cast_act_f32(dtype_t adt, const void* x, float* y, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
