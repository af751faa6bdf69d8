// The plain (SIMT, fp32 arithmetic) two-pass backward, after the D pre-pass: the key-tile-parallel
// dK/dV kernel and the query-tile-parallel dQ kernel, no atomics. They take fp32
// or bf16 inputs and any head dim up to 128: the fp32 path, and the fallback for bf16 shapes
// the tensor-core kernels do not take. Each block keeps its tiles in shared memory as fp32.
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "common/check.h"

namespace {

constexpr int kThreads = 128;
constexpr int kBq = 32;         // query-tile rows
constexpr int kBk = 32;         // key-tile rows
constexpr int kMaxD = 128;
// [[maybe_unused]]: the student edition stubs the kernels and the launcher that use these two.
[[maybe_unused]] constexpr int kMaxPerThread = kBk * kMaxD / kThreads;  // (row, col) accumulators per thread
static_assert(kBq == kBk, "the accumulator split below assumes square tiles");

// rows [r0, r0+rows) of a [N, d] view into smem tile (rows, ld) as fp32; rows past N are zeros.
template <typename T>
__device__ void load_tile_f32(float* tile, int ld, const T* base, int64_t row_stride, int r0,
                              int N, int d) {
    for (int x = threadIdx.x; x < kBk * d; x += kThreads) {
        const int r = x / d, c = x % d;
        tile[r * ld + c] = (r0 + r < N) ? to_f(base[(int64_t)(r0 + r) * row_stride + c]) : 0.0f;
    }
}

// Key-tile-parallel pass: block (bh, j) owns K_j, V_j and accumulates dK_j, dV_j over the query
// tiles i that see key tile j.
template <typename T>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_simt_kernel(BwdParams p) {
    // STUDENT-BEGIN(04.dkdv_kernel): the key-tile-parallel kernel: one block per (key tile j, batch*head) accumulates dK_j and dV_j over the query tiles (causal: from the diagonal on) | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_f32 bwd_cuda/sweep_f32_simt bwd_cuda/sweep_bf16_simt bwd_cuda/fixture_noncausal bwd_cuda/fixture_causal bwd_cuda/fixture_f32_simt bwd_cuda/fixture_bf16_simt 
    extern __shared__ float smem[];
    const int d = p.d, ld = d + 1;  // odd row stride: a warp reading a column hits 32 banks
    float* K_j = smem;               // (Bk, ld)
    float* V_j = K_j + kBk * ld;     // (Bk, ld)
    float* Q_i = V_j + kBk * ld;     // (Bq, ld)
    float* dO_i = Q_i + kBq * ld;    // (Bq, ld)
    float* P = dO_i + kBq * ld;      // (Bk, Bq+1)  P_ij^T
    float* dS = P + kBk * (kBq + 1); // (Bk, Bq+1)  dS_ij^T
    float* L_i = dS + kBk * (kBq + 1);  // (Bq)
    float* D_i = L_i + kBq;             // (Bq)

    const int bh = blockIdx.x, j = blockIdx.y, k0 = j * kBk;
    const int tid = threadIdx.x;
    load_tile_f32(K_j, ld, (const T*)p.k + view_off(p.sk, bh, p.H, 0), p.sk[2], k0, p.Nk, d);
    load_tile_f32(V_j, ld, (const T*)p.v + view_off(p.sv, bh, p.H, 0), p.sv[2], k0, p.Nk, d);

    float dK[kMaxPerThread], dV[kMaxPerThread];  // element e = tid + kThreads*m of (Bk, d)
#pragma unroll
    for (int m = 0; m < kMaxPerThread; m++) dK[m] = dV[m] = 0.0f;

    const int Tq = (p.Nq + kBq - 1) / kBq;
    const int i_start = p.causal ? k0 / kBq : 0;  // earlier query tiles see none of K_j
    for (int i = i_start; i < Tq; i++) {
        const int q0 = i * kBq;
        __syncthreads();  // previous tile's readers are done
        load_tile_f32(Q_i, ld, (const T*)p.q + view_off(p.sq, bh, p.H, 0), p.sq[2], q0, p.Nq, d);
        load_tile_f32(dO_i, ld, (const T*)p.dout + view_off(p.sdo, bh, p.H, 0), p.sdo[2], q0, p.Nq, d);
        if (tid < kBq) {
            const int r = q0 + tid;
            // A row past Nq gets L = +inf so that its P = exp(S - L) = 0 without a branch.
            L_i[tid] = r < p.Nq ? p.lse[(int64_t)bh * p.Nq + r] : INFINITY;
            D_i[tid] = r < p.Nq ? p.D[(int64_t)bh * p.Nq + r] : 0.0f;
        }
        __syncthreads();
        // P^T and dS^T: one (key, query) pair per thread per step; a warp shares the key.
        for (int x = tid; x < kBk * kBq; x += kThreads) {
            const int c = x / kBq, r = x % kBq;  // key c, query r
            float s = 0.0f, dp = 0.0f;
            for (int e = 0; e < d; e++) {
                s += Q_i[r * ld + e] * K_j[c * ld + e];
                dp += dO_i[r * ld + e] * V_j[c * ld + e];
            }
            const bool masked = (k0 + c >= p.Nk) || (p.causal && k0 + c > q0 + r);
            const float pr = masked ? 0.0f : __expf(s * p.scale - L_i[r]);
            P[c * (kBq + 1) + r] = pr;
            dS[c * (kBq + 1) + r] = pr * (dp - D_i[r]);
        }
        __syncthreads();
        // dV_j += P^T dO_i;  dK_j += dS^T Q_i  (scale applied once at the end)
#pragma unroll
        for (int m = 0; m < kMaxPerThread; m++) {
            const int x = tid + kThreads * m;
            if (x < kBk * d) {
                const int c = x / d, e = x % d;
                float av = 0.0f, ak = 0.0f;
                for (int r = 0; r < kBq; r++) {
                    av += P[c * (kBq + 1) + r] * dO_i[r * ld + e];
                    ak += dS[c * (kBq + 1) + r] * Q_i[r * ld + e];
                }
                dV[m] += av;
                dK[m] += ak;
            }
        }
    }
    // Write dK_j, dV_j once (keys past Nk are not written; keys no query sees get zeros).
    T* dk = (T*)p.dk + view_off(p.sdk, bh, p.H, 0);
    T* dv = (T*)p.dv + view_off(p.sdv, bh, p.H, 0);
#pragma unroll
    for (int m = 0; m < kMaxPerThread; m++) {
        const int x = tid + kThreads * m;
        if (x < kBk * d) {
            const int c = x / d, e = x % d;
            if (k0 + c < p.Nk) {
                dk[(int64_t)(k0 + c) * p.sdk[2] + e] = from_f<T>(dK[m] * p.scale);
                dv[(int64_t)(k0 + c) * p.sdv[2] + e] = from_f<T>(dV[m]);
            }
        }
    }
    // STUDENT-END(04.dkdv_kernel)
}

// Query-tile-parallel pass: block (bh, i) owns Q_i, dO_i and accumulates dQ_i over the key
// tiles j it sees (causal: up to the diagonal), recomputing P.
template <typename T>
__global__ void __launch_bounds__(kThreads) bwd_dq_simt_kernel(BwdParams p) {
    // STUDENT-BEGIN(04.dq_kernel): the query-tile-parallel kernel: one block per (query tile i, batch*head) accumulates dQ_i = scale sum_j dS_ij K_j (no atomics) | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_f32 bwd_cuda/sweep_f32_simt bwd_cuda/sweep_bf16_simt bwd_cuda/fixture_noncausal bwd_cuda/fixture_causal bwd_cuda/fixture_f32_simt bwd_cuda/fixture_bf16_simt 
    extern __shared__ float smem[];
    const int d = p.d, ld = d + 1;
    float* Q_i = smem;                  // (Bq, ld)
    float* dO_i = Q_i + kBq * ld;       // (Bq, ld)
    float* K_j = dO_i + kBq * ld;       // (Bk, ld)
    float* V_j = K_j + kBk * ld;        // (Bk, ld)
    float* dS = V_j + kBk * ld;         // (Bq, Bk+1)
    float* L_i = dS + kBq * (kBk + 1);  // (Bq)
    float* D_i = L_i + kBq;             // (Bq)

    const int bh = blockIdx.x;
    const int Tq = (p.Nq + kBq - 1) / kBq;
    const int i = Tq - 1 - blockIdx.y;  // the longest causal rows start first
    const int q0 = i * kBq, tid = threadIdx.x;
    load_tile_f32(Q_i, ld, (const T*)p.q + view_off(p.sq, bh, p.H, 0), p.sq[2], q0, p.Nq, d);
    load_tile_f32(dO_i, ld, (const T*)p.dout + view_off(p.sdo, bh, p.H, 0), p.sdo[2], q0, p.Nq, d);
    if (tid < kBq) {
        const int r = q0 + tid;
        L_i[tid] = r < p.Nq ? p.lse[(int64_t)bh * p.Nq + r] : INFINITY;
        D_i[tid] = r < p.Nq ? p.D[(int64_t)bh * p.Nq + r] : 0.0f;
    }
    float dQ[kMaxPerThread];  // element e = tid + kThreads*m of (Bq, d)
#pragma unroll
    for (int m = 0; m < kMaxPerThread; m++) dQ[m] = 0.0f;

    const int Tk = (p.Nk + kBk - 1) / kBk;
    // Causal: key tiles past the tile holding key (last query of Q_i) are wholly masked.
    const int j_end = p.causal ? min(Tk, (q0 + kBq - 1) / kBk + 1) : Tk;
    for (int j = 0; j < j_end; j++) {
        const int k0 = j * kBk;
        __syncthreads();
        load_tile_f32(K_j, ld, (const T*)p.k + view_off(p.sk, bh, p.H, 0), p.sk[2], k0, p.Nk, d);
        load_tile_f32(V_j, ld, (const T*)p.v + view_off(p.sv, bh, p.H, 0), p.sv[2], k0, p.Nk, d);
        __syncthreads();
        for (int x = tid; x < kBq * kBk; x += kThreads) {
            const int r = x / kBk, c = x % kBk;  // query r, key c; a warp shares the query
            float s = 0.0f, dp = 0.0f;
            for (int e = 0; e < d; e++) {
                s += Q_i[r * ld + e] * K_j[c * ld + e];
                dp += dO_i[r * ld + e] * V_j[c * ld + e];
            }
            const bool masked = (k0 + c >= p.Nk) || (p.causal && k0 + c > q0 + r);
            const float pr = masked ? 0.0f : __expf(s * p.scale - L_i[r]);
            dS[r * (kBk + 1) + c] = pr * (dp - D_i[r]);
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < kMaxPerThread; m++) {
            const int x = tid + kThreads * m;
            if (x < kBq * d) {
                const int r = x / d, e = x % d;
                float acc = 0.0f;
                for (int c = 0; c < kBk; c++) acc += dS[r * (kBk + 1) + c] * K_j[c * ld + e];
                dQ[m] += acc;
            }
        }
    }
    T* dq = (T*)p.dq + view_off(p.sdq, bh, p.H, 0);
#pragma unroll
    for (int m = 0; m < kMaxPerThread; m++) {
        const int x = tid + kThreads * m;
        if (x < kBq * d) {
            const int r = x / d, e = x % d;
            if (q0 + r < p.Nq) dq[(int64_t)(q0 + r) * p.sdq[2] + e] = from_f<T>(dQ[m] * p.scale);
        }
    }
    // STUDENT-END(04.dq_kernel)
}

[[maybe_unused]] size_t simt_smem_bytes(int d) {
    return sizeof(float) * ((size_t)4 * kBk * (d + 1) + 2 * (size_t)kBk * (kBq + 1) + 2 * kBq);
}

template <typename T>
void launch_simt(const BwdParams& p, cudaStream_t s) {
    // STUDENT-BEGIN(04.launch_simt): launch bwd_dkdv_simt_kernel<T> then bwd_dq_simt_kernel<T> with simt_smem_bytes(d) of shared memory (opted in by cudaFuncSetAttribute) | see 04_flashattn_bwd/README.md §The kernels | test: test_04 bwd_cuda/sweep_f32 bwd_cuda/sweep_f32_simt bwd_cuda/sweep_bf16_simt bwd_cuda/fixture_noncausal bwd_cuda/fixture_causal bwd_cuda/fixture_f32_simt bwd_cuda/fixture_bf16_simt
    const int BH = p.B * p.H;
    const size_t smem = simt_smem_bytes(p.d);
    dim3 block(kThreads);
    dim3 grid_kv(BH, (p.Nk + kBk - 1) / kBk), grid_q(BH, (p.Nq + kBq - 1) / kBq);
    CUDA_CHECK(cudaFuncSetAttribute(bwd_dkdv_simt_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    bwd_dkdv_simt_kernel<T><<<grid_kv, block, smem, s>>>(p);
    CUDA_CHECK_LAST();
    CUDA_CHECK(cudaFuncSetAttribute(bwd_dq_simt_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    bwd_dq_simt_kernel<T><<<grid_q, block, smem, s>>>(p);
    CUDA_CHECK_LAST();
    // STUDENT-END(04.launch_simt)
}

}  // namespace

void bwd_launch_simt(const BwdParams& p, dtype_t dt, cudaStream_t s) {
    if (dt == DT_BF16) launch_simt<__nv_bfloat16>(p, s);
    else launch_simt<float>(p, s);
}

