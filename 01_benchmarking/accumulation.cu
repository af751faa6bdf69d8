// The accumulation demo on the GPU (see accumulation.h): one thread runs every loop with the
// device's own fp16/bf16 types, so the rounding is the hardware's (__hadd rounds to nearest).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "01_benchmarking/accumulation.h"
#include "common/check.h"
#include "common/gpu.h"

// out[ACC_NCASES]: one thread, n sequential adds per case (the point is the rounding, not speed)
__global__ void accum_kernel(int n, float value, float* out) {
    // STUDENT-BEGIN(01.accum_kernel): the accumulation demo on the GPU: one thread, __hadd for fp16/bf16 sums, fp32 sums of widened halves | see 01_benchmarking/README.md §Accumulation in low precision | test: test_01 accumulation/gpu_sums_match_cpu_bit_for_bit
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += value;
    out[ACC_F32_F32] = s;

    __half x = __float2half_rn(value), s16 = __float2half_rn(0.0f);
    for (int i = 0; i < n; i++) s16 = __hadd(s16, x);  // fp16 + fp16 -> fp16
    out[ACC_F16_F16] = __half2float(s16);

    s = 0.0f;
    // float += __half is ambiguous in C++ (__half converts to many types); passing it where a
    // float is expected widens it implicitly, which is what PyTorch's type promotion does.
    for (int i = 0; i < n; i++) s = __fadd_rn(s, x);
    out[ACC_F32_F16] = s;
    s = 0.0f;
    for (int i = 0; i < n; i++) s += __half2float(x);
    out[ACC_F32_F16_CAST] = s;

    __nv_bfloat16 xb = __float2bfloat16_rn(value), sb = __float2bfloat16_rn(0.0f);
    for (int i = 0; i < n; i++) sb = __hadd(sb, xb);
    out[ACC_BF16_BF16] = __bfloat162float(sb);
    s = 0.0f;
    for (int i = 0; i < n; i++) s += __bfloat162float(xb);
    out[ACC_F32_BF16] = s;
    // STUDENT-END(01.accum_kernel)
}

extern "C" int accum_gpu(int n, float value, float* out) {
    // STUDENT-BEGIN(01.accum_gpu): launch accum_kernel<<<1, 1>>> on an out buffer poisoned with NaN, copy the ACC_NCASES sums back (-1 without a GPU) | see 01_benchmarking/README.md §Accumulation in low precision | test: test_01 accumulation/gpu_sums_match_cpu_bit_for_bit
    if (gpu_count() == 0) return -1;
    float* d_out = NULL;  // (ACC_NCASES)
    CUDA_CHECK(cudaMalloc((void**)&d_out, ACC_NCASES * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_out, 0xFF, ACC_NCASES * sizeof(float)));  // NaN until written
    accum_kernel<<<1, 1>>>(n, value, d_out);
    CUDA_CHECK_LAST();
    CUDA_CHECK(cudaMemcpy(out, d_out, ACC_NCASES * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_out));
    return 0;
    // STUDENT-END(01.accum_gpu)
}
