// What the communicator's two halves share (comm.c: set-up, MPI backend, waits, watchdog;
// comm_nccl.c: the NCCL backend). Not for use outside common/comm*.c.
#pragma once
#include <mpi.h>
#include <pthread.h>
#include "common/comm.h"
#include "common/comm_rec.h"

#if HAVE_NCCL
#include <nccl.h>
#endif

typedef struct comm_shm comm_shm_t;

struct comm_impl {
    MPI_Comm world;        // a duplicate of MPI_COMM_WORLD, errors returned (not fatal)
    MPI_Comm node;         // ranks on this node (shared-memory split, or an emulated node)
    int host_rank, host_world;  // this rank's place among the ranks of its machine (its GPU)
    int emulated_nodes;    // CS336_EMULATE_NODES (0: off; comm.c node_split)
    cudaStream_t stream;   // NCCL: the communicator's own stream
    int in_group;          // NCCL: between comm_group_start and comm_group_end
    comm_req_t* group_reqs;  // NCCL: requests made in the open group (event recorded at its end)
    int aborted;
    int is_group;          // made by comm_split (its destroy never finalizes MPI)
    comm_shm_t* shm;       // MPI: the shared-memory all-reduce's window (comm_shm.c), or NULL
    int shm_state;         // MPI: 0 not yet decided, 1 in use, -1 off (COMM_SHM=0, several nodes)
#if HAVE_NCCL
    ncclComm_t nccl;
#endif
    // The flight recorder (comm_rec.h; comm.c "Deadlines"): this rank's ring, the rings of
    // its node (rec_rings[local rank], in a shared-memory window when rec_shared), the node's
    // speaker claim (0: nobody has spoken), the newest position, and the first position of
    // the open group (NCCL).
    comm_rec_ring_t* rec;
    comm_rec_ring_t** rec_rings;
    int rec_n, rec_shared;
    int64_t* rec_claim;
    MPI_Win rec_win;
    int64_t rec_last, group_first;
};

// A pending operation. MPI: up to two MPI requests plus what to do once they complete
// (scale for AVG, copy out of a temporary for in-place reduce-scatter). NCCL: an event
// recorded on the stream right after the operation was enqueued.
struct comm_req {
    const char* what;           // "all-reduce", ... (names the operation in a time-out)
    int n_mpi;
    MPI_Request mpi[2];
    void* scale_buf;            // MPI AVG: multiply scale_count elements by 1/world at the end
    size_t scale_count;
    comm_dtype_t scale_dt;
    void* tmp;                  // MPI in-place reduce-scatter: result lands here first...
    void* tmp_dst;              // ...then is copied here
    size_t tmp_bytes;
    cudaEvent_t event;          // NCCL
    cudaStream_t stream;        // NCCL: the stream the operation was enqueued on
    int has_event;
    comm_req_t* next_in_group;  // NCCL: chain of requests of an open group
    // MPI all-reduce on more than 2 ranks, in two phases (see comm.c, consistent_allreduce):
    // phase 1 reduce-scatters, phase 2 (posted when phase 1 completes) all-gathers.
    int phase2;
    char* ar_buf;               // the all-reduce's output buffer
    size_t ar_base, ar_rem;     // elements per rank's block, and the remainder after n blocks
    comm_dtype_t ar_dt;
    int ar_move;                // in place: move this rank's block from the front into place
    int64_t rec_pos;            // the flight recorder's entry (0: none)
};

// comm.c
comm_req_t* comm_req_new(const char* what);
void comm_req_free(comm_req_t* r);
void comm_scale(void* buf, size_t count, comm_dtype_t dt, double factor);  // host buffers
double comm_now_s(void);

// The flight recorder (comm.c): records the start of an operation (the newest position is
// also impl->rec_last) and its end; comm_rec_tick marks a sign of life (a poll of a wait).
int64_t comm_rec_start(comm_t* c, comm_rec_op_t op, size_t bytes, int peer);
void comm_rec_end(comm_t* c, int64_t pos);
void comm_rec_tick(comm_t* c);
// A wait of operation `pos` (0: the oldest unfinished one) passed the deadline: the node's
// speaker prints the recorder's one line, every rank ends with COMM_EXIT_TIMEOUT.
__attribute__((noreturn)) void comm_deadline(comm_t* c, int64_t pos);
// A poll's clock: the time a rank spends stopped (SIGSTOP, a suspended container) does not
// count against its own deadline. Start with comm_clock_start; comm_clock_elapsed returns
// the seconds waited so far with gaps of over COMM_CLOCK_GAP_S between polls left out.
#define COMM_CLOCK_GAP_S 1.0
typedef struct { double t0, last; } comm_clock_t;
void comm_clock_start(comm_clock_t* k);
double comm_clock_elapsed(comm_clock_t* k);

// comm_shm.c: the MPI backend's all-reduce through an MPI-3 shared-memory window, for jobs
// whose ranks share one node. comm_shm_allreduce returns 1 when it did the all-reduce (AVG
// scaled included), 0 when the caller must use MPI instead: not f32/f64, COMM_SHM=0 on some
// rank, more than one node, one rank. Collective: the first call sets the window up (every
// rank must call it with the same count, type and op, as for any MPI collective). It waits
// without a deadline of its own: call it under the watchdog.
int comm_shm_allreduce(comm_t* c, const void* sendbuf, void* recvbuf, size_t count,
                       comm_dtype_t dt, comm_op_t op);
// Frees the window (collective); nothing if it was never set up. Before MPI_Finalize.
void comm_shm_destroy(comm_t* c);

// comm_nccl.c (each dies with a clear line where NCCL is not built in)
void comm_nccl_init(comm_t* c);
// comm_split's NCCL half, called by every rank of the parent p: ncclCommSplit into g (NULL:
// this rank joins no group), settled under the deadline; g gets a stream of its own.
void comm_nccl_split(comm_t* p, comm_t* g, int color, int key);
void comm_nccl_destroy(comm_t* c);
void comm_nccl_abort(comm_t* c);
// Enqueues one operation; returns a request whose event is recorded (or will be, at the
// group's end). kind: 'a' all-reduce, 'b' broadcast, 'r' reduce-scatter, 'g' all-gather,
// 's' send, 'v' receive. `arg` is the root (broadcast) or peer (send/receive).
comm_req_t* comm_nccl_op(comm_t* c, char kind, const void* sendbuf, void* recvbuf,
                         size_t count, comm_dtype_t dt, comm_op_t op, int arg,
                         cudaStream_t stream, const char* what);
void comm_nccl_group_start(comm_t* c);
void comm_nccl_group_end(comm_t* c);
// Polls until `event` has completed; past the deadline (comm_deadline: operation `pos`), or
// on an asynchronous NCCL error (comm_fatal), ends the job.
void comm_nccl_wait_event(comm_t* c, cudaEvent_t event, const char* what, int64_t pos);
