// A range of blocks on the GPU (model_gpu.h "a range of blocks"): the seam stage 08's
// pipeline cuts the CUDA Transformer at. The range pass is the whole pass's loop over a
// sub-range, with the activations of a model_gpu_range_acts_t instead of the model's
// per-layer arrays: the per-block functions are model_gpu_pass.c's (mg_block_forward /
// mg_block_backward / mg_embed_* / mg_head_*), not copies.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/model_gpu_internal.h"
#include "common/model_kernels.h"
#include "common/nvtx.h"

// Block i of the set (layer l0 + i): pointers into its nL-slice arrays.
static mg_block_t range_block(const model_gpu_t* m, const model_gpu_range_acts_t* s, int i) {
    const size_t es = m->asz, N = m->N, NC = N * m->C;
    mg_block_t b;
    b.x = s->res + (size_t)i * NC;
    b.xm = s->resmid + (size_t)i * NC;
    b.xn = s->res + (size_t)(i + 1) * NC;
    b.ln1 = mg_slice(s->ln1, NC, es, i);
    b.rstd1 = s->rstd1 + (size_t)i * N;
    b.ln2 = mg_slice(s->ln2, NC, es, i);
    b.rstd2 = s->rstd2 + (size_t)i * N;
    b.qkv = mg_slice(s->qkv, NC * 3, es, i);
    b.att = s->att ? mg_slice(s->att, (size_t)m->B * m->NH * m->T * m->T, es, i) : NULL;
    b.lse = s->lse ? s->lse + (size_t)i * m->B * m->NH * m->T : NULL;
    b.atty = mg_slice(s->atty, NC, es, i);
    b.h13 = mg_slice(s->h13, N * 2 * m->F, es, i);
    return b;
}

// The split backward's per-block slots start 256 bytes apart, as cudaMalloc's own buffers
// (the fused backward's dres, dh13, dqkv) do: cuBLAS may pick its kernel by operand alignment,
// and the weight pass must run the fused pass's products exactly.
static size_t slot_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Block i's split slots (the set was made with split = 1).
static mg_split_t range_split(const model_gpu_t* m, const model_gpu_range_acts_t* s, int i) {
    const size_t es = m->asz, NC = (size_t)m->N * m->C;
    mg_split_t sp;
    sp.d_out = (char*)s->d_out + (size_t)i * slot_bytes(NC * es);
    sp.d_h13 = (char*)s->d_h13 + (size_t)i * slot_bytes((size_t)m->N * 2 * m->F * es);
    sp.d_mid = (char*)s->d_mid + (size_t)i * slot_bytes(NC * es);
    sp.d_qkv = (char*)s->d_qkv + (size_t)i * slot_bytes(3 * NC * es);
    return sp;
}

// Every buffer of a set: {field, bytes, wanted}; one table for create, bytes and destroy.
typedef struct {
    void** p;
    size_t bytes;
} want_t;
enum { MAX_WANTS = 32 };
static int wants(const model_gpu_t* m, model_gpu_range_acts_t* s, const model_range_t* r, int split, want_t* w) {
    const size_t N = m->N, C = m->C, F = m->F, V = m->V, NH = m->NH, es = m->asz;
    const size_t nL = (size_t)(r->l1 - r->l0), att = (size_t)m->B * NH * m->T * m->T;
    int n = 0;
#define W(field, b) w[n++] = (want_t){(void**)&s->field, (b)}
    W(res, (nL + 1) * N * C * 4);
    W(dy, r->head ? 0 : N * C * 4);
    W(dx, r->embed ? 0 : N * C * 4);
    W(d_loss, r->head ? 4 : 0);
    W(resmid, nL * N * C * 4);
    W(ln1, nL * N * C * es);
    W(ln2, nL * N * C * es);
    W(rstd1, nL * N * 4);
    W(rstd2, nL * N * 4);
    W(qkv, nL * N * 3 * C * es);
    W(att, m->attn ? 0 : nL * att * es);
    W(lse, m->attn ? nL * N * NH * 4 : 0);
    W(atty, nL * N * C * es);
    W(h13, nL * N * 2 * F * es);
    W(lnf, r->head ? N * C * es : 0);
    W(rstdf, r->head ? N * 4 : 0);
    W(logits, r->head ? N * V * es : 0);
    W(ce_lse, r->head ? N * 4 : 0);
    W(losses, r->head ? N * 4 : 0);
    // split backward: each linear layer's dy (the LM head's stays in the logits buffer)
    W(d_out, split ? nL * slot_bytes(N * C * es) : 0);
    W(d_h13, split ? nL * slot_bytes(N * 2 * F * es) : 0);
    W(d_mid, split ? nL * slot_bytes(N * C * es) : 0);
    W(d_qkv, split ? nL * slot_bytes(N * 3 * C * es) : 0);
    W(d_emb, split && r->embed ? N * C * 4 : 0);
#undef W
    return n;
}

size_t model_gpu_range_acts_bytes(const model_gpu_t* m, const model_range_t* r, int split) {
    model_gpu_range_acts_t s;
    want_t w[MAX_WANTS];
    const int n = wants(m, &s, r, split, w);
    size_t t = 0;
    for (int i = 0; i < n; i++) t += w[i].bytes;
    return t;
}

int model_gpu_range_acts_create(model_gpu_t* m, model_gpu_range_acts_t* s, const model_range_t* r, int split,
                                char* err, size_t errlen) {
    char why[256];
    if (m->prec != MP_FP32)
        fail("the GPU range pass (pipeline parallelism) supports fp32 only: bf16 would need the given output gradient cast into the bf16 residual gradient");
    if (model_range_check(&m->cfg, r, why, sizeof why) != 0) fail("model_gpu_range: %s", why);
    if (m->ckpt > 0)
        fail("the GPU range pass (pipeline parallelism) has no activation checkpointing: make the model with --checkpoint none");
    memset(s, 0, sizeof *s);
    s->r = *r;
    s->nL = r->l1 - r->l0;
    s->split = split != 0;
    want_t w[MAX_WANTS];
    const int n = wants(m, s, r, s->split, w);
    for (int i = 0; i < n; i++) {
        if (w[i].bytes == 0) continue;
        *w[i].p = mem_try_alloc(DEV_CUDA, w[i].bytes, MEM_ACTS);
        if (!*w[i].p) {
            size_t fr = 0, tot = 0;
            cudaMemGetInfo(&fr, &tot);
            cudaGetLastError();
            snprintf(err, errlen, "out of memory: a micro-batch's activations through blocks [%d, %d) need %zu bytes more, %zu free of %zu",
                     r->l0, r->l1, w[i].bytes, fr, tot);
            model_gpu_range_acts_destroy(s);
            return -1;
        }
    }
    return 0;
}

void model_gpu_range_acts_destroy(model_gpu_range_acts_t* s) {
    want_t w[MAX_WANTS];
    model_gpu_t dummy;  // sizes do not matter here: only the field addresses
    memset(&dummy, 0, sizeof dummy);
    const model_range_t r = s->r;
    const int n = wants(&dummy, s, &r, s->split, w);
    for (int i = 0; i < n; i++) {
        mem_free(*w[i].p);
        *w[i].p = NULL;
    }
    memset(s, 0, sizeof *s);
}

void model_gpu_range_forward(model_gpu_t* m, model_gpu_range_acts_t* s, const int32_t* d_inputs,
                             const int32_t* d_targets, float loss_scale) {
    const model_range_t* r = &s->r;
    if (r->embed && !d_inputs) DIE("model_gpu_range_forward: the embedding range needs token ids");
    if (r->head && !d_targets) DIE("model_gpu_range_forward: the head range needs targets");
    nvtx_push("range forward");
    if (m->params_lp && !m->lp_fresh) {  // (unreachable today: sets refuse bf16)
        k_cast_f32_bf16(m->params, m->params_lp, m->lay.total, m->stream);
        m->lp_fresh = 1;
    }
    if (r->embed) {
        mg_unit_hook(m, m->hooks.before_fwd, 0);
        mg_embed_forward(m, d_inputs, s->res);
    }
    for (int i = 0; i < s->nL; i++) {
        mg_unit_hook(m, m->hooks.before_fwd, 1 + r->l0 + i);
        const mg_block_t b = range_block(m, s, i);
        mg_block_forward(m, r->l0 + i, &b);
    }
    if (r->head) {
        mg_unit_hook(m, m->hooks.before_fwd, m->L + 1);
        mg_head_forward(m, s->res + (size_t)s->nL * m->N * m->C, s->lnf, s->rstdf, s->logits, d_targets, s->ce_lse,
                        s->losses, s->d_loss);
    }
    s->inputs = d_inputs;
    s->targets = d_targets;
    s->loss_scale = loss_scale;
    s->have_fwd = 1;
    s->have_bi = 0;
    nvtx_pop();
}

float model_gpu_range_loss(model_gpu_t* m, const model_gpu_range_acts_t* s) {
    if (!s->r.head) return NAN;
    float loss = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&loss, s->d_loss, 4, cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return loss;
}

int model_gpu_prepare_backward(model_gpu_t* m, char* err, size_t errlen) {
    char why[256];
    if (!model_gpu_can_train(m, why, sizeof why)) DIE("%s", why);
    return m->bwd_ready ? 0 : mg_alloc_backward(m, err, errlen);
}

static int hooked(const model_gpu_t* m) { return m->hooks.before_fwd || m->hooks.before_bwd || m->hooks.after_bwd; }

// model_gpu_range_backward (split 0) or its input pass (split 1: BI), as model_cpu_range.c's
// range_backward: the same walk, the split one leaving every linear layer's dW for the weight
// pass and saving its dy (mg_split_t), and the embedding's input gradient in d_emb.
static int range_backward(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, int split, grad_ready_fn hook,
                          void* ctx, char* err, size_t errlen) {
    char why[256];
    if (!model_gpu_can_train(m, why, sizeof why)) DIE("%s", why);
    if (!s->have_fwd) DIE("model_gpu_range_backward without a forward through this set");
    if (split && hooked(m)) DIE("model_gpu_range: unit hooks (ZeRO-3) and the split backward do not go together");
    if (!m->bwd_ready && mg_alloc_backward(m, err, errlen) != 0) return -1;
    const model_range_t* r = &s->r;
    const size_t NC = (size_t)m->N * m->C;
    const float beta = accumulate ? 1.0f : 0.0f;
    nvtx_push(split ? "range backward input" : "range backward");
    if (r->head) {
        mg_unit_hook(m, m->hooks.before_bwd, m->L + 1);
        mg_head_backward(m, s->res + (size_t)s->nL * NC, s->lnf, s->rstdf, s->logits, s->targets, s->ce_lse,
                         s->loss_scale / (float)m->N, beta, split, hook, ctx);
        mg_unit_hook(m, m->hooks.after_bwd, m->L + 1);
    } else {  // the output gradient, given: into the residual gradient (fp32: dres_lp == dres)
        CUDA_CHECK(cudaMemcpyAsync(m->dres, s->dy, NC * 4, cudaMemcpyDeviceToDevice, m->stream));
    }
    for (int i = s->nL - 1; i >= 0; i--) {
        const mg_block_t b = range_block(m, s, i);
        const mg_split_t sp = split ? range_split(m, s, i) : (mg_split_t){0};
        mg_unit_hook(m, m->hooks.before_bwd, 1 + r->l0 + i);
        mg_block_backward(m, r->l0 + i, &b, split ? &sp : NULL, beta, hook, ctx);
        mg_unit_hook(m, m->hooks.after_bwd, 1 + r->l0 + i);
    }
    if (r->embed && split) {  // the embedding's dy, for the weight pass's scatter
        CUDA_CHECK(cudaMemcpyAsync(s->d_emb, m->dres, NC * 4, cudaMemcpyDeviceToDevice, m->stream));
    } else if (r->embed) {
        mg_unit_hook(m, m->hooks.before_bwd, 0);
        mg_embed_backward(m, s->inputs, beta, hook, ctx);
        mg_unit_hook(m, m->hooks.after_bwd, 0);
    } else {
        CUDA_CHECK(cudaMemcpyAsync(s->dx, m->dres, NC * 4, cudaMemcpyDeviceToDevice, m->stream));
    }
    s->have_bi = split;
    nvtx_pop();
    return 0;
}

int model_gpu_range_backward(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, grad_ready_fn hook,
                             void* ctx, char* err, size_t errlen) {
    return range_backward(m, s, accumulate, 0, hook, ctx, err, errlen);
}

int model_gpu_range_backward_input(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, grad_ready_fn hook,
                                   void* ctx, char* err, size_t errlen) {
    if (!s->split) DIE("model_gpu_range_backward_input: the activations were created without split = 1");
    return range_backward(m, s, accumulate, 1, hook, ctx, err, errlen);
}

// The weight pass: what the fused backward's linear_dw would have done, in its order (head,
// blocks from the last, embedding), from the dy the input pass saved.
void model_gpu_range_backward_weight(model_gpu_t* m, model_gpu_range_acts_t* s, int accumulate, grad_ready_fn hook,
                                     void* ctx) {
    if (!s->split) DIE("model_gpu_range_backward_weight: the activations were created without split = 1");
    if (!s->have_bi) DIE("model_gpu_range_backward_weight without model_gpu_range_backward_input after the forward");
    if (hooked(m)) DIE("model_gpu_range: unit hooks (ZeRO-3) and the split backward do not go together");
    const model_range_t* r = &s->r;
    const size_t NC = (size_t)m->N * m->C;
    const float beta = accumulate ? 1.0f : 0.0f;
    nvtx_push("range backward weight");
    if (r->head) mg_head_backward_weight(m, s->lnf, s->logits, beta, hook, ctx);  // logits hold dlogits
    for (int i = s->nL - 1; i >= 0; i--) {
        const mg_block_t b = range_block(m, s, i);
        const mg_split_t sp = range_split(m, s, i);
        mg_block_backward_weight(m, r->l0 + i, &b, &sp, beta, hook, ctx);
    }
    if (r->embed) {  // mg_embed_backward scatters m->dres: put the saved dy there first
        CUDA_CHECK(cudaMemcpyAsync(m->dres, s->d_emb, NC * 4, cudaMemcpyDeviceToDevice, m->stream));
        mg_embed_backward(m, s->inputs, beta, hook, ctx);
    }
    s->have_bi = 0;  // the saved dy are spent (a second W would add them twice)
    nvtx_pop();
}
