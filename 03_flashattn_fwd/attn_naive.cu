// Naive attention on the GPU (cuBLAS batched GEMMs + row-softmax kernels); see attn_naive.h.
// cuBLAS is column-major: a row-major X is the column-major X^T, so the row-major product
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. cuBLAS(opB, opA, N, M, K, B, A).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include "common/check.h"
#include "03_flashattn_fwd/attn_naive.h"

namespace {

constexpr int ROW_THREADS = 256;

cudaDataType_t cuda_type(dtype_t dt) { return dt == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major C[M, N] = alpha op(A) op(B) + beta C for `batch` matrices, strided.
void rm_gemm(cublasHandle_t h, bool ta, bool tb, int M, int N, int K, float alpha, const void* A,
             cudaDataType_t at, int lda, long long sA, const void* B, cudaDataType_t bt, int ldb, long long sB,
             void* C, cudaDataType_t ct, int ldc, long long sC, int batch) {
    const float beta = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
                                            K, &alpha, B, bt, ldb, sB, A, at, lda, sA, &beta, C, ct, ldc, sC, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

__device__ float block_reduce(float x, bool is_max) {
    __shared__ float red[ROW_THREADS / 32];
    for (int o = 16; o > 0; o /= 2) {
        const float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    x = red[0];
    for (int w = 1; w < ROW_THREADS / 32; w++) x = is_max ? fmaxf(x, red[w]) : x + red[w];
    __syncthreads();  // red is reused by the next call
    return x;
}

__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// One block per row of S: mask in place (-1e6 above the diagonal), P = softmax, L = logsumexp.
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) softmax_rows(float* S, T* P, float* lse, int Nq, int Nk, int causal) {
    const long long row = blockIdx.x;  // over BH * Nq
    const int i = (int)(row % Nq);
    float* s = S + row * Nk;
    T* p = P + row * Nk;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < Nk; j += ROW_THREADS) {
        float x = s[j];
        if (causal && j > i) s[j] = x = -1e6f;
        mx = fmaxf(mx, x);
    }
    mx = block_reduce(mx, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < Nk; j += ROW_THREADS) sum += __expf(s[j] - mx);
    sum = block_reduce(sum, false);
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < Nk; j += ROW_THREADS) store(&p[j], __expf(s[j] - mx) * inv);
    if (threadIdx.x == 0) lse[row] = mx + logf(sum);
}

// One block per row: dS = P o (dP - D), D = rowsum(P o dP); dP arrives in dS (in place).
__global__ void __launch_bounds__(ROW_THREADS) softmax_backward_rows(const float* P, float* dS, int Nk) {
    const long long row = blockIdx.x;
    const float* p = P + row * Nk;
    float* ds = dS + row * Nk;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < Nk; j += ROW_THREADS) dot += p[j] * ds[j];
    dot = block_reduce(dot, false);
    for (int j = threadIdx.x; j < Nk; j += ROW_THREADS) ds[j] = p[j] * (ds[j] - dot);
}

}  // namespace

extern "C" void attn_naive_forward_cuda(cublasHandle_t h, dtype_t dt, const void* q, const void* k, const void* v,
                                        void* o, float* lse, float* S, void* P, int BH, int Nq, int Nk, int d,
                                        int causal, float scale, cudaStream_t stream) {
    if (dt != DT_F32 && dt != DT_BF16) DIE("attn_naive_forward_cuda: dtype must be f32 or bf16");
    const cudaDataType_t t = cuda_type(dt);
    const long long sq = (long long)Nq * d, sk = (long long)Nk * d, ss = (long long)Nq * Nk;
    CUBLAS_CHECK(cublasSetStream(h, stream));
    rm_gemm(h, false, true, Nq, Nk, d, scale, q, t, d, sq, k, t, d, sk, S, CUDA_R_32F, Nk, ss, BH);  // S = s Q K^T
    const unsigned rows = (unsigned)((long long)BH * Nq);
    if (dt == DT_BF16)
        softmax_rows<__nv_bfloat16><<<rows, ROW_THREADS, 0, stream>>>(S, (__nv_bfloat16*)P, lse, Nq, Nk, causal);
    else
        softmax_rows<float><<<rows, ROW_THREADS, 0, stream>>>(S, (float*)P, lse, Nq, Nk, causal);
    CUDA_CHECK_LAST();
    rm_gemm(h, false, false, Nq, d, Nk, 1.0f, P, t, Nk, ss, v, t, d, sk, o, t, d, sq, BH);  // O = P V
}

extern "C" void attn_naive_backward_cuda(cublasHandle_t h, const float* q, const float* k, const float* v,
                                         const float* P, const float* dO, float* dS, float* dq, float* dk,
                                         float* dv, int BH, int Nq, int Nk, int d, float scale, cudaStream_t stream) {
    const cudaDataType_t f = CUDA_R_32F;
    const long long sq = (long long)Nq * d, sk = (long long)Nk * d, ss = (long long)Nq * Nk;
    CUBLAS_CHECK(cublasSetStream(h, stream));
    rm_gemm(h, true, false, Nk, d, Nq, 1.0f, P, f, Nk, ss, dO, f, d, sq, dv, f, d, sk, BH);   // dV = P^T dO
    rm_gemm(h, false, true, Nq, Nk, d, 1.0f, dO, f, d, sq, v, f, d, sk, dS, f, Nk, ss, BH);   // dP = dO V^T
    softmax_backward_rows<<<(unsigned)((long long)BH * Nq), ROW_THREADS, 0, stream>>>(P, dS, Nk);
    CUDA_CHECK_LAST();
    rm_gemm(h, false, false, Nq, d, Nk, scale, dS, f, Nk, ss, k, f, d, sk, dq, f, d, sq, BH);  // dQ = s dS K
    rm_gemm(h, true, false, Nk, d, Nq, scale, dS, f, Nk, ss, q, f, d, sq, dk, f, d, sk, BH);   // dK = s dS^T Q
}
