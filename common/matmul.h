// Row-major GEMMs on cuBLAS for the CUDA Transformer.
//   C[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C
// with every matrix row-major and `ld` its row stride in elements (op(X) = Xᵀ when transX).
// cuBLAS is column-major; a row-major X is the column-major Xᵀ, so we ask cuBLAS for
// Cᵀ = op(B)ᵀ op(A)ᵀ: the operands swap places and no data moves.
//
// Precision: the accumulation is always fp32 (CUBLAS_COMPUTE_32F). With fp32 operands this is
// TRUE fp32: the handle keeps CUBLAS_DEFAULT_MATH and the compute type is not *_FAST_TF32, so
// cuBLAS may not use TF32 tensor cores (unless the user sets NVIDIA_TF32_OVERRIDE=1 in the
// environment). With bf16 operands the tensor cores multiply bf16 and accumulate in fp32; C may
// be bf16 or fp32 (fp32 C is how weight gradients land directly in the fp32 gradient buffer
// and how the residual add happens in fp32, beta = 1).
#pragma once
#include <stdint.h>
#include <cublas_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// A handle bound to `stream` with a preallocated workspace of ws_bytes (tag workspace), so
// cuBLAS never allocates during a step. Returns NULL with a reason on out-of-memory.
typedef struct {
    cublasHandle_t h;
    void* ws;
    size_t ws_bytes;
} mm_handle_t;
int mm_create(mm_handle_t* mm, cudaStream_t stream, size_t ws_bytes, char* err, size_t errlen);
void mm_destroy(mm_handle_t* mm);

void mm_rm(const mm_handle_t* mm, int transA, int transB, int M, int N, int K, float alpha,
           const void* A, dtype_t at, int lda, const void* B, dtype_t bt, int ldb, float beta,
           void* C, dtype_t ct, int ldc);

// `batch` independent products, operand i at X + i·sX (strides in elements).
void mm_rm_batched(const mm_handle_t* mm, int transA, int transB, int M, int N, int K, float alpha,
                   const void* A, dtype_t at, int lda, int64_t sA, const void* B, dtype_t bt,
                   int ldb, int64_t sB, float beta, void* C, dtype_t ct, int ldc, int64_t sC,
                   int batch);

#ifdef __cplusplus
}
#endif
