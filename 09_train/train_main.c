// train: the Transformer LM trained on a token file, with checkpoints that survive a killed job.
//
//   build/09_train/tokenize --in /usr/share/common-licenses --out results/09/lic.bin
//   build/09_train/train --data results/09/lic.bin --steps 400 --out results/09/run          # 1 process
//   scripts/mpirun.sh 2 build/09_train/train --data ... --dp --ckpt-dir ck --ckpt-every 50  # DDP (06)
//   scripts/mpirun.sh 2 build/09_train/train --data ... --zero 1 --ckpt-dir ck --resume     # ZeRO-1 (07)
//
// A step (letters: W ranks, B sequences a rank a micro-batch, A micro-batches, T context):
//   for each of A micro-batches: this rank's B windows (common/tokens.h's sampler: the step's
//     A·W·B windows are distinct, rank r takes rows a·W·B + r·B ..), forward, backward;
//     gradients summed over the micro-batches, then × 1/A (the mean over the global batch);
//   gradients averaged over ranks: --dp through stage 06's DDP layer (with A = 1 its all-reduces
//     start in the backward's hook); --zero 1 reduce-scattered, rank r keeping shard r (07);
//   the global gradient norm: Σ g² over what this rank owns (everything under DDP, its shard
//     under ZeRO), all-reduced when sharded; clipped to --clip;
//   AdamW (common/adamw_cpu.h) at the cosine schedule's learning rate on what this rank owns;
//     ZeRO: the shards all-gathered back into every rank's parameters.
// Between steps: the log line, the evaluation loss on the held-out split, a checkpoint every
// --ckpt-every steps or when SIGTERM/SIGINT arrived (the handler only sets a flag; the ranks
// agree on it, save, and stop). --resume continues from the newest complete checkpoint.
//
// Why ZeRO-1 is not 07's zero_t: zero_t fixes the learning rate when it is created and keeps its
// optimizer state private, so a schedule, clipping and checkpoints cannot reach it. The trainer
// makes the same calls zero.c makes at level 1 — 07's shard layout (zero_shard_range), the
// communicator's in-place reduce-scatter and all-gather, AdamW on the shard — with the state
// in its hands (README "ZeRO in the trainer").
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "06_ddp/ddp.h"
#include "07_zero/zero.h"
#include "09_train/checkpoint.h"
#include "09_train/lr_clip.h"
#include "common/adamw_cpu.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/fileio.h"
#include "common/gnuplot.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/timer.h"
#include "common/tokens.h"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) { g_stop = sig; }

typedef struct {
    comm_t* c;
    int W, r, B, A, T, zero, dp;
    model_cpu_t m;
    size_t total;         // flat parameter elements (padding included)
    size_t lo, hi;        // the elements this rank's optimizer owns: [0, total) or its shard ∩ [0, total)
    size_t S, P;          // ZeRO: shard length and padded total
    float *ppad, *gpad;   // ZeRO: (P) padded parameters and gradients
    float *adam_m, *adam_v;  // (hi − lo) AdamW moments of what this rank owns
    float* acc;           // (total) gradient sum over micro-batches (A > 1)
    ddp_t* ddp;
    ddp_param_t* table;
    adamw_config_t opt;
    tokens_t tok;
    sampler_t smp;
    size_t n_train;       // tokens [0, n_train) train, [n_train, n) are held out
    int32_t *in, *tg;     // (B, T)
} trainer_t;

// One optimizer step `step` (0-based). Returns the mean training loss over the global batch
// and the gradient norm (before clipping) in *gnorm.
static double train_step(trainer_t* t, int64_t step, double lr, double clip, int64_t kill_step, double* gnorm) {
    const size_t n = t->total;
    float* G = t->m.grads;
    double loss = 0;
    for (int a = 0; a < t->A; a++) {
        sampler_fill(&t->smp, &t->tok, (int64_t)a * t->W * t->B + (int64_t)t->r * t->B, t->B, t->in, t->tg);
        loss += model_cpu_forward(&t->m, t->in, t->tg, t->B, t->T);
        // With one micro-batch the DDP all-reduces start inside the backward (stage 06's overlap).
        const int hook = t->ddp && t->A == 1;
        model_cpu_backward(&t->m, hook ? ddp_grad_ready : NULL, hook ? t->ddp : NULL);
        if (t->A > 1) {
            if (a == 0) memcpy(t->acc, G, n * sizeof *G);
            else for (size_t i = 0; i < n; i++) t->acc[i] += G[i];
        }
    }
    if (t->A > 1) {
        const float inv = 1.0f / (float)t->A;
        for (size_t i = 0; i < n; i++) G[i] = t->acc[i] * inv;
    }
    // --die-at-step: the whole job dies here, after the backward and before the update — the
    // worst moment (gradients computed, nothing saved), as a lost node would.
    if (step == kill_step) raise(SIGKILL);
    float *Pw = t->m.params, *Gw = G;  // what AdamW updates, indexed from 0
    if (t->ddp) {
        if (t->A > 1)  // the hooks did not fire in the backward: every gradient is final now
            for (int i = t->m.layout.n - 1; i >= 0; i--) ddp_grad_ready(t->ddp, i);
        ddp_finish_grads(t->ddp);
    } else if (t->zero) {
        memcpy(t->gpad, G, n * sizeof *G);  // padding stays 0
        comm_reduce_scatter(t->c, t->gpad, t->gpad + (size_t)t->r * t->S, t->S, COMM_F32, COMM_AVG, NULL);
        Pw = t->ppad;
        Gw = t->gpad;
    }
    // The global norm: Σ g² over the owned elements, summed over ranks when they are shards.
    double ss = grad_sumsq(Gw + t->lo, t->hi - t->lo);
    if (t->zero) comm_host_allreduce_f64(t->c, &ss, 1, COMM_SUM);
    *gnorm = sqrt(ss);
    grad_scale(Gw + t->lo, t->hi - t->lo, grad_clip_coef(*gnorm, clip));
    t->opt.lr = (float)lr;
    adamw_cpu_step(&t->opt, Pw + t->lo, Gw + t->lo, t->adam_m, t->adam_v, t->hi - t->lo, (int)(step + 1));
    if (t->zero) {
        comm_allgather(t->c, t->ppad + (size_t)t->r * t->S, t->ppad, t->S, COMM_F32, NULL);
        memcpy(t->m.params, t->ppad, n * sizeof *G);
    }
    sampler_advance(&t->smp);
    loss /= t->A;
    if (t->W > 1) {
        comm_host_allreduce_f64(t->c, &loss, 1, COMM_SUM);
        loss /= t->W;
    }
    return loss;
}

// Mean loss over the held-out split's first nb·B·W windows (consecutive, non-overlapping; rank
// r takes its own nb·B of them): the same windows at every evaluation, so the curve compares.
static double evaluate(trainer_t* t, int nb) {
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
        s += model_cpu_forward(&t->m, t->in, t->tg, t->B, t->T);
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

int main(int argc, char** argv) {
    const char* data = NULL;
    const char* model_s = "tiny";
    const char* variant_s = "bucketed";
    const char* ckpt_dir = "";
    const char* out = "";
    int context = 64, B = 8, A = 1, steps = 200, warmup = -1, seed = 1, dp = 0, zero = 0, vocab = 0;
    int log_every = 10, eval_every = 50, eval_batches = 4, ckpt_every = 0, keep = 2, resume = 0;
    int kill_step = -1, signal_at = -1;
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
        {"zero", CLI_INT, &zero, "0", "0: replicated optimizer state; 1: ZeRO-1 (state sharded over ranks, stage 07)", NULL},
        {"variant", CLI_CHOICE, &variant_s, "bucketed", "DDP variant", DDP_VARIANT_CHOICES},
        {"bucket-mb", CLI_DOUBLE, &bucket_mb, "25", "DDP bucket cap (MiB)", NULL},
        {"log-every", CLI_INT, &log_every, "10", "a progress line every k steps", NULL},
        {"eval-every", CLI_INT, &eval_every, "50", "evaluation loss every k steps (and at the end; 0: only at the end)", NULL},
        {"eval-batches", CLI_INT, &eval_batches, "4", "micro-batches per rank an evaluation runs", NULL},
        {"ckpt-dir", CLI_STR, &ckpt_dir, "", "checkpoint directory (empty: no checkpoints)", NULL},
        {"ckpt-every", CLI_INT, &ckpt_every, "0", "a checkpoint every k steps (0: only at the end and on SIGTERM/SIGINT)", NULL},
        {"keep", CLI_INT, &keep, "2", "checkpoints kept (the newest ones)", NULL},
        {"resume", CLI_FLAG, &resume, "0", "continue from the newest complete checkpoint in --ckpt-dir", NULL},
        {"out", CLI_STR, &out, "", "directory for train.csv and loss.png (rank 0)", NULL},
        {"die-at-step", CLI_INT, &kill_step, "-1", "test: SIGKILL every rank in this step, after the backward", NULL},
        {"signal-at-step", CLI_INT, &signal_at, "-1", "test: send SIGTERM to itself (rank 0) after this step", NULL},
        {"peak-tflops", CLI_DOUBLE, &peak_tflops, "0", "the machine's peak TFLOP/s per rank: the log line shows MFU (0: not shown)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
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
    if (min_lr < 0) min_lr = lr / 10;
    if (!(min_lr <= lr)) BAD("--min-lr: %g is above --lr %g", min_lr, lr);
    if (!(clip >= 0)) BAD("--clip: %g must be >= 0", clip);
    if (!(wd >= 0 && wd < 1)) BAD("--wd: %g is out of range [0, 1)", wd);
    if (!(val_frac > 0 && val_frac < 1)) BAD("--val-frac: %g is out of range (0, 1)", val_frac);
    if (zero != 0 && zero != 1) BAD("--zero: %d is not supported here (0 or 1; ZeRO-2 and 3: see 09_train/README.md)", zero);
    if (log_every < 1 || eval_every < 0 || eval_batches < 1 || ckpt_every < 0 || keep < 1)
        BAD("--log-every, --eval-batches and --keep must be >= 1, --eval-every and --ckpt-every >= 0");
    if (!(peak_tflops >= 0 && peak_tflops < 1e6)) BAD("--peak-tflops: %g is out of range [0, 1e6)", peak_tflops);
    if (vocab < 0 || vocab > 1 << 20) BAD("--vocab: %d is out of range (0..%d)", vocab, 1 << 20);
    if ((resume || ckpt_every) && !*ckpt_dir) BAD("--resume and --ckpt-every need --ckpt-dir");
    char err[2048];
    if (*ckpt_dir && dir_check_writable(ckpt_dir, err, sizeof err) != 0) BAD("--ckpt-dir: %s", err);
    if (*out && dir_check_writable(out, err, sizeof err) != 0) BAD("--out: %s", err);
    // The world size before MPI starts (mpirun's environment), so that the flag and data checks
    // that depend on it end the job before anything is allocated.
    const char* ws = getenv("OMPI_COMM_WORLD_SIZE");
    const int W = ws ? atoi(ws) : 1;
    if (W > 1 && !dp && !zero) BAD("%d ranks need --dp or --zero 1 (without them each rank would train alone)", W);

    trainer_t t = {0};
    t.B = B, t.A = A, t.T = context, t.zero = zero, t.dp = dp || zero;
    if (tokens_open(&t.tok, data, err, sizeof err) != 0) BAD("--data: %s", err);
    if (vocab == 0) vocab = t.tok.max_id < 256 ? 256 : t.tok.max_id + 1;
    if (t.tok.max_id >= vocab) BAD("--vocab: %d is too small for %s (its largest id is %d)", vocab, data, t.tok.max_id);
    model_config_t cfg;
    if (model_config_by_name(model_s, context, &cfg) != 0) BAD("--model: unknown size '%s'", model_s);
    cfg.vocab = vocab;
    if (model_config_check(&cfg, err, sizeof err) != 0) BAD("%s", err);
    t.n_train = (size_t)((double)t.tok.n * (1.0 - val_frac));
    const size_t n_val = t.tok.n - t.n_train;
    if ((size_t)eval_batches * B * W * ((size_t)context + 1) > n_val)
        BAD("--data: the held-out split has %zu tokens; --eval-batches %d x --batch %d x %d ranks x %d tokens needs more "
            "(HINT: a larger --val-frac or fewer --eval-batches)", n_val, eval_batches, B, W, context + 1);
    if (sampler_init(&t.smp, 0, t.n_train, context, (int64_t)A * W * B, (uint64_t)seed, err, sizeof err) != 0)
        BAD("--data: %s", err);

    t.c = comm_init(COMM_MPI, comm_timeout_flag(timeout_s));
    t.W = t.c->world, t.r = t.c->rank;
    if (t.W != W) comm_fatal(t.c, 1, "world size %d, the environment said %d", t.W, W);
    model_cpu_create(&t.m, &cfg, B, context, (uint64_t)seed);
    t.total = t.m.layout.total;
    t.opt = adamw_default();
    t.opt.weight_decay = (float)wd;
    t.lo = 0, t.hi = t.total;
    if (zero) {
        zero_shard_range(t.total, t.W, t.r, &t.lo, &t.hi, &t.P);
        t.S = t.hi - t.lo;
        if (t.lo > t.total) t.lo = t.total;  // a shard wholly in the padding owns nothing
        if (t.hi > t.total) t.hi = t.total;
        t.ppad = calloc(t.P, sizeof(float));
        t.gpad = calloc(t.P, sizeof(float));
        if (!t.ppad || !t.gpad) DIE("out of host memory");
    }
    t.adam_m = calloc(t.hi - t.lo + 1, sizeof(float));
    t.adam_v = calloc(t.hi - t.lo + 1, sizeof(float));
    t.acc = A > 1 ? malloc(t.total * sizeof(float)) : NULL;
    t.in = malloc((size_t)B * context * sizeof(int32_t));
    t.tg = malloc((size_t)B * context * sizeof(int32_t));
    float* hist = malloc((size_t)steps * CKPT_HIST * sizeof(float) + 1);
    if (!t.adam_m || !t.adam_v || (A > 1 && !t.acc) || !t.in || !t.tg || !hist) DIE("out of host memory");
    if (dp && !zero) {
        t.table = malloc((size_t)t.m.layout.n * sizeof *t.table);
        if (!t.table) DIE("out of host memory");
        for (int i = 0; i < t.m.layout.n; i++)
            t.table[i] = (ddp_param_t){t.m.layout.p[i].name, t.m.layout.p[i].offset, t.m.layout.p[i].numel, 1};
        ddp_variant_t v;
        if (ddp_variant_parse(variant_s, &v) != 0) DIE("--variant %s passed the choice check", variant_s);
        t.ddp = ddp_create(t.c, t.table, t.m.layout.n, t.m.params, t.m.grads, t.total, v, bucket_mb, NULL);
    }

    // ---- start or resume
    int64_t step = 0;
    if (resume) {
        ckpt_manifest_t mf;
        char path[1100] = "";
        long long found = 0;
        // Rank 0 checks (every file read once); the others learn the verdict. 1: found; 0: the
        // directory holds no checkpoint (a first run); -1: there were some, all refused.
        if (t.r == 0) {
            if (ckpt_find(ckpt_dir, &mf, path, sizeof path, err, sizeof err) == 0) found = 1;
            else found = strstr(err, "no checkpoint in") ? 0 : -1;
        }
        comm_host_allreduce_i64(t.c, &found, 1, COMM_SUM);
        if (found < 0) comm_fatal(t.c, EXIT_BAD_INPUT, "--resume: %s; refusing to start over (remove %s to train from scratch)", err, ckpt_dir);
        if (found == 0 && t.r == 0) printf("resume: %s: no checkpoint yet, starting from step 0\n", ckpt_dir);
        if (found) {
            comm_host_bcast(t.c, &mf, sizeof mf, 0);
            comm_host_bcast(t.c, path, sizeof path, 0);
            if (mf.total != t.total || mf.T != context || mf.vocab != cfg.vocab || mf.d_model != cfg.d_model ||
                mf.n_layers != cfg.n_layers || mf.n_heads != cfg.n_heads || mf.d_ff != cfg.d_ff)
                comm_fatal(t.c, EXIT_BAD_INPUT, "--resume: %s holds another model (context %d, vocab %d, d_model %d, %d layers, "
                           "%d heads, d_ff %d); give the flags it was trained with", path, mf.T, mf.vocab, mf.d_model,
                           mf.n_layers, mf.n_heads, mf.d_ff);
            if (mf.global_batch != (int64_t)A * t.W * B)
                comm_fatal(t.c, EXIT_BAD_INPUT, "--resume: %s was trained with a global batch of %lld sequences (it was on %d ranks); "
                           "here --batch %d x --accum %d x %d ranks = %d: choose --batch and --accum with batch x accum x ranks = %lld",
                           path, (long long)mf.global_batch, mf.world, B, A, t.W, A * t.W * B, (long long)mf.global_batch);
            if (mf.step > steps) comm_fatal(t.c, EXIT_BAD_INPUT, "--resume: %s is at step %lld, beyond --steps %d", path, (long long)mf.step, steps);
            if (mf.seed != (uint64_t)seed) comm_fatal(t.c, EXIT_BAD_INPUT, "--resume: %s was trained with --seed %llu; give that seed", path, (unsigned long long)mf.seed);
            int rc = ckpt_read_params(path, &mf, t.m.params, err, sizeof err);
            if (rc == 0) rc = ckpt_read_state(path, &mf, t.lo, t.hi, t.adam_m, t.adam_v, err, sizeof err);
            if (rc == 0) rc = ckpt_read_history(path, &mf, hist, err, sizeof err);
            if (rc != 0) comm_fatal(t.c, EXIT_FAILURE_RT, "--resume: %s", err);
            step = mf.step;
            t.smp.counter = mf.sampler_counter;
            // Another schedule is allowed (training longer is a reason), but never silently.
            if (t.r == 0 && (mf.lr != lr || mf.min_lr != min_lr || mf.warmup != warmup || mf.steps != steps ||
                             mf.clip != clip || mf.wd != wd))
                printf("resume: note: the checkpoint's schedule was --lr %g --min-lr %g --warmup %lld --steps %lld --clip %g "
                       "--wd %g; continuing with --lr %g --min-lr %g --warmup %d --steps %d --clip %g --wd %g\n",
                       mf.lr, mf.min_lr, (long long)mf.warmup, (long long)mf.steps, mf.clip, mf.wd, lr, min_lr, warmup,
                       steps, clip, wd);
            if (t.r == 0)
                printf("resume: %s: step %lld, written by %d rank%s with --zero %d, now %d rank%s with --zero %d\n", path,
                       (long long)step, mf.world, mf.world > 1 ? "s" : "", mf.zero, t.W, t.W > 1 ? "s" : "", zero);
        }
    }
    // Every rank holds rank 0's parameters (they start equal anyway: one seed; this makes it so).
    if (t.W > 1) comm_broadcast(t.c, t.m.params, t.m.params, t.total, COMM_F32, 0, NULL);
    if (zero) memcpy(t.ppad, t.m.params, t.total * sizeof(float));

    const double h_uni = unigram_entropy(&t.tok, t.n_train, vocab);
    if (t.r == 0) {
        printf("# train: %s (%zu tokens: %zu train, %zu held out), vocab %d, unigram entropy %.4f nats\n", data, t.tok.n,
               t.n_train, n_val, vocab, h_uni);
        printf("# model %s (%zu parameters), context %d, batch %d x accum %d x %d rank%s = %d sequences a step, %s\n",
               model_s, param_count(&t.m.layout), context, B, A, t.W, t.W > 1 ? "s" : "", A * t.W * B,
               zero ? "ZeRO-1 (optimizer state sharded)" : dp ? "DDP" : "single process");
        printf("# AdamW lr %g -> %g (cosine, %d warm-up steps), wd %g, clip %g; CPU over MPI\n", lr, min_lr, warmup, wd, clip);
        fflush(stdout);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) DIE("sigaction failed");

    ckpt_manifest_t meta;
    memset(&meta, 0, sizeof meta);
    meta.world = t.W, meta.zero = zero, meta.total = t.total, meta.global_batch = (int64_t)A * t.W * B;
    meta.T = context, meta.vocab = cfg.vocab, meta.d_model = cfg.d_model, meta.n_layers = cfg.n_layers;
    meta.n_heads = cfg.n_heads, meta.d_ff = cfg.d_ff, meta.seed = (uint64_t)seed;
    meta.lr = lr, meta.min_lr = min_lr, meta.warmup = warmup, meta.steps = steps, meta.clip = clip, meta.wd = wd;
    // Optimizer state: every ZeRO rank writes its shard; under DDP it is replicated, rank 0 writes it.
    const int has_state = zero || t.r == 0;
    char where[1100];
#define SAVE()                                                                                          \
    do {                                                                                                \
        meta.step = step;                                                                               \
        meta.sampler_counter = t.smp.counter;                                                           \
        double t0_ = time_now_s();                                                                      \
        ckpt_save(t.c, ckpt_dir, &meta, t.m.params, t.adam_m, t.adam_v, t.lo, t.hi, has_state, hist, keep, \
                  where, sizeof where);                                                                 \
        if (t.r == 0) printf("checkpoint: %s (%.0f ms)\n", where, 1e3 * (time_now_s() - t0_));          \
    } while (0)

    const int tty = isatty(STDOUT_FILENO);
    const double flops_per_token = 3.0 * model_forward_flops(&cfg, 1, context) / context;
    int stopped = 0;
    double t_log = time_now_s();
    int64_t tok_log = 0;
    double last_eval = NAN;
    while (step < steps) {
        double gnorm;
        const double cur_lr = lr_cosine(step, lr, min_lr, warmup, steps);
        const double t0 = time_now_s();
        const double loss = train_step(&t, step, cur_lr, clip, kill_step, &gnorm);
        const double dt = time_now_s() - t0;
        if (!isfinite(loss)) comm_fatal(t.c, 1, "loss is %g at step %lld", loss, (long long)step);
        float* h = hist + step * CKPT_HIST;
        h[0] = (float)loss, h[1] = (float)cur_lr, h[2] = (float)gnorm;
        h[3] = (float)((double)A * t.W * B * context / dt);
        h[4] = NAN;
        step++;
        tok_log += (int64_t)A * t.W * B * context;
        if ((eval_every && step % eval_every == 0) || step == steps) h[4] = (float)(last_eval = evaluate(&t, eval_batches));
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
    unsigned long long ph = ckpt_fnv(CKPT_FNV_INIT, t.m.params, t.total * sizeof(float));
    long long v2[2] = {(long long)(ph >> 1), -(long long)(ph >> 1)};
    comm_host_allreduce_i64(t.c, v2, 2, COMM_MAX);
    const int same = v2[0] == -v2[1];
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
            snprintf(pc.title, sizeof pc.title, "%s, context %d, %d sequences a step, %d rank%s (CPU)", model_s, context,
                     A * t.W * B, t.W, t.W > 1 ? "s" : "");
            if (gnuplot_png(png, plot_script, &pc, err, sizeof err) != 0) printf("%s written; no PNG: %s\n", csv, err);
            else printf("%s, %s written\n", csv, png);
        }
    }
    if (t.ddp) ddp_destroy(t.ddp);
    free(t.table);
    model_cpu_destroy(&t.m);
    free(t.ppad), free(t.gpad), free(t.adam_m), free(t.adam_v), free(t.acc), free(t.in), free(t.tg), free(hist);
    sampler_free(&t.smp);
    tokens_close(&t.tok);
    comm_destroy(t.c, 1);
    return same ? 0 : 1;
}
