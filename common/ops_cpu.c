// The Transformer's operations in plain C, fp32 (see ops_cpu.h for the maths of each one).
// Loops are written in the order that keeps the innermost loop over contiguous memory;
// OpenMP splits the outermost independent loop (rows, or (batch, head) pairs), so results do
// not depend on the number of threads: every sum is done by one thread in a fixed order.
#include "common/ops_cpu.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

// Σ_k x[k] w[k] in 8 interleaved partial sums (lane j takes k ≡ j mod 8), added at the end
// in a fixed order. The compiler may turn the lanes into one vector register without
// reordering anything, so the result is the same bits with or without vectorisation.
#define DOT_LANES 8
static inline float dot_lanes(const float* x, const float* w, int n) {
    float acc[DOT_LANES] = {0};
    int k = 0;
    for (; k + DOT_LANES <= n; k += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += x[k + j] * w[k + j];
    for (int j = 0; k < n; k++, j++) acc[j] += x[k] * w[k];
    float s = 0.0f;
    for (int j = 0; j < DOT_LANES; j++) s += acc[j];
    return s;
}

void matmul_fwd_cpu(float* out, const float* inp, const float* W, int N, int din, int dout) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * din;  // (din)
        float* y = out + (size_t)n * dout;       // (dout)
        for (int o = 0; o < dout; o++) y[o] = dot_lanes(x, W + (size_t)o * din, din);  // row o of W
    }
}

void matmul_dinp_cpu(float* dinp, const float* dy, const float* W, int N, int din, int dout) {
    // dinp[n, :] = Σ_o dy[n, o] · W[o, :]   (rows of W scaled and added: contiguous)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* dx = dinp + (size_t)n * din;       // (din)
        const float* g = dy + (size_t)n * dout;  // (dout)
        memset(dx, 0, (size_t)din * sizeof(float));
        for (int o = 0; o < dout; o++) {
            const float* w = W + (size_t)o * din;
            const float go = g[o];
#pragma omp simd
            for (int k = 0; k < din; k++) dx[k] += go * w[k];
        }
    }
}

void matmul_bwd_cpu(float* dinp, float* dW, const float* dy, const float* inp, const float* W,
                    int N, int din, int dout) {
    if (dinp) matmul_dinp_cpu(dinp, dy, W, N, din, dout);
    // dW[o, :] = Σ_n dy[n, o] · inp[n, :]   (one thread owns row o: no races)
#pragma omp parallel for schedule(static)
    for (int o = 0; o < dout; o++) {
        float* dw = dW + (size_t)o * din;  // (din)
        memset(dw, 0, (size_t)din * sizeof(float));
        for (int n = 0; n < N; n++) {
            const float go = dy[(size_t)n * dout + o];
            const float* x = inp + (size_t)n * din;
#pragma omp simd
            for (int k = 0; k < din; k++) dw[k] += go * x[k];
        }
    }
}

void embedding_fwd_cpu(float* out, const int32_t* tokens, const float* E, int N, int C) {
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, E + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

void embedding_bwd_cpu(float* dE, const float* dout, const int32_t* tokens, int N, int C, int V) {
    memset(dE, 0, (size_t)V * C * sizeof(float));
    // Serial and in token order: a repeated token's rows are summed in a fixed order.
    for (int n = 0; n < N; n++) {
        float* d = dE + (size_t)tokens[n] * C;
        const float* g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}

void rmsnorm_fwd_cpu(float* out, float* rstd, const float* x, const float* w, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* xr = x + (size_t)n * C;  // (C)
        float* yr = out + (size_t)n * C;      // (C)
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        const float r = 1.0f / sqrtf(ss / (float)C + RMSNORM_EPS);
        rstd[n] = r;
        for (int c = 0; c < C; c++) yr[c] = xr[c] * r * w[c];
    }
}

void rmsnorm_bwd_cpu(float* dx, float* dw, const float* dout, const float* x, const float* w,
                     const float* rstd, int N, int C) {
    // dx: rows are independent.
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* xr = x + (size_t)n * C;
        const float* gr = dout + (size_t)n * C;
        float* dxr = dx + (size_t)n * C;
        const float r = rstd[n];
        // mean_c(g ∘ x̂) with g = dout ∘ w: the part of the gradient along x that the
        // normalisation removes.
        float dot = 0.0f;
        for (int c = 0; c < C; c++) dot += gr[c] * w[c] * xr[c] * r;
        dot /= (float)C;
        for (int c = 0; c < C; c++) dxr[c] += r * (gr[c] * w[c] - xr[c] * r * dot);
    }
    // dw: a sum over rows, one column per thread.
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float acc = 0.0f;
        for (int n = 0; n < N; n++) acc += dout[(size_t)n * C + c] * x[(size_t)n * C + c] * rstd[n];
        dw[c] = acc;
    }
}

void rope_tables_cpu(float* cos_t, float* sin_t, int T, int HS) {
    const int H2 = HS / 2;
    for (int i = 0; i < H2; i++) {
        // Frequency of pair i: theta^(−2i/HS), in double so the tables are correctly rounded.
        const double freq = pow(ROPE_THETA, -2.0 * i / (double)HS);
        for (int t = 0; t < T; t++) {
            cos_t[(size_t)t * H2 + i] = (float)cos((double)t * freq);
            sin_t[(size_t)t * H2 + i] = (float)sin((double)t * freq);
        }
    }
}

// Rotation by +angle (sign = 1) or −angle (sign = −1) of every pair, in place.
static void rope_rotate(float* x, int B, int T, int NH, int HS, int row_stride, const float* cos_t,
                        const float* sin_t, float sign) {
    const int H2 = HS / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* row = x + ((size_t)b * T + t) * row_stride;  // (NH, HS)
            const float* cs = cos_t + (size_t)t * H2;           // (HS/2)
            const float* sn = sin_t + (size_t)t * H2;
            for (int h = 0; h < NH; h++) {
                float* v = row + (size_t)h * HS;
                for (int i = 0; i < H2; i++) {
                    const float a = v[2 * i], bb = v[2 * i + 1];
                    const float c = cs[i], s = sign * sn[i];
                    v[2 * i] = a * c - bb * s;
                    v[2 * i + 1] = a * s + bb * c;
                }
            }
        }
}

void rope_fwd_cpu(float* x, int B, int T, int NH, int HS, int row_stride, const float* cos_t,
                  const float* sin_t) {
    rope_rotate(x, B, T, NH, HS, row_stride, cos_t, sin_t, 1.0f);
}

void rope_bwd_cpu(float* dx, int B, int T, int NH, int HS, int row_stride, const float* cos_t,
                  const float* sin_t) {
    rope_rotate(dx, B, T, NH, HS, row_stride, cos_t, sin_t, -1.0f);
}

void attention_fwd_cpu(float* y, float* P, const float* qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;  // q of (b, 0, h)
            float* Pbh = P + ((size_t)b * NH + h) * T * T;                   // (T, T)
            for (int i = 0; i < T; i++) {
                const float* q = base + (size_t)i * C3;  // (HS)
                float* p = Pbh + (size_t)i * T;          // (T): row i of P
                // Scores for keys 0..i; keys after i are masked (their probability is 0,
                // as with a −inf score).
                float m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float* k = base + (size_t)j * C3 + C;
                    float s = 0.0f;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    p[j] = s * scale;
                    if (p[j] > m) m = p[j];
                }
                // Softmax with the row maximum subtracted (exp never overflows).
                float l = 0.0f;
                for (int j = 0; j <= i; j++) {
                    p[j] = expf(p[j] - m);
                    l += p[j];
                }
                const float inv_l = 1.0f / l;
                for (int j = 0; j <= i; j++) p[j] *= inv_l;
                for (int j = i + 1; j < T; j++) p[j] = 0.0f;
                // y_i = Σ_j P_ij v_j
                float* yi = y + ((size_t)b * T + i) * C + (size_t)h * HS;  // (HS)
                for (int d = 0; d < HS; d++) yi[d] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const float* v = base + (size_t)j * C3 + 2 * (size_t)C;
                    for (int d = 0; d < HS; d++) yi[d] += p[j] * v[d];
                }
            }
        }
}

void attention_bwd_cpu(float* dqkv, const float* dy, const float* qkv, const float* P, int B,
                       int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t C3 = 3 * (size_t)C;
    // Each (b, h) owns its q, k, v columns of dqkv: zero them, then accumulate.
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
            float* dbase = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
            const float* Pbh = P + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++)
                for (int part = 0; part < 3; part++)
                    memset(dbase + (size_t)t * C3 + (size_t)part * C, 0, (size_t)HS * sizeof(float));
            for (int i = 0; i < T; i++) {
                const float* p = Pbh + (size_t)i * T;                               // (T)
                const float* dyi = dy + ((size_t)b * T + i) * C + (size_t)h * HS;   // (HS)
                const float* q = base + (size_t)i * C3;
                float* dq = dbase + (size_t)i * C3;
                // rowsum(P ∘ dP) with dP_ij = dy_i · v_j: first pass.
                float D = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const float* v = base + (size_t)j * C3 + 2 * (size_t)C;
                    float dp = 0.0f;
                    for (int d = 0; d < HS; d++) dp += dyi[d] * v[d];
                    D += p[j] * dp;
                }
                // Second pass: dS_ij = P_ij (dP_ij − D), then dq, dk, dv.
                for (int j = 0; j <= i; j++) {
                    const float* k = base + (size_t)j * C3 + C;
                    const float* v = base + (size_t)j * C3 + 2 * (size_t)C;
                    float* dk = dbase + (size_t)j * C3 + C;
                    float* dv = dbase + (size_t)j * C3 + 2 * (size_t)C;
                    float dp = 0.0f;
                    for (int d = 0; d < HS; d++) dp += dyi[d] * v[d];
                    const float ds = p[j] * (dp - D) * scale;
                    for (int d = 0; d < HS; d++) {
                        dv[d] += p[j] * dyi[d];
                        dq[d] += ds * k[d];
                        dk[d] += ds * q[d];
                    }
                }
            }
        }
}

static inline float sigmoidf(float a) { return 1.0f / (1.0f + expf(-a)); }

void swiglu_fwd_cpu(float* g, const float* h13, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* h1 = h13 + (size_t)n * 2 * F;  // (F)
        const float* h3 = h1 + F;                   // (F)
        float* gr = g + (size_t)n * F;
        for (int f = 0; f < F; f++) gr[f] = h1[f] * sigmoidf(h1[f]) * h3[f];
    }
}

void swiglu_bwd_cpu(float* dh13, const float* dg, const float* h13, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* h1 = h13 + (size_t)n * 2 * F;
        const float* h3 = h1 + F;
        const float* dgr = dg + (size_t)n * F;
        float* dh1 = dh13 + (size_t)n * 2 * F;
        float* dh3 = dh1 + F;
        for (int f = 0; f < F; f++) {
            const float a = h1[f], s = sigmoidf(a);
            dh1[f] = dgr[f] * h3[f] * s * (1.0f + a * (1.0f - s));
            dh3[f] = dgr[f] * a * s;
        }
    }
}

float cross_entropy_fwd_cpu(float* lse, const float* logits, const int32_t* targets, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* z = logits + (size_t)n * V;  // (V)
        float m = -INFINITY;
        for (int v = 0; v < V; v++) m = z[v] > m ? z[v] : m;
        float s = 0.0f;
        for (int v = 0; v < V; v++) s += expf(z[v] - m);
        lse[n] = m + logf(s);
    }
    // The mean, summed serially in double: the same bits whatever the thread count.
    double total = 0.0;
    for (int n = 0; n < N; n++) total += (double)lse[n] - (double)logits[(size_t)n * V + targets[n]];
    return (float)(total / N);
}

void cross_entropy_bwd_cpu(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, int N, int V) {
    const float invN = 1.0f / (float)N;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* z = logits + (size_t)n * V;
        float* dz = dlogits + (size_t)n * V;
        for (int v = 0; v < V; v++) dz[v] = expf(z[v] - lse[n]) * invN;
        dz[targets[n]] -= invN;
    }
}
