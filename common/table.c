// One result table, three renderings: Markdown for stdout and the READMEs, CSV for plotting
// scripts, JSON for tools. Cells are stored as the text the benchmark formatted, so every
// rendering shows exactly the same digits. See table.h.
#include "common/table.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"

struct table {
    char* title;
    int ncols;
    char** headers;  // [ncols]
    char** cells;    // [nrows * ncols], row-major; NULL = never filled (renders empty)
    int nrows, cap;  // rows in use, rows allocated
    int col;         // next column to fill in the last row
};

static char* dup_str(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = malloc(n);
    if (!d) DIE("table: out of memory");
    memcpy(d, s, n);
    return d;
}

table_t* table_new(const char* title, int ncols, const char* const* headers) {
    if (ncols <= 0) DIE("table_new: ncols must be positive, got %d", ncols);
    table_t* t = calloc(1, sizeof *t);
    if (!t) DIE("table: out of memory");
    t->title = dup_str(title ? title : "");
    t->ncols = ncols;
    t->headers = calloc((size_t)ncols, sizeof *t->headers);
    if (!t->headers) DIE("table: out of memory");
    for (int c = 0; c < ncols; c++) t->headers[c] = dup_str(headers && headers[c] ? headers[c] : "");
    return t;
}

void table_row(table_t* t) {
    if (t->nrows == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        char** cells = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *cells);
        if (!cells) DIE("table: out of memory");
        memset(cells + (size_t)t->cap * (size_t)t->ncols, 0,
               (size_t)(cap - t->cap) * (size_t)t->ncols * sizeof *cells);
        t->cells = cells;
        t->cap = cap;
    }
    t->nrows++;
    t->col = 0;
}

void table_cell(table_t* t, const char* fmt, ...) {
    if (t->nrows == 0) table_row(t);  // forgiving: a first cell without table_row starts row 0
    if (t->col >= t->ncols) DIE("table '%s': more than %d cells in row %d", t->title, t->ncols, t->nrows - 1);
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) DIE("table: bad format '%s'", fmt);
    char* s = malloc((size_t)n + 1);
    if (!s) DIE("table: out of memory");
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    t->cells[(size_t)(t->nrows - 1) * (size_t)t->ncols + (size_t)t->col++] = s;
}

int table_nrows(const table_t* t) { return t->nrows; }

const char* table_get(const table_t* t, int row, int col) {
    if (row < 0 || row >= t->nrows || col < 0 || col >= t->ncols) return NULL;
    const char* s = t->cells[(size_t)row * (size_t)t->ncols + (size_t)col];
    return s ? s : "";
}

void table_free(table_t* t) {
    if (!t) return;
    for (size_t i = 0; i < (size_t)t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
    for (int c = 0; c < t->ncols; c++) free(t->headers[c]);
    free(t->cells);
    free(t->headers);
    free(t->title);
    free(t);
}

// A JSON number exactly (RFC 8259): -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
// "nan", "inf", "+1", "1.", ".5", "0x10" and "007" are not, so they stay strings.
static int is_json_number(const char* s) {
    if (*s == '-') s++;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') while (*s >= '0' && *s <= '9') s++;
    else return 0;
    if (*s == '.') {
        s++;
        if (*s < '0' || *s > '9') return 0;
        while (*s >= '0' && *s <= '9') s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (*s < '0' || *s > '9') return 0;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == '\0';
}

// Width of a cell as Markdown prints it (each '|' gets a backslash in front).
static int md_len(const char* s) {
    int n = 0;
    for (; *s; s++) n += *s == '|' ? 2 : 1;
    return n;
}

// Markdown: a "### title" line, a blank line, then columns padded to a common width. A column
// whose every cell is a number is right-aligned ("---:") so digits line up.
void table_print_md(const table_t* t, FILE* out) {
    int* w = calloc((size_t)t->ncols, sizeof *w);
    int* num = calloc((size_t)t->ncols, sizeof *num);
    if (!w || !num) DIE("table: out of memory");
    for (int c = 0; c < t->ncols; c++) {
        w[c] = md_len(t->headers[c]);
        if (w[c] < 3) w[c] = 3;  // room for the "---" of the separator row
        num[c] = t->nrows > 0;
        for (int r = 0; r < t->nrows; r++) {
            const char* s = table_get(t, r, c);
            if (md_len(s) > w[c]) w[c] = md_len(s);
            if (!is_json_number(s)) num[c] = 0;
        }
    }
    if (t->title[0]) fprintf(out, "### %s\n\n", t->title);
    for (int r = -2; r < t->nrows; r++) {
        fputc('|', out);
        for (int c = 0; c < t->ncols; c++) {
            if (r == -1) {  // separator row
                fputc(' ', out);
                for (int i = 0; i < w[c] - 1; i++) fputc('-', out);
                fputc(num[c] ? ':' : '-', out);
                fputs(" |", out);
                continue;
            }
            const char* s = r == -2 ? t->headers[c] : table_get(t, r, c);
            // '|' inside a cell would end it: escape it (the width counts the escapes too).
            if (strchr(s, '|')) {
                fputc(' ', out);
                int n = 0;
                for (const char* p = s; *p; p++, n++) {
                    if (*p == '|') fputc('\\', out), n++;
                    fputc(*p, out);
                }
                fprintf(out, "%*s |", w[c] > n ? w[c] - n : 0, "");
            } else if (num[c] && r >= 0) {
                fprintf(out, " %*s |", w[c], s);
            } else {
                fprintf(out, " %-*s |", w[c], s);
            }
        }
        fputc('\n', out);
    }
    free(w);
    free(num);
}

// CSV (RFC 4180): a field with a comma, quote, CR, LF or edge space is quoted, inner quotes doubled.
static void csv_field(FILE* f, const char* s) {
    size_t n = strlen(s);
    int quote = strpbrk(s, ",\"\r\n") != NULL || (n > 0 && (s[0] == ' ' || s[n - 1] == ' '));
    if (!quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_string(FILE* f, const char* s) {
    fputc('"', f);
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

// Open `path` atomically, creating its directory. NULL (with a message on stderr) on failure:
// a benchmark that cannot write its CSV should still print its table and go on.
static FILE* open_out(const char* path) {
    if (mkdir_parent(path) != 0) {
        fprintf(stderr, "%s: warning: cannot create the directory for %s: %s\n", progname(), path, strerror(errno));
        return NULL;
    }
    FILE* f = afile_open(path);
    if (!f) fprintf(stderr, "%s: warning: cannot write %s: %s\n", progname(), path, strerror(errno));
    return f;
}

static int close_out(FILE* f, const char* path) {
    if (afile_commit(f) == 0) return 0;
    fprintf(stderr, "%s: warning: writing %s failed: %s\n", progname(), path, strerror(errno));
    return -1;
}

int table_write_csv(const table_t* t, const char* path) {
    FILE* f = open_out(path);
    if (!f) return -1;
    for (int r = -1; r < t->nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            if (c) fputc(',', f);
            csv_field(f, r < 0 ? t->headers[c] : table_get(t, r, c));
        }
        fputc('\n', f);
    }
    return close_out(f, path);
}

// A JSON array with one object per row, keyed by the headers. Numbers are written bare,
// empty cells as null, everything else as a string.
int table_write_json(const table_t* t, const char* path) {
    FILE* f = open_out(path);
    if (!f) return -1;
    fputs("[", f);
    for (int r = 0; r < t->nrows; r++) {
        fputs(r ? ",\n  {" : "\n  {", f);
        for (int c = 0; c < t->ncols; c++) {
            const char* s = table_get(t, r, c);
            if (c) fputs(", ", f);
            json_string(f, t->headers[c]);
            fputs(": ", f);
            if (!*s) fputs("null", f);
            else if (is_json_number(s)) fputs(s, f);
            else json_string(f, s);
        }
        fputc('}', f);
    }
    fputs(t->nrows ? "\n]\n" : "]\n", f);
    return close_out(f, path);
}
