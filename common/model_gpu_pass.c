// Forward and backward passes of the CUDA Transformer (state: model_gpu_internal.h).
// Shapes: N = B*T rows; activations of dtype adt unless marked fp32.
// Matmul conventions (matmul.h, row-major): a Linear y = x Wᵀ with W (out, in) is
// mm_rm(trans A = 0, trans B = 1); its input gradient dx = dy W is (0, 0); its weight
// gradient dW = dyᵀ x is (1, 0) and lands in the fp32 gradient buffer (fp32 C).
#include <math.h>
#include <stdio.h>
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
// dW (out, in) fp32 = dyᵀ (out, N) · x (N, in)
static void linear_dw(model_gpu_t* m, const void* dy, const void* x, float* dW, int in, int out) {
    mm_rm(&m->mm, 1, 0, out, in, m->N, 1.0f, dy, m->adt, out, x, m->adt, in, 0.0f, dW, DT_F32, in);
}

void model_gpu_forward_async(model_gpu_t* m, const int32_t* d_inputs, const int32_t* d_targets) {
    const int N = m->N, C = m->C, F = m->F, V = m->V, L = m->L;
    const size_t es = m->asz, NC = (size_t)N * C;
    cudaStream_t s = m->stream;
    nvtx_push("forward");
    if (m->params_lp && !m->lp_fresh) {  // bf16 copy of the weights, once per step
        k_cast_f32_bf16(m->params, m->params_lp, m->lay.total, s);
        m->lp_fresh = 1;
    }
    mg_unit_hook(m, m->hooks.before_fwd, 0);  // ZeRO-3 (unit 0: the embedding)
    k_embedding_fwd(d_inputs, mg_param(m, PK_EMBED, -1), m->resid1, N, C, V, s);
    for (int l = 0; l < L; l++) {
        mg_unit_hook(m, m->hooks.before_fwd, 1 + l);
        float* x = m->resid1 + (size_t)l * NC;   // (N, C) block input
        float* xm = m->resid2 + (size_t)l * NC;  // (N, C) after attention
        void* ln1 = mg_slice(m->ln1, NC, es, l);
        void* ln2 = mg_slice(m->ln2, NC, es, l);
        void* qkv = mg_slice(m->qkv, NC * 3, es, l);
        void* atty = mg_slice(m->atty, NC, es, l);
        void* h13 = mg_slice(m->h13, (size_t)N * 2 * F, es, l);
        void* g = m->g;  // (N, F) scratch: recomputed in the backward
        k_rmsnorm_fwd(m->adt, x, mg_param(m, PK_LN1, l), ln1, m->rstd1 + (size_t)l * N, N, C,
                      RMS_EPS, s);
        linear(m, ln1, mg_weight(m, PK_Q, l), qkv, m->adt, C, 3 * C, 0.0f);  // fused q, k, v
        k_rope(m->adt, qkv, m->rope_cos, m->rope_sin, m->B, m->T, m->NH, m->HS, 0, s);
        nvtx_push("attention");
        mg_attention_forward(m, l);
        nvtx_pop();
        // xm = x + atty Woᵀ: the GEMM accumulates into an fp32 copy of x.
        CUDA_CHECK(cudaMemcpyAsync(xm, x, NC * 4, cudaMemcpyDeviceToDevice, s));
        linear(m, atty, mg_weight(m, PK_O, l), xm, DT_F32, C, C, 1.0f);
        k_rmsnorm_fwd(m->adt, xm, mg_param(m, PK_LN2, l), ln2, m->rstd2 + (size_t)l * N, N, C,
                      RMS_EPS, s);
        linear(m, ln2, mg_weight(m, PK_W1, l), h13, m->adt, C, 2 * F, 0.0f);  // fused w1, w3
        k_swiglu_fwd(m->adt, h13, g, N, F, s);
        float* xn = m->resid1 + (size_t)(l + 1) * NC;
        CUDA_CHECK(cudaMemcpyAsync(xn, xm, NC * 4, cudaMemcpyDeviceToDevice, s));
        linear(m, g, mg_weight(m, PK_W2, l), xn, DT_F32, F, C, 1.0f);
    }
    mg_unit_hook(m, m->hooks.before_fwd, L + 1);
    k_rmsnorm_fwd(m->adt, m->resid1 + (size_t)L * NC, mg_param(m, PK_LNF, -1), m->lnf, m->rstdf, N,
                  C, RMS_EPS, s);
    linear(m, m->lnf, mg_weight(m, PK_HEAD, -1), m->logits, m->adt, C, V, 0.0f);
    k_cross_entropy_fwd(m->adt, m->logits, d_targets, m->ce_lse, m->losses, m->d_loss, N, V, s);
    m->last_targets = d_targets;
    m->last_inputs = d_inputs;
    nvtx_pop();
}

static int alloc_backward(model_gpu_t* m, char* err, size_t errlen) {
    const size_t N = m->N, C = m->C, F = m->F, es = m->asz, total = m->lay.total;
    struct { void** p; size_t bytes; mem_tag_t tag; const char* what; } want[] = {
        {(void**)&m->grads, m->flat_freed ? 0 : total * 4, MEM_GRADS, "gradients"},  // ZeRO-3: windows
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

int model_gpu_backward(model_gpu_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen) {
    char why[256];
    if (!model_gpu_can_train(m, why, sizeof why)) DIE("%s", why);
    if (!m->last_targets) DIE("model_gpu_backward without a forward");
    if (!m->bwd_ready && alloc_backward(m, err, errlen) != 0) return -1;
    const int N = m->N, C = m->C, F = m->F, V = m->V, L = m->L;
    const size_t es = m->asz, NC = (size_t)N * C;
    const dtype_t a = m->adt;
    cudaStream_t s = m->stream;
    void* dres_lp = m->dres_lp;
    nvtx_push("backward");
    // Loss and LM head. dlogits = (softmax − onehot) / N, in place over the logits.
    mg_unit_hook(m, m->hooks.before_bwd, L + 1);  // ZeRO-3: unit L+1 = ln_final + lm_head
    k_cross_entropy_bwd(a, m->logits, m->last_targets, m->ce_lse, 1.0f / (float)N, N, V, s);
    linear_dw(m, m->logits, m->lnf, mg_grad(m, PK_HEAD, -1), C, V);
    ready(m, hook, ctx, PK_HEAD, -1);
    linear_dx(m, m->logits, mg_weight(m, PK_HEAD, -1), m->dln, C, V);
    k_rmsnorm_bwd(a, m->dln, m->resid1 + (size_t)L * NC, mg_param(m, PK_LNF, -1), m->rstdf,
                  m->dres, m->prec == MP_BF16 ? dres_lp : NULL, 0, mg_grad(m, PK_LNF, -1),
                  m->dw_partial, N, C, s);
    ready(m, hook, ctx, PK_LNF, -1);
    mg_unit_hook(m, m->hooks.after_bwd, L + 1);

    for (int l = L - 1; l >= 0; l--) {
        const void* ln1 = mg_slice(m->ln1, NC, es, l);
        const void* ln2 = mg_slice(m->ln2, NC, es, l);
        const void* atty = mg_slice(m->atty, NC, es, l);
        const void* h13 = mg_slice(m->h13, (size_t)N * 2 * F, es, l);
        mg_unit_hook(m, m->hooks.before_bwd, 1 + l);
        // FFN: x_{l+1} = xm + g W2ᵀ; dres holds d x_{l+1}.
        k_swiglu_fwd(a, h13, m->g, N, F, s);  // recompute g = SiLU(h1) * h3 (not saved)
        linear_dw(m, dres_lp, m->g, mg_grad(m, PK_W2, l), F, C);
        ready(m, hook, ctx, PK_W2, l);
        linear_dx(m, dres_lp, mg_weight(m, PK_W2, l), m->dg, F, C);
        k_swiglu_bwd(a, h13, m->dg, m->dh13, N, F, s);
        linear_dw(m, m->dh13, ln2, mg_grad(m, PK_W1, l), C, 2 * F);  // w1 and w3 at once
        ready(m, hook, ctx, PK_W3, l);
        ready(m, hook, ctx, PK_W1, l);
        linear_dx(m, m->dh13, mg_weight(m, PK_W1, l), m->dln, C, 2 * F);
        k_rmsnorm_bwd(a, m->dln, m->resid2 + (size_t)l * NC, mg_param(m, PK_LN2, l),
                      m->rstd2 + (size_t)l * N, m->dres, m->prec == MP_BF16 ? dres_lp : NULL, 1,
                      mg_grad(m, PK_LN2, l), m->dw_partial, N, C, s);
        ready(m, hook, ctx, PK_LN2, l);
        // Attention: xm = x_l + atty Woᵀ; dres holds d xm.
        linear_dw(m, dres_lp, atty, mg_grad(m, PK_O, l), C, C);
        ready(m, hook, ctx, PK_O, l);
        linear_dx(m, dres_lp, mg_weight(m, PK_O, l), m->datty, C, C);
        mg_attention_backward(m, l);
        k_rope(a, m->dqkv, m->rope_cos, m->rope_sin, m->B, m->T, m->NH, m->HS, 1, s);
        linear_dw(m, m->dqkv, ln1, mg_grad(m, PK_Q, l), C, 3 * C);  // q, k, v at once
        ready(m, hook, ctx, PK_V, l);
        ready(m, hook, ctx, PK_K, l);
        ready(m, hook, ctx, PK_Q, l);
        linear_dx(m, m->dqkv, mg_weight(m, PK_Q, l), m->dln, C, 3 * C);
        k_rmsnorm_bwd(a, m->dln, m->resid1 + (size_t)l * NC, mg_param(m, PK_LN1, l),
                      m->rstd1 + (size_t)l * N, m->dres, m->prec == MP_BF16 ? dres_lp : NULL, 1,
                      mg_grad(m, PK_LN1, l), m->dw_partial, N, C, s);
        ready(m, hook, ctx, PK_LN1, l);
        mg_unit_hook(m, m->hooks.after_bwd, 1 + l);
    }
    mg_unit_hook(m, m->hooks.before_bwd, 0);
    float* dE = mg_grad(m, PK_EMBED, -1);
    CUDA_CHECK(cudaMemsetAsync(dE, 0, (size_t)V * C * 4, s));
    k_embedding_bwd(m->last_inputs, m->dres, dE, N, C, V, s);
    ready(m, hook, ctx, PK_EMBED, -1);
    mg_unit_hook(m, m->hooks.after_bwd, 0);
    nvtx_pop();
    return 0;
}
