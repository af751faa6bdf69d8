// Run a function in a forked child with stdout and stderr captured: how the common/ tests check
// code paths that end the process (fail() exits 2, --help exits 0) together with what they print.
//   int st = run_child(fn, arg, out, sizeof out);   // exit status, or 128 + signal
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

typedef void (*child_fn_t)(void* arg);

// Under ASan (SAN=1), LeakSanitizer runs at exit(); in a child forked from Criterion's
// multi-threaded worker it prints "Running thread ... was not suspended", which would pollute
// the output the test compares. The child is about to exit anyway, so leak checking is turned
// off there through LSan's documented hook. Weak: this header is included by several files.
__attribute__((weak)) int run_child_in_child;
__attribute__((weak)) int __lsan_is_turned_off(void) { return run_child_in_child; }

// The child runs fn(arg) then exit(0); whatever fn does to end the process earlier (exit(),
// fail(), die()) is what the caller sees. Output goes through a temporary file, not a pipe, so a
// chatty child cannot block on a full pipe while the parent waits.
static inline int run_child(child_fn_t fn, void* arg, char* out, size_t outlen) {
    FILE* cap = tmpfile();
    cr_assert_not_null(cap, "tmpfile() failed");
    fflush(NULL);  // nothing buffered in the parent may be written twice
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        run_child_in_child = 1;
        dup2(fileno(cap), 1);
        dup2(fileno(cap), 2);
        fn(arg);
        exit(0);
    }
    int st = 0;
    cr_assert(waitpid(pid, &st, 0) == pid, "waitpid failed");
    if (outlen) {
        rewind(cap);
        size_t n = fread(out, 1, outlen - 1, cap);
        out[n] = '\0';
    }
    fclose(cap);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}
