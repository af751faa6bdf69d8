// The peak of the host's activation bytes (the allocator's acts tag) over a stretch of work: an
// observer for mem_set_observer (common/alloc.h). Used by the checkpointing table (ckpt_memory)
// and its tests to measure what each policy keeps against the formula.
//   acts_peak_t ap = {0, 0};
//   mem_set_observer(acts_peak_observe, &ap);  ...  mem_set_observer(NULL, NULL);  ap.peak
#pragma once
#include <stddef.h>
#include "common/alloc.h"

typedef struct {
    size_t live, peak;  // acts bytes live now (since the observer was set), and the most at once
} acts_peak_t;

void acts_peak_observe(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live_after);
