// fa_fwd_bwd_gpu: stage 03's forward and this stage's backward on host arrays (see the header).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/stats.h"
#include "common/timer.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/flash_bwd_host.h"

static void* to_device(const float* x, size_t n, dtype_t dt) {
    const size_t es = dtype_size(dt);
    void* d = mem_alloc(DEV_CUDA, n * es, MEM_OTHER);
    if (dt == DT_BF16) {
        uint16_t* h = malloc(n * es + 1);
        if (!h) DIE("out of host memory");
        bf16_from_f32_array(h, x, n);
        CUDA_CHECK(cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice));
        free(h);
    } else {
        CUDA_CHECK(cudaMemcpy(d, x, n * es, cudaMemcpyHostToDevice));
    }
    return d;
}

static void to_host(float* x, const void* d, size_t n, dtype_t dt) {
    if (dt == DT_BF16) {
        uint16_t* h = malloc(n * 2 + 1);
        if (!h) DIE("out of host memory");
        CUDA_CHECK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
        f32_from_bf16_array(x, h, n);
        free(h);
    } else {
        CUDA_CHECK(cudaMemcpy(x, d, n * 4, cudaMemcpyDeviceToHost));
    }
}

void fa_fwd_bwd_gpu(const float* q, const float* k, const float* v, const float* dout, float* o, float* lse,
                    float* dq, float* dk, float* dv, int B, int H, int Nq, int Nk, int d, int causal,
                    float scale, dtype_t dt, int reps, fa_timing_t* timing) {
    const size_t nq = (size_t)B * H * Nq * d, nk = (size_t)B * H * Nk * d, nl = (size_t)B * H * Nq;
    const size_t es = dtype_size(dt);
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = B; a.H = H; a.Nq = Nq; a.Nk = Nk; a.d = d; a.dtype = dt; a.causal = causal; a.scale = scale;
    attn_contiguous_strides(a.sq, H, Nq, d);
    attn_contiguous_strides(a.sk, H, Nk, d);
    memcpy(a.sv, a.sk, sizeof a.sk); memcpy(a.so, a.sq, sizeof a.sq); memcpy(a.sdo, a.sq, sizeof a.sq);
    memcpy(a.sdq, a.sq, sizeof a.sq); memcpy(a.sdk, a.sk, sizeof a.sk); memcpy(a.sdv, a.sk, sizeof a.sk);
    a.q = to_device(q, nq, dt);
    a.k = to_device(k, nk, dt);
    a.v = to_device(v, nk, dt);
    a.dout = to_device(dout, nq, dt);
    a.o = mem_alloc(DEV_CUDA, nq * es, MEM_ACTS);
    a.lse = mem_alloc(DEV_CUDA, nl * sizeof(float), MEM_ACTS);
    a.dq = mem_alloc(DEV_CUDA, nq * es, MEM_GRADS);
    a.dk = mem_alloc(DEV_CUDA, nk * es, MEM_GRADS);
    a.dv = mem_alloc(DEV_CUDA, nk * es, MEM_GRADS);
    const size_t ws = flash_bwd_workspace_bytes(&a);
    a.workspace = mem_alloc(DEV_CUDA, ws, MEM_WORKSPACE);
    char err[256];
    if (flash_fwd_supports(&a, err, sizeof err) != 0) fail("%s", err);
    if (flash_bwd_supports(&a, err, sizeof err) != 0) fail("%s", err);

    if (reps < 1) reps = 1;
    double* tf = malloc(sizeof(double) * (size_t)reps);
    double* tb = malloc(sizeof(double) * (size_t)reps);
    if (!tf || !tb) DIE("out of host memory");
    gpu_timer_t t;
    gpu_timer_init(&t);
    for (int r = 0; r < reps; r++) {
        gpu_timer_start(&t, 0);
        flash_forward_cuda(&a, 0);
        tf[r] = gpu_timer_stop_ms(&t);
        gpu_timer_start(&t, 0);
        flash_backward_cuda(&a, 0);
        tb[r] = gpu_timer_stop_ms(&t);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    gpu_timer_destroy(&t);
    if (timing) {
        timing->fwd_ms = stats_compute(tf, reps).median;
        timing->bwd_ms = stats_compute(tb, reps).median;
        timing->kernel = flash_bwd_kernel_name(&a);
        const flash_bwd_build_t b = flash_bwd_this_build();
        const flash_bwd_row_t* row = flash_bwd_choose(&a, &b);
        snprintf(timing->plan, sizeof timing->plan, "%s %s (%s)", row->name,
                 row->single_pass ? "single pass" : "two passes", row->file);
    }
    free(tf);
    free(tb);
    if (o) to_host(o, a.o, nq, dt);
    if (lse) CUDA_CHECK(cudaMemcpy(lse, a.lse, nl * sizeof(float), cudaMemcpyDeviceToHost));
    to_host(dq, a.dq, nq, dt);
    to_host(dk, a.dk, nk, dt);
    to_host(dv, a.dv, nk, dt);
    mem_free((void*)a.q); mem_free((void*)a.k); mem_free((void*)a.v); mem_free((void*)a.dout);
    mem_free(a.o); mem_free(a.lse); mem_free(a.dq); mem_free(a.dk); mem_free(a.dv); mem_free(a.workspace);
}
