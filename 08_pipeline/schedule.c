// The schedule generator: which compute each rank runs in which order (GPipe, 1F1B, Megatron's
// interleaved 1F1B, ZB-H1), then where the sends and receives go so that an executor over
// blocking point-to-point cannot deadlock. The rule is explained in schedule.h.
#include "08_pipeline/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

static const char* const SCHED_NAMES[SCHED_NKINDS] = {"gpipe", "1f1b", "interleaved", "zbh1"};
static const char* const ACT_NAMES[ACT_NKINDS] = {"F", "B", "BI", "W",
                                                  "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};

int sched_parse(const char* name, sched_kind_t* out) {
    for (int k = 0; name && k < SCHED_NKINDS; k++)
        if (strcmp(name, SCHED_NAMES[k]) == 0) {
            *out = (sched_kind_t)k;
            return 0;
        }
    return -1;
}

const char* sched_name(sched_kind_t kind) {
    return (unsigned)kind < SCHED_NKINDS ? SCHED_NAMES[kind] : "?";
}

const char* act_name(act_kind_t kind) { return (unsigned)kind < ACT_NKINDS ? ACT_NAMES[kind] : "?"; }

// ------------------------------------------------------------------ planned timeline
// The generator runs the compute orders once with the planning costs (all 1 unless given): a
// rank is free when its last compute ends, and it starts the next one when the inputs have
// ended. This gives the compute order of ZB-H1 (which places its Ws as it goes) and the time of
// every message, which decides where its send and receive go.

typedef struct {
    act_kind_t kind;
    int mb, chunk;
    double start;  // planned start
} comp_t;

typedef struct {
    int p, m, v, S;
    sched_costs_t cost;
    double *f_end, *b_end;  // [S·m] planned end of F / B-or-BI of (stage, mb); INFINITY: not yet
    comp_t** list;          // [p] compute order (given, or built by ZB-H1)
    int* n;                 // [p] computes in list (given) or placed so far
    int* next;              // [p] index of the next compute to run (ZB-H1: in the 1F1B order)
    int *nf, *nbi, *nw;     // [p] ZB-H1: forwards, BIs and Ws placed so far
    double* free_at;        // [p] when the rank's last placed compute ends
} eng_t;

static double plan_cost(const eng_t* e, act_kind_t k) {
    return k == ACT_F ? e->cost.f : k == ACT_B ? e->cost.b : k == ACT_BI ? e->cost.bi : e->cost.w;
}

// Have the inputs of compute k on stage s for mb ended by time t?
static int ready(const eng_t* e, act_kind_t k, int s, int mb, double t) {
    const int i = s * e->m + mb;
    switch (k) {
    case ACT_F: return s == 0 || e->f_end[i - e->m] <= t;
    case ACT_B:
    case ACT_BI: return e->f_end[i] <= t && (s == e->S - 1 || e->b_end[i + e->m] <= t);
    case ACT_W: return e->b_end[i] <= t;
    default: return 0;
    }
}

// GPipe, 1F1B, interleaved: the rank runs its next listed compute if its inputs are there.
static int pick_fixed(eng_t* e, int r, double t, comp_t* out) {
    if (e->next[r] >= e->n[r]) return 0;
    comp_t* c = &e->list[r][e->next[r]];
    if (!ready(e, c->kind, c->chunk * e->p + r, c->mb, t)) return 0;
    e->next[r]++;
    c->start = t;
    *out = *c;
    return 1;
}

// Item k (0..2m-1) of rank r's 1F1B order: min(p-1-r, m) forwards ahead (the ones the ranks
// after it need before the first backward comes back), then one forward / one backward, then
// the remaining backwards. At most p-r micro-batches are in flight on rank r.
static void item_1f1b(int p, int m, int r, int k, act_kind_t* kind, int* mb) {
    // STUDENT-BEGIN(08.item_1f1b): item k (0..2m-1) of rank r's 1F1B order into *kind, *mb: warm = min(p-1-r, m) forwards, then F(warm+i) B(i) alternating, then the last warm backwards (at most p-r micro-batches in flight) | see 08_pipeline/README.md §The four schedules (p = 4, m = 8) | test: test_08 schedule/* | needs: 08.order_gpipe 08.order_interleaved 08.pick_zbh1
    int warm = p - 1 - r;
    if (warm > m) warm = m;
    const int steady = 2 * (m - warm);
    if (k < warm) *kind = ACT_F, *mb = k;
    else if (k < warm + steady) *kind = (k - warm) % 2 ? ACT_B : ACT_F, *mb = (k - warm) / 2 + ((k - warm) % 2 ? 0 : warm);
    else *kind = ACT_B, *mb = k - warm - steady + (m - warm);
    // STUDENT-END(08.item_1f1b)
}

// ZB-H1 (v = 1, stage = rank): F and BI in 1F1B's order, and W passes put off for as long as
// possible: a W runs only when the next F or BI cannot (its input has not arrived, or a forward
// would hold more than p micro-batches, 1F1B's peak at rank 0). Nobody waits for a W, so
// putting it off costs nothing, and it fills the steps where 1F1B would sit idle: the last rank
// runs F BI F BI ... with its Ws kept for the cool-down, where 1F1B has its bubble.
static int pick_zbh1(eng_t* e, int r, double t, comp_t* out) {
    // STUDENT-BEGIN(08.pick_zbh1): ZB-H1's next compute on rank r at planned time t: the next F or BI of the 1F1B order (item_1f1b) when ready() and, for F, nf - nw < p; else the oldest W whose BI is done; append it to e->list[r], count nf / nbi / nw, return 1 (0: nothing can start now) | see 08_pipeline/README.md §The four schedules (p = 4, m = 8) | test: test_08 schedule/* | needs: 08.order_gpipe 08.item_1f1b 08.order_interleaved
    const int m = e->m;
    comp_t c = {ACT_F, -1, 0, t};
    act_kind_t kind = ACT_F;
    int mb = -1;
    if (e->next[r] < 2 * m) item_1f1b(e->p, m, r, e->next[r], &kind, &mb);
    const int go = mb >= 0 && (kind == ACT_F ? ready(e, ACT_F, r, mb, t) && e->nf[r] - e->nw[r] < e->p
                                             : ready(e, ACT_BI, r, mb, t));
    if (go) {
        c.kind = kind == ACT_F ? ACT_F : ACT_BI, c.mb = mb;
        e->next[r]++;
        if (kind == ACT_F) e->nf[r]++;
        else e->nbi[r]++;
    } else if (e->nw[r] < e->nbi[r] && ready(e, ACT_W, r, e->nw[r], t)) {
        c.kind = ACT_W, c.mb = e->nw[r]++;
    } else {
        return 0;
    }
    e->list[r][e->n[r]++] = c;
    *out = c;
    return 1;
    // STUDENT-END(08.pick_zbh1)
}

static int rank_done(const eng_t* e, int r, int zb) {
    return zb ? e->nw[r] == e->m && e->next[r] == 2 * e->m : e->next[r] == e->n[r];
}

// Runs the orders to the end in time order. At time T every rank that is free tries to start
// something; a rank that cannot waits for the next end of a compute anywhere (an input can only
// come from one). Since every cost is > 0, nothing started at T can feed anything else at T.
static int run_plan(eng_t* e, int zb, char* err, size_t errlen) {
    const int p = e->p;
    double* decide = calloc((size_t)p, sizeof(double));  // when each rank next tries
    if (!decide) return set_err(err, errlen, "out of memory");
    int rc = 0;
    for (;;) {
        double T = INFINITY;
        for (int r = 0; r < p; r++)
            if (!rank_done(e, r, zb) && decide[r] < T) T = decide[r];
        if (T == INFINITY) break;  // every rank has placed everything
        double next_end = INFINITY;
        int stalled = 0;
        for (int r = 0; r < p; r++) {
            if (rank_done(e, r, zb) || decide[r] > T) continue;
            comp_t c;
            if (!(zb ? pick_zbh1(e, r, T, &c) : pick_fixed(e, r, T, &c))) {
                stalled = 1;
                continue;
            }
            const int i = (c.chunk * p + r) * e->m + c.mb;
            const double end = T + plan_cost(e, c.kind);
            if (c.kind == ACT_F) e->f_end[i] = end;
            else if (c.kind != ACT_W) e->b_end[i] = end;
            decide[r] = e->free_at[r] = end;
        }
        for (int r = 0; r < p; r++)
            if (e->free_at[r] > T && e->free_at[r] < next_end) next_end = e->free_at[r];
        // A rank that could not start waits for the next compute to end; if none is running, no
        // input will ever come. The orders below never do this; say so if one ever does.
        if (stalled && next_end == INFINITY) {
            rc = set_err(err, errlen, "internal: the compute orders stall at planned time %g", T);
            break;
        }
        for (int r = 0; r < p; r++)
            if (!rank_done(e, r, zb) && decide[r] <= T) decide[r] = next_end;
    }
    free(decide);
    return rc;
}

// ------------------------------------------------------------------ compute orders

static void push(eng_t* e, int r, act_kind_t k, int mb, int chunk) {
    e->list[r][e->n[r]++] = (comp_t){k, mb, chunk, -1};
}

static void order_gpipe(eng_t* e, int r) {
    // STUDENT-BEGIN(08.order_gpipe): GPipe's compute order on rank r: push F of micro-batches 0..m-1 (chunk 0), then their B in the same order | see 08_pipeline/README.md §The four schedules (p = 4, m = 8) | test: test_08 schedule/* | needs: 08.item_1f1b 08.order_interleaved 08.pick_zbh1
    for (int i = 0; i < e->m; i++) push(e, r, ACT_F, i, 0);
    for (int i = 0; i < e->m; i++) push(e, r, ACT_B, i, 0);
    // STUDENT-END(08.order_gpipe)
}

static void order_1f1b(eng_t* e, int r) {
    for (int k = 0; k < 2 * e->m; k++) {
        act_kind_t kind;
        int mb;
        item_1f1b(e->p, e->m, r, k, &kind, &mb);
        push(e, r, kind, mb, 0);
    }
}

// Megatron-LM's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_interleaving).
// Virtual step k of the rank's v·m forwards runs micro-batch (k / (p·v))·p + k % p on chunk
// (k / p) % v: p micro-batches go through chunk 0, the same p through chunk 1, ... then the
// next p. Backwards walk the same sequence with the chunks reversed. Warm-up: 2·(p-1-r) + (v-1)·p
// forwards, so that a full round of chunks is in flight before the first backward returns.
static void order_interleaved(eng_t* e, int r) {
    // STUDENT-BEGIN(08.order_interleaved): Megatron's interleaved 1F1B on rank r: virtual step k is mb (k / (p·v))·p + k % p on chunk (k / p) % v; warm = min(2(p-1-r) + (v-1)·p, v·m) forwards, then one F / one B (backwards walk the same steps on chunk v-1-c), then the cool-down backwards | see 08_pipeline/README.md §The four schedules (p = 4, m = 8) | test: test_08 schedule/* | needs: 08.order_gpipe 08.item_1f1b 08.pick_zbh1
    const int p = e->p, v = e->v, total = e->m * v;
    int warm = 2 * (p - 1 - r) + (v - 1) * p;
    if (warm > total) warm = total;
#define MB_OF(k) (((k) / (p * v)) * p + (k) % p)
#define CHUNK_OF(k) (((k) % (p * v)) / p)
    for (int k = 0; k < warm; k++) push(e, r, ACT_F, MB_OF(k), CHUNK_OF(k));
    for (int k = 0; k < total - warm; k++) {
        push(e, r, ACT_F, MB_OF(warm + k), CHUNK_OF(warm + k));
        push(e, r, ACT_B, MB_OF(k), v - 1 - CHUNK_OF(k));
    }
    for (int k = total - warm; k < total; k++) push(e, r, ACT_B, MB_OF(k), v - 1 - CHUNK_OF(k));
#undef MB_OF
#undef CHUNK_OF
    // STUDENT-END(08.order_interleaved)
}

// Forward-only (evaluation): the v·m forwards of rank r in the virtual-step order above (v = 1:
// micro-batches 0..m-1 on chunk 0). Each F waits only for the one before it in the pipeline, so
// the planned run is the textbook staircase: v·m + p - 1 forward times, no backward after it.
static void order_forward(eng_t* e, int r) {
    const int p = e->p, v = e->v;
    for (int k = 0; k < v * e->m; k++) push(e, r, ACT_F, (k / (p * v)) * p + k % p, (k % (p * v)) / p);
}

// ------------------------------------------------------------------ communication groups

typedef struct {
    int boundary;  // the op goes into the group just before the rank's compute number `boundary`
    double slot;   // planned time at which the message's producer ends
    int grad;      // 0 activation, 1 gradient
    int src_stage, mb;
    action_t a;
} op_t;

static int op_cmp(const void* x, const void* y) {
    const op_t *a = x, *b = y;
    // (slot, grad, src_stage, mb) names the message: both ends sort their ops by the same key,
    // so the k-th send from one rank to another meets the k-th receive there.
    if (a->boundary != b->boundary) return a->boundary < b->boundary ? -1 : 1;
    if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
    if (a->grad != b->grad) return a->grad - b->grad;
    if (a->src_stage != b->src_stage) return a->src_stage - b->src_stage;
    return a->mb - b->mb;
}

// Computes of rank r that start before `slot` (starts are increasing): a receive goes after the
// compute that is running when its message is sent, so the rank never waits for it early.
static int boundary_of(const eng_t* e, int r, double slot) {
    int lo = 0, hi = e->n[r];
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (e->list[r][mid].start < slot) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Turns the timed compute orders into action lists with the communication groups placed.
static int place_comm(const eng_t* e, schedule_t* s, char* err, size_t errlen) {
    const int p = e->p, S = e->S;
    op_t** ops = calloc((size_t)p, sizeof *ops);
    int* nops = calloc((size_t)p, sizeof *nops);
    int rc = (ops && nops) ? 0 : set_err(err, errlen, "out of memory");
    // Each compute sends at most one message and receives at most one: 2·n ops per rank is enough.
    for (int r = 0; r < p && rc == 0; r++)
        if (!(ops[r] = malloc((size_t)(2 * e->n[r] + 1) * sizeof(op_t)))) rc = set_err(err, errlen, "out of memory");
    for (int r = 0; r < p && rc == 0; r++) {
        for (int i = 0; i < e->n[r]; i++) {
            const comp_t* c = &e->list[r][i];
            const int st = c->chunk * p + r;
            int to_stage;
            if (c->kind == ACT_F && st + 1 < S) to_stage = st + 1;
            else if ((c->kind == ACT_B || c->kind == ACT_BI) && st > 0) to_stage = st - 1;
            else continue;
            const int to = to_stage % p;
            if (to == r) continue;  // neighbouring stages on one rank (p = 1): stays local
            const int grad = c->kind != ACT_F;
            const double slot = c->start + plan_cost(e, c->kind);
            op_t snd = {i + 1, slot, grad, st, c->mb,
                        {grad ? ACT_SEND_GRAD : ACT_SEND_ACT, c->mb, c->chunk, to}};
            op_t rcv = {boundary_of(e, to, slot), slot, grad, st, c->mb,
                        {grad ? ACT_RECV_GRAD : ACT_RECV_ACT, c->mb, to_stage / p, r}};
            ops[r][nops[r]++] = snd;
            ops[to][nops[to]++] = rcv;
        }
    }
    for (int r = 0; r < p && rc == 0; r++) {
        qsort(ops[r], (size_t)nops[r], sizeof(op_t), op_cmp);
        s->n_actions[r] = e->n[r] + nops[r];
        s->actions[r] = malloc((size_t)(s->n_actions[r] + 1) * sizeof(action_t));
        if (!s->actions[r]) {
            rc = set_err(err, errlen, "out of memory");
            break;
        }
        int k = 0, o = 0;
        for (int i = 0; i <= e->n[r]; i++) {
            while (o < nops[r] && ops[r][o].boundary == i) s->actions[r][k++] = ops[r][o++].a;
            if (i < e->n[r]) {
                const comp_t* c = &e->list[r][i];
                s->actions[r][k++] = (action_t){c->kind, c->mb, c->chunk, -1};
            }
        }
    }
    for (int r = 0; ops && r < p; r++) free(ops[r]);
    free(ops), free(nops);
    return rc;
}

// ------------------------------------------------------------------ make / free

static int check_args(sched_kind_t kind, int p, int m, int v, char* err, size_t errlen) {
    if ((unsigned)kind >= SCHED_NKINDS) return set_err(err, errlen, "unknown schedule %d (allowed: %s)", (int)kind, SCHED_CHOICES);
    if (p < 1 || p > SCHED_MAX_P) return set_err(err, errlen, "p = %d: the number of pipeline ranks must be 1..%d", p, SCHED_MAX_P);
    if (m < 1) return set_err(err, errlen, "m = %d: the number of micro-batches must be at least 1", m);
    if (kind == SCHED_INTERLEAVED) {
        if (v < 2) return set_err(err, errlen, "v = %d: interleaved needs at least 2 chunks per rank (v = 1 is plain 1f1b)", v);
        if (m % p != 0)
            return set_err(err, errlen, "m = %d: interleaved needs m to be a multiple of p = %d (Megatron's rule: "
                           "micro-batches go through the chunks in rounds of p); try m = %d", m, p, (m / p + 1) * p);
    } else if (v != 1) {
        return set_err(err, errlen, "v = %d: only interleaved has more than one chunk per rank (%s needs v = 1)", v, sched_name(kind));
    }
    if ((long)p * v * m > SCHED_MAX_STAGE_MB)
        return set_err(err, errlen, "p·v·m = %ld is too large (at most %d)", (long)p * v * m, SCHED_MAX_STAGE_MB);
    return 0;
}

void schedule_free(schedule_t* s) {
    if (!s) return;
    for (int r = 0; s->actions && r < s->p; r++) free(s->actions[r]);
    free(s->actions), free(s->n_actions);
    memset(s, 0, sizeof *s);
}

static void eng_free(eng_t* e) {
    for (int r = 0; e->list && r < e->p; r++) free(e->list[r]);
    free(e->list), free(e->n), free(e->next), free(e->nf), free(e->nbi), free(e->nw), free(e->free_at);
    free(e->f_end), free(e->b_end);
}

int schedule_make(sched_kind_t kind, int p, int m, int v, schedule_t* out, char* err, size_t errlen) {
    return schedule_make_planned(kind, p, m, v, NULL, out, err, errlen);
}

// The generator of both the training lists (forward_only 0) and the forward-only ones.
static int make_lists(sched_kind_t kind, int p, int m, int v, const sched_costs_t* plan, int forward_only,
                      schedule_t* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (check_args(kind, p, m, v, err, errlen) != 0) return -1;
    eng_t e = {.p = p, .m = m, .v = v, .S = p * v, .cost = {1.0, 1.0, 1.0, 1.0}};
    if (plan) {
        // Only the kinds this schedule runs must be > 0 (ZB-H1: F, BI, W; the others: F, B).
        const double c[4] = {plan->f, plan->b, plan->bi, plan->w};
        for (int k = 0; k < 4; k++) {
            const int used = k == ACT_F || (kind == SCHED_ZBH1 ? k != ACT_B : k == ACT_B);
            if (used && (!(c[k] > 0.0) || !isfinite(c[k])))
                return set_err(err, errlen, "planning cost of %s = %g: it must be finite and > 0",
                               act_name((act_kind_t)k), c[k]);
        }
        e.cost = *plan;
    }
    const size_t sm = (size_t)e.S * m;
    e.f_end = malloc(sm * sizeof(double)), e.b_end = malloc(sm * sizeof(double));
    e.list = calloc((size_t)p, sizeof *e.list), e.n = calloc((size_t)p, sizeof(int));
    e.next = calloc((size_t)p, sizeof(int)), e.nf = calloc((size_t)p, sizeof(int));
    e.nbi = calloc((size_t)p, sizeof(int)), e.nw = calloc((size_t)p, sizeof(int));
    e.free_at = calloc((size_t)p, sizeof(double));
    out->n_actions = calloc((size_t)p, sizeof(int));
    out->actions = calloc((size_t)p, sizeof(action_t*));
    int rc = (e.f_end && e.b_end && e.list && e.n && e.next && e.nf && e.nbi && e.nw && e.free_at &&
              out->n_actions && out->actions) ? 0 : set_err(err, errlen, "out of memory");
    for (size_t i = 0; rc == 0 && i < sm; i++) e.f_end[i] = e.b_end[i] = INFINITY;
    // Each rank computes 2·v·m actions (3·m for ZB-H1: F, BI, W).
    for (int r = 0; rc == 0 && r < p; r++)
        if (!(e.list[r] = malloc((size_t)3 * v * m * sizeof(comp_t)))) rc = set_err(err, errlen, "out of memory");
    if (rc == 0) {
        out->p = p, out->m = m, out->v = v, out->kind = kind, out->forward_only = forward_only;
        for (int r = 0; r < p; r++) {
            if (forward_only) order_forward(&e, r);
            else if (kind == SCHED_GPIPE) order_gpipe(&e, r);
            else if (kind == SCHED_1F1B) order_1f1b(&e, r);
            else if (kind == SCHED_INTERLEAVED) order_interleaved(&e, r);
        }
        rc = run_plan(&e, kind == SCHED_ZBH1 && !forward_only, err, errlen);  // ZB-H1 places its own Ws
    }
    if (rc == 0) rc = place_comm(&e, out, err, errlen);
    eng_free(&e);
    if (rc != 0) schedule_free(out);
    return rc;
}

int schedule_make_planned(sched_kind_t kind, int p, int m, int v, const sched_costs_t* plan, schedule_t* out,
                          char* err, size_t errlen) {
    return make_lists(kind, p, m, v, plan, 0, out, err, errlen);
}

int schedule_make_forward(sched_kind_t kind, int p, int m, int v, schedule_t* out, char* err, size_t errlen) {
    return make_lists(kind, p, m, v, NULL, 1, out, err, errlen);
}

// ------------------------------------------------------------------ structure check

// The expected peer of a communication action at `stage`, or -1 if that action cannot exist
// there (no stage beyond the last, or the neighbour stage on this same rank).
static int neighbour(const schedule_t* s, act_kind_t k, int stage) {
    const int S = sched_stages(s);
    const int other = (k == ACT_SEND_ACT || k == ACT_RECV_GRAD) ? stage + 1 : stage - 1;
    if (other < 0 || other >= S) return -1;
    const int rank = sched_rank_of(s, other);
    return rank == sched_rank_of(s, stage) ? -1 : rank;
}

int schedule_check_structure(const schedule_t* s, char* err, size_t errlen) {
    if (!s || !s->n_actions || !s->actions) return set_err(err, errlen, "empty schedule");
    if (s->p < 1 || s->p > SCHED_MAX_P || s->m < 1 || s->v < 1 || (long)s->p * s->v * s->m > SCHED_MAX_STAGE_MB)
        return set_err(err, errlen, "p = %d, m = %d, v = %d out of range (p 1..%d, m >= 1, v >= 1, p·v·m <= %d)",
                       s->p, s->m, s->v, SCHED_MAX_P, SCHED_MAX_STAGE_MB);
    const int m = s->m;
    const size_t sm = (size_t)sched_stages(s) * m;
    // Per (stage, mb): how many F, B, BI, W. Counts are tiny; one byte each would do.
    int* cnt = calloc(sm * 4, sizeof(int));
    if (!cnt) return set_err(err, errlen, "out of memory");
    int rc = 0;
    for (int r = 0; r < s->p && rc == 0; r++) {
        if (s->n_actions[r] < 0 || (s->n_actions[r] > 0 && !s->actions[r])) {
            rc = set_err(err, errlen, "rank %d: no action list", r);
            break;
        }
        for (int i = 0; i < s->n_actions[r] && rc == 0; i++) {
            const action_t* a = &s->actions[r][i];
            if ((unsigned)a->kind >= ACT_NKINDS || a->mb < 0 || a->mb >= m || a->chunk < 0 || a->chunk >= s->v) {
                rc = set_err(err, errlen, "rank %d action %d: kind %d, mb %d, chunk %d out of range (m = %d, v = %d)",
                             r, i, (int)a->kind, a->mb, a->chunk, m, s->v);
                break;
            }
            const int st = sched_stage(s, r, a->chunk);
            char name[48];
            action_format(s, a, name, sizeof name);
            if (!act_is_comm(a->kind)) {
                if (a->peer != -1) rc = set_err(err, errlen, "rank %d action %d (%s): a compute action has peer -1, not %d", r, i, name, a->peer);
                else cnt[((size_t)st * m + a->mb) * 4 + a->kind]++;
            } else if (s->forward_only && (a->kind == ACT_SEND_GRAD || a->kind == ACT_RECV_GRAD)) {
                rc = set_err(err, errlen, "rank %d action %d (%s): a forward-only list has no gradient messages", r, i, name);
            } else {
                const int want = neighbour(s, a->kind, st);
                if (want < 0)
                    rc = set_err(err, errlen, "rank %d action %d (%s): stage %d has no %s (the neighbour stage is "
                                 "missing or on this rank)", r, i, name, st, act_name(a->kind));
                else if (a->peer != want)
                    rc = set_err(err, errlen, "rank %d action %d (%s): peer should be rank %d (stage %d's neighbour)",
                                 r, i, name, want, st);
            }
        }
    }
    // Each (stage, mb): one F, and either one B or one BI followed (somewhere) by one W; in a
    // forward-only list one F and nothing else (an evaluation must not touch a gradient).
    for (size_t i = 0; i < sm && rc == 0; i++) {
        const int* c = &cnt[i * 4];
        const int st = (int)(i / (size_t)m), mb = (int)(i % (size_t)m);
        if (s->forward_only) {
            if (c[ACT_F] != 1 || c[ACT_B] || c[ACT_BI] || c[ACT_W])
                rc = set_err(err, errlen, "stage %d (rank %d chunk %d) mb %d: has %d F, %d B, %d BI, %d W; a forward-only "
                             "list needs one F and no backward", st, sched_rank_of(s, st), st / s->p, mb,
                             c[ACT_F], c[ACT_B], c[ACT_BI], c[ACT_W]);
            continue;
        }
        const int full = c[ACT_B] == 1 && c[ACT_BI] == 0 && c[ACT_W] == 0;
        const int split = c[ACT_B] == 0 && c[ACT_BI] == 1 && c[ACT_W] == 1;
        if (c[ACT_F] != 1 || !(full || split))
            rc = set_err(err, errlen, "stage %d (rank %d chunk %d) mb %d: has %d F, %d B, %d BI, %d W; needs one F "
                         "and either one B or one BI and one W", st, sched_rank_of(s, st), st / s->p, mb,
                         c[ACT_F], c[ACT_B], c[ACT_BI], c[ACT_W]);
    }
    free(cnt);
    return rc;
}

// ------------------------------------------------------------------ helpers and printing

int schedule_group_len(const schedule_t* s, int rank, int i) {
    int k = i;
    while (k < s->n_actions[rank] && act_is_comm(s->actions[rank][k].kind)) k++;
    return k - i;
}

long schedule_messages(const schedule_t* s) {
    long n = 0;
    for (int r = 0; r < s->p; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const act_kind_t k = s->actions[r][i].kind;
            n += k == ACT_SEND_ACT || k == ACT_SEND_GRAD;
        }
    return n;
}

void action_format(const schedule_t* s, const action_t* a, char* buf, size_t len) {
    static const char* const SHORT[ACT_NKINDS] = {"F", "B", "BI", "W", "SA", "RA", "SG", "RG"};
    const char* name = (unsigned)a->kind < ACT_NKINDS ? SHORT[a->kind] : "?";
    char chunk[16] = "";
    if (s->v > 1) snprintf(chunk, sizeof chunk, "c%d", a->chunk);
    if (!act_is_comm(a->kind)) {
        snprintf(buf, len, "%s%d%s", name, a->mb, chunk);
    } else {
        const int out = a->kind == ACT_SEND_ACT || a->kind == ACT_SEND_GRAD;
        snprintf(buf, len, "%s%d%s%c%d", name, a->mb, chunk, out ? '>' : '<', a->peer);
    }
}

void schedule_print(const schedule_t* s, int with_comm, FILE* out) {
    for (int r = 0; r < s->p; r++) {
        fprintf(out, "rank %d:", r);
        int in_group = 0;
        for (int i = 0; i < s->n_actions[r]; i++) {
            const action_t* a = &s->actions[r][i];
            const int comm = act_is_comm(a->kind);
            if (comm && !with_comm) continue;
            char buf[48];
            action_format(s, a, buf, sizeof buf);
            // A group opens at its first communication action and closes before the next compute.
            fprintf(out, "%s%s", comm && !in_group ? " {" : (comm ? " " : (in_group ? "} " : " ")), buf);
            in_group = comm;
        }
        fprintf(out, "%s\n", in_group ? "}" : "");
    }
}
