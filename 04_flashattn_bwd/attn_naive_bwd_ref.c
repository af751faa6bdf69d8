// Naive attention backward on the CPU: the reference every other backward here is checked
// against. For one (batch, head) at a time it materialises the full P = exp(S - L) (Nq x Nk)
// and dS, exactly the formulas in flash_bwd.h, with every sum in double so the reference is
// more accurate than anything it checks. Memory is O(Nq * Nk) per thread: small sizes only.
#include <math.h>
#include <stdlib.h>
#include "common/check.h"
#include "04_flashattn_bwd/flash_bwd.h"

void attn_naive_backward_cpu(const float* q, const float* k, const float* v, const float* o,
                             const float* dout, const float* lse, float* dq, float* dk, float* dv,
                             int BH, int Nq, int Nk, int d, int causal, float scale) {
    // STUDENT-BEGIN(04.naive_bwd_cpu): naive backward: P = exp(S - L); dV = P^T dO; dP = dO V^T; dS = P o (dP - rowsum(dP o P)); dQ = scale dS K; dK = scale dS^T Q | see 04_flashattn_bwd/README.md §The maths | test: test_04 bwd_ref/naive_*
    if (BH <= 0 || Nq <= 0 || Nk <= 0 || d <= 0) DIE("attn_naive_backward_cpu: bad sizes");
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        const float* Q = q + (size_t)bh * Nq * d;      // (Nq, d)
        const float* K = k + (size_t)bh * Nk * d;      // (Nk, d)
        const float* V = v + (size_t)bh * Nk * d;      // (Nk, d)
        const float* O = o + (size_t)bh * Nq * d;      // (Nq, d)
        const float* dO = dout + (size_t)bh * Nq * d;  // (Nq, d)
        const float* L = lse + (size_t)bh * Nq;        // (Nq)
        double* P = malloc(sizeof(double) * (size_t)Nq * Nk);   // (Nq, Nk), then dS in place
        double* dQ = calloc((size_t)Nq * d, sizeof(double));    // (Nq, d)
        double* dK = calloc((size_t)Nk * d, sizeof(double));    // (Nk, d)
        double* dV = calloc((size_t)Nk * d, sizeof(double));    // (Nk, d)
        if (!P || !dQ || !dK || !dV) DIE("attn_naive_backward_cpu: out of host memory");
        for (int i = 0; i < Nq; i++) {
            // D_i = rowsum(dO_i o O_i): equals sum_j P_ij dP_ij, which is cheaper to get this way.
            double D = 0.0;
            for (int c = 0; c < d; c++) D += (double)dO[(size_t)i * d + c] * O[(size_t)i * d + c];
            for (int j = 0; j < Nk; j++) {
                // P_ij = exp(S_ij - L_i): the softmax recomputed from the saved logsumexp.
                double s = 0.0;
                for (int c = 0; c < d; c++) s += (double)Q[(size_t)i * d + c] * K[(size_t)j * d + c];
                s *= scale;
                if (causal && j > i) s = -1e6;  // the course's masked score
                double p = exp(s - (double)L[i]);
                // dV_j += P_ij dO_i
                for (int c = 0; c < d; c++) dV[(size_t)j * d + c] += p * dO[(size_t)i * d + c];
                // dP_ij = dO_i . V_j;  dS_ij = P_ij (dP_ij - D_i)
                double dp = 0.0;
                for (int c = 0; c < d; c++) dp += (double)dO[(size_t)i * d + c] * V[(size_t)j * d + c];
                P[(size_t)i * Nk + j] = p * (dp - D);
            }
        }
        // dQ = scale * dS K; dK = scale * dS^T Q
        for (int i = 0; i < Nq; i++)
            for (int j = 0; j < Nk; j++) {
                double ds = P[(size_t)i * Nk + j] * scale;
                if (ds == 0.0) continue;
                for (int c = 0; c < d; c++) {
                    dQ[(size_t)i * d + c] += ds * K[(size_t)j * d + c];
                    dK[(size_t)j * d + c] += ds * Q[(size_t)i * d + c];
                }
            }
        for (size_t x = 0; x < (size_t)Nq * d; x++) dq[(size_t)bh * Nq * d + x] = (float)dQ[x];
        for (size_t x = 0; x < (size_t)Nk * d; x++) {
            dk[(size_t)bh * Nk * d + x] = (float)dK[x];
            dv[(size_t)bh * Nk * d + x] = (float)dV[x];
        }
        free(P);
        free(dQ);
        free(dK);
        free(dV);
    }
    // STUDENT-END(04.naive_bwd_cpu)
}
