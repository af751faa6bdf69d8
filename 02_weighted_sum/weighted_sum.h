// 02_weighted_sum: y = (x * w).sum(-1) and its backward, the workbook's first kernel.
//
// Dimension letters (used in every file of this stage):
//   D      length of the last axis of x, and of w
//   ROWS   product of x's leading axes: x [..., D] is read as ROWS rows of D
//   ROWS_TILE, D_TILE   the tile a block works on (README, "How the grid maps to the data")
//
// Forward   y[r]        = sum_d x[r, d] * w[d]                    y      [...]      (x's leading shape)
// Backward  grad_x[r, d] = grad_y[r] * w[d]                       grad_x [..., D]
//           grad_w[d]    = sum_r x[r, d] * grad_y[r]              grad_w [D]
//
// Dtypes: every tensor of one call has the same dtype, f32 or bf16. Accumulation is always
// fp32 (the reference accumulates in double); the per-row-tile grad_w partials are fp32 and
// the final grad_w is rounded to x's dtype.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WS_THREADS 256  // threads per block in every kernel of this stage (8 warps)
// D_TILE must be one of these (each is a separately compiled kernel, so the per-thread
// register arrays have a fixed size and the loads of one tile can all be in flight at once).
#define WS_D_TILE_CHOICES "128|256|512|1024"
#define WS_ROWS_TILE_MAX 65536

// How grad_w's sum over rows is finished.
typedef enum {
    WS_GRADW_PARTIALS = 0,  // each row tile writes its partial row to a [n_row_tiles, D] buffer,
                            // a second kernel sums the rows: deterministic (the default)
    WS_GRADW_ATOMIC = 1,    // each row tile atomically adds its partial row into one fp32 [D]
                            // accumulator: fewer bytes, but the order of additions varies
} ws_gradw_mode_t;

typedef struct {
    int rows_tile;               // ROWS_TILE, rows per block; 0 = default (see ws_plan_*)
    int d_tile;                  // D_TILE, columns per step; 0 = default; one of WS_D_TILE_CHOICES
    ws_gradw_mode_t gradw_mode;  // backward only
    cudaStream_t stream;         // CUDA only; 0 = the default stream
    void* workspace;             // CUDA backward only: device scratch of at least
    size_t workspace_bytes;      //   ws_backward_workspace_bytes(); NULL = allocated per call
} ws_config_t;

ws_config_t ws_config_default(void);

// ---------------------------------------------------------------- the tensor API
// x: [..., D] with unit stride along D; its leading axes must flatten to rows with one row
// stride (a contiguous tensor, or a slice of rows of a wider one). y, grad_y: x's leading
// shape, contiguous. w, grad_w: [D], contiguous. grad_x: x's shape, rows may be strided.
// All tensors on one device (DEV_CPU runs the reference, DEV_CUDA the kernels) and of one
// dtype. CUDA calls are asynchronous on cfg->stream. cfg may be NULL (defaults).
// Returns 0, or -1 with a one-line reason in err (nothing is written then).
int weighted_sum_forward(const tensor_t* x, const tensor_t* w, tensor_t* y, const ws_config_t* cfg,
                         char* err, size_t errlen);
int weighted_sum_backward(const tensor_t* x, const tensor_t* w, const tensor_t* grad_y,
                          tensor_t* grad_x, tensor_t* grad_w, const ws_config_t* cfg, char* err,
                          size_t errlen);

// x's rows as (ROWS, D, row stride in elements). 0, or -1 with a reason naming `name`.
int ws_flatten_rows(const tensor_t* x, const char* name, int64_t* rows, int64_t* d,
                    int64_t* row_stride, char* err, size_t errlen);

// ---------------------------------------------------------------- tiles
typedef struct {
    int rows_tile, d_tile;  // ROWS_TILE, D_TILE
    int64_t n_row_tiles;    // ceil(ROWS / ROWS_TILE): grid.x
    int64_t n_d_tiles;      // ceil(D / D_TILE): forward walks them in a loop, backward's grid.y
} ws_plan_t;

// Defaults: forward ROWS_TILE 8 (one row per warp), D_TILE 512 (f32) / 1024 (bf16), i.e. 64
// bytes per lane in flight per step. Backward D_TILE 256 and ROWS_TILE chosen so that the grid
// has about 4 waves of blocks on `sm_count` SMs, within [32, 512] (fewer, taller row tiles mean
// a smaller partials buffer). 0 or -1 with a reason (bad tile sizes, grid too large).
int ws_plan_forward(int64_t rows, int64_t d, dtype_t dt, const ws_config_t* cfg, ws_plan_t* out,
                    char* err, size_t errlen);
int ws_plan_backward(int64_t rows, int64_t d, dtype_t dt, const ws_config_t* cfg, int sm_count,
                     ws_plan_t* out, char* err, size_t errlen);
// Bytes of device scratch the backward needs: n_row_tiles * D * 4 for partials, D * 4 for
// atomics into a bf16 grad_w (fp32 atomics go straight into an f32 grad_w: 0).
size_t ws_workspace_bytes(const ws_plan_t* plan, int64_t d, dtype_t dt, ws_gradw_mode_t mode);
// The same for a backward call with these tensors' sizes on the current GPU.
size_t ws_backward_workspace_bytes(int64_t rows, int64_t d, dtype_t dt, const ws_config_t* cfg);

// Elements per vector load for a D_TILE: 16 bytes, but at most D_TILE / 32 (one warp spans a
// D tile in the forward). The kernels fall back to 1 (scalar loads) when D or a row stride is
// not a multiple of it, or a pointer is not aligned to it.
int ws_vec_elems(dtype_t dt, int d_tile);

// ---------------------------------------------------------------- reference (weighted_sum_ref.c)
// Plain C on fp32 arrays, double accumulation; x rows are x + r * sx.
//   x [ROWS, D] (row stride sx), w [D], y [ROWS]
void weighted_sum_forward_ref(const float* x, int64_t sx, const float* w, float* y, int64_t ROWS,
                              int64_t D);
//   grad_y [ROWS], grad_x [ROWS, D] (row stride sgx), grad_w [D]
void weighted_sum_backward_ref(const float* x, int64_t sx, const float* w, const float* grad_y,
                               float* grad_x, int64_t sgx, float* grad_w, int64_t ROWS, int64_t D);

// ---------------------------------------------------------------- CUDA launchers (raw pointers)
// All asynchronous on `stream`; plans from ws_plan_*; pointers on the current device.
void ws_forward_cuda(dtype_t dt, const void* x, int64_t sx, const void* w, void* y, int64_t ROWS,
                     int64_t D, const ws_plan_t* plan, cudaStream_t stream);
// workspace: ws_workspace_bytes(plan, D, dt, mode) bytes (may be NULL when that is 0).
void ws_backward_cuda(dtype_t dt, const void* x, int64_t sx, const void* w, const void* grad_y,
                      void* grad_x, int64_t sgx, void* grad_w, int64_t ROWS, int64_t D,
                      const ws_plan_t* plan, ws_gradw_mode_t mode, void* workspace,
                      cudaStream_t stream);
// Which load path a call takes (for the demo and the tests): 1 = vector, 0 = scalar.
int ws_uses_vector_path(dtype_t dt, int d_tile, const void* const* ptrs, int nptrs,
                        const int64_t* strides, int nstrides, int64_t D);
// The SM count of the current device (cached after the first call).
int ws_sm_count(void);
// Fills n elements of dtype dt on the device with uniform [lo, hi) numbers from rng.h's
// counter-based generator (stream element i = rng_uniform(seed, i)); for the benchmark.
void ws_fill_uniform_cuda(dtype_t dt, void* p, int64_t n, uint64_t seed, float lo, float hi,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
