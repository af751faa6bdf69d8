// The active-memory timeline (memtrace.h): every mem_alloc/mem_free on one device becomes a
// row (host time, live bytes in total and per tag, current phase label), drawn from the
// allocator's observer hook. This is what PyTorch's memory snapshot shows, without PyTorch:
// parameters and optimizer state as a flat floor, activations rising through the forward
// pass and falling through the backward, gradients appearing during the backward.
#include "common/memtrace.h"
#include "common/gnuplot.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/fileio.h"
#include "common/timer.h"

typedef enum { EV_START, EV_ALLOC, EV_FREE, EV_MARK, EV_STOP } ev_kind_t;
static const char* const EV_NAME[] = {"start", "alloc", "free", "mark", "stop"};

typedef struct {
    double t;                   // seconds since memtrace_start (host clock)
    ev_kind_t kind;
    int label;                  // index into g_labels: the phase current at this event
    size_t live;                // bytes live on the device after the event
    size_t by_tag[MEM_NTAGS];   // the same, per tag
} mev_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mev_t* g_ev;             // [g_n]
static size_t g_n, g_cap;
static char** g_labels;         // [g_nlabels]; 0 is "" (before the first mark)
static int g_nlabels, g_labels_cap;
static int g_cur_label;
static device_t g_dev;
static int g_on;
static double g_t0;
static size_t g_live, g_by_tag[MEM_NTAGS], g_peak;

static void push_locked(ev_kind_t kind) {
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 4096;
        mev_t* p = realloc(g_ev, cap * sizeof(mev_t));
        if (!p) DIE("memtrace: out of host memory for %zu events", cap);
        g_ev = p;
        g_cap = cap;
    }
    mev_t* e = &g_ev[g_n++];
    e->t = time_now_s() - g_t0;
    e->kind = kind;
    e->label = g_cur_label;
    e->live = g_live;
    memcpy(e->by_tag, g_by_tag, sizeof g_by_tag);
    if (g_live > g_peak) g_peak = g_live;
}

static int label_locked(const char* s) {
    for (int i = 0; i < g_nlabels; i++)
        if (strcmp(g_labels[i], s) == 0) return i;
    if (g_nlabels == g_labels_cap) {
        int cap = g_labels_cap ? 2 * g_labels_cap : 16;
        char** p = realloc(g_labels, (size_t)cap * sizeof(char*));
        if (!p) DIE("memtrace: out of host memory");
        g_labels = p;
        g_labels_cap = cap;
    }
    g_labels[g_nlabels] = strdup(s);
    if (!g_labels[g_nlabels]) DIE("memtrace: out of host memory");
    return g_nlabels++;
}

static void observer(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live_after) {
    (void)ctx;
    if (dev != g_dev || (int)tag < 0 || tag >= MEM_NTAGS) return;
    pthread_mutex_lock(&g_lock);
    if (g_on) {
        // Keep our own per-tag counts (the observer gives only the delta), and take the
        // allocator's total as the truth for the device's live bytes.
        if (delta < 0 && (size_t)(-delta) > g_by_tag[tag]) g_by_tag[tag] = 0;
        else g_by_tag[tag] = (size_t)((long long)g_by_tag[tag] + delta);
        g_live = live_after;
        push_locked(delta >= 0 ? EV_ALLOC : EV_FREE);
    }
    pthread_mutex_unlock(&g_lock);
}

void memtrace_start(device_t dev) {
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_nlabels; i++) free(g_labels[i]);
    g_nlabels = 0;
    g_n = 0;
    g_cur_label = label_locked("");
    g_dev = dev;
    g_t0 = time_now_s();
    // What is already live (parameters allocated before the trace, say) is the floor.
    mem_stats_t s = mem_stats(dev);
    g_live = s.live;
    memcpy(g_by_tag, s.live_by_tag, sizeof g_by_tag);
    g_peak = g_live;
    g_on = 1;
    push_locked(EV_START);
    pthread_mutex_unlock(&g_lock);
    mem_set_observer(observer, NULL);
}

void memtrace_mark(const char* label) {
    pthread_mutex_lock(&g_lock);
    if (g_on) {
        g_cur_label = label_locked(label ? label : "");
        push_locked(EV_MARK);
    }
    pthread_mutex_unlock(&g_lock);
}

void memtrace_stop(void) {
    mem_set_observer(NULL, NULL);
    pthread_mutex_lock(&g_lock);
    if (g_on) push_locked(EV_STOP);
    g_on = 0;
    pthread_mutex_unlock(&g_lock);
}

size_t memtrace_n_events(void) { return g_n; }
size_t memtrace_peak_bytes(void) { return g_peak; }

int memtrace_write_csv(const char* path) {
    if (mkdir_parent(path) != 0) return -1;
    FILE* f = afile_open(path);
    if (!f) return -1;
    pthread_mutex_lock(&g_lock);
    fprintf(f, "event,time_s,kind,label,live_bytes");
    for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, ",%s", mem_tag_name((mem_tag_t)t));
    fprintf(f, "\n");
    for (size_t i = 0; i < g_n; i++) {
        const mev_t* e = &g_ev[i];
        // labels come from our own code ("forward", "step 3/backward"): no commas expected,
        // but a stray one would shift every column, so it is replaced.
        char lab[64];
        snprintf(lab, sizeof lab, "%s", g_labels[e->label]);
        for (char* c = lab; *c; c++)
            if (*c == ',' || *c == '\n' || *c == '"') *c = ';';
        fprintf(f, "%zu,%.6f,%s,%s,%zu", i, e->t, EV_NAME[e->kind], lab, e->live);
        for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, ",%zu", e->by_tag[t]);
        fprintf(f, "\n");
    }
    pthread_mutex_unlock(&g_lock);
    return afile_commit(f);
}

// ---- the plot ----

// A string between gnuplot's single quotes, which have one escape: '' for '.
static void gp_quoted(FILE* gp, const char* s) {
    fputc('\'', gp);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', gp);
        fputc(*s, gp);
    }
    fputc('\'', gp);
}

// Writes the gnuplot commands for `term` into `gp` (tag columns are 6.. of the CSV).
static void gp_script(FILE* gp, const char* term, const char* csv, const char* out, const char* title,
                      double* mark_t, char (*mark_l)[32], int nmarks) {
    fprintf(gp, "set terminal %s size 1100,600\n", term);
    fprintf(gp, "set output "), gp_quoted(gp, out), fputc('\n', gp);
    fprintf(gp, "set datafile separator ','\n");
    // noenhanced: an underscore in a title is an underscore, not a subscript.
    fprintf(gp, "set title "), gp_quoted(gp, title), fprintf(gp, " noenhanced\n");
    fprintf(gp, "set xlabel 'host time since start (s)'\nset ylabel 'live memory (GiB)'\n");
    fprintf(gp, "set key outside right top\nset grid ytics front\nset yrange [0:*]\nset datafile columnheaders\n");
    for (int i = 0; i < nmarks; i++) {
        fprintf(gp, "set arrow from %.6f, graph 0 to %.6f, graph 1 nohead dt 2 lc rgb '#888888'\n",
                mark_t[i], mark_t[i]);
        fprintf(gp, "set label "), gp_quoted(gp, mark_l[i]);
        fprintf(gp, " at %.6f, graph 0.01 rotate by 90 left font ',8' tc rgb '#333333' front noenhanced\n", mark_t[i]);
    }
    static const char* colors[MEM_NTAGS] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#bab0ac"};
    // Stacked steps: the memory between two events is constant, so each band is drawn as a
    // step curve of its cumulative sum, filled down to zero, topmost band first so that the
    // lower ones paint over it.
    fprintf(gp, "G = 1024.0**3\nplot ");
    for (int t = MEM_NTAGS - 1; t >= 0; t--) {
        if (t != MEM_NTAGS - 1) fprintf(gp, ", \\\n     ");
        gp_quoted(gp, csv);
        fprintf(gp, " using 2:((0");
        for (int u = 0; u <= t; u++) fprintf(gp, "+$%d", 6 + u);
        fprintf(gp, ")/G) with fillsteps fs solid 1.0 noborder lc rgb '%s' title '%s'", colors[t],
                mem_tag_name((mem_tag_t)t));
    }
    fprintf(gp, ", \\\n     "), gp_quoted(gp, csv);
    fprintf(gp, " using 2:($5/G) with steps lw 1 lc rgb 'black' title 'total'\n");
    fprintf(gp, "set output\n");
}

// Is `s` a whole number (what strtod reads, nothing after it)?
static int is_number(const char* s) {
    char* end;
    if (!*s) return 0;
    strtod(s, &end);
    return *end == '\0';
}

// Reads the CSV: every data row must have the 11 columns with numbers where numbers belong.
// Collects the phase markers. 0, or -1 with "csv line N: ..." in err.
static int read_timeline(const char* csv, double* mark_t, char (*mark_l)[32], int maxm, int* nm, char* err,
                         size_t errlen) {
    FILE* in = fopen(csv, "r");
    if (!in) return set_err(err, errlen, "cannot open %s: %s", csv, strerror(errno));
    char line[1024];
    int lineno = 0, rows = 0, rc = 0;
    *nm = 0;
    while (rc == 0 && fgets(line, sizeof line, in)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (lineno == 1) {
            if (strncmp(line, "event,time_s,kind,label,live_bytes", 34) != 0)
                rc = set_err(err, errlen, "%s is not a memory timeline (the header should start "
                             "event,time_s,kind,label,live_bytes)", csv);
            continue;
        }
        if (!line[0]) continue;
        char* f[16];
        int nf = 0;
        for (char* p = line; nf < 16;) {
            f[nf++] = p;
            char* c = strchr(p, ',');
            if (!c) break;
            *c = '\0';
            p = c + 1;
        }
        if (nf != 5 + MEM_NTAGS) {
            rc = set_err(err, errlen, "%s line %d: %d columns, expected %d", csv, lineno, nf, 5 + MEM_NTAGS);
            break;
        }
        static const char* const names[] = {"time_s", "live_bytes"};
        const int numeric[] = {1, 4};
        for (int k = 0; k < 2 && rc == 0; k++)
            if (!is_number(f[numeric[k]]))
                rc = set_err(err, errlen, "%s line %d: %s '%s' is not a number", csv, lineno, names[k], f[numeric[k]]);
        for (int k = 5; k < nf && rc == 0; k++)
            if (!is_number(f[k]))
                rc = set_err(err, errlen, "%s line %d: %s '%s' is not a number", csv, lineno,
                             mem_tag_name((mem_tag_t)(k - 5)), f[k]);
        if (rc) break;
        rows++;
        if (strcmp(f[2], "mark") == 0 && f[3][0] && *nm < maxm && !strchr(f[3], '\n')) {
            mark_t[*nm] = strtod(f[1], NULL);
            snprintf(mark_l[*nm], sizeof mark_l[*nm], "%s", f[3]);
            (*nm)++;
        }
    }
    fclose(in);
    if (rc == 0 && lineno == 0) rc = set_err(err, errlen, "%s is empty", csv);
    if (rc == 0 && rows == 0) rc = set_err(err, errlen, "%s has no data rows (only a header)", csv);
    return rc;
}

// gnuplot's own complaint, from its captured stderr: the lines that say what went wrong
// ("line 0: cannot open file; output not changed", "system error: ..."), joined.

// gnuplot_png's script callback: the timeline's script with its marks.
typedef struct {
    const char* csv;
    const char* title;
    double* mark_t;
    char (*mark_l)[32];
    int nm;
} plot_ctx_t;

static void plot_script(FILE* gp, const char* term, const char* out, void* ctx) {
    const plot_ctx_t* c = ctx;
    gp_script(gp, term, c->csv, out, c->title, c->mark_t, c->mark_l, c->nm);
}

int memtrace_plot_png(const char* csv, const char* png, const char* title, char* err, size_t errlen) {
    if (!csv || !png || !title) return set_err(err, errlen, "no CSV, PNG or title given");
    if (strchr(csv, '\n') || strchr(png, '\n') || strchr(title, '\n'))
        return set_err(err, errlen, "a path or the title contains a newline (gnuplot takes one line each)");
    // Phase markers from the CSV itself, so a CSV from an earlier run plots the same.
    enum { MAXM = 64 };
    double mark_t[MAXM];
    char mark_l[MAXM][32];
    int nm = 0;
    if (read_timeline(csv, mark_t, mark_l, MAXM, &nm, err, errlen) != 0) return -1;
    plot_ctx_t pc = {csv, title, mark_t, mark_l, nm};
    return gnuplot_png(png, plot_script, &pc, err, errlen);
}
