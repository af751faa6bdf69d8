// Checkpoints of the trainer: written atomically, sharded per rank, checked on the way back.
//
// A checkpoint of step N is a directory DIR/step_<N, 9 digits>/ holding
//   manifest.txt   what follows; written last, by rank 0 (the checkpoint's commit record)
//   params.bin     the flat fp32 parameters, `total` elements (replicated: rank 0 writes them)
//   optim_rK.bin   AdamW's moments for the trainable elements rank K's optimizer owns, keyed by
//                  their place in the model's flat layout (not by the rank's shard, which
//                  depends on the world size and the ZeRO level):
//                    uint64 n_ranges; n_ranges x {uint64 off, uint64 numel}   flat [off, off+numel)
//                    float m[E]; float v[E]        E = Σ numel, packed in range order
//                  the whole buffer under DDP (rank 0 alone writes one file); under --zero 1/2/3
//                  every rank writes its own, in parallel (07's optim_t ranges: its shard, its
//                  bucket pieces, its unit pieces — padding and frozen elements never appear)
//   history.bin    rank 0: per step done, CKPT_HIST floats (loss, lr, grad norm, tokens/s, eval
//                  loss or NaN), so that the CSV and the plot of a resumed run cover the whole run
// The manifest names the world size, the ZeRO level, the padded total of that layout, the model, the global batch, the step (=
// the learning-rate schedule's position = AdamW's step count), the schedule (lr, min lr, warm-up,
// length, clip, weight decay), the sampler's seed and counter
// (the only RNG the trainer draws from after initialisation), the run id and the token file's
// identity (optional lines: "run", "data"; see ckpt_data_t), and for every file its byte count,
// its 64-bit checksum (ckpt_sum) and (optimizer shards) its range count and element count; its own last
// line is the checksum of the lines before it. Format 2 (this one); format 1 (moments of one
// [lo, hi) range a file) is refused with a line saying so.
//
// Atomicity: every rank writes its files into DIR/.tmp.step_<N>/ (each file: temporary name,
// fsync, rename — common/fileio.h); then the checksums are gathered, rank 0 writes the manifest,
// fsyncs the directory and renames it to step_<N>, fsyncs DIR, and only then removes this run's
// complete checkpoints beyond the newest `keep` (older than step N; never a newer one, an
// incomplete one or another run's: the manifest's run id). A job killed at any point leaves the
// previous checkpoint whole (and maybe a .tmp directory, ignored and removed by the next save).
//
// Resume: ckpt_find checks the newest step_* directory fully (manifest parses and its checksum
// matches; every file present, of the size and checksum the manifest says) and, if anything is
// wrong, prints why on stderr and tries the one before. Moments are element-wise over the flat
// layout, so any checkpoint re-shards to any world size and ZeRO level (ckpt_read_state reads the
// flat ranges a rank now owns from whichever shard files hold them); what must match is the model
// and the global batch (the caller checks those and says what to change).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/comm.h"
#include "common/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_MAX_FILES 260  // params, history, up to 256 optimizer shards (world size)
#define CKPT_HIST 5         // floats of history per step: loss, lr, grad norm, tokens/s, eval loss

typedef struct {
    char name[32];
    uint64_t bytes, sum;
    uint64_t n_ranges, elems;  // optimizer shards: flat ranges, and elements per moment (else 0, 0)
} ckpt_file_t;

// A run of elements of the model's flat layout: [off, off + numel).
typedef struct {
    uint64_t off, numel;
} ckpt_range_t;

// The identity of a token file: its path, size, modification time and a checksum of a sample
// of its bytes — the whole file up to CKPT_DATA_PIECES x CKPT_DATA_PIECE bytes (4 MiB), else
// CKPT_DATA_PIECES pieces of CKPT_DATA_PIECE bytes at evenly spaced offsets (the first at 0, the
// last ending at the end); the size is hashed first. Cheap (4 MiB read at most), so it is taken
// at the start, at every checkpoint and evaluation and at every epoch's start.
#define CKPT_DATA_PIECES 64
#define CKPT_DATA_PIECE 65536
typedef struct {
    char path[512];
    uint64_t bytes;
    int64_t mtime_ns;
    uint64_t sum;    // ckpt_sum of the size (8 bytes) then the sampled bytes in file order
    int sampled;     // 0: the whole file is covered; 1: the 64 pieces
} ckpt_data_t;

typedef struct {
    int64_t step;        // optimizer steps done; the schedule's position; AdamW's t
    int world, zero;
    uint64_t total;      // parameter elements (the model's flat layout, padding included)
    uint64_t padded;     // the ZeRO layout's padded total on `world` ranks (= total without ZeRO)
    int64_t global_batch;  // sequences per step, every rank and micro-batch together
    int T, vocab, d_model, n_layers, n_heads, d_ff;
    uint64_t seed;       // the sampler's (and the initialisation's) seed
    int64_t sampler_counter;
    // The schedule the run was started with (the step is its position): a resumed run with other
    // values is told so, as it trains a different schedule from there on.
    double lr, min_lr, clip, wd;
    int64_t warmup, steps;
    // Pipeline parallelism (--pp; 0 without it): P stages' ranks x D replicas, and the layout
    // (schedule, chunks, micro-batches, the blocks of every stage) as one line of text. Written
    // as the manifest's "pipeline" line only when pp > 0; informational on resume (moments are
    // keyed by the flat layout, parameters are whole: any P, D or mode can resume it).
    int pp, dp;
    char layout[200];
    // The run (a random id made at the fresh start and carried through every resume; 0: a
    // manifest written before runs had ids): retention deletes only this run's checkpoints.
    uint64_t run_id;
    // The token file the run trains on (has_data 0: a manifest written before this was recorded).
    int has_data;
    ckpt_data_t data;
    int n_files;
    ckpt_file_t files[CKPT_MAX_FILES];
} ckpt_manifest_t;

// FNV-1a 64 over n bytes, continuing from h (start with CKPT_FNV_INIT): the manifest's own
// last line and the trainer's final parameter hash (small, or printed for people to compare).
#define CKPT_FNV_INIT FNV1A_INIT
uint64_t ckpt_fnv(uint64_t h, const void* p, size_t n);

// The checksum of a checkpoint file (format 3): a stream hash that runs near memory speed on one
// core, where byte-at-a-time FNV-1a ran at 0.74 GB/s and took 44 % of an XL save on an H200
// machine (README). Four independent 64-bit lanes take one 8-byte word each of every 32-byte
// stripe: lane = rotl(lane + word * K1, 31) * K2, each step a bijection of the lane, so any
// change of a single word changes its lane; the end folds the lanes, the length and the last
// (< 32) bytes together and mixes the result (splitmix64's finaliser). Not cryptographic: it
// finds damage (bit flips, truncation, a swapped file), not an attacker. The value does not
// depend on how the stream is cut into update calls.
typedef struct {
    uint64_t v[4], total;
    unsigned char buf[32];
    size_t fill;
} ckpt_sum_t;
void ckpt_sum_init(ckpt_sum_t* s);
void ckpt_sum_update(ckpt_sum_t* s, const void* p, size_t n);
uint64_t ckpt_sum_final(const ckpt_sum_t* s);
uint64_t ckpt_sum(const void* p, size_t n);  // init, update, final

// Where one ckpt_save's time went on this rank (seconds), for the save's log line.
typedef struct {
    double checksum;  // ckpt_sum over the bytes this rank wrote
    double write;     // the rest of ckpt_save: writes, fsyncs, renames, and the waits for the
                      // other ranks' shards (the collectives inside), checksum excluded
    uint64_t bytes;   // bytes this rank wrote (its files; the manifest not counted)
} ckpt_save_timing_t;

// Every rank calls it (collective). meta: everything but the file list (filled in here).
// params (total, host): rank 0's are written. ranges (n_ranges): the flat runs this rank's
// optimizer owns, in the order of its packed moments m, v (host, Σ numel each); has_state 0:
// this rank writes no optimizer file. hist: rank 0's history (meta->step · CKPT_HIST floats).
// Keeps the newest `keep` (>= 1) complete checkpoints of run meta->run_id, this one counted;
// removes only older ones of that run. A step_<N> already there that is not a complete
// checkpoint of this run is moved to step_<N>.kept (a note on stderr), never removed. A failed
// write ends the job (comm_fatal, exit 1, the path and the reason); nothing older is touched
// before the new one is complete. Under mpirun a rank whose launcher died ends before writing,
// committing or removing anything (ckpt_check_launcher).
// Returns the checkpoint's directory in out (rank 0; others get it too). tm (may be NULL): where
// this rank's time went.
void ckpt_save(comm_t* c, const char* dir, ckpt_manifest_t* meta, const float* params,
               const ckpt_range_t* ranges, int n_ranges, const float* m, const float* v, int has_state,
               const float* hist, int keep, char* out, size_t outlen, ckpt_save_timing_t* tm);

// Fully checks the checkpoint in `path` (a step_* directory). 0 and the manifest, or -1 with
// the reason ("optim_r1.bin: 2048 bytes, the manifest says 4096 (truncated)").
int ckpt_validate(const char* path, ckpt_manifest_t* out, char* err, size_t errlen);

// The newest complete checkpoint under dir: 0 with its manifest and path; each one refused on the
// way is reported on stderr ("checkpoint x: refused: ...; trying the one before"). -1 if none
// (err says how many were refused or that there are none).
int ckpt_find(const char* dir, ckpt_manifest_t* out, char* path, size_t pathlen, char* err, size_t errlen);

// Readers (any rank, after rank 0 found and checked the checkpoint). 0, or -1 with the reason.
int ckpt_read_params(const char* path, const ckpt_manifest_t* mf, float* params, char* err, size_t errlen);
// The moments of the flat runs `ranges` into m, v (packed in range order, Σ numel each),
// gathered from the shard files that hold them; -1 if some element is in none of them.
int ckpt_read_state(const char* path, const ckpt_manifest_t* mf, const ckpt_range_t* ranges, int n_ranges,
                    float* m, float* v, char* err, size_t errlen);
int ckpt_read_history(const char* path, const ckpt_manifest_t* mf, float* hist, char* err, size_t errlen);
// Bytes this process has read from checkpoint files so far (ckpt_validate / ckpt_find's full
// check and the readers): the difference around a resume is what it read.
uint64_t ckpt_bytes_read(void);

// ---- the directory, the run, the launcher and the data (README: "Checkpoints and resume")
// The number of step_* directories under dir (0 if dir does not exist); the newest step in
// *newest (-1 if none). Damaged ones count: a fresh run must not start beside them.
int ckpt_count(const char* dir, long long* newest);
// A random run id (never 0).
uint64_t ckpt_new_run_id(void);
// The job's lock on dir (rank 0 holds it from before anything is read or written to the end):
// DIR/lock, held with flock and holding "pid P host H launcher L start S (date)". Returns the
// descriptor, or -1 with the reason in err ("in use by pid 123 on host h since ...").
// A lock left by a job that died (the flock is gone with the process; the file still names it)
// is taken over and *note says so (else note is empty). A holder on this host whose launcher is
// gone is a job's leftover rank, about to end: waited for (up to wait_s seconds) before refusing.
int ckpt_lock(const char* dir, double wait_s, char* note, size_t notelen, char* err, size_t errlen);
// Releases it at the job's clean end: the file is emptied (an empty lock file is not stale).
void ckpt_unlock(int fd);
// Under mpirun: records this rank's parent (mpirun or its daemon); ckpt_check_launcher then ends
// this process (one line, exit 1) if the parent has changed — the launcher died and this rank
// was orphaned. ckpt_save calls it before writing and again right before its commit rename and
// its deletions; the trainer calls it every step. Without a launcher (no OMPI_COMM_WORLD_SIZE in
// the environment) nothing is watched: a single process outlives its shell (nohup) as it should.
void ckpt_watch_launcher(void);
void ckpt_check_launcher(const char* when);
// The identity of the token file at path now. 0, or -1 with the reason.
int ckpt_data_identity(const char* path, ckpt_data_t* out, char* err, size_t errlen);
// 1 if a and b are the same contents (size and checksum, over the same coverage); else 0 and
// what differs in why ("size 1000 then, 2000 now").
int ckpt_data_same(const ckpt_data_t* a, const ckpt_data_t* b, char* why, size_t whylen);

#ifdef __cplusplus
}
#endif
