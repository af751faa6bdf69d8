// Command-line flags for every program: --name value or --name=value, defaults applied first,
// and one clear line for every mistake (naming the flag and what it accepts). See cli.h.
#include "common/cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

int parse_size(const char* s, int64_t* out) {
    if (!s || *s < '0' || *s > '9') return -1;  // no sign, no spaces, not empty
    int64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        int d = *s - '0';
        if (v > (INT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    int64_t mult = 1;
    switch (*s) {
    case '\0': break;
    case 'K': case 'k': mult = INT64_C(1) << 10; s++; break;
    case 'M': case 'm': mult = INT64_C(1) << 20; s++; break;
    case 'G': case 'g': mult = INT64_C(1) << 30; s++; break;
    default: return -1;
    }
    if (*s != '\0') return -1;
    if (v > INT64_MAX / mult) return -1;
    *out = v * mult;
    return 0;
}

int choice_ok(const char* choices, const char* s) {
    if (!choices || !s) return 0;
    size_t n = strlen(s);
    const char* p = choices;
    for (;;) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

int parse_size_list(const char* s, int64_t* out, int max) {
    if (!s || !*s) return -1;
    int count = 0;
    const char* p = s;
    for (;;) {
        const char* comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item || count >= max) return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_size(item, &out[count]) != 0) return -1;
        count++;
        if (!comma) return count;
        p = comma + 1;
    }
}

int list_check_items(const char* flag, const char* s, char* err, size_t errlen) {
    if (!s || !*s) return set_err(err, errlen, "--%s: empty (a comma list, e.g. a,b)", flag);
    const size_t n = strlen(s);
    if (s[0] == ',' || s[n - 1] == ',' || strstr(s, ",,"))
        return set_err(err, errlen, "--%s: '%s' has an empty item (a comma list, e.g. a,b)", flag, s);
    return 0;
}

int choice_list_check(const char* flag, const char* s, const char* choices, char* err, size_t errlen) {
    char example[64] = "";
    // The example is the first two choices, "a,b" (or the only one).
    size_t n = strcspn(choices, "|");
    if (n < sizeof example) {
        memcpy(example, choices, n);
        const char* rest = choices[n] ? choices + n + 1 : "";
        size_t m = strcspn(rest, "|");
        if (m && n + 1 + m < sizeof example) {
            example[n] = ',';
            memcpy(example + n + 1, rest, m);
            example[n + 1 + m] = '\0';
        }
    }
    if (!s || !*s) return set_err(err, errlen, "--%s: empty (a comma list of %s, e.g. %s)", flag, choices, example);
    for (const char* p = s;;) {
        const char* comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (!choice_ok(choices, item))
            return set_err(err, errlen, "--%s: '%s' is not one of %s (a comma list, e.g. %s)", flag, item, choices,
                           example);
        if (!comma) return 0;
        p = comma + 1;
    }
}

// Parse `val` into the option's destination. On error writes "--name: ..." into err.
static int set_value(const cli_opt_t* o, const char* val, char* err, size_t errlen) {
    char* end;
    switch (o->type) {
    case CLI_INT: {
        errno = 0;
        long v = strtol(val, &end, 10);
        if (end == val || *end != '\0' || isspace((unsigned char)val[0]))
            return set_err(err, errlen, "--%s: '%s' is not an integer", o->name, val);
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
            return set_err(err, errlen, "--%s: '%s' is out of range (%d..%d)", o->name, val, INT_MIN, INT_MAX);
        *(int*)o->dest = (int)v;
        return 0;
    }
    case CLI_SIZE: {
        int64_t v;
        if (parse_size(val, &v) != 0)
            return set_err(err, errlen,
                           "--%s: '%s' is not a size (a non-negative integer with an optional K, M or G "
                           "suffix, e.g. 64M)", o->name, val);
        *(int64_t*)o->dest = v;
        return 0;
    }
    case CLI_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end != '\0' || isspace((unsigned char)val[0]) || !isfinite(v))
            return set_err(err, errlen, "--%s: '%s' is not a number", o->name, val);
        if (errno == ERANGE && fabs(v) > 1.0)
            return set_err(err, errlen, "--%s: '%s' is out of range", o->name, val);
        *(double*)o->dest = v;
        return 0;
    }
    case CLI_STR:
        *(const char**)o->dest = val;
        return 0;
    case CLI_CHOICE:
        if (!choice_ok(o->choices, val))
            return set_err(err, errlen, "--%s: '%s' is not one of %s", o->name, val,
                           o->choices ? o->choices : "(no choices given)");
        *(const char**)o->dest = val;
        return 0;
    case CLI_FLAG:
        // Only as a default or --flag=0/1: "present" is handled by the caller.
        if (strcmp(val, "0") == 0 || strcmp(val, "1") == 0) {
            *(int*)o->dest = val[0] - '0';
            return 0;
        }
        return set_err(err, errlen, "--%s is a flag and takes no value (or =0 / =1), got '%s'", o->name, val);
    }
    return set_err(err, errlen, "--%s: unknown option type %d", o->name, (int)o->type);
}

int cli_parse_err(int argc, char** argv, cli_opt_t* opts, int nopts, char* err, size_t errlen) {
    // Which options were given on the command line (for "required" checks); nopts is small.
    unsigned char* given = calloc((size_t)(nopts > 0 ? nopts : 1), 1);
    if (!given) return set_err(err, errlen, "out of memory");
    int rc = 0;
    // Defaults first, so every destination holds a value even when its flag is absent. A bad
    // default is the program's bug, but it is reported the same way rather than ignored.
    for (int i = 0; i < nopts && rc == 0; i++) {
        const cli_opt_t* o = &opts[i];
        if (o->def) {
            char why[256];
            if (set_value(o, o->def, why, sizeof why) != 0) rc = set_err(err, errlen, "bad default: %s", why);
        } else if (o->type == CLI_FLAG) {
            *(int*)o->dest = 0;
        } else if (o->type == CLI_STR || o->type == CLI_CHOICE) {
            *(const char**)o->dest = NULL;
        }
    }
    for (int a = 1; a < argc && rc == 0; a++) {
        const char* arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            rc = 1;
            break;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            rc = set_err(err, errlen, "unexpected argument '%s' (flags are --name value; see --help)", arg);
            break;
        }
        const char* name = arg + 2;
        const char* eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        int k = -1;
        for (int i = 0; i < nopts && k < 0; i++)
            if (strlen(opts[i].name) == nlen && strncmp(opts[i].name, name, nlen) == 0) k = i;
        if (k < 0) {
            rc = set_err(err, errlen, "unknown flag --%.*s (see --help)", (int)nlen, name);
            break;
        }
        const cli_opt_t* o = &opts[k];
        given[k] = 1;
        const char* val;
        if (eq) {
            val = eq + 1;
        } else if (o->type == CLI_FLAG) {
            *(int*)o->dest = 1;
            continue;
        } else if (a + 1 < argc && strncmp(argv[a + 1], "--", 2) != 0) {
            val = argv[++a];  // a value may start with one '-' (a negative number), not two
        } else {
            rc = set_err(err, errlen, "--%s needs a value", o->name);
            break;
        }
        rc = set_value(o, val, err, errlen);
    }
    for (int i = 0; i < nopts && rc == 0; i++)
        if (!opts[i].def && opts[i].type != CLI_FLAG && !given[i])
            rc = set_err(err, errlen, "--%s is required (see --help)", opts[i].name);
    free(given);
    return rc;
}

static const char* type_hint(const cli_opt_t* o) {
    switch (o->type) {
    case CLI_INT: return "INT";
    case CLI_SIZE: return "SIZE";
    case CLI_DOUBLE: return "NUM";
    case CLI_STR: return "STR";
    case CLI_CHOICE: return o->choices ? o->choices : "STR";
    case CLI_FLAG: return "";
    }
    return "";
}

void cli_print_help(FILE* out, const char* prog, const char* summary, const cli_opt_t* opts, int nopts) {
    const char* base = prog ? strrchr(prog, '/') : NULL;
    base = base ? base + 1 : (prog ? prog : "prog");
    fprintf(out, "usage: %s [flags]\n", base);
    if (summary && *summary) fprintf(out, "%s\n", summary);
    fprintf(out, "\nflags (--name value or --name=value):\n");
    // Column width for "--name HINT" so the help texts line up.
    int w = (int)strlen("--help");
    for (int i = 0; i < nopts; i++) {
        int n = 2 + (int)strlen(opts[i].name) + (opts[i].type == CLI_FLAG ? 0 : 1 + (int)strlen(type_hint(&opts[i])));
        if (n > w) w = n;
    }
    for (int i = 0; i < nopts; i++) {
        const cli_opt_t* o = &opts[i];
        char left[256];
        if (o->type == CLI_FLAG) snprintf(left, sizeof left, "--%s", o->name);
        else snprintf(left, sizeof left, "--%s %s", o->name, type_hint(o));
        fprintf(out, "  %-*s  %s", w, left, o->help ? o->help : "");
        if (o->type == CLI_FLAG) fprintf(out, " (flag)");
        else if (!o->def) fprintf(out, " (required)");
        else fprintf(out, " (default %s)", *o->def ? o->def : "''");
        if (o->type == CLI_SIZE) fprintf(out, " [K, M, G suffixes: 1K = 1024]");
        fprintf(out, "\n");
    }
    fprintf(out, "  %-*s  print this help and exit\n", w, "--help");
}

void cli_parse(int argc, char** argv, const char* summary, cli_opt_t* opts, int nopts) {
    if (argc > 0 && argv[0]) set_progname(argv[0]);
    char err[512];
    int rc = cli_parse_err(argc, argv, opts, nopts, err, sizeof err);
    if (rc == 1) {
        cli_print_help(stdout, argc > 0 ? argv[0] : NULL, summary, opts, nopts);
        exit(0);
    }
    if (rc != 0) fail("%s", err);
}
