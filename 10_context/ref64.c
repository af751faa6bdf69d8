// Naive attention in float64: the reference the ring's errors are measured against. Scores are
// formed whole (N x N per head), masked causally with -inf (every row keeps key 0).
#include <math.h>
#include <stdlib.h>
#include "common/check.h"
#include "10_context/context.h"

void attn_forward_f64(const double* q, const double* k, const double* v, double* o, double* lse,
                      int BH, int N, int d, int causal, double scale) {
    double* p = malloc(sizeof(double) * (size_t)N);
    if (!p) DIE("attn_forward_f64: out of host memory");
    for (int bh = 0; bh < BH; bh++) {
        const double* Q = q + (size_t)bh * N * d;
        const double* K = k + (size_t)bh * N * d;
        const double* V = v + (size_t)bh * N * d;
        for (int i = 0; i < N; i++) {
            const int nk = causal ? i + 1 : N;
            double m = -INFINITY;
            for (int j = 0; j < nk; j++) {
                double s = 0;
                for (int x = 0; x < d; x++) s += Q[(size_t)i * d + x] * K[(size_t)j * d + x];
                p[j] = s * scale;
                if (p[j] > m) m = p[j];
            }
            double sum = 0;
            for (int j = 0; j < nk; j++) sum += (p[j] = exp(p[j] - m));
            double* O = o + ((size_t)bh * N + i) * d;
            for (int x = 0; x < d; x++) O[x] = 0;
            for (int j = 0; j < nk; j++)
                for (int x = 0; x < d; x++) O[x] += p[j] / sum * V[(size_t)j * d + x];
            lse[(size_t)bh * N + i] = m + log(sum);
        }
    }
    free(p);
}

void attn_backward_f64(const double* q, const double* k, const double* v, const double* o,
                       const double* lse, const double* dout, double* dq, double* dk, double* dv,
                       int BH, int N, int d, int causal, double scale) {
    const size_t n = (size_t)BH * N * d;
    for (size_t i = 0; i < n; i++) dq[i] = dk[i] = dv[i] = 0;
    for (int bh = 0; bh < BH; bh++) {
        const size_t off = (size_t)bh * N * d;
        for (int i = 0; i < N; i++) {
            const double* Qi = q + off + (size_t)i * d;
            const double* dOi = dout + off + (size_t)i * d;
            double D = 0;
            for (int x = 0; x < d; x++) D += dOi[x] * o[off + (size_t)i * d + x];
            const int nk = causal ? i + 1 : N;
            for (int j = 0; j < nk; j++) {
                const double* Kj = k + off + (size_t)j * d;
                const double* Vj = v + off + (size_t)j * d;
                double s = 0, dp = 0;
                for (int x = 0; x < d; x++) { s += Qi[x] * Kj[x]; dp += dOi[x] * Vj[x]; }
                const double P = exp(s * scale - lse[(size_t)bh * N + i]);
                const double dS = P * (dp - D);
                for (int x = 0; x < d; x++) {
                    dv[off + (size_t)j * d + x] += P * dOi[x];
                    dq[off + (size_t)i * d + x] += scale * dS * Kj[x];
                    dk[off + (size_t)j * d + x] += scale * dS * Qi[x];
                }
            }
        }
    }
}
