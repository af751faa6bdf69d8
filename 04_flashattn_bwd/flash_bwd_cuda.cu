// The host side of the CUDA backward: argument checks, the workspace layout, the launch of each
// row of the dispatch table (flash_bwd_dispatch.c chooses the row), and the attention_impl_t
// that pairs stage 03's forward with this backward.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "03_flashattn_fwd/flash_fwd.h"
#include "common/check.h"

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t d_bytes(const attn_args_t* a) {
    return align_up(sizeof(float) * (size_t)a->B * a->H * a->Nq, 256);
}

// D, then the fp32 dQ accumulator of the single-pass rows ([B, H, Nq, d], d 128 included).
extern "C" size_t flash_bwd_workspace_bytes(const attn_args_t* a) {
    return d_bytes(a) + sizeof(float) * (size_t)a->B * a->H * a->Nq * a->d;
}

// Shape checks always; pointer checks only when the call is about to run (the model may ask
// whether sizes are supported before it has allocated the gradients).
static int bwd_check(const attn_args_t* a, char* err, size_t errlen, int check_ptrs) {
#define REJECT(...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
    if (!a) REJECT("no arguments");
    if (a->dtype != DT_F32 && a->dtype != DT_BF16)
        REJECT("dtype %s is not supported (f32 or bf16)", dtype_name(a->dtype));
    if (a->d < 1 || a->d > 128) REJECT("head dim %d is not supported (1 to 128)", a->d);
    if (a->B < 1 || a->H < 1 || a->Nq < 1 || a->Nk < 1)
        REJECT("sizes must be positive (B %d, H %d, Nq %d, Nk %d)", a->B, a->H, a->Nq, a->Nk);
    if (check_ptrs && (!a->q || !a->k || !a->v || !a->o || !a->dout || !a->lse || !a->dq || !a->dk || !a->dv))
        REJECT("a tensor pointer is NULL (q, k, v, o, dout, lse, dq, dk, dv are all needed)");
    if (!(a->scale > 0.0f) || !isfinite(a->scale)) REJECT("scale must be positive and finite (got %g)", (double)a->scale);
    // Tiles of 32 rows go in gridDim.y (at most 65535).
    if ((a->Nq + 31) / 32 > 65535 || (a->Nk + 31) / 32 > 65535)
        REJECT("sequence too long (Nq %d, Nk %d; at most %d)", a->Nq, a->Nk, 65535 * 32);
    const int64_t* strides[] = {a->sq, a->sk, a->sv, a->so, a->sdo, a->sdq, a->sdk, a->sdv};
    for (int i = 0; i < 8; i++) {
        if (strides[i][0] < 0 || strides[i][1] < 0) REJECT("strides must be non-negative");
        if (strides[i][2] < a->d) REJECT("a row stride (%lld) is smaller than the head dim %d",
                                         (long long)strides[i][2], a->d);
    }
    return 0;
#undef REJECT
}

extern "C" int flash_bwd_supports(const attn_args_t* a, char* err, size_t errlen) {
    return bwd_check(a, err, errlen, 1);
}

extern "C" flash_bwd_build_t flash_bwd_this_build(void) {
    flash_bwd_build_t b = {bwd_wgmma_available() ? 1 : 0};
    return b;
}

extern "C" const char* flash_bwd_kernel_name(const attn_args_t* a) {
    const flash_bwd_build_t b = flash_bwd_this_build();
    return flash_bwd_choose(a, &b)->name;
}

static BwdParams make_params(const attn_args_t* a) {
    BwdParams p;
    memset(&p, 0, sizeof p);
    p.B = a->B; p.H = a->H; p.Nq = a->Nq; p.Nk = a->Nk; p.d = a->d;
    p.causal = a->causal ? 1 : 0;
    p.scale = a->scale;
    p.q = a->q; p.k = a->k; p.v = a->v; p.o = a->o; p.dout = a->dout;
    p.dq = a->dq; p.dk = a->dk; p.dv = a->dv;
    memcpy(p.sq, a->sq, sizeof p.sq);   memcpy(p.sk, a->sk, sizeof p.sk);
    memcpy(p.sv, a->sv, sizeof p.sv);   memcpy(p.so, a->so, sizeof p.so);
    memcpy(p.sdo, a->sdo, sizeof p.sdo); memcpy(p.sdq, a->sdq, sizeof p.sdq);
    memcpy(p.sdk, a->sdk, sizeof p.sdk); memcpy(p.sdv, a->sdv, sizeof p.sdv);
    p.lse = a->lse;
    p.D = (float*)a->workspace;
    p.dq_accum = NULL;
    return p;
}

static void check_args(const attn_args_t* a, const char* who) {
    char err[256];
    if (flash_bwd_supports(a, err, sizeof err) != 0) fail("%s: %s", who, err);
    if (!a->workspace) fail("%s: workspace is NULL (allocate the bytes the workspace function returns)", who);
}

// The single-pass rows: the fp32 dQ accumulator zeroed and the D pre-pass; the caller launches
// its kernel; then single_pass_end casts the accumulator into dq.
static BwdParams single_pass_begin(const attn_args_t* a, cudaStream_t stream) {
    BwdParams p = make_params(a);
    p.dq_accum = (float*)((char*)a->workspace + d_bytes(a));
    CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, sizeof(float) * (size_t)a->B * a->H * a->Nq * a->d, stream));
    bwd_launch_prepass(p, a->dtype, stream);
    return p;
}

extern "C" void flash_bwd_launch_fa3(const attn_args_t* a, cudaStream_t stream) {
    const BwdParams p = single_pass_begin(a, stream);
    bwd_launch_tma(p, stream);  // the kernel, then the cast
}
extern "C" void flash_bwd_launch_wgmma(const attn_args_t* a, cudaStream_t stream) {
    const BwdParams p = single_pass_begin(a, stream);
    bwd_launch_wgmma(p, stream);
    bwd_launch_dq_cast(p, a->dtype, stream);
}
extern "C" void flash_bwd_launch_mma(const attn_args_t* a, cudaStream_t stream) {
    const BwdParams p = single_pass_begin(a, stream);
    bwd_launch_mma(p, stream);
    bwd_launch_dq_cast(p, a->dtype, stream);
}
extern "C" void flash_bwd_launch_mma_two_pass(const attn_args_t* a, cudaStream_t stream) {
    const BwdParams p = make_params(a);
    bwd_launch_prepass(p, a->dtype, stream);  // D = rowsum(dO o O)
    bwd_launch_mma_two_pass(p, stream);
}
extern "C" void flash_bwd_launch_simt(const attn_args_t* a, cudaStream_t stream) {
    const BwdParams p = make_params(a);
    bwd_launch_prepass(p, a->dtype, stream);
    bwd_launch_simt(p, a->dtype, stream);
}

extern "C" void flash_backward_cuda(const attn_args_t* a, cudaStream_t stream) {
    check_args(a, "flash_backward_cuda");
    // The GPU is asked whether the sm_90a kernels exist only when a row could use them.
    flash_bwd_build_t b = {0};
    if (flash_bwd_mma_ok(a) && (a->d == 64 || a->d == 128)) b = flash_bwd_this_build();
    flash_bwd_choose(a, &b)->launch(a, stream);
}

// The table the model takes: the forward must take *a too.
static int flash_supports_both(const attn_args_t* a, char* err, size_t errlen) {
    if (flash_fwd_supports(a, err, errlen) != 0) return -1;
    return bwd_check(a, err, errlen, 0);
}

extern "C" const attention_impl_t* flash_attention_impl(void) {
    static const attention_impl_t impl = {"flash2", flash_supports_both, flash_forward_cuda,
                                          flash_backward_cuda, flash_bwd_workspace_bytes};
    return &impl;
}
