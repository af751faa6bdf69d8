// The CPU reference of the Transformer LM (common/model.h): forward, backward and AdamW in
// plain C, fp32. It is what every faster version is checked against — the CUDA model in
// stage 01, flash attention inside the model in stage 04, data-parallel training in 06 and
// sharded optimizers in 07 — and it is checked itself against PyTorch
// (tests/fixtures/model/, 01_benchmarking/test_model_cpu.c).
//
// Usage:
//   model_cpu_t m;
//   model_cpu_create(&m, &cfg, B, T, seed);        // params initialised by model_init_params
//   float loss = model_cpu_forward(&m, inputs, targets, B, T);   // inputs, targets (B, T)
//   model_cpu_backward(&m, hook, ctx);              // m.grads written, hook per parameter
//   model_cpu_adamw_step(&m, &adamw);
//   model_cpu_destroy(&m);
// Letters: B batch, T sequence, C d_model, NH heads, HS head size, F d_ff, V vocab, L layers.
#pragma once
#include <stdint.h>
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// Everything the backward pass needs from the forward, for a capacity of B x T tokens.
// Per-layer buffers hold L slices, one after the other.
typedef struct {
    float* res;       // (L+1, B, T, C) residual stream entering layer l; res[L] enters ln_final
    float* ln1;       // (L, B, T, C)   RMSNorm1 output
    float* ln1_rstd;  // (L, B, T)      1/rms of each row
    float* qkv;       // (L, B, T, 3C)  q | k | v (q and k after RoPE)
    float* att;       // (L, B, NH, T, T) softmax probabilities (0 above the diagonal)
    float* atty;      // (L, B, T, C)   attention output, heads concatenated, before output_proj
    float* res_mid;   // (L, B, T, C)   residual after the attention block
    float* ln2;       // (L, B, T, C)   RMSNorm2 output
    float* ln2_rstd;  // (L, B, T)
    float* h13;       // (L, B, T, 2F)  [W1 x | W3 x] (one product with the adjacent w1/w3)
    float* gate;      // (L, B, T, F)   SiLU(h1) * h3
    float* lnf;       // (B, T, C)      final RMSNorm output
    float* lnf_rstd;  // (B, T)
    float* logits;    // (B, T, V)
    float* lse;       // (B, T)         logsumexp of each logits row
} model_cpu_acts_t;

// Scratch for the backward pass (not kept between calls).
typedef struct {
    float* dres;     // (B, T, C)   gradient of the residual stream, updated in place layer by layer
    float* dln;      // (B, T, C)   gradient of an RMSNorm output
    float* dqkv;     // (B, T, 3C)
    float* datty;    // (B, T, C)
    float* dh13;     // (B, T, 2F)
    float* dgate;    // (B, T, F)
    float* dlogits;  // (B, T, V)
} model_cpu_scratch_t;

typedef struct {
    model_config_t c;
    param_layout_t layout;
    float* params;  // (layout.total) flat parameters
    float* grads;   // (layout.total) same layout; written (not accumulated) by the backward
    float* adam_m;  // (layout.total) AdamW first moment
    float* adam_v;  // (layout.total) AdamW second moment
    int adam_t;     // AdamW steps taken
    int B, T;       // capacity given to model_cpu_create
    int cur_B, cur_T;   // shape of the last forward
    int have_targets;   // the last forward had targets (so a backward is possible)
    int32_t* inputs;    // (B, T) copy of the last forward's inputs
    int32_t* targets;   // (B, T)
    float* rope_cos;    // (context, HS/2)
    float* rope_sin;    // (context, HS/2)
    model_cpu_acts_t a;
    model_cpu_scratch_t s;
} model_cpu_t;

// Checks the config (fail(): one line, exit 2 on a bad one, on B < 1, T < 1 or T > context),
// allocates everything for up to B x T tokens and initialises the parameters with
// model_init_params(seed). Gradients and AdamW moments start at 0.
// Also refuses (fail()) sizes whose buffers could never fit in this machine's memory.
void model_cpu_create(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed);
// The bytes model_cpu_create allocates for B x T tokens (a double: never overflows).
double model_cpu_bytes(const model_config_t* c, int B, int T);
void model_cpu_destroy(model_cpu_t* m);

// Forward over inputs (B, T). With targets (B, T) returns the mean cross-entropy over B·T;
// with targets NULL returns NAN (logits only). Logits are in m->a.logits (B, T, V).
// Bad input is a user error (fail(), exit 2): a token id outside [0, V), B < 1, T < 1,
// T > context, or B or T above the capacity given to model_cpu_create.
float model_cpu_forward(model_cpu_t* m, const int32_t* inputs, const int32_t* targets, int B,
                        int T);

// Backward of the last forward's mean loss: writes every gradient (padding 0) into m->grads,
// walking the layers in reverse. `hook` (may be NULL) is called once per parameter as soon as
// its gradient is final, in this order: lm_head, ln_final, then for l = L-1 .. 0: w2, w3, w1,
// ln2, output_proj, v_proj, k_proj, q_proj, ln1; last token_embeddings.
void model_cpu_backward(model_cpu_t* m, grad_ready_fn hook, void* ctx);

// One AdamW step over the whole flat buffer with m->grads (t = ++m->adam_t).
void model_cpu_adamw_step(model_cpu_t* m, const adamw_config_t* cfg);

#ifdef __cplusplus
}
#endif
