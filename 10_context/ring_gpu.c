// Ring attention on the GPU: the CPU ring's schedule (ring_cpu.c) on device buffers, NCCL
// transfers on the communicator's stream, stage 03/04's CUDA kernels on a compute stream.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/check.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "10_context/cp_gpu.h"

typedef struct {
    int n, id[CP_MAX_CHUNKS], len[CP_MAX_CHUNKS], off[CP_MAX_CHUNKS];
} gchunks_t;

struct cp_gpu {
    comm_t* c;
    cp_ring_t g;
    dtype_t dt;
    size_t es;            // bytes of one element of dt
    size_t blk;           // elements of one rank's K (or V): max tokens x BH x d
    int ntok;             // this rank's tokens
    gchunks_t mine, all[256];
    cudaStream_t cs;      // compute
    cudaEvent_t ready;    // compute enqueued so far (the comm stream waits on it)
    cudaEvent_t t0, t1, step0[512], step1[512];
    int nsteps;
    void* kv[2];          // K then V of one rank, dt
    float* o_acc;         // fp32 running O of this rank, and its L is the caller's lse
    void* o_part;         // one block's O (dt), L (fp32)
    float* l_part;
    float* dq_acc;        // fp32
    void *dq_part, *dk_part, *dv_part;  // one block's gradients (dt)
    float* part;          // this step's dK then dV of the block's owner (fp32, 2 blk)
    float* acc[2];        // travelling dK, dV accumulators (fp32, 2 blk)
    void* ws;             // stage 04's workspace for the largest block
    size_t ws_bytes;
};

static gchunks_t chunks_of(const cp_ring_t* g, int P, int r) {
    gchunks_t c;
    c.n = cp_rank_chunks(g->split, P, r, c.id);
    for (int i = 0; i < c.n; i++) {
        int st;
        cp_chunk_range(g->N, cp_num_chunks(g->split, P), c.id[i], &st, &c.len[i]);
        c.off[i] = cp_chunk_offset(g->split, g->N, P, r, i);
    }
    return c;
}

// attn_args_t of one block: queries [BH, nq, d] at q, keys/values [BH, nk, d] at k, v.
static attn_args_t block_args(const cp_gpu_t* r, int nq, int nk, int causal) {
    attn_args_t a;
    memset(&a, 0, sizeof a);
    a.B = 1;
    a.H = r->g.BH;
    a.Nq = nq;
    a.Nk = nk;
    a.d = r->g.d;
    a.dtype = r->dt;
    a.causal = causal;
    a.scale = r->g.scale;
    attn_contiguous_strides(a.sq, a.H, nq, a.d);
    attn_contiguous_strides(a.sk, a.H, nk, a.d);
    attn_contiguous_strides(a.sv, a.H, nk, a.d);
    attn_contiguous_strides(a.so, a.H, nq, a.d);
    attn_contiguous_strides(a.sdo, a.H, nq, a.d);
    attn_contiguous_strides(a.sdq, a.H, nq, a.d);
    attn_contiguous_strides(a.sdk, a.H, nk, a.d);
    attn_contiguous_strides(a.sdv, a.H, nk, a.d);
    return a;
}

cp_gpu_t* cp_gpu_create(comm_t* c, const cp_ring_t* g, dtype_t dt) {
    if (c->backend != COMM_NCCL) comm_refuse(c, "the GPU ring needs the nccl backend (device buffers); the CPU ring is ring_forward_cpu");
    if (dt != DT_F32 && dt != DT_BF16) comm_refuse(c, "--dtype %s: the GPU ring takes f32 or bf16", dtype_name(dt));
    char err[256];
    if (cp_check_sizes(g->split, g->N, c->world, err, sizeof err)) comm_refuse(c, "--N: %s", err);
    if (c->world > 256) comm_refuse(c, "%d ranks: the GPU ring takes at most 256", c->world);
    cp_gpu_t* r = calloc(1, sizeof *r);
    if (!r) DIE("cp_gpu_create: out of host memory");
    r->c = c;
    r->g = *g;
    r->dt = dt;
    r->es = dtype_size(dt);
    const int P = c->world, BH = g->BH, d = g->d;
    r->blk = (size_t)cp_max_tokens(g->split, g->N, P) * BH * d;
    r->ntok = cp_rank_tokens(g->split, g->N, P, c->rank);
    r->mine = chunks_of(g, P, c->rank);
    int maxlen = 0;
    for (int p = 0; p < P; p++) {
        r->all[p] = chunks_of(g, P, p);
        for (int j = 0; j < r->all[p].n; j++) maxlen = r->all[p].len[j] > maxlen ? r->all[p].len[j] : maxlen;
    }
    // What the kernels take, asked on the largest block, both masks: shapes, dtype and strides
    // only (the plug-in's check; the buffers do not exist yet).
    attn_args_t a = block_args(r, maxlen, maxlen, 1);
    if (flash_attention_impl()->supports(&a, err, sizeof err))
        comm_refuse(c, "the flash kernels refuse this block: %s", err);
    r->ws_bytes = flash_bwd_workspace_bytes(&a);
    a.causal = 0;
    const size_t wsf = flash_bwd_workspace_bytes(&a);
    if (wsf > r->ws_bytes) r->ws_bytes = wsf;
    CUDA_CHECK(cudaStreamCreateWithFlags(&r->cs, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&r->t0));
    CUDA_CHECK(cudaEventCreate(&r->t1));
    for (int s = 0; s < P; s++) {
        CUDA_CHECK(cudaEventCreate(&r->step0[s]));
        CUDA_CHECK(cudaEventCreate(&r->step1[s]));
    }
    const size_t nloc = (size_t)r->ntok * BH * d, npart = (size_t)maxlen * BH * d;
    r->kv[0] = mem_alloc(DEV_CUDA, 2 * r->blk * r->es, MEM_ACTS);
    r->kv[1] = mem_alloc(DEV_CUDA, 2 * r->blk * r->es, MEM_ACTS);
    r->o_acc = mem_alloc(DEV_CUDA, nloc * sizeof(float), MEM_WORKSPACE);
    r->o_part = mem_alloc(DEV_CUDA, npart * r->es, MEM_WORKSPACE);
    r->l_part = mem_alloc(DEV_CUDA, (size_t)maxlen * BH * sizeof(float), MEM_WORKSPACE);
    r->dq_acc = mem_alloc(DEV_CUDA, nloc * sizeof(float), MEM_WORKSPACE);
    r->dq_part = mem_alloc(DEV_CUDA, npart * r->es, MEM_WORKSPACE);
    r->dk_part = mem_alloc(DEV_CUDA, npart * r->es, MEM_WORKSPACE);
    r->dv_part = mem_alloc(DEV_CUDA, npart * r->es, MEM_WORKSPACE);
    r->part = mem_alloc(DEV_CUDA, 2 * r->blk * sizeof(float), MEM_WORKSPACE);
    r->acc[0] = mem_alloc(DEV_CUDA, 2 * r->blk * sizeof(float), MEM_GRADS);
    r->acc[1] = mem_alloc(DEV_CUDA, 2 * r->blk * sizeof(float), MEM_GRADS);
    r->ws = mem_alloc(DEV_CUDA, r->ws_bytes ? r->ws_bytes : 16, MEM_WORKSPACE);
    // The padding of a short rank's block travels too: zero it once so that it is defined.
    CUDA_CHECK(cudaMemsetAsync(r->kv[0], 0, 2 * r->blk * r->es, r->cs));
    CUDA_CHECK(cudaMemsetAsync(r->kv[1], 0, 2 * r->blk * r->es, r->cs));
    CUDA_CHECK(cudaStreamSynchronize(r->cs));
    return r;
}

void cp_gpu_destroy(cp_gpu_t* r) {
    if (!r) return;
    CUDA_CHECK(cudaStreamSynchronize(r->cs));
    void* bufs[] = {r->kv[0], r->kv[1], r->o_acc, r->o_part, r->l_part, r->dq_acc, r->dq_part,
                    r->dk_part, r->dv_part, r->part, r->acc[0], r->acc[1], r->ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    for (int s = 0; s < r->c->world; s++) {
        cudaEventDestroy(r->step0[s]);
        cudaEventDestroy(r->step1[s]);
    }
    cudaEventDestroy(r->t0);
    cudaEventDestroy(r->t1);
    cudaEventDestroy(r->ready);
    cudaStreamDestroy(r->cs);
    free(r);
}

cudaStream_t cp_gpu_stream(const cp_gpu_t* r) { return r->cs; }

// Posts: send `send` to rank r+1, receive `recv` from rank r-1 (count floats-or-elements of
// comm dtype cdt), on the communicator's stream after everything enqueued on the compute stream.
static void post(cp_gpu_t* r, const void* send, void* recv, size_t count, comm_dtype_t cdt, comm_req_t* req[2]) {
    comm_t* c = r->c;
    const int P = c->world, me = c->rank;
    CUDA_CHECK(cudaEventRecord(r->ready, r->cs));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream(c), r->ready, 0));
    comm_group_start(c);
    req[0] = comm_irecv(c, recv, count, cdt, (me - 1 + P) % P, NULL);
    req[1] = comm_isend(c, send, count, cdt, (me + 1) % P, NULL);
    comm_group_end(c);
}

static comm_dtype_t comm_dt(dtype_t dt) { return dt == DT_BF16 ? COMM_BF16 : COMM_F32; }

void ring_forward_gpu(cp_gpu_t* r, const void* q, const void* k, const void* v, void* o, float* lse) {
    comm_t* c = r->c;
    const int P = c->world, me = c->rank, BH = r->g.BH, d = r->g.d;
    const size_t es = r->es, nloc = (size_t)r->ntok * BH * d;
    char* kv0 = r->kv[0];
    CUDA_CHECK(cudaEventRecord(r->t0, r->cs));
    CUDA_CHECK(cudaMemcpyAsync(kv0, k, nloc * es, cudaMemcpyDeviceToDevice, r->cs));
    CUDA_CHECK(cudaMemcpyAsync(kv0 + r->blk * es, v, nloc * es, cudaMemcpyDeviceToDevice, r->cs));
    CUDA_CHECK(cudaMemsetAsync(r->o_acc, 0, nloc * sizeof(float), r->cs));
    cp_fill_gpu(lse, -INFINITY, (size_t)r->ntok * BH, r->cs);
    int cur = 0;
    for (int s = 0; s < P; s++) {
        const int owner = (me - s + P) % P;
        comm_req_t* req[2] = {NULL, NULL};
        if (s < P - 1) post(r, r->kv[cur], r->kv[1 - cur], 2 * r->blk, comm_dt(r->dt), req);
        const char* K = r->kv[cur];
        const char* V = K + r->blk * es;
        const gchunks_t* th = &r->all[owner];
        CUDA_CHECK(cudaEventRecord(r->step0[s], r->cs));
        for (int i = 0; i < r->mine.n; i++) {
            const size_t qo = (size_t)r->mine.off[i] * BH * d;
            for (int j = 0; j < th->n; j++) {
                const int kind = cp_block_kind(r->mine.id[i], th->id[j], r->g.causal);
                if (kind == CP_BLOCK_SKIP) continue;
                const size_t ko = (size_t)th->off[j] * BH * d;
                attn_args_t a = block_args(r, r->mine.len[i], th->len[j], kind == CP_BLOCK_DIAG);
                a.q = (const char*)q + qo * es;
                a.k = K + ko * es;
                a.v = V + ko * es;
                a.o = r->o_part;
                a.lse = r->l_part;
                flash_forward_cuda(&a, r->cs);
                cp_merge_gpu(r->o_acc + qo, lse + (size_t)r->mine.off[i] * BH, r->o_part, r->l_part,
                             (size_t)BH * r->mine.len[i], d, r->dt, r->cs);
            }
        }
        CUDA_CHECK(cudaEventRecord(r->step1[s], r->cs));
        if (s < P - 1) {
            comm_waitall(c, req, 2);  // the transfer ran under the kernels just enqueued
            cur = 1 - cur;
        }
    }
    cp_cast_gpu(o, r->o_acc, nloc, r->dt, r->cs);
    CUDA_CHECK(cudaEventRecord(r->t1, r->cs));
    CUDA_CHECK(cudaStreamSynchronize(r->cs));
    r->nsteps = P;
}

void ring_backward_gpu(cp_gpu_t* r, const void* q, const void* k, const void* v, const void* o,
                       const float* lse, const void* dout, void* dq, void* dk, void* dv) {
    comm_t* c = r->c;
    const int P = c->world, me = c->rank, BH = r->g.BH, d = r->g.d;
    const size_t es = r->es, nloc = (size_t)r->ntok * BH * d, blk = r->blk;
    char* kv0 = r->kv[0];
    CUDA_CHECK(cudaEventRecord(r->t0, r->cs));
    CUDA_CHECK(cudaMemcpyAsync(kv0, k, nloc * es, cudaMemcpyDeviceToDevice, r->cs));
    CUDA_CHECK(cudaMemcpyAsync(kv0 + blk * es, v, nloc * es, cudaMemcpyDeviceToDevice, r->cs));
    CUDA_CHECK(cudaMemsetAsync(r->dq_acc, 0, nloc * sizeof(float), r->cs));
    int cur = 0, in = 0;
    comm_req_t* dreq[2] = {NULL, NULL};
    for (int s = 0; s < P; s++) {
        const int owner = (me - s + P) % P;
        comm_req_t* req[2] = {NULL, NULL};
        if (s < P - 1) post(r, r->kv[cur], r->kv[1 - cur], 2 * blk, comm_dt(r->dt), req);
        const char* K = r->kv[cur];
        const char* V = K + blk * es;
        const gchunks_t* th = &r->all[owner];
        CUDA_CHECK(cudaEventRecord(r->step0[s], r->cs));
        CUDA_CHECK(cudaMemsetAsync(r->part, 0, 2 * blk * sizeof(float), r->cs));
        for (int i = 0; i < r->mine.n; i++) {
            const size_t qo = (size_t)r->mine.off[i] * BH * d;
            for (int j = 0; j < th->n; j++) {
                const int kind = cp_block_kind(r->mine.id[i], th->id[j], r->g.causal);
                if (kind == CP_BLOCK_SKIP) continue;
                const size_t ko = (size_t)th->off[j] * BH * d;
                attn_args_t a = block_args(r, r->mine.len[i], th->len[j], kind == CP_BLOCK_DIAG);
                a.q = (const char*)q + qo * es;
                a.k = K + ko * es;
                a.v = V + ko * es;
                a.o = (void*)((const char*)o + qo * es);
                a.lse = (float*)lse + (size_t)r->mine.off[i] * BH;
                a.dout = (const char*)dout + qo * es;
                a.dq = r->dq_part;
                a.dk = r->dk_part;
                a.dv = r->dv_part;
                a.workspace = r->ws;
                flash_backward_cuda(&a, r->cs);
                const size_t nq = (size_t)BH * r->mine.len[i] * d, nk = (size_t)BH * th->len[j] * d;
                cp_add_gpu(r->dq_acc + qo, r->dq_part, nq, r->dt, r->cs);
                cp_add_gpu(r->part + ko, r->dk_part, nk, r->dt, r->cs);
                cp_add_gpu(r->part + blk + ko, r->dv_part, nk, r->dt, r->cs);
            }
        }
        CUDA_CHECK(cudaEventRecord(r->step1[s], r->cs));
        float* a = r->acc[in];
        if (s == 0) {
            CUDA_CHECK(cudaMemcpyAsync(a, r->part, 2 * blk * sizeof(float), cudaMemcpyDeviceToDevice, r->cs));
        } else {
            comm_waitall(c, dreq, 2);
            cp_add_gpu(a, r->part, 2 * blk, DT_F32, r->cs);
        }
        in = 1 - in;
        post(r, a, r->acc[in], 2 * blk, COMM_F32, dreq);
        if (s < P - 1) {
            comm_waitall(c, req, 2);
            cur = 1 - cur;
        }
    }
    comm_waitall(c, dreq, 2);
    cp_cast_gpu(dq, r->dq_acc, nloc, r->dt, r->cs);
    cp_cast_gpu(dk, r->acc[in], nloc, r->dt, r->cs);
    cp_cast_gpu(dv, r->acc[in] + blk, nloc, r->dt, r->cs);
    CUDA_CHECK(cudaEventRecord(r->t1, r->cs));
    CUDA_CHECK(cudaStreamSynchronize(r->cs));
    r->nsteps = P;
}

void cp_gpu_last_times(const cp_gpu_t* r, double* compute_ms, double* total_ms) {
    float ms = 0;
    double sum = 0;
    for (int s = 0; s < r->nsteps; s++) {
        CUDA_CHECK(cudaEventElapsedTime(&ms, r->step0[s], r->step1[s]));
        sum += ms;
    }
    CUDA_CHECK(cudaEventElapsedTime(&ms, r->t0, r->t1));
    *compute_ms = sum;
    *total_ms = ms;
}
