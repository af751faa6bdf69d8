// The schedule simulator: each rank walks its list in order; computes take their cost, groups of
// sends and receives wait for their partners (rendezvous or eager, see simulate.h). The same run
// with unit costs is schedule_validate's dependency and deadlock check.
#include "08_pipeline/simulate.h"
#include "common/gnuplot.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"

sim_costs_t sim_unit_costs(void) { return (sim_costs_t){1.0, 1.0, 1.0, 1.0, 0.0, 0}; }

static double cost_of(const sim_costs_t* c, act_kind_t k) {
    switch (k) {
    case ACT_F: return c->f;
    case ACT_B: return c->b;
    case ACT_BI: return c->bi;
    case ACT_W: return c->w;
    default: return 0.0;
    }
}

static int is_send(act_kind_t k) { return k == ACT_SEND_ACT || k == ACT_SEND_GRAD; }

// ------------------------------------------------------------------ send/receive pairing

// partner[r][i] = index, on rank actions[r][i].peer, of the operation that meets action i: the
// k-th send from a to b meets the k-th receive at b from a. Checks both name one message.
static int pair_up(const schedule_t* s, int** partner, char* err, size_t errlen) {
    const int p = s->p;
    const size_t pp = (size_t)p * p;
    // Per ordered pair (a -> b): the sends on a and the receives on b, in list order,
    // stored flat at off[a·p + b].
    long *nsend = calloc(pp, sizeof(long)), *nrecv = calloc(pp, sizeof(long)), *off = calloc(pp + 1, sizeof(long));
    int rc = (nsend && nrecv && off) ? 0 : set_err(err, errlen, "out of memory");
    for (int r = 0; r < p && rc == 0; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const action_t* a = &s->actions[r][i];
            if (!act_is_comm(a->kind)) continue;
            if (is_send(a->kind)) nsend[(size_t)r * p + a->peer]++;
            else nrecv[(size_t)a->peer * p + r]++;
        }
    for (size_t k = 0; k < pp && rc == 0; k++) {
        if (nsend[k] != nrecv[k])
            rc = set_err(err, errlen, "rank %d sends %ld messages to rank %d, which receives %ld from it",
                         (int)(k / p), nsend[k], (int)(k % p), nrecv[k]);
        off[k + 1] = off[k] + nsend[k];
    }
    int *sends = NULL, *recvs = NULL;
    if (rc == 0) {
        sends = malloc((size_t)(off[pp] + 1) * sizeof(int)), recvs = malloc((size_t)(off[pp] + 1) * sizeof(int));
        if (!sends || !recvs) rc = set_err(err, errlen, "out of memory");
    }
    if (rc == 0) {
        memset(nsend, 0, pp * sizeof(long)), memset(nrecv, 0, pp * sizeof(long));
        for (int r = 0; r < p; r++)
            for (int i = 0; i < s->n_actions[r]; i++) {
                const action_t* a = &s->actions[r][i];
                if (!act_is_comm(a->kind)) continue;
                const size_t k = is_send(a->kind) ? (size_t)r * p + a->peer : (size_t)a->peer * p + r;
                if (is_send(a->kind)) sends[off[k] + nsend[k]++] = i;
                else recvs[off[k] + nrecv[k]++] = i;
            }
    }
    for (size_t k = 0; k < pp && rc == 0; k++) {
        const int src = (int)(k / p), dst = (int)(k % p);
        for (long q = 0; q < nsend[k] && rc == 0; q++) {
            const int i = sends[off[k] + q], j = recvs[off[k] + q];
            const action_t *a = &s->actions[src][i], *b = &s->actions[dst][j];
            const int act = a->kind == ACT_SEND_ACT;
            const int sa = sched_stage(s, src, a->chunk), sb = sched_stage(s, dst, b->chunk);
            if (b->kind != (act ? ACT_RECV_ACT : ACT_RECV_GRAD) || b->mb != a->mb || sb != sa + (act ? 1 : -1)) {
                char x[48], y[48];
                action_format(s, a, x, sizeof x), action_format(s, b, y, sizeof y);
                rc = set_err(err, errlen, "message %ld from rank %d to rank %d: rank %d sends %s (stage %d) but "
                             "rank %d's receive number %ld from rank %d is %s (stage %d); sends and receives "
                             "between two ranks must come in the same order", q + 1, src, dst, src, x, sa,
                             dst, q + 1, src, y, sb);
            }
            partner[src][i] = j, partner[dst][j] = i;
        }
    }
    free(nsend), free(nrecv), free(off), free(sends), free(recvs);
    return rc;
}

// ------------------------------------------------------------------ the run

typedef struct {
    const schedule_t* s;
    const sim_costs_t* c;
    sim_result_t* res;
    int** partner;
    int* pc;      // [p] next action of each rank
    double* t;    // [p] each rank's clock
    // [S·m] flags per (stage, mb): F done, B/BI done, activation received, gradient received.
    uint8_t *f_done, *b_done, *act_in, *grad_in;
} run_t;

// Is the input of compute `a` (rank r, list index i) there? 0, or -1 naming what is missing.
static int inputs_ready(const run_t* u, int r, int i, char* err, size_t errlen) {
    const schedule_t* s = u->s;
    const action_t* a = &s->actions[r][i];
    const int st = sched_stage(s, r, a->chunk), S = sched_stages(s);
    const size_t x = (size_t)st * s->m + a->mb;
    char name[48];
    action_format(s, a, name, sizeof name);
    if (a->kind == ACT_F && st > 0) {
        const int local = sched_rank_of(s, st - 1) == r;
        if (local ? !u->f_done[x - s->m] : !u->act_in[x])
            return set_err(err, errlen, "rank %d action %d (%s) runs before its input activation from stage %d %s",
                           r, i, name, st - 1, local ? "was computed on this rank" : "arrived (no RECV_ACT for it before)");
    }
    if (a->kind == ACT_B || a->kind == ACT_BI) {
        if (!u->f_done[x]) return set_err(err, errlen, "rank %d action %d (%s) runs before its forward", r, i, name);
        if (st < S - 1) {
            const int local = sched_rank_of(s, st + 1) == r;
            if (local ? !u->b_done[x + s->m] : !u->grad_in[x])
                return set_err(err, errlen, "rank %d action %d (%s) runs before its output gradient from stage %d %s",
                               r, i, name, st + 1, local ? "was computed on this rank" : "arrived (no RECV_GRAD for it before)");
        }
    }
    if (a->kind == ACT_W && !u->b_done[x])
        return set_err(err, errlen, "rank %d action %d (%s) runs before its BI", r, i, name);
    return 0;
}

// Runs one compute action of rank r.
static int step_compute(run_t* u, int r, char* err, size_t errlen) {
    const int i = u->pc[r];
    const action_t* a = &u->s->actions[r][i];
    if (inputs_ready(u, r, i, err, errlen) != 0) return -1;
    const double dt = cost_of(u->c, a->kind);
    const size_t x = (size_t)sched_stage(u->s, r, a->chunk) * u->s->m + a->mb;
    u->res->start[r][i] = u->t[r];
    u->t[r] += dt;
    u->res->end[r][i] = u->t[r];
    u->res->busy[r] += dt;
    if (a->kind == ACT_F) u->f_done[x] = 1;
    if (a->kind == ACT_B || a->kind == ACT_BI) u->b_done[x] = 1;
    u->pc[r]++;
    return 0;
}

// Finish time of the communication op (r, i), or -1 while its partner is not posted.
static double op_done(const run_t* u, int r, int i) {
    const action_t* a = &u->s->actions[r][i];
    const double mine = u->res->start[r][i], theirs = u->res->start[a->peer][u->partner[r][i]];
    if (u->c->eager && is_send(a->kind)) return mine;  // the library buffers it
    if (theirs < 0) return -1;
    if (u->c->eager) return fmax(mine, theirs + u->c->comm);
    return fmax(mine, theirs) + u->c->comm;
}

// Posts rank r's group (once) and completes it if every op has met its partner.
// Returns 1 if it progressed (posted or completed), 0 if blocked, -1 on error.
static int step_group(run_t* u, int r, char* err, size_t errlen) {
    const schedule_t* s = u->s;
    const int i0 = u->pc[r], g = schedule_group_len(s, r, i0);
    int progressed = 0;
    for (int i = i0; i < i0 + g; i++) {
        const action_t* a = &s->actions[r][i];
        if (u->res->start[r][i] >= 0) continue;
        // A send can only be posted once the tensor it sends exists.
        const size_t x = (size_t)sched_stage(s, r, a->chunk) * s->m + a->mb;
        if ((a->kind == ACT_SEND_ACT && !u->f_done[x]) || (a->kind == ACT_SEND_GRAD && !u->b_done[x])) {
            char name[48];
            action_format(s, a, name, sizeof name);
            return set_err(err, errlen, "rank %d action %d (%s) sends a tensor that is not computed yet", r, i, name);
        }
        u->res->start[r][i] = u->t[r];
        progressed = 1;
    }
    double t_end = u->t[r];
    for (int i = i0; i < i0 + g; i++) {
        const double d = op_done(u, r, i);
        if (d < 0) return progressed;
        t_end = fmax(t_end, d);
    }
    for (int i = i0; i < i0 + g; i++) {
        const action_t* a = &s->actions[r][i];
        u->res->end[r][i] = op_done(u, r, i);
        if (is_send(a->kind)) continue;
        uint8_t* flag = a->kind == ACT_RECV_ACT ? u->act_in : u->grad_in;
        const size_t x = (size_t)sched_stage(s, r, a->chunk) * s->m + a->mb;
        if (flag[x]) {
            char name[48];
            action_format(s, a, name, sizeof name);
            return set_err(err, errlen, "rank %d action %d (%s): this tensor was already received", r, i, name);
        }
        flag[x] = 1;
    }
    u->t[r] = t_end;
    u->pc[r] += g;
    return 1;
}

// One line naming every rank that waits, the op it waits on and whether its partner is posted.
static int deadlock_err(const run_t* u, char* err, size_t errlen) {
    char msg[1024] = "deadlock:";
    size_t len = strlen(msg);
    for (int r = 0; r < u->s->p && len < sizeof msg - 1; r++) {
        if (u->pc[r] >= u->s->n_actions[r]) continue;
        const int i0 = u->pc[r], g = schedule_group_len(u->s, r, i0);
        for (int i = i0; i < i0 + g; i++) {
            if (op_done(u, r, i) >= 0) continue;
            const action_t* a = &u->s->actions[r][i];
            char name[48];
            action_format(u->s, a, name, sizeof name);
            len += (size_t)snprintf(msg + len, sizeof msg - len, " rank %d waits at action %d (%s) for rank %d's action %d;",
                                    r, i, name, a->peer, u->partner[r][i]);
            break;
        }
        if (len >= sizeof msg) len = sizeof msg - 1;
    }
    return set_err(err, errlen, "%s", msg);
}

static int alloc_result(const schedule_t* s, sim_result_t* res) {
    memset(res, 0, sizeof *res);
    res->p = s->p;
    res->busy = calloc((size_t)s->p, sizeof(double));
    res->finish = calloc((size_t)s->p, sizeof(double));
    res->peak_live = calloc((size_t)s->p, sizeof(int));
    res->start = calloc((size_t)s->p, sizeof(double*));
    res->end = calloc((size_t)s->p, sizeof(double*));
    if (!res->busy || !res->finish || !res->peak_live || !res->start || !res->end) return -1;
    for (int r = 0; r < s->p; r++) {
        const size_t n = (size_t)s->n_actions[r] + 1;
        res->start[r] = malloc(n * sizeof(double)), res->end[r] = malloc(n * sizeof(double));
        if (!res->start[r] || !res->end[r]) return -1;
        // -1: not posted / not run yet (every real time is >= 0).
        for (size_t i = 0; i < n; i++) res->start[r][i] = res->end[r][i] = -1.0;
    }
    return 0;
}

void sim_result_free(sim_result_t* res) {
    if (!res) return;
    for (int r = 0; r < res->p; r++) {
        if (res->start) free(res->start[r]);
        if (res->end) free(res->end[r]);
    }
    free(res->start), free(res->end), free(res->busy), free(res->finish), free(res->peak_live);
    memset(res, 0, sizeof *res);
}

static int costs_ok(const sim_costs_t* c, char* err, size_t errlen) {
    const double v[5] = {c->f, c->b, c->bi, c->w, c->comm};
    const char* n[5] = {"F", "B", "BI", "W", "comm"};
    for (int k = 0; k < 5; k++)
        if (!(v[k] >= 0.0) || !isfinite(v[k]))
            return set_err(err, errlen, "cost of %s = %g: costs must be finite and >= 0", n[k], v[k]);
    return 0;
}

int sim_run(const schedule_t* s, const sim_costs_t* costs, sim_result_t* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (schedule_check_structure(s, err, errlen) != 0 || costs_ok(costs, err, errlen) != 0) return -1;
    const int p = s->p;
    const size_t sm = (size_t)sched_stages(s) * s->m;
    run_t u = {.s = s, .c = costs, .res = out};
    u.partner = calloc((size_t)p, sizeof(int*));
    u.pc = calloc((size_t)p, sizeof(int)), u.t = calloc((size_t)p, sizeof(double));
    u.f_done = calloc(sm, 1), u.b_done = calloc(sm, 1), u.act_in = calloc(sm, 1), u.grad_in = calloc(sm, 1);
    int rc = (u.partner && u.pc && u.t && u.f_done && u.b_done && u.act_in && u.grad_in && alloc_result(s, out) == 0)
                 ? 0 : set_err(err, errlen, "out of memory");
    for (int r = 0; r < p && rc == 0; r++)
        if (!(u.partner[r] = malloc(((size_t)s->n_actions[r] + 1) * sizeof(int)))) rc = set_err(err, errlen, "out of memory");
    if (rc == 0) rc = pair_up(s, u.partner, err, errlen);
    // Sweep the ranks until nobody can move: each rank runs as far as it can before the next
    // one goes. The times do not depend on the sweep order: every time is fixed by its inputs.
    for (int progress = 1; rc == 0 && progress;) {
        progress = 0;
        for (int r = 0; r < p && rc == 0; r++) {
            while (rc == 0 && u.pc[r] < s->n_actions[r]) {
                const int comm = act_is_comm(s->actions[r][u.pc[r]].kind);
                const int k = comm ? step_group(&u, r, err, errlen) : (step_compute(&u, r, err, errlen) == 0 ? 1 : -1);
                if (k < 0) rc = -1;
                if (k != 0) progress = 1;
                if (k <= 0) break;
            }
        }
    }
    for (int r = 0; r < p && rc == 0; r++)
        if (u.pc[r] < s->n_actions[r]) rc = deadlock_err(&u, err, errlen);
    if (rc == 0) {
        double busy = 0.0;
        for (int r = 0; r < p; r++) {
            out->finish[r] = u.t[r];
            out->makespan = fmax(out->makespan, u.t[r]);
            out->peak_live[r] = sim_peak_live(s, r);
            busy += out->busy[r];
        }
        out->bubble = out->makespan > 0 ? (p * out->makespan - busy) / (p * out->makespan) : 0.0;
    }
    for (int r = 0; u.partner && r < p; r++) free(u.partner[r]);
    free(u.partner), free(u.pc), free(u.t), free(u.f_done), free(u.b_done), free(u.act_in), free(u.grad_in);
    if (rc != 0) sim_result_free(out);
    return rc;
}

int sim_result_from_times(const schedule_t* s, const double* const* start, const double* const* end,
                          sim_result_t* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (schedule_check_structure(s, err, errlen) != 0) return -1;
    if (alloc_result(s, out) != 0) {
        sim_result_free(out);
        return set_err(err, errlen, "out of memory");
    }
    double busy = 0.0;
    for (int r = 0; r < s->p; r++) {
        for (int i = 0; i < s->n_actions[r]; i++) {
            const double a = start[r][i], b = end[r][i];
            if (!isfinite(a) || !isfinite(b) || a < 0 || b < a) {
                sim_result_free(out);
                return set_err(err, errlen, "rank %d action %d: times %g .. %g (need 0 <= start <= end)", r, i, a, b);
            }
            out->start[r][i] = a, out->end[r][i] = b;
            if (!act_is_comm(s->actions[r][i].kind)) out->busy[r] += b - a;
            out->finish[r] = fmax(out->finish[r], b);
        }
        out->makespan = fmax(out->makespan, out->finish[r]);
        out->peak_live[r] = sim_peak_live(s, r);
        busy += out->busy[r];
    }
    out->bubble = out->makespan > 0 ? (s->p * out->makespan - busy) / (s->p * out->makespan) : 0.0;
    return 0;
}

int schedule_validate(const schedule_t* s, char* err, size_t errlen) {
    sim_result_t res;
    const sim_costs_t unit = sim_unit_costs();
    if (sim_run(s, &unit, &res, err, errlen) != 0) return -1;
    sim_result_free(&res);
    return 0;
}

// ------------------------------------------------------------------ formulas and memory

double sim_formula_bubble(const schedule_t* s, const sim_costs_t* c) {
    // STUDENT-BEGIN(08.formula_bubble): the bubble formulas: (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v·m+p-1) for interleaved, ZB-H1 (p-1)(F+BI-W) / (m(F+BI+W) + (p-1)(F+BI-W)) with c's costs (NAN when m < p or W > F+BI) | see 08_pipeline/README.md §The bubble | test: test_08 bubble/* | needs: 08.order_gpipe 08.item_1f1b 08.order_interleaved 08.pick_zbh1
    const double p = s->p, m = s->m, v = s->v;
    switch (s->kind) {
    case SCHED_GPIPE:
    case SCHED_1F1B: return (p - 1) / (m + p - 1);
    case SCHED_INTERLEAVED: return (p - 1) / (v * m + p - 1);
    case SCHED_ZBH1: {
        // Idle per rank (p−1)(F+BI−W): the warm-up staircase, less the W passes that fill the tail.
        const double idle = (p - 1) * (c->f + c->bi - c->w), work = m * (c->f + c->bi + c->w);
        if (s->m < s->p || c->w > c->f + c->bi || work + idle <= 0) return NAN;
        return idle / (work + idle);
    }
    }
    return NAN;
    // STUDENT-END(08.formula_bubble)
}

int sim_peak_live(const schedule_t* s, int rank) {
    int live = 0, peak = 0;
    for (int i = 0; i < s->n_actions[rank]; i++) {
        const act_kind_t k = s->actions[rank][i].kind;
        // Forward-only: a set is needed until its output is sent (the group right after its F),
        // so at most one is live at a compute.
        if (s->forward_only && k == ACT_F) live = 0;
        if (k == ACT_F && ++live > peak) peak = live;
        if (k == ACT_B || k == ACT_W) live--;
    }
    return peak;
}

// ------------------------------------------------------------------ output

int sim_write_csv(const schedule_t* s, const sim_result_t* res, const char* path, char* err, size_t errlen) {
    if (mkdir_parent(path) != 0) return set_err(err, errlen, "cannot create the directory of %s: %s", path, strerror(errno));
    FILE* f = afile_open(path);
    if (!f) return set_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
    fprintf(f, "rank,index,action,mb,chunk,peer,start,end\n");
    for (int r = 0; r < s->p; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const action_t* a = &s->actions[r][i];
            fprintf(f, "%d,%d,%s,%d,%d,%d,%.9g,%.9g\n", r, i, act_name(a->kind), a->mb, a->chunk, a->peer,
                    res->start[r][i], res->end[r][i]);
        }
    if (afile_commit(f) != 0) return set_err(err, errlen, "cannot write %s", path);
    return 0;
}

// The inverse of sim_write_csv, for timelines measured where no gnuplot is (pp_train on a GPU
// machine writes the same columns): every rank's rows must come in index order 0, 1, ...
int sim_read_csv(const char* path, schedule_t* s, sim_result_t* res, char* err, size_t errlen) {
    memset(s, 0, sizeof *s), memset(res, 0, sizeof *res);
    FILE* f = fopen(path, "r");
    if (!f) return set_err(err, errlen, "cannot read %s", path);
    char line[512];
    if (!fgets(line, sizeof line, f) || strncmp(line, "rank,index,action,mb,chunk,peer,start,end", 41) != 0) {
        fclose(f);
        return set_err(err, errlen, "%s: not a timeline CSV (header rank,index,action,mb,chunk,peer,start,end)", path);
    }
    s->n_actions = calloc(SCHED_MAX_P, sizeof(int));
    s->actions = calloc(SCHED_MAX_P, sizeof(action_t*));
    res->start = calloc(SCHED_MAX_P, sizeof(double*)), res->end = calloc(SCHED_MAX_P, sizeof(double*));
    s->kind = SCHED_1F1B;
    int cap[SCHED_MAX_P] = {0}, rc = 0;
    long ln = 1;
    if (!s->n_actions || !s->actions || !res->start || !res->end) DIE("out of host memory");
    while (fgets(line, sizeof line, f)) {
        ln++;
        int r, i, mb, chunk, peer, k;
        char name[32];
        double t0, t1;
        if (sscanf(line, "%d,%d,%31[^,],%d,%d,%d,%lf,%lf", &r, &i, name, &mb, &chunk, &peer, &t0, &t1) != 8 || r < 0 ||
            r >= SCHED_MAX_P || i != s->n_actions[r] || mb < 0 || chunk < 0 || !(t1 >= t0)) {
            rc = set_err(err, errlen, "%s line %ld: expected rank (0..%d), the rank's next index, action, mb, chunk, "
                         "peer, start <= end", path, ln, SCHED_MAX_P - 1);
            break;
        }
        for (k = 0; k < ACT_NKINDS && strcmp(name, act_name((act_kind_t)k)) != 0; k++) {}
        if (k == ACT_NKINDS) {
            rc = set_err(err, errlen, "%s line %ld: unknown action '%s'", path, ln, name);
            break;
        }
        if (i == cap[r]) {
            cap[r] = cap[r] ? 2 * cap[r] : 64;
            s->actions[r] = realloc(s->actions[r], (size_t)cap[r] * sizeof(action_t));
            res->start[r] = realloc(res->start[r], (size_t)cap[r] * sizeof(double));
            res->end[r] = realloc(res->end[r], (size_t)cap[r] * sizeof(double));
            if (!s->actions[r] || !res->start[r] || !res->end[r]) DIE("out of host memory");
        }
        s->actions[r][i] = (action_t){(act_kind_t)k, mb, chunk, peer};
        res->start[r][i] = t0, res->end[r][i] = t1;
        s->n_actions[r]++;
        if (r + 1 > s->p) s->p = r + 1;
        if (mb + 1 > s->m) s->m = mb + 1;
        if (chunk + 1 > s->v) s->v = chunk + 1;
    }
    fclose(f);
    for (int r = 0; rc == 0 && r < s->p; r++)
        if (!s->n_actions[r]) rc = set_err(err, errlen, "%s: rank %d has no rows", path, r);
    if (rc == 0 && s->p == 0) rc = set_err(err, errlen, "%s: no rows", path);
    res->p = s->p;
    if (rc == 0) {
        res->busy = calloc((size_t)s->p, sizeof(double)), res->finish = calloc((size_t)s->p, sizeof(double));
        res->peak_live = calloc((size_t)s->p, sizeof(int));
        if (!res->busy || !res->finish || !res->peak_live) DIE("out of host memory");
        double busy = 0;
        for (int r = 0; r < s->p; r++) {
            for (int i = 0; i < s->n_actions[r]; i++) {
                if (!act_is_comm(s->actions[r][i].kind)) res->busy[r] += res->end[r][i] - res->start[r][i];
                if (res->end[r][i] > res->finish[r]) res->finish[r] = res->end[r][i];
            }
            if (res->finish[r] > res->makespan) res->makespan = res->finish[r];
            res->peak_live[r] = sim_peak_live(s, r);
            busy += res->busy[r];
        }
        res->bubble = res->makespan > 0 ? (s->p * res->makespan - busy) / (s->p * res->makespan) : 0;
    }
    if (rc != 0) {
        for (int r = 0; r < SCHED_MAX_P; r++) free(s->actions[r]), free(res->start[r]), free(res->end[r]);
        free(s->actions), free(s->n_actions), free(res->start), free(res->end);
        memset(s, 0, sizeof *s), memset(res, 0, sizeof *res);
    }
    return rc;
}

static char cell_letter(const action_t* a) {
    const char up = a->kind == ACT_F ? 'F' : (a->kind == ACT_W ? 'W' : 'B');
    return a->chunk % 2 ? (char)(up - 'A' + 'a') : up;
}

void sim_print_timeline(const schedule_t* s, const sim_result_t* res, const sim_costs_t* c, int max_cols, FILE* out) {
    // The quantum: the smallest positive cost among the compute kinds this schedule uses.
    double q = INFINITY;
    for (int r = 0; r < s->p; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const double d = cost_of(c, s->actions[r][i].kind);
            if (!act_is_comm(s->actions[r][i].kind) && d > 0 && d < q) q = d;
        }
    if (res->makespan <= 0 || !isfinite(q)) {
        fprintf(out, "(empty timeline: every cost is 0)\n");
        return;
    }
    if (max_cols < 10) max_cols = 10;
    int ncols = (int)ceil(res->makespan / q - 1e-9);
    if (ncols > max_cols) ncols = max_cols, q = res->makespan / max_cols;
    fprintf(out, "one column = %g time unit%s; F forward, B backward (ZB: its input half BI), W weight "
            "gradient%s; '.' idle or waiting\n", q, q == 1 ? "" : "s", s->v > 1 ? "; lower case: odd chunks" : "");
    char* row = malloc((size_t)ncols + 1);
    if (!row) return;
    fprintf(out, "        ");
    for (int col = 0; col < ncols; col++) fputc(col % 10 == 0 ? '|' : ' ', out);
    fprintf(out, "\n");
    for (int r = 0; r < s->p; r++) {
        memset(row, '.', (size_t)ncols);
        row[ncols] = '\0';
        // A cell shows the compute that covers its midpoint.
        for (int i = 0; i < s->n_actions[r]; i++) {
            const action_t* a = &s->actions[r][i];
            if (act_is_comm(a->kind)) continue;
            for (int col = (int)floor(res->start[r][i] / q); col < ncols && (col + 0.5) * q < res->end[r][i]; col++)
                if ((col + 0.5) * q >= res->start[r][i]) row[col] = cell_letter(a);
        }
        fprintf(out, "rank %-2d %s\n", r, row);
    }
    free(row);
}


// A string safe between gnuplot's single quotes (which have no escapes).
static int gp_safe(const char* x) { return x && !strchr(x, '\'') && !strchr(x, '\n'); }

// The gnuplot script: one inline data block per compute kind and chunk parity, drawn as boxes.
static void gp_script(FILE* gp, const char* term, const schedule_t* s, const sim_result_t* res,
                      const char* out, const char* title, const char* xlabel) {
    static const char* const colors[3][2] = {{"#4e79a7", "#a0cbe8"}, {"#e15759", "#ff9d9a"}, {"#59a14f", "#8cd17d"}};
    static const char* const names[3] = {"F", "B", "W"};
    fprintf(gp, "set terminal %s size 1200,%d\nset output '%s'\n", term, 140 + 45 * s->p, out);
    fprintf(gp, "set title '%s'\nset xlabel '%s'\nset ylabel 'rank'\n", title, xlabel);
    fprintf(gp, "set yrange [%g:-0.5]\nset ytics 1\nset xrange [0:%g]\nset key outside right top\n", s->p - 0.5,
            res->makespan > 0 ? res->makespan : 1.0);
    fprintf(gp, "set style fill solid 1.0 border lc rgb 'white'\n");
    long ncomp = 0;
    int used[3][2] = {{0}};
    for (int k = 0; k < 3; k++)
        for (int odd = 0; odd < 2; odd++) {
            fprintf(gp, "$D%d%d << EOD\n", k, odd);
            for (int r = 0; r < s->p; r++)
                for (int i = 0; i < s->n_actions[r]; i++) {
                    const action_t* a = &s->actions[r][i];
                    const int kk = a->kind == ACT_F ? 0 : (a->kind == ACT_W ? 2 : 1);
                    if (act_is_comm(a->kind) || kk != k || a->chunk % 2 != odd) continue;
                    const double t0 = res->start[r][i], t1 = res->end[r][i];
                    fprintf(gp, "%.9g %d %.9g 0.4 %d\n", (t0 + t1) / 2, r, (t1 - t0) / 2, a->mb);
                    used[k][odd] = 1, ncomp++;
                }
            fprintf(gp, "EOD\n");
        }
    fprintf(gp, "plot ");
    int first = 1;
    for (int k = 0; k < 3; k++)
        for (int odd = 0; odd < 2; odd++) {
            if (!used[k][odd]) continue;
            fprintf(gp, "%s$D%d%d using 1:2:3:4 with boxxyerror lc rgb '%s' title '%s%s'", first ? "" : ", \\\n  ", k,
                    odd, colors[k][odd], names[k], s->v > 1 ? (odd ? " (odd chunk)" : " (even chunk)") : "");
            first = 0;
            // Micro-batch numbers on the boxes while they still fit.
            if (ncomp / s->p <= 120)
                fprintf(gp, ", \\\n  $D%d%d using 1:2:(sprintf('%%d', $5)) with labels font ',8' notitle", k, odd);
        }
    fprintf(gp, "%s\nset output\n", first ? "NaN notitle" : "");
}

// gnuplot_png's script callback.
typedef struct {
    const schedule_t* s;
    const sim_result_t* res;
    const char* title;
    const char* xlabel;
} sim_plot_ctx_t;

static void sim_plot_script(FILE* gp, const char* term, const char* out, void* ctx) {
    const sim_plot_ctx_t* c = ctx;
    gp_script(gp, term, c->s, c->res, out, c->title, c->xlabel);
}

int sim_plot_png(const schedule_t* s, const sim_result_t* res, const char* png, const char* title, char* err,
                 size_t errlen) {
    return sim_plot_png_x(s, res, png, title, "time (cost units)", err, errlen);
}

int sim_plot_png_x(const schedule_t* s, const sim_result_t* res, const char* png, const char* title, const char* xlabel,
                   char* err, size_t errlen) {
    if (!gp_safe(png) || !gp_safe(title) || !gp_safe(xlabel))
        return set_err(err, errlen, "the PNG path, title and axis label must not contain a quote or newline");
    sim_plot_ctx_t pc = {s, res, title, xlabel};
    return gnuplot_png(png, sim_plot_script, &pc, err, errlen);
}
