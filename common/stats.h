// Summary statistics of repeated measurements.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;
    double mean, std;  // std: sample standard deviation (n - 1); 0 when n < 2
    double median, min, max;
} stats_t;

stats_t stats_compute(const double* x, int n);  // x is not modified; n == 0 gives all zeros
stats_t stats_compute_f(const float* x, int n);

#ifdef __cplusplus
}
#endif
