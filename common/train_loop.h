// The training loop every distributed program shares (stage 06's ddp_train, 07's zero_train,
// 08's pp_train and the trainer): the flags they all take, the set-up of the communicator and
// the replica, one step with the parallel method's hooks, timed at its phase boundaries, the
// measured runs (warm-up, then the median of the slowest rank), the replicas' bitwise check and
// the CSV. A program is this loop plus its method (a train_method_t) and its own flags and
// tables.
//
//   train_flags_t f = train_flags_default();
//   cli_opt_t opts[32];
//   int n = train_flags_opts(&f, opts);         // the shared flags, then the program's own
//   comm_cli_parse(argc, argv, "...", opts, n);
//   train_setup_t s;
//   train_setup(&f, &s);                        // checks (one line, exit 2), comm, replica
//   train_method_t meth = {ctx, my_hook, my_finish, my_update, my_comm_ms};
//   train_run(&s, &meth, f.warmup, f.steps, NULL, NULL, med);
//
// The step's phases, on the model's stream (GPU: CUDA events) or the host clock (CPU):
//   mark 0 | forward, backward (method.grad_ready per parameter) | mark 1 | method.finish_grads
//   | mark 2 | method.update, or the model's AdamW | mark 3
// step = 0..3, sync = 1..2 (the communication left exposed after the backward), update = 2..3.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "common/cli.h"
#include "common/comm.h"
#include "common/lm.h"
#include "common/replica.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- the flags every training program takes ------------------------------------------------
typedef struct {
    const char* model;      // --model (MODEL_SIZE_CHOICES)
    int context, batch;     // --context T, --batch sequences per rank
    const char* precision;  // --precision fp32|bf16 (the GPU)
    const char* attention;  // --attention naive|flash (the GPU)
    int steps, warmup;      // measured steps and warm-up steps per run
    const char* backend;    // --backend auto|nccl|mpi
    int seed;               // rank r's model from seed + r; the data from seed
    double lr;              // AdamW's learning rate
    const char* csv;        // rank 0 appends its rows here ("" none)
    double comm_timeout;    // --comm-timeout (0: the default)
    int head_chunk;         // --head-chunk ROWS: the chunked LM head (lm.h head_chunk; 0 the whole logits)
    int bf16_cpu;           // set by a program (not a flag): --precision bf16 allowed on the MPI
                            // backend (the CPU model's bf16 parameters, model_cpu.h)
} train_flags_t;

train_flags_t train_flags_default(void);  // tiny, context 32, batch 2, 5 steps after 2, lr 1e-3
#define TRAIN_FLAGS_N 13
// Fills opts[0 .. TRAIN_FLAGS_N) with the shared flags bound to f; returns TRAIN_FLAGS_N.
int train_flags_opts(train_flags_t* f, cli_opt_t* opts);

// What train_setup makes of the flags.
typedef struct {
    train_flags_t f;
    model_config_t cfg;
    comm_backend_t backend;
    model_precision_t precision;
    const attention_impl_t* attn;  // NULL: the model's built-in attention; the program sets the
                                   // plug-in --attention names (it lives in stage 04)
    comm_t* c;
    replica_t rep;                 // the model, the table and the data
    adamw_config_t opt;
    int adam_step;                 // the model's AdamW steps so far
    int64_t step;                  // the data's step counter (every run goes on from it)
} train_setup_t;

// Checks the shared flags (one line from rank 0, exit 2, naming what is allowed): the size,
// the ranges, bf16 and flash only on the GPU backend, a CSV that can be written. layers > 0:
// that many blocks in place of the size's own.
void train_flags_check(const train_flags_t* f, int layers, train_setup_t* s);
// The communicator, then the replica (o: the model's options but B, T, precision and
// attention, which come from the flags). Call after train_flags_check and the program's own
// checks.
void train_setup(train_setup_t* s, lm_options_t o);
void train_teardown(train_setup_t* s);  // the replica, then the communicator

// "# <prog>: xl, context 512, batch 2 per rank x 2 ranks, fp32, nccl backend, GPU NVIDIA H200,
// 1.56 B parameters (6.26 GB fp32)" on rank 0 (label: the model's name as the program prints it).
void train_banner(const train_setup_t* s, const char* prog, const char* label);

// ---- one step --------------------------------------------------------------------------------
typedef struct {
    void* ctx;
    grad_ready_fn grad_ready;                // per parameter during the backward (NULL: none)
    void (*finish_grads)(void* ctx);         // after the backward: the gradients complete (NULL: none)
    void (*update)(void* ctx);               // NULL: the model's own AdamW (lm_adamw)
    double (*comm_ms)(void* ctx);            // the GPU's time communicating in the last step (NULL:
                                             // the exposed time, as on the CPU's host clock)
} train_method_t;

typedef struct {
    float loss;               // this rank's mean loss
    double step_ms, sync_ms, update_ms, comm_ms;
    // The counting allocator's peaks by phase (lm_device): forward + backward + gradient sync,
    // the update, and what is live after it.
    long long peak_fb, peak_update, live_after;
} train_times_t;

// One step on this rank's slice of global batch data_step. method NULL: no communication (each
// rank trains alone). Ends the job (one line) on out-of-memory.
void train_step(train_setup_t* s, const train_method_t* method, int64_t data_step, train_times_t* out);

// warmup + steps steps of method (the data from s->step on, or from 0 with from_zero: the
// single-process referee's order), then med[0..3] = the medians of step, sync, update and comm
// ms over the measured steps, the slowest rank's. each (may be NULL) sees every step. A loss
// that is not finite ends the job.
typedef void (*train_each_fn)(void* ctx, int k, const train_times_t* t);
void train_run(train_setup_t* s, const train_method_t* method, int warmup, int steps, int from_zero,
               train_each_fn each, void* ctx, double med[4]);

// ---- checks and output ---------------------------------------------------------------------
// 1 if every rank's parameters are bitwise those of the others (a hash compared everywhere;
// collective), else 0.
int train_replicas_identical(train_setup_t* s);
// Rank 0 trains one model on every step's whole global batch (steps steps from 0, fp32, the
// same seed) and compares its parameters with this replica's, within rtol 1e-4, atol 1e-5 (the
// same mean-loss gradient summed in another order: per-rank means, then averaged). Prints one
// line; returns 0 if within, 1 if not. Rank 0 only.
int train_check_single(train_setup_t* s, int steps);
// Opens path for appending (rank 0), writing header first if the file is empty. Dies (one line)
// if it cannot.
FILE* train_csv_open(const char* flag, const char* path, const char* header);

// ---- a step of micro-batches, and the replicas' check by hash (the trainer's) ----------------
// What a step of A micro-batches does around each one (ctx: the method's).
typedef struct {
    void (*fill)(void* ctx, int a);  // lm_set_tokens of micro-batch a (the caller's data)
    void (*done)(void* ctx, int a);  // after its backward, e.g. the gradient summed (NULL: nothing)
} train_micro_t;
// A step on the caller's data: for a = 0 .. A-1: micro->fill, the forward and its loss (waits),
// the backward (method->grad_ready only when A == 1: with more, the gradient is final only
// after the last; finish_grads then sees to it), micro->done; then method->finish_grads and
// method->update (as train_step: update NULL is the model's AdamW at step ++*adam_step).
// Returns Σ of the micro-batches' losses (this rank's). Ends the job (one line) on an error.
double train_step_accum(comm_t* c, lm_t* m, const train_method_t* method, int A, const train_micro_t* micro,
                        const adamw_config_t* opt, int* adam_step);
// Collective: 1 if every rank of each group holds the same hash h (group: this rank's, 0 ..
// ngroups-1; one group: the replicas are bitwise the same), else 0.
int train_hashes_agree(comm_t* c, unsigned long long h, int group, int ngroups);
// The communicator alone (train_setup then makes only the replica): for a program whose model
// options depend on the world size (stage 07's buffers padded to n equal shards).
void train_setup_comm(train_setup_t* s);

#ifdef __cplusplus
}
#endif
