// The ladder's plan on the CPU: lab04_plan (what lab04_backward launches and bench_rungs prints)
// against the table of rungs in rungs.h and NOTES.md, for every dtype x head dim x rung x
// single/two-pass x wgmma built or not.
// Run: build/lab/04_flashattn_bwd/test_lab04 --filter 'rung_plan/*'

#include "04_flashattn_bwd/test_bwd_util.h"
#include "lab/04_flashattn_bwd/rungs.h"

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

// The expected plan, written out from the version table (flash_bwd.h's header) independently of
// flash_bwd_dispatch.c's code.
static void expect(const attn_args_t* a, int version, int atomic, int wg, lab04_path_t path, int ran,
                   int single, const char* file) {
    const lab04_plan_t p = lab04_plan(a, version, atomic, wg);
    cr_assert_eq(p.path, path, "%s d %d v%d atomic %d wgmma %d: path %d, want %d", dtype_name(a->dtype), a->d, version,
                 atomic, wg, (int)p.path, (int)path);
    cr_assert_eq(p.version, ran, "%s d %d v%d atomic %d wgmma %d: version %d ran, want %d", dtype_name(a->dtype), a->d,
                 version, atomic, wg, p.version, ran);
    cr_assert_eq(p.single_pass, single, "d %d v%d atomic %d: single_pass %d", a->d, version, atomic, p.single_pass);
    cr_assert_str_eq(p.file, file, "d %d v%d atomic %d wgmma %d", a->d, version, atomic, wg);
    // The printed name carries the version that ran and the file: what a benchmark row shows.
    char want[32];
    snprintf(want, sizeof want, "v%d ", ran);
    char name[96];
    lab04_plan_name(&p, name, sizeof name);
    if (ran > 0) cr_assert(strncmp(name, want, strlen(want)) == 0, "name '%s' lacks '%s'", name, want);
    cr_assert(strstr(name, file), "name '%s' lacks the file %s", name, file);
    cr_assert(strstr(name, single ? "single pass" : "two-pass"), "name '%s'", name);
}

Test(rung_plan, plan_follows_the_version_table) {
    const int dims[] = {16, 32, 64, 128};
    for (int di = 0; di < 4; di++) {
        const int d = dims[di];
        const attn_args_t a = plan_args(DT_BF16, d);
        for (int v0 = 1; v0 <= LAB04_MAX_VERSION; v0++)
            for (int atomic = 0; atomic <= 1; atomic++)
                for (int wg = 0; wg <= 1; wg++) {
                    // Version 21 runs its own kernel at d 64 in Hopper builds (these views are
                    // contiguous: TMA describes them), elsewhere what version 20 runs.
                    if (v0 == 21 && d == 64 && wg) {
                        expect(&a, v0, atomic, wg, LAB04_PATH_TMA, 21, 1, "flash_bwd_tma.cu");
                        continue;
                    }
                    const int v = v0 == 21 ? 20 : v0;
                    if (v >= 6 && d <= 64) {  // the single-pass kernels, whether atomic was asked or not
                        if (v >= 16 && d == 64 && wg)  // 20 is built for d 128: 19 runs at d 64
                            expect(&a, v0, atomic, wg, LAB04_PATH_WGMMA, v == 20 ? 19 : v, 1, "rungs_wgmma.cu");
                        else expect(&a, v0, atomic, wg, LAB04_PATH_FA2, v >= 16 ? 10 : v, 1, "rungs_fa2.cu");
                    } else if (v == 20 && d == 128 && wg) {  // version 20: the wgmma single pass at d 128
                        expect(&a, v0, atomic, wg, LAB04_PATH_WGMMA, 20, 1, "rungs_wgmma.cu");
                    } else if (atomic) {  // versions 1-5's single pass; d 128 keeps 1-5's dQ methods
                        expect(&a, v0, 1, wg, LAB04_PATH_MMA_SINGLE, v >= 6 ? 1 : v, 1, "rungs_mma.cu");
                    } else {
                        const int ran = (v >= 6 || d == 128) ? 1 : v;
                        expect(&a, v0, 0, wg, LAB04_PATH_MMA_TWO_PASS, ran, 0,
                               ran == 5 ? "rungs_dkdv_mt2.cu + rungs_mma.cu" : "rungs_mma.cu");
                    }
                }
    }
}

// The default (version 21) runs flash_bwd_tma.cu at d 64 and version 20's kernel at d 128 on
// Hopper builds; at d 64, 19's kernel where TMA cannot describe a view, 10 without sm_90a code.
Test(rung_plan, plan_of_the_default_on_hopper_builds) {
    const attn_args_t a = plan_args(DT_BF16, 64);
    const lab04_plan_t p = lab04_plan(&a, LAB04_DEFAULT_VERSION, 0, 1);
    cr_assert_eq(LAB04_DEFAULT_VERSION, 21, "flash_bwd.h's header and NOTES.md name version 21 the default");
    char name[96];
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v21 tma wgmma single pass (flash_bwd_tma.cu)");
    attn_args_t b = a;
    b.sk[1] = 0;  // K shared by the heads: no tensor map describes it
    const lab04_plan_t pb = lab04_plan(&b, LAB04_DEFAULT_VERSION, 0, 1);
    cr_assert_str_eq(lab04_plan_name(&pb, name, sizeof name), "v19 wgmma single pass (rungs_wgmma.cu)");
    const lab04_plan_t q = lab04_plan(&a, LAB04_DEFAULT_VERSION, 0, 0);  // no sm_90a code
    cr_assert_str_eq(lab04_plan_name(&q, name, sizeof name), "v10 fa2 mma.sync single pass (rungs_fa2.cu)");
    const attn_args_t a128 = plan_args(DT_BF16, 128);
    const lab04_plan_t r = lab04_plan(&a128, LAB04_DEFAULT_VERSION, 0, 1);
    cr_assert_str_eq(lab04_plan_name(&r, name, sizeof name), "v20 wgmma single pass (rungs_wgmma.cu)");
}

// What versions 20 and 21 share outside their own head dim: bf16 d 16 and 32 run version 10's
// single pass with or without the wgmma code, fp32 (at head dim fd) the SIMT kernels, whose
// single pass is what was asked for.
static void small_dims_and_fp32(int version, int fd) {
    char name[96];
    const int small[2] = {16, 32};
    for (int i = 0; i < 2; i++)
        for (int wg = 0; wg <= 1; wg++) {
            const attn_args_t a = plan_args(DT_BF16, small[i]);
            const lab04_plan_t p = lab04_plan(&a, version, 0, wg);
            cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v10 fa2 mma.sync single pass (rungs_fa2.cu)",
                             "version %d d %d wgmma %d", version, small[i], wg);
        }
    const attn_args_t f = plan_args(DT_F32, fd);
    for (int atomic = 0; atomic <= 1; atomic++) {
        const lab04_plan_t p = lab04_plan(&f, version, atomic, 1);
        cr_assert_eq(p.path, LAB04_PATH_SIMT, "version %d fp32 d %d, atomic %d", version, fd, atomic);
        cr_assert_eq(p.single_pass, atomic);
    }
}

// Version 20 (19's wgmma single pass for d 128), case by case with the printed names: only bf16
// d 128 in a build with the wgmma kernels runs it; d 64 runs 19, d 16 and 32 version 10, d 128
// without sm_90a code version 1's kernels (as every version >= 6 there), fp32 the SIMT kernels.
Test(rung_plan, plan_of_version_20) {
    cr_assert(LAB04_MAX_VERSION >= 20);
    char name[96];
    const attn_args_t a128 = plan_args(DT_BF16, 128);
    for (int atomic = 0; atomic <= 1; atomic++) {
        const lab04_plan_t p = lab04_plan(&a128, 20, atomic, 1);
        cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v20 wgmma single pass (rungs_wgmma.cu)");
        cr_assert_eq(p.path, LAB04_PATH_WGMMA);
    }
    lab04_plan_t p = lab04_plan(&a128, 20, 0, 0);  // no sm_90a code
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v1 mma.sync two-pass (rungs_mma.cu)");
    p = lab04_plan(&a128, 20, 1, 0);
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v1 mma.sync single pass (rungs_mma.cu)");
    for (int v = 16; v <= 19; v++) {  // the d 64 versions do not run at d 128
        p = lab04_plan(&a128, v, 0, 1);
        cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v1 mma.sync two-pass (rungs_mma.cu)", "v%d", v);
    }
    p = lab04_plan(&a128, 19, 0, 1);  // version 19 at d 128: version 1's two passes
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v1 mma.sync two-pass (rungs_mma.cu)");
    const attn_args_t a64 = plan_args(DT_BF16, 64);
    p = lab04_plan(&a64, 20, 0, 1);
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v19 wgmma single pass (rungs_wgmma.cu)");
    p = lab04_plan(&a64, 20, 1, 0);
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v10 fa2 mma.sync single pass (rungs_fa2.cu)");
    small_dims_and_fp32(20, 128);
    attn_args_t u128 = plan_args(DT_BF16, 128);
    u128.sq[2] = 132;  // a row stride the tensor cores cannot take
    p = lab04_plan(&u128, 20, 0, 1);
    cr_assert_eq(p.path, LAB04_PATH_SIMT);
}

Test(rung_plan, plan_takes_simt_where_the_tensor_cores_cannot) {
    for (int v = 1; v <= LAB04_MAX_VERSION; v++)
        for (int atomic = 0; atomic <= 1; atomic++) {
            attn_args_t a = plan_args(DT_F32, 64);
            expect(&a, v, atomic, 1, LAB04_PATH_SIMT, 0, atomic, "rungs_simt.cu");
            a = plan_args(DT_BF16, 48);  // a head dim without tensor-core kernels
            expect(&a, v, atomic, 1, LAB04_PATH_SIMT, 0, atomic, "rungs_simt.cu");
            a = plan_args(DT_BF16, 64);
            a.sk[2] = 68;  // a row stride that is not a multiple of 8 elements
            expect(&a, v, atomic, 1, LAB04_PATH_SIMT, 0, atomic, "rungs_simt.cu");
            a = plan_args(DT_BF16, 64);
            a.dv = (char*)a.dv + 8;  // a base pointer not 16-byte aligned
            expect(&a, v, atomic, 1, LAB04_PATH_SIMT, 0, atomic, "rungs_simt.cu");
        }
}

// Version 21 (the TMA-fed single pass, flash_bwd_tma.cu), case by case with the printed names:
// bf16 d 64 in a Hopper build with views a tensor map describes runs it; a view TMA cannot
// describe (K or V shared by the heads: head stride 0) runs version 19, as do the other head
// dims what version 20 runs there.
Test(rung_plan, plan_of_version_21) {
    cr_assert_eq(LAB04_MAX_VERSION, 21);
    char name[96];
    const attn_args_t a64 = plan_args(DT_BF16, 64);
    cr_assert(flash_bwd_tma_ok(&a64));
    for (int atomic = 0; atomic <= 1; atomic++) {
        const lab04_plan_t p = lab04_plan(&a64, 21, atomic, 1);
        cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v21 tma wgmma single pass (flash_bwd_tma.cu)");
        cr_assert_eq(p.path, LAB04_PATH_TMA);
        const lab04_plan_t q = lab04_plan(&a64, 21, atomic, 0);  // no sm_90a code
        cr_assert_str_eq(lab04_plan_name(&q, name, sizeof name), "v10 fa2 mma.sync single pass (rungs_fa2.cu)");
    }
    // Views TMA cannot describe: a zero head stride (K, V or both; also Q, dO) with H > 1.
    const char* which[4] = {"k", "v", "q", "dout"};
    for (int x = 0; x < 4; x++) {
        attn_args_t b = plan_args(DT_BF16, 64);
        int64_t* s = x == 0 ? b.sk : x == 1 ? b.sv : x == 2 ? b.sq : b.sdo;
        s[1] = 0;
        cr_assert(flash_bwd_mma_ok(&b), "%s: the mma kernels still take it", which[x]);
        cr_assert(!flash_bwd_tma_ok(&b), "%s: head stride 0 with H = 2", which[x]);
        const lab04_plan_t p = lab04_plan(&b, 21, x & 1, 1);
        cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v19 wgmma single pass (rungs_wgmma.cu)", "%s",
                         which[x]);
    }
    // An axis of extent 1 never moves, so its stride does not matter (B = 1: batch stride 0).
    attn_args_t c = plan_args(DT_BF16, 64);
    c.sk[0] = c.sv[0] = 0;
    cr_assert(flash_bwd_tma_ok(&c));
    lab04_plan_t p = lab04_plan(&c, 21, 0, 1);
    cr_assert_eq(p.path, LAB04_PATH_TMA);
    c.B = 2;  // now the batch moves: stride 0 is a broadcast TMA cannot express
    cr_assert(!flash_bwd_tma_ok(&c));
    p = lab04_plan(&c, 21, 0, 1);
    cr_assert_eq(p.path, LAB04_PATH_WGMMA);
    cr_assert_eq(p.version, 19);
    // The other head dims: what version 20 runs.
    const attn_args_t a128 = plan_args(DT_BF16, 128);
    p = lab04_plan(&a128, 21, 0, 1);
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v20 wgmma single pass (rungs_wgmma.cu)");
    p = lab04_plan(&a128, 21, 0, 0);
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v1 mma.sync two-pass (rungs_mma.cu)");
    p = lab04_plan(&a128, 21, 1, 0);
    cr_assert_str_eq(lab04_plan_name(&p, name, sizeof name), "v1 mma.sync single pass (rungs_mma.cu)");
    small_dims_and_fp32(21, 64);
    attn_args_t u64 = plan_args(DT_BF16, 64);
    u64.sdo[2] = 68;  // a row stride the tensor cores cannot take
    p = lab04_plan(&u64, 21, 0, 1);
    cr_assert_eq(p.path, LAB04_PATH_SIMT);
}
