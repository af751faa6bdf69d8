// The CUDA Transformer: creation (every buffer, with its tag), parameters in and out, and the
// AdamW step. The passes are in model_gpu_pass.c, attention in model_gpu_attn.c, the kernels
// in kernels_*.cu, the matmuls in matmul.c.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/model_gpu_internal.h"
#include "common/model_kernels.h"
#include "common/nvtx.h"
#include "common/rng.h"

#define CUBLAS_WS_BYTES (32u << 20)  // enough for cuBLAS's Hopper kernels; preallocated

const char* model_precision_name(model_precision_t p) { return p == MP_BF16 ? "bf16" : "fp32"; }

// Parameter (k, layer) in `flat`, or through the window w (ZeRO-3) with the whole access
// checked: q|k|v and w1|w3 are read and written as one block by the fused products.
static float* win_ptr(const model_gpu_t* m, const model_window_t* w, float* flat, param_kind_t k, int layer,
                      const char* what) {
    const int i = param_index(&m->lay, k, layer);
    if (i < 0) DIE("model_gpu: no parameter of kind %d in layer %d", (int)k, layer);
    const size_t off = m->lay.p[i].offset;
    if (!w->base) {
        if (!flat) DIE("model_gpu: the %s of %s: the flat buffer was freed (ZeRO-3) and no window is set", what, m->lay.p[i].name);
        return flat + off;
    }
    const int last = k == PK_Q ? i + 2 : k == PK_W1 ? i + 1 : i;
    const size_t end = m->lay.p[last].offset + m->lay.p[last].numel;
    if (off < w->lo || end > w->hi)
        DIE("model_gpu: the %s of %s, elements [%zu, %zu), is outside the window [%zu, %zu)", what, m->lay.p[i].name,
            off, end, w->lo, w->hi);
    return w->base + (off - w->lo);
}
const void* mg_weight(const model_gpu_t* m, param_kind_t k, int layer) {
    if (m->prec == MP_BF16) {
        const size_t off = m->lay.p[param_index(&m->lay, k, layer)].offset;
        if (!m->pwin.base) return (const void*)(m->params_lp + off);
        // Under windows (ZeRO-3's bf16 gathers): the unit's bf16 parameters, the access checked
        // against the fp32 window's range (the two are set together).
        const float* f = win_ptr(m, &m->pwin, m->params, k, layer, "parameter");
        if (!m->pwin_lp) DIE("model_gpu: bf16 under windows needs model_gpu_set_windows_bf16 before the unit runs");
        return (const void*)(m->pwin_lp + (size_t)(f - m->pwin.base));
    }
    return mg_param(m, k, layer);
}
float* mg_param(const model_gpu_t* m, param_kind_t k, int layer) {
    return win_ptr(m, &m->pwin, m->params, k, layer, "parameter");
}
float* mg_grad(const model_gpu_t* m, param_kind_t k, int layer) {
    return win_ptr(m, &m->gwin, m->grads, k, layer, "gradient");
}

// mem_try_alloc with an "out of memory" reason; *ok becomes 0 at the first failure and later
// calls do nothing, so a creation function can ask for everything and check once.
static void* try_alloc(size_t bytes, mem_tag_t tag, const char* what, int* ok, char* err,
                       size_t errlen) {
    if (!*ok) return NULL;
    void* p = mem_try_alloc(DEV_CUDA, bytes ? bytes : 1, tag);
    if (!p) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        cudaGetLastError();
        snprintf(err, errlen, "out of memory: %s needs %zu bytes, %zu bytes free of %zu", what,
                 bytes, free_b, total_b);
        *ok = 0;
    }
    return p;
}

// The fused products need q,k,v and w1,w3 back to back in the flat buffer (model.h).
static int check_adjacent(const param_layout_t* lay, int L, char* err, size_t errlen) {
    for (int l = 0; l < L; l++) {
        const param_info_t* q = &lay->p[param_index(lay, PK_Q, l)];
        const param_info_t* k = &lay->p[param_index(lay, PK_K, l)];
        const param_info_t* v = &lay->p[param_index(lay, PK_V, l)];
        const param_info_t* w1 = &lay->p[param_index(lay, PK_W1, l)];
        const param_info_t* w3 = &lay->p[param_index(lay, PK_W3, l)];
        if (k->offset != q->offset + q->numel || v->offset != k->offset + k->numel ||
            w3->offset != w1->offset + w1->numel) {
            set_err(err, errlen, "layer %d: q/k/v or w1/w3 are not adjacent in the parameter layout", l);
            return -1;
        }
    }
    return 0;
}

// How create() makes the flat parameter and gradient buffers (model_gpu_create_flat).
typedef enum {
    FLAT_LAZY = 0,  // the layout's total; the gradients at the first backward (model_gpu_create)
    FLAT_GIVEN,     // flat_total elements each (padding zero), gradients and backward scratch now
    FLAT_NONE,      // none at all (ZeRO-3: windows only); backward scratch now
    FLAT_PARAMS,    // parameters of flat_total elements, no gradient buffer (ZeRO-2: the
                    // gradient window only); backward scratch now
} flat_mode_t;

static model_gpu_t* create(const model_config_t* cfg, int B, int T, model_precision_t prec,
                           const attention_impl_t* attn, uint64_t seed, int ranges_only, int ckpt,
                           flat_mode_t flat, size_t flat_total, int head_chunk, char* err, size_t errlen) {
    if (model_config_check(cfg, err, errlen) != 0) return NULL;
    if (head_chunk < 0 || (head_chunk > 0 && ranges_only)) {
        set_err(err, errlen, "head chunk %d: must be >= 0 rows, and 0 for a pipeline stage's model", head_chunk);
        return NULL;
    }
    if (flat != FLAT_LAZY) {  // a model made to measure is made to train: refuse what cannot
        if (attn && !attn->backward) {
            set_err(err, errlen, "attention '%s' has no backward: a model for training needs one", attn->name);
            return NULL;
        }
        if (flat == FLAT_PARAMS && prec != MP_FP32) {  // (its gradients need windows, which are fp32 only)
            set_err(err, errlen, "a model without a flat gradient buffer (ZeRO-2) runs fp32 only: windows are fp32 only");
            return NULL;
        }
    }
    if (ckpt == MODEL_CKPT_NESTED) {  // the CPU model has it (model_cpu.h); this one not yet
        set_err(err, errlen, "%s", MODEL_GPU_NESTED_REFUSAL);
        return NULL;
    }
    if (ckpt < 0) {
        set_err(err, errlen, "checkpoint policy %d: must be 0 (none) or K >= 1 (every-K)", ckpt);
        return NULL;
    }
    if (B < 1 || T < 1 || T > cfg->context) {
        set_err(err, errlen, "batch %d and sequence length %d must be >= 1 and T <= context %d", B, T,
             cfg->context);
        return NULL;
    }
    model_gpu_t* m = calloc(1, sizeof *m);
    if (!m) DIE("out of host memory");
    m->cfg = *cfg;
    m->lay = param_layout_make(cfg);
    if ((flat == FLAT_GIVEN || flat == FLAT_PARAMS) && flat_total < m->lay.total) {
        set_err(err, errlen, "flat buffers of %zu elements are shorter than the layout's %zu", flat_total, m->lay.total);
        model_gpu_destroy(m);
        return NULL;
    }
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->C = cfg->d_model;
    m->NH = cfg->n_heads;
    m->HS = cfg->d_model / cfg->n_heads;
    m->F = cfg->d_ff;
    m->V = cfg->vocab;
    m->L = cfg->n_layers;
    m->prec = prec;
    m->adt = prec == MP_BF16 ? DT_BF16 : DT_F32;
    m->asz = dtype_size(m->adt);
    m->attn = attn;
    m->ranges_only = ranges_only;
    m->ckpt = ckpt;
    m->head_chunk = head_chunk;
    if (check_adjacent(&m->lay, m->L, err, errlen) != 0) {
        model_gpu_destroy(m);
        return NULL;
    }
    if (attn) {
        attn_args_t a;
        mg_attention_shape_args(m, &a);  // pointers NULL: the buffers do not exist yet
        char why[256] = "";
        if (attn->supports && attn->supports(&a, why, sizeof why) != 0) {
            set_err(err, errlen, "attention '%s' does not support this model: %s", attn->name, why);
            model_gpu_destroy(m);
            return NULL;
        }
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    if (mm_create(&m->mm, m->stream, CUBLAS_WS_BYTES, err, errlen) != 0) {
        model_gpu_destroy(m);
        return NULL;
    }

    // Per-layer activation arrays: L slots, or one segment's (min(K, L)) with checkpointing,
    // and R residual slices (model_cpu.h "activation checkpointing": checkpoints, output,
    // the segment's interior inputs).
    const size_t L = (size_t)model_ckpt_slots(cfg->n_layers, ckpt);
    const size_t R = (size_t)model_ckpt_res_slices(cfg->n_layers, ckpt);
    const size_t N = m->N, C = m->C, F = m->F, V = m->V, NH = m->NH, es = m->asz;
    const size_t total = m->lay.total;
    // The flat buffers' length: the layout's, or the caller's padded one from the start, so that
    // a sharded trainer never holds the unpadded buffers and their padded copies at once.
    const size_t ftotal = flat == FLAT_GIVEN || flat == FLAT_PARAMS ? flat_total : total;
    int ok = 1;
    if (flat != FLAT_NONE)
        m->params = try_alloc(ftotal * 4, MEM_PARAMS, flat == FLAT_LAZY ? "parameters" : "padded parameters", &ok,
                              err, errlen);
    if (flat != FLAT_LAZY) {
        if (flat == FLAT_GIVEN) m->grads = try_alloc(ftotal * 4, MEM_GRADS, "padded gradients", &ok, err, errlen);
        m->flat_freed = flat == FLAT_NONE;  // set before a failure's model_gpu_destroy (it frees what exists)
        m->grads_freed = flat == FLAT_PARAMS;
    }
    if (prec == MP_BF16 && flat != FLAT_NONE)  // (without flat buffers: the bf16 windows)
        m->params_lp = try_alloc(total * 2, MEM_PARAMS, "bf16 weights", &ok, err, errlen);
    m->rope_cos = try_alloc((size_t)T * (m->HS / 2) * 4, MEM_OTHER, "RoPE table", &ok, err, errlen);
    m->rope_sin = try_alloc((size_t)T * (m->HS / 2) * 4, MEM_OTHER, "RoPE table", &ok, err, errlen);
    m->inputs = try_alloc(N * 4, MEM_OTHER, "inputs", &ok, err, errlen);
    m->targets = try_alloc(N * 4, MEM_OTHER, "targets", &ok, err, errlen);
    if (!ranges_only) {  // the whole model's activations (model_gpu_range.c keeps its own)
        m->resid1 = try_alloc(R * N * C * 4, MEM_ACTS, "residual stream", &ok, err, errlen);
        m->resid2 = try_alloc(L * N * C * 4, MEM_ACTS, "residual stream", &ok, err, errlen);
        m->ln1 = try_alloc(L * N * C * es, MEM_ACTS, "norm outputs", &ok, err, errlen);
        m->ln2 = try_alloc(L * N * C * es, MEM_ACTS, "norm outputs", &ok, err, errlen);
        m->rstd1 = try_alloc(L * N * 4, MEM_ACTS, "norm statistics", &ok, err, errlen);
        m->rstd2 = try_alloc(L * N * 4, MEM_ACTS, "norm statistics", &ok, err, errlen);
        m->qkv = try_alloc(L * N * 3 * C * es, MEM_ACTS, "q, k, v", &ok, err, errlen);
        if (attn)
            m->lse = try_alloc(L * N * NH * 4, MEM_ACTS, "attention logsumexp", &ok, err, errlen);
        else
            m->att = try_alloc(L * (size_t)m->B * NH * T * T * es, MEM_ACTS, "attention scores", &ok,
                               err, errlen);
        m->atty = try_alloc(L * N * C * es, MEM_ACTS, "attention outputs", &ok, err, errlen);
        m->h13 = try_alloc(L * N * 2 * F * es, MEM_ACTS, "W1/W3 outputs", &ok, err, errlen);
    }
    m->g = try_alloc(N * F * es, MEM_WORKSPACE, "SwiGLU output", &ok, err, errlen);  // (both kinds)
    if (!ranges_only) {
        m->lnf = try_alloc(N * C * es, MEM_ACTS, "final norm output", &ok, err, errlen);
        m->rstdf = try_alloc(N * 4, MEM_ACTS, "norm statistics", &ok, err, errlen);
        if (head_chunk > 0)  // one chunk's logits (then dlogits), scratch: the (N, V) never exists
            m->logits = try_alloc((head_chunk < (int)N ? (size_t)head_chunk : N) * V * es, MEM_WORKSPACE,
                                  "logits of a head chunk", &ok, err, errlen);
        else
            m->logits = try_alloc(N * V * es, MEM_ACTS, "logits", &ok, err, errlen);
        m->ce_lse = try_alloc(N * 4, MEM_ACTS, "loss statistics", &ok, err, errlen);
        m->losses = try_alloc(N * 4, MEM_ACTS, "losses", &ok, err, errlen);
    }
    m->d_loss = try_alloc(4, MEM_OTHER, "loss", &ok, err, errlen);
    if (!ok) {
        model_gpu_destroy(m);
        return NULL;
    }

    // Parameters: model_init_params's numbers, generated on the device (see k_init_param).
    // FLAT_NONE: there are none here; ZeRO-3 makes its shard (model_init_params_range).
    if (m->params) CUDA_CHECK(cudaMemsetAsync(m->params, 0, ftotal * 4, m->stream));  // padding
    if (m->grads) CUDA_CHECK(cudaMemsetAsync(m->grads, 0, ftotal * 4, m->stream));    // padding, never written
    for (int pi = 0; m->params && pi < m->lay.n; pi++) {
        const param_info_t* p = &m->lay.p[pi];
        double sd;
        if (p->kind == PK_LN1 || p->kind == PK_LN2 || p->kind == PK_LNF) sd = 0.0;
        else if (p->kind == PK_EMBED) sd = 1.0;
        else sd = sqrt(2.0 / (double)(p->shape[0] + p->shape[1]));
        k_init_param(m->params + p->offset, p->numel, rng_u64(seed, (uint64_t)pi), (float)sd,
                     m->stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    m->lp_fresh = 0;

    // RoPE tables in double: angle(t, k) = t · theta^(-2k/HS).
    const int half = m->HS / 2;
    float* cs = malloc((size_t)T * half * 2 * sizeof(float));
    if (!cs) DIE("out of host memory");
    for (int t = 0; t < T; t++)
        for (int k = 0; k < half; k++) {
            const double ang = (double)t * pow(10000.0, -2.0 * k / (double)m->HS);
            cs[(size_t)t * half + k] = (float)cos(ang);
            cs[(size_t)T * half + (size_t)t * half + k] = (float)sin(ang);
        }
    CUDA_CHECK(cudaMemcpy(m->rope_cos, cs, (size_t)T * half * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m->rope_sin, cs + (size_t)T * half, (size_t)T * half * 4,
                          cudaMemcpyHostToDevice));
    free(cs);
    // On the model's stream (non-blocking: it does not wait for the legacy default stream).
    CUDA_CHECK(cudaMemsetAsync(m->inputs, 0, N * 4, m->stream));
    CUDA_CHECK(cudaMemsetAsync(m->targets, 0, N * 4, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (flat != FLAT_LAZY) {
        // What the first backward would allocate, now, so that the setup's peak is the
        // training footprint less the optimizer. mg_alloc_backward (model_gpu_pass.c) would
        // also allocate a gradient buffer of the layout's length; it skips it when the flat
        // buffers are absent (as for ZeRO-3's windows), so it is told that while it runs: the
        // padded buffer is already here (FLAT_GIVEN), or there is none (FLAT_NONE, FLAT_PARAMS). On
        // failure it frees what it made, the padded gradient buffer included (NULL then).
        m->flat_freed = 1;
        const int rc = mg_alloc_backward(m, err, errlen);
        m->flat_freed = flat == FLAT_NONE;
        if (rc != 0) {
            model_gpu_destroy(m);
            return NULL;
        }
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
    }
    return m;
}

model_gpu_t* model_gpu_create(const model_config_t* cfg, int B, int T, model_precision_t prec,
                              const attention_impl_t* attn, uint64_t seed, char* err,
                              size_t errlen) {
    return create(cfg, B, T, prec, attn, seed, 0, 0, FLAT_LAZY, 0, 0, err, errlen);
}
model_gpu_t* model_gpu_create_ckpt(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                   const attention_impl_t* attn, uint64_t seed, int ckpt, char* err,
                                   size_t errlen) {
    return create(cfg, B, T, prec, attn, seed, 0, ckpt, FLAT_LAZY, 0, 0, err, errlen);
}
model_gpu_t* model_gpu_create_flat(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                   const attention_impl_t* attn, uint64_t seed, size_t flat_total, char* err,
                                   size_t errlen) {
    return model_gpu_create_flat_ckpt(cfg, B, T, prec, attn, seed, flat_total, 0, err, errlen);
}
model_gpu_t* model_gpu_create_flat_ckpt(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                        const attention_impl_t* attn, uint64_t seed, size_t flat_total, int ckpt,
                                        char* err, size_t errlen) {
    const int no_grads = (flat_total & MODEL_GPU_NO_FLAT_GRADS) != 0;
    flat_total &= ~MODEL_GPU_NO_FLAT_GRADS;
    if (no_grads && flat_total == MODEL_GPU_NO_FLAT) {
        set_err(err, errlen, "MODEL_GPU_NO_FLAT_GRADS needs a parameter length (it keeps the flat parameters)");
        return NULL;
    }
    const flat_mode_t mode = flat_total == MODEL_GPU_NO_FLAT ? FLAT_NONE : no_grads ? FLAT_PARAMS : FLAT_GIVEN;
    return create(cfg, B, T, prec, attn, seed, 0, ckpt, mode, flat_total, 0, err, errlen);
}
model_gpu_t* model_gpu_create_head(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                   const attention_impl_t* attn, uint64_t seed, int ckpt, int flat, size_t flat_total,
                                   int head_chunk, char* err, size_t errlen) {
    if (!flat) return create(cfg, B, T, prec, attn, seed, 0, ckpt, FLAT_LAZY, 0, head_chunk, err, errlen);
    const int no_grads = (flat_total & MODEL_GPU_NO_FLAT_GRADS) != 0;
    flat_total &= ~MODEL_GPU_NO_FLAT_GRADS;
    if (no_grads && flat_total == MODEL_GPU_NO_FLAT) {
        set_err(err, errlen, "MODEL_GPU_NO_FLAT_GRADS needs a parameter length (it keeps the flat parameters)");
        return NULL;
    }
    const flat_mode_t mode = flat_total == MODEL_GPU_NO_FLAT ? FLAT_NONE : no_grads ? FLAT_PARAMS : FLAT_GIVEN;
    return create(cfg, B, T, prec, attn, seed, 0, ckpt, mode, flat_total, head_chunk, err, errlen);
}
int model_gpu_head_chunk(const model_gpu_t* m) { return m->head_chunk; }
int model_gpu_ckpt(const model_gpu_t* m) { return m->ckpt; }
// The acts-tagged allocations of create() above, exactly (keep the two together).
size_t model_gpu_acts_bytes(const model_gpu_t* m) {
    if (m->ranges_only) return 0;  // the range sets hold their own
    const size_t L = (size_t)model_ckpt_slots(m->L, m->ckpt), R = (size_t)model_ckpt_res_slices(m->L, m->ckpt);
    const size_t N = m->N, C = m->C, F = m->F, V = m->V, NH = m->NH, es = m->asz;
    const size_t att = m->attn ? L * N * NH * 4 : L * (size_t)m->B * NH * m->T * m->T * es;  // lse or scores
    return R * N * C * 4 + L * N * C * 4             // resid1 (R slices), resid2
           + 2 * L * N * C * es + 2 * L * N * 4     // ln1, ln2; rstd1, rstd2
           + L * N * 3 * C * es + att               // qkv; attention
           + L * N * C * es + L * N * 2 * F * es    // atty; h13
           + N * C * es + N * 4 + (m->head_chunk > 0 ? 0 : N * V * es) + 2 * N * 4;  // lnf, rstdf, logits, ce_lse + losses
}
model_gpu_t* model_gpu_create_ranges(const model_config_t* cfg, int B, int T, model_precision_t prec,
                                     const attention_impl_t* attn, uint64_t seed, char* err, size_t errlen) {
    return create(cfg, B, T, prec, attn, seed, 1, 0, FLAT_LAZY, 0, 0, err, errlen);
}

void model_gpu_destroy(model_gpu_t* m) {
    if (!m) return;
    if (m->stream) CUDA_CHECK(cudaStreamSynchronize(m->stream));
    void* bufs[] = {m->params, m->params_lp, m->rope_cos, m->rope_sin, m->inputs, m->targets,
                    m->resid1, m->resid2, m->ln1, m->rstd1, m->ln2, m->rstd2, m->qkv, m->att,
                    m->lse, m->atty, m->h13, m->g, m->lnf, m->rstdf, m->logits, m->ce_lse,
                    m->losses, m->d_loss, m->grads, m->dres, m->dln, m->dqkv, m->datt,
                    m->datty, m->dh13, m->dg, m->dw_partial, m->attn_ws, m->adam_m, m->adam_v,
                    m->dw_tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    if (m->dres_lp != (void*)m->dres) mem_free(m->dres_lp);
    if (m->mm.h) mm_destroy(&m->mm);
    if (m->stream) CUDA_CHECK(cudaStreamDestroy(m->stream));
    param_layout_free(&m->lay);
    free(m);
}

const param_layout_t* model_gpu_layout(const model_gpu_t* m) { return &m->lay; }
const model_config_t* model_gpu_config(const model_gpu_t* m) { return &m->cfg; }
cudaStream_t model_gpu_stream(const model_gpu_t* m) { return m->stream; }
float* model_gpu_params(model_gpu_t* m) { return m->params; }
float* model_gpu_grads(model_gpu_t* m) { return m->grads; }
void model_gpu_params_changed(model_gpu_t* m) { m->lp_fresh = 0; }
int32_t* model_gpu_inputs(model_gpu_t* m) { return m->inputs; }
int32_t* model_gpu_targets(model_gpu_t* m) { return m->targets; }

void model_gpu_set_params(model_gpu_t* m, const float* host) {
    if (!m->params) DIE("model_gpu_set_params: the flat buffers were freed (ZeRO-3)");
    CUDA_CHECK(cudaMemcpyAsync(m->params, host, m->lay.total * 4, cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    m->lp_fresh = 0;
}
void model_gpu_get_params(model_gpu_t* m, float* host) {
    if (!m->params) DIE("model_gpu_get_params: the flat buffers were freed (ZeRO-3 gathers the parameters)");
    CUDA_CHECK(cudaMemcpyAsync(host, m->params, m->lay.total * 4, cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}
void model_gpu_get_grads(model_gpu_t* m, float* host) {
    if (!m->grads) {
        memset(host, 0, m->lay.total * 4);
        return;
    }
    CUDA_CHECK(cudaMemcpyAsync(host, m->grads, m->lay.total * 4, cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}
void model_gpu_set_tokens(model_gpu_t* m, const int32_t* inputs, const int32_t* targets) {
    CUDA_CHECK(cudaMemcpyAsync(m->inputs, inputs, (size_t)m->N * 4, cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaMemcpyAsync(m->targets, targets, (size_t)m->N * 4, cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

float model_gpu_loss(model_gpu_t* m) {
    float loss = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&loss, m->d_loss, 4, cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return loss;
}

float model_gpu_forward(model_gpu_t* m, const int32_t* d_inputs, const int32_t* d_targets) {
    model_gpu_forward_async(m, d_inputs, d_targets);
    return model_gpu_loss(m);
}

void model_gpu_get_logits(model_gpu_t* m, float* host) {
    if (m->head_chunk > 0)
        fail("the chunked LM head (head chunk %d) never holds the logits; make the model with head chunk 0", m->head_chunk);
    const size_t n = (size_t)m->N * m->V;
    if (m->adt == DT_F32) {
        CUDA_CHECK(cudaMemcpyAsync(host, m->logits, n * 4, cudaMemcpyDeviceToHost, m->stream));
    } else {
        float* tmp = mem_alloc(DEV_CUDA, n * 4, MEM_OTHER);
        k_cast_act_f32(m->adt, m->logits, tmp, n, m->stream);
        CUDA_CHECK(cudaMemcpyAsync(host, tmp, n * 4, cudaMemcpyDeviceToHost, m->stream));
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        mem_free(tmp);
    }
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

int model_gpu_can_train(const model_gpu_t* m, char* err, size_t errlen) {
    if (m->attn && !m->attn->backward) {
        set_err(err, errlen, "attention '%s' has no backward: this model can run forward only",
             m->attn->name);
        return 0;
    }
    return 1;
}

int model_gpu_adamw(model_gpu_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen) {
    if (step < 1) DIE("AdamW step must be >= 1, got %d", step);
    if (m->flat_freed) DIE("model_gpu_adamw: the flat buffers were freed (ZeRO-3): the optimizer lives outside the model");
    if (!m->grads) DIE("model_gpu_adamw before any backward: no gradients");
    const size_t total = m->lay.total;
    if (!m->adam_m) {
        int ok = 1;
        m->adam_m = try_alloc(total * 4, MEM_OPTIM, "AdamW first moment", &ok, err, errlen);
        m->adam_v = try_alloc(total * 4, MEM_OPTIM, "AdamW second moment", &ok, err, errlen);
        if (!ok) {
            mem_free(m->adam_m);
            mem_free(m->adam_v);
            m->adam_m = m->adam_v = NULL;
            return -1;
        }
        CUDA_CHECK(cudaMemsetAsync(m->adam_m, 0, total * 4, m->stream));
        CUDA_CHECK(cudaMemsetAsync(m->adam_v, 0, total * 4, m->stream));
    }
    // Bias corrections by the helper the CPU reference uses (adamw_cpu.h): the same rounding.
    const adamw_scalars_t sc = adamw_scalars(opt, step);
    nvtx_push("optimizer");
    k_adamw(m->params, m->grads, m->adam_m, m->adam_v, m->params_lp, total, opt->beta1,
            opt->beta2, opt->eps, sc.decay, sc.step_size, sc.bc2_sqrt, m->stream);
    nvtx_pop();
    m->lp_fresh = m->params_lp != NULL;
    return 0;
}

// The padded copies replace the buffers in place of the model's own; the model's kernels take
// offsets from the layout, so nothing else changes. model_gpu_adamw (whole-buffer moments)
// still covers the layout's total only: the padding is not a parameter.
int model_gpu_pad_flat(model_gpu_t* m, size_t total, char* err, size_t errlen) {
    if (m->flat_freed) DIE("model_gpu_pad_flat: the flat buffers were freed (ZeRO-3); model_gpu_restore_flat gives them back");
    if (m->grads_freed) DIE("model_gpu_pad_flat: the model has no flat gradient buffer (ZeRO-2); model_gpu_restore_flat_grads gives it back");
    if (!m->grads) DIE("model_gpu_pad_flat before the first backward: no gradient buffer yet");
    if (m->adam_m) DIE("model_gpu_pad_flat after model_gpu_adamw: pad before the first step");
    if (total < m->lay.total) DIE("model_gpu_pad_flat: %zu elements < the layout's %zu", total, m->lay.total);
    int ok = 1;
    float* p = try_alloc(total * 4, MEM_PARAMS, "padded parameters", &ok, err, errlen);
    float* g = try_alloc(total * 4, MEM_GRADS, "padded gradients", &ok, err, errlen);
    if (!ok) {
        mem_free(p);
        mem_free(g);
        return -1;
    }
    const size_t keep = m->lay.total * 4, pad = (total - m->lay.total) * 4;
    CUDA_CHECK(cudaMemcpyAsync(p, m->params, keep, cudaMemcpyDeviceToDevice, m->stream));
    CUDA_CHECK(cudaMemcpyAsync(g, m->grads, keep, cudaMemcpyDeviceToDevice, m->stream));
    CUDA_CHECK(cudaMemsetAsync((char*)p + keep, 0, pad, m->stream));
    CUDA_CHECK(cudaMemsetAsync((char*)g + keep, 0, pad, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    mem_free(m->params);
    mem_free(m->grads);
    m->params = p;
    m->grads = g;
    return 0;
}

// ---- ZeRO-3: hooks, windows, the flat buffers freed and given back
void model_gpu_set_unit_hooks(model_gpu_t* m, const model_unit_hooks_t* hooks) {
    memset(&m->hooks, 0, sizeof m->hooks);
    memset(&m->pwin, 0, sizeof m->pwin);
    memset(&m->gwin, 0, sizeof m->gwin);
    m->pwin_lp = NULL;
    if (hooks && m->ckpt > 1) fail("%s (this model was made with every-%d)", MODEL_CKPT_HOOKS_REFUSAL, m->ckpt);
    if (hooks) m->hooks = *hooks;
}

void model_gpu_set_windows(model_gpu_t* m, float* params, float* grads, size_t lo, size_t hi) {
    if (!params || lo >= hi || hi > m->lay.total) DIE("model_gpu_set_windows: NULL buffer or range [%zu, %zu) of %zu", lo, hi, m->lay.total);
    m->pwin = (model_window_t){params, lo, hi};
    m->pwin_lp = NULL;  // (bf16: set again by model_gpu_set_windows_bf16)
    if (grads) m->gwin = (model_window_t){grads, lo, hi};
}

void model_gpu_set_windows_bf16(model_gpu_t* m, const uint16_t* params, size_t lo, size_t hi) {
    if (m->prec != MP_BF16) fail("bf16 parameter windows need a model made with --precision bf16");
    if (!params || lo != m->pwin.lo || hi != m->pwin.hi || !m->pwin.base)
        DIE("model_gpu_set_windows_bf16: [%zu, %zu) is not the fp32 window's range (set that first)", lo, hi);
    m->pwin_lp = params;
}

void model_gpu_free_flat(model_gpu_t* m) {
    if (m->adam_m) DIE("model_gpu_free_flat after model_gpu_adamw: the model's own AdamW needs the flat buffers");
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    mem_free(m->params);
    mem_free(m->grads);
    mem_free(m->params_lp);  // bf16: the windows carry the bf16 units from now on
    m->params = m->grads = NULL;
    m->params_lp = NULL;
    m->lp_fresh = 0;
    m->flat_freed = 1;
}

int model_gpu_restore_flat(model_gpu_t* m, size_t total, char* err, size_t errlen) {
    if (!m->flat_freed) DIE("model_gpu_restore_flat: the flat buffers were not freed");
    if (total < m->lay.total) DIE("model_gpu_restore_flat: %zu elements < the layout's %zu", total, m->lay.total);
    int ok = 1;
    float* p = try_alloc(total * 4, MEM_PARAMS, "parameters", &ok, err, errlen);
    float* g = try_alloc(total * 4, MEM_GRADS, "gradients", &ok, err, errlen);
    if (!ok) {
        mem_free(p);
        mem_free(g);
        return -1;
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, total * 4, m->stream));
    CUDA_CHECK(cudaMemsetAsync(g, 0, total * 4, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (m->prec == MP_BF16) {  // the whole-model bf16 copy back, remade at the next forward
        m->params_lp = try_alloc(m->lay.total * 2, MEM_PARAMS, "bf16 weights", &ok, err, errlen);
        if (!ok) {
            mem_free(p);
            mem_free(g);
            return -1;
        }
        m->lp_fresh = 0;
    }
    m->params = p;
    m->grads = g;
    m->flat_freed = 0;
    m->grads_freed = 0;
    return 0;
}

// ---- ZeRO-2: only the flat gradient buffer freed and given back
void model_gpu_free_flat_grads(model_gpu_t* m) {
    if (m->prec != MP_FP32)
        fail("freeing the flat gradient buffer (ZeRO-2) supports fp32 only: its gradients then need windows, which are fp32 only");
    if (m->flat_freed) DIE("model_gpu_free_flat_grads: the flat buffers were freed already (ZeRO-3)");
    if (m->adam_m) DIE("model_gpu_free_flat_grads after model_gpu_adamw: the model's own AdamW needs the flat buffers");
    // Nothing in flight may still write it: the caller's contract, checked cheaply here.
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    mem_free(m->grads);
    m->grads = NULL;
    m->grads_freed = 1;
}

int model_gpu_restore_flat_grads(model_gpu_t* m, size_t total, char* err, size_t errlen) {
    if (!m->grads_freed) DIE("model_gpu_restore_flat_grads: the flat gradient buffer was not freed");
    if (total < m->lay.total) DIE("model_gpu_restore_flat_grads: %zu elements < the layout's %zu", total, m->lay.total);
    int ok = 1;
    float* g = try_alloc(total * 4, MEM_GRADS, "gradients", &ok, err, errlen);
    if (!ok) return -1;
    CUDA_CHECK(cudaMemsetAsync(g, 0, total * 4, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    m->grads = g;
    m->grads_freed = 0;
    return 0;
}
