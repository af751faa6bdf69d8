// Stage 03, GPU: the CUDA FlashAttention-2 forward against PyTorch's fixture and against the
// CPU naive reference on ragged shapes, Nq != Nk, every head dim, bf16 and fp32, causal and
// not, strided layouts (the model's fused QKV), padded rows that must stay untouched, and a
// batch*heads count beyond one grid dimension's 65535 limit. Outputs are poisoned first.
#include <stdio.h>
#include "common/alloc.h"
#include "common/check.h"
#include "03_flashattn_fwd/flash_fwd_internal.h"
#include "03_flashattn_fwd/test_util.h"

// Layouts of q, k, v and o on the device:
enum {
    LAYOUT_CONTIGUOUS,  // [B, H, N, d]
    LAYOUT_BNHD,        // [B, N, H, d]: the model's per-token heads (strides N*H*d, d, H*d)
    LAYOUT_FUSED_QKV,   // q, k, v inside one (B, N, 3, H, d) buffer (Nq == Nk only); o is [B, N, H, d]
    LAYOUT_PADDED,      // [B, H, N, d + 8]: the 8 padding elements of every row must stay poisoned
    LAYOUT_COUNT
};

typedef struct {
    int64_t s[3];    // (batch, head, row) strides in elements
    size_t numel;    // elements of the buffer holding it
} view_t;

static view_t make_view(int layout, int B, int H, int N, int d) {
    view_t v;
    switch (layout) {
        case LAYOUT_BNHD:
            v.s[0] = (int64_t)N * H * d, v.s[1] = d, v.s[2] = (int64_t)H * d;
            v.numel = (size_t)B * N * H * d;
            break;
        case LAYOUT_PADDED:
            v.s[0] = (int64_t)H * N * (d + 8), v.s[1] = (int64_t)N * (d + 8), v.s[2] = d + 8;
            v.numel = (size_t)B * H * N * (d + 8);
            break;
        default:
            attn_contiguous_strides(v.s, H, N, d);
            v.numel = (size_t)B * H * N * d;
    }
    return v;
}

// Element (b, h, n, c) of a view, as an offset.
static size_t at(const view_t* v, int H, int b, int h, int n, int c) {
    (void)H;
    return (size_t)(b * v->s[0] + h * v->s[1] + n * v->s[2] + c);
}

// Copies a contiguous host [B, H, N, d] fp32 array into a host staging buffer laid out as
// `v`, in dtype dt (bf16 bits or fp32). Untouched elements keep what `stage` had.
static void scatter(void* stage, const view_t* v, dtype_t dt, const float* x, int B, int H, int N, int d) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int n = 0; n < N; n++)
                for (int c = 0; c < d; c++) {
                    const float val = x[(((size_t)b * H + h) * N + n) * d + c];
                    const size_t o = at(v, H, b, h, n, c);
                    if (dt == DT_BF16)
                        ((uint16_t*)stage)[o] = bf16_from_f32(val);
                    else
                        ((float*)stage)[o] = val;
                }
}

// Runs flash_forward_cuda on contiguous host q [BH, Nq, d], k, v [BH, Nk, d] (already rounded
// to bf16 values if dt is bf16) in the given layout; returns O [BH, Nq, d] and L [BH, Nq] in
// host fp32 arrays (poisoned before the run). Asserts that padding stays poisoned.
static void run_cuda(const float* q, const float* k, const float* v, float* o, float* lse, int B, int H, int Nq, int Nk,
                     int d, int causal, dtype_t dt, int layout) {
    const size_t es = dtype_size(dt);
    attn_args_t a = {0};
    a.B = B, a.H = H, a.Nq = Nq, a.Nk = Nk, a.d = d, a.dtype = dt, a.causal = causal;
    a.scale = 1.0f / sqrtf((float)d);
    void *dq, *dk, *dv, *fused = NULL;
    view_t vq, vk, vo;
    if (layout == LAYOUT_FUSED_QKV) {
        cr_assert_eq(Nq, Nk, "fused QKV needs Nq == Nk");
        // (B, N, 3, H, d): q, k, v are views with strides (N*3*H*d, d, 3*H*d)
        const size_t n = (size_t)B * Nq * 3 * H * d;
        void* st = malloc(n * es);
        memset(st, 0xFF, n * es);
        view_t f;
        f.s[0] = (int64_t)Nq * 3 * H * d, f.s[1] = d, f.s[2] = (int64_t)3 * H * d, f.numel = n;
        scatter(st, &f, dt, q, B, H, Nq, d);
        scatter((char*)st + (size_t)H * d * es, &f, dt, k, B, H, Nk, d);
        scatter((char*)st + (size_t)2 * H * d * es, &f, dt, v, B, H, Nk, d);
        fused = mem_alloc(DEV_CUDA, n * es, MEM_OTHER);
        CUDA_CHECK(cudaMemcpy(fused, st, n * es, cudaMemcpyHostToDevice));
        free(st);
        dq = fused, dk = (char*)fused + (size_t)H * d * es, dv = (char*)fused + (size_t)2 * H * d * es;
        vq = vk = f;
        vo = make_view(LAYOUT_BNHD, B, H, Nq, d);
    } else {
        vq = make_view(layout, B, H, Nq, d);
        vk = make_view(layout, B, H, Nk, d);
        vo = vq;
        void* st = malloc((vq.numel > vk.numel ? vq.numel : vk.numel) * es);
        const float* src[3] = {q, k, v};
        void** dst[3] = {&dq, &dk, &dv};
        for (int i = 0; i < 3; i++) {
            const view_t* vv = i == 0 ? &vq : &vk;
            memset(st, 0xFF, vv->numel * es);
            scatter(st, vv, dt, src[i], B, H, i == 0 ? Nq : Nk, d);
            *dst[i] = mem_alloc(DEV_CUDA, vv->numel * es, MEM_OTHER);
            CUDA_CHECK(cudaMemcpy(*dst[i], st, vv->numel * es, cudaMemcpyHostToDevice));
        }
        free(st);
    }
    memcpy(a.sq, vq.s, sizeof a.sq), memcpy(a.sk, vk.s, sizeof a.sk), memcpy(a.sv, vk.s, sizeof a.sv);
    memcpy(a.so, vo.s, sizeof a.so);
    a.q = dq, a.k = dk, a.v = dv;
    void* dO = mem_alloc(DEV_CUDA, vo.numel * es, MEM_OTHER);
    float* dL = mem_alloc(DEV_CUDA, (size_t)B * H * Nq * sizeof(float), MEM_OTHER);
    CUDA_CHECK(cudaMemset(dO, 0xFF, vo.numel * es));  // poison: NaN in fp32 and bf16
    CUDA_CHECK(cudaMemset(dL, 0xFF, (size_t)B * H * Nq * sizeof(float)));
    a.o = dO, a.lse = dL;
    char err[256];
    cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "supports rejected a valid case: %s", err);
    flash_forward_cuda(&a, 0);
    CUDA_CHECK(cudaDeviceSynchronize());

    unsigned char* ho = malloc(vo.numel * es);
    CUDA_CHECK(cudaMemcpy(ho, dO, vo.numel * es, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse, dL, (size_t)B * H * Nq * sizeof(float), cudaMemcpyDeviceToHost));
    size_t touched_pad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int n = 0; n < Nq; n++) {
                for (int c = 0; c < d; c++) {
                    const size_t off = at(&vo, H, b, h, n, c);
                    o[(((size_t)b * H + h) * Nq + n) * d + c] =
                        dt == DT_BF16 ? f32_from_bf16(((uint16_t*)ho)[off]) : ((float*)ho)[off];
                }
                if (layout == LAYOUT_PADDED)
                    for (int c = d; c < d + 8; c++) {
                        const size_t off = at(&vo, H, b, h, n, c);
                        const unsigned char* e = ho + off * es;
                        for (size_t x = 0; x < es; x++) touched_pad += e[x] != 0xFF;
                    }
            }
    cr_assert_eq(touched_pad, 0, "the kernel wrote %zu bytes of O's row padding", touched_pad);
    free(ho);
    if (fused)
        mem_free(fused);
    else
        mem_free(dq), mem_free(dk), mem_free(dv);
    mem_free(dO), mem_free(dL);
}

static void round_bf16(float* x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = f32_from_bf16(bf16_from_f32(x[i]));
}

// ---------------------------------------------------------------- fixture (the course's test)
static void fixture_case(int causal, dtype_t dt, int layout) {
    SKIP_WITHOUT_GPU();
    const size_t nqd = (size_t)FX_BH * FX_N * FX_D, nl = (size_t)FX_BH * FX_N;
    float* q = load_fixture("q", nqd);
    float* k = load_fixture("k", nqd);
    float* v = load_fixture("v", nqd);
    float* O_ref = load_fixture(causal ? "causal_O" : "noncausal_O", nqd);
    float* L_ref = load_fixture(causal ? "causal_L" : "noncausal_L", nl);
    if (dt == DT_BF16) round_bf16(q, nqd), round_bf16(k, nqd), round_bf16(v, nqd);
    float* o = poisoned_f32(nqd);
    float* l = poisoned_f32(nl);
    // bf16: every variant of the kernel at the fixture's head dim (the default last, so that the
    // fp32-only checks below see the default's output).
    const flash_variant_t* vl = NULL;
    const int nvar = dt == DT_BF16 ? flash_fwd_bf16_variants(FX_D, &vl) : 1;
    for (int var = nvar - 1; var >= 0; var--) {
        if (dt == DT_BF16) flash_fwd_bf16_set_variant(FX_D, var);
        memset(o, 0xFF, nqd * sizeof(float));
        memset(l, 0xFF, nl * sizeof(float));
        run_cuda(q, k, v, o, l, FX_BH, 1, FX_N, FX_N, FX_D, causal, dt, layout);
        // fp32: the course's tolerance (rtol = atol = 1e-2). bf16: rounding q, k, v to 8-bit
        // mantissas moves scores by ~1e-2 before the softmax, so 3e-2 (the fp32 inputs are the torch ones).
        const double tol = dt == DT_BF16 ? 3e-2 : 1e-2;
        char what[160];
        snprintf(what, sizeof what, "CUDA O vs torch fixture (variant %s)", vl ? vl[var].name : "-");
        ASSERT_ALLCLOSE(o, O_ref, nqd, tol, tol, what);
        snprintf(what, sizeof what, "CUDA L vs torch fixture (variant %s)", vl ? vl[var].name : "-");
        ASSERT_ALLCLOSE(l, L_ref, nl, tol, tol, what);
    }
    if (dt == DT_F32) {
        // fp32 path: only summation order and ex2.approx (2 ulp) differ from float64.
        ASSERT_ALLCLOSE(o, O_ref, nqd, 1e-4, 1e-5, "CUDA O vs torch fixture (fp32, tight)");
        ASSERT_ALLCLOSE(l, L_ref, nl, 1e-5, 1e-5, "CUDA L vs torch fixture (fp32, tight)");
    }
    free(q), free(k), free(v), free(O_ref), free(L_ref), free(o), free(l);
}

Test(cuda, fixture_f32_noncausal) { fixture_case(0, DT_F32, LAYOUT_CONTIGUOUS); }
Test(cuda, fixture_f32_causal) { fixture_case(1, DT_F32, LAYOUT_CONTIGUOUS); }
Test(cuda, fixture_bf16_noncausal) { fixture_case(0, DT_BF16, LAYOUT_CONTIGUOUS); }
Test(cuda, fixture_bf16_causal) { fixture_case(1, DT_BF16, LAYOUT_FUSED_QKV); }

// ---------------------------------------------------------------- random shapes vs references
static void random_case(int B, int H, int Nq, int Nk, int d, int causal, dtype_t dt, int layout, uint64_t seed) {
    const int BH = B * H;
    const size_t nq = (size_t)BH * Nq * d, nk = (size_t)BH * Nk * d, nl = (size_t)BH * Nq;
    float* q = randn_f32(nq, seed);
    float* k = randn_f32(nk, seed + 1);
    float* v = randn_f32(nk, seed + 2);
    if (dt == DT_BF16) round_bf16(q, nq), round_bf16(k, nk), round_bf16(v, nk);
    float* o_ref = poisoned_f32(nq);
    float* l_ref = poisoned_f32(nl);
    const float scale = 1.0f / sqrtf((float)d);
    attn_naive_forward_cpu(q, k, v, o_ref, l_ref, BH, Nq, Nk, d, causal, scale);
    float* o = poisoned_f32(nq);
    float* l = poisoned_f32(nl);
    // bf16: every variant of the kernel (the default, fa3 at d 64 and 128, among them).
    const flash_variant_t* vl = NULL;
    const int nvar = dt == DT_BF16 ? flash_fwd_bf16_variants(d, &vl) : 1;
    for (int var = 0; var < nvar; var++) {
        if (dt == DT_BF16) flash_fwd_bf16_set_variant(d, var);
        memset(o, 0xFF, nq * sizeof(float));
        memset(l, 0xFF, nl * sizeof(float));
        run_cuda(q, k, v, o, l, B, H, Nq, Nk, d, causal, dt, layout);
        char what[200];
        snprintf(what, sizeof what, "O (B %d H %d Nq %d Nk %d d %d %s %s layout %d variant %s)", B, H, Nq, Nk, d,
                 dtype_name(dt), causal ? "causal" : "full", layout, vl ? vl[var].name : "-");
        // bf16: P is rounded to bf16 before P V and O is stored in bf16 (2^-8 relative): 2e-2.
        // fp32: ex2.approx and summation order only.
        const double tol_o = dt == DT_BF16 ? 2e-2 : 1e-4;
        ASSERT_ALLCLOSE(o, o_ref, nq, tol_o, tol_o, what);
        snprintf(what, sizeof what, "L (B %d H %d Nq %d Nk %d d %d %s %s layout %d variant %s)", B, H, Nq, Nk, d,
                 dtype_name(dt), causal ? "causal" : "full", layout, vl ? vl[var].name : "-");
        // L comes from fp32 scores of (rounded) inputs in both paths: 1e-4 covers exp2/log rounding.
        ASSERT_ALLCLOSE(l, l_ref, nl, 1e-4, 1e-4, what);
    }
    if (dt == DT_BF16) flash_fwd_bf16_set_variant(d, FLASH_FWD_DEFAULT_VARIANT);
    // Also against the tiled CPU reference (the stage's chain: kernel = tiled = naive).
    if (dt == DT_F32 && Nq * Nk <= 129 * 1000) {
        flash_forward_cpu(q, k, v, o_ref, l_ref, BH, Nq, Nk, d, causal, scale, 64, 64);
        ASSERT_ALLCLOSE(o, o_ref, nq, 1e-4, 1e-4, "O vs tiled CPU reference");
        ASSERT_ALLCLOSE(l, l_ref, nl, 1e-4, 1e-4, "L vs tiled CPU reference");
    }
    free(q), free(k), free(v), free(o_ref), free(l_ref), free(o), free(l);
}

static void sweep(dtype_t dt, int causal) {
    SKIP_WITHOUT_GPU();
    const int shapes[][2] = {{1, 1}, {1, 17}, {17, 1}, {17, 129}, {129, 17}, {129, 129}, {1000, 129}, {129, 1000}, {1000, 1000}};
    const int dims[] = {16, 32, 64, 128};
    uint64_t seed = 100 + 10 * (uint64_t)causal + (uint64_t)dt;
    int n = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int di = 0; di < 4; di++, n++) {
            const int Nq = shapes[si][0], Nk = shapes[si][1];
            int layout = n % LAYOUT_COUNT;
            if (layout == LAYOUT_FUSED_QKV && Nq != Nk) layout = LAYOUT_BNHD;
            const int B = Nq * Nk >= 129 * 1000 ? 1 : 2, H = Nq * Nk >= 129 * 1000 ? 2 : 3;
            random_case(B, H, Nq, Nk, dims[di], causal, dt, layout, seed += 3);
        }
}

Test(cuda, random_shapes_f32_noncausal, .timeout = 300) { sweep(DT_F32, 0); }
Test(cuda, random_shapes_f32_causal, .timeout = 300) { sweep(DT_F32, 1); }
Test(cuda, random_shapes_bf16_noncausal, .timeout = 300) { sweep(DT_BF16, 0); }
Test(cuda, random_shapes_bf16_causal, .timeout = 300) { sweep(DT_BF16, 1); }

// B*H = 70000 > 65535 (the y/z grid limit): the 1-D grid must cover every head.
Test(cuda, many_heads_beyond_grid_y_limit, .timeout = 300) {
    SKIP_WITHOUT_GPU();
    random_case(2, 35000, 20, 20, 16, 1, DT_BF16, LAYOUT_CONTIGUOUS, 9001);
    random_case(2, 35000, 20, 20, 16, 0, DT_F32, LAYOUT_BNHD, 9002);
}
// The same at d 64 and 128, where random_case runs every variant: fa3 (wgmma) and its
// tensor maps (whose head axis is then 35000 long) must cover every head too.
Test(cuda, many_heads_every_variant_d64_d128, .timeout = 300) {
    SKIP_WITHOUT_GPU();
    random_case(2, 35000, 20, 20, 64, 1, DT_BF16, LAYOUT_BNHD, 9003);
    random_case(2, 35000, 20, 20, 128, 0, DT_BF16, LAYOUT_CONTIGUOUS, 9004);
}

// The plug-in table the model uses.
Test(cuda, impl_table) {
    const attention_impl_t* impl = flash_attention_fwd_impl();
    cr_assert_not_null(impl);
    cr_assert_str_eq(impl->name, "flash2_fwd");
    cr_assert_null(impl->backward, "forward-only implementation must leave backward NULL");
    cr_assert(impl->forward == flash_forward_cuda && impl->supports == flash_fwd_supports);
}
