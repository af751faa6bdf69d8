// The course leaderboard's statistic, in C: triton.testing.do_bench(fn, rep=10000, warmup=1000)
// as triton 3.x implements it (triton/testing.py, do_bench; 3.9.0 read for this):
//   1. fn() once, synchronise;
//   2. estimate: 5 x (clear the cache, fn()) between two events, divided by 5 (so the estimate
//      includes the cache clears);
//   3. n_warmup = max(1, int(warmup / estimate)), n_repeat = max(1, int(rep / estimate));
//   4. n_warmup runs of fn() (no clears);
//   5. n_repeat x (clear the cache, record a start event, fn(), record an end event), one
//      synchronise at the end;
//   6. return_mode "mean" (the default): the mean of the n_repeat event times, ms.
// "Clear the cache" is zeroing a 256 MB int32 buffer (triton's NVIDIA driver,
// get_empty_cache_for_benchmark / clear_cache); here a cudaMemsetAsync of 256 MB.
// The arithmetic is split out as pure functions so it is tested on the CPU (test_dobench.c).
#pragma once
#include "common/timer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DOBENCH_MEAN, DOBENCH_MEDIAN, DOBENCH_MIN, DOBENCH_MAX } dobench_mode_t;

// max(1, int(budget_ms / estimate_ms)) as Python computes it (int() truncates toward zero);
// estimate_ms must be > 0 (Python would raise ZeroDivisionError) and budget_ms >= 0, else -1.
// A count above 2^31 - 1 is -1 too (no GPU run is that short).
int dobench_runs(double budget_ms, double estimate_ms);
// The summary of n >= 1 run times as triton's return_mode computes it (statistics.mean,
// statistics.median: the mean of the two middle values when n is even; min; max). NAN for n < 1.
double dobench_summary(const double* ms, int n, dobench_mode_t mode);

typedef struct {
    double value;        // the statistic asked for (mean by default), ms
    double estimate_ms;  // step 2's estimate
    int n_warmup, n_repeat;
    double median, min;  // of the same n_repeat runs, for comparison with our other tables
} dobench_result_t;
// Steps 1-6 on the GPU for fn(ctx), which launches its work on stream 0. Dies (with the CUDA
// error) if a CUDA call fails; fails (exit 2) if the estimate is not positive.
dobench_result_t dobench_gpu(gpu_timed_fn fn, void* ctx, double warmup_ms, double rep_ms, dobench_mode_t mode);

#ifdef __cplusplus
}
#endif
