// A kernel summary without Nsight Systems: CUPTI's Activity API records every kernel's GPU
// start and end; CUPTI's callback API tags each launch with the phase that was current on the
// host when the kernel was LAUNCHED (not when it ran: launches are asynchronous, so a kernel
// queued during "forward" may still be running after the host moved on to "backward").
// The two are joined by CUPTI's correlation id. Each launch is also tagged with its REGION: the
// innermost NVTX range (common/nvtx.h) open on the launching thread, tracked while the profiler
// runs whether or not --nvtx is on; "-" when no range is open. That splits a phase further,
// e.g. the naive attention into "scores", "softmax" and "final matmul".
//
//   profiler_start();
//   profiler_set_phase("forward");  ... launches ...
//   profiler_set_phase("backward"); ... launches ...
//   profiler_stop();                        // waits for the GPU, flushes every record
//   profiler_print_summary(stdout, 15);     // Markdown tables, per phase
//   profiler_write_csv("results/01_benchmarking/kernels.csv");
//
// Built with HAVE_CUPTI=0 (the Makefile's detection) or run without a GPU, every call is a
// no-op and profiler_available() is 0. One profiling session at a time per process.
#pragma once
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

int  profiler_available(void);            // 0 when built without CUPTI or no GPU is present
void profiler_start(void);                 // clears earlier results; phase becomes "unphased"
void profiler_set_phase(const char* phase);  // "forward", "backward", "optimizer", ... (copied)
void profiler_stop(void);                  // cudaDeviceSynchronize + flush all records
// Markdown: one table of phases (kernels, calls, GPU ms, share), one table of regions per phase
// (phase, region, kernels, calls, GPU ms, share), then per phase the top_n kernels by total time:
// kernel, calls, total ms, mean us, share of all GPU kernel time.
void profiler_print_summary(FILE* out, int top_n);
// CSV (atomic): phase,kernel,calls,total_ms,mean_us,min_us,max_us,share_pct,region — one row
// per (phase, kernel, region), every kernel, not only the top ones (a kernel launched in two
// regions has two rows: sum them for the per-kernel total). 0 on success, -1 on failure.
int  profiler_write_csv(const char* path);
// GPU time (ms) of the kernels launched in `phase` with innermost range `region` (NULL: any
// region, the whole phase), and their launch count in *calls (may be NULL). 0 when none, when
// no session has been stopped, or without CUPTI.
double profiler_region_ms(const char* phase, const char* region, long* calls);
// CSV (atomic) of every kernel of the session, for a per-stream timeline (no Nsight Systems
// needed): stream,start_us,end_us,phase,kernel — GPU times from the session's first kernel.
// 0 on success, -1 on failure (always -1 without CUPTI).
int  profiler_write_timeline_csv(const char* path);
// The timeline as a PNG: one row per stream, compute kernels and NCCL kernels (names starting
// "nccl") in two colours. 0, or -1 with gnuplot's reason in err.
int  profiler_plot_timeline(const char* csv, const char* png, const char* title, char* err, size_t errlen);

// ---- the aggregation, as a pure function (no CUPTI, no GPU: tested on the CPU) ----
typedef struct {
    int phase, region;  // indices: the profiler's phase table, nvtx.h's region ids
    unsigned name;      // interned kernel name
    double ns;          // GPU duration of one kernel execution
} profiler_rec_t;
typedef struct {
    int phase, region;  // region is -1 when aggregated across regions
    unsigned name;
    long calls;
    double total_ns, min_ns, max_ns;
} profiler_agg_t;
// Groups n records by (phase, region, name) — by (phase, name) when by_region is 0 — into out
// (room for n rows), sorted by phase, then region, then total time descending, then name.
// Returns the number of rows.
size_t profiler_aggregate(const profiler_rec_t* rec, size_t n, int by_region, profiler_agg_t* out);

#ifdef __cplusplus
}
#endif
