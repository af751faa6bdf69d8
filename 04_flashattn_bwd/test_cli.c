// Stage 04's program: bad input gives one clear line and exit 2; good input writes the
// gradients, which match PyTorch's (CPU run, so this test runs everywhere).
#include "04_flashattn_bwd/test_bwd_util.h"

static int run(const char* args, char* out, size_t len) {
    char cmd[2048];
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
    cr_assert(strstr(out, "GPU kernel"), "%s", out);
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
