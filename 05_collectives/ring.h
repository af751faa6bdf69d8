// The lesson of stage 05: an all-reduce written from point-to-point sends and receives.
//
// Ring all-reduce of S bytes over n ranks (ranks in a ring, each sends to rank+1 and receives
// from rank-1). The buffer is cut into n segments (sizes differ by at most one element, so any
// count works). Two phases of n-1 steps each:
//   reduce-scatter: at step s, rank r sends segment (r-s) mod n and receives segment
//                   (r-s-1) mod n, which it adds to its own copy. After n-1 steps rank r holds
//                   the complete sum of segment (r+1) mod n.
//   all-gather:     at step s, rank r sends segment (r+1-s) mod n and receives (r-s) mod n,
//                   overwriting: after n-1 steps every rank holds every complete segment.
// Every rank sends 2(n-1) segments of S/n bytes: 2(n-1)/n · S in all, which is why busbw =
// algbw · 2(n-1)/n measures the links, whatever n is (README.md derives it).
//
// Two implementations with one algorithm:
//   ring_allreduce_host  MPI backend, host buffers, one step at a time (the reference).
//   ring_allreduce_gpu   NCCL backend, device buffers, each step cut into chunks so that the
//                        addition of chunk k (a kernel on a second stream) overlaps the
//                        transfer of chunk k+1 (NCCL send/recv).
// fp32 only. op: COMM_SUM or COMM_AVG (the complete segment is scaled by 1/n before the
// all-gather). In place when sendbuf == recvbuf.
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// Segment i of n over count elements: the first count % n segments get one extra element.
static inline void ring_segment(size_t count, int n, int i, size_t* begin, size_t* len) {
    size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
    *begin = ui * base + (ui < rem ? ui : rem);
    *len = base + (ui < rem ? 1 : 0);
}
static inline int ring_mod(int a, int n) { return ((a % n) + n) % n; }

// Dispatches on the backend: host ring for MPI, GPU ring for NCCL.
void ring_allreduce(comm_t* c, const float* sendbuf, float* recvbuf, size_t count, comm_op_t op,
                    cudaStream_t stream);
void ring_allreduce_host(comm_t* c, const float* sendbuf, float* recvbuf, size_t count,
                         comm_op_t op);
// The 2026 handout's alternate ring (alt_ring_host.c): whole inputs round the ring, n-1 steps of
// S bytes each, (n-1)·S a rank; MPI backend, host buffers, sum or avg, in place allowed.
void alt_ring_allreduce_host(comm_t* c, const float* sendbuf, float* recvbuf, size_t count,
                             comm_op_t op);
// Enqueued on `stream` (the caller's inputs are read after what is already on it; work
// enqueued on it later sees the result). chunk_bytes 0: RING_CHUNK_BYTES_DEFAULT.
#define RING_CHUNK_BYTES_DEFAULT ((size_t)512 << 20)  // measured best: see README.md
void ring_allreduce_gpu(comm_t* c, const float* sendbuf, float* recvbuf, size_t count,
                        comm_op_t op, cudaStream_t stream, size_t chunk_bytes);

// dst[i] = (a[i] + b[i]) * scale for i < n, on `stream` (ring_kernels.cu).
void ring_add_launch(float* dst, const float* a, const float* b, size_t n, float scale,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
