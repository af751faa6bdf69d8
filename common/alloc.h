// One allocator for host and device memory that counts live and peak bytes per device and
// per tag. Stage 01's memory profile (peaks per phase, active-memory timeline) builds on it.
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MEM_PARAMS = 0,   // model parameters (and fp32 master weights)
    MEM_GRADS,        // parameter gradients
    MEM_OPTIM,        // optimizer state (AdamW moments)
    MEM_ACTS,         // activations saved for the backward pass
    MEM_WORKSPACE,    // scratch: cuBLAS workspace, temporaries
    MEM_OTHER,        // inputs, outputs, anything else
    MEM_NTAGS
} mem_tag_t;

const char* mem_tag_name(mem_tag_t tag);  // "params", "grads", "optim", "acts", "workspace", "other"

typedef struct {
    size_t live, peak;                      // bytes now, and the most ever live at once
    size_t live_by_tag[MEM_NTAGS];          // bytes now, per tag
    size_t at_peak_by_tag[MEM_NTAGS];       // per-tag breakdown at the moment of the overall peak
    size_t n_allocs, n_frees;
} mem_stats_t;

// Dies on failure with the bytes asked for and the bytes free ("out of memory: ...").
void* mem_alloc(device_t dev, size_t bytes, mem_tag_t tag);
// Returns NULL on out-of-memory instead (the CUDA error is cleared), so a benchmark can
// report "OOM" as a table row and go on.
void* mem_try_alloc(device_t dev, size_t bytes, mem_tag_t tag);
void mem_free(void* p);  // NULL is fine; a pointer this allocator did not hand out is a bug (dies)

// Zero or copy bytes within one device's memory: on DEV_CUDA enqueued on `stream` (the host does
// not wait), on DEV_CPU done now (stream ignored). So code that holds its buffers on either
// device (the parallel layers) writes one line for both.
void mem_zero_async(device_t dev, void* p, size_t bytes, cudaStream_t stream);
void mem_copy_async(device_t dev, void* dst, const void* src, size_t bytes, cudaStream_t stream);

mem_stats_t mem_stats(device_t dev);
void mem_reset_peak(device_t dev);  // peak := live (for per-phase peaks)

// An observer sees every allocation and free (delta > 0 or < 0), after the counts change:
// the memory timeline is drawn from these calls. NULL removes it.
typedef void (*mem_observer_fn)(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live_after);
void mem_set_observer(mem_observer_fn fn, void* ctx);

// "2.00 TiB", "1.50 GiB", "12.0 MiB", "512 B" into buf (up to PiB); returns buf.
const char* fmt_bytes(size_t bytes, char* buf, size_t len);

// Could `bytes` fit on the device at all: the host's physical memory, or the GPU's total? For
// checking the sizes a user asked for before allocating, so that impossible sizes are bad input
// (exit 2, naming the flags) rather than an out-of-memory death. A double, so that products of
// sizes cannot overflow. 1 if so (or if the total is unknown); 0 with "needs 1.21 TiB, more than
// the 23.4 GiB of host memory here" in err.
int mem_fits(device_t dev, double bytes, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
