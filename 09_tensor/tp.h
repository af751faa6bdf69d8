// Tensor parallelism (Megatron-LM) and sequence parallelism (Megatron-SP) for the Transformer
// LM of common/model.h, in plain C on host memory over a communicator group (the "tp" group:
// n ranks, this one number r). The CPU reference over the MPI backend; the README derives
// every collective below.
//
// Letters as in common/model.h: N = B·T rows, C d_model, NH heads, HS head size, F d_ff,
// V vocab. Per rank: nh = NH/n heads, Cl = nh·HS, Fl = F/n, Vl = ceil(V/n) vocabulary rows
// (the last shard padded with masked rows), and with SP Tl = T/n positions of each sequence.
//
// The conjugate pairs (f, g in the Megatron paper):
//   column-parallel linear   forward: identity (x is whole on every rank)    backward: all-reduce dX
//   row-parallel linear      forward: all-reduce the partial products        backward: identity
// With SP the identity becomes an all-gather along the sequence and the all-reduce a
// reduce-scatter along the sequence (same bytes: an all-reduce IS a reduce-scatter + all-gather).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/comm.h"
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- the sizes of one rank's shards --------------------------------------------------------
typedef struct {
    int n, r;              // tensor-parallel size and this rank
    int C, NH, HS, F, V;   // the whole model's sizes
    int nh, Cl, Fl;        // this rank's heads, their width nh·HS, its d_ff columns
    int Vl, v0, Vvalid;    // vocabulary rows [v0, v0 + Vl) of the padded table; the first
                           // Vvalid of them are real tokens (the rest masked: never chosen,
                           // zero gradient)
} tp_dims_t;

// 0 with d filled, or -1 and the reason in err naming the sizes: heads or d_ff that n does not
// divide (the course's XL has 25 heads), n < 1, r outside [0, n).
int tp_dims_make(const model_config_t* c, int n, int r, tp_dims_t* d, char* err, size_t errlen);
// The vocabulary shard alone (any V >= 1, n >= 1): Vl = ceil(V/n), v0 = r·Vl, Vvalid =
// clamp(V − v0, 0, Vl).
void tp_vocab_shard(int V, int n, int r, int* Vl, int* v0, int* Vvalid);

// ---- the group's collectives (fp32, on the MPI backend's host memory), counted -----------
// Every collective of the layers and the model goes through these, so that a step's traffic
// can be printed and compared with the README's formulas.
typedef enum { TP_AR = 0, TP_AG, TP_RS, TP_NCOLL } tp_coll_t;  // all-reduce, all-gather, reduce-scatter
typedef struct {
    long long calls[TP_NCOLL];
    double elems[TP_NCOLL];  // elements of the whole tensor each one produced or reduced
    double ring_bytes;       // what a ring sends from each rank: 2(n-1)/n of an all-reduce's
                             // tensor, (n-1)/n of an all-gather's or a reduce-scatter's
} tp_comm_stats_t;
void tp_comm_stats_reset(void);
tp_comm_stats_t tp_comm_stats(void);  // since the last reset (this process)
void tp_allreduce(comm_t* g, const float* send, float* recv, size_t count, comm_op_t op);
void tp_allgather(comm_t* g, const float* send, float* recv, size_t sendcount);      // recv: n·sendcount
void tp_reduce_scatter(comm_t* g, const float* send, float* recv, size_t recvcount);  // SUM; send: n·recvcount

// ---- sequence parallelism: the residual stream cut along T -------------------------------
// local (B, T/n, C) holds positions [r·T/n, (r+1)·T/n) of every sequence; full (B, T, C).
// all-gather: full = the n ranks' locals put back in place (scratch: n·B·(T/n)·C floats).
void tp_sp_allgather(comm_t* g, float* full, const float* local, int B, int T, int C, float* scratch);
// reduce-scatter: local = this rank's positions of Σ_ranks full (scratch as above; full is
// left as it was).
void tp_sp_reduce_scatter(comm_t* g, float* local, const float* full, int B, int T, int C, float* scratch);

// ---- parallel linear layers (weights [d_out, d_in], y = x Wᵀ, as common/ops_cpu.h) ---------
// Column-parallel: W_l (dout_l, din) = rows [r·dout_l, (r+1)·dout_l) of W. x (N, din) whole on
// every rank; y_l (N, dout_l) = this rank's columns of y. No communication.
void tp_col_fwd(float* y_l, const float* x, const float* W_l, int N, int din, int dout_l);
// dW_l (dout_l, din) = dy_lᵀ x (local); dx (N, din) = Σ_ranks dy_l W_l: all-reduced over g
// (skipped when dx is NULL; allreduce 0: the partial sum is left for the caller to reduce,
// as SP does with a reduce-scatter).
void tp_col_bwd(comm_t* g, float* dx, float* dW_l, const float* dy_l, const float* x,
                const float* W_l, int N, int din, int dout_l, int allreduce);
// Row-parallel: W_l (dout, din_l) = columns [r·din_l, (r+1)·din_l) of W (stored as its own
// (dout, din_l) matrix). x_l (N, din_l); y (N, dout) = Σ_ranks x_l W_lᵀ (allreduce 0: partial).
void tp_row_fwd(comm_t* g, float* y, const float* x_l, const float* W_l, int N, int din_l, int dout,
                int allreduce);
// dx_l (N, din_l) = dy W_l and dW_l = dyᵀ x_l: no communication (dy whole on every rank).
void tp_row_bwd(float* dx_l, float* dW_l, const float* dy, const float* x_l, const float* W_l,
                int N, int din_l, int dout);
// The slices themselves (for tests and the model's set-up): rows of a (rows·n, cols) matrix
// are contiguous; columns [c0, c0 + cl) of a (rows, cols) matrix are copied out / in.
void tp_take_cols(float* out, const float* W, int rows, int cols, int c0, int cl);
void tp_put_cols(float* W, const float* in, int rows, int cols, int c0, int cl);

// ---- vocabulary parallelism ------------------------------------------------------------------
// Embedding: E_l (Vl, C) = rows [v0, v0 + Vl) (masked rows zero). out (N, C) = E[tokens]:
// a rank writes its own rows, zeros elsewhere; then all-reduce (allreduce 0: left partial,
// for SP's reduce-scatter).
void tp_embed_fwd(comm_t* g, float* out, const int32_t* tokens, const float* E_l, const tp_dims_t* d,
                  int N, int allreduce);
// dE_l (Vl, C) = Σ over rows n whose token this rank owns of dout[n] (overwritten; in token
// order, as embedding_bwd_cpu). dout (N, C) whole.
void tp_embed_bwd(float* dE_l, const float* dout, const int32_t* tokens, const tp_dims_t* d, int N);
// Cross-entropy over logits split by vocabulary, never gathered: logits_l (N, Vl).
//   m = all-reduce MAX of the local maxima;  s = all-reduce SUM of Σ_local exp(z − m);
//   z_target = all-reduce SUM (its owner gives it, the others 0);  lse = m + log s.
// lse (N) written; returns mean_n (lse − z_target). Masked columns never count.
float tp_ce_fwd(comm_t* g, float* lse, const float* logits_l, const int32_t* targets, const tp_dims_t* d, int N);
// dlogits_l (N, Vl) = (softmax − onehot) / N on this rank's columns; masked columns 0.
void tp_ce_bwd(float* dlogits_l, const float* logits_l, const float* lse, const int32_t* targets,
               const tp_dims_t* d, int N);

// ---- the two sublayers split by heads and by d_ff -------------------------------------------
// Attention: h (B, T, C) (the RMSNorm1 output, whole); Wqkv_l (3Cl, C) = this rank's rows of
// q_proj | k_proj | v_proj; Wo_l (C, Cl) this rank's columns of output_proj. Writes
// qkv_l (N, 3Cl) (q, k rotated), P_l (B, nh, T, T), atty_l (N, Cl), and y_part (N, C): this
// rank's share of Wo · attention, to be summed over the group (all-reduce, or reduce-scatter
// under SP). rope_cos/sin: common/ops_cpu.h rope_tables_cpu for HS.
void tp_attn_fwd(const tp_dims_t* d, float* y_part, float* qkv_l, float* P_l, float* atty_l,
                 const float* h, const float* Wqkv_l, const float* Wo_l, const float* rope_cos,
                 const float* rope_sin, int B, int T);
// Given dy (N, C) whole: dWqkv_l, dWo_l (overwritten), dh_part (N, C) this rank's share of
// dh (to be summed over the group). datty_l (N, Cl) and dqkv_l (N, 3Cl) are scratch.
void tp_attn_bwd(const tp_dims_t* d, float* dh_part, float* dWqkv_l, float* dWo_l, float* datty_l,
                 float* dqkv_l, const float* dy, const float* h, const float* qkv_l, const float* P_l,
                 const float* atty_l, const float* Wqkv_l, const float* Wo_l, const float* rope_cos,
                 const float* rope_sin, int B, int T);
// SwiGLU FFN: W13_l (2Fl, C) = this rank's rows of w1 then of w3; W2_l (C, Fl) its columns of
// w2. h13_l (N, 2Fl), gate_l (N, Fl) saved; y_part (N, C) to be summed over the group.
void tp_ffn_fwd(const tp_dims_t* d, float* y_part, float* h13_l, float* gate_l, const float* h,
                const float* W13_l, const float* W2_l, int N);
void tp_ffn_bwd(const tp_dims_t* d, float* dh_part, float* dW13_l, float* dW2_l, float* dgate_l,
                float* dh13_l, const float* dy, const float* h, const float* h13_l, const float* gate_l,
                const float* W13_l, const float* W2_l, int N);

// ---- the tensor-parallel Transformer ------------------------------------------------------
// How a parameter of common/model.h's layout is cut.
typedef enum {
    TP_REPL = 0,  // whole on every rank (the RMSNorm weights)
    TP_ROWS,      // rows [r·rows, (r+1)·rows) (q/k/v_proj, w1, w3: column-parallel)
    TP_COLS,      // columns [r·cols, (r+1)·cols) (output_proj, w2: row-parallel)
    TP_VOCAB,     // vocabulary rows [v0, v0 + Vl), masked rows zero (embedding, lm_head)
} tp_split_t;

typedef struct {
    int gidx;          // index in the whole model's param_layout_t
    tp_split_t split;
    int rows, cols;    // the local shard's shape
    size_t off;        // in the local flat buffers
    size_t numel;
} tp_param_t;

typedef struct {
    model_config_t c;
    tp_dims_t d;
    comm_t* g;               // the tensor-parallel group (not owned)
    int sp;                  // sequence parallelism: TP_SP_OFF, TP_SP (the backward gathers the
                             // norm outputs again), TP_SP_KEEP (the forward's gathers kept)
    int sp_norm_sum;         // 1 (default): under SP the norm-weight gradients are summed over
                             // the group; 0 only for the test that shows why
    int B, T;                // capacity
    param_layout_t layout;   // the whole model's (for gathering)
    tp_param_t* p;           // layout.n entries, in the layout's order
    size_t total;            // local flat length
    float *params, *grads, *adam_m, *adam_v;
    int adam_t;
    float *rope_cos, *rope_sin;
    // saved activations (Nr = rows of the residual stream here: N, or B·T/n under SP)
    float *res, *ln1, *ln1_rstd, *ln1_full, *qkv, *att, *atty, *mid, *ln2, *ln2_rstd, *ln2_full;
    float *h13, *gate, *lnf, *lnf_rstd, *lnf_full, *logits, *lse;
    float* hfull;            // TP_SP: the one (N, C) buffer the norm outputs are gathered into
    size_t acts_bytes;       // what the forward saves for the backward
    // backward scratch
    float *part, *scratch, *dres, *dln, *dfull, *datty, *dqkv, *dh13, *dgate, *dlogits;
    int32_t *inputs, *targets;
    int cur_B, cur_T;
} tp_model_t;

// Sequence parallelism's two ways with the norm outputs that the column-parallel matmuls read
// whole: the backward needs them again for dW = dyᵀ·h. TP_SP gathers them again there (as
// Megatron-LM does: 2L + 1 more all-gathers a step, and only one (N, C) buffer); TP_SP_KEEP
// keeps the forward's (no more traffic than tensor parallelism, 2·N·C more floats per block).
enum { TP_SP_OFF = 0, TP_SP = 1, TP_SP_KEEP = 2 };

// Every rank of g builds its shards of the model that model_init_params(seed) makes (each shard
// is a bitwise slice of that buffer). Refuses, through comm_refuse (one line from rank 0, exit 2
// on every rank): heads or d_ff not divisible by the group size, and under SP a T not divisible
// by it. Collective over g.
void tp_model_create(tp_model_t* m, comm_t* g, const model_config_t* c, int B, int T, int sp, uint64_t seed);  // sp: TP_SP_*
void tp_model_destroy(tp_model_t* m);
// Mean cross-entropy of inputs/targets (B, T) (the same on every rank of the group).
float tp_model_forward(tp_model_t* m, const int32_t* inputs, const int32_t* targets, int B, int T);
// Backward of the last forward: every local gradient written (masked vocabulary rows 0).
void tp_model_backward(tp_model_t* m);
// Under SP: the replicated (TP_REPL: RMSNorm) weights' gradients summed over the group, in one
// all-reduce (each rank's backward saw only its rows). tp_model_backward calls it (unless
// sp_norm_sum is 0); public for tp_check's own check of it.
void tp_model_sum_norm_grads(tp_model_t* m);
// AdamW (common/adamw_cpu.h) over the local shards.
void tp_model_adamw(tp_model_t* m, const adamw_config_t* cfg);
// Σ of squares of the whole model's gradient (each element once), the same on every rank.
double tp_model_grad_sq(tp_model_t* m);
// Collective: out (layout.total, zero padding) = the whole model's flat buffer put together from
// every rank's local buffer `local` (m->params or m->grads; the replicated parts are rank 0's).
void tp_model_gather(tp_model_t* m, const float* local, float* out);
// Bytes of the local parameters (the ~1/n of the README), and of the saved activations.
size_t tp_model_param_bytes(const tp_model_t* m);
size_t tp_model_acts_bytes(const tp_model_t* m);
// The flat parameter and gradient buffers lengthened to P >= total elements, the tail zero
// (ZeRO-1's padded layout below; the model itself never reads past total).
void tp_model_pad_flat(tp_model_t* m, size_t P);

// ---- ZeRO-1 over the data-parallel group (tp_zero.c) ---------------------------------------
// In a dp x tp grid the dp ranks at one place of the tensor group hold the same local shard of
// Ψ_tp = m->total elements. Without ZeRO each keeps AdamW's two moments for all of it (8·Ψ_tp
// bytes, allocated at the first tp_model_adamw). ZeRO-1 splits them over the dp group dg, as
// stage 07 does with a whole model: the flat buffers are padded to P = dp·S elements, S = Ψ_tp
// rounded up to a multiple of dp·64, divided by dp; dp rank j owns [j·S, (j+1)·S) and keeps
// the moments of those S elements alone (8·S bytes, tag MEM_OPTIM of common/alloc.h). A step,
// after tp_model_backward (which wrote this rank's gradient of the local shard):
//   reduce-scatter (avg) over dg, in place   rank j's S elements of the dp average
//   AdamW on params[j·S, (j+1)·S)            the same element-wise update as tp_model_adamw
//   all-gather over dg, in place             every dp rank gets the whole updated shard
// The tensor group's collectives are untouched. A dg of one rank is allowed: S = P, the two
// collectives copy nothing, and the step is tp_model_adamw's bit for bit.
typedef struct {
    comm_t* dg;      // the data-parallel group (not owned)
    int dp, j;       // its size, this rank in it
    size_t total;    // Ψ_tp, the local shard's real elements
    size_t S, P;     // piece and padded lengths
    float *m, *v;    // (S) AdamW moments of this rank's piece
    int t;           // AdamW steps taken
} tp_zero1_t;

// S and P for a shard of `total` elements over dp ranks (dp >= 1).
void tp_zero1_layout(size_t total, int dp, size_t* S, size_t* P);
// Pads m's flat buffers to P (tp_model_pad_flat) and allocates the moments. Collective-free.
void tp_zero1_create(tp_zero1_t* z, tp_model_t* m, comm_t* dg);
void tp_zero1_destroy(tp_zero1_t* z);
// Collective over dg: the reduce-scatter, AdamW on the piece, the all-gather. m->grads then
// holds the dp average only in [j·S, (j+1)·S) (elsewhere this rank's own gradient).
void tp_zero1_step(tp_zero1_t* z, tp_model_t* m, const adamw_config_t* cfg);
// Σ of squares of the whole model's averaged gradient (each element once), from the pieces:
// collective over dg, then over the tensor group. Call after tp_zero1_step.
double tp_zero1_grad_sq(const tp_zero1_t* z, const tp_model_t* m);
// out (P elements) = the averaged local gradient put together from the dp pieces (all-gather
// over dg; for the check against one process).
void tp_zero1_gather_grads(const tp_zero1_t* z, const tp_model_t* m, float* out);
size_t tp_zero1_state_bytes(const tp_zero1_t* z);  // 2·4·S

#ifdef __cplusplus
}
#endif
