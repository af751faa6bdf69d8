// The executor: runs one rank's action list (schedule.h) for real, on the CPU Transformer over
// the communicator's MPI backend (host memory).
//
//   F(mb, c)     model_cpu_range_forward of micro-batch mb through chunk c's blocks; stage 0
//                reads the token ids, the last stage the targets and computes the loss
//   B(mb, c)     model_cpu_range_backward, its parameter gradients ADDED to the model's
//   BI / W       model_cpu_range_backward_input / _weight: the backward really split in two
//                (zero bubble); W adds the linear layers' and the embedding's gradients
//   SEND_ACT     the output of F(mb, c): B_mb·T·C floats to the next stage's rank
//   RECV_ACT     into the input of F(mb, c)
//   SEND_GRAD    the input gradient from B/BI(mb, c): B_mb·T·C floats to the previous stage
//   RECV_GRAD    into the output gradient of B/BI(mb, c)
// A run of consecutive communication actions is one group: every operation of it is posted
// (comm_isend / comm_irecv between comm_group_start/end) and then waited for together before
// the next compute: schedule.h's rule, which makes the lists deadlock-free even with sends
// that wait for their receive. Neighbouring stages on one rank (p = 1) hand over by copy.
//
// Activations: one model_cpu_range_acts_t per micro-batch in flight and chunk, from a pool per
// chunk: taken when its input arrives (or at F), given back after its B (or W), so the pool
// grows to the schedule's peak live count (1F1B: p, GPipe: m) and no further.
// Gradients accumulate over the step's micro-batches; the loss of each is scaled by the caller
// (1/(m·D) makes the sum over micro-batches and data-parallel replicas the global mean).
#pragma once
#include "08_pipeline/schedule.h"
#include "common/comm.h"
#include "common/model.h"
#include "common/model_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    comm_t* c;                    // MPI backend
    const schedule_t* sched;      // the lists (p, m, v)
    int rank;                     // this process's pipeline rank, 0..p-1
    int world_base;               // world rank of pipeline rank 0 of this replica (2D: d·p)
    model_cpu_t* m;               // parameters, gradients, AdamW state (whole flat layout; only
                                  // this rank's chunks' slices are used), capacity >= Bmb x T
    const model_range_t* ranges;  // [v] chunk c runs stage c·p + rank (embedding on stage 0,
                                  // head on stage p·v − 1)
    int Bmb, T;                   // rows of one micro-batch, sequence length
    int die_after;                // failure test: _exit after this many actions (-1: never)
    comm_t* dp;                   // 2D: this stage's data-parallel group (the "dp" axis of the
                                  // grid {D, p}, common/grid.h: group rank = replica d); NULL: D = 1
} pp_exec_config_t;

// Host-clock accounting of one step (seconds).
typedef struct {
    double wall;        // the flush: first action to last
    double busy;        // Σ compute actions
    double comm;        // Σ time inside communication groups (posting and waiting)
    double t_kind[4];   // Σ time per compute kind, indexed by act_kind_t F, B, BI, W
    int n_kind[4];      // how many of each ran
    int peak_live;      // peak micro-batch-chunks between F and B/W (the simulator's count)
    int pool_slots;     // activation sets allocated (can be one more per chunk than peak_live:
                        // a receive takes its set before the previous B's set is given back)
} pp_timing_t;

typedef struct pp_exec pp_exec_t;

// The failure test of both executors (--die-rank): counts n more actions done and _exits (status
// 3, one line on stderr) when the count crosses die_after (>= 0; -1 never).
void pp_die_point(int die_after, int rank, long* actions_done, int n);

// Checks the configuration (ranges against the model, peers inside the world); fail() if bad.
pp_exec_t* pp_exec_create(const pp_exec_config_t* cfg);
void pp_exec_destroy(pp_exec_t* x);

// One pipeline flush: zeroes this rank's gradient slices, runs the action list once over the
// micro-batches of inputs/targets (m·Bmb rows x T: micro-batch mb is rows mb·Bmb ..), and
// leaves the accumulated gradients in m->grads. Every micro-batch's mean loss is multiplied by
// loss_scale. Returns Σ loss_scale·loss over the micro-batches whose loss this rank computed (0
// on ranks without the head). t may be NULL.
double pp_exec_step(pp_exec_t* x, const int32_t* inputs, const int32_t* targets, float loss_scale,
                    pp_timing_t* t);

// Forward-only (evaluation): runs `fwd` (schedule_make_forward's lists for this executor's p, m,
// v and kind) once over the micro-batches of inputs/targets, as pp_exec_step would run its F
// actions, and returns Σ loss_scale·loss over the micro-batches whose loss this rank computed.
// No gradient is read or written (m->grads keeps its bits), no message but the activations'
// is sent, and each activation set goes back to the pool once its output is sent. The timeline
// of pp_exec_last_times stays the last training step's. t (may be NULL): its host times.
double pp_exec_forward(pp_exec_t* x, const schedule_t* fwd, const int32_t* inputs, const int32_t* targets,
                       float loss_scale, pp_timing_t* t);

// The timeline of the last pp_exec_step: for every action i of this rank's list, when it
// started and ended, in seconds since that step's start (a compute action: the call; every
// operation of a communication group: the group's posting to the end of its wait). *t0 is the
// step's start on CLOCK_MONOTONIC (time_now_s), one clock for all the processes of a node: add
// it to line the ranks up exactly. The arrays are the executor's (valid until the next step or
// pp_exec_schedule_changed; they cost two stores per action and are always kept). Returns the
// number of actions (the list's length), or 0 before the first step with the current lists.
// Any of the pointers may be NULL.
int pp_exec_last_times(const pp_exec_t* x, const double** start, const double** end, double* t0);

// 2D (pipeline x data parallel): sums this rank's gradient slices over the D replicas of its
// stage (world ranks d·p + rank): an all-reduce on cfg.dp (whose size must be D), done as an
// all-gather of the slices and a sum in replica order 0, 1, ..., D-1 on every replica, so every
// replica ends with the same bits, and the same bits on any backend or layout (why not
// comm_allreduce: see executor.c). Returns seconds taken.
double pp_exec_dp_allreduce(pp_exec_t* x, int D);

// AdamW (model_cpu_adamw_step's semantics: t = ++m->adam_t) over this rank's slices only.
void pp_exec_adamw(pp_exec_t* x, const adamw_config_t* cfg);

// The schedule cfg.sched points to was rebuilt in place (same kind, p, m, v; re-planned with
// other costs): re-reads it, keeping the activation sets already allocated.
void pp_exec_schedule_changed(pp_exec_t* x);

// Slice [*begin, *end) of the flat buffer that chunk c owns.
void pp_exec_span(const pp_exec_t* x, int chunk, size_t* begin, size_t* end);

// ---- the executor on the GPU (executor_gpu.c): the same action lists, the CUDA model --------
// A file of its own beside the CPU executor, which stays the reference (and the student's
// exercise): the loop over the list is the same, what changes is what an action does.
//   compute   model_gpu_range_forward / _backward, or for ZB-H1 _backward_input (BI) and
//             _backward_weight (W) (common/model_gpu_range.c, ADD) on the model's stream,
//             bracketed by two CUDA events (the action's busy time)
//   groups    comm_isend / comm_irecv on device buffers (NCCL) between comm_group_start/end,
//             on the communicator's own stream; that stream first waits for an event recorded
//             on the compute stream where the group sits in the list (what it sends is
//             computed; what it receives into is no longer read). The compute stream waits
//             for the group (an event on the communication stream) only if the group receives:
//             a send-only group runs beside the next computes. Nothing a send reads is written
//             again before a later receive group that the compute stream waits for (an output
//             or input gradient is written once per micro-batch; a set is reused on stages > 0
//             only through a RECV_ACT, and on stage 0 only after its B (or W, after its BI),
//             which waited for the RECV_GRAD posted after that micro-batch's SEND_ACT on the
//             same stream).
//             The host never waits inside the step: requests are detached (comm_detach) and
//             the step ends with comm_stream_sync of both streams (the deadline: a dead peer
//             ends the job). The streams run the groups in list order, which is the CPU
//             executor's order with fewer waits, so the schedule's grouping rule keeps it
//             deadlock-free.
//             Forward-only lists (pp_exec_gpu_forward) break the reuse argument above: there
//             is no B, and a set given back after its F's SEND_ACT is taken again by the next F
//             (stage 0 writes it with no receive before). So there the compute stream also waits
//             for every group that sends: each F after a send starts once that send is done.
//             The sends then no longer overlap the next forward; an activation is B_mb·T·C
//             floats against a whole stage's forward, and the sets stay one or two per chunk.
//   timing    per rank: wall = event at the step's start to event at its end on the compute
//             stream; busy = Σ compute actions (events); comm = Σ group spans on the
//             communication stream; measured bubble = 1 − busy / wall.
// Limits: fp32; one micro-batch = the model's B x T; no data parallelism (p ranks = the world).
// The model (model_gpu_create_ranges) holds the whole flat parameter and gradient buffers on
// every rank (the layout's offsets); a rank touches only its chunks' slices, and its AdamW
// moments exist only for those slices.
#include "common/model_gpu.h"

typedef struct {
    comm_t* c;                    // NCCL backend
    const schedule_t* sched;      // GPipe, 1F1B, interleaved or ZB-H1
    int rank;                     // pipeline rank = world rank
    model_gpu_t* m;               // fp32, B x T = Bmb x T
    const model_range_t* ranges;  // [v] as pp_exec_config_t
    int Bmb, T;
    int die_after;                // -1: never
} pp_exec_gpu_config_t;

typedef struct pp_exec_gpu pp_exec_gpu_t;

// fail() on a bad configuration (bf16, shapes); dies on CUDA errors.
pp_exec_gpu_t* pp_exec_gpu_create(const pp_exec_gpu_config_t* cfg);
void pp_exec_gpu_destroy(pp_exec_gpu_t* x);
// One flush, as pp_exec_step; inputs/targets on the HOST (copied to the device first). The
// timing is the CUDA events' (comm: Σ group spans on the communication stream).
double pp_exec_gpu_step(pp_exec_gpu_t* x, const int32_t* inputs, const int32_t* targets, float loss_scale,
                        pp_timing_t* t);
// Forward-only, as pp_exec_forward: `fwd` is schedule_make_forward's lists; no gradient is
// read or written, no event timing; returns Σ loss_scale·loss of this rank's micro-batches
// (summed in micro-batch order, as pp_exec_gpu_step) after both streams are synchronised.
double pp_exec_gpu_forward(pp_exec_gpu_t* x, const schedule_t* fwd, const int32_t* inputs, const int32_t* targets,
                           float loss_scale);
// AdamW over this rank's slices (k_adamw, the bits of model_gpu_adamw element for element).
void pp_exec_gpu_adamw(pp_exec_gpu_t* x, const adamw_config_t* cfg);
void pp_exec_gpu_schedule_changed(pp_exec_gpu_t* x);
// The timeline of the last pp_exec_gpu_step, as pp_exec_last_times: seconds from the step's
// ev_t0 on the compute stream to each compute action's two events, and for every operation of
// a group its span on the communication stream (ready to be sent -> the group's kernels done).
// The events exist anyway (they give the busy and comm times); reading them back is n event
// queries after the step. Each rank's clock starts at its own ev_t0: with
// pp_exec_gpu_align_start(x, 1) every step first drains the compute stream and passes a host
// barrier, then records ev_t0, so the ranks' zeros agree to within the barrier's skew (the
// barrier's exit on the different hosts / processes, plus one event launch), not exactly.
int pp_exec_gpu_last_times(const pp_exec_gpu_t* x, const double** start, const double** end);
// 1: every step starts with cudaStreamSynchronize(compute) + comm_barrier before ev_t0 (costs a
// barrier per step; for timelines). 0 (default): no barrier, ev_t0 as soon as the step is queued.
void pp_exec_gpu_align_start(pp_exec_gpu_t* x, int on);
void pp_exec_gpu_span(const pp_exec_gpu_t* x, int chunk, size_t* begin, size_t* end);

#ifdef __cplusplus
}
#endif
