// The communicator: one interface, two backends, for stages 05-08.
//
//   MPI  (COMM_MPI)   buffers in HOST memory; what Gloo is to PyTorch. Runs anywhere.
//   NCCL (COMM_NCCL)  buffers in DEVICE memory; one GPU per rank; work is enqueued on the
//                     CUDA stream you pass (NULL: the communicator's own stream).
//
// Started from mpirun (`mpirun -np 4 prog`, or `mpirun -H a,b -np 16 prog` across nodes: the
// same code). comm_init runs MPI_Init, finds the local rank with a shared-memory split, picks
// the GPU (cudaSetDevice before any other CUDA call), and for NCCL broadcasts rank 0's
// ncclUniqueId over MPI and calls ncclCommInitRankConfig. Run without mpirun, it is a world of one.
//
// Counts are ELEMENTS of `dt`, never bytes. Every operation has a blocking form and a
// non-blocking form (comm_i*) that returns a request to pass to comm_wait. On NCCL the
// blocking form enqueues and then waits for the stream; the non-blocking one only enqueues
// (work later on the same stream is ordered after it without any wait).
//
// Failure in bounded time: every wait polls against a deadline (comm->timeout_s; --comm-timeout
// flag, COMM_TIMEOUT environment variable, default 60 s); blocking MPI collectives run under a
// watchdog thread with the same deadline. MPI errors return (MPI_ERRORS_RETURN) and are
// reported; when any rank exits, mpirun ends the others, so a dead peer ends the job non-zero.
//
// Deadlines (comm.c comm_deadline, common/comm_rec.h):
// - No host wait outside the deadline, NCCL included: the NCCL communicator is NON-BLOCKING
//   (ncclConfig_t.blocking = 0), so initialisation, every group end (where NCCL connects two
//   peers on their first contact) and every launch return ncclInProgress at once; the backend
//   polls ncclCommGetAsyncError (and cudaEventQuery for completion) under the deadline. Past
//   it: ncclCommAbort, MPI_Abort, exit COMM_EXIT_TIMEOUT; a watchdog _exit()s if the abort
//   itself hangs (NCCL issues #829, #1777).
// - A flight recorder: each rank keeps its last COMM_REC_LEN operations (number, op, bytes,
//   peer, start, done) in a ring; the rings of a node live in one MPI shared-memory window, so
//   a stopped or hung rank's ring can be read without its help. Collectives are numbered in
//   the order every rank calls them, sends and receives per pair and direction.
// - One line per job (per node across nodes), from the lowest rank that waited, e.g.
//     comm: deadline 5 s passed in all-reduce #3 (4.0 MiB) on rank 0: rank 1 never entered it
//     (last: send #2 to rank 0, done 5.2 s ago)
//   Each rank whose deadline passes marks itself expired; after a grace (a quarter of the
//   deadline, 0.2-1 s) the lowest expired rank takes the node's claim with a compare-and-swap
//   and alone prints; the others end silently. A rank that was stopped (SIGSTOP) and is
//   continued by mpirun's teardown finds the claim taken; besides, time a rank spends stopped
//   does not count against its own deadline (a poll more than COMM_CLOCK_GAP_S late moves it).
//
// Nodes (comm.c node_split): local_rank/local_world come from MPI's shared-memory split (the
// ranks of one machine). CS336_EMULATE_NODES=N makes the job believe it runs on N nodes: ranks
// in contiguous blocks of world/N (N must divide the world, else one line, exit 2; a block must
// lie on one machine). Each block is a node for the flight recorder (its own window and one
// deadline line per node) and for the shared-memory all-reduce (off: the job spans nodes); a
// rank's GPU is still its place on its machine, and NCCL_HOSTID (unless set) is made distinct
// per emulated node so that NCCL treats the other blocks as remote hosts. scripts/mpirun.sh
// --emulate-nodes N sets it and sends MPI's traffic over TCP on the loopback interface. When the
// job spans machines, under emulation, or with COMM_VERBOSE=1, rank 0 prints one line per node
// on stderr at start:
//     comm: node 1 of 2 (emulated): ranks 2,3 on <host>
//
// MPI backend, all ranks on one node: the blocking fp32/fp64 all-reduce goes through a shared-
// memory window (common/comm_shm.c; bitwise identical on every rank, reduced in rank order).
// COMM_SHM=0 turns it off (MPI's collectives); COMM_SHM_CHUNK (bytes, default 1M) sets its chunk.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/alloc.h"
#include "common/cli.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_MPI = 0, COMM_NCCL = 1 } comm_backend_t;
#define COMM_BACKEND_CHOICES "mpi|nccl"
// COMM_BF16: 2-byte elements (common/dtype.h's raw bits). NCCL reduces them natively; MPI moves
// them as 16-bit words and reduces SUM/AVG by a user op (widen, add in fp32, round to bf16).
typedef enum { COMM_F32 = 0, COMM_I32, COMM_BF16, COMM_U8, COMM_F64 } comm_dtype_t;
typedef enum { COMM_SUM = 0, COMM_AVG, COMM_MAX, COMM_MIN } comm_op_t;

#define COMM_TIMEOUT_DEFAULT_S 60.0
#define COMM_EXIT_TIMEOUT 124  // exit status of a rank whose wait passed the deadline

typedef struct comm_impl comm_impl_t;
typedef struct {
    int rank, world;              // this process in the communicator, and its size (a group's
                                  // own: comm_split)
    int local_rank, local_world;  // on this node (shared-memory split; a group's: its members here)
    int device;                   // CUDA device of this rank (NCCL), -1 for MPI
    comm_backend_t backend;
    double timeout_s;             // deadline of every wait
    comm_impl_t* impl;
    int world_rank;               // this process in the whole job (== rank for the world)
    char name[16];                // a group's name ("dp", "tp"; comm_split), "" for the world
} comm_t;

typedef struct comm_req comm_req_t;  // a pending non-blocking operation

const char* comm_backend_name(comm_backend_t b);  // "mpi", "nccl"
int comm_backend_parse(const char* s, comm_backend_t* out);  // 0, or -1
size_t comm_dtype_size(comm_dtype_t dt);
const char* comm_op_name(comm_op_t op);  // "sum", "avg", "max", "min"

// The deadline in seconds from the environment (COMM_TIMEOUT), else the default. Programs
// with a --comm-timeout flag pass its value to comm_init instead; <= 0 means "use this".
double comm_timeout_from_env(void);

// Starts MPI (if not yet started) and the backend. Bad set-ups are user errors (one line,
// exit 2, on every rank): NCCL without a GPU, more ranks on a node than GPUs (NCCL needs one
// GPU per rank), NCCL not built in. Never returns NULL.
comm_t* comm_init(comm_backend_t backend, double timeout_s);
// Frees the backend; MPI_Finalize when `finalize_mpi` (the last communicator of the program).
// A group (comm_split) is freed the same way (collective over the group), before the
// communicator it was split from, and never finalizes MPI (finalize_mpi is ignored for it).
void comm_destroy(comm_t* c, int finalize_mpi);

// ---- groups ---------------------------------------------------------------------------------
// Collective over c: the ranks that pass the same color (>= 0) form a new communicator, ranked
// by key (ties: by rank in c); color < 0 joins no group and returns NULL. A group is a
// communicator like the world: every operation, deadline and refusal below works on it with
// the group's ranks (rank, world: in the group; world_rank: in the job). Its deadline line
// names it and both ranks ("dp rank 1 (world rank 3)"); comm_fatal's line too. `name`: up to
// 15 characters, letters, digits, '-' or '_' ("dp", "tp", "pp").
// MPI: MPI_Comm_split; the shared-memory all-reduce and the flight recorder get windows of
// the group's own (over its members on each node). NCCL: ncclCommSplit of c's communicator,
// non-blocking like the world's and settled under the deadline; the group has its own stream.
// Groups of groups work the same way (split a group).
comm_t* comm_split(comm_t* c, int color, int key, const char* name);
// "dp rank 1 (world rank 3)" for a group, "rank 3" for the world: how lines name this rank.
const char* comm_rank_label(const comm_t* c, char* buf, size_t len);

// Memory of the backend's kind (host for MPI, device for NCCL) from common/alloc.h.
void* comm_alloc(const comm_t* c, size_t bytes, mem_tag_t tag);
device_t comm_device_kind(const comm_t* c);  // DEV_CPU or DEV_CUDA
// The communicator's own stream (NCCL; NULL for MPI).
cudaStream_t comm_stream(const comm_t* c);
// The ncclComm_t underneath (NCCL backend), for calling NCCL directly (the benchmark's
// "nccl-direct" row); NULL for MPI. The communicator is non-blocking: pass the result of
// every NCCL call made on it to comm_nccl_settle, which waits (under the deadline) until NCCL
// has finished launching it, and dies on an error.
void* comm_nccl_handle(const comm_t* c);
void comm_nccl_settle(comm_t* c, int nccl_result, const char* what);

// ---- collectives (sendbuf == recvbuf: in place) ------------------------------------------
// all-reduce: recvbuf[i] = op over ranks of sendbuf[i], i < count. AVG is SUM then × 1/world.
void comm_allreduce(comm_t* c, const void* sendbuf, void* recvbuf, size_t count,
                    comm_dtype_t dt, comm_op_t op, cudaStream_t stream);
comm_req_t* comm_iallreduce(comm_t* c, const void* sendbuf, void* recvbuf, size_t count,
                            comm_dtype_t dt, comm_op_t op, cudaStream_t stream);
// broadcast from `root`: recvbuf on every rank = sendbuf of root (sendbuf ignored elsewhere).
void comm_broadcast(comm_t* c, const void* sendbuf, void* recvbuf, size_t count,
                    comm_dtype_t dt, int root, cudaStream_t stream);
comm_req_t* comm_ibroadcast(comm_t* c, const void* sendbuf, void* recvbuf, size_t count,
                            comm_dtype_t dt, int root, cudaStream_t stream);
// reduce-scatter: sendbuf holds world × recvcount; rank r receives block r reduced.
// In place when recvbuf == sendbuf + r·recvcount (NCCL's convention, kept on MPI too).
void comm_reduce_scatter(comm_t* c, const void* sendbuf, void* recvbuf, size_t recvcount,
                         comm_dtype_t dt, comm_op_t op, cudaStream_t stream);
comm_req_t* comm_ireduce_scatter(comm_t* c, const void* sendbuf, void* recvbuf,
                                 size_t recvcount, comm_dtype_t dt, comm_op_t op,
                                 cudaStream_t stream);
// all-gather: recvbuf (world × sendcount) gets every rank's sendbuf in rank order.
// In place when sendbuf == recvbuf + r·sendcount.
void comm_allgather(comm_t* c, const void* sendbuf, void* recvbuf, size_t sendcount,
                    comm_dtype_t dt, cudaStream_t stream);
comm_req_t* comm_iallgather(comm_t* c, const void* sendbuf, void* recvbuf, size_t sendcount,
                            comm_dtype_t dt, cudaStream_t stream);

// ---- point to point (stage 05's ring, stage 08's pipeline) -------------------------------
// Sends and receives between a group_start/group_end pair are started together (NCCL needs
// this when two ranks send to each other; on MPI they are non-blocking anyway).
comm_req_t* comm_isend(comm_t* c, const void* buf, size_t count, comm_dtype_t dt, int peer,
                       cudaStream_t stream);
comm_req_t* comm_irecv(comm_t* c, void* buf, size_t count, comm_dtype_t dt, int peer,
                       cudaStream_t stream);
void comm_group_start(comm_t* c);
void comm_group_end(comm_t* c);
// Blocking send and receive at once (sendcount may be 0 or peer -1 to only receive, etc.).
void comm_sendrecv(comm_t* c, const void* sendbuf, size_t sendcount, int dst, void* recvbuf,
                   size_t recvcount, int src, comm_dtype_t dt, cudaStream_t stream);
void comm_send(comm_t* c, const void* buf, size_t count, comm_dtype_t dt, int peer,
               cudaStream_t stream);
void comm_recv(comm_t* c, void* buf, size_t count, comm_dtype_t dt, int peer,
               cudaStream_t stream);

// ---- waiting ----------------------------------------------------------------------------
// Waits for the request (NULL is fine) and frees it; `what` names it if the deadline passes.
void comm_wait(comm_t* c, comm_req_t* req);
void comm_waitall(comm_t* c, comm_req_t** reqs, int n);  // entries set to NULL
// NCCL only: lets go of a request without waiting; the operation stays ordered on its stream
// (a later comm_stream_sync of that stream covers it, deadline included). MPI requests must be
// waited: this dies for them.
void comm_detach(comm_t* c, comm_req_t* req);
// NCCL: waits until everything enqueued on `stream` is done, against the deadline (use this,
// never cudaStreamSynchronize, after NCCL work). MPI: nothing to wait for.
void comm_stream_sync(comm_t* c, cudaStream_t stream, const char* what);
// Every rank reaches this point (host-side, over MPI, for either backend).
void comm_barrier(comm_t* c);

// Small host-side reductions over MPI, for either backend (timings, checksums, flags).
void comm_host_allreduce_f64(comm_t* c, double* v, int n, comm_op_t op);
void comm_host_allreduce_i64(comm_t* c, long long* v, int n, comm_op_t op);
void comm_host_bcast(comm_t* c, void* buf, size_t bytes, int root);

// Ends the job from this rank: one line "rank R: <message>" on stderr, then abort everything
// (ncclCommAbort, MPI_Abort) with `status`; never returns.
__attribute__((noreturn, format(printf, 3, 4)))
void comm_fatal(comm_t* c, int status, const char* fmt, ...);

// ---- programs under mpirun (comm_cli.c) -------------------------------------------------
// The rank mpirun gave this process, read from the environment before MPI_Init (0 if none).
int comm_env_rank(void);
// Bad input under mpirun: rank 0 prints the one line "prog: error: ..." (fail()'s form), every
// rank exits 2 (the others a moment later, so that the line is out before mpirun ends the job).
// For checks every rank makes alike, typically before comm_init; after it, where one rank may
// know something the others do not, use comm_check_input below.
__attribute__((noreturn, format(printf, 1, 2))) void comm_bad_input(const char* fmt, ...);
// After comm_init, every refusal of input goes through one of these two, called by EVERY rank at
// the same point (they are collective, under the communicator's deadline): one line from rank 0,
// exit 2 on every rank, no MPI_Abort (common/comm_refuse.c).
//   comm_check_input: each rank gives its own verdict (ok: 1); returns when all are ok, else the
//     reason of the lowest rank that refused is printed by rank 0 (shared when only one rank
//     knows it: a file only rank 0 read, say);
//   comm_refuse: every rank refuses; rank 0's reason is the one printed (the other ranks' text
//     is not used, so they may pass an empty reason when only rank 0 knows it).
__attribute__((format(printf, 3, 4))) void comm_check_input(comm_t* c, int ok, const char* fmt, ...);
__attribute__((noreturn, format(printf, 2, 3))) void comm_refuse(comm_t* c, const char* fmt, ...);
// cli_parse (common/cli.h) for every rank, with --help and errors printed by rank 0 only.
void comm_cli_parse(int argc, char** argv, const char* summary, cli_opt_t* opts, int nopts);
// A --backend flag's value: "mpi", "nccl", or "auto" (NCCL when this build has it and this
// node has a GPU for each of its ranks, else MPI). 0, or -1 for anything else.
int comm_backend_choose(const char* s, comm_backend_t* out);
#define COMM_BACKEND_AUTO_CHOICES "auto|mpi|nccl"
// The --comm-timeout flag's value (0: COMM_TIMEOUT from the environment, else the default).
double comm_timeout_flag(double flag_s);
#define COMM_TIMEOUT_HELP "seconds any communication may wait before the job ends (0: $COMM_TIMEOUT, else 60)"

// ---- watchdog (used inside the communicator; exported for programs that block elsewhere) -
// Arms a deadline for `what` (a string literal or one that lives until disarm); if not
// disarmed in `seconds`, prints "rank R: <what> did not finish within S s" and _exit()s.
void comm_watchdog_arm(comm_t* c, const char* what, double seconds);
void comm_watchdog_disarm(comm_t* c);

#ifdef __cplusplus
}
#endif
