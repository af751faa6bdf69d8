// One data-parallel replica of the Transformer LM: what every data-parallel program (stages
// 06, 07 and the trainer) sets up before its own layer takes over — the communicator, the
// model (lm.h: the CPU model over MPI, the CUDA model over NCCL), the parameter table the
// parallel layers take, and the global batch of a step with this rank's slice of it.
#pragma once
#include <stdint.h>
#include "common/comm.h"
#include "common/data.h"
#include "common/lm.h"
#include "common/param_table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    comm_t* c;
    lm_t* m;                   // the model (its backend follows the communicator's)
    model_config_t cfg;
    int B, T;                  // sequences per rank, sequence length
    data_source_t data;        // random tokens, a pure function of (seed, step)
    int32_t *in_all, *tg_all;  // (B·world, T) the global batch of a step
    const param_layout_t* lay;
    param_ref_t* table;        // (lay->n) every parameter, trainable, in layout order
} replica_t;

// Rank r's model starts from seed + r (the replicas differ until someone broadcasts): o is the
// model's options but for the backend (the communicator's: NCCL the GPU, MPI the CPU) and the
// seed. Whole flat buffers (LM_FLAT_WHOLE) on the GPU: one untimed forward + backward (no
// optimizer step: nothing changes) makes the model allocate its gradient buffer, so lm_grads()
// is valid on return; the other flat options make every buffer at creation. Out of memory and
// impossible sizes end the job with one line (exit 2).
void replica_create(replica_t* x, comm_t* c, const model_config_t* cfg, lm_options_t o, int seed);
// The global batch of `step` (every rank draws the same), and this rank's (B, T) slice of it.
void replica_batch(replica_t* x, int64_t step, const int32_t** inputs, const int32_t** targets);
void replica_destroy(replica_t* x);

#ifdef __cplusplus
}
#endif
