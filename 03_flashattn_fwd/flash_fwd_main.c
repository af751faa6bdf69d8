// flash_fwd: run attention forward from the command line, on random inputs or on .npy files,
// and write O and L as .npy.
//   build/03_flashattn_fwd/flash_fwd --B 2 --H 4 --Nq 300 --Nk 300 --d 64 --causal --dtype bf16
//   build/03_flashattn_fwd/flash_fwd --q q.npy --k k.npy --v v.npy --causal --out results/attn
// .npy inputs are float32, [B, N, d] (one head) or [B, H, N, d]; k and v must have the same
// shape; O has q's shape, L is [B, Nq] or [B, H, Nq]. With --dtype bf16 the inputs are rounded
// to bf16 on the way in and O (bf16) is widened to float32 in the file.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/npy.h"
#include "common/rng.h"
#include "common/tensor.h"
#include "common/timer.h"
#include "03_flashattn_fwd/attn_naive.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "03_flashattn_fwd/flash_fwd_internal.h"

typedef struct {
    int B, H, Nq, Nk, d;
} shape_t;

// Loads q, k, v (.npy float32) and checks that their shapes agree.
static void load_inputs(const char* pq, const char* pk, const char* pv, tensor_t* q, tensor_t* k, tensor_t* v,
                        shape_t* s) {
    *q = npy_load(pq, DT_F32, -1, NULL);
    *k = npy_load(pk, DT_F32, -1, NULL);
    *v = npy_load(pv, DT_F32, -1, NULL);
    char a[96], b[96];
    if (q->rank != 3 && q->rank != 4)
        fail("%s: rank %d, expected 3 ([B, N, d]) or 4 ([B, H, N, d])", pq, q->rank);
    if (k->rank != q->rank) fail("%s: rank %d, but q has rank %d", pk, k->rank, q->rank);
    if (!tensor_same_shape(k, v))
        fail("%s: shape %s, but k is %s (k and v must match)", pv, tensor_shape_str(v, a, sizeof a),
             tensor_shape_str(k, b, sizeof b));
    const int r = q->rank;
    // Every size must be a positive int: an empty axis ([4, 0, 64]) is bad input, not a crash
    // of the reference later.
    const tensor_t* ts[3] = {q, k, v};
    const char* ps[3] = {pq, pk, pv};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < r; i++)
            if (ts[t]->shape[i] < 1 || ts[t]->shape[i] > INT_MAX)
                fail("%s: shape %s: every size must be between 1 and %d", ps[t], tensor_shape_str(ts[t], a, sizeof a),
                     INT_MAX);
    s->B = (int)q->shape[0];
    s->H = r == 4 ? (int)q->shape[1] : 1;
    s->Nq = (int)q->shape[r - 2];
    s->Nk = (int)k->shape[r - 2];
    s->d = (int)q->shape[r - 1];
    int ok = k->shape[0] == q->shape[0] && k->shape[r - 1] == q->shape[r - 1] && (r == 3 || k->shape[1] == q->shape[1]);
    if (!ok)
        fail("%s: shape %s does not fit q %s (batch, heads and head dim must match)", pk,
             tensor_shape_str(k, a, sizeof a), tensor_shape_str(q, b, sizeof b));
}

// Sizes that can never fit are bad input (exit 2, naming where they came from), said before
// anything is allocated rather than as an out-of-memory death. Host: q, k, v, O, L in fp32 (and
// the reference's O, L with --check, a staging copy on the GPU path); GPU: q, k, v, O, L in the
// dtype, plus S and P for the naive path.
static void check_sizes(int B, int H, int Nq, int Nk, int d, dtype_t dt, int on_gpu, int naive, int check,
                        const char* what) {
    const double BH = (double)B * H, nq = BH * Nq * d, nk = BH * Nk * d, nl = BH * Nq;
    if (BH > INT_MAX) fail("%s: batch x heads = %.0f is more than %d", what, BH, INT_MAX);
    char err[256];
    const double host = 4.0 * (2 * nq + 2 * nk + nl) + (check ? 4.0 * (nq + nl) : 0.0) + (on_gpu ? 4.0 * (nq > nk ? nq : nk) : 0.0);
    if (!mem_fits(DEV_CPU, host, err, sizeof err)) fail("%s (B %d, H %d, Nq %d, Nk %d, d %d): %s", what, B, H, Nq, Nk, d, err);
    const double es = (double)dtype_size(dt);
    const double dev = es * (2 * nq + 2 * nk) + 4.0 * nl + (naive ? (4.0 + es) * BH * Nq * (double)Nk : 0.0);
    if (on_gpu && !mem_fits(DEV_CUDA, dev, err, sizeof err))
        fail("%s (B %d, H %d, Nq %d, Nk %d, d %d) on the GPU: %s", what, B, H, Nq, Nk, d, err);
}

static double max_abs_err(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= m)) m = e;  // a NaN sticks
    }
    return m;
}

int main(int argc, char** argv) {
    const char *pq = NULL, *pk = NULL, *pv = NULL, *out = NULL, *dtype_s = NULL, *device_s = NULL, *impl_s = NULL;
    int B = 0, H = 0, Nq = 0, Nk = 0, d = 0, causal = 0, seed = 0, Bq = 0, Bk = 0, check = 0, reps = 0, variant = 0;
    double scale_arg = 0.0;
    cli_opt_t opts[] = {
        {"q", CLI_STR, &pq, "", "q.npy (float32 [B, N, d] or [B, H, N, d]); empty: random inputs", NULL},
        {"k", CLI_STR, &pk, "", "k.npy", NULL},
        {"v", CLI_STR, &pv, "", "v.npy", NULL},
        {"B", CLI_INT, &B, "2", "batch (random inputs)", NULL},
        {"H", CLI_INT, &H, "4", "heads (random inputs)", NULL},
        {"Nq", CLI_INT, &Nq, "300", "queries (random inputs)", NULL},
        {"Nk", CLI_INT, &Nk, "300", "keys (random inputs)", NULL},
        {"d", CLI_INT, &d, "64", "head dim (random inputs): 16, 32, 64 or 128", NULL},
        {"seed", CLI_INT, &seed, "0", "random seed", NULL},
        {"causal", CLI_FLAG, &causal, "0", "causal mask (query i sees keys j <= i)", NULL},
        {"scale", CLI_DOUBLE, &scale_arg, "0", "softmax scale; 0 means 1/sqrt(d)", NULL},
        {"dtype", CLI_CHOICE, &dtype_s, "f32", "precision of q, k, v, O", "f32|bf16"},
        {"device", CLI_CHOICE, &device_s, "auto", "where to run (auto: cuda if a GPU is present)", "auto|cpu|cuda"},
        {"impl", CLI_CHOICE, &impl_s, "flash", "flash: tiled (CPU) / kernel (GPU); naive: materialised S, P",
         "flash|naive"},
        {"Bq", CLI_INT, &Bq, "64", "query tile of the CPU tiled reference (>= 16)", NULL},
        {"Bk", CLI_INT, &Bk, "64", "key tile of the CPU tiled reference (>= 16)", NULL},
        {"check", CLI_FLAG, &check, "0", "also run the CPU naive reference and print the max error", NULL},
        {"reps", CLI_INT, &reps, "1", "GPU runs to time (median printed)", NULL},
        {"variant", CLI_INT, &variant, "-1", "bf16 kernel variant (-1: the default, fa3 at d 64/128 on sm_90a; see bench --scan-variants)", NULL},
        {"out", CLI_STR, &out, "results/flash_fwd", "output directory for O.npy and L.npy; empty: no files", NULL},
    };
    cli_parse(argc, argv, "Attention forward (FlashAttention-2 or naive) on random or .npy inputs; writes O and L.",
              opts, CLI_COUNT(opts));

    // Every flag first, then the GPU, the output place, the inputs.
    const int from_files = pq[0] || pk[0] || pv[0];
    if (from_files && !(pq[0] && pk[0] && pv[0])) fail("--q, --k and --v go together (got only some of them)");
    const dtype_t dt = strcmp(dtype_s, "bf16") == 0 ? DT_BF16 : DT_F32;
    int on_gpu = strcmp(device_s, "cuda") == 0 || (strcmp(device_s, "auto") == 0 && gpu_count() > 0);
    const int naive = strcmp(impl_s, "naive") == 0;
    if (reps < 1) fail("--reps must be >= 1 (got %d)", reps);
    if (!on_gpu && !naive && (Bq < 16 || Bk < 16 || Bq > 4096 || Bk > 4096))
        fail("--Bq and --Bk must be between 16 and 4096 (got %d, %d)", Bq, Bk);
    if (!from_files) {
        if (B < 1 || H < 1 || Nq < 1 || Nk < 1) fail("--B, --H, --Nq, --Nk must be >= 1");
        if (d != 16 && d != 32 && d != 64 && d != 128) fail("--d: head dim %d not supported (allowed: 16, 32, 64, 128)", d);
        check_sizes(B, H, Nq, Nk, d, dt, on_gpu, naive, check, "--B --H --Nq --Nk --d");
        const flash_variant_t* vl;
        const int nv = flash_fwd_bf16_variants(d, &vl);
        if (variant < -1 || variant >= nv)
            fail("--variant: head dim %d has variants 0 .. %d, or -1 for the default (got %d)", d, nv - 1, variant);
    }
    if (on_gpu) gpu_require("--device cuda");
    // O and L appear together or not at all; an unusable --out is said before the work.
    char oerr[512];
    outset_t* outs = NULL;
    if (out[0] && !(outs = outset_open(out, oerr, sizeof oerr))) fail("--out %s: %s", out, oerr);

    // ---------------------------------------------------------------- inputs, host fp32
    tensor_t tq, tk, tv;
    shape_t s;
    int in_rank = 4;
    if (from_files) {
        load_inputs(pq, pk, pv, &tq, &tk, &tv, &s);
        in_rank = tq.rank;
    } else {
        s = (shape_t){B, H, Nq, Nk, d};
        const int64_t shq[4] = {B, H, Nq, d}, shk[4] = {B, H, Nk, d};
        tq = tensor_alloc(DEV_CPU, DT_F32, 4, shq, MEM_OTHER);
        tk = tensor_alloc(DEV_CPU, DT_F32, 4, shk, MEM_OTHER);
        tv = tensor_alloc(DEV_CPU, DT_F32, 4, shk, MEM_OTHER);
        rng_t r = rng_make((uint64_t)seed);
        rng_fill_normal(&r, tq.data, (size_t)tensor_numel(&tq), 0.0f, 1.0f);
        rng_fill_normal(&r, tk.data, (size_t)tensor_numel(&tk), 0.0f, 1.0f);
        rng_fill_normal(&r, tv.data, (size_t)tensor_numel(&tv), 0.0f, 1.0f);
    }
    if (s.d != 16 && s.d != 32 && s.d != 64 && s.d != 128)
        fail("head dim %d not supported (allowed: 16, 32, 64, 128)", s.d);
    if (from_files) check_sizes(s.B, s.H, s.Nq, s.Nk, s.d, dt, on_gpu, naive, check, "the .npy inputs");
    {
        const flash_variant_t* vl;
        const int nv = flash_fwd_bf16_variants(s.d, &vl);
        if (variant < -1 || variant >= nv)
            fail("--variant: head dim %d has variants 0 .. %d, or -1 for the default (got %d)", s.d, nv - 1, variant);
        flash_fwd_bf16_set_variant(s.d, variant);
    }
    const float scale = scale_arg > 0.0 ? (float)scale_arg : 1.0f / sqrtf((float)s.d);
    const int BH = s.B * s.H;
    const size_t nq = (size_t)BH * s.Nq * s.d, nk = (size_t)BH * s.Nk * s.d, nl = (size_t)BH * s.Nq;
    float *hq = tq.data, *hk = tk.data, *hv = tv.data;
    if (dt == DT_BF16) {  // round the inputs once, so every path (and --check) sees the same values
        for (size_t i = 0; i < nq; i++) hq[i] = f32_from_bf16(bf16_from_f32(hq[i]));
        for (size_t i = 0; i < nk; i++) hk[i] = f32_from_bf16(bf16_from_f32(hk[i])), hv[i] = f32_from_bf16(bf16_from_f32(hv[i]));
    }
    float* ho = malloc(nq * sizeof(float));  // O (BH, Nq, d)
    float* hl = malloc(nl * sizeof(float));  // L (BH, Nq)
    if (!ho || !hl) DIE("out of host memory");

    // ---------------------------------------------------------------- run
    double ms = 0.0;
    const char* what;
    if (!on_gpu) {
        what = naive ? "naive (CPU reference)" : "flash tiled (CPU reference)";
        const double t0 = time_now_s();
        if (naive)
            attn_naive_forward_cpu(hq, hk, hv, ho, hl, BH, s.Nq, s.Nk, s.d, causal, scale);
        else
            flash_forward_cpu(hq, hk, hv, ho, hl, BH, s.Nq, s.Nk, s.d, causal, scale, Bq, Bk);
        ms = (time_now_s() - t0) * 1e3;
    } else {
        what = naive ? "naive (cuBLAS, S and P materialised)" : "flash (CUDA kernel)";
        const size_t es = dtype_size(dt);
        void* dq = mem_alloc(DEV_CUDA, nq * es, MEM_OTHER);
        void* dk = mem_alloc(DEV_CUDA, nk * es, MEM_OTHER);
        void* dv = mem_alloc(DEV_CUDA, nk * es, MEM_OTHER);
        void* dO = mem_alloc(DEV_CUDA, nq * es, MEM_OTHER);
        float* dL = mem_alloc(DEV_CUDA, nl * sizeof(float), MEM_OTHER);
        void* stage = malloc(nk * es > nq * es ? nk * es : nq * es);
        if (!stage) DIE("out of host memory");
        const float* srcs[3] = {hq, hk, hv};
        void* dsts[3] = {dq, dk, dv};
        const size_t ns[3] = {nq, nk, nk};
        for (int i = 0; i < 3; i++) {
            if (dt == DT_BF16)
                bf16_from_f32_array(stage, srcs[i], ns[i]);
            else
                memcpy(stage, srcs[i], ns[i] * 4);
            CUDA_CHECK(cudaMemcpy(dsts[i], stage, ns[i] * es, cudaMemcpyHostToDevice));
        }
        float* S = NULL;
        void* P = NULL;
        cublasHandle_t hb = NULL;
        if (naive) {
            const size_t ss = (size_t)BH * s.Nq * s.Nk;
            S = mem_alloc(DEV_CUDA, ss * sizeof(float), MEM_WORKSPACE);
            P = mem_alloc(DEV_CUDA, ss * es, MEM_ACTS);
            CUBLAS_CHECK(cublasCreate(&hb));
        }
        attn_args_t a = {0};
        a.B = s.B, a.H = s.H, a.Nq = s.Nq, a.Nk = s.Nk, a.d = s.d, a.dtype = dt, a.causal = causal, a.scale = scale;
        a.q = dq, a.k = dk, a.v = dv, a.o = dO, a.lse = dL;
        attn_contiguous_strides(a.sq, s.H, s.Nq, s.d);
        attn_contiguous_strides(a.sk, s.H, s.Nk, s.d);
        attn_contiguous_strides(a.sv, s.H, s.Nk, s.d);
        attn_contiguous_strides(a.so, s.H, s.Nq, s.d);
        char err[256];
        if (!naive && flash_fwd_supports(&a, err, sizeof err) != 0) fail("%s", err);
        static char flash_what[96];  // the kernel the dispatch runs for this call, by name
        if (!naive) snprintf(flash_what, sizeof flash_what, "flash (CUDA, %s)", flash_fwd_kernel_name(&a)), what = flash_what;
        double* t = malloc(sizeof(double) * (size_t)reps);
        gpu_timer_t tm;
        gpu_timer_init(&tm);
        for (int r = 0; r < reps; r++) {
            gpu_timer_start(&tm, 0);
            if (naive)
                attn_naive_forward_cuda(hb, dt, dq, dk, dv, dO, dL, S, P, BH, s.Nq, s.Nk, s.d, causal, scale, 0);
            else
                flash_forward_cuda(&a, 0);
            t[r] = gpu_timer_stop_ms(&tm);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        // median of the repetitions (insertion sort: reps is small)
        for (int i = 1; i < reps; i++)
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double x = t[j];
                t[j] = t[j - 1], t[j - 1] = x;
            }
        ms = t[reps / 2];
        free(t);
        gpu_timer_destroy(&tm);
        CUDA_CHECK(cudaMemcpy(stage, dO, nq * es, cudaMemcpyDeviceToHost));
        if (dt == DT_BF16)
            f32_from_bf16_array(ho, stage, nq);
        else
            memcpy(ho, stage, nq * 4);
        CUDA_CHECK(cudaMemcpy(hl, dL, nl * sizeof(float), cudaMemcpyDeviceToHost));
        if (hb) CUBLAS_CHECK(cublasDestroy(hb));
        mem_free(S), mem_free(P), mem_free(dq), mem_free(dk), mem_free(dv), mem_free(dO), mem_free(dL);
        free(stage);
    }
    const double flops = 4.0 * BH * (double)s.Nq * s.Nk * s.d / (causal ? 2.0 : 1.0);
    printf("%s: B %d H %d Nq %d Nk %d d %d %s %s: %.3f ms", what, s.B, s.H, s.Nq, s.Nk, s.d, dtype_name(dt),
           causal ? "causal" : "non-causal", ms);
    if (on_gpu) printf(" (%.1f TFLOP/s, median of %d)", flops / (ms * 1e-3) / 1e12, reps);
    printf("\n");

    int rc = 0;
    if (check) {
        float* ro = malloc(nq * sizeof(float));
        float* rl = malloc(nl * sizeof(float));
        if (!ro || !rl) DIE("out of host memory");
        attn_naive_forward_cpu(hq, hk, hv, ro, rl, BH, s.Nq, s.Nk, s.d, causal, scale);
        const double eo = max_abs_err(ho, ro, nq), el = max_abs_err(hl, rl, nl);
        // bf16 O is rounded to 8 bits of mantissa (and P too, before P V): allow 2e-2.
        const double tol = dt == DT_BF16 ? 2e-2 : 1e-3;
        printf("check vs CPU naive reference: max |dO| %.3g, max |dL| %.3g (tolerance %.0e): %s\n", eo, el, tol,
               (eo <= tol && el <= tol) ? "OK" : "FAILED");
        if (!(eo <= tol && el <= tol)) rc = 1;
        free(ro), free(rl);
    }

    if (outs) {
        char err[512];
        int64_t sho[4], shl[3];
        if (in_rank == 3) {
            sho[0] = s.B, sho[1] = s.Nq, sho[2] = s.d;
            shl[0] = s.B, shl[1] = s.Nq;
        } else {
            sho[0] = s.B, sho[1] = s.H, sho[2] = s.Nq, sho[3] = s.d;
            shl[0] = s.B, shl[1] = s.H, shl[2] = s.Nq;
        }
        if (npy_write(outset_path(outs, "O.npy"), DT_F32, in_rank, sho, ho, err, sizeof err) != 0) DIE("%s", err);
        if (npy_write(outset_path(outs, "L.npy"), DT_F32, in_rank - 1, shl, hl, err, sizeof err) != 0) DIE("%s", err);
        if (outset_commit(outs, err, sizeof err) != 0) fail("--out %s: %s", out, err);
        printf("wrote %s/O.npy and %s/L.npy\n", out, out);
    }
    free(ho), free(hl);
    tensor_free(&tq), tensor_free(&tk), tensor_free(&tv);
    return rc;
}
