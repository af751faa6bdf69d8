// The rank's pipeline executor, of either kind, behind one set of calls: the CPU executor
// (executor.c, MPI, the reference) or the GPU one (executor_gpu.c, NCCL), each with the rank's
// model made through common/lm.h (on the GPU the range model). A program picks the kind once,
// at pp_runner_create, from the communicator's backend, and never asks again; what the two do
// differently stays inside the executors.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "08_pipeline/executor.h"
#include "common/lm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    comm_t* c;                    // MPI: the CPU executor; NCCL: the GPU one (fp32, world = p)
    const schedule_t* sched;
    int rank, world_base;         // pipeline rank; world rank of this replica's rank 0 (d·p)
    const model_config_t* cfg;
    uint64_t seed;                // the model's parameters (every rank the whole model's)
    const model_range_t* ranges;  // [v] as pp_exec_config_t
    int Bmb, T;
    int die_after;                // -1: never
    comm_t* dp;                   // the CPU executor's data-parallel group (pp_exec_config_t.dp)
} pp_runner_config_t;

typedef struct pp_runner pp_runner_t;

// fail() on a configuration the executor refuses; ends the job (one line) if the model does
// not fit.
pp_runner_t* pp_runner_create(const pp_runner_config_t* cfg);
void pp_runner_destroy(pp_runner_t* r);  // NULL is fine

lm_t* pp_runner_model(pp_runner_t* r);  // the rank's model (whole flat buffers; its slices used)
const char* pp_runner_where(const pp_runner_t* r);  // "MPI on the CPU", "NCCL, one GPU per rank, fp32"
const char* pp_runner_clock(const pp_runner_t* r);  // "host clock", "CUDA events"

// pp_exec_step / pp_exec_gpu_step (inputs, targets on the host).
double pp_runner_step(pp_runner_t* r, const int32_t* inputs, const int32_t* targets, float loss_scale, pp_timing_t* t);
// pp_exec_forward / pp_exec_gpu_forward.
double pp_runner_forward(pp_runner_t* r, const schedule_t* fwd, const int32_t* inputs, const int32_t* targets,
                         float loss_scale);
// The gradient sum over D replicas (pp_exec_dp_allreduce; seconds). The GPU runs D = 1 only: 0.
double pp_runner_dp_allreduce(pp_runner_t* r, int D);
void pp_runner_adamw(pp_runner_t* r, const adamw_config_t* opt);
void pp_runner_schedule_changed(pp_runner_t* r);
// The last step's timeline (pp_exec_last_times; on the GPU *t0 = 0: each rank's own zero).
int pp_runner_last_times(const pp_runner_t* r, const double** start, const double** end, double* t0);
// The next steps start together on every rank (CPU: a barrier before this one; GPU: a barrier
// inside every step before its first event, pp_exec_gpu_align_start).
void pp_runner_align_start(pp_runner_t* r);
void pp_runner_span(const pp_runner_t* r, int chunk, size_t* begin, size_t* end);

#ifdef __cplusplus
}
#endif
