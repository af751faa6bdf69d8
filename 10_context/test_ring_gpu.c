// Stage 10 on GPUs: the GPU ring (NCCL, one GPU a rank, TEST_GPU_RANKS of them, default 2)
// through ring_check --backend nccl, against one GPU's flash attention over the whole sequence
// and against float64, fp32 and bf16, both splits, causal and not, on a length that the chunks
// do not divide. Skipped without the GPUs.
#include <stdio.h>
#include <string.h>
#include "common/gpu.h"
#include "tests/harness.h"

static char g_out[1 << 16];

static void gpu_case(const char* dtype, const char* split, int causal) {
    NEED_GPU_RANKS();
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "MPIRUN_TIMEOUT=240 scripts/mpirun.sh %d %s/10_context/ring_check --backend nccl --comm-timeout 60 "
             "--dtype %s --split %s --causal %d --N 517 --d 64 --BH 4",
             test_gpu_ranks(), build_dir(), dtype, split, causal);
    const int st = run_capture_timed(cmd, g_out, sizeof g_out, NULL);
    cr_assert(st == 0 && strstr(g_out, ": ok"), "%s: exit %d:\n%s", cmd, st, g_out);
    cr_log_info("%s", g_out);
}

Test(ring_gpu, f32_plain_causal, .timeout = 300) { gpu_case("f32", "plain", 1); }
Test(ring_gpu, f32_zigzag_causal, .timeout = 300) { gpu_case("f32", "zigzag", 1); }
Test(ring_gpu, f32_zigzag_full, .timeout = 300) { gpu_case("f32", "zigzag", 0); }
Test(ring_gpu, bf16_plain_causal, .timeout = 300) { gpu_case("bf16", "plain", 1); }
Test(ring_gpu, bf16_zigzag_causal, .timeout = 300) { gpu_case("bf16", "zigzag", 1); }
Test(ring_gpu, bf16_plain_full, .timeout = 300) { gpu_case("bf16", "plain", 0); }
