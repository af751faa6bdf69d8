// The optimizer seam (optim_t) and the course's sharded optimizer (sharded_optim_t); see
// sharded_optim.h.
#include "07_zero/sharded_optim.h"

#include <stdlib.h>
#include <string.h>

#include "common/adamw_cpu.h"
#include "common/adamw_gpu.h"
#include "common/check.h"

static void* xrealloc(void* p, size_t bytes) {
    void* q = realloc(p, bytes ? bytes : 1);
    if (!q) DIE("out of host memory: %zu bytes", bytes);
    return q;
}

// ------------------------------------------------------------------ optim_t
static const char* const kind_names[] = {"sgd", "adamw"};
const char* opt_kind_name(opt_kind_t k) { return (k == OPT_SGD || k == OPT_ADAMW) ? kind_names[k] : "?"; }
int opt_kind_parse(const char* s, opt_kind_t* out) {
    for (int i = 0; s && i < 2; i++)
        if (strcmp(s, kind_names[i]) == 0) { *out = (opt_kind_t)i; return 0; }
    return -1;
}

void optim_init(optim_t* o, opt_kind_t kind, const adamw_config_t* cfg, device_t dev) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->cfg = *cfg;
    o->dev = dev;
}

void optim_free(optim_t* o) {
    mem_free(o->m);
    mem_free(o->v);
    free(o->r);
    memset(o, 0, sizeof *o);
}

void optim_add_range(optim_t* o, size_t p_off, size_t g_off, size_t numel) {
    if (numel == 0) return;
    if (o->n > 0) {
        optim_range_t* l = &o->r[o->n - 1];
        if (l->t == 0 && l->p_off + l->numel == p_off && l->g_off + l->numel == g_off) {
            l->numel += numel;  // one longer slice: fewer launches, the same arithmetic
            o->state_n += numel;
            return;
        }
    }
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 16;
        o->r = xrealloc(o->r, (size_t)o->cap * sizeof *o->r);
    }
    o->r[o->n++] = (optim_range_t){p_off, g_off, numel, o->state_n, 0};
    o->state_n += numel;
}

// Grows the moment buffers to state_n: the old state is kept, the new part starts at zero.
static void grow_state(optim_t* o, cudaStream_t stream) {
    if (o->kind != OPT_ADAMW || o->alloc_n == o->state_n) return;
    const size_t n = o->state_n, old = o->alloc_n, bytes = n * sizeof(float);
    float* bufs[2] = {o->m, o->v};
    for (int k = 0; k < 2; k++) {
        float* nb = mem_alloc(o->dev, bytes, MEM_OPTIM);
        mem_copy_async(o->dev, nb, bufs[k], old * 4, stream);
        mem_zero_async(o->dev, nb + old, (n - old) * 4, stream);
        // the old buffer may still be read by the copy just enqueued (the GPU's; the host's is done)
        if (bufs[k] && o->dev == DEV_CUDA) CUDA_CHECK(cudaStreamSynchronize(stream));
        mem_free(bufs[k]);
        bufs[k] = nb;
    }
    o->m = bufs[0];
    o->v = bufs[1];
    o->alloc_n = n;
}

void optim_step(optim_t* o, float* params, const float* grads, cudaStream_t stream) {
    grow_state(o, stream);
    for (int k = 0; k < o->n; k++) {
        optim_range_t* r = &o->r[k];
        float* p = params + r->p_off;
        const float* g = grads + r->g_off;
        if (o->kind == OPT_SGD) {
            if (o->dev == DEV_CUDA) sgd_gpu_step(o->cfg.lr, p, g, r->numel, stream);
            else for (size_t i = 0; i < r->numel; i++) p[i] -= o->cfg.lr * g[i];
            continue;
        }
        r->t++;
        float* m = o->m + r->s_off;
        float* v = o->v + r->s_off;
        if (o->dev == DEV_CUDA) adamw_gpu_step(&o->cfg, p, g, m, v, NULL, r->numel, r->t, stream);
        else adamw_cpu_step(&o->cfg, p, g, m, v, r->numel, r->t);
    }
}

size_t optim_state_bytes(const optim_t* o) { return o->kind == OPT_ADAMW ? 2 * o->alloc_n * sizeof(float) : 0; }

// ------------------------------------------------------------------ the greedy assignment
void sharded_assign(const param_ref_t* table, int n, int world, size_t* load, int* owner) {
    // STUDENT-BEGIN(07.sharded_assign): the course's partition (PyTorch's ZeroRedundancyOptimizer): the parameters by size, largest first (a stable order: equal sizes keep table order); each trainable one to the rank with the fewest elements in load[] so far (the lowest rank on ties), load[owner] += numel; a frozen parameter gets owner -1 | see 07_zero/README.md §The four levels | test: test_07 sharded_assign/*
    // Indices sorted by size, largest first; a stable insertion sort keeps equal sizes in table
    // order, as Python's sorted() does in ZeroRedundancyOptimizer._partition_parameters.
    int* idx = malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!idx) DIE("out of host memory");
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && table[idx[j - 1]].numel < table[i].numel) { idx[j] = idx[j - 1]; j--; }
        idx[j] = i;
    }
    for (int k = 0; k < n; k++) {
        const int i = idx[k];
        owner[i] = -1;
        if (!table[i].trainable) continue;  // never stepped, so never owned
        int best = 0;  // the rank with the fewest elements so far, the lowest on ties
        for (int r = 1; r < world; r++)
            if (load[r] < load[best]) best = r;
        owner[i] = best;
        load[best] += table[i].numel;
    }
    free(idx);
    // STUDENT-END(07.sharded_assign)
}

// ------------------------------------------------------------------ sharded_optim_t
struct sharded_optim {
    comm_t* c;
    float *params, *grads;  // the flat buffers
    size_t total;
    cudaStream_t stream;  // NCCL: the compute stream; NULL on MPI
    int average;
    int n, cap;
    param_ref_t* p;  // (n) every group's parameters, in the order added
    int* owner;      // (n)
    size_t* load;    // (world) trainable elements owned per rank
    optim_t opt;     // this rank's optimizer over the parameters it owns
    comm_req_t** reqs;
};

sharded_optim_t* sharded_optim_create(comm_t* c, const param_ref_t* table, int n, float* params,
                                      float* grads, size_t total, opt_kind_t kind,
                                      const adamw_config_t* cfg, int average_grads,
                                      cudaStream_t stream) {
    if (!c || !params || !grads) DIE("sharded_optim_create: NULL communicator or buffer");
    if (c->backend == COMM_NCCL && !stream)
        DIE("sharded_optim_create: the NCCL backend needs the compute stream (not NULL)");
    sharded_optim_t* s = calloc(1, sizeof *s);
    if (!s) DIE("out of host memory");
    s->c = c;
    s->params = params;
    s->grads = grads;
    s->total = total;
    s->stream = c->backend == COMM_NCCL ? stream : NULL;  // MPI has no streams
    s->average = average_grads;
    s->load = calloc((size_t)c->world, sizeof(size_t));
    if (!s->load) DIE("out of host memory");
    optim_init(&s->opt, kind, cfg, comm_device_kind(c));
    sharded_optim_add_group(s, table, n);
    return s;
}

void sharded_optim_destroy(sharded_optim_t* s) {
    if (!s) return;
    optim_free(&s->opt);
    free(s->p);
    free(s->owner);
    free(s->load);
    free(s->reqs);
    free(s);
}

void sharded_optim_add_group(sharded_optim_t* s, const param_ref_t* table, int n) {
    char err[256];
    if (ddp_check_params(table, n, s->total, err, sizeof err)) DIE("sharded_optim_add_group: %s", err);
    for (int i = 0; i < n; i++)  // a parameter in two groups would be stepped twice
        for (int j = 0; j < s->n; j++)
            if (table[i].offset < s->p[j].offset + s->p[j].numel &&
                s->p[j].offset < table[i].offset + table[i].numel)
                DIE("sharded_optim_add_group: %s overlaps %s, already in a group",
                    table[i].name ? table[i].name : "?", s->p[j].name ? s->p[j].name : "?");
    s->p = xrealloc(s->p, (size_t)(s->n + n) * sizeof *s->p);
    s->owner = xrealloc(s->owner, (size_t)(s->n + n) * sizeof(int));
    s->reqs = xrealloc(s->reqs, (size_t)(s->n + n) * sizeof(comm_req_t*));
    memcpy(s->p + s->n, table, (size_t)n * sizeof *table);
    sharded_assign(table, n, s->c->world, s->load, s->owner + s->n);
    // This rank's parameters, in table order: adjacent owned parameters merge into one range.
    for (int i = 0; i < n; i++)
        if (s->owner[s->n + i] == s->c->rank) optim_add_range(&s->opt, table[i].offset, table[i].offset, table[i].numel);
    s->n += n;
}

void sharded_optim_step(sharded_optim_t* s) {
    // STUDENT-BEGIN(07.sharded_optim_step): the course's step: when s->average, all-reduce (avg) each trainable parameter's gradient (comm_iallreduce, then one comm_waitall); optim_step over this rank's ranges on s->stream; then every owned parameter broadcast from its owner (comm_ibroadcast, one comm_waitall) | see 07_zero/README.md §The four levels | test: test_07 sharded_optim_course/* | needs: 07.sharded_assign 07.shard_range
    comm_t* c = s->c;
    if (s->average) {  // DDP's naive all-reduce, for when nothing else averaged the gradients
        int k = 0;
        for (int i = 0; i < s->n; i++)
            if (s->p[i].trainable) {
                float* g = s->grads + s->p[i].offset;
                s->reqs[k++] = comm_iallreduce(c, g, g, s->p[i].numel, COMM_F32, COMM_AVG, s->stream);
            }
        comm_waitall(c, s->reqs, k);
    }
    optim_step(&s->opt, s->params, s->grads, s->stream);
    // Every parameter from its owner. NCCL: on the compute stream, after the update enqueued
    // above; the broadcasts of one rank's parameters and another's run in one batch.
    int k = 0;
    for (int i = 0; i < s->n; i++)
        if (s->owner[i] >= 0) {
            float* p = s->params + s->p[i].offset;
            s->reqs[k++] = comm_ibroadcast(c, p, p, s->p[i].numel, COMM_F32, s->owner[i], s->stream);
        }
    comm_waitall(c, s->reqs, k);
    // STUDENT-END(07.sharded_optim_step)
}

int sharded_optim_n_params(const sharded_optim_t* s) { return s->n; }
int sharded_optim_owner(const sharded_optim_t* s, int i) {
    if (i < 0 || i >= s->n) DIE("sharded_optim_owner: index %d outside [0, %d)", i, s->n);
    return s->owner[i];
}
size_t sharded_optim_owned_elems(const sharded_optim_t* s, int rank) {
    if (rank < 0 || rank >= s->c->world) DIE("sharded_optim_owned_elems: rank %d outside [0, %d)", rank, s->c->world);
    return s->load[rank];
}
size_t sharded_optim_state_bytes(const sharded_optim_t* s) { return optim_state_bytes(&s->opt); }
long long sharded_optim_broadcasts(const sharded_optim_t* s) {
    long long k = 0;
    for (int i = 0; i < s->n; i++) k += s->owner[i] >= 0;
    return k;
}
