// demo: stage 03 in a few seconds. A small causal attention (B 1, H 4, N 333, d 64) through
// every implementation of the stage, each checked against the CPU naive reference:
// the tiled CPU reference always, and on a GPU the CUDA kernel in fp32 and bf16.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/gpu.h"
#include "common/rng.h"
#include "common/table.h"
#include "common/timer.h"
#include "03_flashattn_fwd/flash_fwd.h"

static double max_err(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}

// The CUDA kernel on contiguous host inputs (rounded to bf16 on the way in if dt is bf16).
static double run_gpu(dtype_t dt, const float* q, const float* k, const float* v, float* o, float* l, int H, int N,
                      int d) {
    const size_t n = (size_t)H * N * d, es = dtype_size(dt);
    void* st = malloc(n * es);
    void *dq = mem_alloc(DEV_CUDA, n * es, MEM_OTHER), *dk = mem_alloc(DEV_CUDA, n * es, MEM_OTHER);
    void *dv = mem_alloc(DEV_CUDA, n * es, MEM_OTHER), *dO = mem_alloc(DEV_CUDA, n * es, MEM_OTHER);
    float* dL = mem_alloc(DEV_CUDA, (size_t)H * N * 4, MEM_OTHER);
    const float* src[3] = {q, k, v};
    void* dst[3] = {dq, dk, dv};
    for (int i = 0; i < 3; i++) {
        if (dt == DT_BF16)
            bf16_from_f32_array(st, src[i], n);
        else
            memcpy(st, src[i], n * 4);
        CUDA_CHECK(cudaMemcpy(dst[i], st, n * es, cudaMemcpyHostToDevice));
    }
    attn_args_t a = {0};
    a.B = 1, a.H = H, a.Nq = a.Nk = N, a.d = d, a.dtype = dt, a.causal = 1, a.scale = 1.0f / sqrtf((float)d);
    a.q = dq, a.k = dk, a.v = dv, a.o = dO, a.lse = dL;
    attn_contiguous_strides(a.sq, H, N, d);
    memcpy(a.sk, a.sq, sizeof a.sq), memcpy(a.sv, a.sq, sizeof a.sq), memcpy(a.so, a.sq, sizeof a.sq);
    flash_forward_cuda(&a, 0);  // warm-up
    gpu_timer_t t;
    gpu_timer_init(&t);
    gpu_timer_start(&t, 0);
    flash_forward_cuda(&a, 0);
    const double ms = gpu_timer_stop_ms(&t);
    gpu_timer_destroy(&t);
    CUDA_CHECK(cudaMemcpy(st, dO, n * es, cudaMemcpyDeviceToHost));
    if (dt == DT_BF16)
        f32_from_bf16_array(o, st, n);
    else
        memcpy(o, st, n * 4);
    CUDA_CHECK(cudaMemcpy(l, dL, (size_t)H * N * 4, cudaMemcpyDeviceToHost));
    mem_free(dq), mem_free(dk), mem_free(dv), mem_free(dO), mem_free(dL), free(st);
    return ms;
}

int main(int argc, char** argv) {
    int H = 0, N = 0, d = 0;
    cli_opt_t opts[] = {
        {"H", CLI_INT, &H, "4", "heads (batch is 1)", NULL},
        {"N", CLI_INT, &N, "333", "sequence length (queries = keys)", NULL},
        {"d", CLI_INT, &d, "64", "head dim: 16, 32, 64 or 128", NULL},
    };
    cli_parse(argc, argv, "Stage 03 demo: causal attention through the references and the CUDA kernel.", opts,
              CLI_COUNT(opts));
    if (H < 1 || N < 1) fail("--H and --N must be >= 1");
    if (d != 16 && d != 32 && d != 64 && d != 128) fail("--d: head dim %d not supported (allowed: 16, 32, 64, 128)", d);
    const size_t n = (size_t)H * N * d, nl = (size_t)H * N;
    {
        // Sizes that cannot fit are bad input (they were a crash on an unchecked malloc): q, k, v,
        // two O and two L on the host; on a GPU q, k, v, O, L once more.
        char err[256];
        const double elems = (double)H * N * d, rows = (double)H * N;
        if (!mem_fits(DEV_CPU, 4.0 * (5.0 * elems + 2.0 * rows), err, sizeof err) ||
            (gpu_count() > 0 && !mem_fits(DEV_CUDA, 4.0 * (4.0 * elems + rows), err, sizeof err)))
            fail("--H %d --N %d --d %d: %s", H, N, d, err);
    }
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o_ref = malloc(n * 4), *l_ref = malloc(nl * 4);
    float *o = malloc(n * 4), *l = malloc(nl * 4);
    if (!q || !k || !v || !o_ref || !l_ref || !o || !l) DIE("out of host memory for --H %d --N %d --d %d", H, N, d);
    rng_t r = rng_make(3);
    rng_fill_normal(&r, q, n, 0.0f, 1.0f);
    rng_fill_normal(&r, k, n, 0.0f, 1.0f);
    rng_fill_normal(&r, v, n, 0.0f, 1.0f);
    const float scale = 1.0f / sqrtf((float)d);

    printf("causal attention, B 1, H %d, N %d, d %d; errors against the CPU naive reference (double sums)\n", H, N, d);
    const char* hdr[] = {"implementation", "where", "ms", "max |O err|", "max |L err|"};
    table_t* t = table_new("stage 03 demo", 5, hdr);
    double t0 = time_now_s();
    attn_naive_forward_cpu(q, k, v, o_ref, l_ref, H, N, N, d, 1, scale);
    const double naive_ms = (time_now_s() - t0) * 1e3;
    table_row(t), table_cell(t, "naive (S, P materialised)"), table_cell(t, "CPU"), table_cell(t, "%.2f", naive_ms);
    table_cell(t, "0"), table_cell(t, "0");

    t0 = time_now_s();
    flash_forward_cpu(q, k, v, o, l, H, N, N, d, 1, scale, 64, 64);
    const double tiled_ms = (time_now_s() - t0) * 1e3;
    table_row(t), table_cell(t, "FlashAttention-2 tiled, Bq = Bk = 64"), table_cell(t, "CPU");
    table_cell(t, "%.2f", tiled_ms), table_cell(t, "%.2e", max_err(o, o_ref, n)), table_cell(t, "%.2e", max_err(l, l_ref, nl));

    if (gpu_count() > 0) {
        for (int pass = 0; pass < 2; pass++) {
            const dtype_t dt = pass ? DT_BF16 : DT_F32;
            // bf16: the reference for the error column uses the same rounded inputs
            float *qq = q, *kk = k, *vv = v, *ro = o_ref, *rl = l_ref;
            if (dt == DT_BF16) {
                qq = malloc(n * 4), kk = malloc(n * 4), vv = malloc(n * 4), ro = malloc(n * 4), rl = malloc(nl * 4);
                for (size_t i = 0; i < n; i++) {
                    qq[i] = f32_from_bf16(bf16_from_f32(q[i]));
                    kk[i] = f32_from_bf16(bf16_from_f32(k[i]));
                    vv[i] = f32_from_bf16(bf16_from_f32(v[i]));
                }
                attn_naive_forward_cpu(qq, kk, vv, ro, rl, H, N, N, d, 1, scale);
            }
            const double ms = run_gpu(dt, qq, kk, vv, o, l, H, N, d);
            table_row(t);
            table_cell(t, "FlashAttention-2 kernel, %s", dt == DT_BF16 ? "bf16 (mma.sync)" : "fp32");
            table_cell(t, "GPU");
            table_cell(t, "%.3f", ms);
            table_cell(t, "%.2e", max_err(o, ro, n));
            table_cell(t, "%.2e", max_err(l, rl, nl));
            if (dt == DT_BF16) free(qq), free(kk), free(vv), free(ro), free(rl);
        }
    } else {
        printf("(no GPU: %s; the CUDA kernel rows are left out)\n", gpu_absent_reason());
    }
    table_print_md(t, stdout);
    table_free(t);
    free(q), free(k), free(v), free(o_ref), free(l_ref), free(o), free(l);
    return 0;
}
