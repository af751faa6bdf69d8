// The pre-pass of every backward path: D_i = rowsum(dO_i o O_i), one fp32 per query row, which
// turns dS = P o (dP - D) into a product of tiles the kernels already hold.
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"

namespace {

// D_r = rowsum(dO_r o O_r): one warp per row, lanes stride over the head dim.
template <typename T>
__global__ void bwd_prepass_kernel(BwdParams p) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // bh*Nq + r
    if (row >= (int64_t)p.B * p.H * p.Nq) return;
    const int bh = (int)(row / p.Nq), r = (int)(row % p.Nq);
    const T* O = (const T*)p.o + view_off(p.so, bh, p.H, r);
    const T* dO = (const T*)p.dout + view_off(p.sdo, bh, p.H, r);
    float acc = 0.0f;
    for (int c = lane; c < p.d; c += 32) acc += to_f(O[c]) * to_f(dO[c]);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) p.D[row] = acc;
}

}  // namespace

void bwd_launch_prepass(const BwdParams& p, dtype_t dt, cudaStream_t s) {
    const int64_t rows = (int64_t)p.B * p.H * p.Nq;
    const int warps = 8;
    const unsigned blocks = (unsigned)((rows + warps - 1) / warps);
    // Inputs are bf16 or fp32 alike; dt picks the instantiation.
    if (dt == DT_BF16) bwd_prepass_kernel<__nv_bfloat16><<<blocks, warps * 32, 0, s>>>(p);
    else bwd_prepass_kernel<float><<<blocks, warps * 32, 0, s>>>(p);
    CUDA_CHECK_LAST();
}

