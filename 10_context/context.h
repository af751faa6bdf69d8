// Stage 10: context parallelism. The sequence is cut into chunks spread over the P ranks of a
// communicator; each rank keeps its queries and the keys and values travel round the ring
// (ring attention). Per block the stage-03 forward (or stage-04 backward) runs on
// (Q_local, K_j, V_j); partial outputs are combined by their log-sum-exp.
//
// Layout of a rank's tokens ("chunk-major"): the rank holds 1 chunk (plain split) or 2 chunks
// (zigzag split) of the sequence; its q/k/v/o/dout/dq/dk/dv buffers hold chunk after chunk, each
// chunk a contiguous [BH, len, d] array, and its lse buffer chunk after chunk of [BH, len].
// Chunk c of n covers tokens [start, start + len) with the first N % n chunks one longer.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/comm.h"
#include "common/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- the merge (merge.c) -------------------------------------------------------------------
// Partial results of the same queries over disjoint key sets: (O_a, L_a) and (O_b, L_b), rows of
// d values. Writes the combination into (o, l) (the a operands):
//   L = log(e^{L_a} + e^{L_b}),  O = e^{L_a - L} O_a + e^{L_b - L} O_b.
// A row with L = -inf (no key seen) is the identity of the merge: merging it changes nothing.
// The stage-03 references' -1e6 masking gives finite L near -1e6, whose weight e^{-1e6 - L} is
// exactly 0 next to any real row, so it too merges as the identity.
void cp_merge_f32(float* o, float* l, const float* ob, const float* lb, size_t rows, int d);
void cp_merge_f64(double* o, double* l, const double* ob, const double* lb, size_t rows, int d);

// ---- the split (split.c) -------------------------------------------------------------------
typedef enum { CP_SPLIT_PLAIN = 0, CP_SPLIT_ZIGZAG = 1 } cp_split_t;
#define CP_SPLIT_CHOICES "plain|zigzag"
int cp_split_parse(const char* s, cp_split_t* out);  // 0, or -1
const char* cp_split_name(cp_split_t s);
#define CP_MAX_CHUNKS 2
// Number of chunks the sequence is cut into: P (plain) or 2P (zigzag).
int cp_num_chunks(cp_split_t s, int P);
// Chunk c of n over N tokens: *start, *len.
void cp_chunk_range(int N, int n, int c, int* start, int* len);
// The chunks rank r holds, in buffer order (plain: r; zigzag: r, 2P-1-r). Returns how many.
int cp_rank_chunks(cp_split_t s, int P, int r, int out[CP_MAX_CHUNKS]);
// Tokens rank r holds, and the most any rank holds (the size of a travelling block).
int cp_rank_tokens(cp_split_t s, int N, int P, int r);
int cp_max_tokens(cp_split_t s, int N, int P);
// Token offset inside rank r's buffers of its i-th chunk.
int cp_chunk_offset(cp_split_t s, int N, int P, int r, int i);
// What queries of chunk qc do with keys of chunk kc: 0 skip (wholly in the future), 1 every key
// visible (non-causal attention), 2 the diagonal block (causal, top-left aligned).
enum { CP_BLOCK_SKIP = 0, CP_BLOCK_FULL = 1, CP_BLOCK_DIAG = 2 };
int cp_block_kind(int qc, int kc, int causal);
// Work of rank r: the number of (query tile, key tile) pairs of `tile` tokens that hold at least
// one visible score, summed over its query chunks and every key chunk. The ring's critical path
// is the rank with the most.
long long cp_rank_work(cp_split_t s, int N, int P, int r, int causal, int tile);
// Sequence must be long enough: every chunk at least one token. 0, or -1 with a reason.
int cp_check_sizes(cp_split_t s, int N, int P, char* err, size_t errlen);

// ---- the ring on the CPU (ring_cpu.c; MPI backend, host buffers) -----------------------------
typedef struct {
    int BH, N, d;      // batch x heads, the whole sequence length, head dim
    int causal;
    float scale;
    cp_split_t split;
    int Bq, Bk;        // tiles of the CPU flash functions (>= 16)
    int fault;         // tests only: 1 computes on the stale block (the previous one) from step 1 on
} cp_ring_t;

// Forward: this rank's q, k, v (chunk-major) -> o (fp32, chunk-major), lse ([chunk][BH][len]).
void ring_forward_cpu(comm_t* c, const cp_ring_t* cfg, const float* q, const float* k,
                      const float* v, float* o, float* lse);
// Backward: with the merged o and lse of the forward and dout, writes this rank's dq, dk, dv.
void ring_backward_cpu(comm_t* c, const cp_ring_t* cfg, const float* q, const float* k,
                       const float* v, const float* o, const float* lse, const float* dout,
                       float* dq, float* dk, float* dv);

// ---- float64 naive reference (ref64.c), contiguous [BH, N, d] -------------------------------
void attn_forward_f64(const double* q, const double* k, const double* v, double* o, double* lse,
                      int BH, int N, int d, int causal, double scale);
void attn_backward_f64(const double* q, const double* k, const double* v, const double* o,
                       const double* lse, const double* dout, double* dq, double* dk, double* dv,
                       int BH, int N, int d, int causal, double scale);

#ifdef __cplusplus
}
#endif
