// See acts_peak.h.
#include "01_benchmarking/acts_peak.h"

void acts_peak_observe(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live_after) {
    (void)live_after;
    acts_peak_t* p = ctx;
    if (dev != DEV_CPU || tag != MEM_ACTS) return;
    p->live = (size_t)((long long)p->live + delta);
    if (p->live > p->peak) p->peak = p->live;
}
