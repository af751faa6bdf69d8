// Row-major GEMM wrappers on cuBLAS (see matmul.h for the mapping and the precision policy).
#include "common/matmul.h"
#include <stdio.h>
#include <cublas_v2.h>
#include "common/alloc.h"
#include "common/check.h"

static cudaDataType_t cuda_type(dtype_t t) {
    switch (t) {
    case DT_F32: return CUDA_R_32F;
    case DT_BF16: return CUDA_R_16BF;
    default: DIE("matmul: unsupported dtype %s", dtype_name(t));
    }
}

int mm_create(mm_handle_t* mm, cudaStream_t stream, size_t ws_bytes, char* err, size_t errlen) {
    mm->ws = NULL;
    mm->ws_bytes = ws_bytes;
    CUBLAS_CHECK(cublasCreate(&mm->h));
    CUBLAS_CHECK(cublasSetStream(mm->h, stream));
    // Default math: no TF32 for fp32 operands (see matmul.h).
    CUBLAS_CHECK(cublasSetMathMode(mm->h, CUBLAS_DEFAULT_MATH));
    if (ws_bytes) {
        mm->ws = mem_try_alloc(DEV_CUDA, ws_bytes, MEM_WORKSPACE);
        if (!mm->ws) {
            snprintf(err, errlen, "out of memory for the cuBLAS workspace (%zu bytes)", ws_bytes);
            CUBLAS_CHECK(cublasDestroy(mm->h));
            mm->h = NULL;
            return -1;
        }
        CUBLAS_CHECK(cublasSetWorkspace(mm->h, mm->ws, ws_bytes));
    }
    return 0;
}

void mm_destroy(mm_handle_t* mm) {
    if (mm->h) CUBLAS_CHECK(cublasDestroy(mm->h));
    mem_free(mm->ws);
    mm->h = NULL;
    mm->ws = NULL;
}

void mm_rm(const mm_handle_t* mm, int transA, int transB, int M, int N, int K, float alpha,
           const void* A, dtype_t at, int lda, const void* B, dtype_t bt, int ldb, float beta,
           void* C, dtype_t ct, int ldc) {
    // Column-major Cᵀ (N x M) = op(B)ᵀ (N x K) · op(A)ᵀ (K x M).
    CUBLAS_CHECK(cublasGemmEx(mm->h, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                              transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                              cuda_type(bt), ldb, A, cuda_type(at), lda, &beta, C, cuda_type(ct),
                              ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void mm_rm_batched(const mm_handle_t* mm, int transA, int transB, int M, int N, int K, float alpha,
                   const void* A, dtype_t at, int lda, int64_t sA, const void* B, dtype_t bt,
                   int ldb, int64_t sB, float beta, void* C, dtype_t ct, int ldc, int64_t sC,
                   int batch) {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        mm->h, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
        &alpha, B, cuda_type(bt), ldb, sB, A, cuda_type(at), lda, sA, &beta, C, cuda_type(ct),
        ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
