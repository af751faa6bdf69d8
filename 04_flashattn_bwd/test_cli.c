// Stage 04's program: bad input gives one clear line and exit 2; good input writes the
// gradients, which match PyTorch's (CPU run, so this test runs everywhere).
#include "04_flashattn_bwd/test_bwd_util.h"
#include "common/fileio.h"

static int run(const char* args, char* out, size_t len) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/04_flashattn_bwd/flash_bwd %s", build_dir(), args);
    return run_capture(cmd, out, len);
}

Test(bwd_cli, help_lists_flags) {
    char out[8192];
    cr_assert_eq(run("--help", out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "--dO") && strstr(out, "--impl"), "%s", out);
}

Test(bwd_cli, bad_inputs_exit_2_with_a_reason) {
    char out[4096];
    cr_assert_eq(run("--dtype f16 --out ''", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "--dtype") && strstr(out, "f32|bf16"), "%s", out);
    cr_assert_eq(run("--d 48 --device cpu --out ''", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "head dim 48"), "%s", out);
    cr_assert_eq(run("--q tests/fixtures/attention/q.npy --out ''", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "go together"), "%s", out);
    cr_assert_eq(run("--q tests/fixtures/attention/q.npy --k tests/fixtures/attention/k.npy "
                     "--v tests/fixtures/attention/v.npy --dO tests/fixtures/attention/causal_L.npy --out ''",
                     out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "causal_L.npy") && strstr(out, "expected"), "%s", out);
    cr_assert_eq(run("--impl atomic --device cpu --out ''", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "atomic") && strstr(out, "flash|naive"), "%s", out);
    cr_assert_eq(run("--q /nonexistent/q.npy --k x --v y --dO z --out ''", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "/nonexistent/q.npy"), "%s", out);
}

// The fixture through the program (CPU tiled reference), files compared with PyTorch's.
Test(bwd_cli, fixture_files_round_trip, .timeout = 60) {
    char out[4096], args[1024];
    const char* dir = test_tmpdir();
    snprintf(args, sizeof args,
             "--device cpu --q tests/fixtures/attention/q.npy --k tests/fixtures/attention/k.npy "
             "--v tests/fixtures/attention/v.npy --dO tests/fixtures/attention/dO.npy --causal --Bq 32 --Bk 16 "
             "--out %s/run",
             dir);
    cr_assert_eq(run(args, out, sizeof out), 0, "%s", out);
    const char* names[3] = {"dQ", "dK", "dV"};
    const size_t n = (size_t)FX_BH * FX_N * FX_D;
    for (int x = 0; x < 3; x++) {
        char path[1024], err[512], fx[64];
        snprintf(path, sizeof path, "%s/run/%s.npy", dir, names[x]);
        npy_array_t a;
        cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(a.rank, 3);
        snprintf(fx, sizeof fx, "causal_%s", names[x]);
        float* want = load_fixture(fx, n);
        ASSERT_ALLCLOSE((float*)a.data, want, n, 1e-2, 1e-2, fx);  // the course's tolerance
        free(want);
        npy_array_free(&a);
    }
}

// ---- every flag is checked before the GPU

static int count_entries(const char* dir) {
    char cmd[2200], txt[64];
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | wc -l", dir);
    run_capture(cmd, txt, sizeof txt);
    return atoi(txt);
}

// The demo took no flags at all: --help, --bogus and stray words all ran it and exited 0.
Test(bwd_cli, demo_parses_its_flags) {
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s/04_flashattn_bwd/demo --help", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "usage: demo") && strstr(out, "--N") && !strstr(out, "| implementation"), "%s", out);
    const char* bad[][2] = {{"--bogus", "unknown flag --bogus"},
                            {"stray", "unexpected argument 'stray'"},
                            {"--H 0", "--H must be >= 1"},
                            {"--N 2000000000", "--H 2 --N 2000000000: needs "}};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s/04_flashattn_bwd/demo %s", build_dir(), bad[i][0]);
        cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s: %s", bad[i][0], out);
        cr_assert(strstr(out, "demo: error: ") == out && strstr(out, bad[i][1]), "%s: %s", bad[i][0], out);
    }
}

// dQ, dK, dV, O, L are one set: a dV.npy that cannot be replaced used to leave dQ and dK behind.
Test(bwd_cli, outputs_are_one_set) {
    char dir[600], a[2048], out[4096];
    snprintf(dir, sizeof dir, "%s/bwd_set", test_tmpdir());
    snprintf(a, sizeof a, "%s/dV.npy", dir);
    cr_assert_eq(mkdir_p(a), 0);
    snprintf(a, sizeof a, "--device cpu --B 1 --H 1 --Nq 20 --Nk 20 --d 16 --out %s", dir);
    cr_assert_eq(run(a, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "flash_bwd: error: --out ") && strstr(out, "dV.npy: it is a directory"), "%s", out);
    cr_assert_eq(count_entries(dir), 1, "dQ.npy/dK.npy (or a temporary) were left in %s", dir);
    cr_assert_eq(run("--device cpu --out /proc/cs336-bwd", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "--out /proc/cs336-bwd: cannot create the directory /proc/cs336-bwd: "), "%s", out);
    cr_assert_null(strstr(out, "forward "), "the run happened before the --out check:\n%s", out);
}

// An empty axis was an internal error (exit 1); sizes that cannot fit an out-of-memory death.
Test(bwd_cli, empty_axis_and_impossible_sizes_are_bad_input) {
    char q0[600], k[600], err[512], a[4096], out[4096];
    const int64_t s0[3] = {4, 0, 64}, s64[3] = {4, 16, 64};
    float* z = calloc(4 * 16 * 64, sizeof(float));
    snprintf(q0, sizeof q0, "%s/bwd_q_empty.npy", test_tmpdir());
    snprintf(k, sizeof k, "%s/bwd_k.npy", test_tmpdir());
    cr_assert_eq(npy_write(q0, DT_F32, 3, s0, z, err, sizeof err), 0, "%s", err);
    cr_assert_eq(npy_write(k, DT_F32, 3, s64, z, err, sizeof err), 0, "%s", err);
    free(z);
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s --dO %s", q0, k, k, q0);
    cr_assert_eq(run(a, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "bwd_q_empty.npy: shape [4, 0, 64]: every size must be between 1 and"), "%s", out);
    cr_assert_eq(run("--device cpu --out '' --B 1000 --Nq 2000000000", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "--B --H --Nq --Nk --d (B 1000, H 4, Nq 2000000000") && strstr(out, "host memory here"),
              "%s", out);
}

// The benchmark checks every flag before it asks for a GPU: each names itself.
Test(bwd_cli, bench_checks_every_flag_before_the_gpu) {
    struct {
        const char* args;
        const char* text;
    } cases[] = {
        {"--N abc", "--N: not a comma list of sizes"},
        {"--d 48", "--d: head dim 48 not supported"},
        {"--dtype f16", "--dtype: 'f16' is not one of bf16|f32"},
        {"--causal 2", "--causal must be 1 (causal) or 0 (not)"},
        {"--budget-ms -1", "--budget-ms must be >= 0"},
        {"--dobench-rep-ms -5", "--dobench-rep-ms and --dobench-warmup-ms must be finite and >= 0"},
        {"--f32-max-N -1", "--f32-max-N and --naive-max-N must be >= 0"},
        {"--csv x.txt", "--csv x.txt: the name must end in .csv"},
        {"--csv /proc/cs336/x.csv", "cannot create files in /proc"},
        {"--fwd-variants 64", "--fwd-variants: expected a list like 64:2,128:1"},
        {"--fwd-variants 64:999", "--fwd-variants: head dim 64 has"},
    };
    char cmd[1024], out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/04_flashattn_bwd/bench %s", build_dir(), cases[i].args);
        cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s: %s", cases[i].args, out);
        cr_assert(strstr(out, cases[i].text), "%s: lacks \"%s\": %s", cases[i].args, cases[i].text, out);
    }
}

// make bench-04 without a GPU printed an empty heading and went on.
Test(bwd_cli, bench_script_without_gpu_says_so_once) {
    if (gpu_count() > 0) cr_skip_test("there is a GPU: the script would run the benchmark");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "BUILD=%s 04_flashattn_bwd/bench.sh", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "make bench-04: error: needs a CUDA GPU: ") == out, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
}
