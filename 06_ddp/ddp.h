// Data-parallel gradient averaging over a flat gradient buffer: the DDP layer of stage 06.
//
// It knows nothing of the model. It is given a parameter table (name, offset, element count,
// trainable or frozen) over ONE flat fp32 parameter buffer and ONE flat fp32 gradient buffer
// with the same layout, and the communicator (common/comm.h). The same code runs on
//   MPI   host buffers; non-blocking all-reduces are MPI requests, waited in ddp_finish_grads;
//   NCCL  device buffers; the caller's compute stream, plus a communication stream created here.
//
// A training step:
//   ddp_broadcast_params(d);                      // once, before the first step
//   forward; backward(..., ddp_grad_ready, d);     // the backward calls the hook per parameter
//   ddp_finish_grads(d);                           // every trainable gradient = mean over ranks
//   optimizer step (identical on every rank, so the replicas stay identical)
//
// The four variants, each a small change on the one before (SPEC.md "Data parallelism"):
//   naive     after the backward, one all-reduce per trainable parameter;
//   flat      after the backward, ONE all-reduce of the trainable range of the flat buffer;
//   overlap   each parameter's all-reduce starts in the hook, as soon as its gradient is final;
//   bucketed  parameters grouped (reverse order) into buckets of at most bucket_mb; a bucket's
//             all-reduce starts in the hook of its last member.
// "Start" on NCCL means: an event recorded on the compute stream (after the kernels that wrote
// the gradient) and waited by the communication stream, then the all-reduce enqueued there.
//
// Rules every variant keeps:
// - Frozen parameters are never reduced by naive, overlap and bucketed, and no bucket slice
//   covers one (a frozen parameter closes the bucket being filled). The flat variant reduces
//   the one slice [first trainable offset, last trainable end): frozen parameters and padding
//   inside it have their gradient slots averaged too. Those slots are scratch — no optimizer
//   reads a frozen parameter's gradient — so nothing observable changes; in exchange it is
//   one call with no copies, which is the point of the variant.
// - A trainable parameter whose hook did not fire this step (a parameter the forward did not
//   use) gets a ZERO gradient in ddp_finish_grads, and is reduced like the rest (its bucket, or
//   its own all-reduce, starts there).
// - The order of collectives must be the same on every rank (MPI and NCCL both match
//   collectives by order). It is, as long as every rank's backward fires the hooks in the same
//   order and leaves the same parameters unused — true for any model whose control flow does
//   not depend on the data. (PyTorch DDP's find_unused_parameters solves the general case.)
// - Counts are elements; a bucket's cap is in MiB (2^20 bytes, as PyTorch's bucket_cap_mb).
#pragma once
#include <stddef.h>
#include <cuda_runtime_api.h>
#include "common/comm.h"
#include "common/param_table.h"

#ifdef __cplusplus
extern "C" {
#endif



typedef enum { DDP_NAIVE = 0, DDP_FLAT, DDP_OVERLAP, DDP_BUCKETED, DDP_NVARIANTS } ddp_variant_t;
#define DDP_VARIANT_CHOICES "naive|flat|overlap|bucketed"
const char* ddp_variant_name(ddp_variant_t v);          // "naive", ...
int ddp_variant_parse(const char* s, ddp_variant_t* out);  // 0, or -1

// A bucket: the parameters with table indices p_lo..p_hi (inclusive), reduced as ONE
// contiguous slice [begin, end) of the gradient buffer. The slice runs from the lowest
// member's offset to the highest member's end, so padding between members is reduced with
// them (it is zero on every rank and stays zero). Members are all trainable, except in the
// flat variant's single slice, which spans frozen parameters too (see above).
typedef struct {
    size_t begin, end;  // elements
    int p_lo, p_hi;     // table indices
} ddp_bucket_t;

// Pure bucket assignment (no communicator; what the tests call). Walks the table in REVERSE
// order (the order in which a backward pass finishes gradients) and fills a bucket while its
// slice stays at most bucket_bytes long (slice bytes, padding included: what goes on the
// wire). A parameter larger than the cap therefore sits alone in its own bucket; a cap of 0
// puts every parameter alone. Frozen parameters belong to no bucket and close the one being
// filled. Bucket 0 holds the last parameters of the table.
// Returns the number of buckets (writing at most max_out of them to out, which may be NULL
// with max_out 0 to ask for the count), or -1 if the table is not valid (see
// ddp_check_params).
int ddp_assign_buckets(const param_ref_t* p, int n, size_t bucket_bytes, ddp_bucket_t* out,
                       int max_out);
// 0 if the table is usable over a buffer of `total` elements: n >= 1, every numel >= 1,
// offsets increasing without overlap, every end <= total. Else -1 and a reason.
int ddp_check_params(const param_ref_t* p, int n, size_t total, char* err, size_t errlen);
// PyTorch DDP's default plan: the FIRST bucket (the last parameters of the table, whose
// gradients are final first) capped at first_bytes (PyTorch: 1 MiB) so that communication
// starts early, every later one at bucket_bytes (PyTorch: 25 MiB). Bucket 0 is
// ddp_assign_buckets(first_bytes)'s bucket 0; the table below its lowest member is assigned
// with bucket_bytes. first_bytes >= bucket_bytes is ddp_assign_buckets(bucket_bytes).
int ddp_assign_buckets_first(const param_ref_t* p, int n, size_t first_bytes, size_t bucket_bytes,
                             ddp_bucket_t* out, int max_out);
// bucket_mb (MiB, may be fractional) to bytes; negative or non-finite values die.
size_t ddp_bucket_bytes(double bucket_mb);

// Counters since ddp_create (or the last ddp_stats_reset); GPU time: ddp_comm_ms.
typedef struct {
    long long steps;            // ddp_finish_grads calls
    long long allreduce_calls;  // all-reduces started (gradients only, not the broadcast)
    long long bytes_reduced;    // their total size in bytes
    long long zeroed_params;    // trainable parameters whose hook never fired (zero gradient)
    double finish_host_s;       // host seconds inside ddp_finish_grads
} ddp_stats_t;

typedef struct ddp ddp_t;

// Builds the reduction plan for `v` over the table (copied; names must outlive d). The
// buffers are host memory on MPI and device memory on NCCL. compute_stream: the stream the
// backward writes gradients on (NCCL, required: NULL would mean the communicator's own
// stream; ignored on MPI). bucket_mb is used by DDP_BUCKETED only.
// A bad table dies (a bug in the caller, not user input).
ddp_t* ddp_create(comm_t* c, const param_ref_t* params, int n, float* flat_params,
                  float* flat_grads, size_t total, ddp_variant_t v, double bucket_mb,
                  cudaStream_t compute_stream);
// The same with the bucketed variant's first bucket capped at first_bucket_mb
// (ddp_assign_buckets_first); ddp_create is this with first_bucket_mb = bucket_mb.
ddp_t* ddp_create_first(comm_t* c, const param_ref_t* params, int n, float* flat_params,
                        float* flat_grads, size_t total, ddp_variant_t v, double first_bucket_mb,
                        double bucket_mb, cudaStream_t compute_stream);
void ddp_destroy(ddp_t* d);

// Rank 0's whole parameter buffer (frozen parameters and padding too) to every rank;
// blocking (NCCL: on the compute stream, then waited).
void ddp_broadcast_params(ddp_t* d);

// The backward's grad_ready_fn: gradient of parameter `param_idx` is final (NCCL: its kernels
// are enqueued on the compute stream). Frozen parameters are ignored; a second call for the
// same parameter in one step is a bug and dies.
void ddp_grad_ready(void* ddp, int param_idx);

// After the backward: zeroes and reduces what did not start yet, then waits. On return every
// trainable gradient is the average over ranks (MPI: in host memory now; NCCL: for all work
// enqueued on the compute stream from now on — the host does not wait for this step's
// all-reduces; it frees the PREVIOUS step's requests, which blocks only if the host runs a
// whole step ahead of the GPU). Resets the per-step state.
void ddp_finish_grads(ddp_t* d);

ddp_stats_t ddp_stats(const ddp_t* d);
void ddp_stats_reset(ddp_t* d);
// The plan, for printing: the number of reductions per step and each one's slice.
int ddp_n_buckets(const ddp_t* d);
ddp_bucket_t ddp_bucket(const ddp_t* d, int i);
// NCCL: the communication stream (NULL on MPI), for timing and timelines.
cudaStream_t ddp_comm_stream(const ddp_t* d);
// NCCL: milliseconds the last finished step's all-reduces took, each from the moment its
// stream reached it to its end, summed (waits for them). 0 on MPI.
double ddp_comm_ms(ddp_t* d);

#ifdef __cplusplus
}
#endif
