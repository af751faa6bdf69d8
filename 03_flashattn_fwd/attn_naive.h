// Naive attention on the GPU with cuBLAS: the baseline of the benchmarks (what the course's
// PyTorch attention does). It materialises the scores S and probabilities P, (BH, Nq, Nk)
// each, so its memory grows as N^2: that is the point of the comparison with flash.
// Tensors are contiguous [BH, N, d]; lse is [BH, Nq] fp32; masked scores are -1e6.
#pragma once
#include <stddef.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// Forward, dtype DT_F32 or DT_BF16 for q, k, v, o and P (S is always fp32):
//   S = scale Q K^T (masked), P = softmax(S), O = P V, L = logsumexp(S).
// S: fp32 (BH, Nq, Nk); P: dtype (BH, Nq, Nk), kept for the backward.
void attn_naive_forward_cuda(cublasHandle_t h, dtype_t dt, const void* q, const void* k, const void* v,
                             void* o, float* lse, float* S, void* P, int BH, int Nq, int Nk, int d,
                             int causal, float scale, cudaStream_t stream);
// Backward, fp32 only, from the P the forward kept. dS (BH, Nq, Nk) fp32 scratch (the
// forward's S buffer can be reused): dV = P^T dO; dP = dO V^T; dS = P o (dP - rowsum(P o dP));
// dQ = scale dS K; dK = scale dS^T Q.
void attn_naive_backward_cuda(cublasHandle_t h, const float* q, const float* k, const float* v,
                              const float* P, const float* dO, float* dS, float* dq, float* dk, float* dv,
                              int BH, int Nq, int Nk, int d, float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
