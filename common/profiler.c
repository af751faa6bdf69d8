// The kernel summary behind `--profile`: what Nsight Systems' "CUDA GPU Kernel Summary" shows,
// split by the phase (forward, backward, optimizer, ...) in which each kernel was launched.
//
// How it works (CUPTI, shipped with the toolkit):
//   1. Callback API: CUPTI calls on_api() on entry to every CUDA runtime and driver API call.
//      Each call carries a correlation id; we store correlation id -> current phase. This is the
//      moment of LAUNCH, on the host thread that launched.
//   2. Activity API: CUPTI fills buffers we hand it (on_buffer_request) with one record per
//      kernel execution (name, GPU start/end in ns, the correlation id of the API call that
//      launched it) and hands them back later from its own thread (on_buffer_complete).
//   3. profiler_stop() synchronises and flushes; then every kernel record is joined with the
//      phase map by correlation id and aggregated per (phase, kernel name), and per (phase,
//      region, kernel name).
// The region is read in step 1 too: the innermost NVTX range open on the launching thread
// (common/nvtx.h keeps a per-thread stack while the profiler runs, --nvtx or not). The callback
// runs on that thread, so the thread-local stack it reads is the launcher's.
// Attributing by completion time instead would be wrong: the host enqueues "backward" launches
// while "forward" kernels are still running.
#include "common/profiler.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/nvtx.h"

// ---- the aggregation (pure; profiler.h) ----
static int cmp_rec(const void* a, const void* b) {
    const profiler_rec_t* x = a;
    const profiler_rec_t* y = b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->region != y->region) return x->region < y->region ? -1 : 1;
    return x->name < y->name ? -1 : x->name > y->name;
}
static int cmp_agg_rows(const void* a, const void* b) {
    const profiler_agg_t* x = a;
    const profiler_agg_t* y = b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->region != y->region) return x->region < y->region ? -1 : 1;
    if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
    return x->name < y->name ? -1 : x->name > y->name;  // ties: a fixed order
}

size_t profiler_aggregate(const profiler_rec_t* rec, size_t n, int by_region, profiler_agg_t* out) {
    if (n == 0) return 0;
    // Sort a copy by the group key, then one pass makes the groups.
    profiler_rec_t* r = malloc(n * sizeof *r);
    if (!r) DIE("profiler: out of host memory (%zu records)", n);
    memcpy(r, rec, n * sizeof *r);
    if (!by_region)
        for (size_t i = 0; i < n; i++) r[i].region = -1;
    qsort(r, n, sizeof *r, cmp_rec);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m == 0 || cmp_rec(&r[i], &(profiler_rec_t){out[m - 1].phase, out[m - 1].region, out[m - 1].name, 0}) != 0) {
            out[m++] = (profiler_agg_t){r[i].phase, r[i].region, r[i].name, 0, 0, r[i].ns, r[i].ns};
        }
        profiler_agg_t* a = &out[m - 1];
        a->calls++;
        a->total_ns += r[i].ns;
        if (r[i].ns < a->min_ns) a->min_ns = r[i].ns;
        if (r[i].ns > a->max_ns) a->max_ns = r[i].ns;
    }
    free(r);
    qsort(out, m, sizeof *out, cmp_agg_rows);
    return m;
}

#if HAVE_CUPTI
#include <cupti.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>

#define CUPTI_CHECK(call)                                                               \
    do {                                                                                \
        CUptiResult r_ = (call);                                                        \
        if (r_ != CUPTI_SUCCESS) {                                                      \
            const char* s_ = "?";                                                       \
            cuptiGetResultString(r_, &s_);                                              \
            DIE_HINT("CUPTI needs libcupti.so from the same CUDA version as the driver", \
                     "%s failed: %s", #call, s_);                                       \
        }                                                                               \
    } while (0)

#define MAX_PHASES 64
#define PHASE_NAME_LEN 48
#define BUF_BYTES (4u << 20)  // one activity buffer: 4 MiB, ~10k kernel records
#define UNPHASED 0            // phase index 0: before the first profiler_set_phase
#define UNMATCHED 1           // phase index 1: a kernel whose launch we never saw

// ---- state (a profiling session is process-wide: CUPTI allows one subscriber) ----
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_phase[MAX_PHASES][PHASE_NAME_LEN];
static int g_nphase;
static volatile int g_cur;  // index of the current phase; read in on_api (any thread)
static int g_running, g_registered;
static CUpti_SubscriberHandle g_sub;
static size_t g_dropped;

// correlation id -> (phase, region) at launch: open addressing, key 0 = empty (CUPTI ids start
// at 1). The value packs the phase index in bits 0-7 and the region id above them.
#define VAL_PHASE(v) ((int)((v) & 0xffu))
#define VAL_REGION(v) ((int)((v) >> 8))
static uint32_t* g_map_key;  // [g_map_cap]
static uint32_t* g_map_val;  // [g_map_cap]
static size_t g_map_cap, g_map_n;

// interned kernel names
static char** g_names;  // [g_nnames]
static size_t g_nnames, g_names_cap;

typedef struct {
    uint32_t corr, name;
    uint32_t stream;      // CUDA stream id (the timeline's rows)
    uint64_t start, end;  // ns, GPU timestamps
} krec_t;
static krec_t* g_rec;  // [g_nrec]
static size_t g_nrec, g_rec_cap;

// aggregated results (made by profiler_stop)
typedef profiler_agg_t kagg_t;
static kagg_t* g_agg;  // [g_nagg] per (phase, kernel): sorted by phase, then total time descending
static size_t g_nagg;
static kagg_t* g_ragg;  // [g_nragg] per (phase, region, kernel): sorted by phase, region, time
static size_t g_nragg;
static double g_total_ns;

static void* xrealloc(void* p, size_t bytes) {
    void* q = realloc(p, bytes);
    if (!q) DIE("profiler: out of host memory (%zu bytes)", bytes);
    return q;
}

static size_t hash32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

static void map_put_locked(uint32_t key, uint32_t val) {
    if (key == 0) return;
    if (2 * (g_map_n + 1) > g_map_cap) {  // keep the load under 1/2
        size_t old_cap = g_map_cap;
        uint32_t* old_k = g_map_key;
        uint32_t* old_v = g_map_val;
        g_map_cap = old_cap ? 2 * old_cap : 1u << 16;
        g_map_key = calloc(g_map_cap, sizeof(uint32_t));
        g_map_val = calloc(g_map_cap, sizeof(uint32_t));
        if (!g_map_key || !g_map_val) DIE("profiler: out of host memory");
        g_map_n = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old_k[i]) map_put_locked(old_k[i], old_v[i]);
        free(old_k);
        free(old_v);
    }
    size_t i = hash32(key) & (g_map_cap - 1);
    while (g_map_key[i] && g_map_key[i] != key) i = (i + 1) & (g_map_cap - 1);
    if (!g_map_key[i]) g_map_n++;
    g_map_key[i] = key;
    g_map_val[i] = val;
}

// The packed (phase, region) of a correlation id, or -1 if its launch was never seen.
static int64_t map_get_locked(uint32_t key) {
    if (!g_map_cap || key == 0) return -1;
    size_t i = hash32(key) & (g_map_cap - 1);
    while (g_map_key[i]) {
        if (g_map_key[i] == key) return g_map_val[i];
        i = (i + 1) & (g_map_cap - 1);
    }
    return -1;
}

static uint32_t intern_locked(const char* name) {
    if (!name) name = "(unnamed)";
    // Linear search from the end: a training step launches few distinct kernels many times,
    // and the same kernel tends to recur soon, so this stays cheap in practice.
    for (size_t i = g_nnames; i-- > 0;)
        if (strcmp(g_names[i], name) == 0) return (uint32_t)i;
    if (g_nnames == g_names_cap) {
        g_names_cap = g_names_cap ? 2 * g_names_cap : 256;
        g_names = xrealloc(g_names, g_names_cap * sizeof(char*));
    }
    g_names[g_nnames] = strdup(name);
    if (!g_names[g_nnames]) DIE("profiler: out of host memory");
    return (uint32_t)g_nnames++;
}

// ---- CUPTI callbacks ----
static void CUPTIAPI on_api(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void* cbdata) {
    (void)userdata; (void)cbid;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const CUpti_CallbackData* d = (const CUpti_CallbackData*)cbdata;
    if (d->callbackSite != CUPTI_API_ENTER) return;
    // Every API call is recorded, not only launches: kernels reach the GPU through
    // cudaLaunchKernel, cuLaunchKernel(Ex), graph launches, library-internal paths...
    // and whichever of the nested runtime/driver ids a kernel record carries, it is here.
    // The region: this thread's innermost open range (read outside the lock: thread-local).
    const uint32_t val = (uint32_t)g_cur | (uint32_t)nvtx_region_current() << 8;
    pthread_mutex_lock(&g_lock);
    map_put_locked(d->correlationId, val);
    pthread_mutex_unlock(&g_lock);
}

static void CUPTIAPI on_buffer_request(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = aligned_alloc(8, BUF_BYTES);  // CUPTI needs 8-byte aligned buffers
    if (!*buffer) DIE("profiler: out of host memory for a CUPTI buffer");
    *size = BUF_BYTES;
    *max_records = 0;  // as many as fit
}

static void CUPTIAPI on_buffer_complete(CUcontext ctx, uint32_t stream, uint8_t* buffer,
                                        size_t size, size_t valid) {
    CUpti_Activity* r = NULL;
    pthread_mutex_lock(&g_lock);
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        // The record layout of this toolkit's CUPTI (CUDA 13: version 10 of the kernel record).
        const CUpti_ActivityKernel10* k = (const CUpti_ActivityKernel10*)r;
        if (g_nrec == g_rec_cap) {
            g_rec_cap = g_rec_cap ? 2 * g_rec_cap : 4096;
            g_rec = xrealloc(g_rec, g_rec_cap * sizeof(krec_t));
        }
        krec_t* o = &g_rec[g_nrec++];
        o->corr = k->correlationId;
        o->name = intern_locked(k->name);
        o->stream = k->streamId;
        o->start = k->start;
        o->end = k->end > k->start ? k->end : k->start;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    pthread_mutex_unlock(&g_lock);
    (void)size;
    free(buffer);
}

// ---- public API ----
int profiler_available(void) { return gpu_count() > 0; }

static void reset_locked(void) {
    free(g_map_key); free(g_map_val);
    g_map_key = NULL; g_map_val = NULL; g_map_cap = g_map_n = 0;
    g_nrec = 0;
    free(g_agg); g_agg = NULL; g_nagg = 0; g_total_ns = 0;
    free(g_ragg); g_ragg = NULL; g_nragg = 0;
    g_dropped = 0;
    snprintf(g_phase[UNPHASED], PHASE_NAME_LEN, "unphased");
    snprintf(g_phase[UNMATCHED], PHASE_NAME_LEN, "unmatched");
    g_nphase = 2;
    g_cur = UNPHASED;
}

void profiler_start(void) {
    if (!profiler_available()) return;
    if (g_running) DIE("profiler_start: a profiling session is already running");
    pthread_mutex_lock(&g_lock);
    reset_locked();
    pthread_mutex_unlock(&g_lock);
    if (!g_registered) {
        CUPTI_CHECK(cuptiActivityRegisterCallbacks(on_buffer_request, on_buffer_complete));
        g_registered = 1;
    }
    nvtx_track(1);  // regions: ranges pushed from now on are tracked (a fresh stack per thread)
    CUPTI_CHECK(cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)on_api, NULL));
    CUPTI_CHECK(cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_RUNTIME_API));
    CUPTI_CHECK(cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API));
    // CONCURRENT_KERNEL keeps kernels overlapping as they would unprofiled (KERNEL serialises).
    CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    g_running = 1;
}

void profiler_set_phase(const char* phase) {
    if (!g_running || !phase) return;
    pthread_mutex_lock(&g_lock);
    int idx = -1;
    for (int i = 0; i < g_nphase; i++)
        if (strncmp(g_phase[i], phase, PHASE_NAME_LEN - 1) == 0) idx = i;
    if (idx < 0) {
        if (g_nphase == MAX_PHASES) DIE("profiler: more than %d distinct phases", MAX_PHASES);
        idx = g_nphase++;
        snprintf(g_phase[idx], PHASE_NAME_LEN, "%s", phase);
    }
    g_cur = idx;
    pthread_mutex_unlock(&g_lock);
}

void profiler_stop(void) {
    if (!g_running) return;
    CUDA_CHECK(cudaDeviceSynchronize());  // every launched kernel has finished...
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));  // ...and is delivered
    CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_CHECK(cuptiUnsubscribe(g_sub));
    nvtx_track(0);
    g_running = 0;

    pthread_mutex_lock(&g_lock);
    // Join each kernel record with its launch's (phase, region), then group twice: per
    // (phase, kernel) for the top-kernel tables, per (phase, region, kernel) for the regions
    // and the CSV.
    profiler_rec_t* rec = malloc((g_nrec ? g_nrec : 1) * sizeof *rec);
    if (!rec) DIE("profiler: out of host memory");
    g_total_ns = 0;
    for (size_t i = 0; i < g_nrec; i++) {
        const int64_t v = map_get_locked(g_rec[i].corr);
        rec[i].phase = v < 0 ? UNMATCHED : VAL_PHASE((uint32_t)v);
        rec[i].region = v < 0 ? NVTX_REGION_NONE : VAL_REGION((uint32_t)v);
        rec[i].name = g_rec[i].name;
        rec[i].ns = (double)(g_rec[i].end - g_rec[i].start);
        g_total_ns += rec[i].ns;
    }
    free(g_agg);
    free(g_ragg);
    g_agg = malloc((g_nrec ? g_nrec : 1) * sizeof(kagg_t));
    g_ragg = malloc((g_nrec ? g_nrec : 1) * sizeof(kagg_t));
    if (!g_agg || !g_ragg) DIE("profiler: out of host memory");
    g_nagg = profiler_aggregate(rec, g_nrec, 0, g_agg);
    g_nragg = profiler_aggregate(rec, g_nrec, 1, g_ragg);
    free(rec);
    pthread_mutex_unlock(&g_lock);
}

// ---- names: demangled when libstdc++'s demangler can be found at run time, then shortened ----
typedef char* (*demangle_fn)(const char*, char*, size_t*, int*);

static void display_name(const char* raw, char* out, size_t len) {
    static demangle_fn dm;
    static int looked;
    if (!looked) {
        looked = 1;
        dm = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
        if (!dm) {
            void* h = dlopen("libstdc++.so.6", RTLD_LAZY);
            if (h) dm = (demangle_fn)dlsym(h, "__cxa_demangle");
        }
    }
    char* d = NULL;
    int st = -1;
    if (dm && raw[0] == '_' && raw[1] == 'Z') d = dm(raw, NULL, NULL, &st);
    const char* s = (d && st == 0) ? d : raw;
    if (strncmp(s, "void ", 5) == 0) s += 5;  // kernels all return void
    // Keep the name and its template arguments, drop the parameter list: "f<T>(float*, int)"
    // -> "f<T>". The parameter list starts at the first '(' outside <...>.
    size_t n = strlen(s), cut = n;
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '<') depth++;
        else if (s[i] == '>') depth--;
        else if (s[i] == '(' && depth == 0 && i > 0) { cut = i; break; }
    }
    const size_t maxw = 90;  // table width: long template names are cut with "..."
    size_t w = 0;
    for (size_t i = 0; i < cut && w + 4 < len; i++) {
        if (w >= maxw) { memcpy(out + w, "...", 3); w += 3; break; }
        char c = s[i];
        out[w++] = (c == '|' || c == ',' || c == '"' || c == '\n') ? (c == ',' ? ';' : ' ') : c;
    }
    out[w] = '\0';
    free(d);
}

// A region's name fit for a Markdown cell and a CSV field.
static void region_cell(int region, char* out, size_t len) {
    snprintf(out, len, "%s", nvtx_region_name(region));
    for (char* c = out; *c; c++)
        if (*c == '|' || *c == ',' || *c == '"' || *c == '\n') *c = *c == ',' ? ';' : ' ';
}

typedef struct {
    int phase, region, kinds;
    long calls;
    double ns;
} rsum_t;
static int cmp_rsum(const void* a, const void* b) {
    const rsum_t* x = a;
    const rsum_t* y = b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->ns != y->ns) return x->ns > y->ns ? -1 : 1;
    return x->region < y->region ? -1 : x->region > y->region;
}
// The (phase, region) groups of g_ragg (contiguous there), sorted by phase, then GPU time
// descending. The caller frees the array.
static rsum_t* region_sums(size_t* n) {
    rsum_t* r = malloc((g_nragg ? g_nragg : 1) * sizeof *r);
    if (!r) DIE("profiler: out of host memory");
    size_t m = 0;
    for (size_t i = 0; i < g_nragg; i++) {
        const kagg_t* a = &g_ragg[i];
        if (m == 0 || r[m - 1].phase != a->phase || r[m - 1].region != a->region)
            r[m++] = (rsum_t){a->phase, a->region, 0, 0, 0};
        r[m - 1].kinds++;
        r[m - 1].calls += a->calls;
        r[m - 1].ns += a->total_ns;
    }
    qsort(r, m, sizeof *r, cmp_rsum);
    *n = m;
    return r;
}

double profiler_region_ms(const char* phase, const char* region, long* calls) {
    if (calls) *calls = 0;
    if (g_running || !phase) return 0;
    double ns = 0;
    for (size_t i = 0; i < g_nragg; i++) {
        const kagg_t* a = &g_ragg[i];
        if (strcmp(g_phase[a->phase], phase) != 0) continue;
        if (region && strcmp(nvtx_region_name(a->region), region) != 0) continue;
        ns += a->total_ns;
        if (calls) *calls += a->calls;
    }
    return ns * 1e-6;
}

static double phase_total_ns(int ph, long* calls, int* kinds) {
    double t = 0;
    *calls = 0;
    *kinds = 0;
    for (size_t i = 0; i < g_nagg; i++)
        if (g_agg[i].phase == ph) { t += g_agg[i].total_ns; *calls += g_agg[i].calls; (*kinds)++; }
    return t;
}

void profiler_print_summary(FILE* out, int top_n) {
    if (!profiler_available()) {
        fprintf(out, "(kernel summary: no GPU or built without CUPTI)\n");
        return;
    }
    if (g_running) DIE("profiler_print_summary: call profiler_stop() first");
    double tot = g_total_ns > 0 ? g_total_ns : 1;
    fprintf(out, "\n### GPU kernel time by phase (CUPTI)\n\n");
    fprintf(out, "| phase | kernels | calls | GPU ms | share |\n|---|---:|---:|---:|---:|\n");
    for (int ph = 0; ph < g_nphase; ph++) {
        long calls;
        int kinds;
        double t = phase_total_ns(ph, &calls, &kinds);
        if (calls == 0) continue;
        fprintf(out, "| %s | %d | %ld | %.3f | %.1f%% |\n", g_phase[ph], kinds, calls, t * 1e-6,
                100.0 * t / tot);
    }
    fprintf(out, "| **all** | | | %.3f | 100%% |\n", g_total_ns * 1e-6);
    if (g_dropped)
        fprintf(out, "\nwarning: CUPTI dropped %zu records (buffers full); totals are low\n", g_dropped);
    // Regions: the innermost NVTX range open at each launch ("-": none), per phase.
    size_t nrs;
    rsum_t* rs = region_sums(&nrs);
    char rname[64];
    fprintf(out, "\n### GPU kernel time by region (innermost NVTX range open at launch; -: none)\n\n");
    fprintf(out, "| phase | region | kernels | calls | GPU ms | share |\n|---|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < nrs; i++) {
        region_cell(rs[i].region, rname, sizeof rname);
        fprintf(out, "| %s | %s | %d | %ld | %.3f | %.1f%% |\n", g_phase[rs[i].phase], rname, rs[i].kinds,
                rs[i].calls, rs[i].ns * 1e-6, 100.0 * rs[i].ns / tot);
    }
    free(rs);
    char name[128];
    for (int ph = 0; ph < g_nphase; ph++) {
        long calls;
        int kinds;
        if (phase_total_ns(ph, &calls, &kinds) <= 0 && calls == 0) continue;
        fprintf(out, "\n#### phase %s: top %d kernels by GPU time\n\n", g_phase[ph], top_n);
        fprintf(out, "| kernel | calls | total ms | mean us | share |\n|---|---:|---:|---:|---:|\n");
        int shown = 0;
        for (size_t i = 0; i < g_nagg && shown < top_n; i++) {
            const kagg_t* a = &g_agg[i];
            if (a->phase != ph) continue;
            display_name(g_names[a->name], name, sizeof name);
            fprintf(out, "| `%s` | %ld | %.3f | %.1f | %.1f%% |\n", name, a->calls, a->total_ns * 1e-6,
                    a->total_ns * 1e-3 / (double)a->calls, 100.0 * a->total_ns / tot);
            shown++;
        }
        if (kinds > shown) fprintf(out, "| (%d more kernels) | | | | |\n", kinds - shown);
    }
    fprintf(out, "\n");
}

int profiler_write_csv(const char* path) {
    if (g_running) DIE("profiler_write_csv: call profiler_stop() first");
    if (mkdir_parent(path) != 0) return -1;
    FILE* f = afile_open(path);
    if (!f) return -1;
    // region last: readers of the first eight columns keep working
    fprintf(f, "phase,kernel,calls,total_ms,mean_us,min_us,max_us,share_pct,region\n");
    char name[128], rname[64];
    double tot = g_total_ns > 0 ? g_total_ns : 1;
    for (size_t i = 0; i < g_nragg; i++) {
        const kagg_t* a = &g_ragg[i];
        display_name(g_names[a->name], name, sizeof name);
        region_cell(a->region, rname, sizeof rname);
        fprintf(f, "%s,%s,%ld,%.6f,%.3f,%.3f,%.3f,%.3f,%s\n", g_phase[a->phase], name, a->calls,
                a->total_ns * 1e-6, a->total_ns * 1e-3 / (double)a->calls, a->min_ns * 1e-3,
                a->max_ns * 1e-3, 100.0 * a->total_ns / tot, rname);
    }
    return afile_commit(f);
}

// Every kernel of the session in GPU time order, relative to the first start.
int profiler_write_timeline_csv(const char* path) {
    if (g_running) DIE("profiler_write_timeline_csv: call profiler_stop() first");
    if (mkdir_parent(path) != 0) return -1;
    FILE* f = afile_open(path);
    if (!f) return -1;
    fprintf(f, "stream,start_us,end_us,phase,kernel\n");
    uint64_t t0 = UINT64_MAX;
    for (size_t i = 0; i < g_nrec; i++)
        if (g_rec[i].start < t0) t0 = g_rec[i].start;
    char name[128];
    for (size_t i = 0; i < g_nrec; i++) {
        const krec_t* r = &g_rec[i];
        const int64_t v = map_get_locked(r->corr);
        const int ph = v < 0 ? UNMATCHED : VAL_PHASE((uint32_t)v);
        display_name(g_names[r->name], name, sizeof name);
        for (char* c = name; *c; c++)
            if (*c == ',') *c = ';';  // one CSV field
        fprintf(f, "%u,%.3f,%.3f,%s,%s\n", r->stream, 1e-3 * (double)(r->start - t0),
                1e-3 * (double)(r->end - t0), g_phase[ph], name);
    }
    return afile_commit(f);
}

#else  // !HAVE_CUPTI: the toolkit had no CUPTI; --profile says so and nothing else changes.

int profiler_available(void) { return 0; }
void profiler_start(void) {}
void profiler_set_phase(const char* phase) { (void)phase; }
void profiler_stop(void) {}
void profiler_print_summary(FILE* out, int top_n) {
    (void)top_n;
    fprintf(out, "(kernel summary: built without CUPTI)\n");
}
int profiler_write_csv(const char* path) {
    if (mkdir_parent(path) != 0) return -1;
    FILE* f = afile_open(path);
    if (!f) return -1;
    fprintf(f, "phase,kernel,calls,total_ms,mean_us,min_us,max_us,share_pct,region\n");
    return afile_commit(f);
}
double profiler_region_ms(const char* phase, const char* region, long* calls) {
    (void)phase; (void)region;
    if (calls) *calls = 0;
    return 0;  // no kernel records without CUPTI
}
int profiler_write_timeline_csv(const char* path) {
    (void)path;
    return -1;  // no kernel records without CUPTI
}

#endif
