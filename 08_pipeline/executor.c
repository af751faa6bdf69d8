// The executor (executor.h): one loop over a rank's action list. Compute actions call the model
// seam (common/model_cpu_range.c); communication groups go to the communicator as posted
// non-blocking operations, then one wait.
#include "08_pipeline/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "08_pipeline/act_pool.h"
#include "common/adamw_cpu.h"
#include "common/check.h"
#include "common/timer.h"

struct pp_exec {
    pp_exec_config_t cfg;
    int p, m, v, S;
    int split;            // ZB-H1: BI and W as two passes
    size_t* span_b;       // [v] flat slice of each chunk
    size_t* span_e;
    act_pools_t pools;    // the activation sets of each chunk (act_pool.h)
    int live, peak_live;  // micro-batch-chunks between F and B/W
    long actions_done;    // for die_after
    comm_req_t** reqs;    // [n_reqs] one per operation of the longest group run so far
    int n_reqs;
    double *t_start, *t_end;  // [n_actions] the last step's times of every action (seconds
                              // since its start; a group's operations: posted -> finished)
    double t0;                // the last step's start on CLOCK_MONOTONIC (time_now_s)
    int n_times;              // entries of t_start / t_end filled by the last step (0: none yet)
};

static void* new_set(void* ctx, int c) {
    pp_exec_t* x = ctx;
    model_cpu_range_acts_t* s = malloc(sizeof *s);
    if (!s) DIE("out of host memory");
    model_cpu_range_acts_create(s, &x->cfg.m->c, &x->cfg.ranges[c], x->cfg.Bmb, x->cfg.T, x->split);
    return s;
}
static void free_set(void* s) {
    model_cpu_range_acts_destroy(s);
    free(s);
}
static model_cpu_range_acts_t* pool_take(pp_exec_t* x, int c, int mb) { return act_pools_take(&x->pools, c, mb); }
static model_cpu_range_acts_t* pool_get(pp_exec_t* x, int c, int mb, const char* why) {
    return act_pools_get(&x->pools, c, mb, "executor", why);
}
static void pool_release_later(pp_exec_t* x, int c, int mb) { act_pools_release_later(&x->pools, c, mb); }

void pp_die_point(int die_after, int rank, long* actions_done, int n) {
    if (die_after >= 0 && *actions_done < die_after && *actions_done + n >= die_after) {
        fprintf(stderr, "rank %d: --die-rank: exiting after %ld of its actions, in the middle of the schedule\n",
                rank, *actions_done + n);
        fflush(stderr);
        _exit(3);
    }
    *actions_done += n;
}

pp_exec_t* pp_exec_create(const pp_exec_config_t* cfg) {
    const schedule_t* s = cfg->sched;
    pp_exec_t* x = calloc(1, sizeof *x);
    if (!x) DIE("out of host memory");
    x->cfg = *cfg;
    x->p = s->p;
    x->m = s->m;
    x->v = s->v;
    x->S = sched_stages(s);
    x->split = s->kind == SCHED_ZBH1;
    const model_cpu_t* m = cfg->m;
    char err[256];
    if (cfg->rank < 0 || cfg->rank >= x->p) fail("executor: rank %d outside 0..%d", cfg->rank, x->p - 1);
    if (cfg->world_base < 0 || cfg->world_base + x->p > cfg->c->world)
        fail("executor: ranks %d..%d are not all in a world of %d", cfg->world_base, cfg->world_base + x->p - 1, cfg->c->world);
    if (cfg->Bmb < 1 || cfg->T < 1 || cfg->Bmb > m->B || cfg->T > m->T)
        fail("executor: micro-batch %d x %d does not fit the model's %d x %d", cfg->Bmb, cfg->T, m->B, m->T);
    x->span_b = calloc((size_t)x->v, sizeof(size_t));
    x->span_e = calloc((size_t)x->v, sizeof(size_t));
    if (!x->span_b || !x->span_e) DIE("out of host memory");
    act_pools_init(&x->pools, x->v, x->m, new_set, x);
    for (int c = 0; c < x->v; c++) {
        const model_range_t* r = &cfg->ranges[c];
        const int stage = sched_stage(s, cfg->rank, c);
        if (model_range_check(&m->c, r, err, sizeof err) != 0) fail("executor: chunk %d: %s", c, err);
        if (r->embed != (stage == 0) || r->head != (stage == x->S - 1))
            fail("executor: chunk %d is stage %d of %d: embedding %s, head %s expected", c, stage, x->S,
                 stage == 0 ? "yes" : "no", stage == x->S - 1 ? "yes" : "no");
        model_range_span(&m->layout, &m->c, r, &x->span_b[c], &x->span_e[c]);
    }
    pp_exec_schedule_changed(x);
    return x;
}

void pp_exec_schedule_changed(pp_exec_t* x) {
    const schedule_t* s = x->cfg.sched;
    char err[256];
    if (s->p != x->p || s->m != x->m || s->v != x->v || (s->kind == SCHED_ZBH1) != x->split)
        fail("executor: the new schedule has another shape (p %d, m %d, v %d, %s)", s->p, s->m, s->v, sched_name(s->kind));
    if (schedule_check_structure(s, err, sizeof err) != 0) fail("executor: %s", err);
    int longest = 1;
    for (int i = 0; i < s->n_actions[x->cfg.rank]; i++) {
        const int g = schedule_group_len(s, x->cfg.rank, i);
        longest = g > longest ? g : longest;
    }
    free(x->reqs);
    x->reqs = calloc((size_t)longest, sizeof(comm_req_t*));
    x->n_reqs = longest;
    free(x->t_start);
    free(x->t_end);
    const size_t na = (size_t)s->n_actions[x->cfg.rank] + 1;
    x->t_start = calloc(na, sizeof(double));
    x->t_end = calloc(na, sizeof(double));
    x->n_times = 0;  // the new lists have not run yet
    if (!x->reqs || !x->t_start || !x->t_end) DIE("out of host memory");
}

void pp_exec_destroy(pp_exec_t* x) {
    if (!x) return;
    act_pools_destroy(&x->pools, free_set);
    free(x->span_b);
    free(x->span_e);
    free(x->reqs);
    free(x->t_start);
    free(x->t_end);
    free(x);
}

void pp_exec_span(const pp_exec_t* x, int chunk, size_t* begin, size_t* end) {
    *begin = x->span_b[chunk];
    *end = x->span_e[chunk];
}

// Posts one group (actions [i, i + n) of this rank's list), then waits for all of it.
static void run_group(pp_exec_t* x, const action_t* acts, int n) {
    // STUDENT-BEGIN(08.run_group): post one communication group (B_mb·T·C floats each, peer world_base + a->peer): SEND_ACT from res[nL] of F's activation set, RECV_ACT into res[0] of a fresh set (pool_take), SEND_GRAD from dx, RECV_GRAD into dy, via comm_isend/comm_irecv between comm_group_start/end, then one comm_waitall | see 08_pipeline/README.md §The executor | test: test_08 pp_train_mpi/* | uses: pool_take pool_get | needs: 08.compute 08.order_gpipe 08.item_1f1b 08.order_interleaved 08.pick_zbh1 08.formula_bubble
    comm_t* c = x->cfg.c;
    const size_t count = (size_t)x->cfg.Bmb * x->cfg.T * x->cfg.m->c.d_model;  // (B_mb, T, C)
    comm_group_start(c);
    for (int j = 0; j < n; j++) {
        const action_t* a = &acts[j];
        const int peer = x->cfg.world_base + a->peer;
        const int nL = x->cfg.ranges[a->chunk].l1 - x->cfg.ranges[a->chunk].l0;
        model_cpu_range_acts_t* s;
        switch (a->kind) {
        case ACT_SEND_ACT:  // the output of F(mb, chunk): res[nL]
            s = pool_get(x, a->chunk, a->mb, "SEND_ACT");
            x->reqs[j] = comm_isend(c, s->a.res + (size_t)nL * count, count, COMM_F32, peer, NULL);
            break;
        case ACT_RECV_ACT:  // the input of F(mb, chunk): res[0] of a fresh set
            s = pool_take(x, a->chunk, a->mb);
            x->reqs[j] = comm_irecv(c, s->a.res, count, COMM_F32, peer, NULL);
            break;
        case ACT_SEND_GRAD:  // the input gradient of B/BI(mb, chunk)
            s = pool_get(x, a->chunk, a->mb, "SEND_GRAD");
            x->reqs[j] = comm_isend(c, s->dx, count, COMM_F32, peer, NULL);
            break;
        case ACT_RECV_GRAD:  // the output gradient of B/BI(mb, chunk)
            s = pool_get(x, a->chunk, a->mb, "RECV_GRAD");
            x->reqs[j] = comm_irecv(c, s->dy, count, COMM_F32, peer, NULL);
            break;
        default:
            DIE("executor: %s inside a communication group", act_name(a->kind));
        }
    }
    comm_group_end(c);
    comm_waitall(c, x->reqs, n);
    // STUDENT-END(08.run_group)
}

static void compute(pp_exec_t* x, const action_t* a, const int32_t* inputs, const int32_t* targets,
                    float loss_scale, double* loss_sum) {
    // STUDENT-BEGIN(08.compute): one compute action: F runs model_cpu_range_forward on its set (stage 0 reads the tokens, the last stage the targets: add loss_scale·loss), B / BI / W the backward or its input / weight half with the sink in ADD mode; copy the output (F) or input gradient (B, BI) to the neighbour stage when it is on this rank; after B or W pool_release_later and one live micro-batch less | see 08_pipeline/README.md §The executor | test: test_08 pp_train_mpi/* | uses: pool_take pool_get pool_release_later | needs: 08.run_group 08.order_gpipe 08.item_1f1b 08.order_interleaved 08.pick_zbh1 08.formula_bubble
    const schedule_t* s = x->cfg.sched;
    model_cpu_t* m = x->cfg.m;
    const int c = a->chunk, mb = a->mb, stage = sched_stage(s, x->cfg.rank, c);
    const int Bmb = x->cfg.Bmb, T = x->cfg.T;
    const size_t rows = (size_t)mb * Bmb * T, NC = (size_t)Bmb * T * m->c.d_model;
    const model_cpu_grad_sink_t sink = {m->grads, 1, NULL, NULL};  // ADD: accumulation
    model_cpu_range_acts_t* st;
    switch (a->kind) {
    case ACT_F: {
        st = pool_take(x, c, mb);  // already taken by its RECV_ACT unless stage 0 or local
        const float loss = model_cpu_range_forward(m, st, stage == 0 ? inputs + rows : NULL,
                                                   stage == x->S - 1 ? targets + rows : NULL, loss_scale, Bmb, T);
        if (stage == x->S - 1) *loss_sum += (double)loss_scale * loss;
        // The next stage on this rank (p = 1): hand the output over by copy.
        if (stage + 1 < x->S && sched_rank_of(s, stage + 1) == x->cfg.rank) {
            const int nL = x->cfg.ranges[c].l1 - x->cfg.ranges[c].l0;
            memcpy(pool_take(x, c + 1, mb)->a.res, st->a.res + (size_t)nL * NC, NC * sizeof(float));
        }
        if (++x->live > x->peak_live) x->peak_live = x->live;
        break;
    }
    case ACT_B:
    case ACT_BI:
        st = pool_get(x, c, mb, act_name(a->kind));
        if (a->kind == ACT_B) model_cpu_range_backward(m, st, &sink);
        else model_cpu_range_backward_input(m, st, &sink);
        if (stage > 0 && sched_rank_of(s, stage - 1) == x->cfg.rank)
            memcpy(pool_get(x, c - 1, mb, "local gradient")->dy, st->dx, NC * sizeof(float));
        if (a->kind == ACT_B) {
            pool_release_later(x, c, mb);
            x->live--;
        }
        break;
    case ACT_W:
        st = pool_get(x, c, mb, "W");
        model_cpu_range_backward_weight(m, st, &sink);
        pool_release_later(x, c, mb);
        x->live--;
        break;
    default:
        DIE("executor: %s is not a compute action", act_name(a->kind));
    }
    // STUDENT-END(08.compute)
}

// Runs this rank's list of `s` once (the training lists or the forward-only ones: the same loop;
// compute() reads only p and the stages from cfg.sched, which both lists share).
// record: keep the timeline (the training lists'; t_start / t_end are sized for them).
static double run_list(pp_exec_t* x, const schedule_t* s, const int32_t* inputs, const int32_t* targets,
                       float loss_scale, pp_timing_t* t, int record) {
    const int r = x->cfg.rank, n = s->n_actions[r];
    const action_t* acts = s->actions[r];
    pp_timing_t tm;
    memset(&tm, 0, sizeof tm);
    act_pools_reset(&x->pools);
    x->live = x->peak_live = 0;
    double loss_sum = 0;
    const double t0 = time_now_s();
    for (int i = 0; i < n;) {
        const int g = schedule_group_len(s, r, i);
        const double a0 = time_now_s();
        double a1;
        if (g > 0) {
            run_group(x, acts + i, g);
            a1 = time_now_s();
            tm.comm += a1 - a0;
        } else {
            act_pools_release_deferred(&x->pools);
            compute(x, &acts[i], inputs, targets, loss_scale, &loss_sum);
            // Forward-only (evaluation): no backward will read the set. Given back now, it is
            // released at the next compute, after the group right after this F (its SEND_ACT).
            if (s->forward_only) {
                pool_release_later(x, acts[i].chunk, acts[i].mb);
                x->live--;
            }
            a1 = time_now_s();
            const double dt = a1 - a0;
            tm.busy += dt;
            tm.t_kind[acts[i].kind] += dt;
            tm.n_kind[acts[i].kind]++;
        }
        const int done = g > 0 ? g : 1;
        for (int j = i; record && j < i + done; j++) x->t_start[j] = a0 - t0, x->t_end[j] = a1 - t0;  // the timeline
        pp_die_point(x->cfg.die_after, x->cfg.c->rank, &x->actions_done, done);
        i += done;
    }
    act_pools_release_deferred(&x->pools);
    tm.wall = time_now_s() - t0;
    if (record) x->t0 = t0, x->n_times = n;
    tm.peak_live = x->peak_live;
    tm.pool_slots = act_pools_slots(&x->pools);
    if (x->live != 0) DIE("executor rank %d: %d micro-batch-chunks still live after the list (bad list)", r, x->live);
    if (t) *t = tm;
    return loss_sum;
}

double pp_exec_step(pp_exec_t* x, const int32_t* inputs, const int32_t* targets, float loss_scale, pp_timing_t* t) {
    model_cpu_t* m = x->cfg.m;
    for (int c = 0; c < x->v; c++) memset(m->grads + x->span_b[c], 0, (x->span_e[c] - x->span_b[c]) * sizeof(float));
    return run_list(x, x->cfg.sched, inputs, targets, loss_scale, t, 1);
}

double pp_exec_forward(pp_exec_t* x, const schedule_t* fwd, const int32_t* inputs, const int32_t* targets,
                       float loss_scale, pp_timing_t* t) {
    char err[256];
    if (!fwd->forward_only || fwd->p != x->p || fwd->m != x->m || fwd->v != x->v)
        fail("executor: pp_exec_forward needs schedule_make_forward's lists for p %d, m %d, v %d (got %s p %d, m %d, v %d)",
             x->p, x->m, x->v, fwd->forward_only ? "forward-only" : "training", fwd->p, fwd->m, fwd->v);
    if (schedule_check_structure(fwd, err, sizeof err) != 0) fail("executor: %s", err);
    for (int i = 0; i < fwd->n_actions[x->cfg.rank]; i++) {  // room for its longest group
        const int g = schedule_group_len(fwd, x->cfg.rank, i);
        if (g > x->n_reqs) {
            free(x->reqs);
            if (!(x->reqs = calloc((size_t)g, sizeof(comm_req_t*)))) DIE("out of host memory");
            x->n_reqs = g;
        }
    }
    return run_list(x, fwd, inputs, targets, loss_scale, t, 0);
}

int pp_exec_last_times(const pp_exec_t* x, const double** start, const double** end, double* t0) {
    if (start) *start = x->t_start;
    if (end) *end = x->t_end;
    if (t0) *t0 = x->t0;
    return x->n_times;
}

// The replica sum runs on the stage's data-parallel group (the grid's "dp" axis: its rank d is
// replica d). Why an all-gather and a sum here rather than comm_allreduce: the result must be
// the sum in replica order, ((g0 + g1) + g2) + ..., on every backend and layout. The MPI
// backend's blocking all-reduce is that sum only on its shared-memory path (one node, COMM_SHM
// on); on 3+ ranks otherwise MPI (and NCCL's rings and trees always) add in an order of their
// own, so the bits would depend on where the job runs. The all-gather moves what the
// point-to-point exchange before it moved (D - 1 slices in, the own slice out to D - 1 peers).
double pp_exec_dp_allreduce(pp_exec_t* x, int D) {
    if (D <= 1) return 0;
    comm_t* dp = x->cfg.dp;
    const int p = x->p, me = x->cfg.world_base / p;
    if (!dp || dp->world != D || dp->rank != me)
        fail("executor: the gradient sum over %d replicas needs this stage's data-parallel group of %d ranks "
             "(the grid {%d, %d}'s \"dp\" axis, in which this rank is replica %d)", D, D, D, p, me);
    const double t0 = time_now_s();
    float* G = x->cfg.m->grads;
    for (int ch = 0; ch < x->v; ch++) {
        const size_t b = x->span_b[ch], n = x->span_e[ch] - b;
        float* all = malloc((size_t)D * n * sizeof(float) + sizeof(float));  // (D, n) every replica's slice
        if (!all) DIE("out of host memory");
        comm_allgather(dp, G + b, all, n, COMM_F32, NULL);
        // The sum in replica order 0, 1, ..., D-1 on every replica: the same bits everywhere.
        for (size_t i = 0; i < n; i++) {
            float acc = all[i];
            for (int d = 1; d < D; d++) acc += all[(size_t)d * n + i];
            G[b + i] = acc;
        }
        free(all);
    }
    return time_now_s() - t0;
}

void pp_exec_adamw(pp_exec_t* x, const adamw_config_t* cfg) {
    model_cpu_t* m = x->cfg.m;
    m->adam_t++;
    // Element-wise, so slice by slice gives the bits of the whole-buffer step.
    for (int c = 0; c < x->v; c++) {
        const size_t b = x->span_b[c];
        adamw_cpu_step(cfg, m->params + b, m->grads + b, m->adam_m + b, m->adam_v + b, x->span_e[c] - b, m->adam_t);
    }
}
