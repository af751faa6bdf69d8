// The ring all-reduce on the NCCL backend, device buffers (see ring.h for the algorithm).
//
// Each reduce-scatter step is cut into chunks. Chunk j (numbered over all steps) moves on
// stream A (NCCL send + receive, grouped: both neighbours send at once) into one of two
// temporary buffers, tmp[j % 2]; its addition runs on stream B. Events order them:
//   B waits for "chunk j arrived" (evA[j % 2]) before adding it;
//   A waits for "chunk j-2 added" before receiving into tmp[j % 2] again, and for "chunk j-K
//     added" before sending it on in the next step (K chunks a step; for K = 1 that is j-1).
// So the addition of chunk j overlaps the transfer of chunk j+1. The all-gather phase moves
// whole segments on stream A (nothing to add). The caller's stream waits for the end.
#include <cuda_runtime_api.h>

#include "05_collectives/ring.h"
#include "common/check.h"

typedef struct {
    cudaStream_t a, b;           // transfers, additions
    cudaEvent_t ev_a[2], ev_b[2];
    cudaEvent_t start, done;
    float* tmp[2];
    size_t tmp_floats;
    int device;
} ring_gpu_state_t;

// Streams, events and temporaries live as long as the program (one set per process; the
// temporaries grow to the largest chunk asked for).
static ring_gpu_state_t g_ring;

static void ring_state(comm_t* c, size_t chunk_floats) {
    ring_gpu_state_t* g = &g_ring;
    if (!g->a) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&g->a, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&g->b, cudaStreamNonBlocking));
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&g->ev_a[i], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&g->ev_b[i], cudaEventDisableTiming));
        }
        CUDA_CHECK(cudaEventCreateWithFlags(&g->start, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming));
    }
    if (chunk_floats > g->tmp_floats) {
        // Freed only after everything that used the old ones is done (waited under the
        // deadline: stream a holds NCCL transfers, and b waits for them).
        comm_stream_sync(c, g->a, "the ring's transfers");
        comm_stream_sync(c, g->b, "the ring's additions");
        for (int i = 0; i < 2; i++) {
            mem_free(g->tmp[i]);
            g->tmp[i] = mem_alloc(DEV_CUDA, chunk_floats * sizeof(float), MEM_WORKSPACE);
        }
        g->tmp_floats = chunk_floats;
    }
}

void ring_allreduce_gpu(comm_t* c, const float* sendbuf, float* recvbuf, size_t count,
                        comm_op_t op, cudaStream_t stream, size_t chunk_bytes) {
    // STUDENT-BEGIN(05.ring_gpu): the ring on device buffers (NCCL): reduce-scatter steps cut into chunks of chunk_bytes, each received on stream a into tmp[j % 2] (comm_irecv/comm_isend grouped, detached) and added on stream b by ring_add_launch, ordered by the events ev_a / ev_b so that the addition of chunk j overlaps the transfer of chunk j+1; then n-1 all-gather steps on stream a; avg scales once; the caller's stream waits for the end | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_05 collectives_nccl/* | uses: ring_state
    if (op != COMM_SUM && op != COMM_AVG) DIE("ring all-reduce: only sum and avg");
    if (!stream) stream = comm_stream(c);
    const int n = c->world, r = c->rank;
    const float scale = op == COMM_AVG ? 1.0f / (float)n : 1.0f;
    if (n == 1) {
        ring_add_launch(recvbuf, sendbuf, sendbuf, count, 0.5f * scale, stream);  // (x + x) / 2
        return;
    }
    size_t b0, max_seg;
    ring_segment(count, n, 0, &b0, &max_seg);
    if (!chunk_bytes) chunk_bytes = RING_CHUNK_BYTES_DEFAULT;
    size_t chunk = chunk_bytes / sizeof(float);
    if (chunk == 0) chunk = 1;
    if (chunk > max_seg) chunk = max_seg ? max_seg : 1;
    const size_t K = max_seg ? (max_seg + chunk - 1) / chunk : 1;  // chunks per step
    ring_state(c, chunk);
    ring_gpu_state_t* g = &g_ring;
    const int right = ring_mod(r + 1, n), left = ring_mod(r - 1, n);

    // Both streams start after what the caller already enqueued (the inputs).
    CUDA_CHECK(cudaEventRecord(g->start, stream));
    CUDA_CHECK(cudaStreamWaitEvent(g->a, g->start, 0));
    CUDA_CHECK(cudaStreamWaitEvent(g->b, g->start, 0));

    size_t j = 0;  // chunk number over the whole reduce-scatter phase
    for (int s = 0; s < n - 1; s++) {
        size_t sb, sl, rb, rl;
        ring_segment(count, n, ring_mod(r - s, n), &sb, &sl);
        ring_segment(count, n, ring_mod(r - s - 1, n), &rb, &rl);
        const float* src = (s == 0) ? sendbuf : recvbuf;
        const float f = (s == n - 2) ? scale : 1.0f;
        for (size_t k = 0; k < K; k++, j++) {
            // Chunk k of the segments (segments of one step differ by at most one element, so
            // the last chunk of each may be shorter, or empty).
            size_t so = k * chunk, ro = k * chunk;
            size_t sn = so < sl ? (sl - so < chunk ? sl - so : chunk) : 0;
            size_t rn = ro < rl ? (rl - ro < chunk ? rl - ro : chunk) : 0;
            const size_t back = K < 2 ? 1 : 2;  // see the comment at the top
            if (j >= back) CUDA_CHECK(cudaStreamWaitEvent(g->a, g->ev_b[(j - back) % 2], 0));
            float* t = g->tmp[j % 2];
            comm_req_t* q[2];
            comm_group_start(c);
            q[0] = comm_irecv(c, t, rn, COMM_F32, left, g->a);
            q[1] = comm_isend(c, src + sb + so, sn, COMM_F32, right, g->a);
            comm_group_end(c);
            // The requests are not waited on: their order on stream A is what matters, and the
            // caller's wait (comm_stream_sync) covers the whole operation with the deadline.
            comm_detach(c, q[0]);
            comm_detach(c, q[1]);
            CUDA_CHECK(cudaEventRecord(g->ev_a[j % 2], g->a));
            CUDA_CHECK(cudaStreamWaitEvent(g->b, g->ev_a[j % 2], 0));
            ring_add_launch(recvbuf + rb + ro, sendbuf + rb + ro, t, rn, f, g->b);
            CUDA_CHECK(cudaEventRecord(g->ev_b[j % 2], g->b));
        }
    }
    // The all-gather sends complete segments: after the last addition.
    CUDA_CHECK(cudaStreamWaitEvent(g->a, g->ev_b[(j - 1) % 2], 0));
    for (int s = 0; s < n - 1; s++) {
        size_t sb, sl, rb, rl;
        ring_segment(count, n, ring_mod(r + 1 - s, n), &sb, &sl);
        ring_segment(count, n, ring_mod(r - s, n), &rb, &rl);
        comm_req_t* q[2];
        comm_group_start(c);
        q[0] = comm_irecv(c, recvbuf + rb, rl, COMM_F32, left, g->a);
        q[1] = comm_isend(c, recvbuf + sb, sl, COMM_F32, right, g->a);
        comm_group_end(c);
        comm_detach(c, q[0]);
        comm_detach(c, q[1]);
    }
    CUDA_CHECK(cudaEventRecord(g->done, g->a));
    CUDA_CHECK(cudaStreamWaitEvent(stream, g->done, 0));
    // STUDENT-END(05.ring_gpu)
}
