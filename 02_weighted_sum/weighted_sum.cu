// The weighted-sum kernels: forward, fused backward (grad_x and grad_w partials in one pass
// over x), the reduction of the partials, and the launchers that pick a compiled variant.
//
// Both kernels are memory-bound: per element of x they do one or two multiply-adds and move 4
// (f32) or 2 (bf16) bytes, dozens of times fewer FLOPs per byte than an H100 can sustain. So what
// matters is only that every byte is moved once, in wide loads, with enough loads in flight
// to cover the DRAM latency (README, "Why it is fast").
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "02_weighted_sum/weighted_sum.h"
#include "02_weighted_sum/ws_tile.cuh"
#include "common/check.h"
#include "common/rng.h"

[[maybe_unused]] constexpr int WARPS = WS_THREADS / 32;  // maybe unused: in the student edition

// ================================================================ forward
// Block b owns rows [b * ROWS_TILE, min((b + 1) * ROWS_TILE, ROWS)) of x. Each of its 8 warps
// takes one row at a time (warp j: rows j, j + 8, ... of the tile) and walks that row in D
// tiles of D_TILE columns: in one step, lane l loads the U vectors
//     x[r, d0 + (u * 32 + l) * VEC + (0 .. VEC-1)],   u = 0 .. U-1,   U = D_TILE / (32 VEC),
// and the matching pieces of w, all before it multiplies anything, so U loads per lane are in
// flight together. Consecutive lanes read consecutive 16-byte pieces: each warp-wide load is
// 512 contiguous bytes (coalesced). Columns d >= D are skipped (the D boundary); rows >= ROWS
// are never visited (the ROWS boundary). The 32 per-lane fp32 sums are then added by shuffles.
template <typename T, int VEC, int D_TILE>
__global__ void __launch_bounds__(WS_THREADS)
    ws_forward_kernel(const T* __restrict__ x,  // [ROWS, D], row stride sx
                      int64_t sx,
                      const T* __restrict__ w,  // [D]
                      T* __restrict__ y,        // [ROWS]
                      int64_t ROWS, int64_t D, int ROWS_TILE) {
    // STUDENT-BEGIN(02.forward_kernel): one block per ROWS tile, each warp a row: VEC-wide coalesced loads of x and w over D tiles of D_TILE, skip d >= D, warp-shuffle sum, y[r] in T | see 02_weighted_sum/README.md §How the grid maps to the data | test: test_02 ws_cuda/*
    constexpr int U = D_TILE / (32 * VEC);
    static_assert(U >= 1 && U * 32 * VEC == D_TILE,
                  "D_TILE must be a multiple of 32 lanes times the vector width");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t r_begin = (int64_t)blockIdx.x * ROWS_TILE;
    const int64_t r_end = min(r_begin + ROWS_TILE, ROWS);

    for (int64_t r = r_begin + warp; r < r_end; r += WARPS) {
        const T* x_r = x + r * sx;
        float acc = 0.0f;  // this lane's share of y[r], always fp32
        for (int64_t d0 = 0; d0 < D; d0 += D_TILE) {
            float xv[U][VEC], wv[U][VEC];
            // Issue every load of this D tile first ...
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t d = d0 + (int64_t)(u * 32 + lane) * VEC;
                if (d < D) {  // the D boundary: D is a multiple of VEC on this path
                    load_vec<T, VEC>(x_r + d, xv[u]);
                    load_vec<T, VEC>(w + d, wv[u]);
                } else {
#pragma unroll
                    for (int i = 0; i < VEC; i++) xv[u][i] = wv[u][i] = 0.0f;
                }
            }
            // ... then use them.
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int i = 0; i < VEC; i++) acc = fmaf(xv[u][i], wv[u][i], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[r] = from_f32<T>(acc);
    }
    // STUDENT-END(02.forward_kernel)
}

// ================================================================ backward
// The grid is 2-D: blockIdx.x picks a row tile (ROWS_TILE rows), blockIdx.y a D tile (D_TILE
// columns). Inside a block the 256 threads form TY rows of TX threads; thread (ty, tx) owns the
// columns  c(u) = d0 + (u * TX + tx) * VEC + (0 .. VEC-1),  u = 0 .. U-1,  for the whole tile,
// and visits the rows ty, ty + TY, ... of the tile. For each row it
//   - writes grad_x[r, c] = grad_y[r] * w[c]   (w[c] sits in registers for the whole tile),
//   - adds x[r, c] * grad_y[r] to its fp32 accumulators for grad_w[c].
// So x is read once and grad_x written once, in the same pass. RSTEP rows are loaded before
// any is used (more loads in flight). At the end the TY threads that share a column add their
// sums through shared memory, and the block writes one row of partial sums:
//   partials[row_tile, c]             (mode WS_GRADW_PARTIALS, reduced later by ws_reduce_kernel)
//   atomicAdd(&acc_out[c], ...)       (mode WS_GRADW_ATOMIC)
template <typename T, int VEC, int D_TILE>
__global__ void __launch_bounds__(WS_THREADS)
    ws_backward_kernel(const T* __restrict__ x,       // [ROWS, D], row stride sx
                       int64_t sx,
                       const T* __restrict__ w,       // [D]
                       const T* __restrict__ grad_y,  // [ROWS]
                       T* __restrict__ grad_x,        // [ROWS, D], row stride sgx
                       int64_t sgx,
                       float* __restrict__ gw_out,    // partials [n_row_tiles, D] or acc [D]
                       int64_t ROWS, int64_t D, int ROWS_TILE, int atomic) {
    // STUDENT-BEGIN(02.backward_kernel): grid (row tiles, D tiles): grad_x = grad_y[r] w[d]; grad_w partial sums per row tile into partials[row_tile, d] (or atomicAdd in WS_GRADW_ATOMIC) | see 02_weighted_sum/README.md §Why partial sums and not atomics | test: test_02 ws_cuda/*
    constexpr int TX = (D_TILE / VEC < WS_THREADS) ? D_TILE / VEC : WS_THREADS;
    constexpr int TY = WS_THREADS / TX;
    constexpr int U = D_TILE / (VEC * TX);
    constexpr int RSTEP = 4;
    static_assert(TX * TY == WS_THREADS && U * VEC * TX == D_TILE,
                  "the block must tile D_TILE columns exactly");
    __shared__ float red[TY][TX * U * VEC + 1];  // +1: no bank conflicts when TY threads add up

    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    const int64_t row_tile = blockIdx.x;
    const int64_t d0 = (int64_t)blockIdx.y * D_TILE;
    const int64_t r_begin = row_tile * ROWS_TILE;
    const int64_t r_end = min(r_begin + (int64_t)ROWS_TILE, ROWS);

    float wv[U][VEC], acc[U][VEC];
    bool col_ok[U];  // the D boundary, decided once per thread
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t c = d0 + (int64_t)(u * TX + tx) * VEC;
        col_ok[u] = c < D;
        if (col_ok[u])
            load_vec<T, VEC>(w + c, wv[u]);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            if (!col_ok[u]) wv[u][i] = 0.0f;
            acc[u][i] = 0.0f;
        }
    }

    for (int64_t r0 = r_begin + ty; r0 < r_end; r0 += (int64_t)TY * RSTEP) {
        float xv[RSTEP][U][VEC], g[RSTEP];
#pragma unroll
        for (int k = 0; k < RSTEP; k++) {
            const int64_t r = r0 + (int64_t)k * TY;
            const bool row_ok = r < r_end;  // the ROWS (and row-tile) boundary
            g[k] = row_ok ? to_f32<T>(grad_y[r]) : 0.0f;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t c = d0 + (int64_t)(u * TX + tx) * VEC;
                if (row_ok && col_ok[u])
                    load_vec<T, VEC>(x + r * sx + c, xv[k][u]);
                else
#pragma unroll
                    for (int i = 0; i < VEC; i++) xv[k][u][i] = 0.0f;
            }
        }
#pragma unroll
        for (int k = 0; k < RSTEP; k++) {
            const int64_t r = r0 + (int64_t)k * TY;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t c = d0 + (int64_t)(u * TX + tx) * VEC;
                float gx[VEC];
#pragma unroll
                for (int i = 0; i < VEC; i++) {
                    gx[i] = g[k] * wv[u][i];
                    acc[u][i] = fmaf(xv[k][u][i], g[k], acc[u][i]);
                }
                if (r < r_end && col_ok[u]) store_vec<T, VEC>(grad_x + r * sgx + c, gx);
            }
        }
    }

    // Add the TY partial sums of each column through shared memory.
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int i = 0; i < VEC; i++) red[ty][(u * TX + tx) * VEC + i] = acc[u][i];
    __syncthreads();
    for (int j = threadIdx.x; j < D_TILE; j += WS_THREADS) {
        const int64_t c = d0 + j;
        if (c >= D) continue;
        float s = 0.0f;
#pragma unroll
        for (int t = 0; t < TY; t++) s += red[t][j];
        if (atomic)
            atomicAdd(&gw_out[c], s);
        else
            gw_out[row_tile * D + c] = s;
    }
    // STUDENT-END(02.backward_kernel)
}

// grad_w[d] = sum over the n rows of partials[:, d]. Block of 32 x 32 threads: 32 consecutive
// columns (each warp reads 128 contiguous bytes of a partial row), 32 threads per column walking
// the rows with stride 32 (eight loads in flight each), then a 32-way sum in shared memory.
// Few blocks (D / 32), so each must have many loads in flight: that is why it is 1024 threads.
// Also used with n = 1 to round the fp32 atomic accumulator to bf16.
constexpr int RED_TY = 32;
template <typename T>
__global__ void __launch_bounds__(32 * RED_TY)
    ws_reduce_kernel(const float* __restrict__ partials,  // [n, D]
                     T* __restrict__ grad_w,              // [D]
                     int64_t n, int64_t D) {
    // STUDENT-BEGIN(02.reduce_kernel): grad_w[d] = sum over the n rows of partials[:, d]: 32 columns per block, 32 threads per column, a 32-way sum in shared memory | see 02_weighted_sum/README.md §Why partial sums and not atomics | test: test_02 ws_cuda/*
    __shared__ float red[RED_TY][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t d = (int64_t)blockIdx.x * 32 + tx;
    float s = 0.0f;
    if (d < D) {
#pragma unroll 8
        for (int64_t t = ty; t < n; t += RED_TY) s += partials[t * D + d];
    }
    red[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && d < D) {
        for (int k = 1; k < RED_TY; k++) s += red[k][tx];
        grad_w[d] = from_f32<T>(s);
    }
    // STUDENT-END(02.reduce_kernel)
}

// ================================================================ launchers
// Every (dtype, vector width, D_TILE) is its own kernel; these switches pick one.
template <typename T, int VEC>
static void launch_forward_v(const T* x, int64_t sx, const T* w, T* y, int64_t ROWS, int64_t D,
                             const ws_plan_t* p, cudaStream_t s) {
    // STUDENT-BEGIN(02.launch_forward): launch ws_forward_kernel<T, VEC, D_TILE> for p->d_tile in {128, 256, 512, 1024} on grid n_row_tiles, then CUDA_CHECK_LAST | see 02_weighted_sum/README.md §How the grid maps to the data | test: test_02 ws_cuda/*
    const dim3 grid((unsigned)p->n_row_tiles), block(WS_THREADS);
    switch (p->d_tile) {
#define WS_FWD_CASE(DT)                                                                          \
    case DT:                                                                                     \
        ws_forward_kernel<T, (VEC < DT / 32 ? VEC : DT / 32), DT>                                \
            <<<grid, block, 0, s>>>(x, sx, w, y, ROWS, D, p->rows_tile);                         \
        break;
        WS_FWD_CASE(128)
        WS_FWD_CASE(256)
        WS_FWD_CASE(512)
        WS_FWD_CASE(1024)
#undef WS_FWD_CASE
        default: DIE("weighted_sum: D_TILE %d is not one of " WS_D_TILE_CHOICES, p->d_tile);
    }
    CUDA_CHECK_LAST();
    // STUDENT-END(02.launch_forward)
}

template <typename T, int VEC>
static void launch_backward_v(const T* x, int64_t sx, const T* w, const T* gy, T* gx, int64_t sgx,
                              float* gw_out, int64_t ROWS, int64_t D, const ws_plan_t* p,
                              int atomic, cudaStream_t s) {
    // STUDENT-BEGIN(02.launch_backward): launch ws_backward_kernel<T, VEC, D_TILE> on grid (n_row_tiles, n_d_tiles) for each D_TILE, then CUDA_CHECK_LAST | see 02_weighted_sum/README.md §Why partial sums and not atomics | test: test_02 ws_cuda/*
    const dim3 grid((unsigned)p->n_row_tiles, (unsigned)p->n_d_tiles), block(WS_THREADS);
    switch (p->d_tile) {
#define WS_BWD_CASE(DT)                                                                          \
    case DT:                                                                                     \
        ws_backward_kernel<T, (VEC < DT / 32 ? VEC : DT / 32), DT><<<grid, block, 0, s>>>(       \
            x, sx, w, gy, gx, sgx, gw_out, ROWS, D, p->rows_tile, atomic);                       \
        break;
        WS_BWD_CASE(128)
        WS_BWD_CASE(256)
        WS_BWD_CASE(512)
        WS_BWD_CASE(1024)
#undef WS_BWD_CASE
        default: DIE("weighted_sum: D_TILE %d is not one of " WS_D_TILE_CHOICES, p->d_tile);
    }
    CUDA_CHECK_LAST();
    // STUDENT-END(02.launch_backward)
}

extern "C" int ws_uses_vector_path(dtype_t dt, int d_tile, const void* const* ptrs, int nptrs,
                                   const int64_t* strides, int nstrides, int64_t D) {
    const int vec = ws_vec_elems(dt, d_tile);
    const size_t align = (size_t)vec * dtype_size(dt);
    if (vec == 1 || D % vec != 0) return 0;
    for (int i = 0; i < nptrs; i++)
        if ((uintptr_t)ptrs[i] % align != 0) return 0;
    for (int i = 0; i < nstrides; i++)
        if (strides[i] % vec != 0) return 0;
    return 1;
}

extern "C" void ws_forward_cuda(dtype_t dt, const void* x, int64_t sx, const void* w, void* y,
                                int64_t ROWS, int64_t D, const ws_plan_t* plan,
                                cudaStream_t stream) {
    const void* ptrs[] = {x, w};
    const int vec_ok = ws_uses_vector_path(dt, plan->d_tile, ptrs, 2, &sx, 1, D);
    if (dt == DT_F32) {
        if (vec_ok)
            launch_forward_v<float, 4>((const float*)x, sx, (const float*)w, (float*)y, ROWS, D,
                                       plan, stream);
        else
            launch_forward_v<float, 1>((const float*)x, sx, (const float*)w, (float*)y, ROWS, D,
                                       plan, stream);
    } else if (dt == DT_BF16) {
        typedef __nv_bfloat16 B;
        if (vec_ok)
            launch_forward_v<B, 8>((const B*)x, sx, (const B*)w, (B*)y, ROWS, D, plan, stream);
        else
            launch_forward_v<B, 1>((const B*)x, sx, (const B*)w, (B*)y, ROWS, D, plan, stream);
    } else {
        DIE("weighted_sum: dtype %s is not supported (f32 or bf16)", dtype_name(dt));
    }
}

template <typename T>
static void backward_t(const T* x, int64_t sx, const T* w, const T* gy, T* gx, int64_t sgx, T* gw,
                       int64_t ROWS, int64_t D, const ws_plan_t* plan, ws_gradw_mode_t mode,
                       void* workspace, int vec_ok, cudaStream_t stream) {
    const int atomic = mode == WS_GRADW_ATOMIC;
    // Where the block-level sums of grad_w go: the partials buffer, or one fp32 accumulator
    // (grad_w itself when it is f32, so the atomic variant needs no second kernel then).
    float* gw_out = (float*)workspace;
    if (atomic && sizeof(T) == 4) gw_out = (float*)gw;
    if (atomic) CUDA_CHECK(cudaMemsetAsync(gw_out, 0, (size_t)D * sizeof(float), stream));
    if (vec_ok)
        launch_backward_v<T, 16 / sizeof(T)>(x, sx, w, gy, gx, sgx, gw_out, ROWS, D, plan, atomic,
                                             stream);
    else
        launch_backward_v<T, 1>(x, sx, w, gy, gx, sgx, gw_out, ROWS, D, plan, atomic, stream);

    const int64_t n = atomic ? 1 : plan->n_row_tiles;
    if (!(atomic && sizeof(T) == 4)) {
        ws_reduce_kernel<T><<<(unsigned)((D + 31) / 32), 32 * RED_TY, 0, stream>>>(
            (const float*)workspace, gw, n, D);
        CUDA_CHECK_LAST();
    }
}

extern "C" void ws_backward_cuda(dtype_t dt, const void* x, int64_t sx, const void* w,
                                 const void* grad_y, void* grad_x, int64_t sgx, void* grad_w,
                                 int64_t ROWS, int64_t D, const ws_plan_t* plan,
                                 ws_gradw_mode_t mode, void* workspace, cudaStream_t stream) {
    const void* ptrs[] = {x, w, grad_x};
    const int64_t strides[] = {sx, sgx};
    const int vec_ok = ws_uses_vector_path(dt, plan->d_tile, ptrs, 3, strides, 2, D);
    if (ws_workspace_bytes(plan, D, dt, mode) > 0 && workspace == NULL)
        DIE("weighted_sum: the backward needs a workspace of %zu bytes",
            ws_workspace_bytes(plan, D, dt, mode));
    if (dt == DT_F32)
        backward_t<float>((const float*)x, sx, (const float*)w, (const float*)grad_y,
                          (float*)grad_x, sgx, (float*)grad_w, ROWS, D, plan, mode, workspace,
                          vec_ok, stream);
    else if (dt == DT_BF16) {
        typedef __nv_bfloat16 B;
        backward_t<B>((const B*)x, sx, (const B*)w, (const B*)grad_y, (B*)grad_x, sgx, (B*)grad_w,
                      ROWS, D, plan, mode, workspace, vec_ok, stream);
    } else {
        DIE("weighted_sum: dtype %s is not supported (f32 or bf16)", dtype_name(dt));
    }
}

// ================================================================ random fill (benchmark)
template <typename T>
__global__ void ws_fill_kernel(T* p, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = from_f32<T>(lo + (hi - lo) * rng_uniform(seed, (uint64_t)i));
}

extern "C" void ws_fill_uniform_cuda(dtype_t dt, void* p, int64_t n, uint64_t seed, float lo,
                                     float hi, cudaStream_t stream) {
    const unsigned grid = (unsigned)(n / WS_THREADS + 1 < 65536 ? n / WS_THREADS + 1 : 65536);
    if (dt == DT_F32)
        ws_fill_kernel<float><<<grid, WS_THREADS, 0, stream>>>((float*)p, n, seed, lo, hi);
    else if (dt == DT_BF16)
        ws_fill_kernel<__nv_bfloat16>
            <<<grid, WS_THREADS, 0, stream>>>((__nv_bfloat16*)p, n, seed, lo, hi);
    else
        DIE("ws_fill_uniform_cuda: dtype %s is not supported", dtype_name(dt));
    CUDA_CHECK_LAST();
}
