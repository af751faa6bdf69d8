// Stage 10 on the GPU: ring attention over the NCCL backend with stage 03's flash_forward_cuda
// and stage 04's flash_backward_cuda per block. Same layout as the CPU ring (context.h):
// chunk-major device buffers of the inputs' dtype (fp32 or bf16), lse fp32. Merges and
// gradient sums in fp32 (cp_kernels.cu).
//
// Streams: the blocks' kernels run on the ring's compute stream, the transfers on the
// communicator's stream; before each transfer is posted the communicator's stream waits for
// the compute enqueued so far (an event), so a buffer is never sent before it is written nor
// overwritten while a kernel still reads it; after posting, the host enqueues the block's
// kernels and only then waits for the transfer, which therefore runs under the compute.
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/comm.h"
#include "common/dtype.h"
#include "10_context/context.h"

#ifdef __cplusplus
extern "C" {
#endif

// kernels (cp_kernels.cu), asynchronous on s
void cp_merge_gpu(float* o, float* l, const void* ob, const float* lb, size_t rows, int d, dtype_t dt,
                  cudaStream_t s);
void cp_add_gpu(float* acc, const void* x, size_t n, dtype_t dt, cudaStream_t s);  // acc += x
void cp_cast_gpu(void* out, const float* in, size_t n, dtype_t dt, cudaStream_t s);
void cp_fill_gpu(float* p, float v, size_t n, cudaStream_t s);

typedef struct cp_gpu cp_gpu_t;
// Buffers and streams of the ring for this configuration (comm: NCCL backend). Refuses (one
// line, exit 2 on every rank) what the flash kernels do not take (head dim, dtype).
cp_gpu_t* cp_gpu_create(comm_t* c, const cp_ring_t* g, dtype_t dt);
void cp_gpu_destroy(cp_gpu_t* r);
// The ring's compute stream (inputs written on another stream must be ordered before it).
cudaStream_t cp_gpu_stream(const cp_gpu_t* r);
// Forward: device q, k, v (dtype) -> o (dtype), lse (fp32). Returns when done (the host waits).
void ring_forward_gpu(cp_gpu_t* r, const void* q, const void* k, const void* v, void* o, float* lse);
// Backward with the forward's o and lse: dq, dk, dv (dtype). Returns when done.
void ring_backward_gpu(cp_gpu_t* r, const void* q, const void* k, const void* v, const void* o,
                       const float* lse, const void* dout, void* dq, void* dk, void* dv);
// Of the last call: milliseconds of block kernels on the compute stream (the sum over steps),
// and of the whole call (first kernel to last); the difference is communication left exposed.
void cp_gpu_last_times(const cp_gpu_t* r, double* compute_ms, double* total_ms);

#ifdef __cplusplus
}
#endif
