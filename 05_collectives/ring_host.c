// The ring all-reduce on the MPI backend, host buffers: the reference (see ring.h). One step at
// a time: post the receive and the send, wait for both, add.
#include <stdlib.h>
#include <string.h>

#include "05_collectives/ring.h"
#include "common/check.h"

void ring_allreduce_host(comm_t* c, const float* sendbuf, float* recvbuf, size_t count,
                         comm_op_t op) {
    // STUDENT-BEGIN(05.ring_host): the ring all-reduce from comm_isend/comm_irecv: n-1 reduce-scatter steps (segment ring_mod(r - s, n) goes right, add what comes from the left), then n-1 all-gather steps; avg scales once | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_05 collectives_mpi/every_operation_*
    if (op != COMM_SUM && op != COMM_AVG) DIE("ring all-reduce: only sum and avg");
    const int n = c->world, r = c->rank;
    const float scale = op == COMM_AVG ? 1.0f / (float)n : 1.0f;
    if (n == 1) {
        for (size_t i = 0; i < count; i++) recvbuf[i] = sendbuf[i] * scale;
        return;
    }
    const int right = ring_mod(r + 1, n), left = ring_mod(r - 1, n);
    size_t b0, max_len;
    ring_segment(count, n, 0, &b0, &max_len);  // segment 0 is the longest
    float* tmp = malloc((max_len ? max_len : 1) * sizeof(float));
    if (!tmp) DIE("ring all-reduce: out of host memory (%zu floats)", max_len);

    // Reduce-scatter: the partial sum of a segment travels once around the ring.
    for (int s = 0; s < n - 1; s++) {
        size_t sb, sl, rb, rl;
        ring_segment(count, n, ring_mod(r - s, n), &sb, &sl);
        ring_segment(count, n, ring_mod(r - s - 1, n), &rb, &rl);
        const float* src = (s == 0) ? sendbuf : recvbuf;  // step 0 sends our own data
        comm_req_t* q[2];
        q[0] = comm_irecv(c, tmp, rl, COMM_F32, left, NULL);
        q[1] = comm_isend(c, src + sb, sl, COMM_F32, right, NULL);
        comm_waitall(c, q, 2);
        const float f = (s == n - 2) ? scale : 1.0f;  // the last step completes the segment
        for (size_t i = 0; i < rl; i++) recvbuf[rb + i] = (sendbuf[rb + i] + tmp[i]) * f;
    }
    // All-gather: each complete segment travels around the ring, overwriting.
    for (int s = 0; s < n - 1; s++) {
        size_t sb, sl, rb, rl;
        ring_segment(count, n, ring_mod(r + 1 - s, n), &sb, &sl);
        ring_segment(count, n, ring_mod(r - s, n), &rb, &rl);
        comm_req_t* q[2];
        q[0] = comm_irecv(c, recvbuf + rb, rl, COMM_F32, left, NULL);
        q[1] = comm_isend(c, recvbuf + sb, sl, COMM_F32, right, NULL);
        comm_waitall(c, q, 2);
    }
    free(tmp);
    // STUDENT-END(05.ring_host)
}

void ring_allreduce(comm_t* c, const float* sendbuf, float* recvbuf, size_t count, comm_op_t op,
                    cudaStream_t stream) {
    if (c->backend == COMM_NCCL)
        ring_allreduce_gpu(c, sendbuf, recvbuf, count, op, stream, 0);
    else
        ring_allreduce_host(c, sendbuf, recvbuf, count, op);
}
