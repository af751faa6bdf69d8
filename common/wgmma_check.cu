// Whether this build carries Hopper's wgmma code: the kernels that use it (stage 03's wgmma,
// wgmma-ov and fa3 forward variants, stage 04's versions 16-20) compile it only for sm_90a (the
// Makefile's default ARCH) and fall back to their mma.sync kernels elsewhere.
#include <cuda_runtime.h>
#include "common/check.h"
#include "common/wgmma.cuh"

namespace {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ const int kWgmmaBuilt = 1;
#else
__device__ const int kWgmmaBuilt = 0;
#endif
}  // namespace

bool wgmma_built() {
    static int cached = -1;  // the device's copy of kWgmmaBuilt, read once
    if (cached < 0) {
        int built = 0;
        CUDA_CHECK(cudaMemcpyFromSymbol(&built, kWgmmaBuilt, sizeof built));
        cached = built;
    }
    return cached == 1;
}
