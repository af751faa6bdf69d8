// The handout's §1.1.5 accumulation demo: sum 0.01 one thousand times in fp32, in fp16, and in
// fp32 with fp16 addends, on the CPU and on the GPU, and print each sum's error against the
// exact answer (10). Two extra rows do the same for bf16.
//   build/01_benchmarking/accumulation [--n 1000] [--value 0.01] [--device auto|cpu|cuda]
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "01_benchmarking/accumulation.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/table.h"

int main(int argc, char** argv) {
    int n = 0;
    double value = 0;
    const char* device = NULL;
    const char* out_dir = NULL;
    const char* csv = NULL;
    cli_opt_t opts[] = {
        {"n", CLI_INT, &n, "1000", "number of additions", NULL},
        {"value", CLI_DOUBLE, &value, "0.01", "the value added each time", NULL},
        {"device", CLI_CHOICE, &device, "auto", "where to run (auto: CPU, and the GPU if present)",
         "auto|cpu|cuda"},
        {"out", CLI_STR, &out_dir, "results/01_benchmarking", "directory for the CSV/JSON results", NULL},
        {"csv", CLI_STR, &csv, "accumulation", "results file name (without extension)", NULL},
    };
    cli_parse(argc, argv, "Mixed-precision accumulation: sum `value` n times in fp32/fp16/bf16.", opts,
              CLI_COUNT(opts));
    if (n < 1 || n > 100000000) fail("--n must be between 1 and 100000000 (got %d)", n);
    if (!isfinite(value)) fail("--value must be a finite number");
    char err[512];
    if (file_name_check(csv, err, sizeof err) != 0)
        fail("--csv: %s; give a plain name such as accumulation (the directory is --out)", err);
    // The CSV and the JSON are one set: both appear, or neither (and nothing else is left).
    outset_t* outs = out_dir[0] ? outset_open(out_dir, err, sizeof err) : NULL;
    if (!out_dir[0]) fail("--out is empty (give a directory)");
    if (!outs) fail("--out %s: %s", out_dir, err);

    int want_cpu = strcmp(device, "cuda") != 0;
    int want_gpu = strcmp(device, "cpu") != 0;
    if (strcmp(device, "cuda") == 0) gpu_require("--device cuda");
    float cpu[ACC_NCASES], gpu[ACC_NCASES];
    for (int c = 0; c < ACC_NCASES; c++) cpu[c] = gpu[c] = NAN;
    if (want_cpu) accum_cpu(n, (float)value, cpu);
    int have_gpu = want_gpu && accum_gpu(n, (float)value, gpu) == 0;
    if (have_gpu)
        for (int c = 0; c < ACC_NCASES; c++)
            if (isnan(gpu[c])) DIE("GPU case %d was not written", c);

    const double exact = (double)n * value;  // the answer without rounding
    char title[160];
    snprintf(title, sizeof title, "sum of %g, %d times (exact %g); CPU fp16 via %s", value, n, exact,
             accum_cpu_has_native_f16() ? "_Float16" : "software rounding");
    const char* hdr[] = {"loop", "accumulator", "addend", "CPU sum", "CPU error", "GPU sum", "GPU error"};
    table_t* t = table_new(title, 7, hdr);
    for (int c = 0; c < ACC_NCASES; c++) {
        acc_case_info_t info = acc_case_info((acc_case_t)c);
        table_row(t);
        table_cell(t, "%d", c + 1);
        table_cell(t, "%s", info.accumulator);
        table_cell(t, "%s", info.addend);
        if (want_cpu) {
            table_cell(t, "%.6f", (double)cpu[c]);
            table_cell(t, "%+.6f", (double)cpu[c] - exact);
        } else {
            table_cell(t, "-");
            table_cell(t, "-");
        }
        if (have_gpu) {
            table_cell(t, "%.6f", (double)gpu[c]);
            table_cell(t, "%+.6f", (double)gpu[c] - exact);
        } else {
            table_cell(t, "-");
            table_cell(t, "-");
        }
    }
    table_print_md(t, stdout);
    if (want_gpu && !have_gpu) printf("(no GPU: %s)\n", gpu_absent_reason());
    if (have_gpu && want_cpu) {
        int same = memcmp(cpu, gpu, sizeof cpu) == 0;
        printf("CPU and GPU sums are %s\n", same ? "bit-identical" : "DIFFERENT (rounding differs)");
    }
    char name[512];
    snprintf(name, sizeof name, "%s.csv", csv);
    if (table_write_csv(t, outset_path(outs, name)) != 0) fail("cannot write %s/%s (reason above)", out_dir, name);
    snprintf(name, sizeof name, "%s.json", csv);
    if (table_write_json(t, outset_path(outs, name)) != 0) fail("cannot write %s/%s (reason above)", out_dir, name);
    if (outset_commit(outs, err, sizeof err) != 0) fail("--out %s: %s", out_dir, err);
    table_free(t);
    return 0;
}
