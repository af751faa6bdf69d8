// Replots a memory timeline CSV (written by `benchmark --memory`, common/memtrace.h) as a PNG:
// for timelines measured on a machine without gnuplot.
//   build/01_benchmarking/memplot --csv results/01_benchmarking/memory_X.csv [--png X.png]
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/memtrace.h"

int main(int argc, char** argv) {
    const char *csv = NULL, *png = NULL, *title = NULL;
    cli_opt_t opts[] = {
        {"csv", CLI_STR, &csv, NULL, "timeline CSV (event,time_s,kind,label,live_bytes,...)", NULL},
        {"png", CLI_STR, &png, "", "output PNG (default: the CSV's name with .png)", NULL},
        {"title", CLI_STR, &title, "active memory", "plot title", NULL},
    };
    cli_parse(argc, argv, "Plot a memory timeline CSV (stacked by tag) with gnuplot.", opts, CLI_COUNT(opts));
    char buf[4096];
    if (!png[0]) {
        size_t n = strlen(csv);
        if (n < 5 || strcmp(csv + n - 4, ".csv") != 0) fail("--png is needed when --csv does not end in .csv");
        snprintf(buf, sizeof buf, "%.*s.png", (int)(n - 4), csv);
        png = buf;
    }
    // Every way this can go wrong is said in one line, gnuplot's own words included:
    // a bad CSV, an unwritable --png or a missing gnuplot is bad input (exit 2); gnuplot failing
    // on good input is a failed tool (exit 1).
    char err[1024];
    const int rc = memtrace_plot_png(csv, png, title, err, sizeof err);
    if (rc == -1) fail("no plot: %s", err);
    if (rc != 0) DIE("no plot: %s", err);
    printf("%s\n", png);
    return 0;
}
