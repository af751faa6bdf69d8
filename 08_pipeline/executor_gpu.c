// The executor on the GPU (executor.h, "the executor on the GPU"): the CPU executor's loop
// over a rank's action list, with the CUDA model's range pass for compute and NCCL
// send/receive on device buffers for the groups. Every CUDA call is checked (CUDA_CHECK); the
// communicator checks its own NCCL calls.
#include "08_pipeline/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "08_pipeline/act_pool.h"
#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/model_kernels.h"

struct pp_exec_gpu {
    pp_exec_gpu_config_t cfg;
    int p, m, v, S;
    int split;                   // ZB-H1: the backward as BI then W (sets made with split = 1)
    size_t *span_b, *span_e;     // [v]
    act_pools_t pools;           // the activation sets of each chunk (act_pool.h)
    int live, peak_live;
    long actions_done;
    comm_req_t** reqs;           // [n_reqs] one per operation of the longest group run so far
    int n_reqs;
    cudaStream_t cs, ks;         // compute (the model's) and communication (the communicator's)
    cudaEvent_t ev_ready;        // compute -> communication, before each group
    cudaEvent_t ev_recvd;        // communication -> compute, after a group that receives
    cudaEvent_t ev_t0, ev_t1;    // the step on the compute stream
    cudaEvent_t* ev_act;         // [2 n_compute] around each compute action
    cudaEvent_t* ev_grp;         // [2 n_groups] around each group on the communication stream
    int n_compute, n_groups;
    int32_t *d_in, *d_tg;        // (m·Bmb, T) the step's tokens on the device
    float* d_losses;             // [m] each micro-batch's mean loss (head ranks)
    float **adam_m, **adam_v;    // [v] moments of each chunk's slice (at the first step)
    int adam_t;
    int align;                   // pp_exec_gpu_align_start
    double *t_start, *t_end;     // [n_actions] the last step's timeline (seconds from ev_t0)
    int n_times;                 // 0 before the first step with the current lists
};

static void* new_set(void* ctx, int c) {
    pp_exec_gpu_t* x = ctx;
    model_gpu_range_acts_t* s = calloc(1, sizeof *s);
    if (!s) DIE("out of host memory");
    char err[512];
    if (model_gpu_range_acts_create(x->cfg.m, s, &x->cfg.ranges[c], x->split, err, sizeof err) != 0)
        comm_fatal(x->cfg.c, 1, "an activation set of chunk %d: %s", c, err);
    return s;
}
static void free_set(void* s) {
    model_gpu_range_acts_destroy(s);
    free(s);
}
static model_gpu_range_acts_t* pool_take(pp_exec_gpu_t* x, int c, int mb) { return act_pools_take(&x->pools, c, mb); }
static model_gpu_range_acts_t* pool_get(pp_exec_gpu_t* x, int c, int mb, const char* why) {
    return act_pools_get(&x->pools, c, mb, "GPU executor", why);
}
static void pool_release_later(pp_exec_gpu_t* x, int c, int mb) { act_pools_release_later(&x->pools, c, mb); }

static void destroy_events(pp_exec_gpu_t* x) {
    for (int i = 0; i < 2 * x->n_compute; i++) CUDA_CHECK(cudaEventDestroy(x->ev_act[i]));
    for (int i = 0; i < 2 * x->n_groups; i++) CUDA_CHECK(cudaEventDestroy(x->ev_grp[i]));
    free(x->ev_act);
    free(x->ev_grp);
    x->ev_act = x->ev_grp = NULL;
    x->n_compute = x->n_groups = 0;
}

// NCCL connects a pair of ranks lazily, inside the ncclGroupEnd of their first send/recv, and the
// host blocks there until the peer connects too. The schedules' groups are not symmetric (GPipe
// m = 1: rank 0's first group sends AND receives, rank 1's only receives), so a first connection
// made inside a step can leave one host waiting in ncclGroupEnd for a peer whose GPU waits for
// data that host has not launched yet: a hang (seen on 2 x H200), or an NCCL internal error. So
// before the first step every rank exchanges one message of the real size with each of its
// pipeline neighbours, in one group that is the same on both sides of every pair.
static void connect_peers(pp_exec_gpu_t* x) {
    const schedule_t* s = x->cfg.sched;
    const int r = x->cfg.rank;
    comm_t* c = x->cfg.c;
    int peers[64], np = 0;
    for (int i = 0; i < s->n_actions[r]; i++) {
        const action_t* a = &s->actions[r][i];
        if (a->kind != ACT_SEND_ACT && a->kind != ACT_RECV_ACT && a->kind != ACT_SEND_GRAD && a->kind != ACT_RECV_GRAD)
            continue;
        int known = 0;
        for (int k = 0; k < np; k++) known |= peers[k] == a->peer;
        if (!known && a->peer != c->rank) {
            if (np == 64) DIE("GPU executor: more than 64 pipeline peers");
            peers[np++] = a->peer;
        }
    }
    if (np == 0) return;
    for (int i = 1; i < np; i++)  // ascending: the same order on both sides of a pair
        for (int k = i; k > 0 && peers[k - 1] > peers[k]; k--) { int t = peers[k]; peers[k] = peers[k - 1]; peers[k - 1] = t; }
    const size_t count = (size_t)x->cfg.Bmb * x->cfg.T * model_gpu_config(x->cfg.m)->d_model;
    float* buf = mem_alloc(DEV_CUDA, 2 * (size_t)np * count * sizeof(float), MEM_WORKSPACE);
    CUDA_CHECK(cudaMemsetAsync(buf, 0, 2 * (size_t)np * count * sizeof(float), x->ks));
    comm_req_t* q[128];
    comm_group_start(c);
    for (int k = 0; k < np; k++) {
        q[2 * k] = comm_irecv(c, buf + (2 * (size_t)k + 1) * count, count, COMM_F32, peers[k], x->ks);
        q[2 * k + 1] = comm_isend(c, buf + 2 * (size_t)k * count, count, COMM_F32, peers[k], x->ks);
    }
    comm_group_end(c);  // requests live until the group ends (it records their events)
    for (int k = 0; k < 2 * np; k++) comm_detach(c, q[k]);
    comm_stream_sync(c, x->ks, "connecting the pipeline neighbours");
    mem_free(buf);
}

pp_exec_gpu_t* pp_exec_gpu_create(const pp_exec_gpu_config_t* cfg) {
    const schedule_t* s = cfg->sched;
    if (cfg->c->backend != COMM_NCCL) fail("the GPU executor needs the NCCL backend");
    pp_exec_gpu_t* x = calloc(1, sizeof *x);
    if (!x) DIE("out of host memory");
    x->cfg = *cfg;
    x->p = s->p;
    x->m = s->m;
    x->v = s->v;
    x->S = sched_stages(s);
    x->split = s->kind == SCHED_ZBH1;
    if (x->v > 16) fail("GPU executor: at most 16 chunks per rank, got %d", x->v);
    const model_config_t* mc = model_gpu_config(cfg->m);
    char err[256];
    if (cfg->rank < 0 || cfg->rank >= x->p || x->p != cfg->c->world)
        fail("GPU executor: rank %d of a pipeline of %d in a world of %d (no data parallelism on the GPU)", cfg->rank,
             x->p, cfg->c->world);
    x->span_b = calloc((size_t)x->v, sizeof(size_t));
    x->span_e = calloc((size_t)x->v, sizeof(size_t));
    x->adam_m = calloc((size_t)x->v, sizeof(float*));
    x->adam_v = calloc((size_t)x->v, sizeof(float*));
    if (!x->span_b || !x->span_e || !x->adam_m || !x->adam_v) DIE("out of host memory");
    act_pools_init(&x->pools, x->v, x->m, new_set, x);
    for (int c = 0; c < x->v; c++) {
        const model_range_t* r = &cfg->ranges[c];
        const int stage = sched_stage(s, cfg->rank, c);
        if (model_range_check(mc, r, err, sizeof err) != 0) fail("GPU executor: chunk %d: %s", c, err);
        if (r->embed != (stage == 0) || r->head != (stage == x->S - 1))
            fail("GPU executor: chunk %d is stage %d of %d: embedding %s, head %s expected", c, stage, x->S,
                 stage == 0 ? "yes" : "no", stage == x->S - 1 ? "yes" : "no");
        model_range_span(model_gpu_layout(cfg->m), mc, r, &x->span_b[c], &x->span_e[c]);
    }
    x->cs = model_gpu_stream(cfg->m);
    x->ks = comm_stream(cfg->c);
    if (!x->ks) DIE("GPU executor: the communicator has no stream");
    CUDA_CHECK(cudaEventCreateWithFlags(&x->ev_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&x->ev_recvd, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&x->ev_t0));
    CUDA_CHECK(cudaEventCreate(&x->ev_t1));
    const size_t rows = (size_t)x->m * cfg->Bmb * cfg->T;
    x->d_in = mem_alloc(DEV_CUDA, rows * sizeof(int32_t), MEM_OTHER);
    x->d_tg = mem_alloc(DEV_CUDA, rows * sizeof(int32_t), MEM_OTHER);
    x->d_losses = mem_alloc(DEV_CUDA, (size_t)x->m * sizeof(float), MEM_OTHER);
    CUDA_CHECK(cudaMemsetAsync(x->d_losses, 0, (size_t)x->m * sizeof(float), x->cs));
    pp_exec_gpu_schedule_changed(x);
    if (model_gpu_prepare_backward(cfg->m, err, sizeof err) != 0) comm_fatal(cfg->c, 1, "GPU executor: %s", err);
    connect_peers(x);
    return x;
}

void pp_exec_gpu_schedule_changed(pp_exec_gpu_t* x) {
    const schedule_t* s = x->cfg.sched;
    const int r = x->cfg.rank;
    char err[256];
    if (s->p != x->p || s->m != x->m || s->v != x->v || (s->kind == SCHED_ZBH1) != x->split)
        fail("GPU executor: the new schedule has another shape (p %d, m %d, v %d, %s)", s->p, s->m, s->v, sched_name(s->kind));
    if (schedule_check_structure(s, err, sizeof err) != 0) fail("GPU executor: %s", err);
    destroy_events(x);
    int longest = 1;
    for (int i = 0; i < s->n_actions[r];) {
        const int g = schedule_group_len(s, r, i);
        if (g > 0) x->n_groups++;
        else x->n_compute++;
        longest = g > longest ? g : longest;
        i += g > 0 ? g : 1;
    }
    free(x->reqs);
    x->reqs = calloc((size_t)longest, sizeof(comm_req_t*));
    x->n_reqs = longest;
    free(x->t_start);
    free(x->t_end);
    x->t_start = calloc((size_t)s->n_actions[r] + 1, sizeof(double));
    x->t_end = calloc((size_t)s->n_actions[r] + 1, sizeof(double));
    x->n_times = 0;
    if (!x->t_start || !x->t_end) DIE("out of host memory");
    x->ev_act = calloc((size_t)2 * x->n_compute + 1, sizeof(cudaEvent_t));
    x->ev_grp = calloc((size_t)2 * x->n_groups + 1, sizeof(cudaEvent_t));
    if (!x->reqs || !x->ev_act || !x->ev_grp) DIE("out of host memory");
    for (int i = 0; i < 2 * x->n_compute; i++) CUDA_CHECK(cudaEventCreate(&x->ev_act[i]));
    for (int i = 0; i < 2 * x->n_groups; i++) CUDA_CHECK(cudaEventCreate(&x->ev_grp[i]));
}

void pp_exec_gpu_destroy(pp_exec_gpu_t* x) {
    if (!x) return;
    CUDA_CHECK(cudaStreamSynchronize(x->cs));
    act_pools_destroy(&x->pools, free_set);
    for (int c = 0; c < x->v; c++) {
        mem_free(x->adam_m[c]);
        mem_free(x->adam_v[c]);
    }
    destroy_events(x);
    CUDA_CHECK(cudaEventDestroy(x->ev_ready));
    CUDA_CHECK(cudaEventDestroy(x->ev_recvd));
    CUDA_CHECK(cudaEventDestroy(x->ev_t0));
    CUDA_CHECK(cudaEventDestroy(x->ev_t1));
    mem_free(x->d_in);
    mem_free(x->d_tg);
    mem_free(x->d_losses);
    free(x->span_b);
    free(x->span_e);
    free(x->adam_m);
    free(x->adam_v);
    free(x->reqs);
    free(x->t_start);
    free(x->t_end);
    free(x);
}

void pp_exec_gpu_span(const pp_exec_gpu_t* x, int chunk, size_t* begin, size_t* end) {
    *begin = x->span_b[chunk];
    *end = x->span_e[chunk];
}

// One group on the communication stream; k = the group's index (its timing events; -1: none,
// the forward-only lists). fwd: the compute stream also waits for a group that only sends
// (executor.h: a forward-only set is reused by the next F as soon as it is sent).
static void run_group(pp_exec_gpu_t* x, const action_t* acts, int n, int k, int fwd) {
    comm_t* c = x->cfg.c;
    const size_t count = (size_t)x->cfg.Bmb * x->cfg.T * model_gpu_config(x->cfg.m)->d_model;  // (B_mb, T, C)
    int receives = 0, sends = 0;
    CUDA_CHECK(cudaEventRecord(x->ev_ready, x->cs));  // what the group sends is computed
    CUDA_CHECK(cudaStreamWaitEvent(x->ks, x->ev_ready, 0));
    if (k >= 0) CUDA_CHECK(cudaEventRecord(x->ev_grp[2 * k], x->ks));
    comm_group_start(c);
    for (int j = 0; j < n; j++) {
        const action_t* a = &acts[j];
        const int peer = a->peer;
        model_gpu_range_acts_t* s;
        switch (a->kind) {
        case ACT_SEND_ACT:
            s = pool_get(x, a->chunk, a->mb, "SEND_ACT");
            x->reqs[j] = comm_isend(c, s->res + (size_t)s->nL * count, count, COMM_F32, peer, x->ks);
            sends = 1;
            break;
        case ACT_RECV_ACT:
            s = pool_take(x, a->chunk, a->mb);
            x->reqs[j] = comm_irecv(c, s->res, count, COMM_F32, peer, x->ks);
            receives = 1;
            break;
        case ACT_SEND_GRAD:
            s = pool_get(x, a->chunk, a->mb, "SEND_GRAD");
            x->reqs[j] = comm_isend(c, s->dx, count, COMM_F32, peer, x->ks);
            break;
        case ACT_RECV_GRAD:
            s = pool_get(x, a->chunk, a->mb, "RECV_GRAD");
            x->reqs[j] = comm_irecv(c, s->dy, count, COMM_F32, peer, x->ks);
            receives = 1;
            break;
        default:
            DIE("GPU executor: %s inside a communication group", act_name(a->kind));
        }
    }
    comm_group_end(c);
    for (int j = 0; j < n; j++) {  // ordered on ks; the step's comm_stream_sync covers them
        comm_detach(c, x->reqs[j]);
        x->reqs[j] = NULL;
    }
    if (k >= 0) CUDA_CHECK(cudaEventRecord(x->ev_grp[2 * k + 1], x->ks));
    if (receives || (fwd && sends)) {  // the next compute reads what arrived (or, fwd, reuses what was sent)
        CUDA_CHECK(cudaEventRecord(x->ev_recvd, x->ks));
        CUDA_CHECK(cudaStreamWaitEvent(x->cs, x->ev_recvd, 0));
    }
}

static void compute(pp_exec_gpu_t* x, const action_t* a, float loss_scale) {
    const schedule_t* s = x->cfg.sched;
    model_gpu_t* m = x->cfg.m;
    const int c = a->chunk, mb = a->mb, stage = sched_stage(s, x->cfg.rank, c);
    const size_t rows = (size_t)mb * x->cfg.Bmb * x->cfg.T;
    const size_t NC = (size_t)x->cfg.Bmb * x->cfg.T * model_gpu_config(m)->d_model;
    char err[512];
    model_gpu_range_acts_t* st;
    switch (a->kind) {
    case ACT_F:
        st = pool_take(x, c, mb);
        model_gpu_range_forward(m, st, stage == 0 ? x->d_in + rows : NULL, stage == x->S - 1 ? x->d_tg + rows : NULL,
                                loss_scale);
        if (stage == x->S - 1)
            CUDA_CHECK(cudaMemcpyAsync(x->d_losses + mb, st->d_loss, sizeof(float), cudaMemcpyDeviceToDevice, x->cs));
        if (stage + 1 < x->S && sched_rank_of(s, stage + 1) == x->cfg.rank)  // next stage local (p = 1)
            CUDA_CHECK(cudaMemcpyAsync(pool_take(x, c + 1, mb)->res, st->res + (size_t)st->nL * NC, NC * sizeof(float),
                                       cudaMemcpyDeviceToDevice, x->cs));
        if (++x->live > x->peak_live) x->peak_live = x->live;
        break;
    case ACT_B:
    case ACT_BI: {  // the input gradient (and, for B, the weight gradients), ADDed
        st = pool_get(x, c, mb, act_name(a->kind));
        const int rc = a->kind == ACT_B ? model_gpu_range_backward(m, st, 1, NULL, NULL, err, sizeof err)
                                        : model_gpu_range_backward_input(m, st, 1, NULL, NULL, err, sizeof err);
        if (rc != 0) comm_fatal(x->cfg.c, 1, "%s", err);
        if (stage > 0 && sched_rank_of(s, stage - 1) == x->cfg.rank)
            CUDA_CHECK(cudaMemcpyAsync(pool_get(x, c - 1, mb, "local gradient")->dy, st->dx, NC * sizeof(float),
                                       cudaMemcpyDeviceToDevice, x->cs));
        if (a->kind == ACT_B) {  // BI keeps the set: its W reads the saved activations and dy
            pool_release_later(x, c, mb);
            x->live--;
        }
        break;
    }
    case ACT_W:  // the weight gradients from what BI saved; then the set is free
        st = pool_get(x, c, mb, "W");
        model_gpu_range_backward_weight(m, st, 1, NULL, NULL);
        pool_release_later(x, c, mb);
        x->live--;
        break;
    default:
        DIE("GPU executor: %s is not a compute action here", act_name(a->kind));
    }
}

// The losses of the micro-batches whose head is here (d_losses, written by their F), summed
// in micro-batch order; 0 on the other ranks. After the step's stream synchronisation.
static double head_losses(pp_exec_gpu_t* x, float loss_scale) {
    double loss_sum = 0;
    int head_here = 0;
    for (int c = 0; c < x->v; c++) head_here |= x->cfg.ranges[c].head;
    if (head_here) {
        float* h = malloc((size_t)x->m * sizeof(float));
        if (!h) DIE("out of host memory");
        CUDA_CHECK(cudaMemcpyAsync(h, x->d_losses, (size_t)x->m * sizeof(float), cudaMemcpyDeviceToHost, x->cs));
        CUDA_CHECK(cudaStreamSynchronize(x->cs));
        for (int mb = 0; mb < x->m; mb++) loss_sum += (double)loss_scale * h[mb];
        free(h);
    }
    return loss_sum;
}

static float ms_between(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

double pp_exec_gpu_step(pp_exec_gpu_t* x, const int32_t* inputs, const int32_t* targets, float loss_scale,
                        pp_timing_t* t) {
    const schedule_t* s = x->cfg.sched;
    const int r = x->cfg.rank, n = s->n_actions[r];
    const action_t* acts = s->actions[r];
    model_gpu_t* m = x->cfg.m;
    const size_t rows = (size_t)x->m * x->cfg.Bmb * x->cfg.T;
    pp_timing_t tm;
    memset(&tm, 0, sizeof tm);
    // Zero this rank's gradient slices (the ranges ADD). Before the model's first backward
    // there is no gradient buffer: that backward allocates it zeroed (mg_alloc_backward).
    float* G = model_gpu_grads(m);
    for (int c = 0; G && c < x->v; c++)
        CUDA_CHECK(cudaMemsetAsync(G + x->span_b[c], 0, (x->span_e[c] - x->span_b[c]) * sizeof(float), x->cs));
    CUDA_CHECK(cudaMemcpyAsync(x->d_in, inputs, rows * sizeof(int32_t), cudaMemcpyHostToDevice, x->cs));
    CUDA_CHECK(cudaMemcpyAsync(x->d_tg, targets, rows * sizeof(int32_t), cudaMemcpyHostToDevice, x->cs));
    act_pools_reset(&x->pools);
    x->live = x->peak_live = 0;
    if (x->align) {  // timelines: every rank's zero just after one barrier, on an idle stream
        CUDA_CHECK(cudaStreamSynchronize(x->cs));
        comm_barrier(x->cfg.c);
    }
    CUDA_CHECK(cudaEventRecord(x->ev_t0, x->cs));
    int kc = 0, kg = 0;
    for (int i = 0; i < n;) {
        const int g = schedule_group_len(s, r, i);
        if (g > 0) {
            run_group(x, acts + i, g, kg++, 0);
        } else {
            act_pools_release_deferred(&x->pools);
            CUDA_CHECK(cudaEventRecord(x->ev_act[2 * kc], x->cs));
            compute(x, &acts[i], loss_scale);
            CUDA_CHECK(cudaEventRecord(x->ev_act[2 * kc + 1], x->cs));
            tm.n_kind[acts[i].kind]++;
            kc++;
        }
        const int done = g > 0 ? g : 1;
        pp_die_point(x->cfg.die_after, x->cfg.c->rank, &x->actions_done, done);
        i += done;
    }
    act_pools_release_deferred(&x->pools);
    // The communication stream's last group, then the compute stream's end.
    CUDA_CHECK(cudaEventRecord(x->ev_ready, x->ks));
    CUDA_CHECK(cudaStreamWaitEvent(x->cs, x->ev_ready, 0));
    CUDA_CHECK(cudaEventRecord(x->ev_t1, x->cs));
    comm_stream_sync(x->cfg.c, x->ks, "pipeline sends and receives");
    comm_stream_sync(x->cfg.c, x->cs, "pipeline compute");
    if (x->live != 0) DIE("GPU executor rank %d: %d micro-batch-chunks still live after the list (bad list)", r, x->live);
    // Timing from the events (all complete now).
    tm.wall = 1e-3 * ms_between(x->ev_t0, x->ev_t1);
    kc = 0;
    int kk = 0;
    for (int i = 0; i < n;) {
        const int g = schedule_group_len(s, r, i);
        if (g == 0) {
            const double a0 = 1e-3 * ms_between(x->ev_t0, x->ev_act[2 * kc]);
            const double a1 = 1e-3 * ms_between(x->ev_t0, x->ev_act[2 * kc + 1]);
            const double dt = a1 - a0;
            tm.busy += dt;
            tm.t_kind[acts[i].kind] += dt;
            x->t_start[i] = a0, x->t_end[i] = a1;
            kc++;
        } else {  // the group's span on the communication stream, for each of its operations
            const double g0 = 1e-3 * ms_between(x->ev_t0, x->ev_grp[2 * kk]);
            const double g1 = 1e-3 * ms_between(x->ev_t0, x->ev_grp[2 * kk + 1]);
            for (int j = i; j < i + g; j++) x->t_start[j] = g0, x->t_end[j] = g1;
            kk++;
        }
        i += g > 0 ? g : 1;
    }
    x->n_times = n;
    for (int k = 0; k < kg; k++) tm.comm += 1e-3 * ms_between(x->ev_grp[2 * k], x->ev_grp[2 * k + 1]);
    tm.peak_live = x->peak_live;
    tm.pool_slots = act_pools_slots(&x->pools);
    if (t) *t = tm;
    return head_losses(x, loss_scale);
}

double pp_exec_gpu_forward(pp_exec_gpu_t* x, const schedule_t* fwd, const int32_t* inputs, const int32_t* targets,
                           float loss_scale) {
    const int r = x->cfg.rank;
    char err[256];
    if (!fwd->forward_only || fwd->p != x->p || fwd->m != x->m || fwd->v != x->v)
        fail("GPU executor: pp_exec_gpu_forward needs schedule_make_forward's lists for p %d, m %d, v %d (got %s p %d, "
             "m %d, v %d)", x->p, x->m, x->v, fwd->forward_only ? "forward-only" : "training", fwd->p, fwd->m, fwd->v);
    if (schedule_check_structure(fwd, err, sizeof err) != 0) fail("GPU executor: %s", err);
    for (int i = 0; i < fwd->n_actions[r]; i++) {  // room for its longest group
        const int g = schedule_group_len(fwd, r, i);
        if (g > x->n_reqs) {
            free(x->reqs);
            if (!(x->reqs = calloc((size_t)g, sizeof(comm_req_t*)))) DIE("out of host memory");
            x->n_reqs = g;
        }
    }
    const int n = fwd->n_actions[r];
    const action_t* acts = fwd->actions[r];
    const size_t rows = (size_t)x->m * x->cfg.Bmb * x->cfg.T;
    // The step's loop without the gradient zeroing and the timing events: same groups, same F.
    CUDA_CHECK(cudaMemcpyAsync(x->d_in, inputs, rows * sizeof(int32_t), cudaMemcpyHostToDevice, x->cs));
    CUDA_CHECK(cudaMemcpyAsync(x->d_tg, targets, rows * sizeof(int32_t), cudaMemcpyHostToDevice, x->cs));
    act_pools_reset(&x->pools);
    x->live = x->peak_live = 0;
    for (int i = 0; i < n;) {
        const int g = schedule_group_len(fwd, r, i);
        if (g > 0) {
            run_group(x, acts + i, g, -1, 1);
        } else {
            act_pools_release_deferred(&x->pools);
            compute(x, &acts[i], loss_scale);  // reads p and the stages from cfg.sched: the same as fwd's
            // As the CPU executor: no backward will read the set; released at the next compute,
            // after the group right after this F (which the compute stream waits for: run_group).
            pool_release_later(x, acts[i].chunk, acts[i].mb);
            x->live--;
        }
        const int done = g > 0 ? g : 1;
        pp_die_point(x->cfg.die_after, x->cfg.c->rank, &x->actions_done, done);
        i += done;
    }
    act_pools_release_deferred(&x->pools);
    CUDA_CHECK(cudaEventRecord(x->ev_ready, x->ks));
    CUDA_CHECK(cudaStreamWaitEvent(x->cs, x->ev_ready, 0));
    comm_stream_sync(x->cfg.c, x->ks, "pipeline sends and receives (forward only)");
    comm_stream_sync(x->cfg.c, x->cs, "pipeline compute (forward only)");
    if (x->live != 0) DIE("GPU executor rank %d: %d micro-batch-chunks still live after the forward-only list", r, x->live);
    return head_losses(x, loss_scale);
}

int pp_exec_gpu_last_times(const pp_exec_gpu_t* x, const double** start, const double** end) {
    if (start) *start = x->t_start;
    if (end) *end = x->t_end;
    return x->n_times;
}

void pp_exec_gpu_align_start(pp_exec_gpu_t* x, int on) { x->align = on != 0; }

void pp_exec_gpu_adamw(pp_exec_gpu_t* x, const adamw_config_t* cfg) {
    model_gpu_t* m = x->cfg.m;
    float* P = model_gpu_params(m);
    float* G = model_gpu_grads(m);
    if (!G) DIE("pp_exec_gpu_adamw before any step");
    const adamw_scalars_t sc = adamw_scalars(cfg, ++x->adam_t);
    for (int c = 0; c < x->v; c++) {
        const size_t b = x->span_b[c], n = x->span_e[c] - b;
        if (!x->adam_m[c]) {  // this rank's slices only: 8 bytes per parameter it owns
            x->adam_m[c] = mem_alloc(DEV_CUDA, n * 4 + 4, MEM_OPTIM);
            x->adam_v[c] = mem_alloc(DEV_CUDA, n * 4 + 4, MEM_OPTIM);
            CUDA_CHECK(cudaMemsetAsync(x->adam_m[c], 0, n * 4, x->cs));
            CUDA_CHECK(cudaMemsetAsync(x->adam_v[c], 0, n * 4, x->cs));
        }
        k_adamw(P + b, G + b, x->adam_m[c], x->adam_v[c], NULL, n, cfg->beta1, cfg->beta2, cfg->eps, sc.decay,
                sc.step_size, sc.bc2_sqrt, x->cs);
    }
    model_gpu_params_changed(m);
}
