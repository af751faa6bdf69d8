// The lab's table of stage 03's forward rungs: every bf16 kernel tried that does not ship, per
// head dim, in the lesson's row type (flash_variant_t; `dflt` is 0 throughout), so that the lab's
// bench and tests can force any of them by name. The lesson's dispatch never sees them.
// Run: build/lab/03_flashattn_fwd/rungs --list
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "03_flashattn_fwd/flash_fwd_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

// The rungs at head dim d (count; 0 and *list NULL for a head dim without any).
int lab03_rungs(int d, const flash_variant_t** list);
// A row by name at head dim d: the lab's rungs first, then the lesson's shipped table (*shipped,
// if not NULL, says which). NULL where neither has it.
const flash_variant_t* lab03_find(int d, const char* name, int* shipped);
// Whether row r can run the call *a as itself (no fallback): a wgmma row needs sm_90a code
// (wgmma_built as given: 1 or 0, so that the rule is testable without a GPU), a TMA row a view a
// tensor map can describe, every row a grid below 2^31 blocks of its own Bq. Pure. 0, or -1 with
// a one-line reason.
int lab03_can_run(const flash_variant_t* r, const attn_args_t* a, int wgmma_built, char* err, size_t errlen);
// flash_fwd_check_call, lab03_can_run (asking the GPU whether sm_90a code was built), then r's
// launcher on stream. 0, or -1 with a reason and nothing launched.
int lab03_run(const flash_variant_t* r, const attn_args_t* a, cudaStream_t stream, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
