// AdamW on the CPU over a flat fp32 buffer (or any contiguous shard of it): the reference
// update that the CUDA optimizer and the sharded optimizers of stages 06-07 are checked against.
// Semantics are PyTorch's torch.optim.AdamW (see adamw_config_t in common/model.h):
//   p -= lr·wd·p;  m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²;
//   p -= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
// Padding elements (p = g = 0) stay 0.
#pragma once
#include <stddef.h>
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// One step t (1, 2, ...) over n elements: params, m, v updated in place; m and v start at 0.
void adamw_cpu_step(const adamw_config_t* cfg, float* params, const float* grads, float* m,
                    float* v, size_t n, int t);

#ifdef __cplusplus
}
#endif
