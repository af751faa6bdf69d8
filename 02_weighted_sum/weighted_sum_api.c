// The tensor API of the weighted sum: checks shapes, dtypes, devices and strides, picks the
// tile plan, then runs the reference (CPU tensors) or the CUDA kernels (GPU tensors).
// Every rejected input gets one line that says what was wrong and what is allowed.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "02_weighted_sum/weighted_sum.h"
#include "common/check.h"
#include "common/gpu.h"

ws_config_t ws_config_default(void) {
    ws_config_t c;
    memset(&c, 0, sizeof c);
    c.gradw_mode = WS_GRADW_PARTIALS;
    return c;
}

int ws_vec_elems(dtype_t dt, int d_tile) {
    const int v = 16 / (int)dtype_size(dt);
    return v < d_tile / 32 ? v : d_tile / 32;
}

static int d_tile_ok(int t) { return t == 128 || t == 256 || t == 512 || t == 1024; }

int ws_flatten_rows(const tensor_t* x, const char* name, int64_t* rows, int64_t* d,
                    int64_t* row_stride, char* err, size_t errlen) {
    char sh[128];
    if (x->data == NULL) return set_err(err, errlen, "%s has no data (NULL pointer)", name);
    if (x->rank < 1)
        return set_err(err, errlen, "%s must have at least one axis [..., D], got a scalar", name);
    const int k = x->rank - 1;
    int64_t n = 1;
    for (int i = 0; i < k; i++) n *= x->shape[i];
    if (x->shape[k] == 0 || n == 0)
        return set_err(err, errlen, "%s is empty (shape %s): the weighted sum needs ROWS >= 1 and D >= 1",
                   name, tensor_shape_str(x, sh, sizeof sh));
    if (x->shape[k] > 1 && x->stride[k] != 1)
        return set_err(err, errlen, "%s must have unit stride along its last axis D (stride is %lld)",
                   name, (long long)x->stride[k]);
    // The leading axes must collapse to one row index with one stride: each axis's stride is
    // the next one's stride times its length (axes of length 1 do not matter).
    int64_t rs = x->shape[k];  // a single row: any stride will do
    int last = -1;
    for (int i = k - 1; i >= 0; i--) {
        if (x->shape[i] == 1) continue;
        if (last < 0) {
            rs = x->stride[i];
        } else if (x->stride[i] != x->stride[last] * x->shape[last]) {
            return set_err(err, errlen,
                       "%s's leading axes do not flatten to rows with one stride (shape %s); "
                       "make it contiguous first", name, tensor_shape_str(x, sh, sizeof sh));
        }
        last = i;
    }
    if (last >= 0 && rs < x->shape[k])
        return set_err(err, errlen, "%s's rows overlap (row stride %lld < D = %lld)", name,
                   (long long)rs, (long long)x->shape[k]);
    *rows = n;
    *d = x->shape[k];
    *row_stride = rs;
    return 0;
}

// t must have exactly x's leading shape (rank - 1 axes) and be contiguous.
static int check_rows_vec(const tensor_t* t, const char* name, const tensor_t* x, char* err,
                          size_t errlen) {
    char a[128], b[128], c[128];
    int ok = t->rank == x->rank - 1;
    for (int i = 0; ok && i < t->rank; i++) ok = t->shape[i] == x->shape[i];
    if (!ok) {
        tensor_t lead = *x;
        lead.rank = x->rank - 1;
        return set_err(err, errlen, "%s has shape %s, expected %s (x's shape %s without its last axis)",
                   name, tensor_shape_str(t, a, sizeof a), tensor_shape_str(&lead, b, sizeof b),
                   tensor_shape_str(x, c, sizeof c));
    }
    if (t->data == NULL) return set_err(err, errlen, "%s has no data (NULL pointer)", name);
    if (!tensor_is_contiguous(t)) return set_err(err, errlen, "%s must be contiguous", name);
    return 0;
}

// w and grad_w: [D], contiguous.
static int check_d_vec(const tensor_t* t, const char* name, int64_t D, char* err, size_t errlen) {
    char a[128];
    if (t->rank != 1 || t->shape[0] != D)
        return set_err(err, errlen,
                   "%s has shape %s, but x's last axis is D = %lld: %s must have shape [%lld]",
                   name, tensor_shape_str(t, a, sizeof a), (long long)D, name, (long long)D);
    if (t->data == NULL) return set_err(err, errlen, "%s has no data (NULL pointer)", name);
    if (t->shape[0] > 1 && t->stride[0] != 1) return set_err(err, errlen, "%s must be contiguous", name);
    return 0;
}

static int check_same(const tensor_t* t, const char* name, const tensor_t* x, char* err,
                      size_t errlen) {
    if (t->dtype != x->dtype)
        return set_err(err, errlen, "dtype mismatch: x is %s but %s is %s (all tensors must share one "
                   "dtype, f32 or bf16)", dtype_name(x->dtype), name, dtype_name(t->dtype));
    if (t->device != x->device)
        return set_err(err, errlen, "device mismatch: x is on %s but %s is on %s",
                   device_name(x->device), name, device_name(t->device));
    return 0;
}

static int check_dtype(const tensor_t* x, char* err, size_t errlen) {
    if (x->dtype != DT_F32 && x->dtype != DT_BF16)
        return set_err(err, errlen, "x has dtype %s; the weighted sum supports f32 and bf16",
                   dtype_name(x->dtype));
    return 0;
}

int ws_sm_count(void) {
    static int cached = 0;
    if (cached == 0 && gpu_count() > 0) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, dev));
    }
    return cached > 0 ? cached : 132;  // no GPU: plan as for an H100 (only the demo asks)
}

static int plan_common(int64_t rows, int64_t d, const ws_config_t* cfg, int d_tile_default,
                       ws_plan_t* out, char* err, size_t errlen) {
    const int rt = cfg ? cfg->rows_tile : 0;
    const int dt = cfg && cfg->d_tile ? cfg->d_tile : d_tile_default;
    if (rt < 0 || rt > WS_ROWS_TILE_MAX)
        return set_err(err, errlen, "ROWS_TILE %d is out of range (1..%d, or 0 for the default)", rt,
                   WS_ROWS_TILE_MAX);
    if (!d_tile_ok(dt))
        return set_err(err, errlen, "D_TILE %d is not allowed (one of " WS_D_TILE_CHOICES
                   ", or 0 for the default)", dt);
    out->rows_tile = rt;
    out->d_tile = dt;
    out->n_d_tiles = (d + dt - 1) / dt;
    (void)rows;
    return 0;
}

int ws_plan_forward(int64_t rows, int64_t d, dtype_t dt, const ws_config_t* cfg, ws_plan_t* out,
                    char* err, size_t errlen) {
    if (plan_common(rows, d, cfg, dt == DT_BF16 ? 1024 : 512, out, err, errlen)) return -1;
    // ROWS_TILE 8: each of the 8 warps takes one row. (A larger tile gives each warp more rows,
    // one after another; it does not put more loads in flight.)
    if (out->rows_tile == 0) out->rows_tile = WS_THREADS / 32;
    out->n_row_tiles = (rows + out->rows_tile - 1) / out->rows_tile;
    if (out->n_row_tiles > 2147483647LL)
        return set_err(err, errlen, "too many row tiles (%lld) for one grid; use a larger ROWS_TILE",
                   (long long)out->n_row_tiles);
    return 0;
}

int ws_plan_backward(int64_t rows, int64_t d, dtype_t dt, const ws_config_t* cfg, int sm_count,
                     ws_plan_t* out, char* err, size_t errlen) {
    (void)dt;
    if (plan_common(rows, d, cfg, 256, out, err, errlen)) return -1;
    if (out->rows_tile == 0) {
        // About 4 waves of blocks (8 blocks of 256 threads fit on an SM): enough blocks to
        // keep every SM busy to the end, while each row tile stays tall, so the partials
        // buffer [n_row_tiles, D] stays a small fraction of x.
        const int64_t want_blocks = 4LL * 8 * (sm_count > 0 ? sm_count : 132);
        int64_t want_row_tiles = (want_blocks + out->n_d_tiles - 1) / out->n_d_tiles;
        int64_t t = (rows + want_row_tiles - 1) / want_row_tiles;
        if (t < 32) t = 32;
        if (t > 512) t = 512;
        out->rows_tile = (int)t;
    }
    out->n_row_tiles = (rows + out->rows_tile - 1) / out->rows_tile;
    if (out->n_row_tiles > 2147483647LL)
        return set_err(err, errlen, "too many row tiles (%lld) for one grid; use a larger ROWS_TILE",
                   (long long)out->n_row_tiles);
    if (out->n_d_tiles > 65535)
        return set_err(err, errlen, "D = %lld needs %lld D tiles of %d, more than a grid allows "
                   "(65535); use a larger D_TILE", (long long)d, (long long)out->n_d_tiles,
                   out->d_tile);
    return 0;
}

size_t ws_workspace_bytes(const ws_plan_t* plan, int64_t d, dtype_t dt, ws_gradw_mode_t mode) {
    if (mode == WS_GRADW_ATOMIC) return dt == DT_F32 ? 0 : (size_t)d * sizeof(float);
    return (size_t)plan->n_row_tiles * (size_t)d * sizeof(float);
}

size_t ws_backward_workspace_bytes(int64_t rows, int64_t d, dtype_t dt, const ws_config_t* cfg) {
    ws_plan_t p;
    char err[256];
    if (ws_plan_backward(rows, d, dt, cfg, ws_sm_count(), &p, err, sizeof err)) DIE("%s", err);
    return ws_workspace_bytes(&p, d, dt, cfg ? cfg->gradw_mode : WS_GRADW_PARTIALS);
}

// ---------------------------------------------------------------- CPU path: the reference
// bf16 tensors are widened to f32, run through the reference and rounded back.
static float* host_f32_rows(const tensor_t* t, int64_t rows, int64_t d, int64_t rs) {
    float* out = (float*)malloc((size_t)(rows * d) * sizeof(float));
    if (!out) DIE("out of memory: %lld floats", (long long)(rows * d));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) {
            const size_t i = (size_t)(r * rs + j);
            out[r * d + j] = t->dtype == DT_F32 ? ((const float*)t->data)[i]
                                                 : f32_from_bf16(((const uint16_t*)t->data)[i]);
        }
    return out;
}

static void store_rows(tensor_t* t, const float* src, int64_t rows, int64_t d, int64_t rs) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) {
            const size_t i = (size_t)(r * rs + j);
            if (t->dtype == DT_F32)
                ((float*)t->data)[i] = src[r * d + j];
            else
                ((uint16_t*)t->data)[i] = bf16_from_f32(src[r * d + j]);
        }
}

int weighted_sum_forward(const tensor_t* x, const tensor_t* w, tensor_t* y, const ws_config_t* cfg,
                         char* err, size_t errlen) {
    int64_t ROWS, D, sx;
    if (ws_flatten_rows(x, "x", &ROWS, &D, &sx, err, errlen)) return -1;
    if (check_dtype(x, err, errlen) || check_same(w, "w", x, err, errlen) ||
        check_same(y, "y", x, err, errlen) || check_d_vec(w, "w", D, err, errlen) ||
        check_rows_vec(y, "y", x, err, errlen))
        return -1;
    ws_plan_t plan;
    if (ws_plan_forward(ROWS, D, x->dtype, cfg, &plan, err, errlen)) return -1;

    if (x->device == DEV_CUDA) {
        ws_forward_cuda(x->dtype, x->data, sx, w->data, y->data, ROWS, D, &plan,
                        cfg ? cfg->stream : 0);
        return 0;
    }
    if (x->dtype == DT_F32) {
        weighted_sum_forward_ref((const float*)x->data, sx, (const float*)w->data, (float*)y->data,
                                 ROWS, D);
        return 0;
    }
    float* xf = host_f32_rows(x, ROWS, D, sx);
    float* wf = host_f32_rows(w, 1, D, D);
    float* yf = (float*)malloc((size_t)ROWS * sizeof(float));
    if (!yf) DIE("out of memory: %lld floats", (long long)ROWS);
    weighted_sum_forward_ref(xf, D, wf, yf, ROWS, D);
    store_rows(y, yf, 1, ROWS, ROWS);
    free(xf), free(wf), free(yf);
    return 0;
}

int weighted_sum_backward(const tensor_t* x, const tensor_t* w, const tensor_t* grad_y,
                          tensor_t* grad_x, tensor_t* grad_w, const ws_config_t* cfg, char* err,
                          size_t errlen) {
    int64_t ROWS, D, sx, gROWS, gD, sgx;
    if (ws_flatten_rows(x, "x", &ROWS, &D, &sx, err, errlen)) return -1;
    if (check_dtype(x, err, errlen) || check_same(w, "w", x, err, errlen) ||
        check_same(grad_y, "grad_y", x, err, errlen) ||
        check_same(grad_x, "grad_x", x, err, errlen) ||
        check_same(grad_w, "grad_w", x, err, errlen) || check_d_vec(w, "w", D, err, errlen) ||
        check_d_vec(grad_w, "grad_w", D, err, errlen) ||
        check_rows_vec(grad_y, "grad_y", x, err, errlen))
        return -1;
    if (!tensor_same_shape(grad_x, x)) {
        char a[128], b[128];
        return set_err(err, errlen, "grad_x has shape %s, expected x's shape %s",
                   tensor_shape_str(grad_x, a, sizeof a), tensor_shape_str(x, b, sizeof b));
    }
    if (ws_flatten_rows(grad_x, "grad_x", &gROWS, &gD, &sgx, err, errlen)) return -1;
    const ws_gradw_mode_t mode = cfg ? cfg->gradw_mode : WS_GRADW_PARTIALS;
    if (mode != WS_GRADW_PARTIALS && mode != WS_GRADW_ATOMIC)
        return set_err(err, errlen, "gradw_mode %d is not one of partials (0), atomic (1)", (int)mode);

    if (x->device == DEV_CUDA) {
        ws_plan_t plan;
        if (ws_plan_backward(ROWS, D, x->dtype, cfg, ws_sm_count(), &plan, err, errlen)) return -1;
        const size_t need = ws_workspace_bytes(&plan, D, x->dtype, mode);
        void* ws = cfg ? cfg->workspace : NULL;
        if (ws && cfg->workspace_bytes < need)
            return set_err(err, errlen, "workspace has %zu bytes, the backward needs %zu",
                       cfg->workspace_bytes, need);
        const int own = ws == NULL && need > 0;
        if (own) ws = mem_alloc(DEV_CUDA, need, MEM_WORKSPACE);
        ws_backward_cuda(x->dtype, x->data, sx, w->data, grad_y->data, grad_x->data, sgx,
                         grad_w->data, ROWS, D, &plan, mode, ws, cfg ? cfg->stream : 0);
        if (own) {
            // mem_free would release memory the queued kernels still use: wait for them.
            CUDA_CHECK(cudaStreamSynchronize(cfg ? cfg->stream : 0));
            mem_free(ws);
        }
        return 0;
    }
    // Tile sizes mean nothing to the reference, but a bad one is still reported on the CPU.
    ws_plan_t plan;
    if (ws_plan_backward(ROWS, D, x->dtype, cfg, 132, &plan, err, errlen)) return -1;
    if (x->dtype == DT_F32) {
        weighted_sum_backward_ref((const float*)x->data, sx, (const float*)w->data,
                                  (const float*)grad_y->data, (float*)grad_x->data, sgx,
                                  (float*)grad_w->data, ROWS, D);
        return 0;
    }
    float* xf = host_f32_rows(x, ROWS, D, sx);
    float* wf = host_f32_rows(w, 1, D, D);
    float* gyf = host_f32_rows(grad_y, 1, ROWS, ROWS);
    float* gxf = (float*)malloc((size_t)(ROWS * D) * sizeof(float));
    float* gwf = (float*)malloc((size_t)D * sizeof(float));
    if (!gxf || !gwf) DIE("out of memory: %lld floats", (long long)(ROWS * D + D));
    weighted_sum_backward_ref(xf, D, wf, gyf, gxf, D, gwf, ROWS, D);
    store_rows(grad_x, gxf, ROWS, D, sgx);
    store_rows(grad_w, gwf, 1, D, D);
    free(xf), free(wf), free(gyf), free(gxf), free(gwf);
    return 0;
}
