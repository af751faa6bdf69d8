// The counting allocator: live and peak bytes per device and per tag, the observer, errors.
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "tests/child.h"
#include "tests/harness.h"

Test(alloc, counts_live_peak_and_tags) {
    mem_stats_t s0 = mem_stats(DEV_CPU);
    void* a = mem_alloc(DEV_CPU, 1000, MEM_PARAMS);
    void* b = mem_alloc(DEV_CPU, 3000, MEM_ACTS);
    mem_stats_t s1 = mem_stats(DEV_CPU);
    cr_assert_eq(s1.live - s0.live, 4000u);
    cr_assert_eq(s1.live_by_tag[MEM_PARAMS] - s0.live_by_tag[MEM_PARAMS], 1000u);
    cr_assert_eq(s1.live_by_tag[MEM_ACTS] - s0.live_by_tag[MEM_ACTS], 3000u);
    cr_assert_eq(s1.n_allocs - s0.n_allocs, 2u);
    mem_free(b);
    mem_stats_t s2 = mem_stats(DEV_CPU);
    cr_assert_eq(s2.live - s0.live, 1000u);
    cr_assert_geq(s2.peak, s0.live + 4000, "the peak remembers the high-water mark");
    mem_reset_peak(DEV_CPU);
    cr_assert_eq(mem_stats(DEV_CPU).peak, mem_stats(DEV_CPU).live);
    mem_free(a);
    cr_assert_eq(mem_stats(DEV_CPU).live, s0.live);
    cr_assert_eq(((uintptr_t)a) % 256, 0u, "host blocks are 256-byte aligned like cudaMalloc's");
}

Test(alloc, breakdown_at_peak) {
    mem_reset_peak(DEV_CPU);
    size_t base = mem_stats(DEV_CPU).live;
    void* p = mem_alloc(DEV_CPU, 5000, MEM_GRADS);
    void* q = mem_alloc(DEV_CPU, 7000, MEM_OPTIM);
    mem_free(p);
    void* r = mem_alloc(DEV_CPU, 100, MEM_WORKSPACE);  // below the previous peak
    mem_stats_t s = mem_stats(DEV_CPU);
    cr_assert_eq(s.peak, base + 12000);
    cr_assert_eq(s.at_peak_by_tag[MEM_GRADS], 5000u);
    cr_assert_eq(s.at_peak_by_tag[MEM_OPTIM], 7000u);
    cr_assert_eq(s.at_peak_by_tag[MEM_WORKSPACE], 0u, "breakdown is taken at the peak, not now");
    mem_free(q);
    mem_free(r);
}

static long long g_sum;
static int g_calls;
static void observer(void* ctx, device_t dev, mem_tag_t tag, long long delta, size_t live) {
    (void)ctx; (void)dev; (void)tag; (void)live;
    g_sum += delta;
    g_calls++;
}

Test(alloc, observer_sees_every_event) {
    g_sum = 0; g_calls = 0;
    mem_set_observer(observer, NULL);
    void* ptrs[50];
    for (int i = 0; i < 50; i++) ptrs[i] = mem_alloc(DEV_CPU, 100 + (size_t)i, MEM_OTHER);
    for (int i = 0; i < 50; i++) mem_free(ptrs[i]);
    mem_set_observer(NULL, NULL);
    cr_assert_eq(g_calls, 100);
    cr_assert_eq(g_sum, 0);
}

Test(alloc, many_blocks_survive_table_growth) {
    enum { N = 5000 };
    static void* p[N];
    size_t base = mem_stats(DEV_CPU).live;
    for (int i = 0; i < N; i++) p[i] = mem_alloc(DEV_CPU, 16, MEM_OTHER);
    for (int i = 0; i < N; i += 2) mem_free(p[i]);
    for (int i = 1; i < N; i += 2) mem_free(p[i]);
    cr_assert_eq(mem_stats(DEV_CPU).live, base);
}

Test(alloc, freeing_a_foreign_pointer_dies, .exit_code = 1) {
    static char not_ours[16];
    mem_free(not_ours);
}

Test(alloc, fmt_bytes_units) {
    char b[32];
    cr_assert_str_eq(fmt_bytes(512, b, sizeof b), "512 B");
    cr_assert_str_eq(fmt_bytes(3 << 20, b, sizeof b), "3.0 MiB");
    cr_assert_str_eq(fmt_bytes(3ull << 30, b, sizeof b), "3.00 GiB");
    cr_assert_str_eq(fmt_bytes(3ull << 40, b, sizeof b), "3.00 TiB");
    cr_assert_str_eq(fmt_bytes(3ull << 50, b, sizeof b), "3.00 PiB");
}

// Sizes a user asks for are checked against the machine before anything is allocated:
// impossible sizes are bad input, exit 2, not an out-of-memory death with exit 1.
Test(alloc, mem_fits_says_how_much_is_needed_and_there) {
    char err[256] = "";
    cr_assert_eq(mem_fits(DEV_CPU, 1 << 20, err, sizeof err), 1, "1 MiB fits any machine");
    cr_assert_eq(mem_fits(DEV_CPU, 3.0 * (1ull << 50), err, sizeof err), 0, "3 PiB fits no machine");
    cr_assert(strstr(err, "needs 3.00 PiB, more than the ") && strstr(err, "of host memory here"), "%s", err);
    cr_assert_eq(mem_fits(DEV_CPU, 1e30, err, sizeof err), 0, "beyond size_t: still a clear no");
    cr_assert(strstr(err, "needs more than 8 EiB"), "%s", err);
}

Test(alloc, gpu_accounting_and_oom_is_null) {
    SKIP_WITHOUT_GPU();
    size_t base = mem_stats(DEV_CUDA).live;
    void* d = mem_alloc(DEV_CUDA, 1 << 20, MEM_ACTS);
    cr_assert_eq(mem_stats(DEV_CUDA).live - base, (size_t)1 << 20);
    mem_free(d);
    // 1 PiB cannot be had: mem_try_alloc says so with NULL and leaves no sticky error
    void* huge = mem_try_alloc(DEV_CUDA, (size_t)1 << 50, MEM_ACTS);
    cr_assert_null(huge);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cr_assert_eq(mem_stats(DEV_CUDA).live, base);
}

// mem_alloc dies on out-of-memory naming the bytes asked for and free: run it in a child
// process (forked before this process touches CUDA: a CUDA context does not survive fork())
// and read what it printed.
static void alloc_petabyte(void* arg) {
    (void)arg;
    if (gpu_count() == 0) exit(77);  // tells the parent to skip
    mem_alloc(DEV_CUDA, (size_t)1 << 50, MEM_ACTS);
}

Test(alloc, gpu_oom_message_names_bytes) {
    char out[2048];
    const int st = run_child(alloc_petabyte, NULL, out, sizeof out);
    if (st == 77) cr_skip_test("needs a CUDA GPU: %s", gpu_absent_reason());
    cr_assert_eq(st, 1, "exit status %d: %s", st, out);
    cr_assert(strstr(out, "out of GPU memory") != NULL, "%s", out);
    cr_assert(strstr(out, "1125899906842624 bytes") != NULL, "names the bytes asked for: %s", out);
    cr_assert(strstr(out, "free on the device") != NULL, "names the bytes free: %s", out);
}
