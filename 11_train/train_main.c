// train: the Transformer LM trained on a token file, with checkpoints that survive a killed job.
//
//   build/11_train/tokenize --in /usr/share/common-licenses --out results/09/lic.bin
//   build/11_train/train --data results/09/lic.bin --steps 400 --out results/09/run          # 1 process
//   scripts/mpirun.sh 2 build/11_train/train --data ... --dp --ckpt-dir ck --ckpt-every 50  # DDP (06)
//   scripts/mpirun.sh 2 build/11_train/train --data ... --zero 2 --ckpt-dir ck --resume     # ZeRO-1/2/3 (07)
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
// flat ranges it owns (checkpoint.h); no ZeRO logic lives here. The model, the layer and the
// step are trainer.c's (one code path for the CPU and the GPU model: common/lm.h); this file
// holds the flags, the data, the checkpoint directory and resume, the loop, signals and output.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "11_train/checkpoint.h"
#include "11_train/lr_clip.h"
#include "11_train/trainer.h"
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
    int pp = 0, chunks = 0, mbs = 0, layers = 0, head_chunk = 0;
    const char* sched_s = "1f1b";
    double peak_tflops = 0;
    double lr = 3e-3, min_lr = -1, clip = 1.0, wd = 0.1, val_frac = 0.1, bucket_mb = 25, timeout_s = 0;
    cli_opt_t opts[] = {
        {"data", CLI_STR, &data, NULL, "token file: llm.c .bin or 1-D .npy (11_train/tokenize makes one from text)", NULL},
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
        {"precision", CLI_CHOICE, &prec_s, "fp32", "precision: fp32, or bf16 (the GPU's mixed precision; on the CPU with --zero 3 only: bf16 parameters, fp32 compute)", MODEL_PRECISION_CHOICES},
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
        {"head-chunk", CLI_INT, &head_chunk, "0", HEAD_CHUNK_HELP, NULL},
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
    if (head_chunk < 0 || head_chunk > HEAD_CHUNK_MAX)
        BAD("--head-chunk: %d is out of range (0 for the whole logits, or 1..%d rows)", head_chunk, HEAD_CHUNK_MAX);
    if (head_chunk && pp) BAD("--head-chunk %d and --pp %d: a pipeline stage's head keeps its logits (--head-chunk 0)", head_chunk, pp);
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
    t.B = B, t.A = A, t.T = context, t.zero = zero, t.clip = clip, t.kill_step = kill_step;
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
    // bf16 on the CPU: the CPU model's bf16 parameters (common/model_cpu.h) under ZeRO-3's bf16
    // gathers (07_zero/zero3.h zero3_set_mixed); the other modes keep it on the GPU.
    if (backend == COMM_MPI && prec != MP_FP32 && (zero != 3 || pp))
        BAD("--precision bf16 needs the GPU (NCCL) backend, or --zero 3 without --pp on the CPU (bf16 parameters, fp32 compute)");
    // The backend decides the model: the CUDA model, one GPU a rank, over NCCL, else the CPU model
    // (lm_options below). Past the flag checks, only the printed names ask which.
    const int gpu = backend == COMM_NCCL;
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
    // The model (--pp: a pipeline rank's, which runs range passes only) and its buffers
    lm_options_t lo = lm_options(gpu ? LM_GPU : LM_CPU, B, context);
    lo.precision = prec, lo.seed = (uint64_t)seed, lo.head_chunk = head_chunk;
    trainer_model(&t, lo, (float)wd, model_s);
    float* hist = malloc((size_t)steps * CKPT_HIST * sizeof(float) + 1);
    if (!hist) DIE("out of host memory");
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

    // ---- the data-parallel layer (06 or 07) or the pipeline (08), and the optimizer it steps
    trainer_layer(&t, dp, variant_s, bucket_mb);

    // ---- resume, part 2: the moments of the flat ranges this rank's optimizer owns now
    if (found) {
        const double tl = time_now_s();
        if (trainer_load_state(&t, path, &mf, err, sizeof err) != 0) comm_fatal(t.c, EXIT_FAILURE_RT, "--resume: %s", err);
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
        const float* hp_ = trainer_host_params(&t, pbuf);                                                       \
        const float *hm_, *hv_;                                                                         \
        trainer_host_moments(&t, &hm_, &hv_);                                                                   \
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
        const double loss = trainer_step(&t, step, cur_lr, &gnorm);
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
        if (eval_now) h[4] = (float)(last_eval = trainer_evaluate(&t, eval_batches));
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
    unsigned long long ph;
    const int same = trainer_replicas_same(&t, pbuf, &ph);
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
    trainer_free(&t);
    free(pbuf), free(hist);
    release_lock();
    comm_destroy(t.c, 1);
    return same ? 0 : 1;
}
