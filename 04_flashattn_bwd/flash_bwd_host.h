// Host-array convenience around the CUDA forward (stage 03) and backward (this stage), for the
// command-line program and the demo: copies host fp32 arrays in, runs, copies results out.
#pragma once
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double fwd_ms, bwd_ms;  // medians over the repetitions (CUDA events)
    const char* kernel;     // the dispatch row that ran ("fa3", "wgmma", "mma", "mma_two_pass", "simt")
    char plan[96];          // the same with its pass count and file ("fa3 single pass (flash_bwd_tma.cu)")
} fa_timing_t;

// q, dout, o, dq: contiguous fp32 [B*H, Nq, d]; k, v, dk, dv: [B*H, Nk, d]; lse: [B*H, Nq].
// Inputs are converted to dt on the way in (callers round them first if they want the CPU to
// see the same values); outputs are widened to fp32.
// reps >= 1 runs of forward then backward; the last run's outputs are returned.
void fa_fwd_bwd_gpu(const float* q, const float* k, const float* v, const float* dout, float* o, float* lse,
                    float* dq, float* dk, float* dv, int B, int H, int Nq, int Nk, int d, int causal,
                    float scale, dtype_t dt, int reps, fa_timing_t* timing);

#ifdef __cplusplus
}
#endif
