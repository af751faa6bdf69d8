// Stage 07, part 1: the optimizer outside the model, and the course's sharded optimizer.
//
// (1) optim_t — the seam. An optimizer (SGD or AdamW) that updates a LIST of ranges of the
// flat parameter buffer, each from a range of a gradient buffer, and owns state (AdamW's two
// moments) for those elements alone, packed in range order:
//
//     range k:  params[p_off, p_off + numel)  <-  grads[g_off, g_off + numel)
//               state  [s_off, s_off + numel)      s_off = numel of the ranges before it
//
//   whole-buffer training (DDP)     one range per run of trainable parameters, g_off = p_off
//   the course's sharded optimizer  one range per parameter this rank owns
//   ZeRO-1                          the trainable part of shard r  (8Ψ/n bytes of state)
//   ZeRO-2                          the trainable part of rank r's piece of every bucket, its
//                                   gradient read from the compact kept-shard buffer (g_off ≠ p_off)
// AdamW is element-wise, so any such split runs the same arithmetic on every element as the
// whole-buffer step (common/adamw_cpu.c): same bits on the same device.
// Each range keeps its own step count t (AdamW's bias correction), as PyTorch keeps `step` per
// parameter: ranges added after some steps start at t = 1.
// Memory: host (DEV_CPU, adamw_cpu_step) or device (DEV_CUDA, common/adamw_gpu.h; enqueued on
// the stream given to optim_step). State is allocated with tag MEM_OPTIM at the first step
// that needs it (as torch allocates it lazily), so optim_state_bytes() is exactly 8 bytes per
// element under AdamW and 0 under SGD.
//
// (2) sharded_optim_t — the course's version (handout §3, optimizer_state_sharding; PyTorch's
// ZeroRedundancyOptimizer): parameters are assigned to ranks WHOLE, greedily by size (largest
// first, each to the rank with the fewest elements so far; ties to the lowest rank), frozen
// parameters to none. A step:
//     [all-reduce (average) the trainable gradients, if average_grads]
//     this rank's optim_t steps the parameters it owns (state for those alone)
//     every owned parameter is broadcast from its owner (one broadcast per parameter)
// The course's test runs it with identical data on every rank and no gradient communication
// (average_grads 0); stage 07's trainer averages the gradients with the DDP layer (06) first.
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "06_ddp/ddp.h"
#include "common/alloc.h"
#include "common/comm.h"
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// ------------------------------------------------------------------ the optimizer interface
typedef enum { OPT_SGD = 0, OPT_ADAMW = 1 } opt_kind_t;
#define OPT_KIND_CHOICES "sgd|adamw"
const char* opt_kind_name(opt_kind_t k);           // "sgd", "adamw"
int opt_kind_parse(const char* s, opt_kind_t* out);  // 0, or -1

typedef struct {
    size_t p_off, g_off, numel;  // elements: params[p_off..], grads[g_off..]
    size_t s_off;                // its state's offset in the packed moment buffers
    int t;                       // AdamW steps taken on this range
} optim_range_t;

typedef struct {
    opt_kind_t kind;
    adamw_config_t cfg;  // lr for SGD too (the other fields are AdamW's)
    device_t dev;
    int n, cap;
    optim_range_t* r;    // (n)
    size_t state_n;      // elements of state per moment = the sum of numel over the ranges
    size_t alloc_n;      // elements allocated per moment buffer (state_n after a step)
    float *m, *v;        // (alloc_n) AdamW moments, tag MEM_OPTIM; NULL before the first step
} optim_t;

void optim_init(optim_t* o, opt_kind_t kind, const adamw_config_t* cfg, device_t dev);
void optim_free(optim_t* o);
// Adds params[p_off, p_off + numel) <- grads[g_off, ...). Merged into the last range when it
// continues it in both buffers and neither has stepped yet. numel 0 is ignored.
void optim_add_range(optim_t* o, size_t p_off, size_t g_off, size_t numel);
// One step over every range. params and grads are the START of the buffers the offsets index
// (host or device memory, as dev). New state (ranges added since the last step) is zeroed.
void optim_step(optim_t* o, float* params, const float* grads, cudaStream_t stream);
size_t optim_state_bytes(const optim_t* o);  // bytes of MEM_OPTIM this optimizer holds

// ------------------------------------------------------------------ the course's version
typedef struct sharded_optim sharded_optim_t;

// The table (param_ref_t, stage 06: name, offset, numel, trainable) is the first parameter
// group; params/grads are the flat buffers (host on MPI, device on NCCL). stream: the compute
// stream (NCCL; ignored on MPI). average_grads: all-reduce (average) each trainable gradient
// at the start of every step. A bad table dies (a bug in the caller).
sharded_optim_t* sharded_optim_create(comm_t* c, const param_ref_t* table, int n, float* params,
                                      float* grads, size_t total, opt_kind_t kind,
                                      const adamw_config_t* cfg, int average_grads,
                                      cudaStream_t stream);
void sharded_optim_destroy(sharded_optim_t* s);
// A parameter group added after construction (torch's add_param_group): its parameters are
// assigned greedily on top of the sizes so far. They must not overlap any parameter already
// held; they may lie anywhere in [0, total).
void sharded_optim_add_group(sharded_optim_t* s, const param_ref_t* table, int n);
// One optimizer step (see above); on return (MPI) or for work later on the stream (NCCL)
// every rank holds every parameter's new value.
void sharded_optim_step(sharded_optim_t* s);

int sharded_optim_n_params(const sharded_optim_t* s);  // over every group
int sharded_optim_owner(const sharded_optim_t* s, int i);  // rank, or -1 (frozen); i over groups
size_t sharded_optim_owned_elems(const sharded_optim_t* s, int rank);  // trainable elements
size_t sharded_optim_state_bytes(const sharded_optim_t* s);  // this rank's optimizer state
long long sharded_optim_broadcasts(const sharded_optim_t* s);  // broadcasts per step

// The greedy assignment alone (what the tests check): owner[i] for the n parameters of
// `table`, starting from per-rank loads `load` (world entries, updated). Frozen: -1.
void sharded_assign(const param_ref_t* table, int n, int world, size_t* load, int* owner);

#ifdef __cplusplus
}
#endif
