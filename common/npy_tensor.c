// .npy <-> tensor_t: what programs and tests call. The parser itself (npy.c) knows nothing of
// tensors or CUDA so that it can be fuzzed alone; this file adds loading into a host tensor
// (bad files are user errors: fail(), exit 2) and saving any tensor (device or strided).
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

void npy_save(const char* path, const tensor_t* t) {
    size_t es = dtype_size(t->dtype);
    int64_t numel = tensor_numel(t);
    tensor_t host = {0};   // a contiguous host copy, when t is not one already
    tensor_t span = {0};   // the device memory a strided device view touches, copied to the host
    const void* base = t->data;

    if (numel > 0 && !tensor_is_contiguous(t)) {
        tensor_t src = *t;
        if (t->device != DEV_CPU) {
            // tensor_to gathers strided views only on the host: copy the span of memory the view
            // touches, [lo, hi] elements from t->data, to the host as one contiguous 1-D tensor,
            // and gather from a host view of it with the same strides.
            int64_t lo = 0, hi = 0;
            for (int d = 0; d < t->rank; d++) {
                int64_t reach = (t->shape[d] - 1) * t->stride[d];
                if (reach < 0) lo += reach;
                else hi += reach;
            }
            int64_t n = hi - lo + 1;
            tensor_t dspan = tensor_view((char*)t->data + lo * (int64_t)es, t->device, t->dtype, 1, &n, NULL);
            span = tensor_to(&dspan, DEV_CPU);
            src = tensor_view((char*)span.data - lo * (int64_t)es, DEV_CPU, t->dtype, t->rank, t->shape, t->stride);
        }
        host = tensor_to(&src, DEV_CPU);
        base = host.data;
    } else if (numel > 0 && t->device != DEV_CPU) {
        host = tensor_to(t, DEV_CPU);
        base = host.data;
    }

    char err[512];
    int rc = npy_write(path, t->dtype, t->rank, t->shape, numel > 0 ? base : NULL, err, sizeof err);
    if (host.data) tensor_free(&host);
    if (span.data) tensor_free(&span);
    if (rc != 0) DIE("cannot save a tensor: %s", err);
}
