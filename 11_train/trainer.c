// The trainer's state and step (trainer.h): the model through common/lm.h, the data-parallel
// layer (06's DDP, 07's ZeRO-1/2/3) or the pipeline executor (08), the optimizer, the gradient
// arithmetic, the evaluation, and the host views checkpoints take.
#include "11_train/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "common/check.h"
#include "common/train_loop.h"

// The per-parameter hook of the backward: DDP's and ZeRO-1/2's buckets start here.
static void grad_hook(void* ctx, int i) {
    trainer_t* t = ctx;
    if (t->ddp) ddp_grad_ready(t->ddp, i);
    else if (t->z) zero_grad_ready(t->z, i);
}

// ZeRO-3's windows into the model (zero3_window_fn).
static void lm_window(void* m, float* p, float* g, size_t lo, size_t hi) { lm_set_windows(m, p, g, lo, hi); }
static void lm_window16(void* m, const uint16_t* p, size_t lo, size_t hi) { lm_set_windows_bf16(m, p, lo, hi); }

// Copies between the host and the model's device (dir: cudaMemcpyDeviceToHost or
// cudaMemcpyHostToDevice), once the model's stream is done; on the CPU a memcpy (a machine
// without a GPU makes no CUDA call).
static void dev_copy(trainer_t* t, void* dst, const void* src, size_t n, enum cudaMemcpyKind dir) {
    comm_stream_sync(t->c, t->cs, "a copy between the host and the device");
    if (t->dev == DEV_CPU) memcpy(dst, src, n * sizeof(float));
    else CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), dir));
}
// n floats of the model's device as host memory: copied into `host`.
const float* trainer_host_view(trainer_t* t, float* host, const float* dev, size_t n) {
    dev_copy(t, host, dev, n, cudaMemcpyDeviceToHost);
    return host;
}

// One forward of the (B, T) batch in t->in / t->tg: its mean loss (waits).
static double forward(trainer_t* t) {
    lm_set_tokens(t->lm, t->in, t->tg);
    lm_forward_async(t->lm);
    return lm_loss(t->lm);
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
int trainer_load_state(trainer_t* t, const char* path, const ckpt_manifest_t* mf, char* err, size_t errlen) {
    optim_t* o = t->opt;
    if (!o->m) {
        o->m = mem_alloc(o->dev, o->state_n * sizeof(float), MEM_OPTIM);
        o->v = mem_alloc(o->dev, o->state_n * sizeof(float), MEM_OPTIM);
        o->alloc_n = o->state_n;
    }
    for (int k = 0; k < o->n; k++) o->r[k].t = (int)mf->step;
    if (ckpt_read_state(path, mf, t->fr, t->nfr, t->hm, t->hv, err, errlen) != 0) return -1;
    dev_copy(t, o->m, t->hm, o->state_n, cudaMemcpyHostToDevice);
    dev_copy(t, o->v, t->hv, o->state_n, cudaMemcpyHostToDevice);
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
        // D > 1: the grid {D, pp} (world rank d·pp + pr); the replicas of a stage are its "dp" group.
        if (t->D > 1) t->grid = grid_create(t->c, (const int[]){t->D, t->pp}, (const char* const[]){"dp", "pp"}, 2);
        const pp_exec_config_t ec = {t->c, &t->sched, t->pr, t->d * t->pp, mc, t->ranges, t->B, t->T, -1,
                                     t->grid ? t->grid->group[0] : NULL};
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
static double train_step_pp(trainer_t* t, double* gnorm) {
    const size_t bt = (size_t)t->B * t->T;
    for (int a = 0; a < t->A; a++)
        sampler_fill(&t->smp, &t->tok, (int64_t)a * t->D * t->B + (int64_t)t->d * t->B, t->B, t->in + a * bt, t->tg + a * bt);
    double loss = t->px.step(t->px.x, t->in, t->tg, 1.0f / (float)(t->A * t->D));
    if (t->D > 1) pp_exec_dp_allreduce(t->px.x, t->D);  // (D > 1: the CPU executor only, checked at the start)
    if (t->step == t->kill_step) raise(SIGKILL);  // after the backward (the GPU executor's step ends synchronised)
    *gnorm = clip_grads(t, 1, t->d == 0, t->clip);
    t->own.cfg.lr = (float)t->lr;
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

// ---- a data-parallel step: common/train_loop.h's train_step_accum with the trainer's method.
// Micro-batch a: this rank's B windows a·W·B + r·B .. of the step (the sampler's order).
static void micro_fill(void* ctx, int a) {
    trainer_t* t = ctx;
    sampler_fill(&t->smp, &t->tok, (int64_t)a * t->W * t->B + (int64_t)t->r * t->B, t->B, t->in, t->tg);
    lm_set_tokens(t->lm, t->in, t->tg);
}
// After its backward: ZeRO-3's averaged shard of it is complete; with A > 1, acc = G, then
// acc += G (1·x + y is exact: the host's sums).
static void micro_done(void* ctx, int a) {
    trainer_t* t = ctx;
    if (t->z3) zero3_finish_grads(t->z3);
    if (t->A == 1) return;
    if (a == 0) mem_copy_async(t->dev, t->acc, t->G, t->nacc * sizeof(float), t->cs);
    else grad_ops_add(t->go, t->acc, t->G, t->nacc);
}
// After the last micro-batch: G = acc × 1/A; then the gradients averaged over the ranks.
static void finish_grads(void* ctx) {
    trainer_t* t = ctx;
    if (t->A > 1) {
        mem_copy_async(t->dev, t->G, t->acc, t->nacc * sizeof(float), t->cs);
        grad_ops_scale(t->go, t->G, t->nacc, 1.0f / (float)t->A);
    }
    // --die-at-step: the whole job dies here, after the backward and before the update — the
    // worst moment (gradients computed, nothing saved), as a lost node would.
    if (t->step == t->kill_step) {
        comm_stream_sync(t->c, t->cs, "the backward");  // the backward done, as on the CPU
        raise(SIGKILL);
    }
    if (t->A > 1 && (t->ddp || t->z))  // the hooks did not fire in the backward: every gradient is final now
        for (int i = t->lay->n - 1; i >= 0; i--) grad_hook(t, i);
    if (t->ddp) ddp_finish_grads(t->ddp);
    if (t->z) zero_finish_grads(t->z);
}
// The norm over the optimizer's ranges (summed over ranks when they are shards), the clipping,
// and AdamW at the schedule's rate: 07's zero_step, zero3_step, or optim_step over the model.
static void update(void* ctx) {
    trainer_t* t = ctx;
    t->gnorm = clip_grads(t, t->zero != 0, 1, t->clip);
    if (t->z) {
        zero_set_lr(t->z, (float)t->lr);
        zero_step(t->z);
    } else if (t->z3) {
        zero3_set_lr(t->z3, (float)t->lr);
        zero3_step(t->z3);
    } else {
        t->own.cfg.lr = (float)t->lr;
        optim_step(&t->own, lm_params(t->lm), lm_grads(t->lm), t->cs);
    }
}

// One optimizer step `step` (0-based) at learning rate lr. Returns the mean training loss over
// the global batch and the gradient norm (before clipping) in *gnorm.
double trainer_step(trainer_t* t, int64_t step, double lr, double* gnorm) {
    t->step = step, t->lr = lr;
    if (t->pp) return train_step_pp(t, gnorm);
    t->G = t->z3 ? zero3_grad_shard(t->z3) : lm_grads(t->lm);  // what a micro-batch's gradient is in
    // With one micro-batch DDP's all-reduces and ZeRO-2's reduce-scatters start inside the
    // backward (stage 06's overlap); ZeRO-3's run in the model's unit hooks.
    const train_method_t meth = {t, t->ddp || t->z ? grad_hook : NULL, finish_grads, update, NULL};
    const train_micro_t micro = {micro_fill, micro_done};
    double loss = train_step_accum(t->c, t->lm, &meth, t->A, &micro, NULL, NULL) / t->A;
    *gnorm = t->gnorm;
    sampler_advance(&t->smp);
    if (t->W > 1) {
        comm_host_allreduce_f64(t->c, &loss, 1, COMM_SUM);
        loss /= t->W;
    }
    return loss;
}

// The flat parameters on the host (total; `buf` host memory of total floats): the model's
// buffer, or ZeRO-3's shards gathered (collective) on the model's device first. --pp: rank 0's
// gathered whole (the other ranks': their own slices only).
const float* trainer_host_params(trainer_t* t, float* buf) {
    if (t->pp) pp_gather(t);
    if (t->z3) zero3_gather_params(t->z3, t->dbuf);
    return trainer_host_view(t, buf, t->z3 ? t->dbuf : lm_params(t->lm), t->total);
}
// The moments on the host (copied into hm, hv; NULL before the first step).
void trainer_host_moments(trainer_t* t, const float** m, const float** v) {
    *m = t->opt->m, *v = t->opt->v;
    if (!t->opt->m) return;
    *m = trainer_host_view(t, t->hm, t->opt->m, t->opt->state_n);
    *v = trainer_host_view(t, t->hv, t->opt->v, t->opt->state_n);
}

// Mean loss over the held-out split's first nb·B·W windows (consecutive, non-overlapping; rank
// r takes its own nb·B of them): the same windows at every evaluation, so the curve compares.
double trainer_evaluate(trainer_t* t, int nb) {
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


// ---- set-up and teardown
void trainer_model(trainer_t* t, lm_options_t lo, float wd, const char* model_s) {
    // The model (--pp: a pipeline rank's, which runs range passes only), its stream (NULL on the
    // CPU) and the gradient arithmetic on its device.
    char err[512];
    lo.ranges = t->pp != 0;
    t->lm = lm_create(&t->mc, &lo, err, sizeof err);
    comm_check_input(t->c, t->lm != NULL, "--model %s: %s", model_s, err);
    t->dev = lm_device(t->lm), t->cs = lm_stream(t->lm), t->lay = lm_layout(t->lm);
    t->go = grad_ops_create(t->dev, t->cs);
    if (!t->pp && !lm_grads(t->lm)) {
        // One forward and backward (no update: nothing changes) make the GPU model allocate its
        // gradient buffer, which DDP and ZeRO take at creation (as the replica does).
        int32_t* z0 = calloc((size_t)t->B * t->T, sizeof(int32_t));
        if (!z0) DIE("out of host memory");
        lm_set_tokens(t->lm, z0, z0);
        lm_forward_async(t->lm);
        comm_check_input(t->c, lm_backward(t->lm, NULL, NULL, err, sizeof err) == 0, "%s", err);
        comm_stream_sync(t->c, t->cs, "the first backward");
        free(z0);
    }
    t->total = t->P = t->lay->total;
    t->cfg = adamw_default();
    t->cfg.weight_decay = wd;
    t->in = malloc((size_t)(t->pp ? t->A : 1) * t->B * t->T * sizeof(int32_t));
    t->tg = malloc((size_t)(t->pp ? t->A : 1) * t->B * t->T * sizeof(int32_t));
    t->table = malloc((size_t)t->lay->n * sizeof *t->table);
    if (!t->in || !t->tg || !t->table) DIE("out of host memory");
    for (int i = 0; i < t->lay->n; i++)
        t->table[i] = (param_ref_t){t->lay->p[i].name, t->lay->p[i].offset, t->lay->p[i].numel, 1};
    // The optimizer lives outside the model (07's optim_t): its own moments are not needed (the
    // CPU model makes them at creation; the GPU model only at its own first AdamW step).
    model_cpu_t* mcpu = lm_cpu(t->lm);
    if (mcpu) {
        mem_free(mcpu->adam_m), mem_free(mcpu->adam_v);
        mcpu->adam_m = mcpu->adam_v = NULL;
    }
}

void trainer_layer(trainer_t* t, int dp, const char* variant_s, double bucket_mb) {
    char err[512];
    if (t->pp) {
        // --pp: stage 08's executor over this rank's chunks; 07's optim_t (AdamW) over its
        // chunks' slices of the flat layout, one range a chunk (the checkpoint's moments).
        const int v = t->sched.v, S = sched_stages(&t->sched);
        t->ranges = malloc((size_t)v * sizeof *t->ranges);
        t->stb = malloc((size_t)S * sizeof(size_t));
        t->ste = malloc((size_t)S * sizeof(size_t));
        if (!t->ranges || !t->stb || !t->ste) DIE("out of host memory");
        for (int st = 0; st < S; st++) {
            const model_range_t rg = partition_range(&t->part, st);
            model_range_span(t->lay, &t->mc, &rg, &t->stb[st], &t->ste[st]);
        }
        for (int ch = 0; ch < v; ch++) t->ranges[ch] = partition_range(&t->part, sched_stage(&t->sched, t->pr, ch));
        t->px = pp_exec_make(t);
        optim_init(&t->own, OPT_ADAMW, &t->cfg, t->dev);
        for (int ch = 0; ch < v; ch++) {
            size_t b, e;
            t->px.span(t->px.x, ch, &b, &e);
            optim_add_range(&t->own, b, b, e - b);
        }
        t->opt = &t->own;
        t->gbase = lm_grads(t->lm);
        t->nacc = t->total;
    } else if (t->zero == 1 || t->zero == 2) {
        // zero_t works on flat buffers padded to W equal, aligned shards (zero.h): the model's
        // grown to P elements, the padding zero.
        t->P = zero_padded_total(t->total, t->W);
        comm_check_input(t->c, lm_pad_flat(t->lm, t->P, err, sizeof err) == 0, "%s", err);
        t->z = zero_create(t->c, t->zero, t->table, t->lay->n, lm_params(t->lm), lm_grads(t->lm), t->total, bucket_mb, &t->cfg, t->cs);
        t->opt = zero_optim(t->z);
        t->gbase = zero_grad_shard(t->z);
        t->nacc = t->total;
    } else if (t->zero == 3) {
        // ZeRO-3: the shard made from the parameters, then the model's flat buffers freed; it reads
        // and writes through the windows zero3's unit hooks set (07_zero/zero3.h).
        const int U = model_n_units(&t->mc);
        size_t* bounds = malloc((size_t)(U + 1) * sizeof *bounds);
        if (!bounds) DIE("out of host memory");
        for (int u = 0; u < U; u++) model_unit_span(t->lay, &t->mc, u, &bounds[u], &bounds[u + 1]);
        bounds[U] = t->total;
        t->z3 = zero3_create(t->c, t->table, t->lay->n, bounds, U, lm_params(t->lm), &t->cfg, t->cs, lm_window, t->lm);
        // bf16 model: bf16 all-gathers of the shard's compute copy, fp32 masters and reduce-scatters
        if (lm_precision(t->lm) == MP_BF16) zero3_set_mixed(t->z3, 0, lm_window16);
        lm_free_flat(t->lm, 0);
        const model_unit_hooks_t h = {zero3_before_fwd, zero3_before_bwd, zero3_after_bwd, t->z3};
        lm_set_unit_hooks(t->lm, &h);
        t->dbuf = mem_alloc(t->dev, t->total * sizeof(float), MEM_WORKSPACE);  // checkpoints' gather
        free(bounds);
        t->opt = zero3_optim(t->z3);
        t->gbase = zero3_grad_shard(t->z3);
        t->nacc = zero3_shard_elems(t->z3);
        t->P = t->total;
    } else {
        optim_init(&t->own, OPT_ADAMW, &t->cfg, t->dev);
        optim_add_range(&t->own, 0, 0, t->total);
        t->opt = &t->own;
        t->gbase = lm_grads(t->lm);
        t->nacc = t->total;
        if (dp) {
            ddp_variant_t v;
            if (ddp_variant_parse(variant_s, &v) != 0) DIE("--variant %s passed the choice check", variant_s);
            t->ddp = ddp_create(t->c, t->table, t->lay->n, lm_params(t->lm), lm_grads(t->lm), t->total, v, bucket_mb, t->cs);
        }
    }
    flat_ranges(t);
    t->acc = t->A > 1 && !t->pp ? mem_alloc(t->dev, t->nacc * sizeof(float), MEM_GRADS) : NULL;
    t->hm = malloc(t->opt->state_n * sizeof(float) + 1);  // host staging of the moments: checkpoints, resume
    t->hv = malloc(t->opt->state_n * sizeof(float) + 1);
    if (!t->hm || !t->hv) DIE("out of host memory");
}

int trainer_replicas_same(trainer_t* t, float* pbuf, unsigned long long* hash) {
    const unsigned long long ph = ckpt_fnv(CKPT_FNV_INIT, trainer_host_params(t, pbuf), t->total * sizeof(float));
    *hash = ph;
    int same = train_hashes_agree(t->c, ph, 0, 1);
    if (t->pp) {
        // Only rank 0 holds the whole (gathered); the replicas of every stage must hold the same
        // bits in their own slices: one group per pipeline rank.
        const float* hp = trainer_host_view(t, pbuf, lm_params(t->lm), t->total);
        unsigned long long mine = CKPT_FNV_INIT;
        for (int k = 0; k < t->own.n; k++)
            mine = ckpt_fnv(mine, hp + t->own.r[k].p_off, t->own.r[k].numel * sizeof(float));
        same = train_hashes_agree(t->c, mine, t->pr, t->pp);
    }
    return same;
}

void trainer_free(trainer_t* t) {
    if (t->ddp) ddp_destroy(t->ddp);
    zero_destroy(t->z);
    if (t->z3) {
        lm_set_unit_hooks(t->lm, NULL);
        zero3_destroy(t->z3);
    }
    if (t->opt == &t->own) optim_free(&t->own);
    if (t->px.x) t->px.destroy(t->px.x);
    grid_destroy(t->grid);
    t->grid = NULL;
    if (t->pp) {
        partition_free(&t->part);
        schedule_free(&t->sched);
        schedule_free(&t->fwd);
        free(t->ranges), free(t->stb), free(t->ste);
    }
    free(t->table);
    mem_free(t->acc);
    mem_free(t->dbuf);
    grad_ops_destroy(t->go);
    lm_destroy(t->lm);
    free(t->fr), free(t->hm), free(t->hv), free(t->in), free(t->tg);
    sampler_free(&t->smp);
    tokens_close(&t->tok);
}
