// Tests of the pipeline schedules: every generated schedule is valid (inputs before use, sends
// paired with receives, no deadlock), the simulated bubble equals the textbook formulas, memory
// is what 1F1B promises, ZB-H1 beats 1F1B, broken schedules and bad inputs are refused with a
// clear reason, and the `schedule` program's flags.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gnuplot.h"
#include "08_pipeline/simulate.h"
#include "tests/harness.h"

// The simulated times are sums of a few hundred costs that are small binary fractions (exact
// in double) and the formula is one division: both are within a few ulps of the true ratio, so
// 1e-12 is far above rounding and far below the smallest real difference between two bubbles
// here (1/(p·makespan) > 1e-3).
#define BUBBLE_TOL 1e-12

static const sched_kind_t KINDS[SCHED_NKINDS] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1};

// Calls fn(kind, p, m, v) for every case the tests cover: p = 1..6, m = 1..12; interleaved
// with m a multiple of p and v = 2, 3.
#define FOR_EACH_CASE(kind, p, m, v)                                                     \
    for (int ki_ = 0; ki_ < SCHED_NKINDS; ki_++)                                         \
        for (int p = 1; p <= 6; p++)                                                     \
            for (int m = 1; m <= 12; m++)                                                \
                for (int v = 1; v <= 3; v++)                                             \
                    for (sched_kind_t kind = KINDS[ki_]; kind == KINDS[ki_]; kind = SCHED_NKINDS) \
                        if ((kind == SCHED_INTERLEAVED) == (v > 1) && (kind != SCHED_INTERLEAVED || m % p == 0))

static schedule_t make(sched_kind_t kind, int p, int m, int v, const sched_costs_t* plan) {
    schedule_t s;
    char err[512] = "";
    cr_assert_eq(schedule_make_planned(kind, p, m, v, plan, &s, err, sizeof err), 0, "%s p %d m %d v %d: %s",
                 sched_name(kind), p, m, v, err);
    return s;
}

static sim_result_t run(const schedule_t* s, sim_costs_t c) {
    sim_result_t r;
    char err[512] = "";
    cr_assert_eq(sim_run(s, &c, &r, err, sizeof err), 0, "%s p %d m %d v %d: %s", sched_name(s->kind), s->p, s->m,
                 s->v, err);
    return r;
}

// ------------------------------------------------------------------ validity

Test(schedule, every_schedule_is_valid) {
    int n = 0;
    FOR_EACH_CASE(kind, p, m, v) {
        schedule_t s = make(kind, p, m, v, NULL);
        char err[512] = "";
        cr_assert_eq(schedule_validate(&s, err, sizeof err), 0, "%s p %d m %d v %d: %s", sched_name(kind), p, m, v, err);
        // Each rank computes F and B (or F, BI, W) for each of its v·m micro-batch-chunks.
        for (int r = 0; r < p; r++) {
            int comp = 0;
            for (int i = 0; i < s.n_actions[r]; i++) comp += !act_is_comm(s.actions[r][i].kind);
            cr_assert_eq(comp, (kind == SCHED_ZBH1 ? 3 : 2) * v * m, "%s p %d m %d rank %d", sched_name(kind), p, m, r);
        }
        schedule_free(&s);
        n++;
    }
    cr_assert_eq(n, 4 * 72 - 72 + 2 * 29, "cases covered: %d", n);  // gpipe, 1f1b, zbh1: 72 each; interleaved 29 × 2
}

// ------------------------------------------------------------------ forward-only (evaluation)

static void expect_invalid(schedule_t* s, const char* want);  // below, with the broken schedules

// The forward-only lists of every case (p = 1..6, m = 1..12, so p = 2, 3, 4 with m = 1..8
// among them): valid (the same validation: inputs before use, sends paired with receives, no
// deadlock under rendezvous sends); only F and activation messages; each rank's forwards in
// the order its training list runs them; the unit-cost run is the staircase, v·m + p − 1
// forward times (no backward hidden in it); one set live at a time; m·(p·v − 1) messages.
Test(schedule_forward, every_forward_list_is_valid) {
    int n = 0;
    FOR_EACH_CASE(kind, p, m, v) {
        schedule_t f, s = make(kind, p, m, v, NULL);
        char err[512] = "";
        cr_assert_eq(schedule_make_forward(kind, p, m, v, &f, err, sizeof err), 0, "%s p %d m %d v %d: %s",
                     sched_name(kind), p, m, v, err);
        cr_assert_eq(f.forward_only, 1);
        cr_assert_eq(schedule_validate(&f, err, sizeof err), 0, "forward %s p %d m %d v %d: %s", sched_name(kind), p, m, v, err);
        for (int r = 0; r < p; r++) {
            int nf = 0, k = 0;
            for (int i = 0; i < f.n_actions[r]; i++) {
                const action_t* a = &f.actions[r][i];
                cr_assert(a->kind == ACT_F || a->kind == ACT_SEND_ACT || a->kind == ACT_RECV_ACT,
                          "forward %s p %d m %d rank %d action %d is %s", sched_name(kind), p, m, r, i, act_name(a->kind));
                if (a->kind != ACT_F) continue;
                nf++;
                while (k < s.n_actions[r] && s.actions[r][k].kind != ACT_F) k++;  // the training list's next F
                cr_assert(k < s.n_actions[r] && s.actions[r][k].mb == a->mb && s.actions[r][k].chunk == a->chunk,
                          "forward %s p %d m %d v %d rank %d: F%d c%d is not the training list's next forward",
                          sched_name(kind), p, m, v, r, a->mb, a->chunk);
                k++;
            }
            cr_assert_eq(nf, v * m, "forward %s p %d m %d rank %d: %d F", sched_name(kind), p, m, r, nf);
            cr_assert_leq(sim_peak_live(&f, r), 1);
        }
        sim_result_t res = run(&f, sim_unit_costs());
        cr_assert_eq(res.makespan, (double)(v * m + p - 1), "forward %s p %d m %d v %d: makespan %g, not v·m + p − 1",
                     sched_name(kind), p, m, v, res.makespan);
        cr_assert_eq(schedule_messages(&f), p > 1 ? (long)m * (p * v - 1) : 0, "forward %s p %d m %d v %d: %ld messages",
                     sched_name(kind), p, m, v, schedule_messages(&f));
        sim_result_free(&res);
        schedule_free(&f);
        schedule_free(&s);
        n++;
    }
    cr_assert_eq(n, 4 * 72 - 72 + 2 * 29, "cases covered: %d", n);
}

// The structure check knows which kind of list it holds: a training list marked forward-only
// is refused (gradient messages, a backward), and so is a forward list read as a training one
// (no backward) or missing a forward.
Test(schedule_forward, validate_refuses_backward_in_forward_lists) {
    schedule_t s, f;
    char err[512] = "";
    cr_assert_eq(schedule_make(SCHED_1F1B, 2, 2, 1, &s, err, sizeof err), 0, "%s", err);
    s.forward_only = 1;
    expect_invalid(&s, "a forward-only list has no gradient messages");
    schedule_free(&s);
    cr_assert_eq(schedule_make(SCHED_GPIPE, 1, 2, 1, &s, err, sizeof err), 0, "%s", err);  // p = 1: no messages
    s.forward_only = 1;
    expect_invalid(&s, "has 1 F, 1 B, 0 BI, 0 W; a forward-only list needs one F and no backward");
    schedule_free(&s);
    cr_assert_eq(schedule_make_forward(SCHED_1F1B, 2, 3, 1, &f, err, sizeof err), 0, "%s", err);
    f.forward_only = 0;
    expect_invalid(&f, "needs one F and either one B or one BI and one W");
    f.forward_only = 1;
    f.actions[1][f.n_actions[1] - 1].kind = ACT_B;  // rank 1's last F made a backward
    expect_invalid(&f, "a forward-only list needs one F and no backward");
    schedule_free(&f);
    cr_assert_eq(schedule_make_forward(SCHED_INTERLEAVED, 4, 6, 2, &f, err, sizeof err), -1);
    cr_assert(strstr(err, "multiple of p = 4"), "%s", err);
    cr_assert_eq(schedule_make_forward(SCHED_1F1B, 2, 4, 2, &f, err, sizeof err), -1);
    cr_assert(strstr(err, "only interleaved"), "%s", err);
}

// The no-deadlock argument (schedule.h) holds for any planning costs: check uneven ones.
Test(schedule, valid_whatever_the_planning_costs) {
    const sched_costs_t plans[] = {{1, 2, 1, 1}, {2, 3, 2, 1}, {1, 1.7, 0.3, 1.4}, {3, 1, 0.25, 0.75}};
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        FOR_EACH_CASE(kind, p, m, v) {
            schedule_t s = make(kind, p, m, v, &plans[k]);
            char err[512] = "";
            cr_assert_eq(schedule_validate(&s, err, sizeof err), 0, "plan %zu %s p %d m %d v %d: %s", k,
                         sched_name(kind), p, m, v, err);
            schedule_free(&s);
        }
    }
}

Test(schedule, one_rank_has_no_communication) {
    schedule_t s = make(SCHED_INTERLEAVED, 1, 3, 2, NULL);
    cr_assert_eq(schedule_messages(&s), 0);
    cr_assert_eq(s.n_actions[0], 2 * 2 * 3, "p = 1: only computes (chunk 0 feeds chunk 1 locally)");
    schedule_free(&s);
}

// Every micro-batch crosses each of the S-1 stage boundaries twice (activation, gradient); with
// v chunks per rank there are v·p-1 boundaries instead of p-1.
Test(schedule, messages_per_step) {
    for (int p = 1; p <= 6; p++)
        for (int m = p; m <= 12; m += p) {
            schedule_t a = make(SCHED_1F1B, p, m, 1, NULL), b = make(SCHED_INTERLEAVED, p, m, 3, NULL);
            cr_assert_eq(schedule_messages(&a), 2L * m * (p - 1));
            cr_assert_eq(schedule_messages(&b), p > 1 ? 2L * m * (3 * p - 1) : 0);
            schedule_free(&a), schedule_free(&b);
        }
}

// ------------------------------------------------------------------ bubble

Test(bubble, uniform_costs_match_the_formulas) {
    FOR_EACH_CASE(kind, p, m, v) {
        if (kind == SCHED_ZBH1) continue;  // ZB-H1 splits B; its own test below
        schedule_t s = make(kind, p, m, v, NULL);
        const sim_costs_t c = sim_unit_costs();  // F = B = 1, comm 0, rendezvous
        sim_result_t r = run(&s, c);
        const double want = kind == SCHED_INTERLEAVED ? (p - 1.0) / (v * m + p - 1.0) : (p - 1.0) / (m + p - 1.0);
        cr_assert(fabs(r.bubble - want) <= BUBBLE_TOL, "%s p %d m %d v %d: bubble %.15f, formula %.15f",
                  sched_name(kind), p, m, v, r.bubble, want);
        cr_assert(fabs(sim_formula_bubble(&s, &c) - want) <= BUBBLE_TOL);
        // And the makespan is the formula's: (v·m + p - 1)·(F + B).
        cr_assert_eq(r.makespan, 2.0 * ((kind == SCHED_INTERLEAVED ? v : 1) * m + p - 1), "%s p %d m %d v %d: %g",
                     sched_name(kind), p, m, v, r.makespan);
        sim_result_free(&r), schedule_free(&s);
    }
}

Test(bubble, zbh1_beats_1f1b) {
    // F = BI = W = 1, so 1F1B's full backward is B = BI + W = 2.
    sim_costs_t c = sim_unit_costs();
    c.b = 2;
    for (int p = 2; p <= 6; p++)
        for (int m = p; m <= 12; m++) {
            schedule_t zb = make(SCHED_ZBH1, p, m, 1, NULL), ob = make(SCHED_1F1B, p, m, 1, NULL);
            sim_result_t rz = run(&zb, c), ro = run(&ob, c);
            cr_assert_lt(rz.bubble, ro.bubble, "p %d m %d: zbh1 %g, 1f1b %g", p, m, rz.bubble, ro.bubble);
            // Exactly the paper's (p-1)(F+BI-W) idle per rank: (p-1)/(3m+p-1) here.
            const double want = (p - 1.0) / (3.0 * m + p - 1.0);
            cr_assert(fabs(rz.bubble - want) <= BUBBLE_TOL, "p %d m %d: zbh1 %.15f, want %.15f", p, m, rz.bubble, want);
            cr_assert(fabs(ro.bubble - (p - 1.0) / (m + p - 1.0)) <= BUBBLE_TOL);
            sim_result_free(&rz), sim_result_free(&ro), schedule_free(&zb), schedule_free(&ob);
        }
}

// Planned with the costs it runs with, a schedule with eager sends reaches the formula for
// uneven costs too (interleaved with F != B, ZB-H1 with W != BI).
Test(bubble, planned_eager_matches_formula_for_uneven_costs) {
    const sim_costs_t costs[] = {{1, 2, 1.5, 0.5, 0, 1}, {2, 3, 2, 1, 0, 1}, {1, 3, 2, 1, 0, 1}};
    for (size_t k = 0; k < sizeof costs / sizeof costs[0]; k++) {
        const sim_costs_t c = costs[k];
        const sched_costs_t plan = {c.f, c.b, c.bi, c.w};
        FOR_EACH_CASE(kind, p, m, v) {
            if (kind == SCHED_ZBH1 && m < p) continue;  // the ZB-H1 formula assumes m >= p
            schedule_t s = make(kind, p, m, v, &plan);
            sim_result_t r = run(&s, c);
            const double want = sim_formula_bubble(&s, &c);
            cr_assert(fabs(r.bubble - want) <= BUBBLE_TOL, "costs %zu %s p %d m %d v %d: bubble %.15f, formula %.15f",
                      k, sched_name(kind), p, m, v, r.bubble, want);
            sim_result_free(&r), schedule_free(&s);
        }
    }
}

// Start times from data dependencies alone (each rank in list order, each compute as soon as
// its inputs have ended), computed here independently of the simulator. With eager sends and
// the schedule planned with these costs, the simulator must give exactly these times.
static void dataflow_starts(const schedule_t* s, const sim_costs_t* c, double** start) {
    const int p = s->p, m = s->m, S = p * s->v;
    double* f_end = malloc(sizeof(double) * S * m);
    double* b_end = malloc(sizeof(double) * S * m);
    for (int i = 0; i < S * m; i++) f_end[i] = b_end[i] = INFINITY;
    int* pc = calloc(p, sizeof(int));
    double* clock = calloc(p, sizeof(double));
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < p; r++)
            for (; pc[r] < s->n_actions[r]; pc[r]++) {
                const action_t* a = &s->actions[r][pc[r]];
                if (act_is_comm(a->kind)) continue;
                const int st = a->chunk * p + r, x = st * m + a->mb;
                double in = 0;
                if (a->kind == ACT_F && st > 0) in = f_end[x - m];
                if (a->kind == ACT_B || a->kind == ACT_BI) in = fmax(f_end[x], st < S - 1 ? b_end[x + m] : 0);
                if (a->kind == ACT_W) in = b_end[x];
                if (in == INFINITY) break;  // input not computed yet: come back later
                start[r][pc[r]] = fmax(clock[r], in);
                const double d = a->kind == ACT_F ? c->f : a->kind == ACT_B ? c->b : a->kind == ACT_BI ? c->bi : c->w;
                clock[r] = start[r][pc[r]] + d;
                if (a->kind == ACT_F) f_end[x] = clock[r];
                if (a->kind == ACT_B || a->kind == ACT_BI) b_end[x] = clock[r];
                moved = 1;
            }
    }
    for (int r = 0; r < p; r++) cr_assert_eq(pc[r], s->n_actions[r], "dataflow stalled on rank %d", r);
    free(f_end), free(b_end), free(pc), free(clock);
}

Test(bubble, planned_eager_is_pure_dataflow) {
    const sim_costs_t costs[] = {{1, 2, 1.5, 0.5, 0, 1}, {1, 1.75, 0.25, 1.5, 0, 1}};
    for (size_t k = 0; k < 2; k++) {
        const sched_costs_t plan = {costs[k].f, costs[k].b, costs[k].bi, costs[k].w};
        FOR_EACH_CASE(kind, p, m, v) {
            schedule_t s = make(kind, p, m, v, &plan);
            sim_result_t r = run(&s, costs[k]);
            double** want = malloc(sizeof(double*) * p);
            for (int q = 0; q < p; q++) want[q] = malloc(sizeof(double) * (s.n_actions[q] + 1));
            dataflow_starts(&s, &costs[k], want);
            for (int q = 0; q < p; q++) {
                for (int i = 0; i < s.n_actions[q]; i++)
                    if (!act_is_comm(s.actions[q][i].kind))
                        cr_assert_eq(r.start[q][i], want[q][i], "costs %zu %s p %d m %d v %d rank %d action %d: %g, "
                                     "dataflow %g", k, sched_name(kind), p, m, v, q, i, r.start[q][i], want[q][i]);
                free(want[q]);
            }
            free(want), sim_result_free(&r), schedule_free(&s);
        }
    }
}

static int find_first_compute(const schedule_t* s, int r) {
    int i = 0;
    while (act_is_comm(s->actions[r][i].kind)) i++;
    return i;
}

// A send that waits for its receive can only make things later, and a message latency too
// (every time is a max of sums of the times before it).
Test(bubble, rendezvous_and_latency_never_help) {
    FOR_EACH_CASE(kind, p, m, v) {
        const sim_costs_t eager = {1, 2, 1.5, 0.5, 0, 1};
        sim_costs_t rdv = eager, slow = eager;
        rdv.eager = 0, slow.comm = 0.25;
        schedule_t s = make(kind, p, m, v, NULL);
        sim_result_t a = run(&s, eager), b = run(&s, rdv), c = run(&s, slow);
        cr_assert_geq(b.makespan, a.makespan, "%s p %d m %d v %d", sched_name(kind), p, m, v);
        cr_assert_geq(c.makespan, a.makespan, "%s p %d m %d v %d", sched_name(kind), p, m, v);
        // The first forward reaches the last stage only after p-1 messages.
        if (p > 1) cr_assert_geq(c.start[p - 1][find_first_compute(&s, p - 1)], (p - 1) * (1 + 0.25));
        sim_result_free(&a), sim_result_free(&b), sim_result_free(&c), schedule_free(&s);
    }
}

// ------------------------------------------------------------------ memory

Test(memory, one_f_one_b_holds_at_most_p) {
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 12; m++) {
            schedule_t ob = make(SCHED_1F1B, p, m, 1, NULL), gp = make(SCHED_GPIPE, p, m, 1, NULL);
            schedule_t zb = make(SCHED_ZBH1, p, m, 1, NULL);
            sim_result_t r = run(&ob, sim_unit_costs());
            cr_assert_eq(r.peak_live[0], p < m ? p : m, "1f1b p %d m %d rank 0: %d", p, m, r.peak_live[0]);
            for (int q = 0; q < p; q++) {
                cr_assert_leq(sim_peak_live(&ob, q), p, "1f1b p %d m %d rank %d", p, m, q);
                cr_assert_eq(sim_peak_live(&ob, q), r.peak_live[q]);
                cr_assert_eq(sim_peak_live(&gp, q), m, "gpipe p %d m %d rank %d holds all m", p, m, q);
                cr_assert_leq(sim_peak_live(&zb, q), p, "zbh1 p %d m %d rank %d: 1F1B's memory", p, m, q);
            }
            sim_result_free(&r), schedule_free(&ob), schedule_free(&gp), schedule_free(&zb);
        }
}

// Megatron's interleaving holds more: rank 0 runs 2(p-1) + (v-1)p forwards before its first
// backward, then one more, each a chunk (1/v of the rank's layers).
Test(memory, interleaved_rank0_warm_up) {
    for (int p = 2; p <= 6; p++)
        for (int v = 2; v <= 3; v++) {
            const int m = 2 * p;
            schedule_t s = make(SCHED_INTERLEAVED, p, m, v, NULL);
            int want = 2 * (p - 1) + (v - 1) * p + 1;
            if (want > v * m) want = v * m;
            cr_assert_eq(sim_peak_live(&s, 0), want, "p %d v %d: %d", p, v, sim_peak_live(&s, 0));
            schedule_free(&s);
        }
}

// ------------------------------------------------------------------ printing

static char* print_to_string(void (*fn)(const schedule_t*, const sim_result_t*, FILE*), const schedule_t* s,
                             const sim_result_t* r) {
    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    fn(s, r, f);
    fclose(f);
    return buf;
}

static void print_lists(const schedule_t* s, const sim_result_t* r, FILE* f) { (void)r, schedule_print(s, 0, f); }
static void print_comm(const schedule_t* s, const sim_result_t* r, FILE* f) { (void)r, schedule_print(s, 1, f); }
static void print_timeline(const schedule_t* s, const sim_result_t* r, FILE* f) {
    const sim_costs_t c = sim_unit_costs();
    sim_print_timeline(s, r, &c, 80, f);
}

Test(print, one_f_one_b_p2_m3) {
    schedule_t s = make(SCHED_1F1B, 2, 3, 1, NULL);
    sim_result_t r = run(&s, sim_unit_costs());
    char* lists = print_to_string(print_lists, &s, &r);
    cr_assert_str_eq(lists, "rank 0: F0 F1 B0 F2 B1 B2\nrank 1: F0 B0 F1 B1 F2 B2\n");
    char* comm = print_to_string(print_comm, &s, &r);
    // Planned times (unit costs): rank 0 F0 0-1, F1 1-2, B0 3-4, F2 4-5, B1 5-6, B2 7-8; rank 1
    // F0 1-2, B0 2-3, F1 3-4, B1 4-5, F2 5-6, B2 6-7. A message sent at t goes right after its
    // producer and, on the receiver, after the computes that started before t: SG0 (t = 3)
    // joins rank 0's group after F1, SA2 and SG1 (t = 5) meet in one group on each side.
    cr_assert_str_eq(comm, "rank 0: F0 {SA0>1} F1 {SA1>1 RG0<1} B0 F2 {SA2>1 RG1<1} B1 {RG2<1} B2\n"
                           "rank 1: {RA0<0} F0 {RA1<0} B0 {SG0>0} F1 B1 {RA2<0 SG1>0} F2 B2 {SG2>0}\n",
                     "got:\n%s", comm);
    char* tl = print_to_string(print_timeline, &s, &r);
    cr_assert(strstr(tl, "rank 0  FF.BFB.B\nrank 1  .FBFBFB.\n") != NULL, "got:\n%s", tl);
    free(lists), free(comm), free(tl);
    sim_result_free(&r), schedule_free(&s);
}

Test(print, names_round_trip) {
    for (int k = 0; k < SCHED_NKINDS; k++) {
        sched_kind_t got;
        cr_assert_eq(sched_parse(sched_name(KINDS[k]), &got), 0);
        cr_assert_eq(got, KINDS[k]);
    }
    sched_kind_t got;
    cr_assert_eq(sched_parse("zb-h1", &got), -1);
    cr_assert_eq(sched_parse(NULL, &got), -1);
    cr_assert_str_eq(act_name(ACT_RECV_GRAD), "RECV_GRAD");
    schedule_t s = make(SCHED_INTERLEAVED, 2, 2, 2, NULL);
    char buf[32];
    action_format(&s, &(action_t){ACT_SEND_ACT, 1, 1, 0}, buf, sizeof buf);
    cr_assert_str_eq(buf, "SA1c1>0");
    schedule_free(&s);
}

Test(print, csv_has_every_action) {
    schedule_t s = make(SCHED_ZBH1, 3, 4, 1, NULL);
    sim_result_t r = run(&s, sim_unit_costs());
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/sub/zb.csv", test_tmpdir());
    cr_assert_eq(sim_write_csv(&s, &r, path, err, sizeof err), 0, "%s", err);
    FILE* f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[256];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_str_eq(line, "rank,index,action,mb,chunk,peer,start,end\n");
    int rows = 0, total = 0;
    while (fgets(line, sizeof line, f)) rows++;
    fclose(f);
    for (int q = 0; q < s.p; q++) total += s.n_actions[q];
    cr_assert_eq(rows, total);
    sim_result_free(&r), schedule_free(&s);
}

Test(print, png_through_gnuplot) {
    if (!gnuplot_available()) cr_skip_test("gnuplot is not installed");
    schedule_t s = make(SCHED_INTERLEAVED, 4, 8, 2, NULL);
    sim_result_t r = run(&s, sim_unit_costs());
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/tl.png", test_tmpdir());
    cr_assert_eq(sim_plot_png(&s, &r, path, "interleaved", err, sizeof err), 0, "%s", err);
    FILE* f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char magic[4] = {0};
    cr_assert_eq(fread(magic, 1, 4, f), 4u);
    fclose(f);
    cr_assert(magic[1] == 'P' && magic[2] == 'N' && magic[3] == 'G', "not a PNG");
    cr_assert_neq(sim_plot_png(&s, &r, path, "it's quoted", err, sizeof err), 0, "a quote must be refused");
    sim_result_free(&r), schedule_free(&s);
}

// ------------------------------------------------------------------ bad input

static void expect_make_error(sched_kind_t kind, int p, int m, int v, const char* want) {
    schedule_t s;
    char err[512] = "";
    cr_assert_eq(schedule_make(kind, p, m, v, &s, err, sizeof err), -1, "%s p %d m %d v %d accepted", sched_name(kind), p, m, v);
    cr_assert(strstr(err, want), "error \"%s\" does not say \"%s\"", err, want);
    cr_assert_null(s.actions, "a refused schedule is empty");
}

Test(bad_input, refused_with_a_reason) {
    expect_make_error(SCHED_1F1B, 0, 4, 1, "number of pipeline ranks");
    expect_make_error(SCHED_GPIPE, 2, 0, 1, "number of micro-batches");
    expect_make_error(SCHED_INTERLEAVED, 4, 6, 2, "multiple of p = 4");
    expect_make_error(SCHED_INTERLEAVED, 4, 8, 1, "at least 2 chunks");
    expect_make_error(SCHED_ZBH1, 4, 8, 2, "only interleaved");
    expect_make_error(SCHED_1F1B, SCHED_MAX_P + 1, 8, 1, "1..256");
    expect_make_error(SCHED_1F1B, 100, 100000, 1, "too large");
    schedule_t s;
    char err[256] = "";
    const sched_costs_t zero_w = {1, 2, 1, 0};
    cr_assert_eq(schedule_make_planned(SCHED_ZBH1, 2, 2, 1, &zero_w, &s, err, sizeof err), -1);
    cr_assert(strstr(err, "planning cost of W"), "%s", err);
    cr_assert_eq(schedule_make_planned(SCHED_1F1B, 2, 2, 1, &zero_w, &s, err, sizeof err), 0, "1f1b has no W: %s", err);
    sim_result_t r;
    sim_costs_t neg = sim_unit_costs();
    neg.comm = -1;
    cr_assert_eq(sim_run(&s, &neg, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "comm"), "%s", err);
    schedule_free(&s);
}

// Breaks a valid schedule in one place and checks validate names the problem.
static void expect_invalid(schedule_t* s, const char* want) {
    char err[512] = "";
    cr_assert_eq(schedule_validate(s, err, sizeof err), -1, "broken schedule accepted (want \"%s\")", want);
    cr_assert(strstr(err, want), "error \"%s\" does not say \"%s\"", err, want);
}

static int find(const schedule_t* s, int r, act_kind_t k, int mb) {
    for (int i = 0; i < s->n_actions[r]; i++)
        if (s->actions[r][i].kind == k && s->actions[r][i].mb == mb) return i;
    cr_assert_fail("no %s%d on rank %d", act_name(k), mb, r);
    return -1;
}

static void swap(schedule_t* s, int r, int i, int j) {
    action_t t = s->actions[r][i];
    s->actions[r][i] = s->actions[r][j], s->actions[r][j] = t;
}

Test(bad_input, validate_catches_broken_schedules) {
    schedule_t s = make(SCHED_1F1B, 3, 4, 1, NULL);
    // B0 on the last rank moved before its F0.
    swap(&s, 2, find(&s, 2, ACT_F, 0), find(&s, 2, ACT_B, 0));
    expect_invalid(&s, "runs before its forward");
    schedule_free(&s);

    s = make(SCHED_1F1B, 3, 4, 1, NULL);
    // Rank 1's F1 moved before the group that receives its input.
    swap(&s, 1, find(&s, 1, ACT_F, 1), find(&s, 1, ACT_RECV_ACT, 1));
    expect_invalid(&s, "input activation from stage 0");
    schedule_free(&s);

    s = make(SCHED_1F1B, 3, 4, 1, NULL);
    // Two sends to rank 1 swapped: the receives no longer line up.
    swap(&s, 0, find(&s, 0, ACT_SEND_ACT, 0), find(&s, 0, ACT_SEND_ACT, 1));
    expect_invalid(&s, "same order");
    schedule_free(&s);

    s = make(SCHED_1F1B, 3, 4, 1, NULL);
    // The last stage has nobody to receive a gradient from.
    s.actions[2][find(&s, 2, ACT_RECV_ACT, 3)].kind = ACT_RECV_GRAD;
    expect_invalid(&s, "stage 2 has no RECV_GRAD");
    schedule_free(&s);

    s = make(SCHED_1F1B, 3, 4, 1, NULL);
    // A receive dropped from rank 2's list.
    const int i = find(&s, 2, ACT_RECV_ACT, 3);
    memmove(&s.actions[2][i], &s.actions[2][i + 1], (size_t)(s.n_actions[2] - i - 1) * sizeof(action_t));
    s.n_actions[2]--;
    expect_invalid(&s, "rank 1 sends 4 messages to rank 2, which receives 3 from it");
    schedule_free(&s);

    s = make(SCHED_1F1B, 3, 4, 1, NULL);
    s.actions[1][find(&s, 1, ACT_SEND_ACT, 0)].peer = 0;
    expect_invalid(&s, "peer should be rank 2");
    schedule_free(&s);

    s = make(SCHED_ZBH1, 2, 2, 1, NULL);
    s.actions[0][find(&s, 0, ACT_W, 1)].mb = 0;  // two W0, no W1
    expect_invalid(&s, "mb 0: has 1 F, 0 B, 1 BI, 2 W");
    schedule_free(&s);
}

// Hand-written two-rank lists for one micro-batch: fine as one group, a missing input when the
// receive comes after its use, and the classic deadlock when rank 0 waits for the gradient before
// it sends the activation that produces it.
Test(bad_input, validate_catches_a_deadlock) {
    action_t r1[] = {{ACT_RECV_ACT, 0, 0, 0}, {ACT_F, 0, 0, -1}, {ACT_B, 0, 0, -1}, {ACT_SEND_GRAD, 0, 0, 0}};
    action_t ok[] = {{ACT_F, 0, 0, -1}, {ACT_RECV_GRAD, 0, 0, 1}, {ACT_SEND_ACT, 0, 0, 1}, {ACT_B, 0, 0, -1}};
    action_t late[] = {{ACT_F, 0, 0, -1}, {ACT_SEND_ACT, 0, 0, 1}, {ACT_B, 0, 0, -1}, {ACT_RECV_GRAD, 0, 0, 1}};
    action_t dead[] = {{ACT_F, 0, 0, -1}, {ACT_RECV_GRAD, 0, 0, 1}, {ACT_B, 0, 0, -1}, {ACT_SEND_ACT, 0, 0, 1}};
    int n[2] = {4, 4};
    action_t* acts[2] = {ok, r1};
    schedule_t s = {2, 1, 1, SCHED_1F1B, n, acts, 0};
    char err[512] = "";
    cr_assert_eq(schedule_validate(&s, err, sizeof err), 0, "{RG0<1 SA0>1} as one group is fine: %s", err);
    acts[0] = late;
    expect_invalid(&s, "rank 0 action 2 (B0) runs before its output gradient from stage 1 arrived");
    acts[0] = dead;
    expect_invalid(&s, "deadlock: rank 0 waits at action 1 (RG0<1) for rank 1's action 3; "
                       "rank 1 waits at action 0 (RA0<0) for rank 0's action 3;");
}

// ------------------------------------------------------------------ the program

static void expect_prog(const char* args, int status, const char* want) {
    char cmd[1024], out[1 << 16];
    snprintf(cmd, sizeof cmd, "%s/08_pipeline/schedule %s", build_dir(), args);
    const int rc = run_capture(cmd, out, sizeof out);
    cr_assert_eq(rc, status, "`%s` exited %d, expected %d; output:\n%s", cmd, rc, status, out);
    cr_assert(strstr(out, want), "`%s`: output does not contain \"%s\":\n%s", cmd, want, out);
}

Test(program, help_and_bad_flags) {
    expect_prog("--help", 0, "--schedule");
    expect_prog("--help", 0, "gpipe|1f1b|interleaved|zbh1|all");
    expect_prog("--schedule zb", 2, "--schedule: 'zb' is not one of");
    expect_prog("--p 0", 2, "--p 0");
    expect_prog("--m -1", 2, "--m -1");
    expect_prog("--cost-f 0", 2, "--cost-f");
    expect_prog("--schedule zbh1 --cost-w 2", 2, "--cost-w 2");
    expect_prog("--schedule interleaved --m 6", 2, "multiple of p = 4");
    expect_prog("--schedule 1f1b --v 2", 2, "only interleaved");
    expect_prog("--schedule all --csv x.csv", 2, "--csv and --png need one --schedule");
    expect_prog("--bogus 1", 2, "--bogus");
    expect_prog("--png \"it's.png\"", 2, "--png it's.png: the path must not contain a quote");
}

// An output file that cannot exist: one line with the path and the system's reason, exit 2,
// before any work (no file:line, no table printed first).
Test(program, unwritable_outputs_are_one_line) {
    char plain[600], cmd[2048], out[1 << 16];
    snprintf(plain, sizeof plain, "%s/plain08", test_tmpdir());
    FILE* f = fopen(plain, "w");
    cr_assert_not_null(f, "%s", plain);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/08_pipeline/schedule --csv %s/x.csv", build_dir(), plain);
    int st = run_capture(cmd, out, sizeof out);
    ASSERT_REFUSED(st, out, "schedule", "--csv: cannot write", plain, "Not a directory");
    snprintf(cmd, sizeof cmd, "%s/08_pipeline/schedule --png %s/x.png", build_dir(), plain);
    st = run_capture(cmd, out, sizeof out);
    ASSERT_REFUSED(st, out, "schedule", "--png: cannot write", plain, "Not a directory");
}

Test(program, prints_lists_timeline_and_summary) {
    expect_prog("--schedule 1f1b --p 4 --m 8", 0, "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    expect_prog("--schedule 1f1b --p 4 --m 8", 0, "| 1f1b     |   4 |   8 |   1 |       33 |              0.2727 |");
    expect_prog("--schedule zbh1 --p 4 --m 8 --show-comm", 0, "{RA0<2} F0 {RA1<2} BI0 {SG0>2}");
    expect_prog("--schedule all --p 4 --m 6", 0, "## interleaved: skipped: m = 6: interleaved needs m to be a multiple");
    char csv[512], args[1024], path_check[600];
    snprintf(csv, sizeof csv, "%s/prog/tl.csv", test_tmpdir());
    snprintf(args, sizeof args, "--schedule gpipe --p 2 --m 2 --csv %s", csv);
    expect_prog(args, 0, "timeline CSV");
    snprintf(path_check, sizeof path_check, "%s", csv);
    FILE* f = fopen(path_check, "r");
    cr_assert_not_null(f, "no CSV at %s", csv);
    fclose(f);
}
