// Stage 03: the flash_fwd program. Bad flags and bad .npy inputs give one clear line and exit
// status 2; the .npy round trip reproduces the torch fixture (CPU here, GPU when present).
#include <stdio.h>
#include "common/npy.h"
#include "03_flashattn_fwd/test_util.h"

static int run_prog(const char* args, char* out, size_t len) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/03_flashattn_fwd/flash_fwd %s", build_dir(), args);
    return run_capture(cmd, out, len);
}

static void expect_fail(const char* args, const char* needle) {
    char out[4096];
    const int rc = run_prog(args, out, sizeof out);
    cr_assert_eq(rc, 2, "flash_fwd %s: exit %d, expected 2; output:\n%s", args, rc, out);
    cr_assert(strstr(out, needle), "flash_fwd %s: output does not mention '%s':\n%s", args, needle, out);
}

static const char* write_npy(const char* name, dtype_t dt, int rank, const int64_t* shape) {
    static char paths[8][512];
    static int next = 0;
    char* p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", test_tmpdir(), name);
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
    float* data = calloc(n, 4);  // 4 bytes covers f32 and i32
    char err[512];
    cr_assert_eq(npy_write(p, dt, rank, shape, data, err, sizeof err), 0, "%s", err);
    free(data);
    return p;
}

Test(cli, bad_flags) {
    expect_fail("--d 48 --device cpu", "head dim 48");
    expect_fail("--dtype fp8", "--dtype");
    expect_fail("--device tpu", "--device");
    expect_fail("--Nq 0 --device cpu", "must be >= 1");
    expect_fail("--Bq 8 --device cpu --out ''", "--Bq");
    expect_fail("--no-such-flag", "no-such-flag");
}

Test(cli, bad_npy_inputs) {
    const int64_t s64[3] = {2, 16, 64}, s32[3] = {2, 16, 32}, s48[3] = {2, 16, 48}, s2[2] = {16, 64};
    const char* q = write_npy("q.npy", DT_F32, 3, s64);
    const char* k = write_npy("k.npy", DT_F32, 3, s64);
    const char* k32 = write_npy("k32.npy", DT_F32, 3, s32);
    const char* v32 = write_npy("v32.npy", DT_F32, 3, s32);
    const char* ki = write_npy("ki.npy", DT_I32, 3, s64);
    const char* q48 = write_npy("q48.npy", DT_F32, 3, s48);
    const char* q2 = write_npy("q2.npy", DT_F32, 2, s2);
    char a[2048];
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", q, k, v32);  // v differs from k
    expect_fail(a, "k and v must match");
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", q, k32, v32);  // head dims differ
    expect_fail(a, "head dim must match");
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", q, ki, k);  // int32 k
    expect_fail(a, "int32");
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", q48, q48, q48);
    expect_fail(a, "head dim 48");
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", q2, q2, q2);
    expect_fail(a, "rank 2");
    snprintf(a, sizeof a, "--device cpu --out '' --q %s", q);
    expect_fail(a, "go together");
    expect_fail("--device cpu --out '' --q /nonexistent/q.npy --k /x --v /y", "/nonexistent/q.npy");
}

// The program on the fixture's inputs writes the fixture's O and L.
static void roundtrip(const char* device, const char* dtype, double tol) {
    char q[512], k[512], v[512], a[4096], out[4096];
    fixture_path("attention/q.npy", q, sizeof q);
    fixture_path("attention/k.npy", k, sizeof k);
    fixture_path("attention/v.npy", v, sizeof v);
    snprintf(a, sizeof a, "--device %s --dtype %s --causal --q %s --k %s --v %s --out %s/rt_%s", device, dtype, q, k, v,
             test_tmpdir(), device);
    const int rc = run_prog(a, out, sizeof out);
    cr_assert_eq(rc, 0, "flash_fwd %s: exit %d:\n%s", a, rc, out);
    const size_t nqd = (size_t)FX_BH * FX_N * FX_D, nl = (size_t)FX_BH * FX_N;
    float* O_ref = load_fixture("causal_O", nqd);
    float* L_ref = load_fixture("causal_L", nl);
    char path[600], err[512];
    npy_array_t o, l;
    snprintf(path, sizeof path, "%s/rt_%s/O.npy", test_tmpdir(), device);
    cr_assert_eq(npy_read(path, &o, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/rt_%s/L.npy", test_tmpdir(), device);
    cr_assert_eq(npy_read(path, &l, err, sizeof err), 0, "%s", err);
    cr_assert(o.rank == 3 && o.shape[0] == FX_BH && o.shape[1] == FX_N && o.shape[2] == FX_D, "O shape");
    cr_assert(l.rank == 2 && l.shape[0] == FX_BH && l.shape[1] == FX_N, "L shape");
    ASSERT_ALLCLOSE((float*)o.data, O_ref, nqd, tol, tol, "O.npy vs torch fixture");
    ASSERT_ALLCLOSE((float*)l.data, L_ref, nl, tol, tol, "L.npy vs torch fixture");
    npy_array_free(&o), npy_array_free(&l), free(O_ref), free(L_ref);
}

// The course's tolerance; bf16 inputs need 3e-2 (rounding q, k, v moves the scores by ~1e-2).
Test(cli, npy_roundtrip_cpu) { roundtrip("cpu", "f32", 1e-2); }
Test(cli, npy_roundtrip_cuda_f32) { SKIP_WITHOUT_GPU(); roundtrip("cuda", "f32", 1e-2); }
Test(cli, npy_roundtrip_cuda_bf16) { SKIP_WITHOUT_GPU(); roundtrip("cuda", "bf16", 3e-2); }
