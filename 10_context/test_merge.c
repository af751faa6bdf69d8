// Stage 10 unit tests without MPI: the LSE merge (against attention over the union of the key
// sets, associativity, commutativity, the empty block) and the splits (chunk ranges, ownership,
// work per rank).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/rng.h"
#include "tests/harness.h"
#include "10_context/context.h"

#define D 8
#define NK 30

// Attention of one query row over keys [a, b) in float64: O (D values) and L.
static void row_attention(const double* s, const double* v, int a, int b, double* o, double* l) {
    double m = -INFINITY, sum = 0;
    for (int j = a; j < b; j++) m = s[j] > m ? s[j] : m;
    for (int x = 0; x < D; x++) o[x] = 0;
    for (int j = a; j < b; j++) {
        const double p = exp(s[j] - m);
        sum += p;
        for (int x = 0; x < D; x++) o[x] += p * v[j * D + x];
    }
    for (int x = 0; x < D; x++) o[x] /= sum;
    *l = m + log(sum);
}

// Scores spread wide (x 6) so the merge's weights are far from even.
static void draw(double* s, double* v, uint64_t seed) {
    for (int j = 0; j < NK; j++) s[j] = 6.0 * rng_normal(seed, (uint64_t)j);
    for (int i = 0; i < NK * D; i++) v[i] = rng_normal(seed + 7, (uint64_t)i);
}

static void to_f(const double* a, float* f, int n) {
    for (int i = 0; i < n; i++) f[i] = (float)a[i];
}

// The float64 merge (the reference's) and the fp32 one (the ring's), each on its own test.
Test(merge, f64_two_halves_equal_attention_over_all_keys) {
    for (uint64_t seed = 1; seed <= 20; seed++) {
        double s[NK], v[NK * D], oa[D], ob[D], o[D], la, lb, l;
        draw(s, v, seed);
        const int cut = 1 + (int)(seed % (NK - 1));
        row_attention(s, v, 0, cut, oa, &la);
        row_attention(s, v, cut, NK, ob, &lb);
        row_attention(s, v, 0, NK, o, &l);
        double o64[D], l64 = la;
        memcpy(o64, oa, sizeof oa);
        cp_merge_f64(o64, &l64, ob, &lb, 1, D);
        for (int x = 0; x < D; x++) cr_assert(fabs(o64[x] - o[x]) <= 1e-12, "f64 O[%d] %g vs %g", x, o64[x], o[x]);
        cr_assert(fabs(l64 - l) <= 1e-12, "f64 L %g vs %g", l64, l);
    }
}

Test(merge, two_halves_equal_attention_over_all_keys) {
    for (uint64_t seed = 1; seed <= 20; seed++) {
        double s[NK], v[NK * D], oa[D], ob[D], o[D], la, lb, l;
        draw(s, v, seed);
        const int cut = 1 + (int)(seed % (NK - 1));
        row_attention(s, v, 0, cut, oa, &la);
        row_attention(s, v, cut, NK, ob, &lb);
        row_attention(s, v, 0, NK, o, &l);
        float fo[D], fob[D], fl = (float)la, flb = (float)lb, want[D], wl = (float)l;
        to_f(oa, fo, D);
        to_f(ob, fob, D);
        to_f(o, want, D);
        cp_merge_f32(fo, &fl, fob, &flb, 1, D);
        // inputs rounded to fp32 (half an ulp each) and a handful of fp32 operations
        ASSERT_ALLCLOSE(fo, want, D, 1e-6, 1e-6, "f32 merged O");
        ASSERT_ALLCLOSE(&fl, &wl, 1, 1e-6, 1e-6, "f32 merged L");
    }
}

// (A + B) + C against A + (B + C) in fp32: the two orders round differently, by a few ulp of
// the result (each merge: one exp per side, a division, a fused weighting: 4 roundings).
Test(merge, associative_within_a_few_ulp) {
    for (uint64_t seed = 1; seed <= 50; seed++) {
        double s[NK], v[NK * D], o3[3][D], l3[3];
        draw(s, v, seed);
        const int c1 = 1 + (int)(seed % 10), c2 = 12 + (int)(seed % 17);
        row_attention(s, v, 0, c1, o3[0], &l3[0]);
        row_attention(s, v, c1, c2, o3[1], &l3[1]);
        row_attention(s, v, c2, NK, o3[2], &l3[2]);
        float a[D], b[D], cc[D], la = (float)l3[0], lb = (float)l3[1], lc = (float)l3[2];
        to_f(o3[0], a, D);
        to_f(o3[1], b, D);
        to_f(o3[2], cc, D);
        float left[D], ll = la, bc[D], lbc = lb;
        memcpy(left, a, sizeof a);
        cp_merge_f32(left, &ll, b, &lb, 1, D);
        cp_merge_f32(left, &ll, cc, &lc, 1, D);
        memcpy(bc, b, sizeof b);
        cp_merge_f32(bc, &lbc, cc, &lc, 1, D);
        float right[D], lr = la;
        memcpy(right, a, sizeof a);
        cp_merge_f32(right, &lr, bc, &lbc, 1, D);
        ASSERT_ALLCLOSE(left, right, D, 1e-6, 1e-6, "(A+B)+C vs A+(B+C): O");
        ASSERT_ALLCLOSE(&ll, &lr, 1, 1e-6, 1e-6, "(A+B)+C vs A+(B+C): L");
    }
}

// A + B and B + A: the same operations on swapped operands, bit for bit.
Test(merge, commutative_bit_for_bit) {
    for (uint64_t seed = 1; seed <= 50; seed++) {
        double s[NK], v[NK * D], oa[D], ob[D], la, lb;
        draw(s, v, seed);
        const int cut = 1 + (int)(seed % (NK - 1));
        row_attention(s, v, 0, cut, oa, &la);
        row_attention(s, v, cut, NK, ob, &lb);
        float A[D], B[D], fa = (float)la, fb = (float)lb;
        to_f(oa, A, D);
        to_f(ob, B, D);
        float ab[D], ba[D], lab = fa, lba = fb;
        memcpy(ab, A, sizeof A);
        memcpy(ba, B, sizeof B);
        cp_merge_f32(ab, &lab, B, &fb, 1, D);
        cp_merge_f32(ba, &lba, A, &fa, 1, D);
        cr_assert(memcmp(ab, ba, sizeof ab) == 0 && lab == lba, "A+B differs from B+A (seed %d)", (int)seed);
    }
}

// The empty block, as -inf (no key seen) and as the references' -1e6 masking, on either side.
Test(merge, an_all_masked_block_is_the_identity) {
    const float masked[2] = {-INFINITY, -1e6f + 3.0f};
    float real[D], lreal = 2.5f, junk[D];
    for (int x = 0; x < D; x++) {
        real[x] = 0.1f * (float)(x - 3);
        junk[x] = 100.0f + (float)x;
    }
    for (int m = 0; m < 2; m++) {
        float o[D], l = lreal, lm = masked[m];
        memcpy(o, real, sizeof o);
        cp_merge_f32(o, &l, junk, &lm, 1, D);  // real + empty
        cr_assert(memcmp(o, real, sizeof o) == 0 && l == lreal, "real + empty (L %g) changed the row", (double)masked[m]);
        memcpy(o, junk, sizeof o);
        l = masked[m];
        cp_merge_f32(o, &l, real, &lreal, 1, D);  // empty + real
        cr_assert(memcmp(o, real, sizeof o) == 0 && l == lreal, "empty (L %g) + real is not the real row", (double)masked[m]);
    }
    // empty + empty stays empty, without NaN
    float o[D] = {0}, l = -INFINITY, ob[D] = {0}, lb = -INFINITY;
    cp_merge_f32(o, &l, ob, &lb, 1, D);
    cr_assert(l == -INFINITY, "empty + empty: L %g", (double)l);
    for (int x = 0; x < D; x++) cr_assert(o[x] == 0.0f, "empty + empty: O[%d] = %g", x, (double)o[x]);
}

// ------------------------------------------------------------------ splits
Test(split, chunks_cover_the_sequence_once) {
    for (int sp = 0; sp < 2; sp++)
        for (int P = 1; P <= 8; P++)
            for (int N = cp_num_chunks(sp, P); N < 70; N += 7) {
                int* owner = calloc((size_t)N, sizeof(int));
                int total = 0;
                for (int r = 0; r < P; r++) {
                    int ch[CP_MAX_CHUNKS];
                    const int n = cp_rank_chunks(sp, P, r, ch);
                    cr_assert_eq(n, sp == CP_SPLIT_ZIGZAG ? 2 : 1);
                    int off = 0;
                    for (int i = 0; i < n; i++) {
                        int st, len;
                        cp_chunk_range(N, cp_num_chunks(sp, P), ch[i], &st, &len);
                        cr_assert(len >= N / cp_num_chunks(sp, P) && len <= N / cp_num_chunks(sp, P) + 1);
                        cr_assert_eq(cp_chunk_offset(sp, N, P, r, i), off);
                        off += len;
                        for (int t = st; t < st + len; t++) owner[t]++;
                    }
                    cr_assert_eq(cp_rank_tokens(sp, N, P, r), off);
                    total += off;
                }
                cr_assert_eq(total, N, "%s P %d N %d: %d tokens held", cp_split_name(sp), P, N, total);
                for (int t = 0; t < N; t++) cr_assert_eq(owner[t], 1, "token %d held %d times", t, owner[t]);
                free(owner);
            }
}

Test(split, zigzag_pairs_chunk_r_with_2p_minus_1_minus_r) {
    int ch[CP_MAX_CHUNKS];
    cr_assert_eq(cp_rank_chunks(CP_SPLIT_ZIGZAG, 4, 1, ch), 2);
    cr_assert(ch[0] == 1 && ch[1] == 6, "rank 1 of 4 holds %d, %d; want 1, 6", ch[0], ch[1]);
    cr_assert_eq(cp_rank_chunks(CP_SPLIT_PLAIN, 4, 3, ch), 1);
    cr_assert_eq(ch[0], 3);
}

Test(split, block_kind) {
    cr_assert_eq(cp_block_kind(3, 1, 1), CP_BLOCK_FULL);
    cr_assert_eq(cp_block_kind(3, 3, 1), CP_BLOCK_DIAG);
    cr_assert_eq(cp_block_kind(1, 3, 1), CP_BLOCK_SKIP);
    cr_assert_eq(cp_block_kind(1, 3, 0), CP_BLOCK_FULL);
    cr_assert_eq(cp_block_kind(3, 3, 0), CP_BLOCK_FULL);
}

// Plain causal, N = P k T: rank r sees r full k x k blocks and one diagonal of k(k+1)/2 tile
// pairs. Zigzag evens it out: every rank the same. Non-causal: every rank the same either way.
Test(split, work_plain_is_uneven_zigzag_is_even) {
    const int T = 16, k = 4;
    for (int P = 2; P <= 8; P++) {
        const int N = P * k * T;
        for (int r = 0; r < P; r++) {
            const long long w = cp_rank_work(CP_SPLIT_PLAIN, N, P, r, 1, T);
            cr_assert_eq(w, (long long)r * k * k + k * (k + 1) / 2, "plain P %d rank %d: work %lld", P, r, w);
            cr_assert_eq(cp_rank_work(CP_SPLIT_PLAIN, N, P, r, 0, T), (long long)P * k * k);
        }
        const int Nz = 2 * P * k * T;  // zigzag chunks of k tiles too
        const long long w0 = cp_rank_work(CP_SPLIT_ZIGZAG, Nz, P, 0, 1, T);
        for (int r = 1; r < P; r++)
            cr_assert_eq(cp_rank_work(CP_SPLIT_ZIGZAG, Nz, P, r, 1, T), w0, "zigzag P %d: rank %d differs from rank 0", P, r);
        // total work is the causal triangle whatever the split (2P chunks of k tiles)
        long long tot = 0;
        for (int r = 0; r < P; r++) tot += cp_rank_work(CP_SPLIT_ZIGZAG, Nz, P, r, 1, T);
        // 2P(2P-1)/2 chunk pairs below the diagonal of k x k tiles, 2P diagonals of k(k+1)/2
        const long long want = (long long)P * (2 * P - 1) * k * k + (long long)P * k * (k + 1);
        cr_assert_eq(tot, want, "zigzag P %d: total %lld, want %lld", P, tot, want);
    }
}

Test(split, too_short_a_sequence_is_refused) {
    char err[256];
    cr_assert_eq(cp_check_sizes(CP_SPLIT_ZIGZAG, 7, 4, err, sizeof err), -1);
    cr_assert(strstr(err, "8") != NULL, "%s", err);
    cr_assert_eq(cp_check_sizes(CP_SPLIT_PLAIN, 7, 4, err, sizeof err), 0);
}
