// The referee of the split-model programs (stage 09's tp_train, stage 10's cp_train): one
// process's CPU model (common/model_cpu.h) trained on the whole global batch of every step,
// against what the parallel run recorded — each step's loss and gradient norm, step 0's gradient
// gathered into the model's flat layout, and the gathered parameters after K steps.
//
// Bounds (each program's header says why they hold for its own splits): the losses, the gradient
// norms and step 0's gradient of every parameter (normwise) within REFEREE_REL relative; the
// parameters normwise on what training changed, ||p − p_one|| <= REFEREE_UPD · ||p_one − p_init||
// (an element whose gradient is a cancellation near 0 may move the other way under AdamW, which
// moves every element by about lr whatever its gradient's size).
#pragma once
#include <stdint.h>
#include "common/adamw_cpu.h"
#include "common/data.h"
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REFEREE_REL 1e-4
#define REFEREE_UPD 1e-3

// Prints one "check: ..." line per step, one for step 0's gradients, one for the parameters and
// the worst relative differences, and "check: OK: <what> equals one process over K steps" when
// every bound holds. `who` names the run in the norms ("tp": ||g_tp - g_one||). 0 if all agree,
// else 1.
int referee_one_process(const model_config_t* cfg, const adamw_config_t* opt, const data_source_t* data, int B,
                        int T, int K, uint64_t seed, const double* losses, const double* gnorms, const float* g0,
                        const float* gp, const char* who, const char* what);

#ifdef __cplusplus
}
#endif
