// Stage 03: bad input to the CUDA forward is refused with a clear reason, before any GPU work
// (these run without a GPU: flash_fwd_supports only inspects the arguments).
#include <string.h>
#include "03_flashattn_fwd/flash_fwd_internal.h"
#include "03_flashattn_fwd/test_util.h"

// A valid bf16 argument block with fake (never dereferenced) device pointers.
static attn_args_t valid_args(void) {
    attn_args_t a = {0};
    a.B = 2, a.H = 3, a.Nq = 100, a.Nk = 90, a.d = 64, a.dtype = DT_BF16, a.causal = 1, a.scale = 0.125f;
    a.q = (void*)0x10000, a.k = (void*)0x20000, a.v = (void*)0x30000, a.o = (void*)0x40000;
    a.lse = (float*)0x50000;
    attn_contiguous_strides(a.sq, a.H, a.Nq, a.d);
    attn_contiguous_strides(a.sk, a.H, a.Nk, a.d);
    attn_contiguous_strides(a.sv, a.H, a.Nk, a.d);
    attn_contiguous_strides(a.so, a.H, a.Nq, a.d);
    return a;
}

// Every case supports() refuses, the check before a call refuses too; pointer problems only
// the latter sees (supports() is asked before buffers exist).
static void expect_reject_call(const attn_args_t* a, const char* needle) {
    char err[256] = "";
    cr_assert_eq(flash_fwd_check_call(a, err, sizeof err), -1, "accepted an invalid call (wanted: %s)", needle);
    cr_assert(strstr(err, needle), "reason '%s' does not mention '%s'", err, needle);
}

static void expect_reject(const attn_args_t* a, const char* needle) {
    char err[256] = "";
    cr_assert_eq(flash_fwd_supports(a, err, sizeof err), -1, "accepted an invalid case (wanted: %s)", needle);
    cr_assert(strstr(err, needle), "reason '%s' does not mention '%s'", err, needle);
    expect_reject_call(a, needle);
}

Test(api, supports_needs_no_pointers) {
    attn_args_t a = valid_args();
    a.q = a.k = a.v = a.o = NULL;
    a.lse = NULL;
    char err[256] = "";
    cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "%s", err);
}

Test(api, accepts_valid) {
    attn_args_t a = valid_args();
    char err[256] = "";
    cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "%s", err);
    a.dtype = DT_F32;
    cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "%s", err);
    for (int d = 16; d <= 128; d *= 2) {
        a.d = d;
        cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "d %d: %s", d, err);
    }
}

Test(api, rejects_head_dim) {
    const int bad[] = {0, 8, 48, 80, 96, 256};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_args_t a = valid_args();
        a.d = bad[i];
        expect_reject(&a, "head dim");
    }
}

Test(api, rejects_dtype) {
    attn_args_t a = valid_args();
    a.dtype = DT_I32;
    expect_reject(&a, "dtype i32");  // names the dtype it got
    a.dtype = (dtype_t)99;
    expect_reject(&a, "dtype");
}

Test(api, rejects_sizes_pointers_scale) {
    attn_args_t a = valid_args();
    a.Nk = 0;
    expect_reject(&a, "sizes");
    a = valid_args(), a.B = -1;
    expect_reject(&a, "sizes");
    a = valid_args(), a.v = NULL;
    expect_reject_call(&a, "NULL");
    a = valid_args(), a.lse = NULL;
    expect_reject_call(&a, "NULL");
    a = valid_args(), a.scale = 0.0f;
    expect_reject(&a, "scale");
}

Test(api, rejects_misaligned_bf16) {
    attn_args_t a = valid_args();
    a.sk[2] = 68;  // rows not 16-byte aligned
    expect_reject(&a, "multiples of 8");
    a = valid_args(), a.q = (void*)0x10002;
    expect_reject_call(&a, "aligned");
    a = valid_args(), a.sq[0] = -64;
    expect_reject(&a, "non-negative");
    a = valid_args(), a.dtype = DT_F32, a.sk[2] = 65;  // fp32 takes any row stride
    char err[256];
    cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "%s", err);
}

// flash_forward_cuda refuses bad input as a user error: one line, exit status 2.
Test(api, forward_fails_cleanly, .exit_code = 2) {
    attn_args_t a = valid_args();
    a.d = 48;
    flash_forward_cuda(&a, 0);
}

// The bf16 tables hold exactly the kernels that ship: the mma.sync kernel at every head dim
// (entry 0, its Bq = 16*mt*w matching its name), and at d 64 and 128 the FlashAttention-3-layout
// kernel (a producer warpgroup and Bq / 64 consumer warpgroups, sm_90a and TMA); unsupported head
// dims have none.
Test(api, variant_tables) {
    const int dims[] = {16, 32, 64, 128};
    const char* entry0[] = {"w4 mt2 bk64", "w4 mt2 bk64", "w4 mt2 bk64", "w8 mt1 bk64"};
    const char* fa3[] = {NULL, NULL, "fa3 w16 bq192 bk128", "fa3 w12 bq128 bk128"};
    for (int i = 0; i < 4; i++) {
        const flash_variant_t* vl = NULL;
        const int n = flash_fwd_bf16_variants(dims[i], &vl);
        cr_assert_eq(n, fa3[i] ? 2 : 1, "head dim %d: %d variants", dims[i], n);
        cr_assert_str_eq(vl[0].name, entry0[i], "head dim %d", dims[i]);
        if (fa3[i]) cr_assert_str_eq(vl[1].name, fa3[i], "head dim %d", dims[i]);
        for (int v = 0; v < n; v++) {
            int w = 0, mt = 0, bk = 0, bq = 0;
            const char* s = vl[v].name;
            cr_assert_not_null(vl[v].launch);
            if (strncmp(s, "fa3 ", 4) == 0) {
                cr_assert_eq(sscanf(s + 4, "w%d bq%d bk%d", &w, &bq, &bk), 3, "bad variant name '%s'", vl[v].name);
                cr_assert_eq(vl[v].bq, bq, "%s: Bq %d", vl[v].name, vl[v].bq);
                cr_assert_eq(w, 4 * (1 + bq / 64), "%s: warps", vl[v].name);
                cr_assert(vl[v].wgmma && vl[v].tma && vl[v].dflt, "%s: sm_90a, TMA, the default", vl[v].name);
                continue;
            }
            cr_assert_eq(sscanf(s, "w%d mt%d bk%d", &w, &mt, &bk), 3, "bad variant name '%s'", vl[v].name);
            cr_assert_eq(vl[v].bq, 16 * mt * w, "%s: Bq %d", vl[v].name, vl[v].bq);
            cr_assert(!vl[v].wgmma && !vl[v].tma && !vl[v].dflt, "%s: the fallback runs anywhere", vl[v].name);
        }
    }
    const flash_variant_t* vl = NULL;
    cr_assert_eq(flash_fwd_bf16_variants(48, &vl), 0);
}

// The dispatch rule (flash_fwd_bf16_variant_that_runs) against the variant tables: the selected
// variant runs when it exists, else the table's default (fa3 at d 64 and 128, entry 0 at 16 and
// 32); a wgmma variant runs only in a build with its code, else entry 0. flash_fwd_kernel_name,
// which the bench prints, names what that rule picks.
Test(api, variant_that_runs_and_its_name) {
    const int dims[] = {16, 32, 64, 128};
    int n_wgmma = 0;
    for (int i = 0; i < 4; i++) {
        const int d = dims[i];
        const flash_variant_t* vl = NULL;
        const int n = flash_fwd_bf16_variants(d, &vl);
        for (int v = -1; v <= n + 1; v++)
            for (int built = 0; built <= 1; built++) {
                int want = (v < 0 || v >= n) ? flash_fwd_bf16_default_variant(d) : v;
                if (vl[want].wgmma && !built) want = 0;
                cr_assert_eq(flash_fwd_bf16_variant_that_runs(d, v, built), want, "d %d v %d built %d", d, v, built);
            }
        for (int v = 0; v < n; v++) n_wgmma += vl[v].wgmma;
        // Entry 0, the fallback, is not a wgmma variant: naming it needs no GPU. The default is
        // fa3 (a wgmma and TMA variant) at d 64 and 128, entry 0 at d 16 and 32.
        cr_assert_eq(vl[0].wgmma, 0);
        const int dv = flash_fwd_bf16_default_variant(d);
        if (d == 64) cr_assert_str_eq(vl[dv].name, "fa3 w16 bq192 bk128", "d %d", d);
        else if (d == 128) cr_assert_str_eq(vl[dv].name, "fa3 w12 bq128 bk128", "d %d", d);
        else cr_assert_eq(dv, 0, "d %d", d);
        attn_args_t a = valid_args();
        a.d = d;
        if (!vl[dv].wgmma) cr_assert_str_eq(flash_fwd_kernel_name(&a), vl[0].name, "d %d", d);
        if (n > 1) {  // a selected non-wgmma variant is what the name says, and back to the default
            const int v = vl[1].wgmma ? 0 : 1;
            flash_fwd_bf16_set_variant(d, v);
            cr_assert_str_eq(flash_fwd_kernel_name(&a), vl[v].name, "d %d", d);
            flash_fwd_bf16_set_variant(d, FLASH_FWD_DEFAULT_VARIANT);
        }
    }
    cr_assert_eq(n_wgmma, 2, "two sm_90a variants (fa3 at d 64 and 128), as flash_fwd_bf16.cu says");
    // The TMA variants (fa3) run only on views a tensor map can describe; the call's rule says so.
    int n_tma = 0;
    for (int i = 0; i < 4; i++) {
        const int d = dims[i];
        const flash_variant_t* vl = NULL;
        const int n = flash_fwd_bf16_variants(d, &vl);
        for (int v = 0; v < n; v++) {
            if (!vl[v].tma) continue;
            n_tma++;
            cr_assert(vl[v].wgmma, "%s: TMA variants are sm_90a variants", vl[v].name);
            attn_args_t a = valid_args();
            a.d = d;
            attn_contiguous_strides(a.sq, a.H, a.Nq, d);
            attn_contiguous_strides(a.sk, a.H, a.Nk, d);
            attn_contiguous_strides(a.sv, a.H, a.Nk, d);
            cr_assert_eq(flash_fwd_bf16_variant_for(&a, v, 1), v, "d %d %s on contiguous views", d, vl[v].name);
            cr_assert_eq(flash_fwd_bf16_variant_for(&a, v, 0), 0, "d %d %s without sm_90a", d, vl[v].name);
            a.sk[1] = 0, a.sv[1] = 0;  // K and V broadcast over the heads: supports() takes it, TMA cannot
            char err[200] = "";
            cr_assert_eq(flash_fwd_supports(&a, err, sizeof err), 0, "%s", err);
            cr_assert_eq(flash_fwd_bf16_variant_for(&a, v, 1), 0, "d %d %s with a zero head stride", d, vl[v].name);
            a.H = 1;  // ... unless there is one head: a stride that never moves is free
            cr_assert_eq(flash_fwd_bf16_variant_for(&a, v, 1), v, "d %d %s, one head", d, vl[v].name);
        }
    }
    cr_assert_eq(n_tma, 2, "two TMA variants (fa3 at d 64 and 128)");
    attn_args_t a0 = valid_args();
    cr_assert_eq(flash_fwd_bf16_variant_for(&a0, 0, 1), flash_fwd_bf16_variant_that_runs(64, 0, 1), "a non-TMA variant");
    cr_assert_eq(flash_fwd_bf16_variant_that_runs(48, 0, 1), -1);
    attn_args_t a = valid_args();
    a.dtype = DT_F32;
    cr_assert_str_eq(flash_fwd_kernel_name(&a), "f32 cuda-core");
    a.d = 48;
    cr_assert_str_eq(flash_fwd_kernel_name(&a), "unsupported");
}

// The variant lists both benches take (--variants, 04's --fwd-variants): all or nothing, one line
// naming what was wrong.
Test(api, select_variants) {
    char err[256] = "";
    int chosen[129] = {0};
    const flash_variant_t* vl = NULL;
    const int n64 = flash_fwd_bf16_variants(64, &vl);
    cr_assert_eq(flash_fwd_select_variants("", chosen, err, sizeof err), 0, "%s", err);
    cr_assert_eq(flash_fwd_select_variants("64:1,128:1", chosen, err, sizeof err), 0, "%s", err);
    cr_assert(chosen[64] == 1 && chosen[128] == 1 && chosen[16] == 0);
    attn_args_t a = valid_args();  // d 64: the name follows the selection (fa3 where it can run)
    cr_assert_eq(flash_fwd_bf16_variant_that_runs(64, chosen[64], 1), 1);
    const char* bad[][2] = {{"64", "expected a list"},       {"64:x", "expected a list"},
                            {"48:0", "expected a list"},     {"64:-1", "expected a list"},
                            {"64:1;128:0", "expected a list"}, {"64:1 ", "expected a list"},
                            {"64:999", "head dim 64 has"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        cr_assert_eq(flash_fwd_select_variants(bad[i][0], chosen, err, sizeof err), -1, "'%s' accepted", bad[i][0]);
        cr_assert(strstr(err, bad[i][1]), "'%s': reason '%s'", bad[i][0], err);
        cr_assert(!strchr(err, '\n'), "one line: '%s'", err);
    }
    // A bad list changes nothing, even where its first entry was good.
    cr_assert_eq(flash_fwd_select_variants("64:0,64:999", chosen, err, sizeof err), -1);
    cr_assert_eq(chosen[64], 1, "64 stays at 1");
    char last[16];
    snprintf(last, sizeof last, "64:%d", n64 - 1);
    cr_assert_eq(flash_fwd_select_variants(last, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(flash_fwd_select_variants("64:0,128:0", NULL, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(flash_fwd_kernel_name(&a), vl[0].name);
}
