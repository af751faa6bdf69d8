// Helpers shared by stage 04's tests (header only: each test_*.c includes it).
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"

// malloc'd fp32 array filled with 0xFF bytes (NaN): an element nobody writes fails allclose.
static inline float* bwd_poisoned(size_t n) {
    float* p = malloc(n * sizeof(float) + 1);
    cr_assert(p, "out of host memory");
    memset(p, 0xFF, n * sizeof(float));
    return p;
}

static inline float* bwd_randn(size_t n, uint64_t seed) {
    float* p = malloc(n * sizeof(float) + 1);
    cr_assert(p, "out of host memory");
    rng_t r = rng_make(seed);
    rng_fill_normal(&r, p, n, 0.0f, 1.0f);
    return p;
}

// Rounds x to the nearest bf16 value in place (what the GPU sees when it gets bf16 inputs).
static inline void bwd_round_bf16(float* x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = f32_from_bf16(bf16_from_f32(x[i]));
}

static inline float bwd_max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

// Loads tests/fixtures/attention/<name>.npy as fp32 with the given element count.
static inline float* bwd_load_fixture(const char* name, size_t want_numel) {
    char rel[128];
    snprintf(rel, sizeof rel, "attention/%s.npy", name);
    return fixture_load_f32(rel, want_numel);  // the caller frees it
}

// The fixture's shape: batch 4 (= B*H, one head), Nq = Nk = 128, D = 64.
enum { BWD_FX_BH = 4, BWD_FX_N = 128, BWD_FX_D = 64 };
