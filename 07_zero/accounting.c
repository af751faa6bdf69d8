// The §2.4 accounting as formulas, one function each; ACCOUNTING.md derives them. See accounting.h.
#include "07_zero/accounting.h"

#include <math.h>

#include "common/check.h"
#include "common/model_cpu.h"  // model_ckpt_slots, model_ckpt_res_slices

// Upper bounds on the inputs: generous for any real model (405B has D = 16384, F = 53248,
// L = 126), and small enough that P = 2·L·D·F and 16P stay exact in a double (< 2^53).
#define ACCT_MAX_DIM (INT64_C(1) << 22)     // d_model, d_ff
#define ACCT_MAX_BLOCKS (INT64_C(1) << 12)  // num_blocks
#define ACCT_MAX_MESH_AXES 8                // a TPU pod is a 3D torus; 8 leaves room for more
#define ACCT_MAX_DEGREE (1 << 20)           // X, Y

int acct_model_check(const acct_model_t* m, char* err, size_t errlen) {
    if (m->d_model < 1 || m->d_model > ACCT_MAX_DIM)
        return set_err(err, errlen, "--d-model must be between 1 and %lld (got %lld)",
                       (long long)ACCT_MAX_DIM, (long long)m->d_model);
    if (m->d_ff < 1 || m->d_ff > ACCT_MAX_DIM)
        return set_err(err, errlen, "--d-ff must be between 1 and %lld (got %lld)",
                       (long long)ACCT_MAX_DIM, (long long)m->d_ff);
    if (m->num_blocks < 1 || m->num_blocks > ACCT_MAX_BLOCKS)
        return set_err(err, errlen, "--num-blocks must be between 1 and %lld (got %lld)",
                       (long long)ACCT_MAX_BLOCKS, (long long)m->num_blocks);
    return 0;
}

int acct_mesh_check(const acct_mesh_t* mesh, char* err, size_t errlen) {
    // !(v > 0) also catches NaN, which cli_parse already refuses but a library caller might pass.
    if (!(mesh->flops_per_s > 0) || isinf(mesh->flops_per_s))
        return set_err(err, errlen, "--flops must be a positive FLOP/s count (got %g)", mesh->flops_per_s);
    if (!(mesh->ici_bytes_per_s > 0) || isinf(mesh->ici_bytes_per_s))
        return set_err(err, errlen, "--w-ici must be a positive bandwidth in bytes/s (got %g)",
                       mesh->ici_bytes_per_s);
    if (mesh->mesh_axes_x < 1 || mesh->mesh_axes_x > ACCT_MAX_MESH_AXES)
        return set_err(err, errlen, "--mx must be between 1 and %d mesh axes (got %d)", ACCT_MAX_MESH_AXES,
                       mesh->mesh_axes_x);
    if (mesh->mesh_axes_y < 1 || mesh->mesh_axes_y > ACCT_MAX_MESH_AXES)
        return set_err(err, errlen, "--my must be between 1 and %d mesh axes (got %d)", ACCT_MAX_MESH_AXES,
                       mesh->mesh_axes_y);
    if (mesh->x < 1 || mesh->x > ACCT_MAX_DEGREE)
        return set_err(err, errlen, "--x (FSDP degree) must be between 1 and %d (got %d)", ACCT_MAX_DEGREE,
                       mesh->x);
    if (mesh->y < 1 || mesh->y > ACCT_MAX_DEGREE)
        return set_err(err, errlen, "--y (TP degree) must be between 1 and %d (got %d)", ACCT_MAX_DEGREE,
                       mesh->y);
    return 0;
}

acct_memory_t acct_memory(const acct_model_t* m) {
    // STUDENT-BEGIN(07.acct_memory): (a) the XXL model's memory: P = 2·L·D·F parameters (W1, W2 per block); fp32 master weights and gradients (4 bytes each), AdamW's m and v (2·4 bytes), state = their sum; activations per token ACCT_BF16_BYTES·L·(D + F) (the inputs W1 and W2 save) | see 07_zero/ACCOUNTING.md §(a) Memory on one device | test: test_07 accounting/handout_a_* | needs: 07.acct_devices_whole
    const double D = (double)m->d_model, F = (double)m->d_ff, L = (double)m->num_blocks;
    acct_memory_t r;
    r.params = 2.0 * L * D * F;  // W1 [D, F] and W2 [F, D] per block, no biases
    r.master_weight_bytes = ACCT_FP32_BYTES * r.params;
    r.grad_bytes = ACCT_FP32_BYTES * r.params;
    r.optimizer_bytes = 2.0 * ACCT_FP32_BYTES * r.params;  // AdamW keeps m and v per parameter
    r.state_bytes = r.master_weight_bytes + r.grad_bytes + r.optimizer_bytes;
    // A linear layer y = x·W needs its input x for dW = xᵀ·dy (and W, already counted, for dx).
    // W1 saves its input [tokens, D]; W2 saves its input, W1's output, [tokens, F]. With no
    // activation function between them nothing else is kept.
    r.activation_bytes_per_token = ACCT_BF16_BYTES * L * (D + F);
    return r;
    // STUDENT-END(07.acct_memory)
}

double acct_activation_bytes(const acct_model_t* m, double tokens) {
    return acct_memory(m).activation_bytes_per_token * tokens;
}

double acct_devices_needed(double bytes, double device_bytes) { return bytes / device_bytes; }

int64_t acct_devices_whole(double bytes, double device_bytes) {
    // STUDENT-BEGIN(07.acct_devices_whole): (a) the smallest whole n with n·device_bytes >= bytes: ceil of the division, then settled so that its rounding never decides | see 07_zero/ACCOUNTING.md §(a) Memory on one device | test: test_07 accounting/handout_a_* | needs: 07.acct_memory
    int64_t n = (int64_t)ceil(bytes / device_bytes);
    // The division may round across an integer; settle on the exact smallest n.
    while (n > 0 && (double)(n - 1) * device_bytes >= bytes) n--;
    while ((double)n * device_bytes < bytes) n++;
    return n;
    // STUDENT-END(07.acct_devices_whole)
}

double acct_fsdp_bytes_per_device(double state_bytes, double act_bytes, int64_t n_fsdp) {
    // STUDENT-BEGIN(07.acct_fsdp_bytes): (b) one device's bytes under FSDP: (state + A/2)/N_FSDP + A/2 (every second layer's activations sharded with the state, the others whole) | see 07_zero/ACCOUNTING.md §(b) FSDP over N_FSDP devices | test: test_07 accounting/handout_b_* | needs: 07.acct_fsdp_min_degree
    // Every second layer's activations are sharded with the state; the others stay whole.
    const double half_act = 0.5 * act_bytes;
    return (state_bytes + half_act) / (double)n_fsdp + half_act;
    // STUDENT-END(07.acct_fsdp_bytes)
}

int64_t acct_fsdp_min_degree(double state_bytes, double act_bytes, double budget_bytes) {
    // STUDENT-BEGIN(07.acct_fsdp_min_degree): (b) the smallest N_FSDP with acct_fsdp_bytes_per_device < budget: N > (state + A/2)/(budget - A/2), settled on that formula at the boundary; -1 when A/2 >= budget or N would be 1e15 or more | see 07_zero/ACCOUNTING.md §(b) FSDP over N_FSDP devices | test: test_07 accounting/handout_b_* | needs: 07.acct_fsdp_bytes
    const double half_act = 0.5 * act_bytes;
    if (half_act >= budget_bytes) return -1;  // no amount of sharding removes the unsharded half
    // (state + A/2)/N + A/2 < budget  <=>  N > (state + A/2) / (budget − A/2)
    const double n_real = (state_bytes + half_act) / (budget_bytes - half_act);
    if (!(n_real < 1e15)) return -1;  // not a degree any machine has (and keeps int64 safe)
    int64_t n = (int64_t)floor(n_real) + 1;
    // Settle rounding at the boundary on the formula the program prints.
    while (n > 1 && acct_fsdp_bytes_per_device(state_bytes, act_bytes, n - 1) < budget_bytes) n--;
    while (acct_fsdp_bytes_per_device(state_bytes, act_bytes, n) >= budget_bytes) n++;
    return n;
    // STUDENT-END(07.acct_fsdp_min_degree)
}

acct_layer_times_t acct_layer_times(const acct_model_t* m, const acct_mesh_t* mesh, double tokens_total) {
    // STUDENT-BEGIN(07.acct_layer_times): (c) one block's times for B tokens on N = X·Y chips: math 4·B·D·F/(N·C); the FSDP all-gather of W1 and W2 (bf16) along X 4·D·F/(Y·W·M_X); the TP all-gather and reduce-scatter along Y 4·(B/X)·D/(W·M_Y) | see 07_zero/ACCOUNTING.md §(c) When is the FSDP × TP forward pass compute-bound? | test: test_07 accounting/threshold_is_where_the_time_model_flips | needs: 07.acct_compute_bound
    const double D = (double)m->d_model, F = (double)m->d_ff, B = tokens_total;
    const double X = mesh->x, Y = mesh->y, N = X * Y;
    const double C = mesh->flops_per_s, W = mesh->ici_bytes_per_s;
    acct_layer_times_t t;
    // Two matmuls (B×D by D×F and B×F by F×D), 2 FLOPs per multiply-add, spread over all N chips.
    t.math_s = 2.0 * 2.0 * B * D * F / (N * C);
    // All-gather along X of W1 [D_X, F_Y] and W2 [F_Y, D_X] in bf16: each chip ends up with the
    // D·F/Y elements of its TP column of each matrix. An all-gather of V bytes over a ring of
    // bidirectional links takes about V/W; M_X axes carry it in parallel.
    t.fsdp_s = 2.0 * ACCT_BF16_BYTES * D * F / (Y * W * mesh->mesh_axes_x);
    // All-gather In [B_X, D_Y] before W1 and reduce-scatter Out [B_X, D] after W2, along Y:
    // B/X·D bf16 elements each.
    t.tp_s = 2.0 * ACCT_BF16_BYTES * (B / X) * D / (W * mesh->mesh_axes_y);
    return t;
    // STUDENT-END(07.acct_layer_times)
}

acct_bound_t acct_compute_bound(const acct_model_t* m, const acct_mesh_t* mesh) {
    // STUDENT-BEGIN(07.acct_compute_bound): (c) alpha = C/W; TP keeps up when F > alpha·Y/M_Y (tp_ok, tp_max_degree = M_Y·F/alpha); FSDP when B/N > alpha/(Y·M_X) (INFINITY unless tp_ok; min_tokens_total = N times it); both in series: b·(F/alpha - Y/M_Y) > F/(Y·M_X) (INFINITY when the bracket is not positive); the best split alpha²/(M_X·M_Y·F) | see 07_zero/ACCOUNTING.md §(c) When is the FSDP × TP forward pass compute-bound? | test: test_07 accounting/handout_c_* | needs: 07.acct_layer_times 07.acct_smallest_above
    const double F = (double)m->d_ff;
    const double X = mesh->x, Y = mesh->y, N = X * Y;
    const double MX = mesh->mesh_axes_x, MY = mesh->mesh_axes_y;
    acct_bound_t r;
    r.alpha = mesh->flops_per_s / mesh->ici_bytes_per_s;
    // T_tp < T_math  <=>  4BD/(X·W·M_Y) < 4BDF/(N·C)  <=>  F > alpha·Y/M_Y: B cancels.
    r.tp_ok = F > r.alpha * Y / MY;
    r.tp_max_degree = MY * F / r.alpha;
    // T_fsdp < T_math  <=>  4DF/(Y·W·M_X) < 4BDF/(N·C)  <=>  B/N > alpha/(Y·M_X).
    r.min_tokens_per_device = r.tp_ok ? r.alpha / (Y * MX) : INFINITY;
    r.min_tokens_total = N * r.min_tokens_per_device;
    // T_fsdp + T_tp < T_math with b = B/N (so B/X = b·Y):
    //   F/(Y·M_X) + b·Y/M_Y < b·F/alpha  <=>  b·(F/alpha − Y/M_Y) > F/(Y·M_X).
    const double denom = F / r.alpha - Y / MY;
    r.min_tokens_per_device_serial = denom > 0 ? (F / (Y * MX)) / denom : INFINITY;
    // At X = X_opt both collectives take the same time; T_math > that time gives
    // B/N > alpha²/(M_X·M_Y·F) (ACCOUNTING.md, "the best split").
    r.min_tokens_per_device_best_split = r.alpha * r.alpha / (MX * MY * F);
    return r;
    // STUDENT-END(07.acct_compute_bound)
}

double acct_x_opt(double tokens_total, int64_t d_ff, int mesh_axes_x, int mesh_axes_y, int64_t n_chips) {
    // STUDENT-BEGIN(07.acct_x_opt): (d) the FSDP degree X at which the FSDP and TP collectives take the same time: sqrt(B/F · M_X/M_Y · N) | see 07_zero/ACCOUNTING.md §(d) A smaller batch at full throughput | test: test_07 accounting/x_opt_balances_the_two_collectives | needs: 07.acct_layer_times
    return sqrt(tokens_total / (double)d_ff * (double)mesh_axes_x / (double)mesh_axes_y * (double)n_chips);
    // STUDENT-END(07.acct_x_opt)
}

int64_t acct_smallest_above(double threshold) {
    // STUDENT-BEGIN(07.acct_smallest_above): the smallest whole number above threshold: 0 below 0, -1 when it is not finite or 9e15 or more | see 07_zero/ACCOUNTING.md §(c) When is the FSDP × TP forward pass compute-bound? | test: test_07 accounting/handout_c_* | needs: 07.acct_layer_times 07.acct_compute_bound
    if (!isfinite(threshold) || threshold >= 9e15) return -1;
    if (threshold < 0) return 0;
    return (int64_t)floor(threshold) + 1;
    // STUDENT-END(07.acct_smallest_above)
}

// ---- The 2026 handout's §8 cost calculations (README.md, "The 2026 handout's cost calculations").

int acct_ffn_check(const acct_ffn_t* f, char* err, size_t errlen) {
    const struct {
        double v;
        const char* flag;
    } in[] = {{f->d_model, "--d-model"}, {f->d_ff, "--d-ff"}, {f->tokens, "--tokens"},
              {f->flops_per_s, "--flops"}, {f->egress_bytes_per_s, "--egress"}};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (!(in[i].v > 0) || isinf(in[i].v))
            return set_err(err, errlen, "%s must be a positive finite number (got %g)", in[i].flag, in[i].v);
    return 0;
}

// A ring pass: N-1 steps, each device sends one S/N chunk per step.
static double ring_pass_s(double bytes, int64_t n, double w) {
    return (double)(n - 1) / (double)n * bytes / w;
}

double acct_ring_all_gather_s(double bytes, int64_t n, double w) {
    // STUDENT-BEGIN(07.acct_ring_all_gather): the ring all-gather of S bytes on N devices of egress W: N-1 steps, each device sends one S/N chunk per step: (N-1)/N · S/W seconds | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_07 accounting_2026/ring_primitives_and_the_alternate_ring | uses: ring_pass_s | needs: 07.acct_ring_reduce_scatter 07.acct_ring_all_reduce 07.acct_alt_ring_all_reduce
    return ring_pass_s(bytes, n, w);
    // STUDENT-END(07.acct_ring_all_gather)
}

double acct_ring_reduce_scatter_s(double bytes, int64_t n, double w) {
    // STUDENT-BEGIN(07.acct_ring_reduce_scatter): the ring reduce-scatter of S bytes: the all-gather's N-1 steps of S/N chunks, each adding its partial sum before passing it on: (N-1)/N · S/W seconds | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_07 accounting_2026/ring_primitives_and_the_alternate_ring | uses: ring_pass_s | needs: 07.acct_ring_all_gather 07.acct_ring_all_reduce 07.acct_alt_ring_all_reduce
    return ring_pass_s(bytes, n, w);
    // STUDENT-END(07.acct_ring_reduce_scatter)
}

double acct_ring_all_reduce_s(double bytes, int64_t n, double w) {
    // STUDENT-BEGIN(07.acct_ring_all_reduce): the ring all-reduce: a reduce-scatter, then an all-gather: 2(N-1)/N · S/W seconds | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n | test: test_07 accounting_2026/ring_primitives_and_the_alternate_ring | uses: ring_pass_s | needs: 07.acct_ring_all_gather 07.acct_ring_reduce_scatter 07.acct_alt_ring_all_reduce
    return 2.0 * ring_pass_s(bytes, n, w);
    // STUDENT-END(07.acct_ring_all_reduce)
}

double acct_alt_ring_all_reduce_s(double bytes, int64_t n, double w) {
    // STUDENT-BEGIN(07.acct_alt_ring_all_reduce): alternate_ring_all_reduce: at step t = 1 … N-1 device i sends the whole S-byte x((i-t+1) mod N) to its right, every device at once: the time in S, N and W | see 05_collectives/README.md §The ring, and why busbw = algbw · 2(n−1)/n (A variant that passes whole tensors) | test: test_07 accounting_2026/ring_primitives_and_the_alternate_ring | needs: 07.acct_ring_all_gather 07.acct_ring_reduce_scatter 07.acct_ring_all_reduce
    // Step t sends x((i-t+1) mod N), a whole S-byte tensor, and every device sends at once.
    return (double)(n - 1) * bytes / w;
    // STUDENT-END(07.acct_alt_ring_all_reduce)
}

// 2·rows·D·F per matmul; the FFN has three of them forward and six backward (dz, dx's two, three dW).
static double matmuls(double count, double rows, const acct_ffn_t* f) {
    return count * 2.0 * rows * f->d_model * f->d_ff;
}

acct_par_t acct_dp(const acct_ffn_t* f, int64_t n) {
    // STUDENT-BEGIN(07.acct_dp): data_parallel_calcs: one device's matmul FLOPs (2·m·D·F per matmul of m rows: 3 forward, 6 backward, B/N rows), their times over C, the all-reduce of the three fp16 weight gradients (6DF bytes, acct_ring_all_reduce_s), none forward (0), and the largest N_DP with communication <= computation (INFINITY forward) | see 07_zero/ACCOUNTING.md §The 2026 handout's cost calculations | test: test_07 accounting_2026/data_parallel | uses: matmuls | needs: 07.acct_ring_all_reduce
    acct_par_t r;
    const double rows = f->tokens / (double)n, grads = 3.0 * f->d_model * f->d_ff * ACCT_FP16_BYTES;
    r.fwd_flops = matmuls(3, rows, f);
    r.bwd_flops = matmuls(6, rows, f);
    r.fwd_compute_s = r.fwd_flops / f->flops_per_s;
    r.bwd_compute_s = r.bwd_flops / f->flops_per_s;
    r.fwd_comm_s = 0.0;
    r.bwd_comm_s = acct_ring_all_reduce_s(grads, n, f->egress_bytes_per_s);
    // 12DF(N-1)/(NW) <= 12BDF/(NC)  <=>  N <= 1 + BW/C.
    r.max_n_fwd = INFINITY;
    r.max_n_bwd = 1.0 + f->tokens * f->egress_bytes_per_s / f->flops_per_s;
    return r;
    // STUDENT-END(07.acct_dp)
}

acct_par_t acct_fsdp(const acct_ffn_t* f, int64_t n) {
    // STUDENT-BEGIN(07.acct_fsdp): fsdp_calcs: DP's batch-sharded math; forward all-gathers the three fp16 weights (6DF bytes), backward all-gathers them again and reduce-scatters their gradients; the largest N_FSDP each way | see 07_zero/ACCOUNTING.md §The 2026 handout's cost calculations | test: test_07 accounting_2026/fully_sharded | needs: 07.acct_dp 07.acct_ring_all_gather 07.acct_ring_reduce_scatter 07.acct_ring_all_reduce
    acct_par_t r = acct_dp(f, n);  // same batch-sharded math
    const double weights = 3.0 * f->d_model * f->d_ff * ACCT_FP16_BYTES, w = f->egress_bytes_per_s;
    r.fwd_comm_s = acct_ring_all_gather_s(weights, n, w);
    r.bwd_comm_s = acct_ring_all_gather_s(weights, n, w) + acct_ring_reduce_scatter_s(weights, n, w);
    // 6DF(N-1)/(NW) <= 6BDF/(NC) and 12DF(N-1)/(NW) <= 12BDF/(NC): both N <= 1 + BW/C.
    r.max_n_fwd = 1.0 + f->tokens * w / f->flops_per_s;
    r.max_n_bwd = r.max_n_fwd;
    return r;
    // STUDENT-END(07.acct_fsdp)
}

acct_par_t acct_tp(const acct_ffn_t* f, int64_t n) {
    // STUDENT-BEGIN(07.acct_tp): tp_calcs: W1, W2 column-parallel and W3 row-parallel: every matmul keeps all B rows and F/N columns; the all-reduce of y [B, D] forward and of dx backward (fp16); the largest N_TP each way | see 07_zero/ACCOUNTING.md §The 2026 handout's cost calculations | test: test_07 accounting_2026/tensor_parallel | uses: matmuls | needs: 07.acct_ring_all_reduce
    acct_par_t r;
    const double w = f->egress_bytes_per_s, act = f->tokens * f->d_model * ACCT_FP16_BYTES;  // y or dx
    // Every matmul keeps all B rows and loses a factor N on its F side.
    r.fwd_flops = matmuls(3, f->tokens, f) / (double)n;
    r.bwd_flops = matmuls(6, f->tokens, f) / (double)n;
    r.fwd_compute_s = r.fwd_flops / f->flops_per_s;
    r.bwd_compute_s = r.bwd_flops / f->flops_per_s;
    r.fwd_comm_s = acct_ring_all_reduce_s(act, n, w);  // y
    r.bwd_comm_s = acct_ring_all_reduce_s(act, n, w);  // dx; dy is already whole on every device
    // 4BD(N-1)/(NW) <= 6BDF/(NC): N <= 1 + 3FW/(2C); against 12BDF/(NC): N <= 1 + 3FW/C.
    r.max_n_fwd = 1.0 + 1.5 * f->d_ff * w / f->flops_per_s;
    r.max_n_bwd = 1.0 + 3.0 * f->d_ff * w / f->flops_per_s;
    return r;
    // STUDENT-END(07.acct_tp)
}

acct_2d_t acct_fsdp_tp(const acct_ffn_t* f, int64_t n_fsdp, int64_t n_tp) {
    // STUDENT-BEGIN(07.acct_fsdp_tp): fsdp_tp_calcs: the forward pass on an N_FSDP × N_TP grid: FLOPs over N; the FSDP all-gather of the three [D/N_FSDP, F/N_TP] shards and the TP all-reduce of y [B/N_FSDP, D]; their max (overlapped) and sum (serial); the largest N both ways (exact and large-N forms) and the serial optimum's split, a degree below 1 clamped to 1 | see 07_zero/ACCOUNTING.md §The 2026 handout's cost calculations | test: test_07 accounting_2026/fsdp_times_tp | uses: matmuls | needs: 07.acct_ring_all_gather 07.acct_ring_reduce_scatter 07.acct_ring_all_reduce
    acct_2d_t r;
    const double B = f->tokens, D = f->d_model, F = f->d_ff, C = f->flops_per_s, W = f->egress_bytes_per_s;
    const double n = (double)n_fsdp * (double)n_tp;
    r.fwd_flops = matmuls(3, B, f) / n;
    r.fwd_compute_s = r.fwd_flops / C;
    // Gathered along FSDP: the three TP shards W^(i), D·F/N_TP elements each.
    r.fsdp_comm_s = acct_ring_all_gather_s(3.0 * D * F / (double)n_tp * ACCT_FP16_BYTES, n_fsdp, W);
    // Reduced along TP: this FSDP row's y, [B/N_FSDP, D].
    r.tp_comm_s = acct_ring_all_reduce_s(B / (double)n_fsdp * D * ACCT_FP16_BYTES, n_tp, W);
    r.overlap_comm_s = fmax(r.fsdp_comm_s, r.tp_comm_s);
    r.serial_comm_s = r.fsdp_comm_s + r.tp_comm_s;
    // Times N/(2D): FSDP 3F(X-1)/W, TP 2B(Y-1)/W, math 3BF/C.
    const double bw_c = B * W / C, fw_c = F * W / C;
    r.max_n_overlap = (1.0 + bw_c) * (1.0 + 1.5 * fw_c);
    r.max_n_overlap_large = 1.5 * bw_c * fw_c;
    // Maximize X·Y on 3F(X-1) + 2B(Y-1) = K = 3BFW/C: at the optimum 3F·X = 2B·Y = (K + 3F + 2B)/2.
    const double half = 0.5 * (3.0 * B * fw_c + 3.0 * F + 2.0 * B);
    r.serial_best_fsdp = half / (3.0 * F);
    r.serial_best_tp = half / (2.0 * B);
    // A degree below 1 is no split: the product falls along the line away from its peak, so the
    // best whole-axis point is the end where that degree is 1 and the other takes all of K.
    if (r.serial_best_tp < 1.0) {
        r.serial_best_tp = 1.0;
        r.serial_best_fsdp = 1.0 + bw_c;  // K / (3F) = BW/C
    } else if (r.serial_best_fsdp < 1.0) {
        r.serial_best_fsdp = 1.0;
        r.serial_best_tp = 1.0 + 1.5 * fw_c;  // K / (2B) = 3FW/(2C)
    }
    r.max_n_serial = r.serial_best_fsdp * r.serial_best_tp;
    r.max_n_serial_large = 0.375 * bw_c * fw_c;
    return r;
    // STUDENT-END(07.acct_fsdp_tp)
}

// ---- the Transformer LM's step (accounting.h "the Transformer LM's training step") ---------
int acct_lm_check(const acct_lm_cfg_t* c, char* err, size_t errlen) {
    if (c->vocab < 1 || c->d_model < 1 || c->d_ff < 1 || c->n_layers < 1 || c->n_heads < 1)
        return set_err(err, errlen, "the model's sizes must be >= 1");
    if (c->n_layers > ACCT_MAX_BLOCKS) return set_err(err, errlen, "at most %lld layers", (long long)ACCT_MAX_BLOCKS);
    if (c->batch < 1 || c->context < 1) return set_err(err, errlen, "--lm-batch and --lm-context must be >= 1");
    if (c->ranks < 1 || c->batch % c->ranks != 0)
        return set_err(err, errlen, "--ranks %lld must be >= 1 and divide --lm-batch %lld (each rank trains whole sequences)",
                       (long long)c->ranks, (long long)c->batch);
    if (c->ckpt < 0) return set_err(err, errlen, "checkpointing K %d must be >= 0", c->ckpt);
    if (c->head_chunk < 0) return set_err(err, errlen, "--head-chunk %lld must be >= 0", (long long)c->head_chunk);
    if (c->act_bytes != 2.0 && c->act_bytes != 4.0)
        return set_err(err, errlen, "activation bytes %g must be 2 (bf16) or 4 (fp32)", c->act_bytes);
    return 0;
}

// Per block and in the head, what model_gpu.c's create() allocates with the acts tag, for B
// sequences of T on one device (keep with model_gpu_acts_bytes).
static void lm_acts(const acct_lm_cfg_t* c, double B, double* per_layer, double* blocks, double* head) {
    const double V = (double)c->vocab, C = (double)c->d_model, F = (double)c->d_ff, NH = (double)c->n_heads;
    const double T = (double)c->context, N = B * T, es = c->act_bytes;
    const int L = (int)c->n_layers;
    const double att = c->flash ? N * NH * 4 : B * NH * T * T * es;  // logsumexp, or the scores
    // per slot: resid2 (fp32), ln1 and ln2, their rstds, qkv, attention, atty, h13
    const double slot = N * C * 4 + 2 * N * C * es + 2 * N * 4 + 3 * N * C * es + att + N * C * es + 2 * N * F * es;
    const double res = N * C * 4;  // a residual slice (fp32): block inputs, the final norm's input
    *per_layer = slot + res;
    *blocks = model_ckpt_res_slices(L, c->ckpt) * res + model_ckpt_slots(L, c->ckpt) * slot;
    *head = N * C * es + N * 4 + 2 * N * 4;  // lnf, its rstd; lse and losses
    (void)V;
}

acct_lm_t acct_lm(const acct_lm_cfg_t* c) {
    acct_lm_t r;
    const double V = (double)c->vocab, C = (double)c->d_model, F = (double)c->d_ff, L = (double)c->n_layers;
    const double n = (double)c->ranks, es = c->act_bytes;
    r.params = 2 * V * C + L * (2 * C + 4 * C * C + 3 * C * F) + C;  // embedding, head; blocks; ln_final
    r.bf16_params = 2 * r.params / n;
    r.masters = 4 * r.params / n;
    r.grads = 4 * r.params / n;
    r.moments = 8 * r.params / n;
    r.state = r.bf16_params + r.masters + r.grads + r.moments;
    r.working = 2 * (2 * V * C) + 2 * (4 * V * C);
    const double Br = (double)(c->batch / c->ranks), N = Br * (double)c->context;
    r.rows = N;
    lm_acts(c, Br, &r.acts_per_layer, &r.acts_blocks, &r.acts_head);
    const double rows = c->head_chunk > 0 && (double)c->head_chunk < N ? (double)c->head_chunk : N;
    r.logits = rows * V * es;
    r.logits_fp32_pair = 8 * N * V;
    // mg_alloc_backward: dres (fp32) and its bf16 copy, dln, dqkv, datty, dh13, dg; the naive
    // attention's score gradient; the forward's SwiGLU output g.
    const double T = (double)c->context, NH = (double)c->n_heads;
    r.scratch = N * C * 4 + (es == 2 ? N * C * es : 0) + N * C * es + 3 * N * C * es + N * C * es + 2 * N * F * es +
                N * F * es + (c->flash ? 0 : Br * NH * T * T * es) + N * F * es;
    r.total = r.state + r.working + r.acts_blocks + r.acts_head + r.logits + r.scratch;
    return r;
}

double acct_lm_model_acts_bytes(const acct_lm_cfg_t* c) {
    double per_layer, blocks, head;
    lm_acts(c, (double)c->batch, &per_layer, &blocks, &head);
    const double N = (double)c->batch * (double)c->context;
    return blocks + head + (c->head_chunk > 0 ? 0 : N * (double)c->vocab * c->act_bytes);
}
