// roofline: every kernel of the repository on the roofline of this GPU.
//   1. the peaks, measured: HBM bandwidth (our copy kernel and cudaMemcpy device-to-device,
//      bytes read + written over the time, the faster of the two), and GEMM throughput through
//      common/matmul (cuBLAS) on a large square product in fp32 (CUDA cores, TF32 off) and bf16
//      (tensor cores);
//   2. every kernel at a representative size (the model's at the XL shapes, batch 4 × context
//      512; stage 02's weighted sum at 1M × 1024; flash attention at 16 heads × N 4096 × d 64,
//      causal), timed as the median of --iters runs after --warmup, CUDA events, L2 flushed
//      before each run (common/timer's gpu_time_fn);
//   3. FLOPs and compulsory bytes from roofline.c (conventions in roofline.h), and the roof
//      min(peak, intensity × bandwidth) of the kernel's compute unit.
// Output: a Markdown table on stdout and in DIR/roofline.md, DIR/roofline.csv, DIR/roofline.png
// (log-log, roofs and one labelled point per kernel; kernels without arithmetic have no place
// on a FLOP/s axis and are left off the plot, not the table) and the plot's gnuplot script with
// its data, DIR/roofline.gp (for drawing the PNG on another machine when this one has no gnuplot).
// Stage 04 is the last single-GPU stage, so this program links every kernel of 01-04.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gnuplot.h"
#include "common/gpu.h"
#include "common/matmul.h"
#include "common/model.h"
#include "common/model_kernels.h"
#include "common/rng.h"
#include "common/table.h"
#include "common/tensor.h"
#include "common/timer.h"
#include "02_weighted_sum/weighted_sum.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/roofline.h"

#define CUBLAS_WS_BYTES (32u << 20)  // as the model's: enough for cuBLAS's Hopper kernels
#define MAX_BUFS 12

static int g_iters, g_warmup;

typedef struct {
    double bw_copy, bw_memcpy, bw;  // bytes/s: our copy kernel, cudaMemcpy D2D, the roof (max)
    double f32, bf16;               // FLOP/s of the square GEMMs
    int gemm_n;
    size_t copy_bytes;
} peaks_t;

// One kernel's buffers and arguments; run_entry() launches it on stream 0.
typedef struct {
    const rl_entry_t* e;
    const mm_handle_t* mm;
    void* buf[MAX_BUFS];
    int nbuf;
    size_t n_copy;          // peaks: floats copied
    attn_args_t a;          // flash
    ws_plan_t plan;         // weighted sum
    void* ws_work;
    float xent_scale;
    dtype_t gemm_dt;        // peaks: the square GEMM's dtype
} run_t;

static double median_ms(gpu_timed_fn fn, void* ctx) {
    return gpu_time_fn(fn, ctx, g_warmup, g_iters, 0).median;
}

// A device buffer owned by r (freed by run_free), random normal (dtype dt) or zero.
static void* buf_randn(run_t* r, dtype_t dt, size_t n, uint64_t seed) {
    if (r->nbuf >= MAX_BUFS) DIE("roofline: more than %d buffers for one kernel", MAX_BUFS);
    void* p = tensor_randn_dev(dt, n, seed, MEM_OTHER);
    if (!p) DIE("roofline: out of GPU memory for %s (%zu elements)", r->e ? r->e->name : "peaks", n);
    return r->buf[r->nbuf++] = p;
}
static void* buf_zero(run_t* r, size_t bytes) {
    if (r->nbuf >= MAX_BUFS) DIE("roofline: more than %d buffers for one kernel", MAX_BUFS);
    void* p = mem_alloc(DEV_CUDA, bytes ? bytes : 16, MEM_OTHER);
    CUDA_CHECK(cudaMemset(p, 0, bytes ? bytes : 16));
    return r->buf[r->nbuf++] = p;
}
static int32_t* buf_tokens(run_t* r, size_t n, int32_t hi, uint64_t seed) {
    int32_t* p = buf_zero(r, n * sizeof(int32_t));
    rng_t g = rng_make(seed);
    rng_fill_int_cuda(&g, p, n, 0, hi, 0);
    return p;
}
static void run_free(run_t* r) {
    for (int i = 0; i < r->nbuf; i++) mem_free(r->buf[i]);
    r->nbuf = 0;
}

// ---------------------------------------------------------------- peaks
static void run_copy(void* p) {
    run_t* r = p;
    rl_copy_cuda(r->buf[1], r->buf[0], r->n_copy, 0);
}
static void run_memcpy(void* p) {
    run_t* r = p;
    CUDA_CHECK(cudaMemcpyAsync(r->buf[1], r->buf[0], r->n_copy * sizeof(float), cudaMemcpyDeviceToDevice, 0));
}
static void run_square_gemm(void* p) {
    run_t* r = p;
    const int n = (int)r->n_copy;
    const dtype_t dt = r->gemm_dt;
    mm_rm(r->mm, 0, 1, n, n, n, 1.0f, r->buf[0], dt, n, r->buf[1], dt, n, 0.0f, r->buf[2], dt, n);
}

static peaks_t measure_peaks(const mm_handle_t* mm, int gemm_n, size_t copy_bytes) {
    peaks_t pk = {0};
    pk.gemm_n = gemm_n, pk.copy_bytes = copy_bytes;
    run_t r = {0};
    r.n_copy = copy_bytes / sizeof(float);
    buf_randn(&r, DT_F32, r.n_copy, 1);
    buf_zero(&r, r.n_copy * sizeof(float));
    const double moved = 2.0 * (double)r.n_copy * sizeof(float);  // read once + written once
    pk.bw_copy = moved / (median_ms(run_copy, &r) * 1e-3);
    pk.bw_memcpy = moved / (median_ms(run_memcpy, &r) * 1e-3);
    pk.bw = pk.bw_copy > pk.bw_memcpy ? pk.bw_copy : pk.bw_memcpy;
    run_free(&r);
    // The compute roof is the best of three square GEMMs (n, n/2, n/4): a single large fp32 GEMM
    // was seen to run slower than a model-sized one on an H200 (26-31 TFLOP/s at n 4096-8192, 40 for
    // 2048 x 1600 x 1600), which would put that kernel above "its" roof.
    for (int p = 0; p < 2; p++) {
        const dtype_t dt = p == 0 ? DT_F32 : DT_BF16;
        double best = 0;
        for (int n = gemm_n, k = 0; k < 3 && n >= 256; n /= 2, k++) {
            run_t g = {0};
            g.mm = mm, g.n_copy = (size_t)n, g.gemm_dt = dt;
            const size_t nn = (size_t)n * n;
            buf_randn(&g, dt, nn, 2);
            buf_randn(&g, dt, nn, 3);
            buf_zero(&g, nn * dtype_size(dt));
            const double f = rl_gemm_flops(n, n, n) / (median_ms(run_square_gemm, &g) * 1e-3);
            if (f > best) best = f;
            run_free(&g);
        }
        if (p == 0) pk.f32 = best;
        else pk.bf16 = best;
    }
    return pk;
}

// ---------------------------------------------------------------- the kernels
static void run_entry(void* p) {
    run_t* r = p;
    const rl_entry_t* e = r->e;
    const int64_t* d = e->dim;
    void** b = r->buf;
    switch (e->kind) {
        case RL_GEMM:  // y (M, N) = x (M, K) · W (N, K)ᵀ, as the model's linear layers
            mm_rm(r->mm, 0, 1, (int)d[0], (int)d[1], (int)d[2], 1.0f, b[0], e->dt, (int)d[2], b[1], e->dt,
                  (int)d[2], 0.0f, b[2], e->dt, (int)d[1]);
            break;
        case RL_RMSNORM_FWD:
            k_rmsnorm_fwd(e->dt, b[0], b[1], b[2], b[3], (int)d[0], (int)d[1], 1e-5f, 0);
            break;
        case RL_RMSNORM_BWD:  // accumulate into the residual gradient, with its bf16 copy
            k_rmsnorm_bwd(e->dt, b[0], b[1], b[2], b[3], b[4], b[5], 1, b[6], b[7], (int)d[0], (int)d[1], 0);
            break;
        case RL_ROPE:
            k_rope(e->dt, b[0], b[1], b[2], (int)d[0], (int)d[1], (int)d[2], (int)d[3], 0, 0);
            break;
        case RL_SWIGLU_FWD: k_swiglu_fwd(e->dt, b[0], b[1], (int)d[0], (int)d[1], 0); break;
        case RL_SWIGLU_BWD: k_swiglu_bwd(e->dt, b[0], b[1], b[2], (int)d[0], (int)d[1], 0); break;
        case RL_SOFTMAX_FWD: k_softmax_causal_fwd(e->dt, b[0], (int)(d[0] * d[1]), (int)d[1], 0); break;
        case RL_SOFTMAX_BWD: k_softmax_causal_bwd(e->dt, b[0], b[1], (int)(d[0] * d[1]), (int)d[1], 0); break;
        case RL_XENT_FWD:
            k_cross_entropy_fwd(e->dt, b[0], b[1], b[2], b[3], b[4], (int)d[0], (int)d[1], 0);
            break;
        case RL_XENT_BWD: k_cross_entropy_bwd(e->dt, b[0], b[1], b[2], r->xent_scale, (int)d[0], (int)d[1], 0); break;
        case RL_EMBED_FWD: k_embedding_fwd(b[0], b[1], b[2], (int)d[0], (int)d[1], (int)d[2], 0); break;
        case RL_EMBED_BWD: k_embedding_bwd(b[0], b[1], b[2], (int)d[0], (int)d[1], (int)d[2], 0); break;
        case RL_ADAMW:  // step 1 of lr 1e-3, weight decay 0.01 (the values do not change the traffic)
            k_adamw(b[0], b[1], b[2], b[3], b[4], (size_t)d[0], 0.9f, 0.999f, 1e-8f, 1.0f - 1e-5f, 1e-2f,
                    sqrtf(1.0f - 0.999f), 0);
            break;
        case RL_WS_FWD: ws_forward_cuda(e->dt, b[0], d[1], b[1], b[2], d[0], d[1], &r->plan, 0); break;
        case RL_WS_BWD:
            ws_backward_cuda(e->dt, b[0], d[1], b[1], b[2], b[3], d[1], b[4], d[0], d[1], &r->plan,
                             WS_GRADW_PARTIALS, r->ws_work, 0);
            break;
        case RL_FLASH_FWD: flash_forward_cuda(&r->a, 0); break;
        case RL_FLASH_BWD: flash_backward_cuda(&r->a, 0); break;
    }
}

// Allocates and fills every buffer of entry e (inputs random, accumulators zero).
static void setup(run_t* r, const rl_entry_t* e, const mm_handle_t* mm) {
    memset(r, 0, sizeof *r);
    r->e = e, r->mm = mm;
    const int64_t* d = e->dim;
    const dtype_t dt = e->dt;
    char err[512];
    switch (e->kind) {
        case RL_GEMM:
            buf_randn(r, dt, (size_t)(d[0] * d[2]), 11);
            buf_randn(r, dt, (size_t)(d[1] * d[2]), 12);
            buf_zero(r, (size_t)(d[0] * d[1]) * dtype_size(dt));
            break;
        case RL_RMSNORM_FWD:
        case RL_RMSNORM_BWD: {
            const size_t N = (size_t)d[0], C = (size_t)d[1];
            if (e->kind == RL_RMSNORM_BWD) buf_randn(r, dt, N * C, 13);  // b[0] dy
            float* x = buf_randn(r, DT_F32, N * C, 14);
            float* w = buf_randn(r, DT_F32, C, 15);
            void* y = buf_zero(r, N * C * dtype_size(dt));
            float* rstd = buf_zero(r, N * sizeof(float));
            if (e->kind == RL_RMSNORM_FWD) break;
            // The backward reads the forward's rstd: compute it once (y then serves as dres_lp).
            k_rmsnorm_fwd(dt, x, w, y, rstd, (int)N, (int)C, 1e-5f, 0);
            // b: dy x w dres_lp(=y) rstd -> reorder to the launcher's dy x w rstd dres dres_lp dw partial
            void* dres = buf_zero(r, N * C * sizeof(float));
            r->buf[3] = rstd, r->buf[4] = dres, r->buf[5] = y;
            buf_zero(r, C * sizeof(float));                                   // b[6] dw
            buf_zero(r, k_rmsnorm_partial_len((int)N, (int)C) * sizeof(float));  // b[7] partial
            break;
        }
        case RL_ROPE: {
            const int64_t B = d[0], T = d[1], NH = d[2], HS = d[3];
            buf_randn(r, dt, (size_t)(B * T * 3 * NH * HS), 16);
            // Real tables (cos and sin of position · theta^(-2i/HS)), so repeated in-place runs
            // rotate and never overflow.
            const size_t nt = (size_t)(T * HS / 2);
            float* h = malloc(2 * nt * sizeof(float));
            if (!h) DIE("out of host memory");
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < HS / 2; i++) {
                    const double ang = (double)t * pow(10000.0, -2.0 * (double)i / (double)HS);
                    h[t * (HS / 2) + i] = (float)cos(ang), h[nt + t * (HS / 2) + i] = (float)sin(ang);
                }
            float* c = buf_zero(r, nt * sizeof(float));
            float* s = buf_zero(r, nt * sizeof(float));
            CUDA_CHECK(cudaMemcpy(c, h, nt * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(s, h + nt, nt * sizeof(float), cudaMemcpyHostToDevice));
            free(h);
            break;
        }
        case RL_SWIGLU_FWD:
            buf_randn(r, dt, (size_t)(d[0] * 2 * d[1]), 17);
            buf_zero(r, (size_t)(d[0] * d[1]) * dtype_size(dt));
            break;
        case RL_SWIGLU_BWD:
            buf_randn(r, dt, (size_t)(d[0] * 2 * d[1]), 17);
            buf_randn(r, dt, (size_t)(d[0] * d[1]), 18);
            buf_zero(r, (size_t)(d[0] * 2 * d[1]) * dtype_size(dt));
            break;
        case RL_SOFTMAX_FWD:
        case RL_SOFTMAX_BWD: {
            const size_t n = (size_t)(d[0] * d[1] * d[1]);
            void* S = buf_randn(r, dt, n, 19);
            if (e->kind == RL_SOFTMAX_BWD) {
                k_softmax_causal_fwd(dt, S, (int)(d[0] * d[1]), (int)d[1], 0);  // P: real probabilities
                buf_randn(r, dt, n, 20);                                        // dP
            }
            break;
        }
        case RL_XENT_FWD:
        case RL_XENT_BWD: {
            const size_t N = (size_t)d[0], V = (size_t)d[1];
            void* logits = buf_randn(r, dt, N * V, 21);
            int32_t* tg = buf_tokens(r, N, (int32_t)V, 22);
            float* lse = buf_zero(r, N * sizeof(float));
            float* losses = buf_zero(r, N * sizeof(float));
            float* loss = buf_zero(r, sizeof(float));
            if (e->kind == RL_XENT_BWD) {
                k_cross_entropy_fwd(dt, logits, tg, lse, losses, loss, (int)N, (int)V, 0);  // lse
                r->xent_scale = 1.0f / (float)N;
            }
            break;
        }
        case RL_EMBED_FWD:
        case RL_EMBED_BWD: {
            const size_t N = (size_t)d[0], C = (size_t)d[1], V = (size_t)d[2];
            buf_tokens(r, N, (int32_t)V, 23);
            if (e->kind == RL_EMBED_FWD) {
                buf_randn(r, DT_F32, V * C, 24);    // E
                buf_zero(r, N * C * sizeof(float));  // x
            } else {
                buf_randn(r, DT_F32, N * C, 25);     // dx
                buf_zero(r, V * C * sizeof(float));  // dE (zeroed, as the caller must)
            }
            break;
        }
        case RL_ADAMW: {
            const size_t n = (size_t)d[0];
            buf_randn(r, DT_F32, n, 26);          // p
            buf_randn(r, DT_F32, n, 27);          // g
            buf_zero(r, n * sizeof(float));       // m
            buf_zero(r, n * sizeof(float));       // v
            buf_zero(r, n * sizeof(uint16_t));    // p_lp
            break;
        }
        case RL_WS_FWD:
        case RL_WS_BWD: {
            const int64_t R = d[0], D = d[1];
            const ws_config_t cfg = ws_config_default();
            buf_randn(r, dt, (size_t)(R * D), 28);  // x
            buf_randn(r, dt, (size_t)D, 29);        // w
            if (e->kind == RL_WS_FWD) {
                buf_zero(r, (size_t)R * dtype_size(dt));  // y
                if (ws_plan_forward(R, D, dt, &cfg, &r->plan, err, sizeof err) != 0) fail("%s: %s", e->name, err);
            } else {
                buf_randn(r, dt, (size_t)R, 30);                // grad_y
                buf_zero(r, (size_t)(R * D) * dtype_size(dt));  // grad_x
                buf_zero(r, (size_t)D * dtype_size(dt));        // grad_w
                if (ws_plan_backward(R, D, dt, &cfg, ws_sm_count(), &r->plan, err, sizeof err) != 0)
                    fail("%s: %s", e->name, err);
                r->ws_work = buf_zero(r, ws_workspace_bytes(&r->plan, D, dt, WS_GRADW_PARTIALS));
            }
            break;
        }
        case RL_FLASH_FWD:
        case RL_FLASH_BWD: {
            attn_args_t* a = &r->a;
            const int BH = (int)d[0], S = (int)d[1], hd = (int)d[2];
            a->B = 1, a->H = BH, a->Nq = a->Nk = S, a->d = hd, a->dtype = dt, a->causal = (int)d[3];
            a->scale = 1.0f / sqrtf((float)hd);
            int64_t* all[8] = {a->sq, a->sk, a->sv, a->so, a->sdo, a->sdq, a->sdk, a->sdv};
            for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], BH, S, hd);
            const int fwd = e->kind == RL_FLASH_FWD;
            // The forward's check looks at shapes only; the backward's also wants every pointer,
            // so it comes after the buffers below. Both run the forward.
            if (flash_fwd_supports(a, err, sizeof err) != 0) fail("%s: %s", e->name, err);
            const size_t n = (size_t)BH * S * hd, es = dtype_size(dt);
            a->q = buf_randn(r, dt, n, 31), a->k = buf_randn(r, dt, n, 32), a->v = buf_randn(r, dt, n, 33);
            a->o = buf_zero(r, n * es);
            a->lse = buf_zero(r, (size_t)BH * S * sizeof(float));
            if (fwd) break;
            flash_forward_cuda(a, 0);  // the backward reads the forward's O and logsumexp
            a->dout = buf_randn(r, dt, n, 34);
            a->dq = buf_zero(r, n * es), a->dk = buf_zero(r, n * es), a->dv = buf_zero(r, n * es);
            a->workspace = buf_zero(r, flash_bwd_workspace_bytes(a));
            if (flash_bwd_supports(a, err, sizeof err) != 0) fail("%s: %s", e->name, err);
            break;
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------- output
typedef struct {
    const rl_entry_t* e;
    double ms;
} result_t;

static double peak_of(const peaks_t* pk, rl_roof_t roof) { return roof == RL_ROOF_BF16 ? pk->bf16 : pk->f32; }

static table_t* results_table(const result_t* res, int n, const peaks_t* pk) {
    const char* hdr[] = {"kernel", "shape", "dtype", "roof", "GFLOP", "MB", "FLOP/B", "ms", "TFLOP/s", "GB/s",
                         "bound TFLOP/s", "bound by", "% of bound"};
    table_t* t = table_new("kernels on the roofline (bytes: compulsory traffic; roof: min(peak, FLOP/B x bandwidth))",
                           13, hdr);
    for (int i = 0; i < n; i++) {
        const rl_entry_t* e = res[i].e;
        const double s = res[i].ms * 1e-3, P = peak_of(pk, e->roof), ai = rl_intensity(e->flops, e->bytes);
        table_row(t);
        table_cell(t, "%s", e->name);
        table_cell(t, "%s", e->shape);
        table_cell(t, "%s", dtype_name(e->dt));
        table_cell(t, "%s", rl_roof_name(e->roof));
        table_cell(t, "%.3f", e->flops / 1e9);
        table_cell(t, "%.2f", e->bytes / 1e6);
        table_cell(t, "%.2f", ai);
        table_cell(t, "%.4f", res[i].ms);
        table_cell(t, "%.2f", e->flops / s / 1e12);
        table_cell(t, "%.0f", e->bytes / s / 1e9);
        table_cell(t, "%.2f", rl_roof_flops(P, pk->bw, ai) / 1e12);
        table_cell(t, "%s", ai * pk->bw >= P ? "compute" : "memory");
        table_cell(t, "%.1f", rl_percent_of_bound(e->flops, e->bytes, s, P, pk->bw));
    }
    return t;
}

static table_t* peaks_table(const peaks_t* pk) {
    const char* hdr[] = {"peak", "how", "value"};
    table_t* t = table_new("measured peaks (the roofs)", 3, hdr);
    char how[128];
    snprintf(how, sizeof how, "%.2f GiB copied, read + written", (double)pk->copy_bytes / (1 << 30));
    table_row(t), table_cell(t, "HBM, copy kernel"), table_cell(t, "%s", how), table_cell(t, "%.0f GB/s", pk->bw_copy / 1e9);
    table_row(t), table_cell(t, "HBM, cudaMemcpy D2D"), table_cell(t, "%s", how),
        table_cell(t, "%.0f GB/s", pk->bw_memcpy / 1e9);
    snprintf(how, sizeof how, "best cuBLAS GEMM of %d^3, %d^3, %d^3 (common/matmul)", pk->gemm_n, pk->gemm_n / 2, pk->gemm_n / 4);
    table_row(t), table_cell(t, "fp32, CUDA cores (no TF32)"), table_cell(t, "%s", how),
        table_cell(t, "%.1f TFLOP/s", pk->f32 / 1e12);
    table_row(t), table_cell(t, "bf16, tensor cores"), table_cell(t, "%s", how), table_cell(t, "%.1f TFLOP/s", pk->bf16 / 1e12);
    return t;
}

static void report(FILE* f, const char* gpu, const peaks_t* pk, const table_t* peaks, const table_t* t) {
    fprintf(f, "# Roofline on %s\n\n", gpu);
    fprintf(f, "Median of %d runs after %d warm-up runs (CUDA events, L2 flushed before each run). "
               "Bytes are the compulsory traffic (each input read once, each output written once; scratch not "
               "counted), FLOPs the algorithmic count (04_flashattn_bwd/roofline.h). The memory roof is the "
               "faster copy (%.0f GB/s); the compute roof is the fp32 GEMM peak for CUDA-core kernels and the "
               "bf16 GEMM peak for tensor-core ones (column `roof`). %% of bound = max(FLOP/peak, bytes/bandwidth) "
               "/ time.\n\n",
            g_iters, g_warmup, pk->bw / 1e9);
    table_print_md(peaks, f);
    fputc('\n', f);
    table_print_md(t, f);
}

typedef struct {
    const result_t* res;
    int n;
    const peaks_t* pk;
    char title[512];
} plot_ctx_t;

static void gp_quoted(FILE* gp, const char* s) {  // gnuplot's single quotes: '' is a quote
    fputc('\'', gp);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', gp);
        fputc(*s, gp);
    }
    fputc('\'', gp);
}

static void plot_script(FILE* gp, const char* term, const char* out, void* p) {
    const plot_ctx_t* c = p;
    const peaks_t* pk = c->pk;
    double lo = pk->f32 / pk->bw, hi = pk->bf16 / pk->bw;  // the ridge points stay in view
    for (int i = 0; i < c->n; i++) {
        const double ai = rl_intensity(c->res[i].e->flops, c->res[i].e->bytes);
        if (ai <= 0) continue;
        if (ai < lo) lo = ai;
        if (ai > hi) hi = ai;
    }
    fprintf(gp, "set terminal %s size 1200,800\nset output ", term), gp_quoted(gp, out), fputc('\n', gp);
    fprintf(gp, "set title "), gp_quoted(gp, c->title), fprintf(gp, " noenhanced\n");
    fprintf(gp, "set logscale xy\nset grid xtics ytics mxtics mytics\nset key left top noenhanced\n");
    fprintf(gp, "set xlabel 'arithmetic intensity (FLOP/byte, compulsory traffic)'\n");
    // Room above the bf16 roof for the rotated labels of the kernels near it.
    fprintf(gp, "set ylabel 'TFLOP/s'\nset samples 2000\nset xrange [%g:%g]\nset yrange [*:%g]\n", lo / 3, hi * 3,
            pk->bf16 / 1e12 * 4);
    // The roofs from the measured peaks, in TFLOP/s: min(P, x·W).
    fprintf(gp, "W = %.6g\nPF = %.6g\nPB = %.6g\n", pk->bw / 1e12, pk->f32 / 1e12, pk->bf16 / 1e12);
    fprintf(gp, "roof(x, P) = (x * W < P) ? x * W : P\n");
    // Kernels without arithmetic have no place on a FLOP/s axis: named in a corner instead.
    char zero[512] = "";
    for (int i = 0; i < c->n; i++)
        if (c->res[i].e->flops <= 0 && strlen(zero) + strlen(c->res[i].e->name) + 3 < sizeof zero)
            strcat(strcat(zero, zero[0] ? ", " : ""), c->res[i].e->name);
    if (zero[0]) {
        char lab[600];
        snprintf(lab, sizeof lab, "not plotted (no FLOPs; see the table): %s", zero);
        fprintf(gp, "set label 1 "), gp_quoted(gp, lab), fprintf(gp, " at graph 0.99, graph 0.02 right font ',9' noenhanced\n");
    }
    // One data block per roof, so the points take their roof's colour.
    for (int r = 0; r < 2; r++) {
        fprintf(gp, "$R%d << EOD\n", r);
        for (int i = 0; i < c->n; i++) {
            const rl_entry_t* e = c->res[i].e;
            if ((int)e->roof != r || e->flops <= 0) continue;
            fprintf(gp, "%.6g %.6g \"%s\"\n", rl_intensity(e->flops, e->bytes),
                    e->flops / (c->res[i].ms * 1e-3) / 1e12, e->name);
        }
        fprintf(gp, "EOD\n");
    }
    fprintf(gp, "plot roof(x, PB) with lines lw 2 lc rgb '#e15759' title sprintf('bf16 tensor cores %%.0f TFLOP/s, HBM %%.0f GB/s', PB, W*1000), \\\n");
    fprintf(gp, "     roof(x, PF) with lines lw 2 lc rgb '#4e79a7' title sprintf('fp32 CUDA cores %%.1f TFLOP/s', PF)");
    for (int r = 0; r < 2; r++) {
        int any = 0;
        for (int i = 0; i < c->n; i++) any |= (int)c->res[i].e->roof == r && c->res[i].e->flops > 0;
        if (!any) continue;  // gnuplot refuses to plot an empty block
        const char* col = r ? "#e15759" : "#4e79a7";
        fprintf(gp, ", \\\n     $R%d using 1:2 with points pt 7 ps 1.2 lc rgb '%s' title '%s kernels'", r, col,
                r ? "bf16 tensor-core" : "fp32 / CUDA-core");
        fprintf(gp, ", \\\n     $R%d using 1:2:3 with labels left rotate by 30 offset char 0.6,0.4 font ',8' tc rgb '%s' noenhanced notitle",
                r, col);
    }
    fprintf(gp, "\nset output\n");
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
    const char *out = NULL, *only = NULL, *model = NULL;
    int batch = 0, context = 0, gemm_n = 0, attn_n = 0, attn_d = 0, attn_bh = 0;
    int64_t bw_bytes = 0, ws_rows = 0, ws_d = 0;
    cli_opt_t opts[] = {
        {"out", CLI_STR, &out, "results/roofline", "directory for roofline.csv, roofline.md, roofline.png", NULL},
        {"iters", CLI_INT, &g_iters, "20", "timed runs per kernel (median reported)", NULL},
        {"warmup", CLI_INT, &g_warmup, "3", "untimed runs first", NULL},
        {"only", CLI_STR, &only, "all", "kernels to time (comma list of the names listed above; all: every one)", NULL},
        {"model", CLI_CHOICE, &model, "xl", "model size for the model kernels' shapes", MODEL_SIZE_CHOICES},
        {"batch", CLI_INT, &batch, "4", "batch for the model kernels", NULL},
        {"context", CLI_INT, &context, "512", "context length for the model kernels", NULL},
        {"attn-N", CLI_INT, &attn_n, "4096", "flash attention: sequence length", NULL},
        {"attn-d", CLI_INT, &attn_d, "64", "flash attention: head dim (16, 32, 64, 128)", NULL},
        {"attn-bh", CLI_INT, &attn_bh, "16", "flash attention: batch x heads", NULL},
        {"ws-rows", CLI_SIZE, &ws_rows, "1M", "weighted sum: ROWS", NULL},
        {"ws-d", CLI_SIZE, &ws_d, "1024", "weighted sum: D", NULL},
        {"peak-n", CLI_INT, &gemm_n, "8192", "side of the largest square GEMM that measures the compute peaks (the best of n, n/2, n/4)", NULL},
        {"bw-bytes", CLI_SIZE, &bw_bytes, "1G", "bytes copied to measure the HBM bandwidth", NULL},
    };
    // The kernel names for --help and --only come from the list itself, at the default shapes.
    rl_entry_t ents[RL_MAX_ENTRIES];
    model_config_t mc;
    char names[2048], summary[2600], err[512] = "";
    {
        const rl_shapes_t s0 = {4, 512, 1600, 25, 6400, 10000, 1 << 20, 1024, 16, 4096, 64, 1};
        const int n0 = rl_entries(&s0, ents, RL_MAX_ENTRIES);
        rl_names(ents, n0, names, sizeof names);
        snprintf(summary, sizeof summary,
                 "Every kernel of stages 01-04 on this GPU's roofline: measured peaks (HBM copy, fp32 and bf16 "
                 "GEMM), then FLOPs, compulsory bytes, time, %% of the roof per kernel.\nKernels: %s",
                 names);
    }
    cli_parse(argc, argv, summary, opts, CLI_COUNT(opts));
    // Every flag is checked before the GPU is asked for: a typo is named as such on any machine.
    if (g_iters < 3 || g_warmup < 1) fail("--iters must be >= 3 and --warmup >= 1 (got %d, %d)", g_iters, g_warmup);
    if (batch < 1 || context < 1) fail("--batch and --context must be >= 1 (got %d, %d)", batch, context);
    if (model_config_by_name(model, context, &mc) != 0 || model_config_check(&mc, err, sizeof err) != 0)
        fail("--model %s: %s", model, err);
    if ((double)batch * context > 1 << 20) fail("--batch x --context must be at most 1M rows (got %d x %d)", batch, context);
    if (attn_d != 16 && attn_d != 32 && attn_d != 64 && attn_d != 128)
        fail("--attn-d: head dim %d not supported (allowed: 16, 32, 64, 128)", attn_d);
    if (attn_n < 1 || attn_n > (1 << 20) || attn_bh < 1 || attn_bh > 4096)
        fail("--attn-N must be in 1 .. 1M and --attn-bh in 1 .. 4096 (got %d, %d)", attn_n, attn_bh);
    if (ws_rows < 1 || ws_d < 1 || ws_rows > (1LL << 30) || ws_d > (1 << 20))
        fail("--ws-rows must be in 1 .. 1G and --ws-d in 1 .. 1M (got %lld, %lld)", (long long)ws_rows, (long long)ws_d);
    if (gemm_n < 256 || gemm_n > 32768) fail("--peak-n must be in 256 .. 32768 (got %d)", gemm_n);
    if (bw_bytes < (1 << 20) || bw_bytes % 16) fail("--bw-bytes must be at least 1M and a multiple of 16 (got %lld)", (long long)bw_bytes);
    const rl_shapes_t shp = {batch, context, mc.d_model, mc.n_heads, mc.d_ff, mc.vocab, ws_rows, ws_d,
                             attn_bh, attn_n, attn_d, 1};
    const int nent = rl_entries(&shp, ents, RL_MAX_ENTRIES);
    int want[RL_MAX_ENTRIES];
    if (strcmp(only, "all") == 0) {
        for (int i = 0; i < nent; i++) want[i] = 1;
    } else {
        if (choice_list_check("only", only, names, err, sizeof err) != 0) fail("%s", err);
        for (int i = 0; i < nent; i++) {
            // Whole names of the comma list only (gemm_w2_bf16 must not pick gemm_w2_f32).
            want[i] = 0;
            const size_t L = strlen(ents[i].name);
            for (const char* p = only; *p;) {
                const char* q = strchr(p, ',');
                const size_t m = q ? (size_t)(q - p) : strlen(p);
                if (m == L && strncmp(p, ents[i].name, L) == 0) want[i] = 1;
                p += m + (q ? 1 : 0);
            }
        }
    }
    if (dir_check_writable(out, err, sizeof err) != 0) fail("--out %s: %s", out, err);
    gpu_require("roofline");

    gpu_info_t gi;
    if (gpu_info(0, &gi) != 0) snprintf(gi.name, sizeof gi.name, "unknown GPU");
    mm_handle_t mm;
    if (mm_create(&mm, 0, CUBLAS_WS_BYTES, err, sizeof err) != 0) DIE("cuBLAS handle: %s", err);
    fprintf(stderr, "measuring the peaks (copy of %lld bytes, GEMM %d^3 fp32 and bf16)...\n", (long long)bw_bytes, gemm_n);
    const peaks_t pk = measure_peaks(&mm, gemm_n, (size_t)bw_bytes);
    fprintf(stderr, "  HBM %.0f GB/s (copy kernel %.0f, cudaMemcpy %.0f); fp32 %.1f TFLOP/s; bf16 %.1f TFLOP/s\n",
            pk.bw / 1e9, pk.bw_copy / 1e9, pk.bw_memcpy / 1e9, pk.f32 / 1e12, pk.bf16 / 1e12);

    result_t res[RL_MAX_ENTRIES];
    int nres = 0;
    for (int i = 0; i < nent; i++) {
        if (!want[i]) continue;
        run_t r;
        setup(&r, &ents[i], &mm);
        const double ms = median_ms(run_entry, &r);
        CUDA_CHECK(cudaDeviceSynchronize());  // a fault inside the kernel is named here, not later
        run_free(&r);
        res[nres].e = &ents[i], res[nres].ms = ms;
        nres++;
        fprintf(stderr, "  %-20s %10.4f ms\n", ents[i].name, ms);
    }
    mm_destroy(&mm);

    table_t* pt = peaks_table(&pk);
    table_t* t = results_table(res, nres, &pk);
    report(stdout, gi.name, &pk, pt, t);
    if (mkdir_p(out) != 0) DIE("cannot create %s", out);
    char path[1100];
    snprintf(path, sizeof path, "%s/roofline.csv", out);
    if (table_write_csv(t, path) != 0) DIE("cannot write %s", path);
    snprintf(path, sizeof path, "%s/roofline.md", out);
    FILE* f = afile_open(path);
    if (!f) DIE("cannot write %s", path);
    report(f, gi.name, &pk, pt, t);
    if (afile_commit(f) != 0) DIE("cannot write %s", path);
    plot_ctx_t pc = {res, nres, &pk, ""};
    snprintf(pc.title, sizeof pc.title, "roofline, %s (measured peaks; model kernels at %s batch %d x context %d)",
             gi.name, model, batch, context);
    // The plot's script, data inline, beside the results: the GPU machines here may have no
    // gnuplot, and then the PNG is drawn later anywhere with `cd DIR && gnuplot roofline.gp`.
    snprintf(path, sizeof path, "%s/roofline.gp", out);
    if (!(f = afile_open(path))) DIE("cannot write %s", path);
    fprintf(f, "# The roofline plot of roofline.md: cd to this directory, then gnuplot roofline.gp\n"
               "# (terminal pngcairo; for a gnuplot without cairo, change it to png).\n");
    plot_script(f, "pngcairo", "roofline.png", &pc);
    if (afile_commit(f) != 0) DIE("cannot write %s", path);
    snprintf(path, sizeof path, "%s/roofline.png", out);
    if (gnuplot_png(path, plot_script, &pc, err, sizeof err) != 0)
        printf("\n%s/roofline.{csv,md,gp} written; no PNG: %s (later: cd %s && gnuplot roofline.gp)\n", out, err, out);
    else printf("\n%s/roofline.{csv,md,gp,png} written\n", out);
    table_free(t);
    table_free(pt);
    return 0;
}
