// Helpers shared by stage 04's tests (header only: each test_*.c includes it); the ones stage 03's
// tests have too come from its test_util.h.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "03_flashattn_fwd/test_util.h"  // poisoned_f32, randn_f32, load_fixture, FX_*
#include "04_flashattn_bwd/flash_bwd.h"

// Rounds x to the nearest bf16 value in place (what the GPU sees when it gets bf16 inputs).
static inline void bwd_round_bf16(float* x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = f32_from_bf16(bf16_from_f32(x[i]));
}

static inline float bwd_max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}
