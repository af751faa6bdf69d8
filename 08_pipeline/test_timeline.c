// pp_train --timeline: the last step's measured timeline (every action's start and end from the
// CPU executor, on the node's shared CLOCK_MONOTONIC) beside the simulated one, as CSV and PNG.
// The measured CSV must hold one row per action of every rank, in list order, with
// start <= end, the compute actions of a rank one after another, and causality across ranks:
// F(mb) on stage s+1 starts after F(mb) on stage s ended (and B(mb) on stage s after B/BI(mb)
// on stage s+1) — which only a clock shared by the processes can show.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "08_pipeline/schedule.h"
#include "08_pipeline/simulate.h"
#include "common/gnuplot.h"
#include "tests/harness.h"

static char g_out[1 << 17];

typedef struct {
    int rank, index, mb, chunk, peer;
    char action[16];
    double start, end;
} row_t;

// Reads a timeline CSV (sim_write_csv's columns). Returns the number of rows (rows malloc'd).
static int read_csv(const char* path, row_t** rows) {
    FILE* f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_str_eq(line, "rank,index,action,mb,chunk,peer,start,end\n");
    int n = 0, cap = 256;
    row_t* r = malloc((size_t)cap * sizeof *r);
    while (fgets(line, sizeof line, f)) {
        if (n == cap) r = realloc(r, (size_t)(cap *= 2) * sizeof *r);
        row_t* x = &r[n];
        char* tok = strtok(line, ",");
        x->rank = atoi(tok);
        x->index = atoi(strtok(NULL, ","));
        snprintf(x->action, sizeof x->action, "%s", strtok(NULL, ","));
        x->mb = atoi(strtok(NULL, ","));
        x->chunk = atoi(strtok(NULL, ","));
        x->peer = atoi(strtok(NULL, ","));
        x->start = atof(strtok(NULL, ","));
        x->end = atof(strtok(NULL, ","));
        n++;
    }
    fclose(f);
    *rows = r;
    return n;
}

static int is_compute(const char* a) { return !strcmp(a, "F") || !strcmp(a, "B") || !strcmp(a, "BI") || !strcmp(a, "W"); }

// The end (or start) of compute `kind` of (stage, mb); fails if there is none.
static const row_t* find(const row_t* r, int n, int p, const char* kind, int stage, int mb) {
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].action, kind) && r[i].mb == mb && r[i].chunk * p + r[i].rank == stage) return &r[i];
    return NULL;
}

// Every check on one CSV of schedule s (the kind, p, m, v pp_train ran: its lists were planned
// again with the measured costs, which can move sends, receives and ZB-H1's W passes but not
// change how many actions each rank has).
static void check_csv(const char* path, const schedule_t* s, const char* what) {
    row_t* r;
    const int n = read_csv(path, &r);
    const int p = s->p, S = p * s->v;
    long want = 0;
    for (int q = 0; q < p; q++) want += s->n_actions[q];
    cr_assert_eq(n, want, "%s: %d rows for %ld actions", what, n, want);
    // One row per action of every rank, in list order; start <= end; computes one after another.
    int k = 0;
    for (int q = 0; q < p; q++) {
        double last_end = -INFINITY;
        int nc = 0;
        for (int i = 0; i < s->n_actions[q]; i++, k++) {
            const row_t* x = &r[k];
            cr_assert(x->rank == q && x->index == i, "%s: row %d is rank %d action %d, expected rank %d action %d", what, k,
                      x->rank, x->index, q, i);
            cr_assert(x->start >= 0 && x->start <= x->end, "%s: rank %d action %d: %g .. %g", what, q, i, x->start, x->end);
            if (!is_compute(x->action)) continue;
            cr_assert(x->start >= last_end - 1e-9, "%s: rank %d: compute action %d starts at %g, before the previous ended (%g)",
                      what, q, i, x->start, last_end);
            last_end = x->end;
            nc++;
        }
        cr_assert(nc > 0);
    }
    // Causality across ranks.
    const int split = s->kind == SCHED_ZBH1;
    for (int st = 0; st + 1 < S; st++)
        for (int mb = 0; mb < s->m; mb++) {
            const row_t* a = find(r, n, p, "F", st, mb);
            const row_t* b = find(r, n, p, "F", st + 1, mb);
            cr_assert(a && b, "%s: F%d of stage %d or %d missing", what, mb, st, st + 1);
            cr_assert(b->start >= a->end - 1e-9, "%s: F%d on stage %d starts at %g, before it ended on stage %d at %g", what,
                      mb, st + 1, b->start, st, a->end);
            const row_t* ga = find(r, n, p, split ? "BI" : "B", st + 1, mb);
            const row_t* gb = find(r, n, p, split ? "BI" : "B", st, mb);
            cr_assert(ga && gb, "%s: backward %d of stage %d or %d missing", what, mb, st, st + 1);
            cr_assert(gb->start >= ga->end - 1e-9, "%s: backward %d on stage %d starts at %g, before it ended on stage %d at %g",
                      what, mb, st, gb->start, st + 1, ga->end);
        }
    free(r);
}

static void one_run(int np, const char* sched, int m, int v, int layers) {
    char prefix[512], cmd[2048];
    snprintf(prefix, sizeof prefix, "%s/%s_p%d", test_tmpdir(), sched, np);
    snprintf(cmd, sizeof cmd,
             "MPIRUN_TIMEOUT=60 scripts/mpirun.sh %d %s/08_pipeline/pp_train --layers %d --context 8 --batch %d "
             "--micro-batches %d --schedule %s --chunks %d --steps 2 --timeline %s 2>&1",
             np, build_dir(), layers, m, m, sched, v, prefix);
    const int st = run_capture(cmd, g_out, sizeof g_out);
    cr_assert_eq(st, 0, "%s: exit %d:\n%s", cmd, st, g_out);
    cr_assert(strstr(g_out, "# timeline, measured (") && strstr(g_out, "# timeline, simulated ("), "%s", g_out);
    sched_kind_t kind;
    cr_assert_eq(sched_parse(sched, &kind), 0);
    schedule_t s;
    char err[256];
    cr_assert_eq(schedule_make(kind, np, m, v, &s, err, sizeof err), 0, "%s", err);
    const char* names[2] = {"measured", "simulated"};
    for (int k = 0; k < 2; k++) {
        char path[600], what[128];
        snprintf(path, sizeof path, "%s_%s.csv", prefix, names[k]);
        snprintf(what, sizeof what, "%s p %d, %s", sched, np, names[k]);
        check_csv(path, &s, what);
        snprintf(path, sizeof path, "%s_%s.png", prefix, names[k]);
        struct stat sb;
        if (gnuplot_available())
            cr_assert(stat(path, &sb) == 0 && sb.st_size > 1000, "%s: no PNG %s:\n%s", what, path, g_out);
    }
    schedule_free(&s);
}

Test(timeline, two_ranks_every_cpu_schedule, .timeout = 120) {
    one_run(2, "gpipe", 4, 1, 4);
    one_run(2, "1f1b", 4, 1, 4);
    one_run(2, "interleaved", 4, 2, 4);
    one_run(2, "zbh1", 4, 1, 4);
}

Test(timeline, three_ranks, .timeout = 120) {
    one_run(3, "1f1b", 4, 1, 6);
    one_run(3, "interleaved", 3, 2, 6);
    one_run(3, "zbh1", 4, 1, 6);
}

// The PNGs (one_run checks they exist whenever gnuplot is there): real PNG files.
Test(timeline, the_pngs, .timeout = 60) {
    if (!gnuplot_available()) cr_skip_test("gnuplot is not on the PATH: no PNGs are drawn (the CSVs are still checked)");
    one_run(2, "1f1b", 4, 1, 4);
    const char* names[2] = {"measured", "simulated"};
    for (int k = 0; k < 2; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/1f1b_p2_%s.png", test_tmpdir(), names[k]);
        FILE* f = fopen(path, "rb");
        cr_assert_not_null(f, "no %s", path);
        unsigned char magic[8] = {0};
        cr_assert_eq(fread(magic, 1, 8, f), 8);
        fclose(f);
        cr_assert(!memcmp(magic, "\x89PNG\r\n\x1a\n", 8), "%s is not a PNG", path);
    }
    cr_assert(strstr(g_out, "timeline: wrote "), "%s", g_out);
}

// A bad PREFIX: exit 2 with one line, before any work (so also outside mpirun, world 1).
Test(timeline, bad_prefix_one_line_exit_2) {
    char bad_dir[600], trailing[600];
    snprintf(bad_dir, sizeof bad_dir, "%s/no/such/dir/run", test_tmpdir());
    snprintf(trailing, sizeof trailing, "%s/", test_tmpdir());
    struct {
        const char* prefix;
        const char* want;
    } cases[] = {
        {bad_dir, "no/such/dir: No such file or directory"},
        {"/tmp/it's", "contains a quote"},
        {"/tmp/a\\\"b", "contains a quote"},
        {trailing, "ends with '/'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char cmd[2048];
        // Alone: exactly one line.
        snprintf(cmd, sizeof cmd, "%s/08_pipeline/pp_train --layers 4 --timeline \"%s\" 2>&1", build_dir(), cases[k].prefix);
        int st = run_capture(cmd, g_out, sizeof g_out);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cmd, st, g_out);
        cr_assert(strstr(g_out, "pp_train: error: --timeline: ") && strstr(g_out, cases[k].want), "%s:\n%s", cmd, g_out);
        int lines = 0;
        for (const char* c = g_out; *c; c++) lines += *c == '\n';
        cr_assert_eq(lines, 1, "%s: %d lines:\n%s", cmd, lines, g_out);
        // Under mpirun: the one line once (rank 0), exit 2, nothing run.
        snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=60 scripts/mpirun.sh 2 %s/08_pipeline/pp_train --layers 4 --timeline \"%s\" 2>&1",
                 build_dir(), cases[k].prefix);
        st = run_capture(cmd, g_out, sizeof g_out);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cmd, st, g_out);
        const char* e = strstr(g_out, "pp_train: error: --timeline: ");
        cr_assert(e && !strstr(e + 1, "pp_train: error:"), "%s:\n%s", cmd, g_out);
        cr_assert(!strstr(g_out, "step "), "%s: it ran:\n%s", cmd, g_out);
    }
}

// sim_read_csv is sim_write_csv's inverse: every schedule's simulated timeline written and read
// back gives the same lists, times (to the 9 digits written), makespan, bubble and peak live.
Test(timeline, csv_round_trip_every_schedule) {
    const sched_kind_t kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1};
    sim_costs_t c = sim_unit_costs();
    c.b = 2;
    for (int k = 0; k < 4; k++) {
        schedule_t s, t;
        sim_result_t a, b;
        char err[512], path[600];
        cr_assert_eq(schedule_make(kinds[k], 3, 6, kinds[k] == SCHED_INTERLEAVED ? 2 : 1, &s, err, sizeof err), 0, "%s", err);
        cr_assert_eq(sim_run(&s, &c, &a, err, sizeof err), 0, "%s", err);
        snprintf(path, sizeof path, "%s/rt_%s.csv", test_tmpdir(), sched_name(kinds[k]));
        cr_assert_eq(sim_write_csv(&s, &a, path, err, sizeof err), 0, "%s", err);
        cr_assert_eq(sim_read_csv(path, &t, &b, err, sizeof err), 0, "%s", err);
        cr_assert_eq(t.p, s.p);
        cr_assert_eq(t.m, s.m);
        cr_assert_eq(t.v, s.v);
        for (int r = 0; r < s.p; r++) {
            cr_assert_eq(t.n_actions[r], s.n_actions[r], "%s rank %d", sched_name(kinds[k]), r);
            for (int i = 0; i < s.n_actions[r]; i++) {
                cr_assert(!memcmp(&t.actions[r][i], &s.actions[r][i], sizeof(action_t)), "%s rank %d action %d",
                          sched_name(kinds[k]), r, i);
                cr_assert_float_eq(b.start[r][i], a.start[r][i], 1e-9);
                cr_assert_float_eq(b.end[r][i], a.end[r][i], 1e-9);
            }
            cr_assert_eq(b.peak_live[r], a.peak_live[r]);
        }
        cr_assert_float_eq(b.makespan, a.makespan, 1e-9);
        cr_assert_float_eq(b.bubble, a.bubble, 1e-9, "%s: read %g, simulated %g", sched_name(kinds[k]), b.bubble, a.bubble);
        sim_result_free(&a), sim_result_free(&b), schedule_free(&s), schedule_free(&t);
    }
}

// schedule --from-csv: a file that is not a timeline, or a row out of order, is one line, exit 2.
Test(timeline, from_csv_refuses_bad_files) {
    char bad[600], gap[600], cmd[2048];
    snprintf(bad, sizeof bad, "%s/not_a_timeline.csv", test_tmpdir());
    snprintf(gap, sizeof gap, "%s/gap.csv", test_tmpdir());
    FILE* f = fopen(bad, "w");
    fputs("a,b,c\n1,2,3\n", f);
    fclose(f);
    f = fopen(gap, "w");
    fputs("rank,index,action,mb,chunk,peer,start,end\n0,0,F,0,0,-1,0,1\n0,2,B,0,0,-1,1,3\n", f);
    fclose(f);
    const char* files[2] = {bad, gap};
    const char* want[2] = {"not a timeline CSV", "line 3: expected rank"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s/08_pipeline/schedule --from-csv %s --png %s/x.png 2>&1", build_dir(), files[k],
                 test_tmpdir());
        cr_assert_eq(run_capture(cmd, g_out, sizeof g_out), 2, "%s", g_out);
        cr_assert(strstr(g_out, want[k]), "%s", g_out);
        cr_assert_eq(strchr(g_out, '\n'), g_out + strlen(g_out) - 1, "one line: %s", g_out);
    }
    snprintf(cmd, sizeof cmd, "%s/08_pipeline/schedule --from-csv %s 2>&1", build_dir(), bad);
    cr_assert_eq(run_capture(cmd, g_out, sizeof g_out), 2, "%s", g_out);
    cr_assert(strstr(g_out, "--from-csv needs --png"), "%s", g_out);
}
