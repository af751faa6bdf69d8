// plot_timeline: draws a per-stream kernel timeline CSV (profiler_write_timeline_csv, e.g.
// written by `ddp_train --timeline DIR`) as a PNG — for CSVs made on a machine without gnuplot.
//   build/common/plot_timeline --csv results/06_ddp/ddp_xl_overlap.csv --title "XL, overlap"
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/profiler.h"

int main(int argc, char** argv) {
    const char *csv = NULL, *png = "", *title = "";
    cli_opt_t opts[] = {
        {"csv", CLI_STR, &csv, NULL, "the timeline CSV (stream,start_ms,end_ms,phase,name rows)", NULL},
        {"png", CLI_STR, &png, "", "the PNG to write (default: the CSV's path with .png)", NULL},
        {"title", CLI_STR, &title, "", "the plot's title (default: the CSV's file name)", NULL},
    };
    cli_parse(argc, argv, "draws a per-stream kernel timeline CSV as a PNG (needs gnuplot)", opts,
              CLI_COUNT(opts));
    char out[1024], ttl[512], err[512];
    size_t n = strlen(csv);
    if (*png) snprintf(out, sizeof out, "%s", png);
    else if (n > 4 && strcmp(csv + n - 4, ".csv") == 0) snprintf(out, sizeof out, "%.*s.png", (int)(n - 4), csv);
    else snprintf(out, sizeof out, "%s.png", csv);
    const char* base = strrchr(csv, '/');
    snprintf(ttl, sizeof ttl, "%s", *title ? title : base ? base + 1 : csv);
    if (profiler_plot_timeline(csv, out, ttl, err, sizeof err) != 0) {
        fprintf(stderr, "plot_timeline: error: %s\n", err);
        return 2;
    }
    printf("%s\n", out);
    return 0;
}
