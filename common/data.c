// Batches of token ids (see data.h): a random source, a .npy of ids, a file of raw bytes.
#include "common/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/npy.h"
#include "common/rng.h"

void data_open_random(data_source_t* d, int vocab, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->kind = DATA_RANDOM;
    d->vocab = vocab;
    d->seed = seed;
    snprintf(d->name, sizeof d->name, "random");
}

// Every id in [0, vocab)? Names the first one that is not.
static int check_ids(const data_source_t* d, char* err, size_t errlen) {
    for (size_t i = 0; i < d->n_tokens; i++)
        if (d->tokens[i] < 0 || d->tokens[i] >= d->vocab) {
            snprintf(err, errlen, "%s: token id %d at index %zu is out of range [0, %d) (vocab %d)",
                     d->name, d->tokens[i], i, d->vocab, d->vocab);
            return -1;
        }
    return 0;
}

int data_open_npy(data_source_t* d, const char* path, int vocab, uint64_t seed, char* err,
                  size_t errlen) {
    memset(d, 0, sizeof *d);
    d->kind = DATA_NPY;
    d->vocab = vocab;
    d->seed = seed;
    snprintf(d->name, sizeof d->name, "%s", path);
    npy_array_t a;
    if (npy_read(path, &a, err, errlen) != 0) return -1;
    int rc = 0;
    if (a.rank != 1) {
        snprintf(err, errlen, "%s: token ids must be 1-D, this array has rank %d", path, a.rank);
        rc = -1;
    } else if (a.dtype != DT_I32 && a.dtype != DT_I64) {
        snprintf(err, errlen, "%s: token ids must be int32 or int64, this array is %s", path,
                 dtype_name(a.dtype));
        rc = -1;
    } else if (a.shape[0] == 0) {
        snprintf(err, errlen, "%s: the array is empty (no tokens)", path);
        rc = -1;
    }
    if (rc != 0) {
        npy_array_free(&a);
        return -1;
    }
    d->n_tokens = (size_t)a.shape[0];
    d->tokens = malloc(d->n_tokens * sizeof(int32_t));
    if (!d->tokens) DIE("data_open_npy: out of host memory for %zu tokens", d->n_tokens);
    for (size_t i = 0; i < d->n_tokens; i++) {
        int64_t id = (a.dtype == DT_I32) ? ((const int32_t*)a.data)[i] : ((const int64_t*)a.data)[i];
        // Ids that do not fit in int32 are out of range anyway; clamp so the check names them.
        d->tokens[i] = (id < 0) ? -1 : (id > INT32_MAX ? INT32_MAX : (int32_t)id);
    }
    npy_array_free(&a);
    if (check_ids(d, err, errlen) != 0) {
        data_close(d);
        return -1;
    }
    return 0;
}

int data_open_bytes(data_source_t* d, const char* path, int vocab, uint64_t seed, char* err,
                    size_t errlen) {
    memset(d, 0, sizeof *d);
    d->kind = DATA_BYTES;
    d->vocab = vocab;
    d->seed = seed;
    snprintf(d->name, sizeof d->name, "%s", path);
    if (vocab < 256) {
        snprintf(err, errlen, "%s: a raw byte file needs vocab >= 256 (token = byte value), vocab is %d",
                 path, vocab);
        return -1;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char* buf = malloc(cap);
    if (!buf) DIE("data_open_bytes: out of host memory");
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) DIE("data_open_bytes: out of host memory for %zu bytes", cap);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int read_err = ferror(f);
    fclose(f);
    if (read_err || n == 0) {
        snprintf(err, errlen, "%s: %s", path, read_err ? "read error" : "the file is empty (no tokens)");
        free(buf);
        return -1;
    }
    d->n_tokens = n;
    d->tokens = malloc(n * sizeof(int32_t));
    if (!d->tokens) DIE("data_open_bytes: out of host memory for %zu tokens", n);
    for (size_t i = 0; i < n; i++) d->tokens[i] = buf[i];
    free(buf);
    return 0;
}

void data_open(data_source_t* d, const char* spec, int vocab, uint64_t seed) {
    char err[512];
    size_t len = strlen(spec);
    int rc = 0;
    if (strcmp(spec, "random") == 0)
        data_open_random(d, vocab, seed);
    else if (len > 4 && strcmp(spec + len - 4, ".npy") == 0)
        rc = data_open_npy(d, spec, vocab, seed, err, sizeof err);
    else
        rc = data_open_bytes(d, spec, vocab, seed, err, sizeof err);
    if (rc != 0) fail("%s", err);
}

void data_close(data_source_t* d) {
    free(d->tokens);
    d->tokens = NULL;
    d->n_tokens = 0;
}

int data_check_seq(const data_source_t* d, int T, char* err, size_t errlen) {
    if (T < 1) {
        snprintf(err, errlen, "sequence length is %d, must be >= 1", T);
        return -1;
    }
    if (d->kind != DATA_RANDOM && d->n_tokens < (size_t)T + 1) {
        snprintf(err, errlen, "%s has %zu tokens; sequence length %d needs at least %d (inputs + one target)",
                 d->name, d->n_tokens, T, T + 1);
        return -1;
    }
    return 0;
}

void sample_batch(const data_source_t* d, int B, int T, int64_t step, int32_t* inputs,
                  int32_t* targets) {
    char err[512];
    if (B < 1) fail("batch size is %d, must be >= 1", B);
    if (data_check_seq(d, T, err, sizeof err) != 0) fail("%s", err);
    for (int b = 0; b < B; b++) {
        int32_t* x = inputs + (size_t)b * T;   // (T)
        int32_t* y = targets + (size_t)b * T;  // (T)
        const uint64_t row = (uint64_t)step * (uint64_t)B + (uint64_t)b;  // global row number
        if (d->kind == DATA_RANDOM) {
            // Row `row` uses counters row*(T+1) .. row*(T+1)+T of the stream.
            rng_t r = {d->seed, row * (uint64_t)(T + 1)};
            rng_fill_int(&r, x, (size_t)T, 0, d->vocab);
            int32_t last;
            rng_fill_int(&r, &last, 1, 0, d->vocab);
            memcpy(y, x + 1, (size_t)(T - 1) * sizeof(int32_t));
            y[T - 1] = last;
        } else {
            // Start uniform in [0, n - T - 1] so that start + T is the last token at most.
            // (Modulo bias below span / 2^64: nothing at any file size we could hold.)
            const uint64_t span = (uint64_t)(d->n_tokens - (size_t)T);
            const size_t start = (size_t)(rng_u64(d->seed, row) % span);
            memcpy(x, d->tokens + start, (size_t)T * sizeof(int32_t));
            memcpy(y, d->tokens + start + 1, (size_t)T * sizeof(int32_t));
        }
    }
}
