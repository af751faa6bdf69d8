// The rungs on the GPU: every rung of the ladder (lab04_set_version 1-21), through both entry
// points (two-pass / single pass, and the atomic single pass), against PyTorch's gradients and
// the CPU reference on random shapes (ragged, Nq != Nk, every head dim, bf16 and fp32, causal and
// not, strided views); the run-to-run tests of the single passes (dQ by reductions in any order).
// Run: build/lab/04_flashattn_bwd/test_lab04 --filter 'rungs/*'   (GPU tests skip without one)
#include <cuda_runtime_api.h>
#include "common/alloc.h"
#include "common/check.h"
#include "04_flashattn_bwd/test_bwd_util.h"
#include "lab/04_flashattn_bwd/rungs.h"

typedef struct {
    int B, H, Nq, Nk, d, causal;
    dtype_t dt;
    int atomic;   // 0: lab04_backward, 1: lab04_backward_atomic
    int pad;      // extra elements per row: views as (B, N, H, d + pad), like a fused projection
} bwd_case_t;
// 1: K and V shared by the heads of a batch (head stride 0), a view TMA cannot describe; set by
// the one test that wants it (every Criterion test is its own process).
static int g_kv_bcast = 0;

// Strides of a (B, H, N, d) view stored as (B, N, H, d + pad) when pad >= 0 (pad = 0 and
// layout_bnhd = 0: plain contiguous [B, H, N, d]).
static void case_strides(const bwd_case_t* c, int N, int64_t s[3]) {
    if (c->pad == 0) {
        attn_contiguous_strides(s, c->H, N, c->d);
        return;
    }
    const int64_t row = (int64_t)c->d + c->pad;
    s[0] = (int64_t)N * c->H * row;
    s[1] = row;
    s[2] = (int64_t)c->H * row;
}

static size_t view_elems(const bwd_case_t* c, int N, const int64_t s[3]) {
    return (size_t)((c->B - 1) * s[0] + (c->H - 1) * s[1] + (int64_t)(N - 1) * s[2] + c->d);
}

// Host contiguous fp32 [B*H, N, d] -> a new device view of dtype c->dt with strides s.
static void* upload(const bwd_case_t* c, const float* x, int N, const int64_t s[3]) {
    const size_t n = view_elems(c, N, s), es = dtype_size(c->dt);
    unsigned char* h = malloc(n * es);
    cr_assert(h);
    memset(h, 0xFF, n * es);  // gaps hold NaN: reading one would poison the result
    for (int bh = 0; bh < c->B * c->H; bh++)
        for (int r = 0; r < N; r++)
            for (int e = 0; e < c->d; e++) {
                const size_t off = (size_t)((bh / c->H) * s[0] + (bh % c->H) * s[1] + (int64_t)r * s[2] + e);
                const float v = x[((size_t)bh * N + r) * c->d + e];
                if (c->dt == DT_BF16) ((uint16_t*)h)[off] = bf16_from_f32(v);
                else ((float*)h)[off] = v;
            }
    void* dptr = mem_alloc(DEV_CUDA, n * es, MEM_OTHER);
    CUDA_CHECK(cudaMemcpy(dptr, h, n * es, cudaMemcpyHostToDevice));
    free(h);
    return dptr;
}

// A poisoned (0xFF: NaN) device view for an output.
static void* alloc_out(const bwd_case_t* c, int N, const int64_t s[3]) {
    const size_t bytes = view_elems(c, N, s) * dtype_size(c->dt);
    void* dptr = mem_alloc(DEV_CUDA, bytes, MEM_OTHER);
    CUDA_CHECK(cudaMemset(dptr, 0xFF, bytes));
    return dptr;
}

// Device view -> host contiguous fp32 [B*H, N, d].
static float* download(const bwd_case_t* c, const void* dptr, int N, const int64_t s[3]) {
    const size_t n = view_elems(c, N, s), es = dtype_size(c->dt);
    unsigned char* h = malloc(n * es);
    cr_assert(h);
    CUDA_CHECK(cudaMemcpy(h, dptr, n * es, cudaMemcpyDeviceToHost));
    float* x = malloc((size_t)c->B * c->H * N * c->d * sizeof(float));
    cr_assert(x);
    for (int bh = 0; bh < c->B * c->H; bh++)
        for (int r = 0; r < N; r++)
            for (int e = 0; e < c->d; e++) {
                const size_t off = (size_t)((bh / c->H) * s[0] + (bh % c->H) * s[1] + (int64_t)r * s[2] + e);
                x[((size_t)bh * N + r) * c->d + e] =
                    c->dt == DT_BF16 ? f32_from_bf16(((uint16_t*)h)[off]) : ((float*)h)[off];
            }
    free(h);
    return x;
}

// Runs the CUDA backward on inputs (q, k, v, dO, O, L: host contiguous fp32, already rounded to
// the dtype) and returns dq, dk, dv as host fp32.
static void run_gpu_backward(const bwd_case_t* c, const float* q, const float* k, const float* v,
                             const float* dO, const float* O, const float* L, float** dq, float** dk,
                             float** dv) {
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = c->B; a.H = c->H; a.Nq = c->Nq; a.Nk = c->Nk; a.d = c->d; a.dtype = c->dt;
    a.causal = c->causal;
    a.scale = 1.0f / sqrtf((float)c->d);
    case_strides(c, c->Nq, a.sq); case_strides(c, c->Nk, a.sk); case_strides(c, c->Nk, a.sv);
    case_strides(c, c->Nq, a.so); case_strides(c, c->Nq, a.sdo); case_strides(c, c->Nq, a.sdq);
    case_strides(c, c->Nk, a.sdk); case_strides(c, c->Nk, a.sdv);
    if (g_kv_bcast) a.sk[1] = a.sv[1] = 0;  // upload writes every head's (equal) rows to one place
    a.q = upload(c, q, c->Nq, a.sq);
    a.k = upload(c, k, c->Nk, a.sk);
    a.v = upload(c, v, c->Nk, a.sv);
    a.o = upload(c, O, c->Nq, a.so);
    a.dout = upload(c, dO, c->Nq, a.sdo);
    const size_t nl = (size_t)c->B * c->H * c->Nq;
    a.lse = mem_alloc(DEV_CUDA, nl * sizeof(float), MEM_OTHER);
    CUDA_CHECK(cudaMemcpy(a.lse, L, nl * sizeof(float), cudaMemcpyHostToDevice));
    a.dq = alloc_out(c, c->Nq, a.sdq);
    a.dk = alloc_out(c, c->Nk, a.sdk);
    a.dv = alloc_out(c, c->Nk, a.sdv);
    const size_t ws = c->atomic ? lab04_workspace_bytes(&a) : flash_bwd_workspace_bytes(&a);
    a.workspace = mem_alloc(DEV_CUDA, ws, MEM_WORKSPACE);
    CUDA_CHECK(cudaMemset(a.workspace, 0xFF, ws));  // the pre-pass must write every D
    if (c->atomic) lab04_backward_atomic(&a, 0);
    else lab04_backward(&a, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    *dq = download(c, a.dq, c->Nq, a.sdq);
    *dk = download(c, a.dk, c->Nk, a.sdk);
    *dv = download(c, a.dv, c->Nk, a.sdv);
    mem_free((void*)a.q); mem_free((void*)a.k); mem_free((void*)a.v); mem_free(a.o);
    mem_free((void*)a.dout); mem_free(a.lse); mem_free(a.dq); mem_free(a.dk); mem_free(a.dv);
    mem_free(a.workspace);
}

// Random inputs, CPU forward and naive backward (in double) as the truth, then the GPU.
static void check_case(bwd_case_t c, uint64_t seed) {
    const int BH = c.B * c.H;
    const size_t nq = (size_t)BH * c.Nq * c.d, nk = (size_t)BH * c.Nk * c.d, nl = (size_t)BH * c.Nq;
    float *q = randn_f32(nq, seed), *k = randn_f32(nk, seed + 1), *v = randn_f32(nk, seed + 2);
    float *dO = randn_f32(nq, seed + 3), *O = poisoned_f32(nq), *L = poisoned_f32(nl);
    if (g_kv_bcast) {  // every head of a batch gets head 0's K and V
        const size_t hk = (size_t)c.Nk * c.d;
        for (int bh = 0; bh < BH; bh++)
            if (bh % c.H) {
                memcpy(k + bh * hk, k + (bh - bh % c.H) * hk, hk * sizeof(float));
                memcpy(v + bh * hk, v + (bh - bh % c.H) * hk, hk * sizeof(float));
            }
    }
    if (c.dt == DT_BF16) {
        bwd_round_bf16(q, nq); bwd_round_bf16(k, nk); bwd_round_bf16(v, nk); bwd_round_bf16(dO, nq);
    }
    const float scale = 1.0f / sqrtf((float)c.d);
    attn_naive_forward_cpu(q, k, v, O, L, BH, c.Nq, c.Nk, c.d, c.causal, scale);
    if (c.dt == DT_BF16) bwd_round_bf16(O, nq);  // the GPU gets O in bf16, as the forward writes it
    float *wq = poisoned_f32(nq), *wk = poisoned_f32(nk), *wv = poisoned_f32(nk);
    attn_naive_backward_cpu(q, k, v, O, dO, L, wq, wk, wv, BH, c.Nq, c.Nk, c.d, c.causal, scale);
    float *gq, *gk, *gv;
    run_gpu_backward(&c, q, k, v, dO, O, L, &gq, &gk, &gv);
    // fp32: fast exp and fp32 sums against double: 1e-3 of the largest gradient.
    // bf16: P and dS are rounded to bf16 (2^-9 relative) before the tensor-core products and the
    // outputs to bf16 (2^-9): 3e-2 relative plus 2e-2 of the largest gradient.
    // Both: plus 1e-6 absolute, for gradients that are zero in exact arithmetic (one key: dS =
    // P (dP - D) with dP = D, but the kernel's dP and the pre-pass's D are fp32 sums of the same
    // products in different orders, so dQ and dK are rounding residues of about 1e-7).
    const int bf = c.dt == DT_BF16;
    const double rtol = bf ? 3e-2 : 1e-3;
    char what[160];
    const float* got[3] = {gq, gk, gv};
    const float* want[3] = {wq, wk, wv};
    const size_t n[3] = {nq, nk, nk};
    const char* names[3] = {"dQ", "dK", "dV"};
    for (int x = 0; x < 3; x++) {
        const double atol = (bf ? 2e-2 : 1e-3) * bwd_max_abs(want[x], n[x]) + 1e-6;
        snprintf(what, sizeof what, "%s (%s, %s, B %d H %d Nq %d Nk %d d %d %s pad %d%s)", names[x],
                 c.atomic ? "atomic" : "two-pass", dtype_name(c.dt), c.B, c.H, c.Nq, c.Nk, c.d,
                 c.causal ? "causal" : "noncausal", c.pad, g_kv_bcast ? " kv shared by heads" : "");
        ASSERT_ALLCLOSE(got[x], want[x], n[x], rtol, atol, what);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L);
    free(wq); free(wk); free(wv); free(gq); free(gk); free(gv);
}

// PyTorch's gradients at the course's shape, fp32, rtol = atol = 1e-2 (the course's tolerance).
static void check_fixture_gpu(int causal, int atomic) {
    SKIP_WITHOUT_GPU();
    const size_t n = (size_t)FX_BH * FX_N * FX_D, nl = (size_t)FX_BH * FX_N;
    const char* tag = causal ? "causal" : "noncausal";
    char name[64];
    float *q = load_fixture("q", n), *k = load_fixture("k", n), *v = load_fixture("v", n);
    float* dO = load_fixture("dO", n);
    snprintf(name, sizeof name, "%s_O", tag);
    float* O = load_fixture(name, n);
    snprintf(name, sizeof name, "%s_L", tag);
    float* L = load_fixture(name, nl);
    bwd_case_t c = {FX_BH, 1, FX_N, FX_N, FX_D, causal, DT_F32, atomic, 0};
    float *gq, *gk, *gv;
    run_gpu_backward(&c, q, k, v, dO, O, L, &gq, &gk, &gv);
    const char* names[3] = {"dQ", "dK", "dV"};
    float* got[3] = {gq, gk, gv};
    for (int x = 0; x < 3; x++) {
        snprintf(name, sizeof name, "%s_%s", tag, names[x]);
        float* want = load_fixture(name, n);
        ASSERT_ALLCLOSE(got[x], want, n, 1e-2, 1e-2, name);  // the course's tolerance
        free(want);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L); free(gq); free(gk); free(gv);
}

Test(rungs, fixture_noncausal) { check_fixture_gpu(0, 0); }
Test(rungs, fixture_causal) { check_fixture_gpu(1, 0); }
Test(rungs, fixture_noncausal_atomic) { check_fixture_gpu(0, 1); }
Test(rungs, fixture_causal_atomic) { check_fixture_gpu(1, 1); }

// Every head dim, both dtypes, causal and not, both variants, ragged Nq != Nk.
static void sweep(dtype_t dt, int atomic) {
    SKIP_WITHOUT_GPU();
    const int ds[4] = {16, 32, 64, 128};
    const int shapes[3][2] = {{77, 77}, {150, 67}, {45, 203}};
    uint64_t seed = 1000 + 100 * (uint64_t)dt + 10 * (uint64_t)atomic;
    for (int di = 0; di < 4; di++)
        for (int si = 0; si < 3; si++)
            for (int causal = 0; causal < 2; causal++) {
                bwd_case_t c = {2, 3, shapes[si][0], shapes[si][1], ds[di], causal, dt, atomic, 0};
                check_case(c, seed++);
            }
}
Test(rungs, sweep_f32_two_pass, .timeout = 300) { sweep(DT_F32, 0); }
Test(rungs, sweep_bf16_two_pass, .timeout = 300) { sweep(DT_BF16, 0); }
Test(rungs, sweep_f32_atomic, .timeout = 300) { sweep(DT_F32, 1); }
Test(rungs, sweep_bf16_atomic, .timeout = 300) { sweep(DT_BF16, 1); }
// Every version of the tensor-core kernels the benchmark times (each test is its own process,
// so the process-wide version switch does not leak into other tests).
Test(rungs, sweep_bf16_two_pass_version1, .timeout = 300) { lab04_set_version(1); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_atomic_version1, .timeout = 300) { lab04_set_version(1); sweep(DT_BF16, 1); }
Test(rungs, sweep_bf16_two_pass_version2, .timeout = 300) { lab04_set_version(2); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_atomic_version2, .timeout = 300) { lab04_set_version(2); sweep(DT_BF16, 1); }
Test(rungs, sweep_bf16_two_pass_version3, .timeout = 300) { lab04_set_version(3); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_atomic_version3, .timeout = 300) { lab04_set_version(3); sweep(DT_BF16, 1); }
Test(rungs, sweep_bf16_atomic_version4, .timeout = 300) { lab04_set_version(4); sweep(DT_BF16, 1); }
Test(rungs, sweep_bf16_two_pass_version5, .timeout = 300) { lab04_set_version(5); sweep(DT_BF16, 0); }
// Versions 6-19: lab04_backward is itself single-pass for d <= 64 (d 128: version 1's
// kernels; version 20: its own single pass).
Test(rungs, sweep_bf16_version6, .timeout = 300) { lab04_set_version(6); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_atomic_version6, .timeout = 300) { lab04_set_version(6); sweep(DT_BF16, 1); }
Test(rungs, sweep_bf16_version7, .timeout = 300) { lab04_set_version(7); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version8, .timeout = 300) { lab04_set_version(8); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version9, .timeout = 300) { lab04_set_version(9); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version10, .timeout = 300) { lab04_set_version(10); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version11, .timeout = 300) { lab04_set_version(11); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version12, .timeout = 300) { lab04_set_version(12); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version13, .timeout = 300) { lab04_set_version(13); sweep(DT_BF16, 0); }
// Versions 14-15 (not yet run on a GPU when written): dQ by half the warps; 15 also movmatrix.
Test(rungs, sweep_bf16_version14, .timeout = 300) { lab04_set_version(14); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version15, .timeout = 300) { lab04_set_version(15); sweep(DT_BF16, 0); }
// Versions 16-19: wgmma (sm_90a), d 64; the sweep's other head dims run version 10's kernel.
Test(rungs, sweep_bf16_version16, .timeout = 300) { lab04_set_version(16); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version17, .timeout = 300) { lab04_set_version(17); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version18, .timeout = 300) { lab04_set_version(18); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_version19, .timeout = 300) { lab04_set_version(19); sweep(DT_BF16, 0); }
// Version 20 (the default; first run on an H100 on 2026-11-26): 19's wgmma single pass at d 128 (sm_90a builds);
// the sweep's d 64 runs 19, d 16 and 32 version 10. Both entry points: lab04_backward and
// lab04_backward_atomic are the same single pass at d 128.
Test(rungs, sweep_bf16_version20, .timeout = 300) { lab04_set_version(20); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_atomic_version20, .timeout = 300) { lab04_set_version(20); sweep(DT_BF16, 1); }
// Version 20 at d 128 over many tiles: 6 key blocks of 128, 11 query tiles, a ragged end on both,
// causal (the diagonal masks and the causal start) and not, Nq > Nk and Nq < Nk, strided views.
Test(rungs, long_bf16_d128_version20, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    lab04_set_version(20);
    const int shapes[3][2] = {{700, 650}, {333, 517}, {1024, 1024}};
    uint64_t seed = 2000;
    for (int si = 0; si < 3; si++)
        for (int causal = 0; causal < 2; causal++) {
            bwd_case_t c = {1, 2, shapes[si][0], shapes[si][1], 128, causal, DT_BF16, 0, 0};
            check_case(c, seed++);
        }
    bwd_case_t c = {2, 3, 200, 190, 128, 1, DT_BF16, 0, 8};  // (B, N, H, d + 8) views: 16-byte rows
    check_case(c, seed++);
}
// The kernel that runs: where the build has the wgmma kernels (version 19 runs them at d 64),
// version 20 runs its own at d 128; elsewhere version 1's kernels, as every version >= 6 there.
Test(rungs, version20_runs_where_wgmma_is_built) {
    SKIP_WITHOUT_GPU();
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 1; a.H = 2; a.Nq = a.Nk = 256; a.dtype = DT_BF16; a.causal = 1; a.scale = 0.125f;
    a.q = (void*)0x10000; a.k = (void*)0x20000; a.v = (void*)0x30000; a.o = (void*)0x40000;
    a.dout = (void*)0x50000; a.dq = (void*)0x60000; a.dk = (void*)0x70000; a.dv = (void*)0x80000;
    int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
    a.d = 64;
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], a.H, a.Nq, a.d);
    lab04_set_version(19);
    const int built = lab04_current_plan(&a, 0).path == LAB04_PATH_WGMMA;
    a.d = 128;
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], a.H, a.Nq, a.d);
    lab04_set_version(20);
    const lab04_plan_t p = lab04_current_plan(&a, 0);
    char name[96];
    lab04_plan_name(&p, name, sizeof name);
    if (built) cr_assert_str_eq(name, "v20 wgmma single pass (rungs_wgmma.cu)");
    else cr_assert_str_eq(name, "v1 mma.sync two-pass (rungs_mma.cu)");
}

// The single pass adds dQ with atomics in whatever order the blocks run: dK and dV must be the
// same bits run to run, dQ only close (its fp32 sums differ in the last bits, which can move a
// bf16 rounding by one unit, 2^-8 relative: rtol 8e-3; atol 1e-6 for values near zero).
// version 0: the default's single pass (version 10 if the default were a two-pass one).
static void run_to_run_case(int version, int Nq, int Nk, int d, int atomic, uint64_t seed) {
    if (version) lab04_set_version(version);
    else if (LAB04_DEFAULT_VERSION < 6) lab04_set_version(10);
    bwd_case_t c = {1, 2, Nq, Nk, d, 1, DT_BF16, atomic, 0};
    const size_t nq = (size_t)2 * Nq * d, nk = (size_t)2 * Nk * d, nl = (size_t)2 * Nq;
    float *q = randn_f32(nq, seed), *k = randn_f32(nk, seed + 1), *v = randn_f32(nk, seed + 2);
    float *dO = randn_f32(nq, seed + 3);
    bwd_round_bf16(q, nq); bwd_round_bf16(k, nk); bwd_round_bf16(v, nk); bwd_round_bf16(dO, nq);
    float *O = poisoned_f32(nq), *L = poisoned_f32(nl);
    attn_naive_forward_cpu(q, k, v, O, L, 2, Nq, Nk, d, 1, 1.0f / sqrtf((float)d));
    bwd_round_bf16(O, nq);
    float *q1, *k1, *v1, *q2, *k2, *v2;
    run_gpu_backward(&c, q, k, v, dO, O, L, &q1, &k1, &v1);
    run_gpu_backward(&c, q, k, v, dO, O, L, &q2, &k2, &v2);
    cr_assert(memcmp(k1, k2, nk * sizeof(float)) == 0, "dK differs between runs (version %d)", version);
    cr_assert(memcmp(v1, v2, nk * sizeof(float)) == 0, "dV differs between runs (version %d)", version);
    ASSERT_ALLCLOSE(q2, q1, nq, 8e-3, 1e-6, "dQ run to run");
    free(q); free(k); free(v); free(dO); free(O); free(L);
    free(q1); free(k1); free(v1); free(q2); free(k2); free(v2);
}
Test(rungs, single_pass_run_to_run, .timeout = 60) {
    SKIP_WITHOUT_GPU();
    run_to_run_case(0, 517, 517, 64, 1, 601);
}
// Version 20 at d 128: its dQ is added by reductions in any order too.
Test(rungs, single_pass_run_to_run_version20_d128, .timeout = 60) {
    SKIP_WITHOUT_GPU();
    run_to_run_case(20, 517, 389, 128, 0, 611);
}
// Version 21: dQ by TMA reduce-adds, in any order.
Test(rungs, single_pass_run_to_run_version21, .timeout = 60) {
    SKIP_WITHOUT_GPU();
    run_to_run_case(21, 517, 389, 64, 0, 621);
}
Test(rungs, long_bf16_causal_every_version, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    for (int ver = 1; ver <= LAB04_MAX_VERSION; ver++) {
        lab04_set_version(ver);
        bwd_case_t c = {1, 2, 700, 650, 64, 1, DT_BF16, 0, 0};
        check_case(c, 700 + (uint64_t)ver);
        c.atomic = 1;
        check_case(c, 710 + (uint64_t)ver);
    }
}

// Version 21 (flash_bwd_tma.cu; the default at d 64 since its first H100 runs): the TMA-fed single pass at d 64. The
// sweep covers every head dim (d 16, 32: version 10; d 128: version 20) through both entry points.
Test(rungs, sweep_bf16_version21, .timeout = 300) { lab04_set_version(21); sweep(DT_BF16, 0); }
Test(rungs, sweep_bf16_atomic_version21, .timeout = 300) { lab04_set_version(21); sweep(DT_BF16, 1); }
// Where the build has the wgmma kernels, version 21 runs its own at d 64 (a contiguous view).
Test(rungs, version21_runs_where_wgmma_is_built) {
    SKIP_WITHOUT_GPU();
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 1; a.H = 2; a.Nq = a.Nk = 256; a.d = 64; a.dtype = DT_BF16; a.causal = 1; a.scale = 0.125f;
    a.q = (void*)0x10000; a.k = (void*)0x20000; a.v = (void*)0x30000; a.o = (void*)0x40000;
    a.dout = (void*)0x50000; a.dq = (void*)0x60000; a.dk = (void*)0x70000; a.dv = (void*)0x80000;
    int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], a.H, a.Nq, a.d);
    lab04_set_version(19);
    const int built = lab04_current_plan(&a, 0).path == LAB04_PATH_WGMMA;
    lab04_set_version(21);
    const lab04_plan_t p = lab04_current_plan(&a, 0);
    char name[96];
    lab04_plan_name(&p, name, sizeof name);
    if (built) cr_assert_str_eq(name, "v21 tma wgmma single pass (flash_bwd_tma.cu)");
    else cr_assert_str_eq(name, "v10 fa2 mma.sync single pass (rungs_fa2.cu)");
}
// Ragged ends on both axes (the TMA zero fill, L = D = 0 past Nq, the dQ map's clipped rows),
// Nq != Nk both ways (causal blocks with no query tile: Nk > Nq), one tile, one element, many
// tiles (the ring wraps: 3 stages), causal and not, both entry points, several heads and batches.
Test(rungs, shapes_bf16_version21, .timeout = 300) {
    SKIP_WITHOUT_GPU();
    lab04_set_version(21);
    const int shapes[9][2] = {{150, 67}, {70, 200}, {333, 201}, {517, 517}, {64, 64},
                              {1, 1}, {128, 129}, {700, 650}, {201, 333}};
    uint64_t seed = 2100;
    for (int si = 0; si < 9; si++)
        for (int causal = 0; causal < 2; causal++) {
            bwd_case_t c = {1, 2, shapes[si][0], shapes[si][1], 64, causal, DT_BF16, (si + causal) & 1, 0};
            check_case(c, seed++);
        }
    bwd_case_t c = {2, 3, 257, 190, 64, 1, DT_BF16, 0, 0};  // B*H = 6 blocks of heads
    check_case(c, seed++);
    c.atomic = 1;
    c.causal = 0;
    check_case(c, seed++);
}
// Strided views as the model hands them over, (B, N, H, d + 8): TMA describes them (row stride
// H (d + 8) elements, head stride d + 8), so version 21's kernel runs on them.
Test(rungs, strided_bf16_version21, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    lab04_set_version(21);
    bwd_case_t c = {2, 3, 200, 190, 64, 1, DT_BF16, 0, 8};
    check_case(c, 2150);
    c.causal = 0;
    c.atomic = 1;
    c.Nq = 97;
    check_case(c, 2151);
}
// A view TMA cannot describe (K and V shared by the heads: head stride 0) runs version 19
// instead, through both entry points; the plan names it.
Test(rungs, fallback_bf16_version21, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    lab04_set_version(21);
    g_kv_bcast = 1;
    bwd_case_t c = {2, 3, 150, 130, 64, 1, DT_BF16, 0, 0};
    check_case(c, 2160);
    c.atomic = 1;
    c.causal = 0;
    check_case(c, 2161);
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 2; a.H = 3; a.Nq = 150; a.Nk = 130; a.d = 64; a.dtype = DT_BF16; a.scale = 0.125f;
    a.q = (void*)0x10000; a.k = (void*)0x20000; a.v = (void*)0x30000; a.o = (void*)0x40000;
    a.dout = (void*)0x50000; a.dq = (void*)0x60000; a.dk = (void*)0x70000; a.dv = (void*)0x80000;
    int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], a.H, (i == 1 || i == 2 || i >= 6) ? a.Nk : a.Nq, a.d);
    a.sk[1] = a.sv[1] = 0;
    const lab04_plan_t p = lab04_current_plan(&a, 1);
    cr_assert(p.path != LAB04_PATH_TMA, "version 21 must not take a view TMA cannot describe");
}
// Longer sequences: many tiles, so the causal start/stop and the double buffering are exercised.
Test(rungs, long_bf16_causal_d64) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 517, 517, 64, 1, DT_BF16, 0, 0};
    check_case(c, 77);
}
Test(rungs, long_bf16_causal_d128_atomic) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 389, 301, 128, 1, DT_BF16, 1, 0};
    check_case(c, 78);
}

// Strided views as the model hands them over (B, N, H, d + pad): pad 8 keeps the tensor-core
// path (16-byte rows), pad 3 sends bf16 to the SIMT fallback. d = 40 has no tensor-core kernel.
Test(rungs, strided_bf16_tensor_core) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 3, 100, 90, 64, 1, DT_BF16, 0, 8};
    check_case(c, 81);
}
Test(rungs, strided_bf16_unaligned_fallback) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 3, 100, 90, 32, 1, DT_BF16, 0, 3};
    check_case(c, 82);
}
Test(rungs, strided_f32_odd_head_dim) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 2, 61, 70, 40, 0, DT_F32, 0, 5};
    check_case(c, 83);
}

// Small cases for compute-sanitizer (racecheck is slow): make sanitize runs these.
Test(rungs, sanitize_bf16) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 150, 67, 64, 1, DT_BF16, 0, 0};
    check_case(c, 91);
    c.atomic = 1;
    check_case(c, 92);
}
Test(rungs, sanitize_bf16_version20) {
    SKIP_WITHOUT_GPU();
    lab04_set_version(20);
    bwd_case_t c = {1, 2, 150, 67, 128, 1, DT_BF16, 0, 0};
    check_case(c, 95);
    c.causal = 0;
    check_case(c, 96);
}
Test(rungs, sanitize_bf16_version21) {
    SKIP_WITHOUT_GPU();
    lab04_set_version(21);
    bwd_case_t c = {1, 2, 150, 67, 64, 1, DT_BF16, 0, 0};
    check_case(c, 97);
    c.causal = 0;
    c.atomic = 1;
    check_case(c, 98);
    c.Nq = 148;  // a multiple of 4: L and D by TMA, one release per warp
    c.causal = 1;
    check_case(c, 99);
}
Test(rungs, sanitize_f32) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 45, 70, 32, 1, DT_F32, 0, 0};
    check_case(c, 93);
    c.atomic = 1;
    check_case(c, 94);
}
