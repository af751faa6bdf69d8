// The Transformer LM of common/model.h under context parallelism, in plain C on host memory
// over a communicator group (the "cp" group: P ranks, this one r). Every rank holds the whole
// model (model_init_params(seed), replicated) and, of each of the B sequences, only its tokens:
// the chunks of the split (context.h; zigzag by default), chunk after chunk. Everything but
// attention is row-wise (embedding, RMSNorm, the matmuls, SwiGLU, the head, the cross-entropy)
// and runs on the local tokens alone; RoPE rotates each token by its GLOBAL position; attention
// is the ring (ring_forward_cpu / ring_backward_cpu, causal). The loss is the mean over all
// B·T tokens: the local sums all-reduced over the group. Each rank's backward sees only its
// tokens, so the replicated weights' gradients are summed over the group (one all-reduce of
// the flat buffer) before AdamW, which then makes the same update on every rank.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/comm.h"
#include "common/model.h"
#include "10_context/context.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    model_config_t c;
    comm_t* g;               // the context-parallel group (not owned)
    cp_split_t split;
    int B, T;                // sequences and their (whole) length
    int Tl;                  // tokens of each sequence this rank holds
    int nch, ch_off[CP_MAX_CHUNKS], ch_len[CP_MAX_CHUNKS];  // its chunks: offset in Tl, length
    int* pos;                // (Tl) the global position of each local token
    param_layout_t layout;
    float *params, *grads, *adam_m, *adam_v;
    int adam_t;
    float *rope_cos, *rope_sin;  // (Tl, HS/2): the global tables' rows of the local tokens
    // saved activations, Nl = B·Tl rows
    float *res, *ln1, *ln1_rstd, *qkv, *atty, *mid, *ln2, *ln2_rstd, *h13, *gate, *lnf, *lnf_rstd;
    float *logits, *lse;
    float *rq, *rk, *rv, *ro, *rlse;  // (L, ...) the ring's chunk-major q, k, v, o and lse per layer
    // backward scratch
    float *dres, *dln, *datty, *dqkv, *dh13, *dgate, *dlogits, *rdo, *rdq, *rdk, *rdv;
    int32_t *inputs, *targets;  // (B, Tl) the local tokens of the last forward
    int have_fwd;
} cp_model_t;

// Every rank of g builds the whole model of model_init_params(seed) and its share of B
// sequences of T tokens. Refuses through comm_refuse (one line from rank 0, exit 2 on every
// rank): a bad config, T outside [1, context], a T too short for every chunk to hold a token,
// a backend other than MPI. Collective over g.
void cp_model_create(cp_model_t* m, comm_t* g, const model_config_t* c, int B, int T, cp_split_t split, uint64_t seed);
void cp_model_destroy(cp_model_t* m);
// This rank's tokens of full (B, T) token ids, into local (B, Tl), chunk after chunk.
void cp_model_take_local(const cp_model_t* m, const int32_t* full, int32_t* local);
// Mean cross-entropy over all B·T tokens (the same on every rank of the group), from the
// WHOLE inputs/targets (B, T): each rank keeps its tokens. Collective.
float cp_model_forward(cp_model_t* m, const int32_t* inputs, const int32_t* targets);
// Backward of the last forward; sum 1: the gradients summed over the group (what training
// needs); sum 0 leaves each rank's share of them (for the test that shows why). Collective.
void cp_model_backward(cp_model_t* m, int sum);
void cp_model_adamw(cp_model_t* m, const adamw_config_t* cfg);

#ifdef __cplusplus
}
#endif
