// Which dtype every tensor of the CUDA model (model_gpu.h) has under each precision, with the
// reason and what torch.autocast(bfloat16) gives the same tensor: the handout's
// benchmarking_mixed_precision (a)/(b) answered for our bf16 path, as data.
//
// The table is a description, kept beside the allocation code (common/model_gpu.c,
// model_gpu_pass.c) rather than read by it; model_dtype_buffers() turns it into the list of
// device buffers (tag, bytes) the model should allocate, and test_01 precision/* checks that
// list against what a real model_gpu_create / backward / AdamW step allocates (GPU), so the
// two cannot drift apart unnoticed.
#pragma once
#include <stddef.h>
#include "common/alloc.h"
#include "common/dtype.h"
#include "common/model.h"
#include "common/model_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// DT_COUNT in a precision's column: the tensor does not exist in that precision.
#define MT_ABSENT DT_COUNT

typedef enum {
    MT_MASTER = 0,    // flat parameter buffer (master weights)
    MT_WEIGHTS_LP,    // bf16 copy of the weights for the matmuls
    MT_NORM_GAINS,    // RMSNorm weights (part of the master buffer, read as fp32)
    MT_TOKENS,        // input and target token ids
    MT_ROPE,          // cos/sin tables
    MT_RESIDUAL,      // residual stream: embedding output, block inputs, after-attention sums
    MT_MATMUL_ACC,    // the GEMMs' running sums (inside cuBLAS, no buffer)
    MT_NORM_STATS,    // RMSNorm 1/rms per row
    MT_NORM_OUT,      // RMSNorm outputs
    MT_QKV,           // q, k, v (QKV GEMM output, after RoPE)
    MT_ATT_P,         // naive attention: scores S, then softmax probabilities P in place
    MT_ATT_LSE,       // attention plug-in: logsumexp per (b, h, t)
    MT_ATT_OUT,       // attention output (input of Wo)
    MT_H13,           // [W1 x | W3 x]
    MT_SWIGLU,        // SiLU(W1 x) * W3 x (one layer's worth, recomputed in the backward)
    MT_LOGITS,        // LM head output
    MT_LOSS_STATS,    // cross-entropy logsumexp and per-row losses
    MT_LOSS,          // the mean loss
    MT_GRADS,         // parameter gradients
    MT_DRES,          // gradient of the residual stream
    MT_DRES_LP,       // its bf16 copy, the operand of the backward GEMMs
    MT_ACT_GRADS,     // gradients of the other activations (norm outputs, q/k/v, P, h13, ...)
    MT_OPTIM,         // AdamW moments m, v
    MT_COUNT
} model_tensor_t;

typedef struct {
    const char* name;      // "RMSNorm statistics (1/rms)"
    const char* buffers;   // the model_gpu_t fields ("rstd1, rstd2, rstdf"), "" if none
    dtype_t dt[2];         // indexed by model_precision_t: dt[MP_FP32], dt[MP_BF16]
    const char* autocast;  // what torch.autocast(device_type="cuda", dtype=torch.bfloat16) gives
    const char* why;       // why our bf16 path uses dt[MP_BF16]
} model_tensor_info_t;

const model_tensor_info_t* model_tensor_info(model_tensor_t t);
dtype_t model_tensor_dtype(model_precision_t p, model_tensor_t t);
// "fp32", "bf16", "int32", or "—" for MT_ABSENT (the spelling of the Markdown table).
const char* model_dtype_label(dtype_t dt);

// One device buffer the model allocates, sized from the table's dtype.
typedef enum { MB_CREATE = 0, MB_BACKWARD, MB_STEP } model_buffer_phase_t;  // first create / backward / AdamW
typedef struct {
    model_tensor_t t;
    const char* field;     // the model_gpu_t field ("rstd1")
    mem_tag_t tag;
    model_buffer_phase_t phase;
    size_t bytes;
} model_buffer_t;

// Every buffer of a whole model (model_gpu_create, not the ranges variant) of batch B,
// sequence T, with the naive attention (naive 1) or a plug-in (naive 0), whose size follows
// from a tensor class of the table. Not listed: the cuBLAS workspace, the backward's norm
// weight partial sums and a plug-in's own workspace (their sizes are not dtype questions).
// Writes at most cap entries; returns how many there are.
int model_dtype_buffers(const model_config_t* cfg, int B, int T, model_precision_t p, int naive,
                        model_buffer_t* out, int cap);

#ifdef __cplusplus
}
#endif
