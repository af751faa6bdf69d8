// FlashAttention-2 forward for fp32 inputs on CUDA cores: the exact-precision path of
// flash_forward_cuda (tensor cores would round the inputs to tf32 or bf16).
//
// One block of 128 threads per (query tile of BQ = 32 rows, batch*head). A query row is owned
// by a quad of 4 threads; thread g of the quad holds the float4 chunks g, g+4, g+8, ... of the
// row (so the 4 threads read 64 consecutive bytes of a K or V row: conflict-free, and the 8
// quads of a warp read the same addresses: a broadcast). Per key tile K_j, V_j (BK = 32 rows in
// shared memory): each thread forms partial dot products, the quad sums them with two
// shuffles, then every thread runs the same online softmax on the row's BK scores and
// updates its slice of the O accumulator. Scores are kept in log2 units (q is pre-scaled by
// scale * log2 e) so the exponentials are exp2.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include "common/check.h"
#include "common/mma_sync.cuh"  // ex2_approx
#include "03_flashattn_fwd/flash_fwd_internal.h"

namespace {

// [[maybe_unused]]: the student edition stubs the kernel that uses BK and QUAD.
[[maybe_unused]] constexpr int BQ = 32, BK = 32, THREADS = 128, QUAD = 4;

struct Params {
    const float *q, *k, *v;
    float* o;
    float* lse;
    int64_t sq[3], sk[3], sv[3], so[3];
    int H, BH, Nq, Nk, Tq, causal;
    float scale_log2;
};


template <int D>
__global__ void __launch_bounds__(THREADS) flash_fwd_f32_kernel(const Params p) {
    // STUDENT-BEGIN(03.flash_fwd_f32_kernel): Algorithm 1 on the GPU in fp32: one block per (query tile, batch*head), one loop over key tiles, on-chip m, l, O_i; causal: skip tiles above the diagonal, mask diagonal tiles with -1e6 | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*_f32_*
    constexpr int CH = D / 16;             // float4 chunks per thread (D / 4 chunks per row / 4 threads)
    __shared__ __align__(16) float sK[BK][D];  // K_j (BK, D)
    __shared__ __align__(16) float sV[BK][D];  // V_j (BK, D)

    const int qt = p.Tq - 1 - (int)(blockIdx.x / p.BH);  // long causal tiles first
    const int bh = (int)(blockIdx.x % p.BH);
    const int b = bh / p.H, h = bh % p.H;
    const int i0 = qt * BQ;
    const int r = threadIdx.x / QUAD, gq = threadIdx.x % QUAD;
    const int row = i0 + r;  // this quad's query row (may be >= Nq in the ragged last tile)
    const float* Q = p.q + b * p.sq[0] + h * p.sq[1];
    const float* K = p.k + b * p.sk[0] + h * p.sk[1];
    const float* V = p.v + b * p.sv[0] + h * p.sv[1];

    float4 qv[CH], o[CH];  // this thread's chunks of q_row * scale * log2e and of O
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int col = (c * QUAD + gq) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row < p.Nq) {  // scalar loads: any row stride, no alignment needed
            const float* src = Q + (int64_t)row * p.sq[2] + col;
            x = make_float4(src[0] * p.scale_log2, src[1] * p.scale_log2, src[2] * p.scale_log2,
                            src[3] * p.scale_log2);
        }
        qv[c] = x;
        o[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float m = -INFINITY, l = 0.0f;  // running max (log2 units) and sum of this row

    const int Tk = (p.Nk + BK - 1) / BK;
    const int n_tiles = p.causal ? min(Tk, (i0 + BQ - 1) / BK + 1) : Tk;
    for (int j = 0; j < n_tiles; j++) {
        const int j0 = j * BK;
        __syncthreads();  // the previous tile is no longer read
        for (int e = threadIdx.x; e < BK * D; e += THREADS) {
            const int kr = e / D, kc = e % D;
            const bool valid = j0 + kr < p.Nk;  // rows past Nk are zeros (0 * garbage would be NaN)
            sK[kr][kc] = valid ? K[(int64_t)(j0 + kr) * p.sk[2] + kc] : 0.0f;
            sV[kr][kc] = valid ? V[(int64_t)(j0 + kr) * p.sv[2] + kc] : 0.0f;
        }
        __syncthreads();

        // S row (log2 units): partial dots, summed over the quad
        float s[BK];
        float mx = m;
#pragma unroll
        for (int c = 0; c < BK; c++) {
            float acc = 0.0f;
#pragma unroll
            for (int ch = 0; ch < CH; ch++) {
                const float4 kk = *reinterpret_cast<const float4*>(&sK[c][(ch * QUAD + gq) * 4]);
                acc = fmaf(qv[ch].x, kk.x, acc);
                acc = fmaf(qv[ch].y, kk.y, acc);
                acc = fmaf(qv[ch].z, kk.z, acc);
                acc = fmaf(qv[ch].w, kk.w, acc);
            }
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            const int col = j0 + c;
            if (col >= p.Nk || (p.causal && col > row)) acc = -INFINITY;
            s[c] = acc;
            mx = fmaxf(mx, acc);
        }
        // m_new, alpha, P~ = 2^(s - m_new); key 0 is visible to every row, so mx is finite
        // from tile 0 on; the guard only keeps NaN out of an impossible case.
        const float mbase = (mx == -INFINITY) ? 0.0f : mx;
        const float alpha = ex2_approx(m - mbase);
        float rs = 0.0f;
#pragma unroll
        for (int c = 0; c < BK; c++) {
            s[c] = ex2_approx(s[c] - mbase);
            rs += s[c];
        }
        l = l * alpha + rs;
        m = mx;
#pragma unroll
        for (int ch = 0; ch < CH; ch++) {
            o[ch].x *= alpha;
            o[ch].y *= alpha;
            o[ch].z *= alpha;
            o[ch].w *= alpha;
        }
        // O += P~ V_j
#pragma unroll
        for (int c = 0; c < BK; c++) {
            const float pc = s[c];
#pragma unroll
            for (int ch = 0; ch < CH; ch++) {
                const float4 vv = *reinterpret_cast<const float4*>(&sV[c][(ch * QUAD + gq) * 4]);
                o[ch].x = fmaf(pc, vv.x, o[ch].x);
                o[ch].y = fmaf(pc, vv.y, o[ch].y);
                o[ch].z = fmaf(pc, vv.z, o[ch].z);
                o[ch].w = fmaf(pc, vv.w, o[ch].w);
            }
        }
    }

    if (row < p.Nq) {
        const float inv = 1.0f / l;
        float* dst = p.o + b * p.so[0] + h * p.so[1] + (int64_t)row * p.so[2];
#pragma unroll
        for (int ch = 0; ch < CH; ch++) {
            const int col = (ch * QUAD + gq) * 4;
            dst[col + 0] = o[ch].x * inv;
            dst[col + 1] = o[ch].y * inv;
            dst[col + 2] = o[ch].z * inv;
            dst[col + 3] = o[ch].w * inv;
        }
        // L = ln(sum exp(scale * S)) = ln 2 * (m + log2 l), m in log2 units
        if (gq == 0) p.lse[(int64_t)bh * p.Nq + row] = 0.69314718055994531f * (m + log2f(l));
    }
    // STUDENT-END(03.flash_fwd_f32_kernel)
}

template <int D>
void launch(const attn_args_t* a, cudaStream_t stream) {
    // STUDENT-BEGIN(03.flash_fwd_f32_launch): fill Params from attn_args_t (pointers, strides, Tq, scale * log2(e)) and launch flash_fwd_f32_kernel<D> on Tq * B * H blocks of THREADS | see 03_flashattn_fwd/README.md §The kernels | test: test_03 cuda/*_f32_*
    Params p;
    p.q = static_cast<const float*>(a->q);
    p.k = static_cast<const float*>(a->k);
    p.v = static_cast<const float*>(a->v);
    p.o = static_cast<float*>(a->o);
    p.lse = a->lse;
    for (int i = 0; i < 3; i++) {
        p.sq[i] = a->sq[i];
        p.sk[i] = a->sk[i];
        p.sv[i] = a->sv[i];
        p.so[i] = a->so[i];
    }
    p.H = a->H;
    p.BH = a->B * a->H;
    p.Nq = a->Nq;
    p.Nk = a->Nk;
    p.Tq = (a->Nq + BQ - 1) / BQ;
    p.causal = a->causal;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    const unsigned blocks = (unsigned)p.Tq * (unsigned)p.BH;  // 1-D grid
    flash_fwd_f32_kernel<D><<<blocks, THREADS, 0, stream>>>(p);
    CUDA_CHECK_LAST();
    // STUDENT-END(03.flash_fwd_f32_launch)
}

}  // namespace

extern "C" int flash_fwd_f32_block_rows(int d) { return (d == 16 || d == 32 || d == 64 || d == 128) ? BQ : 0; }

extern "C" void flash_fwd_f32_launch(const attn_args_t* a, cudaStream_t stream) {
    switch (a->d) {
        case 16: launch<16>(a, stream); break;
        case 32: launch<32>(a, stream); break;
        case 64: launch<64>(a, stream); break;
        case 128: launch<128>(a, stream); break;
        default: DIE("flash_fwd_f32_launch: head dim %d not supported", a->d);
    }
}
