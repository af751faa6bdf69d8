// Timers: a monotonic host clock, and CUDA events for GPU work (the right way to time
// asynchronous launches: the elapsed time between two events recorded on the stream).
#pragma once
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

double time_now_s(void);  // CLOCK_MONOTONIC, seconds

typedef struct {
    cudaEvent_t start, stop;
    cudaStream_t stream;
} gpu_timer_t;

void gpu_timer_init(gpu_timer_t* t);
void gpu_timer_destroy(gpu_timer_t* t);
void gpu_timer_start(gpu_timer_t* t, cudaStream_t stream);
float gpu_timer_stop_ms(gpu_timer_t* t);  // records stop, waits for it, returns milliseconds

// An L2-sized scratch buffer to overwrite between kernel timings so that every repetition
// starts from a cold L2 (as nccl-tests and triton's do_bench do).
void gpu_flush_l2(cudaStream_t stream);

#ifdef __cplusplus
}
#endif
