// Token files by memory mapping, and the rank-aware window sampler (tokens.h).
#include "common/tokens.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

// The .npy header: magic, version, a Python dict literal. Only what a token array can be:
// 1-D, C order, '<u2' or '<i4'. Returns the data offset, or -1 with the reason.
static long npy_token_header(const unsigned char* b, size_t len, int* width, size_t* n, char* why,
                             size_t wl) {
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return snprintf(why, wl, "not a .npy file (bad magic)"), -1;
    size_t hl, off;
    if (b[6] == 1) { hl = b[8] | (size_t)b[9] << 8; off = 10; }
    else if (len >= 12) { hl = b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24; off = 12; }
    else return snprintf(why, wl, "truncated .npy header"), -1;
    if (off + hl > len) return snprintf(why, wl, "truncated .npy header"), -1;
    char h[1024];
    size_t k = hl < sizeof h - 1 ? hl : sizeof h - 1;
    memcpy(h, b + off, k);
    h[k] = 0;
    if (strstr(h, "'<u2'")) *width = 2;
    else if (strstr(h, "'<i4'")) *width = 4;
    else return snprintf(why, wl, "token ids must be uint16 ('<u2') or int32 ('<i4'): header %s", h), -1;
    if (!strstr(h, "'fortran_order': False")) return snprintf(why, wl, "Fortran order is not supported"), -1;
    const char* s = strstr(h, "'shape': (");
    char* end;
    if (!s) return snprintf(why, wl, "no shape in the header"), -1;
    unsigned long long v = strtoull(s + 10, &end, 10);
    if (end == s + 10 || !(end[0] == ',' && end[1] == ')')) return snprintf(why, wl, "token ids must be a 1-D array: %s", h), -1;
    *n = (size_t)v;
    return (long)(off + hl);
}

int tokens_open(tokens_t* t, const char* path, char* err, size_t errlen) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ERR("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); return ERR("%s: cannot stat: %s", path, strerror(e)); }
    if (st.st_size == 0) { close(fd); return ERR("%s: empty file", path); }
    void* map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);  // the mapping keeps the file
    if (map == MAP_FAILED) return ERR("%s: cannot map: %s", path, strerror(e));
    t->map = map;
    t->map_len = (size_t)st.st_size;
    const unsigned char* b = map;
    size_t off, len = t->map_len;
    const size_t plen = strlen(path);
    char why[1200];
    if (plen > 4 && strcmp(path + plen - 4, ".npy") == 0) {
        long o = npy_token_header(b, len, &t->width, &t->n, why, sizeof why);
        if (o < 0) { tokens_close(t); return ERR("%s: %s", path, why); }
        off = (size_t)o;
    } else {
        int32_t h[TOKENS_BIN_HEADER];
        if (len < sizeof h) { tokens_close(t); return ERR("%s: %zu bytes is shorter than the .bin header (1024 bytes); HINT: make token files with 11_train/tokenize", path, len); }
        memcpy(h, b, sizeof h);
        if (h[0] != TOKENS_BIN_MAGIC) { tokens_close(t); return ERR("%s: bad magic %d (an llm.c .bin starts with %d); HINT: make token files with 11_train/tokenize", path, h[0], TOKENS_BIN_MAGIC); }
        if (h[1] != 1 && h[1] != 2) { tokens_close(t); return ERR("%s: unsupported .bin version %d (1: uint16, 2: uint32)", path, h[1]); }
        t->width = h[1] == 1 ? 2 : 4;
        if (h[2] < 0) { tokens_close(t); return ERR("%s: negative token count %d", path, h[2]); }
        t->n = (size_t)h[2];
        off = sizeof h;
    }
    if (t->n == 0) { tokens_close(t); return ERR("%s: no tokens", path); }
    if (off + t->n * (size_t)t->width != len) {
        const size_t want = off + t->n * (size_t)t->width, t_n_saved = t->n;
        tokens_close(t);
        return ERR("%s: the header says %zu tokens (%zu bytes in all) but the file has %zu bytes (truncated or wrong format)", path, t_n_saved, want, len);
    }
    t->ids = b + off;
    int mx = -1;
    for (size_t i = 0; i < t->n; i++) {
        int32_t v = tokens_at(t, i);
        if (v < 0) { tokens_close(t); return ERR("%s: negative token id %d at %zu", path, v, i); }
        if (v > mx) mx = v;
    }
    t->max_id = mx;
    return 0;
}

// tokens_guard: the mapped ranges and their lines, made before any signal can need them (the
// handler only compares addresses and writes).
#define GUARD_MAX 8
static struct {
    volatile sig_atomic_t used;
    const char* lo;
    size_t len;
    char line[700];
    int n;
} g_guard[GUARD_MAX];

static struct sigaction g_prev_bus;
static int g_guarding;

static void on_sigbus(int sig, siginfo_t* si, void* uc) {
    (void)uc;
    const char* a = si ? (const char*)si->si_addr : NULL;
    for (int i = 0; i < GUARD_MAX; i++)
        if (g_guard[i].used && a >= g_guard[i].lo && a < g_guard[i].lo + g_guard[i].len) {
            if (write(STDERR_FILENO, g_guard[i].line, (size_t)g_guard[i].n) < 0) { /* nowhere to say it */ }
            _exit(EXIT_BAD_INPUT);
        }
    // Not ours: the handler before ours (MPI's, say) or the default action. A fault re-raises
    // itself when the handler returns; a sent signal is sent again.
    sigaction(sig, &g_prev_bus, NULL);
    if (!si || si->si_code <= 0) raise(sig);
}

void tokens_guard(const tokens_t* t) {
    if (!t->map) return;
    int k = 0;
    while (k < GUARD_MAX && g_guard[k].used) k++;
    if (k == GUARD_MAX) DIE("tokens_guard: more than %d token files", GUARD_MAX);
    g_guard[k].lo = t->map;
    g_guard[k].len = t->map_len;
    int n = snprintf(g_guard[k].line, sizeof g_guard[k].line,
                     "%s: error: %s: the token file was truncated while mapped (a read past its new end raised SIGBUS); "
                     "it must not change while a job trains on it\n", progname(), t->path);
    if (n >= (int)sizeof g_guard[k].line) n = (int)sizeof g_guard[k].line - 1, g_guard[k].line[n - 1] = '\n';
    g_guard[k].n = n;
    g_guard[k].used = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, g_guarding ? NULL : &g_prev_bus) != 0) DIE("sigaction(SIGBUS) failed");
    g_guarding = 1;
}

void tokens_close(tokens_t* t) {
    for (int i = 0; i < GUARD_MAX; i++)
        if (g_guard[i].used && g_guard[i].lo == (const char*)t->map) g_guard[i].used = 0;
    if (t->map) munmap(t->map, t->map_len);
    t->map = NULL;
    t->ids = NULL;
}

int tokens_write_bin(const char* path, const uint16_t* ids, size_t n, char* err, size_t errlen) {
    if (n > INT32_MAX) return ERR("%s: %zu tokens do not fit the .bin header's int32 count", path, n);
    if (mkdir_parent(path) != 0) return ERR("%s: cannot create its directory: %s", path, strerror(errno));
    FILE* f = afile_open(path);
    if (!f) return ERR("%s: cannot create: %s", path, strerror(errno));
    int32_t h[TOKENS_BIN_HEADER] = {TOKENS_BIN_MAGIC, 1, (int32_t)n};
    if (fwrite(h, sizeof h, 1, f) != 1 || (n && fwrite(ids, sizeof *ids, n, f) != n)) {
        int e = errno;
        afile_abort(f);
        return ERR("%s: write failed: %s", path, strerror(e));
    }
    if (afile_commit(f) != 0) return ERR("%s: cannot write: %s", path, strerror(errno));
    return 0;
}

// ------------------------------------------------------------------ the sampler
static uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int sampler_init(sampler_t* s, size_t lo, size_t hi, int T, int64_t per_step, uint64_t seed, char* err,
                 size_t errlen) {
    memset(s, 0, sizeof *s);
    const size_t w = (size_t)T + 1;
    // T extra tokens leave room for the per-epoch shift in [0, T].
    const size_t need = (size_t)per_step * w + (size_t)T;
    if (T < 1 || per_step < 1 || hi < lo || hi - lo < need)
        return ERR("the training split has %zu tokens: a step of %lld windows of %zu tokens needs at least %zu "
                   "(HINT: a longer file, a smaller --batch/--accum/--context or fewer ranks)",
                   hi - lo, (long long)per_step, w, need);
    s->lo = lo;
    s->hi = hi;
    s->T = T;
    s->seed = seed;
    s->per_step = per_step;
    s->n_win = (hi - lo - (size_t)T) / w;
    if (s->n_win > UINT32_MAX) return ERR("%zu windows an epoch: more than the sampler's 32-bit order holds", s->n_win);
    s->order = malloc(s->n_win * sizeof *s->order);
    if (!s->order) DIE("out of host memory (%zu windows)", s->n_win);
    s->cached_epoch = -1;
    return 0;
}

void sampler_free(sampler_t* s) {
    free(s->order);
    s->order = NULL;
}

static void load_epoch(sampler_t* s, int64_t e) {
    if (e == s->cached_epoch) return;
    // Each epoch's order and shift are a pure function of (seed, epoch).
    uint64_t x = s->seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)e * 0xd1b54a32d192ed03ull;
    s->shift = (size_t)(splitmix64(&x) % (uint64_t)(s->T + 1));
    for (size_t i = 0; i < s->n_win; i++) s->order[i] = (uint32_t)i;
    for (size_t i = s->n_win - 1; i > 0; i--) {  // Fisher-Yates
        size_t j = (size_t)(splitmix64(&x) % (uint64_t)(i + 1));
        uint32_t tmp = s->order[i];
        s->order[i] = s->order[j];
        s->order[j] = tmp;
    }
    s->cached_epoch = e;
}

size_t sampler_window_start(sampler_t* s, int64_t c) {
    const int64_t e = c / (int64_t)s->n_win;
    load_epoch(s, e);
    return s->lo + s->shift + (size_t)s->order[c % (int64_t)s->n_win] * ((size_t)s->T + 1);
}

void sampler_fill(sampler_t* s, const tokens_t* t, int64_t row0, int rows, int32_t* inputs, int32_t* targets) {
    if (row0 < 0 || row0 + rows > s->per_step) DIE("sampler_fill: rows [%lld, %lld) outside a step's %lld", (long long)row0, (long long)(row0 + rows), (long long)s->per_step);
    for (int b = 0; b < rows; b++) {
        const size_t p = sampler_window_start(s, s->counter + row0 + b);
        for (int i = 0; i < s->T; i++) {
            inputs[(size_t)b * s->T + i] = tokens_at(t, p + i);
            targets[(size_t)b * s->T + i] = tokens_at(t, p + i + 1);
        }
    }
}

void sampler_advance(sampler_t* s) {
    s->counter += s->per_step;
    const int64_t nw = (int64_t)s->n_win;
    if (s->counter % nw + s->per_step > nw) s->counter = (s->counter / nw + 1) * nw;
}
