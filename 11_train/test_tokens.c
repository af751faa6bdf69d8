// Token files and the sampler (common/tokens.h), and the schedule and clipping helpers
// (lr_clip.h): in-process, no MPI.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "11_train/lr_clip.h"
#include "common/npy.h"
#include "common/tokens.h"
#include "tests/harness.h"

static char g_err[2048];


// ids 0, 1, ..., n-1 mod 251: every window's content tells where it starts.
static const char* make_bin(const char* name, size_t n) {
    uint16_t* ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (uint16_t)(i % 251);
    const char* p = test_path(name);
    cr_assert_eq(tokens_write_bin(p, ids, n, g_err, sizeof g_err), 0, "%s", g_err);
    free(ids);
    return p;
}

Test(tokens, bin_and_npy_read_back_by_mmap) {
    tokens_t t;
    const char* p = make_bin("a.bin", 1000);
    cr_assert_eq(tokens_open(&t, p, g_err, sizeof g_err), 0, "%s", g_err);
    cr_assert_eq(t.n, 1000);
    cr_assert_eq(t.width, 2);
    cr_assert_eq(t.max_id, 250);
    for (size_t i = 0; i < t.n; i++) cr_assert_eq(tokens_at(&t, i), (int32_t)(i % 251), "id %zu", i);
    tokens_close(&t);
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = 7 * i;
    int64_t shape[1] = {300};
    const char* q = test_path("a.npy");
    cr_assert_eq(npy_write(q, DT_I32, 1, shape, ids, g_err, sizeof g_err), 0, "%s", g_err);
    cr_assert_eq(tokens_open(&t, q, g_err, sizeof g_err), 0, "%s", g_err);
    cr_assert_eq(t.n, 300);
    cr_assert_eq(t.width, 4);
    cr_assert_eq(t.max_id, 7 * 299);
    for (int i = 0; i < 300; i++) cr_assert_eq(tokens_at(&t, (size_t)i), 7 * i);
    tokens_close(&t);
}

Test(tokens, bad_files_are_refused_with_the_reason) {
    tokens_t t;
    const char* p = make_bin("b.bin", 1000);
    cr_assert_eq(truncate(p, 1024 + 1000), 0);  // half of the ids gone
    cr_assert_eq(tokens_open(&t, p, g_err, sizeof g_err), -1);
    cr_assert(strstr(g_err, "the header says 1000 tokens") && strstr(g_err, "truncated"), "%s", g_err);
    FILE* f = fopen(test_path("c.bin"), "wb");
    fputs("this is text, not tokens; long enough? no", f);
    fclose(f);
    cr_assert_eq(tokens_open(&t, test_path("c.bin"), g_err, sizeof g_err), -1);
    cr_assert(strstr(g_err, "shorter than the .bin header"), "%s", g_err);
    cr_assert_eq(tokens_open(&t, test_path("none.bin"), g_err, sizeof g_err), -1);
    cr_assert(strstr(g_err, "cannot open"), "%s", g_err);
    float x[4] = {0};
    int64_t shape[1] = {4};
    cr_assert_eq(npy_write(test_path("f.npy"), DT_F32, 1, shape, x, g_err, sizeof g_err), 0);
    cr_assert_eq(tokens_open(&t, test_path("f.npy"), g_err, sizeof g_err), -1);
    cr_assert(strstr(g_err, "uint16 ('<u2') or int32"), "%s", g_err);
}

// tokenize --in: an empty item of the list is refused in one line (it was skipped), before any
// file is read; a missing file is named with the system's reason.
Test(tokens, tokenize_refuses_an_empty_list_item) {
    char cmd[2048], out[4096];
    FILE* f = fopen(test_path("a.txt"), "w");
    fputs("some text\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/11_train/tokenize --in %s,,%s --out %s", build_dir(), test_path("a.txt"),
             test_path("a.txt"), test_path("ab.bin"));
    int st = run_capture(cmd, out, sizeof out);
    ASSERT_REFUSED(st, out, "tokenize", "--in: ", ",," , "has an empty item");
    cr_assert(access(test_path("ab.bin"), F_OK) != 0, "a token file was written");
    snprintf(cmd, sizeof cmd, "%s/11_train/tokenize --in %s, --out %s", build_dir(), test_path("a.txt"), test_path("ab.bin"));
    st = run_capture(cmd, out, sizeof out);
    ASSERT_REFUSED(st, out, "tokenize", "has an empty item");
    snprintf(cmd, sizeof cmd, "%s/11_train/tokenize --in %s --out %s", build_dir(), test_path("a.txt"), test_path("ab.bin"));
    st = run_capture(cmd, out, sizeof out);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, out);
}

// W ranks, B rows each, A micro-batches: a step's A·W·B windows never share a token, over many
// steps that cross several epochs (a small file so that they do).
Test(sampler, ranks_draw_disjoint_windows_every_step) {
    const int T = 8, W = 3, B = 2, A = 2;
    tokens_t t;
    cr_assert_eq(tokens_open(&t, make_bin("d.bin", 2000), g_err, sizeof g_err), 0, "%s", g_err);
    sampler_t s;
    cr_assert_eq(sampler_init(&s, 0, 1800, T, (int64_t)A * W * B, 42, g_err, sizeof g_err), 0, "%s", g_err);
    int64_t epochs_seen = 0, last_epoch = 0;
    for (int step = 0; step < 200; step++) {
        size_t st[12];
        const int n = A * W * B;
        for (int j = 0; j < n; j++) {
            st[j] = sampler_window_start(&s, s.counter + j);
            cr_assert(st[j] + T + 1 <= 1800, "window past the training split");
        }
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                const size_t d = st[i] > st[j] ? st[i] - st[j] : st[j] - st[i];
                cr_assert(d >= (size_t)T + 1, "step %d: rows %d and %d overlap (%zu, %zu)", step, i, j, st[i], st[j]);
            }
        // sampler_fill gives rank r's rows the tokens of those windows
        int32_t in[2 * 8], tg[2 * 8];
        sampler_fill(&s, &t, (int64_t)1 * W * B + 2 * B, B, in, tg);  // micro-batch 1, rank 2
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) {
                const size_t p = st[W * B + 2 * B + b] + (size_t)i;
                cr_assert_eq(in[b * T + i], (int32_t)(p % 251));
                cr_assert_eq(tg[b * T + i], (int32_t)((p + 1) % 251));
            }
        sampler_advance(&s);
        const int64_t e = s.counter / (int64_t)s.n_win;
        if (e != last_epoch) epochs_seen++, last_epoch = e;
    }
    cr_assert_geq(epochs_seen, 3, "the test should cross epochs (saw %lld)", (long long)epochs_seen);
    sampler_free(&s);
    tokens_close(&t);
}

// An epoch visits every window once; two epochs differ (order and shift).
Test(sampler, an_epoch_is_a_permutation) {
    sampler_t s;
    cr_assert_eq(sampler_init(&s, 100, 1100, 9, 1, 7, g_err, sizeof g_err), 0, "%s", g_err);
    const int64_t n = (int64_t)s.n_win;
    char* seen = calloc((size_t)n, 1);
    size_t first0 = sampler_window_start(&s, 0);
    size_t shift = (first0 - 100) % 10;
    for (int64_t c = 0; c < n; c++) {
        size_t p = sampler_window_start(&s, c);
        cr_assert_eq((p - 100) % 10, shift, "one shift per epoch");
        size_t k = (p - 100 - shift) / 10;
        cr_assert_lt(k, (size_t)n);
        cr_assert_eq(seen[k], 0, "window %zu drawn twice in an epoch", k);
        seen[k] = 1;
    }
    int same = 1;
    for (int64_t c = 0; c < n; c++) same &= sampler_window_start(&s, c) == sampler_window_start(&s, c + n);
    cr_assert(!same, "epoch 1 repeats epoch 0");
    free(seen);
    sampler_free(&s);
}

// The state is the counter: a sampler made afresh and given the saved counter continues the
// same stream (what --resume does); another seed gives another stream.
Test(sampler, same_seed_same_stream_after_a_resume) {
    tokens_t t;
    cr_assert_eq(tokens_open(&t, make_bin("e.bin", 5000), g_err, sizeof g_err), 0, "%s", g_err);
    sampler_t a, b, c;
    cr_assert_eq(sampler_init(&a, 0, 4500, 16, 6, 3, g_err, sizeof g_err), 0);
    int32_t in1[6 * 16], tg1[6 * 16], in2[6 * 16], tg2[6 * 16];
    for (int k = 0; k < 37; k++) sampler_advance(&a);
    const int64_t saved = a.counter;
    cr_assert_eq(sampler_init(&b, 0, 4500, 16, 6, 3, g_err, sizeof g_err), 0);
    b.counter = saved;
    cr_assert_eq(sampler_init(&c, 0, 4500, 16, 6, 4, g_err, sizeof g_err), 0);
    c.counter = saved;
    int differs = 0;
    for (int k = 0; k < 50; k++) {
        sampler_fill(&a, &t, 0, 6, in1, tg1);
        sampler_fill(&b, &t, 0, 6, in2, tg2);
        cr_assert(memcmp(in1, in2, sizeof in1) == 0 && memcmp(tg1, tg2, sizeof tg1) == 0, "step %d differs after resume", k);
        sampler_fill(&c, &t, 0, 6, in2, tg2);
        differs |= memcmp(in1, in2, sizeof in1) != 0;
        sampler_advance(&a), sampler_advance(&b), sampler_advance(&c);
    }
    cr_assert(differs, "seed 4 gave seed 3's stream");
    sampler_free(&a), sampler_free(&b), sampler_free(&c);
    tokens_close(&t);
}

Test(sampler, too_small_a_file_says_what_it_needs) {
    sampler_t s;
    cr_assert_eq(sampler_init(&s, 0, 100, 32, 4, 1, g_err, sizeof g_err), -1);
    cr_assert(strstr(g_err, "the training split has 100 tokens") && strstr(g_err, "needs at least 164"), "%s", g_err);
}

Test(lr_clip, cosine_schedule_matches_the_course) {
    // The course's test values (assignment 1, test_get_lr_cosine_schedule): max 1, min 0.1,
    // warm-up 7, cosine 21; fp64 in both, so 1e-12 only absorbs the order of operations.
    const double want[25] = {0, 0.14285714285714285, 0.2857142857142857, 0.42857142857142855, 0.5714285714285714,
                             0.7142857142857143, 0.8571428571428571, 1.0, 0.9887175604818206, 0.9554359905560885,
                             0.9018241671106134, 0.8305704108364301, 0.7452476826029011, 0.6501344202803414,
                             0.55, 0.44986557971965857, 0.3547523173970989, 0.26942958916356996, 0.19817583288938662,
                             0.14456400944391146, 0.11128243951817937, 0.1, 0.1, 0.1, 0.1};
    for (int t = 0; t < 25; t++)
        cr_assert(fabs(lr_cosine(t, 1.0, 0.1, 7, 21) - want[t]) < 1e-12, "t %d: %.17g vs %.17g", t,
                  lr_cosine(t, 1.0, 0.1, 7, 21), want[t]);
}

Test(lr_clip, sharded_norm_equals_the_whole_and_clipping_is_the_courses) {
    float g[1000];
    for (int i = 0; i < 1000; i++) g[i] = sinf(0.37f * i) * (1 + i % 7);
    const double whole = grad_sumsq(g, 1000);
    const double parts = grad_sumsq(g, 333) + grad_sumsq(g + 333, 400) + grad_sumsq(g + 733, 267);
    // double sums of the same fp32 squares in another grouping: ~1e-16 relative
    cr_assert(fabs(parts - whole) <= 1e-12 * whole, "%.17g vs %.17g", parts, whole);
    const double norm = sqrt(whole);
    cr_assert_eq(grad_clip_coef(norm, 0), 1.0f);
    cr_assert_eq(grad_clip_coef(norm, 2 * norm), 1.0f);
    const float c = grad_clip_coef(norm, 1.0);
    cr_assert(fabsf(c - (float)(1.0 / (norm + 1e-6))) == 0, "coef %g", c);
    grad_scale(g, 1000, c);
    // after clipping the norm is max_norm, up to the 1e-6 epsilon and fp32 rounding (1e-5)
    cr_assert(fabs(sqrt(grad_sumsq(g, 1000)) - 1.0) < 1e-5, "norm after clipping %.9g", sqrt(grad_sumsq(g, 1000)));
}

// grad_ops (the trainer's gradient arithmetic on the model's device): on the host, the host
// functions' bits (sumsq, scale; add is y[i] + x[i]); on a GPU, cuBLAS within fp32 rounding of
// the host's (nrm2 scales its own sum) and the sums and scaling bit for bit (one fp32 rounding
// each, as on the host).
#include <cuda_runtime_api.h>
#include "common/gpu.h"

static void grad_ops_check(device_t dev) {
    enum { N = 3001 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++) x[i] = sinf(0.11f * i) * (1 + i % 5), y[i] = cosf(0.07f * i);
    float *dx = x, *dy = got;
    memcpy(got, y, N * sizeof *y);
    cudaStream_t s = NULL;
    if (dev == DEV_CUDA) {
        cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
        cr_assert_eq(cudaMalloc((void**)&dx, N * sizeof *x), cudaSuccess);
        cr_assert_eq(cudaMalloc((void**)&dy, N * sizeof *y), cudaSuccess);
        cudaMemcpy(dx, x, N * sizeof *x, cudaMemcpyHostToDevice);
        cudaMemcpy(dy, y, N * sizeof *y, cudaMemcpyHostToDevice);
    }
    grad_ops_t* g = grad_ops_create(dev, s);
    const double ss = grad_ops_sumsq(g, dx, N), want = grad_sumsq(x, N);
    if (dev == DEV_CPU) cr_assert_eq(ss, want, "%.17g vs %.17g", ss, want);
    else cr_assert(fabs(ss - want) <= 1e-5 * want, "%.17g vs %.17g", ss, want);
    grad_ops_add(g, dy, dx, N);    // y += x
    grad_ops_scale(g, dy, N, 0.25f);  // y *= 1/4
    if (dev == DEV_CUDA) {
        cudaStreamSynchronize(s);
        cudaMemcpy(got, dy, N * sizeof *y, cudaMemcpyDeviceToHost);
    }
    for (int i = 0; i < N; i++) {
        const float w = (y[i] + x[i]) * 0.25f;
        cr_assert(memcmp(&got[i], &w, sizeof w) == 0, "element %d: %.9g vs %.9g", i, got[i], w);
    }
    grad_ops_destroy(g);
    if (dev == DEV_CUDA) cudaFree(dx), cudaFree(dy), cudaStreamDestroy(s);
    free(x), free(y), free(got);
}

Test(lr_clip, grad_ops_on_the_host_are_the_host_functions) { grad_ops_check(DEV_CPU); }
Test(lr_clip, grad_ops_on_a_gpu_match_the_host) {
    if (gpu_count() < 1) cr_skip_test("needs a CUDA GPU: %s", gpu_absent_reason());
    grad_ops_check(DEV_CUDA);
}
