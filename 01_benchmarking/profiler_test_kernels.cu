// Known kernels for the profiler's test (test_profiler.c): two tiny elementwise kernels whose
// launch counts the test controls, and one that spins for a set time so that the host can
// change phase while it is still running (the launch-time attribution check).
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/check.h"

// x[i] = 2 x[i]   (n)
__global__ void ptk_alpha_kernel(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}

// x[i] = x[i] + 1   (n)
__global__ void ptk_beta_kernel(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

// One thread busy-waits on the GPU's nanosecond clock for `ns` nanoseconds.
__global__ void ptk_spin_kernel(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" void ptk_alpha(float* x, int n) {
    ptk_alpha_kernel<<<(n + 255) / 256, 256>>>(x, n);
    CUDA_CHECK_LAST();
}

extern "C" void ptk_beta(float* x, int n) {
    ptk_beta_kernel<<<(n + 255) / 256, 256>>>(x, n);
    CUDA_CHECK_LAST();
}

extern "C" void ptk_spin_ms(double ms) {
    ptk_spin_kernel<<<1, 1>>>((uint64_t)(ms * 1e6));
    CUDA_CHECK_LAST();
}
