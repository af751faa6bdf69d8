// See zero_layer.h.
#include "07_zero/zero_layer.h"
#include "05_collectives/hier.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/lm.h"

static const char* const names[ZL_N] = {"ddp", "zero1", "zero2s", "zero2", "course", "zero3", "hsdp"};
const char* zl_name(zl_kind_t kind) { return (unsigned)kind < ZL_N ? names[kind] : "?"; }

static long long state_bytes(device_t dev) {  // live parameters + gradients + optimizer state
    const mem_stats_t ms = mem_stats(dev);
    return (long long)(ms.live_by_tag[MEM_PARAMS] + ms.live_by_tag[MEM_GRADS] + ms.live_by_tag[MEM_OPTIM]);
}

// ZeRO-3's window into the model (zero3_window_fn).
static void set_window(void* m, float* p, float* g, size_t lo, size_t hi) { lm_set_windows(m, p, g, lo, hi); }
static void set_window16(void* m, const uint16_t* p, size_t lo, size_t hi) { lm_set_windows_bf16(m, p, lo, hi); }

// Sharded construction (zero3_init_fn): flat elements [lo, hi) of rank 0's initial parameters,
// which every rank would otherwise receive whole by the broadcast (model_init_params is a pure
// function of the seed and the element index, so each rank makes only its own pieces).
static void init_range(void* ctx, float* host, size_t lo, size_t hi) {
    const zero_layer_t* L = ctx;
    model_init_params_range(L->x->lay, host, lo, hi, (uint64_t)L->seed0);
}

// ZeRO-3: the shard from the current parameters (none: from the seed), then the model's own flat
// buffers freed and its unit hooks pointed at zero3. ZeRO-2: the same engine at level 2 over
// the model's flat parameters; only the flat gradient buffer is freed.
static void zero3_layer_create(zero_layer_t* L) {
    const int level = L->kind == ZL_ZERO2 ? 2 : 3;
    replica_t* x = L->x;
    comm_t* c = L->shard_c ? L->shard_c : x->c;  // hsdp: ZeRO-3 over the node's ranks
    const device_t dev = lm_device(x->m);
    const int U = model_n_units(&x->cfg);
    size_t* bounds = malloc((size_t)(U + 1) * sizeof *bounds);
    if (!bounds) DIE("out of host memory");
    for (int u = 0; u < U; u++) model_unit_span(x->lay, &x->cfg, u, &bounds[u], &bounds[u + 1]);
    bounds[U] = x->lay->total;
    const long long before = state_bytes(dev);  // (the shard's bytes = mid - before)
    const long long ws0 = (long long)mem_stats(dev).live_by_tag[MEM_WORKSPACE];
    float* params = lm_params(x->m);
    const cudaStream_t cs = lm_stream(x->m);
    const adamw_config_t* opt = &L->adam;
    if (level == 2)
        L->z3 = zero3_create_zero2(c, x->table, x->lay->n, bounds, U, params, opt, cs, set_window, x->m);
    else if (params)
        L->z3 = zero3_create(c, x->table, x->lay->n, bounds, U, params, opt, cs, set_window, x->m);
    else
        L->z3 = zero3_create_init(c, x->table, x->lay->n, bounds, U, init_range, L, opt, cs, set_window, x->m);
    // bf16 model: the gathers move the shard's bf16 compute copy (zero3_set_mixed), fp32 masters
    if (lm_precision(x->m) == MP_BF16) {
        if (level != 3) DIE("zero_layer: ZeRO-2 on zero3's engine runs fp32 only");
        zero3_set_mixed(L->z3, L->reduce_bf16, set_window16);
    }
    const long long mid = state_bytes(dev);
    L->work = (long long)mem_stats(dev).live_by_tag[MEM_WORKSPACE] - ws0;
    // zero3 frees both flat buffers, zero2 the gradients (none to free if the model has none)
    if (level == 3 ? params != NULL : lm_grads(x->m) != NULL) lm_free_flat(x->m, level == 2);
    const model_unit_hooks_t hooks = {zero3_before_fwd, zero3_before_bwd, zero3_after_bwd, L->z3};
    lm_set_unit_hooks(x->m, &hooks);
    // What stays besides the level's own state: ZeRO-3's is its shards, ZeRO-2's its shard and
    // the flat parameter buffer (P elements).
    L->state0 = state_bytes(dev) - (mid - before) - (level == 2 ? (long long)(L->P * sizeof(float)) : 0);
    free(bounds);
}

void zero_layer_create(zero_layer_t* L, zl_kind_t kind, replica_t* x, const adamw_config_t* opt, size_t P,
                       double bucket_mb, int seed0) {
    zero_layer_create_rs(L, kind, x, opt, P, bucket_mb, seed0, 0);
}

void zero_layer_create_rs(zero_layer_t* L, zl_kind_t kind, replica_t* x, const adamw_config_t* opt, size_t P,
                          double bucket_mb, int seed0, int reduce_bf16) {
    memset(L, 0, sizeof *L);
    L->reduce_bf16 = reduce_bf16;
    L->kind = kind;
    L->x = x;
    L->P = P;
    L->seed0 = seed0;
    L->adam = *opt;
    const int n = x->lay->n;
    const size_t total = x->lay->total;
    float *params = lm_params(x->m), *grads = lm_grads(x->m);
    const cudaStream_t cs = lm_stream(x->m);
    if (kind == ZL_DDP || kind == ZL_COURSE)
        L->d = ddp_create(x->c, x->table, n, params, grads, total, DDP_BUCKETED, bucket_mb, cs);
    if (kind == ZL_DDP) {
        optim_init(&L->opt, OPT_ADAMW, opt, lm_device(x->m));
        for (int i = 0; i < n; i++) optim_add_range(&L->opt, x->table[i].offset, x->table[i].offset, x->table[i].numel);
    } else if (kind == ZL_COURSE) {
        L->so = sharded_optim_create(x->c, x->table, n, params, grads, total, OPT_ADAMW, opt, 0, cs);
    } else if (kind == ZL_ZERO3 || kind == ZL_ZERO2) {
        zero3_layer_create(L);
    } else if (kind == ZL_HSDP) {  // the node split (stage 05's hier.h: equal nodes, ranks in blocks)
        if (x->c->backend != COMM_MPI)
            comm_refuse(x->c, "hsdp runs on the CPU (MPI backend) only; allowed: --backend mpi, or --zero 3 on GPUs");
        hier_t* h = hier_create(x->c, 0);
        const int node = h->node, local = h->local;
        hier_destroy(h);
        L->shard_c = comm_split(x->c, node, local, "shard");
        L->rep_c = comm_split(x->c, local, node, "replica");
        zero3_layer_create(L);
    } else {  // zero1, zero2s: the flat buffers of zero.h
        L->z = zero_create(x->c, kind == ZL_ZERO1 ? 1 : 2, x->table, n, params, grads, total, bucket_mb, opt, cs);
    }
}

// The model's flat buffers back (P elements, padding zero), filled from the shards (zero2: the
// parameters are current in place, only the gradient buffer comes back).
static void zero3_layer_destroy(zero_layer_t* L, int restore) {
    const int level = zero3_level(L->z3);
    lm_t* m = L->x->m;
    if (!restore || level == 2) {
        zero3_destroy(L->z3);  // (its collectives and the last step done first)
        L->z3 = NULL;
        if (!restore) return;
    }
    char err[512];
    lm_set_unit_hooks(m, NULL);
    if (lm_restore_flat(m, L->P, level == 2, err, sizeof err) != 0) comm_fatal(L->x->c, 1, "%s", err);
    if (level == 2) return;
    zero3_gather_params(L->z3, lm_params(m));
    zero3_destroy(L->z3);
    L->z3 = NULL;
}

void zero_layer_destroy(zero_layer_t* L, int restore) {
    if (L->z3) zero3_layer_destroy(L, restore);
    if (L->rep_c) comm_destroy(L->rep_c, 0);
    if (L->shard_c) comm_destroy(L->shard_c, 0);
    if (L->d) ddp_destroy(L->d);
    if (L->kind == ZL_DDP) optim_free(&L->opt);
    sharded_optim_destroy(L->so);
    zero_destroy(L->z);
    memset(L, 0, sizeof *L);
}

int zero_layer_collectives(const zero_layer_t* L) {
    if (L->z3) {  // zero3: U forward gathers, U-2 backward ones (the head and the last block stay), U
                  // reduce-scatters; zero2: U reduce-scatters, U all-gathers after the update
        const int U = zero3_n_units(L->z3);
        return zero3_level(L->z3) == 3 ? 3 * U - 2 + (L->rep_c ? 1 : 0) : 2 * U;  // hsdp: + the shard's all-reduce
    }
    if (L->z) return 2 * zero_n_buckets(L->z);
    return ddp_n_buckets(L->d) + (L->so ? (int)sharded_optim_broadcasts(L->so) : 0);
}

// ---- the training loop's method -------------------------------------------------------------
static void layer_hook(void* ctx, int i) {
    zero_layer_t* L = ctx;
    if (L->z3) return;  // ZeRO-2/3 work per unit (the model's unit hooks), not per parameter
    if (L->z) zero_grad_ready(L->z, i);
    else ddp_grad_ready(L->d, i);
}
static void layer_finish(void* ctx) {
    zero_layer_t* L = ctx;
    if (L->z3) {
        zero3_finish_grads(L->z3);
        if (L->rep_c && L->rep_c->world > 1)  // hsdp: the node's average, averaged over the nodes
            comm_allreduce(L->rep_c, zero3_grad_shard(L->z3), zero3_grad_shard(L->z3), zero3_shard_elems(L->z3),
                           COMM_F32, COMM_AVG, lm_stream(L->x->m));
    } else if (L->z) zero_finish_grads(L->z);
    else ddp_finish_grads(L->d);
}
static void layer_update(void* ctx) {
    zero_layer_t* L = ctx;
    if (L->z3) zero3_step(L->z3);
    else if (L->z) zero_step(L->z);
    else if (L->so) sharded_optim_step(L->so);
    else optim_step(&L->opt, lm_params(L->x->m), lm_grads(L->x->m), lm_stream(L->x->m));
}
train_method_t zero_layer_method(zero_layer_t* L) { return (train_method_t){L, layer_hook, layer_finish, layer_update, NULL}; }

// ---- what it keeps ----------------------------------------------------------------------------
// The trainable elements of the table inside [lo, hi).
static size_t trainable_in(const replica_t* x, size_t lo, size_t hi) {
    size_t n = 0;
    for (int i = 0; i < x->lay->n; i++) {
        const size_t a = x->table[i].offset, e = a + x->table[i].numel;
        if (x->table[i].trainable && a < hi && lo < e) n += (e < hi ? e : hi) - (a > lo ? a : lo);
    }
    return n;
}

size_t zero_layer_owned(const zero_layer_t* L) {
    const replica_t* x = L->x;
    const int W = x->c->world, r = L->shard_c ? L->shard_c->rank : x->c->rank;  // hsdp: the rank in the node
    size_t n = 0;
    switch (L->kind) {
    case ZL_DDP: return trainable_in(x, 0, x->lay->total);
    case ZL_ZERO1: {
        size_t lo, hi;
        zero_shard_range(x->lay->total, W, r, &lo, &hi, NULL);
        return trainable_in(x, lo, hi);
    }
    case ZL_ZERO2:
    case ZL_ZERO3:
    case ZL_HSDP:  // per unit (zero3.h): rank r's piece of each, clipped to the unit
        for (int u = 0; u < zero3_n_units(L->z3); u++) {
            const zero3_unit_t b = zero3_unit(L->z3, u);
            const size_t lo = b.begin + (size_t)r * b.piece, hi = lo + b.piece;
            n += trainable_in(x, lo, hi < b.end ? hi : b.end);
        }
        return n;
    case ZL_ZERO2S:
        for (int k = 0; k < zero_n_buckets(L->z); k++) {
            const zero_bucket_t b = zero_bucket(L->z, k);
            n += trainable_in(x, b.begin + (size_t)r * b.piece, b.begin + (size_t)(r + 1) * b.piece);
        }
        return n;
    default:
        for (int i = 0; i < x->lay->n; i++)
            if (sharded_optim_owner(L->so, i) == r) n += x->table[i].numel;
        return n;
    }
}

// The sum over the elements of a mix (splitmix64's finaliser) of their index and their bits.
// Why a sum of per-element terms: it does not depend on how the buffer is cut into pieces, so a
// run that never holds the whole model (hashing unit by unit) gets the same value as one that
// does, and the terms are independent, so the threads share the work (a serial byte-wise hash
// of a 14 B-parameter model takes about a minute; this, a second or two).
unsigned long long zero_hash_floats(unsigned long long h, const float* x, size_t first, size_t n) {
    unsigned long long sum = 0;
    const long long nn = (long long)n;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (nn > 65536)
    for (long long i = 0; i < nn; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        unsigned long long z = ((unsigned long long)(first + (size_t)i) * 0x9E3779B97F4A7C15ull) ^ bits;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        sum += z ^ (z >> 31);
    }
    return h + sum;
}

unsigned long long zero_layer_params_hash(zero_layer_t* L) {
    unsigned long long h = 0;
    if (L->z3 && zero3_level(L->z3) == 3) {
        size_t most = 0;
        for (int u = 0; u < zero3_n_units(L->z3); u++) {
            const zero3_unit_t b = zero3_unit(L->z3, u);
            if (b.end - b.begin > most) most = b.end - b.begin;
        }
        float* buf = malloc(most * sizeof(float));  // one unit, host
        if (!buf) DIE("out of host memory: %zu bytes", most * sizeof(float));
        for (int u = 0; u < zero3_n_units(L->z3); u++) {
            const zero3_unit_t b = zero3_unit(L->z3, u);
            zero3_gather_unit_host(L->z3, u, buf);
            h = zero_hash_floats(h, buf, b.begin, b.end - b.begin);
        }
        free(buf);
        return h;
    }
    lm_t* m = L->x->m;
    const float* params = lm_params(m);
    const size_t total = L->x->lay->total;
    // Host memory is hashed where it lies; device memory through a host chunk (CUDA copies).
    if (lm_device(m) == DEV_CPU) return zero_hash_floats(h, params, 0, total);
    comm_stream_sync(L->x->c, lm_stream(m), "the last step");
    const size_t chunk = (size_t)1 << 24;  // 64 MiB of host memory
    float* buf = malloc(chunk * sizeof(float));
    if (!buf) DIE("out of host memory");
    for (size_t a = 0; a < total; a += chunk) {
        const size_t n = total - a < chunk ? total - a : chunk;
        CUDA_CHECK(cudaMemcpy(buf, params + a, n * sizeof(float), cudaMemcpyDeviceToHost));
        h = zero_hash_floats(h, buf, a, n);
    }
    free(buf);
    return h;
}
