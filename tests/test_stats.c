// Tests of the summary statistics (common/stats.c) on values whose answers are known exactly.
#include <math.h>
#include <string.h>

#include "common/stats.h"
#include "tests/harness.h"

// Every expected value below is a short decimal computed by hand; 1e-12 absorbs the rounding
// of a few double operations on numbers of order 1-100.
#define EPS 1e-12

Test(stats, known_values_odd_n) {
    const double x[5] = {4, 1, 5, 2, 3};  // unsorted on purpose
    double copy[5];
    memcpy(copy, x, sizeof x);
    stats_t s = stats_compute(copy, 5);
    cr_assert_eq(s.n, 5);
    cr_assert_float_eq(s.mean, 3.0, EPS);
    cr_assert_float_eq(s.std, sqrt(2.5), EPS);  // sum of squared deviations 10, over n - 1 = 4
    cr_assert_float_eq(s.median, 3.0, EPS);
    cr_assert_float_eq(s.min, 1.0, EPS);
    cr_assert_float_eq(s.max, 5.0, EPS);
    cr_assert(memcmp(copy, x, sizeof x) == 0, "the input was modified (sorted in place?)");
}

Test(stats, even_n_median_is_the_mean_of_the_middle_two) {
    const double x[4] = {10, 2, 7, 1};
    stats_t s = stats_compute(x, 4);
    cr_assert_float_eq(s.median, 4.5, EPS);
    cr_assert_float_eq(s.mean, 5.0, EPS);
    cr_assert_float_eq(s.std, sqrt(18.0), EPS);  // deviations 5, -3, 2, -4: squares sum 54, over 3
    cr_assert_float_eq(s.min, 1.0, EPS);
    cr_assert_float_eq(s.max, 10.0, EPS);
}

Test(stats, n_equals_1_and_0) {
    const double x[1] = {42.5};
    stats_t s = stats_compute(x, 1);
    cr_assert_eq(s.n, 1);
    cr_assert_float_eq(s.mean, 42.5, EPS);
    cr_assert_eq(s.std, 0.0, "one sample has no spread");
    cr_assert_float_eq(s.median, 42.5, EPS);
    cr_assert_float_eq(s.min, 42.5, EPS);
    cr_assert_float_eq(s.max, 42.5, EPS);

    stats_t z = stats_compute(x, 0);
    cr_assert_eq(z.n, 0);
    cr_assert(z.mean == 0 && z.std == 0 && z.median == 0 && z.min == 0 && z.max == 0);
}

Test(stats, small_spread_on_a_large_mean) {
    // Timings like 1000.001, 1000.002, 1000.003 ms: a one-pass sum of squares would cancel.
    const double x[3] = {1e9 + 1, 1e9 + 2, 1e9 + 3};
    stats_t s = stats_compute(x, 3);
    cr_assert_float_eq(s.std, 1.0, 1e-6);  // inputs exact in double; the mean rounds at 1e9 * 2^-52
    cr_assert_float_eq(s.median, 1e9 + 2, 0);
}

Test(stats, float_input) {
    const float x[6] = {0.5f, 3.0f, 1.5f, 2.0f, 2.5f, 1.0f};
    float copy[6];
    memcpy(copy, x, sizeof x);
    stats_t s = stats_compute_f(copy, 6);
    cr_assert_eq(s.n, 6);
    cr_assert_float_eq(s.mean, 1.75, EPS);
    cr_assert_float_eq(s.median, 1.75, EPS);
    cr_assert_float_eq(s.std, sqrt(4.375 / 5.0), EPS);  // squared deviations sum to 4.375
    cr_assert_float_eq(s.min, 0.5, EPS);
    cr_assert_float_eq(s.max, 3.0, EPS);
    cr_assert(memcmp(copy, x, sizeof x) == 0, "the input was modified");
}
