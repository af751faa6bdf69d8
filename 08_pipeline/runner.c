// One pipeline executor of either kind (runner.h): a table of operations per kind, filled from
// the two executors, picked once in pp_runner_create.
#include "08_pipeline/runner.h"

#include <stdlib.h>

#include "common/check.h"

typedef struct {
    const char *where, *clock;
    double (*step)(pp_runner_t* r, const int32_t* in, const int32_t* tg, float scale, pp_timing_t* t);
    double (*forward)(pp_runner_t* r, const schedule_t* fwd, const int32_t* in, const int32_t* tg, float scale);
    double (*dp_allreduce)(pp_runner_t* r, int D);
    void (*adamw)(pp_runner_t* r, const adamw_config_t* opt);
    void (*schedule_changed)(pp_runner_t* r);
    int (*last_times)(const pp_runner_t* r, const double** st, const double** en, double* t0);
    void (*align_start)(pp_runner_t* r);
    void (*span)(const pp_runner_t* r, int chunk, size_t* b, size_t* e);
} runner_ops_t;

struct pp_runner {
    const runner_ops_t* ops;
    comm_t* c;
    lm_t* m;
    pp_exec_t* x;       // the CPU executor, or
    pp_exec_gpu_t* xg;  // the GPU one
};

// ---- the CPU executor ----------------------------------------------------------------------
static double cpu_step(pp_runner_t* r, const int32_t* in, const int32_t* tg, float s, pp_timing_t* t) {
    return pp_exec_step(r->x, in, tg, s, t);
}
static double cpu_forward(pp_runner_t* r, const schedule_t* fwd, const int32_t* in, const int32_t* tg, float s) {
    return pp_exec_forward(r->x, fwd, in, tg, s, NULL);
}
static double cpu_dp_allreduce(pp_runner_t* r, int D) { return pp_exec_dp_allreduce(r->x, D); }
static void cpu_adamw(pp_runner_t* r, const adamw_config_t* opt) { pp_exec_adamw(r->x, opt); }
static void cpu_schedule_changed(pp_runner_t* r) { pp_exec_schedule_changed(r->x); }
static int cpu_last_times(const pp_runner_t* r, const double** st, const double** en, double* t0) {
    return pp_exec_last_times(r->x, st, en, t0);
}
static void cpu_align_start(pp_runner_t* r) { comm_barrier(r->c); }
static void cpu_span(const pp_runner_t* r, int ch, size_t* b, size_t* e) { pp_exec_span(r->x, ch, b, e); }

static const runner_ops_t cpu_ops = {
    "MPI on the CPU", "host clock", cpu_step, cpu_forward, cpu_dp_allreduce, cpu_adamw,
    cpu_schedule_changed, cpu_last_times, cpu_align_start, cpu_span,
};

// ---- the GPU executor ----------------------------------------------------------------------
static double gpu_step(pp_runner_t* r, const int32_t* in, const int32_t* tg, float s, pp_timing_t* t) {
    return pp_exec_gpu_step(r->xg, in, tg, s, t);
}
static double gpu_forward(pp_runner_t* r, const schedule_t* fwd, const int32_t* in, const int32_t* tg, float s) {
    return pp_exec_gpu_forward(r->xg, fwd, in, tg, s);
}
static double gpu_dp_allreduce(pp_runner_t* r, int D) {
    if (D != 1) comm_fatal(r->c, EXIT_BAD_INPUT, "pipeline x data parallel runs on the CPU only (--backend mpi)");
    return 0;
}
static void gpu_adamw(pp_runner_t* r, const adamw_config_t* opt) { pp_exec_gpu_adamw(r->xg, opt); }
static void gpu_schedule_changed(pp_runner_t* r) { pp_exec_gpu_schedule_changed(r->xg); }
static int gpu_last_times(const pp_runner_t* r, const double** st, const double** en, double* t0) {
    if (t0) *t0 = 0;
    return pp_exec_gpu_last_times(r->xg, st, en);
}
static void gpu_align_start(pp_runner_t* r) { pp_exec_gpu_align_start(r->xg, 1); }
static void gpu_span(const pp_runner_t* r, int ch, size_t* b, size_t* e) { pp_exec_gpu_span(r->xg, ch, b, e); }

static const runner_ops_t gpu_ops = {
    "NCCL, one GPU per rank, fp32", "CUDA events", gpu_step, gpu_forward, gpu_dp_allreduce, gpu_adamw,
    gpu_schedule_changed, gpu_last_times, gpu_align_start, gpu_span,
};

// ---- the one place the kind is picked ------------------------------------------------------
pp_runner_t* pp_runner_create(const pp_runner_config_t* k) {
    pp_runner_t* r = calloc(1, sizeof *r);
    if (!r) DIE("out of host memory");
    r->c = k->c;
    const int gpu = comm_device_kind(k->c) == DEV_CUDA;
    // The CPU executor runs its ranges on the whole CPU model (activations for Bmb x T); the
    // GPU one on the CUDA model's range passes (no whole-model activations).
    lm_options_t o = lm_options(gpu ? LM_GPU : LM_CPU, k->Bmb, k->T);
    o.seed = k->seed;
    o.ranges = 1;
    char err[512];
    r->m = lm_create(k->cfg, &o, err, sizeof err);
    if (!r->m) comm_fatal(k->c, 1, "the %s model: %s", gpu ? "CUDA" : "CPU", err);
    if (gpu) {
        const pp_exec_gpu_config_t gc = {k->c, k->sched, k->rank, lm_gpu(r->m), k->ranges, k->Bmb, k->T, k->die_after};
        r->xg = pp_exec_gpu_create(&gc);
        r->ops = &gpu_ops;
    } else {
        const pp_exec_config_t ec = {k->c, k->sched, k->rank, k->world_base, lm_cpu(r->m), k->ranges, k->Bmb, k->T,
                                     k->die_after, k->dp};
        r->x = pp_exec_create(&ec);
        r->ops = &cpu_ops;
    }
    return r;
}

void pp_runner_destroy(pp_runner_t* r) {
    if (!r) return;
    if (r->x) pp_exec_destroy(r->x);
    if (r->xg) pp_exec_gpu_destroy(r->xg);
    lm_destroy(r->m);
    free(r);
}

lm_t* pp_runner_model(pp_runner_t* r) { return r->m; }
const char* pp_runner_where(const pp_runner_t* r) { return r->ops->where; }
const char* pp_runner_clock(const pp_runner_t* r) { return r->ops->clock; }
double pp_runner_step(pp_runner_t* r, const int32_t* in, const int32_t* tg, float s, pp_timing_t* t) {
    return r->ops->step(r, in, tg, s, t);
}
double pp_runner_forward(pp_runner_t* r, const schedule_t* fwd, const int32_t* in, const int32_t* tg, float s) {
    return r->ops->forward(r, fwd, in, tg, s);
}
double pp_runner_dp_allreduce(pp_runner_t* r, int D) { return r->ops->dp_allreduce(r, D); }
void pp_runner_adamw(pp_runner_t* r, const adamw_config_t* opt) { r->ops->adamw(r, opt); }
void pp_runner_schedule_changed(pp_runner_t* r) { r->ops->schedule_changed(r); }
int pp_runner_last_times(const pp_runner_t* r, const double** st, const double** en, double* t0) {
    return r->ops->last_times(r, st, en, t0);
}
void pp_runner_align_start(pp_runner_t* r) { r->ops->align_start(r); }
void pp_runner_span(const pp_runner_t* r, int ch, size_t* b, size_t* e) { r->ops->span(r, ch, b, e); }
