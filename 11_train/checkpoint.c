// Checkpoints: atomic sharded save, full check, newest-complete search, re-sharding readers
// (checkpoint.h).
#include "11_train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/timer.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)
#define MANIFEST_MAGIC "cs336-checkpoint 3"
#define MANIFEST_MAGIC_V1 "cs336-checkpoint 1"
#define MANIFEST_MAGIC_V2 "cs336-checkpoint 2"

// Bytes this process has read from checkpoint files (ckpt_bytes_read): the resume's line.
static uint64_t g_bytes_read;
uint64_t ckpt_bytes_read(void) { return g_bytes_read; }

uint64_t ckpt_fnv(uint64_t h, const void* p, size_t n) { return fnv1a(h, p, n); }

// ckpt_sum (checkpoint.h). K1, K2 odd (multiplication by them is a bijection mod 2^64): the
// golden ratio's and splitmix64's constants; each lane starts from its own seed.
#define SUM_K1 0x9E3779B97F4A7C15ull
#define SUM_K2 0xBF58476D1CE4E5B9ull
static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline void sum_stripe(uint64_t v[4], const unsigned char* p) {
    uint64_t w[4];
    memcpy(w, p, sizeof w);  // any alignment; the same value on every little-endian machine
    for (int i = 0; i < 4; i++) v[i] = rotl64(v[i] + w[i] * SUM_K1, 31) * SUM_K2;
}
void ckpt_sum_init(ckpt_sum_t* s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 4; i++) s->v[i] = (SUM_K2 * (uint64_t)(i + 1)) ^ 0x5851F42D4C957F2Dull;
}
void ckpt_sum_update(ckpt_sum_t* s, const void* p, size_t n) {
    const unsigned char* b = p;
    s->total += n;
    if (s->fill) {  // complete the stripe a previous call left
        const size_t k = n < 32 - s->fill ? n : 32 - s->fill;
        memcpy(s->buf + s->fill, b, k);
        s->fill += k, b += k, n -= k;
        if (s->fill < 32) return;
        sum_stripe(s->v, s->buf);
        s->fill = 0;
    }
    for (; n >= 32; b += 32, n -= 32) sum_stripe(s->v, b);
    memcpy(s->buf, b, n);
    s->fill = n;
}
uint64_t ckpt_sum_final(const ckpt_sum_t* s) {
    uint64_t h = s->total * SUM_K1;
    for (int i = 0; i < 4; i++) h = (h ^ rotl64(s->v[i], 7 + 13 * i)) * SUM_K2;
    for (size_t i = 0; i < s->fill; i++) h = (h ^ s->buf[i]) * 1099511628211ull;
    h = (h ^ (h >> 30)) * SUM_K2;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}
uint64_t ckpt_sum(const void* p, size_t n) {
    ckpt_sum_t s;
    ckpt_sum_init(&s);
    ckpt_sum_update(&s, p, n);
    return ckpt_sum_final(&s);
}

// ------------------------------------------------------------------ small file-system helpers
static int rm_one(const char* p, const struct stat* st, int flag, struct FTW* f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}
static int rm_rf(const char* path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
// A rename or a new entry is durable only once its directory is fsynced.
static int fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int r = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return r == 0 || errno == EINVAL ? 0 : -1;
}

// Writes the parts one after the other to path atomically (afile: temporary, fsync, rename) and
// returns the checksum of the whole file. Streamed: no copy of the parts is made (an XL
// optimizer shard is gigabytes). The seconds spent in the checksum are added to *t_sum (shown
// beside the disk's in the save's line).
static int write_parts(const char* path, int np, const void* const* part, const size_t* bytes, uint64_t* sum,
                       double* t_sum, char* err, size_t errlen) {
    FILE* f = afile_open(path);
    if (!f) return ERR("%s: cannot create: %s", path, strerror(errno));
    ckpt_sum_t h;
    ckpt_sum_init(&h);
    for (int k = 0; k < np; k++) {
        if (bytes[k] && fwrite(part[k], 1, bytes[k], f) != bytes[k]) {
            int e = errno;
            afile_abort(f);
            return ERR("%s: write failed: %s", path, strerror(e));
        }
        const double t0 = time_now_s();
        ckpt_sum_update(&h, part[k], bytes[k]);
        *t_sum += time_now_s() - t0;
    }
    if (afile_commit(f) != 0) return ERR("%s: cannot write (flush, fsync or rename failed): %s", path, strerror(errno));
    *sum = ckpt_sum_final(&h);
    return 0;
}
static int write_floats(const char* path, const float* a, size_t n, uint64_t* sum, double* t_sum, char* err,
                        size_t errlen) {
    const void* part[1] = {a};
    const size_t bytes[1] = {n * sizeof *a};
    return write_parts(path, 1, part, bytes, sum, t_sum, err, errlen);
}

// ------------------------------------------------------------------ manifest text
static void manifest_text(const ckpt_manifest_t* m, char* buf, size_t len) {
    size_t k = 0;
#define PUT(...) (k += (size_t)snprintf(buf + k, k < len ? len - k : 0, __VA_ARGS__))
    PUT("%s\n", MANIFEST_MAGIC);
    PUT("step %lld\nworld %d\nzero %d\ntotal %llu\npadded %llu\nglobal_batch %lld\n", (long long)m->step, m->world,
        m->zero, (unsigned long long)m->total, (unsigned long long)m->padded, (long long)m->global_batch);
    PUT("model T %d vocab %d d_model %d n_layers %d n_heads %d d_ff %d\n", m->T, m->vocab, m->d_model, m->n_layers,
        m->n_heads, m->d_ff);
    PUT("sampler seed %llu counter %lld\n", (unsigned long long)m->seed, (long long)m->sampler_counter);
    PUT("schedule lr %.17g min_lr %.17g warmup %lld steps %lld clip %.17g wd %.17g\n", m->lr, m->min_lr,
        (long long)m->warmup, (long long)m->steps, m->clip, m->wd);
    if (m->pp > 0) PUT("pipeline pp %d dp %d layout %s\n", m->pp, m->dp, m->layout);
    if (m->run_id) PUT("run %016llx\n", (unsigned long long)m->run_id);
    if (m->has_data)
        PUT("data bytes %llu mtime_ns %lld sum64 %016llx covers %s path %s\n", (unsigned long long)m->data.bytes,
            (long long)m->data.mtime_ns, (unsigned long long)m->data.sum,
            m->data.sampled ? "64x65536" : "whole", m->data.path);
    for (int i = 0; i < m->n_files; i++) {
        const ckpt_file_t* f = &m->files[i];
        PUT("file %s bytes %llu sum64 %016llx ranges %llu elems %llu\n", f->name, (unsigned long long)f->bytes,
            (unsigned long long)f->sum, (unsigned long long)f->n_ranges, (unsigned long long)f->elems);
    }
    const uint64_t h = ckpt_fnv(CKPT_FNV_INIT, buf, k);
    PUT("end fnv64 %016llx\n", (unsigned long long)h);
#undef PUT
    if (k >= len) DIE("manifest longer than %zu bytes", len);
}

static int manifest_parse(const char* text, ckpt_manifest_t* m, char* err, size_t errlen) {
    memset(m, 0, sizeof *m);
    const char* end = strstr(text, "end fnv64 ");
    if (strncmp(text, MANIFEST_MAGIC_V1 "\n", strlen(MANIFEST_MAGIC_V1) + 1) == 0)
        return ERR("manifest.txt: checkpoint format 1 (written before the trainer used stage 07's optimizer ranges); "
                   "this trainer reads format 2: resume it with the trainer that wrote it, or start over");
    if (strncmp(text, MANIFEST_MAGIC_V2 "\n", strlen(MANIFEST_MAGIC_V2) + 1) == 0)
        return ERR("manifest.txt: checkpoint format 2 (its files carry byte-wise FNV-1a checksums); this trainer reads "
                   "format 3 (ckpt_sum): resume it with the trainer that wrote it, or start over");
    if (strncmp(text, MANIFEST_MAGIC "\n", strlen(MANIFEST_MAGIC) + 1) != 0) return ERR("manifest.txt: not a checkpoint manifest");
    if (!end) return ERR("manifest.txt: no final checksum line (truncated)");
    unsigned long long want;
    if (sscanf(end, "end fnv64 %llx", &want) != 1) return ERR("manifest.txt: unreadable final checksum line");
    const uint64_t got = ckpt_fnv(CKPT_FNV_INIT, text, (size_t)(end - text));
    if (got != want) return ERR("manifest.txt: checksum %016llx, its last line says %016llx (damaged)", (unsigned long long)got, want);
    long long step, gb, ctr;
    unsigned long long total, padded, seed;
    const char* p = text + strlen(MANIFEST_MAGIC) + 1;
    int n = 0;
    if (sscanf(p, "step %lld\nworld %d\nzero %d\ntotal %llu\npadded %llu\nglobal_batch %lld\n%n", &step, &m->world, &m->zero,
               &total, &padded, &gb, &n) != 6)
        return ERR("manifest.txt: unreadable header");
    p += n;
    if (sscanf(p, "model T %d vocab %d d_model %d n_layers %d n_heads %d d_ff %d\n%n", &m->T, &m->vocab, &m->d_model,
               &m->n_layers, &m->n_heads, &m->d_ff, &n) != 6)
        return ERR("manifest.txt: unreadable model line");
    p += n;
    if (sscanf(p, "sampler seed %llu counter %lld\n%n", &seed, &ctr, &n) != 2) return ERR("manifest.txt: unreadable sampler line");
    p += n;
    long long wu, st;
    if (sscanf(p, "schedule lr %lf min_lr %lf warmup %lld steps %lld clip %lf wd %lf\n%n", &m->lr, &m->min_lr, &wu, &st,
               &m->clip, &m->wd, &n) != 6)
        return ERR("manifest.txt: unreadable schedule line");
    p += n;
    if (strncmp(p, "pipeline ", 9) == 0) {
        if (sscanf(p, "pipeline pp %d dp %d layout %199[^\n]\n%n", &m->pp, &m->dp, m->layout, &n) != 3 || m->pp < 1 || m->dp < 1)
            return ERR("manifest.txt: unreadable pipeline line");
        p += n;
    }
    // Optional lines (manifests written before them lack them): the run, the data.
    unsigned long long rid;
    if (strncmp(p, "run ", 4) == 0) {
        if (sscanf(p, "run %llx\n%n", &rid, &n) != 1 || rid == 0) return ERR("manifest.txt: unreadable run line");
        m->run_id = rid;
        p += n;
    }
    if (strncmp(p, "data ", 5) == 0) {
        unsigned long long db, ds;
        long long mt;
        char cov[16];
        if (sscanf(p, "data bytes %llu mtime_ns %lld sum64 %llx covers %15s path %511[^\n]\n%n", &db, &mt, &ds, cov,
                   m->data.path, &n) != 5 || (strcmp(cov, "whole") != 0 && strcmp(cov, "64x65536") != 0))
            return ERR("manifest.txt: unreadable data line");
        m->has_data = 1;
        m->data.bytes = db, m->data.mtime_ns = mt, m->data.sum = ds, m->data.sampled = strcmp(cov, "whole") != 0;
        p += n;
    }
    m->warmup = wu, m->steps = st;
    m->step = step;
    m->total = total;
    m->padded = padded;
    m->global_batch = gb;
    m->seed = seed;
    m->sampler_counter = ctr;
    while (p < end) {
        if (m->n_files == CKPT_MAX_FILES) return ERR("manifest.txt: more than %d files", CKPT_MAX_FILES);
        ckpt_file_t* f = &m->files[m->n_files];
        unsigned long long b, h, nr, el;
        if (sscanf(p, "file %31s bytes %llu sum64 %llx ranges %llu elems %llu\n%n", f->name, &b, &h, &nr, &el, &n) != 5)
            return ERR("manifest.txt: unreadable file line");
        if (strchr(f->name, '/') || f->name[0] == '.') return ERR("manifest.txt: bad file name '%s'", f->name);
        if (strncmp(f->name, "optim_r", 7) == 0 && b != 8 + 16 * nr + 8 * el)
            return ERR("manifest.txt: %s: %llu bytes cannot hold %llu ranges and %llu elements", f->name, b, nr, el);
        f->bytes = b, f->sum = h, f->n_ranges = nr, f->elems = el;
        m->n_files++;
        p += n;
    }
    if (m->world < 1 || m->step < 0 || m->total == 0) return ERR("manifest.txt: impossible values (world %d, step %lld)", m->world, step);
    return 0;
}

// ------------------------------------------------------------------ save
static void check_io(comm_t* c, int rc, const char* err) {
    // Agree first, so that every rank stops at the same place when one rank's disk failed.
    long long bad = rc != 0;
    comm_host_allreduce_i64(c, &bad, 1, COMM_MAX);
    if (rc != 0) comm_fatal(c, EXIT_FAILURE_RT, "checkpoint: %s", err);
    if (bad) comm_fatal(c, EXIT_FAILURE_RT, "checkpoint: another rank could not write its shard");
}

static int is_step_dir(const char* name, long long* step) {
    int n = 0;
    return sscanf(name, "step_%lld%n", step, &n) == 1 && name[n] == 0 && *step >= 0;
}

// Step numbers of DIR's step_* directories, newest first. Returns the count (at most max).
static int list_steps(const char* dir, long long* steps, int max) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent* e; (e = readdir(d));) {
        long long s;
        if (is_step_dir(e->d_name, &s) && n < max) steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++)  // insertion sort, descending
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            long long t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

static int read_all(const char* path, char** buf, size_t* len, char* err, size_t errlen);

// Is `path` a complete checkpoint of run `run` (its manifest whole, of that run, every file
// present at its size)? The files' checksums are not read (a retention pass must stay cheap);
// these reads are not counted in ckpt_bytes_read.
static int same_run_complete(const char* path, uint64_t run) {
    if (!run) return 0;
    const uint64_t saved = g_bytes_read;
    char p[1100], e[512];
    char* text;
    size_t len;
    snprintf(p, sizeof p, "%s/manifest.txt", path);
    int ok = read_all(p, &text, &len, e, sizeof e) == 0;
    g_bytes_read = saved;
    if (!ok) return 0;
    static ckpt_manifest_t mf;  // (large: CKPT_MAX_FILES entries; rank 0 only, one at a time)
    ok = manifest_parse(text, &mf, e, sizeof e) == 0 && mf.run_id == run;
    free(text);
    for (int i = 0; ok && i < mf.n_files; i++) {
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", path, mf.files[i].name);
        ok = stat(p, &st) == 0 && (uint64_t)st.st_size == mf.files[i].bytes;
    }
    return ok;
}

void ckpt_save(comm_t* c, const char* dir, ckpt_manifest_t* meta, const float* params,
               const ckpt_range_t* ranges, int n_ranges, const float* m, const float* v, int has_state,
               const float* hist, int keep, char* out, size_t outlen, ckpt_save_timing_t* tm) {
    const int r = c->rank, W = c->world;
    const double t_start = time_now_s();
    ckpt_check_launcher("before writing a checkpoint");
    double t_sum = 0;
    uint64_t written = 0;
    char tmp[1024], fin[1024], p[1100], err[4096] = "";
    const size_t errlen = sizeof err;  // for ERR()
    snprintf(tmp, sizeof tmp, "%s/.tmp.step_%09lld", dir, (long long)meta->step);
    snprintf(fin, sizeof fin, "%s/step_%09lld", dir, (long long)meta->step);
    snprintf(out, outlen, "%s", fin);
    int rc = 0;
    if (r == 0) {
        if (mkdir_p(dir) != 0) rc = ERR("cannot create %s: %s", dir, strerror(errno));
        else if (rm_rf(tmp) != 0 || mkdir_p(tmp) != 0) rc = ERR("cannot create %s: %s", tmp, strerror(errno));
    }
    check_io(c, rc, err);

    // Each rank's files, and their records: [bytes, sum, n_ranges, elems] per rank, gathered by
    // a sum over ranks of arrays that are zero except in the rank's own row (exact for any bits).
    long long* rec = calloc((size_t)W * 4, sizeof *rec);
    if (!rec) DIE("out of host memory");
    if (has_state) {
        snprintf(p, sizeof p, "%s/optim_r%d.bin", tmp, r);
        uint64_t nr = (uint64_t)n_ranges, el = 0;
        for (int k = 0; k < n_ranges; k++) el += ranges[k].numel;
        const void* part[4] = {&nr, ranges, m, v};
        const size_t bytes[4] = {8, (size_t)n_ranges * sizeof *ranges, el * sizeof(float), el * sizeof(float)};
        uint64_t h = 0;
        rc = write_parts(p, 4, part, bytes, &h, &t_sum, err, sizeof err);
        written += 8 + 16 * nr + 8 * el;
        rec[4 * r + 0] = (long long)(8 + 16 * nr + 8 * el);
        rec[4 * r + 1] = (long long)h;
        rec[4 * r + 2] = (long long)nr;
        rec[4 * r + 3] = (long long)el;
        rec[4 * r + 0] |= 1ll << 62;  // marks "this rank wrote a file" (a file may hold no range)
    }
    check_io(c, rc, err);
    comm_host_allreduce_i64(c, rec, 4 * W, COMM_SUM);

    if (r == 0) {
        meta->n_files = 0;
        uint64_t h = 0;
        snprintf(p, sizeof p, "%s/params.bin", tmp);
        rc = write_floats(p, params, meta->total, &h, &t_sum, err, sizeof err);
        written += meta->total * sizeof(float);
        meta->files[meta->n_files++] = (ckpt_file_t){"params.bin", meta->total * sizeof(float), h, 0, 0};
        if (rc == 0) {
            snprintf(p, sizeof p, "%s/history.bin", tmp);
            rc = write_floats(p, hist, (size_t)meta->step * CKPT_HIST, &h, &t_sum, err, sizeof err);
            written += (size_t)meta->step * CKPT_HIST * sizeof(float);
            meta->files[meta->n_files++] = (ckpt_file_t){"history.bin", (uint64_t)meta->step * CKPT_HIST * sizeof(float), h, 0, 0};
        }
        for (int k = 0; k < W && rc == 0; k++) {
            if (!(rec[4 * k] >> 62)) continue;
            if (meta->n_files == CKPT_MAX_FILES) DIE("more than %d checkpoint files", CKPT_MAX_FILES);
            ckpt_file_t* f = &meta->files[meta->n_files++];
            snprintf(f->name, sizeof f->name, "optim_r%d.bin", k);
            f->bytes = (uint64_t)(rec[4 * k] & ~(1ll << 62));
            f->sum = (uint64_t)rec[4 * k + 1];
            f->n_ranges = (uint64_t)rec[4 * k + 2];
            f->elems = (uint64_t)rec[4 * k + 3];
        }
        if (rc == 0) {
            static char text[64 * CKPT_MAX_FILES + 1024];
            manifest_text(meta, text, sizeof text);
            snprintf(p, sizeof p, "%s/manifest.txt", tmp);
            FILE* f = afile_open(p);
            if (!f) rc = ERR("%s: cannot create: %s", p, strerror(errno));
            else if (fputs(text, f) < 0) { afile_abort(f); rc = ERR("%s: write failed", p); }
            else if (afile_commit(f) != 0) rc = ERR("%s: cannot write: %s", p, strerror(errno));
        }
        // The commit: the directory becomes step_N in one rename. A checkpoint of the same step
        // already there (a run resumed at its last step) is moved aside first and removed after.
        char old[1100];
        snprintf(old, sizeof old, "%s/.old.step_%09lld", dir, (long long)meta->step);
        if (rc == 0 && fsync_dir(tmp) != 0) rc = ERR("cannot fsync %s: %s", tmp, strerror(errno));
        if (rc == 0) {
            struct stat st;
            int had = stat(fin, &st) == 0;
            // One that is not a complete checkpoint of this run (refused, or another run's) is
            // never removed: it is moved to step_N.kept[.K] (no longer a step_* name) and kept.
            if (had && !same_run_complete(fin, meta->run_id)) {
                char kept[1200];
                for (int k = 0; k < 1000; k++) {
                    if (k) snprintf(kept, sizeof kept, "%s.kept.%d", fin, k);
                    else snprintf(kept, sizeof kept, "%s.kept", fin);
                    if (lstat(kept, &st) != 0) break;
                }
                ckpt_check_launcher("before moving a checkpoint aside");
                if (rename(fin, kept) != 0) rc = ERR("cannot move %s aside: %s", fin, strerror(errno));
                else fprintf(stderr, "checkpoint: note: %s was not a complete checkpoint of this run; moved to %s\n", fin, kept);
                had = 0;
            }
            ckpt_check_launcher("before committing a checkpoint");
            if (rc == 0) {
                if (had && (rm_rf(old) != 0 || rename(fin, old) != 0)) rc = ERR("cannot move %s aside: %s", fin, strerror(errno));
                else if (rename(tmp, fin) != 0) rc = ERR("cannot rename %s to %s: %s", tmp, fin, strerror(errno));
                else if (fsync_dir(dir) != 0) rc = ERR("cannot fsync %s: %s", dir, strerror(errno));
                else if (had) rm_rf(old);
            }
        }
        // Only now, with the new checkpoint complete and durable: drop the oldest beyond `keep`,
        // and the .tmp directories that jobs killed while saving left behind.
        if (rc == 0) {
            DIR* dd = opendir(dir);
            for (struct dirent* e; dd && (e = readdir(dd));)
                if (strncmp(e->d_name, ".tmp.step_", 10) == 0) {
                    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                    if (rm_rf(p) != 0) fprintf(stderr, "checkpoint: warning: cannot remove %s: %s\n", p, strerror(errno));
                }
            if (dd) closedir(dd);
            // Retention: the newest `keep` complete checkpoints of this run, counting the one
            // just written; only older ones of this run are removed. Newer ones (a damaged one
            // the resume refused), incomplete ones and other runs' are never touched.
            long long steps[4096];
            int n = list_steps(dir, steps, 4096), have = 1;
            for (int i = 0; i < n; i++) {
                if (steps[i] >= meta->step) continue;
                snprintf(p, sizeof p, "%s/step_%09lld", dir, steps[i]);
                if (!same_run_complete(p, meta->run_id)) continue;
                if (have < keep) { have++; continue; }
                ckpt_check_launcher("before removing an old checkpoint");
                if (rm_rf(p) != 0) fprintf(stderr, "checkpoint: warning: cannot remove the old %s: %s\n", p, strerror(errno));
            }
        }
    }
    free(rec);
    check_io(c, rc, err);
    if (tm) {
        tm->checksum = t_sum;
        tm->write = time_now_s() - t_start - t_sum;
        tm->bytes = written;
    }
}

// ------------------------------------------------------------------ check and find
static int read_all(const char* path, char** buf, size_t* len, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) return ERR("%s: missing (%s)", strrchr(path, '/') + 1, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return ERR("%s: cannot seek", path); }
    long n = ftell(f);
    if (n < 0) { fclose(f); return ERR("%s: cannot tell its size", path); }
    rewind(f);
    *buf = malloc((size_t)n + 1);
    if (!*buf) DIE("out of host memory (%ld bytes)", n);
    size_t got = fread(*buf, 1, (size_t)n, f);
    fclose(f);
    g_bytes_read += got;
    if (got != (size_t)n) { free(*buf); return ERR("%s: read failed", path); }
    (*buf)[n] = 0;
    *len = (size_t)n;
    return 0;
}

int ckpt_validate(const char* path, ckpt_manifest_t* out, char* err, size_t errlen) {
    char p[1100], e2[600];
    char* text;
    size_t len;
    snprintf(p, sizeof p, "%s/manifest.txt", path);
    if (read_all(p, &text, &len, err, errlen) != 0) return -1;
    int rc = manifest_parse(text, out, err, errlen);
    free(text);
    if (rc != 0) return -1;
    (void)e2;
    static char chunk[1 << 22];  // the files are read in pieces: an XL shard is gigabytes
    for (int i = 0; i < out->n_files; i++) {
        const ckpt_file_t* f = &out->files[i];
        snprintf(p, sizeof p, "%s/%s", path, f->name);
        FILE* fp = fopen(p, "rb");
        if (!fp) return ERR("%s: missing (%s)", f->name, strerror(errno));
        ckpt_sum_t hs;
        ckpt_sum_init(&hs);
        len = 0;
        for (size_t k; (k = fread(chunk, 1, sizeof chunk, fp)) > 0;) ckpt_sum_update(&hs, chunk, k), len += k;
        const uint64_t h = ckpt_sum_final(&hs);
        g_bytes_read += len;
        const int bad = ferror(fp);
        fclose(fp);
        if (bad) return ERR("%s: read failed", f->name);
        if (len != f->bytes)
            return ERR("%s: %zu bytes, the manifest says %llu (%s)", f->name, len, (unsigned long long)f->bytes,
                       len < f->bytes ? "truncated" : "too long");
        if (h != f->sum)
            return ERR("%s: checksum %016llx, the manifest says %016llx (damaged)", f->name, (unsigned long long)h,
                       (unsigned long long)f->sum);
    }
    return 0;
}

int ckpt_find(const char* dir, ckpt_manifest_t* out, char* path, size_t pathlen, char* err, size_t errlen) {
    long long steps[4096];
    int n = list_steps(dir, steps, 4096);
    if (n == 0) return ERR("no checkpoint in %s", dir);
    for (int i = 0; i < n; i++) {
        char e[1024];
        snprintf(path, pathlen, "%s/step_%09lld", dir, steps[i]);
        if (ckpt_validate(path, out, e, sizeof e) == 0) return 0;
        fprintf(stderr, "checkpoint %s: refused: %s%s\n", path, e, i + 1 < n ? "; trying the one before" : "");
    }
    return ERR("none of the %d checkpoints in %s is complete (reasons above)", n, dir);
}

// ------------------------------------------------------------------ readers
static int read_range(const char* path, size_t off_bytes, void* dst, size_t bytes, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ERR("%s: cannot open: %s", path, strerror(errno));
    size_t done = 0;
    while (done < bytes) {
        ssize_t k = pread(fd, (char*)dst + done, bytes - done, (off_t)(off_bytes + done));
        if (k <= 0) {
            int e = errno;
            close(fd);
            return ERR("%s: %s", path, k == 0 ? "shorter than its manifest says" : strerror(e));
        }
        done += (size_t)k;
    }
    close(fd);
    g_bytes_read += done;
    return 0;
}

int ckpt_read_params(const char* path, const ckpt_manifest_t* mf, float* params, char* err, size_t errlen) {
    char p[1100];
    snprintf(p, sizeof p, "%s/params.bin", path);
    return read_range(p, 0, params, mf->total * sizeof(float), err, errlen);
}

int ckpt_read_history(const char* path, const ckpt_manifest_t* mf, float* hist, char* err, size_t errlen) {
    char p[1100];
    snprintf(p, sizeof p, "%s/history.bin", path);
    return read_range(p, 0, hist, (size_t)mf->step * CKPT_HIST * sizeof(float), err, errlen);
}

int ckpt_read_state(const char* path, const ckpt_manifest_t* mf, const ckpt_range_t* ranges, int n_ranges,
                    float* m, float* v, char* err, size_t errlen) {
    size_t need = 0, covered = 0;
    for (int k = 0; k < n_ranges; k++) need += ranges[k].numel;
    for (int i = 0; i < mf->n_files; i++) {
        const ckpt_file_t* f = &mf->files[i];
        if (strncmp(f->name, "optim_r", 7) != 0 || f->n_ranges == 0) continue;
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", path, f->name);
        ckpt_range_t* fr = malloc(f->n_ranges * sizeof *fr);
        if (!fr) DIE("out of host memory");
        if (read_range(p, 8, fr, f->n_ranges * sizeof *fr, err, errlen) != 0) { free(fr); return -1; }
        const size_t head = 8 + 16 * f->n_ranges;  // then m[elems], then v[elems]
        // Every overlap of one of my runs with one of the file's: both are packed in range order.
        size_t fs = 0;
        for (uint64_t j = 0; j < f->n_ranges; fs += fr[j].numel, j++) {
            size_t ms = 0;
            for (int k = 0; k < n_ranges; ms += ranges[k].numel, k++) {
                const uint64_t a = ranges[k].off > fr[j].off ? ranges[k].off : fr[j].off;
                const uint64_t e1 = ranges[k].off + ranges[k].numel, e2 = fr[j].off + fr[j].numel;
                const uint64_t b = e1 < e2 ? e1 : e2;
                if (a >= b) continue;
                const size_t src = fs + (a - fr[j].off), dst = ms + (a - ranges[k].off), n = b - a;
                if (read_range(p, head + src * sizeof(float), m + dst, n * sizeof(float), err, errlen) != 0 ||
                    read_range(p, head + (f->elems + src) * sizeof(float), v + dst, n * sizeof(float), err, errlen) != 0) {
                    free(fr);
                    return -1;
                }
                covered += n;  // the files never overlap (one owner per element), so this counts exactly
            }
        }
        free(fr);
    }
    if (covered != need)
        return ERR("%s: the optimizer shards hold %zu of the %zu elements this rank's optimizer needs", path, covered, need);
    return 0;
}

// ------------------------------------------------------------------ the directory, the run, the launcher, the data
int ckpt_count(const char* dir, long long* newest) {
    long long steps[4096];
    const int n = list_steps(dir, steps, 4096);
    *newest = n ? steps[0] : -1;
    return n;
}

uint64_t ckpt_new_run_id(void) {
    uint64_t x = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &x, sizeof x) != (ssize_t)sizeof x) x = 0;
        close(fd);
    }
    if (!x) {  // no /dev/urandom: the time and the pid, mixed
        x = (uint64_t)(time_now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
        x = (x ^ (x >> 30)) * SUM_K2;
        x ^= x >> 31;
    }
    return x ? x : 1;
}

// Is process `pid` alive on this host? (EPERM: alive, owned by another user.)
static int pid_alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

int ckpt_lock(const char* dir, double wait_s, char* note, size_t notelen, char* err, size_t errlen) {
    char path[1100], host[256] = "", text[512];
    note[0] = 0;
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    if (mkdir_p(dir) != 0) return ERR("cannot create %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/lock", dir);
    const double t0 = time_now_s();
    for (;;) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return ERR("cannot open %s: %s", path, strerror(errno));
        ssize_t k = pread(fd, text, sizeof text - 1, 0);
        text[k > 0 ? k : 0] = 0;
        char* nl = strchr(text, '\n');
        if (nl) *nl = 0;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            close(fd);
            if (e != EWOULDBLOCK) return ERR("cannot lock %s: %s", path, strerror(e));
            // Held. A leftover rank of a job whose launcher is gone ends within a step: wait.
            long pid = 0, launcher = 0;
            char h[256] = "";
            const int got = sscanf(text, "pid %ld host %255s launcher %ld", &pid, h, &launcher);
            const int orphan = got == 3 && strcmp(h, host) == 0 && launcher > 1 && !pid_alive(launcher);
            if (orphan && time_now_s() - t0 < wait_s) {
                usleep(100 * 1000);
                continue;
            }
            return ERR("%s is in use by another job (%s; lock file %s)%s", dir, *text ? text : "its holder wrote nothing yet", path,
                       orphan ? ", a leftover of a job whose launcher is gone that did not end in time" : "");
        }
        // Locked. The same file still at that name? (A job ending may have replaced it.)
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd);
            continue;
        }
        if (*text) snprintf(note, notelen, "checkpoint: note: taking over the lock of a job that ended without releasing it (%s)", text);
        const time_t now = time(NULL);
        char when[64];
        struct tm tmv;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tmv));
        const char* ws = getenv("OMPI_COMM_WORLD_SIZE");
        const int n = snprintf(text, sizeof text, "pid %ld host %s launcher %ld start %lld (%s)\n", (long)getpid(), host,
                               ws ? (long)getppid() : 0L, (long long)now, when);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n || fsync(fd) != 0) {
            const int e = errno;
            close(fd);
            return ERR("cannot write %s: %s", path, strerror(e));
        }
        return fd;
    }
}

void ckpt_unlock(int fd) {
    if (fd < 0) return;
    if (ftruncate(fd, 0) != 0) { /* a lock file left full only costs the next job a note */ }
    close(fd);  // releases the flock
}

static long g_launcher;  // the parent recorded under mpirun (0: not watched)
void ckpt_watch_launcher(void) {
    g_launcher = getenv("OMPI_COMM_WORLD_SIZE") ? (long)getppid() : 0;
}
void ckpt_check_launcher(const char* when) {
    if (!g_launcher || (long)getppid() == g_launcher) return;
    // Orphaned: mpirun (or its daemon) is gone, so the job is over. One line if stderr still
    // goes somewhere, and out at once: no checkpoint is written or removed after this.
    char line[300];
    const int n = snprintf(line, sizeof line, "%s: error: the launcher (pid %ld) is gone; this rank (pid %ld) ends %s\n",
                           progname(), g_launcher, (long)getpid(), when);
    if (write(STDERR_FILENO, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1)) < 0) { /* nowhere to say it */ }
    _exit(EXIT_FAILURE_RT);
}

int ckpt_data_identity(const char* path, ckpt_data_t* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ERR("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); return ERR("%s: cannot stat: %s", path, strerror(e)); }
    out->bytes = (uint64_t)st.st_size;
    out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    const uint64_t whole = (uint64_t)CKPT_DATA_PIECES * CKPT_DATA_PIECE;
    out->sampled = out->bytes > whole;
    static unsigned char buf[CKPT_DATA_PIECE];
    ckpt_sum_t h;
    ckpt_sum_init(&h);
    ckpt_sum_update(&h, &out->bytes, sizeof out->bytes);
    const int pieces = out->sampled ? CKPT_DATA_PIECES : 1;
    for (int i = 0; i < pieces; i++) {
        const uint64_t len = out->sampled ? CKPT_DATA_PIECE : out->bytes;
        const uint64_t off = out->sampled ? (out->bytes - CKPT_DATA_PIECE) * (uint64_t)i / (CKPT_DATA_PIECES - 1) : 0;
        for (uint64_t done = 0; done < len;) {
            const size_t want = len - done < sizeof buf ? (size_t)(len - done) : sizeof buf;
            const ssize_t k = pread(fd, buf, want, (off_t)(off + done));
            if (k <= 0) {
                const int e = errno;
                close(fd);
                return ERR("%s: %s", path, k == 0 ? "shorter than its size while being read (it is changing)" : strerror(e));
            }
            ckpt_sum_update(&h, buf, (size_t)k);
            done += (uint64_t)k;
        }
    }
    close(fd);
    out->sum = ckpt_sum_final(&h);
    return 0;
}

int ckpt_data_same(const ckpt_data_t* a, const ckpt_data_t* b, char* why, size_t whylen) {
    if (a->bytes != b->bytes)
        return snprintf(why, whylen, "%llu bytes then, %llu now", (unsigned long long)a->bytes, (unsigned long long)b->bytes), 0;
    if (a->sum != b->sum || a->sampled != b->sampled)
        return snprintf(why, whylen, "the same size, but the checksum of its %s differs (%016llx then, %016llx now)",
                        a->sampled ? "sampled bytes" : "bytes", (unsigned long long)a->sum, (unsigned long long)b->sum), 0;
    if (whylen) why[0] = 0;
    return 1;
}
