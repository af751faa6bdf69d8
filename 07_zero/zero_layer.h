// Every sharding level of this stage behind one interface, as the shared training loop's
// method (common/train_loop.h): made from a data-parallel replica (common/replica.h), it is the
// backward's hook, finish_grads and the update, and says what it keeps. zero_train runs one per
// level it is asked for, each from the same initial parameters:
//   ddp     stage 06's bucketed DDP layer, then AdamW over every parameter (optim_t, one range)
//   zero1   reduce-scatter the gradient, AdamW on shard r, all-gather the parameters (zero.h)
//   zero2   ZeRO-2 on ZeRO-3's engine (zero3.h, level 2): parameters whole (the model's flat
//           buffer), NO flat gradient buffer: the backward writes each unit's gradient into one
//           of two unit-sized working buffers, reduce-scattered into rank r's shard right after
//           the unit's backward; AdamW on rank r's pieces in place, every unit all-gathered back
//   zero2s  the older ZeRO-2 (zero.h): each bucket of the model's flat gradient buffer (4Ψ, the
//           staging area) reduce-scattered in the backward, rank r's pieces kept: the same
//           communication, but the flat gradient buffer stays, so it saves no memory over ZeRO-1
//           (kept for the comparison; 11_train still uses it)
//   zero3   parameters sharded too, per unit (embedding, each block, head): each unit
//           all-gathered before its forward and its backward (the next one prefetched), its
//           gradient reduce-scattered after its backward, AdamW on the shard (zero3.h); the
//           model's own flat buffers are freed for the run, it reads through a window
//   course  the DDP layer averages the gradients, then the course's sharded optimizer: AdamW on
//           the parameters this rank owns (assigned whole), each parameter broadcast from its
//           owner (sharded_optim.h)
//   hsdp    hybrid sharding (CPU, MPI): ZeRO-3 inside each node (a "shard" group: the node's
//           ranks, stage 05's node split, real or emulated), whole replicas across nodes: after
//           the node's reduce-scatters, each gradient shard is all-reduced (avg) over the
//           "replica" group (the ranks with the same local rank), so every node steps alike
// AdamW's moments live in the layer (optim_t), never in the model, so the allocator's optim tag
// shows exactly what each level keeps.
#pragma once
#include <stddef.h>
#include "06_ddp/ddp.h"
#include "07_zero/sharded_optim.h"
#include "07_zero/zero.h"
#include "07_zero/zero3.h"
#include "common/replica.h"
#include "common/train_loop.h"

#ifdef __cplusplus
extern "C" {
#endif

// The levels, in the order zero_train runs them.
typedef enum { ZL_DDP = 0, ZL_ZERO1, ZL_ZERO2S, ZL_ZERO2, ZL_COURSE, ZL_ZERO3, ZL_HSDP, ZL_N } zl_kind_t;
const char* zl_name(zl_kind_t kind);  // "ddp", "zero1", "zero2s", "zero2", "course", "zero3", "hsdp"

typedef struct {
    zl_kind_t kind;
    replica_t* x;
    size_t P;          // the model's flat buffers' length (padded to equal shards)
    int seed0;         // ZeRO-3 without flat parameters: its shard made from this seed's init
    adamw_config_t adam;
    ddp_t* d;          // ddp, course
    optim_t opt;       // ddp
    zero_t* z;         // zero1, zero2s
    sharded_optim_t* so;  // course
    zero3_t* z3;       // zero2 (level 2), zero3, hsdp (over shard_c)
    comm_t* shard_c;   // hsdp: this node's ranks (ZeRO-3 shards over them)
    comm_t* rep_c;     // hsdp: one rank per node, the same local rank (the replicas of a shard)
    long long state0;  // zero2/3: live params+grads+optim bytes that are not the level's own
    long long work;    // zero2/3: workspace bytes zero3_create* allocated (its working buffers)
    int reduce_bf16;   // zero3 on a bf16 model: the gradient reduce-scatter in bf16 (else fp32)
} zero_layer_t;

// The layer over x's model, whose flat buffers are P (zero_padded_total) elements long, with
// rank 0's parameters in them. zero2 frees the model's flat gradient buffer, zero3 both (the
// model then reads and writes through the windows its unit hooks set); a model made without
// them (lm.h's LM_FLAT_PARAMS / LM_FLAT_NONE) has nothing to free, and zero3 then makes its
// shard piece by piece from seed0 (model_init_params_range). bucket_mb: DDP's and zero2s's cap.
// On a bf16 model (lm_precision MP_BF16) zero3 gathers bf16 with fp32 masters (zero3_set_mixed);
// zero2 refuses bf16 (DIE: the program refuses it first).
void zero_layer_create(zero_layer_t* L, zl_kind_t kind, replica_t* x, const adamw_config_t* opt, size_t P,
                       double bucket_mb, int seed0);
// The same, with zero3's gradient reduce-scatter in bf16 when reduce_bf16 (a bf16 model only).
void zero_layer_create_rs(zero_layer_t* L, zl_kind_t kind, replica_t* x, const adamw_config_t* opt, size_t P,
                          double bucket_mb, int seed0, int reduce_bf16);
// Its collectives and last step done, then freed. restore: the model's flat buffers back (P
// elements, padding zero; zero3: filled from the shards), as before zero_layer_create; 0: not
// (a run built sharded ends without the whole model anywhere).
void zero_layer_destroy(zero_layer_t* L, int restore);

train_method_t zero_layer_method(zero_layer_t* L);  // ctx = L
int zero_layer_collectives(const zero_layer_t* L);  // per step
// The trainable elements whose optimizer state this rank keeps, counted from the parameter
// table and the layer's plan (not from its optimizer): what its optim bytes must be, / 8.
size_t zero_layer_owned(const zero_layer_t* L);
// A hash of the layout's parameters (their index and bits, summed over elements, so any cutting
// into pieces gives the same value): zero3 unit by unit (gathered; collective), else the model's
// flat buffer, through a host chunk. Never a host copy of the whole model. Before destroy.
unsigned long long zero_layer_params_hash(zero_layer_t* L);
// The same hash of host elements x[0 .. n) at flat index first, added to h.
unsigned long long zero_hash_floats(unsigned long long h, const float* x, size_t first, size_t n);

#ifdef __cplusplus
}
#endif
