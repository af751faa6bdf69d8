// The dtype of every tensor of the CUDA model under fp32 and bf16, with the reasons (see
// model_dtypes.h). The rows follow one step: parameters, forward, loss, backward, optimizer.
#include "common/model_dtypes.h"

#include "common/check.h"

#define F32 DT_F32
#define B16 DT_BF16
#define I32 DT_I32
#define NO MT_ABSENT

static const model_tensor_info_t k_info[MT_COUNT] = {
    [MT_MASTER] = {"master weights (all parameters)", "params", {F32, F32},
                   "fp32: autocast never changes a parameter",
                   "an AdamW update lr·m/(√v+ε) is ~1e-3 of the weight or less; bf16 keeps 8 significant "
                   "bits, so updates under 2^-9 of a weight would round away and training would stall"},
    [MT_WEIGHTS_LP] = {"matmul weights (bf16 copy)", "params_lp", {NO, B16},
                       "bf16: each linear casts its fp32 weight at the call (cached for the forward)",
                       "tensor-core operand: half the bytes and the bf16 FLOP rate; made once per step, "
                       "fused into the AdamW kernel"},
    [MT_NORM_GAINS] = {"RMSNorm weights", "(in params)", {F32, F32},
                       "fp32 (a parameter; the course's RMSNorm multiplies in fp32)",
                       "read by the norm kernel in fp32 from the master buffer: elementwise, no tensor "
                       "core to feed"},
    [MT_TOKENS] = {"token ids (inputs, targets)", "inputs, targets", {I32, I32},
                   "int64 (indices are never autocast)", "indices; 32 bits hold any vocabulary"},
    [MT_ROPE] = {"RoPE cos/sin tables", "rope_cos, rope_sin", {F32, F32},
                 "fp32 buffers (x·cos promotes a bf16 q to fp32; the next matmul casts it back)",
                 "angles up to T rad: bf16's 8 bits would misplace far positions"},
    [MT_RESIDUAL] = {"residual stream (embedding output, block inputs and sums)", "resid1, resid2",
                     {F32, F32},
                     "fp32: the embedding lookup is not autocast, and fp32 + bf16 block output "
                     "promotes to fp32",
                     "a running sum of every block's small update: the Wo and W2 GEMMs add into it in "
                     "fp32 (beta = 1 on an fp32 C), so no update is rounded away"},
    [MT_MATMUL_ACC] = {"matmul accumulators", "(inside cuBLAS)", {F32, F32},
                       "fp32 (cuBLAS bf16 GEMMs accumulate in fp32)",
                       "a dot product of up to d_ff terms: a 16-bit accumulator stalls (the "
                       "accumulation demo: a bf16 sum of 0.01 stops at 4)"},
    [MT_NORM_STATS] = {"RMSNorm statistics (1/rms per row)", "rstd1, rstd2, rstdf", {F32, F32},
                       "fp32 (rms_norm/layer_norm are on autocast's fp32 list; the course's RMSNorm "
                       "upcasts to fp32)",
                       "a sum of d_model squares: in fp16 it overflows (65504) from rms ≈ 5 at d_model "
                       "2560, in bf16 it is off by up to ~1% (table below); fp32 is exact to 1e-7"},
    [MT_NORM_OUT] = {"RMSNorm outputs", "ln1, ln2, lnf", {F32, B16},
                     "fp32 (the norm returns its input's dtype); the next linear casts it to bf16",
                     "only a matmul reads it: stored in the dtype that matmul consumes (what "
                     "autocast's cast at the linear makes), computed in fp32 registers"},
    [MT_QKV] = {"q, k, v (QKV GEMM output, after RoPE)", "qkv", {F32, B16},
                "bf16 (linear output)",
                "matmul output rounded once from the fp32 accumulator; RoPE rotates it in fp32 "
                "registers in place; read only by the QKᵀ and P·V matmuls"},
    [MT_ATT_P] = {"attention scores S → probabilities P (naive)", "att", {F32, B16},
                  "scores bf16 (matmul output), softmax output fp32 (softmax is on the fp32 list), "
                  "cast to bf16 by P·V",
                  "max, exp and sum run in fp32 registers; P in [0, 1] is stored bf16 (rel. error "
                  "2^-9) because P·V reads it as bf16 anyway, and it is the quadratic tensor: bf16 "
                  "halves the largest activation (autocast keeps it fp32)"},
    [MT_ATT_LSE] = {"attention logsumexp (plug-in)", "lse", {F32, F32},
                    "fp32 (flash attention keeps its statistics in fp32)",
                    "a log of a sum over T terms: a reduction"},
    [MT_ATT_OUT] = {"attention output", "atty", {F32, B16}, "bf16 (matmul output)",
                    "matmul output; read only by the Wo matmul"},
    [MT_H13] = {"FFN W1 x and W3 x", "h13", {F32, B16}, "bf16 (linear outputs)",
                "matmul outputs; read by SwiGLU (fp32 registers) and its backward"},
    [MT_SWIGLU] = {"SwiGLU output SiLU(W1 x)·W3 x", "g", {F32, B16},
                   "bf16 (silu and * are on no autocast list: they keep their inputs' dtype)",
                   "elementwise in fp32 registers, stored in the dtype the W2 matmul consumes"},
    [MT_LOGITS] = {"logits", "logits", {F32, B16}, "bf16 (linear output)",
                   "LM head output; the cross-entropy reads it into fp32 (max, exp-sum, log)"},
    [MT_LOSS_STATS] = {"cross-entropy logsumexp and per-row losses", "ce_lse, losses", {F32, F32},
                       "fp32 (cross_entropy/log_softmax are on autocast's fp32 list)",
                       "a log-sum-exp over the vocabulary: a reduction whose exp overflows in 16 bits"},
    [MT_LOSS] = {"loss (mean over B·T)", "d_loss", {F32, F32}, "fp32 (cross_entropy output)",
                 "a mean over B·T rows: a reduction"},
    [MT_GRADS] = {"parameter gradients", "grads", {F32, F32},
                  "fp32 (.grad has the parameter's dtype: the cast's backward upcasts)",
                  "the weight-gradient GEMMs write fp32 directly (fp32 accumulation over B·T rows); "
                  "the optimizer and the all-reduce of stage 06 read fp32"},
    [MT_DRES] = {"residual stream gradient", "dres", {F32, F32},
                 "fp32 (the gradient of an fp32 tensor)",
                 "a running sum of every block's gradient contribution, as the residual itself"},
    [MT_DRES_LP] = {"residual gradient, matmul copy", "dres_lp", {NO, B16},
                    "bf16 (autocast casts the fp32 gradient at each linear's backward)",
                    "operand of the backward GEMMs (fp32 mode uses dres itself)"},
    [MT_ACT_GRADS] = {"activation gradients (norm outputs, q/k/v, P, attention output, h13, SwiGLU)",
                      "dln, dqkv, datt, datty, dh13, dg", {F32, B16},
                      "bf16 (a tensor's gradient has the tensor's dtype)",
                      "GEMM operands and outputs as in the forward; the norm and softmax backward "
                      "reduce in fp32 registers"},
    [MT_OPTIM] = {"AdamW moments m, v", "adam_m, adam_v", {F32, F32},
                  "fp32 (optimizer state follows the fp32 parameters)",
                  "v is a mean of squared gradients (values to 1e-12 and below): bf16 would lose the "
                  "small ones' precision; updated in the same fused kernel as the weights"},
};

const model_tensor_info_t* model_tensor_info(model_tensor_t t) {
    if ((int)t < 0 || t >= MT_COUNT) DIE("model_tensor_info: no tensor class %d", (int)t);
    return &k_info[t];
}

dtype_t model_tensor_dtype(model_precision_t p, model_tensor_t t) {
    if (p != MP_FP32 && p != MP_BF16) DIE("model_tensor_dtype: no precision %d", (int)p);
    return model_tensor_info(t)->dt[p];
}

const char* model_dtype_label(dtype_t dt) {
    switch (dt) {
    case DT_F32: return "fp32";
    case DT_BF16: return "bf16";
    case DT_I32: return "int32";
    case DT_I64: return "int64";
    default: return "—";
    }
}

typedef struct {
    model_buffer_t* out;
    int cap, n;
    model_precision_t p;
} blist_t;

// Adds one buffer of `numel` elements of tensor t's dtype (nothing if t is absent in p, or
// numel is 0: a buffer the model does not allocate in that configuration).
static void add(blist_t* l, model_tensor_t t, const char* field, mem_tag_t tag, model_buffer_phase_t ph,
                size_t numel) {
    const dtype_t dt = model_tensor_dtype(l->p, t);
    if (dt == MT_ABSENT || numel == 0) return;
    if (l->n < l->cap) l->out[l->n] = (model_buffer_t){t, field, tag, ph, numel * dtype_size(dt)};
    l->n++;
}

int model_dtype_buffers(const model_config_t* cfg, int B, int T, model_precision_t p, int naive,
                        model_buffer_t* out, int cap) {
    const param_layout_t lay = param_layout_make(cfg);
    const size_t N = (size_t)B * T, C = cfg->d_model, F = cfg->d_ff, V = cfg->vocab, L = cfg->n_layers,
                 NH = cfg->n_heads, HS = C / NH, total = lay.total;
    blist_t l = {out, cap, 0, p};
    // model_gpu_create
    add(&l, MT_MASTER, "params", MEM_PARAMS, MB_CREATE, total);
    add(&l, MT_WEIGHTS_LP, "params_lp", MEM_PARAMS, MB_CREATE, total);
    add(&l, MT_ROPE, "rope_cos", MEM_OTHER, MB_CREATE, (size_t)T * (HS / 2));
    add(&l, MT_ROPE, "rope_sin", MEM_OTHER, MB_CREATE, (size_t)T * (HS / 2));
    add(&l, MT_TOKENS, "inputs", MEM_OTHER, MB_CREATE, N);
    add(&l, MT_TOKENS, "targets", MEM_OTHER, MB_CREATE, N);
    add(&l, MT_RESIDUAL, "resid1", MEM_ACTS, MB_CREATE, (L + 1) * N * C);
    add(&l, MT_RESIDUAL, "resid2", MEM_ACTS, MB_CREATE, L * N * C);
    add(&l, MT_NORM_OUT, "ln1", MEM_ACTS, MB_CREATE, L * N * C);
    add(&l, MT_NORM_OUT, "ln2", MEM_ACTS, MB_CREATE, L * N * C);
    add(&l, MT_NORM_STATS, "rstd1", MEM_ACTS, MB_CREATE, L * N);
    add(&l, MT_NORM_STATS, "rstd2", MEM_ACTS, MB_CREATE, L * N);
    add(&l, MT_QKV, "qkv", MEM_ACTS, MB_CREATE, L * N * 3 * C);
    add(&l, MT_ATT_P, "att", MEM_ACTS, MB_CREATE, naive ? L * (size_t)B * NH * T * T : 0);
    add(&l, MT_ATT_LSE, "lse", MEM_ACTS, MB_CREATE, naive ? 0 : L * N * NH);
    add(&l, MT_ATT_OUT, "atty", MEM_ACTS, MB_CREATE, L * N * C);
    add(&l, MT_H13, "h13", MEM_ACTS, MB_CREATE, L * N * 2 * F);
    add(&l, MT_SWIGLU, "g", MEM_WORKSPACE, MB_CREATE, N * F);
    add(&l, MT_NORM_OUT, "lnf", MEM_ACTS, MB_CREATE, N * C);
    add(&l, MT_NORM_STATS, "rstdf", MEM_ACTS, MB_CREATE, N);
    add(&l, MT_LOGITS, "logits", MEM_ACTS, MB_CREATE, N * V);
    add(&l, MT_LOSS_STATS, "ce_lse", MEM_ACTS, MB_CREATE, N);
    add(&l, MT_LOSS_STATS, "losses", MEM_ACTS, MB_CREATE, N);
    add(&l, MT_LOSS, "d_loss", MEM_OTHER, MB_CREATE, 1);
    // the first backward
    add(&l, MT_GRADS, "grads", MEM_GRADS, MB_BACKWARD, total);
    add(&l, MT_DRES, "dres", MEM_WORKSPACE, MB_BACKWARD, N * C);
    add(&l, MT_DRES_LP, "dres_lp", MEM_WORKSPACE, MB_BACKWARD, N * C);
    add(&l, MT_ACT_GRADS, "dln", MEM_WORKSPACE, MB_BACKWARD, N * C);
    add(&l, MT_ACT_GRADS, "dqkv", MEM_WORKSPACE, MB_BACKWARD, N * 3 * C);
    add(&l, MT_ACT_GRADS, "datt", MEM_WORKSPACE, MB_BACKWARD, naive ? (size_t)B * NH * T * T : 0);
    add(&l, MT_ACT_GRADS, "datty", MEM_WORKSPACE, MB_BACKWARD, N * C);
    add(&l, MT_ACT_GRADS, "dh13", MEM_WORKSPACE, MB_BACKWARD, N * 2 * F);
    add(&l, MT_ACT_GRADS, "dg", MEM_WORKSPACE, MB_BACKWARD, N * F);
    // the first AdamW step
    add(&l, MT_OPTIM, "adam_m", MEM_OPTIM, MB_STEP, total);
    add(&l, MT_OPTIM, "adam_v", MEM_OPTIM, MB_STEP, total);
    return l.n;
}
