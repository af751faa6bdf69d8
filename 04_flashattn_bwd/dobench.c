// triton.testing.do_bench's procedure and statistic in C (dobench.h says which steps).
#include "04_flashattn_bwd/dobench.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "common/check.h"

int dobench_runs(double budget_ms, double estimate_ms) {
    if (!(estimate_ms > 0.0) || !(budget_ms >= 0.0) || !isfinite(budget_ms) || !isfinite(estimate_ms)) return -1;
    const double q = trunc(budget_ms / estimate_ms);  // Python's int() of a positive float
    if (q > (double)INT_MAX) return -1;
    return q < 1.0 ? 1 : (int)q;
}

static int cmp_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

double dobench_summary(const double* ms, int n, dobench_mode_t mode) {
    if (n < 1 || !ms) return NAN;
    switch (mode) {
    case DOBENCH_MEAN: {
        double s = 0.0;
        for (int i = 0; i < n; i++) s += ms[i];
        return s / n;
    }
    case DOBENCH_MIN:
    case DOBENCH_MAX: {
        double m = ms[0];
        for (int i = 1; i < n; i++) m = mode == DOBENCH_MIN ? fmin(m, ms[i]) : fmax(m, ms[i]);
        return m;
    }
    case DOBENCH_MEDIAN: {
        double* s = malloc(sizeof(double) * (size_t)n);
        if (!s) DIE("dobench_summary: out of host memory");
        memcpy(s, ms, sizeof(double) * (size_t)n);
        qsort(s, (size_t)n, sizeof(double), cmp_double);
        const double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
        free(s);
        return m;
    }
    }
    return NAN;
}

// triton's cache buffer: 256 MB, zeroed before each timed run (and in the estimate).
static const size_t kCacheBytes = (size_t)256 << 20;
static void* cache_buffer(void) {
    static void* buf = NULL;
    if (!buf) CUDA_CHECK(cudaMalloc(&buf, kCacheBytes));  // kept for the process, as triton keeps its tensor per call
    return buf;
}
static void clear_cache(void) { CUDA_CHECK(cudaMemsetAsync(cache_buffer(), 0, kCacheBytes, 0)); }

dobench_result_t dobench_gpu(gpu_timed_fn fn, void* ctx, double warmup_ms, double rep_ms, dobench_mode_t mode) {
    dobench_result_t r;
    memset(&r, 0, sizeof r);
    fn(ctx);  // 1. once (compilation and lazy set-up in triton's case), then synchronise
    CUDA_CHECK(cudaDeviceSynchronize());
    // The cache buffer exists before the estimate's first event, as triton makes its tensor
    // (get_empty_cache_for_benchmark) before start_event.record(): a cudaMalloc inside the span
    // would add its host time to the estimate, and so change n_warmup and n_repeat.
    (void)cache_buffer();
    cudaEvent_t e0, e1;  // 2. the estimate: 5 runs, each after a cache clear, in one span
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0, 0));
    for (int i = 0; i < 5; i++) {
        clear_cache();
        fn(ctx);
    }
    CUDA_CHECK(cudaEventRecord(e1, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    float span = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&span, e0, e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    r.estimate_ms = span / 5.0;
    r.n_warmup = dobench_runs(warmup_ms, r.estimate_ms);  // 3.
    r.n_repeat = dobench_runs(rep_ms, r.estimate_ms);
    if (r.n_warmup < 1 || r.n_repeat < 1)
        fail("do_bench: estimate %.6f ms with warmup %g ms, rep %g ms gives no run count", r.estimate_ms, warmup_ms,
             rep_ms);
    for (int i = 0; i < r.n_warmup; i++) fn(ctx);  // 4. warm-up, no clears
    const int n = r.n_repeat;
    cudaEvent_t* ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)n);
    double* ms = malloc(sizeof(double) * (size_t)n);
    if (!ev || !ms) DIE("do_bench: out of host memory for %d runs", n);
    for (int i = 0; i < 2 * n; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < n; i++) {  // 5. clear, start, fn, end; synchronise once at the end
        clear_cache();
        CUDA_CHECK(cudaEventRecord(ev[2 * i], 0));
        fn(ctx);
        CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], 0));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) {
        float t = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
        ms[i] = t;
    }
    for (int i = 0; i < 2 * n; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    r.value = dobench_summary(ms, n, mode);  // 6.
    r.median = dobench_summary(ms, n, DOBENCH_MEDIAN);
    r.min = dobench_summary(ms, n, DOBENCH_MIN);
    free(ev);
    free(ms);
    return r;
}
