// lm.h's CPU backend: the plain-C reference model (model_cpu.h) behind lm_ops_t. Host memory
// throughout; the flat-buffer options are honoured by building the whole model first and then
// replacing its buffers (this path checks bits, not memory: the GPU one is memory-faithful).
#include "common/lm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

static float* zeroed(size_t n, mem_tag_t tag) {
    float* p = mem_alloc(DEV_CPU, n * sizeof(float), tag);
    memset(p, 0, n * sizeof(float));
    return p;
}

static int cpu_create(lm_t* m, char* err, size_t errlen) {
    const lm_options_t* o = &m->o;
    model_cpu_create_head(&m->cpu, &m->cfg, o->B, o->T, o->seed, o->ckpt, o->head_chunk);
    m->in = calloc((size_t)o->B * o->T, sizeof(int32_t));
    m->tg = calloc((size_t)o->B * o->T, sizeof(int32_t));
    if (!m->in || !m->tg) DIE("out of host memory");
    if (o->flat == LM_FLAT_WHOLE) {
        model_cpu_set_bf16_params(&m->cpu, o->precision == MP_BF16);
        return 0;
    }
    const size_t total = m->cpu.layout.total;
    if (o->flat != LM_FLAT_NONE && o->flat_total < total) {
        snprintf(err, errlen, "flat buffers of %zu elements are shorter than the layout's %zu", o->flat_total, total);
        model_cpu_destroy(&m->cpu);
        free(m->in), free(m->tg);
        return -1;
    }
    float *p = NULL, *g = NULL;
    if (o->flat != LM_FLAT_NONE) {
        p = zeroed(o->flat_total, MEM_PARAMS);
        memcpy(p, m->cpu.params, total * sizeof(float));
        if (o->flat == LM_FLAT_PADDED) g = zeroed(o->flat_total, MEM_GRADS);
    }
    mem_free(m->cpu.params);
    mem_free(m->cpu.grads);
    m->cpu.params = p;
    m->cpu.grads = g;
    model_cpu_set_bf16_params(&m->cpu, o->precision == MP_BF16);  // (none without flat parameters)
    return 0;
}

static void cpu_destroy(lm_t* m) {
    model_cpu_destroy(&m->cpu);
    free(m->in);
    free(m->tg);
}

static cudaStream_t cpu_stream(const lm_t* m) { (void)m; return NULL; }
static const param_layout_t* cpu_layout(const lm_t* m) { return &m->cpu.layout; }
static float* cpu_params(lm_t* m) { return m->cpu.params; }
static float* cpu_grads(lm_t* m) { return m->cpu.grads; }
static void cpu_params_changed(lm_t* m) { (void)m; }

static void cpu_get_params(lm_t* m, float* host) {
    if (!m->cpu.params) DIE("lm_get_params: the model holds no flat parameters (ZeRO-3 keeps shards)");
    memcpy(host, m->cpu.params, m->cpu.layout.total * sizeof(float));
}
static void cpu_set_params(lm_t* m, const float* host) {
    if (!m->cpu.params) DIE("lm_set_params: the model holds no flat parameters (ZeRO-3 keeps shards)");
    memcpy(m->cpu.params, host, m->cpu.layout.total * sizeof(float));
}
static void cpu_get_grads(lm_t* m, float* host) {
    const size_t n = m->cpu.layout.total;
    if (m->cpu.grads) memcpy(host, m->cpu.grads, n * sizeof(float));
    else memset(host, 0, n * sizeof(float));
}

static void cpu_set_tokens(lm_t* m, const int32_t* inputs, const int32_t* targets) {
    const size_t n = (size_t)m->o.B * m->o.T;
    memcpy(m->in, inputs, n * sizeof(int32_t));
    memcpy(m->tg, targets, n * sizeof(int32_t));
}
static void cpu_forward_async(lm_t* m) { m->loss = model_cpu_forward(&m->cpu, m->in, m->tg, m->o.B, m->o.T); }
static float cpu_loss(lm_t* m) { return m->loss; }

static int cpu_backward(lm_t* m, grad_ready_fn hook, void* ctx, char* err, size_t errlen) {
    (void)err, (void)errlen;
    model_cpu_backward(&m->cpu, hook, ctx);
    return 0;
}

static int cpu_adamw(lm_t* m, const adamw_config_t* opt, int step, char* err, size_t errlen) {
    (void)err, (void)errlen;
    m->cpu.adam_t = step - 1;  // model_cpu_adamw_step takes t = ++adam_t
    model_cpu_adamw_step(&m->cpu, opt);
    return 0;
}

static size_t cpu_acts_bytes(const lm_t* m) {
    return model_cpu_acts_bytes_head(&m->cfg, m->o.B, m->o.T, m->o.ckpt, m->o.head_chunk);
}

static void cpu_set_unit_hooks(lm_t* m, const model_unit_hooks_t* hooks) { model_cpu_set_unit_hooks(&m->cpu, hooks); }
static void cpu_set_windows(lm_t* m, float* params, float* grads, size_t lo, size_t hi) {
    m->cpu.pwin = (model_window_t){params, lo, hi};
    if (grads) m->cpu.gwin = (model_window_t){grads, lo, hi};
}

static void cpu_free_flat(lm_t* m, int grads_only) {
    if (!grads_only) {
        mem_free(m->cpu.params);
        m->cpu.params = NULL;
        model_cpu_set_bf16_params(&m->cpu, 0);
    }
    mem_free(m->cpu.grads);
    m->cpu.grads = NULL;
}
static int cpu_restore_flat(lm_t* m, size_t total, int grads_only, char* err, size_t errlen) {
    (void)err, (void)errlen;
    if (!grads_only) {
        mem_free(m->cpu.params);
        m->cpu.params = zeroed(total, MEM_PARAMS);
        model_cpu_set_bf16_params(&m->cpu, m->o.precision == MP_BF16);
    }
    mem_free(m->cpu.grads);
    m->cpu.grads = zeroed(total, MEM_GRADS);
    return 0;
}
static int cpu_pad_flat(lm_t* m, size_t total, char* err, size_t errlen) {
    const size_t n = m->cpu.layout.total;
    if (total < n) {
        snprintf(err, errlen, "flat buffers of %zu elements are shorter than the layout's %zu", total, n);
        return -1;
    }
    float* p = zeroed(total, MEM_PARAMS);
    float* g = zeroed(total, MEM_GRADS);
    memcpy(p, m->cpu.params, n * sizeof(float));
    memcpy(g, m->cpu.grads, n * sizeof(float));
    mem_free(m->cpu.params);
    mem_free(m->cpu.grads);
    m->cpu.params = p;
    m->cpu.grads = g;
    return 0;
}

const lm_ops_t lm_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .stream = cpu_stream,
    .layout = cpu_layout,
    .params = cpu_params,
    .grads = cpu_grads,
    .params_changed = cpu_params_changed,
    .get_params = cpu_get_params,
    .set_params = cpu_set_params,
    .get_grads = cpu_get_grads,
    .set_tokens = cpu_set_tokens,
    .forward_async = cpu_forward_async,
    .loss = cpu_loss,
    .backward = cpu_backward,
    .adamw = cpu_adamw,
    .acts_bytes = cpu_acts_bytes,
    .set_unit_hooks = cpu_set_unit_hooks,
    .set_windows = cpu_set_windows,
    .free_flat = cpu_free_flat,
    .restore_flat = cpu_restore_flat,
    .pad_flat = cpu_pad_flat,
};
