// Helpers shared by stage 03's tests and, through test_bwd_util.h, stage 04's (header only).
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"
#include "03_flashattn_fwd/flash_fwd.h"

// malloc'd fp32 array filled with 0xFF bytes (NaN): an element nobody writes fails allclose.
static inline float* poisoned_f32(size_t n) {
    float* p = malloc(n * sizeof(float) + 1);  // + 1: a non-NULL pointer for n = 0 too
    cr_assert(p, "out of host memory");
    memset(p, 0xFF, n * sizeof(float));
    return p;
}

static inline float* randn_f32(size_t n, uint64_t seed) {
    float* p = malloc(n * sizeof(float) + 1);
    cr_assert(p, "out of host memory");
    rng_t r = rng_make(seed);
    rng_fill_normal(&r, p, n, 0.0f, 1.0f);
    return p;
}

// Loads tests/fixtures/attention/<name>.npy as fp32 with the given element count.
static inline float* load_fixture(const char* name, size_t want_numel) {
    char rel[128];
    snprintf(rel, sizeof rel, "attention/%s.npy", name);
    return fixture_load_f32(rel, want_numel);  // the caller frees it
}

// The fixture's shape: batch 4 (= B*H, one head), Nq = Nk = 128, D = 64.
enum { FX_BH = 4, FX_N = 128, FX_D = 64 };
