// The host half of TMA (common/tma.cuh is the device half): a tensor map describes a global
// [B, H, N, d] bf16 view to the tensor memory accelerator, and a kernel takes it as a
// `const __grid_constant__ CUtensorMap` parameter. The encoder is the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query, so nothing here links
// against libcuda and the CPU-only build and tests run without a driver.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

// What a [B, H, N, d] view (strides in elements: batch, head, row; the last axis contiguous)
// becomes as a 4-D tensor map, innermost first: dims (d, N, H, B), byte strides of the three
// outer axes. A dim of extent 1 never moves, so its stride is free; it is given the next inner
// axis's span, since the driver wants strides that are non-zero multiples of 16 bytes.
typedef struct {
    uint64_t dims[4];
    uint64_t strides[3];  // bytes: row, head, batch
} tma_view_t;

// Pure (no GPU, tested on the CPU): 0, or -1 with a one-line reason when TMA cannot describe the
// view: a stride of a moving axis that is zero, not a multiple of 8 elements (16 bytes), or at
// or above 2^40 bytes; a d that is not a multiple of 8 in [8, 256]. The box's limits are
// tma_map_bf16_4d's to check.
int tma_view_bhnd(int B, int H, int N, int d, const int64_t s[3], tma_view_t* v, char* err, size_t errlen);

// Encodes a bf16 tensor map of the view with a box of box[0] x box[1] (columns x rows, one head)
// and the 128-byte swizzle (box[0] * 2 must be 128 or less): 0, or -1 with a reason (the view's,
// the box's, or the driver's status).
int tma_map_bf16_4d(CUtensorMap* map, const void* base, const tma_view_t* v, const uint32_t box[2], char* err,
                    size_t errlen);

// Encodes an fp32 tensor map of a contiguous [dims[2]][dims[1]][dims[0]] array (dims[0]
// innermost) with a box of box[0] x box[1] x 1 and the 128-byte swizzle (box[0] * 4 must be 16
// to 128 bytes): the destination of TMA's reduce-add (cp.reduce.async.bulk.tensor), e.g. an fp32
// gradient accumulator [B*H][N][d] that tiles of rows are added into. Elements of a box outside
// the array are neither read nor written. 0, or -1 with a reason (the shape's or the driver's).
int tma_map_f32_3d(CUtensorMap* map, const void* base, const uint64_t dims[3], const uint32_t box[2], char* err,
                   size_t errlen);
// Encodes an fp32 tensor map of a contiguous [rows][cols] array, no swizzle, with a box of
// box_cols x 1 (one row's run of columns, e.g. a query tile's log-sum-exps): cols * 4 and
// box_cols * 4 must be multiples of 16 bytes, box_cols at most 256. Columns past cols arrive as
// zeros. 0, or -1 with a reason (the shape's or the driver's).
int tma_map_f32_rows(CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows, uint32_t box_cols, char* err,
                     size_t errlen);

#ifdef __cplusplus
}
#endif
