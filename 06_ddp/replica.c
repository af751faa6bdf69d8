// See replica.h.
#include "06_ddp/replica.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"

// flat: 0 for replica_create (the model as model_gpu_create makes it, the warm-up backward),
// 1 for replica_create_flat (flat_total as model_gpu_create_flat takes it). ckpt: activation
// checkpointing K (0 none), passed to the model's create.
static void create(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                   const attention_impl_t* attn, int seed, int flat, size_t flat_total, int ckpt) {
    memset(x, 0, sizeof *x);
    x->c = c;
    x->gpu = c->backend == COMM_NCCL;
    x->cfg = *cfg;
    x->B = B;
    x->T = T;
    const int W = c->world, r = c->rank;
    data_open_random(&x->data, cfg->vocab, (uint64_t)seed);
    x->in_all = malloc((size_t)B * W * T * sizeof(int32_t));
    x->tg_all = malloc((size_t)B * W * T * sizeof(int32_t));
    if (!x->in_all || !x->tg_all) DIE("out of host memory");
    char err[512];
    if (x->gpu && flat) {
        // Buffers of the caller's length (or none) and the backward's, made at creation.
        x->m = model_gpu_create_flat_ckpt(cfg, B, T, prec, attn, (uint64_t)(seed + r), flat_total, ckpt, err, sizeof err);
        comm_check_input(c, x->m != NULL, "%s", err);  // (a GPU short of memory may be one rank's alone)
        x->lay = model_gpu_layout(x->m);
    } else if (x->gpu) {
        x->m = model_gpu_create_ckpt(cfg, B, T, prec, attn, (uint64_t)(seed + r), ckpt, err, sizeof err);
        comm_check_input(c, x->m != NULL, "%s", err);  // (a GPU short of memory may be one rank's alone)
        x->lay = model_gpu_layout(x->m);
        // Gradients are allocated at the first backward.
        sample_batch(&x->data, B * W, T, -1, x->in_all, x->tg_all);
        model_gpu_set_tokens(x->m, x->in_all, x->tg_all);
        model_gpu_forward_async(x->m, model_gpu_inputs(x->m), model_gpu_targets(x->m));
        comm_check_input(c, model_gpu_backward(x->m, NULL, NULL, err, sizeof err) == 0, "%s", err);
        comm_stream_sync(c, model_gpu_stream(x->m), "the first backward");
    } else {
        model_cpu_create_ckpt(&x->cpu, cfg, B, T, (uint64_t)(seed + r), ckpt);
        x->lay = &x->cpu.layout;
        if (flat) {
            // The CPU reference always builds the whole buffer first (host memory: this path is
            // for correctness; the GPU one is the memory-faithful one). Then as on the GPU:
            // none, or padded to flat_total (padding zero).
            const size_t total = x->lay->total;
            const int no_grads = (flat_total & MODEL_GPU_NO_FLAT_GRADS) != 0;  // ZeRO-2: parameters only
            flat_total &= ~MODEL_GPU_NO_FLAT_GRADS;
            if (no_grads && flat_total == MODEL_GPU_NO_FLAT)
                comm_fatal(c, EXIT_BAD_INPUT, "MODEL_GPU_NO_FLAT_GRADS needs a parameter length");
            if (flat_total != MODEL_GPU_NO_FLAT && flat_total < total)
                comm_fatal(c, EXIT_BAD_INPUT, "flat buffers of %zu elements are shorter than the layout's %zu", flat_total,
                           total);
            float *p = NULL, *g = NULL;
            if (flat_total != MODEL_GPU_NO_FLAT) {
                p = mem_alloc(DEV_CPU, flat_total * sizeof(float), MEM_PARAMS);
                memcpy(p, x->cpu.params, total * sizeof(float));
                memset(p + total, 0, (flat_total - total) * sizeof(float));
                if (!no_grads) {
                    g = mem_alloc(DEV_CPU, flat_total * sizeof(float), MEM_GRADS);
                    memset(g, 0, flat_total * sizeof(float));
                }
            }
            mem_free(x->cpu.params);
            mem_free(x->cpu.grads);
            x->cpu.params = p;
            x->cpu.grads = g;
        }
    }
    x->table = calloc((size_t)x->lay->n, sizeof(ddp_param_t));
    if (!x->table) DIE("out of host memory");
    for (int i = 0; i < x->lay->n; i++)
        x->table[i] = (ddp_param_t){x->lay->p[i].name, x->lay->p[i].offset, x->lay->p[i].numel, 1};
}

void replica_create(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T,
                    model_precision_t prec, const attention_impl_t* attn, int seed) {
    create(x, c, cfg, B, T, prec, attn, seed, 0, 0, 0);
}
void replica_create_flat(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                         const attention_impl_t* attn, int seed, size_t flat_total) {
    create(x, c, cfg, B, T, prec, attn, seed, 1, flat_total, 0);
}
void replica_create_ckpt(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                         const attention_impl_t* attn, int seed, int ckpt) {
    create(x, c, cfg, B, T, prec, attn, seed, 0, 0, ckpt);
}
void replica_create_flat_ckpt(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                              const attention_impl_t* attn, int seed, size_t flat_total, int ckpt) {
    create(x, c, cfg, B, T, prec, attn, seed, 1, flat_total, ckpt);
}

void replica_batch(replica_t* x, int64_t step, const int32_t** inputs, const int32_t** targets) {
    const size_t slice = (size_t)x->c->rank * x->B * x->T;
    sample_batch(&x->data, x->B * x->c->world, x->T, step, x->in_all, x->tg_all);
    *inputs = x->in_all + slice;
    *targets = x->tg_all + slice;
}

void replica_destroy(replica_t* x) {
    if (x->gpu) model_gpu_destroy(x->m);
    else model_cpu_destroy(&x->cpu);
    free(x->table);
    free(x->in_all);
    free(x->tg_all);
    data_close(&x->data);
    memset(x, 0, sizeof *x);
}
