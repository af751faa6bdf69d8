// The roofline's accounting (roofline.h says the conventions): FLOPs and compulsory bytes of
// every kernel entry, and the bound. Pure C, no GPU: the CPU tests check every formula here.
#include "04_flashattn_bwd/roofline.h"

#include <stdio.h>
#include <string.h>

const char* rl_roof_name(rl_roof_t r) { return r == RL_ROOF_BF16 ? "bf16-tc" : "fp32"; }

// C[M,N] = A[M,K]·B[N,K]ᵀ: one multiply-add per (m, n, k); A, B read once, C written once.
double rl_gemm_flops(int64_t M, int64_t N, int64_t K) { return 2.0 * (double)M * N * K; }
double rl_gemm_bytes(int64_t M, int64_t N, int64_t K, dtype_t dt) {
    return ((double)M * K + (double)K * N + (double)M * N) * (double)dtype_size(dt);
}

int rl_count(rl_entry_t* e) {
    const int64_t* x = e->dim;
    const double es = (double)dtype_size(e->dt), f4 = 4.0;  // f4: fp32 and int32 operands
    double F = 0, Bt = 0;
    switch (e->kind) {
        case RL_GEMM:
            F = rl_gemm_flops(x[0], x[1], x[2]);
            Bt = rl_gemm_bytes(x[0], x[1], x[2], e->dt);
            break;
        case RL_RMSNORM_FWD: {
            // y = x·rstd·w: x² and its sum (2), ·rstd, ·w (2) per element -> 4·N·C.
            // Reads x (N,C) fp32 and w (C) fp32; writes y (N,C) dtype and rstd (N) fp32.
            const double N = (double)x[0], C = (double)x[1];
            F = 4.0 * N * C;
            Bt = N * C * f4 + C * f4 + N * C * es + N * f4;
            break;
        }
        case RL_RMSNORM_BWD: {
            // Per element: g = dy·w (1), x̂ = x·rstd (1), dot += g·x̂ (2), dx = rstd·(g − x̂·dot) (3),
            // dres += dx (1), dw += dy·x̂ (2) -> 10·N·C.
            // Reads dy (N,C) dtype, x (N,C) fp32, w (C), rstd (N), dres (N,C) fp32 (accumulated
            // into); writes dres (N,C) fp32, its dtype copy dres_lp (N,C) and dw (C) fp32.
            const double N = (double)x[0], C = (double)x[1];
            F = 10.0 * N * C;
            Bt = N * C * es + N * C * f4 + C * f4 + N * f4 + N * C * f4 + N * C * f4 + N * C * es + C * f4;
            break;
        }
        case RL_ROPE: {
            // In place on the q and k thirds of qkv (B,T,3,NH,HS): 2·B·T·NH·HS elements, each
            // read and written; per pair (x0, x1): 4 multiplies and 2 adds -> 3 per element.
            // The cos and sin tables (T, HS/2) fp32 are read once.
            const double B = (double)x[0], T = (double)x[1], NH = (double)x[2], HS = (double)x[3];
            const double rot = 2.0 * B * T * NH * HS;
            F = 3.0 * rot;
            Bt = 2.0 * rot * es + 2.0 * T * (HS / 2.0) * f4;
            break;
        }
        case RL_SWIGLU_FWD: {
            // g = SiLU(h1)·h3, SiLU(h1) = h1 / (1 + exp(−h1)): exp, add, divide, multiply (4).
            // Reads h13 (N, 2F); writes g (N, F).
            const double N = (double)x[0], Ff = (double)x[1];
            F = 4.0 * N * Ff;
            Bt = 3.0 * N * Ff * es;
            break;
        }
        case RL_SWIGLU_BWD: {
            // s = sigmoid(h1) (3), silu = h1·s (1), dh3 = dg·silu (1),
            // silu' = s·(1 + h1·(1 − s)) (4), dh1 = dg·h3·silu' (2) -> 11 per (n, f).
            // Reads h13 (N, 2F) and dg (N, F); writes dh13 (N, 2F).
            const double N = (double)x[0], Ff = (double)x[1];
            F = 11.0 * N * Ff;
            Bt = 5.0 * N * Ff * es;
            break;
        }
        case RL_SOFTMAX_FWD:
        case RL_SOFTMAX_BWD: {
            // BH·T rows of length T; row i keeps the i + 1 visible keys: E = BH·T(T+1)/2 visible
            // scores. Forward: max, subtract, exp, sum, scale -> 5 per visible score; reads the
            // visible scores, writes the whole rows (zeros above the diagonal are output).
            // Backward: P·dP, its sum, subtract, multiply -> 4 per visible; reads visible P and
            // dP, writes the whole rows of dS.
            const double BH = (double)x[0], T = (double)x[1];
            const double E = BH * T * (T + 1.0) / 2.0, full = BH * T * T;
            const int fwd = e->kind == RL_SOFTMAX_FWD;
            F = (fwd ? 5.0 : 4.0) * E;
            Bt = (fwd ? 1.0 : 2.0) * E * es + full * es;
            break;
        }
        case RL_XENT_FWD: {
            // Per logit: max, subtract, exp, sum -> 4·N·V. Reads logits (N,V) dtype and targets
            // (N) int32; writes lse (N) and losses (N) fp32 and the mean loss (1 float).
            const double N = (double)x[0], V = (double)x[1];
            F = 4.0 * N * V;
            Bt = N * V * es + N * f4 + 2.0 * N * f4 + f4;
            break;
        }
        case RL_XENT_BWD: {
            // In place: logits := (exp(logit − lse) − onehot)·scale: subtract, exp, multiply per
            // logit -> 3·N·V. Reads logits, targets (N) and lse (N); writes logits.
            const double N = (double)x[0], V = (double)x[1];
            F = 3.0 * N * V;
            Bt = 2.0 * N * V * es + 2.0 * N * f4;
            break;
        }
        case RL_EMBED_FWD: {
            // x[n] = E[token n]: no arithmetic. Reads tokens (N) int32 and N rows of E (C fp32
            // each); writes x (N, C) fp32.
            const double N = (double)x[0], C = (double)x[1];
            F = 0.0;
            Bt = N * f4 + 2.0 * N * C * f4;
            break;
        }
        case RL_EMBED_BWD: {
            // dE[token n] += dx[n]: one add per element -> N·C. Reads tokens, dx (N, C) and the
            // N rows of dE it adds into; writes those N rows.
            const double N = (double)x[0], C = (double)x[1];
            F = N * C;
            Bt = N * f4 + 3.0 * N * C * f4;
            break;
        }
        case RL_ADAMW: {
            // Per element: p·decay (1); m = β1·m + (1−β1)·g (3); v = β2·v + (1−β2)·g² (4);
            // p −= step·m / (sqrt(v)/bc2 + eps) (6) -> 14·n. Reads p, g, m, v fp32; writes p, m,
            // v fp32 and p_lp bf16 -> 30 bytes per element.
            const double n = (double)x[0];
            F = 14.0 * n;
            Bt = 4.0 * n * f4 + 3.0 * n * f4 + 2.0 * n;
            break;
        }
        case RL_WS_FWD: {
            // y[r] = Σ_d x[r,d]·w[d]: a multiply-add per element -> 2·ROWS·D. Reads x, w;
            // writes y (ROWS); all of one dtype.
            const double R = (double)x[0], D = (double)x[1];
            F = 2.0 * R * D;
            Bt = (R * D + D + R) * es;
            break;
        }
        case RL_WS_BWD: {
            // grad_x = grad_y[r]·w[d] (1), grad_w[d] += x·grad_y (2) -> 3·ROWS·D. Reads x, w,
            // grad_y; writes grad_x (ROWS, D) and grad_w (D); all of one dtype.
            const double R = (double)x[0], D = (double)x[1];
            F = 3.0 * R * D;
            Bt = (R * D + D + R + R * D + D) * es;
            break;
        }
        case RL_FLASH_FWD:
        case RL_FLASH_BWD: {
            // One S×S×d product per head is 2·S²·d FLOPs, half of it when causal. The forward
            // has 2 (S = QKᵀ, O = PV); the backward 5 (S recomputed, dV = PᵀdO, dP = dO Vᵀ,
            // dQ = dS K, dK = dSᵀQ). n = BH·S·d elements per operand.
            // Forward reads q, k, v and writes o (dtype) and lse (BH·S fp32).
            // Backward reads q, k, v, o, dO (dtype) and lse; writes dq, dk, dv.
            const double BH = (double)x[0], S = (double)x[1], d = (double)x[2];
            const double prod = 2.0 * BH * S * S * d / (x[3] ? 2.0 : 1.0), n = BH * S * d;
            const int fwd = e->kind == RL_FLASH_FWD;
            F = (fwd ? 2.0 : 5.0) * prod;
            Bt = (fwd ? 4.0 : 8.0) * n * es + BH * S * f4;
            break;
        }
        default:
            return -1;
    }
    e->flops = F;
    e->bytes = Bt;
    return 0;
}

double rl_intensity(double flops, double bytes) { return bytes > 0 ? flops / bytes : 0.0; }

double rl_roof_flops(double peak_flops, double peak_bw, double intensity) {
    const double mem = intensity * peak_bw;
    return mem < peak_flops ? mem : peak_flops;
}

double rl_bound_time_s(double flops, double bytes, double peak_flops, double peak_bw) {
    const double tc = peak_flops > 0 ? flops / peak_flops : 0.0, tm = peak_bw > 0 ? bytes / peak_bw : 0.0;
    return tc > tm ? tc : tm;
}

double rl_percent_of_bound(double flops, double bytes, double time_s, double peak_flops, double peak_bw) {
    if (!(time_s > 0)) return 0.0;
    return 100.0 * rl_bound_time_s(flops, bytes, peak_flops, peak_bw) / time_s;
}

// ---- the list

static rl_entry_t* add(rl_entry_t* out, int* n, int max, const char* name, rl_kind_t kind, dtype_t dt,
                       int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    if (*n >= max) return NULL;
    rl_entry_t* e = &out[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->kind = kind;
    e->dt = dt;
    e->dim[0] = d0, e->dim[1] = d1, e->dim[2] = d2, e->dim[3] = d3;
    // bf16 matmuls run on tensor cores; fp32 ones and all elementwise arithmetic on CUDA cores.
    const int matmul = kind == RL_GEMM || kind == RL_FLASH_FWD || kind == RL_FLASH_BWD;
    e->roof = matmul && dt == DT_BF16 ? RL_ROOF_BF16 : RL_ROOF_F32;
    rl_count(e);
    return e;
}

int rl_entries(const rl_shapes_t* s, rl_entry_t* out, int max) {
    int n = 0;
    const int64_t N = (int64_t)s->B * s->T, C = s->C, F = s->F, V = s->V, HS = s->C / s->NH;
    // The model's GEMMs, y = x Wᵀ with x (N, d_in) and W (d_out, d_in), in both precisions.
    struct { const char* what; int64_t out, in; } g[] = {
        {"gemm_qkv", 3 * C, C}, {"gemm_attn_out", C, C}, {"gemm_w13", 2 * F, C}, {"gemm_w2", C, F},
        {"gemm_lm_head", V, C},
    };
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
            const dtype_t dt = p == 0 ? DT_BF16 : DT_F32;
            char nm[40];
            snprintf(nm, sizeof nm, "%s_%s", g[i].what, dtype_name(dt));
            rl_entry_t* e = add(out, &n, max, nm, RL_GEMM, dt, N, g[i].out, g[i].in, 0);
            if (e) snprintf(e->shape, sizeof e->shape, "M %lld N %lld K %lld", (long long)N, (long long)g[i].out,
                            (long long)g[i].in);
        }
    // The model's other kernels with bf16 activations (mixed precision, how the XL model trains).
    const dtype_t a = DT_BF16;
    rl_entry_t* e;
#define SHAPE(...) \
    if (e) snprintf(e->shape, sizeof e->shape, __VA_ARGS__)
    e = add(out, &n, max, "rmsnorm_fwd", RL_RMSNORM_FWD, a, N, C, 0, 0);
    SHAPE("N %lld C %lld", (long long)N, (long long)C);
    e = add(out, &n, max, "rmsnorm_bwd", RL_RMSNORM_BWD, a, N, C, 0, 0);
    SHAPE("N %lld C %lld", (long long)N, (long long)C);
    e = add(out, &n, max, "rope", RL_ROPE, a, s->B, s->T, s->NH, HS);
    SHAPE("B %d T %d NH %d HS %lld", s->B, s->T, s->NH, (long long)HS);
    e = add(out, &n, max, "swiglu_fwd", RL_SWIGLU_FWD, a, N, F, 0, 0);
    SHAPE("N %lld F %lld", (long long)N, (long long)F);
    e = add(out, &n, max, "swiglu_bwd", RL_SWIGLU_BWD, a, N, F, 0, 0);
    SHAPE("N %lld F %lld", (long long)N, (long long)F);
    e = add(out, &n, max, "softmax_fwd", RL_SOFTMAX_FWD, a, (int64_t)s->B * s->NH, s->T, 0, 0);
    SHAPE("BH %d T %d causal", s->B * s->NH, s->T);
    e = add(out, &n, max, "softmax_bwd", RL_SOFTMAX_BWD, a, (int64_t)s->B * s->NH, s->T, 0, 0);
    SHAPE("BH %d T %d causal", s->B * s->NH, s->T);
    e = add(out, &n, max, "xent_fwd", RL_XENT_FWD, a, N, V, 0, 0);
    SHAPE("N %lld V %lld", (long long)N, (long long)V);
    e = add(out, &n, max, "xent_bwd", RL_XENT_BWD, a, N, V, 0, 0);
    SHAPE("N %lld V %lld", (long long)N, (long long)V);
    e = add(out, &n, max, "embed_fwd", RL_EMBED_FWD, DT_F32, N, C, V, 0);
    SHAPE("N %lld C %lld V %lld", (long long)N, (long long)C, (long long)V);
    e = add(out, &n, max, "embed_bwd", RL_EMBED_BWD, DT_F32, N, C, V, 0);
    SHAPE("N %lld C %lld V %lld", (long long)N, (long long)C, (long long)V);
    // AdamW over one layer's parameters (q, k, v, o: 4·C²; w1, w3, w2: 3·C·F; two norms: 2·C):
    // a pure stream, so one layer is as representative as the whole model, at 1/48 the memory.
    const int64_t nl = 4 * C * C + 3 * C * F + 2 * C;
    e = add(out, &n, max, "adamw", RL_ADAMW, DT_F32, nl, 0, 0, 0);
    SHAPE("n %lld (one layer)", (long long)nl);
    // Stage 02 and stages 03-04.
    for (int p = 0; p < 2; p++) {
        const dtype_t dt = p == 0 ? DT_BF16 : DT_F32;
        char nm[40];
        snprintf(nm, sizeof nm, "ws_fwd_%s", dtype_name(dt));
        e = add(out, &n, max, nm, RL_WS_FWD, dt, s->ws_rows, s->ws_d, 0, 0);
        SHAPE("ROWS %lld D %lld", (long long)s->ws_rows, (long long)s->ws_d);
        snprintf(nm, sizeof nm, "ws_bwd_%s", dtype_name(dt));
        e = add(out, &n, max, nm, RL_WS_BWD, dt, s->ws_rows, s->ws_d, 0, 0);
        SHAPE("ROWS %lld D %lld", (long long)s->ws_rows, (long long)s->ws_d);
    }
    for (int p = 0; p < 2; p++) {
        const dtype_t dt = p == 0 ? DT_BF16 : DT_F32;
        char nm[40];
        snprintf(nm, sizeof nm, "flash_fwd_%s", dtype_name(dt));
        e = add(out, &n, max, nm, RL_FLASH_FWD, dt, s->attn_bh, s->attn_s, s->attn_d, s->attn_causal);
        SHAPE("BH %d N %d d %d%s", s->attn_bh, s->attn_s, s->attn_d, s->attn_causal ? " causal" : "");
        snprintf(nm, sizeof nm, "flash_bwd_%s", dtype_name(dt));
        e = add(out, &n, max, nm, RL_FLASH_BWD, dt, s->attn_bh, s->attn_s, s->attn_d, s->attn_causal);
        SHAPE("BH %d N %d d %d%s", s->attn_bh, s->attn_s, s->attn_d, s->attn_causal ? " causal" : "");
    }
#undef SHAPE
    return n;
}

const char* rl_names(const rl_entry_t* e, int n, char* buf, size_t len) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        const int w = snprintf(buf + used, len - used, "%s%s", i ? "|" : "", e[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}
