// Summary statistics of repeated timings: mean, sample standard deviation, median, min, max.
// Benchmarks report the median (robust to the odd slow repetition) with the spread beside it.
#include "common/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

// Ascending, with NaN sorted last so that a stray NaN cannot break qsort's ordering contract.
static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}

stats_t stats_compute(const double* x, int n) {
    stats_t s;
    memset(&s, 0, sizeof s);
    if (n <= 0 || !x) return s;
    s.n = n;
    // The median needs a sorted copy: the caller's array is left as it was.
    double* v = malloc((size_t)n * sizeof *v);  // (n,)
    if (!v) DIE("stats_compute: out of memory for %d values", n);
    memcpy(v, x, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);

    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    s.mean = sum / n;
    // Two passes (deviations from the mean) rather than sum of squares: no cancellation when
    // the spread is tiny next to the mean, as with repeated timings.
    if (n > 1) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (v[i] - s.mean) * (v[i] - s.mean);
        s.std = sqrt(ss / (n - 1));
    }
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    s.min = v[0];
    s.max = v[n - 1];
    free(v);
    return s;
}

stats_t stats_compute_f(const float* x, int n) {
    stats_t s;
    memset(&s, 0, sizeof s);
    if (n <= 0 || !x) return s;
    double* v = malloc((size_t)n * sizeof *v);  // (n,) widened copy
    if (!v) DIE("stats_compute_f: out of memory for %d values", n);
    for (int i = 0; i < n; i++) v[i] = x[i];
    s = stats_compute(v, n);
    free(v);
    return s;
}
