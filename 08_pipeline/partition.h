// The partitioner: which contiguous blocks of the Transformer each pipeline stage runs.
//
// Cost model (one micro-batch of B x T tokens, forward FLOPs with model_forward_flops'
// conventions, so the stages' costs add up to the whole model's):
//   block  B·T·(8C² + 6CF) + 4·B·T²·C   q, k, v, o and w1, w3, w2 products; attention scores
//                                       and P·V over the full T x T square
//   head   B·T·2CV                       the LM head, on the last stage (for the tiny model
//                                       about half a block, for the course's sizes a block or two)
//   embed  0                              a table lookup, no FLOPs (its time is a copy of B·T·C)
// A backward costs about twice its forward everywhere, so balancing the forward balances the
// whole step. Norms, RoPE, softmax and the loss are O(B·T·C) or O(B·T·V) and not counted.
//
// The split: S stages (S = p·v: with interleaving every chunk is a stage), each a contiguous
// range of at least `min_blocks` blocks, stage 0 with the embedding and stage S-1 with the
// head; among the splits with the smallest maximum stage cost, the one with the smallest sum of
// squared stage costs (the most even after the bottleneck), found exactly by dynamic
// programming. The imbalance max/mean is what the pipeline loses to it: every stage runs at the
// pace of the slowest, so a step takes imbalance × the ideal time even without a bubble.
#pragma once
#include <stddef.h>

#include "common/model.h"
#include "common/model_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int S;             // stages
    int L;             // blocks in the model
    int* l0;           // [S] stage s runs blocks [l0[s], l1[s])
    int* l1;           // [S]
    double* cost;      // [S] modelled cost of the stage (embedding on 0, head on S-1 included)
    double imbalance;  // max cost / mean cost (1 = perfect)
} partition_t;

// The cost model above for config c and a micro-batch of B x T tokens.
double partition_block_flops(const model_config_t* c, int B, int T);
double partition_head_flops(const model_config_t* c, int B, int T);
double partition_embed_flops(const model_config_t* c, int B, int T);

// The balanced split of L blocks with per-block costs block_cost[L] (>= 0), `embed` added to
// stage 0 and `head` to stage S-1. 0, or -1 with one line in err (S < 1, L < S·min_blocks, a
// negative or non-finite cost). Free with partition_free.
int partition_balance(int L, const double* block_cost, double embed, double head, int S,
                      int min_blocks, partition_t* out, char* err, size_t errlen);
// The same for the Transformer config c (uniform blocks, the head as above, min_blocks 1).
int partition_model(const model_config_t* c, int B, int T, int S, partition_t* out, char* err,
                    size_t errlen);
// The naive split for comparison: L/S blocks each, the first L % S stages one more; costs as
// partition_model's.
int partition_even(const model_config_t* c, int B, int T, int S, partition_t* out, char* err,
                   size_t errlen);
void partition_free(partition_t* p);

// Stage s as a model range (embedding on stage 0, head on stage S-1).
model_range_t partition_range(const partition_t* p, int s);
// "[0,3)+emb [3,6) [6,8)+head  imbalance 1.08" into buf.
void partition_format(const partition_t* p, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
