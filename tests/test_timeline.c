// profiler_plot_timeline: the per-stream kernel timeline (the DDP overlap picture) from a CSV
// in profiler_write_timeline_csv's format. Runs without a GPU: the CSV is made here.
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/gnuplot.h"
#include "common/profiler.h"
#include "tests/harness.h"

static const char* write_csv(const char* name, const char* body) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    FILE* f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(body, f);
    fclose(f);
    return path;
}

Test(timeline, draws_two_streams_with_nccl_kernels) {
    if (!gnuplot_available()) cr_skip_test("gnuplot is not installed");
    const char* csv = write_csv("tl.csv",
        "stream,start_us,end_us,phase,kernel\n"
        "7,0,120.5,forward,gemm_kernel\n"
        "7,121,400,backward,gemm_kernel\n"
        "13,300,520,unphased,ncclDevKernel_AllReduce_Sum_f32_RING_LL\n");
    char png[512], err[512];
    snprintf(png, sizeof png, "%s/tl.png", test_tmpdir());
    cr_assert_eq(profiler_plot_timeline(csv, png, "flat vs overlap", err, sizeof err), 0, "%s", err);
    struct stat st;
    cr_assert(stat(png, &st) == 0 && st.st_size > 1000, "no PNG drawn at %s", png);
}

Test(timeline, refuses_empty_and_quoted) {
    char png[512], err[512];
    snprintf(png, sizeof png, "%s/none.png", test_tmpdir());
    const char* csv = write_csv("empty.csv", "stream,start_us,end_us,phase,kernel\n");
    cr_assert_eq(profiler_plot_timeline(csv, png, "t", err, sizeof err), -1);
    cr_assert(strstr(err, "no kernel rows"), "%s", err);
    cr_assert_eq(profiler_plot_timeline(csv, png, "it's", err, sizeof err), -1);
    cr_assert(strstr(err, "quote"), "%s", err);
    struct stat st;
    cr_assert(stat(png, &st) != 0, "a PNG was left behind");
}

// build/common/plot_timeline: the same drawing for a CSV made on a machine without gnuplot.
Test(timeline, plot_timeline_program) {
    char cmd[1024], out[4096], png[512];
    const char* csv = write_csv("prog.csv",
        "stream,start_us,end_us,phase,kernel\n"
        "7,0,100,forward,gemm_kernel\n"
        "13,50,90,unphased,ncclDevKernel_AllReduce_Sum_f32_RING_LL\n");
    snprintf(cmd, sizeof cmd, "%s/common/plot_timeline --csv /nonexistent/x.csv", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "plot_timeline: error: cannot read /nonexistent/x.csv"), "%s", out);
    if (!gnuplot_available()) cr_skip_test("gnuplot is not installed (the refusal was checked)");
    snprintf(cmd, sizeof cmd, "%s/common/plot_timeline --csv %s", build_dir(), csv);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "%s", out);
    snprintf(png, sizeof png, "%s/prog.png", test_tmpdir());  // default: the CSV's path with .png
    struct stat st;
    cr_assert(stat(png, &st) == 0 && st.st_size > 1000, "no PNG at %s:\n%s", png, out);
}
