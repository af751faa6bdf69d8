// GPU detection and the error paths every program shares.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/gpu.h"
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
