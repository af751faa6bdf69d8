// ddp_train: the Transformer LM trained data-parallel with the DDP layer (ddp.h).
//
//   scripts/mpirun.sh 2 build/06_ddp/ddp_train --model xl --context 512 --batch 2 --variant all
//   scripts/mpirun.sh 3 build/06_ddp/ddp_train --model tiny --check-single 1     # CPU, MPI
//
// Every rank starts from its own seed (so the replicas differ), then the DDP layer broadcasts
// rank 0's parameters. Each step the global batch (batch × ranks rows, a pure function of the
// seed and the step) is cut into one slice per rank; the backward's hook starts the gradient
// all-reduces; AdamW then runs identically everywhere. Rank 0 prints the loss per step and a
// timing table per variant: step time, time communicating, and the part of it left exposed
// after the backward (GPU: CUDA events; CPU: host clock). At the end every rank compares a
// checksum of its parameters with the others' (they must be bitwise identical), and with
// --check-single rank 0 also trains one model on the whole global batch and compares.
//
// Backends: the CPU model over MPI (host memory), or the CUDA model over NCCL (one GPU a rank).
//
// --zero K / --shard course: optimizer-state sharding is stage 07's, and a stage links only the
// stages before it, so ddp_train hands such a run to 07's zero_train (execv before MPI starts,
// the same flags; every rank does it, so mpirun sees one program throughout). Flags zero_train
// does not have (--variant, --timeline, --nvtx, --check-single) are refused with one line.
#include <errno.h>
#include <math.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "04_flashattn_bwd/flash_bwd.h"
#include "06_ddp/ddp.h"
#include "06_ddp/replica.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "common/nvtx.h"
#include "common/profiler.h"
#include "common/stats.h"
#include "common/timer.h"

#define MAX_RUNS 32

typedef struct {
    const char* name;    // "none" (no communication: the single-GPU baseline), or a variant
    ddp_variant_t v;
    double bucket_mb;
    double first_mb;     // cap of the first bucket (PyTorch's default plan: 1 MiB, then 25)
    int n_buckets;       // all-reduces a step (filled in when run)
} run_t;

// "25", or "1+25" for a run with a smaller first bucket.
static void bucket_label(const run_t* run, const char* pre, const char* post, char* out, size_t n) {
    if (run->first_mb < run->bucket_mb) snprintf(out, n, "%s%g+%g%s", pre, run->first_mb, run->bucket_mb, post);
    else snprintf(out, n, "%s%g%s", pre, run->bucket_mb, post);
}

typedef struct {
    replica_t rep;          // the model, its parameter table and the data (replica.h)
    int steps, warmup;
    adamw_config_t opt;
    int adam_step;
} trainer_t;

static const float* params_of(trainer_t* t) { return t->rep.gpu ? model_gpu_params(t->rep.m) : t->rep.cpu.params; }

// One training step on this rank's slice of the global batch `step`. d NULL: no DDP (each rank
// trains alone: the baseline's timing). Returns the rank's loss; fills the phase times (ms).
static float train_step(trainer_t* t, ddp_t* d, int64_t step, double* step_ms, double* exposed_ms,
                        double* comm_ms) {
    const int32_t *in, *tg;
    replica_batch(&t->rep, step, &in, &tg);
    float loss;
    char err[256];
    if (t->rep.gpu) {
        cudaStream_t s = model_gpu_stream(t->rep.m);
        cudaEvent_t e0, e_bwd, e_comm, e_end;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e_bwd));
        CUDA_CHECK(cudaEventCreate(&e_comm));
        CUDA_CHECK(cudaEventCreate(&e_end));
        model_gpu_set_tokens(t->rep.m, in, tg);
        CUDA_CHECK(cudaEventRecord(e0, s));
        // NVTX ranges (--nvtx) mark the launches of each phase for anyone with Nsight Systems.
        nvtx_push("forward");
        model_gpu_forward_async(t->rep.m, model_gpu_inputs(t->rep.m), model_gpu_targets(t->rep.m));
        nvtx_pop();
        nvtx_push("backward (all-reduces start in its hook)");
        if (model_gpu_backward(t->rep.m, d ? ddp_grad_ready : NULL, d, err, sizeof err) != 0) fail("%s", err);
        nvtx_pop();
        CUDA_CHECK(cudaEventRecord(e_bwd, s));
        nvtx_push("ddp_finish_grads");
        if (d) ddp_finish_grads(d);  // the compute stream now waits for the all-reduces
        nvtx_pop();
        CUDA_CHECK(cudaEventRecord(e_comm, s));
        nvtx_push("optimizer");
        if (model_gpu_adamw(t->rep.m, &t->opt, ++t->adam_step, err, sizeof err) != 0) fail("%s", err);
        nvtx_pop();
        CUDA_CHECK(cudaEventRecord(e_end, s));
        comm_stream_sync(t->rep.c, s, "the training step");
        float a = 0, b = 0;
        CUDA_CHECK(cudaEventElapsedTime(&a, e0, e_end));
        CUDA_CHECK(cudaEventElapsedTime(&b, e_bwd, e_comm));
        *step_ms = a;
        *exposed_ms = b;
        *comm_ms = d ? ddp_comm_ms(d) : 0.0;
        loss = model_gpu_loss(t->rep.m);
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e_bwd));
        CUDA_CHECK(cudaEventDestroy(e_comm));
        CUDA_CHECK(cudaEventDestroy(e_end));
    } else {
        double t0 = time_now_s();
        loss = model_cpu_forward(&t->rep.cpu, in, tg, t->rep.B, t->rep.T);
        model_cpu_backward(&t->rep.cpu, d ? ddp_grad_ready : NULL, d);
        double t1 = time_now_s();
        if (d) ddp_finish_grads(d);
        double t2 = time_now_s();
        model_cpu_adamw_step(&t->rep.cpu, &t->opt);
        *step_ms = 1e3 * (time_now_s() - t0);
        *exposed_ms = 1e3 * (t2 - t1);  // the CPU's overlap is partial: what is left after the backward
        *comm_ms = *exposed_ms;
    }
    return loss;
}

// FNV-1a over the parameter bytes: equal on every rank iff the replicas are bitwise identical
// (up to a 2^-64 chance).
static unsigned long long params_hash(trainer_t* t) {
    const size_t n = t->rep.lay->total;
    float* h = malloc(n * sizeof(float));
    if (!h) DIE("out of host memory");
    if (t->rep.gpu) model_gpu_get_params(t->rep.m, h);
    else memcpy(h, params_of(t), n * sizeof(float));
    unsigned long long x = 1469598103934665603ull;
    const unsigned char* p = (const unsigned char*)h;
    for (size_t i = 0; i < n * sizeof(float); i++) x = (x ^ p[i]) * 1099511628211ull;
    free(h);
    return x;
}

// Rank 0 trains one model on every step's whole global batch and compares its parameters with
// the DDP replica's. The same mean-loss gradient, summed in another order (per-rank means,
// then averaged), so equal up to fp32 rounding that AdamW's normalisation can amplify for
// near-zero second moments over a few steps: rtol 1e-4, atol 1e-5.
static int check_single(trainer_t* t, int steps, uint64_t seed) {
    const int W = t->rep.c->world;
    const size_t n = t->rep.lay->total;
    float* got = malloc(n * sizeof(float));
    float* want = malloc(n * sizeof(float));
    if (!got || !want) DIE("out of host memory");
    if (t->rep.gpu) model_gpu_get_params(t->rep.m, got);
    else memcpy(got, t->rep.cpu.params, n * sizeof(float));
    if (t->rep.gpu) {
        char err[256];
        model_gpu_t* s = model_gpu_create(&t->rep.cfg, t->rep.B * W, t->rep.T, MP_FP32, NULL, seed, err, sizeof err);
        if (!s) fail("--check-single: %s", err);
        for (int k = 0; k < steps; k++) {
            sample_batch(&t->rep.data, t->rep.B * W, t->rep.T, k, t->rep.in_all, t->rep.tg_all);
            model_gpu_set_tokens(s, t->rep.in_all, t->rep.tg_all);
            model_gpu_forward_async(s, model_gpu_inputs(s), model_gpu_targets(s));
            if (model_gpu_backward(s, NULL, NULL, err, sizeof err) || model_gpu_adamw(s, &t->opt, k + 1, err, sizeof err))
                fail("--check-single: %s", err);
        }
        model_gpu_get_params(s, want);
        model_gpu_destroy(s);
    } else {
        model_cpu_t s;
        model_cpu_create(&s, &t->rep.cfg, t->rep.B * W, t->rep.T, seed);
        for (int k = 0; k < steps; k++) {
            sample_batch(&t->rep.data, t->rep.B * W, t->rep.T, k, t->rep.in_all, t->rep.tg_all);
            model_cpu_forward(&s, t->rep.in_all, t->rep.tg_all, t->rep.B * W, t->rep.T);
            model_cpu_backward(&s, NULL, NULL);
            model_cpu_adamw_step(&s, &t->opt);
        }
        memcpy(want, s.params, n * sizeof(float));
        model_cpu_destroy(&s);
    }
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

// The hand-off above. Returns if argv has neither --zero nor --shard; else execs zero_train or
// exits 2 with one line (rank 0's, or every process's outside mpirun).
static void hand_to_zero_train(int argc, char** argv) {
    static const char* const ddp_only[] = {"--variant", "--timeline", "--nvtx", "--check-single"};
    int zero = 0;
    const char* bad = NULL;
    for (int i = 1; i < argc; i++) {
        const size_t n = strcspn(argv[i], "=");
        if ((n == 6 && !strncmp(argv[i], "--zero", 6)) || (n == 7 && !strncmp(argv[i], "--shard", 7))) zero = 1;
        for (size_t k = 0; k < sizeof ddp_only / sizeof *ddp_only; k++)
            if (strlen(ddp_only[k]) == n && !strncmp(argv[i], ddp_only[k], n)) bad = ddp_only[k];
    }
    if (!zero) return;
    // Every refusal below is this program's one line (rank 0's), exit 2 on every rank.
    if (argc > 0 && argv[0]) set_progname(argv[0]);
    if (bad) comm_bad_input("%s is not a flag of stage 07's zero_train, which runs --zero/--shard (its own flags: zero_train --help)", bad);
    // The values of --zero and --shard are checked here too, so that the common mistakes are
    // named by this program before it hands over.
    for (int i = 1; i < argc; i++) {
        const size_t n = strcspn(argv[i], "=");
        const int is_zero = n == 6 && !strncmp(argv[i], "--zero", 6), is_shard = n == 7 && !strncmp(argv[i], "--shard", 7);
        if (!is_zero && !is_shard) continue;
        const char* v = NULL;  // --name=value, or --name value (a value never starts with --)
        if (argv[i][n] == '=') v = argv[i] + n + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) v = argv[i + 1];
        if (!v) comm_bad_input("%s needs a value", is_zero ? "--zero" : "--shard");
        if (is_shard) {
            if (strcmp(v, "zero") && strcmp(v, "course")) comm_bad_input("--shard: '%s' is not one of zero|course", v);
        } else if (strcmp(v, "all") != 0) {
            char why[256];
            if (choice_list_check("zero", v, "0|1|2|3", why, sizeof why) != 0)
                comm_bad_input("--zero: '%s' is not a ZeRO level (a comma list of 0, 1, 2, 3, or all)", v);
        }
    }
    char self[4096], path[4200];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) comm_bad_input("--zero: cannot find this program's path (/proc/self/exe): %s", strerror(errno));
    self[len] = '\0';
    char* slash = strrchr(self, '/');
    *slash = '\0';  // .../06_ddp
    snprintf(path, sizeof path, "%s/../07_zero/zero_train", self);
    if (access(path, X_OK) != 0)
        comm_bad_input("--zero/--shard run stage 07's zero_train, which is not built at %s (make build-07)", path);
    // zero_train prints this once it has accepted the flags (a refused flag stays one line), and
    // speaks under this program's name (argv[0] is kept).
    char notice[4400];
    snprintf(notice, sizeof notice, "ddp_train: --zero/--shard: optimizer-state sharding is stage 07's; running %s with the same flags", path);
    setenv("ZERO_TRAIN_HANDOFF", notice, 1);
    fflush(stdout);
    execv(path, argv);
    comm_bad_input("cannot run %s: %s", path, strerror(errno));
}

int main(int argc, char** argv) {
    hand_to_zero_train(argc, argv);  // --zero / --shard: stage 07's program takes the run
    const char* model_s = "tiny";
    const char* variant_s = "bucketed";
    const char* bucket_s = "25";
    const char* backend_s = "auto";
    const char* prec_s = "fp32";
    const char* attn_s = "naive";
    const char* csv = "";
    const char* timeline = "";
    const char *zero_s = "", *shard_s = "";  // never set here: hand_to_zero_train has taken any run that gives them
    int context = 32, B = 2, steps = 5, warmup = 2, check = 0, seed = 1, nvtx = 0;
    double lr = 1e-3, timeout_s = 0;
    cli_opt_t opts[] = {
        {"model", CLI_CHOICE, &model_s, "tiny", "model size", MODEL_SIZE_CHOICES},
        {"context", CLI_INT, &context, "32", "sequence length T", NULL},
        {"batch", CLI_INT, &B, "2", "sequences per rank (the global batch is batch x ranks)", NULL},
        {"precision", CLI_CHOICE, &prec_s, "fp32", "GPU precision (the CPU model is fp32)", MODEL_PRECISION_CHOICES},
        {"attention", CLI_CHOICE, &attn_s, "naive", "GPU attention: naive, or flash (stage 04; bf16)", "naive|flash"},
        {"variant", CLI_STR, &variant_s, "bucketed", "none|naive|flat|overlap|bucketed, a comma list, or all (none: no communication)", NULL},
        {"bucket-mb", CLI_STR, &bucket_s, "25", "bucket caps in MiB for bucketed (comma list: one run each; F+C caps the first bucket at F, as PyTorch's 1+25)", NULL},
        {"steps", CLI_INT, &steps, "5", "measured steps per run", NULL},
        {"warmup", CLI_INT, &warmup, "2", "steps before measuring (each run)", NULL},
        {"backend", CLI_CHOICE, &backend_s, "auto", "auto: nccl with a GPU per rank, else mpi", COMM_BACKEND_AUTO_CHOICES},
        {"check-single", CLI_INT, &check, "0", "1: rank 0 also trains one model on the whole batch and compares (one variant)", NULL},
        {"seed", CLI_INT, &seed, "1", "rank r initialises from seed + r, data from seed", NULL},
        {"lr", CLI_DOUBLE, &lr, "1e-3", "AdamW learning rate", NULL},
        {"csv", CLI_STR, &csv, "", "append the timing rows to this CSV (rank 0)", NULL},
        {"timeline", CLI_STR, &timeline, "", "GPU: after each run, profile one more step on rank 0 and draw its per-stream kernel timeline into this directory (CSV + PNG)", NULL},
        {"nvtx", CLI_FLAG, &nvtx, "0", "NVTX ranges around forward, backward, the gradient wait and the optimizer (for nsys)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
        {"zero", CLI_STR, &zero_s, "", "ZeRO levels 0|1|2|3 (comma list, or all): hands the run to stage 07's zero_train with the same flags", NULL},
        {"shard", CLI_STR, &shard_s, "", "course: the course's sharded optimizer (stage 07's zero_train, as --zero)", NULL},
    };
    comm_cli_parse(argc, argv, "Data-parallel training of the Transformer LM (run under mpirun).", opts, CLI_COUNT(opts));
#define BAD(...) comm_bad_input(__VA_ARGS__)
    trainer_t t = {0};
    model_config_t cfg;
    if (model_config_by_name(model_s, context, &cfg) != 0) BAD("--model: unknown size '%s'", model_s);
    if (context < 1 || context > 65536) BAD("--context: %d is out of range (1..65536)", context);
    if (B < 1 || B > 4096) BAD("--batch: %d is out of range (1..4096)", B);
    if (steps < 1 || steps > 100000) BAD("--steps: %d is out of range (1..100000)", steps);
    if (warmup < 0 || warmup > 1000) BAD("--warmup: %d is out of range (0..1000)", warmup);
    if (check != 0 && check != 1) BAD("--check-single: %d must be 0 or 1", check);
    if (!(lr > 0 && lr < 10)) BAD("--lr: %g is out of range (0, 10)", lr);

    // The runs: variants × bucket sizes.
    run_t runs[MAX_RUNS];
    int nruns = 0;
    double buckets[16], firsts[16];
    int nb = 0;
    {
        char buf[256], why[320];
        if (list_check_items("bucket-mb", bucket_s, why, sizeof why) != 0) BAD("%s", why);
        if (list_check_items("variant", variant_s, why, sizeof why) != 0) BAD("%s", why);
        if (strlen(bucket_s) >= sizeof buf) BAD("--bucket-mb: longer than %zu characters", sizeof buf - 1);
        if (strlen(variant_s) >= sizeof buf) BAD("--variant: longer than %zu characters", sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", bucket_s);
        for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            // "F+C": the first bucket capped at F MiB, the rest at C (PyTorch DDP: 1+25)
            char* end;
            double v = strtod(tok, &end), first = -1;
            if (*end == '+' && end > tok) { first = v; v = strtod(end + 1, &end); }
            if (*end || !(v >= 0) || v > 1e6 || nb >= 16 || (first != -1 && !(first >= 0 && first <= v)))
                BAD("--bucket-mb: '%s' is not a list of MiB caps >= 0 (C, or F+C with F <= C for a "
                    "small first bucket; at most 16)", bucket_s);
            firsts[nb] = first < 0 ? v : first;
            buckets[nb++] = v;
        }
        // "none" last: a run without communication lets the replicas (and their AdamW moments)
        // drift apart, so the replicas are compared right after the last DDP run before it.
        snprintf(buf, sizeof buf, "%s", strcmp(variant_s, "all") == 0 ? "naive,flat,overlap,bucketed,none" : variant_s);
        for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            ddp_variant_t v = DDP_FLAT;
            int none = strcmp(tok, "none") == 0;
            if (!none && ddp_variant_parse(tok, &v) != 0)
                BAD("--variant: unknown '%s' (allowed: none, %s, or all)", tok, DDP_VARIANT_CHOICES);
            for (int k = 0; k < (v == DDP_BUCKETED && !none ? nb : 1); k++) {
                if (nruns >= MAX_RUNS) BAD("--variant/--bucket-mb: more than %d runs", MAX_RUNS);
                runs[nruns++] = (run_t){none ? "none" : ddp_variant_name(v), v, none ? 0 : buckets[k],
                                        none ? 0 : firsts[k], 0};
            }
        }
    }
    if (check && nruns != 1) BAD("--check-single: give one variant (got %d runs)", nruns);

    comm_backend_t backend;
    comm_backend_choose(backend_s, &backend);  // the flag's choices were checked by the parser
    model_precision_t prec = strcmp(prec_s, "bf16") == 0 ? MP_BF16 : MP_FP32;
    if (backend == COMM_MPI && prec != MP_FP32) BAD("--precision bf16 needs the GPU (NCCL) backend");
    if (backend == COMM_MPI && strcmp(attn_s, "flash") == 0) BAD("--attention flash needs the GPU (NCCL) backend");
    if (*timeline && backend == COMM_MPI) BAD("--timeline needs the GPU (NCCL) backend (it draws CUDA streams)");
    if (*timeline && !profiler_available()) BAD("--timeline needs CUPTI and a GPU");
    {  // the output places, checked before any work (rank 0 writes them at the end)
        char why[1024];
        if (*csv && file_check_writable(csv, 0, why, sizeof why) != 0) BAD("--csv: %s", why);
        if (*timeline && dir_check_writable(timeline, why, sizeof why) != 0) BAD("--timeline: cannot write into %s: %s", timeline, why);
    }
    nvtx_enable(nvtx);
    comm_t* c = comm_init(backend, comm_timeout_flag(timeout_s));
    const int W = c->world, r = c->rank;
    replica_create(&t.rep, c, &cfg, B, context, prec, strcmp(attn_s, "flash") == 0 ? flash_attention_impl() : NULL, seed);
    t.steps = steps;
    t.warmup = warmup;
    t.opt = adamw_default();
    t.opt.lr = (float)lr;
    float* P = t.rep.gpu ? model_gpu_params(t.rep.m) : t.rep.cpu.params;
    float* G = t.rep.gpu ? model_gpu_grads(t.rep.m) : t.rep.cpu.grads;
    cudaStream_t cs = t.rep.gpu ? model_gpu_stream(t.rep.m) : NULL;

    if (r == 0) {
        gpu_info_t gi = {0};
        if (t.rep.gpu) gpu_info(t.rep.c->device, &gi);
        printf("# ddp_train: %s, context %d, batch %d per rank x %d ranks, %s, %s backend%s%s, %zu parameters (%.2f GB fp32)\n",
               model_s, context, B, W, prec_s, comm_backend_name(backend), t.rep.gpu ? ", GPU " : "",
               t.rep.gpu ? gi.name : "", param_count(t.rep.lay), 4e-9 * (double)param_count(t.rep.lay));
        printf("# per run: %d warm-up steps, then the median of %d; exposed = from the end of the backward to the last all-reduce's end\n\n",
               warmup, steps);
    }


    int status = 0;
    int64_t step = 0;
    double med_all[MAX_RUNS][3];
    int checked = 0;
    for (int ri = 0; ri < nruns; ri++) {
        const run_t* run = &runs[ri];
        ddp_t* d = strcmp(run->name, "none") == 0 ? NULL
                 : ddp_create_first(t.rep.c, t.rep.table, t.rep.lay->n, P, G, t.rep.lay->total, run->v,
                                    run->first_mb, run->bucket_mb, cs);
        // Rank 0's parameters everywhere at the start of every run (a run without communication
        // before it lets the replicas drift apart).
        {
            ddp_t* d0 = d ? d : ddp_create(t.rep.c, t.rep.table, t.rep.lay->n, P, G, t.rep.lay->total, DDP_FLAT, 0, cs);
            ddp_broadcast_params(d0);
            if (!d) ddp_destroy(d0);
            if (t.rep.gpu) model_gpu_params_changed(t.rep.m);
        }
        double* st = malloc((size_t)steps * 3 * sizeof(double));
        if (!st) DIE("out of host memory");
        for (int k = 0; k < warmup + steps; k++, step++) {
            double a, b, c2;
            // With --check-single the data follows the step number from 0 (as the single model's).
            float loss = train_step(&t, d, check ? k : step, &a, &b, &c2);
            if (k >= warmup) { st[k - warmup] = a; st[steps + k - warmup] = b; st[2 * steps + k - warmup] = c2; }
            if (r == 0 && check)
                printf("  %-8s step %3d  loss %.5f (rank 0)  %.1f ms\n", run->name, k, loss, a);
            if (!isfinite(loss)) comm_fatal(t.rep.c, 1, "loss is %g at step %d", loss, k);
        }
        double med[3];
        for (int q = 0; q < 3; q++) {
            med[q] = stats_compute(st + q * steps, steps).median;
            comm_host_allreduce_f64(t.rep.c, &med[q], 1, COMM_MAX);  // the slowest rank
        }
        free(st);
        memcpy(med_all[ri], med, sizeof med);
        if (*timeline) {
            // One more step, profiled on rank 0 only: every kernel of every stream with its GPU
            // start and end — the overlap (or its absence) of the all-reduces with the backward.
            if (r == 0) profiler_start();
            double a, b, c2;
            train_step(&t, d, step++, &a, &b, &c2);
            if (r == 0) {
                profiler_stop();
                char base[512], cap[32] = "", path[600], png[600], title[256];
                if (d && run->v == DDP_BUCKETED) bucket_label(run, "_", "MiB", cap, sizeof cap);
                snprintf(base, sizeof base, "%s/ddp_%s_%s%s", timeline, model_s, run->name, cap);
                snprintf(path, sizeof path, "%s.csv", base);
                snprintf(png, sizeof png, "%s.png", base);
                snprintf(title, sizeof title, "%s, %s%s, one step on rank 0 (%.1f ms)", model_s, run->name,
                         d && run->v == DDP_BUCKETED ? " buckets" : "", a);
                if (mkdir_p(timeline) != 0 || profiler_write_timeline_csv(path) != 0)
                    DIE("--timeline: cannot write %s: %s", path, strerror(errno));
                char perr[512];
                if (profiler_plot_timeline(path, png, title, perr, sizeof perr) != 0)
                    printf("  timeline: %s written; no PNG: %s\n", path, perr);
                else
                    printf("  timeline: %s\n", png);
            }
        }
        runs[ri].n_buckets = d ? ddp_n_buckets(d) : 0;
        if (r == 0) {
            printf("  %-8s done: %.2f ms a step\n", run->name, med[0]);
            fflush(stdout);
        }
        if (d) ddp_destroy(d);
        // Every replica must be bitwise identical after the DDP runs (before any "none" run).
        if (d && !checked && (ri + 1 == nruns || strcmp(runs[ri + 1].name, "none") == 0)) {
            checked = 1;
            unsigned long long h = params_hash(&t);
            long long v[2] = {(long long)(h >> 1), -(long long)(h >> 1)};
            comm_host_allreduce_i64(t.rep.c, v, 2, COMM_MAX);
            const int same = v[0] == -v[1];
            if (r == 0) printf("replicas: %s\n", same ? "bitwise identical on every rank" : "DIFFERENT across ranks");
            if (!same) status = 1;
        }
    }
    double base_ms = 0;
    for (int ri = 0; ri < nruns; ri++)
        if (strcmp(runs[ri].name, "none") == 0) base_ms = med_all[ri][0];
    if (r == 0) {
        printf("\n| variant  | bucket (MiB) |  n_b | step (ms) | comm (ms) | exposed (ms) | over none |\n");
        printf("|----------|--------------|------|-----------|-----------|--------------|-----------|\n");
        FILE* f = NULL;
        if (*csv) {
            f = fopen(csv, "a");
            if (!f) DIE("--csv: cannot open %s: %s", csv, strerror(errno));
            fseek(f, 0, SEEK_END);
            if (ftell(f) == 0) fprintf(f, "model,context,batch,ranks,precision,backend,variant,bucket_mb,n_buckets,step_ms,comm_ms,exposed_ms,overhead_pct\n");
        }
        for (int ri = 0; ri < nruns; ri++) {
            const run_t* run = &runs[ri];
            const double* med = med_all[ri];
            char bk[32] = "", ov[32] = "";
            if (run->v == DDP_BUCKETED && strcmp(run->name, "none")) bucket_label(run, "", "", bk, sizeof bk);
            if (base_ms > 0) snprintf(ov, sizeof ov, "%+.1f%%", 100.0 * (med[0] / base_ms - 1.0));
            printf("| %-8s | %12s | %4d | %9.2f | %9.2f | %12.2f | %9s |\n", run->name, bk, run->n_buckets, med[0], med[2], med[1], ov);
            if (f) fprintf(f, "%s,%d,%d,%d,%s,%s,%s,%s,%d,%.3f,%.3f,%.3f,%s\n", model_s, context, B, W, prec_s,
                           comm_backend_name(backend), run->name, bk, run->n_buckets, med[0], med[2], med[1], ov);
        }
        if (f) fclose(f);
    }
    if (check && r == 0) status |= check_single(&t, steps + warmup, (uint64_t)seed);
    long long st_all = status;
    comm_host_allreduce_i64(t.rep.c, &st_all, 1, COMM_MAX);
    replica_destroy(&t.rep);
    comm_destroy(c, 1);
    return (int)st_all;
}
