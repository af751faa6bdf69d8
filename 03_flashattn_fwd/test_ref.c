// Stage 03, CPU: the naive and the tiled (FlashAttention-2 Algorithm 1) references against
// PyTorch's fixture, and against each other on ragged shapes and every tile size we allow.
#include <stdio.h>
#include "03_flashattn_fwd/test_util.h"

static void check_against_fixture(int causal, int tiled, int Bq, int Bk) {
    const size_t nqd = (size_t)FX_BH * FX_N * FX_D;
    float* q = load_fixture("q", nqd);
    float* k = load_fixture("k", nqd);
    float* v = load_fixture("v", nqd);
    float* O_ref = load_fixture(causal ? "causal_O" : "noncausal_O", nqd);
    float* L_ref = load_fixture(causal ? "causal_L" : "noncausal_L", (size_t)FX_BH * FX_N);
    float* o = poisoned_f32(nqd);
    float* lse = poisoned_f32((size_t)FX_BH * FX_N);
    const float scale = 1.0f / sqrtf((float)FX_D);
    if (tiled)
        flash_forward_cpu(q, k, v, o, lse, FX_BH, FX_N, FX_N, FX_D, causal, scale, Bq, Bk);
    else
        attn_naive_forward_cpu(q, k, v, o, lse, FX_BH, FX_N, FX_N, FX_D, causal, scale);
    // The course's tolerance for O and L (the reference here is fp32 vs torch float64).
    ASSERT_ALLCLOSE(o, O_ref, nqd, 1e-2, 1e-2, "O vs torch fixture");
    ASSERT_ALLCLOSE(lse, L_ref, (size_t)FX_BH * FX_N, 1e-2, 1e-2, "L vs torch fixture");
    // Much tighter too: fp32 sums over 64 products and 128 keys stay near 1e-5 relative.
    ASSERT_ALLCLOSE(o, O_ref, nqd, 1e-4, 1e-5, "O vs torch fixture (tight)");
    ASSERT_ALLCLOSE(lse, L_ref, (size_t)FX_BH * FX_N, 1e-5, 1e-5, "L vs torch fixture (tight)");
    free(q), free(k), free(v), free(O_ref), free(L_ref), free(o), free(lse);
}

Test(ref, naive_fixture_noncausal) { check_against_fixture(0, 0, 0, 0); }
Test(ref, naive_fixture_causal) { check_against_fixture(1, 0, 0, 0); }
Test(ref, tiled_fixture_noncausal) { check_against_fixture(0, 1, 16, 16); }
Test(ref, tiled_fixture_causal) { check_against_fixture(1, 1, 16, 16); }
Test(ref, tiled_fixture_causal_uneven_tiles) { check_against_fixture(1, 1, 48, 32); }
Test(ref, tiled_fixture_noncausal_big_tiles) { check_against_fixture(0, 1, 64, 128); }

// Tiled vs naive on shapes that are not tile multiples, Nq != Nk both ways, every d.
Test(ref, tiled_vs_naive_ragged) {
    const int shapes[][2] = {{1, 1}, {1, 17}, {17, 1}, {17, 17}, {33, 129}, {129, 40}, {100, 100}};
    const int dims[] = {16, 32, 64, 128};
    const int tiles[][2] = {{16, 16}, {32, 16}, {16, 48}, {64, 64}};
    uint64_t seed = 7;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t di = 0; di < 4; di++)
            for (int causal = 0; causal < 2; causal++) {
                const int BH = 3, Nq = shapes[si][0], Nk = shapes[si][1], d = dims[di];
                const size_t nq = (size_t)BH * Nq * d, nk = (size_t)BH * Nk * d;
                float* q = randn_f32(nq, seed++);
                float* k = randn_f32(nk, seed++);
                float* v = randn_f32(nk, seed++);
                float* o_ref = poisoned_f32(nq);
                float* l_ref = poisoned_f32((size_t)BH * Nq);
                const float scale = 1.0f / sqrtf((float)d);
                attn_naive_forward_cpu(q, k, v, o_ref, l_ref, BH, Nq, Nk, d, causal, scale);
                const int ti = (int)((si + di) % 4);
                float* o = poisoned_f32(nq);
                float* l = poisoned_f32((size_t)BH * Nq);
                flash_forward_cpu(q, k, v, o, l, BH, Nq, Nk, d, causal, scale, tiles[ti][0], tiles[ti][1]);
                char what[128];
                snprintf(what, sizeof what, "tiled O (Nq %d Nk %d d %d causal %d Bq %d Bk %d)", Nq, Nk, d, causal,
                         tiles[ti][0], tiles[ti][1]);
                // fp32 online softmax vs double sums: rounding only, far below 1e-4.
                ASSERT_ALLCLOSE(o, o_ref, nq, 1e-4, 1e-5, what);
                snprintf(what, sizeof what, "tiled L (Nq %d Nk %d d %d causal %d)", Nq, Nk, d, causal);
                ASSERT_ALLCLOSE(l, l_ref, (size_t)BH * Nq, 1e-5, 1e-5, what);
                free(q), free(k), free(v), free(o_ref), free(l_ref), free(o), free(l);
            }
}

// Causal with Nq > Nk: rows past the last key see every key; with Nq = 1 only key 0.
Test(ref, causal_single_key_row_is_v0) {
    const int Nq = 3, Nk = 5, d = 16;
    float* q = randn_f32((size_t)Nq * d, 1);
    float* k = randn_f32((size_t)Nk * d, 2);
    float* v = randn_f32((size_t)Nk * d, 3);
    float* o = poisoned_f32((size_t)Nq * d);
    float* l = poisoned_f32(Nq);
    flash_forward_cpu(q, k, v, o, l, 1, Nq, Nk, d, 1, 0.25f, 16, 16);
    // Row 0 sees only key 0: P = [1, 0, ...] so O_0 = V_0 exactly (up to exp(-1e6) = 0).
    ASSERT_ALLCLOSE(o, v, (size_t)d, 0.0, 1e-6, "row 0 = V_0");
    float s00 = 0.0f;
    for (int c = 0; c < d; c++) s00 += q[c] * k[c];
    s00 *= 0.25f;
    ASSERT_ALLCLOSE(l, &s00, 1, 1e-6, 1e-6, "L_0 = S_00");
    free(q), free(k), free(v), free(o), free(l);
}
