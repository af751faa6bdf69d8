// One data-parallel replica of the Transformer LM: what ddp_train (stage 06) and zero_train
// (stage 07) both set up before their own layer takes over — the communicator, the model on the
// CPU (MPI backend) or the GPU (NCCL), the parameter table the DDP/ZeRO layers take, and the
// global batch of a step with this rank's slice of it.
#pragma once
#include <stdint.h>
#include "06_ddp/ddp.h"
#include "common/attention.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    comm_t* c;
    int gpu;                   // NCCL backend: the CUDA model; else the CPU model
    model_config_t cfg;
    int B, T;                  // sequences per rank, sequence length
    data_source_t data;        // random tokens, a pure function of (seed, step)
    int32_t *in_all, *tg_all;  // (B·world, T) the global batch of a step
    model_cpu_t cpu;           // CPU backend
    model_gpu_t* m;            // GPU backend
    const param_layout_t* lay;
    ddp_param_t* table;        // (lay->n) every parameter, trainable, in layout order
} replica_t;

// Rank r's model starts from seed + r (the replicas differ until someone broadcasts). On the GPU
// one untimed forward + backward (no optimizer step: nothing changes) makes the model allocate
// its gradient buffer, so model_gpu_grads() is valid on return. Out of memory and impossible
// sizes end the job with one line (exit 2).
void replica_create(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T,
                    model_precision_t prec, const attention_impl_t* attn, int seed);
// The same with the flat buffers made to measure (stage 07's sharded trainers): on the GPU by
// model_gpu_create_flat(flat_total) (padded parameters and gradients from the start, or
// MODEL_GPU_NO_FLAT: none, for ZeRO-3; P | MODEL_GPU_NO_FLAT_GRADS: padded parameters and no
// gradient buffer, for ZeRO-2), no warm-up pass (the gradient buffer and the backward
// scratch exist on return). The CPU model is built whole, then its flat buffers replaced the
// same way (host memory; the CPU path checks bits, not memory). Its own AdamW moments stay.
void replica_create_flat(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                         const attention_impl_t* attn, int seed, size_t flat_total);
// Both with activation checkpointing K (model_cpu.h "activation checkpointing": 0 none, 1
// block, K every-K) passed to the model's create (stage 07's zero_train --checkpoint).
void replica_create_ckpt(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                         const attention_impl_t* attn, int seed, int ckpt);
void replica_create_flat_ckpt(replica_t* x, comm_t* c, const model_config_t* cfg, int B, int T, model_precision_t prec,
                              const attention_impl_t* attn, int seed, size_t flat_total, int ckpt);
// The global batch of `step` (every rank draws the same), and this rank's (B, T) slice of it.
void replica_batch(replica_t* x, int64_t step, const int32_t** inputs, const int32_t** targets);
void replica_destroy(replica_t* x);

#ifdef __cplusplus
}
#endif
