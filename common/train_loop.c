// The shared training loop (train_loop.h).
#include "common/train_loop.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/hash.h"
#include "common/nvtx.h"
#include "common/stats.h"
#include "common/timer.h"

train_flags_t train_flags_default(void) {
    train_flags_t f = {"tiny", 32, 2, "fp32", "naive", 5, 2, "auto", 1, 1e-3, "", 0, 0, 0};
    return f;
}

int train_flags_opts(train_flags_t* f, cli_opt_t* o) {
    int n = 0;
    o[n++] = (cli_opt_t){"model", CLI_CHOICE, &f->model, "tiny", "model size", MODEL_SIZE_CHOICES};
    o[n++] = (cli_opt_t){"context", CLI_INT, &f->context, "32", "sequence length T", NULL};
    o[n++] = (cli_opt_t){"batch", CLI_INT, &f->batch, "2", "sequences per rank (the global batch is batch x ranks)", NULL};
    o[n++] = (cli_opt_t){"precision", CLI_CHOICE, &f->precision, "fp32", "GPU precision (the CPU model is fp32)", MODEL_PRECISION_CHOICES};
    o[n++] = (cli_opt_t){"attention", CLI_CHOICE, &f->attention, "naive", "GPU attention: naive, or flash (stage 04; bf16)", "naive|flash"};
    o[n++] = (cli_opt_t){"steps", CLI_INT, &f->steps, "5", "measured steps per run", NULL};
    o[n++] = (cli_opt_t){"warmup", CLI_INT, &f->warmup, "2", "steps before measuring (each run)", NULL};
    o[n++] = (cli_opt_t){"backend", CLI_CHOICE, &f->backend, "auto", "auto: nccl with a GPU per rank, else mpi", COMM_BACKEND_AUTO_CHOICES};
    o[n++] = (cli_opt_t){"seed", CLI_INT, &f->seed, "1", "rank r initialises from seed + r, data from seed", NULL};
    o[n++] = (cli_opt_t){"lr", CLI_DOUBLE, &f->lr, "1e-3", "AdamW learning rate", NULL};
    o[n++] = (cli_opt_t){"csv", CLI_STR, &f->csv, "", "append the timing rows to this CSV (rank 0)", NULL};
    o[n++] = (cli_opt_t){"comm-timeout", CLI_DOUBLE, &f->comm_timeout, "0", COMM_TIMEOUT_HELP, NULL};
    o[n++] = (cli_opt_t){"head-chunk", CLI_INT, &f->head_chunk, "0", HEAD_CHUNK_HELP, NULL};
    return n;
}

#define BAD(...) comm_bad_input(__VA_ARGS__)

void train_flags_check(const train_flags_t* f, int layers, train_setup_t* s) {
    memset(s, 0, sizeof *s);
    s->f = *f;
    if (model_config_by_name(f->model, f->context, &s->cfg) != 0) BAD("--model: unknown size '%s'", f->model);
    if (layers < 0 || layers > 4096) BAD("--layers: %d is out of range (0 for the size's own, or 1..4096)", layers);
    if (layers > 0) s->cfg.n_layers = layers;
    if (f->context < 1 || f->context > 65536) BAD("--context: %d is out of range (1..65536)", f->context);
    if (f->batch < 1 || f->batch > 4096) BAD("--batch: %d is out of range (1..4096)", f->batch);
    if (f->steps < 1 || f->steps > 100000) BAD("--steps: %d is out of range (1..100000)", f->steps);
    if (f->warmup < 0 || f->warmup > 1000) BAD("--warmup: %d is out of range (0..1000)", f->warmup);
    if (!(f->lr > 0 && f->lr < 10)) BAD("--lr: %g is out of range (0, 10)", f->lr);
    if (f->head_chunk < 0 || f->head_chunk > HEAD_CHUNK_MAX)
        BAD("--head-chunk: %d is out of range (0 for the whole logits, or 1..%d rows)", f->head_chunk, HEAD_CHUNK_MAX);
    comm_backend_choose(f->backend, &s->backend);  // the flag's choices were checked by the parser
    s->precision = strcmp(f->precision, "bf16") == 0 ? MP_BF16 : MP_FP32;
    if (s->backend == COMM_MPI && s->precision != MP_FP32 && !f->bf16_cpu) BAD("--precision bf16 needs the GPU (NCCL) backend");
    if (s->backend == COMM_MPI && strcmp(f->attention, "flash") == 0) BAD("--attention flash needs the GPU (NCCL) backend");
    char why[1024];
    if (*f->csv && file_check_writable(f->csv, 0, why, sizeof why) != 0) BAD("--csv: %s", why);
    s->opt = adamw_default();
    s->opt.lr = (float)f->lr;
}

void train_setup(train_setup_t* s, lm_options_t o) {
    if (!s->c) train_setup_comm(s);
    o.B = s->f.batch;
    o.T = s->f.context;
    o.precision = s->precision;
    o.attn = s->attn;
    o.head_chunk = s->f.head_chunk;
    replica_create(&s->rep, s->c, &s->cfg, o, s->f.seed);
}

void train_teardown(train_setup_t* s) {
    replica_destroy(&s->rep);
    comm_destroy(s->c, 1);
    s->c = NULL;
}

void train_banner(const train_setup_t* s, const char* prog, const char* label) {
    if (s->c->rank != 0) return;
    const int gpu = lm_backend(s->rep.m) == LM_GPU;
    gpu_info_t gi = {0};
    if (gpu) gpu_info(s->c->device, &gi);
    const size_t psi = param_count(s->rep.lay);
    printf("# %s: %s, context %d, batch %d per rank x %d ranks, %s, %s backend%s%s, %zu parameters (%.2f GB fp32)\n", prog,
           label, s->f.context, s->f.batch, s->c->world, s->f.precision, comm_backend_name(s->backend), gpu ? ", GPU " : "",
           gpu ? gi.name : "", psi, 4e-9 * (double)psi);
}

// ---- one step ----------------------------------------------------------------------------------
// Timestamps at the step's four marks: CUDA events on the model's stream, or the host clock.
typedef struct {
    cudaStream_t s;
    cudaEvent_t ev[4];
    double host[4];
} marks_t;

static void marks_init(marks_t* k, cudaStream_t s) {
    memset(k, 0, sizeof *k);
    k->s = s;
    for (int i = 0; s && i < 4; i++) CUDA_CHECK(cudaEventCreate(&k->ev[i]));
}
static void mark(marks_t* k, int i) {
    if (k->s) CUDA_CHECK(cudaEventRecord(k->ev[i], k->s));
    else k->host[i] = time_now_s();
}
static double span_ms(const marks_t* k, int a, int b) {  // after the stream passed mark b
    if (!k->s) return 1e3 * (k->host[b] - k->host[a]);
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, k->ev[a], k->ev[b]));
    return ms;
}
static void marks_destroy(marks_t* k) {
    for (int i = 0; k->s && i < 4; i++) CUDA_CHECK(cudaEventDestroy(k->ev[i]));
}

static long long phase_peak(device_t dev) {  // the most bytes live since the last mark, and a new mark
    const long long p = (long long)mem_stats(dev).peak;
    mem_reset_peak(dev);
    return p;
}

void train_step(train_setup_t* s, const train_method_t* method, int64_t data_step, train_times_t* out) {
    lm_t* m = s->rep.m;
    const device_t dev = lm_device(m);
    const int32_t *in, *tg;
    replica_batch(&s->rep, data_step, &in, &tg);
    char err[512];
    lm_set_tokens(m, in, tg);
    mem_reset_peak(dev);
    marks_t k;
    marks_init(&k, lm_stream(m));
    mark(&k, 0);
    // NVTX ranges (--nvtx) mark the launches of each phase for anyone with Nsight Systems.
    nvtx_push("forward");
    lm_forward_async(m);
    nvtx_pop();
    nvtx_push("backward (the method's hook starts its communication)");
    if (lm_backward(m, method ? method->grad_ready : NULL, method ? method->ctx : NULL, err, sizeof err) != 0)
        comm_fatal(s->c, EXIT_BAD_INPUT, "%s", err);
    nvtx_pop();
    mark(&k, 1);
    nvtx_push("finish_grads");
    if (method && method->finish_grads) method->finish_grads(method->ctx);  // the stream waits for the gradients
    nvtx_pop();
    mark(&k, 2);
    out->peak_fb = phase_peak(dev);
    nvtx_push("optimizer");
    if (method && method->update) {
        method->update(method->ctx);
        lm_params_changed(m);  // bf16: the copy is remade at the next forward
    } else if (lm_adamw(m, &s->opt, ++s->adam_step, err, sizeof err) != 0) {
        comm_fatal(s->c, EXIT_BAD_INPUT, "%s", err);
    }
    nvtx_pop();
    mark(&k, 3);
    out->peak_update = phase_peak(dev);
    out->live_after = (long long)mem_stats(dev).live;
    if (k.s) comm_stream_sync(s->c, k.s, "the training step");
    out->step_ms = span_ms(&k, 0, 3);
    out->sync_ms = span_ms(&k, 1, 2);
    out->update_ms = span_ms(&k, 2, 3);
    // The GPU times each collective with events; the host clock sees only the wait after the
    // backward (the CPU's overlap is partial).
    out->comm_ms = k.s && method && method->comm_ms ? method->comm_ms(method->ctx) : method ? out->sync_ms : 0.0;
    out->loss = lm_loss(m);
    marks_destroy(&k);
}

void train_run(train_setup_t* s, const train_method_t* method, int warmup, int steps, int from_zero,
               train_each_fn each, void* ctx, double med[4]) {
    double* st = malloc((size_t)steps * 4 * sizeof(double));
    if (!st) DIE("out of host memory");
    for (int k = 0; k < warmup + steps; k++, s->step++) {
        train_times_t t;
        train_step(s, method, from_zero ? k : s->step, &t);
        if (k >= warmup) {
            const int i = k - warmup;
            st[i] = t.step_ms, st[steps + i] = t.sync_ms, st[2 * steps + i] = t.update_ms, st[3 * steps + i] = t.comm_ms;
        }
        if (each) each(ctx, k, &t);
        if (!isfinite(t.loss)) comm_fatal(s->c, 1, "loss is %g at step %d", t.loss, k);
    }
    for (int q = 0; q < 4; q++) {
        med[q] = stats_compute(st + q * steps, steps).median;
        comm_host_allreduce_f64(s->c, &med[q], 1, COMM_MAX);  // the slowest rank
    }
    free(st);
}

// ---- checks and output ---------------------------------------------------------------------
// FNV-1a over the parameter bytes: equal on every rank iff the replicas are bitwise identical
// (up to a 2^-64 chance).
static unsigned long long params_hash(lm_t* m) {
    const size_t n = lm_layout(m)->total;
    float* h = malloc(n * sizeof(float));
    if (!h) DIE("out of host memory");
    lm_get_params(m, h);
    const unsigned long long x = fnv1a(FNV1A_INIT, h, n * sizeof(float));
    free(h);
    return x;
}

int train_replicas_identical(train_setup_t* s) {
    return train_hashes_agree(s->c, params_hash(s->rep.m), 0, 1);
}

int train_check_single(train_setup_t* s, int steps) {
    replica_t* x = &s->rep;
    const int W = s->c->world;
    const size_t n = x->lay->total;
    float* got = malloc(n * sizeof(float));
    float* want = malloc(n * sizeof(float));
    if (!got || !want) DIE("out of host memory");
    lm_get_params(x->m, got);
    char err[512];
    lm_options_t o = lm_options(lm_backend(x->m), x->B * W, x->T);
    o.seed = (uint64_t)s->f.seed;
    lm_t* one = lm_create(&x->cfg, &o, err, sizeof err);
    if (!one) fail("--check-single: %s", err);
    for (int k = 0; k < steps; k++) {
        sample_batch(&x->data, x->B * W, x->T, k, x->in_all, x->tg_all);
        lm_set_tokens(one, x->in_all, x->tg_all);
        lm_forward_async(one);
        if (lm_backward(one, NULL, NULL, err, sizeof err) || lm_adamw(one, &s->opt, k + 1, err, sizeof err))
            fail("--check-single: %s", err);
    }
    lm_get_params(one, want);
    lm_destroy(one);
    size_t bad = 0, worst = 0;
    double worst_err = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]), tol = 1e-5 + 1e-4 * fabs((double)want[i]);
        if (!(e <= tol)) bad++;
        if (!(e <= worst_err)) { worst_err = e; worst = i; }
    }
    printf("check-single: %zu of %zu parameters differ beyond rtol 1e-4, atol 1e-5 (max |diff| %.3g at %zu: %.8g vs %.8g)\n",
           bad, n, worst_err, worst, (double)got[worst], (double)want[worst]);
    free(got);
    free(want);
    return bad ? 1 : 0;
}

FILE* train_csv_open(const char* flag, const char* path, const char* header) {
    FILE* f = fopen(path, "a");
    if (!f) DIE("--%s: cannot open %s: %s", flag, path, strerror(errno));
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0) fprintf(f, "%s\n", header);
    return f;
}

// ---- a step of micro-batches, and the replicas' check by hash ---------------------------------
double train_step_accum(comm_t* c, lm_t* m, const train_method_t* method, int A, const train_micro_t* micro,
                        const adamw_config_t* opt, int* adam_step) {
    char err[512];
    const int hook = A == 1 && method && method->grad_ready;
    double loss = 0;
    for (int a = 0; a < A; a++) {
        micro->fill(method ? method->ctx : NULL, a);
        nvtx_push("forward");
        lm_forward_async(m);
        loss += lm_loss(m);
        nvtx_pop();
        nvtx_push("backward (the method's hook starts its communication)");
        if (lm_backward(m, hook ? method->grad_ready : NULL, hook ? method->ctx : NULL, err, sizeof err) != 0)
            comm_fatal(c, EXIT_FAILURE_RT, "%s", err);
        nvtx_pop();
        if (micro->done) micro->done(method ? method->ctx : NULL, a);
    }
    nvtx_push("finish_grads");
    if (method && method->finish_grads) method->finish_grads(method->ctx);
    nvtx_pop();
    nvtx_push("optimizer");
    if (method && method->update) {
        method->update(method->ctx);
        lm_params_changed(m);  // bf16: the copy is remade at the next forward
    } else if (lm_adamw(m, opt, ++*adam_step, err, sizeof err) != 0) {
        comm_fatal(c, EXIT_FAILURE_RT, "%s", err);
    }
    nvtx_pop();
    return loss;
}

int train_hashes_agree(comm_t* c, unsigned long long h, int group, int ngroups) {
    // max of h and of -h per group: equal (up to sign) iff every rank of the group had the same
    long long* v = malloc((size_t)2 * ngroups * sizeof *v);
    if (!v) DIE("out of host memory");
    for (int q = 0; q < 2 * ngroups; q++) v[q] = LLONG_MIN;
    v[group] = (long long)(h >> 1), v[ngroups + group] = -(long long)(h >> 1);
    comm_host_allreduce_i64(c, v, 2 * ngroups, COMM_MAX);
    int same = 1;
    for (int q = 0; q < ngroups; q++)  // (a group no rank named keeps LLONG_MIN: nothing to compare)
        if (v[q] != LLONG_MIN && v[q] != -v[ngroups + q]) same = 0;
    free(v);
    return same;
}
void train_setup_comm(train_setup_t* s) { s->c = comm_init(s->backend, comm_timeout_flag(s->f.comm_timeout)); }
