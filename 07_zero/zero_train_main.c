// zero_train: the Transformer LM trained data-parallel with sharded optimizer state.
//
//   scripts/mpirun.sh 2 build/07_zero/zero_train --model xl --context 512 --batch 2 --zero all
//   scripts/mpirun.sh 3 build/07_zero/zero_train --model tiny --zero all --check-ddp 1   # CPU, MPI
//   scripts/mpirun.sh 2 build/07_zero/zero_train --zero 0,1 --shard course               # the course's
//   scripts/mpirun.sh 4 build/07_zero/zero_train --model tiny --zero 0,3 --check-ddp 1       # ZeRO-3
//   scripts/mpirun.sh 2 build/07_zero/zero_train --zero 2 --zero2 both    # ZeRO-2 beside the old staging one
//   scripts/mpirun.sh 2 build/07_zero/zero_train --model xl --context 512 --batch 2 --zero 3 --checkpoint block
//   scripts/mpirun.sh --emulate-nodes 2 4 build/07_zero/zero_train --model tiny --zero 0,hsdp --check-ddp 1  # HSDP
//
// One run per level in --zero (zero_layer.h: ddp, zero1, zero2, zero2s with --zero2 staging or
// both, zero3, and course with --shard course in place of zero1/zero2), each from the same
// initial parameters (rank 0's, broadcast) on the same global batches (batch × ranks rows a
// step, a pure function of the seed and the step within the run; rank r trains on its slice).
// AdamW's moments live in the layer (the CPU model's own are freed; the GPU model's are never
// allocated), so the allocator's optim tag shows exactly what each level keeps.
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
// --precision bf16: on the GPU the model's mixed precision (model_gpu.h); on the CPU its bf16
// parameters with fp32 compute (model_cpu.h), levels 0, 1, zero2s and course reading the flat
// buffer's rounded copy. ZeRO-3 in bf16 is FSDP with MixedPrecisionPolicy(param_dtype=bf16):
// fp32 master shard and moments, each unit's all-gather moving the shard's bf16 compute copy
// (half the bytes: a line prints the all-gather and reduce-scatter bytes a step), the gradient
// reduce-scatter in fp32 or, with --reduce-dtype bf16, in bf16 (zero3.h zero3_set_mixed).
// ZeRO-2 on units (--zero2 units) stays fp32.
// Backends: the CPU model over MPI (host memory), or the CUDA model over NCCL (one GPU a rank).
// The flat buffers are padded to n equal 64-aligned shards (zero_shard_range) for every run.
// Setup: several levels (or --check-ddp 1, or --keep-full 1) share one model built whole, then
// padded, and a host copy of the initial parameters that restarts each run. A single level is
// LEAN, built the way it keeps its state so that its setup peak is its own (the memory wall):
// levels 0-1 (and zero2s) get padded flat buffers from the start (lm.h's LM_FLAT_PADDED), ZeRO-2
// padded parameters and no gradient buffer (LM_FLAT_PARAMS), ZeRO-3 a model with no flat
// buffers (LM_FLAT_NONE) and a shard made piece by piece from the seed (zero3_create_init with
// model_init_params_range); the replicas are then compared by a hash taken without a
// whole-model buffer (zero_layer_params_hash). Both end with the same bits (test_07 sharded_construction_*).
// The step itself is the shared training loop's (common/train_loop.h); each run's layer is its
// method: the backward's hook, finish_grads, and the update (the layer's optimizer step).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "04_flashattn_bwd/flash_bwd.h"
#include "06_ddp/ddp.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"
#include "07_zero/zero3.h"
#include "07_zero/zero_layer.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/lm.h"
#include "common/train_loop.h"

// --check-ddp: the levels average the same gradients in another grouping (reduce-scatter
// chunks instead of all-reduce buckets), so equal up to fp32 summation order that AdamW's
// normalisation can amplify for near-zero second moments (stage 06's --check-single band).
#define CHECK_RTOL 1e-4
#define CHECK_ATOL 1e-5
#define BAD(...) comm_bad_input(__VA_ARGS__)

typedef struct {
    train_setup_t s;            // the communicator, the replica (model, table, data), AdamW's settings
    lm_t* m;                    // s.rep.m
    size_t total, P;            // layout elements, padded elements
    float* init;                // (not lean) the runs' initial parameters, host
    int reduce_bf16;            // --reduce-dtype bf16 (zero3 on a bf16 model)
    int lean;                   // one level, sharded construction: no whole-model copy anywhere
                                // (zero2: no flat gradient buffer; zero3: no flat buffers); see main()
} trainer_t;

static long long state_bytes(device_t dev) {  // live parameters + gradients + optimizer state
    const mem_stats_t ms = mem_stats(dev);
    return (long long)(ms.live_by_tag[MEM_PARAMS] + ms.live_by_tag[MEM_GRADS] + ms.live_by_tag[MEM_OPTIM]);
}

#define NT MEM_NTAGS
typedef struct {
    double ms[4];                 // medians: step, grad sync, update (, comm: train_run's)
    int n_coll;
    long long after[64][NT + 1];  // per rank: live bytes per tag after the last step's update; [NT] = peak
    long long phase[64][6];       // per rank: setup peak; the first step's fwd+bwd peak, optimizer-step peak and live
                                  // after; the later steps' peak and live after
    long long optim_meas[64], optim_formula[64];
    long long state_meas[64], state_formula[64];  // zero3: params + grads + optim, measured and 8S + 8 x owned
} result_t;

// The counting allocator's peaks by phase of a step (the handout's "after initialisation,
// before and after the optimizer step"), each the most bytes live at once since the phase before
// it (train_times_t): the forward, backward and gradient communication up to the optimizer
// step; the optimizer step itself (AdamW, ZeRO's all-gathers; the moments appear in the first
// one); and what stays live after it. Kept for the first step and as the most over the later
// ones; with --check-ddp rank 0 prints every step.
typedef struct {
    const char* name;
    int print;
    long long fb1, opt1, after1, fb, opt, after;
    comm_t* c;       // --check-single: every step's global mean loss (the ranks' means averaged) into loss[k]
    double* loss;
} step_watch_t;
static void watch_step(void* ctx, int k, const train_times_t* t) {
    step_watch_t* w = ctx;
    if (w->loss) {  // (every rank runs this: a collective)
        double l = t->loss;
        comm_host_allreduce_f64(w->c, &l, 1, COMM_SUM);
        w->loss[k] = l / w->c->world;
    }
    if (k == 0) {
        w->fb1 = t->peak_fb, w->opt1 = t->peak_update, w->after1 = t->live_after;
    } else {
        if (t->peak_fb > w->fb) w->fb = t->peak_fb;
        if (t->peak_update > w->opt) w->opt = t->peak_update;
        w->after = t->live_after;
    }
    if (w->print) printf("  %-7s step %3d  loss %.5f (rank 0)  %.1f ms\n", w->name, k, t->loss, t->step_ms);
}

static long long max3(long long a, long long b, long long c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// The levels to run, in run order, from --zero, --zero2, --shard and --check-ddp; returns how many.
static int parse_runs(const char* zero_s, const char* zero2_s, int course, int check, zl_kind_t* runs, int* want) {
    char buf[128], why[256];
    if (*zero_s && list_check_items("zero", zero_s, why, sizeof why) != 0) BAD("%s", why);
    if (strlen(zero_s) >= sizeof buf) BAD("--zero: longer than %zu characters", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", strcmp(zero_s, "all") == 0 ? "0,1,2,3" : zero_s);
    int any = 0, nruns = 0;
    for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "hsdp") == 0) {  // ZeRO-3 inside a node, replicas across nodes
            want[ZL_HSDP] = any = 1;
            continue;
        }
        if (strcmp(tok, "0") && strcmp(tok, "1") && strcmp(tok, "2") && strcmp(tok, "3"))
            BAD("--zero: '%s' is not a level (allowed: a comma list of 0, 1, 2, 3, hsdp, or all)", tok);
        const int lv = tok[0] - '0';
        if (lv == 2 && !course) {  // the new ZeRO-2 and/or the older staging one (--zero2)
            want[ZL_ZERO2] |= strcmp(zero2_s, "staging") != 0;
            want[ZL_ZERO2S] |= strcmp(zero2_s, "units") != 0;
        } else {
            want[lv == 0 ? ZL_DDP : lv == 1 ? (course ? ZL_COURSE : ZL_ZERO1) : lv == 2 ? ZL_COURSE : ZL_ZERO3] = 1;
        }
        any = 1;
    }
    if (!any) BAD("--zero: empty list (allowed: a comma list of 0, 1, 2, 3, hsdp, or all)");
    if (check) want[ZL_DDP] = 1;  // the reference, run first
    for (int k = 0; k < ZL_N; k++)
        if (want[k]) runs[nruns++] = (zl_kind_t)k;
    return nruns;
}

// The largest rank's setup peak and its live bytes by tag at that moment, printed by rank 0.
static void report_setup_peak(trainer_t* t, zl_kind_t kind, result_t* R) {
    const int r = t->s.c->rank;
    const mem_stats_t sm = mem_stats(lm_device(t->m));
    long long v[NT + 1];
    for (int g = 0; g < NT; g++) v[g] = (long long)sm.at_peak_by_tag[g];
    v[NT] = (long long)sm.peak;
    R->phase[r][0] = v[NT];
    long long mx = v[NT];
    comm_host_allreduce_i64(t->s.c, &mx, 1, COMM_MAX);
    long long who = v[NT] == mx ? r : 64;  // the lowest rank with the largest peak
    comm_host_allreduce_i64(t->s.c, &who, 1, COMM_MIN);
    for (int g = 0; g <= NT; g++) v[g] = who == r ? v[g] : 0;  // its numbers, to rank 0
    comm_host_allreduce_i64(t->s.c, v, NT + 1, COMM_SUM);
    if (r != 0) return;
    const double MiB = 1048576.0;
    const int gpu_mem = lm_device(t->m) == DEV_CUDA;
    printf("  %-7s setup peak (rank %lld, %s): %.2f MiB = params %.2f + grads %.2f + optim %.2f + acts %.2f + workspace+other %.2f MiB (%s)\n",
           zl_name(kind), who, gpu_mem ? "device" : "host", v[NT] / MiB, v[MEM_PARAMS] / MiB, v[MEM_GRADS] / MiB,
           v[MEM_OPTIM] / MiB, v[MEM_ACTS] / MiB, (v[MEM_WORKSPACE] + v[MEM_OTHER]) / MiB,
           !t->lean ? "whole model built first, shared by the runs"
           : gpu_mem ? "lean: built sharded" : "lean; the CPU model is built whole first");
    fflush(stdout);
}

// The per-unit shard layout (zero3.h; zero2: of the gradient only), rank 0.
static void print_units(const trainer_t* t, const zero_layer_t* L) {
    const replica_t* x = &t->s.rep;
    const int U = zero3_n_units(L->z3), W = L->shard_c ? L->shard_c->world : t->s.c->world;  // hsdp: a node's ranks
    size_t pad = 0;
    int cuts = 0;  // piece boundaries strictly inside a parameter
    for (int u = 0; u < U; u++) {
        const zero3_unit_t b = zero3_unit(L->z3, u);
        pad += (size_t)W * b.piece - (b.end - b.begin);
        for (int k = 1; k < W; k++) {
            const size_t e = b.begin + (size_t)k * b.piece;
            for (int i = 0; i < x->lay->n; i++) cuts += x->table[i].offset < e && e < x->table[i].offset + x->table[i].numel;
        }
    }
    printf("  %-7s %d units sharded %d ways: a shard of %zu elements a rank (unit padding %zu); %d piece boundar%s cut%s through a parameter\n",
           zl_name(L->kind), U, W, zero3_shard_elems(L->z3), pad, cuts, cuts == 1 ? "y" : "ies", cuts == 1 ? "s" : "");
}

// After a run: every rank's memory by tag, the optimizer state (and zero2/3's whole state)
// against the formulas, the replicas' hash, the activations; the layer destroyed. Prints rank
// 0's lines; returns 1 if a check failed. got (not lean): the parameters after the run.
static int check_run(trainer_t* t, zero_layer_t* L, result_t* R, const step_watch_t* w, size_t optim0, size_t acts_formula,
                     float* got) {
    const int W = t->s.c->world, r = t->s.c->rank;
    const zl_kind_t kind = L->kind;  // (L is destroyed below)
    const int replicas = L->rep_c ? L->rep_c->world : 1;  // hsdp: one copy of the state per node
    const char* name = zl_name(kind);
    comm_t* c = t->s.c;
    const size_t psi = param_count(t->s.rep.lay);
    const mem_stats_t ms = mem_stats(lm_device(t->m));
    int status = 0;
    for (int g = 0; g < NT; g++) R->after[r][g] = (long long)ms.live_by_tag[g];
    R->after[r][NT] = max3(w->fb1, w->opt1, w->fb > w->opt ? w->fb : w->opt);  // the whole step's peak, every step
    R->phase[r][1] = w->fb1, R->phase[r][2] = w->opt1, R->phase[r][3] = w->after1;
    R->phase[r][4] = w->fb > w->opt ? w->fb : w->opt, R->phase[r][5] = w->after;
    R->optim_meas[r] = (long long)(ms.live_by_tag[MEM_OPTIM] - optim0);
    R->optim_formula[r] = (long long)(2 * sizeof(float) * zero_layer_owned(L));
    long long z3_ok[2] = {1, 1};  // zero2/3: grads are the shard alone; the working buffers exact
    size_t S = 0, work = 0;
    if (L->z3) {  // zero3: 16Psi/n with the padding: 4S params + 4S grads + 8 x owned trainable;
                  // zero2: 4Psi + 12Psi/n with the padding: 4P flat params + 4S grads + 8 x owned
        S = zero3_shard_elems(L->z3);
        work = zero3_work_bytes(L->z3);
        R->state_meas[r] = state_bytes(lm_device(t->m)) - L->state0;
        R->state_formula[r] = (long long)(sizeof(float) * (zero3_level(L->z3) == 3 ? 2 * S : t->P + S)) + R->optim_formula[r];
        const zero3_stats_t zs = zero3_stats(L->z3);
        R->n_coll = (int)((zs.ag_calls + zs.rs_calls) / zs.steps);
        if (r == 0) {  // what the collectives moved a step (every rank the same): bf16 halves them
            const int mx = zero3_mixed(L->z3);
            printf("  %-7s bytes a step: all-gather %lld (%s parameters), reduce-scatter %lld (%s gradients)\n", name,
                   zs.ag_bytes / zs.steps, mx ? "bf16" : "fp32", zs.rs_bytes / zs.steps, mx == 2 ? "bf16" : "fp32");
        }
        // Exact bytes: no gradient buffer of the whole model anywhere (the model's is gone),
        // and the workspace zero3 added is its working buffers, nothing else.
        z3_ok[0] = ms.live_by_tag[MEM_GRADS] == S * sizeof(float);
        z3_ok[1] = L->work == (long long)work;
        comm_host_allreduce_i64(c, z3_ok, 2, COMM_MIN);
    }
    comm_host_allreduce_i64(c, &R->after[0][0], 64 * (NT + 1), COMM_SUM);
    comm_host_allreduce_i64(c, &R->phase[0][0], 64 * 6, COMM_SUM);
    comm_host_allreduce_i64(c, R->state_meas, 64, COMM_SUM);
    comm_host_allreduce_i64(c, R->state_formula, 64, COMM_SUM);
    comm_host_allreduce_i64(c, R->optim_meas, 64, COMM_SUM);
    comm_host_allreduce_i64(c, R->optim_formula, 64, COMM_SUM);
    // Replicas bitwise identical (the layout's elements; padding is never a parameter).
    unsigned long long h;
    if (t->lean) {
        h = zero_layer_params_hash(L);
        zero_layer_destroy(L, 0);
    } else {
        zero_layer_destroy(L, 1);
        lm_get_params(t->m, got);
        h = zero_hash_floats(0, got, 0, t->total);
    }
    const int same = train_hashes_agree(c, h, 0, 1);
    int optim_ok = 1;
    long long optim_sum = 0;
    for (int k = 0; k < W; k++) {
        optim_ok &= R->optim_meas[k] == R->optim_formula[k];
        optim_sum += R->optim_meas[k];
    }
    // DDP: every rank holds all 8Ψ; sharded: every trainable element owned exactly once.
    optim_ok &= optim_sum == (long long)(8 * psi) * (kind == ZL_DDP ? W : replicas);
    if (kind == ZL_ZERO3 || kind == ZL_ZERO2 || kind == ZL_HSDP) {
        int state_ok = 1;
        long long sum = 0;
        for (int k = 0; k < W; k++) {
            state_ok &= R->state_meas[k] == R->state_formula[k];
            sum += R->state_meas[k];
        }
        if (r == 0 && kind == ZL_ZERO3)
            printf("  %-7s params + grads + optimizer state %s 16Psi/n on every rank (8 x shard + 8 x owned; %lld bytes over all ranks, 16Psi = %lld)\n",
                   name, state_ok ? "==" : "!=", sum, (long long)(16 * psi));
        if (r == 0 && kind == ZL_HSDP)
            printf("  %-7s params + grads + optimizer state %s 16Psi/l on every rank (l = %d rank%s a node, %d node%s; %lld bytes over all ranks, 16Psi x nodes = %lld)\n",
                   name, state_ok ? "==" : "!=", W / replicas, W / replicas == 1 ? "" : "s", replicas, replicas == 1 ? "" : "s", sum, (long long)(16 * psi) * replicas);
        if (r == 0 && kind == ZL_ZERO2)
            printf("  %-7s params + grads + optimizer state %s 4Psi+12Psi/n on every rank (4 x padded flat %zu + 4 x shard + 8 x owned; %lld bytes over all ranks, 4Psi x n + 12Psi = %lld)\n",
                   name, state_ok ? "==" : "!=", t->P, sum, (long long)(4 * psi) * W + (long long)(12 * psi));
        if (r == 0)
            printf("  %-7s grads %s the shard on every rank (4 x %zu = %zu bytes, no whole-model gradient buffer); working buffers %s %zu bytes on every rank (workspace: %s)\n",
                   name, z3_ok[0] ? "==" : "!=", S, S * sizeof(float), z3_ok[1] ? "==" : "!=", work,
                   kind != ZL_ZERO2 ? (t->s.precision == MP_BF16 ? "2 parameter + 2 gradient buffers of the largest padded unit, the shard's bf16 copy and 2 bf16 parameter buffers"
                                                                 : "2 parameter + 2 gradient buffers of the largest padded unit")
                                        : "2 gradient buffers of the largest padded unit + one piece");
        if (!state_ok || !z3_ok[0] || !z3_ok[1]) status = 1;
    }
    if (r == 0) {
        printf("  %-7s done: %.2f ms a step; replicas %s; optimizer state %s the formula on every rank (%lld bytes over all ranks, Psi = %zu); parameter hash %016llx\n",
               name, R->ms[0], same ? "bitwise identical on every rank" : "DIFFERENT across ranks", optim_ok ? "==" : "!=",
               optim_sum, psi, h);
        fflush(stdout);
    }
    if (!same || !optim_ok) status = 1;
    int acts_ok = 1;  // the activations every rank keeps, against the formula for the policy
    for (int k = 0; k < W; k++) acts_ok &= R->after[k][MEM_ACTS] == (long long)acts_formula;
    char kn[32];
    if (r == 0)
        printf("  %-7s activations on every rank %s the acts formula (checkpoint %s: %zu bytes)\n", name, acts_ok ? "==" : "!=",
               model_ckpt_name(lm_ckpt(t->m), kn, sizeof kn), acts_formula);
    return status | !acts_ok;
}

// --check-ddp, rank 0: a run's parameters against the ddp run's. 1 if any is beyond the band.
static int check_against_ddp(const char* name, const float* got, const float* ref, size_t total) {
    size_t bad = 0, worst = 0, bitwise = 0;
    double worst_err = 0;
    for (size_t i = 0; i < total; i++) {
        const double e = fabs((double)got[i] - ref[i]), tol = CHECK_ATOL + CHECK_RTOL * fabs((double)ref[i]);
        bitwise += got[i] == ref[i];
        if (!(e <= tol)) bad++;
        if (!(e <= worst_err)) { worst_err = e; worst = i; }
    }
    printf("check-ddp: %s: %zu of %zu parameters differ beyond rtol %g, atol %g (%zu bitwise equal; max |diff| %.3g at %zu)\n",
           name, bad, total, CHECK_RTOL, CHECK_ATOL, bitwise, worst_err, worst);
    return bad != 0;
}

// --check-single, rank 0: one model of the same precision on one process, trained on the whole
// global batch (batch x ranks rows) for the same steps with its own AdamW — the unsharded
// referee (bf16 on the CPU: the same rounded parameters, fp32 compute) — against a run's
// parameters and global losses; in bf16 also one fp32 model, against which the distance is
// bf16-sized. The referees are trained once (ref[]: the parameters, refl[]: the losses).
// Tolerances (README "Mixed-precision sharding"). An AdamW step moves a parameter by lr x
// |m^/(sqrt(v^) + eps)|, about lr at most in the first steps, so two runs K steps apart from the
// same start differ by at most STEP_BOUND = 2 K lr anywhere (opposite signs every step): every
// parameter must be within it. The same precision differs only by the order of fp32 sums (the
// mean of n ranks' slices vs one mean over the whole batch, relative ~1e-7), which AdamW's
// normalisation amplifies only where the second moment is near zero, and in bf16 by the rare
// master that such a difference carries across a bf16 rounding boundary (its weight one bf16
// ulp apart in the next steps): all but SINGLE_OUTLIERS x the count within SINGLE_ATOL +
// SINGLE_RTOL x |p|, losses within SINGLE_LOSS_RTOL. Against fp32 the compute parameters
// differ by bf16's rounding, a relative 2^-9 at most each: losses within BF16_LOSS_RTOL = 2^-9,
// and the two must differ somewhere (the rounding happened). With --reduce-dtype bf16 the
// gradient itself is rounded to bf16 before it is averaged (and the average rounded again): the
// zero3 run then meets its own precision's referee with the bf16 tolerances, not the fp32 band.
// The GPU's bf16 also rounds activations and matmul operands, whose cuBLAS kernels differ with
// the batch's shape (the referee's batch is n times the rank's): bf16 tolerances there too,
// losses within GPU_BF16_LOSS_RTOL (a 2^-9 rounding at each of a few dozen operations).
#define SINGLE_ATOL 1e-5
#define SINGLE_RTOL 1e-4
#define SINGLE_OUTLIERS 1e-4
#define SINGLE_LOSS_RTOL 1e-5
#define BF16_LOSS_RTOL (1.0 / 512)
#define GPU_BF16_LOSS_RTOL 1e-2
typedef struct {
    int have;
    float* p[2];      // [0] the run's precision, [1] fp32 (bf16 runs)
    double* loss[2];
} single_ref_t;

static void single_train(trainer_t* t, model_precision_t prec, int steps, float* out, double* losses) {
    replica_t* x = &t->s.rep;
    const int W = t->s.c->world;
    char err[512];
    lm_options_t o = lm_options(lm_backend(x->m), x->B * W, x->T);
    o.seed = (uint64_t)t->s.f.seed;
    o.precision = prec;
    lm_t* one = lm_create(&x->cfg, &o, err, sizeof err);
    if (!one) fail("--check-single: %s", err);
    lm_set_params(one, t->init);
    for (int k = 0; k < steps; k++) {
        sample_batch(&x->data, x->B * W, x->T, k, x->in_all, x->tg_all);
        lm_set_tokens(one, x->in_all, x->tg_all);
        lm_forward_async(one);
        losses[k] = lm_loss(one);
        if (lm_backward(one, NULL, NULL, err, sizeof err) || lm_adamw(one, &t->s.opt, k + 1, err, sizeof err))
            fail("--check-single: %s", err);
    }
    lm_get_params(one, out);
    lm_destroy(one);
}

static int check_single(trainer_t* t, single_ref_t* R, const char* name, const float* got, const double* loss, int steps) {
    const size_t n = t->total;
    const int bf16 = t->s.precision == MP_BF16;
    if (!R->have) {
        for (int j = 0; j <= bf16; j++) {
            R->p[j] = malloc(n * sizeof(float));
            R->loss[j] = malloc((size_t)steps * sizeof(double));
            if (!R->p[j] || !R->loss[j]) DIE("out of host memory");
            single_train(t, j ? MP_FP32 : t->s.precision, steps, R->p[j], R->loss[j]);
        }
        R->have = 1;
    }
    int status = 0;
    const double bound = 2.0 * steps * t->s.opt.lr;
    const int gpu_bf16 = bf16 && lm_backend(t->m) == LM_GPU;
    for (int j = 0; j <= bf16; j++) {
        const int loose = j || gpu_bf16 || (t->reduce_bf16 && strcmp(name, "zero3") == 0);  // bf16-sized tolerances
        const double lrtol = gpu_bf16 ? GPU_BF16_LOSS_RTOL : loose ? BF16_LOSS_RTOL : SINGLE_LOSS_RTOL;
        size_t bad = 0, out = 0, worst = 0;
        double worst_err = 0, lworst = 0;
        for (size_t i = 0; i < n; i++) {
            const double e = fabs((double)got[i] - R->p[j][i]), tol = SINGLE_ATOL + SINGLE_RTOL * fabs((double)R->p[j][i]);
            if (!(e <= tol)) out++;
            if (!(e <= bound)) bad++;
            if (!(e <= worst_err)) { worst_err = e; worst = i; }
        }
        if (!loose && out > (size_t)(SINGLE_OUTLIERS * (double)n)) bad += out;  // same precision: the band, few outliers
        if (j && worst_err == 0) bad++;  // bf16 against fp32: bits equal everywhere means nothing was rounded
        int lbad = 0;
        for (int k = 0; k < steps; k++) {
            const double e = fabs(loss[k] - R->loss[j][k]) / fabs(R->loss[j][k]);
            lbad += !(e <= lrtol);
            if (!(e <= lworst)) lworst = e;
        }
        printf("check-single: %s against one %s model: %s; %zu of %zu parameters beyond atol %g + rtol %g%s, max |diff| %.3g "
               "at %zu (bound 2 x steps x lr = %g); %d of %d losses beyond rtol %.3g (max %.3g; last %.6f vs %.6f)\n",
               name, j || !bf16 ? "fp32" : gpu_bf16 ? "bf16 (mixed-precision GPU)" : "bf16-parameter", bad || lbad ? "FAIL" : "ok", out, n, SINGLE_ATOL, SINGLE_RTOL,
               loose ? " (not required)" : "", worst_err, worst, bound, lbad, steps, lrtol, lworst, loss[steps - 1], R->loss[j][steps - 1]);
        status |= bad != 0 || lbad != 0;
    }
    fflush(stdout);
    return status;
}

// Rank 0's tables: timing (and the CSV rows), memory by tag beside the formulas (Ψ = the
// parameter count), the peaks by phase.
static void print_tables(const trainer_t* t, const zl_kind_t* runs, int nruns, const result_t* res, int have_ddp,
                         const char* model_label, double bucket_mb) {
    const train_flags_t* f = &t->s.f;
    const int W = t->s.c->world;
    const double ddp_ms = have_ddp ? res[0].ms[0] : 0, MiB = 1048576.0, P4 = 4.0 * (double)param_count(t->s.rep.lay);
    printf("\n| run    | collectives/step | step (ms) | grad sync (ms) | update (ms) | over ddp |\n");
    printf("|--------|------------------|-----------|----------------|-------------|----------|\n");
    FILE* csv = *f->csv ? train_csv_open("csv", f->csv, "model,context,batch,ranks,precision,backend,run,bucket_mb,collectives,step_ms,sync_ms,update_ms,optim_bytes_rank0,peak_bytes_rank0") : NULL;
    for (int ri = 0; ri < nruns; ri++) {
        const result_t* R = &res[ri];
        char ov[32] = "";
        if (ddp_ms > 0) snprintf(ov, sizeof ov, "%+.1f%%", 100.0 * (R->ms[0] / ddp_ms - 1.0));
        printf("| %-6s | %16d | %9.2f | %14.2f | %11.2f | %8s |\n", zl_name(runs[ri]), R->n_coll, R->ms[0], R->ms[1], R->ms[2], ov);
        if (csv) fprintf(csv, "%s,%d,%d,%d,%s,%s,%s,%g,%d,%.3f,%.3f,%.3f,%lld,%lld\n", model_label, f->context, f->batch, W,
                         f->precision, comm_backend_name(t->s.backend), zl_name(runs[ri]), bucket_mb, R->n_coll, R->ms[0],
                         R->ms[1], R->ms[2], R->optim_meas[0], R->after[0][NT]);
    }
    if (csv) fclose(csv);
    printf("\n| run    | rank | params | grads | optim | acts | workspace+other | peak | state = p+g+o | formula (bytes) |\n");
    printf("|--------|------|--------|-------|-------|------|-----------------|------|---------------|-----------------|\n");
    for (int ri = 0; ri < nruns; ri++) {
        for (int k = 0; k < W; k++) {
            const long long* a = res[ri].after[k];
            char fm[64];
            switch (runs[ri]) {
            case ZL_DDP: snprintf(fm, sizeof fm, "16Psi = %.2f MiB", 4 * P4 / MiB); break;
            case ZL_ZERO1: snprintf(fm, sizeof fm, "8Psi+8Psi/n = %.2f MiB", (2 * P4 + 2 * P4 / W) / MiB); break;
            case ZL_ZERO2: snprintf(fm, sizeof fm, "4Psi+12Psi/n = %.2f MiB", (P4 + 3 * P4 / W) / MiB); break;
            case ZL_ZERO2S: snprintf(fm, sizeof fm, "8Psi+12Psi/n = %.2f MiB", (2 * P4 + 3 * P4 / W) / MiB); break;
            case ZL_ZERO3: snprintf(fm, sizeof fm, "16Psi/n = %.2f MiB", 4 * P4 / W / MiB); break;
            case ZL_HSDP: snprintf(fm, sizeof fm, "16Psi/l (l a node)"); break;
            default: snprintf(fm, sizeof fm, "8Psi+8Psi_r = %.2f MiB", (2 * P4 + (double)res[ri].optim_formula[k]) / MiB); break;
            }
            printf("| %-6s | %4d | %6.2f | %5.2f | %5.2f | %4.2f | %15.2f | %4.2f | %13.2f | %15s |\n", zl_name(runs[ri]), k,
                   a[MEM_PARAMS] / MiB, a[MEM_GRADS] / MiB, a[MEM_OPTIM] / MiB, a[MEM_ACTS] / MiB,
                   (a[MEM_WORKSPACE] + a[MEM_OTHER]) / MiB, a[NT] / MiB, (a[MEM_PARAMS] + a[MEM_GRADS] + a[MEM_OPTIM]) / MiB, fm);
        }
    }
    printf("(MiB; params and grads include the padding to %zu elements; zero2's grads = its gradient shard alone (per-unit "
           "padding), its two one-unit gradient working buffers and one piece are workspace; zero2s's (the older staging "
           "ZeRO-2) = the model's flat gradient buffer, which its backward writes, + the kept %zu-element shard; zero3's "
           "params and grads = its shards alone, the four one-unit working buffers are workspace: see README)\n", t->P, t->P / W);
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
            printf("| %-6s | %4d | %10.2f | %29.2f | %22.2f | %18.2f | %17.2f | %23.2f |\n", zl_name(runs[ri]), k, q[0] / MiB,
                   q[1] / MiB, q[2] / MiB, q[3] / MiB, q[4] / MiB, q[5] / MiB);
        }
    printf("(MiB, peaks by phase from the counting allocator, per rank: each the most live at once since the phase "
           "before; after init counts the model's creation%s)\n", t->lean ? "" : " (several levels: the whole model built once, shared)");
}

int main(int argc, char** argv) {
    train_flags_t f = train_flags_default();
    const char *zero_s = "1", *zero2_s = "units", *shard_s = "zero", *ckpt_s = "none", *rdt_s = "fp32";
    int check = 0, layers = 0, keep_full = 0, single = 0;
    double bucket_mb = 25;
    cli_opt_t opts[TRAIN_FLAGS_N + 10];
    int nopts = train_flags_opts(&f, opts);
    opts[nopts++] = (cli_opt_t){"layers", CLI_INT, &layers, "0", "blocks, in place of the size's own (0: the size's): a deeper model of the same width, to find the memory wall", NULL};
    opts[nopts++] = (cli_opt_t){"zero", CLI_STR, &zero_s, "1", "ZeRO levels to run: a comma list of 0 (DDP), 1, 2, 3, hsdp (ZeRO-3 inside a node, replicas across nodes; MPI), or all", NULL};
    opts[nopts++] = (cli_opt_t){"zero2", CLI_CHOICE, &zero2_s, "units", "which ZeRO-2 level 2 runs: units (zero3.h's engine: no flat gradient buffer, fp32), staging (zero.h's, run zero2s: the backward writes the flat 4Psi gradient buffer), or both", "units|staging|both"};
    opts[nopts++] = (cli_opt_t){"shard", CLI_CHOICE, &shard_s, "zero", "zero: ZeRO proper; course: the course's sharded optimizer in place of levels 1 and 2 (3 stays ZeRO-3)", "zero|course"};
    opts[nopts++] = (cli_opt_t){"checkpoint", CLI_STR, &ckpt_s, "none", "activation checkpointing: none, block, every-K (K >= 1) or nested (CPU only); with --zero 2 or 3 (unit hooks) none or block only", NULL};
    opts[nopts++] = (cli_opt_t){"reduce-dtype", CLI_CHOICE, &rdt_s, "fp32", "ZeRO-3 with --precision bf16: the gradient reduce-scatter in fp32, or bf16 (half the bytes; the averaged shard widened to fp32 either way)", "fp32|bf16"};
    opts[nopts++] = (cli_opt_t){"bucket-mb", CLI_DOUBLE, &bucket_mb, "25", "bucket cap in MiB (DDP's buckets, ZeRO-2's buckets)", NULL};
    opts[nopts++] = (cli_opt_t){"check-ddp", CLI_INT, &check, "0", "1: run ddp too and compare every run's parameters with its own (rtol 1e-4, atol 1e-5)", NULL};
    opts[nopts++] = (cli_opt_t){"check-single", CLI_INT, &single, "0", "1: rank 0 also trains one model of the same precision (and in bf16 one fp32 model) on the whole global batch and compares every run's parameters and losses (tolerances: README)", NULL};
    opts[nopts++] = (cli_opt_t){"keep-full", CLI_INT, &keep_full, "0", "1: even for one level, build the whole model first, pad it, keep a host copy of the initial parameters (what several levels or --check-ddp 1 always do); 0: one level is built sharded, so its setup peak is its own footprint (the memory wall)", NULL};
    comm_cli_parse(argc, argv, "Sharded-optimizer training of the Transformer LM: DDP, ZeRO-1, ZeRO-2, ZeRO-3, the course's version (run under mpirun). "
                   "A single level (--zero K without --check-ddp or --keep-full) is the memory-faithful run: its model is built "
                   "sharded (padded flat buffers from the start; ZeRO-3 without any whole-model buffer), so the setup peak it "
                   "prints is that level's own; several levels share one unsharded model and a host copy of it.",
                   opts, nopts);
    trainer_t t = {0};
    train_setup_t* s = &t.s;
    f.bf16_cpu = 1;  // the CPU model's bf16 parameters (model_cpu.h)
    train_flags_check(&f, layers, s);
    char model_label[64];  // "2.7B", or "2.7B/L80" with --layers
    if (layers > 0) snprintf(model_label, sizeof model_label, "%s/L%d", f.model, layers);
    else snprintf(model_label, sizeof model_label, "%s", f.model);
    if (check != 0 && check != 1) BAD("--check-ddp: %d must be 0 or 1", check);
    if (keep_full != 0 && keep_full != 1) BAD("--keep-full: %d must be 0 or 1", keep_full);
    if (single != 0 && single != 1) BAD("--check-single: %d must be 0 or 1", single);
    if (!(bucket_mb >= 0 && bucket_mb <= 1e6)) BAD("--bucket-mb: %g is out of range [0, 1e6]", bucket_mb);
    int ckpt = 0;
    {
        char why[160];
        if (model_ckpt_parse(ckpt_s, &ckpt, why, sizeof why) != 0) BAD("--checkpoint: %s", why);
    }
    zl_kind_t runs[ZL_N];
    int want[ZL_N] = {0};
    const int nruns = parse_runs(zero_s, zero2_s, strcmp(shard_s, "course") == 0, check, runs, want);
    if (want[ZL_ZERO2] && s->precision != MP_FP32)
        BAD("--zero 2 runs fp32 only: its windows read the fp32 flat buffer, with no bf16 copy per unit (use --precision fp32, or --zero2 staging)");
    if (want[ZL_HSDP] && s->precision != MP_FP32)
        BAD("--zero hsdp runs fp32 only (use --precision fp32; bf16 sharding with fp32 masters: --zero 3)");
    const int reduce_bf16 = strcmp(rdt_s, "bf16") == 0;
    t.reduce_bf16 = reduce_bf16;
    if (reduce_bf16 && (!want[ZL_ZERO3] || s->precision != MP_BF16))
        BAD("--reduce-dtype bf16: applies to --zero 3 with --precision bf16 (got --zero %s --precision %s)", zero_s, f.precision);
    // ZeRO-2/3's unit hooks hold one unit's parameters at a time (two working buffers): a
    // segment of K > 1 blocks would need K of them for its recompute (model_cpu.h).
    if (!model_ckpt_hooks_ok(ckpt) && (want[ZL_ZERO2] || want[ZL_ZERO3] || want[ZL_HSDP]))  // every-K (K > 1), nested
        BAD("--checkpoint %s with --zero 2 or 3: %s (use --checkpoint block)", ckpt_s, MODEL_CKPT_HOOKS_REFUSAL);
    {  // handed over by 06's ddp_train (--zero/--shard): its notice, now that the flags are accepted
        const char* handoff = getenv("ZERO_TRAIN_HANDOFF");
        if (handoff && *handoff && comm_env_rank() == 0) printf("%s\n", handoff);
        fflush(stdout);
    }
    train_setup_comm(s);
    const int W = s->c->world, r = s->c->rank;
    if (W > 64) comm_refuse(s->c, "at most 64 ranks (got %d)", W);
    s->attn = strcmp(f.attention, "flash") == 0 ? flash_attention_impl() : NULL;
    {  // the flat buffers padded so that they split into W equal, aligned shards
        param_layout_t lay = param_layout_make(&s->cfg);
        t.P = zero_padded_total(lay.total, W);
        param_layout_free(&lay);
    }
    // Lean: one level, nothing to compare with, so nothing is kept that the level does not
    // need. Levels 0-2 get the model with padded buffers from the start (no padded copy beside
    // the unpadded ones); ZeRO-3 gets it without flat buffers and makes its shard from the seed.
    t.lean = nruns == 1 && !check && !keep_full && !single;
    lm_options_t o = lm_options(LM_CPU, 0, 0);
    o.ckpt = ckpt;
    o.flat_total = t.P;
    o.flat = !t.lean ? LM_FLAT_WHOLE : runs[0] == ZL_ZERO3 ? LM_FLAT_NONE : runs[0] == ZL_ZERO2 ? LM_FLAT_PARAMS : LM_FLAT_PADDED;
    train_setup(s, o);
    t.m = s->rep.m;
    t.total = s->rep.lay->total;
    {
        char err[512];
        if (!t.lean) comm_check_input(s->c, lm_pad_flat(t.m, t.P, err, sizeof err) == 0, "%s", err);
    }
    // The CPU model's own AdamW moments (made with it) freed: the optimizer lives outside the
    // model here (the GPU model makes its moments only at its own first AdamW step).
    model_cpu_t* mc = lm_cpu(t.m);
    if (mc) mem_free(mc->adam_m), mem_free(mc->adam_v), mc->adam_m = mc->adam_v = NULL;
    const device_t dev = lm_device(t.m);
    // What the model's acts tag must hold with this checkpointing policy (the same on every rank).
    const size_t acts_formula = lm_acts_bytes(t.m);

    // Rank 0's parameters everywhere (the whole padded buffer), kept as every run's start
    // (lean: not kept; lean ZeRO-3: no buffer, each rank makes its shard from rank 0's seed).
    if (lm_params(t.m)) {
        comm_broadcast(s->c, lm_params(t.m), lm_params(t.m), t.P, COMM_F32, 0, lm_stream(t.m));
        comm_stream_sync(s->c, lm_stream(t.m), "the first broadcast");
        lm_params_changed(t.m);
    }
    float *init = NULL, *ref = NULL, *got = NULL;
    if (!t.lean) {
        init = malloc(t.total * sizeof(float));
        ref = malloc(t.total * sizeof(float));
        got = malloc(t.total * sizeof(float));
        if (!init || !ref || !got) DIE("out of host memory");
        lm_get_params(t.m, init);
        t.init = init;
    }

    train_banner(s, "zero_train", model_label);
    if (r == 0) {
        size_t s0, s1;
        zero_shard_range(t.total, W, 0, &s0, &s1, NULL);
        int cuts = 0;  // shard boundaries strictly inside a parameter
        for (int k = 1; k < W; k++)
            for (int i = 0; i < s->rep.lay->n; i++)
                cuts += s->rep.table[i].offset < k * s1 && k * s1 < s->rep.table[i].offset + s->rep.table[i].numel;
        printf("# shards: %d x %zu elements, padded total %zu (layout %zu, padding %zu); %d shard boundar%s cut%s through a parameter\n",
               W, s1, t.P, t.total, t.P - t.total, cuts, cuts == 1 ? "y" : "ies", cuts == 1 ? "s" : "");
        printf("# per run: %d warm-up steps, then the median of %d; bucket cap %g MiB; every run starts from the same parameters\n",
               f.warmup, f.steps, bucket_mb);
        char kn[32];
        printf("# activation checkpointing: %s (activations a rank by the formula: %zu bytes = %.2f MiB)\n\n",
               model_ckpt_name(ckpt, kn, sizeof kn), acts_formula, acts_formula / 1048576.0);
    }

    int status = 0;
    single_ref_t sref = {0};
    result_t* res = calloc((size_t)nruns, sizeof *res);
    if (!res) DIE("out of host memory");
    for (int ri = 0; ri < nruns; ri++) {
        result_t* R = &res[ri];
        // The setup peak: the first run's counts the model's creation (unless lean: the whole
        // model and its padded copy at once), a later run's only its own layer.
        if (ri > 0) mem_reset_peak(dev);
        if (!t.lean) lm_set_params(t.m, init);
        const size_t optim0 = mem_stats(dev).live_by_tag[MEM_OPTIM];
        zero_layer_t L;
        zero_layer_create_rs(&L, runs[ri], &s->rep, &s->opt, t.P, bucket_mb, f.seed, reduce_bf16);
        R->n_coll = zero_layer_collectives(&L);
        report_setup_peak(&t, runs[ri], R);
        if (L.z3 && r == 0) print_units(&t, &L);
        // Every run's data from step 0 (the same global batches in every run).
        const train_method_t meth = zero_layer_method(&L);
        double* losses = single ? calloc((size_t)(f.warmup + f.steps), sizeof(double)) : NULL;
        if (single && !losses) DIE("out of host memory");
        step_watch_t w = {zl_name(runs[ri]), r == 0 && (check || single), 0, 0, 0, 0, 0, 0, s->c, losses};
        train_run(s, &meth, f.warmup, f.steps, 1, watch_step, &w, R->ms);
        status |= check_run(&t, &L, R, &w, optim0, acts_formula, got);
        if (check && r == 0) {
            if (runs[ri] == ZL_DDP) memcpy(ref, got, t.total * sizeof(float));
            else status |= check_against_ddp(zl_name(runs[ri]), got, ref, t.total);
        }
        if (single && r == 0) status |= check_single(&t, &sref, zl_name(runs[ri]), got, losses, f.warmup + f.steps);
        free(losses);
    }
    if (r == 0) print_tables(&t, runs, nruns, res, want[ZL_DDP], model_label, bucket_mb);
    long long st_all = status;
    comm_host_allreduce_i64(s->c, &st_all, 1, COMM_MAX);
    train_teardown(s);
    free(res);
    for (int j = 0; j < 2; j++) free(sref.p[j]), free(sref.loss[j]);
    free(init);
    free(ref);
    free(got);
    return (int)st_all;
}
