// Stage 04 GPU tests: the CUDA backward, as the dispatch chooses and each row of its table forced
// (fa3, wgmma, mma, mma_two_pass, simt), against PyTorch's gradients and against the CPU
// reference on random shapes (ragged, Nq != Nk, every head dim, bf16 and fp32, causal and not,
// strided views), and the whole chain with stage 03's forward.
#include <cuda_runtime_api.h>
#include "common/alloc.h"
#include "common/check.h"
#include "04_flashattn_bwd/test_bwd_util.h"

typedef struct {
    int B, H, Nq, Nk, d, causal;
    dtype_t dt;
    const char* row;  // NULL: flash_backward_cuda (the dispatch's choice); else that row, forced
    int pad;      // extra elements per row: views as (B, N, H, d + pad), like a fused projection
} bwd_case_t;
// 1: K and V shared by the heads of a batch (head stride 0), a view TMA cannot describe; set by
// the one test that wants it (every Criterion test is its own process).
static int g_kv_bcast = 0;

// The row of the dispatch table called name (the test fails on a name the table does not have).
static const flash_bwd_row_t* find_row(const char* name) {
    int n;
    const flash_bwd_row_t* rows = flash_bwd_rows(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0) return &rows[i];
    cr_assert_fail("no dispatch row named %s", name);
    return NULL;
}
// fa3 and wgmma need the build's sm_90a code: without it their tests skip, saying so.
#define SKIP_WITHOUT_ROW_CODE(name)                                                                  \
    do {                                                                                            \
        SKIP_WITHOUT_GPU();                                                                         \
        if ((strcmp(name, "fa3") == 0 || strcmp(name, "wgmma") == 0) && !flash_bwd_this_build().sm90a) \
            cr_skip_test("row %s: this build has no sm_90a code for this GPU", name);               \
    } while (0)

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
    const size_t ws = flash_bwd_workspace_bytes(&a);
    a.workspace = mem_alloc(DEV_CUDA, ws, MEM_WORKSPACE);
    CUDA_CHECK(cudaMemset(a.workspace, 0xFF, ws));  // the pre-pass must write every D
    if (c->row) {
        const flash_bwd_row_t* r = find_row(c->row);
        const flash_bwd_build_t b = flash_bwd_this_build();
        cr_assert(r->applies(&a, &b), "row %s does not apply to this case (d %d)", c->row, c->d);
        char err[256];
        cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), 0, "%s", err);
        r->launch(&a, 0);
    } else {
        flash_backward_cuda(&a, 0);
    }
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
                 c.row ? c.row : "dispatch", dtype_name(c.dt), c.B, c.H, c.Nq, c.Nk, c.d,
                 c.causal ? "causal" : "noncausal", c.pad, g_kv_bcast ? " kv shared by heads" : "");
        ASSERT_ALLCLOSE(got[x], want[x], n[x], rtol, atol, what);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L);
    free(wq); free(wk); free(wv); free(gq); free(gk); free(gv);
}

// PyTorch's gradients at the course's shape (fp32), rtol = atol = 1e-2 (the course's tolerance).
// bf16 (the tensor-core rows): the inputs and O rounded to bf16, against the same fp32 gradients
// with check_case's bf16 tolerance (rounding the inputs moves the gradients by ~2^-9 relative).
static void check_fixture_gpu(int causal, const char* row, dtype_t dt) {
    SKIP_WITHOUT_GPU();
    if (row) SKIP_WITHOUT_ROW_CODE(row);
    const size_t n = (size_t)FX_BH * FX_N * FX_D, nl = (size_t)FX_BH * FX_N;
    const char* tag = causal ? "causal" : "noncausal";
    char name[64];
    float *q = load_fixture("q", n), *k = load_fixture("k", n), *v = load_fixture("v", n);
    float* dO = load_fixture("dO", n);
    snprintf(name, sizeof name, "%s_O", tag);
    float* O = load_fixture(name, n);
    snprintf(name, sizeof name, "%s_L", tag);
    float* L = load_fixture(name, nl);
    if (dt == DT_BF16) {
        bwd_round_bf16(q, n); bwd_round_bf16(k, n); bwd_round_bf16(v, n); bwd_round_bf16(dO, n);
        bwd_round_bf16(O, n);
    }
    bwd_case_t c = {FX_BH, 1, FX_N, FX_N, FX_D, causal, dt, row, 0};
    float *gq, *gk, *gv;
    run_gpu_backward(&c, q, k, v, dO, O, L, &gq, &gk, &gv);
    const char* names[3] = {"dQ", "dK", "dV"};
    float* got[3] = {gq, gk, gv};
    for (int x = 0; x < 3; x++) {
        snprintf(name, sizeof name, "%s_%s", tag, names[x]);
        float* want = load_fixture(name, n);
        if (dt == DT_F32) ASSERT_ALLCLOSE(got[x], want, n, 1e-2, 1e-2, name);  // the course's tolerance
        else ASSERT_ALLCLOSE(got[x], want, n, 3e-2, 2e-2 * bwd_max_abs(want, n) + 1e-6, name);
        free(want);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L); free(gq); free(gk); free(gv);
}

Test(bwd_cuda, fixture_noncausal) { check_fixture_gpu(0, NULL, DT_F32); }
Test(bwd_cuda, fixture_causal) { check_fixture_gpu(1, NULL, DT_F32); }
// Every row that takes the fixture's shape (d 64), forced; the tensor-core rows in bf16.
static void fixture_row(const char* row) {
    for (int causal = 0; causal < 2; causal++) check_fixture_gpu(causal, row, DT_BF16);
}
Test(bwd_cuda, fixture_bf16_fa3) { fixture_row("fa3"); }
Test(bwd_cuda, fixture_bf16_wgmma) { fixture_row("wgmma"); }
Test(bwd_cuda, fixture_bf16_mma) { fixture_row("mma"); }
Test(bwd_cuda, fixture_bf16_simt) { fixture_row("simt"); }
Test(bwd_cuda, fixture_f32_simt) {
    check_fixture_gpu(0, "simt", DT_F32);
    check_fixture_gpu(1, "simt", DT_F32);
}

// Every head dim the row takes (all of them for the dispatch), causal and not, ragged Nq != Nk.
static void sweep(dtype_t dt, const char* row) {
    SKIP_WITHOUT_GPU();
    if (row) SKIP_WITHOUT_ROW_CODE(row);
    const int ds[4] = {16, 32, 64, 128};
    const int shapes[3][2] = {{77, 77}, {150, 67}, {45, 203}};
    uint64_t seed = 1000 + 100 * (uint64_t)dt + (row ? 10 * (uint64_t)strlen(row) : 0);
    for (int di = 0; di < 4; di++) {
        if (row && dt == DT_BF16) {
            attn_args_t a;  // does the row take this head dim? (contiguous aligned views)
            memset(&a, 0, sizeof a);
            a.B = 2; a.H = 3; a.Nq = a.Nk = 64; a.d = ds[di]; a.dtype = dt;
            a.q = a.k = a.v = a.dout = a.dq = a.dk = a.dv = (void*)0x10000;
            int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
            for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], a.H, 64, a.d);
            const flash_bwd_build_t b = flash_bwd_this_build();
            if (!find_row(row)->applies(&a, &b)) continue;
        }
        for (int si = 0; si < 3; si++)
            for (int causal = 0; causal < 2; causal++) {
                bwd_case_t c = {2, 3, shapes[si][0], shapes[si][1], ds[di], causal, dt, row, 0};
                check_case(c, seed++);
            }
    }
}
Test(bwd_cuda, sweep_f32, .timeout = 300) { sweep(DT_F32, NULL); }
Test(bwd_cuda, sweep_bf16, .timeout = 300) { sweep(DT_BF16, NULL); }
// Each row of the dispatch table forced, at every head dim it takes.
Test(bwd_cuda, sweep_bf16_fa3, .timeout = 300) { sweep(DT_BF16, "fa3"); }
Test(bwd_cuda, sweep_bf16_wgmma, .timeout = 300) { sweep(DT_BF16, "wgmma"); }
Test(bwd_cuda, sweep_bf16_mma, .timeout = 300) { sweep(DT_BF16, "mma"); }
Test(bwd_cuda, sweep_bf16_mma_two_pass, .timeout = 300) { sweep(DT_BF16, "mma_two_pass"); }
Test(bwd_cuda, sweep_bf16_simt, .timeout = 300) { sweep(DT_BF16, "simt"); }
Test(bwd_cuda, sweep_f32_simt, .timeout = 300) { sweep(DT_F32, "simt"); }

// wgmma at d 128 over many tiles: 6 key blocks of 128, 11 query tiles, a ragged end on both,
// causal (the diagonal masks and the causal start) and not, Nq > Nk and Nq < Nk, strided views.
Test(bwd_cuda, long_bf16_d128_wgmma, .timeout = 120) {
    SKIP_WITHOUT_ROW_CODE("wgmma");
    const int shapes[3][2] = {{700, 650}, {333, 517}, {1024, 1024}};
    uint64_t seed = 2000;
    for (int si = 0; si < 3; si++)
        for (int causal = 0; causal < 2; causal++) {
            bwd_case_t c = {1, 2, shapes[si][0], shapes[si][1], 128, causal, DT_BF16, "wgmma", 0};
            check_case(c, seed++);
        }
    bwd_case_t c = {2, 3, 200, 190, 128, 1, DT_BF16, "wgmma", 8};  // (B, N, H, d + 8) views: 16-byte rows
    check_case(c, seed++);
}
// Many tiles through every tensor-core row that takes d 64 (and d 128 for the two-pass one).
Test(bwd_cuda, long_bf16_causal_every_row, .timeout = 120) {
    const char* rows[4] = {"fa3", "wgmma", "mma", "simt"};
    uint64_t seed = 700;
    for (int i = 0; i < 4; i++) {
        SKIP_WITHOUT_ROW_CODE(rows[i]);
        bwd_case_t c = {1, 2, 700, 650, 64, 1, DT_BF16, rows[i], 0};
        check_case(c, seed++);
    }
    bwd_case_t c = {1, 2, 389, 301, 128, 1, DT_BF16, "mma_two_pass", 0};
    check_case(c, seed++);
}

// The FA3-layout kernel: ragged ends on both axes (the TMA zero fill, L = D = 0 past Nq, the dQ
// map's clipped rows), Nq != Nk both ways (causal blocks with no query tile: Nk > Nq), one tile,
// one element, many tiles (the ring wraps: 3 stages), causal and not, several heads and batches.
Test(bwd_cuda, shapes_bf16_fa3, .timeout = 300) {
    SKIP_WITHOUT_ROW_CODE("fa3");
    const int shapes[9][2] = {{150, 67}, {70, 200}, {333, 201}, {517, 517}, {64, 64},
                              {1, 1}, {128, 129}, {700, 650}, {201, 333}};
    uint64_t seed = 2100;
    for (int si = 0; si < 9; si++)
        for (int causal = 0; causal < 2; causal++) {
            bwd_case_t c = {1, 2, shapes[si][0], shapes[si][1], 64, causal, DT_BF16, "fa3", 0};
            check_case(c, seed++);
        }
    bwd_case_t c = {2, 3, 257, 190, 64, 1, DT_BF16, "fa3", 0};  // B*H = 6 blocks of heads
    check_case(c, seed++);
    c.causal = 0;
    check_case(c, seed++);
}
// Strided views as the model hands them over, (B, N, H, d + 8): TMA describes them (row stride
// H (d + 8) elements, head stride d + 8), so the fa3 row takes them.
Test(bwd_cuda, strided_bf16_fa3, .timeout = 120) {
    SKIP_WITHOUT_ROW_CODE("fa3");
    bwd_case_t c = {2, 3, 200, 190, 64, 1, DT_BF16, "fa3", 8};
    check_case(c, 2150);
    c.causal = 0;
    c.Nq = 97;
    check_case(c, 2151);
}
// A view TMA cannot describe (K and V shared by the heads: head stride 0): the dispatch sends it
// to the wgmma row (sm_90a builds), and the result is right.
Test(bwd_cuda, fallback_bf16_kv_shared, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    g_kv_bcast = 1;
    bwd_case_t c = {2, 3, 150, 130, 64, 1, DT_BF16, NULL, 0};
    check_case(c, 2160);
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
    cr_assert_str_neq(flash_bwd_kernel_name(&a), "fa3", "the fa3 row must not take a view TMA cannot describe");
}
// Longer sequences: many tiles, so the causal start/stop and the double buffering are exercised.
Test(bwd_cuda, long_bf16_causal_d64) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 517, 517, 64, 1, DT_BF16, NULL, 0};
    check_case(c, 77);
}
Test(bwd_cuda, long_bf16_causal_d128) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 389, 301, 128, 1, DT_BF16, NULL, 0};
    check_case(c, 78);
}

// Strided views as the model hands them over (B, N, H, d + pad): pad 8 keeps the tensor-core
// path (16-byte rows), pad 3 sends bf16 to the SIMT fallback. d = 40 has no tensor-core kernel.
Test(bwd_cuda, strided_bf16_tensor_core) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 3, 100, 90, 64, 1, DT_BF16, NULL, 8};
    check_case(c, 81);
}
Test(bwd_cuda, strided_bf16_unaligned_fallback) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 3, 100, 90, 32, 1, DT_BF16, NULL, 3};
    check_case(c, 82);
}
Test(bwd_cuda, strided_f32_odd_head_dim) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 2, 61, 70, 40, 0, DT_F32, NULL, 5};
    check_case(c, 83);
}

// The chain: stage 03's CUDA forward writes O and L, this stage's backward reads them, through
// the attention_impl_t the model uses; checked against the CPU forward + naive backward.
static void chain(dtype_t dt) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {2, 2, 200, 200, 64, 1, dt, NULL, 0};
    const int BH = c.B * c.H;
    const size_t n = (size_t)BH * c.Nq * c.d, nl = (size_t)BH * c.Nq;
    float *q = randn_f32(n, 501), *k = randn_f32(n, 502), *v = randn_f32(n, 503), *dO = randn_f32(n, 504);
    if (dt == DT_BF16) { bwd_round_bf16(q, n); bwd_round_bf16(k, n); bwd_round_bf16(v, n); bwd_round_bf16(dO, n); }
    const float scale = 1.0f / sqrtf((float)c.d);
    float *O = poisoned_f32(n), *L = poisoned_f32(nl);
    attn_naive_forward_cpu(q, k, v, O, L, BH, c.Nq, c.Nk, c.d, 1, scale);
    if (dt == DT_BF16) bwd_round_bf16(O, n);
    float *wq = poisoned_f32(n), *wk = poisoned_f32(n), *wv = poisoned_f32(n);
    attn_naive_backward_cpu(q, k, v, O, dO, L, wq, wk, wv, BH, c.Nq, c.Nk, c.d, 1, scale);

    const attention_impl_t* impl = flash_attention_impl();
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = c.B; a.H = c.H; a.Nq = c.Nq; a.Nk = c.Nk; a.d = c.d; a.dtype = dt; a.causal = 1; a.scale = scale;
    int64_t s[3];
    attn_contiguous_strides(s, c.H, c.Nq, c.d);
    int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
    for (int i = 0; i < 8; i++) memcpy(all[i], s, sizeof s);
    a.q = upload(&c, q, c.Nq, s); a.k = upload(&c, k, c.Nk, s); a.v = upload(&c, v, c.Nk, s);
    a.dout = upload(&c, dO, c.Nq, s);
    a.o = alloc_out(&c, c.Nq, s);
    a.lse = mem_alloc(DEV_CUDA, nl * sizeof(float), MEM_OTHER);
    a.dq = alloc_out(&c, c.Nq, s); a.dk = alloc_out(&c, c.Nk, s); a.dv = alloc_out(&c, c.Nk, s);
    a.workspace = mem_alloc(DEV_CUDA, impl->bwd_workspace_bytes(&a), MEM_WORKSPACE);
    char err[256];
    cr_assert_eq(impl->supports(&a, err, sizeof err), 0, "%s", err);
    impl->forward(&a, 0);
    impl->backward(&a, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    float* got[3] = {download(&c, a.dq, c.Nq, s), download(&c, a.dk, c.Nk, s), download(&c, a.dv, c.Nk, s)};
    float* want[3] = {wq, wk, wv};
    const char* names[3] = {"dQ chain", "dK chain", "dV chain"};
    const int bf = dt == DT_BF16;
    for (int x = 0; x < 3; x++) {
        // As check_case, with O from the GPU forward instead of the rounded CPU O (bf16: one more
        // rounding in D); fp32 gets 2e-3 for the forward's own error.
        const double atol = (bf ? 2e-2 : 2e-3) * (bwd_max_abs(want[x], n) + 1e-6);
        ASSERT_ALLCLOSE(got[x], want[x], n, bf ? 3e-2 : 2e-3, atol, names[x]);
        free(got[x]);
    }
    mem_free((void*)a.q); mem_free((void*)a.k); mem_free((void*)a.v); mem_free((void*)a.dout);
    mem_free(a.o); mem_free(a.lse); mem_free(a.dq); mem_free(a.dk); mem_free(a.dv); mem_free(a.workspace);
    free(q); free(k); free(v); free(dO); free(O); free(L); free(wq); free(wk); free(wv);
}
Test(bwd_cuda, chain_stage03_forward_bf16) { chain(DT_BF16); }
Test(bwd_cuda, chain_stage03_forward_f32) { chain(DT_F32); }

// Small cases for compute-sanitizer (racecheck is slow): make sanitize runs these. Each
// tensor-core row forced, ragged and causal.
static void sanitize_row(const char* row, int d, uint64_t seed) {
    SKIP_WITHOUT_ROW_CODE(row);
    bwd_case_t c = {1, 2, 150, 67, d, 1, DT_BF16, row, 0};
    check_case(c, seed);
    c.causal = 0;
    check_case(c, seed + 1);
}
Test(bwd_cuda, sanitize_bf16) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 150, 67, 64, 1, DT_BF16, NULL, 0};
    check_case(c, 91);
}
Test(bwd_cuda, sanitize_bf16_fa3) {
    sanitize_row("fa3", 64, 97);
    bwd_case_t c = {1, 2, 148, 67, 64, 1, DT_BF16, "fa3", 0};  // Nq a multiple of 4: L and D by TMA
    check_case(c, 99);
}
Test(bwd_cuda, sanitize_bf16_wgmma_d128) { sanitize_row("wgmma", 128, 95); }
Test(bwd_cuda, sanitize_bf16_mma) { sanitize_row("mma", 64, 101); }
Test(bwd_cuda, sanitize_bf16_mma_two_pass) { sanitize_row("mma_two_pass", 128, 103); }
Test(bwd_cuda, sanitize_f32) {
    SKIP_WITHOUT_GPU();
    bwd_case_t c = {1, 2, 45, 70, 32, 1, DT_F32, NULL, 0};
    check_case(c, 93);
}
