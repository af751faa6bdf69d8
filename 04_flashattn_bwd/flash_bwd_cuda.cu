// The host side of the CUDA backward: argument checks, the workspace layout, the launches of the
// kernels that flash_bwd_plan (flash_bwd_dispatch.c) chooses, and the attention_impl_t that
// pairs stage 03's forward with this backward.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "03_flashattn_fwd/flash_fwd.h"
#include "common/check.h"

static int g_version = FLASH_BWD_DEFAULT_VERSION, g_parts = 3;  // see flash_bwd_set_version / _parts

extern "C" void flash_bwd_set_version(int version) {
    if (version < 1 || version > FLASH_BWD_MAX_VERSION)
        DIE("flash_bwd_set_version: %d is not 1 to %d", version, FLASH_BWD_MAX_VERSION);
    g_version = version;
}
extern "C" void flash_bwd_set_parts(int parts) {
    if (parts < 1 || parts > 3) DIE("flash_bwd_set_parts: %d is not 1, 2 or 3", parts);
    g_parts = parts;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t d_bytes(const attn_args_t* a) {
    return align_up(sizeof(float) * (size_t)a->B * a->H * a->Nq, 256);
}

extern "C" size_t flash_bwd_atomic_workspace_bytes(const attn_args_t* a) {
    return d_bytes(a) + sizeof(float) * (size_t)a->B * a->H * a->Nq * a->d;
}

// Versions 6-21 make flash_backward_cuda itself single-pass (20 and 21 at d 128 too), and the version
// is a process-wide switch that may change after the caller allocated: always room for the
// accumulator ([B, H, Nq, d] fp32, d 128 included).
extern "C" size_t flash_bwd_workspace_bytes(const attn_args_t* a) { return flash_bwd_atomic_workspace_bytes(a); }

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

extern "C" const char* flash_bwd_kernel_name(const attn_args_t* a) { return flash_bwd_mma_ok(a) ? "mma-bf16" : "simt"; }

// flash_bwd_plan (flash_bwd_dispatch.c) with this process's version; the device is asked whether
// the wgmma kernels exist only when the plan could use them.
extern "C" flash_bwd_plan_t flash_bwd_current_plan(const attn_args_t* a, int atomic) {
    const int could_use_wgmma = g_version >= 16 && (a->d == 64 || (a->d == 128 && g_version >= 20)) && flash_bwd_mma_ok(a);
    return flash_bwd_plan(a, g_version, atomic, could_use_wgmma ? (int)bwd_wgmma_available() : 0);
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

// The single pass: the fp32 dQ accumulator zeroed, the D pre-pass, the kernel the plan names,
// the cast of the accumulator into dq.
static void backward_single_pass(const attn_args_t* a, const flash_bwd_plan_t& plan, cudaStream_t stream) {
    BwdParams p = make_params(a);
    p.dq_accum = (float*)((char*)a->workspace + d_bytes(a));
    const size_t accum_bytes = sizeof(float) * (size_t)a->B * a->H * a->Nq * a->d;
    CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, accum_bytes, stream));
    bwd_launch_prepass(p, a->dtype, stream);
    switch (plan.path) {
    case FLASH_BWD_PATH_TMA:
        bwd_launch_tma(p, stream);  // version 21 (d 64): the kernel, then the cast into dq
        return;
    case FLASH_BWD_PATH_WGMMA:
        if (plan.version == 20) {  // d 128 (flash_bwd_fa2.cu's cast has no d 128 instance)
            bwd_launch_wgmma(p, plan.version, stream);
            break;
        }
        bwd_launch_fa2(p, plan.version, stream);  // d 64: the kernel, then the cast into dq
        return;
    case FLASH_BWD_PATH_FA2:
        bwd_launch_fa2(p, plan.version, stream);  // the kernel, then the cast into dq
        return;
    case FLASH_BWD_PATH_MMA_SINGLE: bwd_launch_mma(p, true, plan.version, 3, stream); break;
    case FLASH_BWD_PATH_SIMT: bwd_launch_simt(p, a->dtype, true, stream); break;
    default: DIE("backward_single_pass: plan %d is not a single pass", (int)plan.path);
    }
    bwd_launch_dq_convert(p, a->dtype, stream);  // fp32 accumulator -> dq (its dtype, strides)
}

extern "C" void flash_backward_cuda(const attn_args_t* a, cudaStream_t stream) {
    check_args(a, "flash_backward_cuda");
    const flash_bwd_plan_t plan = flash_bwd_current_plan(a, 0);
    if (plan.single_pass) {  // versions 6-21 on bf16, d <= 64, and 20, 21 at d 128 (sm_90a): one pass
        backward_single_pass(a, plan, stream);
        return;
    }
    BwdParams p = make_params(a);
    bwd_launch_prepass(p, a->dtype, stream);  // D = rowsum(dO o O)
    if (plan.path == FLASH_BWD_PATH_MMA_TWO_PASS) bwd_launch_mma(p, false, plan.version, g_parts, stream);
    else bwd_launch_simt(p, a->dtype, false, stream);
}

extern "C" void flash_backward_atomic_cuda(const attn_args_t* a, cudaStream_t stream) {
    check_args(a, "flash_backward_atomic_cuda");
    backward_single_pass(a, flash_bwd_current_plan(a, 1), stream);
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
