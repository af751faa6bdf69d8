// ZeRO-1 and ZeRO-2 (zero.h). One plan for both levels: a list of buckets of the padded
// flat buffer, each reduce-scattered into equal pieces and all-gathered back.
//   level   buckets                      reduce-scatter started    rank r's gradient lands
//   1       one: [0, P)                  after the backward        in place, grads[rS, (r+1)S)
//   2       zero_assign_buckets(cap)     in the hook that makes    the compact buffer, at q_k
//                                        the bucket final
#include "07_zero/zero.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

struct zero {
    comm_t* c;
    int level;
    param_ref_t* p;  // (n) the table, copied
    int n;
    float *params, *grads;  // (P) the padded flat buffers
    size_t total, P, S;
    device_t dev;                       // where params and grads live (the backend's)
    cudaStream_t compute, comm_stream;  // NCCL (NULL on MPI); comm_stream for level 2 only

    int nb;
    zero_bucket_t* b;  // (nb)
    int *k_lo, *k_hi;  // (n) the buckets parameter i overlaps (trainable only; else -1)
    int* n_members;    // (nb) trainable parameters overlapping bucket k
    float* gshard;     // (S) level 2: the kept gradient pieces, tag MEM_GRADS

    int *fired, *left, *started;  // per-step state
    comm_req_t** reqs;            // (nb)
    cudaEvent_t* ready;           // (nb) NCCL level 2
    cudaEvent_t done;

    optim_t opt;
    size_t owned;
    zero_stats_t st;
};

// ------------------------------------------------------------------ pure layout helpers
void zero_shard_range(size_t total, int n, int r, size_t* begin, size_t* end, size_t* padded_total) {
    // STUDENT-BEGIN(07.shard_range): the padded layout: P = total rounded up to a multiple of n·ZERO_ALIGN, S = P/n; rank r's shard [r·S, (r+1)·S) into *begin, *end and P into *padded_total (any of them may be NULL); DIE unless n >= 1 and 0 <= r < n | see 07_zero/README.md §Padded layout | test: test_07 zero_layout/shards_are_equal_aligned_and_cover_the_padded_buffer
    if (n < 1 || r < 0 || r >= n) DIE("zero_shard_range: rank %d of %d", r, n);
    const size_t unit = (size_t)n * ZERO_ALIGN;
    const size_t P = (total + unit - 1) / unit * unit;
    const size_t S = P / (size_t)n;
    if (begin) *begin = (size_t)r * S;
    if (end) *end = (size_t)(r + 1) * S;
    if (padded_total) *padded_total = P;
    // STUDENT-END(07.shard_range)
}

size_t zero_padded_total(size_t total, int n) {
    size_t P;
    zero_shard_range(total, n, 0, NULL, NULL, &P);
    return P;
}

int zero_assign_buckets(size_t padded_total, int n, size_t bucket_bytes, zero_bucket_t* out, int max_out) {
    // STUDENT-BEGIN(07.assign_buckets): ZeRO-2's buckets, cut from the top of the padded buffer down: each at most bucket_bytes rounded down to a multiple of n·ZERO_ALIGN elements (at least one such unit), cut into n equal pieces (piece = length/n), q = the sum of the earlier buckets' pieces (its place in the compact shard); returns the count even past max_out; DIE when padded_total is not a multiple of n·ZERO_ALIGN | see 07_zero/README.md §The four levels | test: test_07 zero_layout/buckets_tile_the_buffer_in_equal_aligned_pieces | needs: 07.shard_range
    const size_t unit = (size_t)n * ZERO_ALIGN;
    if (n < 1 || padded_total % unit) DIE("zero_assign_buckets: %zu elements is not a multiple of %d x %d", padded_total, n, ZERO_ALIGN);
    size_t cap = bucket_bytes / sizeof(float) / unit * unit;
    if (cap < unit) cap = unit;  // the smallest bucket: one aligned 64-element piece a rank
    int nb = 0;
    size_t q = 0;
    for (size_t hi = padded_total; hi > 0;) {
        const size_t lo = hi > cap ? hi - cap : 0;
        const zero_bucket_t bk = {lo, hi, (hi - lo) / (size_t)n, q};
        if (nb < max_out) out[nb] = bk;
        nb++;
        q += bk.piece;
        hi = lo;
    }
    return nb;
    // STUDENT-END(07.assign_buckets)
}

// ------------------------------------------------------------------ create / destroy
static void* xcalloc(size_t n, size_t size) {
    void* q = calloc(n ? n : 1, size);
    if (!q) DIE("out of host memory: %zu x %zu bytes", n, size);
    return q;
}

static void reset_step(zero_t* z) {
    memset(z->fired, 0, (size_t)z->n * sizeof(int));
    memset(z->started, 0, (size_t)z->nb * sizeof(int));
    memcpy(z->left, z->n_members, (size_t)z->nb * sizeof(int));
}

// The trainable elements of [lo, hi) become optimizer ranges, their gradient at g_base + (x − lo).
static void add_owned(zero_t* z, size_t lo, size_t hi, size_t g_base) {
    for (int i = 0; i < z->n; i++) {
        if (!z->p[i].trainable) continue;
        const size_t a = z->p[i].offset > lo ? z->p[i].offset : lo;
        const size_t e = z->p[i].offset + z->p[i].numel < hi ? z->p[i].offset + z->p[i].numel : hi;
        if (a >= e) continue;
        optim_add_range(&z->opt, a, g_base + (a - lo), e - a);
        z->owned += e - a;
    }
}

// ZeRO-2 on NCCL: the reduce-scatters on a stream of their own, started as each bucket's
// gradients are written (events), so that the backward goes on meanwhile. The one place the
// backends differ in kind: MPI has no streams (its requests are waited in zero_finish_grads), and
// ZeRO-1's single bucket runs on the compute stream; comm_stream stays NULL for both.
static void comm_stream_open(zero_t* z) {
    if (!z->compute) return;
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->comm_stream, cudaStreamNonBlocking));
    z->ready = xcalloc((size_t)z->nb, sizeof(cudaEvent_t));
    for (int k = 0; k < z->nb; k++) CUDA_CHECK(cudaEventCreateWithFlags(&z->ready[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&z->done, cudaEventDisableTiming));
}
static void comm_stream_close(zero_t* z) {
    if (!z->comm_stream) return;
    CUDA_CHECK(cudaStreamSynchronize(z->comm_stream));
    for (int k = 0; k < z->nb; k++) CUDA_CHECK(cudaEventDestroy(z->ready[k]));
    CUDA_CHECK(cudaEventDestroy(z->done));
    CUDA_CHECK(cudaStreamDestroy(z->comm_stream));
    free(z->ready);
}

zero_t* zero_create(comm_t* c, int level, const param_ref_t* table, int n, float* params,
                    float* grads, size_t total, double bucket_mb, const adamw_config_t* cfg,
                    cudaStream_t compute_stream) {
    char err[256];
    if (level != 1 && level != 2) DIE("zero_create: level %d (1 or 2)", level);
    if (ddp_check_params(table, n, total, err, sizeof err)) DIE("zero_create: %s", err);
    if (!c || !params || !grads) DIE("zero_create: NULL communicator or buffer");
    if (c->backend == COMM_NCCL && !compute_stream)
        DIE("zero_create: the NCCL backend needs the stream the backward writes gradients on (not NULL)");
    zero_t* z = xcalloc(1, sizeof *z);
    z->c = c;
    z->level = level;
    z->n = n;
    z->p = xcalloc((size_t)n, sizeof *z->p);
    memcpy(z->p, table, (size_t)n * sizeof *table);
    z->params = params;
    z->grads = grads;
    z->total = total;
    const int W = c->world, r = c->rank;
    size_t sb, se;
    zero_shard_range(total, W, r, &sb, &se, &z->P);
    z->S = se - sb;
    z->dev = comm_device_kind(c);
    z->compute = c->backend == COMM_NCCL ? compute_stream : NULL;  // MPI has no streams

    // The plan.
    if (level == 1) {
        z->nb = 1;
        z->b = xcalloc(1, sizeof *z->b);
        z->b[0] = (zero_bucket_t){0, z->P, z->S, 0};
    } else {
        const size_t cap = ddp_bucket_bytes(bucket_mb);
        z->nb = zero_assign_buckets(z->P, W, cap, NULL, 0);
        z->b = xcalloc((size_t)z->nb, sizeof *z->b);
        zero_assign_buckets(z->P, W, cap, z->b, z->nb);
    }
    z->k_lo = xcalloc((size_t)n, sizeof(int));
    z->k_hi = xcalloc((size_t)n, sizeof(int));
    z->n_members = xcalloc((size_t)z->nb, sizeof(int));
    for (int i = 0; i < n; i++) {
        z->k_lo[i] = z->k_hi[i] = -1;
        if (!table[i].trainable) continue;
        const size_t o = table[i].offset, e = o + table[i].numel;
        for (int k = 0; k < z->nb; k++)
            if (z->b[k].begin < e && o < z->b[k].end) {
                if (z->k_lo[i] < 0) z->k_lo[i] = k;
                z->k_hi[i] = k;
                z->n_members[k]++;
            }
    }
    z->fired = xcalloc((size_t)n, sizeof(int));
    z->left = xcalloc((size_t)z->nb, sizeof(int));
    z->started = xcalloc((size_t)z->nb, sizeof(int));
    z->reqs = xcalloc((size_t)z->nb, sizeof(comm_req_t*));

    // What this rank owns: shard r (level 1, gradient in place), or its piece of every bucket
    // (level 2, gradient in the compact buffer).
    optim_init(&z->opt, OPT_ADAMW, cfg, z->dev);
    if (level == 1) {
        add_owned(z, sb, se, sb);
    } else {
        z->gshard = mem_alloc(z->dev, z->S * sizeof(float), MEM_GRADS);
        for (int k = 0; k < z->nb; k++) {
            const size_t lo = z->b[k].begin + (size_t)r * z->b[k].piece;
            add_owned(z, lo, lo + z->b[k].piece, z->b[k].q);
        }
    }
    if (level == 2) {
        mem_zero_async(z->dev, z->gshard, z->S * sizeof(float), z->compute);
        comm_stream_open(z);
    }
    reset_step(z);
    return z;
}

void zero_destroy(zero_t* z) {
    if (!z) return;
    comm_waitall(z->c, z->reqs, z->nb);
    comm_stream_close(z);
    comm_stream_sync(z->c, z->compute, "ZeRO's last step");  // the optimizer may still run (MPI: nothing to wait for)
    optim_free(&z->opt);
    mem_free(z->gshard);
    free(z->p);
    free(z->b);
    free(z->k_lo);
    free(z->k_hi);
    free(z->n_members);
    free(z->fired);
    free(z->left);
    free(z->started);
    free(z->reqs);
    free(z);
}

// ------------------------------------------------------------------ the step
static void start_bucket(zero_t* z, int k) {
    // STUDENT-BEGIN(07.start_bucket): start bucket k's reduce-scatter (avg) of grads[begin, end) in n pieces of bk->piece: ZeRO-1 in place (rank r's average lands at begin + r·piece), ZeRO-2 into gshard + q; ZeRO-1 and MPI on z->compute (NULL on MPI, a request in reqs[k]), ZeRO-2 on NCCL on the comm stream after the event ready[k] recorded on the compute stream; mark it started, count rs_calls and rs_bytes | see 07_zero/README.md §The four levels | test: test_07 zero_toy/* | needs: 07.shard_range 07.assign_buckets 07.param_final 07.zero_step 07.sharded_assign 07.sharded_optim_step
    const zero_bucket_t* bk = &z->b[k];
    const float* send = z->grads + bk->begin;
    // ZeRO-1: in place (rank r's average lands where its shard is); ZeRO-2: the kept piece.
    float* recv = z->level == 1 ? z->grads + bk->begin + (size_t)z->c->rank * bk->piece : z->gshard + bk->q;
    if (!z->comm_stream) {
        // ZeRO-1, and ZeRO-2 on MPI: on the compute stream (NCCL), or a non-blocking MPI
        // request waited in zero_finish_grads.
        z->reqs[k] = comm_ireduce_scatter(z->c, send, recv, bk->piece, COMM_F32, COMM_AVG, z->compute);
    } else {
        // ZeRO-2 on NCCL: as stage 06's buckets, the comm stream starts once the kernels that
        // wrote this bucket's gradients are done; the backward goes on meanwhile.
        CUDA_CHECK(cudaEventRecord(z->ready[k], z->compute));
        CUDA_CHECK(cudaStreamWaitEvent(z->comm_stream, z->ready[k], 0));
        z->reqs[k] = comm_ireduce_scatter(z->c, send, recv, bk->piece, COMM_F32, COMM_AVG, z->comm_stream);
    }
    z->started[k] = 1;
    z->st.rs_calls++;
    z->st.rs_bytes += (long long)((bk->end - bk->begin) * sizeof(float));
    // STUDENT-END(07.start_bucket)
}

static void param_final(zero_t* z, int i) {
    // STUDENT-BEGIN(07.param_final): parameter i's gradient is final: mark it fired, count it off every bucket k_lo[i]..k_hi[i] it overlaps (none when k_lo[i] is -1); ZeRO-2 starts a bucket when its last member arrives | see 07_zero/README.md §The four levels | test: test_07 zero_toy/* | needs: 07.shard_range 07.assign_buckets 07.start_bucket 07.zero_step 07.sharded_assign 07.sharded_optim_step
    z->fired[i] = 1;
    if (z->k_lo[i] < 0) return;
    for (int k = z->k_lo[i]; k <= z->k_hi[i]; k++)
        if (--z->left[k] == 0 && z->level == 2) start_bucket(z, k);
    // STUDENT-END(07.param_final)
}

void zero_grad_ready(void* zz, int i) {
    zero_t* z = zz;
    if (i < 0 || i >= z->n) DIE("zero_grad_ready: parameter index %d outside the table's [0, %d)", i, z->n);
    if (!z->p[i].trainable) return;
    if (z->fired[i]) DIE("zero_grad_ready: parameter %d (%s) reported twice in one step", i, z->p[i].name ? z->p[i].name : "?");
    param_final(z, i);
}

void zero_finish_grads(zero_t* z) {
    // Trainable parameters the backward never reported: a zero gradient (as stage 06), in
    // reverse order on every rank alike, so the collectives start in the same order everywhere.
    for (int i = z->n - 1; i >= 0; i--)
        if (z->p[i].trainable && !z->fired[i]) {
            float* g = z->grads + z->p[i].offset;
            mem_zero_async(z->dev, g, z->p[i].numel * sizeof(float), z->compute);
            param_final(z, i);
        }
    // ZeRO-1's one bucket, and any bucket with no trainable member (padding, frozen only).
    for (int k = 0; k < z->nb; k++)
        if (!z->started[k]) start_bucket(z, k);
    if (z->comm_stream) {  // the optimizer (on the compute stream) after the pieces
        CUDA_CHECK(cudaEventRecord(z->done, z->comm_stream));
        CUDA_CHECK(cudaStreamWaitEvent(z->compute, z->done, 0));
    }
    // MPI: the averages are in memory after this. NCCL: the host waits for the reduce-scatters
    // (simpler than stage 06's one-step-late wait; it costs the optimizer's launch latency).
    comm_waitall(z->c, z->reqs, z->nb);
    reset_step(z);
}

void zero_step(zero_t* z) {
    // STUDENT-BEGIN(07.zero_step): the update: optim_step over the owned ranges on z->compute (gradients in place for ZeRO-1, from gshard for ZeRO-2); then each bucket's pieces all-gathered in place (rank r's piece at begin + r·piece), one comm_waitall; count ag_calls, ag_bytes and steps | see 07_zero/README.md §The four levels | test: test_07 zero_toy/* | needs: 07.shard_range 07.assign_buckets 07.start_bucket 07.param_final 07.sharded_assign 07.sharded_optim_step
    optim_step(&z->opt, z->params, z->level == 1 ? z->grads : z->gshard, z->compute);
    // Every rank's updated pieces to every rank, in place; NCCL: on the compute stream, so
    // ordered after the update without an event.
    for (int k = 0; k < z->nb; k++) {
        const zero_bucket_t* bk = &z->b[k];
        float* mine = z->params + bk->begin + (size_t)z->c->rank * bk->piece;
        z->reqs[k] = comm_iallgather(z->c, mine, z->params + bk->begin, bk->piece, COMM_F32, z->compute);
        z->st.ag_calls++;
        z->st.ag_bytes += (long long)((bk->end - bk->begin) * sizeof(float));
    }
    comm_waitall(z->c, z->reqs, z->nb);
    z->st.steps++;
    // STUDENT-END(07.zero_step)
}

// ------------------------------------------------------------------ inspection
int zero_level(const zero_t* z) { return z->level; }
size_t zero_shard_elems(const zero_t* z) { return z->S; }
size_t zero_owned_trainable(const zero_t* z) { return z->owned; }
size_t zero_state_bytes(const zero_t* z) { return optim_state_bytes(&z->opt); }
size_t zero_grad_shard_bytes(const zero_t* z) { return z->gshard ? z->S * sizeof(float) : 0; }
int zero_n_buckets(const zero_t* z) { return z->nb; }
zero_bucket_t zero_bucket(const zero_t* z, int k) {
    if (k < 0 || k >= z->nb) DIE("zero_bucket: index %d outside [0, %d)", k, z->nb);
    return z->b[k];
}
zero_stats_t zero_stats(const zero_t* z) { return z->st; }
optim_t* zero_optim(zero_t* z) { return &z->opt; }
void zero_set_lr(zero_t* z, float lr) { z->opt.cfg.lr = lr; }
float* zero_grad_shard(zero_t* z) { return z->level == 1 ? z->grads : z->gshard; }
