// The DDP layer (ddp.h). One plan for every variant: a list of slices of the gradient buffer
// ("buckets") to average, and one rule for when each starts. What differs per variant:
//
//   variant    slices (make_plan)                          started (starts_in_hook)
//   naive      one per trainable parameter                 after the backward, one by one
//   flat       one: the whole trainable range              after the backward
//   overlap    one per trainable parameter                 in the hook of that parameter
//   bucketed   ddp_assign_buckets(bucket_mb)               in the hook of its last member
//
// So naive -> flat changes the slices, naive -> overlap changes when they start, and
// overlap -> bucketed changes the slices again: the course's sequence of small diffs.
#include "06_ddp/ddp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/timer.h"

struct ddp {
    comm_t* c;
    ddp_variant_t v;
    param_ref_t* p;  // (n) the table, copied
    int n;
    float* params;   // (total) flat parameters: host (MPI) or device (NCCL)
    float* grads;    // (total) flat gradients, same layout
    size_t total;
    int gpu;                    // NCCL backend: device buffers, streams and events
    cudaStream_t compute;       // where the backward writes gradients (caller's)
    cudaStream_t comm_stream;   // where the early-started all-reduces run (ours; NULL on MPI)

    // the plan
    int nb;
    ddp_bucket_t* b;   // (nb)
    int* bucket_of;    // (n) bucket of each parameter; -1: reduced by no bucket (frozen)
    int* n_members;    // (nb) trainable parameters whose hook the bucket waits for

    // per-step state, reset by ddp_finish_grads
    int* fired;              // (n) this parameter's gradient was reported final
    int* left;               // (nb) members not reported yet
    int* started;            // (nb) this bucket's all-reduce has started
    comm_req_t** reqs;       // (nb) this step's pending all-reduces
    comm_req_t** prev_reqs;  // (nb) NCCL: the previous step's, freed at the next finish
    // NCCL's events (every one NULL on MPI, see streams_create):
    cudaEvent_t* ready;      // (nb) recorded on the compute stream once a bucket is final
    cudaEvent_t done;        // recorded on the comm stream after the step's last all-reduce
    cudaEvent_t *t_start, *t_end;  // (nb) timing events around each all-reduce

    ddp_stats_t st;
};

// ------------------------------------------------------------------ names
static const char* const variant_names[DDP_NVARIANTS] = {"naive", "flat", "overlap", "bucketed"};

const char* ddp_variant_name(ddp_variant_t v) {
    return (v >= 0 && v < DDP_NVARIANTS) ? variant_names[v] : "?";
}

int ddp_variant_parse(const char* s, ddp_variant_t* out) {
    for (int i = 0; s && i < DDP_NVARIANTS; i++)
        if (strcmp(s, variant_names[i]) == 0) { *out = (ddp_variant_t)i; return 0; }
    return -1;
}

// ------------------------------------------------------------------ the table and buckets
int ddp_check_params(const param_ref_t* p, int n, size_t total, char* err, size_t errlen) {
    if (n < 1 || !p) return set_err(err, errlen, "the parameter table is empty");
    size_t prev_end = 0;
    for (int i = 0; i < n; i++) {
        const char* name = p[i].name ? p[i].name : "?";
        if (p[i].numel == 0) return set_err(err, errlen, "parameter %d (%s) has 0 elements", i, name);
        if (i > 0 && p[i].offset < prev_end)
            return set_err(err, errlen, "parameter %d (%s) starts at %zu, before the end of the one "
                           "before it (%zu): the table must be in offset order without overlaps",
                           i, name, p[i].offset, prev_end);
        if (p[i].numel > total || p[i].offset > total - p[i].numel)
            return set_err(err, errlen, "parameter %d (%s) ends at %zu, past the buffer's %zu elements",
                           i, name, p[i].offset + p[i].numel, total);
        prev_end = p[i].offset + p[i].numel;
    }
    return 0;
}

// Appends b to out if there is room; counts it either way (so a NULL out asks for the count).
static void emit(ddp_bucket_t b, ddp_bucket_t* out, int max_out, int* nb) {
    if (*nb < max_out) out[*nb] = b;
    (*nb)++;
}

int ddp_assign_buckets(const param_ref_t* p, int n, size_t bucket_bytes, ddp_bucket_t* out,
                       int max_out) {
    // STUDENT-BEGIN(06.assign_buckets): buckets in reverse parameter order, each slice [begin, end) at most bucket_bytes (padding counts), a tensor over the cap alone, a frozen parameter closes the bucket; returns the count even past max_out | see 06_ddp/README.md §The four variants, each a small diff on the one before | test: test_06 buckets*/*
    if (ddp_check_params(p, n, SIZE_MAX, NULL, 0)) return -1;
    int nb = 0, open = 0;
    ddp_bucket_t cur = {0, 0, 0, 0};
    // Walk backwards: the backward pass finishes the last parameters first, so the first
    // bucket fills (and can start) earliest.
    for (int i = n - 1; i >= 0; i--) {
        if (!p[i].trainable) {  // a frozen parameter ends the bucket: no slice covers one
            if (open) emit(cur, out, max_out, &nb);
            open = 0;
            continue;
        }
        // Growing the bucket down to p[i] makes its slice [p[i].offset, cur.end): the padding
        // in between goes on the wire too, so it counts against the cap.
        if (open && (cur.end - p[i].offset) * sizeof(float) > bucket_bytes) {
            emit(cur, out, max_out, &nb);
            open = 0;
        }
        if (!open) {  // a new bucket; a tensor over the cap stays alone in it
            cur.end = p[i].offset + p[i].numel;
            cur.p_hi = i;
            open = 1;
        }
        cur.begin = p[i].offset;
        cur.p_lo = i;
    }
    if (open) emit(cur, out, max_out, &nb);
    return nb;
    // STUDENT-END(06.assign_buckets)
}

int ddp_assign_buckets_first(const param_ref_t* p, int n, size_t first_bytes, size_t bucket_bytes,
                             ddp_bucket_t* out, int max_out) {
    if (first_bytes >= bucket_bytes) return ddp_assign_buckets(p, n, bucket_bytes, out, max_out);
    // Bucket 0 under the small cap, from the end of the table; everything below its lowest
    // member under the large cap. (A frozen parameter that closes bucket 0 is skipped by the
    // second call as by the first.)
    ddp_bucket_t b0;
    int nb0 = ddp_assign_buckets(p, n, first_bytes, &b0, 1);
    if (nb0 <= 0) return nb0;
    if (max_out > 0) out[0] = b0;
    if (b0.p_lo == 0) return 1;
    int rest = ddp_assign_buckets(p, b0.p_lo, bucket_bytes, max_out > 1 ? out + 1 : NULL,
                                  max_out > 1 ? max_out - 1 : 0);
    return rest < 0 ? rest : 1 + rest;
}

size_t ddp_bucket_bytes(double bucket_mb) {
    if (!(bucket_mb >= 0) || !isfinite(bucket_mb) || bucket_mb > 1e9)
        DIE("ddp_bucket_bytes: bucket size %g MiB: expected a number in [0, 1e9]", bucket_mb);
    return (size_t)(bucket_mb * 1048576.0);  // rounded down: the cap is never exceeded
}

// One slice per trainable parameter (naive and overlap), in reverse order like the buckets.
static int per_parameter_plan(const param_ref_t* p, int n, ddp_bucket_t* out) {
    // STUDENT-BEGIN(06.per_parameter_plan): naive and overlap: one slice per trainable parameter, in reverse order | see 06_ddp/README.md §The four variants, each a small diff on the one before | test: test_06 ddp_2_ranks/*_naive | needs: 06.start_bucket 06.param_final
    int nb = 0;
    for (int i = n - 1; i >= 0; i--)
        if (p[i].trainable) out[nb++] = (ddp_bucket_t){p[i].offset, p[i].offset + p[i].numel, i, i};
    return nb;
    // STUDENT-END(06.per_parameter_plan)
}

// The flat variant's one slice: from the first trainable parameter to the end of the last.
static int flat_plan(const param_ref_t* p, int n, ddp_bucket_t* out) {
    // STUDENT-BEGIN(06.flat_plan): flat: one slice from the first trainable parameter to the end of the last | see 06_ddp/README.md §The four variants, each a small diff on the one before | test: test_06 ddp_2_ranks/*_flat | needs: 06.start_bucket 06.param_final
    int lo = -1, hi = -1;
    for (int i = 0; i < n; i++)
        if (p[i].trainable) { if (lo < 0) lo = i; hi = i; }
    if (lo < 0) return 0;
    out[0] = (ddp_bucket_t){p[lo].offset, p[hi].offset + p[hi].numel, lo, hi};
    return 1;
    // STUDENT-END(06.flat_plan)
}

static void make_plan(ddp_t* d, double first_bucket_mb, double bucket_mb) {
    d->b = calloc((size_t)d->n, sizeof *d->b);  // never more slices than parameters
    if (!d->b) DIE("out of memory: %d buckets", d->n);
    switch (d->v) {
    case DDP_NAIVE:
    case DDP_OVERLAP: d->nb = per_parameter_plan(d->p, d->n, d->b); break;
    case DDP_FLAT: d->nb = flat_plan(d->p, d->n, d->b); break;
    case DDP_BUCKETED:
        d->nb = ddp_assign_buckets_first(d->p, d->n, ddp_bucket_bytes(first_bucket_mb),
                                         ddp_bucket_bytes(bucket_mb), d->b, d->n);
        break;
    default: DIE("ddp_create: unknown variant %d", (int)d->v);
    }
    for (int i = 0; i < d->n; i++) d->bucket_of[i] = -1;
    for (int k = 0; k < d->nb; k++)
        for (int i = d->b[k].p_lo; i <= d->b[k].p_hi; i++)
            if (d->p[i].trainable) { d->bucket_of[i] = k; d->n_members[k]++; }
}

// ------------------------------------------------------------------ create / destroy
static void* xcalloc(size_t n, size_t size) {
    void* q = calloc(n ? n : 1, size);
    if (!q) DIE("out of memory: %zu x %zu bytes", n, size);
    return q;
}

// ------------------------------------------------------------------ streams and events
// Where the backends differ in this layer: NCCL's all-reduces are enqueued on CUDA streams and
// ordered by events; MPI's are host calls, ordered by the host, and have no streams. So the
// streams and events exist on NCCL only: on MPI they stay NULL, and the helpers below (record,
// stream_after, elapsed_ms) do nothing for a NULL event.
static void streams_create(ddp_t* d) {
    d->ready = xcalloc((size_t)d->nb, sizeof(cudaEvent_t));
    d->t_start = xcalloc((size_t)d->nb, sizeof(cudaEvent_t));
    d->t_end = xcalloc((size_t)d->nb, sizeof(cudaEvent_t));
    if (!d->gpu) return;  // MPI: no streams, no events (all NULL)
    // Non-blocking: the comm stream must not wait on the legacy default stream behind
    // our back; every ordering it needs is an explicit event. Highest priority (as
    // PyTorch's NCCL streams): once a bucket is ready, its all-reduce kernel is scheduled
    // ahead of the backward's queued kernels instead of waiting for free SMs.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&d->comm_stream, cudaStreamNonBlocking, greatest));
    for (int k = 0; k < d->nb; k++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&d->ready[k], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreate(&d->t_start[k]));
        CUDA_CHECK(cudaEventCreate(&d->t_end[k]));
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming));
}

static void event_destroy(cudaEvent_t e) {
    if (e) CUDA_CHECK(cudaEventDestroy(e));
}

static void streams_destroy(ddp_t* d) {
    for (int k = 0; k < d->nb; k++) {
        event_destroy(d->ready[k]);
        event_destroy(d->t_start[k]);
        event_destroy(d->t_end[k]);
    }
    event_destroy(d->done);
    if (d->comm_stream) CUDA_CHECK(cudaStreamDestroy(d->comm_stream));
    free(d->ready);
    free(d->t_start);
    free(d->t_end);
}

static void record(cudaEvent_t e, cudaStream_t s) {
    if (e) CUDA_CHECK(cudaEventRecord(e, s));
}

// Work enqueued on `waiter` from now on runs after everything enqueued on `s` so far (e: an
// event of ours to carry it). The host does not wait.
static void stream_after(cudaStream_t waiter, cudaEvent_t e, cudaStream_t s) {
    if (!e) return;
    CUDA_CHECK(cudaEventRecord(e, s));
    CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
}

static double elapsed_ms(cudaEvent_t start, cudaEvent_t end) {
    if (!start) return 0.0;
    CUDA_CHECK(cudaEventSynchronize(end));
    float e = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&e, start, end));
    return e;
}


static void reset_step(ddp_t* d) {
    memset(d->fired, 0, (size_t)d->n * sizeof *d->fired);
    memset(d->started, 0, (size_t)d->nb * sizeof *d->started);
    memcpy(d->left, d->n_members, (size_t)d->nb * sizeof *d->left);
}

ddp_t* ddp_create(comm_t* c, const param_ref_t* params, int n, float* flat_params,
                  float* flat_grads, size_t total, ddp_variant_t v, double bucket_mb,
                  cudaStream_t compute_stream) {
    return ddp_create_first(c, params, n, flat_params, flat_grads, total, v, bucket_mb, bucket_mb,
                            compute_stream);
}

ddp_t* ddp_create_first(comm_t* c, const param_ref_t* params, int n, float* flat_params,
                        float* flat_grads, size_t total, ddp_variant_t v, double first_bucket_mb,
                        double bucket_mb, cudaStream_t compute_stream) {
    char err[256];
    if (ddp_check_params(params, n, total, err, sizeof err)) DIE("ddp_create: %s", err);
    if (!c || !flat_params || !flat_grads) DIE("ddp_create: NULL communicator or buffer");
    // comm.h maps a NULL stream to the communicator's own, which is not ordered after the
    // backward: the all-reduces would read gradients not yet written.
    if (c->backend == COMM_NCCL && !compute_stream)
        DIE("ddp_create: the NCCL backend needs the stream the backward writes gradients on (not NULL)");
    ddp_t* d = xcalloc(1, sizeof *d);
    d->c = c;
    d->v = v;
    d->n = n;
    d->p = xcalloc((size_t)n, sizeof *d->p);
    memcpy(d->p, params, (size_t)n * sizeof *d->p);
    d->params = flat_params;
    d->grads = flat_grads;
    d->total = total;
    d->gpu = c->backend == COMM_NCCL;
    d->compute = compute_stream;  // ignored by MPI (its calls take no stream)
    d->bucket_of = xcalloc((size_t)n, sizeof(int));
    d->n_members = xcalloc((size_t)n, sizeof(int));
    make_plan(d, first_bucket_mb, bucket_mb);
    d->fired = xcalloc((size_t)n, sizeof(int));
    d->left = xcalloc((size_t)d->nb, sizeof(int));
    d->started = xcalloc((size_t)d->nb, sizeof(int));
    d->reqs = xcalloc((size_t)d->nb, sizeof(comm_req_t*));
    d->prev_reqs = xcalloc((size_t)d->nb, sizeof(comm_req_t*));
    streams_create(d);
    reset_step(d);
    return d;
}

void ddp_destroy(ddp_t* d) {
    if (!d) return;
    // Requests of an unfinished step and of the last finished one (NCCL) still hold events.
    comm_waitall(d->c, d->reqs, d->nb);
    comm_waitall(d->c, d->prev_reqs, d->nb);
    streams_destroy(d);
    free(d->p);
    free(d->b);
    free(d->bucket_of);
    free(d->n_members);
    free(d->fired);
    free(d->left);
    free(d->started);
    free(d->reqs);
    free(d->prev_reqs);
    free(d);
}

void ddp_broadcast_params(ddp_t* d) {
    // The whole buffer, frozen parameters included: every replica must compute the same
    // forward, and a frozen bias is part of it.
    comm_broadcast(d->c, d->params, d->params, d->total, COMM_F32, 0, d->compute);
}

// ------------------------------------------------------------------ the step
static int starts_in_hook(ddp_variant_t v) { return v == DDP_OVERLAP || v == DDP_BUCKETED; }

static void start_bucket(ddp_t* d, int k) {
    // STUDENT-BEGIN(06.start_bucket): start slice k's all-reduce (average): naive/flat blocking after the backward; overlap/bucketed non-blocking, on the comm stream after an event on the compute stream (NCCL) | see 06_ddp/README.md §The four variants, each a small diff on the one before | test: test_06 ddp_2_ranks/* | uses: record stream_after | needs: 06.assign_buckets 06.per_parameter_plan 06.flat_plan 06.param_final
    float* g = d->grads + d->b[k].begin;
    const size_t count = d->b[k].end - d->b[k].begin;
    if (!starts_in_hook(d->v) && !d->gpu) {
        // naive, flat on MPI: after the backward, in order, blocking (the host orders the
        // optimizer step after it).
        comm_allreduce(d->c, g, g, count, COMM_F32, COMM_AVG, NULL);
    } else {
        // naive, flat on NCCL: on the compute stream itself, so the optimizer step that
        // follows is ordered after it for free.
        // overlap, bucketed: on the comm stream, once the kernels that wrote these gradients
        // (enqueued on the compute stream so far) are done; the compute stream goes on with
        // the rest of the backward meanwhile. On MPI a non-blocking request, waited in
        // ddp_finish_grads (without an MPI progress thread it advances only when MPI is
        // entered, so the CPU overlap is partial; the arithmetic is the same).
        cudaStream_t s = d->compute;
        if (starts_in_hook(d->v)) {
            s = d->comm_stream;
            stream_after(s, d->ready[k], d->compute);
        }
        record(d->t_start[k], s);
        d->reqs[k] = comm_iallreduce(d->c, g, g, count, COMM_F32, COMM_AVG, s);
        record(d->t_end[k], s);
    }
    d->started[k] = 1;
    d->st.allreduce_calls++;
    d->st.bytes_reduced += (long long)(count * sizeof(float));
    // STUDENT-END(06.start_bucket)
}

// Parameter i's gradient is final: count it off its bucket; in the early variants, the
// bucket's all-reduce starts with its last member.
static void param_final(ddp_t* d, int i) {
    // STUDENT-BEGIN(06.param_final): a parameter's gradient is final: mark it fired, count it off its bucket; in overlap/bucketed start the bucket when its last member arrives | see 06_ddp/README.md §The four variants, each a small diff on the one before | test: test_06 ddp_2_ranks/*_overlap | needs: 06.start_bucket 06.per_parameter_plan
    d->fired[i] = 1;
    const int k = d->bucket_of[i];
    if (k < 0) return;
    if (--d->left[k] == 0 && starts_in_hook(d->v)) start_bucket(d, k);
    // STUDENT-END(06.param_final)
}

void ddp_grad_ready(void* ddp, int param_idx) {
    ddp_t* d = ddp;
    if (param_idx < 0 || param_idx >= d->n)
        DIE("ddp_grad_ready: parameter index %d outside the table's [0, %d)", param_idx, d->n);
    if (!d->p[param_idx].trainable) return;  // a frozen parameter's gradient is never used
    if (d->fired[param_idx])
        DIE("ddp_grad_ready: parameter %d (%s) reported twice in one step", param_idx,
            d->p[param_idx].name ? d->p[param_idx].name : "?");
    param_final(d, param_idx);
}

static void zero_grad(ddp_t* d, int i) {
    float* g = d->grads + d->p[i].offset;
    const size_t bytes = d->p[i].numel * sizeof(float);
    mem_zero_async(comm_device_kind(d->c), g, bytes, d->compute);
    d->st.zeroed_params++;
}

void ddp_finish_grads(ddp_t* d) {
    const double t0 = time_now_s();
    // Parameters the backward never reported (unused by the forward): a zero gradient, then
    // reduced with their bucket. Reverse order, like the hooks, on every rank alike. The zero
    // is enqueued before the bucket's ready event, so the all-reduce sees it.
    for (int i = d->n - 1; i >= 0; i--)
        if (d->p[i].trainable && !d->fired[i]) {
            zero_grad(d, i);
            param_final(d, i);
        }
    // naive and flat start everything here; the early variants have started all by now.
    for (int k = 0; k < d->nb; k++)
        if (!d->started[k]) start_bucket(d, k);

    // Everything after this on the compute stream (the optimizer) waits for the comm stream's
    // all-reduces (NCCL, the early variants); the host does not wait.
    if (starts_in_hook(d->v)) stream_after(d->compute, d->done, d->comm_stream);
    if (!d->gpu) {
        // MPI: the averages must be in host memory when this returns.
        comm_waitall(d->c, d->reqs, d->nb);
    } else {
        // NCCL: the requests must still be freed through comm_wait, which blocks the host
        // until they are done. Doing it one step late (they were ordered before this step's
        // backward) costs no wait unless the host is a whole step ahead of the GPU, and
        // still catches a stuck all-reduce within the communicator's deadline.
        comm_waitall(d->c, d->prev_reqs, d->nb);
        comm_req_t** t = d->prev_reqs;
        d->prev_reqs = d->reqs;
        d->reqs = t;
    }
    reset_step(d);
    d->st.steps++;
    d->st.finish_host_s += time_now_s() - t0;
}

// ------------------------------------------------------------------ inspection
ddp_stats_t ddp_stats(const ddp_t* d) { return d->st; }
void ddp_stats_reset(ddp_t* d) { memset(&d->st, 0, sizeof d->st); }
int ddp_n_buckets(const ddp_t* d) { return d->nb; }
ddp_bucket_t ddp_bucket(const ddp_t* d, int i) {
    if (i < 0 || i >= d->nb) DIE("ddp_bucket: index %d outside [0, %d)", i, d->nb);
    return d->b[i];
}
cudaStream_t ddp_comm_stream(const ddp_t* d) { return d->comm_stream; }

double ddp_comm_ms(ddp_t* d) {
    // Each all-reduce's own time on its stream: it starts once the stream reaches it (after
    // the gradients it waits for), so idle time between buckets is not counted. (MPI: no
    // events, 0.)
    double ms = 0.0;
    for (int k = 0; k < d->nb; k++) ms += elapsed_ms(d->t_start[k], d->t_end[k]);
    return ms;
}
