// die(), fail() and the program name. See check.h.
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

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

// The line "prog: error: <msg>\n" in one write(2): ranks of an MPI job that fail at once print
// whole lines, never one interleaved inside another.
static void write_line(const char* msg) {
    char line[1024];
    int n = snprintf(line, sizeof line, "%s: error: %s", g_progname, msg);
    if (n < 0) n = 0;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;  // cut a too-long reason, keep the newline
    line[n++] = '\n';
    fflush(stdout);
    for (const char* p = line; n > 0;) {
        ssize_t w = write(STDERR_FILENO, p, (size_t)n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        n -= (int)w;
    }
}

void fail_line(const char* reason) { write_line(reason ? reason : ""); }

void fail(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_line(msg);
    exit(EXIT_BAD_INPUT);
}
