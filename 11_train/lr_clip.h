// The learning-rate schedule and gradient clipping of the trainer, as the course's
// get_lr_cosine_schedule and gradient_clipping (assignment 1), written so that a sharded
// gradient gives the same norm as a whole one.
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// Step t (0-based) of a cosine schedule with linear warm-up:
//   t < warmup:            lr_max · t / warmup
//   warmup <= t <= cosine: lr_min + ½(1 + cos(π (t − warmup)/(cosine − warmup))) (lr_max − lr_min)
//   t > cosine:            lr_min
// (the course's formula; warmup 0 starts at lr_max; cosine <= warmup jumps to lr_min.)
double lr_cosine(long long t, double lr_max, double lr_min, long long warmup, long long cosine);

// Σ g² over n elements, in double (so that the sum of the per-shard sums of a sharded gradient
// equals the whole one's up to double rounding, far below what fp32 gradients carry).
double grad_sumsq(const float* g, size_t n);

// PyTorch's clip_grad_norm_: the factor max_norm / (norm + 1e-6) if that is below 1, else 1
// (max_norm <= 0: no clipping, 1). The 1e-6 is the course's and PyTorch's epsilon.
float grad_clip_coef(double norm, double max_norm);
// g *= coef over n elements (coef 1: nothing touched, so unclipped steps keep their bits).
void grad_scale(float* g, size_t n, float coef);

// The same arithmetic on the memory a model's gradients live in: the host loops above on
// DEV_CPU, cuBLAS on `stream` on DEV_CUDA (nrm2 in fp32 with its own scaling, so the device
// norm differs from the host's in the last bits; a resume compares a device run with a device
// run). Enqueued on the device: only sumsq waits (it returns a number).
typedef struct grad_ops grad_ops_t;
grad_ops_t* grad_ops_create(device_t dev, cudaStream_t stream);
void grad_ops_destroy(grad_ops_t* g);  // NULL is fine
double grad_ops_sumsq(grad_ops_t* g, const float* x, size_t n);
void grad_ops_scale(grad_ops_t* g, float* x, size_t n, float coef);  // coef 1: nothing touched
void grad_ops_add(grad_ops_t* g, float* y, const float* x, size_t n);  // y += x (1·x + y: exact as the host's)

#ifdef __cplusplus
}
#endif
