// The Transformer LM behind one interface, on the CPU or the GPU: what every training program
// from stage 06 on holds. The two implementations stay where they are — the plain-C reference
// (model_cpu.h) and the CUDA model (model_gpu.h) — and each fills one table of operations
// (lm_ops_t, in the style of common/attention.h's plug-ins); a stage calls lm_* and never asks
// which backend it has, except where the maths differs (and then lm_cpu() / lm_gpu() say so).
//
//   lm_options_t o = lm_options(LM_GPU, B, T);   // then o.precision, o.ckpt, o.flat, ...
//   lm_t* m = lm_create(&cfg, &o, err, sizeof err);
//   lm_set_tokens(m, inputs, targets);            // host (B, T) int32 each
//   lm_forward_async(m);                          // GPU: enqueued on lm_stream(m); CPU: done
//   lm_backward(m, hook, ctx, err, sizeof err);   // gradients WRITTEN, hook per parameter
//   lm_adamw(m, &opt, step, err, sizeof err);     // or the caller's optimizer over lm_params
//   float loss = lm_loss(m);                      // waits
//
// Memory: lm_params / lm_grads point into the backend's memory (lm_device: host or CUDA); the
// host copies go through lm_get_params / lm_set_params / lm_get_grads. Errors: every call that
// can run out of memory returns -1 (or NULL) with the reason in err, on both backends.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/alloc.h"
#include "common/attention.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LM_CPU = 0, LM_GPU = 1 } lm_backend_t;

// Which flat buffers the model keeps (stage 07's sharded trainers make them to measure):
typedef enum {
    LM_FLAT_WHOLE = 0,  // parameters and gradients of the layout's length (the GPU makes its
                        // gradients at the first backward)
    LM_FLAT_PADDED,     // both flat_total (>= the layout's total) elements from the start, the
                        // padding zero (so they split into equal shards)
    LM_FLAT_PARAMS,     // the parameters padded as above, NO gradient buffer: gradients go
                        // through the gradient window only (ZeRO-2)
    LM_FLAT_NONE,       // neither: the model runs through windows only (ZeRO-3)
} lm_flat_t;

typedef struct {
    lm_backend_t backend;
    int B, T;                     // sequences and tokens per forward (T <= the context)
    model_precision_t precision;  // MP_BF16: the GPU's mixed precision; on the CPU bf16-rounded
                                  // parameters with fp32 compute (model_cpu.h "bf16 parameters")
    const attention_impl_t* attn; // NULL: the built-in attention; a plug-in: the GPU only
    uint64_t seed;                // parameters from model_init_params(seed)
    int ckpt;                     // activation checkpointing K (model_cpu.h): 0 none, 1 block, K every-K, MODEL_CKPT_NESTED (CPU)
    lm_flat_t flat;
    size_t flat_total;            // LM_FLAT_PADDED / LM_FLAT_PARAMS: the buffers' length
    int ranges;                   // 1: a pipeline rank (runs range passes only; the GPU holds
                                  // no whole-model activations)
    int head_chunk;               // the chunked LM head + cross-entropy (model_cpu.h "the chunked
                                  // LM head"): 0 the whole (B·T, V) logits; R > 0 the B·T rows R
                                  // at a time, the logits never held (the backward recomputes each
                                  // chunk's; a forward without targets is refused). Not with ranges.
} lm_options_t;

// The defaults: fp32, built-in attention, seed 0, no checkpointing, whole flat buffers, whole logits.
lm_options_t lm_options(lm_backend_t backend, int B, int T);

typedef struct lm lm_t;

// NULL with the reason in err (out of memory, a configuration or plug-in that does not fit,
// a plug-in on the CPU, a flat length below the layout's). Sizes that are user errors
// (B, T, the config) fail() as the backends do.
lm_t* lm_create(const model_config_t* cfg, const lm_options_t* o, char* err, size_t errlen);
void lm_destroy(lm_t* m);  // NULL is fine

lm_backend_t lm_backend(const lm_t* m);
device_t lm_device(const lm_t* m);           // DEV_CPU or DEV_CUDA: where lm_params lives
cudaStream_t lm_stream(const lm_t* m);       // the GPU model's stream; NULL on the CPU
const param_layout_t* lm_layout(const lm_t* m);

float* lm_params(lm_t* m);  // flat fp32 in lm_device memory (NULL without flat parameters)
float* lm_grads(lm_t* m);   // flat fp32 gradients (NULL before the GPU's first backward, or none)
// After writing lm_params directly: the bf16 copy (GPU) is remade at the next forward.
void lm_params_changed(lm_t* m);
void lm_get_params(lm_t* m, float* host);     // layout.total floats (waits)
void lm_set_params(lm_t* m, const float* host);
void lm_get_grads(lm_t* m, float* host);      // zeros before any backward

// The next forward's tokens: host (B, T) int32 inputs and targets, copied.
void lm_set_tokens(lm_t* m, const int32_t* inputs, const int32_t* targets);
// Forward of the tokens set last; the mean cross-entropy stays with the model (lm_loss).
void lm_forward_async(lm_t* m);
float lm_loss(lm_t* m);  // waits; the last forward's loss
// Backward of the last forward's loss: gradients WRITTEN into lm_grads (or the gradient window).
// hook (may be NULL) once per parameter as its gradient is final (model_cpu.h's order; on the
// GPU right after the kernels that write it are enqueued on lm_stream). 0, or -1 with a reason
// (out of memory at the GPU's first backward; an attention without a backward).
int lm_backward(lm_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen);
// The model's own AdamW step t (1, 2, ...) over the whole flat buffer. 0, or -1 with a reason.
int lm_adamw(lm_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen);

int lm_ckpt(const lm_t* m);
size_t lm_acts_bytes(const lm_t* m);  // its activation bytes, exactly (what checkpointing shrinks)

// ---- ZeRO-2/3 (stage 07): units, windows, hooks (model_cpu.h "units and windows") ----------
void lm_set_unit_hooks(lm_t* m, const model_unit_hooks_t* hooks);  // NULL: none, windows cleared
void lm_set_windows(lm_t* m, float* params, float* grads, size_t lo, size_t hi);  // grads NULL: keep
// MP_BF16 under windows (ZeRO-3 with bf16 gathers): the unit's bf16 parameters, read by the
// GPU's matmuls in place of its whole-model bf16 copy; the fp32 window (lm_set_windows, same
// range) holds the same values widened, for what reads fp32 (norms, the embedding). The CPU
// model reads the fp32 window only (nothing to do here).
void lm_set_windows_bf16(lm_t* m, const uint16_t* params, size_t lo, size_t hi);
model_precision_t lm_precision(const lm_t* m);
// Frees the flat gradient buffer (grads_only) or both flat buffers; nothing may be in flight.
void lm_free_flat(lm_t* m, int grads_only);
// Gives them back, `total` (>= the layout's) zeroed elements each (grads_only: the gradients).
// 0, or -1 with a reason on out-of-memory.
int lm_restore_flat(lm_t* m, size_t total, int grads_only, char* err, size_t errlen);
// Makes the flat buffers `total` elements long (>= the layout's), padding zero, keeping their
// contents (the GPU: after its first backward). 0, or -1 with a reason.
int lm_pad_flat(lm_t* m, size_t total, char* err, size_t errlen);

// The backend's own model, for the few places where the maths (or a test) is backend-specific.
// NULL when the model is of the other backend.
model_cpu_t* lm_cpu(lm_t* m);
model_gpu_t* lm_gpu(lm_t* m);

// ---- the table each backend fills (lm_cpu.c, lm_gpu.c) ------------------------------------
typedef struct lm_ops {
    const char* name;  // "cpu", "gpu"
    int (*create)(lm_t* m, char* err, size_t errlen);
    void (*destroy)(lm_t* m);
    cudaStream_t (*stream)(const lm_t* m);
    const param_layout_t* (*layout)(const lm_t* m);
    float* (*params)(lm_t* m);
    float* (*grads)(lm_t* m);
    void (*params_changed)(lm_t* m);
    void (*get_params)(lm_t* m, float* host);
    void (*set_params)(lm_t* m, const float* host);
    void (*get_grads)(lm_t* m, float* host);
    void (*set_tokens)(lm_t* m, const int32_t* inputs, const int32_t* targets);
    void (*forward_async)(lm_t* m);
    float (*loss)(lm_t* m);
    int (*backward)(lm_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen);
    int (*adamw)(lm_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen);
    size_t (*acts_bytes)(const lm_t* m);
    void (*set_unit_hooks)(lm_t* m, const model_unit_hooks_t* hooks);
    void (*set_windows)(lm_t* m, float* params, float* grads, size_t lo, size_t hi);
    void (*free_flat)(lm_t* m, int grads_only);
    int (*restore_flat)(lm_t* m, size_t total, int grads_only, char* err, size_t errlen);
    int (*pad_flat)(lm_t* m, size_t total, char* err, size_t errlen);
} lm_ops_t;

extern const lm_ops_t lm_cpu_ops;
extern const lm_ops_t lm_gpu_ops;

#ifdef __cplusplus
}
#endif
