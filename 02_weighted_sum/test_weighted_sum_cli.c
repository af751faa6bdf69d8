// The weighted_sum program: .npy in, .npy out, and one clear line (exit 2) for every bad input.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/npy.h"
#include "tests/harness.h"

static const char* prog(void) {
    static char p[512];
    snprintf(p, sizeof p, "%s/02_weighted_sum/weighted_sum", build_dir());
    return p;
}

static const char* fix(const char* name) {
    static char bufs[8][256];
    static int k = 0;
    char rel[128];
    snprintf(rel, sizeof rel, "weighted_sum/%s.npy", name);
    return fixture_path(rel, bufs[k++ % 8], sizeof bufs[0]);
}

// Runs the program with `args`; checks the exit status and that the output contains `want`.
static void expect(const char* args, int status, const char* want) {
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s %s", prog(), args);
    const int rc = run_capture(cmd, out, sizeof out);
    cr_assert_eq(rc, status, "`%s` exited %d, expected %d; output:\n%s", cmd, rc, status, out);
    cr_assert(strstr(out, want), "`%s`: output does not contain \"%s\":\n%s", cmd, want, out);
}

Test(ws_cli, help_lists_the_flags) {
    expect("--help", 0, "--d-tile");
    expect("--help", 0, "--grad-w");
}

Test(ws_cli, bad_flags) {
    expect("--dtype f16", 2, "--dtype");
    expect("--d-tile 100 --device cpu", 2, "D_TILE 100 is not allowed");
    expect("--grad-w sometimes", 2, "--grad-w");
    expect("--rows 0 --device cpu", 2, "--rows and --d must be at least 1");
}

Test(ws_cli, bad_npy_inputs) {
    char a[1024];
    snprintf(a, sizeof a, "--device cpu --x %s", fix("a_x"));
    expect(a, 2, "--w is required with --x");
    snprintf(a, sizeof a, "--device cpu --x %s --w %s", fix("a_x"), fix("b_w"));
    expect(a, 2, "w has shape [132], but x's last axis is D = 37");
    snprintf(a, sizeof a, "--device cpu --x %s --w %s --grad-y %s", fix("a_x"), fix("a_w"),
             fix("b_grad_y"));
    expect(a, 2, "grad_y has shape [33], expected [3, 5]");
    snprintf(a, sizeof a, "--device cpu --x /nonexistent/x.npy --w %s", fix("a_w"));
    expect(a, 2, "/nonexistent/x.npy");

    // A bf16 w beside an f32 x, and an empty x: written here with the .npy writer.
    char wb[512], xe[512], err[256];
    snprintf(wb, sizeof wb, "%s/w_bf16.npy", test_tmpdir());
    snprintf(xe, sizeof xe, "%s/x_empty.npy", test_tmpdir());
    const uint16_t wbits[37] = {0};
    const int64_t d = 37, es[2] = {0, 37};
    cr_assert_eq(npy_write(wb, DT_BF16, 1, &d, wbits, err, sizeof err), 0, "%s", err);
    cr_assert_eq(npy_write(xe, DT_F32, 2, es, NULL, err, sizeof err), 0, "%s", err);
    snprintf(a, sizeof a, "--device cpu --x %s --w %s", fix("a_x"), wb);
    expect(a, 2, "dtype mismatch: x is f32 but w is bf16");
    snprintf(a, sizeof a, "--device cpu --x %s --w %s", xe, fix("a_w"));
    expect(a, 2, "x is empty (shape [0, 37])");
}

// .npy in, .npy out: the files the program writes hold PyTorch's answer.
static void npy_roundtrip(const char* device, const char* cs) {
    char a[2048], dir[512];
    snprintf(dir, sizeof dir, "%s/out_%s_%s", test_tmpdir(), device, cs);
    char x[64], w[64], gy[64];
    snprintf(x, sizeof x, "%s_x", cs), snprintf(w, sizeof w, "%s_w", cs);
    snprintf(gy, sizeof gy, "%s_grad_y", cs);
    snprintf(a, sizeof a, "--device %s --x %s --w %s --grad-y %s --out %s --check", device, fix(x),
             fix(w), fix(gy), dir);
    expect(a, 0, "wrote y.npy, grad_x.npy, grad_w.npy");
    const char* outs[3] = {"y", "grad_x", "grad_w"};
    for (int i = 0; i < 3; i++) {
        char got_p[600], want_n[64];
        snprintf(got_p, sizeof got_p, "%s/%s.npy", dir, outs[i]);
        snprintf(want_n, sizeof want_n, "%s_%s", cs, outs[i]);
        tensor_t want = npy_load(fix(want_n), DT_F32, -1, NULL);
        tensor_t got = npy_load(got_p, DT_F32, want.rank, want.shape);
        // f32 sums in another order than torch's float64: ~1e-6 relative (grad_x is exact).
        ASSERT_ALLCLOSE((float*)got.data, (float*)want.data, (size_t)tensor_numel(&want), 1e-5,
                        1e-5, outs[i]);
        tensor_free(&want), tensor_free(&got);
    }
}

Test(ws_cli, npy_in_npy_out_cpu) {
    npy_roundtrip("cpu", "a");
    npy_roundtrip("cpu", "b");
}

Test(ws_cli, npy_in_npy_out_cuda) {
    SKIP_WITHOUT_GPU();
    npy_roundtrip("cuda", "a");
    npy_roundtrip("cuda", "b");
}

Test(ws_cli, random_bf16_checks_against_reference_cuda) {
    SKIP_WITHOUT_GPU();
    expect("--device cuda --dtype bf16 --rows 3001 --d 1032 --check", 0, "check grad_w");
    expect("--device cuda --dtype f32 --rows 3001 --d 77 --grad-w atomic --check", 0, "ok");
}

Test(ws_cli, cuda_without_gpu_says_so) {
    if (gpu_count() > 0) cr_skip_test("there is a GPU: this tests the message given without one");
    char cmd[600], out[4096];
    snprintf(cmd, sizeof cmd, "%s --device cuda", prog());
    const int rc = run_capture(cmd, out, sizeof out);
    cr_assert_neq(rc, 0, "--device cuda without a GPU must fail: %s", out);
    cr_assert(strstr(out, "needs a CUDA GPU"), "%s", out);
}

// ---- checks before a run: flags first, then the GPU, the output place and the inputs

static int run_out(const char* cmd, char* out, size_t len) { return run_capture(cmd, out, len); }

static int entries(const char* dir) {
    char cmd[2200], txt[64];
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | wc -l", dir);
    run_out(cmd, txt, sizeof txt);
    return atoi(txt);
}

// The set y, grad_x, grad_w appears whole or not at all: a grad_x.npy that cannot be replaced
// (a directory in its place) used to leave y.npy behind.
Test(ws_cli, outputs_are_one_set) {
    char dir[600], cmd[2048], out[4096];
    snprintf(dir, sizeof dir, "%s/ws_set", test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p %s/grad_x.npy && %s --device cpu --rows 7 --d 5 --out %s", dir, prog(), dir);
    cr_assert_eq(run_out(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "weighted_sum: error: --out ") && strstr(out, "grad_x.npy: it is a directory"), "%s", out);
    cr_assert_eq(entries(dir), 1, "only the blocking grad_x.npy/ may remain in %s", dir);
    // And the good case: all three.
    snprintf(cmd, sizeof cmd, "%s --device cpu --rows 7 --d 5 --out %s/fresh/run", prog(), dir);
    cr_assert_eq(run_out(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/fresh/run", dir);
    cr_assert_eq(entries(cmd), 3, "y, grad_x, grad_w in %s", cmd);
    snprintf(cmd, sizeof cmd, "%s/fresh", dir);
    cr_assert_eq(entries(cmd), 1, "no temporary beside %s/fresh/run", dir);
}

// --out that cannot be created: the reason, before any work (there was none: "cannot create
// the directory").
Test(ws_cli, out_says_why_and_fails_first) {
    expect("--device cpu --out /proc/cs336-ws", 2, "--out /proc/cs336-ws: cannot create the directory /proc/cs336-ws: ");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s --device cpu --out /proc/cs336-ws", prog());
    run_out(cmd, out, sizeof out);
    cr_assert_null(strstr(out, "y[0]"), "the run happened before the check:\n%s", out);
}

// Sizes that cannot fit were an out-of-memory death (exit 1): bad input, exit 2, naming the flags.
Test(ws_cli, impossible_sizes_are_bad_input) {
    expect("--device cpu --rows 1G --d 1G", 2, "--rows 1073741824 --d 1073741824: x is ");
    expect("--device cpu --rows 1G --d 1G", 2, "of host memory here");
    expect("--device cpu --rows 8G --d 8G", 2, "more than 8 EiB");  // rows * d overflows int64
    char cmd[1024], out[4096];
    // The demo's bound is a rule, the same on every machine (asking only "does it fit", a host with
    // 256 GB took 10^10 elements); just above the bound is refused, whatever the memory.
    snprintf(cmd, sizeof cmd, "%s/02_weighted_sum/demo --rows 100000000 --d 100", build_dir());
    cr_assert_eq(run_out(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "demo: error: --rows 100000000 --d 100: ") && strstr(out, "at most 256M"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s/02_weighted_sum/demo --rows 268435457 --d 1", build_dir());
    cr_assert_eq(run_out(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "at most 256M"), "%s", out);
}

// The benchmark checked for a GPU before its flags: a bad flag said only "needs a CUDA GPU".
Test(ws_cli, bench_checks_flags_before_the_gpu) {
    char cmd[1024], out[4096];
    struct {
        const char* args;
        const char* text;
    } cases[] = {
        {"--rows 0", "--rows: 0 is not a row count"},
        {"--rows 1K,x", "--rows: cannot parse"},
        {"--dtype f16", "--dtype: 'f16' is not one of f32|bf16|both"},
        {"--reps 0", "--reps must be >= 1"},
        {"--out /proc/cs336-bench", "--out /proc/cs336-bench: cannot create files in /proc"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/02_weighted_sum/bench %s", build_dir(), cases[i].args);
        cr_assert_eq(run_out(cmd, out, sizeof out), 2, "%s: %s", cases[i].args, out);
        cr_assert(strstr(out, cases[i].text), "%s: lacks \"%s\": %s", cases[i].args, cases[i].text, out);
    }
}

// make bench-02 on a machine without a GPU: one line, exit 2 (it was 127 and an empty table).
Test(ws_cli, bench_script_without_gpu_says_so_once) {
    if (gpu_count() > 0) cr_skip_test("there is a GPU: the script would run the benchmark");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "BUILD=%s 02_weighted_sum/bench.sh", build_dir());
    cr_assert_eq(run_out(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "make bench-02: error: needs a CUDA GPU: ") == out, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
}
