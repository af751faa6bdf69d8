// The roofline: the FLOP and byte count of every kernel entry against values derived
// by hand for a small shape, the bound, and the program (its refusals everywhere, a short run
// on the GPU).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/harness.h"
#include "04_flashattn_bwd/roofline.h"

// B 2, T 8, C 16, NH 2 (HS 8), F 32, V 50; weighted sum 10 x 6; attention BH 2, N 8, d 16, causal.
static const rl_shapes_t SMALL = {2, 8, 16, 2, 32, 50, 10, 6, 2, 8, 16, 1};

static const rl_entry_t* find(const rl_entry_t* e, int n, const char* name) {
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0) return &e[i];
    return NULL;
}

// The expected numbers are written out as numbers (N = B·T = 16 rows), each with its sum, so a
// slip in roofline.c's formulas cannot cancel out here.
Test(roofline, counts_by_hand) {
    rl_entry_t e[RL_MAX_ENTRIES];
    const int n = rl_entries(&SMALL, e, RL_MAX_ENTRIES);
    struct { const char* name; double flops, bytes; } want[] = {
        // GEMM: 2MNK; (MK + KN + MN)·size. qkv: M 16, N 48, K 16, bf16.
        {"gemm_qkv_bf16", 2.0 * 16 * 48 * 16, (256 + 768 + 768) * 2.0},
        {"gemm_attn_out_bf16", 2.0 * 16 * 16 * 16, (256 + 256 + 256) * 2.0},
        {"gemm_w13_bf16", 2.0 * 16 * 64 * 16, (256 + 1024 + 1024) * 2.0},
        {"gemm_w2_bf16", 2.0 * 16 * 16 * 32, (512 + 512 + 256) * 2.0},
        {"gemm_lm_head_f32", 25600, (256 + 800 + 800) * 4.0},
        // rmsnorm fwd: 4·N·C; x f32 1024 + w 64 + y bf16 512 + rstd 64.
        {"rmsnorm_fwd", 1024, 1664},
        // rmsnorm bwd: 10·N·C; dy 512 + x 1024 + w 64 + rstd 64 + dres 1024 + 1024 + dres_lp 512 + dw 64.
        {"rmsnorm_bwd", 2560, 4288},
        // rope: q and k are 2·16·16 = 512 elements, 3 FLOPs each; read + write bf16 2048, tables 2·8·4·4 = 256.
        {"rope", 1536, 2304},
        // swiglu: N·F = 512; fwd 4 FLOPs, h13 + g = 3·512 bf16; bwd 11 FLOPs, h13 + dg + dh13 = 5·512 bf16.
        {"swiglu_fwd", 2048, 3072},
        {"swiglu_bwd", 5632, 5120},
        // softmax: BH = B·NH = 4 rows of heads, T 8: 4·(1+...+8) = 144 visible, 256 in all.
        // fwd 5·144; read 144, write 256 (bf16). bwd 4·144; read 2·144, write 256.
        {"softmax_fwd", 720, 800},
        {"softmax_bwd", 576, 1088},
        // cross-entropy: N·V = 800 logits. fwd 4·800; logits 1600 + targets 64 + lse, losses 128 + loss 4.
        // bwd 3·800; logits read + written 3200, targets and lse 128.
        {"xent_fwd", 3200, 1796},
        {"xent_bwd", 2400, 3328},
        // embedding: tokens 64; fwd rows 1024 + x 1024; bwd dx 1024 + dE rows read and written 2048.
        {"embed_fwd", 0, 2112},
        {"embed_bwd", 256, 3136},
        // AdamW over one layer: 4·16² + 3·16·32 + 2·16 = 2592 elements, 14 FLOPs and 30 bytes each.
        {"adamw", 36288, 77760},
        // weighted sum 10 x 6: fwd 2·60; (60 + 6 + 10)·4. bwd 3·60; (60 + 6 + 10 + 60 + 6)·2.
        {"ws_fwd_f32", 120, 304},
        {"ws_bwd_bf16", 180, 284},
        // flash: one causal 8x8x16 product per head = 2·64·16 / 2 = 1024, times BH 2 = 2048;
        // fwd 2 products, q k v o = 4·256 elements + lse 2·8·4; bwd 5 products, 8·256 + lse.
        {"flash_fwd_bf16", 4096, 4 * 256 * 2 + 64},
        {"flash_bwd_f32", 10240, 8 * 256 * 4 + 64},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const rl_entry_t* x = find(e, n, want[i].name);
        cr_assert(x, "no entry %s", want[i].name);
        cr_expect_eq(x->flops, want[i].flops, "%s: FLOPs %.0f, want %.0f", x->name, x->flops, want[i].flops);
        cr_expect_eq(x->bytes, want[i].bytes, "%s: bytes %.0f, want %.0f", x->name, x->bytes, want[i].bytes);
    }
    // Non-causal attention does the whole product: twice the causal FLOPs, the same bytes.
    rl_entry_t f = *find(e, n, "flash_fwd_bf16");
    f.dim[3] = 0;
    cr_assert_eq(rl_count(&f), 0);
    cr_expect_eq(f.flops, 8192);
    cr_expect_eq(f.bytes, 2112);
}

Test(roofline, list_names_and_roofs) {
    rl_entry_t e[RL_MAX_ENTRIES];
    const int n = rl_entries(&SMALL, e, RL_MAX_ENTRIES);
    cr_assert_eq(n, 30, "30 kernels (10 GEMMs, 12 model kernels, 4 weighted sums, 4 flash), got %d", n);
    for (int i = 0; i < n; i++) {
        cr_expect(e[i].shape[0], "%s has a shape", e[i].name);
        for (int j = 0; j < i; j++) cr_expect(strcmp(e[i].name, e[j].name) != 0, "%s twice", e[i].name);
    }
    // Tensor cores only for bf16 matmuls; elementwise bf16 kernels compute in fp32.
    cr_expect_eq(find(e, n, "gemm_w2_bf16")->roof, RL_ROOF_BF16);
    cr_expect_eq(find(e, n, "flash_bwd_bf16")->roof, RL_ROOF_BF16);
    cr_expect_eq(find(e, n, "gemm_w2_f32")->roof, RL_ROOF_F32);
    cr_expect_eq(find(e, n, "flash_fwd_f32")->roof, RL_ROOF_F32);
    cr_expect_eq(find(e, n, "ws_fwd_bf16")->roof, RL_ROOF_F32);
    cr_expect_eq(find(e, n, "swiglu_fwd")->roof, RL_ROOF_F32);
    // A short list is cut, not overrun.
    cr_expect_eq(rl_entries(&SMALL, e, 3), 3);
    char names[2048];
    rl_names(e, 2, names, sizeof names);
    cr_expect_str_eq(names, "gemm_qkv_bf16|gemm_attn_out_bf16");
    // The GEMM helpers are the entry's formulas.
    cr_expect_eq(rl_gemm_flops(2, 3, 4), 48);
    cr_expect_eq(rl_gemm_bytes(2, 3, 4, DT_F32), (8 + 12 + 6) * 4.0);
}

Test(roofline, bound) {
    // Peak 100 FLOP/s, 10 B/s: the ridge is at 10 FLOP/B.
    cr_expect_eq(rl_roof_flops(100, 10, 2), 20);    // memory-bound: I·W
    cr_expect_eq(rl_roof_flops(100, 10, 50), 100);  // compute-bound: the peak
    cr_expect_eq(rl_roof_flops(100, 10, 10), 100);  // at the ridge both agree
    cr_expect_eq(rl_intensity(10, 4), 2.5);
    cr_expect_eq(rl_intensity(10, 0), 0);
    cr_expect_eq(rl_bound_time_s(1000, 100, 100, 10), 10);   // both 10 s
    cr_expect_eq(rl_bound_time_s(1000, 1000, 100, 10), 100); // bytes dominate
    cr_expect_eq(rl_bound_time_s(5000, 10, 100, 10), 50);    // FLOPs dominate
    // % of bound = achieved / roof: 1000 FLOP over 1000 B (I = 1, roof 10 FLOP/s) in 200 s is
    // 5 FLOP/s, 50 %.
    cr_expect_eq(rl_percent_of_bound(1000, 1000, 200, 100, 10), 50);
    cr_expect_eq(rl_percent_of_bound(1000, 1000, 100, 100, 10), 100);
    // No arithmetic: the bandwidth alone (100 B at 10 B/s in 20 s: 50 %).
    cr_expect_eq(rl_percent_of_bound(0, 100, 20, 100, 10), 50);
    cr_expect_eq(rl_percent_of_bound(1, 1, 0, 100, 10), 0);  // no time: no claim
    cr_expect_str_eq(rl_roof_name(RL_ROOF_BF16), "bf16-tc");
    cr_expect_str_eq(rl_roof_name(RL_ROOF_F32), "fp32");
}

// ---- the program

static char out[1 << 16];

static int prog(const char* args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/04_flashattn_bwd/roofline %s", build_dir(), args);
    return run_capture(cmd, out, sizeof out);
}

static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

Test(roofline_cli, help_lists_kernels_and_flags) {
    cr_assert_eq(prog("--help"), 0, "%s", out);
    cr_assert(strstr(out, "--only") && strstr(out, "--iters") && strstr(out, "--out"), "%s", out);
    cr_assert(strstr(out, "gemm_qkv_bf16") && strstr(out, "flash_bwd_f32") && strstr(out, "adamw"), "%s", out);
}

// Bad flags are refused on any machine, before the GPU is asked for: one line, exit 2.
Test(roofline_cli, refuses_bad_flags) {
    const char* bad[][2] = {
        {"--bogus", "--bogus"},
        {"--only gemm_w2", "'gemm_w2' is not one of"},
        {"--only rope,,adamw", "--only"},
        {"--iters 1", "--iters"},
        {"--attn-d 48", "head dim 48"},
        {"--model huge", "--model"},
        {"--out /proc/roofline", "--out /proc/roofline"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(prog(bad[i][0]), 2, "%s: %s", bad[i][0], out);
        cr_assert(strstr(out, bad[i][1]), "%s: the reason names '%s': %s", bad[i][0], bad[i][1], out);
        cr_assert_eq(count_lines(out), 1, "%s: one line: %s", bad[i][0], out);
    }
}

Test(roofline_cli, without_gpu_one_line_exit_2) {
    if (gpu_count() > 0) cr_skip_test("a GPU is present: this checks the message without one");
    cr_assert_eq(prog("--only rope"), 2, "%s", out);
    cr_assert(strstr(out, "needs a CUDA GPU") && count_lines(out) == 1, "%s", out);
}

// A short list on the GPU: every row in the CSV, and no kernel far above its roof (the roofs
// are measured, so a few % above 100 is possible; 110 % would be a counting error). The compute
// roof is the best of three square GEMMs: one 4096^3 or 8192^3 fp32 GEMM alone measured 26-31
// TFLOP/s on an H200, under the 40-42 a model-sized GEMM reached (128-159 % "of bound").
Test(roofline_gpu, short_list_rows_and_bounds, .timeout = 300) {
    SKIP_WITHOUT_GPU();
    const char* names[] = {"gemm_attn_out_bf16", "gemm_attn_out_f32", "rmsnorm_fwd", "embed_fwd", "adamw",
                           "ws_fwd_f32", "flash_fwd_bf16"};
    const int nn = (int)(sizeof names / sizeof names[0]);
    char list[512] = "", args[1024], path[1024];
    for (int i = 0; i < nn; i++) strcat(strcat(list, i ? "," : ""), names[i]);
    snprintf(args, sizeof args,
             "--only %s --iters 5 --warmup 1 --peak-n 8192 --bw-bytes 256M --attn-N 1024 --ws-rows 64K --out %s/rl",
             list, test_tmpdir());
    cr_assert_eq(prog(args), 0, "%s", out);
    snprintf(path, sizeof path, "%s/rl/roofline.csv", test_tmpdir());
    FILE* f = fopen(path, "r");
    cr_assert(f, "%s not written: %s", path, out);
    char line[2048];
    int rows = 0, seen[16] = {0};
    cr_assert(fgets(line, sizeof line, f) && strstr(line, "% of bound"), "header: %s", line);
    while (fgets(line, sizeof line, f)) {
        rows++;
        const char* last = strrchr(line, ',');
        cr_assert(last, "a CSV row: %s", line);
        const double pct = atof(last + 1);
        cr_expect(pct > 0 && pct <= 110.0, "%% of bound %.1f out of (0, 110]: %s", pct, line);
        for (int i = 0; i < nn; i++)
            if (strncmp(line, names[i], strlen(names[i])) == 0 && line[strlen(names[i])] == ',') seen[i]++;
    }
    fclose(f);
    cr_expect_eq(rows, nn, "%d rows, want %d: %s", rows, nn, out);
    for (int i = 0; i < nn; i++) cr_expect_eq(seen[i], 1, "row %s once", names[i]);
    // The report and the plot's script (the PNG needs gnuplot, which GPU machines may lack).
    const char* more[] = {"roofline.md", "roofline.gp"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/rl/%s", test_tmpdir(), more[i]);
        f = fopen(path, "r");
        cr_expect(f, "%s written", path);
        if (f) fclose(f);
    }
}
