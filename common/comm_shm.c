// The MPI backend's all-reduce through one shared-memory window, for jobs whose ranks all sit
// on one node (comm.c's mpi_allreduce calls it for BLOCKING f32/f64 all-reduces; COMM_SHM=0
// turns it off). Why: our containers run OpenMPI without cross-memory attach
// (btl_vader_single_copy_mechanism none), so every MPI message is copied twice, sender ->
// shared buffer -> receiver, and a ring or MPI's own all-reduce moves each byte through
// shared memory many times. Here every byte of a rank's buffer is copied into shared memory
// once and the reduced result copied out once; the reduction itself reads the peers' copies
// in place.
//
// Per chunk of up to K bytes (COMM_SHM_CHUNK, default 1 MiB; see SHM_CHUNK_DEFAULT), n ranks:
//   1. copy in:  every rank copies its chunk into its own slot (all but its own segment,
//                which only it reads, straight from its input);
//      barrier
//   2. reduce:   rank r reduces segment r (about K/n bytes) over the slots of ranks 0, 1, ...,
//                n-1 IN THAT ORDER and writes it into its result area (AVG: then x 1/n,
//                comm_scale's very multiply);
//      barrier
//   3. copy out: every rank copies the n result segments into its output.
// Two barriers per chunk suffice, with one slot and one result area per rank: the next
// chunk's copy-in overwrites slots that were last read in this chunk's phase 2 (finished by
// everyone before the second barrier), and its reduction overwrites results that were last
// read in this chunk's phase 3 (finished by everyone before the next chunk's first barrier).
// (Double buffering would only pay to go down to ONE barrier per chunk, by pipelining copy-in,
// reduction and copy-out of three different chunks; barriers cost microseconds against
// hundreds per chunk, so the simpler loop stays.)
//
// Bitwise identical on every rank: each element is reduced exactly once, by one rank, in the
// fixed order 0..n-1, and every rank copies those same bits. (MPI_Allreduce on 3+ ranks may
// add in a different order on each rank; data-parallel replicas would drift.)
//
// Bytes per rank per chunk: K copied in, K read + K/n written in the reduction, K copied out.
// The user's buffers stream from DRAM once in and once out; the window ((n + 1) K bytes for
// the whole node) is small enough to stay in the last-level cache, so the shared traffic is
// cache to cache.
//
// Memory model (MPI-3 one-sided chapter, "Memory Model" and its shared-memory examples): the window is locked once
// (MPI_Win_lock_all, MPI_MODE_NOCHECK) for its lifetime; a barrier is MPI_Win_sync (my stores
// become visible), an atomic counter in the window, then MPI_Win_sync again (others' stores
// become visible to my loads) — the standard's "flag in shared memory" pattern. The counter
// is a C11 lock-free atomic, which is address-free and so valid across processes mapping the
// same page. Spinning ranks sched_yield, so more ranks than cores (CI) still make progress.
// A dead or silent peer leaves the others spinning: the caller arms the watchdog (comm.c)
// around the whole operation, and mpirun ends the job when a rank dies.
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/check_mpi.h"
#include "common/cli.h"
#include "common/comm_internal.h"

// K: 1 MiB. The whole window is (n + 1) K: 7 MiB for 6 ranks, well inside a server's L3, so
// slots and results move cache to cache; 4-8 MiB would need 28-56 MiB at 6 ranks, past most
// L3s, and add DRAM traffic on top of the user buffers' own. Much smaller K pays a barrier
// pair per chunk (a few microseconds each): 1 MiB is 100 chunks, 200 barriers, for 100 MB.
// Measured on a busy 2-core EPYC (2 ranks, 100 MB; noisy): 256K-1M fastest, 4M-8M 20-40%
// slower. COMM_SHM_CHUNK sweeps it on a bigger machine.
#define SHM_CHUNK_DEFAULT ((size_t)1 << 20)
#define SHM_ALIGN 64                 // segments and areas start on their own cache line
#define SHM_HEADER 256               // per rank: the barrier (rank 0's), padding
#define SHM_BLOCK_BYTES 8192         // reduction block: the partial result stays in L1

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the barrier needs lock-free (address-free) atomic ints");

typedef struct {
    _Alignas(64) atomic_uint count;  // ranks arrived at the current barrier
    _Alignas(64) atomic_uint gen;    // barriers completed (the sense that waiting ranks watch)
} shm_ctl_t;
_Static_assert(sizeof(shm_ctl_t) <= SHM_HEADER, "the barrier fits the header");

struct comm_shm {
    MPI_Win win;
    int n, me;
    size_t chunk;      // K: bytes of the buffer per round (a multiple of SHM_ALIGN)
    size_t res_bytes;  // bytes of each result area (the largest segment of a chunk)
    shm_ctl_t* ctl;    // in rank 0's header
    char** slot;       // slot[k]: rank k's copy of the chunk (K bytes)
    char** res;        // res[k]: rank k's reduced segment (res_bytes)
};

// ------------------------------------------------------------------ settings
// Read on every rank at the first all-reduce (a collective: a bad value stops every rank with
// one line from rank 0, exit 2).
// COMM_SHM: unset, empty or 1 = on; 0 = off (MPI's collectives, as before).
static int shm_env_on(void) {
    const char* s = getenv("COMM_SHM");
    if (!s || !*s || strcmp(s, "1") == 0) return 1;
    if (strcmp(s, "0") == 0) return 0;
    comm_bad_input("COMM_SHM=%s: expected 0 (MPI's all-reduce) or 1 (the shared-memory all-reduce)", s);
}

// COMM_SHM_CHUNK: bytes per round (K/M suffixes), 4K..256M; the tests lower it to reach
// many rounds with small buffers, a benchmark may sweep it.
static size_t shm_env_chunk(void) {
    const char* s = getenv("COMM_SHM_CHUNK");
    if (!s || !*s) return SHM_CHUNK_DEFAULT;
    int64_t v = 0;
    if (parse_size(s, &v) != 0 || v < 4096 || v > (INT64_C(256) << 20))
        comm_bad_input("COMM_SHM_CHUNK=%s: expected a size from 4K to 256M (e.g. 1M)", s);
    return (size_t)v;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ------------------------------------------------------------------ barrier
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void shm_barrier(comm_shm_t* sh) {
    MPI_CHECK(MPI_Win_sync(sh->win));  // this rank's stores to the window are out
    const unsigned g = atomic_load_explicit(&sh->ctl->gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&sh->ctl->count, 1, memory_order_acq_rel) == (unsigned)sh->n - 1) {
        // The last to arrive resets the count (before the release below: a rank that leaves
        // and arrives at the next barrier sees 0) and lets everyone go.
        atomic_store_explicit(&sh->ctl->count, 0, memory_order_relaxed);
        atomic_store_explicit(&sh->ctl->gen, g + 1, memory_order_release);
    } else {
        for (unsigned spins = 0; atomic_load_explicit(&sh->ctl->gen, memory_order_acquire) == g; spins++) {
            if (spins < 64) cpu_relax();
            else sched_yield();  // oversubscribed: let the rank we wait for run
        }
    }
    MPI_CHECK(MPI_Win_sync(sh->win));  // the other ranks' stores are visible to this one's loads
}

// ------------------------------------------------------------------ reduction
// dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i], left to right, for i < len. Blocked so
// the partial result stays in L1 while the n sources stream past; `omp simd` vectorises across
// i only (each element's own order is untouched). MAX/MIN keep the running value unless the
// new one is strictly larger/smaller (NaNs are not propagated reliably, as with MPI_MAX).
#define DEF_REDUCE(NAME, T, COMBINE)                                                          \
    static void NAME(T* dst, const T* const* src, int n, size_t len) {                       \
        const size_t B = SHM_BLOCK_BYTES / sizeof(T);                                         \
        for (size_t b = 0; b < len; b += B) {                                                 \
            const size_t e = len - b < B ? len - b : B;                                       \
            T* restrict o = dst + b;                                                          \
            const T* restrict x0 = src[0] + b;                                                \
            const T* restrict x1 = src[1] + b;                                                \
            _Pragma("omp simd") for (size_t i = 0; i < e; i++) {                              \
                const T acc = x0[i], y = x1[i];                                               \
                o[i] = COMBINE;                                                               \
            }                                                                                 \
            for (int k = 2; k < n; k++) {                                                     \
                const T* restrict xk = src[k] + b;                                            \
                _Pragma("omp simd") for (size_t i = 0; i < e; i++) {                          \
                    const T acc = o[i], y = xk[i];                                            \
                    o[i] = COMBINE;                                                           \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }
DEF_REDUCE(sum_f32, float, acc + y)
DEF_REDUCE(max_f32, float, y > acc ? y : acc)
DEF_REDUCE(min_f32, float, y < acc ? y : acc)
DEF_REDUCE(sum_f64, double, acc + y)
DEF_REDUCE(max_f64, double, y > acc ? y : acc)
DEF_REDUCE(min_f64, double, y < acc ? y : acc)

static void reduce(void* dst, const void* const* src, int n, size_t len, comm_dtype_t dt, comm_op_t op) {
    const int f64 = dt == COMM_F64;
    switch (op) {
    case COMM_SUM: case COMM_AVG:
        if (f64) sum_f64(dst, (const double* const*)src, n, len); else sum_f32(dst, (const float* const*)src, n, len);
        break;
    case COMM_MAX:
        if (f64) max_f64(dst, (const double* const*)src, n, len); else max_f32(dst, (const float* const*)src, n, len);
        break;
    case COMM_MIN:
        if (f64) min_f64(dst, (const double* const*)src, n, len); else min_f32(dst, (const float* const*)src, n, len);
        break;
    }
    // AVG: the same multiply comm_scale does after MPI's sum, so both paths agree bit for bit.
    if (op == COMM_AVG) comm_scale(dst, len, dt, 1.0 / n);
}

// ------------------------------------------------------------------ set-up and tear-down
// Collective over the job. Returns NULL (on every rank alike) where the path does not apply:
// COMM_SHM=0 on any rank, ranks on more than one node, or a world of one.
static comm_shm_t* shm_create(comm_t* c) {
    // Every rank must take the same decision and use the same K: agree on the minimum.
    long long want[2] = {shm_env_on() && c->local_world == c->world && c->world > 1,
                         (long long)shm_env_chunk()};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, want, 2, MPI_LONG_LONG, MPI_MIN, c->impl->world));
    if (!want[0]) return NULL;
    if (c->local_rank != c->rank) DIE("comm: node rank %d differs from rank %d on a one-node job", c->local_rank, c->rank);

    comm_shm_t* sh = calloc(1, sizeof *sh);
    if (!sh) DIE("comm: out of host memory");
    sh->n = c->world;
    sh->me = c->rank;
    sh->chunk = round_up((size_t)want[1], SHM_ALIGN);
    // The largest segment: ceil(K_elems / n) rounded up to a cache line, for 4- and 8-byte
    // elements alike (in bytes: ceil(K / n) rounded up to SHM_ALIGN covers both).
    sh->res_bytes = round_up((sh->chunk + (size_t)sh->n - 1) / (size_t)sh->n, SHM_ALIGN);
    // + SHM_ALIGN: MPI promises no alignment (OpenMPI's parts start 8 bytes past a page);
    // each rank's part is used from its first cache-line boundary on.
    const size_t mine = SHM_ALIGN + SHM_HEADER + sh->chunk + sh->res_bytes;

    MPI_Info info;
    MPI_CHECK(MPI_Info_create(&info));
    // Each rank's part page-aligned and its own: first-touched (placed) by its owner.
    MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
    char* base = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)mine, 1, info, c->impl->node, &base, &sh->win);
    MPI_CHECK(MPI_Info_free(&info));
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, s, &len);
        DIE_HINT("set COMM_SHM=0 to use MPI's own all-reduce, or a smaller COMM_SHM_CHUNK",
                 "comm: MPI_Win_allocate_shared of %zu bytes per rank failed: %s", mine, s);
    }
    MPI_CHECK(MPI_Win_set_errhandler(sh->win, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, sh->win));
    memset(base, 0, mine);  // first touch by the owner; the barrier starts at 0

    sh->slot = calloc((size_t)sh->n, sizeof(char*));
    sh->res = calloc((size_t)sh->n, sizeof(char*));
    if (!sh->slot || !sh->res) DIE("comm: out of host memory");
    for (int k = 0; k < sh->n; k++) {
        MPI_Aint size = 0;
        int disp = 0;
        char* p = NULL;
        MPI_CHECK(MPI_Win_shared_query(sh->win, k, &size, &disp, &p));
        if ((size_t)size < mine) DIE("comm: rank %d's shared part is %zu bytes (want %zu)", k, (size_t)size, mine);
        p += (SHM_ALIGN - (uintptr_t)p % SHM_ALIGN) % SHM_ALIGN;
        if (k == 0) sh->ctl = (shm_ctl_t*)p;
        sh->slot[k] = p + SHM_HEADER;
        sh->res[k] = p + SHM_HEADER + sh->chunk;
    }
    // Nobody touches the barrier before rank 0 has zeroed it.
    MPI_CHECK(MPI_Win_sync(sh->win));
    MPI_CHECK(MPI_Barrier(c->impl->node));
    MPI_CHECK(MPI_Win_sync(sh->win));
    return sh;
}

void comm_shm_destroy(comm_t* c) {
    comm_impl_t* im = c->impl;
    comm_shm_t* sh = im->shm;
    im->shm = NULL;
    im->shm_state = 0;
    if (!sh) return;
    comm_watchdog_arm(c, "freeing the shared-memory window", c->timeout_s);
    MPI_CHECK(MPI_Win_unlock_all(sh->win));
    MPI_CHECK(MPI_Win_free(&sh->win));  // collective: every rank destroys its communicator
    comm_watchdog_disarm(c);
    free(sh->slot);
    free(sh->res);
    free(sh);
}

// ------------------------------------------------------------------ the all-reduce
int comm_shm_allreduce(comm_t* c, const void* s, void* r, size_t count, comm_dtype_t dt, comm_op_t op) {
    comm_impl_t* im = c->impl;
    if (dt != COMM_F32 && dt != COMM_F64) return 0;
    if (count == 0) return 1;  // every rank has the same count: nothing to do, nothing to agree
    if (im->shm_state == 0) {  // first use: set up (collective), on or off for good
        im->shm = shm_create(c);
        im->shm_state = im->shm ? 1 : -1;
    }
    if (im->shm_state < 0) return 0;

    comm_shm_t* sh = im->shm;
    const int n = sh->n, me = sh->me;
    const size_t es = comm_dtype_size(dt);
    const size_t align = SHM_ALIGN / es;         // elements per cache line
    const size_t per_round = sh->chunk / es;     // elements per chunk
    const char* in = s;
    char* out = r;
    const void* src[64];
    const void** srcp = n <= 64 ? src : malloc((size_t)n * sizeof *srcp);
    if (!srcp) DIE("comm: out of host memory");

    for (size_t off = 0; off < count; off += per_round) {
        const size_t m = count - off < per_round ? count - off : per_round;  // elements this round
        // Segments of whole cache lines, the last one shorter (or empty: tiny m).
        const size_t seg = round_up((m + (size_t)n - 1) / (size_t)n, align);
        const size_t lo = (size_t)me * seg < m ? (size_t)me * seg : m;
        const size_t hi = lo + seg < m ? lo + seg : m;
        const char* chunk_in = in + off * es;
        char* slot = sh->slot[me];

        // 1. copy in everything but this rank's own segment (it reads that from `in` itself)
        memcpy(slot, chunk_in, lo * es);
        memcpy(slot + hi * es, chunk_in + hi * es, (m - hi) * es);
        shm_barrier(sh);

        // 2. reduce segment `me` over ranks 0..n-1 in order
        if (hi > lo) {
            for (int k = 0; k < n; k++) srcp[k] = k == me ? chunk_in + lo * es : sh->slot[k] + lo * es;
            reduce(sh->res[me], srcp, n, hi - lo, dt, op);
        }
        shm_barrier(sh);

        // 3. copy out every segment (in place is safe: the input of this chunk was read in
        //    phases 1-2, and later chunks lie beyond it)
        for (int k = 0; k < n; k++) {
            const size_t klo = (size_t)k * seg < m ? (size_t)k * seg : m;
            const size_t khi = klo + seg < m ? klo + seg : m;
            if (khi > klo) memcpy(out + (off + klo) * es, sh->res[k], (khi - klo) * es);
        }
        // No third barrier needed (see the top of the file).
    }
    if (srcp != src) free(srcp);
    return 1;
}
