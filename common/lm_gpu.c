// lm.h's GPU backend: the CUDA model (model_gpu.h) behind lm_ops_t, one call each.
#include "common/lm_internal.h"

#include <stdio.h>

#include "common/check.h"

static int gpu_create(lm_t* m, char* err, size_t errlen) {
    const lm_options_t* o = &m->o;
    const model_config_t* c = &m->cfg;
    if (o->ranges) {
        m->gpu = model_gpu_create_ranges(c, o->B, o->T, o->precision, o->attn, o->seed, err, errlen);
    } else if (o->flat == LM_FLAT_WHOLE) {
        m->gpu = model_gpu_create_head(c, o->B, o->T, o->precision, o->attn, o->seed, o->ckpt, 0, 0, o->head_chunk,
                                       err, errlen);
    } else {
        size_t total = o->flat_total;
        if (o->flat == LM_FLAT_NONE) total = MODEL_GPU_NO_FLAT;
        else if (o->flat == LM_FLAT_PARAMS) total |= MODEL_GPU_NO_FLAT_GRADS;
        m->gpu = model_gpu_create_head(c, o->B, o->T, o->precision, o->attn, o->seed, o->ckpt, 1, total, o->head_chunk,
                                       err, errlen);
    }
    return m->gpu ? 0 : -1;
}

static void gpu_destroy(lm_t* m) { model_gpu_destroy(m->gpu); }
static cudaStream_t gpu_stream(const lm_t* m) { return model_gpu_stream(m->gpu); }
static const param_layout_t* gpu_layout(const lm_t* m) { return model_gpu_layout(m->gpu); }
static float* gpu_params(lm_t* m) { return model_gpu_params(m->gpu); }
static float* gpu_grads(lm_t* m) { return model_gpu_grads(m->gpu); }
static void gpu_params_changed(lm_t* m) { model_gpu_params_changed(m->gpu); }
static void gpu_get_params(lm_t* m, float* host) { model_gpu_get_params(m->gpu, host); }
static void gpu_set_params(lm_t* m, const float* host) { model_gpu_set_params(m->gpu, host); }
static void gpu_get_grads(lm_t* m, float* host) { model_gpu_get_grads(m->gpu, host); }
static void gpu_set_tokens(lm_t* m, const int32_t* inputs, const int32_t* targets) {
    model_gpu_set_tokens(m->gpu, inputs, targets);
}
static void gpu_forward_async(lm_t* m) {
    model_gpu_forward_async(m->gpu, model_gpu_inputs(m->gpu), model_gpu_targets(m->gpu));
}
static float gpu_loss(lm_t* m) { return model_gpu_loss(m->gpu); }
static int gpu_backward(lm_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen) {
    return model_gpu_backward(m->gpu, hook, ctx, err, errlen);
}
static int gpu_adamw(lm_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen) {
    return model_gpu_adamw(m->gpu, opt, step, err, errlen);
}
static size_t gpu_acts_bytes(const lm_t* m) { return model_gpu_acts_bytes(m->gpu); }
static void gpu_set_unit_hooks(lm_t* m, const model_unit_hooks_t* hooks) { model_gpu_set_unit_hooks(m->gpu, hooks); }
static void gpu_set_windows(lm_t* m, float* params, float* grads, size_t lo, size_t hi) {
    model_gpu_set_windows(m->gpu, params, grads, lo, hi);
}
static void gpu_free_flat(lm_t* m, int grads_only) {
    if (grads_only) model_gpu_free_flat_grads(m->gpu);
    else model_gpu_free_flat(m->gpu);
}
static int gpu_restore_flat(lm_t* m, size_t total, int grads_only, char* err, size_t errlen) {
    return grads_only ? model_gpu_restore_flat_grads(m->gpu, total, err, errlen)
                      : model_gpu_restore_flat(m->gpu, total, err, errlen);
}
static int gpu_pad_flat(lm_t* m, size_t total, char* err, size_t errlen) {
    return model_gpu_pad_flat(m->gpu, total, err, errlen);
}

const lm_ops_t lm_gpu_ops = {
    .name = "gpu",
    .create = gpu_create,
    .destroy = gpu_destroy,
    .stream = gpu_stream,
    .layout = gpu_layout,
    .params = gpu_params,
    .grads = gpu_grads,
    .params_changed = gpu_params_changed,
    .get_params = gpu_get_params,
    .set_params = gpu_set_params,
    .get_grads = gpu_get_grads,
    .set_tokens = gpu_set_tokens,
    .forward_async = gpu_forward_async,
    .loss = gpu_loss,
    .backward = gpu_backward,
    .adamw = gpu_adamw,
    .acts_bytes = gpu_acts_bytes,
    .set_unit_hooks = gpu_set_unit_hooks,
    .set_windows = gpu_set_windows,
    .free_flat = gpu_free_flat,
    .restore_flat = gpu_restore_flat,
    .pad_flat = gpu_pad_flat,
};
