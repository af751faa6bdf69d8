// die(), fail() and the program name. See check.h.
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_progname[64] = "cs336";

void set_progname(const char* argv0) {
    if (!argv0) return;
    const char* base = strrchr(argv0, '/');
    snprintf(g_progname, sizeof g_progname, "%s", base ? base + 1 : argv0);
}

const char* progname(void) { return g_progname; }

static void vreport(const char* file, int line, const char* hint, const char* fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "%s:%d: error: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (hint && *hint) fprintf(stderr, "  HINT: %s\n", hint);
}

void die_at(const char* file, int line, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(file, line, NULL, fmt, ap);
    va_end(ap);
    exit(EXIT_FAILURE_RT);  // atexit handlers remove half-written output files (fileio.c)
}

void die_hint_at(const char* file, int line, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(file, line, hint, fmt, ap);
    va_end(ap);
    exit(EXIT_FAILURE_RT);
}

int set_err(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void fail(const char* fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: error: ", g_progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(EXIT_BAD_INPUT);
}
