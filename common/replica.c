// See replica.h.
#include "common/replica.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

void replica_create(replica_t* x, comm_t* c, const model_config_t* cfg, lm_options_t o, int seed) {
    memset(x, 0, sizeof *x);
    x->c = c;
    x->cfg = *cfg;
    x->B = o.B;
    x->T = o.T;
    const int W = c->world, r = c->rank;
    data_open_random(&x->data, cfg->vocab, (uint64_t)seed);
    x->in_all = malloc((size_t)o.B * W * o.T * sizeof(int32_t));
    x->tg_all = malloc((size_t)o.B * W * o.T * sizeof(int32_t));
    if (!x->in_all || !x->tg_all) DIE("out of host memory");
    o.backend = c->backend == COMM_NCCL ? LM_GPU : LM_CPU;
    o.seed = (uint64_t)(seed + r);
    char err[512];
    x->m = lm_create(cfg, &o, err, sizeof err);
    comm_check_input(c, x->m != NULL, "%s", err);  // (a GPU short of memory may be one rank's alone)
    x->lay = lm_layout(x->m);
    if (o.backend == LM_GPU && o.flat == LM_FLAT_WHOLE) {
        // The GPU model allocates its gradients at the first backward: do one now, untimed.
        sample_batch(&x->data, o.B * W, o.T, -1, x->in_all, x->tg_all);
        lm_set_tokens(x->m, x->in_all, x->tg_all);
        lm_forward_async(x->m);
        comm_check_input(c, lm_backward(x->m, NULL, NULL, err, sizeof err) == 0, "%s", err);
        comm_stream_sync(c, lm_stream(x->m), "the first backward");
    }
    x->table = calloc((size_t)x->lay->n, sizeof(param_ref_t));
    if (!x->table) DIE("out of host memory");
    for (int i = 0; i < x->lay->n; i++)
        x->table[i] = (param_ref_t){x->lay->p[i].name, x->lay->p[i].offset, x->lay->p[i].numel, 1};
}

void replica_batch(replica_t* x, int64_t step, const int32_t** inputs, const int32_t** targets) {
    const size_t slice = (size_t)x->c->rank * x->B * x->T;
    sample_batch(&x->data, x->B * x->c->world, x->T, step, x->in_all, x->tg_all);
    *inputs = x->in_all + slice;
    *targets = x->tg_all + slice;
}

void replica_destroy(replica_t* x) {
    lm_destroy(x->m);
    free(x->table);
    free(x->in_all);
    free(x->tg_all);
    data_close(&x->data);
    memset(x, 0, sizeof *x);
}
