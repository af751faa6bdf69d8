// The communicator's flight recorder (comm.h, "Deadlines"): each rank keeps a ring of its
// last COMM_REC_LEN operations, and at a deadline one rank turns the rings into one line that
// names the rank(s) that never entered the operation and what they last did.
//
// Operations are numbered the way ranks match them, so that "rank j entered operation #k" can
// be decided from rank j's counters alone:
//   collectives (device and host-side, NCCL initialisation included): the nth collective of
//     the communicator is #n on every rank;
//   point to point: the nth send from a to b is "send #n to rank b" on a and matches
//     "receive #n from rank a" on b.
// The rings of the ranks of one node live in one MPI shared-memory window (comm.c), so the
// speaker reads a stopped or hung rank's ring without its help. Times are CLOCK_MONOTONIC in
// nanoseconds, one clock for every process of a node.
//
// Only the owner writes its ring; others read it after a deadline. Positions are published
// with release stores after the entry is written, so a reader sees whole entries (a reader
// racing a write may see one stale field, which only makes a line less exact).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COMM_REC_LEN 64     // entries per rank
#define COMM_REC_PEERS 256  // point-to-point counters are kept for peers 0..255

typedef enum {
    COMM_REC_ALLREDUCE = 0,
    COMM_REC_BROADCAST,
    COMM_REC_REDUCE_SCATTER,
    COMM_REC_ALLGATHER,
    COMM_REC_BARRIER,
    COMM_REC_HOST_ALLREDUCE,
    COMM_REC_HOST_BCAST,
    COMM_REC_INIT,      // NCCL initialisation
    COMM_REC_SHUTDOWN,  // NCCL finalisation
    COMM_REC_SPLIT,     // comm_split (on the communicator split)
    COMM_REC_SEND,      // point to point from here on
    COMM_REC_RECV,
    COMM_REC_NOPS
} comm_rec_op_t;

typedef struct {
    int64_t pos;      // 1, 2, ... in this rank's history (0: slot never used)
    int64_t num;      // the matching number (see above)
    int32_t op, peer;  // peer: -1 for collectives
    int64_t bytes;
    int64_t t_start_ns, t_done_ns;  // t_done_ns 0 while not done
} comm_rec_entry_t;

typedef struct {
    int32_t rank, used;     // used: this slot belongs to a live communicator
    int32_t world_rank, pad_;  // the rank in the job (a group's ring: rank is the group rank)
    char name[16];          // the group's name (comm_split), "" for the world
    int64_t pos;            // entries recorded so far (the newest is pos)
    int64_t colls;          // collectives entered
    int64_t alive_ns;       // last sign of life: a poll of a wait, a tick of the watchdog
    int64_t expired_ns;     // when this rank's own wait passed its deadline (0: not)
    int64_t sent[COMM_REC_PEERS], recvd[COMM_REC_PEERS];  // point-to-point ops entered, per peer
    comm_rec_entry_t e[COMM_REC_LEN];
} comm_rec_ring_t;

const char* comm_rec_op_name(comm_rec_op_t op);  // "all-reduce", "send", ...
int64_t comm_rec_now_ns(void);                   // CLOCK_MONOTONIC

void comm_rec_reset(comm_rec_ring_t* r, int rank);  // a world's ring: world_rank = rank, no name
// A group's ring: its name and this rank in the job; the line then says "dp rank 1 (world
// rank 3)" and "dp all-reduce #2" where the world's says "rank 3" and "all-reduce #2".
void comm_rec_set_group(comm_rec_ring_t* r, const char* name, int world_rank);
// Records the start of an operation; returns its position (for comm_rec_done).
int64_t comm_rec_begin(comm_rec_ring_t* r, comm_rec_op_t op, size_t bytes, int peer, int64_t now_ns);
// Marks entry `pos` done (nothing if it has left the ring); upto: every entry <= pos.
void comm_rec_done(comm_rec_ring_t* r, int64_t pos, int64_t now_ns);
void comm_rec_done_upto(comm_rec_ring_t* r, int64_t pos, int64_t now_ns);
// The entry at `pos`, or NULL if it was never recorded or was overwritten (copied out).
int comm_rec_get(const comm_rec_ring_t* r, int64_t pos, comm_rec_entry_t* out);
void comm_rec_alive(comm_rec_ring_t* r, int64_t now_ns);

// The deadline's one line (no "\n"): which operation of rings[me] passed its deadline (`pos`,
// or 0: its oldest unfinished entry) and, for each ring of the node, whether that rank
// entered it and what it last did. `world` is the job's size (ranks with no ring here are on
// other nodes and said to be unseen). Returns the number of ranks named as culprits.
int comm_rec_blame(char* out, size_t outlen, const comm_rec_ring_t* const* rings, int nrings,
                   int me, int64_t pos, double timeout_s, int world, int64_t now_ns);

#ifdef __cplusplus
}
#endif
