// See gnuplot.h.
#include "common/gnuplot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"

int gnuplot_available(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

// gnuplot's stderr, less the echoed command and its caret: what went wrong, in its words.
static void gnuplot_words(FILE* log, char* out, size_t len) {
    out[0] = '\0';
    if (!log) return;
    rewind(log);
    char line[512];
    size_t used = 0;
    while (fgets(line, sizeof line, log) && used + 4 < len) {
        line[strcspn(line, "\r\n")] = '\0';
        char* p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '^' || strncmp(p, "gnuplot>", 8) == 0) continue;
        used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "; " : "", p);
    }
    if (!out[0]) snprintf(out, len, "no message");
}

int gnuplot_png(const char* png, gnuplot_script_fn script, void* ctx, char* err, size_t errlen) {
    // The PNG's directory (it may not exist yet) must take new files. Checked before gnuplot is
    // looked for: a bad path is refused the same way on a machine with gnuplot and without.
    char why[512], dir[4096];
    const char* slash = strrchr(png, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == png) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - png), png);
    if (dir_check_writable(dir, why, sizeof why) != 0) return set_err(err, errlen, "cannot write %s: %s", png, why);
    if (!gnuplot_available()) return set_err(err, errlen, "gnuplot is not installed (scripts/setup.sh installs it)");
    if (mkdir_parent(png) != 0) return set_err(err, errlen, "cannot create the directory for %s: %s", png, strerror(errno));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.png", png, (int)getpid());
    FILE* log = tmpfile();  // gnuplot's stderr, so that its own words reach the user
    if (!log) return set_err(err, errlen, "cannot create a temporary file: %s", strerror(errno));
    char cmd[64];
    snprintf(cmd, sizeof cmd, "gnuplot 2>/dev/fd/%d", fileno(log));
    const char* terms[] = {"pngcairo", "png"};
    int rc = -2;
    for (int i = 0; i < 2 && rc != 0; i++) {
        fflush(log);
        FILE* gp = popen(cmd, "w");
        if (!gp) {
            rc = set_err(err, errlen, "cannot run gnuplot: %s", strerror(errno));
            break;
        }
        script(gp, terms[i], tmp, ctx);
        const int st = pclose(gp);
        FILE* chk = fopen(tmp, "rb");
        long size = 0;
        if (chk) {
            fseek(chk, 0, SEEK_END);
            size = ftell(chk);
            fclose(chk);
        }
        if (st == 0 && size > 0) {
            if (rename(tmp, png) == 0) rc = 0;
            else rc = set_err(err, errlen, "cannot move the plot to %s: %s", png, strerror(errno));
        }
        if (rc != 0) unlink(tmp);
    }
    if (rc == -2) {
        gnuplot_words(log, why, sizeof why);
        set_err(err, errlen, "gnuplot failed: %s", why);
    }
    fclose(log);
    return rc;
}
