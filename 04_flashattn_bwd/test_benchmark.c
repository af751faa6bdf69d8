// build/04_flashattn_bwd/benchmark: stage 01's Transformer benchmark with flash attention
// (stage 03 forward + this stage's backward): --attention flash trains.
#include <stdio.h>
#include <string.h>
#include "tests/harness.h"

static char out[1 << 16];

static int bench(const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/04_flashattn_bwd/benchmark %s --out %s", build_dir(), args, test_tmpdir());
    return run_capture(cmd, out, sizeof out);
}

Test(benchmark, offers_flash) {
    cr_assert_eq(bench("--help"), 0, "%s", out);
    cr_assert(strstr(out, "naive|flash"), "--attention lists flash: %s", out);
}

Test(benchmark, flash_trains) {
    SKIP_WITHOUT_GPU();
    for (int p = 0; p < 2; p++) {
        char args[256];
        snprintf(args, sizeof args, "--attention flash --mode train --model tiny --context 200 "
                 "--precision %s --warmup 1 --steps 2", p ? "bf16" : "fp32");
        cr_assert_eq(bench(args), 0, "%s", out);
        cr_assert(strstr(out, "| flash ") && strstr(out, "| ok "), "a row for flash with status ok: %s", out);
    }
}
