// Timers: a monotonic host clock, and CUDA events for GPU work (the right way to time
// asynchronous launches: the elapsed time between two events recorded on the stream).
#pragma once
#include <cuda_runtime_api.h>
#include "common/stats.h"

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

// Times fn(ctx), which launches work on stream 0, with CUDA events: `warmup` runs first (timed
// but not counted), then `reps` runs, each after an L2 flush. With budget_ms > 0, fewer runs when
// the last warm-up run says `reps` of them would take longer than budget_ms, but at least 3.
// Returns the statistics of the counted runs in milliseconds (median, min, max).
typedef void (*gpu_timed_fn)(void* ctx);
stats_t gpu_time_fn(gpu_timed_fn fn, void* ctx, int warmup, int reps, double budget_ms);

#ifdef __cplusplus
}
#endif
