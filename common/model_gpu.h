// The CS336 Transformer LM on CUDA (architecture and parameter layout: model.h; the plain-C
// reference it is tested against: model_cpu.h).
//
// Two precisions:
//   MP_FP32  everything fp32; matmuls are TRUE fp32 (cuBLAS CUBLAS_COMPUTE_32F with default
//            math: no TF32, see matmul.h).
//   MP_BF16  mixed precision as torch.autocast does it: fp32 master weights and gradients,
//            a bf16 copy of the weights made once per step (fused into AdamW, or at the next
//            forward when the weights changed), bf16 activations and matmul operands with fp32
//            accumulation; fp32 residual stream, norm statistics, softmax, loss, reductions.
//
// Everything runs on one stream (model_gpu_stream) with no host synchronisation inside
// forward, backward or the optimizer step: only model_gpu_loss()/model_gpu_forward() wait.
// Every device buffer comes from common/alloc.h with a tag (params, grads, optim, acts,
// workspace), so mem_stats() shows the memory profile. Gradients, the backward scratch and
// the AdamW moments are allocated at their first use, so the profile grows phase by phase.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/attention.h"
#include "common/model.h"
#include "common/model_cpu.h"  // model_window_t, model_unit_hooks_t: the unit seam both models share

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_FP32 = 0, MP_BF16 = 1 } model_precision_t;
#define MODEL_PRECISION_CHOICES "fp32|bf16"
const char* model_precision_name(model_precision_t p);  // "fp32", "bf16"

typedef struct model_gpu model_gpu_t;

// A model for batches of B sequences of exactly T tokens (T <= cfg->context), parameters
// initialised by model_init_params(seed) (bit-identical to the CPU reference's). attn NULL:
// the built-in naive attention (materialised scores); otherwise the plug-in receives q/k/v as
// strided views into the fused QKV buffer, after RoPE, and writes O and the logsumexp.
// Returns NULL with a reason in err on out-of-memory ("out of memory: ...") or when the
// configuration or the plug-in does not fit; other failures (CUDA errors) die.
model_gpu_t* model_gpu_create(const model_config_t* cfg, int B, int T, model_precision_t prec,
                              const attention_impl_t* attn, uint64_t seed, char* err,
                              size_t errlen);
void model_gpu_destroy(model_gpu_t* m);
// The same with activation checkpointing K (model_cpu.h "activation checkpointing": 0 none,
// 1 block, K every-K): only the checkpoints and one segment's activations are allocated; the
// backward recomputes each segment forward with the same kernels, so the loss and gradients
// are bit-for-bit those of K = 0 (01_benchmarking/test_checkpoint.c). With unit hooks
// (ZeRO-2/3) `block` only, the recompute of block l inside unit 1 + l's backward window
// (model_cpu.h "activation checkpointing"; every-K refused with MODEL_CKPT_HOOKS_REFUSAL); the
// range pass (model_gpu_create_ranges) has no checkpointing. `nested` (MODEL_CKPT_NESTED) is
// the CPU model's only: refused here (NULL, MODEL_GPU_NESTED_REFUSAL in err).
#define MODEL_GPU_NESTED_REFUSAL \
    "checkpoint policy nested runs on the CPU model only (--device cpu); the GPU model takes none, block or every-K"
model_gpu_t* model_gpu_create_ckpt(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                   const attention_impl_t* attn, uint64_t seed, int ckpt, char* err,
                                   size_t errlen);
int model_gpu_ckpt(const model_gpu_t* m);  // K (0 none)
// The chunked LM head + cross-entropy (model_cpu.h "the chunked LM head"; lm.h head_chunk):
// as model_gpu_create_ckpt (flat 0) or model_gpu_create_flat_ckpt (flat 1, flat_total as
// there) with head_chunk > 0: the logits buffer is (min(head_chunk, N), V) workspace instead
// of (N, V) activations, the forward and backward run the head chunk by chunk (the backward
// recomputes each chunk's logits; dW_head's GEMMs add, beta 1). The loss and every gradient
// but dW_head are those of head_chunk 0 up to the GEMMs' blocking over a shorter M; dW_head
// sums its rows in another order (tests/test_lm.c gives the tolerances). A forward without
// targets and model_gpu_get_logits are refused (one line, exit 2). head_chunk 0: the same as
// those two.
model_gpu_t* model_gpu_create_head(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                   const attention_impl_t* attn, uint64_t seed, int ckpt, int flat, size_t flat_total,
                                   int head_chunk, char* err, size_t errlen);
int model_gpu_head_chunk(const model_gpu_t* m);
size_t model_gpu_acts_bytes(const model_gpu_t* m);  // its acts-tagged bytes, exactly (what K shrinks)
// A model made to train with flat buffers of the caller's length from the start (stage 07), so
// that setting up a sharded trainer never holds two copies of them (model_gpu_pad_flat's
// transient) nor, for ZeRO-3, any whole-model buffer:
//   flat_total >= the layout's total: parameters (initialised as model_gpu_create's, the extra
//       elements zero) and gradients (zero) of flat_total elements each;
//   MODEL_GPU_NO_FLAT: no flat parameter or gradient buffer at all, as after
//       model_gpu_free_flat: the model runs only through windows (the ZeRO-3 hooks set them;
//       bf16 with bf16 windows too, and no whole-model bf16 copy) and the caller makes the
//       parameters (model_init_params_range);
//   flat_total | MODEL_GPU_NO_FLAT_GRADS (flat_total >= the layout's): the parameters as in the
//       first case, NO flat gradient buffer, as after model_gpu_free_flat_grads (fp32 only):
//       the backward writes gradients only through the gradient window (ZeRO-2's hooks set it
//       to a unit-sized working buffer), so the 4Ψ gradient buffer never exists.
// Either way the gradient buffer and the backward scratch are allocated now (model_gpu_create
// does it at the first backward), so the allocator's peak after creation is the training
// footprint less the optimizer. Returns NULL with a reason (as model_gpu_create; also: a
// length below the layout's, bf16 without a flat gradient buffer, an attention without a backward).
#define MODEL_GPU_NO_FLAT ((size_t)0)
#define MODEL_GPU_NO_FLAT_GRADS ((size_t)1 << 62)  // a flag OR'd into flat_total (no length reaches it)
model_gpu_t* model_gpu_create_flat(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                   const attention_impl_t* attn, uint64_t seed, size_t flat_total, char* err,
                                   size_t errlen);
// The same with activation checkpointing K (as model_gpu_create_ckpt): ZeRO-2/3 with `block`.
model_gpu_t* model_gpu_create_flat_ckpt(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                        const attention_impl_t* attn, uint64_t seed, size_t flat_total, int ckpt,
                                        char* err, size_t errlen);

const param_layout_t* model_gpu_layout(const model_gpu_t* m);
const model_config_t* model_gpu_config(const model_gpu_t* m);
cudaStream_t model_gpu_stream(const model_gpu_t* m);
float* model_gpu_params(model_gpu_t* m);  // device, flat fp32 (layout.total elements)
float* model_gpu_grads(model_gpu_t* m);   // device, flat fp32; NULL before the first backward
// After writing the parameters through model_gpu_params() directly, call this so that the
// bf16 copy is remade at the next forward (set_params does it for you).
void model_gpu_params_changed(model_gpu_t* m);
void model_gpu_set_params(model_gpu_t* m, const float* host);  // layout.total floats
void model_gpu_get_params(model_gpu_t* m, float* host);
void model_gpu_get_grads(model_gpu_t* m, float* host);          // zeros before any backward

// Device token buffers owned by the model, (B, T) int32 each; model_gpu_set_tokens copies
// host tokens into them. Any device pointers may be passed to forward instead.
int32_t* model_gpu_inputs(model_gpu_t* m);
int32_t* model_gpu_targets(model_gpu_t* m);
void model_gpu_set_tokens(model_gpu_t* m, const int32_t* inputs, const int32_t* targets);

// Forward pass, enqueued on the stream; the mean cross-entropy stays on the device.
void model_gpu_forward_async(model_gpu_t* m, const int32_t* d_inputs, const int32_t* d_targets);
float model_gpu_loss(model_gpu_t* m);  // waits for the stream, returns the last forward's loss
float model_gpu_forward(model_gpu_t* m, const int32_t* d_inputs, const int32_t* d_targets);
// (B, T, V) logits of the last forward as fp32 on the host (waits). Valid only between a
// forward and the backward: the backward overwrites them with their gradient.
void model_gpu_get_logits(model_gpu_t* m, float* host);

// 1 if the model can be trained; 0 with a reason (an attention plug-in without a backward).
int model_gpu_can_train(const model_gpu_t* m, char* err, size_t errlen);
// Backward of the last forward's loss. Gradients are WRITTEN (not accumulated) into the flat
// fp32 gradient buffer. `hook` (may be NULL) is called once per parameter, in the order the
// gradients become final (reverse layer order), right after the kernels that write that
// gradient were enqueued on model_gpu_stream(): work ordered after them on that stream (an
// event, an all-reduce) sees the final gradient. Returns 0, or -1 with a reason on
// out-of-memory at the first call; dies if the model cannot be trained.
int model_gpu_backward(model_gpu_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen);
// Stage 07 (sharded optimizers): makes the flat fp32 parameter and gradient buffers `total`
// elements long (>= the layout's total), the extra elements zero, so that the buffers split
// into n equal shards for reduce-scatter and all-gather. The model never reads or writes past
// the layout's total. Call after the first backward (the gradient buffer exists then); it
// keeps the parameters and gradients. Returns 0, or -1 with a reason on out-of-memory (the
// model is left as it was). Optimizers outside the model (stage 07) own their moments: this
// model allocates its own only if model_gpu_adamw is called.
// (The caller keeps the padded length: the model itself only ever uses the layout's total.)
// model_gpu_create_flat makes the buffers padded from the start (no transient second copy);
// this one stays for callers that pad a model made by model_gpu_create (11_train).
int model_gpu_pad_flat(model_gpu_t* m, size_t total, char* err, size_t errlen);

// One AdamW step t = 1, 2, ... over the flat buffer (one fused kernel; in bf16 it also
// refreshes the bf16 weights). Returns 0, or -1 with a reason on out-of-memory at the first
// call (the moments are allocated then).
int model_gpu_adamw(model_gpu_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen);

// ---- ZeRO-3 (stage 07): units, windows, hooks (model_cpu.h "units and windows") ----------
// With hooks set, the forward calls before_fwd(u) before unit u's kernels are enqueued and the
// backward calls before_bwd(u) / after_bwd(u) around unit u's (after_bwd right after the last
// kernel that writes its gradient is enqueued: work ordered after it on the stream sees the
// gradient). The hooks point the windows (model_gpu_set_windows) at device buffers holding
// the unit's parameters and receiving its gradient: flat element i at params[i - lo] and
// grads[i - lo] for i in [lo, hi) (grads NULL: keep the gradient window). Every parameter
// access is checked against the window (DIE with the parameter's name). MP_BF16 (ZeRO-3 with
// bf16 gathers): the matmuls read the unit's bf16 parameters from model_gpu_set_windows_bf16
// (set after model_gpu_set_windows, same range) in place of the whole-model bf16 copy, which a
// model without flat buffers does not have; the fp32 window holds the same values widened, for
// the norms and the embedding; gradients go to the fp32 gradient window as in fp32. A model
// without a flat gradient buffer (ZeRO-2) stays fp32 only.
// NULL hooks: none, windows cleared (the model reads its flat buffers again). With `block`
// checkpointing before_bwd(1 + l) comes before block l's recompute (model_gpu_pass.c); hooks on
// a model made with every-K (K > 1): fail() with MODEL_CKPT_HOOKS_REFUSAL (one line, exit 2).
void model_gpu_set_unit_hooks(model_gpu_t* m, const model_unit_hooks_t* hooks);
void model_gpu_set_windows(model_gpu_t* m, float* params, float* grads, size_t lo, size_t hi);
void model_gpu_set_windows_bf16(model_gpu_t* m, const uint16_t* params, size_t lo, size_t hi);
// Frees the flat parameter and gradient buffers (ZeRO-3 keeps only shards; the model must then
// run through windows), and the whole-model bf16 copy (MP_BF16: bf16 windows from then on).
// Call with nothing in flight on the model's stream.
void model_gpu_free_flat(model_gpu_t* m);
// Allocates them again, `total` (>= layout total) zeroed elements each; 0, or -1 on OOM.
int model_gpu_restore_flat(model_gpu_t* m, size_t total, char* err, size_t errlen);
// ZeRO-2 (07_zero/zero3.h, level 2): frees only the flat gradient buffer (the parameters stay;
// gradients then go through the window only), and gives it back (`total` zeroed elements; 0, or
// -1 on OOM). fp32 only; nothing may be in flight that writes the gradients.
void model_gpu_free_flat_grads(model_gpu_t* m);
int model_gpu_restore_flat_grads(model_gpu_t* m, size_t total, char* err, size_t errlen);

// ---- a range of blocks (stage 08): model_cpu.h's range seam on the GPU (model_gpu_range.c) --
// The same contract as model_cpu_range_*: blocks [l0, l1) with the embedding and/or the head,
// the input activation given (or token ids), the output gradient given (or the loss), the
// input gradient computed, the range's parameter gradients WRITTEN or ADDED into the model's
// flat gradient buffer. It runs the whole-model pass's own per-block functions
// (model_gpu_pass.c), so over [0, L) with embedding and head it is the whole model: the same
// kernels on the same shapes, the same bits (test_08 model_gpu_range). Limits: fp32 only (the
// bf16 path keeps a bf16 copy of the residual gradient that a given dy would have to be cast
// into: refused with one line); a micro-batch is exactly the model's B x T (the attention
// plug-in and the cuBLAS shapes are fixed at creation). The backward also runs split in two
// (zero bubble's BI and W, model_gpu_range_backward_input / _weight) on sets made with split = 1.
// A pipeline rank makes its model with model_gpu_create_ranges: the same parameters, no
// whole-model activations (only the range sets below hold activations).
model_gpu_t* model_gpu_create_ranges(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                     const attention_impl_t* attn, uint64_t seed, char* err, size_t errlen);

// Saved activations of one micro-batch through one range (device memory, tag acts); one per
// micro-batch in flight. Shapes: N = B*T rows of the model; nL = l1 - l0.
typedef struct {
    model_range_t r;
    int nL;
    float* res;        // (nL+1, N, C) fp32: res[0] the INPUT (the caller writes it unless embed),
                       // res[nL] the OUTPUT (what goes to the next stage)
    float* dy;         // (N, C) fp32 gradient of the output, given (unless head)
    float* dx;         // (N, C) fp32 gradient of the input, computed (unless embed)
    float* d_loss;     // (1) head: this micro-batch's mean cross-entropy (device)
    float loss_scale;  // head: from the forward
    const int32_t* inputs;   // device tokens of the last forward (embed), kept by the caller
    const int32_t* targets;  // device targets (head), kept by the caller until the backward
    // saved for the backward (per block: nL slices)
    float* resmid;     // (nL, N, C) fp32 after the attention residual add
    void *ln1, *ln2;   // (nL, N, C) adt
    float *rstd1, *rstd2;  // (nL, N)
    void* qkv;         // (nL, B, T, 3, NH, HS) adt
    void* att;         // naive attention: (nL, B, NH, T, T) adt
    float* lse;        // plug-in: (nL, B, NH, T) fp32
    void* atty;        // (nL, N, C) adt
    void* h13;         // (nL, N, 2F) adt
    void* lnf;         // head: (N, C) adt
    float* rstdf;      // head: (N)
    void* logits;      // head: (N, V) adt (the backward turns them into their gradient)
    float* ce_lse;     // head: (N)
    float* losses;     // head: (N)
    int have_fwd;
    // Split backward (split = 1 only, else NULL): each linear layer's output gradient, saved by
    // the input pass for the weight pass. Per block a slot, slots 256 bytes apart (the
    // alignment of the fused backward's own buffers). The LM head's dy needs no copy: the input
    // pass leaves dlogits in `logits`.
    int split;
    int have_bi;       // the input pass ran since the forward (the weight pass may run once)
    void* d_out;       // (nL, N, C) adt gradient of each block's output (W2's dy)
    void* d_h13;       // (nL, N, 2F) adt (W1|W3's dy)
    void* d_mid;       // (nL, N, C) adt gradient after the attention residual add (Wo's dy)
    void* d_qkv;       // (nL, N, 3C) adt after the inverse RoPE (q|k|v's dy)
    float* d_emb;      // embed: (N, C) fp32 gradient of the embedding output
} model_gpu_range_acts_t;

// 0, or -1 with a reason (out of memory; the set is left empty). fail() on a bad range or bf16.
// split 1: also the split backward's buffers (5·nL·N·C + 2·nL·N·F floats, + N·C with the
// embedding); split 0: exactly the set of before.
int model_gpu_range_acts_create(model_gpu_t* m, model_gpu_range_acts_t* s, const model_range_t* r, int split,
                                char* err, size_t errlen);
void model_gpu_range_acts_destroy(model_gpu_range_acts_t* s);
size_t model_gpu_range_acts_bytes(const model_gpu_t* m, const model_range_t* r, int split);
// Forward of one micro-batch through s->r, enqueued on the model's stream. Input: d_inputs
// (B, T) device token ids if embed, else s->res[0]. Head: d_targets (B, T) device; the mean
// loss lands in s->d_loss, and the backward is that of loss_scale x the mean loss.
void model_gpu_range_forward(model_gpu_t* m, model_gpu_range_acts_t* s, const int32_t* d_inputs,
                             const int32_t* d_targets, float loss_scale);
float model_gpu_range_loss(model_gpu_t* m, const model_gpu_range_acts_t* s);  // waits
// Backward of the last forward held in s: input s->dy (unless head), output s->dx (unless
// embed); the parameter gradients WRITTEN (accumulate 0: as model_gpu_backward) or ADDED
// (accumulate 1). Hooks (ready and the unit hooks) in model_gpu_backward's order. 0, or -1
// with a reason on out-of-memory at the model's first backward.
int model_gpu_range_backward(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, grad_ready_fn hook,
                             void* ctx, char* err, size_t errlen);
// The same backward in two passes (s made with split = 1), as model_cpu_range_backward_input /
// _weight. Input pass (BI): s->dx and the RMSNorm weight gradients (C floats each), saving
// every linear layer's output gradient; hooks for the norms only. Weight pass (W), after it:
// every linear layer's dW = dyᵀ x and the embedding's, hooks in model_gpu_backward's order
// for those. Both WRITE (accumulate 0) or ADD (1) as above; together they run the fused
// backward's kernels on the same values and shapes: the same gradient bits (the embedding's
// as deterministic as model_gpu_backward's). Not with unit hooks (DIE). BI returns 0, or -1
// with a reason on out-of-memory at the model's first backward; W allocates nothing.
int model_gpu_range_backward_input(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, grad_ready_fn hook,
                                   void* ctx, char* err, size_t errlen);
void model_gpu_range_backward_weight(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, grad_ready_fn hook,
                                     void* ctx);
// Allocates what the first backward would (the gradient buffer, zeroed; backward scratch) now,
// so that no allocation — and no device-wide synchronisation it may bring — happens in the
// middle of a pipelined step while another stream waits on a peer. 0, or -1 with a reason.
int model_gpu_prepare_backward(model_gpu_t* m, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
