// The host side of the CUDA backward: argument checks, the workspace layout, the launches of the
// kernels that lab04_plan (flash_bwd_dispatch.c) chooses, and the attention_impl_t that
// pairs stage 03's forward with this backward.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/flash_bwd_internal.cuh"
#include "lab/04_flashattn_bwd/rungs.h"
#include "lab/04_flashattn_bwd/rungs.cuh"
#include "common/check.h"

static int g_version = LAB04_DEFAULT_VERSION, g_parts = 3;  // see lab04_set_version / _parts

extern "C" void lab04_set_version(int version) {
    if (version < 1 || version > LAB04_MAX_VERSION)
        DIE("lab04_set_version: %d is not 1 to %d", version, LAB04_MAX_VERSION);
    g_version = version;
}
extern "C" void lab04_set_parts(int parts) {
    if (parts < 1 || parts > 3) DIE("lab04_set_parts: %d is not 1, 2 or 3", parts);
    g_parts = parts;
}

using namespace lab04;

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t d_bytes(const attn_args_t* a) {
    return align_up(sizeof(float) * (size_t)a->B * a->H * a->Nq, 256);
}

extern "C" size_t lab04_workspace_bytes(const attn_args_t* a) {
    return d_bytes(a) + sizeof(float) * (size_t)a->B * a->H * a->Nq * a->d;
}

// lab04_plan (flash_bwd_dispatch.c) with this process's version; the device is asked whether
// the wgmma kernels exist only when the plan could use them.
extern "C" lab04_plan_t lab04_current_plan(const attn_args_t* a, int atomic) {
    const int could_use_wgmma = g_version >= 16 && (a->d == 64 || (a->d == 128 && g_version >= 20)) && flash_bwd_mma_ok(a);
    return lab04_plan(a, g_version, atomic, could_use_wgmma ? (int)rung_wgmma_available() : 0);
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
static void backward_single_pass(const attn_args_t* a, const lab04_plan_t& plan, cudaStream_t stream) {
    BwdParams p = make_params(a);
    p.dq_accum = (float*)((char*)a->workspace + d_bytes(a));
    const size_t accum_bytes = sizeof(float) * (size_t)a->B * a->H * a->Nq * a->d;
    CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, accum_bytes, stream));
    rung_launch_prepass(p, a->dtype, stream);
    switch (plan.path) {
    case LAB04_PATH_TMA:
        bwd_launch_tma(p, stream);  // version 21 (d 64): the kernel, then the cast into dq
        return;
    case LAB04_PATH_WGMMA:
        if (plan.version == 20) {  // d 128 (flash_bwd_fa2.cu's cast has no d 128 instance)
            rung_launch_wgmma(p, plan.version, stream);
            break;
        }
        rung_launch_fa2(p, plan.version, stream);  // d 64: the kernel, then the cast into dq
        return;
    case LAB04_PATH_FA2:
        rung_launch_fa2(p, plan.version, stream);  // the kernel, then the cast into dq
        return;
    case LAB04_PATH_MMA_SINGLE: rung_launch_mma(p, true, plan.version, 3, stream); break;
    case LAB04_PATH_SIMT: rung_launch_simt(p, a->dtype, true, stream); break;
    default: DIE("backward_single_pass: plan %d is not a single pass", (int)plan.path);
    }
    rung_launch_dq_convert(p, a->dtype, stream);  // fp32 accumulator -> dq (its dtype, strides)
}

extern "C" void lab04_backward(const attn_args_t* a, cudaStream_t stream) {
    check_args(a, "lab04_backward");
    const lab04_plan_t plan = lab04_current_plan(a, 0);
    if (plan.single_pass) {  // versions 6-21 on bf16, d <= 64, and 20, 21 at d 128 (sm_90a): one pass
        backward_single_pass(a, plan, stream);
        return;
    }
    BwdParams p = make_params(a);
    rung_launch_prepass(p, a->dtype, stream);  // D = rowsum(dO o O)
    if (plan.path == LAB04_PATH_MMA_TWO_PASS) rung_launch_mma(p, false, plan.version, g_parts, stream);
    else rung_launch_simt(p, a->dtype, false, stream);
}

extern "C" void lab04_backward_atomic(const attn_args_t* a, cudaStream_t stream) {
    check_args(a, "lab04_backward_atomic");
    backward_single_pass(a, lab04_current_plan(a, 1), stream);
}

