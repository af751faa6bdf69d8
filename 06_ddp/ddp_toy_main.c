// ddp_toy: the course's DDP test (tests/test_ddp.py) as a program, on the MPI backend.
//
//   scripts/mpirun.sh 2 build/06_ddp/ddp_toy --model all --variant all
//
// For each model × variant (× bucket size) it runs:
//   1. every rank seeds its ToyModel by its rank (rank 0 loads the PyTorch fixture's initial
//      parameters instead, so the run can be compared with PyTorch); ddp_broadcast_params;
//      then every parameter equals rank 0's, and on the other ranks every trainable one
//      differs from its own initial value (so the ranks did start different);
//   2. 5 steps: the 20 rows of the fixture's data in that step's order (order.npy); rank r
//      trains on rows [r·20/N, (r+1)·20/N) of them; gradients averaged by the DDP layer;
//      SGD lr 0.1. Beside it every rank trains the single-process model on all 20 rows.
//      After every step, on every rank: DDP == single process (torch.allclose's defaults,
//      rtol 1e-5, atol 1e-8), DDP == the PyTorch fixture (rtol 1e-5, atol 1e-6), frozen
//      parameters unchanged (bitwise);
//   3. at the end every rank's parameters are bitwise equal to rank 0's.
// Rank 0 prints one line per step, and "OK" or "FAILED" per run; the exit status is 1 if any
// check failed on any rank.
//
// Uneven splits (20 % N != 0, e.g. 3 ranks: 6/7/7 rows) are handled by weighting: rank r
// scales its mean loss by N·n_r/20, so the AVERAGE over ranks of the gradients is the
// gradient of the mean over all 20 rows, exactly as with equal shards.
//
// The gradient buffer is poisoned with NaN before every backward: a slot the DDP layer or the
// model forgot (an unused parameter's gradient, see --unused-trainable) shows up as NaN in
// the parameters; frozen slots hold NaN too, and must not leak anywhere.
//
// --backend nccl (one GPU per rank) runs the same test through the DDP layer's GPU path: the
// ToyModel still computes on the host, but the DDP layer works on DEVICE mirrors of the
// parameter and gradient buffers. The hook copies each final gradient to the device on the
// "compute" stream (standing in for the kernels that would write it) and then reports it, so
// the events, the communication stream and the zero-fill are exercised for real; after
// ddp_finish_grads the averaged gradients come back to the host for the SGD step.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "06_ddp/ddp.h"
#include "common/toymodel.h"
#include <stdarg.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/npy.h"

#define ROWS 20       // the course's 20 examples
#define LR 0.1f       // the course's SGD learning rate
#define MAX_STEPS 16
#define MAX_MB 16     // bucket sizes in one --bucket-mb list

// Tolerances, each with its reason:
// DDP vs the single-process C model: the course's torch.allclose defaults. Both are fp32 and
// differ only in how the gradient sums are grouped (per rank, then averaged).
#define RTOL_SINGLE 1e-5
#define ATOL_SINGLE 1e-8
// DDP vs PyTorch's float64 run: fp32 rounding of the C forward/backward over 5 steps; the
// fixture script checked that a float32 torch run stays within a tenth of this.
#define RTOL_TORCH 1e-5
#define ATOL_TORCH 1e-6

typedef struct {
    const char* dir;
    float data[ROWS * TOY_D_IN];     // (20, 10)
    float labels[ROWS * TOY_D_OUT];  // (20, 5)
    int64_t order[MAX_STEPS][ROWS];  // order[s] = rows of data used at step s
    int steps;                       // how many orders the fixture holds
} fixture_t;

// Loads <dir>/<name> into dst, checking dtype and shape (a -1 entry of shape: any); returns
// the array's first dimension. A bad fixture is bad input: one line, exit 2.
static int64_t load_npy(const char* dir, const char* name, int dtype, int rank,
                        const int64_t* shape, void* dst, size_t max_bytes) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    npy_array_t a;
    if (npy_read(path, &a, err, sizeof err)) comm_bad_input("%s (regenerate: scripts/make_fixtures.sh toymodel)", err);
    if (npy_check(&a, dtype, rank, shape, err, sizeof err)) comm_bad_input("%s: %s", path, err);
    if (a.nbytes > max_bytes) comm_bad_input("%s: %zu bytes, at most %zu expected", path, a.nbytes, max_bytes);
    memcpy(dst, a.data, a.nbytes);
    const int64_t n0 = a.shape[0];
    npy_array_free(&a);
    return n0;
}

static void load_fixture(const char* dir, fixture_t* fx) {
    fx->dir = dir;
    const int64_t sd[2] = {ROWS, TOY_D_IN}, sl[2] = {ROWS, TOY_D_OUT}, so[2] = {-1, ROWS};
    load_npy(dir, "data.npy", DT_F32, 2, sd, fx->data, sizeof fx->data);
    load_npy(dir, "labels.npy", DT_F32, 2, sl, fx->labels, sizeof fx->labels);
    fx->steps = (int)load_npy(dir, "order.npy", DT_I64, 2, so, fx->order, sizeof fx->order);
    for (int s = 0; s < fx->steps; s++)
        for (int r = 0; r < ROWS; r++)
            if (fx->order[s][r] < 0 || fx->order[s][r] >= ROWS)
                comm_bad_input("%s/order.npy: step %d row %d is %lld, outside [0, %d)", dir, s, r,
                     (long long)fx->order[s][r], ROWS);
}

// Loads the fixture's parameters of model `m` from <dir>/<kind>/<sub>/ (step -1: a snapshot).
static void load_params(const toy_model_t* m, const fixture_t* fx, const char* sub, int step,
                        float* dst) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s/%s", fx->dir, toy_kind_name(m->kind), sub);
    if (toy_load_params(m, path, step, dst, err, sizeof err))
        comm_bad_input("%s (regenerate: scripts/make_fixtures.sh toymodel)", err);
}

// ------------------------------------------------------------------ checks
// ------------------------------------------------------------------ one run
typedef struct {
    toy_kind_t kind;
    ddp_variant_t variant;
    double bucket_mb;
    int steps;
    int unused_trainable;  // no_grad_fixed_param trainable (but still unused by the forward)
} run_cfg_t;

static void make_model(toy_model_t* m, const run_cfg_t* cfg) {
    toy_create(m, cfg->kind, ROWS);
    for (int i = 0; i < m->n_params; i++)
        if (cfg->unused_trainable && strcmp(m->p[i].name, "no_grad_fixed_param") == 0)
            m->p[i].trainable = 1;
}

// ------------------------------------------------------------------ what the DDP layer sees
// MPI: the model's own host buffers. NCCL: device copies of them, and a "compute" stream.
typedef struct {
    toy_model_t* m;
    ddp_t* d;
    comm_t* c;
    cudaStream_t stream;  // NCCL: the stream the (stand-in) backward writes gradients on
    float* params;        // (total) m->params, or its device copy
    float* grads;         // (total) m->grads, or its device copy
} mirror_t;

static void mirror_init(mirror_t* x, comm_t* c, toy_model_t* m) {
    memset(x, 0, sizeof *x);
    x->m = m;
    x->c = c;
    x->params = m->params;
    x->grads = m->grads;
    // The one difference between the backends here: NCCL's DDP layer needs device buffers and
    // a stream; MPI's works on the model's host buffers in place.
    if (comm_device_kind(c) == DEV_CUDA) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
        x->params = comm_alloc(c, m->total * sizeof(float), MEM_PARAMS);
        x->grads = comm_alloc(c, m->total * sizeof(float), MEM_GRADS);
    }
}

static void mirror_free(mirror_t* x) {
    if (x->params != x->m->params) mem_free(x->params);
    if (x->grads != x->m->grads) mem_free(x->grads);
    if (x->stream) CUDA_CHECK(cudaStreamDestroy(x->stream));
}

// Elements [off, off + n) of a host buffer to its mirror or back, on the compute stream. The
// MPI backend's mirror IS the host buffer: nothing to copy.
static void stage(mirror_t* x, float* dst, const float* src, size_t off, size_t n) {
    if (dst == src) return;
    CUDA_CHECK(cudaMemcpyAsync(dst + off, src + off, n * sizeof(float), cudaMemcpyDefault, x->stream));
}

static void mirror_broadcast(mirror_t* x) {
    stage(x, x->params, x->m->params, 0, x->m->total);
    ddp_broadcast_params(x->d);
    stage(x, x->m->params, x->params, 0, x->m->total);
    comm_stream_sync(x->c, x->stream, "parameters to the host");  // MPI: nothing to wait for
}

// NaN into every gradient slot the DDP layer will see (host and, on NCCL, device).
static void mirror_poison(mirror_t* x) {
    for (size_t j = 0; j < x->m->total; j++) x->m->grads[j] = NAN;
    stage(x, x->grads, x->m->grads, 0, x->m->total);
}

// The backward's hook. NCCL: the final gradient goes to the device on the compute stream
// first, as the kernel that computed it would have written it there, then DDP is told.
static void mirror_hook(void* ctx, int i) {
    mirror_t* x = ctx;
    stage(x, x->grads, x->m->grads, x->m->p[i].offset, x->m->p[i].numel);
    ddp_grad_ready(x->d, i);
}

// ddp_finish_grads; NCCL: the averages back to the host through the compute stream, which is
// ordered after every all-reduce by ddp_finish_grads itself.
static void mirror_finish(mirror_t* x) {
    ddp_finish_grads(x->d);
    stage(x, x->m->grads, x->grads, 0, x->m->total);
    comm_stream_sync(x->c, x->stream, "gradients to the host");
}

// Rank 0 prints the plan: which parameters each all-reduce covers.
static void print_plan(const ddp_t* d, const toy_model_t* m) {
    printf("#   %d all-reduce%s per step:", ddp_n_buckets(d), ddp_n_buckets(d) == 1 ? "" : "s");
    for (int k = 0; k < ddp_n_buckets(d); k++) {
        const ddp_bucket_t b = ddp_bucket(d, k);
        printf(" [");
        for (int i = b.p_hi; i >= b.p_lo; i--)
            printf("%s%s%s", m->p[i].name, m->p[i].trainable ? "" : " (frozen)", i > b.p_lo ? ", " : "");
        printf("]");
    }
    printf("\n");
}

// Returns the number of failed checks over all ranks (the same on every rank).
static long long run_one(comm_t* c, const fixture_t* fx, const run_cfg_t* cfg) {
    const int R = c->rank, N = c->world;
    char name[128];
    snprintf(name, sizeof name, "%s %s", toy_kind_name(cfg->kind), ddp_variant_name(cfg->variant));
    if (cfg->variant == DDP_BUCKETED)
        snprintf(name + strlen(name), sizeof name - strlen(name), " %g MiB", cfg->bucket_mb);
    toy_checker_t k = {c->rank, name, 0};

    toy_model_t dm, ref;  // the DDP replica on this rank; the single-process model
    make_model(&dm, cfg);
    make_model(&ref, cfg);
    const size_t bytes = dm.total * sizeof(float);
    float* init = malloc(bytes);       // the fixture's initial parameters (= rank 0's)
    float* own_init = malloc(bytes);   // this rank's own, before the broadcast
    float* want = malloc(bytes);       // the fixture's parameters after a step
    float* rank0 = malloc(bytes);      // rank 0's final parameters
    float loss_torch[MAX_STEPS];
    if (!init || !own_init || !want || !rank0) DIE("out of memory");
    load_params(&dm, fx, "init", -1, init);
    {
        char path[1024];
        snprintf(path, sizeof path, "%s/sgd_loss.npy", toy_kind_name(cfg->kind));
        const int64_t sh[1] = {-1};
        if (load_npy(fx->dir, path, DT_F32, 1, sh, loss_torch, sizeof loss_torch) < cfg->steps)
            comm_bad_input("%s/%s: fewer than %d steps", fx->dir, path, cfg->steps);
    }

    // 1. Different starting points, then rank 0's everywhere.
    toy_init_params(&dm, (uint64_t)R);  // the course: torch.manual_seed(rank)
    if (R == 0) memcpy(dm.params, init, bytes);
    memcpy(own_init, dm.params, bytes);
    memcpy(ref.params, init, bytes);
    param_ref_t table[TOY_MAX_PARAMS];
    for (int i = 0; i < dm.n_params; i++)
        table[i] = (param_ref_t){dm.p[i].name, dm.p[i].offset, dm.p[i].numel, dm.p[i].trainable};
    mirror_t x;
    mirror_init(&x, c, &dm);
    ddp_t* d = ddp_create(c, table, dm.n_params, x.params, x.grads, dm.total, cfg->variant,
                          cfg->bucket_mb, x.stream);
    x.d = d;
    if (R == 0) {
        printf("# %s\n", name);
        print_plan(d, &dm);
    }
    mirror_broadcast(&x);
    toy_check_bitwise(&k, &dm, dm.params, init, -1, "after the broadcast, equal to rank 0's", 0);
    if (R > 0)
        for (int i = 0; i < dm.n_params; i++) {
            const toy_param_t* p = &dm.p[i];
            if (!p->trainable) continue;
            int same = 1;  // not torch.allclose(own initial, broadcast) is what the course asks
            for (size_t j = p->offset; j < p->offset + p->numel && same; j++)
                same = fabsf(own_init[j] - dm.params[j]) <= ATOL_SINGLE + RTOL_SINGLE * fabsf(dm.params[j]);
            if (same && strcmp(p->name, "no_grad_fixed_param") != 0) {  // [2, 2] on every rank
                k.bad++;
                fprintf(stderr, "rank %d: %s: %s equals this rank's own initial value: the ranks "
                        "did not start different, so the broadcast is not tested\n", R, name, p->name);
            }
        }

    // 2. Training: rank R takes rows [lo, hi) of each step's batch.
    const int lo = R * ROWS / N, hi = (R + 1) * ROWS / N, n_local = hi - lo;
    const float share = (float)N * (float)n_local / (float)ROWS;  // 1 when shards are equal
    float xb[ROWS * TOY_D_IN], yb[ROWS * TOY_D_OUT];  // (20, 10), (20, 5) this step's batch
    for (int s = 0; s < cfg->steps; s++) {
        for (int r = 0; r < ROWS; r++) {
            const int64_t src = fx->order[s][r];
            memcpy(xb + r * TOY_D_IN, fx->data + src * TOY_D_IN, sizeof(float) * TOY_D_IN);
            memcpy(yb + r * TOY_D_OUT, fx->labels + src * TOY_D_OUT, sizeof(float) * TOY_D_OUT);
        }
        // single process: all 20 rows
        toy_zero_grads(&ref);
        const float loss_ref = toy_forward(&ref, xb, yb, ROWS);
        toy_backward(&ref, 1.0f, NULL, NULL);
        toy_sgd_step(&ref, LR);
        // data parallel: this rank's rows
        mirror_poison(&x);
        const float loss_local = toy_forward(&dm, xb + lo * TOY_D_IN, yb + lo * TOY_D_OUT, n_local);
        toy_backward(&dm, share, mirror_hook, &x);
        mirror_finish(&x);
        toy_sgd_step(&dm, LR);

        double g[3];  // the global loss (rows-weighted mean), and the worst differences
        g[0] = (double)loss_local * n_local / ROWS;
        g[1] = toy_check_close(&k, &dm, dm.params, ref.params, RTOL_SINGLE, ATOL_SINGLE,
                           "DDP vs single process", s + 1);
        load_params(&dm, fx, "sgd", s, want);
        g[2] = toy_check_close(&k, &dm, dm.params, want, RTOL_TORCH, ATOL_TORCH, "DDP vs PyTorch", s + 1);
        toy_check_bitwise(&k, &dm, dm.params, init, 0, "frozen parameter changed", s + 1);
        if (!(fabs(loss_ref - loss_torch[s]) <= ATOL_TORCH + RTOL_TORCH * fabs(loss_torch[s]))) {
            k.bad++;
            fprintf(stderr, "rank %d: %s: step %d: single-process loss %.9g, PyTorch's %.9g\n", R,
                    name, s + 1, (double)loss_ref, (double)loss_torch[s]);
        }
        comm_host_allreduce_f64(c, g, 1, COMM_SUM);
        comm_host_allreduce_f64(c, g + 1, 2, COMM_MAX);
        if (R == 0)
            printf("step %d  loss %.6f (single %.6f, torch %.6f)  max|ddp - single| %.1e  "
                   "max|ddp - torch| %.1e\n", s + 1, g[0], (double)loss_ref, (double)loss_torch[s],
                   g[1], g[2]);
    }

    // 3. Replicas identical: the same averaged gradients and the same update on every rank.
    memcpy(rank0, dm.params, bytes);
    comm_host_bcast(c, rank0, bytes, 0);
    toy_check_bitwise(&k, &dm, dm.params, rank0, -1, "final parameters vs rank 0's", cfg->steps);

    const ddp_stats_t st = ddp_stats(d);
    long long bad = k.bad;
    comm_host_allreduce_i64(c, &bad, 1, COMM_SUM);
    if (R == 0) {
        if (bad == 0)
            printf("OK   %s: %d steps on %d rank%s (rows %d..%d per rank), %lld all-reduces "
                   "of %lld bytes in all per rank: DDP == single process == PyTorch, frozen "
                   "unchanged, ranks bitwise equal\n", name, cfg->steps, N, N == 1 ? "" : "s", ROWS / N,
                   (ROWS + N - 1) / N, st.allreduce_calls, st.bytes_reduced);
        else
            printf("FAILED %s: %lld failed checks over all ranks (each one on stderr)\n", name, bad);
        fflush(stdout);
    }
    ddp_destroy(d);
    mirror_free(&x);
    toy_destroy(&dm);
    toy_destroy(&ref);
    free(init);
    free(own_init);
    free(want);
    free(rank0);
    return bad;
}

// ------------------------------------------------------------------ flags
static int parse_mb_list(const char* s, double* out) {
    int n = 0;
    const char* p = s;
    while (*p) {
        char* end = NULL;
        const double v = strtod(p, &end);
        if (end == p || !(v >= 0) || !isfinite(v) || v > 1e6 || n == MAX_MB ||
            (*end && *end != ','))
            comm_bad_input("--bucket-mb: '%s': expected up to %d comma-separated sizes in MiB, each in "
                 "[0, 1e6] (e.g. 0.0001,0.0016,0.01)", s, MAX_MB);
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) comm_bad_input("--bucket-mb: empty list");
    return n;
}

int main(int argc, char** argv) {
    const char *model = NULL, *variant = NULL, *mb = NULL, *fixture = NULL, *backend = NULL;
    int steps = 0, unused = 0;
    double timeout = 0;
    cli_opt_t opts[] = {
        {"model", CLI_CHOICE, &model, "all", "ToyModel or ToyModelWithTiedWeights, or both", TOY_KIND_CHOICES "|all"},
        {"variant", CLI_CHOICE, &variant, "all", "DDP variant, or every one", DDP_VARIANT_CHOICES "|all"},
        {"bucket-mb", CLI_STR, &mb, "0.0001,0.0016,0.01", "bucket caps in MiB for bucketed (comma list; the course's three)", NULL},
        {"steps", CLI_INT, &steps, "5", "training steps (at most the fixture's)", NULL},
        {"fixture", CLI_STR, &fixture, "tests/fixtures/toymodel", "PyTorch fixture directory (gen_toymodel.py)", NULL},
        {"unused-trainable", CLI_FLAG, &unused, "0", "make no_grad_fixed_param trainable (still unused by the forward: its gradient comes from the DDP layer's zero-fill)", NULL},
        {"backend", CLI_CHOICE, &backend, "mpi", "mpi: host buffers; nccl: the DDP layer on device buffers, one GPU per rank", COMM_BACKEND_CHOICES},
        {"comm-timeout", CLI_DOUBLE, &timeout, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv, "the course's DDP test on the ToyModels: every variant vs single-process training and PyTorch",
              opts, CLI_COUNT(opts));
    double mbs[MAX_MB];
    const int n_mb = parse_mb_list(mb, mbs);
    fixture_t fx;
    load_fixture(fixture, &fx);
    if (steps < 1 || steps > fx.steps)
        comm_bad_input("--steps %d: the fixture holds 1..%d steps", steps, fx.steps);

    comm_backend_t be = COMM_MPI;
    comm_backend_parse(backend, &be);  // cannot fail: CLI_CHOICE checked it
    comm_t* c = comm_init(be, comm_timeout_flag(timeout));
    if (c->world > ROWS) {
        if (c->rank == 0) fprintf(stderr, "%s: error: %d ranks: at most %d (one row each)\n", progname(), c->world, ROWS);
        comm_destroy(c, 1);
        return EXIT_BAD_INPUT;
    }
    if (c->rank == 0)
        printf("# ddp_toy: %d rank%s (%s), fixture %s, %d steps, SGD lr %g, %d rows split %s\n",
               c->world, c->world == 1 ? "" : "s", comm_backend_name(be), fixture, steps, (double)LR, ROWS,
               ROWS % c->world ? "unevenly (weighted)" : "evenly");

    run_cfg_t runs[64];
    int n_runs = 0;
    for (int kind = TOY_MODEL; kind <= TOY_TIED; kind++) {
        if (strcmp(model, "all") != 0 && strcmp(model, toy_kind_name((toy_kind_t)kind)) != 0) continue;
        for (int v = 0; v < DDP_NVARIANTS; v++) {
            if (strcmp(variant, "all") != 0 && strcmp(variant, ddp_variant_name((ddp_variant_t)v)) != 0) continue;
            for (int b = 0; b < (v == DDP_BUCKETED ? n_mb : 1); b++)
                runs[n_runs++] = (run_cfg_t){(toy_kind_t)kind, (ddp_variant_t)v, mbs[b], steps, unused};
        }
    }
    int failed = 0;
    for (int i = 0; i < n_runs; i++) failed += run_one(c, &fx, &runs[i]) != 0;
    if (c->rank == 0) {
        if (failed) printf("FAILED: %d of %d runs\n", failed, n_runs);
        else printf("OK: all %d runs\n", n_runs);
    }
    comm_destroy(c, 1);
    return failed ? 1 : 0;
}
