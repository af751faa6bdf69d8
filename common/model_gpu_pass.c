// Forward and backward passes of the CUDA Transformer (state: model_gpu_internal.h).
// Shapes: N = B*T rows; activations of dtype adt unless marked fp32.
// Matmul conventions (matmul.h, row-major): a Linear y = x Wᵀ with W (out, in) is
// mm_rm(trans A = 0, trans B = 1); its input gradient dx = dy W is (0, 0); its weight
// gradient dW = dyᵀ x is (1, 0) and lands in the fp32 gradient buffer (fp32 C).
#include <math.h>
#include <stdio.h>
#include <cublas_v2.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/model_gpu_internal.h"
#include "common/model_kernels.h"
#include "common/nvtx.h"

#define RMS_EPS 1e-5f

// x (N, in) · W(out, in)ᵀ -> y (N, out); beta = 1 with fp32 y adds into the residual stream.
static void linear(model_gpu_t* m, const void* x, const void* W, void* y, dtype_t yt, int in,
                   int out, float beta) {
    mm_rm(&m->mm, 0, 1, m->N, out, in, 1.0f, x, m->adt, in, W, m->adt, in, beta, y, yt, out);
}
// dx (N, in) = dy (N, out) · W (out, in)
static void linear_dx(model_gpu_t* m, const void* dy, const void* W, void* dx, int in, int out) {
    mm_rm(&m->mm, 0, 0, m->N, in, out, 1.0f, dy, m->adt, out, W, m->adt, in, 0.0f, dx, m->adt, in);
}
// dW (out, in) fp32 = dyᵀ (out, N) · x (N, in), written (beta 0) or added (beta 1)
static void linear_dw(model_gpu_t* m, const void* dy, const void* x, float* dW, int in, int out, float beta) {
    mm_rm(&m->mm, 1, 0, out, in, m->N, 1.0f, dy, m->adt, out, x, m->adt, in, beta, dW, DT_F32, in);
}

// Layer l's activations in the whole model's per-layer arrays. With checkpointing K (m->ckpt)
// the arrays hold one segment (slot l % K) and resid1 holds: slices [0, S) the inputs of
// blocks 0, K, 2K, ... (S = ceil(L/K)), slice S the final norm's input, slices S+1 .. the
// inputs of the segment's blocks 1 .. K-1 (model_cpu_range.c lays out the CPU's the same way).
static size_t final_slice(const model_gpu_t* m) {
    return (size_t)(m->ckpt > 0 ? model_ckpt_segments(m->L, m->ckpt) : m->L);
}
static mg_block_t whole_block(model_gpu_t* m, int l0) {
    const size_t es = m->asz, NC = (size_t)m->N * m->C;
    size_t l = (size_t)l0, xi = (size_t)l0, oi = (size_t)l0 + 1;
    const int K = m->ckpt;
    if (K > 0) {
        const int S = model_ckpt_segments(m->L, K), j = l0 % K, sg = l0 / K;
        l = (size_t)j;
        xi = j == 0 ? (size_t)sg : (size_t)(S + j);
        oi = l0 == m->L - 1 ? (size_t)S : j == K - 1 ? (size_t)sg + 1 : (size_t)(S + 1 + j);
    }
    mg_block_t b;
    b.x = m->resid1 + xi * NC;
    b.xm = m->resid2 + l * NC;
    b.xn = m->resid1 + oi * NC;
    b.ln1 = mg_slice(m->ln1, NC, es, l);
    b.rstd1 = m->rstd1 + (size_t)l * m->N;
    b.ln2 = mg_slice(m->ln2, NC, es, l);
    b.rstd2 = m->rstd2 + (size_t)l * m->N;
    b.qkv = mg_slice(m->qkv, NC * 3, es, l);
    b.att = m->att ? mg_slice(m->att, (size_t)m->B * m->NH * m->T * m->T, es, l) : NULL;
    b.lse = m->lse ? m->lse + (size_t)l * m->B * m->NH * m->T : NULL;
    b.atty = mg_slice(m->atty, NC, es, l);
    b.h13 = mg_slice(m->h13, (size_t)m->N * 2 * m->F, es, l);
    return b;
}

void mg_embed_forward(model_gpu_t* m, const int32_t* tokens, float* x) {
    k_embedding_fwd(tokens, mg_param(m, PK_EMBED, -1), x, m->N, m->C, m->V, m->stream);
}

// Block l (its parameters), activations in b.
void mg_block_forward(model_gpu_t* m, int l, const mg_block_t* b) {
    const int N = m->N, C = m->C, F = m->F;
    const size_t NC = (size_t)N * C;
    cudaStream_t s = m->stream;
    void* g = m->g;  // (N, F) scratch: recomputed in the backward
    k_rmsnorm_fwd(m->adt, b->x, mg_param(m, PK_LN1, l), b->ln1, b->rstd1, N, C, RMS_EPS, s);
    linear(m, b->ln1, mg_weight(m, PK_Q, l), b->qkv, m->adt, C, 3 * C, 0.0f);  // fused q, k, v
    k_rope(m->adt, b->qkv, m->rope_cos, m->rope_sin, m->B, m->T, m->NH, m->HS, 0, s);
    nvtx_push("attention");
    mg_attention_forward(m, b);
    nvtx_pop();
    // xm = x + atty Woᵀ: the GEMM accumulates into an fp32 copy of x.
    CUDA_CHECK(cudaMemcpyAsync(b->xm, b->x, NC * 4, cudaMemcpyDeviceToDevice, s));
    linear(m, b->atty, mg_weight(m, PK_O, l), b->xm, DT_F32, C, C, 1.0f);
    k_rmsnorm_fwd(m->adt, b->xm, mg_param(m, PK_LN2, l), b->ln2, b->rstd2, N, C, RMS_EPS, s);
    linear(m, b->ln2, mg_weight(m, PK_W1, l), b->h13, m->adt, C, 2 * F, 0.0f);  // fused w1, w3
    if (!b->xn) return;  // a recomputed segment's last block: its output is saved
    k_swiglu_fwd(m->adt, b->h13, g, N, F, s);
    CUDA_CHECK(cudaMemcpyAsync(b->xn, b->xm, NC * 4, cudaMemcpyDeviceToDevice, s));
    linear(m, g, mg_weight(m, PK_W2, l), b->xn, DT_F32, F, C, 1.0f);
}

void mg_head_forward(model_gpu_t* m, const float* x, void* lnf, float* rstdf, void* logits,
                     const int32_t* targets, float* ce_lse, float* losses, float* d_loss) {
    const int N = m->N, C = m->C, V = m->V;
    k_rmsnorm_fwd(m->adt, x, mg_param(m, PK_LNF, -1), lnf, rstdf, N, C, RMS_EPS, m->stream);
    linear(m, lnf, mg_weight(m, PK_HEAD, -1), logits, m->adt, C, V, 0.0f);
    k_cross_entropy_fwd(m->adt, logits, targets, ce_lse, losses, d_loss, N, V, m->stream);
}

// Rows [r0, r0 + n) of the logits into the (rows, V) buffer.
static void head_chunk_logits(model_gpu_t* m, int r0, int n) {
    const int C = m->C, V = m->V;
    const char* lnf = (const char*)m->lnf + (size_t)r0 * C * m->asz;
    mm_rm(&m->mm, 0, 1, n, V, C, 1.0f, lnf, m->adt, C, mg_weight(m, PK_HEAD, -1), m->adt, C, 0.0f, m->logits,
          m->adt, V);
}

void mg_head_forward_chunked(model_gpu_t* m, const float* x, const int32_t* targets) {
    const int N = m->N, C = m->C, V = m->V, R = m->head_chunk < N ? m->head_chunk : N;
    k_rmsnorm_fwd(m->adt, x, mg_param(m, PK_LNF, -1), m->lnf, m->rstdf, N, C, RMS_EPS, m->stream);
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = N - r0 < R ? N - r0 : R;
        head_chunk_logits(m, r0, n);
        k_cross_entropy_rows(m->adt, m->logits, targets + r0, m->ce_lse + r0, m->losses + r0, n, V, m->stream);
    }
    k_loss_mean(m->losses, m->d_loss, N, m->stream);
}

void model_gpu_forward_async(model_gpu_t* m, const int32_t* d_inputs, const int32_t* d_targets) {
    if (m->ranges_only) DIE("model_gpu_forward: this model was made by model_gpu_create_ranges (no whole-model activations)");
    const int L = m->L;
    nvtx_push("forward");
    if (m->params_lp && !m->lp_fresh) {  // bf16 copy of the weights, once per step
        k_cast_f32_bf16(m->params, m->params_lp, m->lay.total, m->stream);
        m->lp_fresh = 1;
    }
    // Checkpointing with unit hooks: block (K = 1) only (model_cpu.h; model_gpu_set_unit_hooks
    // refuses the rest with one line, this is the safety net).
    if (m->ckpt > 1 && (m->hooks.before_fwd || m->hooks.before_bwd || m->hooks.after_bwd))
        DIE("model_gpu: %s", MODEL_CKPT_HOOKS_REFUSAL);
    mg_unit_hook(m, m->hooks.before_fwd, 0);  // ZeRO-3 (unit 0: the embedding)
    mg_embed_forward(m, d_inputs, m->resid1);
    for (int l = 0; l < L; l++) {
        mg_unit_hook(m, m->hooks.before_fwd, 1 + l);
        const mg_block_t b = whole_block(m, l);
        mg_block_forward(m, l, &b);
    }
    mg_unit_hook(m, m->hooks.before_fwd, L + 1);
    if (!d_targets && m->head_chunk > 0)
        fail("a forward without targets wants the logits, which the chunked LM head (head chunk %d) never holds; "
             "make the model with head chunk 0", m->head_chunk);
    if (m->head_chunk > 0)
        mg_head_forward_chunked(m, m->resid1 + final_slice(m) * m->N * m->C, d_targets);
    else
        mg_head_forward(m, m->resid1 + final_slice(m) * m->N * m->C, m->lnf, m->rstdf, m->logits, d_targets,
                        m->ce_lse, m->losses, m->d_loss);
    m->last_targets = d_targets;
    m->last_inputs = d_inputs;
    nvtx_pop();
}

int mg_alloc_backward(model_gpu_t* m, char* err, size_t errlen) {
    const size_t N = m->N, C = m->C, F = m->F, es = m->asz, total = m->lay.total;
    struct { void** p; size_t bytes; mem_tag_t tag; const char* what; } want[] = {
        {(void**)&m->grads, m->flat_freed || m->grads_freed ? 0 : total * 4, MEM_GRADS, "gradients"},  // ZeRO-2/3: windows
        {(void**)&m->dres, N * C * 4, MEM_WORKSPACE, "residual gradient"},
        {&m->dres_lp, m->prec == MP_BF16 ? N * C * es : 0, MEM_WORKSPACE, "residual gradient"},
        {&m->dln, N * C * es, MEM_WORKSPACE, "norm gradient"},
        {&m->dqkv, N * 3 * C * es, MEM_WORKSPACE, "q, k, v gradient"},
        {&m->datt, m->attn ? 0 : (size_t)m->B * m->NH * m->T * m->T * es, MEM_WORKSPACE,
         "attention score gradient"},
        {&m->datty, N * C * es, MEM_WORKSPACE, "attention output gradient"},
        {&m->dh13, N * 2 * F * es, MEM_WORKSPACE, "W1/W3 output gradient"},
        {&m->dg, N * F * es, MEM_WORKSPACE, "SwiGLU gradient"},
        {(void**)&m->dw_partial, k_rmsnorm_partial_len(m->N, m->C) * 4, MEM_WORKSPACE,
         "norm weight partial sums"},
        {&m->attn_ws, mg_attention_ws_bytes(m), MEM_WORKSPACE, "attention backward workspace"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (want[i].bytes == 0) continue;
        *want[i].p = mem_try_alloc(DEV_CUDA, want[i].bytes, want[i].tag);
        if (!*want[i].p) {
            size_t fr = 0, tot = 0;
            cudaMemGetInfo(&fr, &tot);
            cudaGetLastError();
            snprintf(err, errlen, "out of memory: %s needs %zu bytes, %zu bytes free of %zu",
                     want[i].what, want[i].bytes, fr, tot);
            for (size_t j = 0; j < i; j++) {  // leave the model as before the call
                mem_free(*want[j].p);
                *want[j].p = NULL;
            }
            return -1;
        }
    }
    if (m->prec != MP_BF16) m->dres_lp = m->dres;
    // Padding elements of the gradient buffer are never written: zero them once.
    if (m->grads) CUDA_CHECK(cudaMemsetAsync(m->grads, 0, total * 4, m->stream));
    m->bwd_ready = 1;
    return 0;
}

static void ready(model_gpu_t* m, grad_ready_fn hook, void* ctx, param_kind_t k, int layer) {
    if (hook) hook(ctx, param_index(&m->lay, k, layer));
}

// A norm's weight gradient: written straight into the gradient buffer (beta 0), or into
// dw_tmp and then added (beta 1: the kernel writes its C floats, it does not add).
static float* norm_dw(model_gpu_t* m, param_kind_t k, int l, float beta) {
    if (beta == 0.0f) return mg_grad(m, k, l);
    if (!m->dw_tmp) m->dw_tmp = mem_alloc(DEV_CUDA, (size_t)m->C * 4, MEM_WORKSPACE);
    return m->dw_tmp;
}
static void norm_dw_done(model_gpu_t* m, param_kind_t k, int l, float beta) {
    if (beta == 0.0f) return;
    const float one = 1.0f;  // dW += dw_tmp, on the model's stream (the cuBLAS handle's)
    CUBLAS_CHECK(cublasSaxpy(m->mm.h, m->C, &one, m->dw_tmp, 1, mg_grad(m, k, l), 1));
}

// dlogits = (softmax − onehot) · scale, in place over the logits; then the LM head and the
// final norm. m->dres ends as the gradient of x (the head's input).
void mg_head_backward(model_gpu_t* m, const float* x, const void* lnf, const float* rstdf, void* logits,
                      const int32_t* targets, const float* ce_lse, float scale, float beta, int split,
                      grad_ready_fn hook, void* ctx) {
    const int N = m->N, C = m->C, V = m->V;
    const dtype_t a = m->adt;
    cudaStream_t s = m->stream;
    k_cross_entropy_bwd(a, logits, targets, ce_lse, scale, N, V, s);
    // Split: dlogits stay in the logits buffer (nothing writes it before the weight pass), so
    // the LM head's dy needs no saved copy.
    if (!split) mg_head_backward_weight(m, lnf, logits, beta, hook, ctx);
    linear_dx(m, logits, mg_weight(m, PK_HEAD, -1), m->dln, C, V);
    k_rmsnorm_bwd(a, m->dln, x, mg_param(m, PK_LNF, -1), rstdf, m->dres,
                  m->prec == MP_BF16 ? m->dres_lp : NULL, 0, norm_dw(m, PK_LNF, -1, beta), m->dw_partial, N, C, s);
    norm_dw_done(m, PK_LNF, -1, beta);
    ready(m, hook, ctx, PK_LNF, -1);
}

void mg_head_backward_chunked(model_gpu_t* m, const float* x, const int32_t* targets, float scale,
                              grad_ready_fn hook, void* ctx) {
    const int N = m->N, C = m->C, V = m->V, R = m->head_chunk < N ? m->head_chunk : N;
    const dtype_t a = m->adt;
    cudaStream_t s = m->stream;
    float* dW = mg_grad(m, PK_HEAD, -1);
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = N - r0 < R ? N - r0 : R;
        const char* lnf = (const char*)m->lnf + (size_t)r0 * C * m->asz;
        head_chunk_logits(m, r0, n);
        k_cross_entropy_bwd(a, m->logits, targets + r0, m->ce_lse + r0, scale, n, V, s);
        // dW_head (V, C) = Σ over chunks of dlogitsᵀ · lnf rows: the first written, the rest added
        mm_rm(&m->mm, 1, 0, V, C, n, 1.0f, m->logits, a, V, lnf, a, C, r0 == 0 ? 0.0f : 1.0f, dW, DT_F32, C);
        mm_rm(&m->mm, 0, 0, n, C, V, 1.0f, m->logits, a, V, mg_weight(m, PK_HEAD, -1), a, C, 0.0f,
              (char*)m->dln + (size_t)r0 * C * m->asz, a, C);
    }
    ready(m, hook, ctx, PK_HEAD, -1);
    k_rmsnorm_bwd(a, m->dln, x, mg_param(m, PK_LNF, -1), m->rstdf, m->dres,
                  m->prec == MP_BF16 ? m->dres_lp : NULL, 0, norm_dw(m, PK_LNF, -1, 0.0f), m->dw_partial, N, C, s);
    ready(m, hook, ctx, PK_LNF, -1);
}

void mg_head_backward_weight(model_gpu_t* m, const void* lnf, const void* dlogits, float beta, grad_ready_fn hook,
                             void* ctx) {
    linear_dw(m, dlogits, lnf, mg_grad(m, PK_HEAD, -1), m->C, m->V, beta);
    ready(m, hook, ctx, PK_HEAD, -1);
}

// The split backward's copy of an output gradient that a later kernel of the input pass
// overwrites or adds to (the residual gradient, dqkv): its value now is W's dy.
static void save_dy(model_gpu_t* m, void* dst, const void* src, size_t elems) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, elems * m->asz, cudaMemcpyDeviceToDevice, m->stream));
}

// Block l: m->dres holds d x_{l+1} on entry and d x_l on exit. sp NULL: fused (every weight
// gradient too); sp set: the input pass, each linear layer's dW left to
// mg_block_backward_weight with the dy saved into *sp (the products below are the same either
// way, so BI + W give the fused pass's bits).
void mg_block_backward(model_gpu_t* m, int l, const mg_block_t* b, const mg_split_t* sp, float beta,
                       grad_ready_fn hook, void* ctx) {
    const int N = m->N, C = m->C, F = m->F;
    const size_t NC = (size_t)N * C;
    const dtype_t a = m->adt;
    cudaStream_t s = m->stream;
    void* dres_lp = m->dres_lp;
    // FFN: x_{l+1} = xm + g W2ᵀ; dres holds d x_{l+1}.
    if (sp) {
        save_dy(m, sp->d_out, dres_lp, NC);
    } else {
        k_swiglu_fwd(a, b->h13, m->g, N, F, s);  // recompute g = SiLU(h1) * h3 (not saved)
        linear_dw(m, dres_lp, m->g, mg_grad(m, PK_W2, l), F, C, beta);
        ready(m, hook, ctx, PK_W2, l);
    }
    linear_dx(m, dres_lp, mg_weight(m, PK_W2, l), m->dg, F, C);
    void* dh13 = sp ? sp->d_h13 : m->dh13;  // split: written straight into the saved slot
    k_swiglu_bwd(a, b->h13, m->dg, dh13, N, F, s);
    if (!sp) {
        linear_dw(m, dh13, b->ln2, mg_grad(m, PK_W1, l), C, 2 * F, beta);  // w1 and w3 at once
        ready(m, hook, ctx, PK_W3, l);
        ready(m, hook, ctx, PK_W1, l);
    }
    linear_dx(m, dh13, mg_weight(m, PK_W1, l), m->dln, C, 2 * F);
    k_rmsnorm_bwd(a, m->dln, b->xm, mg_param(m, PK_LN2, l), b->rstd2, m->dres,
                  m->prec == MP_BF16 ? dres_lp : NULL, 1, norm_dw(m, PK_LN2, l, beta), m->dw_partial, N, C, s);
    norm_dw_done(m, PK_LN2, l, beta);
    ready(m, hook, ctx, PK_LN2, l);
    // Attention: xm = x_l + atty Woᵀ; dres holds d xm.
    if (sp) {
        save_dy(m, sp->d_mid, dres_lp, NC);
    } else {
        linear_dw(m, dres_lp, b->atty, mg_grad(m, PK_O, l), C, C, beta);
        ready(m, hook, ctx, PK_O, l);
    }
    linear_dx(m, dres_lp, mg_weight(m, PK_O, l), m->datty, C, C);
    mg_attention_backward(m, b);
    k_rope(a, m->dqkv, m->rope_cos, m->rope_sin, m->B, m->T, m->NH, m->HS, 1, s);
    if (sp) {
        save_dy(m, sp->d_qkv, m->dqkv, 3 * NC);
    } else {
        linear_dw(m, m->dqkv, b->ln1, mg_grad(m, PK_Q, l), C, 3 * C, beta);  // q, k, v at once
        ready(m, hook, ctx, PK_V, l);
        ready(m, hook, ctx, PK_K, l);
        ready(m, hook, ctx, PK_Q, l);
    }
    linear_dx(m, m->dqkv, mg_weight(m, PK_Q, l), m->dln, C, 3 * C);
    k_rmsnorm_bwd(a, m->dln, b->x, mg_param(m, PK_LN1, l), b->rstd1, m->dres,
                  m->prec == MP_BF16 ? dres_lp : NULL, 1, norm_dw(m, PK_LN1, l, beta), m->dw_partial, N, C, s);
    norm_dw_done(m, PK_LN1, l, beta);
    ready(m, hook, ctx, PK_LN1, l);
}

// Block l's weight pass: the fused backward's four linear_dw, in its order, on the saved dy
// and the forward's saved inputs (g recomputed from h13 by the same kernel: the same bits).
void mg_block_backward_weight(model_gpu_t* m, int l, const mg_block_t* b, const mg_split_t* sp, float beta,
                              grad_ready_fn hook, void* ctx) {
    const int N = m->N, C = m->C, F = m->F;
    k_swiglu_fwd(m->adt, b->h13, m->g, N, F, m->stream);
    linear_dw(m, sp->d_out, m->g, mg_grad(m, PK_W2, l), F, C, beta);
    ready(m, hook, ctx, PK_W2, l);
    linear_dw(m, sp->d_h13, b->ln2, mg_grad(m, PK_W1, l), C, 2 * F, beta);
    ready(m, hook, ctx, PK_W3, l);
    ready(m, hook, ctx, PK_W1, l);
    linear_dw(m, sp->d_mid, b->atty, mg_grad(m, PK_O, l), C, C, beta);
    ready(m, hook, ctx, PK_O, l);
    linear_dw(m, sp->d_qkv, b->ln1, mg_grad(m, PK_Q, l), C, 3 * C, beta);
    ready(m, hook, ctx, PK_V, l);
    ready(m, hook, ctx, PK_K, l);
    ready(m, hook, ctx, PK_Q, l);
}

// dE (V, C): the rows of m->dres scattered by token (atomics; zeroed first unless beta 1).
void mg_embed_backward(model_gpu_t* m, const int32_t* tokens, float beta, grad_ready_fn hook, void* ctx) {
    float* dE = mg_grad(m, PK_EMBED, -1);
    if (beta == 0.0f) CUDA_CHECK(cudaMemsetAsync(dE, 0, (size_t)m->V * m->C * 4, m->stream));
    k_embedding_bwd(tokens, m->dres, dE, m->N, m->C, m->V, m->stream);
    ready(m, hook, ctx, PK_EMBED, -1);
}

int model_gpu_backward(model_gpu_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen) {
    char why[256];
    if (!model_gpu_can_train(m, why, sizeof why)) DIE("%s", why);
    if (!m->last_targets) DIE("model_gpu_backward without a forward");
    if (!m->bwd_ready && mg_alloc_backward(m, err, errlen) != 0) return -1;
    const int N = m->N, L = m->L;
    nvtx_push("backward");
    // Loss and LM head. dlogits = (softmax − onehot) / N, in place over the logits.
    mg_unit_hook(m, m->hooks.before_bwd, L + 1);  // ZeRO-3: unit L+1 = ln_final + lm_head
    if (m->head_chunk > 0)
        mg_head_backward_chunked(m, m->resid1 + final_slice(m) * N * m->C, m->last_targets, 1.0f / (float)N, hook, ctx);
    else
        mg_head_backward(m, m->resid1 + final_slice(m) * N * m->C, m->lnf, m->rstdf, m->logits, m->last_targets,
                         m->ce_lse, 1.0f / (float)N, 0.0f, 0, hook, ctx);
    mg_unit_hook(m, m->hooks.after_bwd, L + 1);
    if (m->ckpt == 0) {
        for (int l = L - 1; l >= 0; l--) {
            const mg_block_t b = whole_block(m, l);
            mg_unit_hook(m, m->hooks.before_bwd, 1 + l);
            mg_block_backward(m, l, &b, NULL, 0.0f, hook, ctx);
            mg_unit_hook(m, m->hooks.after_bwd, 1 + l);
        }
    } else {
        // Checkpointing: segment by segment from the last, recompute the segment's blocks
        // forward from its saved input (the same kernels on the same inputs: the same bits),
        // then backprop through them. With unit hooks (ZeRO-2/3) K is 1 (the forward refused
        // the rest), a segment is one block = one unit, and its backward window opens FIRST:
        // before_bwd(1 + l) makes the compute stream wait for the unit's all-gather and points
        // the windows at it, so the recompute's kernels read the parameters the backward's
        // gather brought (no extra collective), as model_cpu_range.c does. Without hooks
        // mg_unit_hook does nothing, so where the calls stand does not matter.
        const int K = m->ckpt;
        for (int sg = model_ckpt_segments(L, K) - 1; sg >= 0; sg--) {
            const int lo = sg * K, hi = lo + K < L ? lo + K : L;
            if (K == 1) mg_unit_hook(m, m->hooks.before_bwd, 1 + lo);
            nvtx_push("recompute");
            for (int l = lo; l < hi; l++) {
                mg_block_t b = whole_block(m, l);
                if (l == hi - 1) b.xn = NULL;
                mg_block_forward(m, l, &b);
            }
            nvtx_pop();
            for (int l = hi - 1; l >= lo; l--) {
                const mg_block_t b = whole_block(m, l);
                if (K > 1) mg_unit_hook(m, m->hooks.before_bwd, 1 + l);
                mg_block_backward(m, l, &b, NULL, 0.0f, hook, ctx);
                mg_unit_hook(m, m->hooks.after_bwd, 1 + l);
            }
        }
    }
    mg_unit_hook(m, m->hooks.before_bwd, 0);
    mg_embed_backward(m, m->last_inputs, 0.0f, hook, ctx);
    mg_unit_hook(m, m->hooks.after_bwd, 0);
    nvtx_pop();
    return 0;
}
