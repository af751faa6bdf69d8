// The CS336 basics Transformer LM: shared definitions for the CPU reference (model_cpu.*)
// and the CUDA model (model_gpu.*).
//
// Dimension letters (as in llm.c): B batch, T sequence, C d_model, NH heads, HS head size
// (C / NH), F d_ff, V vocab, L layers.
//
// Architecture: token embedding; L pre-norm blocks
//   x = x + Wo · Attn(RoPE(Wq·RMSNorm1(x)), RoPE(Wk·RMSNorm1(x)), Wv·RMSNorm1(x))   (causal)
//   x = x + W2 · (SiLU(W1·RMSNorm2(x)) * W3·RMSNorm2(x))
// final RMSNorm; untied LM head; no biases. RMSNorm eps 1e-5; RoPE theta 10000 applied to
// pairs (2i, 2i+1) of each head, position = token index; cross-entropy averaged over B*T.
//
// Parameters live in ONE flat fp32 buffer (gradients in a second one with the same layout);
// each parameter is a named view into it. Order (also the order of the flat buffer):
//   token_embeddings [V, C]
//   per layer l: ln1 [C], q_proj [C, C], k_proj [C, C], v_proj [C, C], output_proj [C, C],
//                ln2 [C], w1 [F, C], w3 [F, C], w2 [C, F]
//   ln_final [C], lm_head [V, C]
// Weights are [d_out, d_in] (y = x Wᵀ), as torch.nn.Linear and the course's Linear store them.
// q/k/v are adjacent so that they form one [3C, C] matrix for a fused QKV product, and w1/w3
// form one [2F, C] matrix; every offset is a multiple of 64 elements (256 bytes) — with C and
// F multiples of 8 this keeps those pairs adjacent.
// The names match the PyTorch fixture's state dict: "layers.0.attn.q_proj.weight", ...
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[16];
    int vocab;       // V
    int context;     // maximum T (RoPE tables are built for this many positions)
    int d_model;     // C
    int n_layers;    // L
    int n_heads;     // NH
    int d_ff;        // F
} model_config_t;

// "tiny" (CPU-sized), "small", "medium", "large", "xl", "2.7B" (SPEC.md's table; vocab 10000),
// "8b" (the 2026 leaderboard's class: C 4096, F 11008, L 34, NH 32, vocab 151936).
// Returns 0, or -1 for an unknown name. context is set to `context` (the caller's choice).
int model_config_by_name(const char* name, int context, model_config_t* out);
#define MODEL_SIZE_CHOICES "tiny|small|medium|large|xl|2.7B|8b"
// 0 if usable, else -1 and a reason (heads that do not divide C, odd head size, C or F not
// a multiple of 8, sizes < 1).
int model_config_check(const model_config_t* c, char* err, size_t errlen);

typedef enum {
    PK_EMBED, PK_LN1, PK_Q, PK_K, PK_V, PK_O, PK_LN2, PK_W1, PK_W3, PK_W2, PK_LNF, PK_HEAD
} param_kind_t;

typedef struct {
    char name[64];       // state-dict name
    param_kind_t kind;
    int layer;           // -1 for embedding, ln_final, lm_head
    int rank;            // 1 or 2
    int64_t shape[2];
    size_t offset;       // elements from the start of the flat buffer
    size_t numel;
} param_info_t;

typedef struct {
    int n;               // number of parameters: 2 + 9 L + 1
    param_info_t* p;     // in flat-buffer (forward) order
    size_t total;        // flat buffer length in elements, padding included
} param_layout_t;

param_layout_t param_layout_make(const model_config_t* c);
void param_layout_free(param_layout_t* l);
// Index of the parameter of `kind` in `layer` (-1 for the global ones).
int param_index(const param_layout_t* l, param_kind_t kind, int layer);
// Number of trainable scalars (padding excluded).
size_t param_count(const param_layout_t* l);

// The course's initialisation, deterministic in `seed`: linear weights truncated normal with
// std sqrt(2/(d_in+d_out)) cut at ±3 std; embedding std 1 cut at ±3; RMSNorm weights 1.
// Padding is zero. Uses common/rng.h, so a GPU copy of this buffer is bit-identical.
void model_init_params(const param_layout_t* l, float* params, uint64_t seed);

// Elements [lo, hi) of model_init_params's buffer, bit-identical, into out (hi - lo floats);
// elements past l->total are padding (0). For a rank that builds only its shard (ZeRO-3).
void model_init_params_range(const param_layout_t* l, float* out, size_t lo, size_t hi, uint64_t seed);

// The backward pass calls this when a parameter's gradient is final (all of it written).
// Data parallelism (stage 06) launches communication from here.
typedef void (*grad_ready_fn)(void* ctx, int param_idx);

// AdamW with PyTorch's semantics (torch.optim.AdamW): decoupled weight decay
//   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)        t = 1, 2, ...
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} adamw_config_t;
static inline adamw_config_t adamw_default(void) {
    adamw_config_t a = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    return a;
}

// FLOPs of one forward pass over B*T tokens (matmuls 2·m·n·k, attention scores and P·V
// counted in full; the README derives it). A backward pass is counted as 2x the forward.
double model_forward_flops(const model_config_t* c, int B, int T);

#ifdef __cplusplus
}
#endif
