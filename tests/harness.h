// Shared test helpers for every Criterion test binary.
//   ASSERT_ALLCLOSE(got, want, n, rtol, atol, "what")   |a - b| <= atol + rtol*|b|, NaN never passes
//   SKIP_WITHOUT_GPU()                                  cr_skip_test with the reason when no GPU
//   run_capture("build/.../prog --bad", out, sizeof out) exit status and combined output of a command
//   ASSERT_REFUSED(st, out, "prog", "--flag", "value")  exit 2 and ONE line "prog: error: ..." naming them
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <criterion/criterion.h>
#include "common/gpu.h"

// Returns 1 if every element is close. On failure prints (to stderr) the count of bad
// elements, max abs and max rel error, the first bad index and a few (got, want) pairs.
int allclose_report(const float* got, const float* want, size_t n, double rtol, double atol,
                    const char* what);
// The same for bf16 bits in `got` against fp32 `want`.
int allclose_bf16_report(const uint16_t* got, const float* want, size_t n, double rtol, double atol,
                         const char* what);
// max |got - want| / (max |want| + tiny): a scale-free summary used in some messages.
double max_abs_diff(const float* a, const float* b, size_t n);

#define ASSERT_ALLCLOSE(got, want, n, rtol, atol, what)                                  \
    cr_assert(allclose_report((got), (want), (n), (rtol), (atol), (what)),               \
              "%s: not allclose (rtol %g, atol %g); details above", (what), (double)(rtol), (double)(atol))

// The rank count of the multi-GPU tests (one GPU a rank): $TEST_GPU_RANKS, default 2, so that the
// same assertions run on 4 GPUs with TEST_GPU_RANKS=4. A value that is not a whole number in
// 2..64 fails the test that asks, naming it.
int test_gpu_ranks(void);
// Skips the test, with the reason, when there are fewer GPUs than test_gpu_ranks().
#define NEED_GPU_RANKS()                                                                            \
    do {                                                                                            \
        if (gpu_count() < test_gpu_ranks())                                                         \
            cr_skip_test("needs %d CUDA GPUs (found %d)%s%s", test_gpu_ranks(), gpu_count(),        \
                         gpu_count() ? "" : ": ", gpu_count() ? "" : gpu_absent_reason());          \
    } while (0)

#define SKIP_WITHOUT_GPU()                                                               \
    do {                                                                                 \
        if (gpu_count() == 0) cr_skip_test("needs a CUDA GPU: %s", gpu_absent_reason()); \
    } while (0)

// Runs `cmd` with /bin/sh, stdout and stderr together into out (truncated to outlen - 1).
// Returns the exit status (0-255), or 128 + signal number if it was killed.
int run_capture(const char* cmd, char* out, size_t outlen);
// The same, and *seconds (if not NULL) set to how long the command took (wall clock).
int run_capture_timed(const char* cmd, char* out, size_t outlen, double* seconds);
// Bad input refused as every program promises: exit status 2 and the whole output (stdout and
// stderr of every rank together) is ONE line "<prog>: error: ..." that holds every needle (a
// NULL-terminated list). 1 or 0.
int refused_in_one_line(int st, const char* out, const char* prog, ...);
#define ASSERT_REFUSED(st, out, prog, ...)                                                      \
    cr_assert(refused_in_one_line((st), (out), (prog), __VA_ARGS__, (const char*)NULL),          \
              "expected exit 2 and one line '%s: error: ...' naming " #__VA_ARGS__ "; got exit %d:\n%s", \
              (prog), (st), (out))
// The build directory the tests were built into ("build" or "build-san"): from $BUILD, else
// derived from the test binary's own path, so tests can run the programs next to them.
const char* build_dir(void);
// A fresh directory under /tmp for this test process (created on first call, removed when the
// process exits; CS336C_KEEP_TMP=1 keeps it).
const char* test_tmpdir(void);
// test_tmpdir()/name, in one of 8 rotating buffers (so a few can be held at once).
const char* test_path(const char* name);
// An empty regular file at test_path(name), created (or emptied); "<it>/x" is then a path that
// cannot be created on any machine (Not a directory).
const char* test_plain_file(const char* name);
// Loads the committed fixture tests/fixtures/<rel> (a float32 .npy of exactly want_numel
// elements; asserts otherwise) into malloc'd memory the caller frees.
float* fixture_load_f32(const char* rel, size_t want_numel);
// Path of a committed fixture: tests/fixtures/<name> (relative to the repository root, which
// make and scripts/run_tests.sh use as the working directory).
const char* fixture_path(const char* name, char* buf, size_t len);
