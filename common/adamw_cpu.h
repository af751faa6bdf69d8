// AdamW on the CPU over a flat fp32 buffer (or any contiguous shard of it): the reference
// update that the CUDA optimizer and the sharded optimizers of stages 06-07 are checked against.
// Semantics are PyTorch's torch.optim.AdamW (see adamw_config_t in common/model.h):
//   p -= lr·wd·p;  m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²;
//   p -= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
// Padding elements (p = g = 0) stay 0.
#pragma once
#include <math.h>
#include <stddef.h>
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// The scalars of step t that do not depend on the element, computed ONCE here for every AdamW
// of the repo (this CPU loop, the CUDA model's fused kernel, stage 07's slice optimizers), so
// that the CPU and GPU versions round them identically: the bias corrections in double, then
// rounded once (PyTorch computes them in Python floats).
typedef struct {
    float step_size;  // lr / (1 − β1^t)
    float bc2_sqrt;   // sqrt(1 − β2^t)
    float decay;      // 1 − lr·wd (decoupled weight decay)
} adamw_scalars_t;
static inline adamw_scalars_t adamw_scalars(const adamw_config_t* cfg, int t) {
    adamw_scalars_t s;
    s.step_size = (float)((double)cfg->lr / (1.0 - pow((double)cfg->beta1, t)));
    s.bc2_sqrt = (float)sqrt(1.0 - pow((double)cfg->beta2, t));
    s.decay = 1.0f - cfg->lr * cfg->weight_decay;
    return s;
}

// One step t (1, 2, ...) over n elements: params, m, v updated in place; m and v start at 0.
void adamw_cpu_step(const adamw_config_t* cfg, float* params, const float* grads, float* m,
                    float* v, size_t n, int t);

#ifdef __cplusplus
}
#endif
