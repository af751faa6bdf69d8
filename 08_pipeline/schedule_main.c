// Prints a pipeline schedule and what it costs:
//   build/08_pipeline/schedule --schedule 1f1b --p 4 --m 8 --cost-f 1 --cost-b 2
// the action lists (one line per rank), an ASCII timeline, a summary table (makespan, simulated
// bubble, the textbook formula, peak live activations) and a per-rank table; optionally the
// timeline as CSV and PNG. `--schedule all` compares the four schedules in one table.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gnuplot.h"
#include "08_pipeline/simulate.h"
#include "common/check.h"
#include "common/fileio.h"
#include "common/cli.h"
#include "common/table.h"

typedef struct {
    int p, m, v;           // v = 0: 2 for interleaved, 1 otherwise
    double f, b, w, comm;  // B is the full backward; ZB-H1 runs BI = B - W and W
    int eager, show_comm, cols;
    const char *csv, *png, *from_csv, *title;
} opts_t;

// The simulator's costs. BI and W matter for zbh1 only, where check_opts made both > 0.
static sim_costs_t costs_of(const opts_t* o) {
    return (sim_costs_t){o->f, o->b, fmax(o->b - o->w, 0.0), fmax(o->w, 0.0), o->comm, o->eager};
}

// Checks the numbers that cli_parse cannot: one line naming the flag, exit 2.
static void check_opts(const opts_t* o, int any_zb) {
    if (o->p < 1 || o->p > SCHED_MAX_P) fail("--p %d: the number of pipeline ranks must be 1..%d", o->p, SCHED_MAX_P);
    if (o->m < 1) fail("--m %d: the number of micro-batches must be at least 1", o->m);
    if (o->v < 0) fail("--v %d: chunks per rank must be >= 1 (0: 2 for interleaved, 1 otherwise)", o->v);
    if (!(o->f > 0)) fail("--cost-f %g: the forward's cost must be > 0", o->f);
    if (!(o->b > 0)) fail("--cost-b %g: the backward's cost must be > 0", o->b);
    if (!(o->comm >= 0)) fail("--comm %g: the latency per message must be >= 0", o->comm);
    if (o->cols < 10) fail("--cols %d: the timeline needs at least 10 columns", o->cols);
    // ZB-H1 splits B into BI = B - W and W; both halves must take time.
    if (any_zb && !(o->w > 0 && o->w < o->b))
        fail("--cost-w %g: zbh1 splits --cost-b %g into BI = B - W and W, so W must be > 0 and < %g", o->w, o->b, o->b);
}

static void print_rank_table(const schedule_t* s, const sim_result_t* res) {
    const char* h[] = {"rank", "busy", "idle", "idle %", "peak live (mb·chunks)"};
    table_t* t = table_new("per rank", 5, h);
    for (int r = 0; r < s->p; r++) {
        const double idle = res->makespan - res->busy[r];
        table_row(t);
        table_cell(t, "%d", r), table_cell(t, "%g", res->busy[r]), table_cell(t, "%g", idle);
        table_cell(t, "%.1f", res->makespan > 0 ? 100.0 * idle / res->makespan : 0.0);
        table_cell(t, "%d", res->peak_live[r]);
    }
    table_print_md(t, stdout);
    table_free(t);
}

// Builds, simulates (both send models for the table) and prints one schedule; adds its row to
// `sum`. Returns 0, or -1 if the schedule cannot be built with these numbers (err says why).
static int run_one(sched_kind_t kind, const opts_t* o, table_t* sum, int rank_table, char* err, size_t errlen) {
    const int v = o->v ? o->v : (kind == SCHED_INTERLEAVED ? 2 : 1);
    // The flags give the costs of one micro-batch through one rank's layers; a chunk holds 1/v
    // of them, so interleaved runs v times as many actions, each 1/v as long.
    sim_costs_t c = costs_of(o);
    c.f /= v, c.b /= v, c.bi /= v, c.w /= v;
    const sched_costs_t plan = {c.f, c.b, c.bi, c.w};
    schedule_t s;
    if (schedule_make_planned(kind, o->p, o->m, v, &plan, &s, err, errlen) != 0) return -1;
    sim_result_t res, other;
    sim_costs_t c_other = c;
    c_other.eager = !c.eager;
    if (sim_run(&s, &c, &res, err, errlen) != 0 || sim_run(&s, &c_other, &other, err, errlen) != 0)
        DIE("%s p %d m %d v %d: the generated schedule does not run: %s", sched_name(kind), o->p, o->m, v, err);
    const sim_result_t* rdv = c.eager ? &other : &res;
    const sim_result_t* eag = c.eager ? &res : &other;

    printf("\n## %s: p = %d, m = %d, v = %d\n\n", sched_name(kind), o->p, o->m, v);
    printf("Action lists (compute only; ZB: BI input gradient, W weight gradient):\n\n");
    schedule_print(&s, 0, stdout);
    if (o->show_comm) {
        printf("\nWith communication ({...} = one group: post together, finish before the next compute;\n"
               "SA/RA send/receive activation, SG/RG gradient, >r to rank r, <r from rank r):\n\n");
        schedule_print(&s, 1, stdout);
    }
    printf("\nTimeline (%s sends):\n\n", c.eager ? "eager" : "rendezvous");
    sim_print_timeline(&s, &res, &c, o->cols, stdout);
    printf("\n");
    if (rank_table) print_rank_table(&s, &res);

    int peak0 = res.peak_live[0], peak = 0;
    for (int r = 0; r < s.p; r++) peak = res.peak_live[r] > peak ? res.peak_live[r] : peak;
    const double formula = sim_formula_bubble(&s, &c);
    table_row(sum);
    table_cell(sum, "%s", sched_name(kind)), table_cell(sum, "%d", s.p), table_cell(sum, "%d", s.m);
    table_cell(sum, "%d", s.v), table_cell(sum, "%g", res.makespan);
    table_cell(sum, "%.4f", rdv->bubble), table_cell(sum, "%.4f", eag->bubble);
    if (isnan(formula)) table_cell(sum, "n/a");
    else table_cell(sum, "%.4f", formula);
    table_cell(sum, "%d", peak0), table_cell(sum, "%d", peak), table_cell(sum, "%.2f", (double)peak / s.v);
    table_cell(sum, "%ld", schedule_messages(&s));

    if (o->csv[0] && sim_write_csv(&s, &res, o->csv, err, errlen) != 0) fail("--csv: %s", err);
    if (o->csv[0]) printf("timeline CSV: %s\n", o->csv);
    if (o->png[0]) {
        char title[128];
        snprintf(title, sizeof title, "%s, p = %d, m = %d, v = %d (%s sends)", sched_name(kind), s.p, s.m, s.v,
                 c.eager ? "eager" : "rendezvous");
        if (!gnuplot_available()) printf("note: no PNG written: gnuplot is not installed\n");
        else if (sim_plot_png(&s, &res, o->png, title, err, errlen) != 0) DIE("--png: %s", err);
        else printf("timeline PNG: %s\n", o->png);
    }
    sim_result_free(&res), sim_result_free(&other);
    schedule_free(&s);
    return 0;
}

// --from-csv: a measured timeline (pp_train --timeline's CSV, written on a GPU machine that has
// no gnuplot) drawn here, with its makespan and bubble.
static int replot(const opts_t* o) {
    if (!o->png[0]) fail("--from-csv needs --png (where to draw it)");
    if (strchr(o->png, '\'') || strchr(o->png, '\n') || strchr(o->title, '\'') || strchr(o->title, '\n'))
        fail("--png and --title must not contain a quote or a newline");
    char err[512];
    schedule_t s;
    sim_result_t res;
    if (sim_read_csv(o->from_csv, &s, &res, err, sizeof err) != 0) fail("--from-csv: %s", err);
    printf("%s: p %d, m %d, v %d, makespan %.3f, bubble %.3f\n", o->from_csv, s.p, s.m, s.v, res.makespan, res.bubble);
    if (!gnuplot_available()) fail("--png %s: gnuplot is not installed (scripts/setup.sh installs it)", o->png);
    if (sim_plot_png_x(&s, &res, o->png, o->title[0] ? o->title : o->from_csv, "time (ms)", err, sizeof err) != 0)
        fail("--png: %s", err);
    printf("timeline PNG: %s\n", o->png);
    sim_result_free(&res), schedule_free(&s);
    return 0;
}

int main(int argc, char** argv) {
    opts_t o;
    const char *sched = NULL, *model = NULL;
    cli_opt_t opts[] = {
        {"schedule", CLI_CHOICE, &sched, "1f1b", "pipeline schedule (all: the four side by side)", SCHED_CHOICES "|all"},
        {"p", CLI_INT, &o.p, "4", "pipeline ranks", NULL},
        {"m", CLI_INT, &o.m, "8", "micro-batches per step", NULL},
        {"v", CLI_INT, &o.v, "0", "model chunks per rank (interleaved only; 0: 2 for interleaved, 1 otherwise)", NULL},
        {"cost-f", CLI_DOUBLE, &o.f, "1", "cost of one forward through a rank's layers (a chunk: 1/v of it)", NULL},
        {"cost-b", CLI_DOUBLE, &o.b, "2", "cost of one full backward", NULL},
        {"cost-w", CLI_DOUBLE, &o.w, "1", "zbh1: the weight-gradient part W of the backward (BI = B - W)", NULL},
        {"comm", CLI_DOUBLE, &o.comm, "0", "latency of one message", NULL},
        {"sends", CLI_CHOICE, &model, "rendezvous",
         "timeline's send model: rendezvous (a send waits for its receive) or eager (buffered)", "rendezvous|eager"},
        {"show-comm", CLI_FLAG, &o.show_comm, "0", "also print the lists with their communication groups", NULL},
        {"cols", CLI_INT, &o.cols, "120", "widest ASCII timeline, in columns", NULL},
        {"csv", CLI_STR, &o.csv, "", "write the timeline (start and end of every action) as CSV", NULL},
        {"png", CLI_STR, &o.png, "", "draw the timeline as PNG (needs gnuplot)", NULL},
        {"from-csv", CLI_STR, &o.from_csv, "",
         "draw a timeline CSV written elsewhere (this program's --csv, or pp_train --timeline on a GPU machine without "
         "gnuplot) as --png; times in ms; the other flags are ignored", NULL},
        {"title", CLI_STR, &o.title, "", "--from-csv: the plot's title (default: the CSV's name)", NULL},
    };
    cli_parse(argc, argv, "Generate a pipeline-parallel schedule, print its action lists and simulate it.", opts,
              CLI_COUNT(opts));
    if (o.from_csv[0]) return replot(&o);
    o.eager = strcmp(model, "eager") == 0;
    const int all = strcmp(sched, "all") == 0;
    sched_kind_t kind = SCHED_1F1B;
    if (!all && sched_parse(sched, &kind) != 0) fail("--schedule %s: not one of %s|all", sched, SCHED_CHOICES);
    check_opts(&o, all || kind == SCHED_ZBH1);
    if (all && (o.csv[0] || o.png[0])) fail("--csv and --png need one --schedule, not all");
    // gnuplot's quoted strings have no escapes: refuse such a path before doing any work.
    if (strchr(o.png, '\'') || strchr(o.png, '\n')) fail("--png %s: the path must not contain a quote or a newline", o.png);
    {  // the output files, checked before any work (their directories are created if missing)
        char why[1024];
        if (o.csv[0] && file_check_writable(o.csv, 1, why, sizeof why) != 0) fail("--csv: %s", why);
        if (o.png[0] && file_check_writable(o.png, 1, why, sizeof why) != 0) fail("--png: %s", why);
    }
    if (all && o.v == 1) fail("--v 1: interleaved needs v >= 2 (with --schedule all, --v applies to interleaved only)");

    printf("# costs: F %g, B %g (zbh1: BI %g + W %g), comm %g per message; groups planned with these costs\n",
           o.f, o.b, o.b - o.w, o.w, o.comm);
    const char* h[] = {"schedule", "p", "m", "v", "makespan", "bubble (rendezvous)", "bubble (eager)",
                       "bubble (formula)", "peak live rank 0", "peak live max", "peak / v", "messages"};
    table_t* sum = table_new("summary", 12, h);
    char err[512];
    for (int k = 0; k < SCHED_NKINDS; k++) {
        if (!all && k != (int)kind) continue;
        // Only interleaved takes --v; for `all` it applies to interleaved alone.
        opts_t ok = o;
        if (all && k != SCHED_INTERLEAVED) ok.v = 1;
        if (run_one((sched_kind_t)k, &ok, sum, !all, err, sizeof err) == 0) continue;
        if (!all) fail("--schedule %s --p %d --m %d --v %d: %s", sched, o.p, o.m, o.v, err);
        printf("\n## %s: skipped: %s\n", sched_name((sched_kind_t)k), err);
    }
    printf("\n");
    table_print_md(sum, stdout);
    printf("\nbubble = (p·makespan - Σ busy) / (p·makespan); peak live counts micro-batch·chunks holding "
           "activations (F until B, or until W for zbh1); messages = sends in one step.\n");
    table_free(sum);
    return 0;
}
