// Stage 04 argument checks (no GPU needed): what flash_bwd_supports rejects, and the workspace.
#include "04_flashattn_bwd/test_bwd_util.h"

static attn_args_t good_args(void) {
    static float dummy[16];
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 2; a.H = 3; a.Nq = 50; a.Nk = 70; a.d = 64; a.dtype = DT_BF16; a.causal = 1; a.scale = 0.125f;
    int64_t* all[8] = {a.sq, a.sk, a.sv, a.so, a.sdo, a.sdq, a.sdk, a.sdv};
    for (int i = 0; i < 8; i++) attn_contiguous_strides(all[i], 3, 70, 64);
    a.q = a.k = a.v = a.dout = dummy;
    a.o = a.dq = a.dk = a.dv = dummy;
    a.lse = dummy;
    return a;
}

Test(bwd_api, accepts_good_args) {
    attn_args_t a = good_args();
    char err[256] = "";
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), 0, "%s", err);
}

Test(bwd_api, rejects_bad_args_with_a_reason) {
    char err[256];
    attn_args_t a = good_args();
    a.d = 256;
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), -1);
    cr_assert(strstr(err, "head dim 256"), "%s", err);
    a = good_args();
    a.dtype = DT_I32;
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), -1);
    cr_assert(strstr(err, "dtype"), "%s", err);
    a = good_args();
    a.dq = NULL;
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), -1);
    cr_assert(strstr(err, "NULL"), "%s", err);
    a = good_args();
    a.Nk = 0;
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), -1);
    a = good_args();
    a.sv[2] = 10;
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), -1);
    cr_assert(strstr(err, "row stride"), "%s", err);
    a = good_args();
    a.scale = 0.0f;
    cr_assert_eq(flash_bwd_supports(&a, err, sizeof err), -1);
    cr_assert(strstr(err, "scale"), "%s", err);
}

Test(bwd_api, workspace_sizes) {
    attn_args_t a = good_args();
    // D: fp32 per query row, rounded up to 256 bytes, plus the fp32 dQ accumulator of the
    // single-pass rows (the dispatch's choice depends on the GPU: room for it always).
    const size_t d_part = (sizeof(float) * 2 * 3 * 50 + 255) / 256 * 256;
    cr_assert_eq(flash_bwd_workspace_bytes(&a), d_part + sizeof(float) * 2 * 3 * 50 * 64);
}

Test(bwd_api, impl_table_is_complete) {
    const attention_impl_t* impl = flash_attention_impl();
    cr_assert(impl && impl->name && impl->supports && impl->forward && impl->backward && impl->bwd_workspace_bytes);
    attn_args_t a = good_args();
    a.d = 40;  // stage 03's forward has no kernel for it: the pair must say no
    char err[256];
    cr_assert_eq(impl->supports(&a, err, sizeof err), -1);
}
