// train: the Transformer LM trained on a token file, with checkpoints that survive a killed job.
//
//   build/09_train/tokenize --in /usr/share/common-licenses --out results/09/lic.bin
//   build/09_train/train --data results/09/lic.bin --steps 400 --out results/09/run          # 1 process
//   scripts/mpirun.sh 2 build/09_train/train --data ... --dp --ckpt-dir ck --ckpt-every 50  # DDP (06)
//   scripts/mpirun.sh 2 build/09_train/train --data ... --zero 2 --ckpt-dir ck --resume     # ZeRO-1/2/3 (07)
//
// A step (letters: W ranks, B sequences a rank a micro-batch, A micro-batches, T context):
//   for each of A micro-batches: this rank's B windows (common/tokens.h's sampler: the step's
//     A·W·B windows are distinct, rank r takes rows a·W·B + r·B ..), forward, backward;
//     gradients summed over the micro-batches, then × 1/A (the mean over the global batch);
//   gradients averaged over ranks, by stage 06's DDP layer (--dp) or stage 07's zero_t (--zero 1:
//     one reduce-scatter into rank r's shard; --zero 2: bucket by bucket in the backward, rank r
//     keeping its piece of each) or zero3_t (--zero 3: unit by unit, parameters gathered per unit
//     too). With A = 1 the per-parameter hooks start them inside the backward (06's overlap);
//     with A > 1 after the last micro-batch (ZeRO-3: after each, summed over its shard);
//   the global gradient norm: Σ g² over the ranges this rank's optimizer (07's optim_t) owns —
//     every trainable element under DDP, its owned pieces under ZeRO (padding and frozen
//     elements are in no range) — all-reduced when sharded; clipped to --clip on those ranges;
//   AdamW at the cosine schedule's learning rate: optim_step (DDP), zero_step (AdamW on the
//     owned ranges, then the all-gathers), zero3_step (AdamW on the shard).
// Between steps: the log line, the evaluation loss on the held-out split, a checkpoint every
// --ckpt-every steps or when SIGTERM/SIGINT arrived (the handler only sets a flag; the ranks
// agree on it, save, and stop). --resume continues from the newest complete checkpoint.
// The optimizer is always 07's optim_t (sharded_optim.h): the trainer reaches it through
// zero_optim/zero3_optim to set the learning rate, clip, and read and write the moments of the
// flat ranges it owns (checkpoint.h); no ZeRO logic lives here.
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cuda_runtime_api.h>

#include "06_ddp/ddp.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"
#include "07_zero/zero3.h"
#include "08_pipeline/executor.h"
#include "08_pipeline/partition.h"
#include "08_pipeline/schedule.h"
#include "09_train/checkpoint.h"
#include "09_train/lr_clip.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/fileio.h"
#include "common/gnuplot.h"
#include "common/lm.h"
#include "common/model.h"
#include "common/timer.h"
#include "common/tokens.h"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) { g_stop = sig; }

// Stage 08's two executors behind one set of calls, chosen once (pp_exec_make): the CPU one
// runs the model_cpu_t over MPI, the GPU one the model_gpu_t over NCCL.
typedef struct {
    void* x;
    double (*step)(void* x, const int32_t* in, const int32_t* tg, float scale);
    double (*forward)(void* x, const schedule_t* fwd, const int32_t* in, const int32_t* tg, float scale);
    void (*span)(const void* x, int chunk, size_t* begin, size_t* end);
    void (*destroy)(void* x);
} pp_ops_t;

typedef struct {
    comm_t* c;
    int W, r, B, A, T, zero;
    lm_t* lm;             // the model (common/lm.h): the CPU model over MPI, the CUDA model over NCCL (one GPU a rank)
    device_t dev;         // where its flat buffers, the gradients and the moments live
    cudaStream_t cs;      // the GPU model's stream (compute, optimizer and, for DDP/ZeRO-1, collectives); NULL on the CPU
    grad_ops_t* go;       // the norm, clipping and accumulation of the gradients, on dev
    const param_layout_t* lay;
    float *hm, *hv;       // host copies of the moments for checkpoints (state_n each)
    float* dbuf;          // ZeRO-3: the parameters gathered on dev for a checkpoint (total)
    size_t total;         // flat parameter elements (the layout's)
    size_t P;             // the flat buffers' length: total, or ZeRO-1/2's padded total
    ddp_t* ddp;           // --dp
    zero_t* z;            // --zero 1, 2
    zero3_t* z3;          // --zero 3
    optim_t own;          // no ZeRO: AdamW over every parameter (one range)
    optim_t* opt;         // the optimizer that steps: &own, zero_optim(z) or zero3_optim(z3)
    float* gbase;         // the buffer opt's gradient offsets index
    ckpt_range_t* fr;     // (nfr) opt's ranges as runs of the flat layout, in its state order
    int nfr;
    float* acc;           // (nacc) gradient sum over micro-batches (A > 1): the flat gradient, or ZeRO-3's shard
    size_t nacc;
    param_ref_t* table;
    adamw_config_t cfg;
    tokens_t tok;
    sampler_t smp;
    size_t n_train;       // tokens [0, n_train) train, [n_train, n) are held out
    int32_t *in, *tg;     // (B, T); --pp: (A·B, T), the step's A micro-batches
    // --pp (stage 08): pipeline rank pr of replica d; D replicas; A = the micro-batches m
    int pp, D, d, pr;
    model_config_t mc;    // the model's config (the stages' spans)
    schedule_t sched;     // the action lists (08's schedule.h)
    schedule_t fwd;       // the forward-only lists of the same p, m, v: the evaluation's
    partition_t part;     // the blocks of every stage (08's partition.h)
    model_range_t* ranges;  // [v] this rank's chunks
    size_t *stb, *ste;    // [S] flat span of every stage
    pp_ops_t px;          // the executor
} trainer_t;

// The per-parameter hook of the backward: DDP's and ZeRO-1/2's buckets start here.
static void grad_hook(void* ctx, int i) {
    trainer_t* t = ctx;
    if (t->ddp) ddp_grad_ready(t->ddp, i);
    else if (t->z) zero_grad_ready(t->z, i);
}

// ZeRO-3's windows into the model (zero3_window_fn).
static void lm_window(void* m, float* p, float* g, size_t lo, size_t hi) { lm_set_windows(m, p, g, lo, hi); }

// A buffer of the model's device as host memory: itself on the CPU; on the GPU copied into
// `host` once the model's stream is done. And back (to_dev: host into the device buffer).
static const float* host_view(trainer_t* t, float* host, const float* dev, size_t n) {
    if (t->dev == DEV_CPU) return dev;  // (the host's memory already)
    comm_stream_sync(t->c, t->cs, "a copy to the host");
    CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
}
static void to_dev(trainer_t* t, float* dev, const float* host, size_t n) {
    if (t->dev == DEV_CPU) memcpy(dev, host, n * sizeof(float));
    else CUDA_CHECK(cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

// One forward of the (B, T) batch in t->in / t->tg: its mean loss (waits).
static double forward(trainer_t* t) {
    lm_set_tokens(t->lm, t->in, t->tg);
    lm_forward_async(t->lm);
    return lm_loss(t->lm);
}
static void backward(trainer_t* t, grad_ready_fn hook, void* ctx) {
    char err[512];
    if (lm_backward(t->lm, hook, ctx, err, sizeof err) != 0) comm_fatal(t->c, EXIT_FAILURE_RT, "%s", err);
}

// The optimizer's ranges as runs of the flat layout, in the order of its packed moments. Under
// ZeRO-3 a range's offsets are compact (unit u's piece at q_u); a merged range may run on into
// the next unit's piece, so it is cut at unit boundaries and each part mapped back to
// [begin_u + r·c_u + x).
static void flat_ranges(trainer_t* t) {
    const optim_t* o = t->opt;
    free(t->fr);
    t->nfr = 0;
    const int U = t->z3 ? zero3_n_units(t->z3) : 1;
    t->fr = malloc((size_t)(o->n * (U + 1) + 1) * sizeof *t->fr);
    if (!t->fr) DIE("out of host memory");
    for (int k = 0; k < o->n; k++) {
        size_t p = o->r[k].p_off, left = o->r[k].numel;
        if (!t->z3) {
            t->fr[t->nfr++] = (ckpt_range_t){p, left};
            continue;
        }
        for (int u = 0; u < U && left; u++) {
            const zero3_unit_t un = zero3_unit(t->z3, u);
            if (p < un.q || p >= un.q + un.piece) continue;
            const size_t n = un.q + un.piece - p < left ? un.q + un.piece - p : left;
            t->fr[t->nfr++] = (ckpt_range_t){un.begin + (size_t)t->r * un.piece + (p - un.q), n};
            p += n, left -= n;
        }
        if (left) DIE("optimizer range %d of ZeRO-3 outside every unit's piece", k);
    }
}

// The moments of a resumed run: allocated as optim_step would (it allocates at the first step,
// sharded_optim.h), read from the checkpoint, and every range's step count set to `step` (each
// range stepped at every step before).
static int load_state(trainer_t* t, const char* path, const ckpt_manifest_t* mf, char* err, size_t errlen) {
    optim_t* o = t->opt;
    if (!o->m) {
        o->m = mem_alloc(o->dev, o->state_n * sizeof(float), MEM_OPTIM);
        o->v = mem_alloc(o->dev, o->state_n * sizeof(float), MEM_OPTIM);
        o->alloc_n = o->state_n;
    }
    for (int k = 0; k < o->n; k++) o->r[k].t = (int)mf->step;
    if (ckpt_read_state(path, mf, t->fr, t->nfr, t->hm, t->hv, err, errlen) != 0) return -1;
    to_dev(t, o->m, t->hm, o->state_n);
    to_dev(t, o->v, t->hv, o->state_n);
    return 0;
}

// The global norm of the gradients opt steps: Σ g² over its ranges (what this rank owns),
// summed over the ranks when `sharded`; then clipped to `clip` on those ranges. Returns the norm.
static double clip_grads(trainer_t* t, int sharded, int counts, double clip) {
    const optim_t* o = t->opt;
    double ss = 0;
    for (int k = 0; k < o->n; k++) ss += grad_ops_sumsq(t->go, t->gbase + o->r[k].g_off, o->r[k].numel);
    if (!counts) ss = 0;
    if (sharded) comm_host_allreduce_f64(t->c, &ss, 1, COMM_SUM);
    const double norm = sqrt(ss);
    const float coef = grad_clip_coef(norm, clip);
    for (int k = 0; k < o->n; k++) grad_ops_scale(t->go, t->gbase + o->r[k].g_off, o->r[k].numel, coef);
    return norm;
}

// ---- pipeline parallelism (--pp): stage 08's executor runs the step
static double cpu_pp_step(void* x, const int32_t* in, const int32_t* tg, float s) { return pp_exec_step(x, in, tg, s, NULL); }
static double gpu_pp_step(void* x, const int32_t* in, const int32_t* tg, float s) { return pp_exec_gpu_step(x, in, tg, s, NULL); }
static double cpu_pp_fwd(void* x, const schedule_t* f, const int32_t* in, const int32_t* tg, float s) {
    return pp_exec_forward(x, f, in, tg, s, NULL);
}
static double gpu_pp_fwd(void* x, const schedule_t* f, const int32_t* in, const int32_t* tg, float s) {
    return pp_exec_gpu_forward(x, f, in, tg, s);
}
static void cpu_pp_span(const void* x, int ch, size_t* b, size_t* e) { pp_exec_span(x, ch, b, e); }
static void gpu_pp_span(const void* x, int ch, size_t* b, size_t* e) { pp_exec_gpu_span(x, ch, b, e); }
static void cpu_pp_destroy(void* x) { pp_exec_destroy(x); }
static void gpu_pp_destroy(void* x) { pp_exec_gpu_destroy(x); }

// The executor of the model's backend: the CPU one takes the model_cpu_t and this replica's
// first world rank (its D replicas all-reduce through it), the GPU one the model_gpu_t.
static pp_ops_t pp_exec_make(trainer_t* t) {
    model_cpu_t* mc = lm_cpu(t->lm);
    if (mc) {
        const pp_exec_config_t ec = {t->c, &t->sched, t->pr, t->d * t->pp, mc, t->ranges, t->B, t->T, -1};
        return (pp_ops_t){pp_exec_create(&ec), cpu_pp_step, cpu_pp_fwd, cpu_pp_span, cpu_pp_destroy};
    }
    const pp_exec_gpu_config_t gc = {t->c, &t->sched, t->pr, lm_gpu(t->lm), t->ranges, t->B, t->T, -1};
    return (pp_ops_t){pp_exec_gpu_create(&gc), gpu_pp_step, gpu_pp_fwd, gpu_pp_span, gpu_pp_destroy};
}

// A step under --pp. Replica d's micro-batch mb is the windows mb·D·B + d·B .. + B of the step
// (the layout of the data-parallel trainer with D ranks and A micro-batches), so the global batch
// is the A·D·B windows a single process with --accum A·D takes. The executor scales each
// micro-batch's loss by 1/(A·D): the gradients it accumulates are the global mean once the D
// replicas' are summed (pp_exec_dp_allreduce). The norm: Σ g² over this rank's slices (its
// optimizer's ranges), replica 0's ranks only (the replicas hold the same sums), all-reduced.
static double train_step_pp(trainer_t* t, int64_t step, double lr, double clip, int64_t kill_step, double* gnorm) {
    const size_t bt = (size_t)t->B * t->T;
    for (int a = 0; a < t->A; a++)
        sampler_fill(&t->smp, &t->tok, (int64_t)a * t->D * t->B + (int64_t)t->d * t->B, t->B, t->in + a * bt, t->tg + a * bt);
    double loss = t->px.step(t->px.x, t->in, t->tg, 1.0f / (float)(t->A * t->D));
    if (t->D > 1) pp_exec_dp_allreduce(t->px.x, t->D);  // (D > 1: the CPU executor only, checked at the start)
    if (step == kill_step) raise(SIGKILL);  // after the backward (the GPU executor's step ends synchronised)
    *gnorm = clip_grads(t, 1, t->d == 0, clip);
    t->own.cfg.lr = (float)lr;
    optim_step(&t->own, lm_params(t->lm), lm_grads(t->lm), t->cs);
    lm_params_changed(t->lm);
    sampler_advance(&t->smp);
    comm_host_allreduce_f64(t->c, &loss, 1, COMM_SUM);  // the head ranks' terms: the global mean
    return loss;
}

// The evaluation under --pp: forward-only passes over held-out windows (K = ceil(nb / A) passes
// of A micro-batches a replica; replica d takes windows (d·K + k)·A·B ..), the loss scaled by
// 1/(K·A·D) and summed over the head ranks. With D = 1 and nb a multiple of A these are the
// single process's nb·B windows in its order, and each micro-batch's loss is the whole model's
// forward on its B rows (08's ranges: the same kernels in the same order), so the mean is the
// single process's bit for bit when K·A is a power of two (the scale is then exact). Each pass
// runs 08's schedule_make_forward lists (F and the activations' messages, no backward): the
// gradients and the optimizer are not touched.
static double evaluate_pp(trainer_t* t, int nb) {
    const int K = (nb + t->A - 1) / t->A;
    const size_t w = (size_t)t->T + 1;
    double s = 0;
    for (int k = 0; k < K; k++) {
        for (int a = 0; a < t->A; a++)
            for (int b = 0; b < t->B; b++) {
                const size_t row = (size_t)a * t->B + b;
                const size_t p = t->n_train + (((size_t)t->d * K + k) * t->A * t->B + row) * w;
                for (int i = 0; i < t->T; i++) {
                    t->in[row * t->T + i] = tokens_at(&t->tok, p + i);
                    t->tg[row * t->T + i] = tokens_at(&t->tok, p + i + 1);
                }
            }
        s += t->px.forward(t->px.x, &t->fwd, t->in, t->tg, 1.0f / (float)(K * t->A * t->D));
    }
    comm_host_allreduce_f64(t->c, &s, 1, COMM_SUM);
    return s;
}

// Collective: world rank 0's parameter buffer receives every stage's slice from its owner in
// replica 0 (the slices rank 0 does not own are never read by its executor, so they can hold
// the others'). On the GPU the receives land in rank 0's device buffer (NCCL, as 08's check).
static void pp_gather(trainer_t* t) {
    const int S = sched_stages(&t->sched);
    comm_req_t** rq = calloc((size_t)S, sizeof *rq);
    if (!rq) DIE("out of host memory");
    float* P = lm_params(t->lm);
    int k = 0;
    comm_group_start(t->c);
    for (int st = 0; st < S; st++) {
        const int owner = sched_rank_of(&t->sched, st);  // = its world rank in replica 0
        if (owner == 0) continue;
        if (t->r == 0) rq[k++] = comm_irecv(t->c, P + t->stb[st], t->ste[st] - t->stb[st], COMM_F32, owner, NULL);
        else if (t->r == owner) rq[k++] = comm_isend(t->c, P + t->stb[st], t->ste[st] - t->stb[st], COMM_F32, 0, NULL);
    }
    comm_group_end(t->c);
    comm_waitall(t->c, rq, k);
    free(rq);
}

// One optimizer step `step` (0-based). Returns the mean training loss over the global batch
// and the gradient norm (before clipping) in *gnorm.
static double train_step(trainer_t* t, int64_t step, double lr, double clip, int64_t kill_step, double* gnorm) {
    if (t->pp) return train_step_pp(t, step, lr, clip, kill_step, gnorm);
    float* G = t->z3 ? zero3_grad_shard(t->z3) : lm_grads(t->lm);  // what a micro-batch's gradient is in
    const size_t bytes = t->nacc * sizeof(float);
    double loss = 0;
    for (int a = 0; a < t->A; a++) {
        sampler_fill(&t->smp, &t->tok, (int64_t)a * t->W * t->B + (int64_t)t->r * t->B, t->B, t->in, t->tg);
        loss += forward(t);
        // With one micro-batch DDP's all-reduces and ZeRO-2's reduce-scatters start inside the
        // backward (stage 06's overlap); ZeRO-3's run in the model's unit hooks.
        const int hook = (t->ddp || t->z) && t->A == 1;
        backward(t, hook ? grad_hook : NULL, hook ? t : NULL);
        if (t->z3) zero3_finish_grads(t->z3);  // this micro-batch's averaged shard is complete
        // acc = G, then acc += G; at the end G = acc × 1/A (1·x + y is exact: the host's sums)
        if (t->A > 1 && a == 0) mem_copy_async(t->dev, t->acc, G, bytes, t->cs);
        else if (t->A > 1) grad_ops_add(t->go, t->acc, G, t->nacc);
    }
    if (t->A > 1) {
        mem_copy_async(t->dev, G, t->acc, bytes, t->cs);
        grad_ops_scale(t->go, G, t->nacc, 1.0f / (float)t->A);
    }
    // --die-at-step: the whole job dies here, after the backward and before the update — the
    // worst moment (gradients computed, nothing saved), as a lost node would.
    if (step == kill_step) {
        comm_stream_sync(t->c, t->cs, "the backward");  // the backward done, as on the CPU
        raise(SIGKILL);
    }
    if (t->A > 1 && (t->ddp || t->z))  // the hooks did not fire in the backward: every gradient is final now
        for (int i = t->lay->n - 1; i >= 0; i--) grad_hook(t, i);
    if (t->ddp) ddp_finish_grads(t->ddp);
    if (t->z) zero_finish_grads(t->z);
    // The global norm over the optimizer's ranges, summed over ranks when they are shards.
    *gnorm = clip_grads(t, t->zero != 0, 1, clip);
    if (t->z) {
        zero_set_lr(t->z, (float)lr);
        zero_step(t->z);
    } else if (t->z3) {
        zero3_set_lr(t->z3, (float)lr);
        zero3_step(t->z3);
    } else {
        t->own.cfg.lr = (float)lr;
        optim_step(&t->own, lm_params(t->lm), lm_grads(t->lm), t->cs);
    }
    lm_params_changed(t->lm);  // bf16: the copy is remade at the next forward
    sampler_advance(&t->smp);
    loss /= t->A;
    if (t->W > 1) {
        comm_host_allreduce_f64(t->c, &loss, 1, COMM_SUM);
        loss /= t->W;
    }
    return loss;
}

// The flat parameters on the host (total; `buf` host memory of total floats): the model's
// buffer, or ZeRO-3's shards gathered (collective) on the model's device first. --pp: rank 0's
// gathered whole (the other ranks': their own slices only).
static const float* host_params(trainer_t* t, float* buf) {
    if (t->pp) pp_gather(t);
    if (t->z3) zero3_gather_params(t->z3, t->dbuf);
    return host_view(t, buf, t->z3 ? t->dbuf : lm_params(t->lm), t->total);
}
// The moments on the host (GPU: copied into hm, hv).
static void host_moments(trainer_t* t, const float** m, const float** v) {
    *m = t->opt->m, *v = t->opt->v;
    if (!t->opt->m) return;
    *m = host_view(t, t->hm, t->opt->m, t->opt->state_n);
    *v = host_view(t, t->hv, t->opt->v, t->opt->state_n);
}

// Mean loss over the held-out split's first nb·B·W windows (consecutive, non-overlapping; rank
// r takes its own nb·B of them): the same windows at every evaluation, so the curve compares.
static double evaluate(trainer_t* t, int nb) {
    if (t->pp) return evaluate_pp(t, nb);
    double s = 0;
    const size_t w = (size_t)t->T + 1;
    for (int k = 0; k < nb; k++) {
        for (int b = 0; b < t->B; b++) {
            const size_t p = t->n_train + ((size_t)(t->r * nb + k) * t->B + b) * w;
            for (int i = 0; i < t->T; i++) {
                t->in[(size_t)b * t->T + i] = tokens_at(&t->tok, p + i);
                t->tg[(size_t)b * t->T + i] = tokens_at(&t->tok, p + i + 1);
            }
        }
        s += forward(t);
    }
    if (t->W > 1) comm_host_allreduce_f64(t->c, &s, 1, COMM_SUM);
    return s / ((double)nb * t->W);
}

// Entropy (nats) of the training split's token frequencies: the loss of the best model that
// ignores context, the line a model that learned anything must fall below.
static double unigram_entropy(const tokens_t* tok, size_t n, int vocab) {
    double* cnt = calloc((size_t)vocab, sizeof *cnt);
    if (!cnt) DIE("out of host memory");
    for (size_t i = 0; i < n; i++) cnt[tokens_at(tok, i)] += 1;
    double h = 0;
    for (int v = 0; v < vocab; v++)
        if (cnt[v] > 0) h -= cnt[v] / (double)n * log(cnt[v] / (double)n);
    free(cnt);
    return h;
}

typedef struct {
    const char* csv;
    double h_uni;
    char title[256];
} plot_ctx_t;

static void plot_script(FILE* gp, const char* term, const char* out, void* vctx) {
    const plot_ctx_t* p = vctx;
    fprintf(gp, "set terminal %s size 900,540\nset output '%s'\n", term, out);
    fprintf(gp, "set datafile separator ','\nset key top right\nset grid\n");
    fprintf(gp, "set title '%s'\nset xlabel 'step'\nset ylabel 'loss (nats/token)'\n", p->title);
    fprintf(gp, "plot '%s' every ::1 using 1:3 with lines lw 1 lc rgb '#4477aa' title 'train', "
                "'' every ::1 using 1:($6 == $6 ? $6 : 1/0) with linespoints pt 7 lc rgb '#cc3311' title 'eval (held out)', "
                "%.6f with lines dt 2 lc rgb '#444444' title 'unigram entropy %.3f'\n",
            p->csv, p->h_uni, p->h_uni);
}

// The whole history as CSV (atomic: a reader never sees half a file).
static void write_csv(const char* path, const float* hist, int64_t steps) {
    FILE* f = afile_open(path);
    if (!f) DIE("cannot create %s", path);
    fprintf(f, "step,lr,loss,grad_norm,tokens_per_s,eval_loss\n");
    for (int64_t s = 0; s < steps; s++) {
        const float* h = hist + s * CKPT_HIST;
        fprintf(f, "%lld,%.9g,%.9g,%.9g,%.1f,", (long long)(s + 1), h[1], h[0], h[2], h[3]);
        if (isnan(h[4])) fprintf(f, "\n");
        else fprintf(f, "%.9g\n", h[4]);
    }
    if (afile_commit(f) != 0) DIE("cannot write %s", path);
}

// The token file must not change under a job: rank 0 compares its size, modification time and
// sampled checksum (ckpt_data_identity) with the start's, at every evaluation, epoch and
// checkpoint; a change ends the job with one line naming the file, before anything more is saved.
static void data_check(trainer_t* t, const ckpt_data_t* id) {
    char why[700] = "";
    int bad = 0;
    if (t->r == 0) {
        ckpt_data_t now;
        if (ckpt_data_identity(id->path, &now, why, sizeof why) != 0) bad = 1;
        else if (!ckpt_data_same(id, &now, why, sizeof why)) bad = 1;
        else if (now.mtime_ns != id->mtime_ns) bad = 1, snprintf(why, sizeof why, "rewritten: its modification time moved");
    }
    // every rank calls it; rank 0's reason becomes the job's one line, and every rank exits 2
    comm_check_input(t->c, !bad, "--data: %s changed during training (%s); it must not change while a job trains on "
                     "it: restore it and --resume from the last checkpoint", id->path, why);
}

static int g_lock_fd = -1;  // rank 0's lock on --ckpt-dir, released once
static void release_lock(void) {
    ckpt_unlock(g_lock_fd);
    g_lock_fd = -1;
}

int main(int argc, char** argv) {
    const char* data = NULL;
    const char* model_s = "tiny";
    const char* variant_s = "bucketed";
    const char* backend_s = "auto";
    const char* prec_s = "fp32";
    const char* ckpt_dir = "";
    const char* out = "";
    int context = 64, B = 8, A = 1, steps = 200, warmup = -1, seed = 1, dp = 0, zero = 0, vocab = 0;
    int log_every = 10, eval_every = 50, eval_batches = 4, ckpt_every = 0, keep = 2, resume = 0;
    int kill_step = -1, signal_at = -1, data_changed_ok = 0, start_if_empty = 0;
    int pp = 0, chunks = 0, mbs = 0, layers = 0;
    const char* sched_s = "1f1b";
    double peak_tflops = 0;
    double lr = 3e-3, min_lr = -1, clip = 1.0, wd = 0.1, val_frac = 0.1, bucket_mb = 25, timeout_s = 0;
    cli_opt_t opts[] = {
        {"data", CLI_STR, &data, NULL, "token file: llm.c .bin or 1-D .npy (09_train/tokenize makes one from text)", NULL},
        {"val-frac", CLI_DOUBLE, &val_frac, "0.1", "the last fraction of the tokens is held out for evaluation", NULL},
        {"vocab", CLI_INT, &vocab, "0", "vocabulary size (0: 256 for byte tokens, else the largest id + 1)", NULL},
        {"model", CLI_CHOICE, &model_s, "tiny", "model size (the CPU trains tiny)", MODEL_SIZE_CHOICES},
        {"context", CLI_INT, &context, "64", "sequence length T", NULL},
        {"batch", CLI_INT, &B, "8", "sequences per rank per micro-batch", NULL},
        {"accum", CLI_INT, &A, "1", "micro-batches per step (gradient accumulation)", NULL},
        {"steps", CLI_INT, &steps, "200", "optimizer steps in all (a resumed run counts from 0 too)", NULL},
        {"lr", CLI_DOUBLE, &lr, "3e-3", "peak learning rate", NULL},
        {"min-lr", CLI_DOUBLE, &min_lr, "-1", "learning rate at the end of the cosine (-1: lr/10)", NULL},
        {"warmup", CLI_INT, &warmup, "-1", "linear warm-up steps (-1: a tenth of --steps)", NULL},
        {"clip", CLI_DOUBLE, &clip, "1.0", "clip the global gradient norm to this (0: off)", NULL},
        {"wd", CLI_DOUBLE, &wd, "0.1", "AdamW weight decay", NULL},
        {"seed", CLI_INT, &seed, "1", "initialisation and data order", NULL},
        {"dp", CLI_FLAG, &dp, "0", "data parallel over the ranks (stage 06's DDP layer)", NULL},
        {"zero", CLI_INT, &zero, "0", "0: replicated optimizer state; 1, 2, 3: ZeRO-1/2/3 over the ranks (stage 07: optimizer state; + gradients; + parameters)", NULL},
        {"variant", CLI_CHOICE, &variant_s, "bucketed", "DDP variant", DDP_VARIANT_CHOICES},
        {"backend", CLI_CHOICE, &backend_s, "auto", "auto: nccl (the GPU model, one GPU a rank) where every rank has a GPU, else mpi (the CPU model)", COMM_BACKEND_AUTO_CHOICES},
        {"precision", CLI_CHOICE, &prec_s, "fp32", "GPU precision (the CPU model is fp32)", MODEL_PRECISION_CHOICES},
        {"bucket-mb", CLI_DOUBLE, &bucket_mb, "25", "DDP bucket cap (MiB)", NULL},
        {"log-every", CLI_INT, &log_every, "10", "a progress line every k steps", NULL},
        {"eval-every", CLI_INT, &eval_every, "50", "evaluation loss every k steps (and at the end; 0: only at the end)", NULL},
        {"eval-batches", CLI_INT, &eval_batches, "4", "micro-batches per rank an evaluation runs", NULL},
        {"ckpt-dir", CLI_STR, &ckpt_dir, "", "checkpoint directory (empty: no checkpoints)", NULL},
        {"ckpt-every", CLI_INT, &ckpt_every, "0", "a checkpoint every k steps (0: only at the end and on SIGTERM/SIGINT)", NULL},
        {"keep", CLI_INT, &keep, "2", "checkpoints kept (the newest ones)", NULL},
        {"resume", CLI_FLAG, &resume, "0", "continue from the newest complete checkpoint in --ckpt-dir (refused if it holds none)", NULL},
        {"start-if-empty", CLI_FLAG, &start_if_empty, "0", "with --resume: start from step 0 where --ckpt-dir holds no checkpoint yet (a job script that always resumes)", NULL},
        {"data-changed-ok", CLI_FLAG, &data_changed_ok, "0", "with --resume: train on a --data file other than the checkpoint's (refused without it)", NULL},
        {"out", CLI_STR, &out, "", "directory for train.csv and loss.png (rank 0)", NULL},
        {"die-at-step", CLI_INT, &kill_step, "-1", "test: SIGKILL every rank in this step, after the backward", NULL},
        {"signal-at-step", CLI_INT, &signal_at, "-1", "test: send SIGTERM to itself (rank 0) after this step", NULL},
        {"peak-tflops", CLI_DOUBLE, &peak_tflops, "0", "the machine's peak TFLOP/s per rank: the log line shows MFU (0: not shown)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
        {"layers", CLI_INT, &layers, "0", "blocks L (0: the size's; tiny has 2, so --pp above 2 or interleaving needs more)", NULL},
        {"pp", CLI_INT, &pp, "0", "pipeline parallel over P stages' ranks (stage 08's executor; ranks = P x D replicas with --dp; 0: off)", NULL},
        {"schedule", CLI_CHOICE, &sched_s, "1f1b", "pipeline schedule (--pp)", SCHED_CHOICES},
        {"chunks", CLI_INT, &chunks, "0", "model chunks v per pipeline rank (--pp; 0: 2 for interleaved, else 1)", NULL},
        {"micro-batches", CLI_INT, &mbs, "0", "micro-batches m a step (--pp; the same as --accum, which it sets)", NULL},
    };
    comm_cli_parse(argc, argv, "Train the Transformer LM on a token file, with checkpoints and resume (CPU, MPI).", opts, CLI_COUNT(opts));
#define BAD(...) comm_bad_input(__VA_ARGS__)
    if (context < 1 || context > 4096) BAD("--context: %d is out of range (1..4096)", context);
    if (B < 1 || B > 4096) BAD("--batch: %d is out of range (1..4096)", B);
    if (A < 1 || A > 1024) BAD("--accum: %d is out of range (1..1024)", A);
    if (steps < 1 || steps > 10000000) BAD("--steps: %d is out of range (1..10000000)", steps);
    if (warmup == -1) warmup = steps / 10;
    if (warmup < 0 || warmup > steps) BAD("--warmup: %d is out of range (0..--steps)", warmup);
    if (!(lr > 0 && lr < 10)) BAD("--lr: %g is out of range (0, 10)", lr);
    // --min-lr: the learning rate the cosine ends at; -1 (exactly) asks for lr/10.
    if (min_lr < 0 && min_lr != -1)
        BAD("--min-lr: %g is negative: give the learning rate at the end of the cosine, 0 <= min-lr <= --lr (-1: lr/10)", min_lr);
    if (min_lr == -1) min_lr = lr / 10;
    if (!(min_lr <= lr)) BAD("--min-lr: %g is above --lr %g", min_lr, lr);
    if (!(clip >= 0)) BAD("--clip: %g must be >= 0", clip);
    if (!(wd >= 0 && wd < 1)) BAD("--wd: %g is out of range [0, 1)", wd);
    if (!(val_frac > 0 && val_frac < 1)) BAD("--val-frac: %g is out of range (0, 1)", val_frac);
    if (zero < 0 || zero > 3) BAD("--zero: %d is out of range (0..3)", zero);
    if (zero && dp) BAD("--dp and --zero %d: choose one (ZeRO is data parallel already)", zero);
    if (log_every < 1) BAD("--log-every: %d must be >= 1 (a progress line every k steps)", log_every);
    if (eval_every < 0) BAD("--eval-every: %d must be >= 0 (0: evaluate only at the end)", eval_every);
    if (eval_batches < 1) BAD("--eval-batches: %d must be >= 1", eval_batches);
    if (ckpt_every < 0) BAD("--ckpt-every: %d must be >= 0 (0: a checkpoint only at the end)", ckpt_every);
    if (keep < 1) BAD("--keep: %d must be >= 1 (the checkpoints kept)", keep);
    if (!(bucket_mb >= 0 && bucket_mb <= 1e6)) BAD("--bucket-mb: %g is out of range [0, 1e6] (the DDP bucket cap in MiB)", bucket_mb);
    if (kill_step < -1) BAD("--die-at-step: %d is not a step (-1: never)", kill_step);
    if (signal_at < -1) BAD("--signal-at-step: %d is not a step (-1: never)", signal_at);
    if (!(peak_tflops >= 0 && peak_tflops < 1e6)) BAD("--peak-tflops: %g is out of range [0, 1e6)", peak_tflops);
    if (vocab < 0 || vocab > 1 << 20) BAD("--vocab: %d is out of range (0..%d)", vocab, 1 << 20);
    if (resume && !*ckpt_dir) BAD("--resume needs --ckpt-dir (the directory to continue from)");
    if (ckpt_every && !*ckpt_dir) BAD("--ckpt-every %d needs --ckpt-dir (where the checkpoints go)", ckpt_every);
    char err[2048];
    if (*ckpt_dir && dir_check_writable(ckpt_dir, err, sizeof err) != 0) BAD("--ckpt-dir: %s", err);
    if (*out && dir_check_writable(out, err, sizeof err) != 0) BAD("--out: %s", err);
    // The world size before MPI starts (mpirun's environment), so that the flag and data checks
    // that depend on it end the job before anything is allocated.
    const char* ws = getenv("OMPI_COMM_WORLD_SIZE");
    const int W = ws ? atoi(ws) : 1;
    if (W > 1 && !dp && !zero && !pp) BAD("%d ranks need --dp or --zero 1|2|3 (without them each rank would train alone)", W);

    // --pp: the checks that need only the flags and the world size
    if (pp < 0 || pp > 256) BAD("--pp: %d is out of range (0..256)", pp);
    if (chunks < 0 || chunks > 64) BAD("--chunks: %d is out of range (0..64; 0: 2 for interleaved, else 1)", chunks);
    if (mbs < 0 || mbs > 1024) BAD("--micro-batches: %d is out of range (0..1024; 0: --accum)", mbs);
    if (layers < 0 || layers > 1024) BAD("--layers: %d is out of range (0..1024)", layers);
    if (mbs) {
        if (A != 1 && A != mbs) BAD("--micro-batches %d and --accum %d: they are the same thing, give one", mbs, A);
        A = mbs;
    }
    if (!pp && chunks) BAD("--chunks needs --pp");
    if (pp && zero) BAD("--pp and --zero %d: not combined (ZeRO over the replicas of a stage is not built); use --pp with --dp", zero);
    if (pp && W % pp != 0) BAD("--pp: %d does not divide the %d ranks (ranks = pipeline stages P x replicas D)", pp, W);
    const int Dp = pp ? W / pp : W;  // data-parallel replicas: the global batch is A x Dp x B
    if (pp && Dp > 1 && !dp) BAD("--pp %d on %d ranks makes %d replicas of the pipeline: give --dp (ranks = P x D)", pp, W, Dp);
    const int gbatch = A * Dp * B;

    trainer_t t = {0};
    t.B = B, t.A = A, t.T = context, t.zero = zero;
    if (tokens_open(&t.tok, data, err, sizeof err) != 0) BAD("--data: %s", err);
    ckpt_data_t data_id;  // the file's identity now: recorded in every checkpoint, checked as the job goes
    if (ckpt_data_identity(data, &data_id, err, sizeof err) != 0) BAD("--data: %s", err);
    {
        char* rp = realpath(data, NULL);  // the manifest names the file absolutely
        if (rp) snprintf(data_id.path, sizeof data_id.path, "%s", rp);
        free(rp);
    }
    if (vocab == 0) vocab = t.tok.max_id < 256 ? 256 : t.tok.max_id + 1;
    if (t.tok.max_id >= vocab) BAD("--vocab: %d is too small for %s (its largest id is %d)", vocab, data, t.tok.max_id);
    model_config_t cfg;
    if (model_config_by_name(model_s, context, &cfg) != 0) BAD("--model: unknown size '%s'", model_s);
    cfg.vocab = vocab;
    if (layers) cfg.n_layers = layers;
    if (model_config_check(&cfg, err, sizeof err) != 0) BAD("%s", err);
    t.n_train = (size_t)((double)t.tok.n * (1.0 - val_frac));
    const size_t n_val = t.tok.n - t.n_train;
    // (--pp: evaluation runs whole forward passes, ceil(eval-batches / A) of A micro-batches a replica)
    const size_t ev_rows = pp ? (size_t)((eval_batches + A - 1) / A) * A * Dp : (size_t)eval_batches * W;
    if (ev_rows * B * ((size_t)context + 1) > n_val)
        BAD("--data: the held-out split has %zu tokens; --eval-batches %d x --batch %d x %d ranks x %d tokens needs more "
            "(HINT: a larger --val-frac or fewer --eval-batches)", n_val, eval_batches, B, W, context + 1);
    if (sampler_init(&t.smp, 0, t.n_train, context, (int64_t)gbatch, (uint64_t)seed, err, sizeof err) != 0)
        BAD("--data: %s", err);

    comm_backend_t backend;
    comm_backend_choose(backend_s, &backend);  // the flag's choices were checked by the parser
    const model_precision_t prec = strcmp(prec_s, "bf16") == 0 ? MP_BF16 : MP_FP32;
    if (backend == COMM_MPI && prec != MP_FP32) BAD("--precision bf16 needs the GPU (NCCL) backend");
    if (zero == 3 && prec != MP_FP32) BAD("--zero 3 runs the GPU model in fp32 only (its windows refuse bf16: common/model_gpu.h)");
    const int gpu = backend == COMM_NCCL;  // the CUDA model, one GPU a rank (else the CPU model)
    // --pp: schedule and partition (stage 08's), checked before MPI starts
    char part_s[400] = "";
    if (pp) {
        sched_kind_t kind;
        if (sched_parse(sched_s, &kind) != 0) BAD("--schedule: unknown '%s' (%s)", sched_s, SCHED_CHOICES);
        if (gpu && Dp > 1) BAD("--pp %d --dp on %d GPUs: pipeline x data parallel runs on the CPU only (--backend mpi)", pp, W);
        if (gpu && prec != MP_FP32) BAD("--pp --backend nccl runs fp32 only (the GPU executor refuses bf16)");
        const int v = chunks ? chunks : kind == SCHED_INTERLEAVED ? 2 : 1;
        if (schedule_make(kind, pp, A, v, &t.sched, err, sizeof err) != 0)
            BAD("--schedule %s --micro-batches %d --chunks %d on %d pipeline ranks: %s", sched_s, A, v, pp, err);
        if (schedule_make_forward(kind, pp, A, v, &t.fwd, err, sizeof err) != 0)  // same checks: cannot fail here
            BAD("--schedule %s --micro-batches %d --chunks %d on %d pipeline ranks (forward-only lists): %s", sched_s, A, v,
                pp, err);
        if (partition_model(&cfg, B, context, pp * v, &t.part, err, sizeof err) != 0)
            BAD("--pp %d: %d stages (%d ranks x %d chunks) over the model's %d blocks: %s; give --layers", pp, pp * v, pp, v,
                cfg.n_layers, err);
        char pf[300];
        partition_format(&t.part, pf, sizeof pf);
        snprintf(part_s, sizeof part_s, "%s v %d m %d: %s", sched_name(kind), v, A, pf);
    }
    // ---- the checkpoint directory (README: "Checkpoints and resume"). A fresh run refuses one
    // that holds checkpoints, --resume one that holds none; then rank 0 locks it for the job.
    int lock_fd = -1;
    if ((start_if_empty || data_changed_ok) && !resume) BAD("--start-if-empty and --data-changed-ok go with --resume");
    if (*ckpt_dir) {
        long long newest;
        const int nck = ckpt_count(ckpt_dir, &newest);
        struct stat dst;
        if (!resume && nck)
            BAD("--ckpt-dir: %s already holds %d checkpoint%s (the newest step_%09lld); give --resume to continue that run, "
                "or another --ckpt-dir", ckpt_dir, nck, nck > 1 ? "s" : "", newest);
        if (resume && !nck && !start_if_empty)
            BAD("--resume: %s holds no checkpoint%s; give the directory of the run to continue, or --start-if-empty to "
                "start from step 0 there", ckpt_dir, stat(ckpt_dir, &dst) != 0 ? " (it does not exist)" : "");
        if (comm_env_rank() == 0) {
            char note[800];
            lock_fd = ckpt_lock(ckpt_dir, 15.0, note, sizeof note, err, sizeof err);
            if (lock_fd < 0) BAD("--ckpt-dir: %s; wait for it to end, or give another --ckpt-dir", err);
            if (*note) printf("%s\n", note), fflush(stdout);
            // A job that ends through exit() (a refusal, an error) releases the lock as a clean end
            // does; only a job that was killed leaves its lock file naming it.
            g_lock_fd = lock_fd;
            atexit(release_lock);
        }
    }
    ckpt_watch_launcher();
    t.c = comm_init(backend, comm_timeout_flag(timeout_s));
    tokens_guard(&t.tok);  // after MPI's own handlers: a truncated token file ends the job in one line
    t.W = t.c->world, t.r = t.c->rank;
    if (t.W != W) comm_fatal(t.c, 1, "world size %d, the environment said %d", t.W, W);
    t.pp = pp, t.D = Dp, t.mc = cfg;
    t.d = pp ? t.r / pp : t.r, t.pr = pp ? t.r % pp : 0;
    // The model (--pp: a pipeline rank's, which runs range passes only), its stream (NULL on the
    // CPU) and the gradient arithmetic on its device.
    lm_options_t lo = lm_options(gpu ? LM_GPU : LM_CPU, B, context);
    lo.precision = prec, lo.seed = (uint64_t)seed, lo.ranges = pp != 0;
    t.lm = lm_create(&cfg, &lo, err, sizeof err);
    comm_check_input(t.c, t.lm != NULL, "--model %s: %s", model_s, err);
    t.dev = lm_device(t.lm), t.cs = lm_stream(t.lm), t.lay = lm_layout(t.lm);
    t.go = grad_ops_create(t.dev, t.cs);
    if (!pp && !lm_grads(t.lm)) {
        // One forward and backward (no update: nothing changes) make the GPU model allocate its
        // gradient buffer, which DDP and ZeRO take at creation (as the replica does).
        int32_t* z0 = calloc((size_t)B * context, sizeof(int32_t));
        if (!z0) DIE("out of host memory");
        lm_set_tokens(t.lm, z0, z0);
        lm_forward_async(t.lm);
        comm_check_input(t.c, lm_backward(t.lm, NULL, NULL, err, sizeof err) == 0, "%s", err);
        comm_stream_sync(t.c, t.cs, "the first backward");
        free(z0);
    }
    t.total = t.P = t.lay->total;
    t.cfg = adamw_default();
    t.cfg.weight_decay = (float)wd;
    t.in = malloc((size_t)(pp ? A : 1) * B * context * sizeof(int32_t));
    t.tg = malloc((size_t)(pp ? A : 1) * B * context * sizeof(int32_t));
    float* hist = malloc((size_t)steps * CKPT_HIST * sizeof(float) + 1);
    t.table = malloc((size_t)t.lay->n * sizeof *t.table);
    if (!t.in || !t.tg || !hist || !t.table) DIE("out of host memory");
    for (int i = 0; i < t.lay->n; i++)
        t.table[i] = (param_ref_t){t.lay->p[i].name, t.lay->p[i].offset, t.lay->p[i].numel, 1};
    // The optimizer lives outside the model (07's optim_t): its own moments are not needed (the
    // CPU model makes them at creation; the GPU model only at its own first AdamW step).
    model_cpu_t* mcpu = lm_cpu(t.lm);
    if (mcpu) {
        mem_free(mcpu->adam_m), mem_free(mcpu->adam_v);
        mcpu->adam_m = mcpu->adam_v = NULL;
    }
    float* pbuf = malloc(t.total * sizeof(float));  // host parameters: checkpoints, the final check
    if (!pbuf) DIE("out of host memory");

    // ---- resume, part 1: the checkpoint found and checked, parameters and history read
    int64_t step = 0;
    ckpt_manifest_t mf;
    char path[1100] = "";
    long long found = 0;
    // The resume's read time (rank 0, which also checks every file): the full check, then the
    // parameters and history, then (part 2) its moments; the model set-up between is not counted.
    const uint64_t rb0 = ckpt_bytes_read();
    double t_verify = 0, t_load = 0;
    if (resume) {
        // Rank 0 checks (every file read once); the others learn the verdict. 1: found; 0: the
        // directory holds no checkpoint (a first run); -1: there were some, all refused.
        if (t.r == 0) {
            const double tv = time_now_s();
            if (ckpt_find(ckpt_dir, &mf, path, sizeof path, err, sizeof err) == 0) found = 1;
            else found = strstr(err, "no checkpoint in") ? 0 : -1;
            t_verify = time_now_s() - tv;
        }
        comm_host_allreduce_i64(t.c, &found, 1, COMM_SUM);
        if (found < 0) comm_refuse(t.c, "--resume: %s; refusing to start over (remove %s to train from scratch)", err, ckpt_dir);
        if (found == 0 && t.r == 0) printf("resume: %s: no checkpoint yet, starting from step 0\n", ckpt_dir);
        if (found) {
            comm_host_bcast(t.c, &mf, sizeof mf, 0);
            comm_host_bcast(t.c, path, sizeof path, 0);
            if (mf.total != t.total || mf.T != context || mf.vocab != cfg.vocab || mf.d_model != cfg.d_model ||
                mf.n_layers != cfg.n_layers || mf.n_heads != cfg.n_heads || mf.d_ff != cfg.d_ff)
                comm_refuse(t.c, "--resume: %s holds another model (context %d, vocab %d, d_model %d, %d layers, "
                           "%d heads, d_ff %d); give the flags it was trained with", path, mf.T, mf.vocab, mf.d_model,
                           mf.n_layers, mf.n_heads, mf.d_ff);
            if (mf.global_batch != (int64_t)gbatch)
                comm_refuse(t.c, "--resume: %s was trained with a global batch of %lld sequences (it was on %d ranks); "
                           "here --batch %d x --accum %d x %d %s = %d: choose --batch and --accum with batch x accum x %s = %lld",
                           path, (long long)mf.global_batch, mf.world, B, A, Dp, pp ? "replicas" : "ranks", gbatch,
                           pp ? "replicas" : "ranks", (long long)mf.global_batch);
            if (mf.step > steps) comm_refuse(t.c, "--resume: %s is at step %lld, beyond --steps %d", path, (long long)mf.step, steps);
            if (mf.seed != (uint64_t)seed) comm_refuse(t.c, "--resume: %s was trained with --seed %llu; give that seed", path, (unsigned long long)mf.seed);
            // The data: another file (or this one changed) is refused unless --data-changed-ok.
            // Every rank read the same manifest and file, and gives the same verdict.
            char why[300] = "";
            const int same = !mf.has_data || ckpt_data_same(&mf.data, &data_id, why, sizeof why);
            comm_check_input(t.c, same || data_changed_ok,
                             "--data: %s is not the token file %s was trained on (%s: %s); give that file, or "
                             "--data-changed-ok to go on with this one", data, path, mf.data.path, why);
            if (!mf.has_data) {
                if (t.r == 0) printf("resume: note: %s records no token file (written before checkpoints did); %s not checked\n", path, data);
            } else if (!same) {
                if (t.r == 0) printf("resume: note: --data-changed-ok: training on %s from here; %s was trained on %s (%s)\n", data_id.path, path, mf.data.path, why);
            } else if (t.r == 0 && strcmp(mf.data.path, data_id.path) != 0) {
                printf("resume: note: %s holds the same bytes as %s, which %s was trained on\n", data_id.path, mf.data.path, path);
            }
            const double tl = time_now_s();
            int rc = ckpt_read_params(path, &mf, pbuf, err, sizeof err);
            if (rc == 0) lm_set_params(t.lm, pbuf);
            if (rc == 0) rc = ckpt_read_history(path, &mf, hist, err, sizeof err);
            if (rc != 0) comm_fatal(t.c, EXIT_FAILURE_RT, "--resume: %s", err);
            t_load = time_now_s() - tl;
            step = mf.step;
            t.smp.counter = mf.sampler_counter;
        }
    }
    // Every rank holds rank 0's parameters (they start equal anyway: one seed; this makes it so).
    if (t.W > 1) comm_broadcast(t.c, lm_params(t.lm), lm_params(t.lm), t.total, COMM_F32, 0, t.cs);
    comm_stream_sync(t.c, t.cs, "the parameter broadcast");
    lm_params_changed(t.lm);

    // ---- the data-parallel layer (06 or 07) and the optimizer it steps
    if (pp) {
        // --pp: stage 08's executor over this rank's chunks; 07's optim_t (AdamW) over its
        // chunks' slices of the flat layout, one range a chunk (the checkpoint's moments).
        const int v = t.sched.v, S = sched_stages(&t.sched);
        t.ranges = malloc((size_t)v * sizeof *t.ranges);
        t.stb = malloc((size_t)S * sizeof(size_t));
        t.ste = malloc((size_t)S * sizeof(size_t));
        if (!t.ranges || !t.stb || !t.ste) DIE("out of host memory");
        for (int st = 0; st < S; st++) {
            const model_range_t rg = partition_range(&t.part, st);
            model_range_span(t.lay, &cfg, &rg, &t.stb[st], &t.ste[st]);
        }
        for (int ch = 0; ch < v; ch++) t.ranges[ch] = partition_range(&t.part, sched_stage(&t.sched, t.pr, ch));
        t.px = pp_exec_make(&t);
        optim_init(&t.own, OPT_ADAMW, &t.cfg, t.dev);
        for (int ch = 0; ch < v; ch++) {
            size_t b, e;
            t.px.span(t.px.x, ch, &b, &e);
            optim_add_range(&t.own, b, b, e - b);
        }
        t.opt = &t.own;
        t.gbase = lm_grads(t.lm);
        t.nacc = t.total;
    } else if (zero == 1 || zero == 2) {
        // zero_t works on flat buffers padded to W equal, aligned shards (zero.h): the model's
        // grown to P elements, the padding zero.
        t.P = zero_padded_total(t.total, t.W);
        comm_check_input(t.c, lm_pad_flat(t.lm, t.P, err, sizeof err) == 0, "%s", err);
        t.z = zero_create(t.c, zero, t.table, t.lay->n, lm_params(t.lm), lm_grads(t.lm), t.total, bucket_mb, &t.cfg, t.cs);
        t.opt = zero_optim(t.z);
        t.gbase = zero_grad_shard(t.z);
        t.nacc = t.total;
    } else if (zero == 3) {
        // ZeRO-3: the shard made from the parameters, then the model's flat buffers freed; it reads
        // and writes through the windows zero3's unit hooks set (07_zero/zero3.h).
        const int U = model_n_units(&cfg);
        size_t* bounds = malloc((size_t)(U + 1) * sizeof *bounds);
        if (!bounds) DIE("out of host memory");
        for (int u = 0; u < U; u++) model_unit_span(t.lay, &cfg, u, &bounds[u], &bounds[u + 1]);
        bounds[U] = t.total;
        t.z3 = zero3_create(t.c, t.table, t.lay->n, bounds, U, lm_params(t.lm), &t.cfg, t.cs, lm_window, t.lm);
        lm_free_flat(t.lm, 0);
        const model_unit_hooks_t h = {zero3_before_fwd, zero3_before_bwd, zero3_after_bwd, t.z3};
        lm_set_unit_hooks(t.lm, &h);
        t.dbuf = mem_alloc(t.dev, t.total * sizeof(float), MEM_WORKSPACE);  // checkpoints' gather
        free(bounds);
        t.opt = zero3_optim(t.z3);
        t.gbase = zero3_grad_shard(t.z3);
        t.nacc = zero3_shard_elems(t.z3);
        t.P = t.total;
    } else {
        optim_init(&t.own, OPT_ADAMW, &t.cfg, t.dev);
        optim_add_range(&t.own, 0, 0, t.total);
        t.opt = &t.own;
        t.gbase = lm_grads(t.lm);
        t.nacc = t.total;
        if (dp) {
            ddp_variant_t v;
            if (ddp_variant_parse(variant_s, &v) != 0) DIE("--variant %s passed the choice check", variant_s);
            t.ddp = ddp_create(t.c, t.table, t.lay->n, lm_params(t.lm), lm_grads(t.lm), t.total, v, bucket_mb, t.cs);
        }
    }
    flat_ranges(&t);
    t.acc = A > 1 && !pp ? mem_alloc(t.dev, t.nacc * sizeof(float), MEM_GRADS) : NULL;
    t.hm = malloc(t.opt->state_n * sizeof(float) + 1);  // host staging of the moments: checkpoints, resume
    t.hv = malloc(t.opt->state_n * sizeof(float) + 1);
    if (!t.hm || !t.hv) DIE("out of host memory");

    // ---- resume, part 2: the moments of the flat ranges this rank's optimizer owns now
    if (found) {
        const double tl = time_now_s();
        if (load_state(&t, path, &mf, err, sizeof err) != 0) comm_fatal(t.c, EXIT_FAILURE_RT, "--resume: %s", err);
        t_load += time_now_s() - tl;
        if (t.r == 0) {
            const double nb = (double)(ckpt_bytes_read() - rb0), sec = t_verify + t_load;
            printf("resume: read %.0f bytes in %.1f ms (%.2f GB/s), checksums verified (rank 0: %.1f ms checking all %d "
                   "files, %.1f ms loading parameters, history and its moments)\n", nb, 1e3 * sec,
                   sec > 0 ? nb / sec / 1e9 : 0.0, 1e3 * t_verify, mf.n_files, 1e3 * t_load);
        }
        // Another schedule is allowed (training longer is a reason), but never silently.
        if (t.r == 0 && (mf.lr != lr || mf.min_lr != min_lr || mf.warmup != warmup || mf.steps != steps ||
                         mf.clip != clip || mf.wd != wd))
            printf("resume: note: the checkpoint's schedule was --lr %g --min-lr %g --warmup %lld --steps %lld --clip %g "
                   "--wd %g; continuing with --lr %g --min-lr %g --warmup %d --steps %d --clip %g --wd %g\n",
                   mf.lr, mf.min_lr, (long long)mf.warmup, (long long)mf.steps, mf.clip, mf.wd, lr, min_lr, warmup,
                   steps, clip, wd);
        if (t.r == 0)
            printf("resume: %s: step %lld, written by %d rank%s with --zero %d, now %d rank%s with --zero %d%s\n", path,
                   (long long)step, mf.world, mf.world > 1 ? "s" : "", mf.zero, t.W, t.W > 1 ? "s" : "", zero,
                   mf.pp || pp ? (snprintf(err, sizeof err, " (--pp %d then, --pp %d now)", mf.pp, pp), err) : "");
    }

    const double h_uni = unigram_entropy(&t.tok, t.n_train, vocab);
    if (t.r == 0) {
        printf("# train: %s (%zu tokens: %zu train, %zu held out), vocab %d, unigram entropy %.4f nats\n", data, t.tok.n,
               t.n_train, n_val, vocab, h_uni);
        printf("# model %s (%zu parameters), context %d, batch %d x accum %d x %d%s = %d sequences a step, %s\n",
               model_s, param_count(t.lay), context, B, A, Dp, pp ? " replica(s)" : Dp > 1 ? " ranks" : " rank", gbatch,
               pp ? "pipeline (stage 08's executor)" : zero == 1 ? "ZeRO-1 (optimizer state sharded, stage 07)" : zero == 2 ? "ZeRO-2 (optimizer state and gradients sharded, stage 07)"
               : zero == 3 ? "ZeRO-3 (optimizer state, gradients and parameters sharded, stage 07)" : dp ? "DDP (stage 06)" : "single process");
        printf("# AdamW lr %g -> %g (cosine, %d warm-up steps), wd %g, clip %g; %s\n", lr, min_lr, warmup, wd, clip,
               gpu ? (prec == MP_BF16 ? "GPU model (bf16 mixed precision) over NCCL" : "GPU model (fp32) over NCCL") : "CPU model over MPI");
        if (pp)
            printf("# pipeline: P %d x D %d = %d ranks; %s; A = %d micro-batches of %d rows\n", pp, Dp, t.W, part_s, A, B);
        fflush(stdout);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) DIE("sigaction failed");

    ckpt_manifest_t meta;
    memset(&meta, 0, sizeof meta);
    meta.world = t.W, meta.zero = zero, meta.total = t.total, meta.global_batch = (int64_t)gbatch;
    meta.pp = pp, meta.dp = Dp;
    snprintf(meta.layout, sizeof meta.layout, "%s", part_s);
    meta.T = context, meta.vocab = cfg.vocab, meta.d_model = cfg.d_model, meta.n_layers = cfg.n_layers;
    meta.n_heads = cfg.n_heads, meta.d_ff = cfg.d_ff, meta.seed = (uint64_t)seed;
    meta.lr = lr, meta.min_lr = min_lr, meta.warmup = warmup, meta.steps = steps, meta.clip = clip, meta.wd = wd;
    // The run: a new id at the fresh start (rank 0's, shared), the checkpoint's on a resume (one
    // written before runs had ids starts a new run: its checkpoints are never removed).
    long long rid = t.r != 0 ? 0 : found && mf.run_id ? (long long)mf.run_id : (long long)ckpt_new_run_id();
    comm_host_allreduce_i64(t.c, &rid, 1, COMM_SUM);  // rank 0's, to every rank
    meta.run_id = (uint64_t)rid;
    meta.has_data = 1, meta.data = data_id;
    meta.padded = zero == 3 ? (uint64_t)zero3_shard_elems(t.z3) * (uint64_t)t.W : t.P;
    // Optimizer state: every ZeRO rank writes its shard; under DDP it is replicated, rank 0 writes it.
    // --pp: replica 0's ranks each write the moments of their own slices.
    const int has_state = zero || t.r == 0 || (pp && t.d == 0);
    char where[1100];
#define SAVE()                                                                                          \
    do {                                                                                                \
        data_check(&t, &data_id);                                                                       \
        meta.step = step;                                                                               \
        meta.sampler_counter = t.smp.counter;                                                           \
        double t0_ = time_now_s();                                                                      \
        const float* hp_ = host_params(&t, pbuf);                                                       \
        const float *hm_, *hv_;                                                                         \
        host_moments(&t, &hm_, &hv_);                                                                   \
        const double copy_ = time_now_s() - t0_; /* gathers and device -> host copies */                \
        ckpt_save_timing_t st_;                                                                         \
        ckpt_save(t.c, ckpt_dir, &meta, hp_, t.fr, t.nfr, hm_, hv_, has_state, hist, keep,              \
                  where, sizeof where, &st_);                                                           \
        if (t.r == 0)                                                                                   \
            printf("checkpoint: %s (%.0f ms: %.0f ms host copy, %.0f ms checksum, %.0f ms write+fsync; "  \
                   "rank 0 wrote %llu bytes)\n", where, 1e3 * (time_now_s() - t0_), 1e3 * copy_,         \
                   1e3 * st_.checksum, 1e3 * st_.write, (unsigned long long)st_.bytes);                  \
    } while (0)

    // The rewritten progress line only on a terminal that can take it: mpirun hands rank 0 a
    // pseudo-terminal even when its own output goes to a file, so isatty alone is not enough;
    // a terminal also sets TERM (a batch job's or a script's environment usually does not).
    const char* term = getenv("TERM");
    const int tty = isatty(STDOUT_FILENO) && term && *term && strcmp(term, "dumb") != 0;
    const double flops_per_token = 3.0 * model_forward_flops(&cfg, 1, context) / context;
    int stopped = 0;
    double t_log = time_now_s();
    int64_t tok_log = 0;
    double last_eval = NAN;
    int64_t epoch = t.smp.counter / (int64_t)t.smp.n_win;
    while (step < steps) {
        ckpt_check_launcher("before its next step");  // under mpirun: a rank whose launcher died ends here
        double gnorm;
        const double cur_lr = lr_cosine(step, lr, min_lr, warmup, steps);
        const double t0 = time_now_s();
        const double loss = train_step(&t, step, cur_lr, clip, kill_step, &gnorm);
        const double dt = time_now_s() - t0;
        if (!isfinite(loss)) comm_fatal(t.c, 1, "loss is %g at step %lld", loss, (long long)step);
        float* h = hist + step * CKPT_HIST;
        h[0] = (float)loss, h[1] = (float)cur_lr, h[2] = (float)gnorm;
        h[3] = (float)((double)gbatch * context / dt);
        h[4] = NAN;
        step++;
        tok_log += (int64_t)gbatch * context;
        const int eval_now = (eval_every && step % eval_every == 0) || step == steps;
        const int64_t ep = t.smp.counter / (int64_t)t.smp.n_win;
        if (eval_now || ep != epoch) data_check(&t, &data_id);  // at every evaluation and epoch
        epoch = ep;
        if (eval_now) h[4] = (float)(last_eval = evaluate(&t, eval_batches));
        const int log_now = step % log_every == 0 || step == steps;
        if (t.r == 0 && tty && !log_now) {
            // On a terminal, one line rewritten every step between the logged ones.
            printf("\r\033[Kstep %6lld/%d  loss %.4f  lr %.3g  |g| %.3f", (long long)step, steps, loss, cur_lr, gnorm);
            fflush(stdout);
        }
        if (t.r == 0 && log_now) {
            const double now = time_now_s();
            if (tty) printf("\r\033[K");
            const double tps = tok_log / (now - t_log);
            printf("step %6lld/%d  loss %.4f  lr %.3g  |g| %.3f  %.0f tok/s", (long long)step, steps, loss, cur_lr, gnorm, tps);
            // MFU: model FLOPs (forward + backward = 3 forwards, as the course counts them) per
            // second, over the peak of every rank together.
            if (peak_tflops > 0) printf("  MFU %.1f%%", 100.0 * tps * flops_per_token / (peak_tflops * 1e12 * t.W));
            if (!isnan(h[4])) printf("  eval %.4f", h[4]);
            printf("\n");
            fflush(stdout);
            t_log = now, tok_log = 0;
        }
        if (step == signal_at && t.r == 0) raise(SIGTERM);
        // Did a signal arrive on any rank? All ranks must agree to save together.
        long long sig = g_stop;
        if (t.W > 1) comm_host_allreduce_i64(t.c, &sig, 1, COMM_MAX);
        if (sig) {
            if (t.r == 0) printf("stopping at step %lld: %s\n", (long long)step, sig == SIGINT ? "SIGINT" : "SIGTERM");
            stopped = 1;
        }
        if (*ckpt_dir && ((ckpt_every && step % ckpt_every == 0) || step == steps || stopped)) SAVE();
        if (stopped) break;
    }

    // ---- the end: replicas must agree bit for bit; the CSV and the plot
    unsigned long long ph = ckpt_fnv(CKPT_FNV_INIT, host_params(&t, pbuf), t.total * sizeof(float));
    long long v2[2] = {(long long)(ph >> 1), -(long long)(ph >> 1)};
    comm_host_allreduce_i64(t.c, v2, 2, COMM_MAX);
    int same = v2[0] == -v2[1];
    if (pp) {
        // Only rank 0 holds the whole (gathered); the replicas of every stage must hold the same
        // bits in their own slices: max of h and of -h per pipeline rank.
        const float* hp = host_view(&t, pbuf, lm_params(t.lm), t.total);
        unsigned long long mine = CKPT_FNV_INIT;
        for (int k = 0; k < t.own.n; k++)
            mine = ckpt_fnv(mine, hp + t.own.r[k].p_off, t.own.r[k].numel * sizeof(float));
        long long* hh = malloc((size_t)2 * pp * sizeof *hh);
        if (!hh) DIE("out of host memory");
        for (int q = 0; q < 2 * pp; q++) hh[q] = LLONG_MIN;
        hh[t.pr] = (long long)(mine >> 1), hh[pp + t.pr] = -(long long)(mine >> 1);
        comm_host_allreduce_i64(t.c, hh, 2 * pp, COMM_MAX);
        same = 1;
        for (int q = 0; q < pp; q++) same &= hh[q] == -hh[pp + q];
        free(hh);
    }
    if (t.r == 0) {
        printf("final: step %lld  train loss %.6f  eval loss %.6f  unigram entropy %.4f  params fnv64 %016llx  replicas %s\n",
               (long long)step, step ? hist[(step - 1) * CKPT_HIST] : NAN, last_eval, h_uni, ph,
               same ? "identical" : "DIFFERENT");
        if (*out && step > 0) {
            if (mkdir_p(out) != 0) DIE("cannot create %s", out);
            char csv[1100], png[1100];
            snprintf(csv, sizeof csv, "%s/train.csv", out);
            snprintf(png, sizeof png, "%s/loss.png", out);
            write_csv(csv, hist, step);
            plot_ctx_t pc = {csv, h_uni, ""};
            snprintf(pc.title, sizeof pc.title, "%s, context %d, %d sequences a step, %d rank%s (%s)", model_s, context,
                     gbatch, t.W, t.W > 1 ? "s" : "", gpu ? (prec == MP_BF16 ? "GPU, bf16" : "GPU, fp32") : "CPU");
            if (gnuplot_png(png, plot_script, &pc, err, sizeof err) != 0) printf("%s written; no PNG: %s\n", csv, err);
            else printf("%s, %s written\n", csv, png);
        }
    }
    if (t.ddp) ddp_destroy(t.ddp);
    zero_destroy(t.z);
    if (t.z3) {
        lm_set_unit_hooks(t.lm, NULL);
        zero3_destroy(t.z3);
    }
    if (t.opt == &t.own) optim_free(&t.own);
    if (t.px.x) t.px.destroy(t.px.x);
    if (pp) {
        partition_free(&t.part);
        schedule_free(&t.sched);
        schedule_free(&t.fwd);
        free(t.ranges), free(t.stb), free(t.ste);
    }
    free(t.table);
    mem_free(t.acc);
    mem_free(t.dbuf);
    grad_ops_destroy(t.go);
    lm_destroy(t.lm);
    free(t.fr), free(pbuf), free(t.hm), free(t.hv), free(t.in), free(t.tg), free(hist);
    sampler_free(&t.smp);
    tokens_close(&t.tok);
    release_lock();
    comm_destroy(t.c, 1);
    return same ? 0 : 1;
}
