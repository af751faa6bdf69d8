// Tensors: allocation through the counting allocator, views, copies across devices.
#include "common/tensor.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/model_kernels.h"
#include "common/rng.h"

static void set_shape(tensor_t* t, int rank, const int64_t* shape, const int64_t* stride) {
    if (rank < 0 || rank > TENSOR_MAX_RANK) DIE("tensor rank %d outside 0..%d", rank, TENSOR_MAX_RANK);
    t->rank = rank;
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        if (shape[i] < 0) DIE("tensor dimension %d is negative (%lld)", i, (long long)shape[i]);
        t->shape[i] = shape[i];
        t->stride[i] = stride ? stride[i] : s;
        s *= shape[i];
    }
}

tensor_t tensor_try_alloc(device_t dev, dtype_t dt, int rank, const int64_t* shape, mem_tag_t tag) {
    tensor_t t = tensor_view(NULL, dev, dt, rank, shape, NULL);
    t.data = mem_try_alloc(dev, tensor_nbytes(&t), tag);
    t.owns = t.data != NULL;
    return t;
}

tensor_t tensor_alloc(device_t dev, dtype_t dt, int rank, const int64_t* shape, mem_tag_t tag) {
    tensor_t t = tensor_view(NULL, dev, dt, rank, shape, NULL);
    t.data = mem_alloc(dev, tensor_nbytes(&t), tag);
    t.owns = 1;
    return t;
}

tensor_t tensor_view(void* data, device_t dev, dtype_t dt, int rank, const int64_t* shape,
                     const int64_t* stride) {
    tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.device = dev;
    set_shape(&t, rank, shape, stride);
    return t;
}

void tensor_free(tensor_t* t) {
    if (t->owns) mem_free(t->data);
    t->data = NULL;
    t->owns = 0;
}

int64_t tensor_numel(const tensor_t* t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

size_t tensor_nbytes(const tensor_t* t) { return (size_t)tensor_numel(t) * dtype_size(t->dtype); }

int tensor_is_contiguous(const tensor_t* t) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

int tensor_same_shape(const tensor_t* a, const tensor_t* b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char* tensor_shape_str(const tensor_t* t, char* buf, size_t len) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, len - off, "[");
    for (int i = 0; i < t->rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

static void copy_bytes(void* dst, device_t ddev, const void* src, device_t sdev, size_t n) {
    if (n == 0) return;
    if (ddev == DEV_CPU && sdev == DEV_CPU) {
        memcpy(dst, src, n);
        return;
    }
    enum cudaMemcpyKind kind = ddev == DEV_CUDA ? (sdev == DEV_CUDA ? cudaMemcpyDeviceToDevice
                                                                    : cudaMemcpyHostToDevice)
                                                : cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpy(dst, src, n, kind));
}

void tensor_copy(tensor_t* dst, const tensor_t* src) {
    if (dst->dtype != src->dtype)
        DIE("tensor_copy: dtype %s into %s", dtype_name(src->dtype), dtype_name(dst->dtype));
    if (tensor_numel(dst) != tensor_numel(src))
        DIE("tensor_copy: %lld elements into %lld", (long long)tensor_numel(src),
            (long long)tensor_numel(dst));
    if (!tensor_is_contiguous(dst) || !tensor_is_contiguous(src))
        DIE("tensor_copy: both tensors must be contiguous (use tensor_to for strided sources)");
    copy_bytes(dst->data, dst->device, src->data, src->device, tensor_nbytes(src));
}

// Gathers a strided host tensor into contiguous memory, one innermost row at a time.
static void gather_host(char* dst, const tensor_t* src) {
    const size_t es = dtype_size(src->dtype);
    const int64_t n = tensor_numel(src);
    if (n == 0) return;
    int64_t idx[TENSOR_MAX_RANK] = {0};
    const int r = src->rank;
    const int64_t inner = r ? src->shape[r - 1] : 1;
    const int64_t inner_stride = r ? src->stride[r - 1] : 1;
    for (int64_t done = 0; done < n; done += inner) {
        int64_t off = 0;
        for (int i = 0; i < r - 1; i++) off += idx[i] * src->stride[i];
        const char* s = (const char*)src->data + (size_t)off * es;
        for (int64_t j = 0; j < inner; j++)
            memcpy(dst + (size_t)(done + j) * es, s + (size_t)(j * inner_stride) * es, es);
        for (int i = r - 2; i >= 0; i--) {  // odometer over the outer dimensions
            if (++idx[i] < src->shape[i]) break;
            idx[i] = 0;
        }
    }
}

tensor_t tensor_to(const tensor_t* src, device_t dev) {
    tensor_t out = tensor_alloc(dev, src->dtype, src->rank, src->shape, MEM_OTHER);
    if (tensor_is_contiguous(src)) {
        copy_bytes(out.data, dev, src->data, src->device, tensor_nbytes(src));
        return out;
    }
    if (src->device != DEV_CPU)
        DIE("tensor_to: strided device tensors are not supported (copy with a kernel)");
    if (dev == DEV_CPU) {
        gather_host(out.data, src);
    } else {
        tensor_t tmp = tensor_alloc(DEV_CPU, src->dtype, src->rank, src->shape, MEM_OTHER);
        gather_host(tmp.data, src);
        copy_bytes(out.data, dev, tmp.data, DEV_CPU, tensor_nbytes(src));
        tensor_free(&tmp);
    }
    return out;
}

void tensor_poison(tensor_t* t) {
    if (!tensor_is_contiguous(t)) DIE("tensor_poison: tensor must be contiguous");
    if (t->device == DEV_CUDA) CUDA_CHECK(cudaMemset(t->data, 0xFF, tensor_nbytes(t)));
    else memset(t->data, 0xFF, tensor_nbytes(t));
}

tensor_t tensor_to_host_f32(const tensor_t* src) {
    tensor_t h = tensor_to(src, DEV_CPU);
    if (h.dtype == DT_F32) return h;
    tensor_t f = tensor_alloc(DEV_CPU, DT_F32, h.rank, h.shape, MEM_OTHER);
    float* o = f.data;
    const int64_t n = tensor_numel(&h);
    for (int64_t i = 0; i < n; i++) {
        switch (h.dtype) {
        case DT_BF16: o[i] = f32_from_bf16(((const uint16_t*)h.data)[i]); break;
        case DT_I32: o[i] = (float)((const int32_t*)h.data)[i]; break;
        case DT_I64: o[i] = (float)((const int64_t*)h.data)[i]; break;
        default: DIE("tensor_to_host_f32: unknown dtype");
        }
    }
    tensor_free(&h);
    return f;
}

void* tensor_randn_dev(dtype_t dt, size_t n, uint64_t seed, mem_tag_t tag) {
    if (dt != DT_F32 && dt != DT_BF16) DIE("tensor_randn_dev: dtype %s (f32 or bf16)", dtype_name(dt));
    void* p = mem_try_alloc(DEV_CUDA, n * dtype_size(dt), tag);
    if (!p) return NULL;
    rng_t r = rng_make(seed);
    if (dt == DT_F32) {
        rng_fill_normal_cuda(&r, p, n, 0.0f, 1.0f, 0);
    } else {
        float* tmp = mem_try_alloc(DEV_CUDA, n * sizeof(float), MEM_WORKSPACE);
        if (!tmp) {
            mem_free(p);
            return NULL;
        }
        rng_fill_normal_cuda(&r, tmp, n, 0.0f, 1.0f, 0);
        k_cast_f32_bf16(tmp, p, n, 0);
        CUDA_CHECK(cudaStreamSynchronize(0));  // the cast has read tmp
        mem_free(tmp);
    }
    CUDA_CHECK(cudaStreamSynchronize(0));
    return p;
}
