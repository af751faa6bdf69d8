// zero_toy: the course's sharded-optimizer test (tests/test_sharded_optimizer.py) as a
// program, on the MPI backend, plus ZeRO-1 and ZeRO-2 on the same models.
//
//   scripts/mpirun.sh 3 build/07_zero/zero_toy --model all --mode all
//
// Every rank builds the ToyModel (or the tied one) from the same initial parameters (the
// PyTorch fixture's, i.e. identical seeds) and trains it for 10 AdamW steps (lr 0.1, weight
// decay 0.1, betas 0.9/0.999, eps 1e-8) on the SAME batch on every rank (the fixture's
// adamw_data[s], 32 rows) with loss sum((y − ŷ)²). Beside it, every rank trains an unsharded
// copy with plain AdamW over each trainable parameter (the reference). After every step, on
// every rank:
//   course  the sharded optimizer, no gradient communication (the data is identical): each
//           rank steps the parameters it owns and broadcasts them. Every parameter must be
//           BITWISE equal to the unsharded run — the owner runs the same arithmetic on the same
//           gradient and the others receive its bits (the course asserts rtol 1e-7, atol 0);
//   zero1, zero2  gradients averaged by reduce-scatter (n identical copies), AdamW on the
//           owned shard or pieces, all-gather: within ZERO_RTOL/ZERO_ATOL of the unsharded run;
//   every mode: within the fixture's tolerance of PyTorch's trajectory (rtol 1e-4, atol 1e-5),
//           frozen parameters unchanged.
// At the end every rank's parameters are bitwise equal to rank 0's, and each rank's optimizer
// state, as the counting allocator measured it (tag optim), equals 8 bytes × the trainable
// elements it owns, computed here independently of the optimizer.
// --optimizer sgd wraps SGD (lr 0.1) instead (course mode: bitwise against unsharded SGD; no
// fixture). --groups 2 builds the sharded optimizer on the first half of the parameters and
// adds the rest with sharded_optim_add_group.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/toymodel.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"
#include "common/adamw_cpu.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/npy.h"

#define STEPS_MAX 10
#define ROWS 32
// The fixture's tolerance for a float32 C run against PyTorch's float64 one (its README).
#define RTOL_TORCH 1e-4
#define ATOL_TORCH 1e-5
// ZeRO vs the unsharded run: the only difference is the gradient average of n identical fp32
// copies (exact for n a power of two, within an ulp otherwise: 3 ranks). Each step rounds
// afresh, and AdamW's 1/sqrt(v) amplifies it where v is tiny: 1.4e-7 absolute (4e-6
// relative) was seen on 3 ranks after 10 steps; the band is the course's DDP tolerance.
#define ZERO_RTOL 1e-5
#define ZERO_ATOL 1e-6

typedef enum { MODE_COURSE = 0, MODE_ZERO1, MODE_ZERO2, N_MODES } mode_t_;
static const char* const mode_names[N_MODES] = {"course", "zero1", "zero2"};

typedef struct {
    const char* dir;
    float* xs;  // (10, 32, 10)
    float* ys;  // (10, 32, 5)
} fixture_t;

static void load_f32(const char* path, float* dst, size_t n) {
    npy_array_t a;
    char err[512];
    if (npy_read(path, &a, err, sizeof err)) comm_bad_input("%s (regenerate: scripts/make_fixtures.sh toymodel)", err);
    if (a.dtype != DT_F32 || a.nbytes != n * sizeof(float))
        comm_bad_input("%s: expected %zu float32 values, got %zu bytes of %s", path, n, a.nbytes, dtype_name(a.dtype));
    memcpy(dst, a.data, a.nbytes);
    npy_array_free(&a);
}

static void load_params(const toy_model_t* m, const char* dir, const char* sub, int step, float* dst) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s/%s", dir, toy_kind_name(m->kind), sub);
    if (toy_load_params(m, path, step, dst, err, sizeof err)) comm_bad_input("%s (regenerate: scripts/make_fixtures.sh toymodel)", err);
}

// The trainable elements of the toy's table inside [lo, hi): the formula's count, written
// apart from zero.c so that the measured optimizer bytes are checked against something else.
static size_t trainable_in(const toy_model_t* m, size_t lo, size_t hi) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        if (!m->p[i].trainable) continue;
        const size_t a = m->p[i].offset, e = a + m->p[i].numel;
        if (a < hi && lo < e) n += (e < hi ? e : hi) - (a > lo ? a : lo);
    }
    return n;
}

typedef struct {
    toy_kind_t kind;
    mode_t_ mode;
    opt_kind_t opt;
    int steps, groups;
    double bucket_mb;
} run_cfg_t;

// Returns the failed checks over all ranks (the same on every rank).
static long long run_one(comm_t* c, const fixture_t* fx, const run_cfg_t* rc) {
    const int R = c->rank, W = c->world;
    char name[128];
    snprintf(name, sizeof name, "%s %s %s%s", toy_kind_name(rc->kind), mode_names[rc->mode], opt_kind_name(rc->opt),
             rc->groups == 2 ? " (2 groups)" : "");
    toy_checker_t k = {c->rank, name, 0};
    const adamw_config_t cfg = {0.1f, 0.9f, 0.999f, 1e-8f, 0.1f};  // the course's test

    toy_model_t zm, ref;  // the sharded run on this rank; the unsharded reference
    toy_create(&zm, rc->kind, ROWS);
    toy_create(&ref, rc->kind, ROWS);
    const size_t total = zm.total, P = zero_padded_total(total, W);
    // ZeRO needs buffers that split into equal shards: the toy's, grown to P zeros.
    if (rc->mode != MODE_COURSE) {
        zm.params = realloc(zm.params, P * sizeof(float));
        zm.grads = realloc(zm.grads, P * sizeof(float));
        if (!zm.params || !zm.grads) DIE("out of host memory");
        memset(zm.params + total, 0, (P - total) * sizeof(float));
    }
    const size_t nbuf = rc->mode == MODE_COURSE ? total : P;
    float* init = malloc(total * sizeof(float));
    float* want = malloc(total * sizeof(float));
    float* rank0 = malloc(nbuf * sizeof(float));
    float* am = calloc(total, sizeof(float));  // the reference's AdamW moments
    float* av = calloc(total, sizeof(float));
    if (!init || !want || !rank0 || !am || !av) DIE("out of host memory");
    load_params(&zm, fx->dir, "init", -1, init);
    memcpy(zm.params, init, total * sizeof(float));  // identical seeds on every rank
    memcpy(ref.params, init, total * sizeof(float));

    param_ref_t table[TOY_MAX_PARAMS];
    for (int i = 0; i < zm.n_params; i++)
        table[i] = (param_ref_t){zm.p[i].name, zm.p[i].offset, zm.p[i].numel, zm.p[i].trainable};
    const size_t optim_before = mem_stats(DEV_CPU).live_by_tag[MEM_OPTIM];
    sharded_optim_t* so = NULL;
    zero_t* z = NULL;
    size_t formula_elems = 0;  // trainable elements this rank owns
    if (rc->mode == MODE_COURSE) {
        const int first = rc->groups == 2 ? zm.n_params / 2 : zm.n_params;
        so = sharded_optim_create(c, table, first, zm.params, zm.grads, total, rc->opt, &cfg, 0, NULL);
        if (first < zm.n_params) sharded_optim_add_group(so, table + first, zm.n_params - first);
        for (int i = 0; i < zm.n_params; i++)
            if (sharded_optim_owner(so, i) == R) formula_elems += zm.p[i].numel;
    } else {
        z = zero_create(c, rc->mode == MODE_ZERO1 ? 1 : 2, table, zm.n_params, zm.params, zm.grads, total,
                        rc->bucket_mb, &cfg, NULL);
        if (rc->mode == MODE_ZERO1) {
            size_t lo, hi;
            zero_shard_range(total, W, R, &lo, &hi, NULL);
            formula_elems = trainable_in(&zm, lo, hi);
        } else {
            for (int b = 0; b < zero_n_buckets(z); b++) {
                const zero_bucket_t bk = zero_bucket(z, b);
                const size_t lo = bk.begin + (size_t)R * bk.piece;
                formula_elems += trainable_in(&zm, lo, lo + bk.piece);
            }
        }
    }
    if (R == 0) {
        printf("# %s: %zu parameters in a buffer of %zu", name, total, nbuf);
        if (so) {
            printf("; owners:");
            for (int i = 0; i < zm.n_params; i++) printf(" %s->%d", zm.p[i].name, sharded_optim_owner(so, i));
        } else {
            printf(" (%zu padding); %d bucket%s, shard %zu elements", P - total, zero_n_buckets(z),
                   zero_n_buckets(z) == 1 ? "" : "s", zero_shard_elems(z));
        }
        printf("\n");
    }

    float x[ROWS * TOY_D_IN];
    for (int s = 0; s < rc->steps; s++) {
        const float* xb = fx->xs + (size_t)s * ROWS * TOY_D_IN;
        const float* yb = fx->ys + (size_t)s * ROWS * TOY_D_OUT;
        memcpy(x, xb, sizeof x);
        // the unsharded reference: every trainable parameter, plain AdamW (or SGD)
        toy_forward(&ref, x, yb, ROWS);
        toy_backward(&ref, (float)(ROWS * TOY_D_OUT), NULL, NULL);  // the sum's gradient
        for (int i = 0; i < ref.n_params; i++) {
            if (!ref.p[i].trainable) continue;
            const size_t o = ref.p[i].offset;
            if (rc->opt == OPT_ADAMW) adamw_cpu_step(&cfg, ref.params + o, ref.grads + o, am + o, av + o, ref.p[i].numel, s + 1);
            else for (size_t j = 0; j < ref.p[i].numel; j++) ref.params[o + j] -= cfg.lr * ref.grads[o + j];
        }
        // the sharded run; every gradient slot poisoned first (frozen, padding): nothing the
        // optimizer must not read may leak into a parameter
        for (size_t j = 0; j < nbuf; j++) zm.grads[j] = NAN;
        const float loss = toy_forward(&zm, x, yb, ROWS) * ROWS * TOY_D_OUT;
        toy_backward(&zm, (float)(ROWS * TOY_D_OUT), z ? zero_grad_ready : NULL, z);
        if (so) sharded_optim_step(so);
        else {
            zero_finish_grads(z);
            zero_step(z);
        }
        double g[2] = {0, 0};
        if (rc->mode == MODE_COURSE) toy_check_bitwise(&k, &zm, zm.params, ref.params, -1, "sharded vs unsharded (bitwise)", s + 1);
        else g[0] = toy_check_close(&k, &zm, zm.params, ref.params, ZERO_RTOL, ZERO_ATOL, "ZeRO vs unsharded", s + 1);
        if (rc->opt == OPT_ADAMW) {
            load_params(&zm, fx->dir, "adamw", s, want);
            g[1] = toy_check_close(&k, &zm, zm.params, want, RTOL_TORCH, ATOL_TORCH, "sharded vs PyTorch", s + 1);
        }
        toy_check_bitwise(&k, &zm, zm.params, init, 0, "frozen parameter changed", s + 1);
        comm_host_allreduce_f64(c, g, 2, COMM_MAX);
        if (R == 0)
            printf("step %2d  loss %.6f  max|sharded - unsharded| %.1e  max|sharded - torch| %.1e\n", s + 1, (double)loss, g[0], g[1]);
    }

    // Replicas bitwise equal (padding included); optimizer state equal to the formula.
    memcpy(rank0, zm.params, nbuf * sizeof(float));
    comm_host_bcast(c, rank0, nbuf * sizeof(float), 0);
    if (memcmp(rank0, zm.params, nbuf * sizeof(float)) != 0) {
        k.bad++;
        fprintf(stderr, "rank %d: %s: final parameters differ from rank 0's\n", R, name);
    }
    const size_t measured = mem_stats(DEV_CPU).live_by_tag[MEM_OPTIM] - optim_before;
    const size_t formula = rc->opt == OPT_ADAMW ? 2 * sizeof(float) * formula_elems : 0;
    if (measured != formula) {
        k.bad++;
        fprintf(stderr, "rank %d: %s: optimizer state %zu bytes (allocator, tag optim), formula 8 x %zu owned elements = %zu\n",
                R, name, measured, formula_elems, formula);
    }
    long long v[3] = {(long long)measured, (long long)formula, (long long)formula_elems};
    long long tot[3] = {v[0], v[1], v[2]};
    comm_host_allreduce_i64(c, tot, 3, COMM_SUM);
    comm_host_allreduce_i64(c, v, 3, COMM_MAX);
    long long bad = k.bad;
    comm_host_allreduce_i64(c, &bad, 1, COMM_SUM);
    if (R == 0) {
        size_t trainable = trainable_in(&zm, 0, total);
        printf("memory: optimizer state %lld bytes over all ranks (formula %lld = 8 x %zu trainable), at most %lld on one rank\n",
               tot[0], tot[1], trainable, v[0]);
        if (rc->opt == OPT_ADAMW && tot[1] != (long long)(8 * trainable)) {
            bad++;
            fprintf(stderr, "%s: the ranks own %lld trainable elements in all, the model has %zu\n", name, tot[2], trainable);
        }
        if (bad == 0)
            printf("OK   %s: %d steps on %d rank%s: %s unsharded%s, frozen unchanged, ranks bitwise equal, "
                   "optimizer state == formula on every rank\n", name, rc->steps, W, W == 1 ? "" : "s",
                   rc->mode == MODE_COURSE ? "bitwise ==" : "close to",
                   rc->opt == OPT_ADAMW ? ", == PyTorch within rtol 1e-4 atol 1e-5" : " (no PyTorch fixture for SGD here)");
        else
            printf("FAILED %s: %lld failed checks over all ranks (each one on stderr)\n", name, bad);
        fflush(stdout);
    }
    sharded_optim_destroy(so);
    zero_destroy(z);
    toy_destroy(&zm);
    toy_destroy(&ref);
    free(init);
    free(want);
    free(rank0);
    free(am);
    free(av);
    return bad;
}

int main(int argc, char** argv) {
    const char *model = NULL, *mode = NULL, *opt = NULL, *fixture = NULL;
    int steps = 0, groups = 0;
    double bucket_mb = 0, timeout = 0;
    cli_opt_t opts[] = {
        {"model", CLI_CHOICE, &model, "all", "ToyModel, ToyModelWithTiedWeights, or both", TOY_KIND_CHOICES "|all"},
        {"mode", CLI_CHOICE, &mode, "all", "the course's sharded optimizer, ZeRO-1, ZeRO-2, or all three", "course|zero1|zero2|all"},
        {"optimizer", CLI_CHOICE, &opt, "adamw", "the optimizer the course's version wraps (ZeRO: adamw only)", OPT_KIND_CHOICES},
        {"steps", CLI_INT, &steps, "10", "optimizer steps (1..10, the fixture's)", NULL},
        {"groups", CLI_INT, &groups, "1", "2: the course's optimizer gets half the parameters, the rest by add_group", NULL},
        {"bucket-mb", CLI_DOUBLE, &bucket_mb, "0.001", "ZeRO-2 bucket cap in MiB (the toy is 3.6 KB: small caps give several buckets)", NULL},
        {"fixture", CLI_STR, &fixture, "tests/fixtures/toymodel", "PyTorch fixture directory (gen_toymodel.py)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv, "the course's sharded-optimizer test on the ToyModels, and ZeRO-1/2 on them", opts, CLI_COUNT(opts));
    if (steps < 1 || steps > STEPS_MAX) comm_bad_input("--steps: %d is out of range (1..%d, the fixture's steps)", steps, STEPS_MAX);
    if (groups != 1 && groups != 2) comm_bad_input("--groups: %d must be 1 or 2", groups);
    if (!(bucket_mb >= 0 && bucket_mb <= 1e6)) comm_bad_input("--bucket-mb: %g is out of range [0, 1e6]", bucket_mb);
    opt_kind_t ok = OPT_ADAMW;
    opt_kind_parse(opt, &ok);  // cannot fail: CLI_CHOICE checked it
    if (ok == OPT_SGD && strcmp(mode, "course") != 0) comm_bad_input("--optimizer sgd: only with --mode course (ZeRO-1/2 here shard AdamW)");
    if (groups == 2 && strcmp(mode, "course") != 0) comm_bad_input("--groups 2: only with --mode course (add_group is the course's optimizer's)");
    fixture_t fx = {fixture, malloc(STEPS_MAX * ROWS * TOY_D_IN * sizeof(float)), malloc(STEPS_MAX * ROWS * TOY_D_OUT * sizeof(float))};
    if (!fx.xs || !fx.ys) DIE("out of host memory");
    char path[1024];
    snprintf(path, sizeof path, "%s/adamw_data.npy", fixture);
    load_f32(path, fx.xs, STEPS_MAX * ROWS * TOY_D_IN);
    snprintf(path, sizeof path, "%s/adamw_labels.npy", fixture);
    load_f32(path, fx.ys, STEPS_MAX * ROWS * TOY_D_OUT);

    comm_t* c = comm_init(COMM_MPI, comm_timeout_flag(timeout));
    if (c->rank == 0)
        printf("# zero_toy: %d rank%s (mpi), fixture %s, %d steps, %s lr 0.1, identical data on every rank\n", c->world,
               c->world == 1 ? "" : "s", fixture, steps, opt);
    int failed = 0, n_runs = 0;
    for (int kind = TOY_MODEL; kind <= TOY_TIED; kind++) {
        if (strcmp(model, "all") != 0 && strcmp(model, toy_kind_name((toy_kind_t)kind)) != 0) continue;
        for (int md = 0; md < N_MODES; md++) {
            if (strcmp(mode, "all") != 0 && strcmp(mode, mode_names[md]) != 0) continue;
            const run_cfg_t rc = {(toy_kind_t)kind, (mode_t_)md, ok, steps, groups, bucket_mb};
            failed += run_one(c, &fx, &rc) != 0;
            n_runs++;
        }
    }
    if (c->rank == 0) {
        if (failed) printf("FAILED: %d of %d runs\n", failed, n_runs);
        else printf("OK: all %d runs\n", n_runs);
    }
    free(fx.xs);
    free(fx.ys);
    comm_destroy(c, 1);
    return failed ? 1 : 0;
}
