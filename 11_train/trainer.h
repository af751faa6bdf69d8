// The trainer's state and its step (train_main.c runs it): one model (common/lm.h) on the CPU
// over MPI or on the GPU over NCCL, the data-parallel layer of stage 06 or 07 or stage 08's
// pipeline executor, 07's optimizer (optim_t) with the clipping and the cosine schedule's rate,
// the evaluation on the held-out split, and the host copies checkpoints read and write.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "06_ddp/ddp.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"
#include "07_zero/zero3.h"
#include "08_pipeline/executor.h"
#include "08_pipeline/partition.h"
#include "08_pipeline/schedule.h"
#include "11_train/checkpoint.h"
#include "11_train/lr_clip.h"
#include "common/comm.h"
#include "common/grid.h"
#include "common/lm.h"
#include "common/param_table.h"
#include "common/tokens.h"

// Stage 08's two executors behind one set of calls, chosen once (pp_exec_make): the CPU one
// runs the model_cpu_t over MPI, the GPU one the model_gpu_t over NCCL.
typedef struct {
    void* x;
    double (*step)(void* x, const int32_t* in, const int32_t* tg, float scale);
    double (*forward)(void* x, const schedule_t* fwd, const int32_t* in, const int32_t* tg, float scale);
    void (*span)(const void* x, int chunk, size_t* begin, size_t* end);
    void (*destroy)(void* x);
} pp_ops_t;

// The trainer's state: the model, the layer over it, the optimizer and the data of one rank.
typedef struct {
    comm_t* c;
    int W, r, B, A, T, zero;
    lm_t* lm;             // the model (common/lm.h): the CPU model over MPI, the CUDA model over NCCL (one GPU a rank)
    device_t dev;         // where its flat buffers, the gradients and the moments live
    cudaStream_t cs;      // the GPU model's stream (compute, optimizer and, for DDP/ZeRO-1, collectives); NULL on the CPU
    grad_ops_t* go;       // the norm, clipping and accumulation of the gradients, on dev
    const param_layout_t* lay;
    float *hm, *hv;       // host copies of the moments for checkpoints (state_n each)
    float* dbuf;          // ZeRO-3: the parameters gathered on dev for a checkpoint (total)
    size_t total;         // flat parameter elements (the layout's)
    size_t P;             // the flat buffers' length: total, or ZeRO-1/2's padded total
    ddp_t* ddp;           // --dp
    zero_t* z;            // --zero 1, 2
    zero3_t* z3;          // --zero 3
    optim_t own;          // no ZeRO: AdamW over every parameter (one range)
    optim_t* opt;         // the optimizer that steps: &own, zero_optim(z) or zero3_optim(z3)
    float* gbase;         // the buffer opt's gradient offsets index
    ckpt_range_t* fr;     // (nfr) opt's ranges as runs of the flat layout, in its state order
    int nfr;
    float* acc;           // (nacc) gradient sum over micro-batches (A > 1): the flat gradient, or ZeRO-3's shard
    float* G;             // what a micro-batch's gradient is in: the flat gradient, or ZeRO-3's shard
    size_t nacc;
    param_ref_t* table;
    adamw_config_t cfg;
    tokens_t tok;
    sampler_t smp;
    size_t n_train;       // tokens [0, n_train) train, [n_train, n) are held out
    int32_t *in, *tg;     // (B, T); --pp: (A·B, T), the step's A micro-batches
    // --pp (stage 08): pipeline rank pr of replica d; D replicas; A = the micro-batches m
    int pp, D, d, pr;
    model_config_t mc;    // the model's config (the stages' spans)
    schedule_t sched;     // the action lists (08's schedule.h)
    schedule_t fwd;       // the forward-only lists of the same p, m, v: the evaluation's
    partition_t part;     // the blocks of every stage (08's partition.h)
    model_range_t* ranges;  // [v] this rank's chunks
    size_t *stb, *ste;    // [S] flat span of every stage
    pp_ops_t px;          // the executor
    grid_t* grid;         // --pp with D > 1: the grid {D, pp}; the replica sum runs on its "dp" group
    // the step under way
    int64_t step, kill_step;  // its number (0-based); --die-at-step
    double lr, clip, gnorm;   // its learning rate; --clip; the norm before clipping
} trainer_t;

// Set-up, after the caller filled c, W, r, B, A, T, zero, clip, kill_step, tok, smp, n_train,
// the --pp fields (pp, D, d, pr, mc, sched, fwd, part) and mc (the model's config):
// the model from lo (its backend, precision and seed; lo.ranges is set here), its table, the
// buffers of a step; AdamW's weight decay wd. Ends the job (one line) if the model cannot be made.
void trainer_model(trainer_t* t, lm_options_t lo, float wd, const char* model_s);
// The data-parallel layer (--dp: 06's DDP, variant_s and bucket_mb; --zero 1|2|3: 07's) or the
// pipeline executor (--pp), and the optimizer that steps. After the parameters are final
// (resumed and broadcast).
void trainer_layer(trainer_t* t, int dp, const char* variant_s, double bucket_mb);
void trainer_free(trainer_t* t);  // all but the communicator

// One optimizer step `step` (0-based) at learning rate lr: the mean training loss over the
// global batch; the gradient norm (before clipping) in *gnorm.
double trainer_step(trainer_t* t, int64_t step, double lr, double* gnorm);
// Mean loss over the held-out split's first nb·B·W windows (collective).
double trainer_evaluate(trainer_t* t, int nb);

// Host views for checkpoints: the flat parameters (total floats; `buf` host memory of that many:
// ZeRO-3's gathered, --pp rank 0's gathered whole; collective), the moments (state_n each).
const float* trainer_host_params(trainer_t* t, float* buf);
void trainer_host_moments(trainer_t* t, const float** m, const float** v);
const float* trainer_host_view(trainer_t* t, float* host, const float* dev, size_t n);
// The moments of a resumed run from the checkpoint at path (0, or -1 with the reason).
int trainer_load_state(trainer_t* t, const char* path, const ckpt_manifest_t* mf, char* err, size_t errlen);
// Collective: 1 if the replicas hold the same bits (--pp: every stage's replicas, in their
// slices); *hash: the FNV-64 of the host parameters (rank 0's: the whole model).
int trainer_replicas_same(trainer_t* t, float* pbuf, unsigned long long* hash);
