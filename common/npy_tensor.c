// .npy <-> tensor_t: what programs and tests call. The parser itself (npy.c) knows nothing of
// tensors or CUDA so that it can be fuzzed alone; this file adds loading into a host tensor
// (bad files are user errors: fail(), exit 2) and saving any tensor (device or strided).
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/npy.h"

tensor_t npy_load(const char* path, int want_dtype, int want_rank, const int64_t* want_shape) {
    npy_array_t a;
    char err[512];
    if (npy_read(path, &a, err, sizeof err) != 0) fail("%s", err);  // err is "path: reason"
    char why[400];
    if (npy_check(&a, want_dtype, want_rank, want_shape, why, sizeof why) != 0) {
        npy_array_free(&a);
        fail("%s: %s", path, why);
    }
    // Copied (not adopted) so that the memory goes through mem_alloc and is counted.
    tensor_t t = tensor_alloc(DEV_CPU, a.dtype, a.rank, a.shape, MEM_OTHER);
    if (a.nbytes) memcpy(t.data, a.data, a.nbytes);
    npy_array_free(&a);
    return t;
}

// Gather a strided host tensor `src` (element size es, data starting at `base`, which is the
// element at all-zero indices) into the contiguous buffer dst. Walks the indices in C order.
static void gather_strided(char* dst, const char* base, size_t es, const tensor_t* src) {
    int64_t n = tensor_numel(src);
    int64_t idx[TENSOR_MAX_RANK] = {0};
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < src->rank; d++) off += idx[d] * src->stride[d];
        memcpy(dst + (size_t)k * es, base + off * (int64_t)es, es);
        for (int d = src->rank - 1; d >= 0; d--) {  // odometer increment, last index fastest
            if (++idx[d] < src->shape[d]) break;
            idx[d] = 0;
        }
    }
}

void npy_save(const char* path, const tensor_t* t) {
    size_t es = dtype_size(t->dtype);
    int64_t numel = tensor_numel(t);
    tensor_t host = {0};   // a host copy when t is on the device
    const char* base = t->data;
    void* packed = NULL;   // contiguous host bytes, numel * es, when t is strided

    if (numel > 0 && !tensor_is_contiguous(t)) {
        // The span of memory the view touches: [lo, hi] in elements relative to t->data.
        int64_t lo = 0, hi = 0;
        for (int d = 0; d < t->rank; d++) {
            int64_t reach = (t->shape[d] - 1) * t->stride[d];
            if (reach < 0) lo += reach;
            else hi += reach;
        }
        if (t->device != DEV_CPU) {
            // Copy the whole span to the host as one contiguous 1-D tensor, then gather there:
            // it needs only contiguous copies from tensor.c.
            int64_t span = hi - lo + 1;
            tensor_t dspan = tensor_view((char*)t->data + lo * (int64_t)es, t->device, t->dtype, 1, &span, NULL);
            host = tensor_to(&dspan, DEV_CPU);
            base = (const char*)host.data - lo * (int64_t)es;
        }
        packed = malloc((size_t)numel * es);
        if (!packed) DIE("npy_save %s: out of host memory (%zu bytes)", path, (size_t)numel * es);
        gather_strided(packed, base, es, t);
        base = packed;
    } else if (numel > 0 && t->device != DEV_CPU) {
        host = tensor_to(t, DEV_CPU);
        base = host.data;
    }

    char err[512];
    int rc = npy_write(path, t->dtype, t->rank, t->shape, numel > 0 ? base : NULL, err, sizeof err);
    free(packed);
    if (host.data) tensor_free(&host);
    if (rc != 0) DIE("cannot save a tensor: %s", err);
}
