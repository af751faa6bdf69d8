// Shared test helpers: allclose with a useful failure report, running programs, paths.
#include "tests/harness.h"

#include <limits.h>
#include <stdarg.h>
#include <math.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/npy.h"

static int report(const char* what, size_t n, size_t nbad, size_t first_bad, double max_abs,
                  double max_rel, const float* got, const float* want, double rtol, double atol) {
    if (nbad == 0) return 1;
    fprintf(stderr, "allclose(%s): %zu of %zu elements differ (rtol %g, atol %g); max abs err %.3g, "
            "max rel err %.3g; first bad index %zu\n", what, nbad, n, rtol, atol, max_abs, max_rel,
            first_bad);
    size_t shown = 0;
    for (size_t i = first_bad; i < n && shown < 5; i++) {
        double a = got[i], b = want[i];
        if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
            fprintf(stderr, "  [%zu] got %.8g want %.8g\n", i, a, b);
            shown++;
        }
    }
    return 0;
}

int allclose_report(const float* got, const float* want, size_t n, double rtol, double atol,
                    const char* what) {
    size_t nbad = 0, first_bad = 0;
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = got[i], b = want[i];
        const double d = fabs(a - b);
        // written so that NaN in either operand fails: NaN compares false
        const int ok = d <= atol + rtol * fabs(b);
        if (!ok) {
            if (nbad++ == 0) first_bad = i;
        }
        if (isnan(d)) {
            max_abs = NAN;
        } else if (!isnan(max_abs)) {
            if (d > max_abs) max_abs = d;
            if (fabs(b) > 0 && d / fabs(b) > max_rel) max_rel = d / fabs(b);
        }
    }
    return report(what, n, nbad, first_bad, max_abs, max_rel, got, want, rtol, atol);
}

int allclose_bf16_report(const uint16_t* got, const float* want, size_t n, double rtol, double atol,
                         const char* what) {
    float* g = malloc((n ? n : 1) * sizeof(float));
    cr_assert_not_null(g);
    f32_from_bf16_array(g, got, n);
    const int ok = allclose_report(g, want, n, rtol, atol, what);
    free(g);
    return ok;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return NAN;
        if (d > m) m = d;
    }
    return m;
}

int run_capture_timed(const char* cmd, char* out, size_t outlen, double* seconds) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    const int st = run_capture(cmd, out, outlen);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (seconds) *seconds = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    return st;
}

int run_capture(const char* cmd, char* out, size_t outlen) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE* p = popen(full, "r");
    cr_assert_not_null(p, "popen(%s) failed", cmd);
    size_t off = 0;
    if (outlen) out[0] = '\0';
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, p)) > 0) {
        if (outlen && off < outlen - 1) {
            size_t take = k < outlen - 1 - off ? k : outlen - 1 - off;
            memcpy(out + off, buf, take);
            off += take;
            out[off] = '\0';
        }
    }
    int st = pclose(p);
    if (st == -1) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int refused_in_one_line(int st, const char* out, const char* prog, ...) {
    if (st != 2 || !out) return 0;
    char head[128];
    snprintf(head, sizeof head, "%s: error: ", prog);
    if (strncmp(out, head, strlen(head)) != 0) return 0;
    const char* nl = strchr(out, '\n');
    if (!nl || nl[1] != '\0') return 0;  // exactly one line, ended
    va_list ap;
    va_start(ap, prog);
    int ok = 1;
    for (const char* n = va_arg(ap, const char*); n && ok; n = va_arg(ap, const char*)) ok = strstr(out, n) != NULL;
    va_end(ap);
    return ok;
}

int test_gpu_ranks(void) {
    const char* env = getenv("TEST_GPU_RANKS");
    if (!env || !*env) return 2;
    char* end = NULL;
    const long n = strtol(env, &end, 10);
    cr_assert(*end == '\0' && n >= 2 && n <= 64, "TEST_GPU_RANKS='%s': give a whole number of ranks in 2..64 (unset: 2)", env);
    return (int)n;
}

const char* build_dir(void) {
    static char dir[PATH_MAX] = "";
    if (dir[0]) return dir;
    const char* env = getenv("BUILD");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
        return dir;
    }
    // The test binary lives in <build>/<part>/test_xx: go two levels up from it.
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k > 0) {
        self[k] = '\0';
        char* s = strrchr(self, '/');
        if (s) *s = '\0';
        s = strrchr(self, '/');
        if (s) *s = '\0';
        snprintf(dir, sizeof dir, "%s", self);
        return dir;
    }
    snprintf(dir, sizeof dir, "build");
    return dir;
}

static char g_tmpdir[256] = "";
static pid_t g_tmpdir_owner;

static int remove_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

// At the test process's exit its directory goes (a forked child that exits leaves it alone);
// CS336C_KEEP_TMP=1 keeps it for a look after a failure.
static void remove_tmpdir(void) {
    if (!g_tmpdir[0] || getpid() != g_tmpdir_owner) return;
    const char* keep = getenv("CS336C_KEEP_TMP");
    if (keep && strcmp(keep, "1") == 0) return;
    nftw(g_tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char* test_tmpdir(void) {
    if (!g_tmpdir[0]) {
        snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/cs336c-test-%d-XXXXXX", (int)getpid());
        cr_assert_not_null(mkdtemp(g_tmpdir), "mkdtemp failed");
        g_tmpdir_owner = getpid();
        atexit(remove_tmpdir);
    }
    return g_tmpdir;
}

const char* test_path(const char* name) {
    static char p[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", test_tmpdir(), name);
    return p[k];
}

const char* test_plain_file(const char* name) {
    const char* path = test_path(name);
    FILE* f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fclose(f);
    return path;
}

const char* fixture_path(const char* name, char* buf, size_t len) {
    snprintf(buf, len, "tests/fixtures/%s", name);
    return buf;
}

float* fixture_load_f32(const char* rel, size_t want_numel) {
    char path[512], err[512];
    fixture_path(rel, path, sizeof path);
    npy_array_t a;
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.dtype, DT_F32, "%s: not float32", path);
    cr_assert_eq(a.nbytes, want_numel * sizeof(float), "%s: %zu bytes, expected %zu", path, a.nbytes,
                 want_numel * sizeof(float));
    return (float*)a.data;
}
