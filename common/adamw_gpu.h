// AdamW (and plain SGD) over ONE contiguous slice of device buffers: the GPU half of the
// optimizer seam of stage 07. The caller passes pointers already offset to the slice, so the
// same call serves the whole flat buffer (DDP), rank r's shard (ZeRO-1), one parameter (the
// course's sharded optimizer) or one piece of a bucket (ZeRO-2); the moment buffers m and v
// hold exactly n elements, the slice's size.
//
// The arithmetic is torch.optim.AdamW's and adamw_cpu_step's, element for element; the
// per-step scalars come from adamw_scalars() in adamw_cpu.h, the helper the CPU version uses,
// so both round the bias corrections the same way. (The GPU's sqrtf and division are IEEE
// correctly rounded, as the CPU's: the two agree bit for bit unless the compiler contracts
// b·m + (1−b)·g into an FMA on one side — nvcc does by default, so expect last-bit
// differences between CPU and GPU, never between ranks of the same kind.)
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/adamw_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// One AdamW step t (1, 2, ...) over n elements of device memory, enqueued on `stream`:
// p, m, v updated in place from g. p_lp (may be NULL): also writes the bf16 copy of the new p.
void adamw_gpu_step(const adamw_config_t* cfg, float* p, const float* g, float* m, float* v,
                    uint16_t* p_lp, size_t n, int t, cudaStream_t stream);

// p -= lr · g over n elements of device memory (torch.optim.SGD without momentum or decay).
void sgd_gpu_step(float lr, float* p, const float* g, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
