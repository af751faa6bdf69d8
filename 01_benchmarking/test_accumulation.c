// The accumulation demo (accumulation_cpu.c, accumulation.cu, the `accumulation` program).
// The expected sums were computed with numpy float16 / torch bfloat16 scalars (sequential adds,
// each rounded to the accumulator's type) and are compared bit for bit: every case is a fixed
// sequence of correctly rounded IEEE operations, so there is no tolerance to give.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "01_benchmarking/accumulation.h"
#include "common/rng.h"
#include "tests/harness.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// numpy: s = np.float32(0); for 1000 times: s = np.float32(s + x) (and the fp16/bf16 analogues)
static const uint32_t WANT_BITS[ACC_NCASES] = {
    1092616332u,  // fp32 + fp32        10.000133514404297
    0x411f4000u,  // fp16 + fp16         9.953125
    1092618432u,  // fp32 + fp16        10.00213623046875
    1092618432u,  // fp32 + (float)fp16 10.00213623046875  (the same computation as the row above)
    0x40800000u,  // bf16 + bf16         4.0 (stalls: half an ulp of 4 in bf16 is 1/64 > 0.01)
    1092626432u,  // fp32 + bf16        10.009765625
};

static void check_against_numpy(const float* got, const char* who) {
    for (int c = 0; c < ACC_NCASES; c++)
        cr_assert_eq(bits(got[c]), WANT_BITS[c], "%s case %d: %.9g (0x%08x), numpy says 0x%08x", who, c + 1,
                     (double)got[c], bits(got[c]), WANT_BITS[c]);
}

Test(accumulation, cpu_sums_match_numpy) {
    float got[ACC_NCASES];
    memset(got, 0xFF, sizeof got);  // poisoned: NaN until written
    accum_cpu(1000, 0.01f, got);
    check_against_numpy(got, accum_cpu_has_native_f16() ? "CPU (_Float16)" : "CPU (emulated)");
}

Test(accumulation, emulated_fp16_matches_numpy) {
    float got[ACC_NCASES];
    memset(got, 0xFF, sizeof got);
    accum_cpu_emulated(1000, 0.01f, got);
    check_against_numpy(got, "CPU (emulated)");
}

Test(accumulation, soft_fp16_round_trips_every_half) {
    for (uint32_t h = 0; h < 0x10000u; h++) {
        uint16_t x = (uint16_t)h;
        int is_nan = (x & 0x7c00u) == 0x7c00u && (x & 0x3ffu);
        float f = f32_from_f16_soft(x);
        if (is_nan) {
            cr_assert(isnan(f), "0x%04x should widen to NaN", h);
            continue;
        }
        cr_assert_eq(f16_from_f32_soft(f), x, "0x%04x -> %.9g -> 0x%04x", h, (double)f, f16_from_f32_soft(f));
    }
}

Test(accumulation, soft_fp16_rounds_like_the_compiler) {
#ifndef __FLT16_MAX__
    cr_skip_test("this compiler has no _Float16 to compare with");
#else
    // Random floats over the whole fp16 range and beyond (subnormals, overflow), plus exact
    // ties between neighbouring halves, which must round to even.
    for (uint64_t i = 0; i < 200000; i++) {
        float mag = ldexpf(rng_uniform(7, 2 * i), (int)rng_below(7, 2 * i + 1, 50) - 30);  // 2^-30..2^19
        float f = (i & 1) ? -mag : mag;
        uint16_t want;
        _Float16 hf = (_Float16)f;
        memcpy(&want, &hf, 2);
        cr_assert_eq(f16_from_f32_soft(f), want, "%.9g: soft 0x%04x, _Float16 0x%04x", (double)f,
                     f16_from_f32_soft(f), want);
    }
    for (uint32_t h = 0; h < 0x7bffu; h++) {
        float lo = f32_from_f16_soft((uint16_t)h), hi = f32_from_f16_soft((uint16_t)(h + 1));
        float mid = lo + (hi - lo) * 0.5f;  // exact in fp32
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        cr_assert_eq(f16_from_f32_soft(mid), want, "tie between 0x%04x and 0x%04x", h, h + 1);
    }
#endif
}

Test(accumulation, gpu_sums_match_cpu_bit_for_bit) {
    SKIP_WITHOUT_GPU();
    float cpu[ACC_NCASES], gpu[ACC_NCASES];
    memset(gpu, 0xFF, sizeof gpu);
    accum_cpu(1000, 0.01f, cpu);
    cr_assert_eq(accum_gpu(1000, 0.01f, gpu), 0, "accum_gpu reported no GPU");
    check_against_numpy(gpu, "GPU");
    // an odd count and another value: the two sides must still agree exactly
    accum_cpu(777, 0.37f, cpu);
    cr_assert_eq(accum_gpu(777, 0.37f, gpu), 0);
    for (int c = 0; c < ACC_NCASES; c++)
        cr_assert_eq(bits(gpu[c]), bits(cpu[c]), "case %d: GPU %.9g vs CPU %.9g", c + 1, (double)gpu[c],
                     (double)cpu[c]);
}

Test(accumulation, program_prints_the_table_and_rejects_bad_flags) {
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/accumulation --device cpu --out %s/acc", build_dir(), test_tmpdir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0, "accumulation failed:\n%s", out);
    cr_assert(strstr(out, "9.953125") && strstr(out, "10.002136"), "table lacks the fp16 sums:\n%s", out);
    snprintf(cmd, sizeof cmd, "%s/acc/accumulation.csv", test_tmpdir());
    FILE* f = fopen(cmd, "r");
    cr_assert(f, "no CSV at %s", cmd);
    fclose(f);

    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/accumulation --n 0 --out %s/acc", build_dir(), test_tmpdir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "--n 0 must be a user error:\n%s", out);
    cr_assert(strstr(out, "--n"), "the message must name the flag:\n%s", out);
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/accumulation --device gpu", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "--device gpu must be a user error:\n%s", out);
    cr_assert(strstr(out, "auto|cpu|cuda"), "the message must list the choices:\n%s", out);
}

// --csv "" must not write hidden .csv/.json files nor --csv a/b/c into subfolders (the
// benchmark refuses the same thing), and an --out that cannot be created must say why.
Test(accumulation, csv_is_a_plain_name_and_out_says_why) {
    struct {
        const char* args;
        const char* text;
    } cases[] = {
        {"--csv ''", "--csv: the file name is empty"},
        {"--csv a/b/c", "--csv: 'a/b/c' is a path"},
        {"--csv .hidden", "--csv: '.hidden' starts with '.'"},
        {"--out ''", "--out is empty"},
    };
    char dir[600], cmd[1400], out[4096];
    snprintf(dir, sizeof dir, "%s/acc_names", test_tmpdir());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "mkdir -p %s && %s/01_benchmarking/accumulation --device cpu --out %s %s", dir,
                 build_dir(), dir, cases[i].args);
        cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s:\n%s", cases[i].args, out);
        cr_assert(strstr(out, cases[i].text), "%s: the message lacks \"%s\":\n%s", cases[i].args, cases[i].text, out);
        cr_assert(strstr(out, "accumulation: error: ") == out && !strchr(out, '\n')[1], "one line:\n%s", out);
        snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
        run_capture(cmd, out, sizeof out);
        cr_assert_eq(atoi(out), 0, "%s left files in %s", cases[i].args, dir);
    }
    // A place that cannot hold the directory: the reason is in the line, nothing is written.
    snprintf(cmd, sizeof cmd, "%s/01_benchmarking/accumulation --device cpu --out /proc/cs336-acc", build_dir());
    cr_assert_eq(run_capture(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "--out /proc/cs336-acc: cannot create the directory /proc/cs336-acc: "), "%s", out);
    cr_assert_null(strstr(out, "| loop"), "it must fail before printing the table:\n%s", out);
}
