// The NCCL backend of the communicator (comm.h): one GPU per rank, bootstrapped over MPI.
// Without NCCL in the build every entry point says so (the MPI backend still works).
//
// No host-side wait outside the deadline: the communicator is created NON-BLOCKING
// (ncclConfig_t.blocking = 0). Then no NCCL call blocks the host: initialisation, the first
// contact between two peers (NCCL connects them lazily, inside the first group or collective
// that needs them), finalisation — each returns ncclInProgress at once and goes on in NCCL's
// own threads. `settle` polls ncclCommGetAsyncError until the communicator is ready again
// (NCCL requires it before the next call on it, and before the stream holds the operation),
// against the deadline; past it, comm_deadline prints the recorder's line and aborts NCCL.
#include "common/comm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/check.h"
#include "common/check_mpi.h"
#include "common/comm_internal.h"
#include "common/gpu.h"

#if HAVE_NCCL
#include "common/check_nccl.h"

static ncclDataType_t nccl_type(comm_dtype_t dt) {
    switch (dt) {
    case COMM_F32: return ncclFloat32;
    case COMM_I32: return ncclInt32;
    case COMM_BF16: return ncclBfloat16;
    case COMM_U8: return ncclUint8;
    case COMM_F64: return ncclFloat64;
    }
    DIE("comm: unknown element type %d", (int)dt);
}

static ncclRedOp_t nccl_op(comm_op_t op) {
    switch (op) {
    case COMM_SUM: return ncclSum;
    case COMM_AVG: return ncclAvg;
    case COMM_MAX: return ncclMax;
    case COMM_MIN: return ncclMin;
    }
    DIE("comm: unknown reduction %d", (int)op);
}

// A set-up error the user can fix: one line from the first rank of each machine, exit 2 on all
// (the others wait a moment so that the line is out before mpirun tears the job down).
static void setup_error(comm_t* c, const char* msg) {
    if (c->impl->host_rank == 0) {
        fflush(stdout);
        fprintf(stderr, "%s: error: %s\n", progname(), msg);
        fflush(stderr);
    } else {
        sleep(2);
    }
    exit(EXIT_BAD_INPUT);
}

// Waits until the communicator has finished what the last call started (`r`, that call's
// result: ncclInProgress while it goes on in the background), polling against the deadline.
static void settle(comm_t* c, ncclResult_t r, int64_t pos, const char* what) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress)
        die_hint_at(__FILE__, __LINE__, "set NCCL_DEBUG=INFO for NCCL's own log", "%s failed: %s (%d)", what,
                    ncclGetErrorString(r), (int)r);
    comm_clock_t k;
    comm_clock_start(&k);
    for (long spins = 0;; spins++) {
        ncclResult_t state = ncclInProgress;
        NCCL_CHECK(ncclCommGetAsyncError(c->impl->nccl, &state));
        if (state == ncclSuccess) return;
        if (state != ncclInProgress)
            comm_fatal(c, 1, "%s failed: NCCL reported %s", what, ncclGetErrorString(state));
        if (comm_clock_elapsed(&k) > c->timeout_s) comm_deadline(c, pos);
        comm_rec_tick(c);
        if (spins > 1000) sched_yield();
    }
}

void comm_nccl_settle(comm_t* c, int nccl_result, const char* what) {
    settle(c, (ncclResult_t)nccl_result, c->impl->rec_last, what);
}

void comm_nccl_init(comm_t* c) {
    comm_impl_t* im = c->impl;
    char msg[256];
    int ngpu = gpu_count();
    if (ngpu == 0) {
        snprintf(msg, sizeof msg, "the NCCL backend needs a CUDA GPU per rank: %s (use --backend mpi)",
                 gpu_absent_reason());
        setup_error(c, msg);
    }
    if (im->host_world > ngpu) {
        snprintf(msg, sizeof msg,
                 "%d ranks on this node but %d GPU%s: the NCCL backend needs one GPU per rank "
                 "(run at most %d ranks per node, or use --backend mpi)",
                 im->host_world, ngpu, ngpu == 1 ? "" : "s", ngpu);
        setup_error(c, msg);
    }
    c->device = im->host_rank;  // the rank's place on its machine (an emulated node is part of one)
    CUDA_CHECK(cudaSetDevice(c->device));  // before any other CUDA call of this rank
    // Emulated nodes: NCCL tells hosts apart by a hash of the hostname, or of NCCL_HOSTID when
    // set, computed once per process at its first use; a distinct id per emulated node makes
    // NCCL treat the other nodes' ranks as remote (its network transport, over NCCL_SOCKET_IFNAME).
    if (im->emulated_nodes && !getenv("NCCL_HOSTID")) {
        char id[64];
        snprintf(id, sizeof id, "cs336-emulated-node-%d", c->rank / (c->world / im->emulated_nodes));
        if (setenv("NCCL_HOSTID", id, 1) != 0) DIE("comm: cannot set NCCL_HOSTID");
    }

    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_host_bcast(c, &id, sizeof id, 0);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // every call returns at once; settle() waits under the deadline
    const int64_t pos = comm_rec_start(c, COMM_REC_INIT, 0, -1);
    settle(c, ncclCommInitRankConfig(&im->nccl, c->world, id, c->rank, &cfg), pos, "NCCL initialisation");
    comm_rec_end(c, pos);
    CUDA_CHECK(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
}

// ncclCommSplit is collective over the parent (ranks that join no group pass
// NCCL_SPLIT_NOCOLOR). Non-blocking like the world's: the call returns at once and NCCL builds
// the child on a thread of its own, writing the new communicator into `nc` only at the very end
// of that work (src/init.cc: "*newcomm should be NCCL_COMM_NULL until comm split fully
// complete"); the parent's state may turn to ncclSuccess before that. So: settle the parent,
// then wait (under the deadline, in the group's recorder as its initialisation) for `nc` to
// appear, then settle the child itself.
void comm_nccl_split(comm_t* p, comm_t* g, int color, int key) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nc = NULL;
    const int64_t pos = g ? comm_rec_start(g, COMM_REC_INIT, 0, -1) : 0;
    const ncclResult_t r = ncclCommSplit(p->impl->nccl, g ? color : NCCL_SPLIT_NOCOLOR, key, &nc, &cfg);
    settle(p, r, p->impl->rec_last, "the NCCL split");
    if (!g) return;
    comm_clock_t k;
    comm_clock_start(&k);
    ncclComm_t got;
    for (long spins = 0; !(got = __atomic_load_n(&nc, __ATOMIC_ACQUIRE)); spins++) {
        ncclResult_t state = ncclInProgress;
        NCCL_CHECK(ncclCommGetAsyncError(p->impl->nccl, &state));
        if (state != ncclSuccess && state != ncclInProgress)
            comm_fatal(g, 1, "the NCCL split failed: NCCL reported %s", ncclGetErrorString(state));
        if (comm_clock_elapsed(&k) > g->timeout_s) comm_deadline(g, pos);
        comm_rec_tick(g);
        if (spins > 1000) sched_yield();
    }
    g->impl->nccl = got;
    settle(g, ncclInProgress, pos, "the NCCL split");
    comm_rec_end(g, pos);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->impl->stream, cudaStreamNonBlocking));
}

void comm_nccl_destroy(comm_t* c) {
    comm_impl_t* im = c->impl;
    comm_stream_sync(c, im->stream, "the last operations before shutdown");
    const int64_t pos = comm_rec_start(c, COMM_REC_SHUTDOWN, 0, -1);
    settle(c, ncclCommFinalize(im->nccl), pos, "NCCL shutdown");  // quiescent: destroy cannot block
    comm_rec_end(c, pos);
    // Finalised: destroy only frees local resources (ncclInProgress, if returned, cannot be
    // polled on a freed communicator and means nothing more).
    const ncclResult_t d = ncclCommDestroy(im->nccl);
    if (d != ncclSuccess && d != ncclInProgress) NCCL_CHECK(d);
    CUDA_CHECK(cudaStreamDestroy(im->stream));
}

void* comm_nccl_handle(const comm_t* c) {
    return c->backend == COMM_NCCL ? (void*)c->impl->nccl : NULL;
}

void comm_nccl_abort(comm_t* c) {
    comm_impl_t* im = c->impl;
    if (im->aborted || !im->nccl) return;
    im->aborted = 1;
    ncclCommAbort(im->nccl);  // its result does not matter: the process ends next
}

comm_req_t* comm_nccl_op(comm_t* c, char kind, const void* s, void* r, size_t count,
                         comm_dtype_t dt, comm_op_t op, int arg, cudaStream_t stream,
                         const char* what) {
    comm_impl_t* im = c->impl;
    cudaStream_t st = stream ? stream : im->stream;
    ncclDataType_t t = nccl_type(dt);
    ncclResult_t res = ncclSuccess;
    switch (kind) {
    case 'a': res = ncclAllReduce(s, r, count, t, nccl_op(op), im->nccl, st); break;
    case 'b':
        if (arg < 0 || arg >= c->world) comm_fatal(c, 1, "broadcast from rank %d of %d", arg, c->world);
        res = ncclBroadcast(s ? s : r, r, count, t, arg, im->nccl, st);
        break;
    case 'r': res = ncclReduceScatter(s, r, count, t, nccl_op(op), im->nccl, st); break;
    case 'g': res = ncclAllGather(s, r, count, t, im->nccl, st); break;
    case 's': res = ncclSend(s, count, t, arg, im->nccl, st); break;
    case 'v': res = ncclRecv(r, count, t, arg, im->nccl, st); break;
    default: DIE("comm: unknown operation '%c'", kind);
    }
    // Inside a group NCCL only queues the call (ncclGroupEnd launches and settles it); alone,
    // the call may still be connecting peers or launching when it returns ncclInProgress.
    if (im->in_group && res == ncclInProgress) res = ncclSuccess;
    if (im->in_group && res != ncclSuccess) settle(c, res, im->rec_last, what);  // an error: dies
    if (!im->in_group) settle(c, res, im->rec_last, what);
    comm_req_t* q = comm_req_new(what);
    CUDA_CHECK(cudaEventCreateWithFlags(&q->event, cudaEventDisableTiming));
    q->has_event = 1;
    q->stream = st;
    if (im->in_group) {
        // Inside a group NCCL launches nothing until ncclGroupEnd: record the event then.
        q->next_in_group = im->group_reqs;
        im->group_reqs = q;
    } else {
        CUDA_CHECK(cudaEventRecord(q->event, st));
    }
    return q;
}

void comm_nccl_group_start(comm_t* c) {
    NCCL_CHECK(ncclGroupStart());
    if (c->impl->in_group++ == 0) c->impl->group_first = 0;
}

void comm_nccl_group_end(comm_t* c) {
    comm_impl_t* im = c->impl;
    if (im->in_group <= 0) DIE("comm_group_end without comm_group_start");
    // The outermost end launches the group: on first contact between two peers it connects
    // them first, which may take until the peer arrives. The deadline names the group's
    // first operation (the recorder tells which peer never entered its side).
    settle(c, ncclGroupEnd(), im->group_first ? im->group_first : im->rec_last, "a group of NCCL operations");
    if (--im->in_group == 0) {
        for (comm_req_t* q = im->group_reqs; q; q = q->next_in_group)
            CUDA_CHECK(cudaEventRecord(q->event, q->stream));
        im->group_reqs = NULL;
    }
}

void comm_nccl_wait_event(comm_t* c, cudaEvent_t ev, const char* what, int64_t pos) {
    comm_clock_t k;
    comm_clock_start(&k);
    for (long spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(c->impl->nccl, &async));
        if (async != ncclSuccess && async != ncclInProgress)
            comm_fatal(c, 1, "%s failed: NCCL reported %s", what, ncclGetErrorString(async));
        if (comm_clock_elapsed(&k) > c->timeout_s) comm_deadline(c, pos);
        comm_rec_tick(c);
        if (spins > 1000) sched_yield();  // spin first: small operations finish in microseconds
    }
}

#else  // no NCCL in this build

__attribute__((noreturn)) static void no_nccl(void) { fail("this build has no NCCL (nccl.h was not found): use --backend mpi"); }
void comm_nccl_init(comm_t* c) { (void)c; no_nccl(); }
void comm_nccl_destroy(comm_t* c) { (void)c; }
void comm_nccl_settle(comm_t* c, int nccl_result, const char* what) {
    (void)c; (void)nccl_result; (void)what;
    no_nccl();
}

void comm_nccl_split(comm_t* p, comm_t* g, int color, int key) {
    (void)p; (void)g; (void)color; (void)key;
    no_nccl();
}
void comm_nccl_abort(comm_t* c) { (void)c; }
void* comm_nccl_handle(const comm_t* c) { (void)c; return NULL; }
comm_req_t* comm_nccl_op(comm_t* c, char kind, const void* s, void* r, size_t count,
                         comm_dtype_t dt, comm_op_t op, int arg, cudaStream_t stream,
                         const char* what) {
    (void)c; (void)kind; (void)s; (void)r; (void)count; (void)dt; (void)op; (void)arg;
    (void)stream; (void)what;
    no_nccl();
}
void comm_nccl_group_start(comm_t* c) { (void)c; no_nccl(); }
void comm_nccl_group_end(comm_t* c) { (void)c; no_nccl(); }
void comm_nccl_wait_event(comm_t* c, cudaEvent_t ev, const char* what, int64_t pos) {
    (void)c; (void)ev; (void)what; (void)pos;
    no_nccl();
}
#endif
