// zero_train: the Transformer LM trained data-parallel with sharded optimizer state.
//
//   scripts/mpirun.sh 2 build/07_zero/zero_train --model xl --context 512 --batch 2 --zero all
//   scripts/mpirun.sh 3 build/07_zero/zero_train --model tiny --zero all --check-ddp 1   # CPU, MPI
//   scripts/mpirun.sh 2 build/07_zero/zero_train --zero 0,1 --shard course               # the course's
//   scripts/mpirun.sh 4 build/07_zero/zero_train --model tiny --zero 0,3 --check-ddp 1       # ZeRO-3
//   scripts/mpirun.sh 2 build/07_zero/zero_train --zero 2 --zero2 both    # ZeRO-2 beside the old staging one
//   scripts/mpirun.sh 2 build/07_zero/zero_train --model xl --context 512 --batch 2 --zero 3 --checkpoint block
//
// One run per level in --zero, each from the same initial parameters (rank 0's, broadcast) on
// the same global batches (batch × ranks rows a step, a pure function of the seed and the step
// within the run; rank r trains on its slice):
//   ddp     stage 06's bucketed DDP layer, then AdamW over every parameter (optim_t, one range)
//   zero1   reduce-scatter the gradient, AdamW on shard r, all-gather the parameters (zero.h)
//   zero2   ZeRO-2 on ZeRO-3's engine (zero3.h, level 2): parameters whole (the model's flat
//           buffer), NO flat gradient buffer: the backward writes each unit's gradient into one
//           of two unit-sized working buffers, reduce-scattered into rank r's shard right after
//           the unit's backward; AdamW on rank r's pieces in place, every unit all-gathered back
//   zero2s  (--zero2 staging or both) the older ZeRO-2 (zero.h): each bucket of the model's flat
//           gradient buffer (4Ψ, the staging area) reduce-scattered in the backward, rank r's
//           pieces kept: the same communication, but the flat gradient buffer stays, so it saves
//           no memory over ZeRO-1 (kept for the comparison; 09_train still uses it)
//   zero3   parameters sharded too, per unit (embedding, each block, head): each unit
//           all-gathered before its forward and its backward (the next one prefetched), its
//           gradient reduce-scattered after its backward, AdamW on the shard (zero3.h); the
//           model's own flat buffers are freed for the run, it reads through a window
//   course  (--shard course, in place of zero1/zero2) the DDP layer averages the gradients,
//           then the course's sharded optimizer: AdamW on the parameters this rank owns
//           (assigned whole), each parameter broadcast from its owner (sharded_optim.h)
// AdamW's moments live outside the model (the CPU model's own are freed; the GPU model's are
// never allocated), so the allocator's optim tag shows exactly what each level keeps.
// Rank 0 prints a timing table (step; gradient sync = end of the backward to averaged
// gradients; update = optimizer and parameter collectives), a per-rank memory table by tag
// beside the formulas, and checks that (a) every rank ends bitwise identical, (b) each rank's
// optimizer state equals 8 bytes × the trainable elements it owns, (zero3) its parameters +
// gradients + optimizer state equal 16Ψ/n with the padding counted: 8 bytes × its shard of S
// elements + 8 × the trainable elements it owns, (zero2) they equal 4Ψ + 12Ψ/n with the padding
// counted: 4 × the padded flat buffer + 4 × its shard + 8 × owned, its gradient bytes are the
// shard alone and its working buffers exactly zero3_work_bytes, and with --check-ddp 1
// (c) every run's parameters equal the ddp run's within rtol 1e-4, atol 1e-5.
// --checkpoint none|block|every-K: activation checkpointing in the model (model_cpu.h), for
// every run; the acts column shows what it keeps and a line checks it against the formula
// (model_cpu_acts_bytes / model_gpu_acts_bytes). ZeRO-2/3 take block or none only: their unit
// hooks gather one unit at a time, and block's recompute of block l runs inside unit 1 + l's
// backward window on the parameters that window already holds (no extra collective).
//
// Backends: the CPU model over MPI (host memory), or the CUDA model over NCCL (one GPU a rank).
// The flat buffers are padded to n equal 64-aligned shards (zero_shard_range) for every run.
// Setup: several levels (or --check-ddp 1, or --keep-full 1) share one model built whole, then
// padded, and a host copy of the initial parameters that restarts each run. A single level is
// LEAN, built the way it keeps its state so that its setup peak is its own (the memory wall):
// levels 0-1 (and zero2s) get padded flat buffers from the start (model_gpu_create_flat), ZeRO-2
// padded parameters and no gradient buffer (MODEL_GPU_NO_FLAT_GRADS), ZeRO-3 a model with no flat
// buffers and a shard made piece by piece from the seed (zero3_create_init with
// model_init_params_range); the replicas are then compared by a hash taken without a
// whole-model buffer (hash_floats). Both end with the same bits (test_07 sharded_construction_*).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "04_flashattn_bwd/flash_bwd.h"
#include "06_ddp/ddp.h"
#include "common/replica.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"
#include "07_zero/zero3.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/fileio.h"
#include "common/data.h"
#include "common/gpu.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "common/stats.h"
#include "common/timer.h"

// --check-ddp: the levels average the same gradients in another grouping (reduce-scatter
// chunks instead of all-reduce buckets), so equal up to fp32 summation order that AdamW's
// normalisation can amplify for near-zero second moments (stage 06's --check-single band).
#define CHECK_RTOL 1e-4
#define CHECK_ATOL 1e-5

// The order the runs go in. zero2 and zero3 free the model's flat gradient (zero3: and
// parameter) buffer for their run and give it back at its end.
typedef enum { RUN_DDP = 0, RUN_ZERO1, RUN_ZERO2S, RUN_ZERO2, RUN_COURSE, RUN_ZERO3, N_RUN_KINDS } run_kind_t;
static const char* const run_names[N_RUN_KINDS] = {"ddp", "zero1", "zero2s", "zero2", "course", "zero3"};

typedef struct {
    replica_t rep;              // the model, its parameter table and the data (common/replica.h)
    adamw_config_t opt;
    size_t total, P;            // layout elements, padded elements
    float *params, *grads;      // (P) the flat buffers (host or device)
    cudaStream_t cs;            // NCCL: the model's stream
    device_t dev;
    int lean;                   // one level, sharded construction: no whole-model copy anywhere
                                // (zero2: no flat gradient buffer; zero3: no flat buffers); see main()
    int seed0;                  // rank 0's model seed: the initial parameters of every run
} trainer_t;

// The sharding layer of one run: exactly one of (ddp + opt), zero, (ddp + course), zero3 (its
// level 2 for zero2, 3 for zero3).
typedef struct {
    run_kind_t kind;
    ddp_t* d;
    optim_t opt;  // ddp only
    zero_t* z;
    sharded_optim_t* so;
    zero3_t* z3;
    long long state0;  // zero2/3: live params+grads+optim bytes that are not the level's own
    long long work;    // zero2/3: workspace bytes zero3_create* allocated (its working buffers)
} layer_t;

static long long state_bytes(device_t dev) {  // live parameters + gradients + optimizer state
    const mem_stats_t ms = mem_stats(dev);
    return (long long)(ms.live_by_tag[MEM_PARAMS] + ms.live_by_tag[MEM_GRADS] + ms.live_by_tag[MEM_OPTIM]);
}

// ZeRO-3's windows into the models (zero3_window_fn).
static void cpu_window(void* mm, float* p, float* g, size_t lo, size_t hi) {
    model_cpu_t* m = mm;
    m->pwin = (model_window_t){p, lo, hi};
    if (g) m->gwin = (model_window_t){g, lo, hi};
}
static void gpu_window(void* mm, float* p, float* g, size_t lo, size_t hi) { model_gpu_set_windows(mm, p, g, lo, hi); }

// Sharded construction (zero3_init_fn): flat elements [lo, hi) of rank 0's initial parameters,
// which every rank would otherwise receive whole by the broadcast (model_init_params is a pure
// function of the seed and the element index, so each rank makes only its own pieces).
static void init_range(void* tt, float* host, size_t lo, size_t hi) {
    const trainer_t* t = tt;
    model_init_params_range(t->rep.lay, host, lo, hi, (uint64_t)t->seed0);
}

// ZeRO-3: the shard from the current parameters, then the model's own flat buffers freed (it
// reads and writes through the windows the hooks set) and its unit hooks pointed at zero3.
// Lean (t->params NULL: the model was made without flat buffers): the shard made piece by
// piece from the seed, nothing to free.
// ZeRO-2 (L->kind RUN_ZERO2): the same engine at level 2 over the model's flat parameters; only
// the flat gradient buffer is freed (lean: the model was made without one).
static void zero3_layer_create(trainer_t* t, layer_t* L) {
    const int level = L->kind == RUN_ZERO3 ? 3 : 2;
    const model_config_t* cfg = &t->rep.cfg;
    const int U = model_n_units(cfg);
    size_t* bounds = malloc((size_t)(U + 1) * sizeof *bounds);
    if (!bounds) DIE("out of host memory");
    for (int u = 0; u < U; u++) model_unit_span(t->rep.lay, cfg, u, &bounds[u], &bounds[u + 1]);
    bounds[U] = t->total;
    const model_unit_hooks_t hooks = {zero3_before_fwd, zero3_before_bwd, zero3_after_bwd, NULL};
    model_unit_hooks_t h = hooks;
    const long long before = state_bytes(t->dev);  // (the shard's bytes = mid - before)
    const long long ws0 = (long long)mem_stats(t->dev).live_by_tag[MEM_WORKSPACE];
    long long mid;
    const zero3_window_fn win = t->rep.gpu ? gpu_window : cpu_window;
    void* model = t->rep.gpu ? (void*)t->rep.m : (void*)&t->rep.cpu;
    if (level == 2)
        L->z3 = zero3_create_zero2(t->rep.c, t->rep.table, t->rep.lay->n, bounds, U, t->params, &t->opt, t->cs, win,
                                   model);
    else if (t->params)
        L->z3 = zero3_create(t->rep.c, t->rep.table, t->rep.lay->n, bounds, U, t->params, &t->opt, t->cs, win, model);
    else
        L->z3 = zero3_create_init(t->rep.c, t->rep.table, t->rep.lay->n, bounds, U, init_range, t, &t->opt, t->cs, win,
                                  model);
    mid = state_bytes(t->dev);
    L->work = (long long)mem_stats(t->dev).live_by_tag[MEM_WORKSPACE] - ws0;
    h.ctx = L->z3;
    if (t->rep.gpu) {
        if (level == 2 && t->grads) model_gpu_free_flat_grads(t->rep.m);
        if (level == 3 && t->params) model_gpu_free_flat(t->rep.m);
        model_gpu_set_unit_hooks(t->rep.m, &h);
    } else {
        if (level == 3) mem_free(t->rep.cpu.params);  // (NULL when lean)
        mem_free(t->rep.cpu.grads);
        if (level == 3) t->rep.cpu.params = NULL;
        t->rep.cpu.grads = NULL;
        model_cpu_set_unit_hooks(&t->rep.cpu, &h);
    }
    if (level == 3) t->params = NULL;
    t->grads = NULL;
    // What stays besides the level's own state: ZeRO-3's is its shards, ZeRO-2's its shard and
    // the flat parameter buffer (P elements).
    L->state0 = state_bytes(t->dev) - (mid - before) - (level == 2 ? (long long)(t->P * sizeof(float)) : 0);
    free(bounds);
}

// The model's flat buffers back (P elements, padding zero), filled from the shards; lean: not
// (they would be the whole model; the run is over and the hash was taken unit by unit).
static void zero3_layer_destroy(trainer_t* t, layer_t* L) {
    if (t->lean) {
        zero3_destroy(L->z3);
        L->z3 = NULL;
        return;
    }
    if (zero3_level(L->z3) == 2) {  // the parameters are current in place: only the gradient buffer back
        zero3_destroy(L->z3);       // (its collectives and the last step done first)
        L->z3 = NULL;
        if (t->rep.gpu) {
            char err[512];
            model_gpu_set_unit_hooks(t->rep.m, NULL);
            if (model_gpu_restore_flat_grads(t->rep.m, t->P, err, sizeof err) != 0) comm_fatal(t->rep.c, 1, "%s", err);
            t->grads = model_gpu_grads(t->rep.m);
        } else {
            model_cpu_set_unit_hooks(&t->rep.cpu, NULL);
            t->rep.cpu.grads = mem_alloc(DEV_CPU, t->P * sizeof(float), MEM_GRADS);
            memset(t->rep.cpu.grads, 0, t->P * sizeof(float));
            t->grads = t->rep.cpu.grads;
        }
        return;
    }
    if (t->rep.gpu) {
        char err[512];
        model_gpu_set_unit_hooks(t->rep.m, NULL);
        if (model_gpu_restore_flat(t->rep.m, t->P, err, sizeof err) != 0) comm_fatal(t->rep.c, 1, "%s", err);
        t->params = model_gpu_params(t->rep.m);
        t->grads = model_gpu_grads(t->rep.m);
    } else {
        model_cpu_set_unit_hooks(&t->rep.cpu, NULL);
        t->rep.cpu.params = mem_alloc(DEV_CPU, t->P * sizeof(float), MEM_PARAMS);
        t->rep.cpu.grads = mem_alloc(DEV_CPU, t->P * sizeof(float), MEM_GRADS);
        memset(t->rep.cpu.params, 0, t->P * sizeof(float));
        memset(t->rep.cpu.grads, 0, t->P * sizeof(float));
        t->params = t->rep.cpu.params;
        t->grads = t->rep.cpu.grads;
    }
    zero3_gather_params(L->z3, t->params);
    zero3_destroy(L->z3);
    L->z3 = NULL;
}

static void layer_create(trainer_t* t, layer_t* L, run_kind_t kind, double bucket_mb) {
    memset(L, 0, sizeof *L);
    L->kind = kind;
    const int n = t->rep.lay->n;
    if (kind == RUN_DDP || kind == RUN_COURSE)
        L->d = ddp_create(t->rep.c, t->rep.table, n, t->params, t->grads, t->total, DDP_BUCKETED, bucket_mb, t->cs);
    if (kind == RUN_DDP) {
        optim_init(&L->opt, OPT_ADAMW, &t->opt, t->dev);
        for (int i = 0; i < n; i++) optim_add_range(&L->opt, t->rep.table[i].offset, t->rep.table[i].offset, t->rep.table[i].numel);
    } else if (kind == RUN_COURSE) {
        L->so = sharded_optim_create(t->rep.c, t->rep.table, n, t->params, t->grads, t->total, OPT_ADAMW, &t->opt, 0, t->cs);
    } else if (kind == RUN_ZERO3 || kind == RUN_ZERO2) {
        zero3_layer_create(t, L);
    } else {  // zero1, zero2s: the flat buffers of zero.h
        L->z = zero_create(t->rep.c, kind == RUN_ZERO1 ? 1 : 2, t->rep.table, n, t->params, t->grads, t->total, bucket_mb, &t->opt, t->cs);
    }
}

static void layer_destroy(trainer_t* t, layer_t* L) {
    if (L->z3) zero3_layer_destroy(t, L);
    if (L->d) ddp_destroy(L->d);
    if (L->kind == RUN_DDP) optim_free(&L->opt);
    sharded_optim_destroy(L->so);
    zero_destroy(L->z);
}

static int layer_collectives(const layer_t* L) {  // per step
    if (L->z3) {  // zero3: U forward gathers, U-2 backward ones (the head and the last block stay), U
                  // reduce-scatters; zero2: U reduce-scatters, U all-gathers after the update
        const int U = zero3_n_units(L->z3);
        return zero3_level(L->z3) == 3 ? 3 * U - 2 : 2 * U;
    }
    if (L->z) return 2 * zero_n_buckets(L->z);
    return ddp_n_buckets(L->d) + (L->so ? (int)sharded_optim_broadcasts(L->so) : 0);
}

static void layer_hook(void* ctx, int i) {
    layer_t* L = ctx;
    if (L->z3) return;  // ZeRO-2/3 work per unit (the model's unit hooks), not per parameter
    if (L->z) zero_grad_ready(L->z, i);
    else ddp_grad_ready(L->d, i);
}
static void layer_finish(layer_t* L) {
    if (L->z3) zero3_finish_grads(L->z3);
    else if (L->z) zero_finish_grads(L->z);
    else ddp_finish_grads(L->d);
}
static void layer_update(trainer_t* t, layer_t* L) {
    if (L->z3) zero3_step(L->z3);
    else if (L->z) zero_step(L->z);
    else if (L->so) sharded_optim_step(L->so);
    else optim_step(&L->opt, t->params, t->grads, t->cs);
    if (t->rep.gpu) model_gpu_params_changed(t->rep.m);  // the bf16 copy is remade at the next forward
}

// The trainable elements of the table inside [lo, hi): the formula, counted apart from the
// layers so that the allocator's optim bytes are checked against something independent.
static size_t trainable_in(const trainer_t* t, size_t lo, size_t hi) {
    size_t n = 0;
    for (int i = 0; i < t->rep.lay->n; i++) {
        const size_t a = t->rep.table[i].offset, e = a + t->rep.table[i].numel;
        if (t->rep.table[i].trainable && a < hi && lo < e) n += (e < hi ? e : hi) - (a > lo ? a : lo);
    }
    return n;
}

static size_t owned_elems(const trainer_t* t, const layer_t* L) {
    const int W = t->rep.c->world, r = t->rep.c->rank;
    switch (L->kind) {
    case RUN_DDP: return trainable_in(t, 0, t->total);
    case RUN_ZERO1: {
        size_t lo, hi;
        zero_shard_range(t->total, W, r, &lo, &hi, NULL);
        return trainable_in(t, lo, hi);
    }
    case RUN_ZERO2:
    case RUN_ZERO3: {  // per unit (zero3.h): rank r's piece of each, clipped to the unit
        size_t n = 0;
        for (int u = 0; u < zero3_n_units(L->z3); u++) {
            const zero3_unit_t b = zero3_unit(L->z3, u);
            const size_t lo = b.begin + (size_t)r * b.piece, hi = lo + b.piece;
            n += trainable_in(t, lo, hi < b.end ? hi : b.end);
        }
        return n;
    }
    case RUN_ZERO2S: {
        size_t n = 0;
        for (int k = 0; k < zero_n_buckets(L->z); k++) {
            const zero_bucket_t b = zero_bucket(L->z, k);
            n += trainable_in(t, b.begin + (size_t)r * b.piece, b.begin + (size_t)(r + 1) * b.piece);
        }
        return n;
    }
    default: {
        size_t n = 0;
        for (int i = 0; i < t->rep.lay->n; i++)
            if (sharded_optim_owner(L->so, i) == r) n += t->rep.table[i].numel;
        return n;
    }
    }
}

// The counting allocator's peaks by phase of a step (the handout's "after initialisation,
// before and after the optimizer step"), each the most bytes live at once since the phase before
// it: the forward, backward and gradient communication up to the optimizer step; the optimizer
// step itself (AdamW, ZeRO's all-gathers; the moments appear in the first one); and what stays
// live after it. The allocator counts at allocation time on the host, so these need no sync.
typedef struct { long long fb, opt, after; } phase_peaks_t;
static void phase_mark(device_t dev, long long* into) {
    const long long p = (long long)mem_stats(dev).peak;
    if (p > *into) *into = p;
    mem_reset_peak(dev);
}

// One step on this rank's slice of global batch `step`; phase times in ms; the phase peaks
// raised to this step's (max over the steps).
static float train_step(trainer_t* t, layer_t* L, int64_t step, double* ms, phase_peaks_t* pk) {
    const int32_t *in, *tg;
    replica_batch(&t->rep, step, &in, &tg);
    char err[256];
    mem_reset_peak(t->dev);
    if (t->rep.gpu) {
        cudaEvent_t e[4];
        for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventCreate(&e[i]));
        model_gpu_set_tokens(t->rep.m, in, tg);
        CUDA_CHECK(cudaEventRecord(e[0], t->cs));
        model_gpu_forward_async(t->rep.m, model_gpu_inputs(t->rep.m), model_gpu_targets(t->rep.m));
        if (model_gpu_backward(t->rep.m, layer_hook, L, err, sizeof err) != 0) fail("%s", err);
        CUDA_CHECK(cudaEventRecord(e[1], t->cs));
        layer_finish(L);
        CUDA_CHECK(cudaEventRecord(e[2], t->cs));
        phase_mark(t->dev, &pk->fb);
        layer_update(t, L);
        CUDA_CHECK(cudaEventRecord(e[3], t->cs));
        phase_mark(t->dev, &pk->opt);
        pk->after = (long long)mem_stats(t->dev).live;
        comm_stream_sync(t->rep.c, t->cs, "the training step");
        float a = 0, b = 0, c = 0;
        CUDA_CHECK(cudaEventElapsedTime(&a, e[0], e[3]));
        CUDA_CHECK(cudaEventElapsedTime(&b, e[1], e[2]));
        CUDA_CHECK(cudaEventElapsedTime(&c, e[2], e[3]));
        ms[0] = a, ms[1] = b, ms[2] = c;
        for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventDestroy(e[i]));
        return model_gpu_loss(t->rep.m);
    }
    const double t0 = time_now_s();
    const float loss = model_cpu_forward(&t->rep.cpu, in, tg, t->rep.B, t->rep.T);
    model_cpu_backward(&t->rep.cpu, layer_hook, L);
    const double t1 = time_now_s();
    layer_finish(L);
    const double t2 = time_now_s();
    phase_mark(t->dev, &pk->fb);
    layer_update(t, L);
    const double t3 = time_now_s();
    phase_mark(t->dev, &pk->opt);
    pk->after = (long long)mem_stats(t->dev).live;
    ms[0] = 1e3 * (t3 - t0), ms[1] = 1e3 * (t2 - t1), ms[2] = 1e3 * (t3 - t2);
    return loss;
}

static void get_params(trainer_t* t, float* host) {  // the layout's elements
    if (t->rep.gpu) model_gpu_get_params(t->rep.m, host);
    else memcpy(host, t->params, t->total * sizeof(float));
}
static void set_params(trainer_t* t, const float* host) {
    if (t->rep.gpu) {
        CUDA_CHECK(cudaMemcpy(t->params, host, t->P * sizeof(float), cudaMemcpyHostToDevice));
        model_gpu_params_changed(t->rep.m);
    } else {
        memcpy(t->params, host, t->P * sizeof(float));
    }
}

// A hash of flat elements x[0 .. n) that sit at flat index first, ADDED to h: the sum over the
// elements of a mix (splitmix64's finaliser) of their index and their bits. Why a sum of
// per-element terms: it does not depend on how the buffer is cut into pieces, so a run that
// never holds the whole model (hashing unit by unit) gets the same value as one that does, and
// the terms are independent, so the threads share the work (a serial byte-wise hash of a
// 14 B-parameter model takes about a minute; this, a second or two).
static unsigned long long hash_floats(unsigned long long h, const float* x, size_t first, size_t n) {
    unsigned long long sum = 0;
    const long long nn = (long long)n;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (nn > 65536)
    for (long long i = 0; i < nn; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        unsigned long long z = ((unsigned long long)(first + (size_t)i) * 0x9E3779B97F4A7C15ull) ^ bits;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        sum += z ^ (z >> 31);
    }
    return h + sum;
}

// The hash of the layout's parameters without a host copy of the whole model: ZeRO-3 unit by
// unit (gathered; the units tile [0, total)), else (ZeRO-2 too) the flat buffer in chunks
// (device) or in place (host). Collective for ZeRO-3. Call before layer_destroy.
static unsigned long long lean_params_hash(trainer_t* t, layer_t* L) {
    unsigned long long h = 0;
    if (L->z3 && zero3_level(L->z3) == 3) {
        size_t most = 0;
        for (int u = 0; u < zero3_n_units(L->z3); u++) {
            const zero3_unit_t b = zero3_unit(L->z3, u);
            if (b.end - b.begin > most) most = b.end - b.begin;
        }
        float* buf = malloc(most * sizeof(float));  // one unit, host
        if (!buf) DIE("out of host memory: %zu bytes", most * sizeof(float));
        for (int u = 0; u < zero3_n_units(L->z3); u++) {
            const zero3_unit_t b = zero3_unit(L->z3, u);
            zero3_gather_unit_host(L->z3, u, buf);
            h = hash_floats(h, buf, b.begin, b.end - b.begin);
        }
        free(buf);
        return h;
    }
    if (!t->rep.gpu) return hash_floats(h, t->params, 0, t->total);
    comm_stream_sync(t->rep.c, t->cs, "the last step");
    const size_t chunk = (size_t)1 << 24;  // 64 MiB of host memory
    float* buf = malloc(chunk * sizeof(float));
    if (!buf) DIE("out of host memory");
    for (size_t a = 0; a < t->total; a += chunk) {
        const size_t n = t->total - a < chunk ? t->total - a : chunk;
        CUDA_CHECK(cudaMemcpy(buf, t->params + a, n * sizeof(float), cudaMemcpyDeviceToHost));
        h = hash_floats(h, buf, a, n);
    }
    free(buf);
    return h;
}

// The CPU model's flat buffers, grown to P elements (zeros at the end); its own AdamW moments
// freed: the optimizer lives outside the model now.
static void pad_cpu_model(model_cpu_t* m, size_t P) {
    const size_t total = m->layout.total;
    float* p = mem_alloc(DEV_CPU, P * sizeof(float), MEM_PARAMS);
    float* g = mem_alloc(DEV_CPU, P * sizeof(float), MEM_GRADS);
    memcpy(p, m->params, total * sizeof(float));
    memset(p + total, 0, (P - total) * sizeof(float));
    memset(g, 0, P * sizeof(float));
    mem_free(m->params);
    mem_free(m->grads);
    mem_free(m->adam_m);
    mem_free(m->adam_v);
    m->adam_m = m->adam_v = NULL;
    m->params = p;
    m->grads = g;
}

#define NT MEM_NTAGS
typedef struct {
    double ms[3];                 // medians: step, grad sync, update
    int n_coll;
    long long after[64][NT + 1];  // per rank: live bytes per tag after the last step's update; [NT] = peak
    long long phase[64][6];       // per rank: setup peak; the first step's fwd+bwd peak, optimizer-step peak and live
                                  // after; the later steps' peak and live after (phase_peaks_t)
    long long optim_meas[64], optim_formula[64];
    long long state_meas[64], state_formula[64];  // zero3: params + grads + optim, measured and 8S + 8 x owned
} result_t;

int main(int argc, char** argv) {
    const char *model_s = "tiny", *zero_s = "1", *zero2_s = "units", *shard_s = "zero", *backend_s = "auto", *prec_s = "fp32",
               *attn_s = "naive", *csv = "", *ckpt_s = "none";
    int context = 32, B = 2, steps = 5, warmup = 2, check = 0, seed = 1, layers = 0, keep_full = 0;
    double lr = 1e-3, timeout_s = 0, bucket_mb = 25;
    cli_opt_t opts[] = {
        {"model", CLI_CHOICE, &model_s, "tiny", "model size", MODEL_SIZE_CHOICES},
        {"context", CLI_INT, &context, "32", "sequence length T", NULL},
        {"layers", CLI_INT, &layers, "0", "blocks, in place of the size's own (0: the size's): a deeper model of the same width, to find the memory wall", NULL},
        {"batch", CLI_INT, &B, "2", "sequences per rank (the global batch is batch x ranks)", NULL},
        {"precision", CLI_CHOICE, &prec_s, "fp32", "GPU precision (the CPU model is fp32)", MODEL_PRECISION_CHOICES},
        {"attention", CLI_CHOICE, &attn_s, "naive", "GPU attention: naive, or flash (stage 04; bf16)", "naive|flash"},
        {"zero", CLI_STR, &zero_s, "1", "ZeRO levels to run: a comma list of 0 (DDP), 1, 2, 3, or all", NULL},
        {"zero2", CLI_CHOICE, &zero2_s, "units", "which ZeRO-2 level 2 runs: units (zero3.h's engine: no flat gradient buffer, fp32), staging (zero.h's, run zero2s: the backward writes the flat 4Psi gradient buffer), or both", "units|staging|both"},
        {"shard", CLI_CHOICE, &shard_s, "zero", "zero: ZeRO proper; course: the course's sharded optimizer in place of levels 1 and 2 (3 stays ZeRO-3)", "zero|course"},
        {"checkpoint", CLI_STR, &ckpt_s, "none", "activation checkpointing: none, block, or every-K (K >= 1); with --zero 2 or 3 (unit hooks) none or block only", NULL},
        {"bucket-mb", CLI_DOUBLE, &bucket_mb, "25", "bucket cap in MiB (DDP's buckets, ZeRO-2's buckets)", NULL},
        {"steps", CLI_INT, &steps, "5", "measured steps per run", NULL},
        {"warmup", CLI_INT, &warmup, "2", "steps before measuring (each run)", NULL},
        {"backend", CLI_CHOICE, &backend_s, "auto", "auto: nccl with a GPU per rank, else mpi", COMM_BACKEND_AUTO_CHOICES},
        {"check-ddp", CLI_INT, &check, "0", "1: run ddp too and compare every run's parameters with its own (rtol 1e-4, atol 1e-5)", NULL},
        {"keep-full", CLI_INT, &keep_full, "0", "1: even for one level, build the whole model first, pad it, keep a host copy of the initial parameters (what several levels or --check-ddp 1 always do); 0: one level is built sharded, so its setup peak is its own footprint (the memory wall)", NULL},
        {"seed", CLI_INT, &seed, "1", "rank r initialises from seed + r (rank 0's are broadcast), data from seed", NULL},
        {"lr", CLI_DOUBLE, &lr, "1e-3", "AdamW learning rate", NULL},
        {"csv", CLI_STR, &csv, "", "append the timing rows to this CSV (rank 0)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv, "Sharded-optimizer training of the Transformer LM: DDP, ZeRO-1, ZeRO-2, ZeRO-3, the course's version (run under mpirun). "
                   "A single level (--zero K without --check-ddp or --keep-full) is the memory-faithful run: its model is built "
                   "sharded (padded flat buffers from the start; ZeRO-3 without any whole-model buffer), so the setup peak it "
                   "prints is that level's own; several levels share one unsharded model and a host copy of it.",
                   opts, CLI_COUNT(opts));
#define BAD(...) comm_bad_input(__VA_ARGS__)
    trainer_t t = {0};
    model_config_t cfg;
    if (model_config_by_name(model_s, context, &cfg) != 0) BAD("--model: unknown size '%s'", model_s);
    if (layers < 0 || layers > 4096) BAD("--layers: %d is out of range (0 for the size's own, or 1..4096)", layers);
    if (layers > 0) cfg.n_layers = layers;
    char model_label[64];  // "2.7B", or "2.7B/L80" with --layers
    if (layers > 0) snprintf(model_label, sizeof model_label, "%s/L%d", model_s, layers);
    else snprintf(model_label, sizeof model_label, "%s", model_s);
    if (context < 1 || context > 65536) BAD("--context: %d is out of range (1..65536)", context);
    if (B < 1 || B > 4096) BAD("--batch: %d is out of range (1..4096)", B);
    if (steps < 1 || steps > 100000) BAD("--steps: %d is out of range (1..100000)", steps);
    if (warmup < 0 || warmup > 1000) BAD("--warmup: %d is out of range (0..1000)", warmup);
    if (check != 0 && check != 1) BAD("--check-ddp: %d must be 0 or 1", check);
    if (keep_full != 0 && keep_full != 1) BAD("--keep-full: %d must be 0 or 1", keep_full);
    if (!(lr > 0 && lr < 10)) BAD("--lr: %g is out of range (0, 10)", lr);
    if (!(bucket_mb >= 0 && bucket_mb <= 1e6)) BAD("--bucket-mb: %g is out of range [0, 1e6]", bucket_mb);
    int ckpt = 0;
    {
        char why[160];
        if (model_ckpt_parse(ckpt_s, &ckpt, why, sizeof why) != 0) BAD("--checkpoint: %s", why);
    }
    const int course = strcmp(shard_s, "course") == 0;
    run_kind_t runs[N_RUN_KINDS];
    int nruns = 0, want[N_RUN_KINDS] = {0};
    {
        char buf[128], why[256];
        if (*zero_s && list_check_items("zero", zero_s, why, sizeof why) != 0) BAD("%s", why);
        if (strlen(zero_s) >= sizeof buf) BAD("--zero: longer than %zu characters", sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", strcmp(zero_s, "all") == 0 ? "0,1,2,3" : zero_s);
        int any = 0;
        for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            if (strcmp(tok, "0") && strcmp(tok, "1") && strcmp(tok, "2") && strcmp(tok, "3"))
                BAD("--zero: '%s' is not a level (allowed: a comma list of 0, 1, 2, 3, or all)", tok);
            const int lv = tok[0] - '0';
            if (lv == 2 && !course) {  // the new ZeRO-2 and/or the older staging one (--zero2)
                want[RUN_ZERO2] |= strcmp(zero2_s, "staging") != 0;
                want[RUN_ZERO2S] |= strcmp(zero2_s, "units") != 0;
            } else {
                want[lv == 0 ? RUN_DDP : lv == 1 ? (course ? RUN_COURSE : RUN_ZERO1) : lv == 2 ? RUN_COURSE : RUN_ZERO3] = 1;
            }
            any = 1;
        }
        if (!any) BAD("--zero: empty list (allowed: a comma list of 0, 1, 2, 3, or all)");
        if (check) want[RUN_DDP] = 1;  // the reference, run first
        for (int k = 0; k < N_RUN_KINDS; k++)
            if (want[k]) runs[nruns++] = (run_kind_t)k;
    }

    comm_backend_t backend;
    comm_backend_choose(backend_s, &backend);  // the flag's choices were checked by the parser
    const model_precision_t prec = strcmp(prec_s, "bf16") == 0 ? MP_BF16 : MP_FP32;
    if (backend == COMM_MPI && prec != MP_FP32) BAD("--precision bf16 needs the GPU (NCCL) backend");
    if (backend == COMM_MPI && strcmp(attn_s, "flash") == 0) BAD("--attention flash needs the GPU (NCCL) backend");
    if (want[RUN_ZERO2] && prec != MP_FP32)
        BAD("--zero 2 runs fp32 only: its gradients go through the model's windows, which are fp32 only (use --precision fp32, or --zero2 staging)");
    if (want[RUN_ZERO3] && prec != MP_FP32)
        BAD("--zero 3 runs fp32 only: bf16 compute copies of the gathered units are not implemented (use --precision fp32, or levels 0-2)");
    // ZeRO-2/3's unit hooks hold one unit's parameters at a time (two working buffers): a
    // segment of K > 1 blocks would need K of them for its recompute (model_cpu.h).
    if (ckpt > 1 && (want[RUN_ZERO2] || want[RUN_ZERO3]))
        BAD("--checkpoint %s with --zero 2 or 3: %s (use --checkpoint block)", ckpt_s, MODEL_CKPT_HOOKS_REFUSAL);
    {  // the output place, checked before any work (rank 0 appends to it at the end)
        char why[1024];
        if (*csv && file_check_writable(csv, 0, why, sizeof why) != 0) BAD("--csv: %s", why);
    }
    const double comm_timeout = comm_timeout_flag(timeout_s);
    {  // handed over by 06's ddp_train (--zero/--shard): its notice, now that the flags are accepted
        const char* handoff = getenv("ZERO_TRAIN_HANDOFF");
        if (handoff && *handoff && comm_env_rank() == 0) printf("%s\n", handoff);
        fflush(stdout);
    }
    comm_t* c = comm_init(backend, comm_timeout);
    const int W = c->world, r = c->rank;
    if (W > 64) comm_refuse(c, "at most 64 ranks (got %d)", W);
    const attention_impl_t* attn = strcmp(attn_s, "flash") == 0 ? flash_attention_impl() : NULL;
    t.opt = adamw_default();
    t.opt.lr = (float)lr;
    t.seed0 = seed;
    // The flat buffers padded so that they split into W equal, aligned shards.
    {
        param_layout_t lay = param_layout_make(&cfg);
        t.P = zero_padded_total(lay.total, W);
        param_layout_free(&lay);
    }
    // Lean: one level, nothing to compare with, so nothing is kept that the level does not
    // need. Levels 0-2 get the model with padded buffers from the start (no padded copy beside
    // the unpadded ones); ZeRO-3 gets it without flat buffers and makes its shard from the seed.
    t.lean = nruns == 1 && !check && !keep_full;
    const int lean_z3 = t.lean && runs[0] == RUN_ZERO3, lean_z2 = t.lean && runs[0] == RUN_ZERO2;
    if (t.lean) {
        replica_create_flat_ckpt(&t.rep, c, &cfg, B, context, prec, attn, seed,
                                 lean_z3 ? MODEL_GPU_NO_FLAT : lean_z2 ? t.P | MODEL_GPU_NO_FLAT_GRADS : t.P, ckpt);
        if (!t.rep.gpu) {  // the CPU model's own AdamW moments: the optimizer lives outside it
            mem_free(t.rep.cpu.adam_m);
            mem_free(t.rep.cpu.adam_v);
            t.rep.cpu.adam_m = t.rep.cpu.adam_v = NULL;
        }
    } else {
        replica_create_ckpt(&t.rep, c, &cfg, B, context, prec, attn, seed, ckpt);
    }
    t.dev = t.rep.gpu ? DEV_CUDA : DEV_CPU;
    if (t.rep.gpu) {
        char err[512];
        if (!t.lean) comm_check_input(c, model_gpu_pad_flat(t.rep.m, t.P, err, sizeof err) == 0, "%s", err);
        t.params = model_gpu_params(t.rep.m);  // (NULL for lean ZeRO-3)
        t.grads = model_gpu_grads(t.rep.m);
        t.cs = model_gpu_stream(t.rep.m);
    } else {
        if (!t.lean) pad_cpu_model(&t.rep.cpu, t.P);
        t.params = t.rep.cpu.params;
        t.grads = t.rep.cpu.grads;
    }
    t.total = t.rep.lay->total;
    const size_t psi = param_count(t.rep.lay);
    // What the model's acts tag must hold with this checkpointing policy (the same on every rank).
    const size_t acts_formula = t.rep.gpu ? model_gpu_acts_bytes(t.rep.m) : model_cpu_acts_bytes(&cfg, B, context, ckpt);

    // Rank 0's parameters everywhere (the whole padded buffer), kept as every run's start
    // (lean: not kept; lean ZeRO-3: no buffer, each rank makes its shard from rank 0's seed).
    if (t.params) {
        comm_broadcast(t.rep.c, t.params, t.params, t.P, COMM_F32, 0, t.cs);
        comm_stream_sync(t.rep.c, t.cs, "the first broadcast");
    }
    float *init = NULL, *ref = NULL, *got = NULL;
    if (!t.lean) {
        init = malloc(t.P * sizeof(float));
        ref = malloc(t.total * sizeof(float));
        got = malloc(t.total * sizeof(float));
        if (!init || !ref || !got) DIE("out of host memory");
        if (t.rep.gpu) CUDA_CHECK(cudaMemcpy(init, t.params, t.P * sizeof(float), cudaMemcpyDeviceToHost));
        else memcpy(init, t.params, t.P * sizeof(float));
    }

    if (r == 0) {
        gpu_info_t gi = {0};
        if (t.rep.gpu) gpu_info(t.rep.c->device, &gi);
        size_t s0, s1;
        zero_shard_range(t.total, W, 0, &s0, &s1, NULL);
        int cuts = 0;  // shard boundaries strictly inside a parameter
        for (int k = 1; k < W; k++)
            for (int i = 0; i < t.rep.lay->n; i++)
                cuts += t.rep.table[i].offset < k * s1 && k * s1 < t.rep.table[i].offset + t.rep.table[i].numel;
        printf("# zero_train: %s, context %d, batch %d per rank x %d ranks, %s, %s backend%s%s, %zu parameters (%.2f GB fp32)\n",
               model_label, context, B, W, prec_s, comm_backend_name(backend), t.rep.gpu ? ", GPU " : "", t.rep.gpu ? gi.name : "", psi,
               4e-9 * (double)psi);
        printf("# shards: %d x %zu elements, padded total %zu (layout %zu, padding %zu); %d shard boundar%s cut%s through a parameter\n",
               W, s1, t.P, t.total, t.P - t.total, cuts, cuts == 1 ? "y" : "ies", cuts == 1 ? "s" : "");
        printf("# per run: %d warm-up steps, then the median of %d; bucket cap %g MiB; every run starts from the same parameters\n",
               warmup, steps, bucket_mb);
        char kn[32];
        printf("# activation checkpointing: %s (activations a rank by the formula: %zu bytes = %.2f MiB)\n\n",
               model_ckpt_name(ckpt, kn, sizeof kn), acts_formula, acts_formula / 1048576.0);
    }

    int status = 0;
    result_t* res = calloc((size_t)nruns, sizeof *res);
    if (!res) DIE("out of host memory");
    for (int ri = 0; ri < nruns; ri++) {
        result_t* R = &res[ri];
        // The setup peak: the first run's counts the model's creation (unless lean: the whole
        // model and its padded copy at once), a later run's only its own layer.
        if (ri > 0) mem_reset_peak(t.dev);
        if (!t.lean) set_params(&t, init);
        const size_t optim0 = mem_stats(t.dev).live_by_tag[MEM_OPTIM];
        layer_t L;
        layer_create(&t, &L, runs[ri], bucket_mb);
        R->n_coll = layer_collectives(&L);
        {  // the largest rank's setup peak, and its live bytes by tag at that moment
            const mem_stats_t sm = mem_stats(t.dev);
            long long v[NT + 1];
            for (int g = 0; g < NT; g++) v[g] = (long long)sm.at_peak_by_tag[g];
            v[NT] = (long long)sm.peak;
            R->phase[r][0] = v[NT];
            long long mx = v[NT];
            comm_host_allreduce_i64(t.rep.c, &mx, 1, COMM_MAX);
            long long who = v[NT] == mx ? r : 64;  // the lowest rank with the largest peak
            comm_host_allreduce_i64(t.rep.c, &who, 1, COMM_MIN);
            for (int g = 0; g <= NT; g++) v[g] = who == r ? v[g] : 0;  // its numbers, to rank 0
            comm_host_allreduce_i64(t.rep.c, v, NT + 1, COMM_SUM);
            if (r == 0) {
                const double MiB = 1048576.0;
                printf("  %-7s setup peak (rank %lld, %s): %.2f MiB = params %.2f + grads %.2f + optim %.2f + acts %.2f + workspace+other %.2f MiB (%s)\n",
                       run_names[runs[ri]], who, t.rep.gpu ? "device" : "host", v[NT] / MiB, v[MEM_PARAMS] / MiB, v[MEM_GRADS] / MiB,
                       v[MEM_OPTIM] / MiB, v[MEM_ACTS] / MiB, (v[MEM_WORKSPACE] + v[MEM_OTHER]) / MiB,
                       t.lean ? (t.rep.gpu ? "lean: built sharded" : "lean; the CPU model is built whole first") : "whole model built first, shared by the runs");
                fflush(stdout);
            }
        }
        if (L.z3 && r == 0) {  // the per-unit shard layout (zero3.h; zero2: of the gradient only)
            const int U = zero3_n_units(L.z3);
            size_t pad = 0;
            int cuts = 0;  // piece boundaries strictly inside a parameter
            for (int u = 0; u < U; u++) {
                const zero3_unit_t b = zero3_unit(L.z3, u);
                pad += (size_t)W * b.piece - (b.end - b.begin);
                for (int k = 1; k < W; k++) {
                    const size_t x = b.begin + (size_t)k * b.piece;
                    for (int i = 0; i < t.rep.lay->n; i++)
                        cuts += t.rep.table[i].offset < x && x < t.rep.table[i].offset + t.rep.table[i].numel;
                }
            }
            printf("  %-7s %d units sharded %d ways: a shard of %zu elements a rank (unit padding %zu); %d piece boundar%s cut%s through a parameter\n",
                   run_names[runs[ri]], U, W, zero3_shard_elems(L.z3), pad, cuts, cuts == 1 ? "y" : "ies", cuts == 1 ? "s" : "");
        }
        double* st = malloc((size_t)steps * 3 * sizeof(double));
        if (!st) DIE("out of host memory");
        phase_peaks_t pk1 = {0, 0, 0}, pk = {0, 0, 0};  // the first step (the moments appear in it); every later one
        for (int k = 0; k < warmup + steps; k++) {
            double ms[3];
            const float loss = train_step(&t, &L, k, ms, k == 0 ? &pk1 : &pk);
            if (k >= warmup)
                for (int q = 0; q < 3; q++) st[q * steps + k - warmup] = ms[q];
            if (!isfinite(loss)) comm_fatal(t.rep.c, 1, "%s: loss is %g at step %d", run_names[runs[ri]], loss, k);
            if (r == 0 && check) printf("  %-7s step %3d  loss %.5f (rank 0)  %.1f ms\n", run_names[runs[ri]], k, loss, ms[0]);
        }
        for (int q = 0; q < 3; q++) {
            R->ms[q] = stats_compute(st + q * steps, steps).median;
            comm_host_allreduce_f64(t.rep.c, &R->ms[q], 1, COMM_MAX);  // the slowest rank
        }
        free(st);
        // Memory of every rank, by tag, after the last update; optimizer state vs the formula.
        const mem_stats_t ms = mem_stats(t.dev);
        for (int g = 0; g < NT; g++) R->after[r][g] = (long long)ms.live_by_tag[g];
        const long long p1 = pk1.fb > pk1.opt ? pk1.fb : pk1.opt, p2 = pk.fb > pk.opt ? pk.fb : pk.opt;
        R->after[r][NT] = p1 > p2 ? p1 : p2;  // the whole step's peak, every step
        R->phase[r][1] = pk1.fb, R->phase[r][2] = pk1.opt, R->phase[r][3] = pk1.after;
        R->phase[r][4] = p2, R->phase[r][5] = pk.after;
        R->optim_meas[r] = (long long)(ms.live_by_tag[MEM_OPTIM] - optim0);
        R->optim_formula[r] = (long long)(2 * sizeof(float) * owned_elems(&t, &L));
        int z3_grads_ok = 1, z3_work_ok = 1;  // zero2/3: grads are the shard alone; the working buffers
        size_t z3_S = 0, z3_work = 0;
        if (L.z3) {  // zero3: 16Psi/n with the padding: 4S params + 4S grads + 8 x owned trainable;
                     // zero2: 4Psi + 12Psi/n with the padding: 4P flat params + 4S grads + 8 x owned
            z3_S = zero3_shard_elems(L.z3);
            z3_work = zero3_work_bytes(L.z3);
            R->state_meas[r] = state_bytes(t.dev) - L.state0;
            R->state_formula[r] = (long long)(sizeof(float) * (zero3_level(L.z3) == 3 ? 2 * z3_S : t.P + z3_S)) + R->optim_formula[r];
            const zero3_stats_t zs = zero3_stats(L.z3);
            R->n_coll = (int)((zs.ag_calls + zs.rs_calls) / zs.steps);
            // Exact bytes: no gradient buffer of the whole model anywhere (the model's is gone),
            // and the workspace zero3 added is its working buffers, nothing else.
            z3_grads_ok = ms.live_by_tag[MEM_GRADS] == z3_S * sizeof(float);
            z3_work_ok = L.work == (long long)z3_work;
            long long f[2] = {z3_grads_ok, z3_work_ok};
            comm_host_allreduce_i64(t.rep.c, f, 2, COMM_MIN);
            z3_grads_ok = (int)f[0], z3_work_ok = (int)f[1];
        }
        comm_host_allreduce_i64(t.rep.c, &R->after[0][0], 64 * (NT + 1), COMM_SUM);
        comm_host_allreduce_i64(t.rep.c, &R->phase[0][0], 64 * 6, COMM_SUM);
        comm_host_allreduce_i64(t.rep.c, R->state_meas, 64, COMM_SUM);
        comm_host_allreduce_i64(t.rep.c, R->state_formula, 64, COMM_SUM);
        comm_host_allreduce_i64(t.rep.c, R->optim_meas, 64, COMM_SUM);
        comm_host_allreduce_i64(t.rep.c, R->optim_formula, 64, COMM_SUM);
        // Replicas bitwise identical (the layout's elements; padding is never a parameter).
        unsigned long long h;
        if (t.lean) {
            h = lean_params_hash(&t, &L);
            layer_destroy(&t, &L);
        } else {
            layer_destroy(&t, &L);
            get_params(&t, got);
            h = hash_floats(0, got, 0, t.total);
        }
        long long v[2] = {(long long)(h >> 1), -(long long)(h >> 1)};
        comm_host_allreduce_i64(t.rep.c, v, 2, COMM_MAX);
        const int same = v[0] == -v[1];
        int optim_ok = 1;
        long long optim_sum = 0;
        for (int k = 0; k < W; k++) {
            optim_ok &= R->optim_meas[k] == R->optim_formula[k];
            optim_sum += R->optim_meas[k];
        }
        // DDP: every rank holds all 8Ψ; sharded: every trainable element owned exactly once.
        optim_ok &= optim_sum == (long long)(8 * psi) * (runs[ri] == RUN_DDP ? W : 1);
        int state_ok = 1;
        if (runs[ri] == RUN_ZERO3 || runs[ri] == RUN_ZERO2) {
            long long sum = 0;
            for (int k = 0; k < W; k++) {
                state_ok &= R->state_meas[k] == R->state_formula[k];
                sum += R->state_meas[k];
            }
            if (r == 0 && runs[ri] == RUN_ZERO3)
                printf("  %-7s params + grads + optimizer state %s 16Psi/n on every rank (8 x shard + 8 x owned; %lld bytes over all ranks, 16Psi = %lld)\n",
                       run_names[runs[ri]], state_ok ? "==" : "!=", sum, (long long)(16 * psi));
            if (r == 0 && runs[ri] == RUN_ZERO2)
                printf("  %-7s params + grads + optimizer state %s 4Psi+12Psi/n on every rank (4 x padded flat %zu + 4 x shard + 8 x owned; %lld bytes over all ranks, 4Psi x n + 12Psi = %lld)\n",
                       run_names[runs[ri]], state_ok ? "==" : "!=", t.P, sum, (long long)(4 * psi) * W + (long long)(12 * psi));
            if (r == 0)
                printf("  %-7s grads %s the shard on every rank (4 x %zu = %zu bytes, no whole-model gradient buffer); working buffers %s %zu bytes on every rank (workspace: %s)\n",
                       run_names[runs[ri]], z3_grads_ok ? "==" : "!=", z3_S, z3_S * sizeof(float), z3_work_ok ? "==" : "!=", z3_work,
                       runs[ri] == RUN_ZERO3 ? "2 parameter + 2 gradient buffers of the largest padded unit"
                                             : "2 gradient buffers of the largest padded unit + one piece");
            if (!state_ok || !z3_grads_ok || !z3_work_ok) status = 1;
        }
        if (r == 0) {
            printf("  %-7s done: %.2f ms a step; replicas %s; optimizer state %s the formula on every rank (%lld bytes over all ranks, Psi = %zu); parameter hash %016llx\n",
                   run_names[runs[ri]], R->ms[0], same ? "bitwise identical on every rank" : "DIFFERENT across ranks",
                   optim_ok ? "==" : "!=", optim_sum, psi, h);
            fflush(stdout);
        }
        if (!same || !optim_ok) status = 1;
        {  // the activations every rank keeps, against the formula for the policy
            int acts_ok = 1;
            for (int k = 0; k < W; k++) acts_ok &= R->after[k][MEM_ACTS] == (long long)acts_formula;
            char kn[32];
            if (r == 0)
                printf("  %-7s activations on every rank %s the acts formula (checkpoint %s: %zu bytes)\n", run_names[runs[ri]],
                       acts_ok ? "==" : "!=", model_ckpt_name(ckpt, kn, sizeof kn), acts_formula);
            if (!acts_ok) status = 1;
        }
        if (check && r == 0) {
            if (runs[ri] == RUN_DDP) {
                memcpy(ref, got, t.total * sizeof(float));
            } else {
                size_t bad = 0, worst = 0, bitwise = 0;
                double worst_err = 0;
                for (size_t i = 0; i < t.total; i++) {
                    const double e = fabs((double)got[i] - ref[i]), tol = CHECK_ATOL + CHECK_RTOL * fabs((double)ref[i]);
                    bitwise += got[i] == ref[i];
                    if (!(e <= tol)) bad++;
                    if (!(e <= worst_err)) { worst_err = e; worst = i; }
                }
                printf("check-ddp: %s: %zu of %zu parameters differ beyond rtol %g, atol %g (%zu bitwise equal; max |diff| %.3g at %zu)\n",
                       run_names[runs[ri]], bad, t.total, CHECK_RTOL, CHECK_ATOL, bitwise, worst_err, worst);
                if (bad) status = 1;
            }
        }
    }

    if (r == 0) {
        const double ddp_ms = want[RUN_DDP] ? res[0].ms[0] : 0;
        printf("\n| run    | collectives/step | step (ms) | grad sync (ms) | update (ms) | over ddp |\n");
        printf("|--------|------------------|-----------|----------------|-------------|----------|\n");
        FILE* f = NULL;
        if (*csv) {
            f = fopen(csv, "a");
            if (!f) DIE("--csv: cannot open %s: %s", csv, strerror(errno));
            fseek(f, 0, SEEK_END);
            if (ftell(f) == 0) fprintf(f, "model,context,batch,ranks,precision,backend,run,bucket_mb,collectives,step_ms,sync_ms,update_ms,optim_bytes_rank0,peak_bytes_rank0\n");
        }
        for (int ri = 0; ri < nruns; ri++) {
            char ov[32] = "";
            if (ddp_ms > 0) snprintf(ov, sizeof ov, "%+.1f%%", 100.0 * (res[ri].ms[0] / ddp_ms - 1.0));
            printf("| %-6s | %16d | %9.2f | %14.2f | %11.2f | %8s |\n", run_names[runs[ri]], res[ri].n_coll, res[ri].ms[0],
                   res[ri].ms[1], res[ri].ms[2], ov);
            if (f) fprintf(f, "%s,%d,%d,%d,%s,%s,%s,%g,%d,%.3f,%.3f,%.3f,%lld,%lld\n", model_label, context, B, W, prec_s,
                           comm_backend_name(backend), run_names[runs[ri]], bucket_mb, res[ri].n_coll, res[ri].ms[0],
                           res[ri].ms[1], res[ri].ms[2], res[ri].optim_meas[0], res[ri].after[0][NT]);
        }
        if (f) fclose(f);
        // Memory: MiB per rank by tag after the last update, the run's peak, and the model
        // state (params + grads + optim) beside its formula with Ψ = the parameter count.
        const double MiB = 1048576.0, P4 = 4.0 * (double)psi;
        printf("\n| run    | rank | params | grads | optim | acts | workspace+other | peak | state = p+g+o | formula (bytes) |\n");
        printf("|--------|------|--------|-------|-------|------|-----------------|------|---------------|-----------------|\n");
        for (int ri = 0; ri < nruns; ri++) {
            for (int k = 0; k < W; k++) {
                const long long* a = res[ri].after[k];
                const long long state = a[MEM_PARAMS] + a[MEM_GRADS] + a[MEM_OPTIM];
                char fm[64];
                switch (runs[ri]) {
                case RUN_DDP: snprintf(fm, sizeof fm, "16Psi = %.2f MiB", 4 * P4 / MiB); break;
                case RUN_ZERO1: snprintf(fm, sizeof fm, "8Psi+8Psi/n = %.2f MiB", (2 * P4 + 2 * P4 / W) / MiB); break;
                case RUN_ZERO2: snprintf(fm, sizeof fm, "4Psi+12Psi/n = %.2f MiB", (P4 + 3 * P4 / W) / MiB); break;
                case RUN_ZERO2S: snprintf(fm, sizeof fm, "8Psi+12Psi/n = %.2f MiB", (2 * P4 + 3 * P4 / W) / MiB); break;
                case RUN_ZERO3: snprintf(fm, sizeof fm, "16Psi/n = %.2f MiB", 4 * P4 / W / MiB); break;
                default: snprintf(fm, sizeof fm, "8Psi+8Psi_r = %.2f MiB", (2 * P4 + (double)res[ri].optim_formula[k]) / MiB); break;
                }
                printf("| %-6s | %4d | %6.2f | %5.2f | %5.2f | %4.2f | %15.2f | %4.2f | %13.2f | %15s |\n", run_names[runs[ri]], k,
                       a[MEM_PARAMS] / MiB, a[MEM_GRADS] / MiB, a[MEM_OPTIM] / MiB, a[MEM_ACTS] / MiB,
                       (a[MEM_WORKSPACE] + a[MEM_OTHER]) / MiB, a[NT] / MiB, state / MiB, fm);
            }
        }
        printf("(MiB; params and grads include the padding to %zu elements; zero2's grads = its gradient shard alone (per-unit "
               "padding), its two one-unit gradient working buffers and one piece are workspace; zero2s's (the older staging "
               "ZeRO-2) = the model's flat gradient buffer, which its backward writes, + the kept %zu-element shard; zero3's "
               "params and grads = its shards alone, the four one-unit working buffers are workspace: see README)\n", t.P, t.P / W);
        // The peaks by phase (the handout's question): after initialisation (the setup peak); in
        // the first step, before the optimizer step (forward, backward, gradient sync), during it
        // (AdamW allocates its moments there) and live after it; then the later steps' peak and
        // what stays live between them (warm-up steps included: steps >= 1 all look alike).
        printf("\n| run    | rank | after init | step 1: before optimizer step | step 1: optimizer step | step 1: live after | "
               "later steps: peak | later steps: live after |\n");
        printf("|--------|------|------------|-------------------------------|------------------------|--------------------|"
               "-------------------|-------------------------|\n");
        for (int ri = 0; ri < nruns; ri++)
            for (int k = 0; k < W; k++) {
                const long long* q = res[ri].phase[k];
                printf("| %-6s | %4d | %10.2f | %29.2f | %22.2f | %18.2f | %17.2f | %23.2f |\n", run_names[runs[ri]], k,
                       q[0] / MiB, q[1] / MiB, q[2] / MiB, q[3] / MiB, q[4] / MiB, q[5] / MiB);
            }
        printf("(MiB, peaks by phase from the counting allocator, per rank: each the most live at once since the phase "
               "before; after init counts the model's creation%s)\n", t.lean ? "" : " (several levels: the whole model built once, shared)");
    }
    long long st_all = status;
    comm_host_allreduce_i64(t.rep.c, &st_all, 1, COMM_MAX);
    replica_destroy(&t.rep);
    free(res);
    free(init);
    free(ref);
    free(got);
    comm_destroy(c, 1);
    return (int)st_all;
}
