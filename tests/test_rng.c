// The counter-based generator: reproducible, order-independent, right moments, same numbers
// on the GPU as on the CPU.
#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/rng.h"
#include "tests/harness.h"

Test(rng, same_seed_same_stream_and_random_access) {
    float a[1000], b[1000];
    rng_t r1 = rng_make(42), r2 = rng_make(42);
    rng_fill_uniform(&r1, a, 1000, 0.f, 1.f);
    rng_fill_uniform(&r2, b, 1000, 0.f, 1.f);
    for (int i = 0; i < 1000; i++) cr_assert_eq(a[i], b[i]);
    // element i is a function of (seed, i) alone: a fill starting at offset 500 sees a[500..]
    rng_t r3 = {42, 500};
    rng_fill_uniform(&r3, b, 500, 0.f, 1.f);
    for (int i = 0; i < 500; i++) cr_assert_eq(a[500 + i], b[i]);
    cr_assert_eq(r1.offset, 1000u, "a fill advances the offset by its length");
}

Test(rng, different_seeds_differ) {
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++) same += rng_u64(1, i) == rng_u64(2, i);
    cr_assert_eq(same, 0);
}

Test(rng, uniform_moments_and_range) {
    const int n = 1 << 20;
    float* x = malloc(n * sizeof(float));
    rng_t r = rng_make(7);
    rng_fill_uniform(&r, x, n, -2.f, 3.f);
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        cr_assert(x[i] >= -2.f && x[i] < 3.f);
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    // U(-2,3): mean 0.5, variance 25/12. Standard error of the mean is ~0.0014 at n = 2^20,
    // so 0.01 is over 7 standard errors; the variance tolerance is similarly generous.
    cr_assert(fabs(mean - 0.5) < 0.01, "mean %g", mean);
    cr_assert(fabs(var - 25.0 / 12.0) < 0.02, "var %g", var);
    free(x);
}

Test(rng, normal_and_truncated_normal_moments) {
    const int n = 1 << 20;
    float* x = malloc(n * sizeof(float));
    rng_t r = rng_make(11);
    rng_fill_normal(&r, x, n, 1.f, 2.f);
    double s = 0, s2 = 0, s4 = 0;
    for (int i = 0; i < n; i++) {
        const double z = (x[i] - 1.0) / 2.0;
        s += z; s2 += z * z; s4 += z * z * z * z;
    }
    // N(0,1) after standardising: mean 0, variance 1, kurtosis 3 (tolerances ~ 5 standard errors)
    cr_assert(fabs(s / n) < 0.005, "mean %g", s / n);
    cr_assert(fabs(s2 / n - 1) < 0.01, "var %g", s2 / n);
    cr_assert(fabs(s4 / n - 3) < 0.05, "kurtosis %g", s4 / n);

    rng_fill_trunc_normal(&r, x, n, 0.5f, 3.f);
    s2 = 0;
    for (int i = 0; i < n; i++) {
        cr_assert(fabsf(x[i]) <= 1.5f, "truncated at 3 std = 1.5, got %g", x[i]);
        s2 += (double)x[i] * x[i];
    }
    // std of N(0,1) truncated to [-3,3] is 0.98654; scaled by 0.5
    cr_assert(fabs(sqrt(s2 / n) - 0.5 * 0.98654) < 0.003, "std %g", sqrt(s2 / n));
    free(x);
}

Test(rng, integers_cover_range_evenly) {
    const int n = 100000, k = 10;
    int32_t* x = malloc(n * sizeof(int32_t));
    rng_t r = rng_make(3);
    rng_fill_int(&r, x, n, -5, 5);
    int counts[10] = {0};
    for (int i = 0; i < n; i++) {
        cr_assert(x[i] >= -5 && x[i] < 5);
        counts[x[i] + 5]++;
    }
    // expected 10000 per bucket, sd 95: 600 is over 6 sd
    for (int i = 0; i < k; i++) cr_assert(abs(counts[i] - n / k) < 600, "bucket %d: %d", i, counts[i]);
    free(x);
}

Test(rng, gpu_matches_cpu) {
    SKIP_WITHOUT_GPU();
    const size_t n = 100003;  // odd: the grid's tail is exercised
    float* h = malloc(n * sizeof(float));
    float* g = malloc(n * sizeof(float));
    int32_t* hi = malloc(n * sizeof(int32_t));
    int32_t* gi = malloc(n * sizeof(int32_t));
    float* d = mem_alloc(DEV_CUDA, n * sizeof(float), MEM_OTHER);
    int32_t* di = mem_alloc(DEV_CUDA, n * sizeof(int32_t), MEM_OTHER);
    rng_t rh = {99, 123}, rg = {99, 123};

    rng_fill_uniform(&rh, h, n, -1.f, 1.f);
    rng_fill_uniform_cuda(&rg, d, n, -1.f, 1.f, 0);
    CUDA_CHECK(cudaMemcpy(g, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) cr_assert_eq(h[i], g[i], "uniform differs at %zu", i);  // bit-exact

    rng_fill_int(&rh, hi, n, 0, 10000);
    rng_fill_int_cuda(&rg, di, n, 0, 10000, 0);
    CUDA_CHECK(cudaMemcpy(gi, di, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) cr_assert_eq(hi[i], gi[i], "int differs at %zu", i);

    // Normal draws go through logf/cosf, whose last bits differ between libm and the GPU:
    // a few ulp, so 1e-5 relative (plus 1e-6 near zero) is ample.
    rng_fill_normal(&rh, h, n, 0.f, 1.f);
    rng_fill_normal_cuda(&rg, d, n, 0.f, 1.f, 0);
    CUDA_CHECK(cudaMemcpy(g, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_ALLCLOSE(g, h, n, 1e-5, 1e-6, "normal gpu vs cpu");

    rng_fill_trunc_normal(&rh, h, n, 0.02f, 3.f);
    rng_fill_trunc_normal_cuda(&rg, d, n, 0.02f, 3.f, 0);
    CUDA_CHECK(cudaMemcpy(g, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_ALLCLOSE(g, h, n, 1e-5, 1e-7, "truncated normal gpu vs cpu");
    cr_assert_eq(rh.offset, rg.offset);

    mem_free(d);
    mem_free(di);
    free(h); free(g); free(hi); free(gi);
}
