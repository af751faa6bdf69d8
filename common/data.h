// Batches of token ids for training and benchmarking the Transformer LM.
// Three sources:
//   random  token ids drawn from common/rng.h: no file needed, deterministic in (seed, step);
//   .npy    a 1-D array of token ids (int32 or int64), e.g. a tokenised corpus;
//   bytes   any other file read as raw bytes, token = byte value (needs vocab >= 256).
// A batch is B rows of T+1 consecutive tokens: inputs are the first T, targets the last T
// (the next token at every position), as the course's get_batch.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DATA_RANDOM, DATA_NPY, DATA_BYTES } data_kind_t;

typedef struct {
    data_kind_t kind;
    int vocab;          // every id is in [0, vocab)
    uint64_t seed;      // random tokens, or the random start positions in a file
    int32_t* tokens;    // (n_tokens) the whole file's token stream; NULL for DATA_RANDOM
    size_t n_tokens;
    char name[256];     // the file's path, or "random"
} data_source_t;

void data_open_random(data_source_t* d, int vocab, uint64_t seed);
// 0, or -1 with "path: reason" in err (cannot read, not 1-D, not int32/int64, an id outside
// [0, vocab), no tokens; for bytes: vocab < 256).
int data_open_npy(data_source_t* d, const char* path, int vocab, uint64_t seed, char* err,
                  size_t errlen);
int data_open_bytes(data_source_t* d, const char* path, int vocab, uint64_t seed, char* err,
                    size_t errlen);
// For programs: "random", a path ending in .npy, or any other path (bytes); fail() on error.
void data_open(data_source_t* d, const char* spec, int vocab, uint64_t seed);
void data_close(data_source_t* d);

// Can batches of sequence length T be cut from this source? 0, or -1 with a reason
// ("path has 10 tokens; sequence length 16 needs at least 17").
int data_check_seq(const data_source_t* d, int T, char* err, size_t errlen);

// inputs, targets (B, T) for training step `step` (any step, in any order: the batch is a pure
// function of (seed, step)). Files: row b starts at a position drawn uniformly from
// [0, n_tokens - T - 1]; random: T+1 fresh tokens per row. fail() if T is too long for the file.
void sample_batch(const data_source_t* d, int B, int T, int64_t step, int32_t* inputs,
                  int32_t* targets);

#ifdef __cplusplus
}
#endif
