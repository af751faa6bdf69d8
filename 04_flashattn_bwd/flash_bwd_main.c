// flash_bwd: attention forward + backward from the command line, on random inputs or on .npy
// files (q, k, v, dO), writing dQ, dK, dV (and O, L) as .npy.
//   build/04_flashattn_bwd/flash_bwd --B 2 --H 4 --Nq 300 --Nk 300 --d 64 --causal --dtype bf16 --check
//   build/04_flashattn_bwd/flash_bwd --q q.npy --k k.npy --v v.npy --dO dO.npy --causal --out results/bwd
// .npy inputs are float32, [B, N, d] (one head) or [B, H, N, d]; k and v have the same shape, dO
// has q's. With --dtype bf16 the inputs are rounded to bf16 on the way in and the bf16 results
// widened to float32 in the files. On the CPU, --impl flash is the tiled Algorithm 2 reference.
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
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "04_flashattn_bwd/flash_bwd_host.h"


static double max_abs_err(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= m)) m = e;  // a NaN sticks
    }
    return m;
}
static double max_abs(const float* a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

// One file of the output set (a failed write dies; the set is then removed at exit).
static void save(outset_t* outs, const char* name, int rank, const int64_t* shape, const float* x) {
    char file[64], err[512];
    snprintf(file, sizeof file, "%s.npy", name);
    if (npy_write(outset_path(outs, file), DT_F32, rank, shape, x, err, sizeof err) != 0) DIE("%s", err);
}

// Sizes that can never fit are bad input (exit 2, naming where they came from), said before
// anything is allocated. Host: q, k, v, dO and O, L, dQ, dK, dV in fp32 (twice more with --check);
// GPU: about the same again in the dtype, with fp32 accumulators.
static void check_sizes(int B, int H, int Nq, int Nk, int d, int on_gpu, int check, const char* what) {
    const double BH = (double)B * H, nq = BH * Nq * d, nk = BH * Nk * d, nl = BH * Nq;
    if (BH > INT_MAX) fail("%s: batch x heads = %.0f is more than %d", what, BH, INT_MAX);
    char err[256];
    const double host = 4.0 * (3 * nq + 3 * nk + nl) * (check ? 2.0 : 1.0);
    if (!mem_fits(DEV_CPU, host, err, sizeof err)) fail("%s (B %d, H %d, Nq %d, Nk %d, d %d): %s", what, B, H, Nq, Nk, d, err);
    if (on_gpu && !mem_fits(DEV_CUDA, 4.0 * (4 * nq + 4 * nk + 2 * nl), err, sizeof err))
        fail("%s (B %d, H %d, Nq %d, Nk %d, d %d) on the GPU: %s", what, B, H, Nq, Nk, d, err);
}

int main(int argc, char** argv) {
    const char *pq = NULL, *pk = NULL, *pv = NULL, *pdo = NULL, *out = NULL, *dtype_s = NULL, *device_s = NULL,
               *impl_s = NULL;
    int B = 0, H = 0, Nq = 0, Nk = 0, d = 0, causal = 0, seed = 0, Bq = 0, Bk = 0, check = 0, reps = 0;
    double scale_arg = 0.0;
    cli_opt_t opts[] = {
        {"q", CLI_STR, &pq, "", "q.npy (float32 [B, N, d] or [B, H, N, d]); empty: random inputs", NULL},
        {"k", CLI_STR, &pk, "", "k.npy", NULL},
        {"v", CLI_STR, &pv, "", "v.npy", NULL},
        {"dO", CLI_STR, &pdo, "", "dO.npy (the gradient of the loss with respect to O; q's shape)", NULL},
        {"B", CLI_INT, &B, "2", "batch (random inputs)", NULL},
        {"H", CLI_INT, &H, "4", "heads (random inputs)", NULL},
        {"Nq", CLI_INT, &Nq, "300", "queries (random inputs)", NULL},
        {"Nk", CLI_INT, &Nk, "300", "keys (random inputs)", NULL},
        {"d", CLI_INT, &d, "64", "head dim (random inputs): 16, 32, 64 or 128", NULL},
        {"seed", CLI_INT, &seed, "0", "random seed", NULL},
        {"causal", CLI_FLAG, &causal, "0", "causal mask (query i sees keys j <= i)", NULL},
        {"scale", CLI_DOUBLE, &scale_arg, "0", "softmax scale; 0 means 1/sqrt(d)", NULL},
        {"dtype", CLI_CHOICE, &dtype_s, "f32", "precision of q, k, v, dO and the results", "f32|bf16"},
        {"device", CLI_CHOICE, &device_s, "auto", "where to run (auto: cuda if a GPU is present)", "auto|cpu|cuda"},
        {"impl", CLI_CHOICE, &impl_s, "flash",
         "flash: the dispatch's kernels (GPU) / tiled Algorithm 2 (CPU); naive: materialised P (CPU)",
         "flash|naive"},
        {"Bq", CLI_INT, &Bq, "64", "query tile of the CPU tiled reference (>= 16)", NULL},
        {"Bk", CLI_INT, &Bk, "64", "key tile of the CPU tiled reference (>= 16)", NULL},
        {"check", CLI_FLAG, &check, "0", "also run the CPU naive reference and print the max errors", NULL},
        {"reps", CLI_INT, &reps, "1", "GPU runs to time (median printed)", NULL},
        {"out", CLI_STR, &out, "results/flash_bwd", "output directory for dQ, dK, dV, O, L (.npy); empty: none", NULL},
    };
    cli_parse(argc, argv,
              "Attention forward + backward (FlashAttention-2) on random or .npy inputs; writes dQ, dK, dV.", opts,
              CLI_COUNT(opts));

    // Every flag first, then the GPU, the output place, the inputs.
    const int from_files = pq[0] || pk[0] || pv[0] || pdo[0];
    if (from_files && !(pq[0] && pk[0] && pv[0] && pdo[0]))
        fail("--q, --k, --v and --dO go together (got only some of them)");
    const dtype_t dt = strcmp(dtype_s, "bf16") == 0 ? DT_BF16 : DT_F32;
    const int on_gpu = strcmp(device_s, "cuda") == 0 || (strcmp(device_s, "auto") == 0 && gpu_count() > 0);
    const int naive = strcmp(impl_s, "naive") == 0;
    if (on_gpu && naive) fail("--impl naive runs on the CPU only (add --device cpu)");
    if (reps < 1) fail("--reps must be >= 1 (got %d)", reps);
    if (!on_gpu && !naive && (Bq < 16 || Bk < 16 || Bq > 4096 || Bk > 4096))
        fail("--Bq and --Bk must be between 16 and 4096 (got %d, %d)", Bq, Bk);
    if (!from_files) {
        if (B < 1 || H < 1 || Nq < 1 || Nk < 1) fail("--B, --H, --Nq, --Nk must be >= 1");
        if (d != 16 && d != 32 && d != 64 && d != 128) fail("--d: head dim %d not supported (allowed: 16, 32, 64, 128)", d);
        check_sizes(B, H, Nq, Nk, d, on_gpu, check, "--B --H --Nq --Nk --d");
    }
    if (on_gpu) gpu_require("--device cuda");
    // dQ, dK, dV, O and L appear together or not at all; an unusable --out is said before the work.
    char oerr[512];
    outset_t* outs = NULL;
    if (out[0] && !(outs = outset_open(out, oerr, sizeof oerr))) fail("--out %s: %s", out, oerr);

    // ---------------------------------------------------------------- inputs, host fp32
    tensor_t tq, tk, tv, tdo;
    int rank = 4;
    if (from_files) {
        tq = npy_load(pq, DT_F32, -1, NULL);
        rank = tq.rank;
        if (rank != 3 && rank != 4) fail("%s: rank %d, expected 3 ([B, N, d]) or 4 ([B, H, N, d])", pq, rank);
        // k: q's batch (and heads) and head dim, any length; v: k's shape; dO: q's shape.
        int64_t want_k[4];
        for (int i = 0; i < rank; i++) want_k[i] = tq.shape[i];
        want_k[rank - 2] = -1;
        tk = npy_load(pk, DT_F32, rank, want_k);
        tv = npy_load(pv, DT_F32, rank, tk.shape);
        tdo = npy_load(pdo, DT_F32, rank, tq.shape);
        // Every size a positive int: an empty axis ([4, 0, 64]) is bad input, not a crash later.
        const tensor_t* ts[2] = {&tq, &tk};
        const char* ps[2] = {pq, pk};
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < rank; i++)
                if (ts[t]->shape[i] < 1 || ts[t]->shape[i] > INT_MAX) {
                    char sh[96];
                    fail("%s: shape %s: every size must be between 1 and %d", ps[t],
                         tensor_shape_str(ts[t], sh, sizeof sh), INT_MAX);
                }
        B = (int)tq.shape[0];
        H = rank == 4 ? (int)tq.shape[1] : 1;
        Nq = (int)tq.shape[rank - 2];
        Nk = (int)tk.shape[rank - 2];
        d = (int)tq.shape[rank - 1];
    } else {
        const int64_t shq[4] = {B, H, Nq, d}, shk[4] = {B, H, Nk, d};
        tq = tensor_alloc(DEV_CPU, DT_F32, 4, shq, MEM_OTHER);
        tk = tensor_alloc(DEV_CPU, DT_F32, 4, shk, MEM_OTHER);
        tv = tensor_alloc(DEV_CPU, DT_F32, 4, shk, MEM_OTHER);
        tdo = tensor_alloc(DEV_CPU, DT_F32, 4, shq, MEM_OTHER);
        rng_t r = rng_make((uint64_t)seed);
        rng_fill_normal(&r, tq.data, (size_t)tensor_numel(&tq), 0.0f, 1.0f);
        rng_fill_normal(&r, tk.data, (size_t)tensor_numel(&tk), 0.0f, 1.0f);
        rng_fill_normal(&r, tv.data, (size_t)tensor_numel(&tv), 0.0f, 1.0f);
        rng_fill_normal(&r, tdo.data, (size_t)tensor_numel(&tdo), 0.0f, 1.0f);
    }
    if (d != 16 && d != 32 && d != 64 && d != 128) fail("head dim %d not supported (allowed: 16, 32, 64, 128)", d);
    if (from_files) check_sizes(B, H, Nq, Nk, d, on_gpu, check, "the .npy inputs");
    const float scale = scale_arg > 0.0 ? (float)scale_arg : 1.0f / sqrtf((float)d);
    const int BH = B * H;
    const size_t nq = (size_t)BH * Nq * d, nk = (size_t)BH * Nk * d, nl = (size_t)BH * Nq;
    float *hq = tq.data, *hk = tk.data, *hv = tv.data, *hdo = tdo.data;
    if (dt == DT_BF16) {  // round once, so every path (and --check) sees the same values
        float* xs[4] = {hq, hk, hv, hdo};
        const size_t ns[4] = {nq, nk, nk, nq};
        for (int x = 0; x < 4; x++)
            for (size_t i = 0; i < ns[x]; i++) xs[x][i] = f32_from_bf16(bf16_from_f32(xs[x][i]));
    }
    float *ho = malloc(nq * 4 + 1), *hl = malloc(nl * 4 + 1), *gq = malloc(nq * 4 + 1), *gk = malloc(nk * 4 + 1),
          *gv = malloc(nk * 4 + 1);
    if (!ho || !hl || !gq || !gk || !gv) DIE("out of host memory");

    // ---------------------------------------------------------------- run
    const char* what;
    double fwd_ms = 0.0, bwd_ms = 0.0;
    if (on_gpu) {
        fa_timing_t t;
        fa_fwd_bwd_gpu(hq, hk, hv, hdo, ho, hl, gq, gk, gv, B, H, Nq, Nk, d, causal, scale, dt, reps, &t);
        fwd_ms = t.fwd_ms;
        bwd_ms = t.bwd_ms;
        what = "flash (CUDA)";
        printf("backward kernels: %s: %s\n", t.kernel, t.plan);  // the dispatch's own name of what ran
    } else {
        what = naive ? "naive (CPU reference)" : "flash tiled Algorithm 2 (CPU reference)";
        double t0 = time_now_s();
        if (naive) attn_naive_forward_cpu(hq, hk, hv, ho, hl, BH, Nq, Nk, d, causal, scale);
        else flash_forward_cpu(hq, hk, hv, ho, hl, BH, Nq, Nk, d, causal, scale, Bq, Bk);
        fwd_ms = (time_now_s() - t0) * 1e3;
        t0 = time_now_s();
        if (naive) attn_naive_backward_cpu(hq, hk, hv, ho, hdo, hl, gq, gk, gv, BH, Nq, Nk, d, causal, scale);
        else flash_backward_cpu(hq, hk, hv, ho, hdo, hl, gq, gk, gv, BH, Nq, Nk, d, causal, scale, Bq, Bk);
        bwd_ms = (time_now_s() - t0) * 1e3;
    }
    printf("%s: B %d H %d Nq %d Nk %d d %d %s %s: forward %.3f ms, backward %.3f ms%s\n", what, B, H, Nq, Nk, d,
           dtype_name(dt), causal ? "causal" : "non-causal", fwd_ms, bwd_ms,
           on_gpu && reps > 1 ? " (medians)" : "");

    int rc = 0;
    if (check) {
        // The truth: the CPU naive forward and backward (double sums) on the same (rounded) inputs.
        float *ro = malloc(nq * 4 + 1), *rl = malloc(nl * 4 + 1), *rq = malloc(nq * 4 + 1), *rk = malloc(nk * 4 + 1),
              *rv = malloc(nk * 4 + 1);
        if (!ro || !rl || !rq || !rk || !rv) DIE("out of host memory");
        attn_naive_forward_cpu(hq, hk, hv, ro, rl, BH, Nq, Nk, d, causal, scale);
        attn_naive_backward_cpu(hq, hk, hv, ro, hdo, rl, rq, rk, rv, BH, Nq, Nk, d, causal, scale);
        // Relative to the largest gradient: bf16 rounds P, dS and the outputs to 8 bits.
        const double tol = dt == DT_BF16 ? 3e-2 : 1e-3;
        const double eq = max_abs_err(gq, rq, nq) / (max_abs(rq, nq) + 1e-12);
        const double ek = max_abs_err(gk, rk, nk) / (max_abs(rk, nk) + 1e-12);
        const double ev = max_abs_err(gv, rv, nk) / (max_abs(rv, nk) + 1e-12);
        const int ok = eq <= tol && ek <= tol && ev <= tol;
        printf("check vs CPU naive: max error / max |grad|: dQ %.2e, dK %.2e, dV %.2e (tolerance %.0e): %s\n", eq, ek,
               ev, tol, ok ? "OK" : "FAILED");
        if (!ok) rc = 1;
        free(ro); free(rl); free(rq); free(rk); free(rv);
    }

    if (outs) {
        int64_t shq[4], shk[4], shl[3];
        if (rank == 3) {
            shq[0] = B, shq[1] = Nq, shq[2] = d;
            shk[0] = B, shk[1] = Nk, shk[2] = d;
            shl[0] = B, shl[1] = Nq;
        } else {
            shq[0] = B, shq[1] = H, shq[2] = Nq, shq[3] = d;
            shk[0] = B, shk[1] = H, shk[2] = Nk, shk[3] = d;
            shl[0] = B, shl[1] = H, shl[2] = Nq;
        }
        save(outs, "dQ", rank, shq, gq);
        save(outs, "dK", rank, shk, gk);
        save(outs, "dV", rank, shk, gv);
        save(outs, "O", rank, shq, ho);
        save(outs, "L", rank - 1, shl, hl);
        char err[512];
        if (outset_commit(outs, err, sizeof err) != 0) fail("--out %s: %s", out, err);
        printf("wrote %s/{dQ,dK,dV,O,L}.npy\n", out);
    }
    free(ho); free(hl); free(gq); free(gk); free(gv);
    tensor_free(&tq); tensor_free(&tk); tensor_free(&tv); tensor_free(&tdo);
    return rc;
}
