// Atomic output files and mkdir -p.
//
// Why: a benchmark or a test that dies half-way (a CUDA error, a bad flag, Ctrl-C after the
// atexit handlers run) must never leave a results/x.csv or a .npy that looks complete but is
// cut short. Every output goes to "path.tmp.PID" first and is renamed over `path` only once it
// was written, flushed and closed without error; rename() within one directory is atomic on
// POSIX file systems, so readers see either the old file or the whole new one.
//
// Temporaries still open at exit() are removed by an atexit handler (die() and fail() call
// exit(), so they are covered). A process killed by a signal or by abort() skips atexit and
// can leave a "*.tmp.PID" file behind -- never a half-written `path`.
#include "common/fileio.h"
#include "common/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// One open temporary: the stream, its temporary name and the final name.
typedef struct afile_entry {
    FILE* f;
    char* tmp;
    char* path;
    pid_t owner;  // the process that opened it: a forked child that exits must not remove it
    struct afile_entry* next;
} afile_entry_t;

static afile_entry_t* g_open;  // every temporary not yet committed or aborted
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_atexit_done;

// Runs at exit(): remove what was never committed. Streams are not closed here (stdio
// flushes them itself at exit); only the names go away.
static void afile_cleanup_at_exit(void) {
    pthread_mutex_lock(&g_lock);
    pid_t self = getpid();
    for (afile_entry_t* e = g_open; e; e = e->next)
        if (e->owner == self) unlink(e->tmp);
    pthread_mutex_unlock(&g_lock);
}

static char* dup_str(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

// Detach the entry of `f` from the list; NULL if `f` is not one of ours.
static afile_entry_t* take_entry(FILE* f) {
    pthread_mutex_lock(&g_lock);
    afile_entry_t** pp = &g_open;
    while (*pp && (*pp)->f != f) pp = &(*pp)->next;
    afile_entry_t* e = *pp;
    if (e) *pp = e->next;
    pthread_mutex_unlock(&g_lock);
    return e;
}

static int is_open_tmp(const char* tmp) {
    int found = 0;
    pthread_mutex_lock(&g_lock);
    for (afile_entry_t* e = g_open; e && !found; e = e->next) found = strcmp(e->tmp, tmp) == 0;
    pthread_mutex_unlock(&g_lock);
    return found;
}

static void free_entry(afile_entry_t* e) {
    free(e->tmp);
    free(e->path);
    free(e);
}

FILE* afile_open(const char* path) {
    if (!path || !*path) {
        errno = EINVAL;
        return NULL;
    }
    size_t n = strlen(path) + 32;
    afile_entry_t* e = calloc(1, sizeof *e);
    char* tmp = malloc(n);
    char* final = dup_str(path);
    if (!e || !tmp || !final) {
        free(e), free(tmp), free(final);
        errno = ENOMEM;
        return NULL;
    }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());

    // O_EXCL: two afile_open() of the same path in one process must not share a temporary.
    // A leftover with our PID from an earlier, killed process of the same PID is stale: replace it.
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
        if (is_open_tmp(tmp)) {
            errno = EBUSY;
        } else if (unlink(tmp) == 0) {
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        }
    }
    FILE* f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int saved = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(e), free(tmp), free(final);
        errno = saved;
        return NULL;
    }
    e->f = f;
    e->tmp = tmp;
    e->path = final;
    e->owner = getpid();
    pthread_mutex_lock(&g_lock);
    if (!g_atexit_done) {
        atexit(afile_cleanup_at_exit);
        g_atexit_done = 1;
    }
    e->next = g_open;
    g_open = e;
    pthread_mutex_unlock(&g_lock);
    return f;
}

int afile_commit(FILE* f) {
    afile_entry_t* e = f ? take_entry(f) : NULL;
    if (!e) {
        errno = EINVAL;  // not a stream from afile_open (or already committed)
        return -1;
    }
    int ok = fflush(f) == 0 && !ferror(f);
    // fsync so that a crash of the machine right after the rename cannot expose an empty file;
    // EINVAL/EROFS mean the target cannot sync (a pipe, a special file system): not an error.
    if (ok && fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS) ok = 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(e->tmp, e->path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) unlink(e->tmp);
    free_entry(e);
    errno = saved;
    return ok ? 0 : -1;
}

void afile_abort(FILE* f) {
    afile_entry_t* e = f ? take_entry(f) : NULL;
    if (!e) return;
    fclose(f);
    unlink(e->tmp);
    free_entry(e);
}

// Create `dir` and every missing parent. An existing directory is success; an existing
// non-directory is ENOTDIR.
int mkdir_p(const char* dir) {
    if (!dir || !*dir) return 0;
    size_t n = strlen(dir);
    char* p = dup_str(dir);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    int rc = 0;
    // Walk every '/' boundary (skipping a leading one), then the whole path.
    for (size_t i = 1; i <= n && rc == 0; i++) {
        if (i < n && p[i] != '/') continue;
        if (p[i - 1] == '/') continue;  // "a//b": nothing new to create
        char saved = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0) {
            int err = errno;
            struct stat st;
            if (err != EEXIST) {
                rc = -1;
            } else if (stat(p, &st) != 0) {
                rc = -1;
            } else if (!S_ISDIR(st.st_mode)) {
                errno = ENOTDIR;
                rc = -1;
            }
            if (rc != 0 && err != EEXIST) errno = err;
        }
        p[i] = saved;
    }
    int saved_errno = errno;
    free(p);
    errno = saved_errno;
    return rc;
}

// Create the directory that will hold `path` ("results/a/x.csv" -> "results/a").
int mkdir_parent(const char* path) {
    if (!path) return 0;
    const char* slash = strrchr(path, '/');
    if (!slash || slash == path) return 0;  // current directory or "/": nothing to create
    size_t n = (size_t)(slash - path);
    char* d = malloc(n + 1);
    if (!d) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(d, path, n);
    d[n] = '\0';
    int rc = mkdir_p(d);
    int saved = errno;
    free(d);
    errno = saved;
    return rc;
}

// ---------------------------------------------------------------- checks before a run


// "a/b/c" -> "a/b", "a" -> ".", "/a" -> "/" (in place).
static void strip_last(char* p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char* slash = strrchr(p, '/');
    if (!slash) strcpy(p, ".");
    else if (slash == p) p[1] = '\0';
    else *slash = '\0';
}

int dir_check_writable(const char* dir, char* err, size_t errlen) {
    if (!dir || !*dir) return set_err(err, errlen, "the directory name is empty");
    size_t n = strlen(dir);
    char* p = malloc(n + 2);
    char* probe = malloc(n + 32);
    if (!p || !probe) {
        free(p), free(probe);
        return set_err(err, errlen, "out of memory");
    }
    memcpy(p, dir, n + 1);
    int rc = 0;
    for (;;) {
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) {
                rc = set_err(err, errlen, "%s is not a directory", p);
            } else {
                // access() would not do: root passes it on a read-only or pseudo file system.
                snprintf(probe, n + 32, "%s/.wcheck.XXXXXX", p);
                if (!mkdtemp(probe)) rc = set_err(err, errlen, "cannot create files in %s: %s", p, strerror(errno));
                else rmdir(probe);
            }
            break;
        }
        if (errno != ENOENT && errno != ENOTDIR) {
            rc = set_err(err, errlen, "%s: %s", p, strerror(errno));
            break;
        }
        if (strcmp(p, ".") == 0 || strcmp(p, "/") == 0) {  // cannot happen on a sane system
            rc = set_err(err, errlen, "%s: %s", p, strerror(errno));
            break;
        }
        strip_last(p);  // not there yet: would be created inside its parent
    }
    free(p), free(probe);
    return rc;
}

int file_check_writable(const char* path, int make_parents, char* err, size_t errlen) {
    if (!path || !*path) return set_err(err, errlen, "the file name is empty");
    const size_t n = strlen(path);
    if (path[n - 1] == '/') return set_err(err, errlen, "cannot write %s: it names a directory, not a file", path);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return set_err(err, errlen, "cannot write %s: %s", path, strerror(EISDIR));
        // Opened for writing without O_TRUNC or O_CREAT: nothing changes.
        const int fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return set_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        return 0;
    }
    if (errno != ENOENT) return set_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
    char* dir = dup_str(path);
    if (!dir) return set_err(err, errlen, "out of memory");
    strip_last(dir);
    int rc = 0;
    char why[1024];
    if (!make_parents && stat(dir, &st) != 0)
        rc = set_err(err, errlen, "cannot write %s: %s: %s", path, dir, strerror(errno));
    else if (!make_parents && !S_ISDIR(st.st_mode))
        rc = set_err(err, errlen, "cannot write %s: %s: %s", path, dir, strerror(ENOTDIR));
    else if (dir_check_writable(dir, why, sizeof why) != 0)
        rc = set_err(err, errlen, "cannot write %s: %s", path, why);
    free(dir);
    return rc;
}

int file_name_check(const char* name, char* err, size_t errlen) {
    if (!name || !*name) return set_err(err, errlen, "the file name is empty");
    if (strchr(name, '/')) return set_err(err, errlen, "'%s' is a path, not a file name (it contains '/')", name);
    if (name[0] == '.') return set_err(err, errlen, "'%s' starts with '.' (a hidden file)", name);
    return 0;
}

// ---------------------------------------------------------------- output sets

struct outset {
    char* dir;        // the final directory
    char* tmp;        // the private temporary directory
    int fresh;        // 1: `dir` did not exist; commit renames tmp to dir
    char** made;      // parent directories outset_open created, outermost first
    int nmade;
    char** names;     // file names asked for through outset_path
    char** paths;     // tmp/name of each
    int nnames;
    pid_t owner;
    struct outset* next;
};

static outset_t* g_sets;  // open sets, guarded by g_lock
static int g_sets_atexit;
static unsigned g_set_counter;

// Removes the temporary directory with whatever is in it (our files, afile temporaries), then
// the parents this set created, innermost first (rmdir: only while they are empty).
static void outset_remove_tmp(outset_t* s) {
    DIR* d = opendir(s->tmp);
    if (d) {
        struct dirent* e;
        size_t n = strlen(s->tmp) + 2;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char* f = malloc(n + strlen(e->d_name));
            if (!f) continue;
            snprintf(f, n + strlen(e->d_name), "%s/%s", s->tmp, e->d_name);
            unlink(f);
            free(f);
        }
        closedir(d);
    }
    rmdir(s->tmp);
}

static void outset_remove_made(outset_t* s) {
    for (int i = s->nmade - 1; i >= 0; i--) rmdir(s->made[i]);
}

static void outset_free(outset_t* s) {
    for (int i = 0; i < s->nmade; i++) free(s->made[i]);
    for (int i = 0; i < s->nnames; i++) free(s->names[i]), free(s->paths[i]);
    free(s->made), free(s->names), free(s->paths), free(s->dir), free(s->tmp);
    free(s);
}

static void outset_cleanup_at_exit(void) {
    pthread_mutex_lock(&g_lock);
    pid_t self = getpid();
    for (outset_t* s = g_sets; s; s = s->next)
        if (s->owner == self) {
            outset_remove_tmp(s);
            outset_remove_made(s);
        }
    pthread_mutex_unlock(&g_lock);
}

static void outset_detach(outset_t* s) {
    pthread_mutex_lock(&g_lock);
    outset_t** pp = &g_sets;
    while (*pp && *pp != s) pp = &(*pp)->next;
    if (*pp) *pp = s->next;
    pthread_mutex_unlock(&g_lock);
}

outset_t* outset_open(const char* dir, char* err, size_t errlen) {
    if (!dir || !*dir) {
        set_err(err, errlen, "the directory name is empty");
        return NULL;
    }
    outset_t* s = calloc(1, sizeof *s);
    if (!s || !(s->dir = dup_str(dir))) {
        free(s);
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    size_t n = strlen(s->dir);
    while (n > 1 && s->dir[n - 1] == '/') s->dir[--n] = '\0';
    s->owner = getpid();
    struct stat st;
    if (stat(s->dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            set_err(err, errlen, "%s exists and is not a directory", s->dir);
            outset_free(s);
            return NULL;
        }
    } else if (errno == ENOENT) {
        s->fresh = 1;
        // The missing parents, outermost first, so that a failed run can remove them again.
        char* p = dup_str(s->dir);
        char** chain = calloc(n + 1, sizeof *chain);
        int k = 0;
        if (!p || !chain) {
            free(p), free(chain);
            set_err(err, errlen, "out of memory");
            outset_free(s);
            return NULL;
        }
        for (;;) {
            strip_last(p);
            if (!strcmp(p, ".") || !strcmp(p, "/") || stat(p, &st) == 0) break;
            chain[k++] = dup_str(p);
        }
        free(p);
        s->made = calloc((size_t)k + 1, sizeof *s->made);
        for (int i = k - 1; i >= 0 && s->made; i--) {
            if (mkdir(chain[i], 0777) != 0 && errno != EEXIST) {
                set_err(err, errlen, "cannot create the directory %s: %s", chain[i], strerror(errno));
                for (int j = 0; j <= i; j++) free(chain[j]);
                free(chain);
                outset_remove_made(s);
                outset_free(s);
                return NULL;
            }
            s->made[s->nmade++] = chain[i];
        }
        free(chain);
    } else {
        set_err(err, errlen, "%s: %s", s->dir, strerror(errno));
        outset_free(s);
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    unsigned id = g_set_counter++;
    pthread_mutex_unlock(&g_lock);
    size_t tn = n + 48;
    s->tmp = malloc(tn);
    if (!s->tmp) {
        set_err(err, errlen, "out of memory");
        outset_remove_made(s);
        outset_free(s);
        return NULL;
    }
    // New: a sibling that becomes `dir` by one rename. Existing: a hidden directory inside it
    // (same file system as the targets, so that each rename is atomic).
    if (s->fresh) snprintf(s->tmp, tn, "%s.tmp.%ld.%u", s->dir, (long)s->owner, id);
    else snprintf(s->tmp, tn, "%s/.tmp.%ld.%u", s->dir, (long)s->owner, id);
    if (mkdir(s->tmp, 0777) != 0) {
        if (s->fresh) set_err(err, errlen, "cannot create the directory %s: %s", s->dir, strerror(errno));
        else set_err(err, errlen, "cannot create files in %s: %s", s->dir, strerror(errno));
        outset_remove_made(s);
        outset_free(s);
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    if (!g_sets_atexit) {
        atexit(outset_cleanup_at_exit);
        g_sets_atexit = 1;
    }
    s->next = g_sets;
    g_sets = s;
    pthread_mutex_unlock(&g_lock);
    return s;
}

const char* outset_path(outset_t* s, const char* name) {
    if (!s || file_name_check(name, NULL, 0) != 0) return NULL;
    for (int i = 0; i < s->nnames; i++)
        if (!strcmp(s->names[i], name)) return s->paths[i];
    char** nn = realloc(s->names, (size_t)(s->nnames + 1) * sizeof *nn);
    if (!nn) return NULL;
    s->names = nn;
    char** np = realloc(s->paths, (size_t)(s->nnames + 1) * sizeof *np);
    if (!np) return NULL;
    s->paths = np;
    size_t len = strlen(s->tmp) + strlen(name) + 2;
    char* path = malloc(len);
    char* nm = dup_str(name);
    if (!path || !nm) {
        free(path), free(nm);
        return NULL;
    }
    snprintf(path, len, "%s/%s", s->tmp, name);
    s->names[s->nnames] = nm;
    s->paths[s->nnames] = path;
    s->nnames++;
    return path;
}

void outset_abort(outset_t* s) {
    if (!s) return;
    outset_detach(s);
    outset_remove_tmp(s);
    outset_remove_made(s);
    outset_free(s);
}

// Moves every file of the set into the existing directory s->dir. Checks first that every file
// was written and that no target is a directory; a rename that still fails takes back the ones
// already moved, so that the set is never half there.
static int move_files(outset_t* s, char* err, size_t errlen) {
    int rc = 0, moved = 0;
    char** dst = calloc((size_t)s->nnames + 1, sizeof *dst);
    if (!dst) return set_err(err, errlen, "out of memory");
    for (int i = 0; i < s->nnames && rc == 0; i++) {
        size_t len = strlen(s->dir) + strlen(s->names[i]) + 2;
        if (!(dst[i] = malloc(len))) {
            rc = set_err(err, errlen, "out of memory");
            break;
        }
        snprintf(dst[i], len, "%s/%s", s->dir, s->names[i]);
        struct stat st;
        if (lstat(s->paths[i], &st) != 0 || !S_ISREG(st.st_mode))
            rc = set_err(err, errlen, "%s was not written", s->names[i]);
        else if (lstat(dst[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = set_err(err, errlen, "cannot replace %s: it is a directory", dst[i]);
    }
    for (int i = 0; i < s->nnames && rc == 0; i++, moved++)
        if (rename(s->paths[i], dst[i]) != 0)
            rc = set_err(err, errlen, "cannot move %s into place: %s", dst[i], strerror(errno));
    if (rc != 0)
        for (int i = 0; i < moved; i++) unlink(dst[i]);
    for (int i = 0; i < s->nnames; i++) free(dst[i]);
    free(dst);
    return rc;
}

int outset_commit(outset_t* s, char* err, size_t errlen) {
    if (!s) return set_err(err, errlen, "no output set");
    outset_detach(s);
    int rc = 0;
    if (s->fresh) {
        for (int i = 0; i < s->nnames && rc == 0; i++) {
            struct stat st;
            if (lstat(s->paths[i], &st) != 0 || !S_ISREG(st.st_mode))
                rc = set_err(err, errlen, "%s was not written", s->names[i]);
        }
        if (rc == 0 && rename(s->tmp, s->dir) != 0) {
            if (errno == EEXIST || errno == ENOTEMPTY) rc = move_files(s, err, errlen);  // made meanwhile
            else rc = set_err(err, errlen, "cannot move %s into place: %s", s->dir, strerror(errno));
        } else if (rc == 0) {
            s->nmade = 0;  // they hold the result now
        }
    } else {
        rc = move_files(s, err, errlen);
    }
    outset_remove_tmp(s);  // gone already after the rename of a fresh set
    if (rc != 0) outset_remove_made(s);
    outset_free(s);
    return rc;
}
