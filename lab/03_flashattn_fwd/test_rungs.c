// The lab's tests for stage 03's forward rungs. On the CPU: the rung table (names, tile sizes,
// no name shared with a shipped variant), the lookup by name and the rule that says where a rung
// can run, and the bench's bad input. On a GPU: every rung against the naive CPU reference on
// ragged shapes, causal and not, Nq != Nk (rungs that need sm_90a skip on other GPUs).
// Run: make test-lab   (build/lab/03_flashattn_fwd/test_lab03 --filter 'rungs/*')
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "common/dtype.h"
#include "03_flashattn_fwd/test_util.h"
#include "lab/03_flashattn_fwd/rungs.h"

static const int dims[] = {16, 32, 64, 128};

// "w4 mt2 bk64" with an optional kernel prefix, or fa3's "w12 bq128 bk128": Bq from the name.
static int bq_from_name(const char* s) {
    const char* pre[] = {"pipe ", "wgmma ", "wgmma-ov ", "fa3 ", "fa3-nopp ", "fa3-noov "};
    int fa3 = 0;
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(s, pre[i], strlen(pre[i])) == 0) {
            fa3 = i >= 3;
            s += strlen(pre[i]);
            break;
        }
    int w = 0, mt = 0, bk = 0, bq = 0;
    if (fa3) return sscanf(s, "w%d bq%d bk%d", &w, &bq, &bk) == 3 && w == 4 * (1 + bq / 64) ? bq : -1;
    return sscanf(s, "w%d mt%d bk%d", &w, &mt, &bk) == 3 ? 16 * mt * w : -1;
}

Test(rungs, table) {
    int total = 0, wgmma = 0, tma = 0;
    for (int i = 0; i < 4; i++) {
        const flash_variant_t *l, *shipped;
        const int n = lab03_rungs(dims[i], &l), ns = flash_fwd_bf16_variants(dims[i], &shipped);
        cr_assert(n >= 1 && l, "head dim %d has no rungs", dims[i]);
        for (int v = 0; v < n; v++) {
            cr_assert_not_null(l[v].launch, "%s", l[v].name);
            cr_assert_eq(bq_from_name(l[v].name), l[v].bq, "d %d '%s': Bq %d", dims[i], l[v].name, l[v].bq);
            cr_assert_eq(l[v].dflt, 0, "%s: a rung is never a default", l[v].name);
            cr_assert(!l[v].tma || l[v].wgmma, "%s: TMA rungs are sm_90a rungs", l[v].name);
            for (int u = 0; u < v; u++) cr_assert_str_neq(l[u].name, l[v].name, "d %d: two rungs named alike", dims[i]);
            for (int u = 0; u < ns; u++)
                cr_assert_str_neq(shipped[u].name, l[v].name, "d %d: '%s' also ships", dims[i], l[v].name);
            total++, wgmma += l[v].wgmma, tma += l[v].tma;
        }
    }
    // 4 + 4 + 14 + 9: with the 6 shipped rows, the 37 the forward's tables held before the split.
    cr_assert_eq(total, 31, "%d rungs", total);
    cr_assert_eq(wgmma, 9, "%d sm_90a rungs (wgmma, wgmma-ov, fa3 variants)", wgmma);
    cr_assert_eq(tma, 5, "%d TMA rungs (fa3 with 2 consumers at d 64, the ablations)", tma);
    const flash_variant_t* l;
    cr_assert_eq(lab03_rungs(48, &l), 0);
    cr_assert_null(l);
}

Test(rungs, find_by_name) {
    int shipped = -1;
    const flash_variant_t* r = lab03_find(64, "pipe w4 mt1 bk64", &shipped);
    cr_assert(r && shipped == 0 && strcmp(r->name, "pipe w4 mt1 bk64") == 0);
    r = lab03_find(64, "fa3 w16 bq192 bk128", &shipped);  // the shipped default at d 64
    cr_assert(r && shipped == 1 && r->dflt);
    r = lab03_find(128, "w8 mt1 bk64", &shipped);  // the shipped fallback at d 128
    cr_assert(r && shipped == 1 && !r->wgmma);
    cr_assert_null(lab03_find(16, "wgmma w8 mt1 bk64", NULL), "wgmma is a d-64 rung only");
    cr_assert_null(lab03_find(64, "w4 mt2", NULL));
    cr_assert_null(lab03_find(64, NULL, NULL));
}

Test(rungs, where_a_rung_runs) {
    attn_args_t a = {0};
    a.B = 2, a.H = 3, a.Nq = 100, a.Nk = 70, a.d = 64, a.dtype = DT_BF16, a.scale = 0.125f;
    attn_contiguous_strides(a.sq, a.H, a.Nq, a.d);
    attn_contiguous_strides(a.sk, a.H, a.Nk, a.d);
    attn_contiguous_strides(a.sv, a.H, a.Nk, a.d);
    attn_contiguous_strides(a.so, a.H, a.Nq, a.d);
    char err[256] = "";
    const flash_variant_t* mma = lab03_find(64, "w8 mt1 bk64", NULL);
    const flash_variant_t* wg = lab03_find(64, "wgmma-ov w12 mt1 bk64", NULL);
    const flash_variant_t* fa3 = lab03_find(64, "fa3-nopp w12 bq128 bk128", NULL);
    cr_assert(mma && wg && fa3);
    cr_assert_eq(lab03_can_run(mma, &a, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lab03_can_run(wg, &a, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lab03_can_run(fa3, &a, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lab03_can_run(wg, &a, 0, err, sizeof err), -1);
    cr_assert(strstr(err, "sm_90a"), "%s", err);
    a.sk[1] = a.sv[1] = 0;  // K and V broadcast over heads: mma.sync takes it, TMA cannot
    cr_assert_eq(lab03_can_run(mma, &a, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lab03_can_run(fa3, &a, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "TMA"), "%s", err);
    a.sk[1] = a.sv[1] = (int64_t)a.Nk * a.d;
    a.B = 1 << 20, a.H = 1 << 10, a.Nq = 1 << 10;  // 2^38 rows: too many blocks at any Bq
    cr_assert_eq(lab03_can_run(mma, &a, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "2^31"), "%s", err);
    cr_assert_eq(lab03_can_run(NULL, &a, 1, err, sizeof err), -1);
}

static int run_bench(const char* args, char* out, size_t len) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/lab/03_flashattn_fwd/rungs %s", build_dir(), args);
    return run_capture(cmd, out, len);
}

Test(rungs, bench_bad_input_and_list) {
    const char* bad[][2] = {{"--d 48", "--d: head dim 48 not supported"},
                            {"--rung nosuch --d 64", "--rung: no variant or rung 'nosuch'"},
                            {"--N 0", "--N: 0 out of range"},
                            {"--causal 2", "--causal must be 1 or 0"},
                            {"--reps 0", "--reps and --warmup must be >= 1"}};
    char out[8192];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(run_bench(bad[i][0], out, sizeof out), 2, "%s: %s", bad[i][0], out);
        cr_assert(strstr(out, bad[i][1]) && strstr(out, "error: "), "%s: %s", bad[i][0], out);
    }
    cr_assert_eq(run_bench("--list --d 64", out, sizeof out), 0, "%s", out);  // no GPU needed
    cr_assert(strstr(out, "lab      wgmma-ov w12 mt1 bk64") && strstr(out, "shipped  fa3 w16 bq192 bk128"), "%s", out);
}

// ---------------------------------------------------------------- GPU: every rung is correct
static void rung_case(int B, int H, int Nq, int Nk, int d, int causal, uint64_t seed, int* ran) {
    const int BH = B * H;
    const size_t nq = (size_t)BH * Nq * d, nk = (size_t)BH * Nk * d, nl = (size_t)BH * Nq;
    float* q = randn_f32(nq, seed);
    float* k = randn_f32(nk, seed + 1);
    float* v = randn_f32(nk, seed + 2);
    float* src[3] = {q, k, v};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < (t ? nk : nq); i++) src[t][i] = f32_from_bf16(bf16_from_f32(src[t][i]));
    float* o_ref = poisoned_f32(nq);
    float* l_ref = poisoned_f32(nl);
    const float scale = 1.0f / sqrtf((float)d);
    attn_naive_forward_cpu(q, k, v, o_ref, l_ref, BH, Nq, Nk, d, causal, scale);
    attn_args_t a = {0};
    a.B = B, a.H = H, a.Nq = Nq, a.Nk = Nk, a.d = d, a.dtype = DT_BF16, a.causal = causal, a.scale = scale;
    attn_contiguous_strides(a.sq, H, Nq, d);
    attn_contiguous_strides(a.sk, H, Nk, d);
    attn_contiguous_strides(a.sv, H, Nk, d);
    attn_contiguous_strides(a.so, H, Nq, d);
    void* dev[3];
    uint16_t* hb = malloc((nq > nk ? nq : nk) * 2);
    for (int t = 0; t < 3; t++) {
        const size_t n = t ? nk : nq;
        bf16_from_f32_array(hb, src[t], n);
        dev[t] = mem_alloc(DEV_CUDA, n * 2, MEM_OTHER);
        CUDA_CHECK(cudaMemcpy(dev[t], hb, n * 2, cudaMemcpyHostToDevice));
    }
    a.q = dev[0], a.k = dev[1], a.v = dev[2];
    a.o = mem_alloc(DEV_CUDA, nq * 2, MEM_OTHER);
    a.lse = mem_alloc(DEV_CUDA, nl * sizeof(float), MEM_OTHER);
    float* o = poisoned_f32(nq);
    float* l = poisoned_f32(nl);
    uint16_t* ho = malloc(nq * 2);
    const flash_variant_t* rl;
    const int n = lab03_rungs(d, &rl);
    for (int r = 0; r < n; r++) {
        char err[256], what[200];
        CUDA_CHECK(cudaMemset(a.o, 0xFF, nq * 2));
        CUDA_CHECK(cudaMemset(a.lse, 0xFF, nl * sizeof(float)));
        if (lab03_run(&rl[r], &a, 0, err, sizeof err) != 0) {
            cr_log_info("d %d: %s", d, err);  // an sm_90a rung on another GPU
            continue;
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(ho, a.o, nq * 2, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(l, a.lse, nl * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < nq; i++) o[i] = f32_from_bf16(ho[i]);
        snprintf(what, sizeof what, "O (rung '%s', B %d H %d Nq %d Nk %d d %d %s)", rl[r].name, B, H, Nq, Nk, d,
                 causal ? "causal" : "full");
        ASSERT_ALLCLOSE(o, o_ref, nq, 2e-2, 2e-2, what);  // P and O in bf16, as the lesson's tests
        snprintf(what, sizeof what, "L (rung '%s', B %d H %d Nq %d Nk %d d %d %s)", rl[r].name, B, H, Nq, Nk, d,
                 causal ? "causal" : "full");
        ASSERT_ALLCLOSE(l, l_ref, nl, 1e-4, 1e-4, what);
        (*ran)++;
    }
    for (int t = 0; t < 3; t++) mem_free(dev[t]);
    mem_free(a.o), mem_free(a.lse);
    free(q), free(k), free(v), free(o_ref), free(l_ref), free(o), free(l), free(ho), free(hb);
}

static void every_rung(int causal) {
    SKIP_WITHOUT_GPU();
    const int shapes[][4] = {{1, 2, 200, 200}, {2, 1, 130, 77}, {1, 2, 77, 300}, {1, 1, 1000, 1000}};
    int ran = 0;
    for (int di = 0; di < 4; di++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            rung_case(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], dims[di], causal,
                      500 + 17 * (uint64_t)s + (uint64_t)dims[di] + 1000 * (uint64_t)causal, &ran);
    cr_assert_geq(ran, 4 * 21, "only %d rung runs: the mma.sync and pipe rungs run on every GPU", ran);
}

Test(rungs, every_rung_vs_reference_causal, .timeout = 300) { every_rung(1); }
Test(rungs, every_rung_vs_reference_full, .timeout = 300) { every_rung(0); }
