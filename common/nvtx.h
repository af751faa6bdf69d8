// NVTX ranges (header-only NVTX3, shipped with the toolkit), switched on at run time
// (--nvtx in the benchmarks) so that untraced runs pay nothing but a branch.
//
// Regions: while the CUPTI profiler runs (common/profiler.h) it asks for range TRACKING: each
// thread keeps a small stack of the ranges it has open, whether or not --nvtx sends them to
// NVTX, so that every kernel launch can be tagged with the innermost range open on the
// launching thread ("scores", "softmax", ...). With both NVTX and tracking off, nvtx_push and
// nvtx_pop cost one branch each.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

void nvtx_enable(int on);
int nvtx_enabled(void);
void nvtx_push(const char* name);
void nvtx_pop(void);

// ---- region tracking (used by the profiler; public for its tests) ----
#define NVTX_REGION_NONE 0      // no tracked range open: named "-"
#define NVTX_REGION_TOO_DEEP 1  // nested deeper than NVTX_MAX_DEPTH: named "(too deep)"
#define NVTX_REGION_OTHER 2     // more distinct names than NVTX_MAX_REGIONS: named "(other)"
#define NVTX_MAX_DEPTH 64
#define NVTX_MAX_REGIONS 1024
// Turns tracking on or off. Every call starts a new generation: a thread's stack from an
// earlier generation is forgotten at its next push, pop or query, so ranges left open (or
// opened while tracking was off) never leak into a later session; a pop with nothing tracked
// open is ignored.
void nvtx_track(int on);
int nvtx_tracking(void);
// The calling thread's innermost tracked range as a region id (NVTX_REGION_NONE if none, or
// tracking is off). Ids are stable for the life of the process: one per distinct name.
int nvtx_region_current(void);
// The name of a region id: "-" for NVTX_REGION_NONE, "?" for an id never handed out.
const char* nvtx_region_name(int id);
// Number of region ids handed out so far (ids are 0 .. count-1).
int nvtx_region_count(void);

#ifdef __cplusplus
}
#endif
