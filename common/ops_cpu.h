// The Transformer's operations in plain C, fp32, forward and backward: the building blocks of
// the CPU reference model (model_cpu.c). Written to be read beside the maths, not to be fast;
// the CUDA model is checked against these (through the model), and these against PyTorch
// (tests/fixtures/model/).
//
// Letters as in common/model.h: N rows (= B*T tokens), C d_model, F d_ff, V vocab, NH heads,
// HS head size. Weights are [d_out, d_in] (y = x Wᵀ).
// Conventions: "=" outputs are overwritten, "+=" outputs are accumulated into (said per function).
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RMSNORM_EPS 1e-5f
#define ROPE_THETA 10000.0

// out (N, dout) = inp (N, din) · W (dout, din)ᵀ
void matmul_fwd_cpu(float* out, const float* inp, const float* W, int N, int din, int dout);
// dinp (N, din) = dy (N, dout) · W (dout, din)      (overwritten): the input half alone, what the
// input pass of a split (zero-bubble) backward needs; matmul_bwd_cpu calls it, so both give the
// same bits.
void matmul_dinp_cpu(float* dinp, const float* dy, const float* W, int N, int din, int dout);
// dinp (N, din) = dy (N, dout) · W (dout, din)      (skipped when dinp is NULL)
// dW (dout, din) = dyᵀ · inp                           (both overwritten)
void matmul_bwd_cpu(float* dinp, float* dW, const float* dy, const float* inp, const float* W,
                    int N, int din, int dout);

// out (N, C) = E[tokens[n]]  for E (V, C)
void embedding_fwd_cpu(float* out, const int32_t* tokens, const float* E, int N, int C);
// dE (V, C) = Σ over rows n with tokens[n] = v of dout[n]   (overwritten; rows never seen are 0)
void embedding_bwd_cpu(float* dE, const float* dout, const int32_t* tokens, int N, int C, int V);

// rstd (N) = 1 / sqrt(mean_c x² + eps);  out (N, C) = x · rstd · w
void rmsnorm_fwd_cpu(float* out, float* rstd, const float* x, const float* w, int N, int C);
// With x̂ = x · rstd:  dw (C) = Σ_n dout ∘ x̂  (overwritten);
//                     dx (N, C) += rstd · (g − x̂ · mean_c(g ∘ x̂)),  g = dout ∘ w  (accumulated:
// the residual stream's gradient arrives through both the skip path and the norm).
void rmsnorm_bwd_cpu(float* dx, float* dw, const float* dout, const float* x, const float* w,
                     const float* rstd, int N, int C);

// RoPE tables for positions 0..T-1: cos, sin (T, HS/2), angle = t · theta^(−2i/HS).
void rope_tables_cpu(float* cos_t, float* sin_t, int T, int HS);
// Rotates pairs (2i, 2i+1) of every head in place:
//   x'[2i] = x[2i] cos − x[2i+1] sin,   x'[2i+1] = x[2i] sin + x[2i+1] cos.
// x is (B, T, NH, HS) inside rows of `row_stride` floats (the q or k part of the qkv buffer).
void rope_fwd_cpu(float* x, int B, int T, int NH, int HS, int row_stride, const float* cos_t,
                  const float* sin_t);
// The backward of a rotation is the rotation by −angle (its transpose), in place on dx.
void rope_bwd_cpu(float* dx, int B, int T, int NH, int HS, int row_stride, const float* cos_t,
                  const float* sin_t);

// Causal self-attention, naive (scores materialised). qkv (B, T, 3C): q | k | v, head h in
// columns h·HS .. h·HS+HS−1 of each part (q and k already rotated).
//   S = q kᵀ / sqrt(HS) (keys j <= i only), P = softmax_j(S), y = P v
// y (B, T, C) heads concatenated; P (B, NH, T, T) saved for the backward (0 above the diagonal).
void attention_fwd_cpu(float* y, float* P, const float* qkv, int B, int T, int C, int NH);
// dqkv (B, T, 3C) = gradients of q, k, v (overwritten) given dy (B, T, C):
//   dv = Pᵀ dy, dP = dy vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)), dq = dS k / sqrt(HS), dk = dSᵀ q / sqrt(HS)
void attention_bwd_cpu(float* dqkv, const float* dy, const float* qkv, const float* P, int B,
                       int T, int C, int NH);

// SwiGLU's gate: h13 (N, 2F) = [h1 | h3] (the fused W1/W3 product), g (N, F) = SiLU(h1) ∘ h3.
void swiglu_fwd_cpu(float* g, const float* h13, int N, int F);
// dh13 (N, 2F) (overwritten): dh1 = dg ∘ h3 ∘ SiLU'(h1), dh3 = dg ∘ SiLU(h1),
// SiLU'(a) = σ(a) (1 + a (1 − σ(a))).
void swiglu_bwd_cpu(float* dh13, const float* dg, const float* h13, int N, int F);

// lse (N) = logsumexp of each logits row (V); returns mean_n (lse[n] − logits[n, targets[n]]).
float cross_entropy_fwd_cpu(float* lse, const float* logits, const int32_t* targets, int N, int V);
// dlogits (N, V) = (softmax(logits) − onehot(target)) / N   (the gradient of the mean loss)
void cross_entropy_bwd_cpu(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, int N, int V);

#ifdef __cplusplus
}
#endif
