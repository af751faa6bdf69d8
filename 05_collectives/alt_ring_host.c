// The 2026 handout's alternate ring all-reduce on the MPI backend, host buffers (ring.h): whole
// inputs travel round the ring instead of segments. At step t = 1 ... n-1 rank r sends to its
// right the input it holds (its own at t = 1, then the one that arrived at the step before) and
// adds the one arriving from its left (rank r - t's). Every input visits every rank once, so
// every rank ends with the sum; but each step moves the whole S bytes on every link, (n-1)·S a
// rank in all against the ring's 2(n-1)/n · S (README.md "A variant that passes whole tensors").
// Each rank adds the inputs in its own order (its own first, then r-1, r-2, ...): on 3 or more
// ranks the fp32 results may differ from rank to rank in the last bits (integer-valued data, as
// the checks use, sums exactly).
#include <stdlib.h>
#include <string.h>

#include "05_collectives/ring.h"
#include "common/check.h"

void alt_ring_allreduce_host(comm_t* c, const float* sendbuf, float* recvbuf, size_t count, comm_op_t op) {
    if (op != COMM_SUM && op != COMM_AVG) DIE("alternate ring all-reduce: only sum and avg");
    const int n = c->world, r = c->rank;
    const float scale = op == COMM_AVG ? 1.0f / (float)n : 1.0f;
    const int right = ring_mod(r + 1, n), left = ring_mod(r - 1, n);
    // held: the input this rank passes on next (its own at the first step, read in place);
    // arriving: the one coming in. Two buffers take turns, so recvbuf may be sendbuf (in place).
    float* buf[2] = {malloc((count ? count : 1) * sizeof(float)), malloc((count ? count : 1) * sizeof(float))};
    if (!buf[0] || !buf[1]) DIE("alternate ring all-reduce: out of host memory (2 x %zu floats)", count);
    const float* held = sendbuf;
    for (int t = 1; t < n; t++) {
        float* arriving = buf[t % 2];
        comm_req_t* q[2];
        q[0] = comm_irecv(c, arriving, count, COMM_F32, left, NULL);
        q[1] = comm_isend(c, held, count, COMM_F32, right, NULL);
        comm_waitall(c, q, 2);
        // the first sum starts from this rank's own input (sendbuf, which recvbuf may be)
        const float* acc = t == 1 ? sendbuf : recvbuf;
        for (size_t i = 0; i < count; i++) recvbuf[i] = acc[i] + arriving[i];
        held = arriving;  // what arrived is what goes on at the next step
    }
    if (n == 1 && recvbuf != sendbuf) memcpy(recvbuf, sendbuf, count * sizeof(float));
    if (scale != 1.0f)
        for (size_t i = 0; i < count; i++) recvbuf[i] *= scale;
    free(buf[0]);
    free(buf[1]);
}
