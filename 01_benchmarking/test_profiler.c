// The CUPTI kernel summary (common/profiler.c): known kernels launched a known number of times
// in two phases must come back with those counts under those phases; a kernel still running
// when the host switches phase belongs to the phase it was LAUNCHED in; and to the REGION (the
// innermost NVTX range, common/nvtx.h) open when it was launched, "-" when none was.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "01_benchmarking/profiler_test_kernels.h"
#include "common/check.h"
#include "common/nvtx.h"
#include "common/profiler.h"
#include "tests/harness.h"

typedef struct {
    char phase[48], kernel[128], region[64];
    long calls;
    double total_ms, share;
} prow_t;

// Reads profiler_write_csv's output; returns the number of rows.
static int read_csv(const char* path, prow_t* rows, int max) {
    FILE* f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    char line[1024];
    cr_assert(fgets(line, sizeof line, f), "empty CSV");
    // The first eight columns as before (existing readers), the region last.
    cr_assert_str_eq(line, "phase,kernel,calls,total_ms,mean_us,min_us,max_us,share_pct,region\n");
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        line[strcspn(line, "\n")] = 0;
        char* fld[10];
        int nf = 0;
        for (char *p = line, *tok; nf < 10 && (tok = strsep(&p, ",")) != NULL;) fld[nf++] = tok;
        cr_assert_eq(nf, 9, "row %d: %d fields", n, nf);
        snprintf(rows[n].phase, sizeof rows[n].phase, "%s", fld[0]);
        snprintf(rows[n].kernel, sizeof rows[n].kernel, "%s", fld[1]);
        rows[n].calls = atol(fld[2]);
        rows[n].total_ms = atof(fld[3]);
        rows[n].share = atof(fld[7]);
        snprintf(rows[n].region, sizeof rows[n].region, "%s", fld[8]);
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

// Calls of kernels whose name contains `kernel` launched in `phase` inside region `region`.
static long calls_in(const prow_t* r, int n, const char* phase, const char* region, const char* kernel) {
    long c = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].phase, phase) == 0 && strcmp(r[i].region, region) == 0 && strstr(r[i].kernel, kernel))
            c += r[i].calls;
    return c;
}

static void dump(const prow_t* r, int n) {
    for (int i = 0; i < n; i++)
        fprintf(stderr, "  %s | %s | %s | %ld | %.3f ms\n", r[i].phase, r[i].region, r[i].kernel, r[i].calls,
                r[i].total_ms);
}

// ---- regions: the per-thread range stack (CPU, no GPU needed) ----

Test(profiler_regions, tracking_off_means_no_region) {
    nvtx_track(0);
    nvtx_push("a");
    cr_assert_eq(nvtx_region_current(), NVTX_REGION_NONE);
    nvtx_pop();
    cr_assert_str_eq(nvtx_region_name(NVTX_REGION_NONE), "-");
}

Test(profiler_regions, innermost_range_and_balanced_pops) {
    nvtx_track(1);
    cr_assert_eq(nvtx_region_current(), NVTX_REGION_NONE, "nothing open yet");
    nvtx_push("outer");
    const int outer = nvtx_region_current();
    cr_assert_str_eq(nvtx_region_name(outer), "outer");
    nvtx_push("inner");
    cr_assert_str_eq(nvtx_region_name(nvtx_region_current()), "inner", "the innermost range wins");
    nvtx_pop();
    cr_assert_eq(nvtx_region_current(), outer, "after the pop: the outer range again");
    char buf[16];  // a name built in a reused buffer is interned by content, not by pointer
    snprintf(buf, sizeof buf, "step %d", 2);
    nvtx_push(buf);
    const int s2 = nvtx_region_current();
    nvtx_pop();
    snprintf(buf, sizeof buf, "step %d", 3);
    nvtx_push(buf);
    cr_assert_neq(nvtx_region_current(), s2, "'step 3' got the id of 'step 2'");
    cr_assert_str_eq(nvtx_region_name(nvtx_region_current()), "step 3");
    nvtx_pop();
    nvtx_push("outer");  // the same name: the same id
    cr_assert_eq(nvtx_region_current(), outer);
    nvtx_pop();
    nvtx_pop();
    cr_assert_eq(nvtx_region_current(), NVTX_REGION_NONE);
    nvtx_pop();  // a pop with nothing open is ignored
    nvtx_push("again");
    cr_assert_str_eq(nvtx_region_name(nvtx_region_current()), "again", "an extra pop broke the stack");
    nvtx_pop();
    nvtx_track(0);
}

Test(profiler_regions, a_new_session_forgets_ranges_left_open) {
    nvtx_track(1);
    nvtx_push("left open");
    nvtx_track(0);  // the session ends inside the range...
    nvtx_track(1);  // ...and the next one starts with nothing open
    cr_assert_eq(nvtx_region_current(), NVTX_REGION_NONE, "a range of the previous profiling session leaked");
    nvtx_pop();  // the late pop of "left open": ignored, not an underflow
    nvtx_push("x");
    cr_assert_str_eq(nvtx_region_name(nvtx_region_current()), "x");
    nvtx_pop();
    nvtx_track(0);
}

Test(profiler_regions, deeper_than_the_stack_is_named_too_deep) {
    nvtx_track(1);
    for (int i = 0; i < NVTX_MAX_DEPTH; i++) nvtx_push("d");
    cr_assert_str_eq(nvtx_region_name(nvtx_region_current()), "d");
    nvtx_push("beyond");
    nvtx_push("beyond2");
    cr_assert_eq(nvtx_region_current(), NVTX_REGION_TOO_DEEP);
    nvtx_pop();
    nvtx_pop();
    cr_assert_str_eq(nvtx_region_name(nvtx_region_current()), "d", "pops past the limit stay balanced");
    for (int i = 0; i < NVTX_MAX_DEPTH; i++) nvtx_pop();
    cr_assert_eq(nvtx_region_current(), NVTX_REGION_NONE);
    nvtx_track(0);
}

static void* other_thread(void* arg) {
    *(int*)arg = nvtx_region_current();  // this thread has opened nothing
    return NULL;
}

Test(profiler_regions, the_stack_is_per_thread) {
    nvtx_track(1);
    nvtx_push("main thread");
    int seen = -1;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, other_thread, &seen), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(seen, NVTX_REGION_NONE, "another thread saw this thread's range");
    nvtx_pop();
    nvtx_track(0);
}

// ---- the aggregation (pure) ----

Test(profiler_regions, aggregate_by_region_and_across) {
    // phase 2, kernels 7 and 9, regions 5 and 6; phase 3, kernel 7 outside any range
    const profiler_rec_t rec[] = {
        {2, 5, 7, 100}, {2, 6, 7, 300}, {2, 5, 7, 50}, {2, 5, 9, 1000}, {3, 0, 7, 10}, {2, 6, 7, 20},
    };
    const size_t n = sizeof rec / sizeof rec[0];
    profiler_agg_t out[6];
    size_t m = profiler_aggregate(rec, n, 1, out);
    cr_assert_eq(m, 4, "(phase, region, kernel) groups: %zu", m);
    // sorted by phase, region, then total descending
    cr_assert(out[0].phase == 2 && out[0].region == 5 && out[0].name == 9 && out[0].calls == 1);
    cr_assert(out[1].phase == 2 && out[1].region == 5 && out[1].name == 7 && out[1].calls == 2);
    cr_assert_float_eq(out[1].total_ns, 150, 1e-9);
    cr_assert_float_eq(out[1].min_ns, 50, 1e-9);
    cr_assert_float_eq(out[1].max_ns, 100, 1e-9);
    cr_assert(out[2].phase == 2 && out[2].region == 6 && out[2].name == 7 && out[2].calls == 2);
    cr_assert_float_eq(out[2].total_ns, 320, 1e-9);
    cr_assert(out[3].phase == 3 && out[3].region == 0 && out[3].calls == 1);
    m = profiler_aggregate(rec, n, 0, out);
    cr_assert_eq(m, 3, "(phase, kernel) groups: %zu", m);
    cr_assert(out[0].phase == 2 && out[0].region == -1 && out[0].name == 9);
    cr_assert(out[1].phase == 2 && out[1].name == 7 && out[1].calls == 4, "kernel 7 across both regions");
    cr_assert_float_eq(out[1].total_ns, 470, 1e-9);
    cr_assert_float_eq(out[1].min_ns, 20, 1e-9);
    cr_assert_float_eq(out[1].max_ns, 300, 1e-9);
    cr_assert(out[2].phase == 3 && out[2].calls == 1);
    cr_assert_eq(profiler_aggregate(rec, 0, 1, out), 0, "no records, no rows");
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
    // The spin must still run when the host has moved on. A loaded host (other tests beside this
    // one) can take longer than a short spin between the launch and the query: then the attempt
    // proves nothing and a longer spin is tried.
    const double spins[] = {50.0, 400.0, 2000.0};
    double asked = 0;
    cudaError_t q = cudaSuccess;
    for (int i = 0; i < 3 && q != cudaErrorNotReady; i++) {
        asked = spins[i];
        profiler_start();
        profiler_set_phase("forward");
        ptk_spin_ms(asked);              // still running on the GPU...
        profiler_set_phase("backward");  // ...when the host moves on (no synchronisation)
        ptk_alpha(x, 64);                // queued behind the spin: it runs after it, in "backward"
        q = cudaStreamQuery(0);
        (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
        profiler_stop();
    }
    CUDA_CHECK(cudaFree(x));
    cr_assert_eq(q, cudaErrorNotReady, "even a %.0f ms spin had finished before the host moved on: the test proves nothing", asked);

    char path[512];
    snprintf(path, sizeof path, "%s/launch/k.csv", test_tmpdir());
    cr_assert_eq(profiler_write_csv(path), 0);
    prow_t r[16];
    int nr = read_csv(path, r, 16);
    dump(r, nr);
    double ms = 0;
    cr_assert_eq(calls_of(r, nr, "forward", "ptk_spin_kernel", &ms), 1, "spin belongs to forward");
    // the spin is timed by the GPU: a loose floor (90 % of what was asked) for clock granularity
    cr_assert_geq(ms, 0.9 * asked, "spin kernel took %.3f ms on the GPU, expected about %.0f", ms, asked);
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
    cr_assert_eq(nr, 1, "only the restarted session's one kernel");
    cr_assert_eq(calls_of(r, nr, "forward", "ptk_alpha_kernel", NULL), 1);
}

// A kernel launched inside nvtx_push("x") lands in region x, nested ranges give the innermost,
// a kernel outside any range has region "-"; all with --nvtx off (tracking is the profiler's).
Test(profiler, region_is_the_innermost_range_open_at_launch) {
    SKIP_WITHOUT_GPU();
    cr_assert(profiler_available(), "GPU present but built without CUPTI (HAVE_CUPTI=%d)", HAVE_CUPTI);
    nvtx_enable(0);
    float* x = NULL;
    CUDA_CHECK(cudaMalloc((void**)&x, 256 * sizeof(float)));
    nvtx_push("before the session");  // open when the session starts: not tracked
    profiler_start();
    profiler_set_phase("forward");
    ptk_alpha(x, 256);  // "-": the range above was opened before tracking began
    nvtx_pop();
    nvtx_push("x");
    for (int i = 0; i < 2; i++) ptk_alpha(x, 256);  // x
    nvtx_push("y");
    for (int i = 0; i < 3; i++) ptk_beta(x, 256);  // y: the innermost
    nvtx_pop();
    ptk_beta(x, 256);  // x again
    profiler_set_phase("backward");
    ptk_spin_ms(20.0);  // still x, now in backward
    nvtx_pop();
    ptk_alpha(x, 256);  // "-"
    profiler_stop();
    CUDA_CHECK(cudaFree(x));
    cr_assert_eq(nvtx_tracking(), 0, "profiler_stop must stop the tracking");

    char path[512];
    snprintf(path, sizeof path, "%s/regions/k.csv", test_tmpdir());
    cr_assert_eq(profiler_write_csv(path), 0);
    prow_t r[32];
    int nr = read_csv(path, r, 32);
    dump(r, nr);
    cr_assert_eq(calls_in(r, nr, "forward", "-", "ptk_alpha_kernel"), 1, "alpha outside any range");
    cr_assert_eq(calls_in(r, nr, "forward", "x", "ptk_alpha_kernel"), 2, "alpha in x");
    cr_assert_eq(calls_in(r, nr, "forward", "y", "ptk_beta_kernel"), 3, "beta in y (innermost)");
    cr_assert_eq(calls_in(r, nr, "forward", "x", "ptk_beta_kernel"), 1, "beta in x after y's pop");
    cr_assert_eq(calls_in(r, nr, "backward", "x", "ptk_spin_kernel"), 1, "spin in x, backward");
    cr_assert_eq(calls_in(r, nr, "backward", "-", "ptk_alpha_kernel"), 1, "alpha after x's pop");
    cr_assert_eq(calls_in(r, nr, "forward", "before the session", ""), 0, "an untracked range");

    long c = 0;
    double ms = profiler_region_ms("backward", "x", &c);
    cr_assert_eq(c, 1);
    cr_assert_geq(ms, 15.0, "the spin in x took %.3f ms, expected about 20", ms);
    cr_assert_eq((profiler_region_ms("forward", "y", &c), c), 3);
    cr_assert_eq((profiler_region_ms("forward", NULL, &c), c), 7, "the whole forward phase");
    cr_assert_eq((profiler_region_ms("forward", "nowhere", &c), c), 0);

    // The summary's region table names the regions.
    char md[512];
    snprintf(md, sizeof md, "%s/regions/summary.md", test_tmpdir());
    FILE* f = fopen(md, "w");
    cr_assert(f);
    profiler_print_summary(f, 10);
    fclose(f);
    char cmd[700], out[256];
    snprintf(cmd, sizeof cmd, "grep -c '^| forward | y | 1 | 3 |\\|^| backward | x | 1 | 1 |\\|^### GPU kernel time by region' '%s'", md);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "grep failed");
    cr_assert_eq(atoi(out), 3, "summary lacks the region table or its rows (%d matching lines)", atoi(out));
}
