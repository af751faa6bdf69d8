// FlashAttention-2 forward (Dao 2023, Algorithm 1) on the CPU, in plain C, for reading beside
// the paper. It never forms the Nq x Nk score matrix: each query tile Q_i (Bq rows) walks the
// key/value tiles K_j, V_j (Bk rows) once, keeping a running row max m, a running row sum l
// and an unnormalised output accumulator O_i that is rescaled whenever m grows.
// Causal masking follows the naive reference: a masked score is -1e6 (not -inf), so a row
// whose every key is masked still gets a finite L; key tiles wholly above the diagonal are
// skipped only when that cannot change the result (see the comment at the skip).
#include <math.h>
#include <stdlib.h>
#include "common/check.h"
#include "03_flashattn_fwd/flash_fwd.h"

#define MASKED_SCORE (-1e6f)

void flash_forward_cpu(const float* q, const float* k, const float* v, float* o, float* lse,
                       int BH, int Nq, int Nk, int d, int causal, float scale, int Bq, int Bk) {
    // STUDENT-BEGIN(03.flash_fwd_cpu): FlashAttention-2 forward on the CPU: query tiles Q_i (Bq) x key tiles K_j, V_j (Bk); running m, l; O_i rescaled by exp(m_old - m_new); O = diag(l)^-1 O, L = m + log l | see 03_flashattn_fwd/README.md §The maths (Algorithm 1) | test: test_03 ref/tiled_* | needs: 03.naive_fwd_cpu
    if (BH <= 0 || Nq <= 0 || Nk <= 0 || d <= 0) DIE("flash_forward_cpu: bad sizes");
    if (Bq < 16 || Bk < 16) DIE("flash_forward_cpu: tiles must be at least 16 rows (Bq %d, Bk %d)", Bq, Bk);
    const int Tq = (Nq + Bq - 1) / Bq;  // number of query tiles
    const int Tk = (Nk + Bk - 1) / Bk;  // number of key tiles
#pragma omp parallel
    {
        // On-chip state of one thread block in the GPU version:
        float* S = malloc(sizeof(float) * (size_t)Bq * Bk);   // S_i^(j), then P~ (Bq, Bk)
        float* O = malloc(sizeof(float) * (size_t)Bq * d);    // O_i accumulator (Bq, d)
        float* m = malloc(sizeof(float) * (size_t)Bq);        // running row max (Bq)
        float* l = malloc(sizeof(float) * (size_t)Bq);        // running row sum (Bq)
        if (!S || !O || !m || !l) DIE("flash_forward_cpu: out of host memory");
#pragma omp for collapse(2) schedule(dynamic)
        for (int bh = 0; bh < BH; bh++) {
            for (int ti = 0; ti < Tq; ti++) {
                const int i0 = ti * Bq;                              // first query row of Q_i
                const int rows = Nq - i0 < Bq ? Nq - i0 : Bq;        // ragged last tile
                const float* Q_i = q + ((size_t)bh * Nq + i0) * d;   // (rows, d)
                // Initialise O_i = 0, l = 0, m = -inf.
                for (int r = 0; r < rows * d; r++) O[r] = 0.0f;
                for (int r = 0; r < rows; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
                for (int tj = 0; tj < Tk; tj++) {
                    const int j0 = tj * Bk;
                    const int cols = Nk - j0 < Bk ? Nk - j0 : Bk;
                    // Causal skip: if every key of K_j lies after every query of Q_i, the tile is
                    // wholly masked. With -1e6 masking it would add exp(-1e6 - m) = 0 to every row
                    // (each row already holds a real score from key 0 in tile 0), so stop here.
                    if (causal && j0 > i0 + rows - 1) break;
                    const float* K_j = k + ((size_t)bh * Nk + j0) * d;  // (cols, d)
                    const float* V_j = v + ((size_t)bh * Nk + j0) * d;  // (cols, d)
                    for (int r = 0; r < rows; r++) {
                        // S = scale * Q_i K_j^T, masked on diagonal tiles
                        float rowmax = -INFINITY;
                        for (int c = 0; c < cols; c++) {
                            float s = 0.0f;
                            for (int x = 0; x < d; x++) s += Q_i[(size_t)r * d + x] * K_j[(size_t)c * d + x];
                            s *= scale;
                            if (causal && j0 + c > i0 + r) s = MASKED_SCORE;
                            S[r * Bk + c] = s;
                            if (s > rowmax) rowmax = s;
                        }
                        // m_new = max(m, rowmax(S)); P~ = exp(S - m_new)
                        const float m_new = m[r] > rowmax ? m[r] : rowmax;
                        float rowsum = 0.0f;
                        for (int c = 0; c < cols; c++) {
                            S[r * Bk + c] = expf(S[r * Bk + c] - m_new);
                            rowsum += S[r * Bk + c];
                        }
                        // l = exp(m - m_new) l + rowsum(P~); O = diag(exp(m - m_new)) O + P~ V_j
                        const float alpha = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
                        l[r] = alpha * l[r] + rowsum;
                        float* O_r = O + (size_t)r * d;
                        for (int x = 0; x < d; x++) O_r[x] *= alpha;
                        for (int c = 0; c < cols; c++) {
                            const float p = S[r * Bk + c];
                            for (int x = 0; x < d; x++) O_r[x] += p * V_j[(size_t)c * d + x];
                        }
                        m[r] = m_new;
                    }
                }
                // O_i = diag(l)^-1 O_i; L_i = m + log(l)
                for (int r = 0; r < rows; r++) {
                    float* o_r = o + ((size_t)bh * Nq + i0 + r) * d;
                    for (int x = 0; x < d; x++) o_r[x] = O[(size_t)r * d + x] / l[r];
                    lse[(size_t)bh * Nq + i0 + r] = m[r] + logf(l[r]);
                }
            }
        }
        free(S);
        free(O);
        free(m);
        free(l);
    }
    // STUDENT-END(03.flash_fwd_cpu)
}
