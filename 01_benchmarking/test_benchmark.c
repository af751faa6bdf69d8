// The benchmark program (build/01_benchmarking/benchmark): flags, the CSV/JSON it appends to,
// the CPU path (runs here), and on a GPU a real run, the profiler and memory outputs, and an
// out-of-memory configuration reported as a row with exit status 0.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

// --checkpoint: bad values exit 2 with one line naming the choices; good ones add a
// "checkpoint" column, so a sweep over policies (none included) shares one CSV.
Test(benchmark, checkpoint_flag_is_checked_and_gets_its_column) {
    const char* bad[] = {"every-0", "every-", "sometimes", "every-2x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--device cpu --model tiny --checkpoint %s", bad[i]);
        cr_assert_eq(bench(args), 2, "%s: %s", bad[i], out);
        cr_assert(strstr(out, "--checkpoint") && strstr(out, "none|block|every-K"), "%s", out);
    }
    char dir[512], csv[600], args[1024];
    snprintf(dir, sizeof dir, "%s/bench_ckpt", test_tmpdir());
    snprintf(csv, sizeof csv, "%s/ck.csv", dir);
    const char* good[] = {"none", "block", "every-2"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "--device cpu --model tiny --context 16 --batch 2 --warmup 0 --steps 1 --checkpoint %s --out %s --csv ck.csv",
                 good[i], dir);
        cr_assert_eq(bench(args), 0, "%s", out);
    }
    cr_assert_eq(count_lines(csv), 4, "header and three rows expected in %s", csv);
    FILE* f = fopen(csv, "r");
    char line[4096] = "";
    cr_assert(f && fgets(line, sizeof line, f));
    cr_assert(strstr(line, ",checkpoint"), "%s", line);
    fclose(f);
}

// --checkpoint nested: runs on the CPU and prints the measured activation peak beside the
// formula (equal); on the GPU it is refused in one line before anything starts (no GPU needed).
Test(benchmark, checkpoint_nested_on_the_cpu_and_refused_on_the_gpu) {
    char args[1024];
    snprintf(args, sizeof args, "--device cpu --model tiny --context 16 --batch 2 --warmup 0 --steps 1 --checkpoint nested --out %s/bench_nested",
             test_tmpdir());
    cr_assert_eq(bench(args), 0, "%s", out);
    const char* line = strstr(out, "activations (host, acts tag) with checkpoint nested: peak ");
    cr_assert_not_null(line, "%s", out);
    size_t measured = 0, formula = 1;
    cr_assert_eq(sscanf(line, "activations (host, acts tag) with checkpoint nested: peak %zu bytes measured, %zu by the formula",
                        &measured, &formula), 2, "%s", line);
    cr_assert(measured == formula && measured > 0 && !strstr(out, "MISMATCH"), "%s", line);
    cr_assert(strstr(out, "| nested"), "no nested row:\n%s", out);
    const int st = bench("--model tiny --checkpoint nested");
    ASSERT_REFUSED(st, out, "benchmark", "--checkpoint nested", "CPU model only");
}

// The checkpointing memory table (build/01_benchmarking/ckpt_memory): every measured peak and
// forward count equals its formula and every policy gives the bits of none (exit 0), nested
// keeps the fewest bytes; a bad --layers is one line.
Test(benchmark, ckpt_memory_table_matches_its_formulas) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/ckpt_memory --layers 3,5 --out %s/ckm", build_dir(), test_tmpdir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "|   5 | nested  |               4 |           1 |"), "%s", out);
    cr_assert(!strstr(out, "| NO"), "%s", out);
    char csv[1024];
    snprintf(csv, sizeof csv, "%s/ckm/checkpoint_memory.csv", test_tmpdir());
    cr_assert_eq(count_lines(csv), 1 + 4 + 4, "a header and 4 rows (none, block, every-2, nested) at each L in %s", csv);
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/ckpt_memory --layers 3,,5", build_dir());
    const int st = run_capture(cmd, out, sizeof out);
    ASSERT_REFUSED(st, out, "ckpt_memory", "--layers");
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/ckpt_memory --layers 0", build_dir());
    const int st2 = run_capture(cmd, out, sizeof out);
    ASSERT_REFUSED(st2, out, "ckpt_memory", "--layers", "from 1 to 64");
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

// ---- output places checked before the run, sizes bounded up front, the CPU path's
// warning and progress, and memplot's reasons.

static int count_files(const char* dir) {
    char cmd[700], txt[64];
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | wc -l", dir);
    run_capture(cmd, txt, sizeof txt);
    return atoi(txt);
}

Test(benchmark, out_and_csv_are_checked_before_the_run) {
    char args[1024], dir[600];
    snprintf(dir, sizeof dir, "%s/bench_names", test_tmpdir());
    const char* base = "--device cpu --model tiny --context 16 --batch 1 --warmup 0 --steps 1";
    snprintf(args, sizeof args, "%s --out /proc/cs336-bench", base);
    cr_assert_eq(bench(args), 2, "%s", out);
    cr_assert(strstr(out, "benchmark: error: --out /proc/cs336-bench: cannot create files in /proc: "), "%s", out);
    cr_assert_null(strstr(out, "| tiny"), "the run must not happen first:\n%s", out);
    snprintf(args, sizeof args, "%s --out %s --csv ''", base, dir);
    cr_assert_eq(bench(args), 2, "%s", out);
    cr_assert(strstr(out, "--csv: the file name is empty"), "%s", out);
    snprintf(args, sizeof args, "%s --out %s --csv a/b/c.csv", base, dir);
    cr_assert_eq(bench(args), 2, "%s", out);
    cr_assert(strstr(out, "--csv: 'a/b/c.csv' is a path"), "%s", out);
    cr_assert_eq(count_files(dir), 0, "a refused run left %s behind", dir);
}

// 100000000 tokens of context allocated 8.9 GiB for 20 s before failing: now one line at once,
// with the largest context that fits.
Test(benchmark, impossible_context_is_refused_up_front, .timeout = 20) {
    cr_assert_eq(bench("--device cpu --model tiny --context 100000000"), 2, "%s", out);
    cr_assert(strstr(out, "benchmark: error: --context 100000000: the CPU reference of the tiny model at --batch 4 "
                          "needs ") && strstr(out, "of host memory here; at most --context "), "%s", out);
}

// A course size on the CPU ran for minutes in silence: a warning up front, a line per slow step.
Test(benchmark, cpu_course_size_warns_and_shows_progress, .timeout = 240) {
    char args[1024];
    snprintf(args, sizeof args, "--device cpu --model small --context 64 --batch 4 --warmup 0 --steps 1 --out %s/bench_small",
             test_tmpdir());
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, "benchmark: warning: --device cpu --model small: the CPU reference is meant for --model tiny"),
              "%s", out);
    cr_assert(strstr(out, "benchmark: step 1/1 (timed): forward "), "no progress line:\n%s", out);
    cr_assert(strstr(out, "| small"), "no result row:\n%s", out);
}

static int memplot(const char* args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/memplot %s", build_dir(), args);
    return run_capture(cmd, out, sizeof out);
}

static void write_file(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

// memplot said "gnuplot is missing or failed" for every problem, gnuplot installed or not.
Test(benchmark, memplot_names_what_was_wrong) {
    char dir[600], path[700], args[2048];
    snprintf(dir, sizeof dir, "%s/memplot", test_tmpdir());
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    cr_assert_eq(run_capture(path, out, sizeof out), 0);
    const char* header = "event,time_s,kind,label,live_bytes,params,grads,optim,acts,workspace,other\n";
    snprintf(path, sizeof path, "%s/empty.csv", dir);
    write_file(path, header);
    snprintf(args, sizeof args, "--csv %s", path);
    cr_assert_eq(memplot(args), 2, "%s", out);
    cr_assert(strstr(out, "memplot: error: no plot: ") && strstr(out, "empty.csv has no data rows"), "%s", out);

    snprintf(path, sizeof path, "%s/words.csv", dir);
    char text[512];
    snprintf(text, sizeof text, "%s0,abc,alloc,forward,12,0,0,0,12,0,0\n", header);
    write_file(path, text);
    snprintf(args, sizeof args, "--csv %s", path);
    cr_assert_eq(memplot(args), 2, "%s", out);
    cr_assert(strstr(out, "words.csv line 2: time_s 'abc' is not a number"), "%s", out);

    snprintf(path, sizeof path, "%s/ok.csv", dir);
    snprintf(text, sizeof text,
             "%s0,0.0,start,,0,0,0,0,0,0,0\n1,0.1,mark,forward,0,0,0,0,0,0,0\n2,0.2,alloc,forward,1024,0,0,0,1024,0,0\n"
             "3,0.3,free,forward,0,0,0,0,0,0,0\n", header);
    write_file(path, text);
    snprintf(args, sizeof args, "--csv %s --png /proc/cs336-plot/x.png", path);
    cr_assert_eq(memplot(args), 2, "%s", out);
    cr_assert(strstr(out, "cannot write /proc/cs336-plot/x.png: cannot create files in /proc"), "%s", out);
    // The same verdict where gnuplot is absent (a PATH without it): bad input does not depend on
    // an optional tool.
    {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "PATH=%s %s/01_benchmarking/memplot %s", test_tmpdir(), build_dir(), args);
        cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
        cr_assert(strstr(out, "cannot write /proc/cs336-plot/x.png: cannot create files in /proc"), "without gnuplot: %s", out);
        snprintf(args, sizeof args, "--csv %s", path);
        snprintf(cmd, sizeof cmd, "PATH=%s %s/01_benchmarking/memplot %s", test_tmpdir(), build_dir(), args);
        cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
        cr_assert(strstr(out, "memplot: error: no plot: gnuplot is not installed"), "without gnuplot: %s", out);
    }

    if (system("command -v gnuplot >/dev/null 2>&1") != 0)
        cr_skip_test("gnuplot not installed: the quoted title was not plotted (every refusal above was checked)");
    snprintf(args, sizeof args, "--csv %s --title \"it's a 'quoted' title_with_underscores\"", path);
    cr_assert_eq(memplot(args), 0, "a quote in the title is fine: %s", out);
    snprintf(path, sizeof path, "%s/ok.png", dir);
    FILE* f = fopen(path, "rb");
    cr_assert_not_null(f, "no %s", path);
    fclose(f);
    // empty.csv, words.csv, ok.csv, ok.png: no temporary or stray PNG from the failed runs.
    cr_assert_eq(count_files(dir), 4, "something was left behind in %s", dir);
}

// make bench-01 without a GPU: one line, exit 2, nothing written (BENCH_DEVICE=cpu is the exception).
Test(benchmark, bench_script_without_gpu_says_so_once) {
    if (gpu_count() > 0) cr_skip_test("there is a GPU: the script would run the benchmark");
    char cmd[2048], dir[600];
    snprintf(dir, sizeof dir, "%s/bench01_out", test_tmpdir());
    snprintf(cmd, sizeof cmd, "BUILD=%s BENCH_OUT=%s 01_benchmarking/bench.sh", build_dir(), dir);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "make bench-01: error: needs a CUDA GPU: ") == out, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    struct stat st;
    cr_assert_neq(stat(dir, &st), 0, "%s was created", dir);
}

// --head-chunk: the CPU run's measured activation peak equals the formula and is N·V·4 bytes
// (tiny: 2 x 16 rows, vocabulary 512) below the whole logits' at the same loss; a negative
// value is one line.
static size_t acts_peak_and_loss(const char* extra, char* loss, size_t loss_len) {
    char args[1024];
    snprintf(args, sizeof args, "--device cpu --model tiny --context 16 --batch 2 --warmup 0 --steps 1 --checkpoint none "
             "--out %s/bench_head %s", test_tmpdir(), extra);
    cr_assert_eq(bench(args), 0, "%s", out);
    const char* line = strstr(out, "activations (host, acts tag) with checkpoint none: peak ");
    cr_assert_not_null(line, "%s", out);
    size_t measured = 0, formula = 1;
    cr_assert_eq(sscanf(line, "activations (host, acts tag) with checkpoint none: peak %zu bytes measured, %zu by the formula",
                        &measured, &formula), 2, "%s", line);
    cr_assert(measured == formula && !strstr(out, "MISMATCH"), "%s", line);
    // the loss: the 22nd column of the row (the table's "| tiny" line)
    const char* row = strstr(out, "| tiny");
    cr_assert_not_null(row, "%s", out);
    const char* p = row;
    for (int k = 0; k < 21 && p; k++) p = strchr(p + 1, '|');  // past the 21 columns before it
    cr_assert_not_null(p, "%s", row);
    snprintf(loss, loss_len, "%.*s", (int)strcspn(p + 1, "|"), p + 1);
    return measured;
}

Test(benchmark, head_chunk_drops_the_logits_from_the_activations) {
    char loss_whole[64], loss[64];
    const size_t whole = acts_peak_and_loss("", loss_whole, sizeof loss_whole);
    const size_t chunked = acts_peak_and_loss("--head-chunk 7", loss, sizeof loss);
    cr_assert_eq(whole - chunked, (size_t)2 * 16 * 512 * 4, "peak %zu with --head-chunk 7, %zu without", chunked, whole);
    cr_assert(strchr(loss, '.') && strchr(loss_whole, '.'), "no loss in the rows: '%s', '%s'", loss, loss_whole);
    cr_assert_str_eq(loss, loss_whole, "loss %s with --head-chunk 7, %s without", loss, loss_whole);
    const int st = bench("--device cpu --model tiny --head-chunk -3");
    ASSERT_REFUSED(st, out, "benchmark", "--head-chunk: -3 is out of range");
}
