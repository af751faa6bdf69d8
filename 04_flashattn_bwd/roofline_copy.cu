// The roofline's bandwidth probe: a plain copy, dst = src, as fast as a simple kernel can stream
// HBM. roofline_main.c times it next to cudaMemcpy's device-to-device copy and takes the faster
// as the memory roof (bytes read + bytes written over the time), so that a well-written
// streaming kernel of the repo is measured against what streaming can reach, not against one
// particular copy routine.
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/check.h"
#include "common/gpu.h"
#include "04_flashattn_bwd/roofline.h"

// 16-byte loads and stores, grid-stride: every thread keeps a few loads in flight per trip.
__global__ void rl_copy4_kernel(float4* __restrict__ dst, const float4* __restrict__ src, size_t n4) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) dst[i] = src[i];
}

__global__ void rl_copy1_kernel(float* __restrict__ dst, const float* __restrict__ src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

extern "C" void rl_copy_cuda(float* dst, const float* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    // 8 blocks of 256 threads per SM: a full SM (2048 threads) with a grid-stride loop.
    const unsigned blocks = (unsigned)(8 * gpu_sm_count());
    const int aligned = ((uintptr_t)dst % 16 == 0) && ((uintptr_t)src % 16 == 0) && n % 4 == 0;
    if (aligned) rl_copy4_kernel<<<blocks, 256, 0, stream>>>((float4*)dst, (const float4*)src, n / 4);
    else rl_copy1_kernel<<<blocks, 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK_LAST();
}
