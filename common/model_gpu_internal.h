// The CUDA Transformer's state, shared by model_gpu.c (creation, parameters, AdamW),
// model_gpu_pass.c (forward and backward) and model_gpu_attn.c (attention). Not a public API.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/attention.h"
#include "common/matmul.h"
#include "common/model.h"
#include "common/model_gpu.h"

struct model_gpu {
    model_config_t cfg;
    param_layout_t lay;
    int B, T, N;           // N = B*T rows
    int C, NH, HS, F, V, L;
    model_precision_t prec;
    dtype_t adt;           // activation / matmul operand dtype: DT_F32 or DT_BF16
    size_t asz;            // its size in bytes
    const attention_impl_t* attn;  // NULL: naive

    cudaStream_t stream;
    mm_handle_t mm;

    // parameters (tag params)
    float* params;         // (total) fp32 master weights
    uint16_t* params_lp;   // (total) bf16 copy, MP_BF16 only
    int lp_fresh;          // 1 when params_lp matches params
    float* rope_cos;       // (T, HS/2)
    float* rope_sin;       // (T, HS/2)
    int32_t* inputs;       // (B, T) owned token buffers (tag other)
    int32_t* targets;      // (B, T)

    // activations saved for the backward (tag acts); per-layer arrays are L slices
    float* resid1;         // (L+1, N, C) fp32 block inputs; slice L is the final norm's input
    float* resid2;         // (L, N, C) fp32 after the attention residual add
    void* ln1;             // (L, N, C) adt
    float* rstd1;          // (L, N)
    void* ln2;             // (L, N, C) adt
    float* rstd2;          // (L, N)
    void* qkv;             // (L, B, T, 3, NH, HS) adt, q and k after RoPE
    void* att;             // naive: (L, B, NH, T, T) adt, softmax probabilities P
    float* lse;            // plug-in: (L, B, NH, T) fp32 logsumexp
    void* atty;            // (L, B, T, NH, HS) adt attention output (input of Wo)
    void* h13;             // (L, N, 2F) adt, [W1 x | W3 x]
    void* g;               // (N, F) adt, SiLU(W1 x) * W3 x of ONE layer (workspace): not
                           // saved per layer but recomputed from h13 in the backward, which
                           // saves L·N·F elements for one cheap elementwise pass per layer
    void* lnf;             // (N, C) adt
    float* rstdf;          // (N)
    void* logits;          // (N, V) adt; the backward turns it into dlogits in place
    float* ce_lse;         // (N)
    float* losses;         // (N)
    float* d_loss;         // (1)
    const int32_t* last_inputs;   // the last forward's tokens (device), for the backward
    const int32_t* last_targets;

    // gradients and backward scratch (allocated at the first backward)
    float* grads;          // (total) fp32, tag grads
    float* dres;           // (N, C) fp32 gradient of the residual stream (workspace)
    void* dres_lp;         // (N, C) adt copy of dres (MP_BF16; == dres in MP_FP32)
    void* dln;             // (N, C) adt gradient of a norm's output
    void* dqkv;            // (B, T, 3, NH, HS) adt
    void* datt;            // naive: (B, NH, T, T) adt, dP then dS
    void* datty;           // (N, C) adt
    void* dh13;            // (N, 2F) adt
    void* dg;              // (N, F) adt
    float* dw_partial;     // k_rmsnorm_partial_len(N, C) floats
    void* attn_ws;         // plug-in backward workspace
    int bwd_ready;

    // optimizer (allocated at the first step, tag optim)
    float* adam_m;         // (total)
    float* adam_v;         // (total)

    // ZeRO-3 (model_gpu.h): zero by default (the flat buffers above, no hooks)
    model_window_t pwin, gwin;  // where parameters are read and gradients written
    const uint16_t* pwin_lp;    // MP_BF16 under windows: the unit's bf16 parameters over pwin's [lo, hi)
    model_unit_hooks_t hooks;
    int flat_freed;             // model_gpu_free_flat: params and grads are NULL
    int grads_freed;            // ZeRO-2 (MODEL_GPU_NO_FLAT_GRADS, model_gpu_free_flat_grads): grads is
                                // NULL, params is not; gradients go through the window only

    // Stage 08 (model_gpu_range.c)
    int ckpt;              // activation checkpointing K (0 none): the per-layer arrays above
                           // then hold min(K, L) slots and resid1 the checkpoints (model_gpu_pass.c)
    int ranges_only;       // model_gpu_create_ranges: no whole-model activations (resid1.. NULL)
    int head_chunk;        // the chunked LM head's rows (0: whole logits); logits is then (rows, V)
                           // workspace (model_gpu_create_head)
    float* dw_tmp;         // (C) a norm's weight gradient before it is added (ADD sinks only)
};

// One block's saved activations: pointers into the whole model's per-layer arrays
// (model_gpu_pass.c) or into a range's activation set (model_gpu_range.c). The per-block
// functions below read and write only these and the model's parameters and scratch, so the
// whole-model pass and the range pass run the same code.
typedef struct {
    float* x;      // (N, C) fp32 block input
    float* xm;     // (N, C) fp32 after the attention residual add
    float* xn;     // (N, C) fp32 block output (the next block's input)
    void* ln1;     // (N, C) adt
    float* rstd1;  // (N)
    void* ln2;     // (N, C) adt
    float* rstd2;  // (N)
    void* qkv;     // (B, T, 3, NH, HS) adt
    void* att;     // naive: (B, NH, T, T) adt softmax probabilities P (else NULL)
    float* lse;    // plug-in: (B, NH, T) fp32 logsumexp (else NULL)
    void* atty;    // (B, T, NH, HS) adt
    void* h13;     // (N, 2F) adt
} mg_block_t;

// The split backward (zero bubble's BI then W; model_gpu_range.c): where the input pass of one
// block leaves each linear layer's output gradient for the weight pass (dW = dyᵀ x, with the x
// the forward saved). Passed as NULL, the backward is the fused one.
typedef struct {
    void* d_out;   // (N, C) adt gradient of the block output (W2's dy)
    void* d_h13;   // (N, 2F) adt (W1|W3's dy)
    void* d_mid;   // (N, C) adt gradient after the attention residual add (Wo's dy)
    void* d_qkv;   // (B, T, 3, NH, HS) adt, after the inverse RoPE (q|k|v's dy)
} mg_split_t;

// model_gpu_pass.c: the building blocks of both passes, enqueued on m->stream. Weight
// gradients are WRITTEN (beta 0) or ADDED (beta 1: accumulation over micro-batches).
void mg_embed_forward(model_gpu_t* m, const int32_t* tokens, float* x);
// b->xn NULL: stops before the W2 product (a recomputed segment's last block: its output is saved).
void mg_block_forward(model_gpu_t* m, int l, const mg_block_t* b);
void mg_head_forward(model_gpu_t* m, const float* x, void* lnf, float* rstdf, void* logits,
                     const int32_t* targets, float* ce_lse, float* losses, float* d_loss);
// Backward: m->dres holds the gradient of the output on entry and of the input on exit.
// head: scale = d(loss)/d(sum of row losses) (1/N for the mean, loss_scale/N in a pipeline).
// split 1 (the input pass): no LM head weight gradient; the logits buffer keeps dlogits for
// mg_head_backward_weight.
// The chunked LM head of the whole model (m->head_chunk > 0; model_cpu.h "the chunked LM
// head"): the forward a chunk of rows at a time into the (rows, V) logits buffer (lse and
// losses kept per row, then the mean); the backward recomputes each chunk's logits, dlogits in
// place, dW_head added chunk after chunk (GEMM beta 1), d(lnf) rows, then the final norm.
void mg_head_forward_chunked(model_gpu_t* m, const float* x, const int32_t* targets);
void mg_head_backward_chunked(model_gpu_t* m, const float* x, const int32_t* targets, float scale,
                              grad_ready_fn hook, void* ctx);
void mg_head_backward(model_gpu_t* m, const float* x, const void* lnf, const float* rstdf, void* logits,
                      const int32_t* targets, const float* ce_lse, float scale, float beta, int split,
                      grad_ready_fn hook, void* ctx);
// sp NULL: the fused backward. sp set: the input pass (BI): the input gradient and the norm
// weight gradients only, each linear layer's output gradient saved into *sp.
void mg_block_backward(model_gpu_t* m, int l, const mg_block_t* b, const mg_split_t* sp, float beta,
                       grad_ready_fn hook, void* ctx);
// The weight pass (W) of block l / of the LM head, from what the input pass saved: the same
// linear_dw products as the fused backward, in its order (hooks too).
void mg_block_backward_weight(model_gpu_t* m, int l, const mg_block_t* b, const mg_split_t* sp, float beta,
                              grad_ready_fn hook, void* ctx);
void mg_head_backward_weight(model_gpu_t* m, const void* lnf, const void* dlogits, float beta, grad_ready_fn hook,
                             void* ctx);
void mg_embed_backward(model_gpu_t* m, const int32_t* tokens, float beta, grad_ready_fn hook, void* ctx);
// The gradient buffer and the backward scratch, at the first backward (0, or -1 on OOM).
int mg_alloc_backward(model_gpu_t* m, char* err, size_t errlen);

// Unit hooks (model_gpu_pass.c): called only when set.
static inline void mg_unit_hook(model_gpu_t* m, model_unit_fn f, int u) {
    if (f) f(m->hooks.ctx, u);
}

// Weight pointer for matmuls (the bf16 copy in MP_BF16) and fp32 pointers into the flat buffers.
const void* mg_weight(const model_gpu_t* m, param_kind_t k, int layer);
float* mg_param(const model_gpu_t* m, param_kind_t k, int layer);
float* mg_grad(const model_gpu_t* m, param_kind_t k, int layer);
// Byte offset helpers for per-layer activation slices.
static inline void* mg_slice(void* base, size_t elems_per_layer, size_t elem_size, int l) {
    return (char*)base + (size_t)l * elems_per_layer * elem_size;
}

// model_gpu_attn.c: attention of one block, reading b->qkv, writing b->atty (and the
// saved P or lse); the backward reads datty and writes dqkv (before the inverse RoPE).
void mg_attention_forward(model_gpu_t* m, const mg_block_t* b);
void mg_attention_backward(model_gpu_t* m, const mg_block_t* b);
// The plug-in's shapes, dtype and strides (pointers NULL), as asked of impl->supports().
void mg_attention_shape_args(const model_gpu_t* m, attn_args_t* a);
size_t mg_attention_ws_bytes(const model_gpu_t* m);
