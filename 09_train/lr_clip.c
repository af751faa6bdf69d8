// The learning-rate schedule and gradient clipping (lr_clip.h).
#include "09_train/lr_clip.h"

#include <math.h>

double lr_cosine(long long t, double lr_max, double lr_min, long long warmup, long long cosine) {
    if (t < warmup) return lr_max * (double)t / (double)warmup;
    if (t <= cosine && cosine > warmup)
        return lr_min + 0.5 * (1.0 + cos(M_PI * (double)(t - warmup) / (double)(cosine - warmup))) * (lr_max - lr_min);
    return lr_min;
}

double grad_sumsq(const float* g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

float grad_clip_coef(double norm, double max_norm) {
    if (!(max_norm > 0)) return 1.0f;
    const double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

void grad_scale(float* g, size_t n, float coef) {
    if (coef == 1.0f) return;
    for (size_t i = 0; i < n; i++) g[i] *= coef;
}
