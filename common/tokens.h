// Token files for training, read by memory mapping, and the rank-aware sampler that cuts
// training windows from them (stage 11's trainer; common/data.h is the simpler source the
// benchmarks use, which reads a whole file into memory and draws independent positions).
//
// Files (the layouts of CS336 assignment 1 and of llm.c):
//   .bin  llm.c: a header of 256 int32 (magic 20240520, version 1 = uint16 ids or 2 = uint32
//         ids, token count), then the ids;
//   .npy  a 1-D array of uint16 ('<u2') or int32 ('<i4') ids.
// A byte-level corpus (vocab 256) is made from any text by 11_train/tokenize (a .bin, version 1).
//
// Split: the first (1 − val_frac) of the tokens train, the rest is held out for evaluation.
//
// The sampler. A window is T+1 consecutive tokens (inputs T, targets shifted by one). The
// training part is cut into n_win non-overlapping windows, shifted by an offset in [0, T] that
// changes every epoch; an epoch visits them in a seeded random order (Fisher-Yates on
// splitmix64). Every window drawn has a global index c = 0, 1, 2, ... — the sampler's whole
// state is that counter (plus the seed): a step of the trainer draws `per_step` consecutive
// indices (global batch rows), rank r taking its own slice of them, so the ranks of one step see
// distinct windows of one epoch, hence disjoint tokens. A step never straddles two epochs (the
// counter skips to the next epoch's start), so disjointness holds at epoch ends too.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TOKENS_BIN_MAGIC 20240520  // llm.c's data file magic
#define TOKENS_BIN_HEADER 256      // int32 header entries

typedef struct {
    const void* ids;  // the mapped ids (element size `width` bytes)
    int width;        // 2 (uint16) or 4 (uint32 / int32)
    size_t n;         // tokens in the file
    int max_id;       // the largest id in the file (checked once at open against vocab)
    void* map;        // the whole mapping (munmap'ed by tokens_close)
    size_t map_len;
    char path[512];
} tokens_t;

// Maps `path` (.bin or .npy as above). 0, or -1 with "path: reason" in err (cannot open, bad
// magic or header, truncated, unsupported dtype, no tokens). Every id is scanned once for
// max_id so that a vocabulary too small is refused before training.
int tokens_open(tokens_t* t, const char* path, char* err, size_t errlen);
void tokens_close(tokens_t* t);
// A file truncated under its mapping makes every read past its new end raise SIGBUS. After
// tokens_guard(t), such a SIGBUS inside t's mapping ends the process with one line naming the
// file ("prog: error: PATH: the token file was truncated while mapped ..."), exit 2, written
// with write(2) and _exit from the handler; any other SIGBUS goes to the handler installed
// before (or the default action). Call it after MPI_Init (which installs handlers of its own).
// Up to 8 files; tokens_close forgets one.
void tokens_guard(const tokens_t* t);
static inline int32_t tokens_at(const tokens_t* t, size_t i) {
    return t->width == 2 ? (int32_t)((const uint16_t*)t->ids)[i] : ((const int32_t*)t->ids)[i];
}
// Writes ids (uint16, each < 65536) as an llm.c .bin, version 1, atomically (common/fileio.h).
// 0, or -1 with the reason in err.
int tokens_write_bin(const char* path, const uint16_t* ids, size_t n, char* err, size_t errlen);

typedef struct {
    size_t lo, hi;  // the training part of the file: tokens [lo, hi)
    int T;          // inputs per window (a window is T+1 tokens)
    uint64_t seed;
    int64_t per_step;  // windows one step draws (global batch rows, every rank's together)
    size_t n_win;      // windows per epoch
    int64_t counter;   // the state: global index of the next window (saved in checkpoints)
    // cache of the current epoch's order (recomputed from seed and epoch when it changes)
    int64_t cached_epoch;
    uint32_t* order;   // (n_win)
    size_t shift;      // the cached epoch's offset
} sampler_t;

// Training windows from tokens [lo, hi). 0, or -1 with a reason ("the training split has 500
// tokens: a step of 16 windows of 33 tokens needs at least 561").
int sampler_init(sampler_t* s, size_t lo, size_t hi, int T, int64_t per_step, uint64_t seed,
                 char* err, size_t errlen);
void sampler_free(sampler_t* s);
// Token position where window `c` starts (any c >= 0; pure in (seed, c)).
size_t sampler_window_start(sampler_t* s, int64_t c);
// One step's windows: rows [row0, row0 + rows) of the `per_step` rows the step draws, into
// inputs/targets (rows, T). Advances nothing; sampler_advance moves to the next step.
void sampler_fill(sampler_t* s, const tokens_t* t, int64_t row0, int rows, int32_t* inputs,
                  int32_t* targets);
// Moves the counter past this step's windows (and to the next epoch's start if the next step
// would not fit in this epoch).
void sampler_advance(sampler_t* s);

#ifdef __cplusplus
}
#endif
