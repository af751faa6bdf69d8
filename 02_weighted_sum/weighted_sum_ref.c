// Reference weighted sum, forward and backward: plain C, written to be obviously right, not
// fast. The CUDA kernels (weighted_sum.cu) and the PyTorch fixture are both checked against it.
// Sums are accumulated in double so that the reference is more accurate than anything it
// judges; results are rounded to float once, at the end.
#include "02_weighted_sum/weighted_sum.h"
#include "common/check.h"  // fail(): the student edition's stubs

// x [ROWS, D] with row stride sx, w [D] -> y [ROWS]
void weighted_sum_forward_ref(const float* x, int64_t sx, const float* w, float* y, int64_t ROWS,
                              int64_t D) {
    // STUDENT-BEGIN(02.forward_ref): y[r] = sum_d x[r, d] w[d] for x [ROWS, D] with row stride sx, accumulated in double | see 02_weighted_sum/README.md §The maths | test: test_02 ws_ref/forward_*
    for (int64_t r = 0; r < ROWS; r++) {
        const float* x_r = x + r * sx;
        double acc = 0.0;
        for (int64_t d = 0; d < D; d++) acc += (double)x_r[d] * (double)w[d];
        y[r] = (float)acc;
    }
    // STUDENT-END(02.forward_ref)
}

// grad_x[r, d] = grad_y[r] * w[d]        (the outer product of grad_y and w)
// grad_w[d]    = sum_r x[r, d] * grad_y[r]
void weighted_sum_backward_ref(const float* x, int64_t sx, const float* w, const float* grad_y,
                               float* grad_x, int64_t sgx, float* grad_w, int64_t ROWS, int64_t D) {
    // STUDENT-BEGIN(02.backward_ref): grad_x = outer(grad_y, w) (one float multiply each); grad_w[d] = sum_r x[r, d] grad_y[r] in double | see 02_weighted_sum/README.md §The maths | test: test_02 ws_ref/backward_* ws_api_cpu/* | needs: 02.forward_ref
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t d = 0; d < D; d++)
            // One float multiply: the product of two floats rounded once, exactly what the
            // kernel computes, so the tests can compare grad_x bit for bit.
            grad_x[r * sgx + d] = grad_y[r] * w[d];

    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t r = 0; r < ROWS; r++) acc += (double)x[r * sx + d] * (double)grad_y[r];
        grad_w[d] = (float)acc;
    }
    // STUDENT-END(02.backward_ref)
}
