// .npy files (NumPy format 1.0/2.0/3.0), C order, little-endian: float32 '<f4', int32 '<i4',
// int64 '<i8', and uint16 '<u2' which holds bf16 bits. Any rank up to TENSOR_MAX_RANK.
// Every malformed file is rejected with a reason: bad magic, unsupported version or dtype,
// Fortran order, a header that does not parse, truncated data, a shape not what was asked.
// Data after the array is rejected too ("N bytes of trailing data"): a file longer than its
// header says most likely has a wrong shape. A zero-sized array still gets a non-NULL data.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dtype_t dtype;
    int rank;
    int64_t shape[TENSOR_MAX_RANK];
    void* data;    // malloc'd, nbytes long
    size_t nbytes;
} npy_array_t;

// Parse a whole file image. 0 on success; -1 with a reason in err (no file name) on failure.
int npy_parse(const void* buf, size_t len, npy_array_t* out, char* err, size_t errlen);
// Read a file. 0 on success; -1 with "path: reason" in err.
int npy_read(const char* path, npy_array_t* out, char* err, size_t errlen);
void npy_array_free(npy_array_t* a);
// Write atomically (temporary + rename; the parent directory is created). Always format 1.0,
// header padded to 64 bytes as numpy does. 0 on success; -1 with "path: reason" in err.
int npy_write(const char* path, dtype_t dt, int rank, const int64_t* shape, const void* data,
              char* err, size_t errlen);

// Checks a parsed array against what the caller wants: dtype (or -1 for any), rank (or -1),
// shape entries (-1 for any; shape may be NULL). 0 if it matches, else -1 and a reason that
// names both, e.g. "dtype is int32 ('<i4'), expected float32 ('<f4')" or
// "shape is [4, 128, 32], expected [4, 128, 64]" (a -1 entry prints as *). want_shape is read
// only when want_rank >= 0, and then has want_rank entries.
int npy_check(const npy_array_t* a, int want_dtype, int want_rank, const int64_t* want_shape,
              char* err, size_t errlen);

// Convenience for programs: load into a host tensor (tag MEM_OTHER) or fail() (exit 2) with one
// clear line ("prog: error: q.npy: shape is [4, 128, 32], expected [4, 128, 64]").
tensor_t npy_load(const char* path, int want_dtype, int want_rank, const int64_t* want_shape);
// Save a tensor (any device; copied to the host and made contiguous if needed); dies on error.
void npy_save(const char* path, const tensor_t* t);

#ifdef __cplusplus
}
#endif
