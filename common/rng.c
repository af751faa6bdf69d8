// Host fills for the counter-based generator (rng.h). Each fill uses counters
// offset .. offset+n-1 and then advances the offset, exactly like the device fills.
#include "common/rng.h"

void rng_fill_uniform(rng_t* r, float* x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(r->seed, r->offset + i);
    r->offset += n;
}

void rng_fill_normal(rng_t* r, float* x, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) x[i] = mean + std * rng_normal(r->seed, r->offset + i);
    r->offset += n;
}

void rng_fill_trunc_normal(rng_t* r, float* x, size_t n, float std, float a) {
    for (size_t i = 0; i < n; i++) x[i] = std * rng_trunc_normal(r->seed, r->offset + i, a);
    r->offset += n;
}

void rng_fill_int(rng_t* r, int32_t* x, size_t n, int32_t lo, int32_t hi) {
    const uint32_t span = (uint32_t)(hi - lo);
    for (size_t i = 0; i < n; i++) x[i] = lo + (int32_t)rng_below(r->seed, r->offset + i, span);
    r->offset += n;
}
