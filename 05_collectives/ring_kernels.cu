// The ring's one kernel: dst = (a + b) * scale, 16-byte loads where all three pointers allow.
#include <cstdint>

#include "05_collectives/ring.h"
#include "common/check.h"

__global__ void ring_add_vec4(float4* dst, const float4* a, const float4* b, size_t n4, float scale) {
    // STUDENT-BEGIN(05.ring_add_vec4): dst = (a + b) · scale over n4 float4s, a grid-stride loop | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_05 collectives_nccl/*
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 x = a[i], y = b[i];
        dst[i] = make_float4((x.x + y.x) * scale, (x.y + y.y) * scale, (x.z + y.z) * scale,
                             (x.w + y.w) * scale);
    }
    // STUDENT-END(05.ring_add_vec4)
}

__global__ void ring_add_scalar(float* dst, const float* a, const float* b, size_t n, float scale) {
    // STUDENT-BEGIN(05.ring_add_scalar): dst = (a + b) · scale over n floats, a grid-stride loop (any alignment) | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_05 collectives_nccl/*
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = (a[i] + b[i]) * scale;
    // STUDENT-END(05.ring_add_scalar)
}

extern "C" void ring_add_launch(float* dst, const float* a, const float* b, size_t n, float scale,
                                cudaStream_t stream) {
    // STUDENT-BEGIN(05.ring_add_launch): launch ring_add_vec4 when dst, a, b are 16-byte aligned and n % 4 == 0, else ring_add_scalar, on at most 8 blocks per SM of 256 threads, on stream; then CUDA_CHECK_LAST | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_05 collectives_nccl/*
    if (n == 0) return;
    const int threads = 256;
    // A grid-stride loop over at most 8 blocks per SM: enough to keep every SM's loads in flight.
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    const size_t max_blocks = (size_t)sms * 8;
    const uintptr_t mis = ((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) & 15;
    if (mis == 0 && n % 4 == 0) {
        size_t n4 = n / 4, blocks = (n4 + threads - 1) / threads;
        ring_add_vec4<<<(unsigned)(blocks < max_blocks ? blocks : max_blocks), threads, 0, stream>>>(
            (float4*)dst, (const float4*)a, (const float4*)b, n4, scale);
    } else {
        size_t blocks = (n + threads - 1) / threads;
        ring_add_scalar<<<(unsigned)(blocks < max_blocks ? blocks : max_blocks), threads, 0, stream>>>(
            dst, a, b, n, scale);
    }
    CUDA_CHECK_LAST();
    // STUDENT-END(05.ring_add_launch)
}
