// The benchmark program (build/01_benchmarking/benchmark): flags, the CSV/JSON it appends to,
// the CPU path (runs here), and on a GPU a real run, the profiler and memory outputs, and an
// out-of-memory configuration reported as a row with exit status 0.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/harness.h"

static char out[1 << 16];

static int bench(const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/benchmark %s", build_dir(), args);
    return run_capture(cmd, out, sizeof out);
}

static int count_lines(const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

Test(benchmark, bad_flags_name_the_flag_and_the_choices) {
    cr_assert_eq(bench("--model huge"), 2, "%s", out);
    cr_assert(strstr(out, "--model") && strstr(out, "tiny|small|medium|large|xl|2.7B"), "%s", out);
    cr_assert_eq(bench("--mode sideways"), 2, "%s", out);
    cr_assert(strstr(out, "forward|forward-backward|train"), "%s", out);
    cr_assert_eq(bench("--steps 0 --device cpu --model tiny"), 2, "%s", out);
    cr_assert(strstr(out, "--steps"), "%s", out);
    cr_assert_eq(bench("--device cpu --model tiny --precision bf16"), 2, "%s", out);
    cr_assert(strstr(out, "fp32"), "%s", out);
    cr_assert_eq(bench("--help"), 0, "%s", out);
    cr_assert(strstr(out, "--warmup") && strstr(out, "--memory"), "%s", out);
}

Test(benchmark, cpu_reference_row_is_appended_to_csv_and_json) {
    char dir[512], csv[600], json[600];
    snprintf(dir, sizeof dir, "%s/bench_cpu", test_tmpdir());
    snprintf(csv, sizeof csv, "%s/rows.csv", dir);
    snprintf(json, sizeof json, "%s/rows.json", dir);
    char args[1024];
    snprintf(args, sizeof args, "--device cpu --model tiny --context 16 --batch 2 --mode train --warmup 0 --steps 2 --out %s --csv rows.csv", dir);
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, "| tiny") && strstr(out, "| ok"), "no result row:\n%s", out);
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert_eq(count_lines(csv), 3, "header and two rows expected in %s", csv);
    FILE* f = fopen(json, "r");
    cr_assert_not_null(f, "no %s", json);
    fclose(f);
}

Test(benchmark, gpu_run_with_profile_and_memory) {
    SKIP_WITHOUT_GPU();
    char dir[512], args[1024], path[700];
    snprintf(dir, sizeof dir, "%s/bench_gpu", test_tmpdir());
    snprintf(args, sizeof args, "--model tiny --context 33 --batch 3 --mode train --precision bf16 --warmup 1 --steps 3 --profile --memory --nvtx --out %s", dir);
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, "| ok"), "no ok row:\n%s", out);
    cr_assert(strstr(out, "after optimizer"), "no memory table:\n%s", out);
    snprintf(path, sizeof path, "%s/kernels_tiny_ctx33_b3_bf16_train.csv", dir);
    cr_assert_gt(count_lines(path), 5, "kernel summary %s", path);
    snprintf(path, sizeof path, "%s/memory_tiny_ctx33_b3_bf16_train.csv", dir);
    cr_assert_gt(count_lines(path), 5, "memory timeline %s", path);
}

Test(benchmark, out_of_memory_is_a_row_not_a_crash) {
    SKIP_WITHOUT_GPU();
    char args[1024];
    snprintf(args, sizeof args, "--model 2.7B --context 8192 --batch 64 --warmup 0 --steps 1 --out %s/bench_oom", test_tmpdir());
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, "| OOM") && strstr(out, "out of memory"), "%s", out);
}
