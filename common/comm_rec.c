// The flight recorder's ring and its deadline line (comm_rec.h). No MPI here: comm.c places
// the rings in shared memory and decides which rank speaks.
#include "common/comm_rec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char* const g_names[COMM_REC_NOPS] = {
    "all-reduce", "broadcast", "reduce-scatter", "all-gather", "barrier", "host all-reduce",
    "host broadcast", "NCCL initialisation", "NCCL shutdown", "split", "send", "receive",
};

const char* comm_rec_op_name(comm_rec_op_t op) {
    return (op >= 0 && op < COMM_REC_NOPS) ? g_names[op] : "operation";
}

int64_t comm_rec_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void comm_rec_reset(comm_rec_ring_t* r, int rank) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->world_rank = rank;
    r->used = 1;
}

void comm_rec_set_group(comm_rec_ring_t* r, const char* name, int world_rank) {
    r->world_rank = world_rank;
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
}

static int is_p2p(int op) { return op == COMM_REC_SEND || op == COMM_REC_RECV; }

int64_t comm_rec_begin(comm_rec_ring_t* r, comm_rec_op_t op, size_t bytes, int peer, int64_t now_ns) {
    const int64_t pos = r->pos + 1;
    comm_rec_entry_t* e = &r->e[(pos - 1) % COMM_REC_LEN];
    int64_t num = 0;
    if (op == COMM_REC_SEND || op == COMM_REC_RECV) {
        int64_t* ctr = op == COMM_REC_SEND ? r->sent : r->recvd;
        if (peer >= 0 && peer < COMM_REC_PEERS) num = __atomic_add_fetch(&ctr[peer], 1, __ATOMIC_RELEASE);
    } else {
        num = r->colls + 1;
    }
    e->pos = pos;
    e->num = num;
    e->op = (int32_t)op;
    e->peer = is_p2p(op) ? peer : -1;
    e->bytes = (int64_t)bytes;
    e->t_start_ns = now_ns;
    e->t_done_ns = 0;
    if (!is_p2p(op)) __atomic_store_n(&r->colls, num, __ATOMIC_RELEASE);
    __atomic_store_n(&r->pos, pos, __ATOMIC_RELEASE);
    __atomic_store_n(&r->alive_ns, now_ns, __ATOMIC_RELAXED);
    return pos;
}

void comm_rec_done(comm_rec_ring_t* r, int64_t pos, int64_t now_ns) {
    if (pos <= 0 || pos > r->pos || pos <= r->pos - COMM_REC_LEN) return;
    comm_rec_entry_t* e = &r->e[(pos - 1) % COMM_REC_LEN];
    if (e->pos == pos && !e->t_done_ns) __atomic_store_n(&e->t_done_ns, now_ns, __ATOMIC_RELEASE);
    __atomic_store_n(&r->alive_ns, now_ns, __ATOMIC_RELAXED);
}

void comm_rec_done_upto(comm_rec_ring_t* r, int64_t pos, int64_t now_ns) {
    int64_t lo = r->pos - COMM_REC_LEN + 1;
    if (lo < 1) lo = 1;
    for (int64_t p = pos; p >= lo; p--) {
        const comm_rec_entry_t* e = &r->e[(p - 1) % COMM_REC_LEN];
        if (e->pos == p && e->t_done_ns) break;  // everything older was marked before
        comm_rec_done(r, p, now_ns);
    }
}

int comm_rec_get(const comm_rec_ring_t* r, int64_t pos, comm_rec_entry_t* out) {
    const int64_t newest = __atomic_load_n(&r->pos, __ATOMIC_ACQUIRE);
    if (pos <= 0 || pos > newest || pos <= newest - COMM_REC_LEN) return 0;
    *out = r->e[(pos - 1) % COMM_REC_LEN];
    return out->pos == pos;
}

void comm_rec_alive(comm_rec_ring_t* r, int64_t now_ns) {
    __atomic_store_n(&r->alive_ns, now_ns, __ATOMIC_RELAXED);
}

// ------------------------------------------------------------------ the line
typedef struct {
    char* p;
    size_t left;
} buf_t;

__attribute__((format(printf, 2, 3))) static void put(buf_t* b, const char* fmt, ...) {
    if (b->left <= 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p, b->left, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= b->left) n = (int)b->left - 1;
    b->p += n;
    b->left -= (size_t)n;
}

static void put_bytes(buf_t* b, int64_t bytes) {
    static const char* const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) { v /= 1024.0; u++; }
    if (u == 0) put(b, "%lld B", (long long)bytes);
    else put(b, "%.*f %s", v < 10 ? 1 : 0, v, unit[u]);
}

// A rank of the communicator of `r` (the ring of that rank, or of any rank of the same
// communicator when `own` is 0): "rank 3" on the world, "dp rank 1 (world rank 3)" on a group
// (the world rank only where that rank's own ring is at hand).
static void put_rank(buf_t* b, const comm_rec_ring_t* r, int rank, int own) {
    if (!r || !r->name[0]) {
        put(b, "rank %d", rank);
        return;
    }
    put(b, "%s rank %d", r->name, rank);
    if (own) put(b, " (world rank %d)", r->world_rank);
}

static const comm_rec_ring_t* ring_of(const comm_rec_ring_t* const* rings, int nrings, int rank);

// "all-reduce #3", "send #2 to rank 1", "receive #1 from rank 0"; on a group "dp all-reduce
// #3", "dp send #2 to dp rank 1 (world rank 5)"; with_bytes: " (4.0 KiB)". r: the ring the
// entry belongs to; rings: the node's (to find a peer's world rank), may be NULL.
static void put_op(buf_t* b, const comm_rec_ring_t* r, const comm_rec_entry_t* e, int with_bytes,
                   const comm_rec_ring_t* const* rings, int nrings) {
    if (r && r->name[0]) put(b, "%s ", r->name);
    put(b, "%s #%lld", comm_rec_op_name((comm_rec_op_t)e->op), (long long)e->num);
    if (e->op == COMM_REC_SEND || e->op == COMM_REC_RECV) {
        const comm_rec_ring_t* p = rings ? ring_of(rings, nrings, e->peer) : NULL;
        put(b, e->op == COMM_REC_SEND ? " to " : " from ");
        put_rank(b, p ? p : r, e->peer, p != NULL);
    }
    if (with_bytes && e->bytes > 0) {
        put(b, " (");
        put_bytes(b, e->bytes);
        put(b, ")");
    }
}

static double ago(int64_t now_ns, int64_t t_ns) { return 1e-9 * (double)(now_ns - t_ns); }

// "(last: all-reduce #2, done 5.2 s ago)"
static void put_last(buf_t* b, const comm_rec_ring_t* r, int64_t now_ns) {
    comm_rec_entry_t e;
    if (!comm_rec_get(r, __atomic_load_n(&r->pos, __ATOMIC_ACQUIRE), &e)) {
        put(b, " (last: no operation yet)");
        return;
    }
    put(b, " (last: ");
    put_op(b, r, &e, 0, NULL, 0);
    if (e.t_done_ns) put(b, ", done %.1f s ago)", ago(now_ns, e.t_done_ns));
    else put(b, ", started %.1f s ago, not finished)", ago(now_ns, e.t_start_ns));
}

static const comm_rec_ring_t* ring_of(const comm_rec_ring_t* const* rings, int nrings, int rank) {
    for (int i = 0; i < nrings; i++)
        if (rings[i] && rings[i]->used && rings[i]->rank == rank) return rings[i];
    return NULL;
}

// Ranks of this node that never entered their side of `e` (an entry of rank `me_rank`);
// appended to b (b may be NULL: count only).
static int never_entered(buf_t* b, const comm_rec_entry_t* e, int me_rank,
                         const comm_rec_ring_t* const* rings, int nrings, int64_t now_ns) {
    int n = 0;
    if (is_p2p(e->op)) {
        const comm_rec_ring_t* p = ring_of(rings, nrings, e->peer);
        if (!p || me_rank < 0 || me_rank >= COMM_REC_PEERS) return 0;
        const int64_t* ctr = e->op == COMM_REC_SEND ? p->recvd : p->sent;
        if (__atomic_load_n(&ctr[me_rank], __ATOMIC_ACQUIRE) >= e->num) return 0;
        if (b) {
            put_rank(b, p, e->peer, 1);
            put(b, " never entered the matching %s", e->op == COMM_REC_SEND ? "receive" : "send");
            put_last(b, p, now_ns);
        }
        return 1;
    }
    for (int i = 0; i < nrings; i++) {
        const comm_rec_ring_t* r = rings[i];
        if (!r || !r->used || r->rank == me_rank) continue;
        if (__atomic_load_n(&r->colls, __ATOMIC_ACQUIRE) >= e->num) continue;
        if (b) {
            put(b, "%s", n ? "; " : "");
            put_rank(b, r, r->rank, 1);
            put(b, " never entered it");
            put_last(b, r, now_ns);
        }
        n++;
    }
    return n;
}

#define STALE_NS 1000000000LL  // no sign of life for this long: the rank is not running

int comm_rec_blame(char* out, size_t outlen, const comm_rec_ring_t* const* rings, int nrings,
                   int me, int64_t pos, double timeout_s, int world, int64_t now_ns) {
    buf_t b = {out, outlen};
    if (outlen) out[0] = '\0';
    const comm_rec_ring_t* mine = rings[me];
    const int me_rank = mine->rank;
    const int64_t newest = __atomic_load_n(&mine->pos, __ATOMIC_ACQUIRE);
    int64_t lo = newest - COMM_REC_LEN + 1;
    if (lo < 1) lo = 1;
    comm_rec_entry_t st;
    int have = pos > 0 && comm_rec_get(mine, pos, &st);
    for (int64_t p = lo; !have && p <= newest; p++)  // the oldest unfinished one
        if (comm_rec_get(mine, p, &st) && !st.t_done_ns) have = 1;
    if (!have) have = comm_rec_get(mine, newest, &st);
    put(&b, "comm: deadline %g s passed", timeout_s);
    if (!have) {
        put(&b, " on ");
        put_rank(&b, mine, me_rank, 1);
        put(&b, " before its first operation");
        return 0;
    }
    // The first unfinished operation from the stuck one on that a rank of this node never
    // entered: that rank is the one the job waits for.
    for (int64_t p = st.pos; p <= newest; p++) {
        comm_rec_entry_t e;
        if (!comm_rec_get(mine, p, &e) || (p != st.pos && e.t_done_ns)) continue;
        if (never_entered(NULL, &e, me_rank, rings, nrings, now_ns) == 0) continue;
        put(&b, " in ");
        put_op(&b, mine, &e, 1, rings, nrings);
        put(&b, " on ");
        put_rank(&b, mine, me_rank, 1);
        put(&b, ": ");
        const int n = never_entered(&b, &e, me_rank, rings, nrings, now_ns);
        if (world > nrings) put(&b, "; the ranks of other nodes were not seen");
        return n;
    }
    put(&b, " in ");
    put_op(&b, mine, &st, 1, rings, nrings);
    put(&b, " on ");
    put_rank(&b, mine, me_rank, 1);
    put(&b, ": ");
    // Everyone entered it: name the ranks that stopped answering inside an operation.
    int n = 0;
    for (int i = 0; i < nrings; i++) {
        const comm_rec_ring_t* r = rings[i];
        if (!r || !r->used || r->rank == me_rank) continue;
        comm_rec_entry_t e;
        if (!comm_rec_get(r, __atomic_load_n(&r->pos, __ATOMIC_ACQUIRE), &e) || e.t_done_ns) continue;
        const int64_t alive = __atomic_load_n(&r->alive_ns, __ATOMIC_RELAXED);
        if (now_ns - alive < STALE_NS) continue;
        put(&b, "%s", n ? "; " : "");
        put_rank(&b, r, r->rank, 1);
        put(&b, " stopped answering inside ");
        put_op(&b, r, &e, 0, rings, nrings);
        put(&b, " (started %.1f s ago, no sign of life for %.1f s)", ago(now_ns, e.t_start_ns), ago(now_ns, alive));
        n++;
    }
    if (n == 0) put(&b, "every rank %sentered it and is still running", world > nrings ? "of this node " : "");
    if (world > nrings) put(&b, "; the ranks of other nodes were not seen");
    return n;
}
