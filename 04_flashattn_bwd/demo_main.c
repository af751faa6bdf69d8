// demo (make run): a small causal attention forward + backward, checked against the CPU naive
// reference. On a GPU: our kernels (bf16 and fp32); without
// one: the tiled Algorithm 2 reference on the CPU. A few seconds either way.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/gpu.h"
#include "common/rng.h"
#include "common/table.h"
#include "common/timer.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/flash_bwd_host.h"

// max |got - want| / max |want|
static double rel_err(const float* got, const float* want, size_t n) {
    double e = 0.0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        const double x = fabs((double)got[i] - want[i]);
        if (!(x <= e)) e = x;
        m = fmax(m, fabs((double)want[i]));
    }
    return e / m;
}

static float* alloc_f(size_t n) {
    float* p = malloc(n * sizeof(float) + 1);
    if (!p) DIE("out of host memory");
    return p;
}

int main(int argc, char** argv) {
    int H = 0, N = 0;
    cli_opt_t opts[] = {
        {"H", CLI_INT, &H, "2", "heads (batch is 1, head dim 64, causal)", NULL},
        {"N", CLI_INT, &N, "0", "sequence length; 0: 512 on a GPU, 128 on the CPU", NULL},
    };
    cli_parse(argc, argv,
              "Stage 04 demo: attention forward + backward, checked against the CPU naive reference.", opts,
              CLI_COUNT(opts));
    const int on_gpu = gpu_count() > 0;
    if (H < 1 || N < 0) fail("--H must be >= 1 and --N >= 0 (0: the default), got %d and %d", H, N);
    if (N == 0) N = on_gpu ? 512 : 128;
    const int B = 1, d = 64, causal = 1;
    {
        // Sizes that cannot fit are bad input: 18 (BH, N, d) fp32 arrays on the host at most.
        char err[256];
        if (!mem_fits(DEV_CPU, 18.0 * 4.0 * B * H * (double)N * d, err, sizeof err) ||
            (on_gpu && !mem_fits(DEV_CUDA, 12.0 * 4.0 * B * H * (double)N * d, err, sizeof err)))
            fail("--H %d --N %d: %s", H, N, err);
    }
    const int BH = B * H;
    const size_t n = (size_t)BH * N * d, nl = (size_t)BH * N;
    const float scale = 1.0f / sqrtf((float)d);
    printf("stage 04 demo: attention forward + backward, B %d, H %d, N %d, d %d, causal, on the %s\n", B, H, N, d,
           on_gpu ? "GPU" : "CPU (no GPU here)");
    float *q = alloc_f(n), *k = alloc_f(n), *v = alloc_f(n), *dO = alloc_f(n);
    rng_t r = rng_make(4);
    rng_fill_normal(&r, q, n, 0.0f, 1.0f);
    rng_fill_normal(&r, k, n, 0.0f, 1.0f);
    rng_fill_normal(&r, v, n, 0.0f, 1.0f);
    rng_fill_normal(&r, dO, n, 0.0f, 1.0f);
    // Round once to bf16 so that the fp32 and bf16 runs and the reference see the same inputs.
    float* xs[4] = {q, k, v, dO};
    for (int x = 0; x < 4; x++)
        for (size_t i = 0; i < n; i++) xs[x][i] = f32_from_bf16(bf16_from_f32(xs[x][i]));
    float *O = alloc_f(n), *L = alloc_f(nl), *rq = alloc_f(n), *rk = alloc_f(n), *rv = alloc_f(n);
    attn_naive_forward_cpu(q, k, v, O, L, BH, N, N, d, causal, scale);
    attn_naive_backward_cpu(q, k, v, O, dO, L, rq, rk, rv, BH, N, N, d, causal, scale);

    const char* hdr[] = {"implementation", "dtype", "fwd ms", "bwd ms", "dQ err", "dK err", "dV err"};
    table_t* t = table_new("errors are max |ours - naive| / max |naive|", 7, hdr);
    float *gq = alloc_f(n), *gk = alloc_f(n), *gv = alloc_f(n), *go = alloc_f(n), *gl = alloc_f(nl);
    int bad = 0;
    if (on_gpu) {
        for (int pass = 0; pass < 2; pass++) {
            const dtype_t dt = pass == 0 ? DT_BF16 : DT_F32;
            fa_timing_t tm;
            fa_fwd_bwd_gpu(q, k, v, dO, go, gl, gq, gk, gv, B, H, N, N, d, causal, scale, dt, 5, &tm);
            const double e[3] = {rel_err(gq, rq, n), rel_err(gk, rk, n), rel_err(gv, rv, n)};
            for (int x = 0; x < 3; x++) bad |= !(e[x] < (dt == DT_BF16 ? 3e-2 : 1e-3));
            table_row(t);
            // The dispatch's name of what ran: the row of its table.
            table_cell(t, "flash_backward_cuda: %s", tm.plan);
            table_cell(t, "%s", dtype_name(dt));
            table_cell(t, "%.3f", tm.fwd_ms);
            table_cell(t, "%.3f", tm.bwd_ms);
            for (int x = 0; x < 3; x++) table_cell(t, "%.1e", e[x]);
        }
    } else {
        const double t0 = time_now_s();
        flash_forward_cpu(q, k, v, go, gl, BH, N, N, d, causal, scale, 32, 32);
        const double t1 = time_now_s();
        flash_backward_cpu(q, k, v, go, dO, gl, gq, gk, gv, BH, N, N, d, causal, scale, 32, 32);
        const double t2 = time_now_s();
        const double e[3] = {rel_err(gq, rq, n), rel_err(gk, rk, n), rel_err(gv, rv, n)};
        for (int x = 0; x < 3; x++) bad |= !(e[x] < 1e-4);
        table_row(t);
        table_cell(t, "tiled Algorithm 2, CPU, Bq = Bk = 32");
        table_cell(t, "f32");
        table_cell(t, "%.3f", (t1 - t0) * 1e3);
        table_cell(t, "%.3f", (t2 - t1) * 1e3);
        for (int x = 0; x < 3; x++) table_cell(t, "%.1e", e[x]);
    }
    table_print_md(t, stdout);
    table_free(t);
    printf("%s\n", bad ? "FAILED: an error is above its tolerance (bf16 3e-2, fp32 1e-3, CPU 1e-4)" : "all within tolerance");
    free(q); free(k); free(v); free(dO); free(O); free(L); free(rq); free(rk); free(rv);
    free(gq); free(gk); free(gv); free(go); free(gl);
    return bad ? 1 : 0;
}
