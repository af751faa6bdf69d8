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
    float* logits;    // (B, T, V); with the chunked head (head_chunk > 0) (rows, V) scratch only
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
    float* dlogits;  // (B, T, V); NULL with the chunked head (dlogits in place over a->logits)
} model_cpu_scratch_t;

// ZeRO-3's seam (stage 07; see "units and windows" below). base NULL: the whole flat buffer.
typedef struct {
    float* base;     // base[i - lo] holds flat element i, for i in [lo, hi)
    size_t lo, hi;
} model_window_t;

typedef void (*model_unit_fn)(void* ctx, int unit);
typedef struct {
    model_unit_fn before_fwd;  // before unit u's forward reads its parameters
    model_unit_fn before_bwd;  // before unit u's backward reads its parameters and writes its gradients
    model_unit_fn after_bwd;   // after unit u's backward wrote its last gradient
    void* ctx;
} model_unit_hooks_t;

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
    // ZeRO-3: all zero by default (parameters from `params`, gradients into the sink's buffer,
    // no hooks): the model then runs exactly as without them.
    model_window_t pwin;        // where the parameters are read from (set by the hooks)
    model_window_t gwin;        // where the gradients are written (set by the hooks)
    model_unit_hooks_t hooks;   // called at unit boundaries when any is non-NULL
    int ckpt;                   // activation checkpointing: K (0 none; model_cpu_create_ckpt)
    // bf16 parameters (model_cpu_set_bf16_params): params_lp holds `params` rounded to bf16 (as
    // fp32 values), remade at every whole-model forward that runs without unit hooks, and read
    // in place of `params`. NULL: fp32 parameters (the default).
    float* params_lp;
    long block_fwds;            // block forwards run so far (a counter the checkpointing tests read)
    int head_chunk;             // the chunked LM head's rows per chunk (0: whole logits; model_cpu_create_head)
} model_cpu_t;

// Checks the config (fail(): one line, exit 2 on a bad one, on B < 1, T < 1 or T > context),
// allocates everything for up to B x T tokens and initialises the parameters with
// model_init_params(seed). Gradients and AdamW moments start at 0.
// Also refuses (fail()) sizes whose buffers could never fit in this machine's memory.
void model_cpu_create(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed);
// The bytes model_cpu_create allocates for B x T tokens (a double: never overflows).
double model_cpu_bytes(const model_config_t* c, int B, int T);
void model_cpu_destroy(model_cpu_t* m);

// ---- activation checkpointing -----------------------------------------------------------
// Policy K (an int): 0 `none` (every block's activations saved, as model_cpu_create), 1
// `block` (only each block's input saved), K > 1 `every-K` (only the input of blocks 0, K,
// 2K, ... saved). The backward walks the S = ceil(L/K) segments from the last: it recomputes
// the segment's blocks forward from its saved input into one segment's worth of buffers, then
// backprops through them. Same operations on the same inputs: loss and every gradient are
// bit-for-bit those of `none` (01_benchmarking/test_checkpoint.c). Memory: S + min(K, L)
// residual slices (B, T, C) and min(K, L) blocks of internals, instead of L + 1 and L;
// compute: one more forward of every block but the last W2 product of each segment.
// With unit hooks (ZeRO-2/3, "units and windows" below) `block` only: a segment is then one
// block = one unit, and the backward calls before_bwd(1 + l) BEFORE recomputing block l, so the
// recompute reads the parameters the hook gathered for the backward (no extra all-gather) and
// after_bwd(1 + l) after its backward; the gradients are the bits of `none` under the same
// hooks (07_zero/test_zero.c). every-K (K > 1) with hooks is refused (MODEL_CKPT_HOOKS_REFUSAL:
// a segment's recompute would need K units' parameters at once, or a second gather of each).
// Policy `nested` (K = MODEL_CKPT_NESTED): binary recursive checkpointing, the least memory.
// The forward keeps only the input of block 0 and the output of block L-1. The backward of
// blocks [lo, hi) given the input of lo: one block -> recompute it and backprop through it;
// else recompute blocks lo .. mid-1 (mid = lo + ceil(n/2), n = hi - lo) from that input into a
// new residual slice, which then holds the input of mid; recurse on [mid, hi) from it, drop it,
// recurse on [lo, mid) from the same input as before. The lower half reuses its parent's input,
// so only the upper halves push a slice: at most D(L) = floor(log2 L) pushed at once.
// Memory: 2 + floor(log2 L) residual slices (input, output, stack) and ONE block of internals
// (shared by every recompute). Compute: model_ckpt_block_forwards, L + R(L) block forwards with
// R(1) = 1, R(n) = ceil(n/2) + R(ceil(n/2)) + R(floor(n/2)); for L a power of two
// 2L + (L/2)·log2 L (every-K: 2L). Same operations on the same inputs: the bits of `none`.
// Unit hooks refused as every-K's are: the recompute of [lo, mid) in the backward of block
// hi-1 reads the parameters of blocks other than the one whose window is open.
// Not with the split backward (one clear DIE); the range functions (stage 08) run without it.
#define MODEL_CKPT_NESTED (-1)
#define MODEL_CKPT_CHOICES "none|block|every-K (K >= 1)|nested"
#define MODEL_CKPT_HOOKS_REFUSAL \
    "activation checkpointing with unit hooks (ZeRO-2/3) supports block or none only: every-K (K > 1) would need K units' parameters gathered at once, nested those of half the blocks"
// "none" -> 0, "block" -> 1, "every-K" -> K, "nested" -> MODEL_CKPT_NESTED. 0, or -1 with why
// in err (naming the choices).
int model_ckpt_parse(const char* s, int* k, char* err, size_t errlen);
const char* model_ckpt_name(int k, char* buf, size_t len);  // "none", "block", "every-4", "nested"
int model_ckpt_hooks_ok(int k);            // 1 for none and block: the policies unit hooks allow
int model_ckpt_segments(int nL, int K);    // S = ceil(nL/K) (nL for K = 0, 1 for nested)
int model_ckpt_slots(int nL, int K);       // blocks of internals kept: min(K, nL) (nL for 0, 1 for nested)
int model_ckpt_res_slices(int nL, int K);  // residual slices: S + slots (nL + 1 for 0, 2 + floor(log2 nL) nested)
int model_ckpt_depth(int nL);              // nested: most stack slices live at once, floor(log2 nL)
// Block forwards of one forward + backward, the recompute's included (one that stops before
// the W2 product counts as one): nL for none, 2·nL for every-K, nL + R(nL) for nested.
long model_ckpt_block_forwards(int nL, int K);
// model_cpu_create with a checkpointing policy (allocates only what the policy keeps).
void model_cpu_create_ckpt(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed, int ckpt);
double model_cpu_bytes_ckpt(const model_config_t* c, int B, int T, int ckpt);
// Of those, the activations (the allocator's acts tag) exactly: what checkpointing shrinks.
size_t model_cpu_acts_bytes(const model_config_t* c, int B, int T, int ckpt);

// ---- the chunked LM head + cross-entropy ---------------------------------------------------
// The head's logits (B·T, V) are the largest activation of a model with a large vocabulary
// (B·T·V·4 bytes, and the same again for their gradient). With head_chunk = R > 0 the model
// never holds them: the forward runs the N = B·T rows R at a time — the chunk's logits
// (R, V), their logsumexp kept per row (lse, N floats), the loss summed — and the backward
// recomputes each chunk's logits from the saved final-norm output, turns them into dlogits
// in place, and from them the chunk's rows of d(lnf) and its share of dW_head (added chunk
// after chunk into the gradient). One (R, V) buffer replaces the (N, V) logits and the (N, V)
// dlogits. Cost: the head's forward product runs twice. Every row's arithmetic is that of the
// whole-logits path and dW_head's sum over rows runs in the same order, so the loss and every
// gradient are bitwise those of head_chunk 0 (tests/test_lm.c). R >= N is one chunk of N rows.
// A forward without targets is refused (fail(), one line): it would want the logits.
// Pipeline ranges (model_cpu_range_acts_create) keep the whole logits.
// The flag of every program that makes a model (--head-chunk ROWS), its help and its bound.
#define HEAD_CHUNK_HELP "LM head + loss over this many rows at a time, never holding the (batch x context, vocab) logits (0: the whole logits)"
#define HEAD_CHUNK_MAX (1 << 30)
void model_cpu_create_head(model_cpu_t* m, const model_config_t* c, int B, int T, uint64_t seed, int ckpt,
                           int head_chunk);
double model_cpu_bytes_head(const model_config_t* c, int B, int T, int ckpt, int head_chunk);
// The acts-tagged bytes with the chunked head: model_cpu_acts_bytes less the B·T·V·4 of the
// logits (the chunk buffer is workspace).
size_t model_cpu_acts_bytes_head(const model_config_t* c, int B, int T, int ckpt, int head_chunk);

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

// ---- bf16 parameters: the CPU's mixed-precision mode ------------------------------------------
// What the CPU can run of mixed precision: every parameter ROUNDED to bf16 (round-to-nearest-
// even, common/dtype.h) before the forward and backward read it — the compute copy — while the
// activations, the arithmetic, the gradients, the masters and AdamW's moments stay fp32. The
// gradient is that of the loss at the rounded parameters, applied to the fp32 masters (what
// torch.autocast and FSDP's MixedPrecisionPolicy(param_dtype=bf16) do with the weights). What it
// is NOT: the GPU's bf16 (model_gpu.h MP_BF16) also rounds activations and matmul operands and
// accumulates in bf16-fed tensor cores, so the two agree to bf16's precision, not in bits.
// With unit hooks (ZeRO-3) the model reads the windows as given: the caller puts bf16 values
// there (zero3.h's bf16 all-gather, widened), so nothing is rounded here.
// on: params_lp allocated (the layout's length, MEM_PARAMS) and filled; 0: freed. A model without
// flat parameters (ZeRO-3's) keeps none: it reads only windows.
void model_cpu_set_bf16_params(model_cpu_t* m, int on);
void model_cpu_round_params(model_cpu_t* m);  // params_lp from params (no-op without either)

// ---- a range of blocks: the seam pipeline parallelism cuts the model at (stage 08) -------
// model_cpu_range.c runs the same operations as model_cpu_forward/backward over blocks
// [l0, l1) only, with the input activation given (or, for the range that holds the embedding,
// token ids) and the output gradient given (or, for the range that holds the head, the loss).
// Over [0, L) with embedding and head it is the whole model, bit for bit (a test checks this).
// Activations live in a model_cpu_range_acts_t, one per micro-batch in flight, so a pipeline
// stage can hold several (1F1B: up to p); the parameters, gradients and backward scratch stay
// in the model_cpu_t (its flat layout: a range updates only its own slice).
typedef struct {
    int l0, l1;  // blocks [l0, l1), 0 <= l0 <= l1 <= L (may be empty: embedding or head alone)
    int embed;   // 1: runs the token embedding first (pipeline stage 0); input = token ids
    int head;    // 1: runs the final norm, LM head and loss last (stage S-1); input = targets
} model_range_t;

// Saved activations of one micro-batch through one range, for up to B x T tokens.
// Letters as above; nL = l1 - l0.
typedef struct {
    model_range_t r;
    int B, T;          // capacity
    int cur_B, cur_T;  // shape of the last forward
    float loss_scale;  // head: d(total loss)/d(this micro-batch's mean loss), from the forward
    int have_loss;     // head: the last forward had targets (so a backward is possible)
    int32_t* inputs;   // (B, T) embed: the token ids of the last forward
    int32_t* targets;  // (B, T) head: its targets
    // a.res (nL+1, B, T, C): res[0] is the range's INPUT (the caller writes it unless embed),
    // res[nL] its OUTPUT (what goes to the next stage); the per-block buffers have nL slices,
    // lnf/lnf_rstd/logits/lse exist only with head.
    model_cpu_acts_t a;
    float* dy;         // (B, T, C) the gradient of the output, given (unless head)
    float* dx;         // (B, T, C) the gradient of the input, computed (unless embed)
    // Split backward (zero bubble: BI then W), allocated only when asked: the gradients that
    // each weight gradient dW = dyᵀ·x needs, saved by the input pass for the weight pass.
    int split;
    float* d_out;      // (nL, B, T, C)  gradient of each block's output (W2's dy)
    float* d_h13;      // (nL, B, T, 2F) (W1|W3's dy)
    float* d_mid;      // (nL, B, T, C)  gradient after the attention block (output_proj's dy)
    float* d_qkv;      // (nL, B, T, 3C) (q|k|v_proj's dy)
    float* d_logits;   // (B, T, V)      head (lm_head's dy)
    float* d_emb;      // (B, T, C)      embed: gradient of the embedding output
    int ckpt;          // activation checkpointing K (0 none; only the whole model sets it, see
                       // "checkpointing" below): the layout of `a` then differs
    int head_chunk;    // the chunked LM head's rows (0: whole logits; only the whole model sets it)
} model_cpu_range_acts_t;

// Where a backward puts the range's parameter gradients.
typedef struct {
    float* grads;      // flat gradient buffer in the model's layout
    int accumulate;    // 0: WRITE (as model_cpu_backward; the range's padding is zeroed too),
                       // 1: ADD (gradient accumulation over micro-batches)
    grad_ready_fn hook;  // may be NULL: called as each parameter's gradient is final
    void* ctx;
} model_cpu_grad_sink_t;

// 0 if `r` is a valid range for config c, else -1 and why (bounds, empty without embedding
// or head).
int model_range_check(const model_config_t* c, const model_range_t* r, char* err, size_t errlen);
// The range's parameters are one contiguous slice [*begin, *end) of the flat buffer (layers
// are stored in order, the embedding before layer 0, ln_final and lm_head after layer L-1).
void model_range_span(const param_layout_t* lay, const model_config_t* c, const model_range_t* r,
                      size_t* begin, size_t* end);

// Allocates the saved activations of one micro-batch of up to B x T tokens through r (split:
// also the buffers of the split backward). fail() on bad sizes, as model_cpu_create.
void model_cpu_range_acts_create(model_cpu_range_acts_t* s, const model_config_t* c,
                                 const model_range_t* r, int B, int T, int split);
void model_cpu_range_acts_destroy(model_cpu_range_acts_t* s);
double model_cpu_range_acts_bytes(const model_config_t* c, const model_range_t* r, int B, int T,
                                  int split);

// Forward of one micro-batch through s->r with m's parameters. Input: token ids `inputs`
// (B, T) if r.embed, else s->a.res[0] (B, T, C) as the caller left it. Output in s->a.res[nL].
// With r.head and targets (B, T): returns the micro-batch's mean cross-entropy and remembers
// loss_scale for the backward (the gradient is that of loss_scale · mean loss: 1/m for m
// micro-batches makes the sum over them the mean over the whole batch). Else returns NAN.
// m's B x T capacity must cover B x T (its backward scratch is shared by every range).
float model_cpu_range_forward(model_cpu_t* m, model_cpu_range_acts_t* s, const int32_t* inputs,
                              const int32_t* targets, float loss_scale, int B, int T);
// Full backward of the last forward held in s: input s->dy (unless head), output s->dx (unless
// embed), parameter gradients into the sink; hooks in model_cpu_backward's order.
void model_cpu_range_backward(model_cpu_t* m, model_cpu_range_acts_t* s,
                              const model_cpu_grad_sink_t* sink);
// The same backward in two passes (zero bubble; s created with split = 1):
// input pass (BI): s->dx and the RMSNorm weight gradients (C floats each, too cheap to defer),
// saving the output gradient of every linear layer; weight pass (W): every linear layer's dW
// and the embedding's. Together they give the same bits as model_cpu_range_backward.
void model_cpu_range_backward_input(model_cpu_t* m, model_cpu_range_acts_t* s,
                                    const model_cpu_grad_sink_t* sink);
void model_cpu_range_backward_weight(model_cpu_t* m, model_cpu_range_acts_t* s,
                                     const model_cpu_grad_sink_t* sink);

// ---- units and windows: the seam ZeRO-3 (07_zero/zero3.h) shards parameters at ---------
// The model is U = L + 2 units in flat-buffer order: unit 0 the token embedding, unit 1 + l
// block l, unit L + 1 ln_final and lm_head. Unit u's parameters are one contiguous span of the
// flat buffer (model_unit_span; the spans tile [0, layout.total)).
// A window {base, lo, hi} says where the forward reads parameters (m->pwin) or the backward
// writes gradients (m->gwin): flat element i lives at base[i - lo]; every parameter access is
// checked to fall inside [lo, hi) (a DIE names the parameter otherwise). With hooks set
// (model_cpu_set_unit_hooks), model_cpu_forward/backward and the range functions call
// before_fwd(u) before unit u's forward, before_bwd(u) before its backward (with `block`
// checkpointing: before its recompute, which reads the same window) and after_bwd(u)
// after it, in execution order (forward 0..U-1, backward U-1..0); the hooks point the windows
// at the unit's gathered parameters and its gradient buffer. With hooks, a WRITE backward
// zeroes each unit's span (through the gradient window) after before_bwd, not the range's
// span up front.
// Without hooks and windows nothing changes: the same code, the same bits (a test checks
// that the model through windows over a copy gives the bits of the model without them).
int model_n_units(const model_config_t* c);                                  // L + 2
model_range_t model_unit_range(const model_config_t* c, int u);              // as a range
void model_unit_span(const param_layout_t* lay, const model_config_t* c, int u, size_t* begin, size_t* end);
// hooks NULL: back to the default (no hooks, both windows cleared). Hooks on a model made with
// every-K (K > 1) or nested checkpointing: fail() with MODEL_CKPT_HOOKS_REFUSAL (one line, exit 2).
void model_cpu_set_unit_hooks(model_cpu_t* m, const model_unit_hooks_t* hooks);

#ifdef __cplusplus
}
#endif
