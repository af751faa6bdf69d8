// The ladder of backward kernels, as a library the lab's benchmark and tests drive: rung
// (version) 1 to 21 chosen process-wide, the plan that says which kernels a rung runs for a
// call (pure, CPU-testable), and the two entry points. Rung 21 is what the lesson ships
// (04_flashattn_bwd: the dispatch table's rows); rungs 1-20 are in rungs_*.cu.
// Run: build/lab/04_flashattn_bwd/bench_rungs --mode leaderboard --versions
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// Rungs: 1-5 two-pass mma.sync (rungs_mma.cu, 5's dK/dV rungs_dkdv_mt2.cu); 6-15 single pass laid
// out as FlashAttention-2 (rungs_fa2.cu); 16-19 that single pass on wgmma at d 64, 20 at d 128
// (rungs_wgmma.cu, sm_90a); 21 the lesson's FA3 layout at d 64. Where a rung's kernel does not
// apply (other head dims, no sm_90a code, views TMA cannot describe) the plan says what runs.
#define LAB04_DEFAULT_VERSION 21
#define LAB04_MAX_VERSION 21
void lab04_set_version(int version);  // 1..LAB04_MAX_VERSION; bad values die
// Parts of the two-pass tensor-core backward that run: 3 both kernels (default), 1 pre-pass and
// dK/dV only, 2 pre-pass and dQ only (per-kernel timings; the results are then incomplete).
void lab04_set_parts(int parts);
// Workspace of both entry points: D and the fp32 dQ accumulator (flash_bwd_workspace_bytes).
size_t lab04_workspace_bytes(const attn_args_t* a);
// The backward with this process's rung: two passes for rungs 1-5 (and where no single-pass
// kernel applies), the single pass for 6-21. The atomic entry point is always the single pass
// (Algorithm 2 as written: dQ added by atomics into the accumulator, then a cast).
void lab04_backward(const attn_args_t* a, cudaStream_t stream);
void lab04_backward_atomic(const attn_args_t* a, cudaStream_t stream);

typedef enum {
    LAB04_PATH_SIMT,           // rungs_simt.cu (fp32, or rows the tensor cores cannot take)
    LAB04_PATH_MMA_TWO_PASS,   // rungs_mma.cu (+ rungs_dkdv_mt2.cu for rung 5)
    LAB04_PATH_MMA_SINGLE,     // rungs_mma.cu, dQ by atomics / bulk reduce (rungs 1-5)
    LAB04_PATH_FA2,            // rungs_fa2.cu (rungs 6-15; 10 stands in for 16-20)
    LAB04_PATH_WGMMA,          // rungs_wgmma.cu (16-19 at d 64, 20 at d 128; sm_90a)
    LAB04_PATH_TMA,            // 04_flashattn_bwd/flash_bwd_tma.cu (21 at d 64; sm_90a, TMA views)
} lab04_path_t;
typedef struct {
    lab04_path_t path;
    int version;      // the rung whose kernels run (0: SIMT, which has no rungs)
    int single_pass;  // 1: one kernel adds dQ into the fp32 accumulator, then a cast; 0: two passes
    const char* file; // where the kernels are
} lab04_plan_t;
lab04_plan_t lab04_plan(const attn_args_t* a, int version, int atomic, int wgmma_built);
// "v19 wgmma single pass (rungs_wgmma.cu)" (96 bytes are enough); returns buf.
const char* lab04_plan_name(const lab04_plan_t* p, char* buf, size_t len);
// The plan for this process's rung and build (asks the GPU whether the wgmma kernels exist).
lab04_plan_t lab04_current_plan(const attn_args_t* a, int atomic);

#ifdef __cplusplus
}
#endif
