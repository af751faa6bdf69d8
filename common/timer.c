// Host clock, CUDA-event timers and the L2 flush used between kernel timings.
#include "common/timer.h"

#include <stdlib.h>
#include <time.h>

#include "common/check.h"

double time_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void gpu_timer_init(gpu_timer_t* t) {
    CUDA_CHECK(cudaEventCreate(&t->start));
    CUDA_CHECK(cudaEventCreate(&t->stop));
    t->stream = 0;
}

void gpu_timer_destroy(gpu_timer_t* t) {
    CUDA_CHECK(cudaEventDestroy(t->start));
    CUDA_CHECK(cudaEventDestroy(t->stop));
}

void gpu_timer_start(gpu_timer_t* t, cudaStream_t stream) {
    t->stream = stream;
    CUDA_CHECK(cudaEventRecord(t->start, stream));
}

float gpu_timer_stop_ms(gpu_timer_t* t) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventRecord(t->stop, t->stream));
    CUDA_CHECK(cudaEventSynchronize(t->stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, t->start, t->stop));
    return ms;
}

// Writing a buffer twice the size of L2 evicts whatever a previous repetition left there.
// The buffer is allocated once per process (and never freed: it lives as long as timings do).
void gpu_flush_l2(cudaStream_t stream) {
    static void* buf = NULL;
    static size_t bytes = 0;
    if (!buf) {
        int dev = 0, l2 = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        bytes = 2 * (size_t)(l2 > 0 ? l2 : (64 << 20));
        CUDA_CHECK(cudaMalloc(&buf, bytes));
    }
    CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, stream));
}

stats_t gpu_time_fn(gpu_timed_fn fn, void* ctx, int warmup, int reps, double budget_ms) {
    gpu_timer_t t;
    gpu_timer_init(&t);
    double last = 0.0;
    for (int i = 0; i < warmup; i++) {
        gpu_timer_start(&t, 0);
        fn(ctx);
        last = gpu_timer_stop_ms(&t);
    }
    if (budget_ms > 0.0) {
        if (last > 0.0 && last * reps > budget_ms) reps = (int)(budget_ms / last);
        if (reps < 3) reps = 3;
    }
    if (reps < 1) reps = 1;
    double* x = malloc(sizeof(double) * (size_t)reps);
    if (!x) DIE("gpu_time_fn: out of host memory");
    for (int i = 0; i < reps; i++) {
        gpu_flush_l2(0);
        gpu_timer_start(&t, 0);
        fn(ctx);
        x[i] = gpu_timer_stop_ms(&t);
    }
    const stats_t s = stats_compute(x, reps);
    free(x);
    gpu_timer_destroy(&t);
    return s;
}
