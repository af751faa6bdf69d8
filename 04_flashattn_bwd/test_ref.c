// Stage 04 CPU tests: the naive and tiled (Algorithm 2) backward references against PyTorch's
// gradients (the course's test shape), and against each other on ragged shapes.
#include "04_flashattn_bwd/test_bwd_util.h"

// Runs `which` (0 naive, 1 tiled) on the fixture and compares dQ, dK, dV with PyTorch's.
static void check_fixture(int causal, int which, int Bq, int Bk) {
    const size_t n = (size_t)FX_BH * FX_N * FX_D, nl = (size_t)FX_BH * FX_N;
    const char* tag = causal ? "causal" : "noncausal";
    char name[64];
    float* q = load_fixture("q", n);
    float* k = load_fixture("k", n);
    float* v = load_fixture("v", n);
    float* dO = load_fixture("dO", n);
    snprintf(name, sizeof name, "%s_O", tag);
    float* O = load_fixture(name, n);
    snprintf(name, sizeof name, "%s_L", tag);
    float* L = load_fixture(name, nl);
    float *dq = poisoned_f32(n), *dk = poisoned_f32(n), *dv = poisoned_f32(n);
    const float scale = 1.0f / sqrtf((float)FX_D);
    if (which == 0)
        attn_naive_backward_cpu(q, k, v, O, dO, L, dq, dk, dv, FX_BH, FX_N, FX_N, FX_D, causal, scale);
    else
        flash_backward_cpu(q, k, v, O, dO, L, dq, dk, dv, FX_BH, FX_N, FX_N, FX_D, causal, scale, Bq, Bk);
    const char* names[3] = {"dQ", "dK", "dV"};
    float* got[3] = {dq, dk, dv};
    for (int x = 0; x < 3; x++) {
        snprintf(name, sizeof name, "%s_%s", tag, names[x]);
        float* want = load_fixture(name, n);
        // The course's tolerance for the attention gradients.
        ASSERT_ALLCLOSE(got[x], want, n, 1e-2, 1e-2, name);
        free(want);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L); free(dq); free(dk); free(dv);
}

Test(bwd_ref, naive_matches_pytorch_noncausal) { check_fixture(0, 0, 0, 0); }
Test(bwd_ref, naive_matches_pytorch_causal) { check_fixture(1, 0, 0, 0); }
Test(bwd_ref, tiled_matches_pytorch_noncausal) { check_fixture(0, 1, 16, 32); }
Test(bwd_ref, tiled_matches_pytorch_causal) { check_fixture(1, 1, 32, 16); }
// Tiles that do not divide 128 (ragged last tiles on both axes).
Test(bwd_ref, tiled_matches_pytorch_causal_ragged_tiles) { check_fixture(1, 1, 48, 80); }

// Tiled against naive on a shape with Nq != Nk, odd sizes and ragged tiles.
static void tiled_vs_naive(int BH, int Nq, int Nk, int d, int causal, int Bq, int Bk, uint64_t seed) {
    const size_t nq = (size_t)BH * Nq * d, nk = (size_t)BH * Nk * d, nl = (size_t)BH * Nq;
    float *q = randn_f32(nq, seed), *k = randn_f32(nk, seed + 1), *v = randn_f32(nk, seed + 2);
    float *dO = randn_f32(nq, seed + 3), *O = poisoned_f32(nq), *L = poisoned_f32(nl);
    const float scale = 1.0f / sqrtf((float)d);
    attn_naive_forward_cpu(q, k, v, O, L, BH, Nq, Nk, d, causal, scale);
    float *dq0 = poisoned_f32(nq), *dk0 = poisoned_f32(nk), *dv0 = poisoned_f32(nk);
    float *dq1 = poisoned_f32(nq), *dk1 = poisoned_f32(nk), *dv1 = poisoned_f32(nk);
    attn_naive_backward_cpu(q, k, v, O, dO, L, dq0, dk0, dv0, BH, Nq, Nk, d, causal, scale);
    flash_backward_cpu(q, k, v, O, dO, L, dq1, dk1, dv1, BH, Nq, Nk, d, causal, scale, Bq, Bk);
    // fp32 tiled sums against double naive sums: a few ulp per term over ~100 terms.
    ASSERT_ALLCLOSE(dq1, dq0, nq, 1e-4, 1e-4, "dQ tiled vs naive");
    ASSERT_ALLCLOSE(dk1, dk0, nk, 1e-4, 1e-4, "dK tiled vs naive");
    ASSERT_ALLCLOSE(dv1, dv0, nk, 1e-4, 1e-4, "dV tiled vs naive");
    free(q); free(k); free(v); free(dO); free(O); free(L);
    free(dq0); free(dk0); free(dv0); free(dq1); free(dk1); free(dv1);
}

Test(bwd_ref, tiled_vs_naive_nq_lt_nk_causal) { tiled_vs_naive(3, 37, 101, 24, 1, 16, 32, 11); }
Test(bwd_ref, tiled_vs_naive_nq_gt_nk_causal) { tiled_vs_naive(2, 93, 29, 16, 1, 32, 16, 12); }
Test(bwd_ref, tiled_vs_naive_noncausal) { tiled_vs_naive(2, 71, 53, 40, 0, 16, 16, 13); }

// Keys no query sees (causal, Nk > Nq) get zero gradients, and a single key gets all the mass.
Test(bwd_ref, unseen_keys_get_zero_gradient) {
    const int BH = 1, Nq = 5, Nk = 9, d = 8;
    float *q = randn_f32((size_t)Nq * d, 21), *k = randn_f32((size_t)Nk * d, 22), *v = randn_f32((size_t)Nk * d, 23);
    float *dO = randn_f32((size_t)Nq * d, 24), *O = poisoned_f32((size_t)Nq * d), *L = poisoned_f32(Nq);
    attn_naive_forward_cpu(q, k, v, O, L, BH, Nq, Nk, d, 1, 0.5f);
    float *dq = poisoned_f32((size_t)Nq * d), *dk = poisoned_f32((size_t)Nk * d), *dv = poisoned_f32((size_t)Nk * d);
    flash_backward_cpu(q, k, v, O, dO, L, dq, dk, dv, BH, Nq, Nk, d, 1, 0.5f, 4, 4);
    for (int j = Nq; j < Nk; j++)
        for (int c = 0; c < d; c++) {
            cr_assert_eq(dk[j * d + c], 0.0f, "dK[%d][%d] = %g, key %d is seen by no query", j, c, dk[j * d + c], j);
            cr_assert_eq(dv[j * d + c], 0.0f, "dV[%d][%d] = %g", j, c, dv[j * d + c]);
        }
    // Query 0 sees only key 0: its softmax is 1 there, so dQ_0 = scale * 1 * (dP - D) K_0 = 0.
    for (int c = 0; c < d; c++) cr_assert(fabsf(dq[c]) < 1e-5f, "dQ[0][%d] = %g, expected 0", c, dq[c]);
    free(q); free(k); free(v); free(dO); free(O); free(L); free(dq); free(dk); free(dv);
}
