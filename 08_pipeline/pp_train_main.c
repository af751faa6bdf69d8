// pp_train: the Transformer LM trained pipeline-parallel (and, with --dp D, pipeline x data
// parallel) on the CPU, over the communicator's MPI backend.
//
//   scripts/mpirun.sh 4 build/08_pipeline/pp_train --layers 8 --batch 8 --micro-batches 4 --schedule 1f1b --check-single 1
//   scripts/mpirun.sh 2 build/08_pipeline/pp_train --layers 8 --micro-batches 4 --schedule interleaved --chunks 2
//   scripts/mpirun.sh 4 build/08_pipeline/pp_train --layers 8 --dp 2 --check-single 1     # 2 stages x 2 replicas
//
// World rank w = d·p + r: replica d (0..D-1), pipeline rank r (0..p-1), p = world / D. The
// model's blocks are cut into S = p·v stages by the partitioner (partition.h); rank r runs the
// stages c·p + r, c < v. Every rank initialises the whole model from the same seed (so every
// stage starts from the single model's values) and then only touches its own slices.
// A step: the global batch (--batch rows, a pure function of the seed and the step) is cut
// into D replica batches of m micro-batches each; the executor (executor.h) runs the rank's
// action list, gradients accumulate, with --dp the replicas of each stage sum their gradients,
// then AdamW steps each rank's slices. Each micro-batch's loss is scaled by 1/(m·D): the sum is
// the mean over the global batch, the single model's loss.
//
// Output: the loss per step; a timing line per rank (host clock, averaged over the steps after
// --warmup: the step, busy = compute, the time in communication groups, idle = step − busy,
// the rank's idle fraction), the measured bubble 1 − Σ busy / (p · slowest step) beside the
// formula and the simulator run with the measured mean costs; peak live micro-batch-chunks
// against the simulator's count. --check-single 1: rank 0 also trains one unpartitioned model
// on the same global batches, gathers every stage's parameters and compares them all.
// --check-forward 1: after training, the forward-only lists (evaluation; schedule_make_forward)
// on a fresh batch leave every gradient bit and give the training flush's loss (check_forward).
//
// --backend nccl (one GPU per rank, fp32): the same lists run by the GPU executor
// (executor.h, executor_gpu.c; runner.h picks the executor once, from the backend, and the
// rest of the program calls either alike) on the CUDA model's range pass; the timing lines come from CUDA
// events (busy = compute actions on the compute stream, "in groups" = the groups' spans on the
// communication stream), each rank prints its peak GPU memory (common/alloc.h), and
// --check-single 1 trains one unpartitioned CUDA model on rank 0's GPU. Every schedule (ZB-H1
// through the CUDA model's split backward); --dp stays on the CPU (refused with one line).
//   scripts/mpirun.sh 2 build/08_pipeline/pp_train --backend nccl --model small --context 512 --batch 16 --micro-batches 8
//
// --timeline PREFIX: the last step's timeline, measured (every action's start and end, from
// the executor: pp_exec_last_times / pp_exec_gpu_last_times), gathered to rank 0 and written
// as PREFIX_measured.csv / .png beside the simulator's run with the measured mean costs,
// PREFIX_simulated.csv / .png, both also drawn in ASCII on stdout. Times in milliseconds from
// the earliest rank's step start. The CPU ranks share one clock (CLOCK_MONOTONIC of the node),
// so they line up exactly; on the GPU each rank's zero is an event recorded just after a host
// barrier (pp_exec_gpu_align_start), so the ranks line up to within that barrier's skew.
// With --dp > 1, replica 0's pipeline only.
//   scripts/mpirun.sh 4 build/08_pipeline/pp_train --layers 8 --batch 8 --micro-batches 8 --timeline /tmp/tl
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "08_pipeline/partition.h"
#include "08_pipeline/pp_report.h"
#include "08_pipeline/runner.h"
#include "08_pipeline/schedule.h"
#include "08_pipeline/simulate.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/grid.h"
#include "common/lm.h"
#include "common/alloc.h"
#include "common/hash.h"
#include "common/train_loop.h"

// FNV-1a over this rank's parameter slices: equal across replicas iff bitwise identical.
static long long slices_hash(const float* P, const size_t* b, const size_t* e, int v) {
    uint64_t x = FNV1A_INIT;
    for (int c = 0; c < v; c++) x = fnv1a(x, P + b[c], (e[c] - b[c]) * sizeof(float));
    return (long long)(x >> 1);
}

// Rank 0 trains one model on each step's whole global batch and compares every parameter with
// the stages' (gathered into `got`), and the step-0 loss (same parameters on both sides).
// The pipeline computes the same mean-loss gradient as sums over micro-batches (and replicas)
// in another order, so gradients agree to fp32 rounding — except elements whose summands
// cancel to about their rounding error, where the relative error is O(1), and AdamW, which
// normalises every element by its own sqrt(v), turns that into a step of up to O(lr) in a
// direction the rounding decides. Hence rtol 1e-4 with atol 2e-4 = lr/5 (for the default lr
// 1e-3; scaled with --lr): a part of one such step is accepted (the worst seen over 35 seeds
// and m = 2..8 was 5.7e-5), a lost or doubled micro-batch (a full O(lr) step on most elements)
// is not. AdamW does not see a constant factor in the gradient, so the loss is checked too:
// rtol 1e-6 (m partial means of fp32 cross-entropy, summed in double). With one micro-batch and
// one replica the arithmetic is the same operation for operation: 0 bitwise differences.
//
// On the GPU (--backend nccl) the single model is the CUDA model's whole pass on rank 0's GPU
// with the whole global batch: the same tolerance for the same reasons (cuBLAS's fp32 GEMMs
// over N = Bg·T rows against m products of Bmb·T rows sum in another order, as the CPU's
// micro-batch sums do; the embedding gradient's atomics add in an order the GPU decides, so
// even m = 1 is not asserted bitwise), and the loss within rtol 1e-5 (the cross-entropy mean
// is one fp32 block reduction over another number of rows, and the logits come from GEMMs of
// other shapes: a few ulps, not 1e-6 of guarantee).
static int check_single(const model_config_t* cfg, lm_backend_t be, const float* got, double loss0,
                        const data_source_t* data, int Bg, int T, int steps, const adamw_config_t* opt, uint64_t seed) {
    const int gpu = be == LM_GPU;  // the loss's tolerance (above)
    const char* who = gpu ? "GPU" : "process";
    lm_options_t o = lm_options(be, Bg, T);
    o.seed = seed;
    char err[512];
    lm_t* s = lm_create(cfg, &o, err, sizeof err);
    if (!s) DIE("check-single: the single-%s model: %s", who, err);
    int32_t* in = malloc((size_t)Bg * T * sizeof(int32_t));
    int32_t* tg = malloc((size_t)Bg * T * sizeof(int32_t));
    const size_t n = lm_layout(s)->total;
    float* want = malloc(n * sizeof(float));
    if (!in || !tg || !want) DIE("out of host memory");
    float loss = NAN, single0 = NAN;
    const double loss_rtol = gpu ? 1e-5 : 1e-6;
    for (int k = 0; k < steps; k++) {
        sample_batch(data, Bg, T, k, in, tg);
        lm_set_tokens(s, in, tg);
        lm_forward_async(s);
        loss = lm_loss(s);
        if (k == 0) single0 = loss;
        if (lm_backward(s, NULL, NULL, err, sizeof err) != 0 || lm_adamw(s, opt, k + 1, err, sizeof err) != 0)
            DIE("check-single: the single-%s model: %s", who, err);
    }
    lm_get_params(s, want);
    size_t bad = 0, unequal = 0, worst = 0;
    double worst_err = 0;
    const double atol = 0.2 * opt->lr;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]), tol = atol + 1e-4 * fabs((double)want[i]);
        if (!(e <= tol)) bad++;
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) unequal++;
        if (!(e <= worst_err)) { worst_err = e; worst = i; }
    }
    // The hash of the gathered parameters: the same for every schedule and every p at one m
    // (each block's arithmetic does not depend on where the model is cut; the tests check it).
    const size_t b0 = 0;
    const int loss_ok = fabs(loss0 - single0) <= loss_rtol * fabs((double)single0);
    printf("check-single: step-0 loss %.7f, single-%s %.7f (%s within rtol %g); last-step single-%s loss %.6f\n",
           loss0, who, (double)single0, loss_ok ? "equal" : "NOT equal", loss_rtol, who, (double)loss);
    printf("check-single: %zu of %zu parameters differ beyond rtol 1e-4, atol %.3g; %zu not bitwise equal "
           "(max |diff| %.3g at %zu: %.8g vs %.8g); pipeline parameters hash %016llx\n",
           bad, n, atol, unequal, worst_err, worst, (double)got[worst], (double)want[worst],
           (unsigned long long)slices_hash(got, &b0, &n, 1));
    lm_destroy(s);
    free(want);
    free(in);
    free(tg);
    return bad || !loss_ok ? 1 : 0;
}

// After the warm-up: the lists are planned again with the measured mean cost of each compute
// kind (schedule_make_planned). The plan decides where sends and receives go and, for ZB-H1,
// where each W goes; planned with the real costs, an eager run meets the formula (simulate.h),
// planned with unit costs (F = B = BI = W) it does not. Rank 0 averages and broadcasts, so every
// rank builds the same lists from the same bits.
static void replan(comm_t* c, pp_runner_t* run, schedule_t* sched, const pp_timing_t* tm, int speak) {
    double sums[8];
    for (int z = 0; z < 4; z++) sums[z] = tm->t_kind[z], sums[4 + z] = tm->n_kind[z];
    comm_host_allreduce_f64(c, sums, 8, COMM_SUM);
    sched_costs_t plan = {1, 2, 1, 1};  // kinds a schedule does not run keep these (unused)
    double* pc[4] = {&plan.f, &plan.b, &plan.bi, &plan.w};
    for (int z = 0; z < 4; z++)
        if (sums[4 + z] > 0 && sums[z] > 0) *pc[z] = sums[z] / sums[4 + z];
    comm_host_bcast(c, &plan, sizeof plan, 0);
    const sched_kind_t kind = sched->kind;
    const int p = sched->p, m = sched->m, v = sched->v;
    char err[256];
    schedule_free(sched);
    if (schedule_make_planned(kind, p, m, v, &plan, sched, err, sizeof err) != 0)
        comm_fatal(c, 1, "re-planning with the measured costs: %s", err);
    if (speak) {
        if (kind == SCHED_ZBH1)
            printf("# lists planned again with the warm-up's mean costs: F %.3f, BI %.3f, W %.3f ms\n", 1e3 * plan.f,
                   1e3 * plan.bi, 1e3 * plan.w);
        else
            printf("# lists planned again with the warm-up's mean costs: F %.3f, B %.3f ms\n", 1e3 * plan.f, 1e3 * plan.b);
        fflush(stdout);
    }
    pp_runner_schedule_changed(run);  // the activation sets already allocated are kept
}

// --check-forward 1: the forward-only lists (schedule_make_forward, the evaluation's) against
// the training flush, on one batch no step has seen. Each rank copies its gradient slices
// (the last step's), runs the forward-only pass, and the slices must keep every bit (an
// evaluation touches no gradient; the training flush would zero them). Then the training flush
// on the same batch: its loss must equal the forward-only loss, bitwise on the CPU (the same F
// actions, the head summing its micro-batches in the same order); on the GPU within rtol 1e-6
// (the same kernels on the same data, but a kernel's reduction order is not promised across
// two launches). Returns 0, or 1 after rank 0 printed what differed.
static int check_forward(comm_t* c, pp_runner_t* run, const schedule_t* sched, const size_t* sb, const size_t* se,
                         const int32_t* in, const int32_t* tg, float scale, int wr) {
    lm_t* lm = pp_runner_model(run);
    const int gpu = lm_device(lm) == DEV_CUDA;  // the loss's tolerance (above)
    char err[512];
    schedule_t fwd;
    if (schedule_make_forward(sched->kind, sched->p, sched->m, sched->v, &fwd, err, sizeof err) != 0)
        comm_fatal(c, 1, "check-forward: %s", err);
    const size_t n = lm_layout(lm)->total;
    float* before = malloc(n * sizeof(float));
    float* after = malloc(n * sizeof(float));
    if (!before || !after) DIE("out of host memory");
    lm_get_grads(lm, before);
    double lf = pp_runner_forward(run, &fwd, in, tg, scale);
    lm_get_grads(lm, after);
    long long differ = 0, nonzero = 0;  // over this rank's slices
    for (int ch = 0; ch < sched->v; ch++)
        for (size_t i = sb[ch]; i < se[ch]; i++) {
            differ += memcmp(&before[i], &after[i], sizeof(float)) != 0;
            nonzero += before[i] != 0.0f;
        }
    double ls = pp_runner_step(run, in, tg, scale, NULL);
    comm_host_allreduce_f64(c, &lf, 1, COMM_SUM);
    comm_host_allreduce_f64(c, &ls, 1, COMM_SUM);
    long long cnt[2] = {differ, nonzero};
    comm_host_allreduce_i64(c, cnt, 2, COMM_SUM);
    const int loss_ok = gpu ? fabs(lf - ls) <= 1e-6 * fabs(ls) : memcmp(&lf, &ls, sizeof lf) == 0;
    // nonzero: the slices held the last step's gradients, so a zeroing would have shown.
    const int ok = loss_ok && cnt[0] == 0 && cnt[1] > 0;
    if (wr == 0)
        printf("check-forward: loss %.9g forward-only, %.9g training flush (%s); gradient elements changed by the "
               "forward-only pass: %lld of %lld non-zero (%s)\n", lf, ls, loss_ok ? (gpu ? "equal within rtol 1e-6" : "bitwise equal") : "NOT equal",
               cnt[0], cnt[1], cnt[0] == 0 && cnt[1] > 0 ? "untouched" : "TOUCHED or nothing to compare");
    free(before);
    free(after);
    schedule_free(&fwd);
    return ok ? 0 : 1;
}

// The shared flags (train_loop.h) as pp_train takes them: its --batch is the GLOBAL batch,
// --steps counts the warm-up, every rank starts from the one seed, the backend is MPI unless
// asked; a pipeline of fp32 ranks takes no --precision, --attention or --csv.
static int pp_flags(train_flags_t* f, cli_opt_t* opts) {
    static const struct {
        const char *name, *def, *help;  // def NULL: not taken
    } own[] = {
        {"model", "tiny", "model size (the CPU runs tiny)"},
        {"context", "16", "sequence length T"},
        {"batch", "8", "GLOBAL batch in sequences (= dp x micro-batches x rows per micro-batch)"},
        {"steps", "3", "training steps"},
        {"warmup", "1", "steps left out of the timing averages"},
        {"backend", "mpi", "mpi: the CPU executor; nccl: the GPU executor, one GPU per rank (auto: nccl when there is one per rank)"},
        {"seed", "1", "parameters and data"},
        {"precision", NULL, NULL},
        {"attention", NULL, NULL},
        {"csv", NULL, NULL},
        {"head-chunk", NULL, NULL},  // a pipeline stage's head keeps its logits
    };
    cli_opt_t all[TRAIN_FLAGS_N];
    const int n_all = train_flags_opts(f, all);
    int n = 0;
    for (int i = 0; i < n_all; i++) {
        int keep = 1;
        for (int k = 0; k < CLI_COUNT(own); k++)
            if (strcmp(all[i].name, own[k].name) == 0) {
                keep = own[k].def != NULL;
                all[i].def = own[k].def;
                all[i].help = own[k].help;
            }
        if (keep) opts[n++] = all[i];
    }
    return n;
}

int main(int argc, char** argv) {
    train_flags_t f = train_flags_default();
    const char* sched_s = "1f1b";
    const char* part_s = "balanced";
    const char* timeline_s = "";
    int layers = 0, m = 4, v = 0, check = 0, D = 1, check_fwd = 0, die_rank = -1;
    cli_opt_t opts[TRAIN_FLAGS_N + 10];
    int n_opts = pp_flags(&f, opts);
    const cli_opt_t mine[] = {
        {"layers", CLI_INT, &layers, "0", "blocks L (0: the size's; tiny has 2, so p > 2 needs more)", NULL},
        {"micro-batches", CLI_INT, &m, "4", "micro-batches m per step and replica", NULL},
        {"schedule", CLI_CHOICE, &sched_s, "1f1b", "pipeline schedule", SCHED_CHOICES},
        {"chunks", CLI_INT, &v, "0", "model chunks v per rank (0: 2 for interleaved, else 1)", NULL},
        {"partition", CLI_CHOICE, &part_s, "balanced", "blocks per stage: balanced by modelled cost, or even", "balanced|even"},
        {"dp", CLI_INT, &D, "1", "data-parallel replicas D (ranks = p x D)", NULL},
        {"check-single", CLI_INT, &check, "0", "1: rank 0 also trains one unpartitioned model and compares every parameter", NULL},
        {"check-forward", CLI_INT, &check_fwd, "0", "1: after training, the forward-only lists (evaluation) leave every gradient bit and give the training flush's loss", NULL},
        {"die-rank", CLI_INT, &die_rank, "-1", "failure test: this world rank exits in the middle of the first step", NULL},
        {"timeline", CLI_STR, &timeline_s, "", "PREFIX: write the last step's measured and simulated timelines (PREFIX_measured.csv/.png, PREFIX_simulated.csv/.png)", NULL},
    };
    for (int i = 0; i < CLI_COUNT(mine); i++) opts[n_opts++] = mine[i];
    comm_cli_parse(argc, argv, "Pipeline-parallel training of the Transformer LM on the CPU (run under mpirun).", opts, n_opts);
#define BAD(...) comm_bad_input(__VA_ARGS__)
    // Every check before MPI starts: the world size comes from mpirun's environment.
    const char* ws = getenv("OMPI_COMM_WORLD_SIZE");
    const int world = ws ? atoi(ws) : 1;
    train_setup_t ts;  // the shared checks: the size, --layers, the ranges, the backend, AdamW
    train_flags_check(&f, layers, &ts);
    model_config_t cfg = ts.cfg;
    const adamw_config_t opt = ts.opt;
    const int Bg = f.batch, steps = f.steps, warmup = f.warmup, T = f.context;
    const uint64_t seed = (uint64_t)f.seed;
    if (m < 1 || m > 1024) BAD("--micro-batches: %d is out of range (1..1024)", m);
    if (D < 1 || D > world) BAD("--dp: %d is out of range (1..%d, the number of ranks)", D, world);
    if (world % D != 0) BAD("--dp: %d does not divide the %d ranks (ranks = pipeline stages x dp)", D, world);
    if (Bg % (m * D) != 0)
        BAD("--batch: %d is not a multiple of micro-batches x dp = %d x %d (each micro-batch needs the same rows)", Bg, m, D);
    if (warmup >= steps) BAD("--warmup: %d must be in 0..steps-1 = %d", warmup, steps - 1);
    if (check != 0 && check != 1) BAD("--check-single: %d must be 0 or 1", check);
    if (check_fwd != 0 && check_fwd != 1) BAD("--check-forward: %d must be 0 or 1", check_fwd);
    if (die_rank < -1 || die_rank >= world) BAD("--die-rank: %d is not a rank (-1 or 0..%d)", die_rank, world - 1);
    const char* tl_bad = timeline_s[0] ? pp_timeline_prefix_problem(timeline_s) : NULL;
    if (tl_bad) BAD("--timeline: '%s' %s", timeline_s, tl_bad);
    sched_kind_t kind;
    if (sched_parse(sched_s, &kind) != 0) BAD("--schedule: unknown '%s' (%s)", sched_s, SCHED_CHOICES);
    if (ts.backend == COMM_NCCL && D != 1)
        BAD("--dp %d --backend nccl: pipeline x data parallel runs on the CPU only (--backend mpi)", D);
    if (v == 0) v = kind == SCHED_INTERLEAVED ? 2 : 1;
    const int p = world / D, S = p * v, Bmb = Bg / (m * D);
    char err[512];
    schedule_t sched;
    if (schedule_make(kind, p, m, v, &sched, err, sizeof err) != 0) BAD("--schedule %s --micro-batches %d --chunks %d on %d pipeline ranks: %s", sched_s, m, v, p, err);
    if (model_config_check(&cfg, err, sizeof err) != 0) BAD("model: %s", err);
    partition_t part;
    int prc = strcmp(part_s, "even") == 0 ? partition_even(&cfg, Bmb, T, S, &part, err, sizeof err)
                                          : partition_model(&cfg, Bmb, T, S, &part, err, sizeof err);
    if (prc != 0) BAD("%d stages (%d ranks x %d chunks) over the model's %d blocks: %s; give --layers", S, p, v, cfg.n_layers, err);

    comm_t* c = comm_init(ts.backend, comm_timeout_flag(f.comm_timeout));
    if (c->world != world) DIE("mpirun's environment says %d ranks, MPI says %d", world, c->world);
    const int wr = c->rank, d = wr / p, r = wr % p;

    // The rank's model and executor: the CPU's on the MPI backend, the GPU's on NCCL (runner.h).
    model_range_t* ranges = malloc((size_t)v * sizeof(model_range_t));
    if (!ranges) DIE("out of host memory");
    for (int ch = 0; ch < v; ch++) ranges[ch] = partition_range(&part, sched_stage(&sched, r, ch));
    // 2D: the grid {D, p} (world rank d·p + r, the pipeline axis fastest); the replica sum runs
    // on its "dp" group, the D replicas of this rank's stage.
    grid_t* grid = D > 1 ? grid_create(c, (const int[]){D, p}, (const char* const[]){"dp", "pp"}, 2) : NULL;
    pp_runner_config_t rc = {c, &sched, r, d * p, &cfg, seed, ranges, Bmb, T, -1, grid ? grid->group[0] : NULL};
    if (wr == die_rank) rc.die_after = sched.n_actions[r] / 2;
    pp_runner_t* run = pp_runner_create(&rc);
    lm_t* lm = pp_runner_model(run);
    const param_layout_t* lay = lm_layout(lm);
    const int gpu = lm_device(lm) == DEV_CUDA;  // what the output reports (GPU memory), not what runs
    size_t* sb = malloc((size_t)v * sizeof(size_t));
    size_t* se = malloc((size_t)v * sizeof(size_t));
    if (!sb || !se) DIE("out of host memory");
    for (int ch = 0; ch < v; ch++) pp_runner_span(run, ch, &sb[ch], &se[ch]);

    if (wr == 0) {
        char pb[512], eb[512];
        partition_format(&part, pb, sizeof pb);
        partition_t ev;
        if (partition_even(&cfg, Bmb, T, S, &ev, err, sizeof err) == 0) {
            snprintf(eb, sizeof eb, "%.3f", ev.imbalance);
            partition_free(&ev);
        } else {
            snprintf(eb, sizeof eb, "n/a");
        }
        printf("# pp_train: %s model, L %d, context %d, global batch %d = dp %d x %d micro-batches x %d rows; %s, p %d, v %d "
               "(%d stages); %s, %zu parameters\n",
               f.model, cfg.n_layers, T, Bg, D, m, Bmb, sched_name(kind), p, v, S, pp_runner_where(run), param_count(lay));
        printf("# partition (%s, modelled forward FLOPs): %s (an even split: imbalance %s)\n", part_s, pb, eb);
        fflush(stdout);
    }

    data_source_t data;
    data_open_random(&data, cfg.vocab, seed);
    int32_t* in_all = malloc((size_t)Bg * T * sizeof(int32_t));
    int32_t* tg_all = malloc((size_t)Bg * T * sizeof(int32_t));
    if (!in_all || !tg_all) DIE("out of host memory");
    // This replica's share of the global batch (the whole batch when D = 1, as on the GPU).
    const size_t rep_rows = (size_t)Bg / D * T;
    const int32_t *in_rep = in_all + (size_t)d * rep_rows, *tg_rep = tg_all + (size_t)d * rep_rows;
    const float scale = 1.0f / (float)(m * D);
    pp_meas_t acc = {0};
    double dp_s = 0, loss0 = NAN;
    const int measured = steps - warmup;
    for (int k = 0; k < steps; k++) {
        sample_batch(&data, Bg, T, k, in_all, tg_all);
        pp_timing_t tm;
        if (timeline_s[0] && k == steps - 1) pp_runner_align_start(run);  // the drawn step: every rank starts together
        double loss = pp_runner_step(run, in_rep, tg_rep, scale, &tm);
        const double dps = pp_runner_dp_allreduce(run, D);
        pp_runner_adamw(run, &opt);
        comm_host_allreduce_f64(c, &loss, 1, COMM_SUM);  // only the head ranks' terms are non-zero
        if (k == 0) loss0 = loss;
        if (wr == 0) {
            printf("step %3d  loss %.6f\n", k, loss);
            fflush(stdout);
        }
        if (!isfinite(loss)) comm_fatal(c, 1, "loss is %g at step %d", loss, k);
        if (k + 1 == warmup) replan(c, run, &sched, &tm, wr == 0);
        if (k < warmup) continue;
        dp_s += dps;
        pp_meas_add(&acc, &tm, sim_peak_live(&sched, r), (double)mem_stats(lm_device(lm)).peak, k == warmup, measured);
    }

    // Timing: every rank's means to rank 0, the bubble, the timelines.
    const pp_report_t rep = {&sched, world, warmup, measured, D, pp_runner_clock(run), gpu,
                             (size_t)Bmb * T * cfg.d_model * sizeof(float), dp_s};
    sim_costs_t mean_costs;  // rank 0: the measured mean costs (seconds)
    int status = pp_report_timing(c, &acc, &rep, &mean_costs);
    if (timeline_s[0]) status |= pp_write_timelines(c, run, &sched, r, d, D, timeline_s, &mean_costs, world, rep.msg_bytes);

    // The parameters on the host (waits for the last AdamW).
    const size_t n_par = lay->total;
    float* host = malloc(n_par * sizeof(float));
    if (!host) DIE("out of host memory");
    lm_get_params(lm, host);
    // Replicas of one stage must be bitwise identical (2D).
    if (D > 1) {
        // One group per pipeline rank: its D replicas must hold the same slices.
        const int same = train_hashes_agree(c, (unsigned long long)slices_hash(host, sb, se, v), r, p);
        if (wr == 0) printf("replicas: %s\n", same ? "bitwise identical for every stage" : "DIFFERENT across replicas");
        if (!same) status = 1;
    }

    if (check) {
        // Replica 0's stages send their slices to rank 0, which receives them into its own
        // model's parameter buffer (in the backend's memory; slices rank 0 does not use), then
        // copies the whole buffer out.
        float* P = lm_params(lm);
        comm_req_t** rq = calloc((size_t)S, sizeof(comm_req_t*));
        if (!rq) DIE("out of host memory");
        int k = 0;
        comm_group_start(c);
        for (int st = 0; st < S; st++) {
            const int owner = sched_rank_of(&sched, st);
            const model_range_t rg = partition_range(&part, st);
            size_t b, e;
            model_range_span(lay, &cfg, &rg, &b, &e);
            if (wr == 0 && owner != 0) rq[k++] = comm_irecv(c, P + b, e - b, COMM_F32, owner, NULL);
            if (wr != 0 && owner == wr) rq[k++] = comm_isend(c, P + b, e - b, COMM_F32, 0, NULL);
        }
        comm_group_end(c);
        comm_waitall(c, rq, k);
        free(rq);
        if (wr == 0) {
            lm_get_params(lm, host);
            status |= check_single(&cfg, lm_backend(lm), host, loss0, &data, Bg, T, steps, &opt, seed);
        }
    }
    if (check_fwd) {  // after check-single (it compares parameters; this only runs passes)
        sample_batch(&data, Bg, T, steps, in_all, tg_all);  // the batch a step `steps` would take
        status |= check_forward(c, run, &sched, sb, se, in_rep, tg_rep, scale, wr);
    }
    long long st_all = status;
    comm_host_allreduce_i64(c, &st_all, 1, COMM_MAX);
    pp_runner_destroy(run);
    grid_destroy(grid);
    partition_free(&part);
    schedule_free(&sched);
    data_close(&data);
    free(host);
    free(ranges);
    free(sb);
    free(se);
    free(in_all);
    free(tg_all);
    comm_destroy(c, 1);
    return (int)st_all;
}
