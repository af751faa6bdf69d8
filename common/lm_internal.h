// What lm_t holds (lm.h); only lm.c and the two backends (lm_cpu.c, lm_gpu.c) see it.
#pragma once
#include "common/lm.h"

struct lm {
    const lm_ops_t* ops;
    lm_options_t o;
    model_config_t cfg;
    model_cpu_t cpu;       // LM_CPU: the reference model
    model_gpu_t* gpu;      // LM_GPU: the CUDA model
    int32_t *in, *tg;      // LM_CPU: the tokens set last, (B, T) each
    float loss;            // LM_CPU: the last forward's loss
};
