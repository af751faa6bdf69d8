// The §2.4 communication_accounting formulas (accounting.c) and the `accounting` program.
// Every expected number below was worked out by hand (the arithmetic is in the comments) and is
// not computed by the code under test; ACCOUNTING.md derives the formulas themselves.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "07_zero/accounting.h"
#include "tests/harness.h"

// Byte counts are integers below 2^53, so the memory formulas are exact in a double: compared with ==.
// Ratios (alpha, thresholds, times) go through one or two roundings: 1e-12 relative is ample.
#define RTOL 1e-12

static void assert_rel(double got, double want, const char* what) {
    cr_assert(fabs(got - want) <= RTOL * fabs(want), "%s: got %.17g, want %.17g", what, got, want);
}

// ---- the handout's XXL model: D = 16384, F = 53248, L = 126

static const acct_model_t XXL = {16384, 53248, 126};

Test(accounting, handout_a_memory_on_one_device) {
    const acct_memory_t m = acct_memory(&XXL);
    // D·F = 16384 · 53248 = 872,415,232; P = 2 · 126 · 872,415,232 = 219,848,638,464.
    cr_assert_eq(m.params, 219848638464.0, "P = %.0f", m.params);
    cr_assert_eq(m.master_weight_bytes, 879394553856.0);      // 4P
    cr_assert_eq(m.grad_bytes, 879394553856.0);               // 4P
    cr_assert_eq(m.optimizer_bytes, 1758789107712.0);         // 8P (m and v)
    cr_assert_eq(m.state_bytes, 3517578215424.0);             // 16P = 3.518 TB (exactly 3276 GiB)
    // 2 bytes · 126 blocks · (16384 + 53248) = 252 · 69,632 = 17,547,264 bytes per token.
    cr_assert_eq(m.activation_bytes_per_token, 17547264.0);
    // 4 sequences × 512 tokens = 2048 tokens: 17,547,264 · 2048 = 35,936,796,672 bytes.
    cr_assert_eq(acct_activation_bytes(&XXL, 2048), 35936796672.0);

    // H100 80GB = 80e9 bytes: 3,517,578,215,424 / 80e9 = 43.97 -> 44 (43 · 80e9 = 3.44e12 < 16P).
    assert_rel(acct_devices_needed(m.state_bytes, 80e9), 43.9697276928, "H100s for the state");
    cr_assert_eq(acct_devices_whole(m.state_bytes, 80e9), 44);
    // With the 2048 tokens' activations: 3,553,515,012,096 / 80e9 = 44.42 -> 45.
    cr_assert_eq(acct_devices_whole(m.state_bytes + 35936796672.0, 80e9), 45);
}

Test(accounting, handout_b_fsdp_degree_for_95_gb) {
    const double state = 3517578215424.0, act = 35936796672.0;  // 16P and A for 2048 tokens
    // N > (16P + A/2) / (95e9 − A/2) = 3,535,546,613,760 / 77,031,601,664 = 45.897 -> 46.
    cr_assert_eq(acct_fsdp_min_degree(state, act, 95e9), 46);
    // M(46) = 3,535,546,613,760 / 46 + 17,968,398,336 = 76,859,708,994.78 + 17,968,398,336
    //       = 94,828,107,330.78 bytes < 95 GB;
    // M(45) = 78,567,702,528 + 17,968,398,336 = 96,536,100,864 bytes (45 divides exactly).
    assert_rel(acct_fsdp_bytes_per_device(state, act, 46), 94828107330.7826, "M(46)");
    cr_assert_eq(acct_fsdp_bytes_per_device(state, act, 45), 96536100864.0);
    // Activations negligible: 16P / 95e9 = 37.03 -> 38.
    cr_assert_eq(acct_fsdp_min_degree(state, 0.0, 95e9), 38);
}

static const acct_mesh_t V5P = {4.6e14, 1.8e11, 2, 1, 16, 4};  // C, W_ici, M_X, M_Y, X, Y

Test(accounting, handout_c_compute_bound_batch) {
    const acct_bound_t b = acct_compute_bound(&XXL, &V5P);
    // alpha = 4.6e14 / 1.8e11 = 23000/9 = 2555.555...
    assert_rel(b.alpha, 23000.0 / 9.0, "alpha");
    // TP: F = 53248 > alpha·Y/M_Y = 92000/9 = 10222.2, so the TP collectives always hide;
    // the largest hiding Y is M_Y·F/alpha = 53248·9/23000 = 20.836.
    cr_assert(b.tp_ok);
    assert_rel(b.tp_max_degree, 53248.0 * 9.0 / 23000.0, "largest TP degree");
    // FSDP: B/N > alpha/(Y·M_X) = 23000/(9·8) = 2875/9 = 319.44 tokens per device -> 320;
    // B > 64 · 2875/9 = 184000/9 = 20444.4 tokens; 64 · 320 = 20480.
    assert_rel(b.min_tokens_per_device, 2875.0 / 9.0, "B/N");
    assert_rel(b.min_tokens_total, 184000.0 / 9.0, "B");
    cr_assert_eq(acct_smallest_above(b.min_tokens_per_device), 320);
    cr_assert_eq(acct_smallest_above(b.min_tokens_total), 20445);
    // Serialized X and Y collectives: (F/(Y·M_X)) / (F/alpha − Y/M_Y)
    //   = 6656 / (53248·9/23000 − 4) = 6656 · 23000 / (479232 − 92000) = 153,088,000 / 387,232 = 395.339.
    assert_rel(b.min_tokens_per_device_serial, 153088000.0 / 387232.0, "serial B/N");
    // Best split: alpha²/(M_X·M_Y·F) = (23000/9)² / 106496 = 529e6 / (81 · 106496) = 61.325.
    assert_rel(b.min_tokens_per_device_best_split, 529e6 / (81.0 * 106496.0), "best-split B/N");

    // At the threshold T_math = T_FSDP = 4·D·F/(Y·W·M_X) = 3,489,660,928 / 1.44e12 = 2.4234 ms, and
    // T_TP = 4·B·D/(X·W·M_Y) = 4 · (184000/9) · 16384 / (16 · 1.8e11) = 0.4652 ms.
    const acct_layer_times_t t = acct_layer_times(&XXL, &V5P, 184000.0 / 9.0);
    assert_rel(t.fsdp_s, 3489660928.0 / 1.44e12, "T_fsdp");
    assert_rel(t.math_s, 3489660928.0 / 1.44e12, "T_math at the threshold");
    assert_rel(t.tp_s, 4.0 * (184000.0 / 9.0) * 16384.0 / (16.0 * 1.8e11), "T_tp");
}

// The threshold is where the time model flips: a hair above it every collective hides under the
// math, a hair below it the FSDP all-gather does not.
Test(accounting, threshold_is_where_the_time_model_flips) {
    const acct_bound_t b = acct_compute_bound(&XXL, &V5P);
    const acct_layer_times_t above = acct_layer_times(&XXL, &V5P, b.min_tokens_total * 1.001);
    cr_assert_lt(above.fsdp_s, above.math_s);
    cr_assert_lt(above.tp_s, above.math_s);
    const acct_layer_times_t below = acct_layer_times(&XXL, &V5P, b.min_tokens_total * 0.999);
    cr_assert_gt(below.fsdp_s, below.math_s);
    // Serialized collectives: at 1.001× their threshold the sum hides, at 0.999× it does not.
    const double serial_B = 64.0 * b.min_tokens_per_device_serial;
    const acct_layer_times_t s_above = acct_layer_times(&XXL, &V5P, serial_B * 1.001);
    const acct_layer_times_t s_below = acct_layer_times(&XXL, &V5P, serial_B * 0.999);
    cr_assert_lt(s_above.fsdp_s + s_above.tp_s, s_above.math_s);
    cr_assert_gt(s_below.fsdp_s + s_below.tp_s, s_below.math_s);
}

// ---- a second case small enough to do on paper

Test(accounting, tiny_model_memory_and_fsdp) {
    const acct_model_t m = {4, 8, 3};  // D, F, L
    const acct_memory_t mem = acct_memory(&m);
    cr_assert_eq(mem.params, 192.0);                 // 2 · 3 · 4 · 8
    cr_assert_eq(mem.master_weight_bytes, 768.0);    // 4 · 192
    cr_assert_eq(mem.optimizer_bytes, 1536.0);       // 8 · 192
    cr_assert_eq(mem.state_bytes, 3072.0);           // 16 · 192
    cr_assert_eq(mem.activation_bytes_per_token, 72.0);  // 2 · 3 · (4 + 8)
    cr_assert_eq(acct_activation_bytes(&m, 10), 720.0);
    cr_assert_eq(acct_devices_whole(3072.0, 1000.0), 4);  // 3.072 -> 4
    cr_assert_eq(acct_devices_whole(3000.0, 1000.0), 3);  // exactly 3 devices' worth: no spare one
    // Budget 1000, A = 720: N > (3072 + 360) / (1000 − 360) = 3432/640 = 5.36 -> 6;
    // M(6) = 572 + 360 = 932 < 1000, M(5) = 686.4 + 360 = 1046.4.
    cr_assert_eq(acct_fsdp_min_degree(3072.0, 720.0, 1000.0), 6);
    cr_assert_eq(acct_fsdp_bytes_per_device(3072.0, 720.0, 6), 932.0);
    // The budget is strict: 3000 / 3 = 1000 is not below 1000, so N = 4.
    cr_assert_eq(acct_fsdp_min_degree(3000.0, 0.0, 1000.0), 4);
    // The unsharded half of the activations (360) fills a budget of 360 by itself: no N fits.
    cr_assert_eq(acct_fsdp_min_degree(3072.0, 720.0, 360.0), -1);
}

Test(accounting, small_mesh_compute_bound) {
    const acct_model_t m = {4, 100, 1};        // D = 4, F = 100
    const acct_mesh_t mesh = {1000, 100, 1, 2, 5, 4};  // C, W (alpha = 10), M_X = 1, M_Y = 2, X = 5, Y = 4
    const acct_bound_t b = acct_compute_bound(&m, &mesh);
    assert_rel(b.alpha, 10.0, "alpha");
    cr_assert(b.tp_ok);                                   // F = 100 > 10 · 4 / 2 = 20
    assert_rel(b.tp_max_degree, 20.0, "largest Y");       // 2 · 100 / 10
    assert_rel(b.min_tokens_per_device, 2.5, "B/N");      // 10 / (4 · 1)
    assert_rel(b.min_tokens_total, 50.0, "B");            // 20 chips · 2.5
    assert_rel(b.min_tokens_per_device_serial, 3.125, "serial");  // (100/4) / (100/10 − 4/2) = 25/8
    assert_rel(b.min_tokens_per_device_best_split, 0.5, "best split");  // 10² / (1 · 2 · 100)
    // At B = 50: T_math = 4·50·4·100 / (20·1000) = 4 s; T_fsdp = 4·4·100 / (4·100·1) = 4 s;
    // T_tp = 4·50·4 / (5·100·2) = 0.8 s.
    const acct_layer_times_t t = acct_layer_times(&m, &mesh, 50.0);
    assert_rel(t.math_s, 4.0, "T_math");
    assert_rel(t.fsdp_s, 4.0, "T_fsdp");
    assert_rel(t.tp_s, 0.8, "T_tp");
    cr_assert_eq(acct_smallest_above(2.5), 3);
    cr_assert_eq(acct_smallest_above(50.0), 51);  // strictly above: at 50 the times tie

    // Y = 20 = M_Y·F/alpha: T_tp equals T_math at every batch, so no batch is compute-bound, and
    // the serialized model's denominator F/alpha − Y/M_Y = 10 − 10 is zero.
    const acct_mesh_t wide_tp = {1000, 100, 1, 2, 1, 20};
    const acct_bound_t w = acct_compute_bound(&m, &wide_tp);
    cr_assert(!w.tp_ok);
    cr_assert(isinf(w.min_tokens_per_device));
    cr_assert(isinf(w.min_tokens_per_device_serial));
    cr_assert_eq(acct_smallest_above(w.min_tokens_per_device), -1);
}

Test(accounting, x_opt_balances_the_two_collectives) {
    // B = 400, F = 100, M_X = M_Y = 1, N = 16: X_opt = sqrt(400/100 · 16) = 8, so Y = 2, and then
    // T_fsdp = 4·4·100 / (2·100·1) = 8 s = T_tp = 4·400·4 / (8·100·1) (D = 4, W = 100).
    assert_rel(acct_x_opt(400, 100, 1, 1, 16), 8.0, "X_opt");
    const acct_model_t m = {4, 100, 1};
    const acct_mesh_t mesh = {1000, 100, 1, 1, 8, 2};
    const acct_layer_times_t t = acct_layer_times(&m, &mesh, 400);
    assert_rel(t.fsdp_s, 8.0, "T_fsdp");
    assert_rel(t.tp_s, 8.0, "T_tp");
    // The scaling book's example: B = 48000, F = 32768, M_X/M_Y = 2, N = 64:
    // sqrt(48000/32768 · 2 · 64) = sqrt(187.5) = 13.69 (the book rounds to "roughly 13.9").
    assert_rel(acct_x_opt(48000, 32768, 2, 1, 64), sqrt(187.5), "book's X_opt");
}

Test(accounting, checks_name_the_bad_value) {
    char err[256];
    const acct_model_t bad_model = {16384, 0, 126};
    cr_assert_eq(acct_model_check(&bad_model, err, sizeof err), -1);
    cr_assert(strstr(err, "--d-ff"), "%s", err);
    cr_assert_eq(acct_model_check(&XXL, err, sizeof err), 0);
    acct_mesh_t bad_mesh = V5P;
    bad_mesh.mesh_axes_y = 0;
    cr_assert_eq(acct_mesh_check(&bad_mesh, err, sizeof err), -1);
    cr_assert(strstr(err, "--my"), "%s", err);
    bad_mesh = V5P;
    bad_mesh.ici_bytes_per_s = NAN;
    cr_assert_eq(acct_mesh_check(&bad_mesh, err, sizeof err), -1);
    cr_assert(strstr(err, "--w-ici"), "%s", err);
    cr_assert_eq(acct_mesh_check(&V5P, err, sizeof err), 0);
}

// ---- the program

static int run_prog(const char* args, char* out, size_t outlen) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/07_zero/accounting %s", build_dir(), args);
    return run_capture(cmd, out, outlen);
}

static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

Test(accounting_cli, defaults_print_the_handout_answers) {
    char out[16384];
    const int rc = run_prog("", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    // The hand-derived numbers above, as the program formats them.
    const char* want[] = {"219848638464", "3517.578", "17.547264", " 44 | 80 GB GPUs", " 45 | 80 GB GPUs", "N_FSDP >= 46",
                          "319.44", "20444.4", "20480", "395.34", "61.32"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]), "output lacks \"%s\":\n%s", want[i], out);
}

Test(accounting_cli, flags_change_the_numbers) {
    char out[16384];
    // The small mesh case: F = 100, alpha = 10, X = 5, Y = 4, M_X = 1, M_Y = 2 -> 2.50 tokens per device.
    int rc = run_prog("--d-model 4 --d-ff 100 --num-blocks 1 --flops 1000 --w-ici 100 --mx 1 --my 2 --x 5 --y 4",
                      out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "compute-bound above 2.50 tokens per device (3 whole)"), "%s", out);
    // Y beyond M_Y·F/alpha: never compute-bound, said in words rather than as a number.
    rc = run_prog("--x 2 --y 32", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "never compute-bound"), "%s", out);
}

Test(accounting_cli, help_exits_0) {
    char out[8192];
    const int rc = run_prog("--help", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "--d-model") && strstr(out, "--w-ici") && strstr(out, "--budget-gb"), "%s", out);
}

Test(accounting_cli, bad_flags_exit_2_with_one_line) {
    const char* cases[][2] = {
        {"--x 0", "--x"},          {"--d-ff -3", "--d-ff"}, {"--flops abc", "--flops"},
        {"--budget-gb 0", "--budget-gb"}, {"--bogus 1", "--bogus"}, {"--batch 0", "--batch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[2048];
        const int rc = run_prog(cases[i][0], out, sizeof out);
        cr_assert_eq(rc, 2, "`%s` exited %d:\n%s", cases[i][0], rc, out);
        cr_assert(strstr(out, cases[i][1]), "`%s`: message does not name %s:\n%s", cases[i][0], cases[i][1], out);
        cr_assert(strstr(out, "accounting: error: "), "`%s`:\n%s", cases[i][0], out);
        cr_assert_eq(count_lines(out), 1, "`%s`: expected one line:\n%s", cases[i][0], out);
    }
}
