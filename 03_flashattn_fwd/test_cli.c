// Stage 03: the flash_fwd program. Bad flags and bad .npy inputs give one clear line and exit
// status 2; the .npy round trip reproduces the torch fixture (CPU here, GPU when present).
#include <stdio.h>
#include <sys/stat.h>
#include "common/fileio.h"
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

// ---- bad input: named before any output or GPU work

static int count_entries(const char* dir) {
    char cmd[2200], txt[64];
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | wc -l", dir);
    run_capture(cmd, txt, sizeof txt);
    return atoi(txt);
}

// q of shape [4, 0, 64] ended in an internal error (flash_fwd_ref.c: bad sizes, exit 1).
Test(cli, empty_axis_is_bad_input) {
    const int64_t s0[3] = {4, 0, 64}, s64[3] = {4, 16, 64};
    const char* q0 = write_npy("q_empty.npy", DT_F32, 3, s0);
    const char* k = write_npy("k_ok.npy", DT_F32, 3, s64);
    char a[2048];
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", q0, k, k);
    expect_fail(a, "shape [4, 0, 64]: every size must be between 1 and");
    snprintf(a, sizeof a, "--device cpu --out '' --q %s --k %s --v %s", k, q0, q0);
    expect_fail(a, "q_empty.npy: shape [4, 0, 64]");
}

// O and L are one set: an L.npy that cannot be replaced used to leave O.npy behind.
Test(cli, outputs_are_one_set) {
    char dir[600], a[2048], out[4096];
    snprintf(dir, sizeof dir, "%s/fwd_set", test_tmpdir());
    snprintf(a, sizeof a, "%s/L.npy", dir);
    cr_assert_eq(mkdir_p(a), 0);
    snprintf(a, sizeof a, "--device cpu --B 1 --H 1 --Nq 20 --Nk 20 --d 16 --out %s", dir);
    cr_assert_eq(run_prog(a, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "L.npy: it is a directory"), "%s", out);
    cr_assert_eq(count_entries(dir), 1, "O.npy (or a temporary) was left in %s", dir);
    expect_fail("--device cpu --out /proc/cs336-fwd", "--out /proc/cs336-fwd: cannot create the directory /proc/cs336-fwd: ");
    run_prog("--device cpu --out /proc/cs336-fwd", out, sizeof out);
    cr_assert_null(strstr(out, " ms"), "the run happened before the --out check:\n%s", out);
}

// Sizes that cannot fit: exit 2 naming them (was an out-of-memory death, exit 1).
Test(cli, impossible_sizes_are_bad_input) {
    expect_fail("--device cpu --out '' --B 1000 --Nq 2000000000", "--B --H --Nq --Nk --d (B 1000, H 4, Nq 2000000000");
    expect_fail("--device cpu --out '' --B 1000 --Nq 2000000000", "of host memory here");
    expect_fail("--device cpu --out '' --Bq 100000", "--Bq and --Bk must be between 16 and 4096");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s/03_flashattn_fwd/demo --N 2000000000", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "the demo crashed on an unchecked malloc before: %s", out);
    cr_assert(strstr(out, "demo: error: --H 4 --N 2000000000 --d 64: needs "), "%s", out);
}

// The benchmark checked for a GPU first, and never checked --B, --H, --causal, --dtype,
// --budget-ms: every bad flag now names itself, on any machine.
Test(cli, bench_checks_every_flag_before_the_gpu) {
    struct {
        const char* args;
        const char* text;
    } cases[] = {
        {"--N abc", "--N: not a comma list of sizes: 'abc'"},
        {"--d 48", "--d: head dim 48 not supported"},
        {"--variants garbage", "--variants: expected a list like 64:2,128:1"},
        {"--B 0", "--B and --H must be >= 1"},
        {"--H -2", "--B and --H must be >= 1"},
        {"--causal 2", "--causal must be 1 (causal) or 0 (not)"},
        {"--dtype f16", "--dtype: 'f16' is not one of bf16|f32"},
        {"--dtype bf16,", "--dtype: '' is not one of bf16|f32"},
        {"--budget-ms -1", "--budget-ms must be >= 0"},
        {"--naive-max-N -1", "--naive-max-N must be >= 0"},
        {"--csv out.txt", "--csv out.txt: the name must end in .csv"},
        {"--csv /proc/cs336/x.csv", "--csv /proc/cs336/x.csv: cannot create files in /proc"},
    };
    char cmd[1024], out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/03_flashattn_fwd/bench %s", build_dir(), cases[i].args);
        cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s: %s", cases[i].args, out);
        cr_assert(strstr(out, cases[i].text), "%s: lacks \"%s\": %s", cases[i].args, cases[i].text, out);
    }
}

// make bench-03 without a GPU ran both sweeps, blamed gnuplot and left a 1-byte report.
Test(cli, bench_script_without_gpu_says_so_once) {
    if (gpu_count() > 0) cr_skip_test("there is a GPU: the script would run the benchmark");
    char cmd[2048], out[4096], res[600];
    snprintf(res, sizeof res, "%s/bench03_results", test_tmpdir());
    snprintf(cmd, sizeof cmd, "BUILD=%s RESULTS=%s 03_flashattn_fwd/bench.sh", build_dir(), res);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "make bench-03: error: needs a CUDA GPU: ") == out, "%s", out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    struct stat st;
    cr_assert_neq(stat(res, &st), 0, "%s was created", res);
}

// flash_fwd --device cuda: the flags are judged before the GPU is asked for.
Test(cli, flags_before_the_gpu) {
    expect_fail("--device cuda --variant 99", "--variant: head dim 64 has variants 0 .. ");
    expect_fail("--device cuda --d 48", "--d: head dim 48 not supported");
    expect_fail("--device cuda --reps 0", "--reps must be >= 1");
}
