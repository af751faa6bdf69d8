// The post-pass of the single-pass paths: the fp32 dQ accumulator (p.dq_accum, [B*H, Nq, d],
// already scaled) cast into dq, its dtype and strides. Two kernels: one 16-byte store per thread
// for bf16 at d 16, 32, 64 (rows 16-byte aligned: what the tensor-core paths guarantee), and an
// element-wise one for everything else (d 128, fp32).
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"
#include "common/gpu.h"

namespace {

typedef __nv_bfloat16 bf16;

// dq = dq_accum (already scaled), cast to T and written through dq's strides.
template <typename T>
__global__ void bwd_dq_convert_kernel(BwdParams p) {
    const int64_t n = (int64_t)p.B * p.H * p.Nq * p.d;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(x % p.d);
        const int64_t row = x / p.d;
        const int bh = (int)(row / p.Nq), r = (int)(row % p.Nq);
        ((T*)p.dq)[view_off(p.sdq, bh, p.H, r) + c] = from_f<T>(p.dq_accum[x]);
    }
}

// fp32 accumulator [BH, Nq, D] -> dq (bf16, strided rows): 8 elements (one 16-byte store) per thread.
template <int D>
__global__ void __launch_bounds__(256) dq_cast16_kernel(BwdParams p) {
    constexpr int CH = D / 8;
    const int64_t n = (int64_t)p.B * p.H * p.Nq * CH;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = x / CH;
        const int c = (int)(x % CH) * 8, bh = (int)(row / p.Nq), r = (int)(row % p.Nq);
        const float4* src = (const float4*)(p.dq_accum + row * D + c);
        const float4 a = src[0], b = src[1];
        uint4 o;
        o.x = pack_bf16(a.x, a.y); o.y = pack_bf16(a.z, a.w);
        o.z = pack_bf16(b.x, b.y); o.w = pack_bf16(b.z, b.w);
        *(uint4*)((bf16*)p.dq + view_off(p.sdq, bh, p.H, r) + c) = o;
    }
}

template <int D>
void launch_dq_convert(const BwdParams& p, cudaStream_t s) {
    const int64_t n = (int64_t)p.B * p.H * p.Nq * (D / 8);
    // A grid-stride loop: 16 blocks of 256 threads per SM (twice the 2048 threads an SM holds),
    // fewer when the work is smaller. The SM count is the device's (it was 132, one H100's,
    // hard-coded: the same grid there).
    const int64_t full = (int64_t)gpu_sm_count() * 16;
    const unsigned blocks = (unsigned)((n + 255) / 256 < full ? (n + 255) / 256 : full);
    dq_cast16_kernel<D><<<blocks, 256, 0, s>>>(p);
    CUDA_CHECK_LAST();
}

}  // namespace

void bwd_launch_dq_cast(const BwdParams& p, dtype_t dt, cudaStream_t s) {
    if (dt == DT_BF16 && p.d == 16) launch_dq_convert<16>(p, s);
    else if (dt == DT_BF16 && p.d == 32) launch_dq_convert<32>(p, s);
    else if (dt == DT_BF16 && p.d == 64) launch_dq_convert<64>(p, s);
    else {
        const int64_t n = (int64_t)p.B * p.H * p.Nq * p.d;
        const unsigned blocks = (unsigned)((n + 255) / 256 < 65535 * 4 ? (n + 255) / 256 : 65535 * 4);
        if (dt == DT_BF16) bwd_dq_convert_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(p);
        else bwd_dq_convert_kernel<float><<<blocks, 256, 0, s>>>(p);
        CUDA_CHECK_LAST();
    }
}
