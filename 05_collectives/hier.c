// The hierarchical all-reduce on two groups of the communicator (see hier.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "05_collectives/hier.h"
#include "common/check.h"

void hier_bytes_formula(double S, int l, int k, double* intra, double* inter) {
    *intra = l > 1 ? 2.0 * (l - 1) / l * S : 0.0;
    *inter = k > 1 ? 2.0 * (k - 1) / k * S / l : 0.0;
}

double flat_ring_bytes(double S, int n) { return n > 1 ? 2.0 * (n - 1) / n * S : 0.0; }

// Every rank's (local rank, ranks on its node), gathered in rank order of c.
static void gather_nodes(comm_t* c, long long* lr, long long* lw) {
    const int n = c->world;
    long long* v = calloc(2 * (size_t)n, sizeof *v);
    if (!v) DIE("hier: out of host memory");
    v[2 * c->rank] = c->local_rank;
    v[2 * c->rank + 1] = c->local_world;
    comm_host_allreduce_i64(c, v, 2 * n, COMM_SUM);
    for (int r = 0; r < n; r++) { lr[r] = v[2 * r]; lw[r] = v[2 * r + 1]; }
    free(v);
}

int hier_layout(int n, const int* node_of, int* l, int* k, char* why, size_t len) {
    if (n < 1 || node_of[0] != 0) {
        snprintf(why, len, "hier: rank 0 is not on node 0; allowed: nodes numbered from rank 0 up");
        return -1;
    }
    int nodes = 1, first = 0, size0 = -1;
    for (int r = 1; r <= n; r++) {
        if (r < n && node_of[r] == node_of[r - 1]) continue;
        const int size = r - first;  // node node_of[first] is ranks first..r-1
        if (size0 < 0) size0 = size;
        if (size != size0) {
            snprintf(why, len, "hier: nodes of unequal size (node 0 has %d rank%s, node %d has %d); allowed: "
                     "the same number of ranks on every node", size0, size0 == 1 ? "" : "s", node_of[first], size);
            return -1;
        }
        if (r < n && node_of[r] != node_of[r - 1] + 1) {
            snprintf(why, len, "hier: the ranks of a node are not consecutive (rank %d on node %d after node %d); "
                     "allowed: each node's ranks in one block (mpirun --map-by slot, or --emulate-nodes)",
                     r, node_of[r], node_of[r - 1]);
            return -1;
        }
        if (r < n) nodes++;
        first = r;
    }
    *l = size0;
    *k = nodes;
    return 0;
}

hier_t* hier_create(comm_t* c, int ranks_per_node) {
    const int n = c->world;
    if (ranks_per_node < 0 || ranks_per_node > n)
        comm_refuse(c, "hier: %d ranks per node for %d ranks; allowed: 1..%d, or 0 (the communicator's nodes)",
                    ranks_per_node, n, n);
    // Rank r's node: blocks of ranks_per_node, or from every rank's (local rank, node size): the
    // nodes' ranks must follow each other 0, 1, ..., l-1, 0, 1, ...
    int* node_of = malloc((size_t)n * sizeof *node_of);
    long long* lr = malloc((size_t)n * sizeof *lr);
    long long* lw = malloc((size_t)n * sizeof *lw);
    if (!node_of || !lr || !lw) DIE("hier: out of host memory");
    if (ranks_per_node > 0) {
        for (int r = 0; r < n; r++) node_of[r] = r / ranks_per_node;
    } else {
        gather_nodes(c, lr, lw);
        int nodes = 0, consecutive = 1;
        for (int r = 0; r < n; r++) {
            // after the last rank of a node comes local rank 0 of the next, else the next local rank
            const long long expect = (r == 0 || lr[r - 1] + 1 == lw[r - 1]) ? 0 : lr[r - 1] + 1;
            if (lr[r] != expect || (expect != 0 && lw[r] != lw[r - 1])) consecutive = 0;
            if (lr[r] == 0) nodes++;
            node_of[r] = nodes - 1;
        }
        if (lr[n - 1] + 1 != lw[n - 1]) consecutive = 0;
        if (!consecutive)
            comm_refuse(c, "hier: the ranks of a node are not consecutive; allowed: each node's ranks in one "
                        "block (mpirun --map-by slot, or --emulate-nodes)");
    }
    char why[256];
    int l = 0, k = 0;
    if (hier_layout(n, node_of, &l, &k, why, sizeof why) != 0) comm_refuse(c, "%s", why);
    hier_t* h = calloc(1, sizeof *h);
    if (!h) DIE("hier: out of host memory");
    h->c = c;
    h->l = l;
    h->k = k;
    h->node = node_of[c->rank];
    h->local = c->rank - h->node * h->l;
    free(node_of); free(lr); free(lw);
    // Every rank takes the same branches: l and k are the same everywhere.
    if (h->l > 1) h->intra = comm_split(c, h->node, h->local, "intra");
    if (h->k > 1) h->inter = comm_split(c, h->local, h->node, "inter");
    return h;
}

void hier_destroy(hier_t* h) {
    if (!h) return;
    if (h->inter) comm_destroy(h->inter, 0);
    if (h->intra) comm_destroy(h->intra, 0);
    mem_free(h->scratch);
    free(h);
}

void hier_bytes_reset(hier_t* h) { memset(&h->bytes, 0, sizeof h->bytes); }

// Copies and zeroes in the backend's memory, ordered on `stream` for NCCL.
static void copy_bytes(hier_t* h, void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (!bytes || dst == src) return;
    if (h->c->backend == COMM_NCCL) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    else memcpy(dst, src, bytes);
}
static void zero_bytes(hier_t* h, void* dst, size_t bytes, cudaStream_t stream) {
    if (!bytes) return;
    if (h->c->backend == COMM_NCCL) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream));
    else memset(dst, 0, bytes);
}

void hier_allreduce(hier_t* h, const void* sendbuf, void* recvbuf, size_t count, comm_dtype_t dt,
                    comm_op_t op, cudaStream_t stream) {
    if (count == 0) return;
    const size_t es = comm_dtype_size(dt);
    const size_t l = (size_t)h->l;
    const size_t shard = (count + l - 1) / l, padded = shard * l;
    char* work = recvbuf;
    if (padded != count) {  // through the scratch buffer, zeros after the data
        if (h->scratch_bytes < padded * es) {
            mem_free(h->scratch);
            h->scratch = comm_alloc(h->c, padded * es, MEM_OTHER);
            h->scratch_bytes = padded * es;
        }
        work = h->scratch;
        copy_bytes(h, work, sendbuf, count * es, stream);
        zero_bytes(h, work + count * es, (padded - count) * es, stream);
        sendbuf = work;
    }
    char* mine = work + (size_t)h->local * shard * es;  // this rank's shard
    if (h->intra) {
        // out of place from sendbuf, or in place (recvbuf == sendbuf + local·shard)
        comm_reduce_scatter(h->intra, sendbuf, mine, shard, dt, op, stream);
        h->bytes.intra_handed += (double)(padded * es);
        h->bytes.intra_link += (double)(l - 1) / (double)l * (double)(padded * es);
    } else {
        copy_bytes(h, work, sendbuf, count * es, stream);  // a node of one: its data is the node's
    }
    if (h->inter) {
        comm_allreduce(h->inter, mine, mine, shard, dt, op, stream);
        h->bytes.inter_handed += (double)(shard * es);
        h->bytes.inter_link += 2.0 * (h->k - 1) / h->k * (double)(shard * es);
    }
    if (h->intra) {
        comm_allgather(h->intra, mine, work, shard, dt, stream);  // in place
        h->bytes.intra_handed += (double)(padded * es);
        h->bytes.intra_link += (double)(l - 1) / (double)l * (double)(padded * es);
    }
    if (work != (char*)recvbuf) copy_bytes(h, recvbuf, work, count * es, stream);
    h->bytes.calls++;
    if (h->c->backend == COMM_NCCL) comm_stream_sync(h->c, stream, "hier all-reduce");
}
