// The leaderboard statistic's arithmetic (dobench.h), on the CPU: how many runs triton's do_bench
// makes of a budget, and what it returns, checked against values worked out by hand from
// triton/testing.py (int() truncation, max(1, ...), statistics.mean / median).
#include <math.h>
#include "tests/harness.h"
#include "04_flashattn_bwd/dobench.h"

Test(dobench, run_counts_as_python_int_of_budget_over_estimate) {
    // The course's call: rep 10000 ms, warmup 1000 ms. A 6.07 ms fwd+bwd (+ the cache clear in
    // the estimate): int(10000 / 6.1) = 1639 timed runs, int(1000 / 6.1) = 163 warm-up runs.
    cr_assert_eq(dobench_runs(10000, 6.1), 1639);
    cr_assert_eq(dobench_runs(1000, 6.1), 163);
    cr_assert_eq(dobench_runs(10000, 4.0), 2500);           // exact division: no off-by-one
    cr_assert_eq(dobench_runs(100, 3.0), 33);               // 33.33 -> 33 (truncation, not rounding)
    cr_assert_eq(dobench_runs(100, 2.99), 33);              // 33.44 -> 33
    cr_assert_eq(dobench_runs(1000, 12000), 1);             // a run longer than the budget: max(1, 0)
    cr_assert_eq(dobench_runs(0, 5), 1);                    // rep 0 still times one run
    cr_assert_eq(dobench_runs(10000, 0.0), -1);             // Python: ZeroDivisionError
    cr_assert_eq(dobench_runs(10000, -1.0), -1);
    cr_assert_eq(dobench_runs(-1, 1.0), -1);
    cr_assert_eq(dobench_runs(NAN, 1.0), -1);
    cr_assert_eq(dobench_runs(1e300, 1e-300), -1);          // more runs than an int holds
}

Test(dobench, summary_is_triton_return_mode) {
    const double t[] = {6.0, 6.2, 5.9, 9.0};  // one slow run (a clock dip, another process)
    cr_assert_float_eq(dobench_summary(t, 4, DOBENCH_MEAN), 6.775, 1e-12);  // the leaderboard's number
    cr_assert_float_eq(dobench_summary(t, 4, DOBENCH_MEDIAN), 6.1, 1e-12);  // mean of the middle two
    cr_assert_float_eq(dobench_summary(t, 3, DOBENCH_MEDIAN), 6.0, 1e-12);  // odd n: the middle one
    cr_assert_float_eq(dobench_summary(t, 4, DOBENCH_MIN), 5.9, 1e-12);
    cr_assert_float_eq(dobench_summary(t, 4, DOBENCH_MAX), 9.0, 1e-12);
    cr_assert_float_eq(dobench_summary(t, 1, DOBENCH_MEAN), 6.0, 1e-12);
    cr_assert(isnan(dobench_summary(t, 0, DOBENCH_MEAN)), "no runs: no statistic");
    // The median sorts a copy: the caller's order is kept.
    cr_assert(t[0] == 6.0 && t[3] == 9.0);
}
