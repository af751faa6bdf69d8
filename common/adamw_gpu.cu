// The slice optimizers of adamw_gpu.h. AdamW reuses the model's fused kernel (k_adamw in
// kernels_adamw.cu): it is already a kernel over (pointer, n), so a slice is the whole buffer
// of a smaller problem, and one kernel keeps the CPU/GPU arithmetic in one place.
#include "common/adamw_gpu.h"
#include "common/kernels_util.cuh"
#include "common/model_kernels.h"

extern "C" void adamw_gpu_step(const adamw_config_t* cfg, float* p, const float* g, float* m,
                               float* v, uint16_t* p_lp, size_t n, int t, cudaStream_t stream) {
    if (t < 1) DIE("adamw_gpu_step: step must be >= 1, got %d", t);
    const adamw_scalars_t sc = adamw_scalars(cfg, t);  // the CPU version's helper
    k_adamw(p, g, m, v, p_lp, n, cfg->beta1, cfg->beta2, cfg->eps, sc.decay, sc.step_size,
            sc.bc2_sqrt, stream);
}

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, size_t n, float lr) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] -= lr * g[i];
}

extern "C" void sgd_gpu_step(float lr, float* p, const float* g, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    sgd_kernel<<<cdiv_u(n, 256), 256, 0, stream>>>(p, g, n, lr);
    CUDA_CHECK_LAST();
}
