// One model interface over the CPU and GPU models (lm.h): options, creation, and the calls that
// go through the backend's table.
#include "common/lm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

lm_options_t lm_options(lm_backend_t backend, int B, int T) {
    lm_options_t o;
    memset(&o, 0, sizeof o);
    o.backend = backend;
    o.B = B;
    o.T = T;
    o.precision = MP_FP32;
    o.flat = LM_FLAT_WHOLE;
    return o;
}

lm_t* lm_create(const model_config_t* cfg, const lm_options_t* o, char* err, size_t errlen) {
    if (o->backend == LM_CPU && o->attn) {
        snprintf(err, errlen, "an attention plug-in (%s) needs the GPU model", o->attn->name);
        return NULL;
    }
    if (o->head_chunk < 0) {
        snprintf(err, errlen, "head chunk %d: must be >= 0 rows (0: the whole logits)", o->head_chunk);
        return NULL;
    }
    if (o->head_chunk > 0 && o->ranges) {
        snprintf(err, errlen, "the chunked LM head runs in the whole model only: a pipeline stage keeps its logits (head chunk 0)");
        return NULL;
    }
    lm_t* m = calloc(1, sizeof *m);
    if (!m) DIE("out of host memory");
    m->ops = o->backend == LM_GPU ? &lm_gpu_ops : &lm_cpu_ops;
    m->o = *o;
    m->cfg = *cfg;
    if (m->ops->create(m, err, errlen) != 0) {
        free(m);
        return NULL;
    }
    return m;
}

void lm_destroy(lm_t* m) {
    if (!m) return;
    m->ops->destroy(m);
    free(m);
}

lm_backend_t lm_backend(const lm_t* m) { return m->o.backend; }
device_t lm_device(const lm_t* m) { return m->o.backend == LM_GPU ? DEV_CUDA : DEV_CPU; }
cudaStream_t lm_stream(const lm_t* m) { return m->ops->stream(m); }
const param_layout_t* lm_layout(const lm_t* m) { return m->ops->layout(m); }
int lm_ckpt(const lm_t* m) { return m->o.ckpt; }

float* lm_params(lm_t* m) { return m->ops->params(m); }
float* lm_grads(lm_t* m) { return m->ops->grads(m); }
void lm_params_changed(lm_t* m) { m->ops->params_changed(m); }
void lm_get_params(lm_t* m, float* host) { m->ops->get_params(m, host); }
void lm_set_params(lm_t* m, const float* host) { m->ops->set_params(m, host); }
void lm_get_grads(lm_t* m, float* host) { m->ops->get_grads(m, host); }

void lm_set_tokens(lm_t* m, const int32_t* inputs, const int32_t* targets) { m->ops->set_tokens(m, inputs, targets); }
void lm_forward_async(lm_t* m) { m->ops->forward_async(m); }
float lm_loss(lm_t* m) { return m->ops->loss(m); }
int lm_backward(lm_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen) {
    return m->ops->backward(m, hook, ctx, err, errlen);
}
int lm_adamw(lm_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen) {
    return m->ops->adamw(m, opt, step, err, errlen);
}
size_t lm_acts_bytes(const lm_t* m) { return m->ops->acts_bytes(m); }

void lm_set_unit_hooks(lm_t* m, const model_unit_hooks_t* hooks) { m->ops->set_unit_hooks(m, hooks); }
void lm_set_windows(lm_t* m, float* params, float* grads, size_t lo, size_t hi) {
    m->ops->set_windows(m, params, grads, lo, hi);
}
void lm_free_flat(lm_t* m, int grads_only) { m->ops->free_flat(m, grads_only); }
int lm_restore_flat(lm_t* m, size_t total, int grads_only, char* err, size_t errlen) {
    return m->ops->restore_flat(m, total, grads_only, err, errlen);
}
int lm_pad_flat(lm_t* m, size_t total, char* err, size_t errlen) { return m->ops->pad_flat(m, total, err, errlen); }

model_precision_t lm_precision(const lm_t* m) { return m->o.precision; }
void lm_set_windows_bf16(lm_t* m, const uint16_t* params, size_t lo, size_t hi) {
    if (m->o.backend == LM_GPU) model_gpu_set_windows_bf16(m->gpu, params, lo, hi);
}

model_cpu_t* lm_cpu(lm_t* m) { return m->o.backend == LM_CPU ? &m->cpu : NULL; }
model_gpu_t* lm_gpu(lm_t* m) { return m->o.backend == LM_GPU ? m->gpu : NULL; }
