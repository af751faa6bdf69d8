// ZeRO-3 / FSDP and ZeRO-2 (zero3.h). ZeRO-3's step is a sequence of USES of the two
// parameter working buffers: use i = 0 .. 2U-2 holds unit use_unit(i) (the forward's 0 .. U-1,
// then the backward's U-2 .. 0; the backward of unit U-1 reuses use U-1) in buffer i mod 2. The
// hook that begins use i starts the all-gather of use i+1 into the other buffer, whose last
// user (use i-1) was enqueued before this hook, and waits for use i's own gather. ZeRO-2 (level
// 2) has no parameter uses: its windows point into the caller's whole flat buffer; only the
// gradient half (gbuf, the reduce-scatters) and the step's all-gathers run.
#include "07_zero/zero3.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/dtype.h"
#include "common/model_kernels.h"  // k_cast_f32_bf16, k_cast_act_f32 (bf16 on the device)

struct zero3 {
    comm_t* c;
    int level;           // 3: parameters sharded (pshard, pbuf); 2: whole (flat), gradients sharded
    int n;               // parameters in the table
    param_ref_t* p;      // (n) copied
    int U;
    zero3_unit_t* u;     // (U) the plan
    size_t S, W;         // shard elements; working-buffer elements (the largest n·c_u)
    device_t dev;                        // where every buffer lives (the backend's)
    cudaStream_t compute, comm_stream;   // NCCL; NULL on MPI
    zero3_window_fn set_window;
    void* model;

    float *pshard, *gshard;  // (S) this rank's parameter and gradient pieces, unit by unit (pshard: level 3)
    float *pbuf[2], *gbuf[2];  // (W) working buffers (pbuf: level 3)
    float* flat;              // level 2: the caller's whole flat parameters (bounds[U] elements), updated in place
    float* sbuf;              // level 2: (the largest c_u) this rank's piece of a unit, padding zero, to all-gather
    int held[2];              // unit whose parameters pbuf[k] holds (valid), or -1
    comm_req_t *ag_req[2], *rs_req[2];  // MPI: outstanding requests per buffer
    cudaEvent_t ev_mark;      // NCCL: "the compute stream got this far" (recorded, then waited)
    cudaEvent_t ag_done[2], rs_done[2];
    int rs_pending[2];        // a reduce-scatter from gbuf[k] not yet waited for
    int fwd_next, bwd_next;   // the hooks' expected order (a misuse dies)

    optim_t opt;
    size_t owned;
    zero3_stats_t st;

    // bf16 parameters (zero3_set_mixed): the gathers move the bf16 compute copy of the shard.
    int mixed, rs_bf16;       // bf16 all-gathers; bf16 reduce-scatters
    uint16_t* pshard16;       // (S) pshard rounded to bf16, remade after every optimizer step
    uint16_t* pbuf16[2];      // (W) the bf16 all-gather's destination, widened into pbuf[k]
    uint16_t* gbuf16[2];      // (W) rs_bf16: gbuf[k] rounded to bf16, the reduce-scatter's input
    uint16_t* rs16[2];        // (largest c_u) rs_bf16: its output, widened into gshard at rs_q[k]
    size_t rs_q[2], rs_n[2];
    int ag_widen[2];          // MPI: pbuf16[k] arrived and is not yet widened into pbuf[k]
    zero3_window16_fn set_window16;
};

// ------------------------------------------------------------------ plan
size_t zero3_plan(const size_t* bounds, int U, int n, zero3_unit_t* out) {
    // STUDENT-BEGIN(07.zero3_plan): ZeRO-3's per-unit shards: unit k = [bounds[k], bounds[k+1]) padded to a multiple of n·ZERO_ALIGN and cut into n equal pieces (piece), q = the sum of the earlier units' pieces; out may be NULL; returns S, the sum of the pieces; DIE on U < 1, n < 1, bounds[0] != 0 or an empty or reversed unit | see 07_zero/README.md §The four levels | test: test_07 zero3_plan/*
    if (U < 1 || n < 1 || bounds[0] != 0) DIE("zero3_plan: %d units, %d ranks, first boundary %zu", U, n, bounds[0]);
    const size_t unit = (size_t)n * ZERO_ALIGN;
    size_t q = 0;
    for (int k = 0; k < U; k++) {
        if (bounds[k + 1] <= bounds[k]) DIE("zero3_plan: unit %d is empty or reversed ([%zu, %zu))", k, bounds[k], bounds[k + 1]);
        const size_t len = bounds[k + 1] - bounds[k];
        const size_t piece = (len + unit - 1) / unit * unit / (size_t)n;
        if (out) out[k] = (zero3_unit_t){bounds[k], bounds[k + 1], piece, q};
        q += piece;
    }
    return q;
    // STUDENT-END(07.zero3_plan)
}

// ------------------------------------------------------------------ create / destroy
static void* xcalloc(size_t n, size_t size) {
    void* q = calloc(n ? n : 1, size);
    if (!q) DIE("out of host memory: %zu x %zu bytes", n, size);
    return q;
}

static void zeros(zero3_t* z, float* dst, size_t n) { mem_zero_async(z->dev, dst, n * sizeof(float), z->compute); }
static void copy(zero3_t* z, float* dst, const float* src, size_t n) {  // same memory kind
    mem_copy_async(z->dev, dst, src, n * sizeof(float), z->compute);
}

// bf16 <-> fp32 in the shard's memory: host loops (MPI) or kernels on stream `on` (NCCL).
static void to_bf16(zero3_t* z, uint16_t* dst, const float* src, size_t n, cudaStream_t on) {
    if (z->dev == DEV_CUDA) k_cast_f32_bf16(src, dst, n, on);
    else bf16_from_f32_array(dst, src, n);
}
static void from_bf16(zero3_t* z, float* dst, const uint16_t* src, size_t n, cudaStream_t on) {
    if (z->dev == DEV_CUDA) k_cast_act_f32(DT_BF16, src, dst, n, on);
    else f32_from_bf16_array(dst, src, n);
}

// ---- the one place the backends differ in kind: NCCL runs collectives on streams, MPI has none.
// NCCL: the collectives on the communication stream (made here), ordered against the compute
// stream by events; nothing on the host waits inside a step. MPI: non-blocking requests, kept
// and waited where the data is needed. comm_stream is NULL on MPI, and it says which.
static void streams_open(zero3_t* z) {
    if (!z->compute) return;  // MPI
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&z->ev_mark, cudaEventDisableTiming));
    for (int k = 0; k < 2; k++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&z->ag_done[k], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&z->rs_done[k], cudaEventDisableTiming));
    }
}
static void streams_close(zero3_t* z) {
    comm_stream_sync(z->c, z->comm_stream, "ZeRO-3's collectives");  // (MPI: nothing to wait for)
    comm_stream_sync(z->c, z->compute, "ZeRO-3's last step");
    if (!z->comm_stream) return;  // MPI
    CUDA_CHECK(cudaEventDestroy(z->ev_mark));
    for (int k = 0; k < 2; k++) {
        CUDA_CHECK(cudaEventDestroy(z->ag_done[k]));
        CUDA_CHECK(cudaEventDestroy(z->rs_done[k]));
    }
    CUDA_CHECK(cudaStreamDestroy(z->comm_stream));
}
// A collective just started (req, enqueued on stream `on`). NCCL: let go (its stream keeps it in
// order) and, with ev, an event recorded behind it for wait_coll. MPI: the request kept in *slot
// for wait_coll, or (slot NULL) waited now.
static void started(zero3_t* z, comm_req_t* req, cudaStream_t on, cudaEvent_t ev, comm_req_t** slot) {
    if (!z->comm_stream) {  // MPI
        if (slot) *slot = req;
        else comm_wait(z->c, req);
        return;
    }
    comm_detach(z->c, req);
    if (ev) CUDA_CHECK(cudaEventRecord(ev, on));
}
// Its result needed by what comes next: NCCL: the compute stream waits for ev (the host does
// not; harmless if ev was not re-recorded); MPI: *slot waited.
static void wait_coll(zero3_t* z, cudaEvent_t ev, comm_req_t** slot) {
    if (z->comm_stream) CUDA_CHECK(cudaStreamWaitEvent(z->compute, ev, 0));
    else comm_wait(z->c, *slot), *slot = NULL;
}

// Where the shard's first values come from: a full flat buffer in the shard's memory kind
// (zero3_create), or a function that writes host elements (zero3_create_init).
typedef struct {
    const float* full;
    zero3_init_fn fn;
    void* ctx;
} init_src_t;

// flat non-NULL: level 2 (ZeRO-2: the parameters stay in flat, whole; src unused).
static zero3_t* create(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U, init_src_t src,
                       float* flat, const adamw_config_t* cfg, cudaStream_t compute_stream, zero3_window_fn set_window,
                       void* model) {
    char err[256];
    if (!c || (!src.full && !src.fn && !flat) || !set_window) DIE("zero3_create: NULL communicator, parameters or window setter");
    const size_t total = bounds[U];
    if (ddp_check_params(table, n, total, err, sizeof err)) DIE("zero3_create: %s", err);
    if (c->backend == COMM_NCCL && !compute_stream)
        DIE("zero3_create: the NCCL backend needs the model's stream (not NULL)");
    zero3_t* z = xcalloc(1, sizeof *z);
    z->c = c;
    z->level = flat ? 2 : 3;
    z->flat = flat;
    z->n = n;
    z->p = xcalloc((size_t)n, sizeof *z->p);
    memcpy(z->p, table, (size_t)n * sizeof *table);
    z->U = U;
    z->u = xcalloc((size_t)U, sizeof *z->u);
    z->S = zero3_plan(bounds, U, c->world, z->u);
    size_t max_piece = 0;
    for (int k = 0; k < U; k++) {
        if ((size_t)c->world * z->u[k].piece > z->W) z->W = (size_t)c->world * z->u[k].piece;
        if (z->u[k].piece > max_piece) max_piece = z->u[k].piece;
    }
    z->dev = comm_device_kind(c);
    z->compute = c->backend == COMM_NCCL ? compute_stream : NULL;  // MPI has no streams
    z->set_window = set_window;
    z->model = model;
    z->bwd_next = -1;
    const device_t dev = z->dev;
    // Level 2 has no parameter shard and no parameter working buffers (the parameters are the
    // caller's flat buffer); one piece-sized buffer instead, the step's all-gather input.
    if (z->level == 3) z->pshard = mem_alloc(dev, z->S * sizeof(float), MEM_PARAMS);
    else z->sbuf = mem_alloc(dev, max_piece * sizeof(float), MEM_WORKSPACE);
    z->gshard = mem_alloc(dev, z->S * sizeof(float), MEM_GRADS);
    for (int k = 0; k < 2; k++) {
        if (z->level == 3) z->pbuf[k] = mem_alloc(dev, z->W * sizeof(float), MEM_WORKSPACE);
        z->gbuf[k] = mem_alloc(dev, z->W * sizeof(float), MEM_WORKSPACE);
        z->held[k] = -1;
    }
    streams_open(z);
    // The shard: rank r's piece of every unit (zeros past the unit's end); the gradient
    // buffers zeroed once (their tails past a unit are reduced and never read).
    const int r = c->rank;
    if (z->level == 3) zeros(z, z->pshard, z->S);
    zeros(z, z->gshard, z->S);
    for (int k = 0; k < 2; k++) zeros(z, z->gbuf[k], z->W);
    // zero3_create_init on the GPU: one piece at a time made on the host, then copied (host
    // memory of the largest piece, never of a unit or the model). Plain malloc: a synchronous
    // copy from it, once per unit at setup, costs nothing that matters.
    float* stage = NULL;
    if (src.fn && dev == DEV_CUDA) stage = xcalloc(max_piece, sizeof(float));
    optim_init(&z->opt, OPT_ADAMW, cfg, dev);
    for (int k = 0; k < U; k++) {
        const zero3_unit_t* un = &z->u[k];
        // The piece [lo, hi) clipped to the unit: past its end lies padding, not the next unit.
        const size_t lo = un->begin + (size_t)r * un->piece;
        const size_t hi = lo + un->piece < un->end ? lo + un->piece : un->end;
        if (z->level == 2) {
            // nothing to copy: the parameters stay where they are
        } else if (lo < hi && src.full) {
            copy(z, z->pshard + un->q, src.full + lo, hi - lo);
        } else if (lo < hi && !stage) {  // host memory: made in place
            src.fn(src.ctx, z->pshard + un->q, lo, hi);
        } else if (lo < hi) {
            src.fn(src.ctx, stage, lo, hi);
            // The stream's earlier zeroing of the shard is ordered before this copy (same stream).
            CUDA_CHECK(cudaMemcpyAsync(z->pshard + un->q, stage, (hi - lo) * sizeof(float), cudaMemcpyHostToDevice,
                                       z->compute));
            CUDA_CHECK(cudaStreamSynchronize(z->compute));  // the staging buffer is refilled next
        }
        // Its trainable elements become optimizer ranges at their compact offsets.
        for (int i = 0; i < n; i++) {
            if (!table[i].trainable) continue;
            const size_t a = table[i].offset > lo ? table[i].offset : lo;
            const size_t e = table[i].offset + table[i].numel < hi ? table[i].offset + table[i].numel : hi;
            if (a >= e) continue;
            // Level 3 steps its compact parameter shard; level 2 the flat buffer in place, at the
            // elements' own flat offsets (the gradient always at the compact ones).
            optim_add_range(&z->opt, z->level == 3 ? un->q + (a - lo) : a, un->q + (a - lo), e - a);
            z->owned += e - a;
        }
    }
    free(stage);
    comm_stream_sync(c, z->compute, "ZeRO-3's shard copy");  // the init buffer may go now (MPI: nothing to wait for)
    return z;
}

zero3_t* zero3_create(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U,
                      const float* init, const adamw_config_t* cfg, cudaStream_t compute_stream,
                      zero3_window_fn set_window, void* model) {
    if (!init) DIE("zero3_create: NULL parameters");
    return create(c, table, n, bounds, U, (init_src_t){init, NULL, NULL}, NULL, cfg, compute_stream, set_window, model);
}

zero3_t* zero3_create_init(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U,
                           zero3_init_fn init, void* init_ctx, const adamw_config_t* cfg,
                           cudaStream_t compute_stream, zero3_window_fn set_window, void* model) {
    if (!init) DIE("zero3_create_init: NULL init function");
    return create(c, table, n, bounds, U, (init_src_t){NULL, init, init_ctx}, NULL, cfg, compute_stream, set_window,
                  model);
}

zero3_t* zero3_create_zero2(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U, float* params,
                            const adamw_config_t* cfg, cudaStream_t compute_stream, zero3_window_fn set_window,
                            void* model) {
    if (!params) DIE("zero3_create_zero2: NULL parameters");
    return create(c, table, n, bounds, U, (init_src_t){NULL, NULL, NULL}, params, cfg, compute_stream, set_window,
                  model);
}

void zero3_destroy(zero3_t* z) {
    if (!z) return;
    for (int k = 0; k < 2; k++) {
        comm_wait(z->c, z->ag_req[k]);
        comm_wait(z->c, z->rs_req[k]);
    }
    streams_close(z);
    optim_free(&z->opt);
    mem_free(z->pshard);
    mem_free(z->pshard16);
    mem_free(z->sbuf);
    mem_free(z->gshard);
    for (int k = 0; k < 2; k++) {
        mem_free(z->pbuf[k]);
        mem_free(z->gbuf[k]);
        mem_free(z->pbuf16[k]);
        mem_free(z->gbuf16[k]);
        mem_free(z->rs16[k]);
    }
    free(z->p);
    free(z->u);
    free(z);
}

// ------------------------------------------------------------------ the hooks
static int n_uses(const zero3_t* z) { return 2 * z->U - 1; }
static int use_unit(const zero3_t* z, int i) { return i < z->U ? i : 2 * z->U - 2 - i; }

// NCCL: the communication stream waits until the compute stream has done everything enqueued
// so far (the last users of a buffer, the optimizer's update of the shard). MPI: in order already.
static void comm_after_compute(zero3_t* z) {
    if (!z->comm_stream) return;
    CUDA_CHECK(cudaEventRecord(z->ev_mark, z->compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->comm_stream, z->ev_mark, 0));
}

// All-gather use i's unit into pbuf[i mod 2], unless that buffer holds it already.
static void start_gather(zero3_t* z, int i) {
    // STUDENT-BEGIN(07.zero3_gather): all-gather use i's unit (use_unit) from every rank's piece at pshard + q into pbuf[i mod 2], unless held[] says the buffer has it: NCCL on the comm stream after comm_after_compute (the buffer's last user), detached, then ag_done[k] recorded; MPI a request in ag_req[k] (the old one waited first; started does either); set held[k], count ag_calls and ag_bytes; mixed (bf16): gather pshard16 + q as COMM_BF16 into pbuf16[k] and widen it into pbuf[k] (NCCL: from_bf16 on the comm stream after the detached gather, then ag_done[k]; MPI: the request in ag_req[k], ag_widen[k] = 1 for begin_use), 2 bytes an element in ag_bytes | see 07_zero/README.md §The four levels, §Mixed-precision sharding | test: test_07 zero_train_mpi/every_level_* fsdp_mpi/* | uses: use_unit comm_after_compute started | needs: 07.zero3_plan 07.zero3_reduce_scatter 07.shard_range 07.assign_buckets 07.start_bucket 07.param_final 07.zero_step 07.sharded_assign 07.sharded_optim_step 06.assign_buckets 06.per_parameter_plan 06.flat_plan 06.start_bucket 06.param_final
    const int k = i % 2, u = use_unit(z, i);
    if (z->held[k] == u) return;
    const zero3_unit_t* un = &z->u[u];
    const float* mine = z->pshard + un->q;
    comm_after_compute(z);          // NCCL: use i-2, the buffer's last user, was enqueued before this hook
    comm_wait(z->c, z->ag_req[k]);  // MPI: the buffer's last request (already waited by its use; NULL then)
    z->ag_req[k] = NULL;
    if (z->mixed) {  // bf16: the compute copy moves (2 bytes an element), widened where it lands
        const size_t all = un->piece * (size_t)z->c->world;
        comm_req_t* q = comm_iallgather(z->c, z->pshard16 + un->q, z->pbuf16[k], un->piece, COMM_BF16, z->comm_stream);
        if (z->comm_stream) {  // NCCL: widened on the communication stream, behind the gather
            comm_detach(z->c, q);
            from_bf16(z, z->pbuf[k], z->pbuf16[k], all, z->comm_stream);
            CUDA_CHECK(cudaEventRecord(z->ag_done[k], z->comm_stream));
        } else {  // MPI: widened by begin_use once the request is waited
            z->ag_req[k] = q;
            z->ag_widen[k] = 1;
        }
        z->st.ag_bytes += (long long)(all * sizeof(uint16_t));
    } else {
        started(z, comm_iallgather(z->c, mine, z->pbuf[k], un->piece, COMM_F32, z->comm_stream), z->comm_stream,
                z->ag_done[k], &z->ag_req[k]);
        z->st.ag_bytes += (long long)(un->piece * (size_t)z->c->world * sizeof(float));
    }
    z->held[k] = u;
    z->st.ag_calls++;
    // STUDENT-END(07.zero3_gather)
}

// Begins use i: its gather started (at use 0: now), the next one started, its own waited.
static void begin_use(zero3_t* z, int i) {
    if (i == 0) start_gather(z, 0);
    if (i + 1 < n_uses(z)) start_gather(z, i + 1);
    const int k = i % 2;
    wait_coll(z, z->ag_done[k], &z->ag_req[k]);
    if (z->ag_widen[k]) {  // MPI, bf16: the gathered unit widened (exactly its bf16 values)
        from_bf16(z, z->pbuf[k], z->pbuf16[k], z->W, NULL);
        z->ag_widen[k] = 0;
    }
}

// The parameter window of unit u in buffer k; bf16: the bf16 one beside it (the GPU's matmuls).
static void param_window(zero3_t* z, int k, const zero3_unit_t* un, float* grads) {
    z->set_window(z->model, z->pbuf[k], grads, un->begin, un->end);
    if (z->mixed && z->set_window16) z->set_window16(z->model, z->pbuf16[k], un->begin, un->end);
}

// A reduce-scatter from gradient buffer k done; bf16 on MPI: its output widened into the shard.
static void rs_wait(zero3_t* z, int k) {
    wait_coll(z, z->rs_done[k], &z->rs_req[k]);
    if (z->rs_bf16 && !z->comm_stream) from_bf16(z, z->gshard + z->rs_q[k], z->rs16[k], z->rs_n[k], NULL);
    z->rs_pending[k] = 0;
}

static void check_unit(int u, int want, const char* hook) {
    if (u != want) DIE("zero3 %s: unit %d, expected unit %d (the model must call the hooks in execution order)", hook, u, want);
}

void zero3_before_fwd(void* zz, int u) {
    zero3_t* z = zz;
    check_unit(u, z->fwd_next, "before_fwd");
    const zero3_unit_t* un = &z->u[u];
    if (z->level == 2) {  // the unit's span of the whole flat buffer: nothing to gather
        z->set_window(z->model, z->flat + un->begin, NULL, un->begin, un->end);
    } else {
        begin_use(z, u);
        param_window(z, u % 2, un, NULL);
    }
    z->fwd_next = u + 1 == z->U ? 0 : u + 1;
    if (u + 1 == z->U) z->bwd_next = z->U - 1;
}

void zero3_before_bwd(void* zz, int u) {
    zero3_t* z = zz;
    check_unit(u, z->bwd_next, "before_bwd");
    const int i = u == z->U - 1 ? u : 2 * z->U - 2 - u;  // the use: U-1 stays from the forward
    if (z->level == 3 && u != z->U - 1) begin_use(z, i);
    // The gradient buffer of this unit (j-th of the backward): the reduce-scatter that read it
    // two units ago must be done before the backward overwrites it.
    const int j = z->U - 1 - u, k = j % 2;
    if (z->rs_pending[k]) rs_wait(z, k);
    const zero3_unit_t* un = &z->u[u];
    if (z->level == 3) param_window(z, i % 2, un, z->gbuf[k]);
    else z->set_window(z->model, z->flat + un->begin, z->gbuf[k], un->begin, un->end);
}

void zero3_after_bwd(void* zz, int u) {
    // STUDENT-BEGIN(07.zero3_reduce_scatter): after unit u's backward (check_unit against bwd_next): reduce-scatter (avg) its gradient buffer gbuf[k], k = (U-1-u) mod 2, in pieces of un->piece into gshard + q: NCCL on the comm stream after comm_after_compute, detached, then rs_done[k] recorded; MPI a request in rs_req[k] (started does either); rs_pending[k] = 1, count rs_calls and rs_bytes, bwd_next = u - 1; rs_bf16: gbuf[k] rounded into gbuf16[k] on the compute stream first, reduce-scattered (avg) as COMM_BF16 into rs16[k], widened into gshard + q (NCCL: on the comm stream before rs_done[k]; MPI: by rs_wait, from rs_q[k], rs_n[k]), 2 bytes an element in rs_bytes | see 07_zero/README.md §The four levels, §Mixed-precision sharding | test: test_07 zero_train_mpi/every_level_* fsdp_mpi/* | uses: comm_after_compute started | needs: 07.zero3_plan 07.zero3_gather 07.shard_range 07.assign_buckets 07.start_bucket 07.param_final 07.zero_step 07.sharded_assign 07.sharded_optim_step 06.assign_buckets 06.per_parameter_plan 06.flat_plan 06.start_bucket 06.param_final
    zero3_t* z = zz;
    check_unit(u, z->bwd_next, "after_bwd");
    const int j = z->U - 1 - u, k = j % 2;
    const zero3_unit_t* un = &z->u[u];
    // The unit's whole gradient (padded to n pieces), averaged; rank r keeps piece r.
    const size_t all = un->piece * (size_t)z->c->world;
    if (z->rs_bf16) {  // bf16: the gradient rounded, reduced in bf16, its average widened into the fp32 shard
        to_bf16(z, z->gbuf16[k], z->gbuf[k], all, z->compute);
        comm_after_compute(z);  // NCCL: the kernels that wrote this unit's gradient, and its cast
        comm_req_t* q = comm_ireduce_scatter(z->c, z->gbuf16[k], z->rs16[k], un->piece, COMM_BF16, COMM_AVG, z->comm_stream);
        z->rs_q[k] = un->q;
        z->rs_n[k] = un->piece;
        if (z->comm_stream) {
            comm_detach(z->c, q);
            from_bf16(z, z->gshard + un->q, z->rs16[k], un->piece, z->comm_stream);
            CUDA_CHECK(cudaEventRecord(z->rs_done[k], z->comm_stream));
        } else {
            z->rs_req[k] = q;  // widened by rs_wait
        }
        z->st.rs_bytes += (long long)(all * sizeof(uint16_t));
    } else {
        comm_after_compute(z);  // NCCL: the kernels that wrote this unit's gradient
        started(z, comm_ireduce_scatter(z->c, z->gbuf[k], z->gshard + un->q, un->piece, COMM_F32, COMM_AVG, z->comm_stream),
                z->comm_stream, z->rs_done[k], &z->rs_req[k]);
        z->st.rs_bytes += (long long)(all * sizeof(float));
    }
    z->rs_pending[k] = 1;
    z->st.rs_calls++;
    z->bwd_next = u - 1;
    // STUDENT-END(07.zero3_reduce_scatter)
}

void zero3_finish_grads(zero3_t* z) {
    if (z->bwd_next != -1) DIE("zero3_finish_grads: the backward stopped before unit 0 (next %d)", z->bwd_next);
    for (int k = 0; k < 2; k++)
        if (z->rs_pending[k]) rs_wait(z, k);  // the optimizer after it
    z->bwd_next = -1;  // no backward until the next forward ends
    z->fwd_next = 0;
}

// Level 2, after AdamW updated this rank's pieces in the flat buffer: every unit's pieces
// all-gathered so that every rank's flat buffer holds all the new values. A unit's n pieces
// cover n·c_u >= its span elements: the last pieces run past e_u, into the next unit (or past
// the buffer's end), so neither the send nor the receive can be the flat buffer itself. Per
// unit: this rank's piece clipped to the unit into sbuf (tail zero), all-gathered into gbuf[0],
// whose first e_u - b_u elements are copied back to [b_u, e_u). Everything on the compute
// stream, in stream order (no host wait on NCCL: the requests are detached); the next forward
// is enqueued after it. gbuf[0] is zeroed at the end: the backward writes only a unit's span of
// its gradient buffer, and the reduce-scatter reads the padded tail too (zeros, as at creation).
static void gather_flat(zero3_t* z) {
    const int r = z->c->rank;
    for (int u = 0; u < z->U; u++) {
        const zero3_unit_t* un = &z->u[u];
        const size_t lo = un->begin + (size_t)r * un->piece;
        const size_t hi = lo + un->piece < un->end ? lo + un->piece : un->end;
        const size_t mine = lo < hi ? hi - lo : 0;
        if (mine) copy(z, z->sbuf, z->flat + lo, mine);
        if (mine < un->piece) zeros(z, z->sbuf + mine, un->piece - mine);
        started(z, comm_iallgather(z->c, z->sbuf, z->gbuf[0], un->piece, COMM_F32, z->compute), z->compute, NULL, NULL);
        copy(z, z->flat + un->begin, z->gbuf[0], un->end - un->begin);
        z->st.ag_calls++;
        z->st.ag_bytes += (long long)(un->piece * (size_t)z->c->world * sizeof(float));
    }
    zeros(z, z->gbuf[0], z->W);
}

void zero3_step(zero3_t* z) {
    if (z->level == 2) {
        optim_step(&z->opt, z->flat, z->gshard, z->compute);
        gather_flat(z);
    } else {
        optim_step(&z->opt, z->pshard, z->gshard, z->compute);
        if (z->mixed) to_bf16(z, z->pshard16, z->pshard, z->S, z->compute);  // the next gathers' compute copy
        z->held[0] = z->held[1] = -1;  // the shard changed: every unit is gathered again
    }
    z->st.steps++;
}

void zero3_gather_params(zero3_t* z, float* out) {
    if (z->level == 2) DIE("zero3_gather_params: ZeRO-2 keeps the parameters whole (read the flat buffer)");
    comm_stream_sync(z->c, z->comm_stream, "ZeRO-3's collectives");  // (MPI: nothing to wait for)
    for (int k = 0; k < 2; k++) comm_wait(z->c, z->ag_req[k]), z->ag_req[k] = NULL, z->ag_widen[k] = 0;
    for (int u = 0; u < z->U; u++) {
        const zero3_unit_t* un = &z->u[u];
        // Blocking on the compute stream (NCCL) or in host memory (MPI).
        comm_allgather(z->c, z->pshard + un->q, z->pbuf[0], un->piece, COMM_F32, z->compute);
        copy(z, out + un->begin, z->pbuf[0], un->end - un->begin);
    }
    comm_stream_sync(z->c, z->compute, "ZeRO-3's parameter gather");
    z->held[0] = z->held[1] = -1;
}

void zero3_gather_unit_host(zero3_t* z, int u, float* host) {
    if (u < 0 || u >= z->U) DIE("zero3_gather_unit_host: unit %d outside [0, %d)", u, z->U);
    if (z->level == 2) DIE("zero3_gather_unit_host: ZeRO-2 keeps the parameters whole (read the flat buffer)");
    comm_stream_sync(z->c, z->comm_stream, "ZeRO-3's collectives");  // (MPI: nothing to wait for)
    for (int k = 0; k < 2; k++) comm_wait(z->c, z->ag_req[k]), z->ag_req[k] = NULL, z->ag_widen[k] = 0;
    const zero3_unit_t* un = &z->u[u];
    // Into working buffer 0 (blocking), then its [begin, end) to the host.
    comm_allgather(z->c, z->pshard + un->q, z->pbuf[0], un->piece, COMM_F32, z->compute);
    const size_t bytes = (un->end - un->begin) * sizeof(float);
    if (z->dev == DEV_CUDA) {  // device memory to the host
        CUDA_CHECK(cudaMemcpyAsync(host, z->pbuf[0], bytes, cudaMemcpyDeviceToHost, z->compute));
        comm_stream_sync(z->c, z->compute, "ZeRO-3's unit gather");
    } else {
        memcpy(host, z->pbuf[0], bytes);
    }
    z->held[0] = z->held[1] = -1;  // buffer 0 was overwritten: the next step gathers again
}

// ------------------------------------------------------------------ inspection
int zero3_n_units(const zero3_t* z) { return z->U; }
zero3_unit_t zero3_unit(const zero3_t* z, int u) {
    if (u < 0 || u >= z->U) DIE("zero3_unit: index %d outside [0, %d)", u, z->U);
    return z->u[u];
}
size_t zero3_shard_elems(const zero3_t* z) { return z->S; }
size_t zero3_owned_trainable(const zero3_t* z) { return z->owned; }
size_t zero3_state_bytes(const zero3_t* z) { return optim_state_bytes(&z->opt); }
size_t zero3_work_bytes(const zero3_t* z) {  // level 3: 2 parameter + 2 gradient buffers; level 2: 2 gradient + sbuf
    size_t max_piece = 0;
    for (int k = 0; k < z->U; k++)
        if (z->u[k].piece > max_piece) max_piece = z->u[k].piece;
    if (z->level == 3)  // bf16: the shard's compute copy, 2 bf16 parameter buffers (+ 2 gradient, 2 pieces)
        return 4 * z->W * sizeof(float) +
               (z->mixed ? (z->S + 2 * z->W) * sizeof(uint16_t) : 0) +
               (z->rs_bf16 ? 2 * (z->W + max_piece) * sizeof(uint16_t) : 0);
    return (2 * z->W + max_piece) * sizeof(float);
}
int zero3_level(const zero3_t* z) { return z->level; }
zero3_stats_t zero3_stats(const zero3_t* z) { return z->st; }
optim_t* zero3_optim(zero3_t* z) { return &z->opt; }
void zero3_set_lr(zero3_t* z, float lr) { z->opt.cfg.lr = lr; }
float* zero3_grad_shard(zero3_t* z) { return z->gshard; }

// ------------------------------------------------------------------ bf16 parameters
void zero3_set_mixed(zero3_t* z, int reduce_bf16, zero3_window16_fn set_window16) {
    if (z->level != 3) DIE("zero3_set_mixed: ZeRO-3 only (level %d keeps fp32 parameters whole)", z->level);
    if (z->st.steps || z->fwd_next || z->held[0] != -1 || z->held[1] != -1)
        DIE("zero3_set_mixed: before the first step only");
    if (z->mixed) DIE("zero3_set_mixed: called twice");
    size_t max_piece = 0;
    for (int k = 0; k < z->U; k++)
        if (z->u[k].piece > max_piece) max_piece = z->u[k].piece;
    z->mixed = 1;
    z->rs_bf16 = reduce_bf16 != 0;
    z->set_window16 = set_window16;
    z->pshard16 = mem_alloc(z->dev, z->S * sizeof(uint16_t), MEM_WORKSPACE);
    for (int k = 0; k < 2; k++) {
        z->pbuf16[k] = mem_alloc(z->dev, z->W * sizeof(uint16_t), MEM_WORKSPACE);
        mem_zero_async(z->dev, z->pbuf16[k], z->W * sizeof(uint16_t), z->compute);
        if (!z->rs_bf16) continue;
        z->gbuf16[k] = mem_alloc(z->dev, z->W * sizeof(uint16_t), MEM_WORKSPACE);
        z->rs16[k] = mem_alloc(z->dev, max_piece * sizeof(uint16_t), MEM_WORKSPACE);
    }
    to_bf16(z, z->pshard16, z->pshard, z->S, z->compute);  // the first gathers' compute copy
    comm_stream_sync(z->c, z->compute, "ZeRO-3's bf16 copy");
}
int zero3_mixed(const zero3_t* z) { return z->mixed + z->rs_bf16; }
