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
#include "common/replica.h"
#include "common/train_loop.h"
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

// DDP as the training loop's method (train_loop.h): the backward's hook starts the gradient
// all-reduces, finish_grads makes the compute stream wait for them, AdamW is the model's own.
static void ddp_finish(void* d) { ddp_finish_grads(d); }
static double ddp_comm(void* d) { return ddp_comm_ms(d); }
static train_method_t ddp_method(ddp_t* d) { return (train_method_t){d, ddp_grad_ready, ddp_finish, NULL, ddp_comm}; }

typedef struct {
    const char* name;
    int on;  // print every step (--check-single)
} step_print_t;
static void print_step(void* ctx, int k, const train_times_t* t) {
    const step_print_t* p = ctx;
    if (p->on) printf("  %-8s step %3d  loss %.5f (rank 0)  %.1f ms\n", p->name, k, t->loss, t->step_ms);
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
    train_flags_t f = train_flags_default();
    const char* variant_s = "bucketed";
    const char* bucket_s = "25";
    const char* timeline = "";
    const char *zero_s = "", *shard_s = "";  // never set here: hand_to_zero_train has taken any run that gives them
    int check = 0, nvtx = 0;
    cli_opt_t opts[TRAIN_FLAGS_N + 7];
    int nopts = train_flags_opts(&f, opts);
    opts[nopts++] = (cli_opt_t){"variant", CLI_STR, &variant_s, "bucketed", "none|naive|flat|overlap|bucketed, a comma list, or all (none: no communication)", NULL};
    opts[nopts++] = (cli_opt_t){"bucket-mb", CLI_STR, &bucket_s, "25", "bucket caps in MiB for bucketed (comma list: one run each; F+C caps the first bucket at F, as PyTorch's 1+25)", NULL};
    opts[nopts++] = (cli_opt_t){"check-single", CLI_INT, &check, "0", "1: rank 0 also trains one model on the whole batch and compares (one variant)", NULL};
    opts[nopts++] = (cli_opt_t){"timeline", CLI_STR, &timeline, "", "GPU: after each run, profile one more step on rank 0 and draw its per-stream kernel timeline into this directory (CSV + PNG)", NULL};
    opts[nopts++] = (cli_opt_t){"nvtx", CLI_FLAG, &nvtx, "0", "NVTX ranges around forward, backward, the gradient wait and the optimizer (for nsys)", NULL};
    opts[nopts++] = (cli_opt_t){"zero", CLI_STR, &zero_s, "", "ZeRO levels 0|1|2|3 (comma list, or all): hands the run to stage 07's zero_train with the same flags", NULL};
    opts[nopts++] = (cli_opt_t){"shard", CLI_STR, &shard_s, "", "course: the course's sharded optimizer (stage 07's zero_train, as --zero)", NULL};
    comm_cli_parse(argc, argv, "Data-parallel training of the Transformer LM (run under mpirun).", opts, nopts);
#define BAD(...) comm_bad_input(__VA_ARGS__)
    train_setup_t s;
    train_flags_check(&f, 0, &s);
    if (check != 0 && check != 1) BAD("--check-single: %d must be 0 or 1", check);
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
        // "none" runs last: a run without communication lets the replicas (and their AdamW moments)
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
        // An explicit list runs "none" last too, whatever its place in the list.
        run_t ordered[MAX_RUNS];
        int k = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int ri = 0; ri < nruns; ri++)
                if ((strcmp(runs[ri].name, "none") == 0) == pass) ordered[k++] = runs[ri];
        memcpy(runs, ordered, sizeof(run_t) * (size_t)nruns);
    }
    if (check && nruns != 1) BAD("--check-single: give one variant (got %d runs)", nruns);

    if (*timeline && s.backend == COMM_MPI) BAD("--timeline needs the GPU (NCCL) backend (it draws CUDA streams)");
    if (*timeline && !profiler_available()) BAD("--timeline needs CUPTI and a GPU");
    {  // the output place, checked before any work (rank 0 writes it at the end)
        char why[1024];
        if (*timeline && dir_check_writable(timeline, why, sizeof why) != 0) BAD("--timeline: cannot write into %s: %s", timeline, why);
    }
    nvtx_enable(nvtx);
    s.attn = strcmp(f.attention, "flash") == 0 ? flash_attention_impl() : NULL;
    train_setup(&s, lm_options(LM_CPU, 0, 0));
    const int W = s.c->world, r = s.c->rank;
    lm_t* m = s.rep.m;
    float* P = lm_params(m);
    float* G = lm_grads(m);
    cudaStream_t cs = lm_stream(m);
    train_banner(&s, "ddp_train", f.model);
    if (r == 0)
        printf("# per run: %d warm-up steps, then the median of %d; exposed = from the end of the backward to the last all-reduce's end\n\n",
               f.warmup, f.steps);

    int status = 0;
    double med_all[MAX_RUNS][4];  // medians: step, exposed, update, comm (train_run)
    int checked = 0;
    for (int ri = 0; ri < nruns; ri++) {
        const run_t* run = &runs[ri];
        ddp_t* d = strcmp(run->name, "none") == 0 ? NULL
                 : ddp_create_first(s.c, s.rep.table, s.rep.lay->n, P, G, s.rep.lay->total, run->v,
                                    run->first_mb, run->bucket_mb, cs);
        // Rank 0's parameters everywhere at the start of every run (a run without communication
        // before it lets the replicas drift apart).
        {
            ddp_t* d0 = d ? d : ddp_create(s.c, s.rep.table, s.rep.lay->n, P, G, s.rep.lay->total, DDP_FLAT, 0, cs);
            ddp_broadcast_params(d0);
            if (!d) ddp_destroy(d0);
            lm_params_changed(m);
        }
        const train_method_t method = d ? ddp_method(d) : (train_method_t){0};
        step_print_t pr = {run->name, r == 0 && check};
        // With --check-single the data follows the step number from 0 (as the single model's).
        train_run(&s, d ? &method : NULL, f.warmup, f.steps, check, print_step, &pr, med_all[ri]);
        const double* med = med_all[ri];
        if (*timeline) {
            // One more step, profiled on rank 0 only: every kernel of every stream with its GPU
            // start and end — the overlap (or its absence) of the all-reduces with the backward.
            if (r == 0) profiler_start();
            train_times_t tt;
            train_step(&s, d ? &method : NULL, s.step++, &tt);
            if (r == 0) {
                profiler_stop();
                char base[512], cap[32] = "", path[600], png[600], title[256];
                if (d && run->v == DDP_BUCKETED) bucket_label(run, "_", "MiB", cap, sizeof cap);
                snprintf(base, sizeof base, "%s/ddp_%s_%s%s", timeline, f.model, run->name, cap);
                snprintf(path, sizeof path, "%s.csv", base);
                snprintf(png, sizeof png, "%s.png", base);
                snprintf(title, sizeof title, "%s, %s%s, one step on rank 0 (%.1f ms)", f.model, run->name,
                         d && run->v == DDP_BUCKETED ? " buckets" : "", tt.step_ms);
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
            const int same = train_replicas_identical(&s);
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
        FILE* csv = *f.csv ? train_csv_open("csv", f.csv, "model,context,batch,ranks,precision,backend,variant,bucket_mb,n_buckets,step_ms,comm_ms,exposed_ms,overhead_pct") : NULL;
        for (int ri = 0; ri < nruns; ri++) {
            const run_t* run = &runs[ri];
            const double* med = med_all[ri];
            char bk[32] = "", ov[32] = "";
            if (run->v == DDP_BUCKETED && strcmp(run->name, "none")) bucket_label(run, "", "", bk, sizeof bk);
            if (base_ms > 0) snprintf(ov, sizeof ov, "%+.1f%%", 100.0 * (med[0] / base_ms - 1.0));
            printf("| %-8s | %12s | %4d | %9.2f | %9.2f | %12.2f | %9s |\n", run->name, bk, run->n_buckets, med[0], med[3], med[1], ov);
            if (csv) fprintf(csv, "%s,%d,%d,%d,%s,%s,%s,%s,%d,%.3f,%.3f,%.3f,%s\n", f.model, f.context, f.batch, W, f.precision,
                             comm_backend_name(s.backend), run->name, bk, run->n_buckets, med[0], med[3], med[1], ov);
        }
        if (csv) fclose(csv);
    }
    if (check && r == 0) status |= train_check_single(&s, f.steps + f.warmup);
    long long st_all = status;
    comm_host_allreduce_i64(s.c, &st_all, 1, COMM_MAX);
    train_teardown(&s);
    return (int)st_all;
}
