// GPU detection, the error paths every program shares, and the shared GPU timing helper.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <unistd.h>

#include "common/check.h"
#include "common/gpu.h"
#include "common/timer.h"
#include "tests/child.h"
#include "tests/harness.h"

Test(gpu, count_and_reason_agree) {
    int n = gpu_count();
    cr_assert_geq(n, 0);
    if (n == 0) cr_assert_neq(strlen(gpu_absent_reason()), 0u, "no GPU must come with a reason");
    else cr_assert_str_eq(gpu_absent_reason(), "");
    char v[64];
    version_cuda_runtime(v, sizeof v);
    cr_assert_neq(strlen(v), 0u);
    version_cublas(v, sizeof v);
    cr_assert_neq(strlen(v), 0u);
    version_nccl(v, sizeof v);
    cr_assert_neq(strlen(v), 0u);
}

// On a machine with no driver at all, the CUDA runtime says "CUDA driver version is
// insufficient for CUDA runtime version", which sends the user hunting for a newer driver. The
// reason must say that there is none.
Test(gpu, no_driver_is_named_as_such) {
    if (gpu_count() > 0) cr_skip_test("a GPU is present");
    if (access("/proc/driver/nvidia", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0 ||
        access("/dev/nvidia0", F_OK) == 0)
        cr_skip_test("an NVIDIA driver is installed here (no GPU usable: %s)", gpu_absent_reason());
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        cr_skip_test("libcuda.so.1 is installed here (no GPU usable: %s)", gpu_absent_reason());
    }
    cr_assert(strstr(gpu_absent_reason(), "no NVIDIA driver / no GPU"), "%s", gpu_absent_reason());
    cr_assert_null(strstr(gpu_absent_reason(), "insufficient"), "%s", gpu_absent_reason());
}

Test(gpu, info_is_sane) {
    SKIP_WITHOUT_GPU();
    gpu_info_t g;
    cr_assert_eq(gpu_info(0, &g), 0);
    cr_assert_gt(g.total_bytes, (size_t)1 << 30);
    cr_assert_gt(g.sm_count, 0);
    cr_assert_neq(strlen(g.name), 0u);
    cr_assert_eq(gpu_info(gpu_count(), &g), -1, "a device index past the end is an error");
}

// Without a GPU, gpu_require is a user error: one line, exit status 2. Run in a child forked
// before this process touches CUDA; with a GPU the child returns 0 and the test is skipped.
static void require_gpu(void* arg) {
    (void)arg;
    gpu_require("this test");
}

Test(gpu, require_fails_cleanly_without_gpu) {
    char out[1024];
    const int st = run_child(require_gpu, NULL, out, sizeof out);
    if (st == 0) cr_skip_test("a GPU is present: gpu_require has nothing to refuse");
    cr_assert_eq(st, 2, "exit status %d, output %s", st, out);
    cr_assert(strstr(out, "this test needs a CUDA GPU") != NULL, "%s", out);
}

Test(check, fail_prints_one_line_and_exits_2) {
    char out[1024];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/common/envreport --no-such-flag", build_dir());
    int st = run_capture(cmd, out, sizeof out);
    cr_assert_eq(st, 2, "exit status %d, output: %s", st, out);
    cr_assert(strstr(out, "envreport: error:") != NULL, "output: %s", out);
    cr_assert(strstr(out, "--no-such-flag") != NULL, "the message names the flag: %s", out);
}

Test(check, envreport_runs_without_gpu_or_with) {
    char out[4096];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/common/envreport", build_dir());
    int st = run_capture(cmd, out, sizeof out);
    cr_assert_eq(st, 0, "output: %s", out);
    cr_assert(strstr(out, "GPU") != NULL);
    cr_assert(strstr(out, "cuBLAS") != NULL);
}

// --json into a place that cannot be written is bad input (exit 2), not a warning and exit 0.
Test(check, envreport_json_unwritable_is_exit_2) {
    char out[4096], cmd[2 * PATH_MAX], dir[600], bd[PATH_MAX];
    cr_assert_not_null(realpath(build_dir(), bd), "%s", build_dir());
    snprintf(dir, sizeof dir, "%s/envreport_ro", test_tmpdir());
    // results is a plain file there, so results/environment.json cannot be written.
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cd %s && : > results && %s/common/envreport --json", dir, dir, bd);
    int st = run_capture(cmd, out, sizeof out);
    cr_assert_eq(st, 2, "exit status %d, output: %s", st, out);
    cr_assert(strstr(out, "envreport: error: --json: cannot write results/environment.json: results is not a "
                          "directory"), "%s", out);
    cr_assert_null(strstr(out, "| GPU"), "the report must not be printed before the error: %s", out);
}

// The benchmark scripts ask envreport whether there is a GPU: one line naming who needs it.
Test(check, envreport_need_gpu) {
    char out[4096], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/common/envreport --need-gpu 'make bench-02'", build_dir());
    int st = run_capture(cmd, out, sizeof out);
    if (gpu_count() > 0) {
        cr_assert_eq(st, 0, "%s", out);
        cr_assert_str_eq(out, "", "nothing printed when there is a GPU");
        return;
    }
    cr_assert_eq(st, 2, "exit status %d, output: %s", st, out);
    cr_assert(strstr(out, "make bench-02: error: needs a CUDA GPU: ") == out, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
}

// gpu_time_fn: warm-up runs plus the counted runs, the budget cutting the count down to no less
// than 3, and statistics in order. The work is a 256 MB memset (tens of microseconds on any GPU
// this project targets), so a 1e-6 ms budget always cuts.
typedef struct {
    void* buf;
    size_t bytes;
    int calls;
} memset_ctx_t;
static void memset_call(void* p) {
    memset_ctx_t* c = p;
    CUDA_CHECK(cudaMemsetAsync(c->buf, c->calls & 0xFF, c->bytes, 0));
    c->calls++;
}
Test(timer, gpu_time_fn_counts_runs_and_applies_the_budget) {
    SKIP_WITHOUT_GPU();
    memset_ctx_t c = {NULL, (size_t)256 << 20, 0};
    CUDA_CHECK(cudaMalloc(&c.buf, c.bytes));
    stats_t s = gpu_time_fn(memset_call, &c, 2, 7, 0.0);  // no budget: all 7 counted
    cr_assert_eq(c.calls, 2 + 7);
    cr_assert(s.min > 0.0 && s.min <= s.median && s.median <= s.max, "min %g median %g max %g", s.min, s.median,
              s.max);
    c.calls = 0;
    s = gpu_time_fn(memset_call, &c, 1, 50, 1e-6);  // the budget cuts 50 down to the floor of 3
    cr_assert_eq(c.calls, 1 + 3);
    CUDA_CHECK(cudaFree(c.buf));
}

// The multi-GPU tests' rank count: 2 unless TEST_GPU_RANKS names another (the 4-GPU runs).
Test(gpu, multi_gpu_tests_take_their_rank_count_from_the_environment) {
    unsetenv("TEST_GPU_RANKS");
    cr_assert_eq(test_gpu_ranks(), 2);
    setenv("TEST_GPU_RANKS", "", 1);
    cr_assert_eq(test_gpu_ranks(), 2);
    setenv("TEST_GPU_RANKS", "4", 1);
    cr_assert_eq(test_gpu_ranks(), 4);
    setenv("TEST_GPU_RANKS", "3", 1);
    cr_assert_eq(test_gpu_ranks(), 3);
    unsetenv("TEST_GPU_RANKS");
}
