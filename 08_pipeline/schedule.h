// Pipeline schedules as data: for p ranks, m micro-batches and v model chunks per rank, each
// rank's ordered list of actions (compute and point-to-point communication). The generator is
// pure C and needs no GPU; the simulator (simulate.h) runs the lists with costs, and an executor
// runs them over the communicator's send/recv (executor.h; see README "Executor").
//
// Letters (used everywhere in this stage):
//   p  pipeline ranks            r     a rank, 0..p-1
//   m  micro-batches per step    mb    a micro-batch, 0..m-1
//   v  model chunks per rank     c     a chunk, 0..v-1 (v > 1 only for INTERLEAVED)
//   S = p·v stages; stage s = c·p + r lives on rank s % p as its chunk s / p. The model's layers
//   are cut into S contiguous pieces: stage 0 reads the batch, stage S-1 computes the loss.
//
// Schedules:
//   GPIPE        all m forwards, then all m backwards (in micro-batch order).
//   1F1B         warm-up of min(p-1-r, m) forwards, then one forward / one backward, then the
//                cool-down backwards: at most p micro-batches in flight (Narayanan et al. 2021).
//   INTERLEAVED  Megatron-LM's interleaved 1F1B with v chunks per rank; needs m % p == 0.
//   ZBH1         zero bubble H1 (Qi et al. 2024): the backward split into BI (input gradient,
//                on the critical path) and W (weight gradient, movable); W passes fill the
//                bubbles, with at most p micro-batches in flight per rank (1F1B's peak).
//   forward-only (schedule_make_forward; evaluation): the forwards alone, in the virtual-step
//                order of the training schedule it goes with (v = 1: F0 F1 .. F(m-1); v > 1:
//                rounds of p micro-batches through the chunks, as interleaved). Only F,
//                SEND_ACT and RECV_ACT; the last stage computes the loss and nothing comes back.
//                A micro-batch's activations are needed only until its output is sent, so an
//                executor gives them back right after (one or two sets per chunk, not p or m).
//
// The action list. Compute actions (peer = -1):
//   F   forward of (mb, chunk). Input: the activation from stage s-1 (stage 0: the batch).
//   B   full backward of (mb, chunk) (every schedule but ZBH1). Input: the gradient from stage
//       s+1 (stage S-1: the loss) and the activations saved by its F. Frees them.
//   BI  ZBH1: input-gradient half of B; sends the gradient on. Keeps what W needs.
//   W   ZBH1: weight-gradient half of B, after its BI. Frees the saved activations.
// Communication actions (peer = the other rank; never this rank: when two neighbouring stages
// share a rank, as when p = 1, the tensor stays local and there is no action):
//   SEND_ACT   send the output of this rank's F(mb, chunk) to the rank of stage s+1
//   RECV_ACT   receive the input of this rank's F(mb, chunk) from the rank of stage s-1
//   SEND_GRAD  send the input gradient of this rank's B/BI(mb, chunk) to the rank of stage s-1
//   RECV_GRAD  receive the output gradient for this rank's B/BI(mb, chunk) from stage s+1's rank
// `chunk` is always this rank's chunk; the peer's stage is s+1 (activations) or s-1 (gradients),
// which for INTERLEAVED can be the peer's next or previous chunk (rank p-1 chunk c sends to
// rank 0 chunk c+1).
//
// How an executor runs a list without deadlock (blocking or grouped send/recv, NCCL or MPI):
//   1. A maximal run of consecutive communication actions is ONE GROUP: post all of it at once
//      (ncclGroupStart; ncclSend/ncclRecv...; ncclGroupEnd, or MPI_Isend/MPI_Irecv then
//      MPI_Waitall) and finish the group before the next compute action. A group may hold the
//      sends of the compute just done and the receives of the computes to come.
//   2. Between any two ranks, the k-th send from a to b meets the k-th receive at b from a
//      (FIFO, no tags needed); schedule_validate checks that the pairs agree on kind, micro-
//      batch and stage.
//   Why no deadlock even with rendezvous sends (a send that waits for its receive): the
//   generator plays the compute orders once with planning costs (all 1 unless given) and stamps
//   each message with the time its producer ends. The sender posts it in the group right after
//   the producer; the receiver in the group after whatever compute it is running at that time
//   (before the consumer, which cannot start earlier). So on every rank the groups come in
//   increasing stamp order and all messages of one stamp share one group. Induction on the
//   stamps: once every message stamped before t is done, every rank reaches its group holding
//   the stamp-t messages (computes never wait), so both ends of each are posted and it
//   completes. Nothing waits forever, whatever the real costs. When the real costs are the
//   planning costs, eager sends reproduce the planned times exactly; rendezvous sends may wait
//   for a receiver still computing (simulate.h shows both). schedule_validate re-checks all of
//   this by simulation.
#pragma once
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1 } sched_kind_t;
#define SCHED_CHOICES "gpipe|1f1b|interleaved|zbh1"
#define SCHED_NKINDS 4

typedef enum {
    ACT_F, ACT_B, ACT_BI, ACT_W,                            // compute
    ACT_SEND_ACT, ACT_RECV_ACT, ACT_SEND_GRAD, ACT_RECV_GRAD // communication
} act_kind_t;
#define ACT_NKINDS 8

typedef struct {
    act_kind_t kind;
    int mb;     // micro-batch, 0..m-1
    int chunk;  // this rank's chunk, 0..v-1
    int peer;   // other rank for communication actions; -1 for compute actions
} action_t;

typedef struct {
    int p, m, v;
    sched_kind_t kind;
    int* n_actions;      // [p] length of each rank's list
    action_t** actions;  // [p][n_actions[r]] each rank's list, in execution order
    int forward_only;    // 1: schedule_make_forward's lists (no backward); `kind` is the
                         // training schedule they go with (its checks on p, m, v apply)
} schedule_t;

// Relative costs the generator plans with (the kinds the schedule runs must be > 0: F and B, or
// F, BI and W for ZBH1). They decide where each message's send and receive go, and for ZBH1
// where the W passes go; the other schedules' compute orders do not depend on them.
// schedule_make plans with all 1.
typedef struct {
    double f, b, bi, w;
} sched_costs_t;

// Limits that keep every array small and every count inside an int.
#define SCHED_MAX_P 256
#define SCHED_MAX_STAGE_MB 1000000  // p·v·m at most

// Builds schedule `kind` for p ranks, m micro-batches, v chunks (v must be 1 except for
// INTERLEAVED, which needs v >= 2 and m % p == 0). 0, or -1 with one line in err saying what is
// wrong and what is allowed (out is then empty). Free with schedule_free.
int schedule_make(sched_kind_t kind, int p, int m, int v, schedule_t* out, char* err, size_t errlen);
// The same, planned with the costs the schedule will run with (NULL: all 1).
int schedule_make_planned(sched_kind_t kind, int p, int m, int v, const sched_costs_t* plan, schedule_t* out,
                          char* err, size_t errlen);
void schedule_free(schedule_t* s);

// The forward-only lists (evaluation) that go with training schedule `kind` on p ranks, m
// micro-batches, v chunks: every rank runs F of each of its v·m micro-batch-chunks once, with
// the activation sends and receives placed by the same rule (and the same proof) as the
// training lists; no B, BI, W and no gradient message. The same arguments are refused as by
// schedule_make (so an executor built for `kind` runs both). 0, or -1 with one line in err.
int schedule_make_forward(sched_kind_t kind, int p, int m, int v, schedule_t* out, char* err, size_t errlen);

// Checks a schedule (generated or written by hand): every action's fields in range, each
// (stage, mb) computed once on its rank (F, then B or BI+W; forward_only: F alone), sends and receives paired in the
// same order per (src, dst), every input present before its action runs, and a simulated run
// with rendezvous point-to-point (the strictest) ending without deadlock. 0, or -1 and why.
int schedule_validate(const schedule_t* s, char* err, size_t errlen);

// The part of schedule_validate that needs no simulation: fields in range, peers the neighbour
// stages' ranks, each (stage, mb) computed once. sim_run calls it before it runs anything.
int schedule_check_structure(const schedule_t* s, char* err, size_t errlen);

// "gpipe" <-> SCHED_GPIPE, ... 0 on success, -1 if the name is none of SCHED_CHOICES.
int sched_parse(const char* name, sched_kind_t* out);
const char* sched_name(sched_kind_t kind);
const char* act_name(act_kind_t kind);  // "F", "B", "BI", "W", "SEND_ACT", ...
static inline int act_is_comm(act_kind_t k) { return k >= ACT_SEND_ACT; }

static inline int sched_stages(const schedule_t* s) { return s->p * s->v; }
static inline int sched_stage(const schedule_t* s, int rank, int chunk) { return chunk * s->p + rank; }
static inline int sched_rank_of(const schedule_t* s, int stage) { return stage % s->p; }

// Length of the communication group that starts at actions[rank][i] (0 if it is a compute).
int schedule_group_len(const schedule_t* s, int rank, int i);
// Number of messages (sends) in the whole schedule: GPipe and 1F1B send 2·m·(p-1),
// INTERLEAVED 2·m·(v·p-1): v times more stage boundaries cross a link.
long schedule_messages(const schedule_t* s);

// Short text of one action: "F3", "BI3", "W3", chunk shown when v > 1 ("F3c1"); communication
// as "SA3>2" (send activation of mb 3 to rank 2), "RA3<0", "SG3>0", "RG3<2".
void action_format(const schedule_t* s, const action_t* a, char* buf, size_t len);
// One line per rank: "rank 0: F0 F1 B0 ...". with_comm = 1 also prints the communication
// groups in braces: "{RA0<0} F0 {SA0>2 RG0<2} B0 ...".
void schedule_print(const schedule_t* s, int with_comm, FILE* out);

#ifdef __cplusplus
}
#endif
