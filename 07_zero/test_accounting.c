// The §2.4 communication_accounting formulas (accounting.c) and the `accounting` program.
// Every expected number below was worked out by hand (the arithmetic is in the comments) and is
// not computed by the code under test; ACCOUNTING.md derives the formulas themselves.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "07_zero/accounting.h"
#include "common/model_gpu.h"
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

// ---- the 2026 handout's §8 calculations on a toy layer: D = 4, F = 8, B = 16 rows, C = 100 FLOP/s,
// W = 10 bytes/s. Each weight is 32 elements = 64 bytes in fp16; the three weights are 192 bytes.
// Every expected value below counts the matmuls and the bytes each device sends, one by one.

static const acct_ffn_t TOY = {4, 8, 16, 100, 10};

Test(accounting_2026, ring_primitives_and_the_alternate_ring) {
    // S = 12 bytes on N = 4: the ring sends 3 chunks of 3 bytes per pass -> 9 bytes, 0.9 s at 10 B/s;
    // the all-reduce is two passes, 18 bytes -> 1.8 s.
    assert_rel(acct_ring_all_gather_s(12, 4, 10), 0.9, "all-gather");
    assert_rel(acct_ring_reduce_scatter_s(12, 4, 10), 0.9, "reduce-scatter");
    assert_rel(acct_ring_all_reduce_s(12, 4, 10), 1.8, "all-reduce");
    // The alternate ring forwards a whole 12-byte tensor on each of its 3 steps: 36 bytes -> 3.6 s,
    // twice the ring's 1.8 s (N/2 = 2).
    assert_rel(acct_alt_ring_all_reduce_s(12, 4, 10), 3.6, "alternate all-reduce");
    // On 2 devices both send 12 bytes (one pass of two 6-byte chunks vs one whole tensor): equal.
    assert_rel(acct_alt_ring_all_reduce_s(12, 2, 10), acct_ring_all_reduce_s(12, 2, 10), "N = 2");
    // On 8: 7 · 12 = 84 bytes vs 2 · 7 · 1.5 = 21 bytes: four times slower (N/2).
    assert_rel(acct_alt_ring_all_reduce_s(12, 8, 10), 8.4, "alternate, N = 8");
    assert_rel(acct_ring_all_reduce_s(12, 8, 10), 2.1, "ring, N = 8");
}

Test(accounting_2026, data_parallel) {
    const acct_par_t r = acct_dp(&TOY, 4);
    // 4 rows per device. Backward: dz = dy[4,4]·W3ᵀ[4,8] = 2·4·4·8 = 256; dx = dx1·W1ᵀ + dx2·W2ᵀ, two
    // more of 256; dW3 = zᵀ[8,4]·dy[4,4] = 256; dW2, dW1 = xᵀ[4,4]·dx[4,8], 256 each: 6 · 256 = 1536.
    cr_assert_eq(r.bwd_flops, 1536.0);
    cr_assert_eq(r.fwd_flops, 768.0);  // x1, x2, y: 3 · 256
    assert_rel(r.bwd_compute_s, 15.36, "backward compute");
    // All-reduce of 192 gradient bytes: 2 passes · 3 steps · 48-byte chunks = 288 bytes -> 28.8 s.
    assert_rel(r.bwd_comm_s, 28.8, "backward comm");
    cr_assert_eq(r.fwd_comm_s, 0.0);
    // N <= 1 + B·W/C = 1 + 160/100 = 2.6. Check it against the times themselves: N = 2 sends
    // 2·1·96 = 192 bytes (19.2 s) against 8 rows · 6 · 64 = 3072 FLOPs (30.72 s): compute-bound;
    // N = 3 sends 2·2·64 = 256 bytes (25.6 s) against 2048 FLOPs (20.48 s): communication-bound.
    assert_rel(r.max_n_bwd, 2.6, "max N_DP");
    cr_assert(isinf(r.max_n_fwd));
    const acct_par_t two = acct_dp(&TOY, 2), three = acct_dp(&TOY, 3);
    assert_rel(two.bwd_comm_s, 19.2, "N = 2 comm");
    assert_rel(three.bwd_comm_s, 25.6, "N = 3 comm");
    cr_assert(two.bwd_comm_s <= two.bwd_compute_s && three.bwd_comm_s > three.bwd_compute_s);
    // Direction: twice the batch -> 1 + 320/100 = 4.2 devices; twice C -> 1 + 0.8 = 1.8.
    acct_ffn_t more = TOY;
    more.tokens = 32;
    assert_rel(acct_dp(&more, 4).max_n_bwd, 4.2, "max N_DP, B = 32");
    more = TOY;
    more.flops_per_s = 200;
    assert_rel(acct_dp(&more, 4).max_n_bwd, 1.8, "max N_DP, C = 200");
}

Test(accounting_2026, fully_sharded) {
    const acct_par_t r = acct_fsdp(&TOY, 4);
    cr_assert_eq(r.fwd_flops, 768.0);  // the batch-sharded math of DP: 3 and 6 matmuls of 256
    cr_assert_eq(r.bwd_flops, 1536.0);
    // Forward: all-gather the 192 weight bytes, 3 steps of a 48-byte shard = 144 bytes -> 14.4 s.
    assert_rel(r.fwd_comm_s, 14.4, "forward comm");
    // Backward: the same all-gather plus a reduce-scatter of 192 gradient bytes: 288 bytes -> 28.8 s.
    assert_rel(r.bwd_comm_s, 28.8, "backward comm");
    // On N devices the forward sends (N-1)/N · 192 bytes (19.2·(N-1)/N s) against 3072/N FLOPs
    // (30.72/N s): N - 1 <= 1.6, N <= 2.6 = 1 + BW/C; the backward doubles both sides.
    assert_rel(r.max_n_fwd, 2.6, "max N_FSDP forward");
    assert_rel(r.max_n_bwd, 2.6, "max N_FSDP backward");
    // Direction: the same layer with W = 20 sends as fast twice over: 7.2 s forward, 1 + 3.2 = 4.2.
    acct_ffn_t fast = TOY;
    fast.egress_bytes_per_s = 20;
    const acct_par_t f = acct_fsdp(&fast, 4);
    assert_rel(f.fwd_comm_s, 7.2, "forward comm, W = 20");
    assert_rel(f.max_n_fwd, 4.2, "max N_FSDP, W = 20");
}

Test(accounting_2026, tensor_parallel) {
    const acct_par_t r = acct_tp(&TOY, 4);
    // All 16 rows, F/N = 2: x[16,4]·W1⁽ⁱ⁾[4,2] = 2·16·4·2 = 256, W2 the same, z⁽ⁱ⁾[16,2]·W3⁽ⁱ⁾[2,4] = 256.
    cr_assert_eq(r.fwd_flops, 768.0);
    cr_assert_eq(r.bwd_flops, 1536.0);  // dz⁽ⁱ⁾, two halves of dx, three dW⁽ⁱ⁾: 6 · 256
    // Forward all-reduces y[16,4] = 128 bytes: 2 passes · 3 steps · 32 bytes = 192 bytes -> 19.2 s;
    // backward all-reduces dx, the same shape.
    assert_rel(r.fwd_comm_s, 19.2, "forward comm");
    assert_rel(r.bwd_comm_s, 19.2, "backward comm");
    // Forward: 2·2·BD(N-1)/(NW) <= 6BDF/(NC) -> N <= 1 + 1.5·F·W/C = 1 + 1.5·0.8 = 2.2;
    // backward against twice the math: 1 + 3·0.8 = 3.4.
    assert_rel(r.max_n_fwd, 2.2, "max N_TP forward");
    assert_rel(r.max_n_bwd, 3.4, "max N_TP backward");
    // N = 3 (between the two bounds): 2 passes · 2 steps · 128/3 bytes = 170.67 bytes -> 17.07 s, against
    // 3072/3 = 1024 FLOPs forward (10.24 s, bound) and 2048 backward (20.48 s, not bound).
    const acct_par_t three = acct_tp(&TOY, 3);
    assert_rel(three.fwd_comm_s, 512.0 / 30.0, "N = 3 comm");
    cr_assert(three.fwd_comm_s > three.fwd_compute_s && three.bwd_comm_s <= three.bwd_compute_s);
    // Direction: F = 16 doubles the per-byte math: forward 1 + 1.5·1.6 = 3.4; batch does not matter.
    acct_ffn_t wide = TOY;
    wide.d_ff = 16;
    assert_rel(acct_tp(&wide, 4).max_n_fwd, 3.4, "max N_TP forward, F = 16");
    acct_ffn_t big = TOY;
    big.tokens = 1024;
    assert_rel(acct_tp(&big, 4).max_n_fwd, 2.2, "max N_TP forward, B = 1024");
}

Test(accounting_2026, fsdp_times_tp) {
    const acct_2d_t r = acct_fsdp_tp(&TOY, 2, 2);
    // Device (i, j): x⁽ʲ⁾[8,4]·W1⁽ⁱ⁾[4,4] = 2·8·4·4 = 256, W2 the same, z[8,4]·W3⁽ⁱ⁾[4,4] = 256.
    cr_assert_eq(r.fwd_flops, 768.0);
    assert_rel(r.fwd_compute_s, 7.68, "compute");
    // FSDP axis: the three W⁽ⁱ⁾ are 16 elements = 32 bytes each, 96 bytes; one step of a 48-byte
    // shard -> 4.8 s. TP axis: y⁽ʲ⁾[8,4] = 64 bytes, 2 passes · 1 step · 32 bytes = 64 bytes -> 6.4 s.
    assert_rel(r.fsdp_comm_s, 4.8, "FSDP comm");
    assert_rel(r.tp_comm_s, 6.4, "TP comm");
    assert_rel(r.overlap_comm_s, 6.4, "max");
    assert_rel(r.serial_comm_s, 11.2, "sum");
    // (c) N <= (1 + 160/100)(1 + 1.5·0.8) = 2.6 · 2.2 = 5.72; large-N 1.5 · 1.6 · 0.8 = 1.92.
    assert_rel(r.max_n_overlap, 5.72, "overlapped max N");
    assert_rel(r.max_n_overlap_large, 1.92, "overlapped, large N");
    // (d) K = 3BFW/C = 3·16·8·10/100 = 38.4; (K + 3F + 2B)/2 = (38.4 + 24 + 32)/2 = 47.2;
    // X = 47.2/24 = 1.9667, Y = 47.2/32 = 1.475, N = 47.2²/768 = 2227.84/768 = 2.90083.
    assert_rel(r.serial_best_fsdp, 47.2 / 24, "best N_FSDP");
    assert_rel(r.serial_best_tp, 1.475, "best N_TP");
    assert_rel(r.max_n_serial, 2227.84 / 768, "serial max N");
    assert_rel(r.max_n_serial_large, 0.48, "serial, large N");  // a quarter of 1.92
    // The 2 × 2 grid (N = 4) agrees: overlapped 6.4 s <= 7.68 s (4 <= 5.72), serial 11.2 s > 7.68 s
    // (4 > 2.90). At the serial optimum the sum of the two equals the math.
    cr_assert(r.overlap_comm_s <= r.fwd_compute_s && r.serial_comm_s > r.fwd_compute_s);
    // Direction: a larger batch raises both bounds. B = 32: (1 + 3.2)(1 + 1.2) = 9.24 overlapped;
    // K = 76.8, (76.8 + 24 + 64)/2 = 82.4, N = 82.4² / (6 · 8 · 32) = 6789.76 / 1536 = 4.42 serial.
    acct_ffn_t more = TOY;
    more.tokens = 32;
    const acct_2d_t m = acct_fsdp_tp(&more, 2, 2);
    assert_rel(m.max_n_overlap, 4.2 * 2.2, "overlapped max N, B = 32");
    assert_rel(m.max_n_serial, 6789.76 / 1536.0, "serial max N, B = 32");
    // A batch small against F: C = 1000 gives BW/C = 0.16, FW/C = 0.08, K = 3.84; the unconstrained
    // split (3.84 + 24 + 32)/2 = 29.92 would ask N_TP = 29.92/32 = 0.935 < 1. With N_TP = 1 the TP
    // all-reduce is free and FSDP alone reaches 1 + BW/C = 1.16 (the formula's 1.1656 is not reachable).
    acct_ffn_t slow = TOY;
    slow.flops_per_s = 1000;
    const acct_2d_t s1 = acct_fsdp_tp(&slow, 2, 2);
    cr_assert_eq(s1.serial_best_tp, 1.0);
    assert_rel(s1.serial_best_fsdp, 1.16, "best N_FSDP, N_TP clamped");
    assert_rel(s1.max_n_serial, 1.16, "serial max N, N_TP clamped");
    // The other end: B = 1 row, K = 0.24, (0.24 + 24 + 2)/2 = 13.12 would ask N_FSDP = 13.12/24 < 1;
    // N_FSDP = 1 and TP alone reaches 1 + 3FW/(2C) = 1.12.
    slow.tokens = 1;
    const acct_2d_t s2 = acct_fsdp_tp(&slow, 1, 1);
    cr_assert_eq(s2.serial_best_fsdp, 1.0);
    assert_rel(s2.max_n_serial, 1.12, "serial max N, N_FSDP clamped");
}

Test(accounting_2026, bad_layer_names_the_flag) {
    char err[256];
    acct_ffn_t bad = TOY;
    bad.egress_bytes_per_s = 0;
    cr_assert_eq(acct_ffn_check(&bad, err, sizeof err), -1);
    cr_assert(strstr(err, "--egress"), "%s", err);
    bad = TOY;
    bad.tokens = INFINITY;
    cr_assert_eq(acct_ffn_check(&bad, err, sizeof err), -1);
    cr_assert(strstr(err, "--tokens"), "%s", err);
    cr_assert_eq(acct_ffn_check(&TOY, err, sizeof err), 0);
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

Test(accounting_cli, handout_2026_answers) {
    char out[16384];
    int rc = run_prog("--handout-2026", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    // D = 16384, F = 53248, B = 1048576, C = 4.6e14, W = 9e10, N = 8, grid 16 x 4, by hand:
    // BW/C = 9.437184e16 / 4.6e14 = 205.156 -> DP and FSDP 206.16; FW/C = 4.79232e15 / 4.6e14 = 10.418
    // -> TP 1 + 15.627 = 16.63 forward, 1 + 31.254 = 32.25 backward; overlapped 206.156 · 16.627 = 3427.8;
    // S = 6 · 872,415,232 = 5,234,491,392 bytes: the alternate ring sends 7 S, 7 · 0.0581610 = 0.407127 s.
    const char* want[] = {"206.16", "16.63", "32.25", "3427.8", "0.407127", "FSDP 16 x TP 4"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]), "output lacks \"%s\":\n%s", want[i], out);
    cr_assert(!strstr(out, "N_FSDP needed"), "the §2.4 tables are not printed:\n%s", out);
    // On two devices both all-reduces send one S: 0.0581610 s each; twice the batch, 1 + 410.31 devices.
    rc = run_prog("--handout-2026 --n 2 --tokens 2097152", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "| 0.058161 ") && strstr(out, "411.31"), "%s", out);
    cr_assert(!strstr(out, "0.407127"), "%s", out);
}

Test(accounting_cli, help_exits_0) {
    char out[8192];
    const int rc = run_prog("--help", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "--d-model") && strstr(out, "--w-ici") && strstr(out, "--budget-gb"), "%s", out);
    cr_assert(strstr(out, "--handout-2026") && strstr(out, "--egress"), "%s", out);
}

Test(accounting_cli, bad_flags_exit_2_with_one_line) {
    const char* cases[][2] = {
        {"--x 0", "--x"},          {"--d-ff -3", "--d-ff"}, {"--flops abc", "--flops"},
        {"--budget-gb 0", "--budget-gb"}, {"--bogus 1", "--bogus"}, {"--batch 0", "--batch"},
        {"--handout-2026 --egress 0", "--egress"}, {"--handout-2026 --n 0", "--n"},
        {"--handout-2026 --tokens -1", "--tokens"},
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

// ---- the Transformer LM's step: the 8b class (V 151936, C 4096, F 11008, L 34, NH 32) at batch
// 2 x context 32768 over 2 ranks, bf16 ZeRO-3, flash attention: one sequence, N = 32768 rows a rank.
static acct_lm_cfg_t lb8b(int ckpt, int64_t head_chunk) {
    const acct_lm_cfg_t c = {151936, 4096, 11008, 34, 32, 2, 32768, 2, 1, ckpt, head_chunk, 2.0};
    return c;
}

Test(accounting, lm_8b_step_memory_by_hand) {
    const acct_lm_cfg_t c0 = lb8b(0, 0), c1 = lb8b(1, 0), c1h = lb8b(1, 4096);
    char err[256];
    cr_assert_eq(acct_lm_check(&c0, err, sizeof err), 0, "%s", err);
    const acct_lm_t none = acct_lm(&c0), blk = acct_lm(&c1), blk_ch = acct_lm(&c1h);
    // V·C = 151936 · 4096 = 622,329,856; a block 4C² + 3CF + 2C = 67,108,864 + 135,266,304 + 8192
    // = 202,383,360, x 34 = 6,881,034,240; P = 2 · 622,329,856 + 6,881,034,240 + 4096 = 8,125,698,048.
    cr_assert_eq(none.params, 8125698048.0, "P = %.0f", none.params);
    cr_assert_eq(none.rows, 32768.0);
    cr_assert_eq(none.state, 73131282432.0);    // 18P/2 = 9P
    cr_assert_eq(none.moments, 32502792192.0);  // 8P/2
    cr_assert_eq(none.working, 7467958272.0);   // 12 · V·C
    // A block: N·(C·4 resid2 + 2·C·2 ln1, ln2 + 8 rstds + 3·C·2 qkv + NH·4 lse + C·2 atty + 2·F·2 h13
    // + C·4 its input) = 32768 · (20·4096 + 4·11008 + 8 + 128) = 32768 · 126,088 = 4,131,651,584.
    cr_assert_eq(none.acts_per_layer, 4131651584.0);
    // none: 34 blocks + the final norm's input slice 32768·4096·4 = 536,870,912: 141,013,024,768.
    cr_assert_eq(none.acts_blocks, 141013024768.0);
    // block: 35 residual slices (18,790,481,920) + one block's internals (4,131,651,584 − 536,870,912).
    cr_assert_eq(blk.acts_blocks, 22385262592.0);
    cr_assert_eq(none.acts_head, 268828672.0);  // N·C·2 + 12·N
    cr_assert_eq(none.logits, 9957277696.0);     // N·V·2: 10 GB for one sequence of 32768
    cr_assert_eq(none.logits_fp32_pair, 4.0 * 9957277696.0);
    cr_assert_eq(blk_ch.logits, 1244659712.0);   // 4096·V·2
    cr_assert_eq(none.scratch, 5033164800.0);    // N·(16·C + 8·F) = 32768 · 153,600
    // 73,131,282,432 + 7,467,958,272 + 22,385,262,592 + 268,828,672 + 1,244,659,712 + 5,033,164,800
    cr_assert_eq(blk_ch.total, 109531156480.0);
    cr_assert_eq(blk.total, 118243774464.0);     // the same with the whole logits
    // So: block checkpointing + the chunked head fit an H200 (141 GB) but not an H100 (80 GB),
    // whose 80 GB the state and working buffers alone already pass.
    cr_assert(blk_ch.total < 141e9 && blk_ch.total > 80e9);
    cr_assert(none.state + none.working > 80e9);
    // The whole-model formula (one device, both sequences): logits counted when whole only.
    acct_lm_cfg_t one = lb8b(1, 0);
    one.batch = 1, one.ranks = 1;
    cr_assert_eq(acct_lm_model_acts_bytes(&one), 22385262592.0 + 268828672.0 + 9957277696.0);
    one.head_chunk = 7;
    cr_assert_eq(acct_lm_model_acts_bytes(&one), 22385262592.0 + 268828672.0);
}

Test(accounting, lm_check_names_the_bad_field) {
    char err[256];
    acct_lm_cfg_t c = lb8b(1, 4096);
    c.ranks = 3;
    cr_assert_eq(acct_lm_check(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "--ranks 3") && strstr(err, "divide"), "%s", err);
    c = lb8b(1, -1);
    cr_assert_eq(acct_lm_check(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "--head-chunk -1"), "%s", err);
}

Test(accounting_cli, lm_8b_table) {
    char out[16384];
    int rc = run_prog("--lm 8b", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    const char* want[] = {"8125698048", "| 73.131 ", "| 109.531 ", "| 118.244 ", "| 9.957 ", "| 1.245 "};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]), "output lacks \"%s\":\n%s", want[i], out);
    cr_assert(strstr(out, "fits an H200 (141 GB): block ckpt, chunked") && strstr(out, "| yes "), "%s", out);
    rc = run_prog("--lm 8b --ranks 3", out, sizeof out);
    ASSERT_REFUSED(rc, out, "accounting", "--ranks 3");
    rc = run_prog("--lm huge", out, sizeof out);
    ASSERT_REFUSED(rc, out, "accounting", "--lm: unknown size 'huge'");
}

// The formula against the GPU model's own count of its acts-tagged buffers (model_gpu_acts_bytes,
// itself checked against the counting allocator in tests/test_head_chunk.c): tiny, naive
// attention, fp32 and bf16, checkpointing none / block / every-2, whole and chunked logits.
Test(accounting_gpu, lm_acts_formula_is_the_gpu_models) {
    SKIP_WITHOUT_GPU();
    model_config_t mc;
    cr_assert_eq(model_config_by_name("tiny", 16, &mc), 0);
    const int ckpts[] = {0, 1, 2}, chunks[] = {0, 5};
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 3; k++)
            for (int h = 0; h < 2; h++) {
                char err[512] = "";
                model_gpu_t* g = model_gpu_create_head(&mc, 2, 16, p ? MP_BF16 : MP_FP32, NULL, 1, ckpts[k], 0, 0, chunks[h],
                                                       err, sizeof err);
                cr_assert_not_null(g, "%s", err);
                const acct_lm_cfg_t c = {mc.vocab, mc.d_model, mc.d_ff, mc.n_layers, mc.n_heads, 2, 16, 1, 0, ckpts[k],
                                         chunks[h], p ? 2.0 : 4.0};
                cr_assert_eq(acct_lm_model_acts_bytes(&c), (double)model_gpu_acts_bytes(g), "%s ckpt %d chunk %d: %.0f vs %zu",
                             p ? "bf16" : "fp32", ckpts[k], chunks[h], acct_lm_model_acts_bytes(&c), model_gpu_acts_bytes(g));
                model_gpu_destroy(g);
            }
}
