// Stage 04's dispatch, on the CPU: flash_bwd_choose (the one function flash_backward_cuda and
// every printed kernel name go through) against the table as flash_bwd.h describes it, for every
// dtype x head dim x alignment x view x build (sm_90a code or not), and every fallback.
#include "04_flashattn_bwd/test_bwd_util.h"

// bf16 (or dt), head dim d, 16-byte aligned fake pointers, contiguous strides: the tensor cores
// take it exactly when dt is bf16 and d is one of theirs.
static attn_args_t plan_args(dtype_t dt, int d) {
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 1; a.H = 2; a.Nq = a.Nk = 256; a.d = d; a.dtype = dt; a.causal = 1; a.scale = 0.125f;
    int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], a.H, a.Nq, d);
    a.q = (void*)0x10000; a.k = (void*)0x20000; a.v = (void*)0x30000; a.o = (void*)0x40000;
    a.dout = (void*)0x50000; a.dq = (void*)0x60000; a.dk = (void*)0x70000; a.dv = (void*)0x80000;
    a.lse = (float*)0x90000;
    return a;
}

static const char* choose(const attn_args_t* a, int sm90a) {
    const flash_bwd_build_t b = {sm90a};
    return flash_bwd_choose(a, &b)->name;
}

// The table's order and contents: names, files, pass counts, and a launch for every row.
Test(bwd_api, table_rows_in_order) {
    int n = 0;
    const flash_bwd_row_t* rows = flash_bwd_rows(&n);
    const char* names[5] = {"fa3", "wgmma", "mma", "mma_two_pass", "simt"};
    const char* files[5] = {"flash_bwd_tma.cu", "flash_bwd_wgmma.cu", "flash_bwd_mma.cu", "flash_bwd_mma_two_pass.cu",
                            "flash_bwd_simt.cu"};
    const int single[5] = {1, 1, 1, 0, 0};
    cr_assert_eq(n, 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_str_eq(rows[i].name, names[i], "row %d", i);
        cr_assert_str_eq(rows[i].file, files[i], "row %d", i);
        cr_assert_eq(rows[i].single_pass, single[i], "row %s", names[i]);
        cr_assert(rows[i].applies && rows[i].launch, "row %s", names[i]);
    }
}

// Every dtype x head dim x build, written out from flash_bwd.h's table independently of
// flash_bwd_dispatch.c's code; the choice is the first row whose condition holds.
Test(bwd_api, choice_follows_the_table) {
    const int dims[] = {16, 32, 40, 48, 64, 96, 128};
    for (int di = 0; di < 7; di++)
        for (int sm90a = 0; sm90a <= 1; sm90a++) {
            const int d = dims[di];
            const attn_args_t a = plan_args(DT_BF16, d);
            const char* want;
            if (d != 16 && d != 32 && d != 64 && d != 128) want = "simt";
            else if (sm90a && d == 64) want = "fa3";
            else if (sm90a && d == 128) want = "wgmma";
            else if (d <= 64) want = "mma";
            else want = "mma_two_pass";
            cr_assert_str_eq(choose(&a, sm90a), want, "bf16 d %d sm90a %d", d, sm90a);
            const attn_args_t f = plan_args(DT_F32, d);
            cr_assert_str_eq(choose(&f, sm90a), "simt", "fp32 d %d sm90a %d", d, sm90a);
        }
}

// The first row that applies wins: each row's own condition, and that an earlier row applying
// hides a later one.
Test(bwd_api, each_row_condition) {
    int n = 0;
    const flash_bwd_row_t* rows = flash_bwd_rows(&n);
    const flash_bwd_build_t hopper = {1}, other = {0};
    const attn_args_t a64 = plan_args(DT_BF16, 64), a128 = plan_args(DT_BF16, 128), a32 = plan_args(DT_BF16, 32);
    // fa3: d 64, sm_90a only
    cr_assert(rows[0].applies(&a64, &hopper) && !rows[0].applies(&a64, &other));
    cr_assert(!rows[0].applies(&a128, &hopper) && !rows[0].applies(&a32, &hopper));
    // wgmma: d 64 and 128, sm_90a only
    cr_assert(rows[1].applies(&a64, &hopper) && rows[1].applies(&a128, &hopper));
    cr_assert(!rows[1].applies(&a128, &other) && !rows[1].applies(&a32, &hopper));
    // mma: d <= 64 in any build; mma_two_pass: d 128 in any build
    cr_assert(rows[2].applies(&a32, &other) && rows[2].applies(&a64, &hopper) && !rows[2].applies(&a128, &hopper));
    cr_assert(rows[3].applies(&a128, &other) && rows[3].applies(&a128, &hopper) && !rows[3].applies(&a64, &other));
    // simt: everything
    const attn_args_t f = plan_args(DT_F32, 40);
    cr_assert(rows[4].applies(&f, &other) && rows[4].applies(&a64, &hopper));
}

// The SIMT row takes what the tensor cores cannot, in every build.
Test(bwd_api, simt_where_the_tensor_cores_cannot) {
    for (int sm90a = 0; sm90a <= 1; sm90a++) {
        attn_args_t a = plan_args(DT_F32, 64);
        cr_assert_str_eq(choose(&a, sm90a), "simt");
        a = plan_args(DT_BF16, 48);  // a head dim without tensor-core kernels
        cr_assert_str_eq(choose(&a, sm90a), "simt");
        a = plan_args(DT_BF16, 64);
        a.sk[2] = 68;  // a row stride that is not a multiple of 8 elements
        cr_assert(!flash_bwd_mma_ok(&a));
        cr_assert_str_eq(choose(&a, sm90a), "simt");
        a = plan_args(DT_BF16, 64);
        a.dv = (char*)a.dv + 8;  // a base pointer not 16-byte aligned
        cr_assert_str_eq(choose(&a, sm90a), "simt");
        attn_args_t u128 = plan_args(DT_BF16, 128);
        u128.sq[2] = 132;
        cr_assert_str_eq(choose(&u128, sm90a), "simt");
        attn_args_t u64 = plan_args(DT_BF16, 64);
        u64.sdo[2] = 68;
        cr_assert_str_eq(choose(&u64, sm90a), "simt");
    }
}

// fa3's fallback: a view no tensor map describes (a zero head stride with H > 1, on K, V, Q or
// dO) goes to wgmma in sm_90a builds; an axis of extent 1 never moves, so its stride does not
// matter, until it does.
Test(bwd_api, fa3_falls_back_where_tma_cannot_describe_a_view) {
    const attn_args_t a64 = plan_args(DT_BF16, 64);
    cr_assert(flash_bwd_tma_ok(&a64));
    const char* which[4] = {"k", "v", "q", "dout"};
    for (int x = 0; x < 4; x++) {
        attn_args_t b = plan_args(DT_BF16, 64);
        int64_t* s = x == 0 ? b.sk : x == 1 ? b.sv : x == 2 ? b.sq : b.sdo;
        s[1] = 0;
        cr_assert(flash_bwd_mma_ok(&b), "%s: the mma kernels still take it", which[x]);
        cr_assert(!flash_bwd_tma_ok(&b), "%s: head stride 0 with H = 2", which[x]);
        cr_assert_str_eq(choose(&b, 1), "wgmma", "%s", which[x]);
        cr_assert_str_eq(choose(&b, 0), "mma", "%s", which[x]);
    }
    attn_args_t c = plan_args(DT_BF16, 64);
    c.sk[0] = c.sv[0] = 0;  // B = 1: batch stride 0 is fine
    cr_assert(flash_bwd_tma_ok(&c));
    cr_assert_str_eq(choose(&c, 1), "fa3");
    c.B = 2;  // now the batch moves: stride 0 is a broadcast TMA cannot express
    cr_assert(!flash_bwd_tma_ok(&c));
    cr_assert_str_eq(choose(&c, 1), "wgmma");
    // Strided views as the model hands them over, (B, N, H, d + 8): TMA describes them.
    attn_args_t s = plan_args(DT_BF16, 64);
    int64_t* all[8] = {s.sq, s.sk, s.sv, s.so, s.sdo, s.sdq, s.sdk, s.sdv};
    for (int i = 0; i < 8; i++) all[i][0] = (int64_t)s.Nq * s.H * 72, all[i][1] = 72, all[i][2] = (int64_t)s.H * 72;
    cr_assert_str_eq(choose(&s, 1), "fa3");
}
