// The log-sum-exp merge of two partial attention results over disjoint key sets.
// With m = max(L_a, L_b):  L = m + log(e^{L_a - m} + e^{L_b - m}),
//                          O = (e^{L_a - m} O_a + e^{L_b - m} O_b) / (e^{L_a - m} + e^{L_b - m}),
// which is e^{L_a - L} O_a + e^{L_b - L} O_b without ever exponentiating a large positive number.
// Subtracting m keeps one weight exactly 1, so a row whose other side is -inf (or -1e6) gets
// weights (1, 0) and is copied unchanged: the empty block is the identity.
#include <math.h>
#include "common/check.h"
#include "10_context/context.h"

void cp_merge_f32(float* o, float* l, const float* ob, const float* lb, size_t rows, int d) {
    // STUDENT-BEGIN(10.merge_f32): merge the partial (O_b, L_b) into the running (O, L), row by row: m = max(L, L_b), weights e^{L - m} and e^{L_b - m}, O = their weighted mean, L = m + log(their sum); a side at -inf saw no key (keep the other side unchanged) | see 10_context/README.md §The merge | test: test_10 merge/two_halves_* merge/associative_* merge/commutative_* merge/an_all_masked_*
    for (size_t r = 0; r < rows; r++) {
        const float la = l[r], lb_ = lb[r];
        if (lb_ == -INFINITY) continue;  // b saw no key: keep a
        float* orow = o + r * (size_t)d;
        const float* brow = ob + r * (size_t)d;
        if (la == -INFINITY) {           // a saw no key: take b
            for (int x = 0; x < d; x++) orow[x] = brow[x];
            l[r] = lb_;
            continue;
        }
        const float m = la > lb_ ? la : lb_;
        const float wa = expf(la - m), wb = expf(lb_ - m);
        const float s = wa + wb;
        const float ca = wa / s, cb = wb / s;
        for (int x = 0; x < d; x++) orow[x] = ca * orow[x] + cb * brow[x];
        l[r] = m + logf(s);
    }
    // STUDENT-END(10.merge_f32)
}

void cp_merge_f64(double* o, double* l, const double* ob, const double* lb, size_t rows, int d) {
    // STUDENT-BEGIN(10.merge_f64): the same merge in float64 (the reference's) | see 10_context/README.md §The merge | test: test_10 merge/f64_*
    for (size_t r = 0; r < rows; r++) {
        const double la = l[r], lb_ = lb[r];
        if (lb_ == -INFINITY) continue;
        double* orow = o + r * (size_t)d;
        const double* brow = ob + r * (size_t)d;
        if (la == -INFINITY) {
            for (int x = 0; x < d; x++) orow[x] = brow[x];
            l[r] = lb_;
            continue;
        }
        const double m = la > lb_ ? la : lb_;
        const double wa = exp(la - m), wb = exp(lb_ - m);
        const double s = wa + wb;
        for (int x = 0; x < d; x++) orow[x] = (wa * orow[x] + wb * brow[x]) / s;
        l[r] = m + log(s);
    }
    // STUDENT-END(10.merge_f64)
}
