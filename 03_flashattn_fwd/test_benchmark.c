// build/03_flashattn_fwd/benchmark: stage 01's Transformer benchmark with this stage's flash
// forward plugged in (--attention flash). Forward only: training is refused with the reason.
#include <stdio.h>
#include <string.h>
#include "tests/harness.h"

static char out[1 << 16];

static int bench(const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/03_flashattn_fwd/benchmark %s --out %s", build_dir(), args, test_tmpdir());
    return run_capture(cmd, out, sizeof out);
}

Test(benchmark, offers_flash_and_refuses_it_on_the_cpu) {
    cr_assert_eq(bench("--help"), 0, "%s", out);
    cr_assert(strstr(out, "naive|flash"), "--attention lists flash: %s", out);
    cr_assert_eq(bench("--attention flash --device cpu --model tiny"), 2, "%s", out);
    cr_assert(strstr(out, "--attention flash needs --device cuda"), "%s", out);
}

Test(benchmark, flash_forward_runs_and_training_is_refused) {
    SKIP_WITHOUT_GPU();
    cr_assert_eq(bench("--attention flash --mode forward --model tiny --context 256 --precision bf16 "
                       "--warmup 1 --steps 2"), 0, "%s", out);
    cr_assert(strstr(out, "| flash ") && strstr(out, "| ok "), "a row for flash with status ok: %s", out);
    cr_assert_eq(bench("--attention flash --mode train --model tiny --warmup 0 --steps 1"), 2, "%s", out);
    cr_assert(strstr(out, "use --mode forward"), "%s", out);
}
