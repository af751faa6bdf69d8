// The hierarchical all-reduce: the flat ring's bytes split between the fast link inside a node
// and the slow link between nodes (README.md §Hierarchical all-reduce).
//
// n ranks on k nodes of l ranks each (n = k·l). Two groups, made once (hier_create):
//   intra  the l ranks of this rank's node       (comm_split colour = node, key = local rank)
//   inter  the k ranks with this rank's local rank, one per node (colour = local rank)
// and three collectives of the communicator per all-reduce of count elements:
//   1. intra reduce-scatter: the node's sum, shard j (count/l elements) to local rank j;
//   2. inter all-reduce of the shard: shard j summed over the nodes;
//   3. intra all-gather: every rank gets every complete shard.
// With ring algorithms underneath, each rank carries per all-reduce of S bytes
//   intra-node  2(l-1)/l · S       (steps 1 and 3)
//   inter-node  2(k-1)/k · S/l     (step 2: only a shard crosses the slow link)
// where the flat ring carries 2(n-1)/n · S, and on a ring that spans nodes, the slowest link
// sets the pace of every step. A count that does not divide by l is padded to l·ceil(count/l)
// with zeros (copied through a scratch buffer): the last shard is as long as the others.
// Both backends: the groups' collectives are the communicator's (MPI on host buffers, NCCL on
// device buffers), any dtype and op (sum, avg, max, min: avg averages within, then across nodes).
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// Bytes handed to the groups' collectives, and the bytes they put on each link by the ring model
// (reduce-scatter and all-gather of B bytes over m ranks: (m-1)/m · B; all-reduce 2(m-1)/m · B).
typedef struct {
    double intra_handed, inter_handed;  // sizes of the buffers passed, summed over calls
    double intra_link, inter_link;      // what a rank sends on each link, summed over calls
    long long calls;
} hier_bytes_t;

typedef struct {
    comm_t* c;            // the communicator it was made from
    comm_t* intra;        // this node's ranks (NULL where l == 1: nothing to do inside a node)
    comm_t* inter;        // the ranks of this local rank on every node (NULL where k == 1)
    int l, k;             // ranks per node, nodes
    int node, local;      // this rank's node and its rank in the node
    void* scratch;        // backend memory for padded counts
    size_t scratch_bytes;
    hier_bytes_t bytes;   // counted by hier_allreduce (hier_bytes_reset zeroes it)
} hier_t;

// Collective over c. ranks_per_node 0: the communicator's nodes (local_rank/local_world, real or
// emulated: CS336_EMULATE_NODES), whose ranks must be consecutive; L > 0: blocks of L consecutive
// ranks instead (the last block holds what is left). Nodes of unequal size are refused in one
// line (comm_refuse: exit 2 on every rank).
hier_t* hier_create(comm_t* c, int ranks_per_node);
// The layout check every hier_create makes, without communication: node_of[r] is rank r's node
// (0, 1, ... in order). 0 with *l ranks per node and *k nodes; or -1 and the reason in why
// (ranks of a node not consecutive, nodes of unequal size).
int hier_layout(int n, const int* node_of, int* l, int* k, char* why, size_t len);
void hier_destroy(hier_t* h);  // collective; before comm_destroy(h->c)
void hier_bytes_reset(hier_t* h);

// recvbuf[i] = op over all ranks of sendbuf[i], i < count (in place when sendbuf == recvbuf).
// Buffers of the backend's kind; on NCCL the work is enqueued on `stream` and waited for.
void hier_allreduce(hier_t* h, const void* sendbuf, void* recvbuf, size_t count, comm_dtype_t dt,
                    comm_op_t op, cudaStream_t stream);

// The formula: bytes a rank sends per all-reduce of S bytes, on the intra-node and the
// inter-node link, for l ranks per node and k nodes; and the flat ring's 2(n-1)/n · S.
void hier_bytes_formula(double S, int l, int k, double* intra, double* inter);
double flat_ring_bytes(double S, int n);

#ifdef __cplusplus
}
#endif
