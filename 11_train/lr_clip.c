// The learning-rate schedule and gradient clipping (lr_clip.h).
#include "11_train/lr_clip.h"

#include <math.h>
#include <stdlib.h>
#include <cublas_v2.h>

#include "common/check.h"

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

// ---- on either device (grad_ops_t): the host loops above or their cuBLAS twins, picked once
struct grad_ops {
    cublasHandle_t blas;  // DEV_CUDA: bound to the model's stream
    double (*sumsq)(grad_ops_t* g, const float* x, size_t n);
    void (*scale)(grad_ops_t* g, float* x, size_t n, float coef);
    void (*add)(grad_ops_t* g, float* y, const float* x, size_t n);
};

static double host_sumsq(grad_ops_t* g, const float* x, size_t n) { (void)g; return grad_sumsq(x, n); }
static void host_scale(grad_ops_t* g, float* x, size_t n, float coef) { (void)g; grad_scale(x, n, coef); }
static void host_add(grad_ops_t* g, float* y, const float* x, size_t n) {
    (void)g;
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

// cuBLAS counts in int: chunks of 2^30 elements.
#define CHUNK (1u << 30)
#define CHUNK_LEN(n, o) ((int)((n) - (o) < CHUNK ? (n) - (o) : CHUNK))

static double blas_sumsq(grad_ops_t* g, const float* x, size_t n) {
    double s = 0;
    for (size_t o = 0; o < n; o += CHUNK) {
        float r = 0;
        if (cublasSnrm2(g->blas, CHUNK_LEN(n, o), x + o, 1, &r) != CUBLAS_STATUS_SUCCESS) DIE("cublasSnrm2 failed");
        s += (double)r * r;
    }
    return s;
}
static void blas_scale(grad_ops_t* g, float* x, size_t n, float coef) {
    if (coef == 1.0f) return;
    for (size_t o = 0; o < n; o += CHUNK)
        if (cublasSscal(g->blas, CHUNK_LEN(n, o), &coef, x + o, 1) != CUBLAS_STATUS_SUCCESS) DIE("cublasSscal failed");
}
static void blas_add(grad_ops_t* g, float* y, const float* x, size_t n) {
    const float one = 1.0f;
    for (size_t o = 0; o < n; o += CHUNK)
        if (cublasSaxpy(g->blas, CHUNK_LEN(n, o), &one, x + o, 1, y + o, 1) != CUBLAS_STATUS_SUCCESS) DIE("cublasSaxpy failed");
}

grad_ops_t* grad_ops_create(device_t dev, cudaStream_t stream) {
    grad_ops_t* g = calloc(1, sizeof *g);
    if (!g) DIE("out of host memory");
    *g = (grad_ops_t){NULL, host_sumsq, host_scale, host_add};
    if (dev == DEV_CPU) return g;  // (a machine without a GPU makes no CUDA call)
    if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(g->blas, stream) != CUBLAS_STATUS_SUCCESS)
        DIE("cuBLAS: cannot create a handle");
    g->sumsq = blas_sumsq, g->scale = blas_scale, g->add = blas_add;
    return g;
}

void grad_ops_destroy(grad_ops_t* g) {
    if (!g) return;
    if (g->blas) cublasDestroy(g->blas);
    free(g);
}

double grad_ops_sumsq(grad_ops_t* g, const float* x, size_t n) { return g->sumsq(g, x, n); }
void grad_ops_scale(grad_ops_t* g, float* x, size_t n, float coef) { g->scale(g, x, n, coef); }
void grad_ops_add(grad_ops_t* g, float* y, const float* x, size_t n) { g->add(g, y, x, n); }
