// The memory timeline (common/memtrace.c) against the allocator's own counts: every row of the
// CSV must show the live bytes (total and per tag) that mem_stats reported right after that
// allocation or free, with the phase label that was current. Host memory (DEV_CPU), so these
// run on any machine.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/memtrace.h"
#include "tests/harness.h"

typedef struct {
    char kind[16], label[32];
    double t;
    size_t live, tag[MEM_NTAGS];
} row_t;

// Reads the CSV written by memtrace_write_csv; returns the number of data rows.
static int read_trace(const char* path, row_t* rows, int max) {
    FILE* f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    char line[1024];
    cr_assert(fgets(line, sizeof line, f), "empty CSV");
    cr_assert(strncmp(line, "event,time_s,kind,label,live_bytes,params,grads,optim,acts,workspace,other", 74) == 0,
              "unexpected header: %s", line);
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        row_t* r = &rows[n];
        memset(r, 0, sizeof *r);
        // label may be empty: split by hand rather than with %[^,]
        char* fld[5 + MEM_NTAGS];
        int nf = 0;
        for (char *p = line, *tok; nf < 5 + MEM_NTAGS && (tok = strsep(&p, ",\n")) != NULL;) fld[nf++] = tok;
        cr_assert_eq(nf, 5 + MEM_NTAGS, "row %d has %d fields", n, nf);
        r->t = atof(fld[1]);
        snprintf(r->kind, sizeof r->kind, "%s", fld[2]);
        snprintf(r->label, sizeof r->label, "%s", fld[3]);
        r->live = strtoull(fld[4], NULL, 10);
        for (int t = 0; t < MEM_NTAGS; t++) r->tag[t] = strtoull(fld[5 + t], NULL, 10);
        n++;
    }
    fclose(f);
    return n;
}

// The state the allocator reports now, to compare a trace row against.
typedef struct {
    const char* kind;
    const char* label;
    mem_stats_t s;
} expect_t;

Test(memtrace, rows_match_allocator_counts_and_labels) {
    void* floor_block = mem_alloc(DEV_CPU, 777, MEM_OTHER);  // live before the trace: the floor
    expect_t ex[16];
    int ne = 0;
#define EXPECT(k, l) (ex[ne].kind = (k), ex[ne].label = (l), ex[ne].s = mem_stats(DEV_CPU), ne++)
    memtrace_start(DEV_CPU);
    EXPECT("start", "");
    void* p = mem_alloc(DEV_CPU, 1001, MEM_PARAMS);  // odd sizes: no rounding may creep in
    EXPECT("alloc", "");
    memtrace_mark("forward");
    EXPECT("mark", "forward");
    void* a1 = mem_alloc(DEV_CPU, 3 << 20, MEM_ACTS);
    EXPECT("alloc", "forward");
    void* a2 = mem_alloc(DEV_CPU, 12345, MEM_ACTS);
    EXPECT("alloc", "forward");
    memtrace_mark("backward");
    EXPECT("mark", "backward");
    void* g = mem_alloc(DEV_CPU, 4099, MEM_GRADS);
    EXPECT("alloc", "backward");
    mem_free(a2);
    EXPECT("free", "backward");
    mem_free(a1);
    EXPECT("free", "backward");
    memtrace_mark("optimizer");
    EXPECT("mark", "optimizer");
    void* o = mem_alloc(DEV_CPU, 8191, MEM_OPTIM);
    EXPECT("alloc", "optimizer");
    mem_free(g);
    EXPECT("free", "optimizer");
    memtrace_stop();
    EXPECT("stop", "optimizer");
    size_t n_after_stop = memtrace_n_events();
    void* ignored = mem_alloc(DEV_CPU, 999, MEM_OTHER);  // after stop: must not appear
    mem_free(ignored);
    cr_assert_eq(memtrace_n_events(), n_after_stop, "events recorded after memtrace_stop");
#undef EXPECT

    char path[512];
    snprintf(path, sizeof path, "%s/trace/rows.csv", test_tmpdir());
    cr_assert_eq(memtrace_write_csv(path), 0, "memtrace_write_csv failed");
    row_t rows[32];
    int n = read_trace(path, rows, 32);
    cr_assert_eq(n, ne, "trace has %d rows, expected %d", n, ne);
    size_t peak = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(rows[i].kind, ex[i].kind, "row %d kind", i);
        cr_assert_str_eq(rows[i].label, ex[i].label, "row %d label", i);
        cr_assert_eq(rows[i].live, ex[i].s.live, "row %d live %zu, allocator says %zu", i, rows[i].live, ex[i].s.live);
        for (int t = 0; t < MEM_NTAGS; t++)
            cr_assert_eq(rows[i].tag[t], ex[i].s.live_by_tag[t], "row %d tag %s: %zu vs %zu", i,
                         mem_tag_name((mem_tag_t)t), rows[i].tag[t], ex[i].s.live_by_tag[t]);
        if (i > 0) cr_assert_geq(rows[i].t, rows[i - 1].t, "time goes backwards at row %d", i);
        if (rows[i].live > peak) peak = rows[i].live;
    }
    // The floor block is in every row, and the peak is the two activations plus the rest.
    cr_assert_geq(rows[0].tag[MEM_OTHER], 777, "live-before-start block missing from the floor");
    cr_assert_eq(memtrace_peak_bytes(), peak, "peak %zu vs the CSV's max %zu", memtrace_peak_bytes(), peak);
    cr_assert_eq(peak - rows[0].live, (size_t)1001 + (3 << 20) + 12345 + 4099, "peak above the floor");
    mem_free(o);
    mem_free(p);
    mem_free(floor_block);
}

static int count_tmp_files(const char* dir) {
    DIR* d = opendir(dir);
    cr_assert(d, "cannot open %s", dir);
    int n = 0;
    for (struct dirent* e; (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".tmp")) n++;
    closedir(d);
    return n;
}

Test(memtrace, csv_is_written_atomically) {
    memtrace_start(DEV_CPU);
    void* p = mem_alloc(DEV_CPU, 64, MEM_ACTS);
    mem_free(p);
    memtrace_stop();
    char dir[512], path[600], bad[700];
    snprintf(dir, sizeof dir, "%s/atomic", test_tmpdir());
    snprintf(path, sizeof path, "%s/t.csv", dir);
    cr_assert_eq(memtrace_write_csv(path), 0, "write into a fresh directory (made on demand)");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s missing", path);
    cr_assert_gt(st.st_size, 0, "%s is empty", path);
    cr_assert_eq(count_tmp_files(dir), 0, "a temporary file was left behind in %s", dir);
    // A path whose "directory" is a regular file cannot be written: -1, and nothing appears.
    snprintf(bad, sizeof bad, "%s/t.csv/inside.csv", dir);
    cr_assert_eq(memtrace_write_csv(bad), -1, "writing under a regular file must fail");
    cr_assert_eq(count_tmp_files(dir), 0, "a failed write left a temporary in %s", dir);
    row_t rows[8];
    cr_assert_eq(read_trace(path, rows, 8), 4, "start, alloc, free, stop");
}

Test(memtrace, restart_clears_the_previous_trace) {
    memtrace_start(DEV_CPU);
    for (int i = 0; i < 5; i++) mem_free(mem_alloc(DEV_CPU, 100 + (size_t)i, MEM_WORKSPACE));
    memtrace_stop();
    cr_assert_eq(memtrace_n_events(), 12, "start + 5 allocs + 5 frees + stop");
    memtrace_start(DEV_CPU);
    memtrace_stop();
    cr_assert_eq(memtrace_n_events(), 2, "a new trace holds only its own events");
}

Test(memtrace, png_from_gnuplot_or_minus_one) {
    memtrace_start(DEV_CPU);
    memtrace_mark("forward");
    void* a = mem_alloc(DEV_CPU, 1 << 20, MEM_ACTS);
    memtrace_mark("backward");
    void* g = mem_alloc(DEV_CPU, 1 << 19, MEM_GRADS);
    mem_free(a);
    mem_free(g);
    memtrace_stop();
    char csv[512], png[512];
    snprintf(csv, sizeof csv, "%s/plot/t.csv", test_tmpdir());
    snprintf(png, sizeof png, "%s/plot/t.png", test_tmpdir());
    cr_assert_eq(memtrace_write_csv(csv), 0);
    char err[1024];
    cr_assert_eq(memtrace_plot_png(csv, png, "two\nlines", err, sizeof err), -1, "a newline is refused");
    cr_assert(strstr(err, "newline"), "%s", err);
    int have_gnuplot = system("command -v gnuplot >/dev/null 2>&1") == 0;
    // A quote in the title is fine (gnuplot's '' escape), not refused as "gnuplot failed".
    int rc = memtrace_plot_png(csv, png, "it's quoted_with_underscores", err, sizeof err);
    if (!have_gnuplot) {
        cr_assert_eq(rc, -1, "without gnuplot the plot must report -1");
        cr_assert(strstr(err, "gnuplot is not installed"), "%s", err);
        cr_skip_test("gnuplot not installed: only the -1 path was checked");
    }
    cr_assert_eq(rc, 0, "gnuplot is installed but the plot failed: %s", err);
    FILE* f = fopen(png, "rb");
    cr_assert(f, "%s missing", png);
    unsigned char magic[8] = {0};
    size_t got = fread(magic, 1, 8, f);
    fclose(f);
    cr_assert(got == 8 && memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0, "not a PNG file");
}
