// FNV-1a, 64 bits, over bytes: the checksum of the checkpoint files (11_train/checkpoint.h) and
// the hash by which the ranks compare their parameters' bits (common/train_loop.h, the split-
// model programs). Not cryptographic: two different buffers collide with chance 2^-64.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define FNV1A_INIT 1469598103934665603ull  // the offset basis: the hash of no bytes

// The hash of n more bytes at p, continuing from h (start from FNV1A_INIT).
static inline uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
