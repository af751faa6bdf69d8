// tokenize: byte-level token files (vocab 256) from any text, for people without a tokenizer.
//
//   build/11_train/tokenize --in /usr/share/common-licenses --out results/09/licenses.bin
//   build/11_train/tokenize --in a.txt,b.txt --out corpus.bin
//
// --in is a comma list of files and directories (a directory: every regular file in it, sorted
// by name, symbolic links that point to a file already read skipped, so a corpus has no
// duplicated text). The output is llm.c's .bin, version 1 (uint16 ids = the bytes), written
// atomically; train reads it by memory mapping (common/tokens.h).
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/tokens.h"

typedef struct {
    uint16_t* ids;
    size_t n, cap;
    dev_t dev[512];
    ino_t ino[512];  // files read (by inode: two names of one file are read once)
    int nfiles;
} corpus_t;

static void add_file(corpus_t* c, const char* path, const struct stat* st) {
    for (int i = 0; i < c->nfiles; i++)
        if (c->dev[i] == st->st_dev && c->ino[i] == st->st_ino) return;
    if (c->nfiles == 512) fail("--in: more than 512 files");
    c->dev[c->nfiles] = st->st_dev;
    c->ino[c->nfiles++] = st->st_ino;
    FILE* f = fopen(path, "rb");
    if (!f) fail("--in: cannot open %s: %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        if (c->n + k > c->cap) {
            c->cap = (c->n + k) * 2;
            c->ids = realloc(c->ids, c->cap * sizeof *c->ids);
            if (!c->ids) DIE("out of host memory (%zu tokens)", c->cap);
        }
        for (size_t i = 0; i < k; i++) c->ids[c->n++] = buf[i];
    }
    if (ferror(f)) fail("--in: cannot read %s: %s", path, strerror(errno));
    fclose(f);
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static void add_path(corpus_t* c, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) fail("--in: %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) { add_file(c, path, &st); return; }
    if (!S_ISDIR(st.st_mode)) fail("--in: %s is neither a file nor a directory", path);
    DIR* d = opendir(path);
    if (!d) fail("--in: cannot list %s: %s", path, strerror(errno));
    char* names[512];
    int n = 0;
    for (struct dirent* e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == 512) fail("--in: %s holds more than 512 entries", path);
        names[n] = strdup(e->d_name);
        if (!names[n++]) DIE("out of host memory");
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);  // readdir's order is the file system's
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) add_file(c, p, &st);
        free(names[i]);
    }
}

int main(int argc, char** argv) {
    const char* in = NULL;
    const char* out = NULL;
    cli_opt_t opts[] = {
        {"in", CLI_STR, &in, NULL, "comma list of text files and directories", NULL},
        {"out", CLI_STR, &out, NULL, "the token file to write (llm.c .bin, uint16 byte ids)", NULL},
    };
    cli_parse(argc, argv, "Byte-level token file (vocab 256) from text files.", opts, CLI_COUNT(opts));
    corpus_t c = {0};
    char buf[4096], err[1024];
    if (list_check_items("in", in, err, sizeof err) != 0) fail("%s", err);
    if (strlen(in) >= sizeof buf) fail("--in: longer than %zu characters", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", in);
    for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) add_path(&c, tok);
    if (c.n == 0) fail("--in: %s holds no text", in);
    if (tokens_write_bin(out, c.ids, c.n, err, sizeof err) != 0) fail("%s", err);
    printf("%s: %zu tokens (bytes) from %d files, vocab 256\n", out, c.n, c.nfiles);
    free(c.ids);
    return 0;
}
