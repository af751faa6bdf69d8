// Stage 06 tests on the course's ToyModels:
// - the single-process C ToyModels against PyTorch (tests/fixtures/toymodel/): SGD as in the
//   course's DDP test, AdamW as in its sharded-optimizer test; the hooks' order and timing;
// - the course's DDP test (build/06_ddp/ddp_toy under mpirun, MPI backend): every variant ×
//   both models × the course's bucket sizes on 2 ranks, all of them on 1, 3 (uneven split)
//   and 4 ranks, an unused trainable parameter, a corrupted fixture (the checks must fail),
//   and bad flags; the NCCL backend on 2 GPUs (skipped without them).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/toymodel.h"
#include "common/adamw_cpu.h"
#include "common/npy.h"
#include "common/rng.h"
#include "tests/harness.h"

#define FIX "tests/fixtures/toymodel"
// The C model (fp32) against PyTorch's float64 run, SGD: fp32 rounding of forward and
// backward over 5 small steps (observed ~6e-8; the fixture script checked a float32 torch run
// stays within a tenth of this).
#define RTOL_SGD 1e-5
#define ATOL_SGD 1e-6
// AdamW: it divides by sqrt(v), so the gradients' fp32 rounding reaches the parameters less
// damped than in SGD; the fixture's float32 torch run needed this wider band (README there).
#define RTOL_ADAMW 1e-4
#define ATOL_ADAMW 1e-5

static char g_out[1 << 17];

// Loads <dir>/<name> (float32, exactly n elements) into dst.
static void load_f32(const char* name, float* dst, size_t n) {
    float* a = fixture_load_f32(name, n);
    memcpy(dst, a, n * sizeof(float));
    free(a);
}

static void load_params_or_die(const toy_model_t* m, const char* sub, int step, float* dst) {
    char dir[512], err[1024];
    snprintf(dir, sizeof dir, FIX "/%s/%s", toy_kind_name(m->kind), sub);
    cr_assert_eq(toy_load_params(m, dir, step, dst, err, sizeof err), 0, "%s", err);
}

// ------------------------------------------------------------------ single process vs PyTorch
static void sgd_vs_torch(toy_kind_t kind) {
    toy_model_t m;
    toy_create(&m, kind, 20);
    load_params_or_die(&m, "init", -1, m.params);
    float data[20 * 10], labels[20 * 5], loss_torch[5], x[20 * 10], y[20 * 5];
    load_f32("toymodel/data.npy", data, 200);
    load_f32("toymodel/labels.npy", labels, 100);
    char path[256];
    snprintf(path, sizeof path, "toymodel/%s/sgd_loss.npy", toy_kind_name(kind));
    load_f32(path, loss_torch, 5);
    npy_array_t order;
    char err[512];
    cr_assert_eq(npy_read(FIX "/order.npy", &order, err, sizeof err), 0, "%s", err);
    const int64_t shape[2] = {5, 20};
    cr_assert_eq(npy_check(&order, DT_I64, 2, shape, err, sizeof err), 0, "%s", err);
    const int64_t* ord = order.data;
    float* want = malloc(m.total * sizeof(float));
    float* init = malloc(m.total * sizeof(float));
    memcpy(init, m.params, m.total * sizeof(float));
    for (int s = 0; s < 5; s++) {
        for (int r = 0; r < 20; r++) {
            memcpy(x + r * 10, data + ord[s * 20 + r] * 10, 10 * sizeof(float));
            memcpy(y + r * 5, labels + ord[s * 20 + r] * 5, 5 * sizeof(float));
        }
        toy_zero_grads(&m);
        const float loss = toy_forward(&m, x, y, 20);
        toy_backward(&m, 1.0f, NULL, NULL);
        toy_sgd_step(&m, 0.1f);
        char what[128];
        snprintf(what, sizeof what, "%s loss before step %d", toy_kind_name(kind), s + 1);
        ASSERT_ALLCLOSE(&loss, &loss_torch[s], 1, RTOL_SGD, ATOL_SGD, what);
        load_params_or_die(&m, "sgd", s, want);
        for (int i = 0; i < m.n_params; i++) {
            snprintf(what, sizeof what, "%s %s after SGD step %d", toy_kind_name(kind), m.p[i].name, s + 1);
            ASSERT_ALLCLOSE(m.params + m.p[i].offset, want + m.p[i].offset, m.p[i].numel, RTOL_SGD, ATOL_SGD, what);
            if (!m.p[i].trainable)
                cr_assert(memcmp(m.params + m.p[i].offset, init + m.p[i].offset, m.p[i].numel * 4) == 0,
                          "%s: frozen parameter changed", what);
        }
    }
    free(want);
    free(init);
    npy_array_free(&order);
    toy_destroy(&m);
}

Test(toymodel, toy_sgd_matches_pytorch) { sgd_vs_torch(TOY_MODEL); }
Test(toymodel, tied_sgd_matches_pytorch) { sgd_vs_torch(TOY_TIED); }

// The course's sharded-optimizer test, unsharded: 10 AdamW steps on sum((y - ŷ)²). This checks
// the fixture that stage 07 uses, and that toy_backward's loss_scale gives the sum's gradient.
static void adamw_vs_torch(toy_kind_t kind) {
    toy_model_t m;
    toy_create(&m, kind, 32);
    load_params_or_die(&m, "init", -1, m.params);
    float* xs = malloc(10 * 32 * 10 * sizeof(float));
    float* ys = malloc(10 * 32 * 5 * sizeof(float));
    load_f32("toymodel/adamw_data.npy", xs, 10 * 32 * 10);
    load_f32("toymodel/adamw_labels.npy", ys, 10 * 32 * 5);
    float loss_torch[10];
    char path[256];
    snprintf(path, sizeof path, "toymodel/%s/adamw_loss.npy", toy_kind_name(kind));
    load_f32(path, loss_torch, 10);
    float* am = calloc(m.total, sizeof(float));
    float* av = calloc(m.total, sizeof(float));
    float* want = malloc(m.total * sizeof(float));
    const adamw_config_t cfg = {0.1f, 0.9f, 0.999f, 1e-8f, 0.1f};
    for (int s = 0; s < 10; s++) {
        const float mean = toy_forward(&m, xs + s * 320, ys + s * 160, 32);
        const float sum = mean * 32 * 5;
        toy_backward(&m, 32.0f * 5.0f, NULL, NULL);  // gradient of the sum = 160 x the mean's
        for (int i = 0; i < m.n_params; i++)  // frozen parameters have no gradient: skipped
            if (m.p[i].trainable) {
                const size_t o = m.p[i].offset;
                adamw_cpu_step(&cfg, m.params + o, m.grads + o, am + o, av + o, m.p[i].numel, s + 1);
            }
        char what[128];
        snprintf(what, sizeof what, "%s sum-of-squares loss before AdamW step %d", toy_kind_name(kind), s + 1);
        ASSERT_ALLCLOSE(&sum, &loss_torch[s], 1, RTOL_ADAMW, ATOL_ADAMW, what);
        load_params_or_die(&m, "adamw", s, want);
        for (int i = 0; i < m.n_params; i++) {
            snprintf(what, sizeof what, "%s %s after AdamW step %d", toy_kind_name(kind), m.p[i].name, s + 1);
            ASSERT_ALLCLOSE(m.params + m.p[i].offset, want + m.p[i].offset, m.p[i].numel, RTOL_ADAMW, ATOL_ADAMW, what);
        }
    }
    free(xs);
    free(ys);
    free(am);
    free(av);
    free(want);
    toy_destroy(&m);
}

Test(toymodel, toy_adamw_matches_pytorch) { adamw_vs_torch(TOY_MODEL); }
Test(toymodel, tied_adamw_matches_pytorch) { adamw_vs_torch(TOY_TIED); }

// ------------------------------------------------------------------ hooks
typedef struct {
    toy_model_t* m;
    int order[16], n;
    float* at_hook;  // (total) each parameter's gradient as it was when its hook fired
} hook_log_t;

static void log_hook(void* ctx, int i) {
    hook_log_t* h = ctx;
    h->order[h->n++] = i;
    const toy_param_t* p = &h->m->p[i];
    memcpy(h->at_hook + p->offset, h->m->grads + p->offset, p->numel * sizeof(float));
}

static void hooks_case(toy_kind_t kind, const int* want, int n_want) {
    toy_model_t m;
    toy_create(&m, kind, 7);
    toy_init_params(&m, 11);
    float x[7 * 10], y[7 * 5];
    rng_t r = rng_make(12);
    rng_fill_normal(&r, x, 70, 0, 1);
    rng_fill_normal(&r, y, 35, 0, 1);
    for (size_t j = 0; j < m.total; j++) m.grads[j] = NAN;  // poison: what is not written stays NaN
    hook_log_t h = {&m, {0}, 0, malloc(m.total * sizeof(float))};
    for (size_t j = 0; j < m.total; j++) h.at_hook[j] = NAN;
    toy_forward(&m, x, y, 7);
    toy_backward(&m, 1.0f, log_hook, &h);
    cr_assert_eq(h.n, n_want, "%s: %d hooks fired, expected %d", toy_kind_name(kind), h.n, n_want);
    for (int k = 0; k < n_want; k++)
        cr_assert_eq(h.order[k], want[k], "%s: hook %d was for parameter %d, expected %d",
                     toy_kind_name(kind), k, h.order[k], want[k]);
    for (int i = 0; i < m.n_params; i++) {
        const toy_param_t* p = &m.p[i];
        const float* g = m.grads + p->offset;
        const int used = m.uses[i] > 0;
        if (p->trainable && used) {
            // the gradient was final when the hook fired: nothing changed it afterwards
            cr_assert(memcmp(h.at_hook + p->offset, g, p->numel * sizeof(float)) == 0,
                      "%s: %s changed after its hook fired", toy_kind_name(kind), p->name);
            for (size_t j = 0; j < p->numel; j++) cr_assert(isfinite(g[j]), "%s[%zu] not written", p->name, j);
        } else {
            for (size_t j = 0; j < p->numel; j++)
                cr_assert(isnan(g[j]), "%s (%s) gradient slot written", p->name, p->trainable ? "unused" : "frozen");
        }
    }
    free(h.at_hook);
    toy_destroy(&m);
}

Test(toymodel, hooks_fire_once_in_reverse_order_when_final) {
    const int toy[] = {4, 2, 1};        // fc3, fc2.fc.weight, fc1 (frozen and unused: none)
    hooks_case(TOY_MODEL, toy, 3);
    const int tied[] = {3, 2, 1, 0};    // fc5, fc3, fc2 (after fc4 AND fc2 used it), fc1
    hooks_case(TOY_TIED, tied, 4);
}

Test(toymodel, tied_gradient_is_the_sum_of_both_uses) {
    // d loss / d W2 by central differences on a few elements, against the backward's value
    toy_model_t m;
    toy_create(&m, TOY_TIED, 4);
    toy_init_params(&m, 5);
    float x[4 * 10], y[4 * 5];
    rng_t r = rng_make(6);
    rng_fill_normal(&r, x, 40, 0, 1);
    rng_fill_normal(&r, y, 20, 0, 1);
    toy_forward(&m, x, y, 4);
    toy_backward(&m, 1.0f, NULL, NULL);
    const size_t off = m.p[1].offset;  // fc2.weight
    for (size_t j = 0; j < m.p[1].numel; j += 37) {
        const float keep = m.params[off + j], h = 1e-2f;
        m.params[off + j] = keep + h;
        const double up = toy_forward(&m, x, y, 4);
        m.params[off + j] = keep - h;
        const double down = toy_forward(&m, x, y, 4);
        m.params[off + j] = keep;
        const double fd = (up - down) / (2 * h);
        // fp32 loss differences over h = 1e-2 (and an occasional ReLU kink): 2e-3 absolute
        cr_assert(fabs(fd - m.grads[off + j]) <= 2e-3 + 2e-2 * fabs(fd),
                  "fc2.weight[%zu]: backward %g, central difference %g", j, (double)m.grads[off + j], fd);
    }
    toy_destroy(&m);
}

// ------------------------------------------------------------------ DDP under mpirun
// Runs `scripts/mpirun.sh np build/06_ddp/ddp_toy <args>` (bounded by its timeout); output in g_out.
static int ddp_toy(int np, const char* args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=60 scripts/mpirun.sh %d %s/06_ddp/ddp_toy %s", np,
             build_dir(), args);
    return run_capture(cmd, g_out, sizeof g_out);
}

// One model × variant (× bucket) on 2 ranks; `plan` is the expected "#   N all-reduce" line.
static void ddp_case(const char* model, const char* variant, const char* mb, const char* plan) {
    char args[256], ok[128];
    snprintf(args, sizeof args, "--model %s --variant %s%s%s", model, variant, mb ? " --bucket-mb " : "", mb ? mb : "");
    const int st = ddp_toy(2, args);
    cr_assert_eq(st, 0, "ddp_toy %s on 2 ranks exited %d:\n%s", args, st, g_out);
    snprintf(ok, sizeof ok, "OK   %s %s%s%s%s:", model, variant, mb ? " " : "", mb ? mb : "", mb ? " MiB" : "");
    cr_assert(strstr(g_out, ok), "no '%s' line:\n%s", ok, g_out);
    cr_assert(strstr(g_out, "step 5 "), "fewer than 5 steps printed:\n%s", g_out);
    cr_assert(strstr(g_out, plan), "expected the plan '%s':\n%s", plan, g_out);
}

Test(ddp_2_ranks, toy_naive) { ddp_case("toy", "naive", NULL, "3 all-reduces per step"); }
Test(ddp_2_ranks, toy_flat) { ddp_case("toy", "flat", NULL, "1 all-reduce per step"); }
Test(ddp_2_ranks, toy_overlap) { ddp_case("toy", "overlap", NULL, "3 all-reduces per step"); }
Test(ddp_2_ranks, toy_bucketed_below_every_tensor) { ddp_case("toy", "bucketed", "0.0001", "3 all-reduces per step"); }
Test(ddp_2_ranks, toy_bucketed_between) { ddp_case("toy", "bucketed", "0.0016", "3 all-reduces per step"); }
Test(ddp_2_ranks, toy_bucketed_groups_two) { ddp_case("toy", "bucketed", "0.004", "[fc2.fc.weight, fc1.weight]"); }
Test(ddp_2_ranks, toy_bucketed_above_all) { ddp_case("toy", "bucketed", "0.01", "2 all-reduces per step"); }
Test(ddp_2_ranks, tied_naive) { ddp_case("tied", "naive", NULL, "4 all-reduces per step"); }
Test(ddp_2_ranks, tied_flat) { ddp_case("tied", "flat", NULL, "1 all-reduce per step"); }
Test(ddp_2_ranks, tied_overlap) { ddp_case("tied", "overlap", NULL, "4 all-reduces per step"); }
Test(ddp_2_ranks, tied_bucketed_below_every_tensor) { ddp_case("tied", "bucketed", "0.0001", "4 all-reduces per step"); }
Test(ddp_2_ranks, tied_bucketed_between) { ddp_case("tied", "bucketed", "0.0016", "4 all-reduces per step"); }
Test(ddp_2_ranks, tied_bucketed_groups_pairs) { ddp_case("tied", "bucketed", "0.004", "[fc5.weight, fc3.weight] [fc2.weight, fc1.weight]"); }
Test(ddp_2_ranks, tied_bucketed_above_all) { ddp_case("tied", "bucketed", "0.01", "1 all-reduce per step"); }

// Every variant and both models in one job: 2 models × (3 + 3 bucket sizes) = 12 runs.
static void all_runs(int np, const char* extra) {
    char args[256];
    snprintf(args, sizeof args, "--model all --variant all %s", extra);
    const int st = ddp_toy(np, args);
    cr_assert_eq(st, 0, "ddp_toy %s on %d ranks exited %d:\n%s", args, np, st, g_out);
    cr_assert(strstr(g_out, "OK: all 12 runs"), "expected 'OK: all 12 runs':\n%s", g_out);
}

Test(ddp_ranks, one_rank_every_variant) { all_runs(1, ""); }
Test(ddp_ranks, three_ranks_uneven_split_every_variant) {
    all_runs(3, "");
    cr_assert(strstr(g_out, "unevenly (weighted)") && strstr(g_out, "rows 6..7 per rank"), "%s", g_out);
}
Test(ddp_ranks, four_ranks_every_variant) { all_runs(4, ""); }

// no_grad_fixed_param made trainable: its hook never fires, its gradient slot holds NaN from
// the poisoning, and only the DDP layer's zero-fill keeps it (and the parameter) finite.
Test(ddp_ranks, unused_trainable_parameter_gets_a_zero_gradient) {
    all_runs(2, "--unused-trainable");
    cr_assert(strstr(g_out, "[no_grad_fixed_param]"), "not reduced on its own:\n%s", g_out);
}

// The DDP layer's GPU path (NCCL, device buffers, events and the communication stream) under
// the same checks: ddp_toy mirrors the host ToyModel's buffers on the device (see its header).
Test(ddp_gpu, two_gpus_every_variant_nccl) {
    if (gpu_count() < 2)
        cr_skip_test("needs 2 CUDA GPUs (one per rank): %s", gpu_count() ? "found 1" : gpu_absent_reason());
    all_runs(2, "--backend nccl");
    all_runs(2, "--backend nccl --unused-trainable");
}

// The checks can fail: one element of PyTorch's step-3 fc3.weight is changed in a copy of the
// fixture, and the job must say which parameter and step, and exit non-zero.
Test(ddp_ranks, a_wrong_fixture_fails_the_run) {
    char cmd[1200], dir[512], path[600], err[512];
    snprintf(dir, sizeof dir, "%s/toymodel", test_tmpdir());
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r " FIX " %s", dir, dir);
    cr_assert_eq(run_capture(cmd, g_out, sizeof g_out), 0, "%s", g_out);
    snprintf(path, sizeof path, "%s/toy/sgd/fc3.weight.npy", dir);
    npy_array_t a;
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
    ((float*)a.data)[2 * 250 + 17] += 1e-3f;  // step 3 (index 2), element 17
    cr_assert_eq(npy_write(path, DT_F32, a.rank, a.shape, a.data, err, sizeof err), 0, "%s", err);
    npy_array_free(&a);
    char args[700];
    snprintf(args, sizeof args, "--model toy --variant flat --fixture %s", dir);
    const int st = ddp_toy(2, args);
    cr_assert_neq(st, 0, "a wrong fixture passed:\n%s", g_out);
    cr_assert(strstr(g_out, "step 3: DDP vs PyTorch: fc3.weight"), "the failure does not name it:\n%s", g_out);
    cr_assert(strstr(g_out, "FAILED toy flat"), "%s", g_out);
    cr_assert(!strstr(g_out, "step 2: DDP vs PyTorch"), "steps before the changed one failed too:\n%s", g_out);
}

// ------------------------------------------------------------------ bad input
static void bad_flag(const char* args, const char* want) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/06_ddp/ddp_toy %s", build_dir(), args);
    const int st = run_capture(cmd, g_out, sizeof g_out);
    cr_assert_eq(st, 2, "ddp_toy %s exited %d, expected 2:\n%s", args, st, g_out);
    cr_assert(strstr(g_out, want), "ddp_toy %s: expected '%s' in:\n%s", args, want, g_out);
    const char* nl = strchr(g_out, '\n');
    cr_assert(nl && nl[1] == '\0', "more than one line:\n%s", g_out);
}

Test(ddp_toy_flags, bad_input_is_one_line_and_exit_2) {
    bad_flag("--variant bucket", "naive|flat|overlap|bucketed|all");
    bad_flag("--model big", "toy|tied|all");
    bad_flag("--bucket-mb 0.1,x", "--bucket-mb");
    bad_flag("--bucket-mb=-1", "--bucket-mb");
    bad_flag("--steps 6", "--steps 6: the fixture holds 1..5 steps");
    bad_flag("--fixture /nonexistent", "/nonexistent/data.npy");
}
