// Device fills for the counter-based generator: element i of the fill is counter offset + i,
// exactly as on the host, so a GPU fill equals the host fill for the same rng_t.
#include "common/check.h"
#include "common/rng.h"

namespace {

const int kThreads = 256;

unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535u * 64u ? (b ? b : 1) : 65535u * 64u);  // grid-stride beyond
}

__global__ void fill_uniform_kernel(float* x, size_t n, uint64_t seed, uint64_t off, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = lo + (hi - lo) * rng_uniform(seed, off + i);
}
__global__ void fill_normal_kernel(float* x, size_t n, uint64_t seed, uint64_t off, float mean, float std) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = mean + std * rng_normal(seed, off + i);
}
__global__ void fill_trunc_normal_kernel(float* x, size_t n, uint64_t seed, uint64_t off, float std, float a) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = std * rng_trunc_normal(seed, off + i, a);
}
__global__ void fill_int_kernel(int32_t* x, size_t n, uint64_t seed, uint64_t off, int32_t lo, uint32_t span) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = lo + (int32_t)rng_below(seed, off + i, span);
}

}  // namespace

extern "C" {

void rng_fill_uniform_cuda(rng_t* r, float* d_x, size_t n, float lo, float hi, cudaStream_t s) {
    if (n) fill_uniform_kernel<<<blocks_for(n), kThreads, 0, s>>>(d_x, n, r->seed, r->offset, lo, hi);
    CUDA_CHECK_LAST();
    r->offset += n;
}
void rng_fill_normal_cuda(rng_t* r, float* d_x, size_t n, float mean, float std, cudaStream_t s) {
    if (n) fill_normal_kernel<<<blocks_for(n), kThreads, 0, s>>>(d_x, n, r->seed, r->offset, mean, std);
    CUDA_CHECK_LAST();
    r->offset += n;
}
void rng_fill_trunc_normal_cuda(rng_t* r, float* d_x, size_t n, float std, float a, cudaStream_t s) {
    if (n) fill_trunc_normal_kernel<<<blocks_for(n), kThreads, 0, s>>>(d_x, n, r->seed, r->offset, std, a);
    CUDA_CHECK_LAST();
    r->offset += n;
}
void rng_fill_int_cuda(rng_t* r, int32_t* d_x, size_t n, int32_t lo, int32_t hi, cudaStream_t s) {
    if (n) fill_int_kernel<<<blocks_for(n), kThreads, 0, s>>>(d_x, n, r->seed, r->offset, lo, (uint32_t)(hi - lo));
    CUDA_CHECK_LAST();
    r->offset += n;
}

}  // extern "C"
