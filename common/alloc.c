// The counting allocator. Every live block is recorded in an open-addressing hash table
// (pointer -> size, tag, device), so mem_free knows what it releases without a header in
// front of device memory. A mutex keeps the counts right if threads allocate.
#include "common/alloc.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"

typedef struct {
    void* ptr;  // NULL: empty slot; TOMBSTONE: deleted
    size_t bytes;
    mem_tag_t tag;
    device_t dev;
} block_t;

#define TOMBSTONE ((void*)1)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t* g_table = NULL;
static size_t g_cap = 0, g_used = 0;  // g_used counts live + tombstones
static mem_stats_t g_stats[DEV_COUNT];
static mem_observer_fn g_observer = NULL;
static void* g_observer_ctx = NULL;

const char* mem_tag_name(mem_tag_t tag) {
    static const char* names[MEM_NTAGS] = {"params", "grads", "optim", "acts", "workspace", "other"};
    return (tag >= 0 && tag < MEM_NTAGS) ? names[tag] : "?";
}

static size_t slot_of(void* p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)(h & (cap - 1));
}

static void table_insert(block_t b);

static void table_grow(void) {
    size_t old_cap = g_cap;
    block_t* old = g_table;
    g_cap = old_cap ? old_cap * 2 : 1024;
    g_table = calloc(g_cap, sizeof(block_t));
    if (!g_table) DIE("allocator bookkeeping: out of host memory");
    g_used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].ptr && old[i].ptr != TOMBSTONE) table_insert(old[i]);
    free(old);
}

static void table_insert(block_t b) {
    if ((g_used + 1) * 2 > g_cap) table_grow();
    size_t i = slot_of(b.ptr, g_cap);
    while (g_table[i].ptr && g_table[i].ptr != TOMBSTONE) i = (i + 1) & (g_cap - 1);
    if (!g_table[i].ptr) g_used++;
    g_table[i] = b;
}

// Removes and returns the block of p; ptr NULL in the result if p is unknown.
static block_t table_remove(void* p) {
    block_t none = {0};
    if (!g_cap) return none;
    size_t i = slot_of(p, g_cap);
    while (g_table[i].ptr) {
        if (g_table[i].ptr == p) {
            block_t b = g_table[i];
            g_table[i].ptr = TOMBSTONE;
            return b;
        }
        i = (i + 1) & (g_cap - 1);
    }
    return none;
}

static void account(device_t dev, mem_tag_t tag, long long delta) {
    mem_stats_t* s = &g_stats[dev];
    s->live = (size_t)((long long)s->live + delta);
    s->live_by_tag[tag] = (size_t)((long long)s->live_by_tag[tag] + delta);
    if (delta > 0) s->n_allocs++; else s->n_frees++;
    if (s->live > s->peak) {
        s->peak = s->live;
        memcpy(s->at_peak_by_tag, s->live_by_tag, sizeof s->at_peak_by_tag);
    }
}

const char* fmt_bytes(size_t bytes, char* buf, size_t len) {
    const double b = (double)bytes;
    if (bytes >= (1ull << 50)) snprintf(buf, len, "%.2f PiB", b / (1ull << 50));
    else if (bytes >= (1ull << 40)) snprintf(buf, len, "%.2f TiB", b / (1ull << 40));
    else if (bytes >= (1ull << 30)) snprintf(buf, len, "%.2f GiB", b / (1ull << 30));
    else if (bytes >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", b / (1ull << 20));
    else if (bytes >= (1ull << 10)) snprintf(buf, len, "%.1f KiB", b / (1ull << 10));
    else snprintf(buf, len, "%zu B", bytes);
    return buf;
}

void* mem_try_alloc(device_t dev, size_t bytes, mem_tag_t tag) {
    if (tag < 0 || tag >= MEM_NTAGS) DIE("mem_alloc: bad tag %d", (int)tag);
    if (bytes == 0) bytes = 1;  // a distinct, freeable pointer for empty tensors
    void* p = NULL;
    if (dev == DEV_CUDA) {
        cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // clear the sticky-free error so later calls work
            return NULL;
        }
        CUDA_CHECK(e);
    } else {
        // 256-byte alignment: what cudaMalloc gives, so host and device code share assumptions
        if (posix_memalign(&p, 256, bytes) != 0) return NULL;
    }
    pthread_mutex_lock(&g_lock);
    block_t b = {p, bytes, tag, dev};
    table_insert(b);
    account(dev, tag, (long long)bytes);
    mem_observer_fn obs = g_observer;
    void* ctx = g_observer_ctx;
    size_t live = g_stats[dev].live;
    pthread_mutex_unlock(&g_lock);
    if (obs) obs(ctx, dev, tag, (long long)bytes, live);
    return p;
}

void* mem_alloc(device_t dev, size_t bytes, mem_tag_t tag) {
    void* p = mem_try_alloc(dev, bytes, tag);
    if (p) return p;
    char want[32], freeb[32], live[32];
    fmt_bytes(bytes, want, sizeof want);
    fmt_bytes(g_stats[dev].live, live, sizeof live);
    if (dev == DEV_CUDA) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        fmt_bytes(fr, freeb, sizeof freeb);
        DIE_HINT("use a smaller size, batch or context",
                 "out of GPU memory: asked for %s (%zu bytes) for %s, %s free on the device, %s "
                 "live through this allocator", want, bytes, mem_tag_name(tag), freeb, live);
    }
    DIE("out of host memory: asked for %s (%zu bytes) for %s, %s live through this allocator",
        want, bytes, mem_tag_name(tag), live);
}

void mem_free(void* p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    block_t b = table_remove(p);
    if (!b.ptr) {
        pthread_mutex_unlock(&g_lock);
        DIE("mem_free(%p): not a pointer from mem_alloc (double free?)", p);
    }
    account(b.dev, b.tag, -(long long)b.bytes);
    mem_observer_fn obs = g_observer;
    void* ctx = g_observer_ctx;
    size_t live = g_stats[b.dev].live;
    pthread_mutex_unlock(&g_lock);
    if (b.dev == DEV_CUDA) CUDA_CHECK(cudaFree(p));
    else free(p);
    if (obs) obs(ctx, b.dev, b.tag, -(long long)b.bytes, live);
}

mem_stats_t mem_stats(device_t dev) {
    pthread_mutex_lock(&g_lock);
    mem_stats_t s = g_stats[dev];
    pthread_mutex_unlock(&g_lock);
    return s;
}

void mem_reset_peak(device_t dev) {
    pthread_mutex_lock(&g_lock);
    mem_stats_t* s = &g_stats[dev];
    s->peak = s->live;
    memcpy(s->at_peak_by_tag, s->live_by_tag, sizeof s->at_peak_by_tag);
    pthread_mutex_unlock(&g_lock);
}

void mem_set_observer(mem_observer_fn fn, void* ctx) {
    pthread_mutex_lock(&g_lock);
    g_observer = fn;
    g_observer_ctx = ctx;
    pthread_mutex_unlock(&g_lock);
}

int mem_fits(device_t dev, double bytes, char* err, size_t errlen) {
    double total = 0.0;
    if (dev == DEV_CUDA) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) total = (double)tot;
        else cudaGetLastError();
    } else {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) total = (double)pages * (double)page;
    }
    if (total <= 0.0 || bytes <= total) return 1;
    char want[32], have[32];
    // fmt_bytes takes a size_t: beyond 2^63 bytes, say so in words.
    if (bytes >= 9.2e18) snprintf(want, sizeof want, "more than 8 EiB");
    else fmt_bytes((size_t)bytes, want, sizeof want);
    fmt_bytes((size_t)total, have, sizeof have);
    if (err && errlen)
        snprintf(err, errlen, "needs %s, more than the %s of %s memory here", want, have,
                 dev == DEV_CUDA ? "GPU" : "host");
    return 0;
}

void mem_zero_async(device_t dev, void* p, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    if (dev == DEV_CUDA) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
    else memset(p, 0, bytes);
}

void mem_copy_async(device_t dev, void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    if (dev == DEV_CUDA) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    else memmove(dst, src, bytes);
}
