// Reporters behind CUDA_CHECK and CUBLAS_CHECK: the error's name and text, and a hint for the
// errors people meet first (no GPU, out of memory, a binary built for another GPU).
#include "common/check.h"

#include <cublas_v2.h>
#include <stdio.h>

static const char* cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        return "no usable GPU here: run on a machine with an NVIDIA GPU and driver (CPU-only "
               "machines skip GPU work)";
    case cudaErrorMemoryAllocation:
        return "out of GPU memory: try a smaller size, batch or context";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "the binary was built for another GPU: rebuild with make ARCH=sm_XX (sm_90a is "
               "Hopper)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return "a kernel failed: rerun under compute-sanitizer to find it";
    default:
        return "";
    }
}

void die_cuda(int err, const char* expr, const char* file, int line) {
    cudaError_t e = (cudaError_t)err;
    die_hint_at(file, line, cuda_hint(e), "%s failed: %s (%s)", expr, cudaGetErrorString(e),
                cudaGetErrorName(e));
}

static const char* cublas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

void die_cublas(int status, const char* expr, const char* file, int line) {
    cublasStatus_t s = (cublasStatus_t)status;
    die_hint_at(file, line,
                s == CUBLAS_STATUS_INVALID_VALUE ? "check the leading dimensions and transposes "
                                                   "(cuBLAS is column-major)" : "",
                "%s failed: %s (%d)", expr, cublas_name(s), status);
}
