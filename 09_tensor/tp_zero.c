// ZeRO-1 inside a dp x tp grid (tp.h): each tensor-parallel rank's local shard is what stage
// 07's ZeRO-1 splits over the data-parallel group. Two collectives on the dp group replace the
// all-reduce of plain data parallelism; the tensor group never sees them.
#include "09_tensor/tp.h"

#include <string.h>

#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"

#define TP_ZERO_ALIGN 64  // elements: every piece starts 256 bytes apart, as stage 07's shards

void tp_zero1_layout(size_t total, int dp, size_t* S, size_t* P) {
    if (dp < 1) DIE("tp_zero1_layout: %d data-parallel ranks", dp);
    const size_t unit = (size_t)dp * TP_ZERO_ALIGN;
    const size_t padded = (total + unit - 1) / unit * unit;
    if (S) *S = padded / (size_t)dp;
    if (P) *P = padded;
}

void tp_zero1_create(tp_zero1_t* z, tp_model_t* m, comm_t* dg) {
    memset(z, 0, sizeof *z);
    z->dg = dg;
    z->dp = dg->world;
    z->j = dg->rank;
    z->total = m->total;
    tp_zero1_layout(m->total, z->dp, &z->S, &z->P);
    tp_model_pad_flat(m, z->P);
    // The moments of this rank's piece alone, zero (padding elements included: AdamW keeps
    // p = g = 0 at 0, so they cost memory, not correctness).
    z->m = mem_alloc(DEV_CPU, z->S * sizeof(float), MEM_OPTIM);
    z->v = mem_alloc(DEV_CPU, z->S * sizeof(float), MEM_OPTIM);
    memset(z->m, 0, z->S * sizeof(float));
    memset(z->v, 0, z->S * sizeof(float));
}

void tp_zero1_destroy(tp_zero1_t* z) {
    mem_free(z->m);
    mem_free(z->v);
    memset(z, 0, sizeof *z);
}

void tp_zero1_step(tp_zero1_t* z, tp_model_t* m, const adamw_config_t* cfg) {
    const size_t lo = (size_t)z->j * z->S;
    // Rank j receives piece j of the dp average, written where it lies in its own buffer.
    comm_reduce_scatter(z->dg, m->grads, m->grads + lo, z->S, COMM_F32, COMM_AVG, NULL);
    z->t++;
    adamw_cpu_step(cfg, m->params + lo, m->grads + lo, z->m, z->v, z->S, z->t);
    // Every rank contributes its updated piece and receives the others' in place.
    comm_allgather(z->dg, m->params + lo, m->params, z->S, COMM_F32, NULL);
}

double tp_zero1_grad_sq(const tp_zero1_t* z, const tp_model_t* m) {
    const size_t lo = (size_t)z->j * z->S, hi = lo + z->S;
    double s = 0.0;
    for (int i = 0; i < m->layout.n; i++) {
        const tp_param_t* e = &m->p[i];
        if (e->split == TP_REPL && m->d.r != 0) continue;  // the replicated norms: once per tensor group
        const size_t a = e->off > lo ? e->off : lo, b = e->off + e->numel < hi ? e->off + e->numel : hi;
        for (size_t k = a; k < b; k++) s += (double)m->grads[k] * m->grads[k];
    }
    comm_host_allreduce_f64(z->dg, &s, 1, COMM_SUM);  // the dp pieces: the whole local shard
    comm_host_allreduce_f64(m->g, &s, 1, COMM_SUM);   // the tensor group's shards: the model
    return s;
}

void tp_zero1_gather_grads(const tp_zero1_t* z, const tp_model_t* m, float* out) {
    comm_allgather(z->dg, m->grads + (size_t)z->j * z->S, out, z->S, COMM_F32, NULL);
}

size_t tp_zero1_state_bytes(const tp_zero1_t* z) { return 2 * z->S * sizeof(float); }
