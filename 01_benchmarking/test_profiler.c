// The CUPTI kernel summary (common/profiler.c): known kernels launched a known number of times
// in two phases must come back with those counts under those phases; a kernel still running
// when the host switches phase belongs to the phase it was LAUNCHED in.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "01_benchmarking/profiler_test_kernels.h"
#include "common/check.h"
#include "common/profiler.h"
#include "tests/harness.h"

typedef struct {
    char phase[48], kernel[128];
    long calls;
    double total_ms, share;
} prow_t;

// Reads profiler_write_csv's output; returns the number of rows.
static int read_csv(const char* path, prow_t* rows, int max) {
    FILE* f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    char line[1024];
    cr_assert(fgets(line, sizeof line, f), "empty CSV");
    cr_assert_str_eq(line, "phase,kernel,calls,total_ms,mean_us,min_us,max_us,share_pct\n");
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        char* fld[8];
        int nf = 0;
        for (char *p = line, *tok; nf < 8 && (tok = strsep(&p, ",\n")) != NULL;) fld[nf++] = tok;
        cr_assert_eq(nf, 8, "row %d: %d fields", n, nf);
        snprintf(rows[n].phase, sizeof rows[n].phase, "%s", fld[0]);
        snprintf(rows[n].kernel, sizeof rows[n].kernel, "%s", fld[1]);
        rows[n].calls = atol(fld[2]);
        rows[n].total_ms = atof(fld[3]);
        rows[n].share = atof(fld[7]);
        n++;
    }
    fclose(f);
    return n;
}

// Calls of kernels whose name contains `kernel` in `phase` (0 if absent).
static long calls_of(const prow_t* r, int n, const char* phase, const char* kernel, double* ms) {
    long c = 0;
    if (ms) *ms = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].phase, phase) == 0 && strstr(r[i].kernel, kernel)) {
            c += r[i].calls;
            if (ms) *ms += r[i].total_ms;
        }
    return c;
}

static void dump(const prow_t* r, int n) {
    for (int i = 0; i < n; i++)
        fprintf(stderr, "  %s | %s | %ld | %.3f ms\n", r[i].phase, r[i].kernel, r[i].calls, r[i].total_ms);
}

Test(profiler, available_only_with_cupti_and_a_gpu) {
    int want = HAVE_CUPTI && gpu_count() > 0;
    cr_assert_eq(profiler_available(), want, "profiler_available() = %d, expected %d", profiler_available(), want);
}

Test(profiler, without_gpu_everything_is_a_noop) {
    if (profiler_available()) cr_skip_test("a GPU with CUPTI is present: the no-op path is not taken");
    profiler_start();
    profiler_set_phase("forward");
    profiler_stop();
    char path[512];
    snprintf(path, sizeof path, "%s/noop/k.csv", test_tmpdir());
    cr_assert_eq(profiler_write_csv(path), 0);
    prow_t rows[4];
    cr_assert_eq(read_csv(path, rows, 4), 0, "no kernels can have been recorded");
}

Test(profiler, counts_and_phase_split) {
    SKIP_WITHOUT_GPU();
    cr_assert(profiler_available(), "GPU present but built without CUPTI (HAVE_CUPTI=%d)", HAVE_CUPTI);
    const int n = 1000 + 37;  // odd size: a partial last block
    float* x = NULL;
    CUDA_CHECK(cudaMalloc((void**)&x, n * sizeof(float)));
    ptk_alpha(x, n);  // before profiler_start: must not be counted
    CUDA_CHECK(cudaDeviceSynchronize());

    profiler_start();
    profiler_set_phase("forward");
    for (int i = 0; i < 3; i++) ptk_alpha(x, n);
    ptk_beta(x, n);
    profiler_set_phase("backward");
    for (int i = 0; i < 5; i++) ptk_beta(x, n);
    for (int i = 0; i < 2; i++) ptk_alpha(x, n);
    profiler_set_phase("forward");  // a phase entered again accumulates into the same rows
    ptk_beta(x, n);
    profiler_stop();
    ptk_alpha(x, n);  // after profiler_stop: must not be counted
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(x));

    char path[512];
    snprintf(path, sizeof path, "%s/split/k.csv", test_tmpdir());
    cr_assert_eq(profiler_write_csv(path), 0);
    prow_t r[64];
    int nr = read_csv(path, r, 64);
    dump(r, nr);
    cr_assert_eq(calls_of(r, nr, "forward", "ptk_alpha_kernel", NULL), 3, "alpha in forward");
    cr_assert_eq(calls_of(r, nr, "forward", "ptk_beta_kernel", NULL), 2, "beta in forward");
    cr_assert_eq(calls_of(r, nr, "backward", "ptk_beta_kernel", NULL), 5, "beta in backward");
    cr_assert_eq(calls_of(r, nr, "backward", "ptk_alpha_kernel", NULL), 2, "alpha in backward");
    cr_assert_eq(calls_of(r, nr, "unmatched", "", NULL), 0, "kernels whose launch was not seen");
    cr_assert_eq(calls_of(r, nr, "unphased", "", NULL), 0, "kernels before any phase");
    double share = 0;
    for (int i = 0; i < nr; i++) share += r[i].share;
    cr_assert(share > 99.9 && share < 100.1, "shares add up to %.3f%%, not 100%%", share);

    // The Markdown summary names both phases and the kernels.
    char md[512];
    snprintf(md, sizeof md, "%s/split/summary.md", test_tmpdir());
    FILE* f = fopen(md, "w");
    cr_assert(f);
    profiler_print_summary(f, 10);
    fclose(f);
    char cmd[700], out[256];
    snprintf(cmd, sizeof cmd, "grep -c 'ptk_alpha_kernel\\|phase forward\\|phase backward' '%s'", md);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "grep failed");
    cr_assert_geq(atoi(out), 4, "summary lacks phases or kernels (%d matching lines)", atoi(out));
}

Test(profiler, phase_is_taken_at_launch_not_at_completion) {
    SKIP_WITHOUT_GPU();
    cr_assert(profiler_available(), "GPU present but built without CUPTI (HAVE_CUPTI=%d)", HAVE_CUPTI);
    float* x = NULL;
    CUDA_CHECK(cudaMalloc((void**)&x, 64 * sizeof(float)));
    profiler_start();
    profiler_set_phase("forward");
    ptk_spin_ms(50.0);               // still running on the GPU...
    profiler_set_phase("backward");  // ...when the host moves on (no synchronisation)
    ptk_alpha(x, 64);                // queued behind the spin: it runs after it, in "backward"
    cudaError_t q = cudaStreamQuery(0);
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
    profiler_stop();
    CUDA_CHECK(cudaFree(x));
    cr_assert_eq(q, cudaErrorNotReady, "the spin kernel had already finished: the test proves nothing");

    char path[512];
    snprintf(path, sizeof path, "%s/launch/k.csv", test_tmpdir());
    cr_assert_eq(profiler_write_csv(path), 0);
    prow_t r[16];
    int nr = read_csv(path, r, 16);
    dump(r, nr);
    double ms = 0;
    cr_assert_eq(calls_of(r, nr, "forward", "ptk_spin_kernel", &ms), 1, "spin belongs to forward");
    // the spin is timed by the GPU: 50 ms asked, a loose floor for clock granularity
    cr_assert_geq(ms, 45.0, "spin kernel took %.3f ms on the GPU, expected about 50", ms);
    cr_assert_eq(calls_of(r, nr, "backward", "ptk_spin_kernel", NULL), 0, "spin leaked into backward");
    cr_assert_eq(calls_of(r, nr, "backward", "ptk_alpha_kernel", NULL), 1, "alpha belongs to backward");
}

Test(profiler, restart_forgets_the_previous_session) {
    SKIP_WITHOUT_GPU();
    cr_assert(profiler_available(), "GPU present but built without CUPTI (HAVE_CUPTI=%d)", HAVE_CUPTI);
    float* x = NULL;
    CUDA_CHECK(cudaMalloc((void**)&x, 128 * sizeof(float)));
    profiler_start();
    profiler_set_phase("optimizer");
    for (int i = 0; i < 4; i++) ptk_beta(x, 128);
    profiler_stop();
    profiler_start();
    profiler_set_phase("forward");
    ptk_alpha(x, 128);
    profiler_stop();
    CUDA_CHECK(cudaFree(x));
    char path[512];
    snprintf(path, sizeof path, "%s/restart/k.csv", test_tmpdir());
    cr_assert_eq(profiler_write_csv(path), 0);
    prow_t r[16];
    int nr = read_csv(path, r, 16);
    dump(r, nr);
    cr_assert_eq(nr, 1, "only the second session's one kernel");
    cr_assert_eq(calls_of(r, nr, "forward", "ptk_alpha_kernel", NULL), 1);
}
