// Naive attention on the CPU: the reference every other attention here is checked against.
// It materialises the full score matrix S = scale * Q K^T for one (batch, head) at a time,
// masks (causal: key j > query i gets -1e6, the course's convention), takes the row softmax
// P and forms O = P V. L_i = log sum_j exp(S_ij) is kept for the backward pass.
// Sums are in double so that the reference is more accurate than anything it checks.
#include <math.h>
#include <stdlib.h>
#include "common/check.h"
#include "03_flashattn_fwd/flash_fwd.h"

#define MASKED_SCORE (-1e6)

void attn_naive_forward_cpu(const float* q, const float* k, const float* v, float* o, float* lse,
                            int BH, int Nq, int Nk, int d, int causal, float scale) {
    // STUDENT-BEGIN(03.naive_fwd_cpu): naive attention: S = scale Q K^T (masked -1e6 above the diagonal when causal), P = softmax(S), O = P V, L = logsumexp of each row of S | see 03_flashattn_fwd/README.md §The maths | test: test_03 ref/naive_*
    if (BH <= 0 || Nq <= 0 || Nk <= 0 || d <= 0) DIE("attn_naive_forward_cpu: bad sizes");
#pragma omp parallel
    {
        double* S = malloc(sizeof(double) * (size_t)Nk);  // one row of scores, then of P (Nk)
        double* acc = malloc(sizeof(double) * (size_t)d); // one row of O (d)
        if (!S || !acc) DIE("attn_naive_forward_cpu: out of host memory");
#pragma omp for collapse(2) schedule(static)
        for (int bh = 0; bh < BH; bh++) {
            for (int i = 0; i < Nq; i++) {
                const float* q_i = q + ((size_t)bh * Nq + i) * d;     // (d)
                const float* K = k + (size_t)bh * Nk * d;             // (Nk, d)
                const float* V = v + (size_t)bh * Nk * d;             // (Nk, d)
                // S_i = scale * q_i K^T, masked
                double m = -INFINITY;
                for (int j = 0; j < Nk; j++) {
                    double s = 0.0;
                    for (int c = 0; c < d; c++) s += (double)q_i[c] * K[(size_t)j * d + c];
                    s *= scale;
                    if (causal && j > i) s = MASKED_SCORE;
                    S[j] = s;
                    if (s > m) m = s;
                }
                // P_i = exp(S_i - max) / sum; L_i = max + log(sum)
                double sum = 0.0;
                for (int j = 0; j < Nk; j++) {
                    S[j] = exp(S[j] - m);
                    sum += S[j];
                }
                for (int c = 0; c < d; c++) acc[c] = 0.0;
                for (int j = 0; j < Nk; j++) {
                    double p = S[j] / sum;
                    for (int c = 0; c < d; c++) acc[c] += p * V[(size_t)j * d + c];
                }
                float* o_i = o + ((size_t)bh * Nq + i) * d;
                for (int c = 0; c < d; c++) o_i[c] = (float)acc[c];
                lse[(size_t)bh * Nq + i] = (float)(m + log(sum));
            }
        }
        free(S);
        free(acc);
    }
    // STUDENT-END(03.naive_fwd_cpu)
}
