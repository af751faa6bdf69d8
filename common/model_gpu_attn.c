// Causal multi-head attention inside the CUDA Transformer: the naive version with
// materialised scores (cuBLAS batched GEMMs + the softmax kernels of kernels_attn.cu), or an
// attention plug-in (attention.h) called on strided views of the fused QKV buffer.
//
// qkv (B, T, 3, NH, HS): for batch b and head h, Q is the (T, HS) matrix at
// qkv + b*T*3C + h*HS with row stride 3C; K and V are C and 2C further. cuBLAS's strided
// batching needs one stride between consecutive matrices: within a batch element the heads
// are HS apart, across batch elements they are not (T*3C vs NH*HS), so we batch over heads
// and loop over b (B launches per product).
#include <math.h>
#include <stdio.h>
#include "common/check.h"
#include "common/model_gpu_internal.h"
#include "common/model_kernels.h"
#include "common/nvtx.h"

// Shapes, dtype and strides of the plug-in's views (no pointers): what supports() is asked.
void mg_attention_shape_args(const model_gpu_t* m, attn_args_t* a) {
    const int64_t C = m->C;
    *a = (attn_args_t){0};
    a->B = m->B;
    a->H = m->NH;
    a->Nq = a->Nk = m->T;
    a->d = m->HS;
    a->dtype = m->adt;
    a->causal = 1;
    a->scale = 1.0f / sqrtf((float)m->HS);
    const int64_t sqkv[3] = {(int64_t)m->T * 3 * C, m->HS, 3 * C};
    const int64_t so[3] = {(int64_t)m->T * C, m->HS, C};
    for (int i = 0; i < 3; i++) {
        a->sq[i] = a->sk[i] = a->sv[i] = sqkv[i];
        a->so[i] = a->sdo[i] = so[i];
        a->sdq[i] = a->sdk[i] = a->sdv[i] = sqkv[i];
    }
}

static void plugin_args(const model_gpu_t* m, void* qkv_v, void* atty, float* lse, attn_args_t* a) {
    const int64_t C = m->C;
    mg_attention_shape_args(m, a);
    char* qkv = qkv_v;
    a->q = qkv;
    a->k = qkv ? qkv + C * m->asz : NULL;
    a->v = qkv ? qkv + 2 * C * m->asz : NULL;
    a->o = atty;
    a->lse = lse;
    if (m->dqkv) {
        a->dout = m->datty;
        a->dq = m->dqkv;
        a->dk = (char*)m->dqkv + C * m->asz;
        a->dv = (char*)m->dqkv + 2 * C * m->asz;
        a->workspace = m->attn_ws;
    }
}

size_t mg_attention_ws_bytes(const model_gpu_t* m) {
    if (!m->attn || !m->attn->backward || !m->attn->bwd_workspace_bytes) return 0;
    attn_args_t a;
    plugin_args(m, m->qkv, m->atty, m->lse, &a);  // (NULL for a ranges-only model: sizes only)
    return m->attn->bwd_workspace_bytes(&a);
}

void mg_attention_forward(model_gpu_t* m, const mg_block_t* blk) {
    const int B = m->B, T = m->T, C = m->C, NH = m->NH, HS = m->HS;
    if (m->attn) {
        attn_args_t a;
        plugin_args(m, blk->qkv, blk->atty, blk->lse, &a);
        nvtx_push(m->attn->name);
        m->attn->forward(&a, m->stream);
        nvtx_pop();
        return;
    }
    const dtype_t t = m->adt;
    const size_t es = m->asz;
    const float scale = 1.0f / sqrtf((float)HS);
    char* qkv = blk->qkv;
    char* P = blk->att;
    char* O = blk->atty;
    nvtx_push("scores");
    for (int b = 0; b < B; b++) {
        const char* Q = qkv + (size_t)b * T * 3 * C * es;
        const char* K = Q + (size_t)C * es;
        // S_h (T, T) = scale · Q_h K_hᵀ, for every head h of batch element b.
        mm_rm_batched(&m->mm, 0, 1, T, T, HS, scale, Q, t, 3 * C, HS, K, t, 3 * C, HS, 0.0f,
                      P + (size_t)b * NH * T * T * es, t, T, (int64_t)T * T, NH);
    }
    nvtx_pop();
    nvtx_push("softmax");
    k_softmax_causal_fwd(t, P, B * NH * T, T, m->stream);
    nvtx_pop();
    nvtx_push("final matmul");
    for (int b = 0; b < B; b++) {
        const char* V = qkv + ((size_t)b * T * 3 * C + 2 * (size_t)C) * es;
        // O_h (T, HS) = P_h V_h, written into atty (B, T, NH, HS): row stride C.
        mm_rm_batched(&m->mm, 0, 0, T, HS, T, 1.0f, P + (size_t)b * NH * T * T * es, t, T,
                      (int64_t)T * T, V, t, 3 * C, HS, 0.0f, O + (size_t)b * T * C * es, t, C, HS,
                      NH);
    }
    nvtx_pop();
}

void mg_attention_backward(model_gpu_t* m, const mg_block_t* blk) {
    const int B = m->B, T = m->T, C = m->C, NH = m->NH, HS = m->HS;
    if (m->attn) {
        attn_args_t a;
        plugin_args(m, blk->qkv, blk->atty, blk->lse, &a);
        nvtx_push(m->attn->name);
        m->attn->backward(&a, m->stream);
        nvtx_pop();
        return;
    }
    const dtype_t t = m->adt;
    const size_t es = m->asz;
    const float scale = 1.0f / sqrtf((float)HS);
    const char* qkv = blk->qkv;
    const char* P = blk->att;
    char* dP = m->datt;
    const char* dO = m->datty;
    char* dqkv = m->dqkv;
    // The parts have ranges of their own (pushes and pops only: the launches and their order
    // are unchanged), so that --profile splits the backward attention as it does the forward.
    nvtx_push("attention backward");
    for (int b = 0; b < B; b++) {
        const size_t qo = (size_t)b * T * 3 * C * es, po = (size_t)b * NH * T * T * es,
                     oo = (size_t)b * T * C * es;
        // dP_h (T, T) = dO_h V_hᵀ
        nvtx_push("bwd dP");
        mm_rm_batched(&m->mm, 0, 1, T, T, HS, 1.0f, dO + oo, t, C, HS, qkv + qo + 2 * (size_t)C * es,
                      t, 3 * C, HS, 0.0f, dP + po, t, T, (int64_t)T * T, NH);
        nvtx_pop();
        // dV_h (T, HS) = P_hᵀ dO_h
        nvtx_push("bwd dV");
        mm_rm_batched(&m->mm, 1, 0, T, HS, T, 1.0f, P + po, t, T, (int64_t)T * T, dO + oo, t, C, HS,
                      0.0f, dqkv + qo + 2 * (size_t)C * es, t, 3 * C, HS, NH);
        nvtx_pop();
    }
    // dS = P ∘ (dP − rowsum(P ∘ dP)), in place in datt.
    nvtx_push("bwd softmax");
    k_softmax_causal_bwd(t, P, dP, B * NH * T, T, m->stream);
    nvtx_pop();
    for (int b = 0; b < B; b++) {
        const size_t qo = (size_t)b * T * 3 * C * es, po = (size_t)b * NH * T * T * es;
        // dQ_h = scale · dS_h K_h;  dK_h = scale · dS_hᵀ Q_h
        nvtx_push("bwd dQ");
        mm_rm_batched(&m->mm, 0, 0, T, HS, T, scale, dP + po, t, T, (int64_t)T * T,
                      qkv + qo + (size_t)C * es, t, 3 * C, HS, 0.0f, dqkv + qo, t, 3 * C, HS, NH);
        nvtx_pop();
        nvtx_push("bwd dK");
        mm_rm_batched(&m->mm, 1, 0, T, HS, T, scale, dP + po, t, T, (int64_t)T * T, qkv + qo, t,
                      3 * C, HS, 0.0f, dqkv + qo + (size_t)C * es, t, 3 * C, HS, NH);
        nvtx_pop();
    }
    nvtx_pop();
}
