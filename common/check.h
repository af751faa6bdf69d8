// Error checks used everywhere: one macro per library, each printing file:line, what failed
// and a hint, then exiting non-zero. Two kinds of failure:
//   die()/DIE(...)   a bug or a failed library call: "file:line: error: ..." and exit 1;
//   fail(...)        bad input from the user: "prog: error: ..." (one line, no file:line), exit 2.
// Usable from C and from CUDA C++ (.cu) files.
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <cuda_runtime_api.h>
#include <cublas_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EXIT_BAD_INPUT 2  // exit status for user errors (bad flag, bad file, bad shape)
#define EXIT_FAILURE_RT 1 // exit status for runtime failures (CUDA error, out of memory, I/O)

// The program's name as printed in front of user errors; cli_parse() sets it from argv[0].
void set_progname(const char* argv0);
const char* progname(void);

__attribute__((noreturn, format(printf, 3, 4)))
void die_at(const char* file, int line, const char* fmt, ...);
__attribute__((noreturn, format(printf, 4, 5)))
void die_hint_at(const char* file, int line, const char* hint, const char* fmt, ...);
// Writes a printf-style reason into err (when err is not NULL and errlen > 0) and returns -1:
// the "0, or -1 with a reason" convention of every supports()/check function.
__attribute__((format(printf, 3, 4))) int set_err(char* err, size_t errlen, const char* fmt, ...);
__attribute__((noreturn, format(printf, 1, 2)))
void fail(const char* fmt, ...);

// fail()'s line for `reason` ("prog: error: <reason>"), written in one write(2), without exiting
// (for code that must do something between the line and the exit: common/comm_refuse.c).
void fail_line(const char* reason);

#define DIE(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define DIE_HINT(hint, ...) die_hint_at(__FILE__, __LINE__, hint, __VA_ARGS__)

// Library checks. The reporters live in check_cuda.c (they need the CUDA runtime).
__attribute__((noreturn)) void die_cuda(int err, const char* expr, const char* file, int line);
__attribute__((noreturn)) void die_cublas(int status, const char* expr, const char* file, int line);

#define CUDA_CHECK(call)                                                              \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) die_cuda((int)err_, #call, __FILE__, __LINE__);      \
    } while (0)

// After every kernel launch: catches bad launch configurations at once (and, in debug
// builds with CUDA_LAUNCH_BLOCKING=1, errors inside the kernel).
#define CUDA_CHECK_LAST() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                            \
    do {                                                                              \
        cublasStatus_t st_ = (call);                                                  \
        if (st_ != CUBLAS_STATUS_SUCCESS) die_cublas((int)st_, #call, __FILE__, __LINE__); \
    } while (0)

#ifdef __cplusplus
}
#endif
