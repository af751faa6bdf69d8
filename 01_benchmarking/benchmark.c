// The stage 01 benchmark: times the Transformer LM's forward, backward and optimizer step.
// This file is the driver (benchmark_main(), benchmark.h); the programs are thin mains that
// say which attention implementations exist: 01_benchmarking/benchmark_main.c (naive only),
// 03_flashattn_fwd/benchmark_main.c (+ flash forward), 04_flashattn_bwd/benchmark_main.c
// (+ flash forward and backward, so --attention flash trains).
//
//   build/01_benchmarking/benchmark --model small --context 512 --batch 4 --mode train
//       --precision bf16 --warmup 5 --steps 10 [--nvtx] [--profile] [--memory]
//
// GPU timing: CUDA events recorded on the model's stream between the phases (forward |
// backward | optimizer) and one synchronisation per step, so a phase's time is GPU time
// between two points of the stream, not host launch time. --device cpu times the plain-C
// reference (common/model_cpu.h) with the host clock; it is only quick for --model tiny.
// Prints one Markdown row, appends it to <out>/<csv> (and rewrites the matching .json).
// Out of memory (at creation or in a step) is a row with status "OOM" and exit status 0, so
// that a sweep goes on; any other failure dies.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/memtrace.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/model_gpu.h"
#include "common/nvtx.h"
#include "common/profiler.h"
#include "common/rng.h"
#include "common/stats.h"
#include "common/table.h"
#include "common/timer.h"
#include "01_benchmarking/benchmark.h"

enum { MODE_FWD = 0, MODE_FB = 1, MODE_TRAIN = 2 };
enum { PH_FWD = 0, PH_BWD, PH_OPT, PH_STEP, PH_N };

typedef struct {
    const char *model, *mode_s, *precision, *attention, *device, *out, *csv, *checkpoint;
    int ckpt;  // activation checkpointing K (0 none, 1 block, K every-K; model_cpu.h)
    int ckpt_col;  // --checkpoint given (even none): the row has the "checkpoint" column
    char ckpt_name[24];  // its canonical name ("every-4")
    int context, batch, warmup, steps, seed, nvtx, profile, memory;
    int head_chunk;  // --head-chunk: the chunked LM head's rows (0: the whole logits; model_cpu.h)
    int mode;
    model_config_t cfg;
    const attention_impl_t* attn;  // NULL: the model's naive attention
    char tag[160];  // model_ctx_prec_mode[_attention], for file names
} args_t;

// Per-phase memory snapshots (--memory): taken during the first step, when the lazily
// allocated buffers (gradients, backward scratch, AdamW moments) appear.
typedef struct {
    const char* label;
    mem_stats_t st;
} mem_snap_t;
#define MAX_SNAPS 8
static mem_snap_t g_snaps[MAX_SNAPS];
static int g_nsnaps;
static void snap(const args_t* a, const char* label) {
    if (!a->memory || g_nsnaps >= MAX_SNAPS) return;
    g_snaps[g_nsnaps].label = label;
    g_snaps[g_nsnaps].st = mem_stats(strcmp(a->device, "cpu") == 0 ? DEV_CPU : DEV_CUDA);
    g_nsnaps++;
}
static void phase(const args_t* a, int measuring, const char* name) {
    if (a->profile && measuring) profiler_set_phase(name);
    if (a->memory) memtrace_mark(name);
}

// ---------------------------------------------------------------- results
static const char* HEADERS[] = {
    "model", "context", "batch", "mode", "precision", "attention", "device", "warmup", "steps",
    "status", "forward_ms", "forward_std", "backward_ms", "backward_std", "optimizer_ms",
    "optimizer_std", "step_ms", "step_std", "tokens_per_s", "tflops", "peak_gib", "loss", "gpu"};
#define NCOLS ((int)(sizeof HEADERS / sizeof HEADERS[0]))
// With --checkpoint given (none included) the row has one more column, last: "checkpoint"; rows
// without the flag keep the columns of every CSV written before (a sweep over policies, none
// included, goes to its own --csv: the README's command).
static const char* HEADERS_CK[NCOLS + 1];
static int ncols(const args_t* a) { return NCOLS + (a->ckpt_col != 0); }
static const char* const* headers(const args_t* a) {
    if (!a->ckpt_col) return HEADERS;
    for (int i = 0; i < NCOLS; i++) HEADERS_CK[i] = HEADERS[i];
    HEADERS_CK[NCOLS] = "checkpoint";
    return HEADERS_CK;
}

typedef struct {
    int oom;
    char reason[512];
    stats_t ph[PH_N];
    double peak_bytes;
    float loss;
    char gpu[256];
} result_t;

static void fill_row(table_t* t, const args_t* a, const result_t* r) {
    table_row(t);
    table_cell(t, "%s", a->model);
    table_cell(t, "%d", a->context);
    table_cell(t, "%d", a->batch);
    table_cell(t, "%s", a->mode_s);
    table_cell(t, "%s", a->precision);
    table_cell(t, "%s", a->attention);
    table_cell(t, "%s", a->device);
    table_cell(t, "%d", a->warmup);
    table_cell(t, "%d", a->steps);
    table_cell(t, "%s", r->oom ? "OOM" : "ok");
    for (int p = 0; p < PH_N; p++) {
        const int used = p == PH_STEP || p == PH_FWD || (p == PH_BWD && a->mode >= MODE_FB) ||
                         (p == PH_OPT && a->mode == MODE_TRAIN);
        if (r->oom || !used) {
            table_cell(t, "%s", "");
            table_cell(t, "%s", "");
        } else {
            table_cell(t, "%.3f", r->ph[p].mean);
            table_cell(t, "%.3f", r->ph[p].std);
        }
    }
    if (r->oom) {
        for (int i = 0; i < 4; i++) table_cell(t, "%s", "");
    } else {
        const double step_s = r->ph[PH_STEP].mean / 1e3;
        const double flops = model_forward_flops(&a->cfg, a->batch, a->context) * (a->mode == MODE_FWD ? 1.0 : 3.0);
        table_cell(t, "%.0f", (double)a->batch * a->context / step_s);
        table_cell(t, "%.2f", flops / step_s / 1e12);
        table_cell(t, "%.3f", r->peak_bytes / (1024.0 * 1024.0 * 1024.0));
        table_cell(t, "%.4f", r->loss);
    }
    table_cell(t, "%s", r->gpu);
    if (a->ckpt_col) table_cell(t, "%s", a->ckpt_name);
}

// Appends the row to <out>/<csv> (writing the header if the file is new, refusing a file
// with another header), atomically; then writes the whole file's rows as JSON beside it.
static void append_results(const args_t* a, const table_t* row) {
    char path[1024], tmp[1100], json[1100];
    snprintf(path, sizeof path, "%s/%s", a->out, a->csv);
    if (mkdir_p(a->out) != 0) DIE("cannot create the directory %s: %s", a->out, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.row.%d", path, (int)getpid());
    if (table_write_csv(row, tmp) != 0) DIE("cannot write %s", tmp);
    // tmp holds "header\nrow\n".
    FILE* f = fopen(tmp, "r");
    char header[4096] = "", line[4096] = "";
    if (!f || !fgets(header, sizeof header, f) || !fgets(line, sizeof line, f)) DIE("cannot read back %s", tmp);
    fclose(f);
    remove(tmp);
    // The old content, if any.
    char* old = NULL;
    size_t old_len = 0;
    FILE* g = fopen(path, "r");
    if (g) {
        fseek(g, 0, SEEK_END);
        old_len = (size_t)ftell(g);
        fseek(g, 0, SEEK_SET);
        old = malloc(old_len + 1);
        if (!old || fread(old, 1, old_len, g) != old_len) DIE("cannot read %s", path);
        old[old_len] = 0;
        fclose(g);
        if (old_len && strncmp(old, header, strlen(header)) != 0)
            fail("%s has other columns than this benchmark writes; use another --csv or remove it", path);
    }
    FILE* o = afile_open(path);
    if (!o) DIE("cannot write %s", path);
    if (old_len) fputs(old, o);
    else fputs(header, o);
    fputs(line, o);
    if (afile_commit(o) != 0) DIE("cannot write %s", path);
    // JSON of every row so far: parse the CSV back (cells never contain commas).
    table_t* all = table_new("benchmark", ncols(a), headers(a));
    FILE* r = fopen(path, "r");
    if (!r || !fgets(line, sizeof line, r)) DIE("cannot read %s", path);
    while (fgets(line, sizeof line, r)) {
        line[strcspn(line, "\r\n")] = 0;
        table_row(all);
        char* cell = line;
        for (int c = 0; c < ncols(a); c++) {
            char* comma = cell ? strchr(cell, ',') : NULL;
            if (comma) *comma = 0;
            table_cell(all, "%s", cell ? cell : "");
            cell = comma ? comma + 1 : NULL;
        }
    }
    fclose(r);
    free(old);
    snprintf(json, sizeof json, "%.*s.json", (int)(strlen(path) - (strstr(path, ".csv") ? 4 : 0)), path);
    table_write_json(all, json);
    table_free(all);
}

static void print_memory(const args_t* a) {
    if (!a->memory || g_nsnaps == 0) return;
    const char* hdr[] = {"point", "live", "peak", "params", "grads", "optim", "acts", "workspace", "other"};
    table_t* t = table_new("memory by phase (bytes live now, peak since the previous point)", 9, hdr);
    char b[32];
    for (int i = 0; i < g_nsnaps; i++) {
        const mem_stats_t* s = &g_snaps[i].st;
        table_row(t);
        table_cell(t, "%s", g_snaps[i].label);
        table_cell(t, "%s", fmt_bytes(s->live, b, sizeof b));
        table_cell(t, "%s", fmt_bytes(s->peak, b, sizeof b));
        for (int k = 0; k < MEM_NTAGS; k++) table_cell(t, "%s", fmt_bytes(s->live_by_tag[k], b, sizeof b));
    }
    table_print_md(t, stdout);
    char path[1024];
    snprintf(path, sizeof path, "%s/memory_phases_%s.csv", a->out, a->tag);
    table_write_csv(t, path);
    table_free(t);
}

// ---------------------------------------------------------------- attention by part (--profile)
// The handout's nsys_profile (e): inside the naive attention, the score product, the softmax and
// the value product, their GPU time set against their FLOPs. The time is CUPTI's kernel time
// of the launches made inside the model's NVTX ranges of those names (profiler regions: the
// innermost range open at launch); the FLOPs are counted per execution of the attention of one
// layer (all B, all heads):
//   a product (scores S = Q Kᵀ, final matmul P V, backward dP, dV, dQ, dK): 2·B·NH·T²·HS (the
//     whole T x T: the GEMMs compute the masked half too);
//   the softmax: 5 per score element (max, subtract, exp, sum, divide), 5·B·NH·T²; its backward
//     4 per element (P·dP, row sum, subtract, multiply), 4·B·NH·T².
// Executions per step = launches of that phase's softmax kernel per step (one per layer; with
// activation checkpointing the backward phase also recomputes forward parts, counted the same).
typedef struct {
    const char* region;  // the model's NVTX range (common/model_gpu_attn.c)
    const char* label;
    double flops_per_elem;  // per element of B·NH·T²: 2·HS for a product, 5 or 4 for a softmax
    int fwd_part;           // 1: counted by the forward softmax's launches, 0: the backward's
} attn_part_t;

static void print_attention_parts(const args_t* a) {
    const double B = a->batch, T = a->context, NH = a->cfg.n_heads, HS = (double)a->cfg.d_model / a->cfg.n_heads;
    const attn_part_t parts[] = {
        {"scores", "scores (S = Q K^T)", 2 * HS, 1},
        {"softmax", "softmax (5 flop/element)", 5, 1},
        {"final matmul", "final matmul (P V)", 2 * HS, 1},
        {"bwd dP", "bwd dP = dO V^T", 2 * HS, 0},
        {"bwd dV", "bwd dV = P^T dO", 2 * HS, 0},
        {"bwd softmax", "bwd softmax (4 flop/element)", 4, 0},
        {"bwd dQ", "bwd dQ = dS K", 2 * HS, 0},
        {"bwd dK", "bwd dK = dS^T Q", 2 * HS, 0},
    };
    const int nparts = (int)(sizeof parts / sizeof parts[0]);
    const char* phases[] = {"forward", "backward"};
    printf("\n### Attention by part (naive attention; GPU time per step of the kernels launched in each "
           "NVTX range, CUPTI)\n\n");
    printf("FLOPs per execution of one layer's attention, B=%d NH=%d T=%d HS=%d: each product "
           "2*B*NH*T^2*HS = %.4g GFLOP (the full T x T); softmax 5*B*NH*T^2 = %.4g GFLOP; its backward "
           "4*B*NH*T^2. Executions per step: launches of the phase's softmax kernel per step.\n\n",
           a->batch, (int)NH, a->context, (int)HS, 2 * B * NH * T * T * HS * 1e-9, 5 * B * NH * T * T * 1e-9);
    printf("| phase | part | executions/step | GPU ms/step | share of attention | share of phase | GFLOP/step | TFLOP/s |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (int p = 0; p < 2; p++) {
        long c_fwd = 0, c_bwd = 0;
        profiler_region_ms(phases[p], "softmax", &c_fwd);
        profiler_region_ms(phases[p], "bwd softmax", &c_bwd);
        const double phase_ms = profiler_region_ms(phases[p], NULL, NULL);
        double att_ms = 0, att_flops = 0;
        for (int i = 0; i < nparts; i++) att_ms += profiler_region_ms(phases[p], parts[i].region, NULL);
        if (att_ms <= 0) continue;
        for (int i = 0; i < nparts; i++) {
            long calls = 0;
            const double ms = profiler_region_ms(phases[p], parts[i].region, &calls) / a->steps;
            if (calls == 0) continue;
            const double execs = (double)(parts[i].fwd_part ? c_fwd : c_bwd) / a->steps;
            const double flops = execs * parts[i].flops_per_elem * B * NH * T * T;
            att_flops += flops;
            printf("| %s | %s | %.0f | %.3f | %.1f%% | %.1f%% | %.3f | %.2f |\n", phases[p], parts[i].label, execs, ms,
                   100.0 * ms * a->steps / att_ms, phase_ms > 0 ? 100.0 * ms * a->steps / phase_ms : 0.0,
                   flops * 1e-9, ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0);
        }
        const double ms = att_ms / a->steps;
        printf("| %s | **attention, all parts** | | %.3f | 100%% | %.1f%% | %.3f | %.2f |\n", phases[p], ms,
               phase_ms > 0 ? 100.0 * att_ms / phase_ms : 0.0, att_flops * 1e-9,
               ms > 0 ? att_flops / (ms * 1e-3) / 1e12 : 0.0);
    }
    printf("\n");
}

// ---------------------------------------------------------------- CUDA
// The benchmark's batch: batch x context random input and target ids (as the course's
// benchmarks do: the values do not change the time), stream seed + 1. The caller frees both.
static void random_batch(const args_t* a, int32_t** in, int32_t** tg) {
    const size_t N = (size_t)a->batch * a->context;
    *in = malloc(N * 4);
    *tg = malloc(N * 4);
    if (!*in || !*tg) DIE("out of host memory");
    rng_t rr = rng_make((uint64_t)a->seed + 1);
    rng_fill_int(&rr, *in, N, 0, a->cfg.vocab);
    rng_fill_int(&rr, *tg, N, 0, a->cfg.vocab);
}

static void run_cuda(const args_t* a, result_t* r) {
    gpu_info_t gi;
    if (gpu_info(0, &gi) == 0) snprintf(r->gpu, sizeof r->gpu, "%s", gi.name);
    const model_precision_t prec = strcmp(a->precision, "bf16") == 0 ? MP_BF16 : MP_FP32;
    if (a->memory) memtrace_start(DEV_CUDA);
    if (a->memory) memtrace_mark("init");
    model_gpu_t* m = model_gpu_create_head(&a->cfg, a->batch, a->context, prec, a->attn, (uint64_t)a->seed,
                                           a->ckpt, 0, 0, a->head_chunk, r->reason, sizeof r->reason);
    if (!m) {
        if (strstr(r->reason, "out of memory")) {
            r->oom = 1;
            return;
        }
        fail("%s", r->reason);
    }
    if (a->mode != MODE_FWD && !model_gpu_can_train(m, r->reason, sizeof r->reason))
        fail("--attention %s --mode %s: %s (use --mode forward)", a->attention, a->mode_s, r->reason);
    snap(a, "after init");
    mem_reset_peak(DEV_CUDA);
    int32_t *in, *tg;
    random_batch(a, &in, &tg);
    model_gpu_set_tokens(m, in, tg);
    free(in);
    free(tg);
    const adamw_config_t opt = adamw_default();
    cudaStream_t s = model_gpu_stream(m);
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    double* ms[PH_N];
    for (int p = 0; p < PH_N; p++) ms[p] = calloc((size_t)a->steps + 1, sizeof(double));
    int adam_t = 0;
    const int total = a->warmup + a->steps;
    nvtx_push("warm-up");
    for (int it = 0; it < total && !r->oom; it++) {
        const int measuring = it >= a->warmup;
        if (it == a->warmup) {
            nvtx_pop();  // warm-up
            if (a->profile) profiler_start();
        }
        char name[32];
        snprintf(name, sizeof name, "step %d", measuring ? it - a->warmup : it);
        nvtx_push(name);
        CUDA_CHECK(cudaEventRecord(ev[0], s));
        phase(a, measuring, "forward");
        model_gpu_forward_async(m, model_gpu_inputs(m), model_gpu_targets(m));
        CUDA_CHECK(cudaEventRecord(ev[1], s));
        if (it == 0) snap(a, "after forward");
        if (a->mode >= MODE_FB) {
            phase(a, measuring, "backward");
            if (model_gpu_backward(m, NULL, NULL, r->reason, sizeof r->reason) != 0) r->oom = 1;
        }
        CUDA_CHECK(cudaEventRecord(ev[2], s));
        if (it == 0 && a->mode >= MODE_FB) snap(a, "before optimizer");
        if (a->mode == MODE_TRAIN && !r->oom) {
            phase(a, measuring, "optimizer");
            if (model_gpu_adamw(m, &opt, ++adam_t, r->reason, sizeof r->reason) != 0) r->oom = 1;
            if (it == 0) snap(a, "after optimizer");
        }
        CUDA_CHECK(cudaEventRecord(ev[3], s));
        CUDA_CHECK(cudaEventSynchronize(ev[3]));  // the one synchronisation of the step
        nvtx_pop();
        if (measuring) {
            float f;
            const int k = it - a->warmup;
            CUDA_CHECK(cudaEventElapsedTime(&f, ev[0], ev[1]));
            ms[PH_FWD][k] = f;
            CUDA_CHECK(cudaEventElapsedTime(&f, ev[1], ev[2]));
            ms[PH_BWD][k] = f;
            CUDA_CHECK(cudaEventElapsedTime(&f, ev[2], ev[3]));
            ms[PH_OPT][k] = f;
            CUDA_CHECK(cudaEventElapsedTime(&f, ev[0], ev[3]));
            ms[PH_STEP][k] = f;
        }
    }
    if (a->warmup >= total) nvtx_pop();
    if (a->profile) {
        profiler_stop();
        if (!r->oom) {
            printf("\n");
            profiler_print_summary(stdout, 15);
            char path[1024];
            snprintf(path, sizeof path, "%s/kernels_%s.csv", a->out, a->tag);
            if (mkdir_p(a->out) == 0 && profiler_write_csv(path) == 0) printf("kernel summary: %s\n", path);
            if (!a->attn) print_attention_parts(a);  // a plug-in's parts are its own (region = its name)
        }
    }
    if (!r->oom) {
        for (int p = 0; p < PH_N; p++) r->ph[p] = stats_compute(ms[p], a->steps);
        r->loss = model_gpu_loss(m);
        r->peak_bytes = (double)mem_stats(DEV_CUDA).peak;
        if (!isfinite(r->loss)) DIE("the loss is %f after the run: the model is broken", r->loss);
    }
    for (int p = 0; p < PH_N; p++) free(ms[p]);
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    model_gpu_destroy(m);
    if (a->memory) {
        memtrace_stop();
        char csv[1024], png[1100], title[256];
        snprintf(csv, sizeof csv, "%s/memory_%s.csv", a->out, a->tag);
        snprintf(png, sizeof png, "%s/memory_%s.png", a->out, a->tag);
        snprintf(title, sizeof title, "%s, context %d, batch %d, %s, %s%s%s", a->model, a->context,
                 a->batch, a->precision, a->mode_s, a->ckpt ? ", checkpoint " : "", a->ckpt ? a->ckpt_name : "");
        if (mkdir_p(a->out) == 0 && memtrace_write_csv(csv) == 0) {
            char err[1024];
            const int plotted = memtrace_plot_png(csv, png, title, err, sizeof err) == 0;
            printf("memory timeline: %s%s%s\n", csv, plotted ? ", " : "", plotted ? png : "");
            if (!plotted) fprintf(stderr, "%s: warning: no PNG of the timeline: %s\n", progname(), err);
        }
    }
}

// ---------------------------------------------------------------- CPU reference
// Peak of the host's acts-tagged bytes while the benchmark runs (an allocator observer).
typedef struct {
    size_t live, peak;
} acts_peak_t;
static void acts_peak_obs(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live_after) {
    (void)live_after;
    acts_peak_t* p = ctx;
    if (dev != DEV_CPU || tag != MEM_ACTS) return;
    p->live = (size_t)((long long)p->live + delta);
    if (p->live > p->peak) p->peak = p->live;
}

static void run_cpu(const args_t* a, result_t* r) {
    // STUDENT-BEGIN(01.run_cpu): the CPU benchmark loop: warm-up steps, then time forward / backward / optimizer per step with time_now_s(), mean and std per phase (stats_compute), peak memory | see 01_benchmarking/README.md §Timing done right | test: test_01 benchmark/cpu_*
    snprintf(r->gpu, sizeof r->gpu, "cpu");
    model_cpu_t m;
    model_cpu_create_head(&m, &a->cfg, a->batch, a->context, (uint64_t)a->seed, a->ckpt, a->head_chunk);
    snap(a, "after init");
    int32_t *in, *tg;
    random_batch(a, &in, &tg);
    const adamw_config_t opt = adamw_default();
    double* ms[PH_N];
    for (int p = 0; p < PH_N; p++) ms[p] = calloc((size_t)a->steps + 1, sizeof(double));
    for (int it = 0; it < a->warmup + a->steps; it++) {
        double t[4];
        t[0] = time_now_s();
        r->loss = model_cpu_forward(&m, in, tg, a->batch, a->context);
        t[1] = time_now_s();
        if (it == 0 && t[1] - t[0] >= 2.0) {  // the first sign of life on a slow size
            fprintf(stderr, "%s: step 1: forward took %.1f s%s\n", progname(), t[1] - t[0],
                    a->mode >= MODE_FB ? " (the backward takes about twice that)" : "");
            fflush(stderr);
        }
        if (a->mode >= MODE_FB) model_cpu_backward(&m, NULL, NULL);
        t[2] = time_now_s();
        if (a->mode == MODE_TRAIN) model_cpu_adamw_step(&m, &opt);
        t[3] = time_now_s();
        if (it == 0) snap(a, "after step 1");
        // Progress for long CPU work (a step of a course size takes minutes on the CPU): one
        // line per slow step on stderr, so the table on stdout stays clean.
        const double took = t[3] - t[0], total_steps = a->warmup + a->steps;
        if (took >= 1.0) {
            const double left = took * (total_steps - it - 1);
            fprintf(stderr, "%s: step %d/%d (%s): forward %.1f s, backward %.1f s, optimizer %.1f s; about %.0f %s to go\n",
                    progname(), it + 1, (int)total_steps, it < a->warmup ? "warm-up" : "timed", t[1] - t[0],
                    t[2] - t[1], t[3] - t[2], left >= 120 ? left / 60 : left, left >= 120 ? "min" : "s");
            fflush(stderr);
        }
        if (it >= a->warmup) {
            const int k = it - a->warmup;
            ms[PH_FWD][k] = (t[1] - t[0]) * 1e3;
            ms[PH_BWD][k] = (t[2] - t[1]) * 1e3;
            ms[PH_OPT][k] = (t[3] - t[2]) * 1e3;
            ms[PH_STEP][k] = (t[3] - t[0]) * 1e3;
        }
    }
    for (int p = 0; p < PH_N; p++) {
        r->ph[p] = stats_compute(ms[p], a->steps);
        free(ms[p]);
    }
    r->peak_bytes = (double)mem_stats(DEV_CPU).peak;
    free(in);
    free(tg);
    model_cpu_destroy(&m);
    // STUDENT-END(01.run_cpu)
}

// The CPU reference is for --model tiny. Sizes it can never hold are refused up front (with the
// largest context that would fit); course sizes that fit get a warning, since a step takes minutes.
static void check_cpu_size(const args_t* a) {
    char why[256];
    if (!mem_fits(DEV_CPU, model_cpu_bytes_head(&a->cfg, a->batch, a->context, a->ckpt, a->head_chunk), why, sizeof why)) {
        // The largest context that fits at this batch (the attention scores grow as context^2).
        int lo = 0, hi = a->context;
        while (lo < hi) {
            const int mid = lo + (hi - lo + 1) / 2;
            model_config_t c = a->cfg;
            c.context = mid;
            if (mem_fits(DEV_CPU, model_cpu_bytes_head(&c, a->batch, mid, a->ckpt, a->head_chunk), NULL, 0)) lo = mid;
            else hi = mid - 1;
        }
        if (lo > 0)
            fail("--context %d: the CPU reference of the %s model at --batch %d %s; at most --context %d fits",
                 a->context, a->model, a->batch, why, lo);
        fail("--model %s --batch %d: the CPU reference does not fit in host memory even at --context 1 (at "
             "--context %d it %s)", a->model, a->batch, a->context, why);
    }
    if (strcmp(a->model, "tiny") != 0) {
        const double per = a->mode == MODE_FWD ? 1.0 : 3.0;
        model_config_t tiny;
        model_config_by_name("tiny", a->context, &tiny);
        fprintf(stderr,
                "%s: warning: --device cpu --model %s: the CPU reference is meant for --model tiny. One step here "
                "is %.3g TFLOP of plain fp32 C (%.0fx tiny's): seconds to minutes per step, %d steps. Progress "
                "follows.\n",
                progname(), a->model, model_forward_flops(&a->cfg, a->batch, a->context) * per / 1e12,
                model_forward_flops(&a->cfg, a->batch, a->context) / model_forward_flops(&tiny, a->batch, a->context),
                a->warmup + a->steps);
    }
}

int benchmark_main(int argc, char** argv, const benchmark_attention_t* extra, int nextra) {
    args_t a = {0};
    // --attention: naive, then whatever the program that links this driver offers
    char att_choices[128] = "naive";
    for (int i = 0; i < nextra; i++)
        snprintf(att_choices + strlen(att_choices), sizeof att_choices - strlen(att_choices), "|%s", extra[i].name);
    const char* att_help = nextra ? "attention implementation"
                                  : "attention implementation (flash: build/04_flashattn_bwd/benchmark)";
    cli_opt_t opts[] = {
        {"model", CLI_CHOICE, &a.model, "small", "model size", MODEL_SIZE_CHOICES},
        {"context", CLI_INT, &a.context, "512", "sequence length T (and the model's context)", NULL},
        {"batch", CLI_INT, &a.batch, "4", "batch size B", NULL},
        {"mode", CLI_CHOICE, &a.mode_s, "forward-backward", "what one step does", "forward|forward-backward|train"},
        {"precision", CLI_CHOICE, &a.precision, "fp32", "fp32 (no TF32) or bf16 mixed precision", MODEL_PRECISION_CHOICES},
        {"attention", CLI_CHOICE, &a.attention, "naive", att_help, att_choices},
        {"warmup", CLI_INT, &a.warmup, "5", "untimed steps first", NULL},
        {"steps", CLI_INT, &a.steps, "10", "timed steps", NULL},
        {"device", CLI_CHOICE, &a.device, "cuda", "cuda, or cpu (the plain-C reference; fp32, for tiny)", "cuda|cpu"},
        {"seed", CLI_INT, &a.seed, "0", "parameter and token seed", NULL},
        {"nvtx", CLI_FLAG, &a.nvtx, "0", "NVTX ranges: warm-up, steps, forward, backward, optimizer, attention parts", NULL},
        {"profile", CLI_FLAG, &a.profile, "0", "CUPTI kernel summary of the timed steps, by phase and NVTX region; naive attention by part", NULL},
        {"checkpoint", CLI_STR, &a.checkpoint, "",
         "activation checkpointing (not given: none, and no checkpoint column): none, block (keep each block's input), every-K (keep every K-th block's input), nested (binary recursive: 2 + floor(log2 L) block inputs, --device cpu only); the rest is recomputed in the backward", NULL},
        {"head-chunk", CLI_INT, &a.head_chunk, "0", HEAD_CHUNK_HELP, NULL},
        {"memory", CLI_FLAG, &a.memory, "0", "memory by phase and tag, and the memory timeline (CSV, PNG)", NULL},
        {"out", CLI_STR, &a.out, "results/01_benchmarking", "results directory", NULL},
        {"csv", CLI_STR, &a.csv, "benchmark.csv", "CSV file in --out that the row is appended to", NULL},
    };
    cli_parse(argc, argv, "Time the Transformer LM's forward, backward and optimizer step.", opts, CLI_COUNT(opts));
    if (a.context < 1) fail("--context must be >= 1, got %d", a.context);
    if (a.batch < 1) fail("--batch must be >= 1, got %d", a.batch);
    if (a.warmup < 0) fail("--warmup must be >= 0, got %d", a.warmup);
    if (a.steps < 1) fail("--steps must be >= 1, got %d", a.steps);
    if (a.seed < 0) fail("--seed must be >= 0, got %d", a.seed);
    if (a.head_chunk < 0 || a.head_chunk > HEAD_CHUNK_MAX)
        fail("--head-chunk: %d is out of range (0 for the whole logits, or 1..%d rows)", a.head_chunk, HEAD_CHUNK_MAX);
    char why[512];
    a.ckpt_col = a.checkpoint[0] != 0;
    if (a.ckpt_col && model_ckpt_parse(a.checkpoint, &a.ckpt, why, sizeof why) != 0) fail("--checkpoint: %s", why);
    model_ckpt_name(a.ckpt, a.ckpt_name, sizeof a.ckpt_name);
    if (file_name_check(a.csv, why, sizeof why) != 0) fail("--csv: %s; give a file name inside --out, such as benchmark.csv", why);
    // Before the run, not after it: a run of minutes must not end in "cannot write".
    if (dir_check_writable(a.out, why, sizeof why) != 0) fail("--out %s: %s", a.out, why);
    a.mode = strcmp(a.mode_s, "forward") == 0 ? MODE_FWD : strcmp(a.mode_s, "train") == 0 ? MODE_TRAIN : MODE_FB;
    if (model_config_by_name(a.model, a.context, &a.cfg) != 0) fail("--model: unknown size '%s'", a.model);
    char err[512];
    if (model_config_check(&a.cfg, err, sizeof err) != 0) fail("--model %s: %s", a.model, err);
    const int cpu = strcmp(a.device, "cpu") == 0;
    if (cpu && strcmp(a.precision, "fp32") != 0) fail("--device cpu runs the fp32 reference only (got --precision %s)", a.precision);
    if (cpu && (a.profile || a.nvtx)) fail("--profile and --nvtx need --device cuda");
    if (!cpu && a.ckpt == MODEL_CKPT_NESTED) fail("--checkpoint nested: %s", MODEL_GPU_NESTED_REFUSAL);
    if (cpu) check_cpu_size(&a);
    if (!cpu && gpu_count() == 0) fail("--device cuda needs a CUDA GPU: %s (use --device cpu --model tiny)", gpu_absent_reason());
    if (a.profile && !profiler_available()) fail("--profile: the CUPTI profiler is not available in this build or on this machine");
    for (int i = 0; i < nextra; i++)
        if (strcmp(a.attention, extra[i].name) == 0) a.attn = extra[i].impl;
    if (a.attn && cpu) fail("--attention %s needs --device cuda (the CPU reference has naive attention)", a.attention);
    snprintf(a.tag, sizeof a.tag, "%s_ctx%d_b%d_%s_%s%s%s%s%s%s", a.model, a.context, a.batch, a.precision,
             a.mode_s, cpu ? "_cpu" : "", a.attn ? "_" : "", a.attn ? a.attention : "", a.ckpt ? "_ckpt-" : "",
             a.ckpt ? a.ckpt_name : "");
    if (a.head_chunk > 0)
        snprintf(a.tag + strlen(a.tag), sizeof a.tag - strlen(a.tag), "_head-chunk-%d", a.head_chunk);
    nvtx_enable(a.nvtx);

    result_t r;
    memset(&r, 0, sizeof r);
    acts_peak_t ap = {0, 0};
    if (cpu) mem_set_observer(acts_peak_obs, &ap);
    if (cpu) run_cpu(&a, &r);
    else run_cuda(&a, &r);
    if (cpu) mem_set_observer(NULL, NULL);

    table_t* t = table_new("Transformer LM benchmark (ms: mean and std over the timed steps)", ncols(&a), headers(&a));
    fill_row(t, &a, &r);
    table_print_md(t, stdout);
    if (r.oom) printf("OOM: %s\n", r.reason);
    append_results(&a, t);
    table_free(t);
    print_memory(&a);
    if (cpu && a.ckpt_col) {
        // The activations the policy keeps: the allocator's peak of the acts tag over the run
        // against model_cpu_acts_bytes (the formula of model_cpu.h).
        const size_t want = model_cpu_acts_bytes_head(&a.cfg, a.batch, a.context, a.ckpt, a.head_chunk);
        const int L = a.cfg.n_layers;
        printf("activations (host, acts tag) with checkpoint %s: peak %zu bytes measured, %zu by the formula "
               "(%d residual slices, %d blocks of internals, %ld block forwards per step)%s\n",
               a.ckpt_name, ap.peak, want, model_ckpt_res_slices(L, a.ckpt), model_ckpt_slots(L, a.ckpt),
               model_ckpt_block_forwards(L, a.ckpt), ap.peak == want ? "" : ": MISMATCH");
    }
    return 0;
}
