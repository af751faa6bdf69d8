// A small tensor: a buffer on the host or the GPU with dtype, shape and strides (in elements).
// Kernels take raw pointers plus sizes; tensors carry them across APIs and files.
#pragma once
#include <stdint.h>
#include <stddef.h>
#include "common/dtype.h"
#include "common/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TENSOR_MAX_RANK 8

typedef struct {
    void* data;
    dtype_t dtype;
    device_t device;
    int rank;
    int64_t shape[TENSOR_MAX_RANK];
    int64_t stride[TENSOR_MAX_RANK];  // elements, not bytes
    int owns;                         // 1: tensor_free releases data through mem_free
} tensor_t;

// A new contiguous (C-order) tensor; contents undefined. Dies on out-of-memory.
tensor_t tensor_alloc(device_t dev, dtype_t dt, int rank, const int64_t* shape, mem_tag_t tag);
// Like tensor_alloc but returns a tensor with data == NULL on out-of-memory.
tensor_t tensor_try_alloc(device_t dev, dtype_t dt, int rank, const int64_t* shape, mem_tag_t tag);
// A view of memory someone else owns; stride NULL means contiguous.
tensor_t tensor_view(void* data, device_t dev, dtype_t dt, int rank, const int64_t* shape,
                     const int64_t* stride);
void tensor_free(tensor_t* t);

int64_t tensor_numel(const tensor_t* t);
size_t tensor_nbytes(const tensor_t* t);  // numel * element size (contiguous size)
int tensor_is_contiguous(const tensor_t* t);
int tensor_same_shape(const tensor_t* a, const tensor_t* b);
const char* tensor_shape_str(const tensor_t* t, char* buf, size_t len);  // "[4, 128, 64]"

// Copies between contiguous tensors of the same dtype and element count, any devices.
void tensor_copy(tensor_t* dst, const tensor_t* src);
// A contiguous copy on `dev` (tag MEM_OTHER).
tensor_t tensor_to(const tensor_t* src, device_t dev);
// Fill every byte with 0xFF: NaN for f32/bf16, -1 for integers. Tests poison outputs so that
// an element the kernel forgot to write fails the comparison.
void tensor_poison(tensor_t* t);
// A host f32 copy (bf16 widened, ints converted): what tests compare.
tensor_t tensor_to_host_f32(const tensor_t* src);

// n standard-normal values (common/rng.h, stream `seed`) in a new device buffer of dtype
// DT_F32 or DT_BF16 (drawn in fp32, rounded to bf16): the random inputs of the benchmarks.
// NULL when the GPU is out of memory (nothing left allocated); synchronous.
void* tensor_randn_dev(dtype_t dt, size_t n, uint64_t seed, mem_tag_t tag);

#ifdef __cplusplus
}
#endif
