// AdamW on the CPU (see adamw_cpu.h). Element-wise, so the loop order does not matter and
// any split into shards gives the same bits as the whole buffer.
#include "common/adamw_cpu.h"

#include <math.h>

void adamw_cpu_step(const adamw_config_t* cfg, float* params, const float* grads, float* m,
                    float* v, size_t n, int t) {
    const adamw_scalars_t sc = adamw_scalars(cfg, t);  // shared with the GPU versions
    const float step_size = sc.step_size, bc2_sqrt = sc.bc2_sqrt, decay = sc.decay;
    const float b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
    const long long N = (long long)n;
#pragma omp parallel for schedule(static) if (N > 65536)
    for (long long i = 0; i < N; i++) {
        const float g = grads[i];
        float p = params[i] * decay;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p -= step_size * m[i] / denom;
        params[i] = p;
    }
}
