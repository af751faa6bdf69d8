// Stage 07, part 3: ZeRO-3 / FSDP — the parameters sharded too (Rajbhandari et al. 2020, stage
// P_os+g+p; PyTorch's FullyShardedDataParallel with one unit per Transformer block) — and, on
// the same engine, ZeRO-2 (P_os+g: zero3_create_zero2, "ZeRO-2" below).
//
// Each rank keeps only 1/n of everything: its shard of the fp32 parameters, of the averaged
// gradient and of AdamW's two moments — 16Ψ/n bytes — plus two parameter working buffers and
// two gradient working buffers of one unit each. The model is cut into UNITS (the embedding,
// each block, the final norm with the head: common/model_cpu.h "units and windows"), each a
// contiguous span [b_u, e_u) of the flat buffer.
//
// Sharding is PER UNIT (what FSDP does): unit u's span, padded to a multiple of n·64 elements,
// splits into n equal pieces of c_u elements; rank r keeps piece r, [b_u + r·c_u, b_u +
// (r+1)·c_u) (the tail past e_u is padding, zero). A rank's pieces of all units lie one after
// the other in its compact shard buffer of S = Σ c_u elements, unit u's at q_u = Σ_{j<u} c_j,
// for the parameters, the gradient and (trainable elements only) the moments alike. Why not
// zero.h's shards of the whole padded buffer: there a unit's gather would collect the pieces
// of every rank's shard that overlap it — unequal, often empty pieces, no single NCCL call.
// Per unit, one all-gather of n equal pieces rebuilds the unit and one reduce-scatter returns
// its gradient: 2 collectives per unit per step in the backward, 1 in the forward. The price:
// padding per unit (< n·64 elements each) instead of per model.
//
// One training step, with the model's unit hooks (model_unit_hooks_t) set to zero3's:
//   forward   unit u = 0 .. U-1:  before_fwd(u): wait for u's all-gather into working buffer
//             u mod 2 (started one unit earlier), start u+1's into the other buffer (prefetch:
//             it runs while u computes), point the model's parameter window at u's buffer
//   backward  unit u = U-1 .. 0:  before_bwd(u): the same gather/prefetch (U-1 is still in its
//             buffer from the forward, and a unit whose buffer still holds it is not gathered
//             again), the gradient window at gradient buffer j mod 2 (j-th unit of the backward;
//             first the reduce-scatter that used it two units ago must be done);
//             after_bwd(u): reduce-scatter(avg) the unit's gradient into the shard at q_u
//   zero3_finish_grads  the last reduce-scatters done
//   zero3_step          AdamW on the shard (optim_t over the compact offsets of the trainable
//                       elements), nothing to all-gather: the next forward gathers.
// MPI (host buffers): the collectives are non-blocking MPI requests waited where the data is
// needed. NCCL (device buffers): every collective on one communication stream created here, in
// the same order on every rank; the compute stream waits for an all-gather with an event before
// the unit's kernels, the communication stream waits for the compute stream (an event recorded
// at the hook) before it overwrites a working buffer or reads a finished gradient; nothing on
// the host waits inside the step.
// Memory (per rank, fp32): parameters 4S (MEM_PARAMS), gradient 4S (MEM_GRADS), moments 8 bytes
// per trainable element of its pieces (MEM_OPTIM): 16Ψ/n + padding; working buffers 4 x the
// largest padded unit (MEM_WORKSPACE).
//
// ZeRO-2 (level 2, zero3_create_zero2): ZeRO-3 without parameter sharding. The parameters stay
// whole on every rank, in the caller's flat buffer (the model's own); the hooks point the
// parameter window at the unit's span of it (nothing gathered in the forward or the backward)
// and the gradient window at working buffer j mod 2 as above, and after_bwd reduce-scatters
// the unit's gradient into the shard at q_u exactly as ZeRO-3 does. The model has NO flat
// gradient buffer (model_gpu_create_flat with MODEL_GPU_NO_FLAT_GRADS, or the CPU model's
// freed): its backward writes only into the two unit-sized working buffers. zero3_step runs
// AdamW on this rank's pieces IN PLACE in the flat buffer (no separate fp32 master shard: the
// flat buffer is the fp32 master), then all-gathers every unit's pieces back into every rank's
// flat buffer, unit by unit through a working buffer (a unit's n padded pieces are longer than
// its span: gathering straight into the flat buffer would overwrite the next unit). Those
// gathers run on the compute stream, after AdamW and before the next forward: a simplification
// (ZeRO-3's prefetch could hide them behind the forward; here they are not overlapped).
// Memory (per rank, fp32): parameters 4P (the flat buffer, P >= Ψ), gradient shard 4S (MEM_GRADS),
// moments 8 bytes per trainable element of its pieces (MEM_OPTIM): 4Ψ + 12Ψ/n + padding;
// working buffers (MEM_WORKSPACE) 2 x the largest padded unit + one piece (the gather's input).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "06_ddp/ddp.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"  // ZERO_ALIGN
#include "common/comm.h"
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// One unit's place: its span of the flat buffer and this shard layout.
typedef struct {
    size_t begin, end;  // [begin, end) of the flat buffer (the unit's parameters)
    size_t piece;       // c_u: elements of each rank's piece (a multiple of 64)
    size_t q;           // q_u: where the pieces of this unit start in a rank's shard buffer
} zero3_unit_t;

// Pure plan (what the tests call): units from their U + 1 increasing boundaries bounds[0] = 0
// .. bounds[U] = total; writes U entries to out (may be NULL). Returns S = Σ piece.
size_t zero3_plan(const size_t* bounds, int U, int n, zero3_unit_t* out);

// The model's windows: unit u's parameters are in `params` (params[i - lo] holds flat element
// i of [lo, hi)), its gradient goes to `grads` the same way (NULL: forward, leave the gradient
// window). The caller's adapter to its model (model_cpu_t's pwin/gwin, model_gpu_set_windows).
typedef void (*zero3_window_fn)(void* model, float* params, float* grads, size_t lo, size_t hi);

typedef struct {
    long long steps;
    long long ag_calls, rs_calls;  // all-gathers and reduce-scatters started
    long long ag_bytes, rs_bytes;  // bytes of the whole unit per call (n pieces)
} zero3_stats_t;

typedef struct zero3 zero3_t;

// table: the parameters (stage 06's param_ref_t) over [0, bounds[U]); init: the full flat
// parameters (host on MPI, device on NCCL, bounds[U] elements), copied into the shard (the
// caller may free it afterwards: but it existed, so the setup's peak holds the whole model;
// zero3_create_init below does not need it). compute_stream: NCCL, required (the model's stream).
zero3_t* zero3_create(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U,
                      const float* init, const adamw_config_t* cfg, cudaStream_t compute_stream,
                      zero3_window_fn set_window, void* model);
// Sharded construction (what a run that never holds the whole model calls): the same, with the
// shard's first values made piece by piece by init(init_ctx, host, lo, hi), which writes flat
// elements [lo, hi) into host memory (hi - lo floats; e.g. model_init_params_range). On MPI it
// writes straight into the (host) shard; on NCCL into a host staging buffer of one piece (the
// largest unit's 1/n), copied to the device shard. No buffer of the whole model exists at any
// point; the shard is bit-identical to zero3_create's from that function's full buffer.
typedef void (*zero3_init_fn)(void* ctx, float* host, size_t lo, size_t hi);
// ZeRO-2 on this engine: params is the caller's flat parameter buffer (host on MPI, device on
// NCCL, >= bounds[U] elements, the same values on every rank), kept whole and updated in place
// by zero3_step; the model's gradient window is the only place its backward writes gradients.
// zero3_gather_params / zero3_gather_unit_host refuse level 2 (read params instead).
zero3_t* zero3_create_zero2(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U, float* params,
                            const adamw_config_t* cfg, cudaStream_t compute_stream, zero3_window_fn set_window,
                            void* model);
zero3_t* zero3_create_init(comm_t* c, const param_ref_t* table, int n, const size_t* bounds, int U,
                           zero3_init_fn init, void* init_ctx, const adamw_config_t* cfg,
                           cudaStream_t compute_stream, zero3_window_fn set_window, void* model);
void zero3_destroy(zero3_t* z);

// The model's unit hooks (model_unit_fn; ctx = the zero3_t).
void zero3_before_fwd(void* z, int unit);
void zero3_before_bwd(void* z, int unit);
void zero3_after_bwd(void* z, int unit);
void zero3_finish_grads(zero3_t* z);
void zero3_step(zero3_t* z);  // level 2: AdamW in place, then every unit all-gathered into params
// Every parameter into out (flat layout, bounds[U] elements; host on MPI, device on NCCL),
// all-gathered unit by unit. Collective; blocking (NCCL: the compute stream is synchronised).
void zero3_gather_params(zero3_t* z, float* out);
// Unit u's parameters (end - begin elements, flat elements [begin, end)) into host memory,
// all-gathered through a working buffer: a check of the whole model one unit at a time, with
// no whole-model buffer. Collective; blocking; between steps only.
void zero3_gather_unit_host(zero3_t* z, int u, float* host);

// ---- bf16 parameters with fp32 masters (FSDP's MixedPrecisionPolicy(param_dtype=bf16)) ----
// The shard stays fp32 (the masters, AdamW's moments beside them); a bf16 compute copy of it
// (S elements, pshard16) is made here and after every zero3_step. Each unit's all-gather
// moves that copy (COMM_BF16: 2 bytes an element, half of fp32's, counted in ag_bytes) into a
// bf16 working buffer, widened into the fp32 working buffer the model's window points at —
// its values exactly the bf16 ones — and, with set_window16, also handed to the model as a
// bf16 window (the GPU's matmuls read it). Gradients: the model writes fp32 into the gradient
// window as in fp32; the reduce-scatter runs in fp32 (reduce_bf16 0) or rounds the unit's
// gradient to bf16, reduces in bf16 and widens the averaged piece into the fp32 gradient shard
// (reduce_bf16 1: half the bytes again). AdamW then runs in fp32 on the masters either way.
// Level 3 only; before the first step. Its buffers are workspace (zero3_work_bytes counts
// them): the compute copy 2S bytes, two bf16 parameter buffers 4W, and with reduce_bf16 two
// bf16 gradient buffers and two pieces.
typedef void (*zero3_window16_fn)(void* model, const uint16_t* params, size_t lo, size_t hi);
void zero3_set_mixed(zero3_t* z, int reduce_bf16, zero3_window16_fn set_window16);
int zero3_mixed(const zero3_t* z);  // 0 fp32, 1 bf16 gathers, 2 bf16 gathers and reduce-scatters

int zero3_n_units(const zero3_t* z);
zero3_unit_t zero3_unit(const zero3_t* z, int u);
size_t zero3_shard_elems(const zero3_t* z);       // S
size_t zero3_owned_trainable(const zero3_t* z);   // elements this rank's AdamW updates
size_t zero3_state_bytes(const zero3_t* z);       // its optimizer state (MEM_OPTIM), bytes
size_t zero3_work_bytes(const zero3_t* z);        // its working buffers (MEM_WORKSPACE): level 3 four, level 2 above
int zero3_level(const zero3_t* z);                // 3 (zero3_create*), 2 (zero3_create_zero2)
zero3_stats_t zero3_stats(const zero3_t* z);
// For a trainer that drives the step itself (clipping, a schedule, checkpoints: 11_train), as
// zero.h's: the optimizer (its ranges index the compact shard: unit u's piece at q_u), the
// learning rate of the next zero3_step, and the averaged gradient shard (S elements) that the
// optimizer's gradient offsets index, complete after zero3_finish_grads.
optim_t* zero3_optim(zero3_t* z);
void zero3_set_lr(zero3_t* z, float lr);
float* zero3_grad_shard(zero3_t* z);

#ifdef __cplusplus
}
#endif
