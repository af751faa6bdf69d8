// The activation-set pools of a pipeline rank (act_pool.h).
#include "08_pipeline/act_pool.h"

#include <stdlib.h>

#include "common/check.h"

void act_pools_init(act_pools_t* p, int v, int m, act_set_new_fn make, void* ctx) {
    p->v = v;
    p->m = m;
    p->make = make;
    p->ctx = ctx;
    p->pool = calloc((size_t)v, sizeof(act_pool_t));
    // At most one release per chunk is pending at a time (a B or W gives back its own set).
    p->max_deferred = 2 * v + 2;
    p->deferred = calloc((size_t)(2 * p->max_deferred), sizeof(int));
    p->n_deferred = 0;
    if (!p->pool || !p->deferred) DIE("out of host memory");
    for (int c = 0; c < v; c++) {
        p->pool[c].slot_of = malloc((size_t)m * sizeof(int));
        if (!p->pool[c].slot_of) DIE("out of host memory");
        for (int mb = 0; mb < m; mb++) p->pool[c].slot_of[mb] = -1;
    }
}

void act_pools_destroy(act_pools_t* p, act_set_free_fn free_set) {
    for (int c = 0; p->pool && c < p->v; c++) {
        act_pool_t* q = &p->pool[c];
        for (int k = 0; k < q->n; k++) free_set(q->set[k]);
        free(q->set);
        free(q->in_use);
        free(q->slot_of);
    }
    free(p->pool);
    free(p->deferred);
    p->pool = NULL;
    p->deferred = NULL;
}

void act_pools_reset(act_pools_t* p) {
    for (int c = 0; c < p->v; c++) {
        for (int mb = 0; mb < p->m; mb++) p->pool[c].slot_of[mb] = -1;
        for (int k = 0; k < p->pool[c].n; k++) p->pool[c].in_use[k] = 0;
    }
    p->n_deferred = 0;
}

void* act_pools_take(act_pools_t* p, int c, int mb) {
    act_pool_t* q = &p->pool[c];
    if (q->slot_of[mb] >= 0) return q->set[q->slot_of[mb]];
    int k = 0;
    while (k < q->n && q->in_use[k]) k++;
    if (k == q->n) {
        if (q->n == q->cap) {
            q->cap = q->cap ? 2 * q->cap : 2;
            q->set = realloc(q->set, (size_t)q->cap * sizeof *q->set);
            q->in_use = realloc(q->in_use, (size_t)q->cap * sizeof *q->in_use);
            if (!q->set || !q->in_use) DIE("out of host memory");
        }
        q->set[k] = p->make(p->ctx, c);
        q->n++;
    }
    q->in_use[k] = 1;
    q->slot_of[mb] = k;
    return q->set[k];
}

void* act_pools_get(const act_pools_t* p, int c, int mb, const char* who, const char* why) {
    const int k = p->pool[c].slot_of[mb];
    if (k < 0) DIE("%s: %s for micro-batch %d chunk %d, which has no activations (bad list)", who, why, mb, c);
    return p->pool[c].set[k];
}

void act_pools_release_later(act_pools_t* p, int c, int mb) {
    if (p->n_deferred >= p->max_deferred) DIE("executor: too many deferred releases (bad list)");
    p->deferred[2 * p->n_deferred] = c;
    p->deferred[2 * p->n_deferred + 1] = mb;
    p->n_deferred++;
}

void act_pools_release_deferred(act_pools_t* p) {
    for (int i = 0; i < p->n_deferred; i++) {
        act_pool_t* q = &p->pool[p->deferred[2 * i]];
        int* k = &q->slot_of[p->deferred[2 * i + 1]];
        q->in_use[*k] = 0;
        *k = -1;
    }
    p->n_deferred = 0;
}

int act_pools_slots(const act_pools_t* p) {
    int n = 0;
    for (int c = 0; c < p->v; c++) n += p->pool[c].n;
    return n;
}
