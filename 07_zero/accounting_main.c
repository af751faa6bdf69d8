// The handout's §2.4 communication_accounting problem as a calculator: memory of an FFN-only
// model on one device (a), the FSDP degree that fits a per-device budget (b), and the batch that
// keeps an FSDP × TP forward pass compute-bound (c). Defaults are the handout's XXL model, H100
// 80GB and TPU v5p constants; every one is a flag. ACCOUNTING.md derives each row.
//   build/07_zero/accounting [--d-model 16384 --d-ff 53248 --num-blocks 126 --batch 4 --context 512]
//                            [--device-gb 80 --budget-gb 95 --flops 4.6e14 --w-ici 1.8e11]
//                            [--mx 2 --my 1 --x 16 --y 4]
//   build/07_zero/accounting --handout-2026 [--tokens 1048576 --egress 9e10 --n 8] prints instead the
//   2026 handout's §8 answers (alternate ring, DP, FSDP, TP, FSDP x TP) for one FFN layer of width
//   --d-model, --d-ff at --flops, with --x x --y as the 2D grid.
#include <math.h>
#include <stdio.h>

#include "07_zero/accounting.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/model.h"
#include "common/table.h"

#define MAX_TOKENS_SIDE (1 << 24)  // --batch and --context: 16M each is far past any real run

// Formulas are written in ASCII (*, ^2): the Markdown printer pads columns by bytes.
static const char* const HDR[] = {"quantity", "formula", "value", "unit"};

static void row(table_t* t, const char* what, const char* formula, const char* unit, const char* fmt,
                double v) {
    table_row(t);
    table_cell(t, "%s", what);
    table_cell(t, "%s", formula);
    table_cell(t, fmt, v);
    table_cell(t, "%s", unit);
}

// A row whose value is a whole count, or "none" where the count does not exist (-1).
static void row_count(table_t* t, const char* what, const char* formula, const char* unit, int64_t n) {
    table_row(t);
    table_cell(t, "%s", what);
    table_cell(t, "%s", formula);
    if (n >= 0) table_cell(t, "%lld", (long long)n);
    else table_cell(t, "none");
    table_cell(t, "%s", unit);
}

#define MAX_DEGREE (1 << 20)  // --n of the §8 tables

static void row_fits(table_t* t, const char* what, const char* formula, double bytes, double gb) {
    table_row(t);
    table_cell(t, "%s", what);
    table_cell(t, "%s", formula);
    table_cell(t, "%s", bytes <= gb * ACCT_GB ? "yes" : "no");
    table_cell(t, "%.3f GB of %g", bytes / ACCT_GB, gb);
}

// --lm SIZE: one training step of the Transformer LM (common/model.h), bf16 ZeRO-3 over --ranks,
// flash attention; every total with and without block checkpointing and the chunked head.
static void lm_step(const char* size, int batch, int context, int ranks, int head_chunk) {
    model_config_t mc;
    if (model_config_by_name(size, context, &mc) != 0) fail("--lm: unknown size '%s'; one of %s", size, MODEL_SIZE_CHOICES);
    acct_lm_cfg_t c = {mc.vocab, mc.d_model, mc.d_ff, mc.n_layers, mc.n_heads, batch, context, ranks, 1, 0, 0, 2.0};
    char err[256], title[320], f[160];
    if (acct_lm_check(&c, err, sizeof err) != 0) fail("%s", err);
    const acct_lm_t none = acct_lm(&c);
    c.ckpt = 1;
    const acct_lm_t blk = acct_lm(&c);
    c.head_chunk = head_chunk;
    const acct_lm_t blk_ch = acct_lm(&c);
    c.ckpt = 0;
    const acct_lm_t none_ch = acct_lm(&c);
    c.flash = 0;
    c.head_chunk = 0;
    const acct_lm_t naive = acct_lm(&c);
    snprintf(title, sizeof title,
             "%s: V %d, C %d, F %d, L %d, NH %d; batch %d x context %d over %d ranks (%d sequence%s a rank), bf16 "
             "ZeRO-3, flash attention; GB = 1e9 bytes", size, mc.vocab, mc.d_model, mc.d_ff, mc.n_layers, mc.n_heads,
             batch, context, ranks, batch / ranks, batch / ranks == 1 ? "" : "s");
    table_t* t = table_new(title, 4, HDR);
    const double G = ACCT_GB;
    row(t, "parameters P", "2*V*C + L*(4*C^2 + 3*C*F + 2*C) + C", "parameters", "%.0f", none.params);
    row(t, "bf16 parameters, a shard", "2*P/n", "GB", "%.3f", none.bf16_params / G);
    row(t, "fp32 masters, a shard", "4*P/n", "GB", "%.3f", none.masters / G);
    row(t, "fp32 gradients, a shard", "4*P/n", "GB", "%.3f", none.grads / G);
    row(t, "AdamW m and v (fp32), a shard", "8*P/n", "GB", "%.3f", none.moments / G);
    row(t, "state a rank", "18*P/n", "GB", "%.3f", none.state / G);
    row(t, "unit working buffers (2 bf16 + 2 fp32)", "12*V*C (the largest unit: V*C)", "GB", "%.3f", none.working / G);
    snprintf(f, sizeof f, "N = %.0f rows a rank", none.rows);
    row(t, "one block's activations", f, "GB", "%.3f", none.acts_per_layer / G);
    row(t, "naive attention's scores, one block", "B/n*NH*T^2*2", "GB", "%.3f",
        (naive.acts_per_layer - none.acts_per_layer + (double)(batch / ranks) * context * mc.n_heads * 4) / G);
    row(t, "every block's, no checkpointing", "L*(block) + a residual slice", "GB", "%.3f", none.acts_blocks / G);
    row(t, "every block's, block checkpointing", "(L+1)*N*C*4 + one block's internals", "GB", "%.3f", blk.acts_blocks / G);
    row(t, "final norm, lse, losses", "N*C*2 + 12*N", "GB", "%.3f", none.acts_head / G);
    row(t, "logits, whole (bf16, dlogits in place)", "N*V*2", "GB", "%.3f", none.logits / G);
    row(t, "logits + dlogits in fp32 (an upcasting framework)", "8*N*V", "GB", "%.3f", none.logits_fp32_pair / G);
    snprintf(f, sizeof f, "%d*V*2 (--head-chunk %d)", head_chunk < none.rows ? head_chunk : (int)none.rows, head_chunk);
    row(t, "logits, chunked", f, "GB", "%.3f", blk_ch.logits / G);
    row(t, "backward scratch + SwiGLU output", "N*(16*C + 8*F)", "GB", "%.3f", none.scratch / G);
    row(t, "total: no checkpointing, whole logits", "state + buffers + acts + logits + scratch", "GB", "%.3f", none.total / G);
    row(t, "total: no checkpointing, chunked head", "", "GB", "%.3f", none_ch.total / G);
    row(t, "total: block checkpointing, whole logits", "", "GB", "%.3f", blk.total / G);
    row(t, "total: block checkpointing, chunked head", "", "GB", "%.3f", blk_ch.total / G);
    row_fits(t, "fits an H200 (141 GB): block ckpt, chunked", "total <= 141 GB", blk_ch.total, 141);
    row_fits(t, "fits an H200 (141 GB): block ckpt, whole logits", "total <= 141 GB", blk.total, 141);
    row_fits(t, "fits an H200 (141 GB): no ckpt, chunked", "total <= 141 GB", none_ch.total, 141);
    row_fits(t, "fits an H100 (80 GB): block ckpt, chunked", "total <= 80 GB", blk_ch.total, 80);
    row_fits(t, "fits an H100 (80 GB): state + buffers alone", "18*P/n + 12*V*C <= 80 GB", none.state + none.working, 80);
    row_count(t, "ranks whose shards of state leave 80 GB room for the rest", "smallest n: 18*P/n + rest <= 80 GB", "ranks",
              acct_devices_whole(18 * none.params, 80 * G - (blk_ch.total - blk_ch.state)));
    table_print_md(t, stdout);
    table_free(t);
}

// The 2026 handout's §8: one FFN layer, fp16, N devices of egress W. ACCOUNTING.md derives each row.
static void handout_2026(const acct_ffn_t* f, int n, int x, int y) {
    char title[256], fm[160];
    const double grads = 3.0 * f->d_model * f->d_ff * ACCT_FP16_BYTES;  // S of the DP all-reduce
    snprintf(title, sizeof title,
             "one FFN layer: D %.0f, F %.0f, B %.0f rows, C = %g FLOP/s, W = %g B/s egress, fp16; N = %d", f->d_model,
             f->d_ff, f->tokens, f->flops_per_s, f->egress_bytes_per_s, n);
    table_t* t = table_new(title, 4, HDR);
    snprintf(fm, sizeof fm, "2*(N-1)/N * S/W, S = 6*D*F = %.4g B", grads);
    row(t, "ring all-reduce of the gradients", fm, "s", "%.6g", acct_ring_all_reduce_s(grads, n, f->egress_bytes_per_s));
    row(t, "alternate ring all-reduce, same S", "(N-1) * S/W", "s", "%.6g",
        acct_alt_ring_all_reduce_s(grads, n, f->egress_bytes_per_s));
    const struct {
        const char* name;
        acct_par_t r;
        const char *fwd_bound, *bwd_bound;
    } par[] = {{"DP", acct_dp(f, n), "no forward collective", "1 + B*W/C"},
               {"FSDP", acct_fsdp(f, n), "1 + B*W/C", "1 + B*W/C"},
               {"TP", acct_tp(f, n), "1 + 3*F*W/(2*C)", "1 + 3*F*W/C"}};
    for (size_t i = 0; i < sizeof par / sizeof par[0]; i++) {
        const acct_par_t* r = &par[i].r;
        char what[96];
        snprintf(what, sizeof what, "%s forward / backward FLOPs per device", par[i].name);
        table_row(t);
        table_cell(t, "%s", what);
        table_cell(t, "%s", i == 2 ? "6*B*D*F/N / 12*B*D*F/N" : "6*(B/N)*D*F / 12*(B/N)*D*F");
        table_cell(t, "%.4g / %.4g", r->fwd_flops, r->bwd_flops);
        table_cell(t, "FLOPs");
        snprintf(what, sizeof what, "%s forward / backward compute", par[i].name);
        table_row(t);
        table_cell(t, "%s", what);
        table_cell(t, "FLOPs / C");
        table_cell(t, "%.4g / %.4g", r->fwd_compute_s, r->bwd_compute_s);
        table_cell(t, "s");
        snprintf(what, sizeof what, "%s forward / backward communication", par[i].name);
        table_row(t);
        table_cell(t, "%s", what);
        table_cell(t, "%s", i == 0 ? "0 / 2*(N-1)/N*6DF/W" : i == 1 ? "(N-1)/N*6DF/W / 2*(N-1)/N*6DF/W"
                                                                    : "2*(N-1)/N*2BD/W, both");
        table_cell(t, "%.4g / %.4g", r->fwd_comm_s, r->bwd_comm_s);
        table_cell(t, "s");
        snprintf(what, sizeof what, "%s largest degree, forward", par[i].name);
        if (isinf(r->max_n_fwd)) {
            table_row(t);
            table_cell(t, "%s", what);
            table_cell(t, "%s", par[i].fwd_bound);
            table_cell(t, "any");
            table_cell(t, "devices");
        } else {
            row(t, what, par[i].fwd_bound, "devices", "%.2f", r->max_n_fwd);
        }
        snprintf(what, sizeof what, "%s largest degree, backward", par[i].name);
        row(t, what, par[i].bwd_bound, "devices", "%.2f", r->max_n_bwd);
    }
    const acct_2d_t r = acct_fsdp_tp(f, x, y);
    char what[96];
    snprintf(what, sizeof what, "FSDP %d x TP %d forward FLOPs per device", x, y);
    row(t, what, "6*B*D*F / (N_FSDP*N_TP)", "FLOPs", "%.4g", r.fwd_flops);
    row(t, "  its compute", "FLOPs / C", "s", "%.4g", r.fwd_compute_s);
    row(t, "  FSDP all-gather of the TP shards", "(N_FSDP-1)/N_FSDP * 6*D*F/N_TP / W", "s", "%.4g", r.fsdp_comm_s);
    row(t, "  TP all-reduce of y", "2*(N_TP-1)/N_TP * 2*B*D/N_FSDP / W", "s", "%.4g", r.tp_comm_s);
    row(t, "  communication, axes overlapped", "max of the two", "s", "%.4g", r.overlap_comm_s);
    row(t, "  communication, axes serialized", "sum of the two", "s", "%.4g", r.serial_comm_s);
    row(t, "largest N, axes overlapped", "(1 + B*W/C) * (1 + 3*F*W/(2*C))", "devices", "%.1f", r.max_n_overlap);
    row(t, "  large-N form", "3*B*F*W^2 / (2*C^2)", "devices", "%.1f", r.max_n_overlap_large);
    row(t, "largest N, axes serialized", "(3BFW/C + 3F + 2B)^2 / (24*B*F)", "devices", "%.1f", r.max_n_serial);
    row(t, "  at N_FSDP", "(3BFW/C + 3F + 2B) / (6F), >= 1", "devices", "%.2f", r.serial_best_fsdp);
    row(t, "  at N_TP", "(3BFW/C + 3F + 2B) / (4B), >= 1", "devices", "%.2f", r.serial_best_tp);
    row(t, "  large-N form", "3*B*F*W^2 / (8*C^2)", "devices", "%.1f", r.max_n_serial_large);
    table_print_md(t, stdout);
    table_free(t);
}

int main(int argc, char** argv) {
    int d_model = 0, d_ff = 0, num_blocks = 0, batch = 0, context = 0, mx = 0, my = 0, x = 0, y = 0;
    int handout = 0, n = 0, lm_batch = 0, lm_context = 0, lm_ranks = 0, head_chunk = 0;
    const char* lm = "";
    double device_gb = 0, budget_gb = 0, flops = 0, w_ici = 0, tokens_8 = 0, egress = 0;
    cli_opt_t opts[] = {
        {"d-model", CLI_INT, &d_model, "16384", "D, the model width (handout's XXL)", NULL},
        {"d-ff", CLI_INT, &d_ff, "53248", "F, the feed-forward width", NULL},
        {"num-blocks", CLI_INT, &num_blocks, "126", "L, blocks of two linear layers", NULL},
        {"batch", CLI_INT, &batch, "4", "sequences whose activations one device saves (a, b)", NULL},
        {"context", CLI_INT, &context, "512", "tokens per sequence (a, b)", NULL},
        {"device-gb", CLI_DOUBLE, &device_gb, "80", "memory of the GPU counted in (a), GB = 1e9 bytes", NULL},
        {"budget-gb", CLI_DOUBLE, &budget_gb, "95", "per-device memory budget of (b), GB (TPU v5p: 95)", NULL},
        {"flops", CLI_DOUBLE, &flops, "4.6e14", "C, peak FLOP/s per chip (TPU v5p, bf16)", NULL},
        {"w-ici", CLI_DOUBLE, &w_ici, "1.8e11", "W_ici, bidirectional bytes/s per mesh axis (2 x 9e10)", NULL},
        {"mx", CLI_INT, &mx, "2", "M_X, mesh axes the FSDP collectives use", NULL},
        {"my", CLI_INT, &my, "1", "M_Y, mesh axes the TP collectives use", NULL},
        {"x", CLI_INT, &x, "16", "X, FSDP degree", NULL},
        {"y", CLI_INT, &y, "4", "Y, TP degree (also N_TP of the --handout-2026 grid; X is N_FSDP)", NULL},
        {"handout-2026", CLI_FLAG, &handout, "0", "print the 2026 handout's §8 answers instead (one FFN layer)", NULL},
        {"tokens", CLI_DOUBLE, &tokens_8, "1048576", "B, rows of the global batch (--handout-2026)", NULL},
        {"egress", CLI_DOUBLE, &egress, "9e10", "W, bytes/s one device sends (--handout-2026; one v5p ICI axis, one way)",
         NULL},
        {"n", CLI_INT, &n, "8", "N, degree of the DP, FSDP and TP rows (--handout-2026)", NULL},
        {"lm", CLI_STR, &lm, "", "print instead one training step's memory of this Transformer LM size (" MODEL_SIZE_CHOICES "), bf16 ZeRO-3", NULL},
        {"lm-batch", CLI_INT, &lm_batch, "2", "sequences in the global batch (--lm)", NULL},
        {"lm-context", CLI_INT, &lm_context, "32768", "tokens per sequence (--lm)", NULL},
        {"ranks", CLI_INT, &lm_ranks, "2", "ranks the batch and the state split over (--lm)", NULL},
        {"head-chunk", CLI_INT, &head_chunk, "4096", "rows of the chunked LM head (--lm)", NULL},
    };
    cli_parse(argc, argv,
              "Handout §2.4 communication_accounting: memory, FSDP degree and compute-bound batch of an\n"
              "FFN-only model (fp32 weights, gradients, AdamW; bf16 activations and collectives).\n"
              "--handout-2026: the 2026 handout's §8 cost calculations for one FFN layer instead.",
              opts, CLI_COUNT(opts));

    char err[256];
    const acct_model_t model = {d_model, d_ff, num_blocks};
    const acct_mesh_t mesh = {flops, w_ici, mx, my, x, y};
    if (acct_model_check(&model, err, sizeof err) != 0) fail("%s", err);
    if (acct_mesh_check(&mesh, err, sizeof err) != 0) fail("%s", err);
    if (batch < 1 || batch > MAX_TOKENS_SIDE) fail("--batch must be between 1 and %d (got %d)", MAX_TOKENS_SIDE, batch);
    if (context < 1 || context > MAX_TOKENS_SIDE)
        fail("--context must be between 1 and %d (got %d)", MAX_TOKENS_SIDE, context);
    if (!(device_gb > 0)) fail("--device-gb must be a positive number of GB (got %g)", device_gb);
    if (!(budget_gb > 0)) fail("--budget-gb must be a positive number of GB (got %g)", budget_gb);
    if (*lm) {
        if (lm_batch < 1 || lm_batch > MAX_TOKENS_SIDE) fail("--lm-batch must be between 1 and %d (got %d)", MAX_TOKENS_SIDE, lm_batch);
        if (lm_context < 1 || lm_context > MAX_TOKENS_SIDE)
            fail("--lm-context must be between 1 and %d (got %d)", MAX_TOKENS_SIDE, lm_context);
        if (lm_ranks < 1 || lm_ranks > MAX_DEGREE) fail("--ranks must be between 1 and %d (got %d)", MAX_DEGREE, lm_ranks);
        if (head_chunk < 1) fail("--head-chunk must be >= 1 rows (got %d)", head_chunk);
        lm_step(lm, lm_batch, lm_context, lm_ranks, head_chunk);
        return 0;
    }
    if (handout) {
        const acct_ffn_t ffn = {d_model, d_ff, tokens_8, flops, egress};
        if (acct_ffn_check(&ffn, err, sizeof err) != 0) fail("%s", err);
        if (n < 1 || n > MAX_DEGREE) fail("--n must be between 1 and %d devices (got %d)", MAX_DEGREE, n);
        handout_2026(&ffn, n, x, y);
        return 0;
    }

    const double tokens = (double)batch * (double)context;
    const double device_bytes = device_gb * ACCT_GB, budget_bytes = budget_gb * ACCT_GB;
    const acct_memory_t mem = acct_memory(&model);
    const double act = acct_activation_bytes(&model, tokens);
    char title[256], f[160], u[64];

    // ---- (a) one device
    snprintf(title, sizeof title,
             "(a) one device: D %d, F %d, L %d; activations of %d x %d = %.0f tokens; GB = 1e9 bytes", d_model,
             d_ff, num_blocks, batch, context, tokens);
    table_t* ta = table_new(title, 4, HDR);
    row(ta, "parameters P", "2*L*D*F", "parameters", "%.0f", mem.params);
    row(ta, "master weights (fp32)", "4*P", "GB", "%.3f", mem.master_weight_bytes / ACCT_GB);
    row(ta, "accumulated gradients (fp32)", "4*P", "GB", "%.3f", mem.grad_bytes / ACCT_GB);
    row(ta, "AdamW moments m, v (fp32)", "8*P", "GB", "%.3f", mem.optimizer_bytes / ACCT_GB);
    row(ta, "weights + gradients + optimizer", "16*P", "GB", "%.3f", mem.state_bytes / ACCT_GB);
    row(ta, "saved for backward, per token (bf16)", "2*L*(D+F)", "MB/token", "%.6f",
        mem.activation_bytes_per_token / 1e6);
    snprintf(f, sizeof f, "2*L*(D+F)*%.0f", tokens);
    row(ta, "saved for backward, this batch", f, "GB", "%.3f", act / ACCT_GB);
    row(ta, "total", "16*P + activations", "GB", "%.3f", (mem.state_bytes + act) / ACCT_GB);
    snprintf(f, sizeof f, "16*P / %g GB", device_gb);
    snprintf(u, sizeof u, "%g GB GPUs", device_gb);
    row(ta, "GPUs' worth: state only", f, u, "%.3f", acct_devices_needed(mem.state_bytes, device_bytes));
    row_count(ta, "GPUs' worth: state only, whole", "ceil of the row above", u,
              acct_devices_whole(mem.state_bytes, device_bytes));
    snprintf(f, sizeof f, "(16*P + activations) / %g GB", device_gb);
    row(ta, "GPUs' worth: state + activations", f, u, "%.3f",
        acct_devices_needed(mem.state_bytes + act, device_bytes));
    row_count(ta, "GPUs' worth: state + activations, whole", "ceil of the row above", u,
              acct_devices_whole(mem.state_bytes + act, device_bytes));
    table_print_md(ta, stdout);
    printf("\n");
    table_free(ta);

    // ---- (b) FSDP over N devices: state and half the activations sharded
    snprintf(title, sizeof title, "(b) FSDP: M(N) = (16*P + A/2)/N + A/2 per device, A for %.0f tokens, budget %g GB",
             tokens, budget_gb);
    table_t* tb = table_new(title, 4, HDR);
    row(tb, "A/2, activations kept whole on every device", "L*(D+F)*tokens", "GB", "%.3f", 0.5 * act / ACCT_GB);
    const int64_t n_min = acct_fsdp_min_degree(mem.state_bytes, act, budget_bytes);
    snprintf(f, sizeof f, "smallest N with M(N) < %g GB", budget_gb);
    row_count(tb, "N_FSDP needed", f, "devices", n_min);
    if (n_min > 0) {
        snprintf(f, sizeof f, "M(%lld)", (long long)n_min);
        row(tb, "per-device memory at N_FSDP", f, "GB", "%.3f",
            acct_fsdp_bytes_per_device(mem.state_bytes, act, n_min) / ACCT_GB);
        if (n_min > 1) {
            snprintf(f, sizeof f, "M(%lld)", (long long)(n_min - 1));
            row(tb, "per-device memory at N_FSDP - 1", f, "GB", "%.3f",
                acct_fsdp_bytes_per_device(mem.state_bytes, act, n_min - 1) / ACCT_GB);
        }
    }
    snprintf(f, sizeof f, "smallest N with 16*P/N < %g GB", budget_gb);
    row_count(tb, "N_FSDP needed, activations negligible", f, "devices",
              acct_fsdp_min_degree(mem.state_bytes, 0.0, budget_bytes));
    table_print_md(tb, stdout);
    printf("\n");
    table_free(tb);

    // ---- (c) forward pass, FSDP (X) × TP (Y)
    const acct_bound_t bound = acct_compute_bound(&model, &mesh);
    const int64_t n_chips = (int64_t)x * y;
    snprintf(title, sizeof title,
             "(c) forward pass, FSDP X = %d x TP Y = %d = %lld chips, M_X = %d, M_Y = %d, C = %g FLOP/s, "
             "W_ici = %g B/s", x, y, (long long)n_chips, mx, my, flops, w_ici);
    table_t* tc = table_new(title, 4, HDR);
    row(tc, "alpha, ICI arithmetic intensity", "C / W_ici", "FLOPs/byte", "%.2f", bound.alpha);
    snprintf(f, sizeof f, "F = %d > alpha*Y/M_Y = %.1f", d_ff, bound.alpha * y / my);
    table_row(tc);
    table_cell(tc, "TP collectives hide at any batch");
    table_cell(tc, "%s", f);
    table_cell(tc, "%s", bound.tp_ok ? "yes" : "no");
    table_cell(tc, "%s", "");
    row(tc, "largest TP degree that hides", "M_Y*F / alpha", "chips", "%.2f", bound.tp_max_degree);
    if (bound.tp_ok) {
        const int64_t b_whole = acct_smallest_above(bound.min_tokens_per_device);
        row(tc, "per-device batch threshold B/N", "alpha / (Y*M_X)", "tokens", "%.2f", bound.min_tokens_per_device);
        row_count(tc, "per-device batch, smallest whole", "above the threshold", "tokens", b_whole);
        row(tc, "overall batch threshold B", "N*alpha / (Y*M_X)", "tokens", "%.1f", bound.min_tokens_total);
        row_count(tc, "overall batch, smallest whole", "above the threshold", "tokens",
                  acct_smallest_above(bound.min_tokens_total));
        row_count(tc, "overall batch at the whole per-device batch", "N x the row two above", "tokens",
                  b_whole * n_chips);
        const acct_layer_times_t t = acct_layer_times(&model, &mesh, bound.min_tokens_total);
        row(tc, "T_math per block at the threshold", "4*B*D*F / (N*C)", "ms", "%.4f", 1e3 * t.math_s);
        row(tc, "T_FSDP per block", "4*D*F / (Y*W_ici*M_X)", "ms", "%.4f", 1e3 * t.fsdp_s);
        row(tc, "T_TP per block at the threshold", "4*B*D / (X*W_ici*M_Y)", "ms", "%.4f", 1e3 * t.tp_s);
        row(tc, "X_opt for that batch on N chips", "sqrt(B/F * M_X/M_Y * N)", "chips", "%.2f",
            acct_x_opt(bound.min_tokens_total, d_ff, mx, my, n_chips));
    } else {
        table_row(tc);
        table_cell(tc, "per-device batch threshold B/N");
        table_cell(tc, "T_TP >= T_math at every batch");
        table_cell(tc, "none");
        table_cell(tc, "tokens");
    }
    if (isfinite(bound.min_tokens_per_device_serial)) {
        row(tc, "B/N if X and Y collectives serialize", "F/(Y*M_X) / (F/alpha - Y/M_Y)", "tokens", "%.2f",
            bound.min_tokens_per_device_serial);
        row(tc, "B if X and Y collectives serialize", "N x the row above", "tokens", "%.1f",
            (double)n_chips * bound.min_tokens_per_device_serial);
    }
    row(tc, "B/N floor with the best X*Y split of N", "alpha^2 / (M_X*M_Y*F)", "tokens", "%.2f",
        bound.min_tokens_per_device_best_split);
    table_print_md(tc, stdout);
    printf("\n");
    table_free(tc);

    // One-sentence answers, from the same numbers as the tables.
    printf("answers:\n");
    printf("(a) %.1f GB of fp32 weights, gradients and AdamW state (%lld x %g GB GPUs), plus %.2f MB of bf16 "
           "activations per token (%.1f GB for %.0f tokens; %lld GPUs in all).\n",
           mem.state_bytes / ACCT_GB, (long long)acct_devices_whole(mem.state_bytes, device_bytes), device_gb,
           mem.activation_bytes_per_token / 1e6, act / ACCT_GB, tokens,
           (long long)acct_devices_whole(mem.state_bytes + act, device_bytes));
    if (n_min > 0)
        printf("(b) (16P + A/2)/N + A/2 < %g GB needs N_FSDP >= %lld.\n", budget_gb, (long long)n_min);
    else
        printf("(b) no N_FSDP fits: the unsharded half of the activations alone is %.1f GB.\n", 0.5 * act / ACCT_GB);
    if (bound.tp_ok)
        printf("(c) compute-bound above %.2f tokens per device (%lld whole), an overall batch above %.1f tokens "
               "(%lld = %lld x %lld).\n",
               bound.min_tokens_per_device, (long long)acct_smallest_above(bound.min_tokens_per_device),
               bound.min_tokens_total, (long long)(acct_smallest_above(bound.min_tokens_per_device) * n_chips),
               (long long)n_chips, (long long)acct_smallest_above(bound.min_tokens_per_device));
    else
        printf("(c) never compute-bound: Y = %d exceeds M_Y*F/alpha = %.2f, so the TP collectives outlast the "
               "math at every batch.\n", y, bound.tp_max_degree);
    return 0;
}
