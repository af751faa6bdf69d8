// The activation sets of a pipeline rank, shared by the CPU executor (executor.c) and the GPU
// executor (executor_gpu.c): per chunk, a pool that grows to the peak number of micro-batches in
// flight (1F1B: p, GPipe: m) and no further; a set is taken when a micro-batch's input arrives
// (or at its F) and given back after its B (or W). The sets themselves are the executor's
// (model_cpu_range_acts_t or model_gpu_range_acts_t): the pool holds them as void pointers and
// makes them with the executor's callback.
//
// Giving back is deferred: after B or W the set is no longer needed, but the communication group
// right after may still send from it (the input gradient), so it is given back at the next
// compute, when that group has finished (act_pools_release_later / _release_deferred).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Makes one set for chunk c (never returns NULL: dies or ends the job itself).
typedef void* (*act_set_new_fn)(void* ctx, int chunk);
typedef void (*act_set_free_fn)(void* set);

typedef struct {
    void** set;    // [cap] allocated sets (pointers: their addresses stay put)
    int* in_use;   // [cap]
    int n, cap;
    int* slot_of;  // [m] the set holding micro-batch mb, -1 if none
} act_pool_t;

typedef struct {
    int v, m;
    act_pool_t* pool;  // [v]
    int* deferred;     // (chunk, mb) pairs given back at the next compute
    int n_deferred, max_deferred;
    act_set_new_fn make;
    void* ctx;
} act_pools_t;

void act_pools_init(act_pools_t* p, int v, int m, act_set_new_fn make, void* ctx);
void act_pools_destroy(act_pools_t* p, act_set_free_fn free_set);
// Start of a step: every set free, no micro-batch placed.
void act_pools_reset(act_pools_t* p);
// The set of micro-batch mb in chunk c, taking a free one (or making one) if it has none.
void* act_pools_take(act_pools_t* p, int c, int mb);
// The set micro-batch mb holds in chunk c; dies naming `who` and `why` if it holds none (a bad list).
void* act_pools_get(const act_pools_t* p, int c, int mb, const char* who, const char* why);
void act_pools_release_later(act_pools_t* p, int c, int mb);
void act_pools_release_deferred(act_pools_t* p);
// Sets allocated over all chunks (the memory the schedule cost).
int act_pools_slots(const act_pools_t* p);

#ifdef __cplusplus
}
#endif
