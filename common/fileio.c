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

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
