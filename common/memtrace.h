// The active-memory timeline: the C answer to PyTorch's memory snapshot. Every allocation and
// free made through common/alloc.h on one device is recorded (through mem_set_observer) as
// (time since start, live bytes in total, live bytes per tag, current phase label), and the
// phase markers are recorded as rows of their own. The CSV plots as a stacked-by-tag area.
//
//   memtrace_start(DEV_CUDA);
//   memtrace_mark("forward");  ...  memtrace_mark("backward");  ...
//   memtrace_stop();
//   memtrace_write_csv("results/01_benchmarking/mem_2.7B.csv");
//   memtrace_plot_png("results/01_benchmarking/mem_2.7B.csv", "....png", "2.7B, ctx 512", err, n);
//
// Host time: allocations are host calls, so the time axis is when the host asked, which runs
// ahead of the GPU between synchronisations. One trace at a time per process.
#pragma once
#include <stddef.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void memtrace_start(device_t dev);      // clears an earlier trace; installs the observer
void memtrace_mark(const char* label);  // a phase marker; later rows carry this label
void memtrace_stop(void);               // removes the observer; the trace stays readable
// CSV (atomic), one row per event:
//   event,time_s,kind,label,live_bytes,params,grads,optim,acts,workspace,other
// kind is alloc, free, mark (or start/stop). 0 on success, -1 on failure.
int  memtrace_write_csv(const char* path);
// Runs gnuplot on such a CSV: live GiB stacked by tag against time, phase markers as
// vertical lines. Any title and path (quotes too) but no newline. No PNG is left behind on
// failure, and err says why:
//   -1  the input: the CSV is missing, empty or not numbers ("x.csv line 3: time_s 'abc' is not a
//       number"), the PNG's place cannot be written, gnuplot is not installed;
//   -2  gnuplot ran and failed: err holds gnuplot's own message.
int  memtrace_plot_png(const char* csv, const char* png, const char* title, char* err, size_t errlen);

// For tests and programs that want numbers rather than files.
size_t memtrace_n_events(void);
size_t memtrace_peak_bytes(void);       // the most live bytes at once during the trace

#ifdef __cplusplus
}
#endif
