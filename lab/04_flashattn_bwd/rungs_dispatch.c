// Which kernels a rung runs for a call (lab04_plan): the ladder's dispatch, kept as it was while
// the rungs shipped. flash_bwd_mma_ok and flash_bwd_tma_ok are the lesson's (flash_bwd_dispatch.c).
// Run: build/lab/04_flashattn_bwd/test_lab04 --filter 'rung_plan/*'
#include <stdint.h>
#include <stdio.h>
#include "04_flashattn_bwd/flash_bwd.h"
#include "lab/04_flashattn_bwd/rungs.h"
#include "common/tma.h"

// The tensor-core kernels want bf16, a head dim they were built for, and 16-byte aligned rows
// (cp.async moves 16 bytes): every base pointer 16-byte aligned and every stride a multiple of
// 8 elements. Anything else takes the SIMT kernels.
lab04_plan_t lab04_plan(const attn_args_t* a, int version, int atomic, int wgmma_built) {
    lab04_plan_t p = {LAB04_PATH_SIMT, 0, atomic ? 1 : 0, "rungs_simt.cu"};
    const int mma = flash_bwd_mma_ok(a);
    if (version == 21) {
        // Version 21: the TMA-fed single pass (flash_bwd_tma.cu) for bf16 d 64 with 16-byte rows
        // in sm_90a builds, where TMA describes the views; everywhere else what version 20 runs
        // (19 at d 64, 20 at d 128, 10 at d 16 and 32, version 1 without sm_90a code at d 128).
        if (mma && a->d == 64 && wgmma_built && flash_bwd_tma_ok(a)) {
            p.single_pass = 1;
            p.path = LAB04_PATH_TMA, p.version = 21, p.file = "flash_bwd_tma.cu";
            return p;
        }
        version = 20;
    }
    if (mma && version >= 6 && a->d <= 64) {
        // Versions 6-20 have single-pass kernels for d 16, 32, 64 (flash_bwd_fa2.cu); 16-19 are
        // wgmma kernels for d 64 in sm_90a builds (flash_bwd_wgmma.cu), and 20 (built for d 128)
        // runs 19 there; without sm_90a code, and at d 16 and 32, 16-20 run version 10.
        p.single_pass = 1;
        if (version >= 16 && a->d == 64 && wgmma_built) {
            p.path = LAB04_PATH_WGMMA, p.version = version == 20 ? 19 : version, p.file = "rungs_wgmma.cu";
        } else {
            p.path = LAB04_PATH_FA2, p.version = version >= 16 ? 10 : version, p.file = "rungs_fa2.cu";
        }
    } else if (mma && version == 20 && a->d == 128 && wgmma_built) {
        // Version 20: 19's single pass on wgmma for d 128 (flash_bwd_wgmma.cu), sm_90a builds,
        // whether the single pass was asked for or not (as 6-19 at d <= 64).
        p.single_pass = 1;
        p.path = LAB04_PATH_WGMMA, p.version = 20, p.file = "rungs_wgmma.cu";
    } else if (mma) {
        // Versions 1-5 (6-20 where their kernels do not apply run version 1). At d = 128 the
        // two-pass kernels of every version are version 1's (no room for the register cache or
        // the second m-tile); the single pass still differs by its dQ method (flash_bwd_mma.cu).
        const int v = version >= 6 ? 1 : version;
        p.version = (!p.single_pass && a->d == 128) ? 1 : v;
        p.path = p.single_pass ? LAB04_PATH_MMA_SINGLE : LAB04_PATH_MMA_TWO_PASS;
        p.file = (!p.single_pass && p.version == 5) ? "rungs_dkdv_mt2.cu + rungs_mma.cu" : "rungs_mma.cu";
    }
    return p;
}

const char* lab04_plan_name(const lab04_plan_t* p, char* buf, size_t len) {
    static const char* const what[] = {"simt", "mma.sync", "mma.sync", "fa2 mma.sync", "wgmma", "tma wgmma"};
    const char* pass = p->single_pass ? "single pass" : "two-pass";
    if (p->version > 0) snprintf(buf, len, "v%d %s %s (%s)", p->version, what[p->path], pass, p->file);
    else snprintf(buf, len, "%s %s (%s)", what[p->path], pass, p->file);
    return buf;
}
