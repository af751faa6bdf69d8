// profiler_plot_timeline (profiler.h): the per-stream kernel timeline drawn with gnuplot — the
// picture Nsight Systems would show of a step: which stream runs what, when, and where the
// NCCL kernels overlap the compute kernels. Reads the CSV of profiler_write_timeline_csv.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/gnuplot.h"
#include "common/profiler.h"

typedef struct {
    unsigned* stream;  // [n]
    double *t0, *t1;   // [n] ms
    char* nccl;        // [n] 1 if an NCCL kernel
    int n;
    unsigned rows[64];  // stream id of each row (first 64 streams seen, sorted)
    int nrows;
    const char* title;
} tl_t;

static int row_of(const tl_t* t, unsigned stream) {
    for (int i = 0; i < t->nrows; i++)
        if (t->rows[i] == stream) return i;
    return -1;
}

static void tl_script(FILE* gp, const char* term, const char* out, void* ctx) {
    const tl_t* t = ctx;
    fprintf(gp, "set terminal %s size 1400,%d\nset output '%s'\n", term, 220 + 60 * t->nrows, out);
    fprintf(gp, "set title '%s' noenhanced\nset xlabel 'time in the step (ms)'\nset ylabel 'CUDA stream'\n", t->title);
    fprintf(gp, "set ytics (");
    for (int i = 0; i < t->nrows; i++) fprintf(gp, "%s'stream %u' %d", i ? ", " : "", t->rows[i], i);
    fprintf(gp, ")\nset yrange [-0.7:%f]\nset key outside top center horizontal\nset grid xtics\n", t->nrows - 0.3);
    for (int k = 0; k < 2; k++) {  // $C: compute kernels, $N: NCCL kernels
        fprintf(gp, "$%c << EOD\n", k ? 'N' : 'C');
        for (int i = 0; i < t->n; i++) {
            int r = row_of(t, t->stream[i]);
            if (r < 0 || t->nccl[i] != k) continue;
            // boxxyerror: x y xlow xhigh ylow yhigh
            fprintf(gp, "%.4f %d %.4f %.4f %.2f %.2f\n", 0.5 * (t->t0[i] + t->t1[i]), r, t->t0[i], t->t1[i],
                    r - 0.35, r + 0.35);
        }
        fprintf(gp, "EOD\n");
    }
    fprintf(gp, "plot $C using 1:2:3:4:5:6 with boxxyerror fs solid 0.8 noborder lc rgb '#4C72B0' title 'compute kernels', \\\n"
                "     $N using 1:2:3:4:5:6 with boxxyerror fs solid 0.8 noborder lc rgb '#DD8452' title 'NCCL kernels'\n");
    fprintf(gp, "set output\n");
}

static int cmp_u(const void* a, const void* b) {
    unsigned x = *(const unsigned*)a, y = *(const unsigned*)b;
    return x < y ? -1 : x > y;
}

int profiler_plot_timeline(const char* csv, const char* png, const char* title, char* err, size_t errlen) {
    if (strchr(png, '\'') || strchr(title, '\'')) return set_err(err, errlen, "the PNG path and title must not contain a quote");
    FILE* f = fopen(csv, "r");
    if (!f) return set_err(err, errlen, "cannot read %s", csv);
    tl_t t = {0};
    t.title = title;
    int cap = 0;
    char line[1024];
    if (!fgets(line, sizeof line, f)) { fclose(f); return set_err(err, errlen, "%s is empty", csv); }
    while (fgets(line, sizeof line, f)) {
        unsigned st;
        double a, b;
        char phase[64], name[512];
        if (sscanf(line, "%u,%lf,%lf,%63[^,],%511[^\n]", &st, &a, &b, phase, name) != 5) continue;
        if (t.n == cap) {
            cap = cap ? 2 * cap : 4096;
            t.stream = realloc(t.stream, (size_t)cap * sizeof *t.stream);
            t.t0 = realloc(t.t0, (size_t)cap * sizeof *t.t0);
            t.t1 = realloc(t.t1, (size_t)cap * sizeof *t.t1);
            t.nccl = realloc(t.nccl, (size_t)cap);
            if (!t.stream || !t.t0 || !t.t1 || !t.nccl) DIE("out of host memory");
        }
        t.stream[t.n] = st;
        t.t0[t.n] = 1e-3 * a;
        t.t1[t.n] = 1e-3 * b;
        t.nccl[t.n] = strncmp(name, "nccl", 4) == 0;
        t.n++;
        if (row_of(&t, st) < 0 && t.nrows < 64) t.rows[t.nrows++] = st;
    }
    fclose(f);
    int rc;
    if (t.n == 0) {
        rc = set_err(err, errlen, "%s has no kernel rows", csv);
    } else {
        qsort(t.rows, (size_t)t.nrows, sizeof t.rows[0], cmp_u);
        rc = gnuplot_png(png, tl_script, &t, err, errlen);
    }
    free(t.stream); free(t.t0); free(t.t1); free(t.nccl);
    return rc;
}
