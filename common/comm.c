// The communicator (comm.h): set-up from mpirun, the MPI backend, waits with deadlines and
// the watchdog. The NCCL backend is in comm_nccl.c.
#include "common/comm.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/check_mpi.h"
#include "common/comm_internal.h"
#include "common/dtype.h"
#include "common/gpu.h"

// ------------------------------------------------------------------ small helpers
const char* comm_backend_name(comm_backend_t b) { return b == COMM_NCCL ? "nccl" : "mpi"; }

int comm_backend_parse(const char* s, comm_backend_t* out) {
    if (s && strcmp(s, "mpi") == 0) { *out = COMM_MPI; return 0; }
    if (s && strcmp(s, "nccl") == 0) { *out = COMM_NCCL; return 0; }
    return -1;
}

size_t comm_dtype_size(comm_dtype_t dt) {
    switch (dt) {
    case COMM_F32: case COMM_I32: return 4;
    case COMM_BF16: return 2;
    case COMM_U8: return 1;
    case COMM_F64: return 8;
    }
    return 0;
}

const char* comm_op_name(comm_op_t op) {
    static const char* n[] = {"sum", "avg", "max", "min"};
    return (op >= COMM_SUM && op <= COMM_MIN) ? n[op] : "?";
}

double comm_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double comm_timeout_from_env(void) {
    const char* s = getenv("COMM_TIMEOUT");
    if (!s || !*s) return COMM_TIMEOUT_DEFAULT_S;
    char* end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || !isfinite(v))
        comm_bad_input("COMM_TIMEOUT=%s: expected a positive number of seconds", s);
    return v;
}

// ------------------------------------------------------------------ watchdog
// One thread for the process. While armed it sleeps until the deadline; if nobody disarms it
// by then, it reports and _exit()s, which makes mpirun end the other ranks. _exit, not exit:
// the thread that hangs may hold locks that atexit handlers need. Armed for an operation of
// the flight recorder (pos > 0), it ends through comm_deadline (one line for the node) and
// marks a sign of life at every tick; a tick that comes more than COMM_CLOCK_GAP_S late (the
// process was stopped) moves the deadline by the gap.
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int started, armed, rank;
    double deadline, seconds, last_tick;
    const char* what;
    comm_t* c;
    int64_t pos;
} g_wd = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0};

static void* watchdog_main(void* arg) {
    (void)arg;
    pthread_mutex_lock(&g_wd.lock);
    for (;;) {
        if (!g_wd.armed) {
            pthread_cond_wait(&g_wd.cond, &g_wd.lock);
            continue;
        }
        const double now = comm_now_s();
        if (now - g_wd.last_tick > COMM_CLOCK_GAP_S) g_wd.deadline += now - g_wd.last_tick;
        g_wd.last_tick = now;
        if (g_wd.c && g_wd.pos > 0) comm_rec_tick(g_wd.c);
        double left = g_wd.deadline - now;
        if (left <= 0) {
            if (g_wd.pos < 0) _exit(COMM_EXIT_TIMEOUT);  // the deadline's line is out already
            if (g_wd.c && g_wd.pos > 0) {
                comm_t* c = g_wd.c;
                const int64_t pos = g_wd.pos;
                g_wd.armed = 0;
                pthread_mutex_unlock(&g_wd.lock);
                comm_deadline(c, pos);  // from this thread: prints (or not) and _exit()s
            }
            fprintf(stderr, "rank %d: %s did not finish within %.0f s: ending the job\n", g_wd.rank,
                    g_wd.what ? g_wd.what : "an operation", g_wd.seconds);
            fflush(stderr);
            _exit(COMM_EXIT_TIMEOUT);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wake = (double)ts.tv_sec + 1e-9 * ts.tv_nsec + (left < 0.25 ? left : 0.25);
        ts.tv_sec = (time_t)wake;
        ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&g_wd.cond, &g_wd.lock, &ts);
    }
    return NULL;
}

static pthread_t g_main_thread;
static int g_main_thread_set = 0;

static void watchdog_arm_pos(comm_t* c, const char* what, double seconds, int64_t pos) {
    pthread_mutex_lock(&g_wd.lock);
    if (!g_wd.started) {
        if (pthread_create(&g_wd.thread, NULL, watchdog_main, NULL) != 0)
            DIE("comm: cannot start the watchdog thread");
        pthread_detach(g_wd.thread);
        g_wd.started = 1;
    }
    g_wd.rank = c ? c->world_rank : 0;
    g_wd.what = what;
    g_wd.seconds = seconds;
    g_wd.last_tick = comm_now_s();
    g_wd.deadline = g_wd.last_tick + seconds;
    g_wd.c = c;
    g_wd.pos = c || pos < 0 ? pos : 0;
    g_wd.armed = 1;
    pthread_cond_signal(&g_wd.cond);
    pthread_mutex_unlock(&g_wd.lock);
}

void comm_watchdog_arm(comm_t* c, const char* what, double seconds) {
    watchdog_arm_pos(c, what, seconds, 0);
}

void comm_watchdog_disarm(comm_t* c) {
    (void)c;
    pthread_mutex_lock(&g_wd.lock);
    g_wd.armed = 0;
    pthread_mutex_unlock(&g_wd.lock);
}

// Armed for the newest operation of the recorder.
#define ARM_OP(c, what) watchdog_arm_pos((c), (what), (c)->timeout_s, (c)->impl->rec_last)

// ------------------------------------------------------------------ deadlines
void comm_clock_start(comm_clock_t* k) { k->t0 = k->last = comm_now_s(); }

double comm_clock_elapsed(comm_clock_t* k) {
    const double now = comm_now_s();
    if (now - k->last > COMM_CLOCK_GAP_S) k->t0 += now - k->last;  // this rank was not running
    k->last = now;
    return now - k->t0;
}

int64_t comm_rec_start(comm_t* c, comm_rec_op_t op, size_t bytes, int peer) {
    comm_impl_t* im = c->impl;
    const int64_t pos = comm_rec_begin(im->rec, op, bytes, peer, comm_rec_now_ns());
    im->rec_last = pos;
    if (im->in_group && !im->group_first) im->group_first = pos;
    return pos;
}

void comm_rec_end(comm_t* c, int64_t pos) { comm_rec_done(c->impl->rec, pos, comm_rec_now_ns()); }

void comm_rec_tick(comm_t* c) { comm_rec_alive(c->impl->rec, comm_rec_now_ns()); }

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// Ends the job after the speaker's line, without a line of its own. ncclCommAbort can hang
// (NCCL issues #829, #1777): 3 s later the watchdog ends the process silently regardless.
__attribute__((noreturn)) static void abort_quietly(comm_t* c, int status, int in_watchdog) {
    if (in_watchdog) _exit(status);  // the main thread is inside MPI: no MPI call from here
    watchdog_arm_pos(c, "aborting the communicator", 3.0, -1);
    if (c->backend == COMM_NCCL) comm_nccl_abort(c);
    MPI_Abort(MPI_COMM_WORLD, status);
    _exit(status);
}

// Which rank speaks: every rank whose wait passes its deadline marks itself expired; after a
// grace (a quarter of the deadline, 0.2-1 s) for ranks whose deadline passes at about the
// same time, the lowest expired rank takes the node's claim with a compare-and-swap, and only
// the rank that takes it prints. The others (a rank stopped and continued by mpirun's
// teardown among them) find the claim taken and end silently; the speaker's abort ends them.
void comm_deadline(comm_t* c, int64_t pos) {
    comm_impl_t* im = c->impl;
    const int in_watchdog = g_main_thread_set && !pthread_equal(pthread_self(), g_main_thread);
    const int64_t t = comm_rec_now_ns();
    __atomic_store_n(&im->rec->expired_ns, t, __ATOMIC_RELEASE);
    double grace = 0.25 * c->timeout_s;
    grace = grace < 0.2 ? 0.2 : grace > 1.0 ? 1.0 : grace;
    const int64_t g_ns = (int64_t)(grace * 1e9);
    int speak = 1;
    if (im->rec_claim) {  // the node's claim (a group's rings use their world's: comm_split)
        speak = 0;
        for (;;) {
            if (__atomic_load_n(im->rec_claim, __ATOMIC_ACQUIRE) != 0) break;
            const int64_t now = comm_rec_now_ns();
            if (now - t >= g_ns) {
                int lower = 0;  // a lower rank expired too: it speaks, unless it is slow to
                for (int i = 0; i < im->rec_n; i++) {
                    const comm_rec_ring_t* r = im->rec_rings[i];
                    if (r->used && r->rank < c->rank && __atomic_load_n(&r->expired_ns, __ATOMIC_ACQUIRE)) lower = 1;
                }
                if (!lower || now - t >= 2 * g_ns) {
                    int64_t none = 0;
                    speak = __atomic_compare_exchange_n(im->rec_claim, &none, (int64_t)c->rank + 1, 0,
                                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
                    break;
                }
            }
            sleep_s(0.01);
        }
    }
    if (!speak) {
        sleep_s(15.0);  // the speaker's abort ends this process first
        _exit(COMM_EXIT_TIMEOUT);
    }
    char line[2048];
    const comm_rec_ring_t* const* rings = (const comm_rec_ring_t* const*)im->rec_rings;
    const int named = comm_rec_blame(line, sizeof line - 1, rings, im->rec_n, im->rec_shared ? c->local_rank : 0, pos,
                                     c->timeout_s, c->world, comm_rec_now_ns());
    // A node that names nobody (its own ranks all entered the operation and still run: the one
    // the job waits for is on another node) lets that node speak first: the first line out
    // aborts the job, and the other node's line is the one that names the rank.
    if (named == 0 && c->world > im->rec_n) sleep_s(2 * grace);
    size_t n = strlen(line);
    line[n++] = '\n';
    fflush(stdout);
    ssize_t w = write(STDERR_FILENO, line, n);  // one write: lines of ranks never interleave
    (void)w;
    abort_quietly(c, COMM_EXIT_TIMEOUT, in_watchdog);
}

// The node's rings: one MPI shared-memory window (local rank 0 allocates the claim and every
// rank's ring; each rank writes only its own). Without it (a failed allocation) each rank
// keeps its ring in private memory and speaks for itself.
static void rec_init(comm_t* c) {
    comm_impl_t* im = c->impl;
    const size_t head = 64, one = sizeof(comm_rec_ring_t);
    im->rec_rings = calloc((size_t)c->local_world, sizeof *im->rec_rings);
    if (!im->rec_rings) DIE("comm: out of host memory");
    void* base = NULL;
    const MPI_Aint bytes = c->local_rank == 0 ? (MPI_Aint)(head + one * (size_t)c->local_world) : 0;
    int ok = c->local_world > 1 &&
             MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, im->node, &base, &im->rec_win) == MPI_SUCCESS;
    if (ok) {
        MPI_Aint sz = 0;
        int disp = 0;
        char* b0 = NULL;
        ok = MPI_Win_shared_query(im->rec_win, 0, &sz, &disp, &b0) == MPI_SUCCESS && b0 &&
             MPI_Win_lock_all(MPI_MODE_NOCHECK, im->rec_win) == MPI_SUCCESS;
        if (ok) {
            if (c->local_rank == 0) memset(b0, 0, (size_t)bytes);
            MPI_Win_sync(im->rec_win);
            watchdog_arm_pos(c, "setting up the flight recorder", c->timeout_s, 0);
            MPI_CHECK(MPI_Barrier(im->node));
            comm_watchdog_disarm(c);
            MPI_Win_sync(im->rec_win);
            im->rec_claim = (int64_t*)b0;
            for (int i = 0; i < c->local_world; i++) im->rec_rings[i] = (comm_rec_ring_t*)(b0 + head + one * (size_t)i);
            im->rec = im->rec_rings[c->local_rank];
            im->rec_n = c->local_world;
            im->rec_shared = 1;
        }
    }
    if (!ok) {
        im->rec = calloc(1, one);
        if (!im->rec) DIE("comm: out of host memory");
        im->rec_rings[0] = im->rec;
        im->rec_n = 1;
    }
    comm_rec_reset(im->rec, c->rank);
    if (c->name[0]) comm_rec_set_group(im->rec, c->name, c->world_rank);
}

static void rec_destroy(comm_t* c) {
    comm_impl_t* im = c->impl;
    if (im->rec_shared) {
        __atomic_store_n(&im->rec->used, 0, __ATOMIC_RELEASE);
        watchdog_arm_pos(c, "freeing the flight recorder", c->timeout_s, 0);
        MPI_Win_unlock_all(im->rec_win);
        MPI_CHECK(MPI_Win_free(&im->rec_win));
        comm_watchdog_disarm(c);
    } else {
        free(im->rec);
    }
    free(im->rec_rings);
    im->rec = NULL;
}

// ------------------------------------------------------------------ fatal
void comm_fatal(comm_t* c, int status, const char* fmt, ...) {
    va_list ap;
    char who[64] = "rank 0";
    if (c) comm_rank_label(c, who, sizeof who);
    fflush(stdout);
    fprintf(stderr, "%s: ", who);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    // The abort can hang (NCCL issues #829, #1777): the watchdog ends the process regardless.
    comm_watchdog_arm(c, "aborting the communicator", 10.0);
    if (c && c->backend == COMM_NCCL) comm_nccl_abort(c);
    int init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Abort(MPI_COMM_WORLD, status);
    _exit(status);
}

// ------------------------------------------------------------------ requests
comm_req_t* comm_req_new(const char* what) {
    comm_req_t* r = calloc(1, sizeof *r);
    if (!r) DIE("comm: out of host memory for a request");
    r->what = what;
    return r;
}

void comm_req_free(comm_req_t* r) {
    if (!r) return;
    if (r->has_event) CUDA_CHECK(cudaEventDestroy(r->event));
    free(r->tmp);
    free(r);
}

void comm_scale(void* buf, size_t count, comm_dtype_t dt, double factor) {
    if (dt == COMM_F32) {
        float* p = buf;
        const float f = (float)factor;
        for (size_t i = 0; i < count; i++) p[i] *= f;
    } else if (dt == COMM_F64) {
        double* p = buf;
        for (size_t i = 0; i < count; i++) p[i] *= factor;
    } else if (dt == COMM_BF16) {  // widened, scaled in fp32, rounded back
        uint16_t* p = buf;
        const float f = (float)factor;
        for (size_t i = 0; i < count; i++) p[i] = bf16_from_f32(f32_from_bf16(p[i]) * f);
    } else {
        DIE("comm: average of a non-float type");
    }
}

// ------------------------------------------------------------------ MPI mapping
static MPI_Datatype mpi_type(comm_dtype_t dt) {
    switch (dt) {
    case COMM_F32: return MPI_FLOAT;
    case COMM_I32: return MPI_INT;
    case COMM_U8: return MPI_BYTE;
    case COMM_F64: return MPI_DOUBLE;
    case COMM_BF16: return MPI_UINT16_T;  // moved as its 16 raw bits; reduced by bf16_sum below
    }
    DIE("comm: unknown dtype %d", (int)dt);
}

// bf16 has no MPI type: it travels as 16-bit words, and a SUM (or AVG) of it is a user op that
// widens both operands to fp32, adds, and rounds the sum back to bf16 (round-to-nearest-even,
// common/dtype.h) — what a bf16 reduction does on the GPU, one rounding per addition.
static void bf16_sum(void* in, void* inout, int* len, MPI_Datatype* type) {
    (void)type;
    const uint16_t* a = in;
    uint16_t* b = inout;
    for (int i = 0; i < *len; i++) b[i] = bf16_from_f32(f32_from_bf16(a[i]) + f32_from_bf16(b[i]));
}

static MPI_Op mpi_op(comm_op_t op);
static MPI_Op mpi_op_dt(comm_op_t op, comm_dtype_t dt) {
    if (dt != COMM_BF16) return mpi_op(op);
    if (op != COMM_SUM && op != COMM_AVG) fail("the MPI backend reduces bf16 by sum or avg only (got %s)", comm_op_name(op));
    static MPI_Op sum = MPI_OP_NULL;  // made once, commutative
    if (sum == MPI_OP_NULL) MPI_CHECK(MPI_Op_create(bf16_sum, 1, &sum));
    return sum;
}

static MPI_Op mpi_op(comm_op_t op) {
    switch (op) {
    case COMM_SUM: case COMM_AVG: return MPI_SUM;  // AVG: SUM, then × 1/world
    case COMM_MAX: return MPI_MAX;
    case COMM_MIN: return MPI_MIN;
    }
    DIE("comm: unknown reduction %d", (int)op);
}

// MPI counts are int: refuse what does not fit rather than wrap.
static int mpi_count(size_t count, const char* what) {
    if (count > (size_t)0x7fffffff)
        DIE("comm: %s of %zu elements: the MPI backend takes at most 2^31-1 per call", what, count);
    return (int)count;
}

// ------------------------------------------------------------------ nodes
// CS336_EMULATE_NODES (comm.h "Nodes"): 0 when unset or empty, else N >= 1 dividing the world.
static int emulated_nodes(int world) {
    const char* s = getenv("CS336_EMULATE_NODES");
    if (!s || !*s) return 0;
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > world || world % v != 0)
        comm_bad_input("CS336_EMULATE_NODES=%s: expected a node count that divides the job's %d ranks", s, world);
    return (int)v;
}

// Ranks list of a node for its report: runs of 3 or more as a-b, e.g. "0-3,8,9".
static void put_ranks(char* out, size_t cap, const int* node_of, int world, int node) {
    size_t n = 0;
    out[0] = '\0';
    for (int r = 0; r < world && n + 32 < cap; r++) {
        if (node_of[r] != node) continue;
        int e = r;
        while (e + 1 < world && node_of[e + 1] == node) e++;
        if (e - r >= 2) {
            n += (size_t)snprintf(out + n, cap - n, "%s%d-%d", n ? "," : "", r, e);
            r = e;
        } else {
            n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? "," : "", r);
        }
    }
}

// Which ranks share a node. The machine's ranks come from MPI's shared-memory split; under
// CS336_EMULATE_NODES=N the world is cut into N contiguous blocks of world/N ranks, each a node
// of its own (its ranks share the flight recorder's window; nothing is shared across blocks, and
// the shared-memory all-reduce, which needs the whole job on one node, is off). A block must lie
// on one machine. The GPU of a rank stays its place on the machine (impl->host_rank). Rank 0
// prints one line per node when the job spans machines, under emulation, or with COMM_VERBOSE=1.
static void node_split(comm_t* c) {
    comm_impl_t* im = c->impl;
    MPI_Comm host;
    MPI_CHECK(MPI_Comm_split_type(im->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &host));
    MPI_CHECK(MPI_Comm_rank(host, &im->host_rank));
    MPI_CHECK(MPI_Comm_size(host, &im->host_world));
    im->emulated_nodes = emulated_nodes(c->world);
    if (im->emulated_nodes) {
        const int per = c->world / im->emulated_nodes;
        MPI_CHECK(MPI_Comm_split(host, c->rank / per, c->rank, &im->node));
        MPI_CHECK(MPI_Comm_free(&host));
        int whole = 0, mine = 0;
        MPI_CHECK(MPI_Comm_size(im->node, &mine));
        mine = mine == per;
        MPI_CHECK(MPI_Allreduce(&mine, &whole, 1, MPI_INT, MPI_MIN, im->world));
        if (!whole)
            comm_bad_input("CS336_EMULATE_NODES=%d: a block of %d ranks spans machines; give a count whose blocks "
                           "each lie on one machine", im->emulated_nodes, per);
    } else {
        im->node = host;
    }
    MPI_CHECK(MPI_Comm_rank(im->node, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(im->node, &c->local_world));

    // A job that spans machines says so at its start; one on a single machine only when asked.
    int one_machine = im->host_world == c->world;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &one_machine, 1, MPI_INT, MPI_MIN, im->world));
    const char* v = getenv("COMM_VERBOSE");
    if (!im->emulated_nodes && one_machine && !(v && *v && strcmp(v, "0") != 0)) return;
    // Every rank's node: the world rank of the node's first rank, numbered in order of it.
    int first = c->rank;
    MPI_CHECK(MPI_Bcast(&first, 1, MPI_INT, 0, im->node));
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    int* firsts = c->rank == 0 ? malloc(sizeof(int) * (size_t)c->world) : NULL;
    char* names = c->rank == 0 ? malloc((size_t)MPI_MAX_PROCESSOR_NAME * (size_t)c->world) : NULL;
    if (c->rank == 0 && (!firsts || !names)) DIE("comm: out of host memory");
    MPI_CHECK(MPI_Gather(&first, 1, MPI_INT, firsts, 1, MPI_INT, 0, im->world));
    MPI_CHECK(MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, im->world));
    if (c->rank != 0) return;
    int nodes = 0;
    for (int r = 0; r < c->world; r++) {
        if (firsts[r] == r) {
            for (int q = r; q < c->world; q++)
                if (firsts[q] == r) firsts[q] = -1 - nodes;  // node index, negative while numbering
            nodes++;
        }
    }
    for (int r = 0; r < c->world; r++) firsts[r] = -1 - firsts[r];
    fflush(stdout);
    for (int k = 0; k < nodes; k++) {
        char ranks[512];
        put_ranks(ranks, sizeof ranks, firsts, c->world, k);
        int r0 = 0;
        while (firsts[r0] != k) r0++;
        fprintf(stderr, "comm: node %d of %d%s: ranks %s on %s\n", k, nodes, im->emulated_nodes ? " (emulated)" : "",
                ranks, names + (size_t)r0 * MPI_MAX_PROCESSOR_NAME);
    }
    fflush(stderr);
    free(firsts);
    free(names);
}

// ------------------------------------------------------------------ init
static int g_mpi_started_here = 0;

comm_t* comm_init(comm_backend_t backend, double timeout_s) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
        int provided = 0;
        // FUNNELED: only the main thread calls MPI (the watchdog never does).
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            DIE("MPI_Init_thread failed");
        g_mpi_started_here = 1;
    }
    comm_t* c = calloc(1, sizeof *c);
    comm_impl_t* im = calloc(1, sizeof *im);
    if (!c || !im) DIE("comm: out of host memory");
    c->impl = im;
    c->backend = backend;
    c->timeout_s = timeout_s > 0 ? timeout_s : comm_timeout_from_env();
    c->device = -1;

    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &im->world));
    // Errors come back as return codes (checked by MPI_CHECK), not as a silent abort.
    MPI_CHECK(MPI_Comm_set_errhandler(im->world, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(im->world, &c->rank));
    MPI_CHECK(MPI_Comm_size(im->world, &c->world));
    node_split(c);
    g_main_thread = pthread_self();
    g_main_thread_set = 1;
    c->world_rank = c->rank;
    rec_init(c);

    if (backend == COMM_NCCL) comm_nccl_init(c);
    return c;
}

void comm_destroy(comm_t* c, int finalize_mpi) {
    if (!c) return;
    const int group = c->impl->is_group;
    if (c->backend == COMM_NCCL) comm_nccl_destroy(c);
    comm_shm_destroy(c);
    rec_destroy(c);
    MPI_CHECK(MPI_Comm_free(&c->impl->node));
    MPI_CHECK(MPI_Comm_free(&c->impl->world));
    free(c->impl);
    free(c);
    if (finalize_mpi && !group) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
}

// ------------------------------------------------------------------ groups
const char* comm_rank_label(const comm_t* c, char* buf, size_t len) {
    if (c->name[0]) snprintf(buf, len, "%s rank %d (world rank %d)", c->name, c->rank, c->world_rank);
    else snprintf(buf, len, "rank %d", c->rank);
    return buf;
}

static int group_name_ok(const char* name) {
    if (!name || !*name || strlen(name) >= sizeof ((comm_t*)0)->name) return 0;
    for (const char* p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return 0;
    return 1;
}

// A group is built like the world (comm_init) on the communicator MPI_Comm_split returns:
//   node:  its members on this rank's node. Which ranks share a node is the parent's node
//          split (the world's: comm_init), named by the lowest job rank of that node part,
//          so the group follows however the world was split into nodes.
//   recorder: rings of its own (operations are numbered per communicator), in a window over
//          the group's node part; the speaker's claim stays the world's (one line per node,
//          whichever communicator's deadline passes first).
//   shm all-reduce: group-aware as it stands: comm_shm.c sets its window up on first use over
//          impl->node and impl->world, which are the group's, so each group reduces in ITS
//          rank order through a window of its own, and two groups never share a barrier.
comm_t* comm_split(comm_t* p, int color, int key, const char* name) {
    if (!group_name_ok(name))
        comm_fatal(p, 1, "comm_split: group name '%s': expected 1-15 letters, digits, '-' or '_'", name ? name : "(null)");
    comm_impl_t* pim = p->impl;
    int node_id = p->world_rank;
    const int64_t pos = comm_rec_start(p, COMM_REC_SPLIT, 0, -1);
    ARM_OP(p, "a split of the communicator");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &node_id, 1, MPI_INT, MPI_MIN, pim->node));
    MPI_Comm nc = MPI_COMM_NULL, node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(pim->world, color < 0 ? MPI_UNDEFINED : color, key, &nc));
    if (nc != MPI_COMM_NULL) {
        int r = 0;
        MPI_CHECK(MPI_Comm_rank(nc, &r));
        MPI_CHECK(MPI_Comm_split(nc, node_id, r, &node));
    }
    comm_watchdog_disarm(p);
    comm_rec_end(p, pos);
    comm_t* g = NULL;
    if (nc != MPI_COMM_NULL) {
        g = calloc(1, sizeof *g);
        comm_impl_t* im = calloc(1, sizeof *im);
        if (!g || !im) DIE("comm: out of host memory");
        g->impl = im;
        im->is_group = 1;
        g->backend = p->backend;
        g->timeout_s = p->timeout_s;
        g->device = p->device;
        g->world_rank = p->world_rank;
        snprintf(g->name, sizeof g->name, "%s", name);
        im->world = nc;
        MPI_CHECK(MPI_Comm_set_errhandler(im->world, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Comm_rank(im->world, &g->rank));
        MPI_CHECK(MPI_Comm_size(im->world, &g->world));
        im->node = node;
        MPI_CHECK(MPI_Comm_rank(im->node, &g->local_rank));
        MPI_CHECK(MPI_Comm_size(im->node, &g->local_world));
        rec_init(g);
        if (pim->rec_claim) im->rec_claim = pim->rec_claim;  // its own window's stays unused
    }
    if (p->backend == COMM_NCCL) comm_nccl_split(p, g, color, key);
    return g;
}

device_t comm_device_kind(const comm_t* c) { return c->backend == COMM_NCCL ? DEV_CUDA : DEV_CPU; }

void* comm_alloc(const comm_t* c, size_t bytes, mem_tag_t tag) {
    return mem_alloc(comm_device_kind(c), bytes, tag);
}

cudaStream_t comm_stream(const comm_t* c) { return c->impl->stream; }

// ------------------------------------------------------------------ waiting
// MPI: test until done or past the deadline. sched_yield keeps oversubscribed ranks (more
// ranks than cores, as in CI) from starving each other.
static void consistent_phase2(comm_t* c, comm_req_t* q, int blocking);

static void mpi_wait(comm_t* c, comm_req_t* r) {
    comm_clock_t k;
    comm_clock_start(&k);
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Testall(r->n_mpi, r->mpi, &done, MPI_STATUSES_IGNORE));
        if (done && r->phase2) {  // a two-phase all-reduce: its second half starts now
            consistent_phase2(c, r, 0);
            continue;
        }
        if (done) break;
        if (comm_clock_elapsed(&k) > c->timeout_s) comm_deadline(c, r->rec_pos);
        comm_rec_tick(c);
        sched_yield();
    }
    if (r->tmp) memcpy(r->tmp_dst, r->tmp, r->tmp_bytes);
    if (r->scale_buf) comm_scale(r->scale_buf, r->scale_count, r->scale_dt, 1.0 / c->world);
}

void comm_wait(comm_t* c, comm_req_t* r) {
    if (!r) return;
    if (c->backend == COMM_NCCL) {
        if (c->impl->in_group) DIE("comm_wait inside a group: end the group first");
        if (r->has_event) comm_nccl_wait_event(c, r->event, r->what, r->rec_pos);
    } else {
        mpi_wait(c, r);
    }
    comm_rec_end(c, r->rec_pos);
    comm_req_free(r);
}

void comm_waitall(comm_t* c, comm_req_t** reqs, int n) {
    for (int i = 0; i < n; i++) {
        comm_wait(c, reqs[i]);
        reqs[i] = NULL;
    }
}

void comm_detach(comm_t* c, comm_req_t* r) {
    if (!r) return;
    if (c->backend != COMM_NCCL) DIE("comm_detach of an MPI request: MPI requests must be waited");
    // Inside a group the request is still on the group's list (comm_group_end records its event).
    if (c->impl->in_group > 0) DIE("comm_detach inside comm_group_start/end: detach after comm_group_end");
    comm_req_free(r);
}

void comm_stream_sync(comm_t* c, cudaStream_t stream, const char* what) {
    if (c->backend != COMM_NCCL) return;
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, stream ? stream : c->impl->stream));
    comm_nccl_wait_event(c, ev, what, 0);
    CUDA_CHECK(cudaEventDestroy(ev));
    comm_rec_done_upto(c->impl->rec, c->impl->rec_last, comm_rec_now_ns());  // detached ones too
}

// ------------------------------------------------------------------ MPI operations
// Each returns a request; the blocking forms below wait on it. Blocking collectives use the
// blocking MPI call (its tuned algorithms are faster than the non-blocking ones) under the
// watchdog instead.
#define BLOCKING_MPI(what, call)                       \
    do {                                               \
        ARM_OP(c, what);                               \
        MPI_CHECK(call);                               \
        comm_watchdog_disarm(c);                       \
    } while (0)

static void check_bufs(comm_t* c, const void* a, const void* b, size_t count, const char* what) {
    if (count && (!a || !b)) comm_fatal(c, 1, "%s: NULL buffer for %zu elements", what, count);
}

// All-reduce on the MPI backend. On 1-2 ranks MPI_Allreduce: a + b is the same bits on both
// ranks. On more ranks MPI's algorithms (recursive doubling and friends) may add the terms in
// a different order on each rank, and the replicas of data-parallel training would drift
// apart bit by bit. So there every element is reduced by ONE rank and then copied to all:
//   phase 1: reduce-scatter of n equal blocks (+ a reduce to rank 0 of the remainder),
//   phase 2: all-gather of the blocks (+ a broadcast of the remainder)
// — the ring all-reduce's own structure, with the same bytes on the wire.
static MPI_Datatype mpi_type(comm_dtype_t dt);
static MPI_Op mpi_op_dt(comm_op_t op, comm_dtype_t dt);
static int mpi_count(size_t count, const char* what);

static void consistent_phase1(comm_t* c, comm_req_t* q, const void* s, void* r, size_t count,
                              comm_dtype_t dt, comm_op_t op, int blocking) {
    const int n = c->world, me = c->rank;
    const size_t es = comm_dtype_size(dt), base = count / (size_t)n, rem = count % (size_t)n;
    char* out = r;
    q->ar_buf = out;
    q->ar_base = base;
    q->ar_rem = rem;
    q->ar_dt = dt;
    q->phase2 = 1;
    const int inplace = s == r;
    MPI_Comm w = c->impl->world;
    // MPI_IN_PLACE reduce-scatter leaves this rank's block at the front of the buffer.
    q->ar_move = inplace && me > 0 && base > 0;
    if (base > 0) {
        const void* in = inplace ? MPI_IN_PLACE : s;
        void* dst = inplace ? out : out + (size_t)me * base * es;
        int nb = mpi_count(base, q->what);
        if (blocking) MPI_CHECK(MPI_Reduce_scatter_block(in, dst, nb, mpi_type(dt), mpi_op_dt(op, dt), w));
        else MPI_CHECK(MPI_Ireduce_scatter_block(in, dst, nb, mpi_type(dt), mpi_op_dt(op, dt), w, &q->mpi[q->n_mpi++]));
    }
    if (rem > 0) {
        char* tail = out + (size_t)n * base * es;
        const void* in = inplace ? (me == 0 ? MPI_IN_PLACE : (const void*)tail) : (const char*)s + (size_t)n * base * es;
        if (blocking) MPI_CHECK(MPI_Reduce(in, tail, (int)rem, mpi_type(dt), mpi_op_dt(op, dt), 0, w));
        else MPI_CHECK(MPI_Ireduce(in, tail, (int)rem, mpi_type(dt), mpi_op_dt(op, dt), 0, w, &q->mpi[q->n_mpi++]));
    }
}

static void consistent_phase2(comm_t* c, comm_req_t* q, int blocking) {
    const size_t es = comm_dtype_size(q->ar_dt), base = q->ar_base, rem = q->ar_rem;
    char* out = q->ar_buf;
    MPI_Comm w = c->impl->world;
    q->phase2 = 0;
    q->n_mpi = 0;
    if (q->ar_move) memmove(out + (size_t)c->rank * base * es, out, base * es);
    if (base > 0) {
        int nb = mpi_count(base, q->what);
        if (blocking) MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, nb, mpi_type(q->ar_dt), out, nb, mpi_type(q->ar_dt), w));
        else MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, nb, mpi_type(q->ar_dt), out, nb, mpi_type(q->ar_dt), w, &q->mpi[q->n_mpi++]));
    }
    if (rem > 0) {
        char* tail = out + (size_t)c->world * base * es;
        if (blocking) MPI_CHECK(MPI_Bcast(tail, (int)rem, mpi_type(q->ar_dt), 0, w));
        else MPI_CHECK(MPI_Ibcast(tail, (int)rem, mpi_type(q->ar_dt), 0, w, &q->mpi[q->n_mpi++]));
    }
}

static comm_req_t* mpi_allreduce(comm_t* c, const void* s, void* r, size_t count,
                                 comm_dtype_t dt, comm_op_t op, int blocking) {
    comm_req_t* q = comm_req_new("all-reduce");
    int n = mpi_count(count, q->what);
    // Blocking, f32/f64, every rank on this node: the shared-memory all-reduce (comm_shm.c),
    // one copy in and one out instead of MPI's message copies; each element reduced by one
    // rank in rank order, so bitwise identical everywhere. COMM_SHM=0 turns it off. The
    // non-blocking form stays on MPI (it must progress while the caller computes). On 3+
    // ranks both reduce each element on one rank, but not necessarily in the same order: a
    // blocking and a non-blocking all-reduce of the same data may differ in the last bits.
    if (blocking && c->world > 1 && (dt == COMM_F32 || dt == COMM_F64)) {
        ARM_OP(c, q->what);
        const int done = comm_shm_allreduce(c, s, r, count, dt, op);
        comm_watchdog_disarm(c);
        if (done) return q;  // AVG already scaled
    }
    if (c->world > 2 && (dt == COMM_F32 || dt == COMM_F64)) {
        if (blocking) {
            ARM_OP(c, q->what);
            consistent_phase1(c, q, s, r, count, dt, op, 1);
            consistent_phase2(c, q, 1);
            comm_watchdog_disarm(c);
        } else {
            consistent_phase1(c, q, s, r, count, dt, op, 0);  // phase 2 is posted by mpi_wait
        }
    } else {
        const void* sb = (s == r) ? MPI_IN_PLACE : s;
        if (blocking) {
            BLOCKING_MPI(q->what, MPI_Allreduce(sb, r, n, mpi_type(dt), mpi_op_dt(op, dt), c->impl->world));
        } else {
            MPI_CHECK(MPI_Iallreduce(sb, r, n, mpi_type(dt), mpi_op_dt(op, dt), c->impl->world, &q->mpi[0]));
            q->n_mpi = 1;
        }
    }
    if (op == COMM_AVG) { q->scale_buf = r; q->scale_count = count; q->scale_dt = dt; }
    return q;
}

static comm_req_t* mpi_broadcast(comm_t* c, const void* s, void* r, size_t count,
                                 comm_dtype_t dt, int root, int blocking) {
    comm_req_t* q = comm_req_new("broadcast");
    if (root < 0 || root >= c->world) comm_fatal(c, 1, "broadcast from rank %d of %d", root, c->world);
    size_t bytes = count * comm_dtype_size(dt);
    if (c->rank == root && s != r && bytes) memmove(r, s, bytes);  // MPI_Bcast is in place
    int n = mpi_count(count, q->what);
    if (blocking) {
        BLOCKING_MPI(q->what, MPI_Bcast(r, n, mpi_type(dt), root, c->impl->world));
    } else {
        MPI_CHECK(MPI_Ibcast(r, n, mpi_type(dt), root, c->impl->world, &q->mpi[0]));
        q->n_mpi = 1;
    }
    return q;
}

static comm_req_t* mpi_reduce_scatter(comm_t* c, const void* s, void* r, size_t recvcount,
                                      comm_dtype_t dt, comm_op_t op, int blocking) {
    comm_req_t* q = comm_req_new("reduce-scatter");
    size_t bytes = recvcount * comm_dtype_size(dt);
    void* out = r;
    // In place (NCCL's convention: r == s + rank·recvcount) would overlap MPI's input and
    // output: receive into a temporary and copy it into place once complete.
    if ((const char*)r == (const char*)s + (size_t)c->rank * bytes && bytes) {
        q->tmp = malloc(bytes);
        if (!q->tmp) DIE("comm: out of host memory (%zu bytes)", bytes);
        q->tmp_dst = r;
        q->tmp_bytes = bytes;
        out = q->tmp;
    }
    int n = mpi_count(recvcount, q->what);
    mpi_count(recvcount * (size_t)c->world, q->what);
    if (blocking) {
        BLOCKING_MPI(q->what, MPI_Reduce_scatter_block(s, out, n, mpi_type(dt), mpi_op_dt(op, dt), c->impl->world));
        if (q->tmp) memcpy(q->tmp_dst, q->tmp, bytes);
    } else {
        MPI_CHECK(MPI_Ireduce_scatter_block(s, out, n, mpi_type(dt), mpi_op_dt(op, dt), c->impl->world,
                                            &q->mpi[0]));
        q->n_mpi = 1;
    }
    if (op == COMM_AVG) { q->scale_buf = r; q->scale_count = recvcount; q->scale_dt = dt; }
    return q;
}

static comm_req_t* mpi_allgather(comm_t* c, const void* s, void* r, size_t sendcount,
                                 comm_dtype_t dt, int blocking) {
    comm_req_t* q = comm_req_new("all-gather");
    size_t bytes = sendcount * comm_dtype_size(dt);
    // In place: this rank's block already sits at r + rank·sendcount.
    const void* sb = ((const char*)s == (const char*)r + (size_t)c->rank * bytes) ? MPI_IN_PLACE : s;
    int n = mpi_count(sendcount, q->what);
    mpi_count(sendcount * (size_t)c->world, q->what);
    if (blocking) {
        BLOCKING_MPI(q->what, MPI_Allgather(sb, n, mpi_type(dt), r, n, mpi_type(dt), c->impl->world));
    } else {
        MPI_CHECK(MPI_Iallgather(sb, n, mpi_type(dt), r, n, mpi_type(dt), c->impl->world, &q->mpi[0]));
        q->n_mpi = 1;
    }
    return q;
}

static void check_peer(comm_t* c, int peer, const char* what) {
    if (peer < 0 || peer >= c->world) comm_fatal(c, 1, "%s: peer %d is not a rank of 0..%d", what, peer, c->world - 1);
}

// ------------------------------------------------------------------ the public operations
// A blocking NCCL operation is the non-blocking one followed by a wait; a blocking MPI one
// completes inside the mpi_* call (its request has nothing left but the scaling for AVG).
static void finish_blocking(comm_t* c, comm_req_t* q) {
    if (c->backend == COMM_MPI) {
        if (q->scale_buf) comm_scale(q->scale_buf, q->scale_count, q->scale_dt, 1.0 / c->world);
        comm_rec_end(c, q->rec_pos);
        comm_req_free(q);
    } else {
        comm_wait(c, q);
    }
}

// Every operation is recorded (the flight recorder) before it starts; its request carries the
// entry, marked done when the request is waited.
static comm_req_t* rec_req(comm_req_t* q, int64_t pos) {
    q->rec_pos = pos;
    return q;
}
#define REC(c, kind, count, dt, peer) comm_rec_start((c), (kind), (count) * comm_dtype_size(dt), (peer))

comm_req_t* comm_iallreduce(comm_t* c, const void* s, void* r, size_t count, comm_dtype_t dt,
                            comm_op_t op, cudaStream_t stream) {
    check_bufs(c, s, r, count, "all-reduce");
    const int64_t pos = REC(c, COMM_REC_ALLREDUCE, count, dt, -1);
    if (c->backend == COMM_NCCL) return rec_req(comm_nccl_op(c, 'a', s, r, count, dt, op, 0, stream, "all-reduce"), pos);
    return rec_req(mpi_allreduce(c, s, r, count, dt, op, 0), pos);
}
void comm_allreduce(comm_t* c, const void* s, void* r, size_t count, comm_dtype_t dt,
                    comm_op_t op, cudaStream_t stream) {
    check_bufs(c, s, r, count, "all-reduce");
    const int64_t pos = REC(c, COMM_REC_ALLREDUCE, count, dt, -1);
    finish_blocking(c, rec_req(c->backend == COMM_NCCL
                                   ? comm_nccl_op(c, 'a', s, r, count, dt, op, 0, stream, "all-reduce")
                                   : mpi_allreduce(c, s, r, count, dt, op, 1), pos));
}

comm_req_t* comm_ibroadcast(comm_t* c, const void* s, void* r, size_t count, comm_dtype_t dt,
                            int root, cudaStream_t stream) {
    const int64_t pos = REC(c, COMM_REC_BROADCAST, count, dt, -1);
    if (c->backend == COMM_NCCL) return rec_req(comm_nccl_op(c, 'b', s, r, count, dt, COMM_SUM, root, stream, "broadcast"), pos);
    return rec_req(mpi_broadcast(c, s, r, count, dt, root, 0), pos);
}
void comm_broadcast(comm_t* c, const void* s, void* r, size_t count, comm_dtype_t dt, int root,
                    cudaStream_t stream) {
    const int64_t pos = REC(c, COMM_REC_BROADCAST, count, dt, -1);
    finish_blocking(c, rec_req(c->backend == COMM_NCCL
                                   ? comm_nccl_op(c, 'b', s, r, count, dt, COMM_SUM, root, stream, "broadcast")
                                   : mpi_broadcast(c, s, r, count, dt, root, 1), pos));
}

comm_req_t* comm_ireduce_scatter(comm_t* c, const void* s, void* r, size_t recvcount,
                                 comm_dtype_t dt, comm_op_t op, cudaStream_t stream) {
    check_bufs(c, s, r, recvcount, "reduce-scatter");
    const int64_t pos = REC(c, COMM_REC_REDUCE_SCATTER, recvcount * (size_t)c->world, dt, -1);
    if (c->backend == COMM_NCCL) return rec_req(comm_nccl_op(c, 'r', s, r, recvcount, dt, op, 0, stream, "reduce-scatter"), pos);
    return rec_req(mpi_reduce_scatter(c, s, r, recvcount, dt, op, 0), pos);
}
void comm_reduce_scatter(comm_t* c, const void* s, void* r, size_t recvcount, comm_dtype_t dt,
                         comm_op_t op, cudaStream_t stream) {
    check_bufs(c, s, r, recvcount, "reduce-scatter");
    const int64_t pos = REC(c, COMM_REC_REDUCE_SCATTER, recvcount * (size_t)c->world, dt, -1);
    finish_blocking(c, rec_req(c->backend == COMM_NCCL
                                   ? comm_nccl_op(c, 'r', s, r, recvcount, dt, op, 0, stream, "reduce-scatter")
                                   : mpi_reduce_scatter(c, s, r, recvcount, dt, op, 1), pos));
}

comm_req_t* comm_iallgather(comm_t* c, const void* s, void* r, size_t sendcount, comm_dtype_t dt,
                            cudaStream_t stream) {
    check_bufs(c, s, r, sendcount, "all-gather");
    const int64_t pos = REC(c, COMM_REC_ALLGATHER, sendcount * (size_t)c->world, dt, -1);
    if (c->backend == COMM_NCCL) return rec_req(comm_nccl_op(c, 'g', s, r, sendcount, dt, COMM_SUM, 0, stream, "all-gather"), pos);
    return rec_req(mpi_allgather(c, s, r, sendcount, dt, 0), pos);
}
void comm_allgather(comm_t* c, const void* s, void* r, size_t sendcount, comm_dtype_t dt,
                    cudaStream_t stream) {
    check_bufs(c, s, r, sendcount, "all-gather");
    const int64_t pos = REC(c, COMM_REC_ALLGATHER, sendcount * (size_t)c->world, dt, -1);
    finish_blocking(c, rec_req(c->backend == COMM_NCCL
                                   ? comm_nccl_op(c, 'g', s, r, sendcount, dt, COMM_SUM, 0, stream, "all-gather")
                                   : mpi_allgather(c, s, r, sendcount, dt, 1), pos));
}

// Point to point. The tag is fixed: messages between one pair arrive in the order sent
// (MPI's non-overtaking rule, NCCL's stream order), which is all the ring and the pipeline need.
#define P2P_TAG 7

comm_req_t* comm_isend(comm_t* c, const void* buf, size_t count, comm_dtype_t dt, int peer,
                       cudaStream_t stream) {
    check_peer(c, peer, "send");
    const int64_t pos = REC(c, COMM_REC_SEND, count, dt, peer);
    if (c->backend == COMM_NCCL) return rec_req(comm_nccl_op(c, 's', buf, NULL, count, dt, COMM_SUM, peer, stream, "send"), pos);
    comm_req_t* q = rec_req(comm_req_new("send"), pos);
    MPI_CHECK(MPI_Isend(buf, mpi_count(count, q->what), mpi_type(dt), peer, P2P_TAG, c->impl->world, &q->mpi[0]));
    q->n_mpi = 1;
    return q;
}

comm_req_t* comm_irecv(comm_t* c, void* buf, size_t count, comm_dtype_t dt, int peer,
                       cudaStream_t stream) {
    check_peer(c, peer, "receive");
    const int64_t pos = REC(c, COMM_REC_RECV, count, dt, peer);
    if (c->backend == COMM_NCCL) return rec_req(comm_nccl_op(c, 'v', NULL, buf, count, dt, COMM_SUM, peer, stream, "receive"), pos);
    comm_req_t* q = rec_req(comm_req_new("receive"), pos);
    MPI_CHECK(MPI_Irecv(buf, mpi_count(count, q->what), mpi_type(dt), peer, P2P_TAG, c->impl->world, &q->mpi[0]));
    q->n_mpi = 1;
    return q;
}

void comm_group_start(comm_t* c) {
    if (c->backend == COMM_NCCL) comm_nccl_group_start(c);
}
void comm_group_end(comm_t* c) {
    if (c->backend == COMM_NCCL) comm_nccl_group_end(c);
}

void comm_sendrecv(comm_t* c, const void* sendbuf, size_t sendcount, int dst, void* recvbuf,
                   size_t recvcount, int src, comm_dtype_t dt, cudaStream_t stream) {
    comm_req_t* q[2] = {NULL, NULL};
    comm_group_start(c);
    if (dst >= 0) q[0] = comm_isend(c, sendbuf, sendcount, dt, dst, stream);
    if (src >= 0) q[1] = comm_irecv(c, recvbuf, recvcount, dt, src, stream);
    comm_group_end(c);
    comm_waitall(c, q, 2);
}

void comm_send(comm_t* c, const void* buf, size_t count, comm_dtype_t dt, int peer,
               cudaStream_t stream) {
    comm_sendrecv(c, buf, count, peer, NULL, 0, -1, dt, stream);
}

void comm_recv(comm_t* c, void* buf, size_t count, comm_dtype_t dt, int peer,
               cudaStream_t stream) {
    comm_sendrecv(c, NULL, 0, -1, buf, count, peer, dt, stream);
}

// ------------------------------------------------------------------ host-side helpers
void comm_barrier(comm_t* c) {
    comm_req_t* q = rec_req(comm_req_new("barrier"), comm_rec_start(c, COMM_REC_BARRIER, 0, -1));
    MPI_CHECK(MPI_Ibarrier(c->impl->world, &q->mpi[0]));
    q->n_mpi = 1;
    mpi_wait(c, q);
    comm_rec_end(c, q->rec_pos);
    comm_req_free(q);
}

void comm_host_allreduce_f64(comm_t* c, double* v, int n, comm_op_t op) {
    const int64_t pos = comm_rec_start(c, COMM_REC_HOST_ALLREDUCE, (size_t)n * sizeof(double), -1);
    BLOCKING_MPI("a host all-reduce", MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, mpi_op(op), c->impl->world));
    comm_rec_end(c, pos);
    if (op == COMM_AVG) comm_scale(v, (size_t)n, COMM_F64, 1.0 / c->world);
}

void comm_host_allreduce_i64(comm_t* c, long long* v, int n, comm_op_t op) {
    if (op == COMM_AVG) DIE("comm: average of integers");
    const int64_t pos = comm_rec_start(c, COMM_REC_HOST_ALLREDUCE, (size_t)n * sizeof(long long), -1);
    BLOCKING_MPI("a host all-reduce", MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_LONG_LONG, mpi_op(op), c->impl->world));
    comm_rec_end(c, pos);
}

void comm_host_bcast(comm_t* c, void* buf, size_t bytes, int root) {
    const int64_t pos = comm_rec_start(c, COMM_REC_HOST_BCAST, bytes, -1);
    BLOCKING_MPI("a host broadcast", MPI_Bcast(buf, mpi_count(bytes, "a host broadcast"), MPI_BYTE, root, c->impl->world));
    comm_rec_end(c, pos);
}
