// Tensor maps for TMA: the view's arithmetic (pure) and the driver's encoder (common/tma.h).
#include "common/tma.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "common/check.h"

int tma_view_bhnd(int B, int H, int N, int d, const int64_t s[3], tma_view_t* v, char* err, size_t errlen) {
    if (B < 1 || H < 1 || N < 1 || d < 8 || d > 256 || d % 8 != 0)
        return set_err(err, errlen, "TMA view: B %d, H %d, N %d must be >= 1 and d %d a multiple of 8 in [8, 256]",
                       B, H, N, d);
    const int64_t ext[3] = {N, H, B};  // the axes of s[2], s[1], s[0]
    const char* name[3] = {"row", "head", "batch"};
    uint64_t span = (uint64_t)d * 2;  // bytes of the axis inside
    v->dims[0] = (uint64_t)d;
    for (int a = 0; a < 3; a++) {
        const int64_t st = s[2 - a];
        v->dims[a + 1] = (uint64_t)ext[a];
        uint64_t bytes;
        if (ext[a] == 1) {
            bytes = (span + 15) / 16 * 16;  // never used to move; any legal value
        } else {
            if (st <= 0 || st % 8 != 0)
                return set_err(err, errlen,
                               "TMA view: the %s stride %lld must be a positive multiple of 8 elements (16 bytes)",
                               name[a], (long long)st);
            bytes = (uint64_t)st * 2;
            if (bytes >= (1ull << 40))
                return set_err(err, errlen, "TMA view: the %s stride %lld is 2^40 bytes or more", name[a],
                               (long long)st);
        }
        v->strides[a] = bytes;
        span = bytes * (uint64_t)ext[a];
    }
    return 0;
}

// cuTensorMapEncodeTiled, found once through the runtime (which loads the driver).
static PFN_cuTensorMapEncodeTiled_v12000 encoder(char* err, size_t errlen) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (fn) return fn;
    void* p = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
        set_err(err, errlen, "TMA: the driver has no cuTensorMapEncodeTiled (%s)", cudaGetErrorString(e));
        return NULL;
    }
    fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    return fn;
}

int tma_map_bf16_4d(CUtensorMap* map, const void* base, const tma_view_t* v, const uint32_t box[2], char* err,
                    size_t errlen) {
    if (box[0] < 8 || box[0] * 2 > 128 || box[0] % 8 != 0 || box[1] < 1 || box[1] > 256)
        return set_err(err, errlen, "TMA box %u x %u: columns a multiple of 8 up to 64 (128 bytes), rows 1-256",
                       box[0], box[1]);
    if ((uintptr_t)base % 16 != 0) return set_err(err, errlen, "TMA: the tensor's base address is not 16-byte aligned");
    PFN_cuTensorMapEncodeTiled_v12000 enc = encoder(err, errlen);
    if (!enc) return -1;
    const cuuint64_t dims[4] = {v->dims[0], v->dims[1], v->dims[2], v->dims[3]};
    const cuuint64_t strides[3] = {v->strides[0], v->strides[1], v->strides[2]};
    const cuuint32_t boxd[4] = {box[0], box[1], 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void*)base, dims, strides, boxd, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return set_err(err, errlen, "TMA: cuTensorMapEncodeTiled failed (CUresult %d)", (int)r);
    return 0;
}

int tma_map_f32_3d(CUtensorMap* map, const void* base, const uint64_t dims[3], const uint32_t box[2], char* err,
                   size_t errlen) {
    if (box[0] < 4 || box[0] * 4 > 128 || box[0] % 4 != 0 || box[1] < 1 || box[1] > 256)
        return set_err(err, errlen, "TMA box %u x %u (fp32): columns a multiple of 4 up to 32 (128 bytes), rows 1-256",
                       box[0], box[1]);
    if (dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[0] * 4 % 16 != 0)
        return set_err(err, errlen, "TMA fp32 array %llu x %llu x %llu: rows must be a multiple of 16 bytes",
                       (unsigned long long)dims[2], (unsigned long long)dims[1], (unsigned long long)dims[0]);
    const uint64_t row = dims[0] * 4, mat = row * dims[1];
    if (mat >= (1ull << 40)) return set_err(err, errlen, "TMA fp32 array: a matrix stride of 2^40 bytes or more");
    if ((uintptr_t)base % 16 != 0) return set_err(err, errlen, "TMA: the tensor's base address is not 16-byte aligned");
    PFN_cuTensorMapEncodeTiled_v12000 enc = encoder(err, errlen);
    if (!enc) return -1;
    const cuuint64_t gdims[3] = {dims[0], dims[1], dims[2]};
    const cuuint64_t strides[2] = {row, mat};
    const cuuint32_t boxd[3] = {box[0], box[1], 1};
    const cuuint32_t estr[3] = {1, 1, 1};
    const CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void*)base, gdims, strides, boxd, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return set_err(err, errlen, "TMA: cuTensorMapEncodeTiled failed (CUresult %d)", (int)r);
    return 0;
}

int tma_map_f32_rows(CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows, uint32_t box_cols, char* err,
                     size_t errlen) {
    if (box_cols < 4 || box_cols > 256 || box_cols % 4 != 0)
        return set_err(err, errlen, "TMA box of %u fp32 columns: a multiple of 4 (16 bytes) up to 256", box_cols);
    if (cols < 1 || rows < 1 || cols % 4 != 0)
        return set_err(err, errlen, "TMA fp32 rows of %llu columns: a row must be a multiple of 16 bytes (columns %% 4 == 0)",
                       (unsigned long long)cols);
    if (cols * 4 >= (1ull << 40)) return set_err(err, errlen, "TMA fp32 rows: a row stride of 2^40 bytes or more");
    if ((uintptr_t)base % 16 != 0) return set_err(err, errlen, "TMA: the tensor's base address is not 16-byte aligned");
    PFN_cuTensorMapEncodeTiled_v12000 enc = encoder(err, errlen);
    if (!enc) return -1;
    const cuuint64_t gdims[2] = {cols, rows};
    const cuuint64_t strides[1] = {cols * 4};
    const cuuint32_t boxd[2] = {box_cols, 1};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void*)base, gdims, strides, boxd, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return set_err(err, errlen, "TMA: cuTensorMapEncodeTiled failed (CUresult %d)", (int)r);
    return 0;
}
