// FlashAttention-2 backward, Algorithm 2 of the paper, on the CPU in fp32: the tiled reference
// that the CUDA kernels follow. Outer loop over key tiles j (K_j, V_j and the accumulators
// dK_j, dV_j stay "on chip"), inner loop over query tiles i; dQ_i is read, updated and written
// back for every (i, j) pair — on the GPU, where key tiles run in parallel, that update is the
// atomic add (or the reason for the second, query-tile-parallel pass).
// Causal: query tiles that end before the key tile's first key are skipped (every score there
// is masked), and only tiles that cross the diagonal test each element.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/check.h"
#include "04_flashattn_bwd/flash_bwd.h"

void flash_backward_cpu(const float* q, const float* k, const float* v, const float* o,
                        const float* dout, const float* lse, float* dq, float* dk, float* dv,
                        int BH, int Nq, int Nk, int d, int causal, float scale, int Bq, int Bk) {
    // STUDENT-BEGIN(04.flash_bwd_cpu): Algorithm 2 on the CPU: D = rowsum(O o dO); per key tile K_j, V_j and query tile Q_i: P = exp(S - L), dV += P^T dO, dP = dO V^T, dS = P o (dP - D), dQ += dS K scale, dK += dS^T Q scale | see 04_flashattn_bwd/README.md §The maths | test: test_04 bwd_ref/tiled_* | needs: 04.naive_bwd_cpu 03.naive_fwd_cpu
    if (BH <= 0 || Nq <= 0 || Nk <= 0 || d <= 0) DIE("flash_backward_cpu: bad sizes");
    if (Bq < 1 || Bk < 1) DIE("flash_backward_cpu: tiles must be at least 1 (got Bq %d, Bk %d)", Bq, Bk);
    const int Tq = (Nq + Bq - 1) / Bq, Tk = (Nk + Bk - 1) / Bk;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        const float* Q = q + (size_t)bh * Nq * d;      // (Nq, d)
        const float* K = k + (size_t)bh * Nk * d;      // (Nk, d)
        const float* V = v + (size_t)bh * Nk * d;      // (Nk, d)
        const float* O = o + (size_t)bh * Nq * d;      // (Nq, d)
        const float* dO = dout + (size_t)bh * Nq * d;  // (Nq, d)
        const float* L = lse + (size_t)bh * Nq;        // (Nq)
        float* dQ = dq + (size_t)bh * Nq * d;          // (Nq, d), accumulated over key tiles
        float* dK = dk + (size_t)bh * Nk * d;          // (Nk, d)
        float* dV = dv + (size_t)bh * Nk * d;          // (Nk, d)
        float* Dvec = malloc(sizeof(float) * (size_t)Nq);         // D (Nq)
        float* P = malloc(sizeof(float) * (size_t)Bq * Bk);       // P_ij (Bq, Bk)
        float* dS = malloc(sizeof(float) * (size_t)Bq * Bk);      // dS_ij (Bq, Bk)
        float* dK_j = malloc(sizeof(float) * (size_t)Bk * d);     // (Bk, d) accumulator
        float* dV_j = malloc(sizeof(float) * (size_t)Bk * d);     // (Bk, d) accumulator
        if (!Dvec || !P || !dS || !dK_j || !dV_j) DIE("flash_backward_cpu: out of host memory");

        // Pre-pass: D = rowsum(dO o O), and dQ = 0 before it is accumulated into.
        for (int r = 0; r < Nq; r++) {
            float acc = 0.0f;
            for (int c = 0; c < d; c++) acc += dO[(size_t)r * d + c] * O[(size_t)r * d + c];
            Dvec[r] = acc;
        }
        memset(dQ, 0, sizeof(float) * (size_t)Nq * d);

        for (int j = 0; j < Tk; j++) {
            const int k0 = j * Bk, nk = (Nk - k0 < Bk) ? Nk - k0 : Bk;  // keys k0 .. k0+nk-1
            memset(dK_j, 0, sizeof(float) * (size_t)Bk * d);
            memset(dV_j, 0, sizeof(float) * (size_t)Bk * d);
            // Causal: query tiles that end before key k0 see none of K_j; start at the first
            // query tile containing query k0.
            const int i_start = causal ? k0 / Bq : 0;
            for (int i = i_start; i < Tq; i++) {
                const int q0 = i * Bq, nq = (Nq - q0 < Bq) ? Nq - q0 : Bq;
                // Only a tile that crosses the diagonal needs the element-wise mask.
                const int diag = causal && (q0 < k0 + nk - 1);
                // S_ij = scale Q_i K_j^T;  P_ij = exp(S_ij - L_i)
                for (int r = 0; r < nq; r++)
                    for (int c = 0; c < nk; c++) {
                        float s = 0.0f;
                        for (int x = 0; x < d; x++) s += Q[(size_t)(q0 + r) * d + x] * K[(size_t)(k0 + c) * d + x];
                        s *= scale;
                        if (diag && k0 + c > q0 + r) s = -1e6f;
                        P[r * Bk + c] = expf(s - L[q0 + r]);
                    }
                // dV_j += P_ij^T dO_i
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < nq; r++) {
                        const float p = P[r * Bk + c];
                        for (int x = 0; x < d; x++) dV_j[(size_t)c * d + x] += p * dO[(size_t)(q0 + r) * d + x];
                    }
                // dP_ij = dO_i V_j^T;  dS_ij = P_ij o (dP_ij - D_i)
                for (int r = 0; r < nq; r++)
                    for (int c = 0; c < nk; c++) {
                        float dp = 0.0f;
                        for (int x = 0; x < d; x++) dp += dO[(size_t)(q0 + r) * d + x] * V[(size_t)(k0 + c) * d + x];
                        dS[r * Bk + c] = P[r * Bk + c] * (dp - Dvec[q0 + r]);
                    }
                // dQ_i += scale dS_ij K_j   (read-modify-write of shared dQ_i: the atomic on a GPU)
                for (int r = 0; r < nq; r++)
                    for (int c = 0; c < nk; c++) {
                        const float ds = scale * dS[r * Bk + c];
                        for (int x = 0; x < d; x++) dQ[(size_t)(q0 + r) * d + x] += ds * K[(size_t)(k0 + c) * d + x];
                    }
                // dK_j += scale dS_ij^T Q_i
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < nq; r++) {
                        const float ds = scale * dS[r * Bk + c];
                        for (int x = 0; x < d; x++) dK_j[(size_t)c * d + x] += ds * Q[(size_t)(q0 + r) * d + x];
                    }
            }
            // Write dK_j, dV_j once, after every query tile has contributed.
            memcpy(dK + (size_t)k0 * d, dK_j, sizeof(float) * (size_t)nk * d);
            memcpy(dV + (size_t)k0 * d, dV_j, sizeof(float) * (size_t)nk * d);
        }
        free(Dvec);
        free(P);
        free(dS);
        free(dK_j);
        free(dV_j);
    }
    // STUDENT-END(04.flash_bwd_cpu)
}
