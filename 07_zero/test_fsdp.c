// Stage 07, mixed-precision sharding: bf16 ZeRO-3 (FSDP with bf16 parameters, fp32 masters).
// - the CPU model's bf16 parameters (model_cpu.h): its loss and gradients are the bits of the
//   fp32 model run on the rounded parameters, its masters stay fp32, and an AdamW step changes
//   what the next forward reads;
// - the GPU model in bf16 through fp32 + bf16 windows: the model on the rounded weights;
// - the bf16 collectives (build/07_zero/bf16_comm_check) on 1-4 ranks over MPI: all-gather bits,
//   reduce-scatter sum/avg;
// - zero_train --zero 3 --precision bf16 on 2, 3, 4 ranks against one unsharded model of the same
//   mode trained on the whole batch (--check-single: parameters within atol 1e-5 + rtol 1e-4 but
//   for a 1e-4 fraction of outliers, all within 2 x steps x lr; losses within 1e-5 relative),
//   and against one fp32 model within bf16-sized tolerances (losses within 2^-9) yet not equal;
// - the all-gather moves exactly half of fp32's bytes; --reduce-dtype bf16 halves the
//   reduce-scatter's too and stays within bf16 tolerances of the referee;
// - the same on 2 GPUs (skipped without them);
// - the 2026 leaderboard's configuration (bf16 ZeRO-3 + block checkpointing + chunked head) against
//   the same referees on the CPU, and at the 8b's width on 2 GPUs.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/dtype.h"
#include "common/gpu.h"
#include "common/lm.h"
#include "common/model_cpu.h"
#include "tests/harness.h"

static char g_out[1 << 17];

static int run_job(const char* prog, int np, const char* args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/%s %s", np, build_dir(), prog, args);
    return run_capture(cmd, g_out, sizeof g_out);
}

// ------------------------------------------------------------------ the CPU model's bf16 parameters
static void tokens(int32_t* in, int32_t* tg, int n, int V) {
    for (int i = 0; i < n; i++) in[i] = (i * 37 + 11) % V, tg[i] = (i * 53 + 5) % V;
}

Test(fsdp_cpu_model, bf16_parameters_are_the_fp32_model_on_rounded_weights) {
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 16, &cfg), 0);
    const int B = 2, T = 16;
    char err[256];
    lm_options_t o = lm_options(LM_CPU, B, T);
    o.seed = 3;
    o.precision = MP_BF16;
    lm_t* mp = lm_create(&cfg, &o, err, sizeof err);
    cr_assert(mp, "%s", err);
    o.precision = MP_FP32;
    lm_t* ref = lm_create(&cfg, &o, err, sizeof err);
    cr_assert(ref, "%s", err);
    const size_t n = lm_layout(mp)->total;
    float* p = malloc(n * sizeof(float));
    float* q = malloc(n * sizeof(float));
    float* g1 = malloc(n * sizeof(float));
    float* g2 = malloc(n * sizeof(float));
    int32_t in[32], tg[32];
    tokens(in, tg, B * T, cfg.vocab);
    adamw_config_t opt = adamw_default();
    opt.lr = 1e-2f;
    for (int step = 0; step < 2; step++) {
        // the referee: fp32 on the masters rounded by hand
        lm_get_params(mp, p);
        size_t unrounded = 0;
        for (size_t i = 0; i < n; i++) {
            q[i] = f32_from_bf16(bf16_from_f32(p[i]));
            unrounded += q[i] != p[i];
        }
        cr_assert(unrounded > n / 2, "step %d: the masters must stay fp32 (only %zu of %zu are not bf16 values)", step, unrounded, n);
        lm_set_params(ref, q);
        lm_set_tokens(mp, in, tg);
        lm_set_tokens(ref, in, tg);
        lm_forward_async(mp);
        lm_forward_async(ref);
        const float l1 = lm_loss(mp), l2 = lm_loss(ref);
        cr_assert(memcmp(&l1, &l2, sizeof l1) == 0, "step %d: loss %.9g, fp32 on rounded weights %.9g", step, l1, l2);
        cr_assert_eq(lm_backward(mp, NULL, NULL, err, sizeof err), 0, "%s", err);
        cr_assert_eq(lm_backward(ref, NULL, NULL, err, sizeof err), 0, "%s", err);
        lm_get_grads(mp, g1);
        lm_get_grads(ref, g2);
        cr_assert(memcmp(g1, g2, n * sizeof(float)) == 0, "step %d: gradients differ from fp32 on the rounded weights", step);
        // AdamW on the fp32 masters; the next forward must read their new rounding
        cr_assert_eq(lm_adamw(mp, &opt, step + 1, err, sizeof err), 0, "%s", err);
    }
    free(p), free(q), free(g1), free(g2);
    lm_destroy(mp);
    lm_destroy(ref);
}

// The GPU model in bf16 through windows (what bf16 ZeRO-3 hands it): an fp32 window holding the
// rounded weights and a bf16 window holding their bits, over device copies, unit by unit, with
// the model's own flat buffers absent (LM_FLAT_NONE). It must compute what the same bf16 model
// with flat buffers computes on masters already rounded to bf16 (its own bf16 copy is then the
// same bits): the loss equal, the gradients within rtol 1e-5 (the embedding's gradient adds
// with atomics, in an order the GPU decides).
typedef struct {
    lm_t* m;
    const model_config_t* cfg;
    float *p, *g;   // device: the rounded weights (fp32), the gradients
    uint16_t* p16;  // device: their bf16 bits
} gwin_t;
static void gwin_set(gwin_t* w, int u, int grads) {
    size_t b, e;
    model_unit_span(lm_layout(w->m), w->cfg, u, &b, &e);
    lm_set_windows(w->m, w->p + b, grads ? w->g + b : NULL, b, e);
    lm_set_windows_bf16(w->m, w->p16 + b, b, e);
}
static void gwin_fwd(void* ctx, int u) { gwin_set(ctx, u, 0); }
static void gwin_bwd(void* ctx, int u) { gwin_set(ctx, u, 1); }

Test(fsdp_gpu_model, bf16_windows_are_the_model_on_rounded_weights) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 16, &cfg), 0);
    const int B = 2, T = 16;
    char err[256];
    lm_options_t o = lm_options(LM_GPU, B, T);
    o.seed = 5;
    o.precision = MP_BF16;
    lm_t* a = lm_create(&cfg, &o, err, sizeof err);
    cr_assert(a, "%s", err);
    o.flat = LM_FLAT_NONE;
    lm_t* m = lm_create(&cfg, &o, err, sizeof err);
    cr_assert(m, "%s", err);
    const size_t n = lm_layout(a)->total;
    float* q = malloc(n * sizeof(float));
    uint16_t* q16 = malloc(n * sizeof(uint16_t));
    float* ga = malloc(n * sizeof(float));
    float* gm = malloc(n * sizeof(float));
    lm_get_params(a, q);
    for (size_t i = 0; i < n; i++) q16[i] = bf16_from_f32(q[i]), q[i] = f32_from_bf16(q16[i]);
    lm_set_params(a, q);
    gwin_t w = {m, &cfg, mem_alloc(DEV_CUDA, n * sizeof(float), MEM_WORKSPACE), mem_alloc(DEV_CUDA, n * sizeof(float), MEM_WORKSPACE),
                mem_alloc(DEV_CUDA, n * sizeof(uint16_t), MEM_WORKSPACE)};
    CUDA_CHECK(cudaMemcpy(w.p, q, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w.p16, q16, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(w.g, 0, n * sizeof(float)));
    const model_unit_hooks_t h = {gwin_fwd, gwin_bwd, NULL, &w};
    lm_set_unit_hooks(m, &h);
    int32_t in[32], tg[32];
    tokens(in, tg, B * T, cfg.vocab);
    lm_set_tokens(a, in, tg);
    lm_set_tokens(m, in, tg);
    lm_forward_async(a);
    lm_forward_async(m);
    const float la = lm_loss(a), lm = lm_loss(m);
    cr_assert(memcmp(&la, &lm, sizeof la) == 0, "loss %.9g through bf16 windows, %.9g on the rounded weights", lm, la);
    cr_assert_eq(lm_backward(a, NULL, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lm_backward(m, NULL, NULL, err, sizeof err), 0, "%s", err);
    lm_get_grads(a, ga);
    CUDA_CHECK(cudaStreamSynchronize(lm_stream(m)));
    CUDA_CHECK(cudaMemcpy(gm, w.g, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs((double)gm[i] - ga[i]) <= 1e-7 + 1e-5 * fabs((double)ga[i]), "gradient %zu: %.9g vs %.9g", i, gm[i], ga[i]);
    lm_set_unit_hooks(m, NULL);
    mem_free(w.p), mem_free(w.g), mem_free(w.p16);
    free(q), free(q16), free(ga), free(gm);
    lm_destroy(a);
    lm_destroy(m);
}

// ------------------------------------------------------------------ the bf16 collectives
Test(fsdp_comm, bf16_allgather_and_reduce_scatter_mpi_1_to_4_ranks) {
    for (int np = 1; np <= 4; np++) {
        const int st = run_job("07_zero/bf16_comm_check", np, "--backend mpi --comm-timeout 30");
        cr_assert_eq(st, 0, "%d ranks: exit %d:\n%s", np, st, g_out);
        char want[96];
        snprintf(want, sizeof want, "bf16 collectives on %d ranks (mpi): all ok", np);
        cr_assert(strstr(g_out, want) && !strstr(g_out, "WRONG"), "%s", g_out);
    }
}

Test(fsdp_comm_nccl, bf16_allgather_and_reduce_scatter_2_gpus) {
    NEED_GPU_RANKS();
    const int st = run_job("07_zero/bf16_comm_check", test_gpu_ranks(), "--backend nccl --comm-timeout 60");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "all ok") && !strstr(g_out, "WRONG"), "%s", g_out);
}

// ------------------------------------------------------------------ zero_train, bf16 ZeRO-3
#define BASE "--model tiny --context 16 --batch 2 --steps 3 --warmup 1 --comm-timeout 60 "

// The bytes a step zero_train printed for the zero3 run: all-gather and reduce-scatter.
static void bytes_a_step(const char* out, long long* ag, long long* rs) {
    const char* q = strstr(out, "zero3   bytes a step: all-gather ");
    cr_assert(q, "no bytes line:\n%s", out);
    q += strlen("zero3   bytes a step: all-gather ");
    *ag = atoll(q);
    q = strstr(q, "reduce-scatter ");
    cr_assert(q, "%s", out);
    *rs = atoll(q + strlen("reduce-scatter "));
    cr_assert(*ag > 0 && *rs > 0, "%s", out);
}

// The --check-single line of `run` against the referee named `ref` says ok.
static int line_ok(const char* out, const char* run, const char* ref) {
    char a[96];
    snprintf(a, sizeof a, "check-single: %s against one %s", run, ref);
    const char* l = strstr(out, a);
    if (!l) return 0;
    const char* ok = strstr(l, " model: ok;");
    const char* nl = strchr(l, '\n');
    return ok && (!nl || ok < nl);
}

static void check_single_ok(const char* out, const char* run, int np) {
    cr_assert(line_ok(out, run, "bf16"), "%d ranks: %s against the unsharded bf16 model:\n%s", np, run, out);
    cr_assert(line_ok(out, run, "fp32"), "%d ranks: %s against the fp32 model:\n%s", np, run, out);
    cr_assert(!strstr(out, "FAIL") && !strstr(out, "DIFFERENT"), "%s", out);
}

Test(fsdp_mpi, bf16_zero3_equals_the_unsharded_mixed_model_2_3_4_ranks, .timeout = 300) {
    for (int np = 2; np <= 4; np++) {
        const int st = run_job("07_zero/zero_train", np, BASE "--backend mpi --zero 3 --precision bf16 --check-single 1");
        cr_assert_eq(st, 0, "%d ranks: exit %d:\n%s", np, st, g_out);
        check_single_ok(g_out, "zero3", np);
        cr_assert(strstr(g_out, "zero3   done:") && strstr(g_out, "replicas bitwise identical on every rank"), "%s", g_out);
        // the masters and moments: still 16Psi/n with the padding (the bf16 copy is workspace)
        cr_assert(strstr(g_out, "params + grads + optimizer state == 16Psi/n on every rank"), "%s", g_out);
        cr_assert(strstr(g_out, "working buffers == "), "%s", g_out);
    }
}

// fp32 and bf16 ZeRO-3 on the same ranks: the all-gather moves exactly half the bytes, the
// reduce-scatter the same (fp32) unless --reduce-dtype bf16 (then half as well).
Test(fsdp_mpi, bf16_allgather_bytes_are_half_of_fp32_2_3_ranks, .timeout = 300) {
    for (int np = 2; np <= 3; np++) {
        long long ag32, rs32, ag16, rs16, agr, rsr;
        int st = run_job("07_zero/zero_train", np, BASE "--backend mpi --zero 3");
        cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
        bytes_a_step(g_out, &ag32, &rs32);
        cr_assert(strstr(g_out, "(fp32 parameters)"), "%s", g_out);
        st = run_job("07_zero/zero_train", np, BASE "--backend mpi --zero 3 --precision bf16");
        cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
        bytes_a_step(g_out, &ag16, &rs16);
        cr_assert(strstr(g_out, "(bf16 parameters)") && strstr(g_out, "(fp32 gradients)"), "%s", g_out);
        st = run_job("07_zero/zero_train", np, BASE "--backend mpi --zero 3 --precision bf16 --reduce-dtype bf16");
        cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
        bytes_a_step(g_out, &agr, &rsr);
        cr_assert(strstr(g_out, "(bf16 gradients)"), "%s", g_out);
        cr_assert_eq(2 * ag16, ag32, "%d ranks: bf16 all-gather %lld bytes a step, fp32 %lld", np, ag16, ag32);
        cr_assert_eq(rs16, rs32, "%d ranks: fp32 reduce-scatters: %lld vs %lld", np, rs16, rs32);
        cr_assert_eq(agr, ag16, "%d ranks", np);
        cr_assert_eq(2 * rsr, rs32, "%d ranks: bf16 reduce-scatter %lld bytes a step, fp32 %lld", np, rsr, rs32);
    }
}

// --reduce-dtype bf16: the gradient rounded to bf16 before it is averaged: within the bf16
// tolerances of the unsharded bf16-parameter model (losses 2^-9, parameters 2 x steps x lr).
Test(fsdp_mpi, reduce_dtype_bf16_within_bf16_tolerance_2_4_ranks, .timeout = 300) {
    for (int np = 2; np <= 4; np += 2) {
        const int st = run_job("07_zero/zero_train", np,
                               BASE "--backend mpi --zero 3 --precision bf16 --reduce-dtype bf16 --check-single 1");
        cr_assert_eq(st, 0, "%d ranks: exit %d:\n%s", np, st, g_out);
        check_single_ok(g_out, "zero3", np);
        cr_assert(strstr(g_out, "beyond rtol 0.00195"), "the bf16 loss tolerance must apply:\n%s", g_out);
    }
}

// The other levels in bf16 on the CPU read the flat buffer's rounded copy: DDP and ZeRO-1 meet
// the same referee; ZeRO-2 on units refuses bf16 in one line; --reduce-dtype only with bf16 ZeRO-3.
Test(fsdp_mpi, other_levels_in_bf16_and_refusals, .timeout = 300) {
    int st = run_job("07_zero/zero_train", 2, BASE "--backend mpi --zero 0,1,3 --precision bf16 --check-single 1 --check-ddp 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    check_single_ok(g_out, "ddp", 2);
    check_single_ok(g_out, "zero1", 2);
    check_single_ok(g_out, "zero3", 2);
    cr_assert(strstr(g_out, "check-ddp: zero3: 0 of"), "%s", g_out);
    const char* cases[][2] = {
        {"--zero 2 --precision bf16", "--zero 2 runs fp32 only"},
        {"--zero 3 --reduce-dtype bf16", "--reduce-dtype bf16: applies to --zero 3 with --precision bf16"},
        {"--zero 1 --precision bf16 --reduce-dtype bf16", "--reduce-dtype bf16: applies to"},
        {"--zero 3 --reduce-dtype half", "--reduce-dtype"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = run_job("07_zero/zero_train", 2, cases[i][0]);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cases[i][0], st, g_out);
        cr_assert(strstr(g_out, cases[i][1]), "%s:\n%s", cases[i][0], g_out);
        const char* e = strstr(g_out, "error:");
        cr_assert(e && !strstr(e + 1, "error:"), "%s: one line:\n%s", cases[i][0], g_out);
    }
}

// ------------------------------------------------------------------ 2 GPUs
// bf16 ZeRO-3 over NCCL: the GPU model reads the gathered bf16 unit through its bf16 window.
// Against the unsharded bf16 GPU model and the fp32 one: bf16 tolerances (the GPU's bf16 also
// rounds activations); the all-gather half of fp32's bytes; --reduce-dtype bf16 too.
Test(fsdp_nccl, zero3_bf16_equals_the_unsharded_mixed_model_2_gpus, .timeout = 300) {
    NEED_GPU_RANKS();
    const int np = test_gpu_ranks();
    long long ag32, rs32, ag16, rs16;
    int st = run_job("07_zero/zero_train", np, BASE "--backend nccl --zero 3");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    bytes_a_step(g_out, &ag32, &rs32);
    st = run_job("07_zero/zero_train", np, BASE "--backend nccl --zero 3 --precision bf16 --check-single 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    check_single_ok(g_out, "zero3", np);
    bytes_a_step(g_out, &ag16, &rs16);
    cr_assert_eq(2 * ag16, ag32, "bf16 all-gather %lld bytes a step, fp32 %lld", ag16, ag32);
    cr_assert_eq(rs16, rs32);
    st = run_job("07_zero/zero_train", np, BASE "--backend nccl --zero 3 --precision bf16 --reduce-dtype bf16 --check-single 1");
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    check_single_ok(g_out, "zero3", np);
}

// ------------------------------------------------------------------ the leaderboard's configuration
// The 2026 leaderboard's step (07_zero/leaderboard.sh, ACCOUNTING.md "The 8b-class step") is
// ZeRO-3 with bf16 all-gathers and fp32 masters, block checkpointing and the chunked LM head at
// once. On the CPU (2 and 3 ranks, a head chunk that divides no rank's rows) it must equal the
// unsharded bf16-parameter model and stay within bf16's distance of the fp32 one, as each piece
// alone does above. On 2 GPUs the model is the 8b's own width (d 4096, 32 heads of 128, d_ff
// 11008, vocabulary 151936) cut to one block, flash attention, a ragged context and a last head
// chunk shorter than the others: the step must run, leave the replicas bitwise identical and
// hold exactly the state, working buffers and activations of its formulas (about 27 GB a GPU).
#define LB_FLAGS "--zero 3 --precision bf16 --checkpoint block "
Test(leaderboard_mpi, the_steps_configuration_equals_the_unsharded_models_2_3_ranks, .timeout = 300) {
    for (int np = 2; np <= 3; np++) {
        int st = run_job("07_zero/zero_train", np, BASE LB_FLAGS "--backend mpi --head-chunk 12 --check-single 1");
        cr_assert_eq(st, 0, "%d ranks: exit %d:\n%s", np, st, g_out);
        cr_assert(strstr(g_out, "(checkpoint block:"), "%d ranks: not checkpointed:\n%s", np, g_out);
        check_single_ok(g_out, "zero3", np);
    }
}

Test(leaderboard_gpu, the_8b_width_cut_to_one_block_2_gpus, .timeout = 300) {
    NEED_GPU_RANKS();
    const int np = test_gpu_ranks();
    int st = run_job("07_zero/zero_train", np, "--model 8b --layers 1 --context 1000 --batch 1 --steps 2 --warmup 1 "
                     "--comm-timeout 120 --backend nccl --attention flash --head-chunk 384 " LB_FLAGS);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "8125698048") == NULL && strstr(g_out, "(bf16 parameters)"), "%s", g_out);
    cr_assert(strstr(g_out, "replicas bitwise identical on every rank") &&
                  strstr(g_out, "activations on every rank == the acts formula (checkpoint block:") &&
                  strstr(g_out, "== 16Psi/n on every rank") && strstr(g_out, "working buffers == "),
              "%s", g_out);
    cr_assert(!strstr(g_out, "DIFFERENT") && !strstr(g_out, "!= "), "%s", g_out);
}

// make leaderboard's script: bad flags are one line and exit 2 before anything runs; without
// 2 GPUs the run itself is refused in one line (with them it would start the 8b step).
Test(leaderboard_mpi, the_script_refuses_in_one_line) {
    const char* bad[][2] = {{"--steps x", "--steps and --warmup take whole numbers, got 'x'"},
                            {"--steps 0", "--steps must be at least 1"},
                            {"--bogus", "unknown argument '--bogus'"}};
    for (int i = 0; i < 3; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "07_zero/leaderboard.sh %s", bad[i][0]);
        int st = run_capture(cmd, g_out, sizeof g_out);
        cr_assert_eq(st, 2, "%s: exit %d:\n%s", cmd, st, g_out);
        cr_assert(strstr(g_out, bad[i][1]) && strstr(g_out, "leaderboard: error:") &&
                      !strstr(strstr(g_out, "error:") + 1, "error:"),
                  "%s:\n%s", cmd, g_out);
    }
    if (gpu_count() >= 2) return;
    int st = run_capture("07_zero/leaderboard.sh --steps 1 --warmup 0", g_out, sizeof g_out);
    cr_assert_eq(st, 2, "exit %d:\n%s", st, g_out);
    cr_assert(strstr(g_out, "leaderboard: error: the step runs on 2 GPUs, this machine has"), "%s", g_out);
}
