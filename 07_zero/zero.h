// Stage 07, part 2: ZeRO-1 and ZeRO-2 (ZeRO-3: zero3.h) (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", 2020) over the flat buffers of stage 06.
//
// The flat buffer of `total` elements is padded to P = n·S elements, S a multiple of 64
// (zero_shard_range), so that it splits into n equal, 256-byte-aligned shards; rank r owns
// shard r = [r·S, (r+1)·S). The caller gives parameter and gradient buffers of P elements
// (padding zero; common/model_gpu.h's model_gpu_create_flat or model_gpu_pad_flat, or a padded host buffer).
//
//   DDP (06)  all-reduce(avg) every gradient        AdamW on everything     (moments 8Ψ)
//   ZeRO-1    reduce-scatter(avg) the gradient:     AdamW on shard r        all-gather the
//             rank r receives shard r's average     (moments 8Ψ/n)          parameters
//   ZeRO-2    each BUCKET reduce-scattered in the   AdamW on rank r's       all-gather each
//             backward, as soon as it is final;     pieces (moments 8Ψ/n)   bucket's pieces
//             rank r keeps only its 1/n piece of each, in a compact buffer of S elements
//
// ZeRO-1 is stage 06's flat variant with one call changed (all-reduce -> reduce-scatter) and
// one added (the all-gather); the gradient buffer stays whole (4Ψ), and the reduce-scatter
// runs in place: rank r's average lands at grads[r·S, (r+1)·S).
//
// ZeRO-2's buckets (zero_assign_buckets): the padded buffer is cut, from the top down (the
// order in which the backward finishes gradients), into buckets whose lengths are multiples of
// n·64 elements, at most the cap (at least n·64), boundaries anywhere — through parameters
// too. Bucket k = [a_k, b_k) of length n·c_k; rank r keeps the piece [a_k + r·c_k, a_k +
// (r+1)·c_k), c_k a multiple of 64. A bucket is final when every trainable parameter that
// overlaps it has reported its gradient (a parameter cut by a boundary finishes both buckets);
// its reduce-scatter then reads grads[a_k, b_k) and writes the compact buffer at q_k = the
// sum of c_j for j < k. The pieces of one rank are NOT contiguous in the flat buffer (one per
// bucket, spread over the model), so AdamW runs over a list of ranges with one packed moment
// buffer (optim_t, sharded_optim.h); the union of a rank's pieces is S elements, like a shard.
// Why this mapping: buckets aligned to rank shards instead (bucket = the same sub-range of
// every shard) would span the whole model and be final only at the end of the backward —
// no overlap. Cutting buckets into n equal pieces keeps stage 06's overlap, every collective
// equal-sized (NCCL's reduce-scatter needs that), and costs a range list in the optimizer.
// Memory (per rank, fp32): kept gradient 4·S = 4Ψ/n (+ padding); optimizer state 8 bytes per
// trainable element of its pieces. The backward of this repo's models still writes one flat
// gradient buffer of P elements (4Ψ), the staging area every bucket is reduce-scattered from:
// a model whose backward wrote into a reusable bucket-sized buffer would free it (README).
//
// A step (MPI: host buffers, blocking where it says so; NCCL: device buffers, the compute
// stream given at creation, a communication stream created here for ZeRO-2's buckets):
//   backward(..., zero_grad_ready, z);  // ZeRO-2 starts each bucket's reduce-scatter here
//   zero_finish_grads(z);               // ZeRO-1: the reduce-scatter; ZeRO-2: the rest, waited
//   zero_step(z);                       // AdamW on what this rank owns, then the all-gathers
// ZeRO-3 lives apart, in zero3.h: its shards are PER UNIT (each unit of the model — the
// embedding, a block, the head — padded to n·64 and split n ways), not this file's shards of
// the whole padded buffer, because a unit's all-gather over whole-buffer shards would collect
// unequal, often empty pieces from every rank; per unit it is one NCCL call of equal pieces.
// Frozen parameters (table.trainable 0) are never stepped; their gradient slots are reduced
// with the rest (scratch: nothing reads them) and their values are all-gathered from the shard
// owner — identical on every rank anyway, as the caller broadcast the parameters at the start.
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "06_ddp/ddp.h"
#include "07_zero/sharded_optim.h"
#include "common/comm.h"
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_ALIGN 64  // elements: every shard and every piece starts at a multiple (256 bytes)

// Shard r of a flat buffer of `total` elements split n ways: S = total rounded up to a
// multiple of n·64, divided by n; [begin, end) = [r·S, (r+1)·S); padded_total = n·S. The
// last shards may lie partly or wholly in the padding. Any pointer may be NULL.
void zero_shard_range(size_t total, int n, int r, size_t* begin, size_t* end, size_t* padded_total);
size_t zero_padded_total(size_t total, int n);

// One ZeRO-2 bucket: [begin, end) of the padded buffer, end − begin = n·piece.
typedef struct {
    size_t begin, end;
    size_t piece;  // elements of each rank's piece (a multiple of 64)
    size_t q;      // where this rank's piece goes in the compact gradient buffer
} zero_bucket_t;
// Pure bucket plan (what the tests call): buckets of at most bucket_bytes (rounded down to a
// multiple of n·64 elements, and at least n·64), from the top of [0, padded_total) down;
// bucket 0 holds the end of the buffer. padded_total must be a multiple of n·64 (dies
// otherwise). Returns the count; writes at most max_out (out may be NULL with max_out 0).
int zero_assign_buckets(size_t padded_total, int n, size_t bucket_bytes, zero_bucket_t* out, int max_out);

typedef struct {
    long long steps;
    long long rs_calls, ag_calls;  // reduce-scatters and all-gathers started
    long long rs_bytes, ag_bytes;  // bytes each rank put in: n·(piece bytes) per call
} zero_stats_t;

typedef struct zero zero_t;

// level 1 or 2. table: as stage 06's (offset order, no overlaps). params/grads: the padded
// flat buffers (zero_padded_total(total, world) elements). bucket_mb: ZeRO-2's cap in MiB.
// compute_stream: NCCL, required (the stream the backward writes gradients on).
zero_t* zero_create(comm_t* c, int level, const param_ref_t* table, int n, float* params,
                    float* grads, size_t total, double bucket_mb, const adamw_config_t* cfg,
                    cudaStream_t compute_stream);
void zero_destroy(zero_t* z);

void zero_grad_ready(void* z, int param_idx);  // the backward's hook (grad_ready_fn)
void zero_finish_grads(zero_t* z);
void zero_step(zero_t* z);

int zero_level(const zero_t* z);
size_t zero_shard_elems(const zero_t* z);        // S
size_t zero_owned_trainable(const zero_t* z);    // elements this rank's AdamW updates
size_t zero_state_bytes(const zero_t* z);        // its optimizer state (MEM_OPTIM), bytes
size_t zero_grad_shard_bytes(const zero_t* z);   // ZeRO-2's kept gradient (MEM_GRADS); 0 for ZeRO-1
int zero_n_buckets(const zero_t* z);
zero_bucket_t zero_bucket(const zero_t* z, int k);
zero_stats_t zero_stats(const zero_t* z);
// For a trainer that drives the step itself (a schedule, clipping, checkpoints: 11_train):
// the optimizer (its ranges and moments), the learning rate of the next zero_step, and the
// buffer the optimizer's gradient offsets index (level 1: the padded flat gradient, rank r's
// average at [r·S, (r+1)·S) after zero_finish_grads; level 2: the compact S-element buffer).
optim_t* zero_optim(zero_t* z);
void zero_set_lr(zero_t* z, float lr);
float* zero_grad_shard(zero_t* z);

#ifdef __cplusplus
}
#endif
