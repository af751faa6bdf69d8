// Tensor-parallel layers (tp.h): the column- and row-parallel linears, the vocabulary-parallel
// embedding and cross-entropy, the attention and FFN sublayers split by heads and by d_ff, and
// sequence parallelism's all-gather / reduce-scatter along T. Each is common/ops_cpu.h's
// operation on this rank's slice plus the one collective the maths asks for.
#include "09_tensor/tp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/ops_cpu.h"

void tp_vocab_shard(int V, int n, int r, int* Vl, int* v0, int* Vvalid) {
    const int vl = (V + n - 1) / n;
    const int start = r * vl;
    int valid = V - start;
    if (valid < 0) valid = 0;
    if (valid > vl) valid = vl;
    *Vl = vl;
    *v0 = start;
    *Vvalid = valid;
}

int tp_dims_make(const model_config_t* c, int n, int r, tp_dims_t* d, char* err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (n < 1 || r < 0 || r >= n) {
        snprintf(err, errlen, "tensor-parallel rank %d of %d: give a size >= 1 and a rank in [0, size)", r, n);
        return -1;
    }
    if (c->n_heads % n != 0) {
        snprintf(err, errlen, "%d heads do not split over %d tensor-parallel ranks; give a tensor-parallel size that divides the head count %d",
                 c->n_heads, n, c->n_heads);
        return -1;
    }
    if (c->d_ff % n != 0) {
        snprintf(err, errlen, "d_ff %d does not split over %d tensor-parallel ranks; give a tensor-parallel size that divides d_ff %d",
                 c->d_ff, n, c->d_ff);
        return -1;
    }
    d->n = n;
    d->r = r;
    d->C = c->d_model;
    d->NH = c->n_heads;
    d->HS = c->d_model / c->n_heads;
    d->F = c->d_ff;
    d->V = c->vocab;
    d->nh = d->NH / n;
    d->Cl = d->nh * d->HS;
    d->Fl = d->F / n;
    tp_vocab_shard(d->V, n, r, &d->Vl, &d->v0, &d->Vvalid);
    return 0;
}

// ---------------------------------------------------------------- the group's collectives, counted
static tp_comm_stats_t g_stats;

void tp_comm_stats_reset(void) { memset(&g_stats, 0, sizeof g_stats); }
tp_comm_stats_t tp_comm_stats(void) { return g_stats; }

// A ring all-reduce sends 2(n-1)/n of the tensor from each rank, an all-gather or a
// reduce-scatter (n-1)/n of it (stage 05).
static void count(comm_t* g, tp_coll_t k, size_t whole) {
    const int n = g->world;
    g_stats.calls[k]++;
    g_stats.elems[k] += (double)whole;
    g_stats.ring_bytes += (k == TP_AR ? 2.0 : 1.0) * (double)(n - 1) / n * (double)whole * sizeof(float);
}

void tp_allreduce(comm_t* g, const float* send, float* recv, size_t count_, comm_op_t op) {
    count(g, TP_AR, count_);
    comm_allreduce(g, send, recv, count_, COMM_F32, op, NULL);
}
void tp_allgather(comm_t* g, const float* send, float* recv, size_t sendcount) {
    count(g, TP_AG, sendcount * (size_t)g->world);
    comm_allgather(g, send, recv, sendcount, COMM_F32, NULL);
}
void tp_reduce_scatter(comm_t* g, const float* send, float* recv, size_t recvcount) {
    count(g, TP_RS, recvcount * (size_t)g->world);
    comm_reduce_scatter(g, send, recv, recvcount, COMM_F32, COMM_SUM, NULL);
}

// ---------------------------------------------------------------- sequence parallelism
void tp_sp_allgather(comm_t* g, float* full, const float* local, int B, int T, int C, float* scratch) {
    // STUDENT-BEGIN(09.sp_allgather): the all-gather along the sequence: every rank's (B, T/n, C) rows into place in (B, T, C) (tp_allgather into scratch, then each rank's block to positions k·T/n of every sequence) | see 09_tensor/README.md §Sequence parallelism | test: test_09 tp_region/sp_allgather
    const int n = g->world, Tl = T / n;
    const size_t blk = (size_t)B * Tl * C;  // one rank's share
    tp_allgather(g, local, scratch, blk);
    // scratch (n, B, Tl, C) -> full (B, T, C): rank k's rows are positions k·Tl .. k·Tl + Tl - 1
    for (int k = 0; k < n; k++)
        for (int b = 0; b < B; b++)
            memcpy(full + ((size_t)b * T + (size_t)k * Tl) * C, scratch + k * blk + (size_t)b * Tl * C,
                   (size_t)Tl * C * sizeof(float));
    // STUDENT-END(09.sp_allgather)
}

void tp_sp_reduce_scatter(comm_t* g, float* local, const float* full, int B, int T, int C, float* scratch) {
    // STUDENT-BEGIN(09.sp_reduce_scatter): the reduce-scatter along the sequence: pack (B, T, C) into n blocks of this rank's layout, tp_reduce_scatter into local | see 09_tensor/README.md §Sequence parallelism | test: test_09 tp_region/sp_reduce_scatter
    const int n = g->world, Tl = T / n;
    const size_t blk = (size_t)B * Tl * C;
    for (int k = 0; k < n; k++)
        for (int b = 0; b < B; b++)
            memcpy(scratch + k * blk + (size_t)b * Tl * C, full + ((size_t)b * T + (size_t)k * Tl) * C,
                   (size_t)Tl * C * sizeof(float));
    tp_reduce_scatter(g, scratch, local, blk);
    // STUDENT-END(09.sp_reduce_scatter)
}

// ---------------------------------------------------------------- linears
void tp_col_fwd(float* y_l, const float* x, const float* W_l, int N, int din, int dout_l) {
    matmul_fwd_cpu(y_l, x, W_l, N, din, dout_l);
}

void tp_col_bwd(comm_t* g, float* dx, float* dW_l, const float* dy_l, const float* x,
                const float* W_l, int N, int din, int dout_l, int allreduce) {
    // STUDENT-BEGIN(09.col_bwd): the column-parallel backward: dW_l = dy_lᵀ x locally, dx = Σ_ranks dy_l W_l (all-reduce when asked) | see 09_tensor/README.md §Column-parallel and row-parallel linears | test: test_09 tp_region/col_bwd
    matmul_bwd_cpu(dx, dW_l, dy_l, x, W_l, N, din, dout_l);
    // Every rank's input fed every rank's columns: its gradient is the sum of the n shares.
    if (dx && allreduce) tp_allreduce(g, dx, dx, (size_t)N * din, COMM_SUM);
    // STUDENT-END(09.col_bwd)
}

void tp_row_fwd(comm_t* g, float* y, const float* x_l, const float* W_l, int N, int din_l, int dout,
                int allreduce) {
    // STUDENT-BEGIN(09.row_fwd): the row-parallel forward: the partial product x_l W_lᵀ, all-reduced when asked | see 09_tensor/README.md §Column-parallel and row-parallel linears | test: test_09 tp_region/row_fwd
    matmul_fwd_cpu(y, x_l, W_l, N, din_l, dout);
    // Each rank summed din_l of the din products: the rest are on the other ranks.
    if (allreduce) tp_allreduce(g, y, y, (size_t)N * dout, COMM_SUM);
    // STUDENT-END(09.row_fwd)
}

void tp_row_bwd(float* dx_l, float* dW_l, const float* dy, const float* x_l, const float* W_l,
                int N, int din_l, int dout) {
    matmul_bwd_cpu(dx_l, dW_l, dy, x_l, W_l, N, din_l, dout);
}

void tp_take_cols(float* out, const float* W, int rows, int cols, int c0, int cl) {
    for (int i = 0; i < rows; i++) memcpy(out + (size_t)i * cl, W + (size_t)i * cols + c0, (size_t)cl * sizeof(float));
}

void tp_put_cols(float* W, const float* in, int rows, int cols, int c0, int cl) {
    for (int i = 0; i < rows; i++) memcpy(W + (size_t)i * cols + c0, in + (size_t)i * cl, (size_t)cl * sizeof(float));
}

// ---------------------------------------------------------------- vocabulary
void tp_embed_fwd(comm_t* g, float* out, const int32_t* tokens, const float* E_l, const tp_dims_t* d,
                  int N, int allreduce) {
    // STUDENT-BEGIN(09.embed_fwd): the vocabulary-parallel embedding: this rank's rows for the tokens it owns, zeros for the others, all-reduced when asked | see 09_tensor/README.md §Vocabulary parallelism | test: test_09 tp_region/embed_fwd
    const int C = d->C;
    for (int i = 0; i < N; i++) {
        const int v = tokens[i] - d->v0;
        float* o = out + (size_t)i * C;
        if (v >= 0 && v < d->Vvalid) memcpy(o, E_l + (size_t)v * C, (size_t)C * sizeof(float));
        else memset(o, 0, (size_t)C * sizeof(float));  // another rank's token
    }
    // Exactly one rank holds each row; the others add zeros (exact).
    if (allreduce) tp_allreduce(g, out, out, (size_t)N * C, COMM_SUM);
    // STUDENT-END(09.embed_fwd)
}

void tp_embed_bwd(float* dE_l, const float* dout, const int32_t* tokens, const tp_dims_t* d, int N) {
    // STUDENT-BEGIN(09.embed_bwd): its backward: dE_l rows of the owned tokens summed in token order, every other row zero | see 09_tensor/README.md §Vocabulary parallelism | test: test_09 tp_region/embed_bwd
    const int C = d->C;
    memset(dE_l, 0, (size_t)d->Vl * C * sizeof(float));
    for (int i = 0; i < N; i++) {
        const int v = tokens[i] - d->v0;
        if (v < 0 || v >= d->Vvalid) continue;
        float* o = dE_l + (size_t)v * C;
        const float* gr = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] += gr[c];
    }
    // STUDENT-END(09.embed_bwd)
}

float tp_ce_fwd(comm_t* g, float* lse, const float* logits_l, const int32_t* targets, const tp_dims_t* d, int N) {
    // STUDENT-BEGIN(09.ce_fwd): the vocabulary-parallel cross-entropy: all-reduce MAX of the row maxima, all-reduce SUM of Σ exp(z − m) and of the target logit from its owner, lse = m + log s, the mean of lse − z_target in double; masked columns never count | see 09_tensor/README.md §Vocabulary parallelism | test: test_09 tp_region/ce_fwd
    const int Vl = d->Vl, Vv = d->Vvalid;
    float* mx = calloc((size_t)3 * N + 1, sizeof(float));
    if (!mx) DIE("tp_ce_fwd: out of memory (%d rows)", N);
    float* sz = mx + N;  // (2N): Σ exp(z − m) | the target logit
    for (int i = 0; i < N; i++) {
        const float* z = logits_l + (size_t)i * Vl;
        float m = -INFINITY;
        for (int v = 0; v < Vv; v++) m = z[v] > m ? z[v] : m;
        mx[i] = m;
    }
    tp_allreduce(g, mx, mx, (size_t)N, COMM_MAX);  // the row's maximum (exact)
    for (int i = 0; i < N; i++) {
        const float* z = logits_l + (size_t)i * Vl;
        float s = 0.0f;
        for (int v = 0; v < Vv; v++) s += expf(z[v] - mx[i]);
        sz[i] = s;
        const int t = targets[i] - d->v0;
        sz[N + i] = t >= 0 && t < Vv ? z[t] : 0.0f;  // only the owner of the target gives it
    }
    tp_allreduce(g, sz, sz, (size_t)2 * N, COMM_SUM);
    double total = 0.0;  // as cross_entropy_fwd_cpu: the mean in double, serially
    for (int i = 0; i < N; i++) {
        lse[i] = mx[i] + logf(sz[i]);
        total += (double)lse[i] - (double)sz[N + i];
    }
    free(mx);
    return (float)(total / N);
    // STUDENT-END(09.ce_fwd)
}

void tp_ce_bwd(float* dlogits_l, const float* logits_l, const float* lse, const int32_t* targets,
               const tp_dims_t* d, int N) {
    // STUDENT-BEGIN(09.ce_bwd): its backward on this rank's columns: (exp(z − lse) − onehot)/N, masked columns 0 | see 09_tensor/README.md §Vocabulary parallelism | test: test_09 tp_region/ce_bwd
    const int Vl = d->Vl, Vv = d->Vvalid;
    const float invN = 1.0f / (float)N;
    for (int i = 0; i < N; i++) {
        const float* z = logits_l + (size_t)i * Vl;
        float* dz = dlogits_l + (size_t)i * Vl;
        for (int v = 0; v < Vv; v++) dz[v] = expf(z[v] - lse[i]) * invN;
        for (int v = Vv; v < Vl; v++) dz[v] = 0.0f;  // padding: never a class
        const int t = targets[i] - d->v0;
        if (t >= 0 && t < Vv) dz[t] -= invN;
    }
    // STUDENT-END(09.ce_bwd)
}

// ---------------------------------------------------------------- sublayers
void tp_attn_fwd(const tp_dims_t* d, float* y_part, float* qkv_l, float* P_l, float* atty_l,
                 const float* h, const float* Wqkv_l, const float* Wo_l, const float* rope_cos,
                 const float* rope_sin, int B, int T) {
    const int N = B * T, C = d->C, Cl = d->Cl, nh = d->nh, HS = d->HS;
    matmul_fwd_cpu(qkv_l, h, Wqkv_l, N, C, 3 * Cl);                      // column-parallel
    rope_fwd_cpu(qkv_l, B, T, nh, HS, 3 * Cl, rope_cos, rope_sin);       // q of this rank's heads
    rope_fwd_cpu(qkv_l + Cl, B, T, nh, HS, 3 * Cl, rope_cos, rope_sin);  // k
    attention_fwd_cpu(atty_l, P_l, qkv_l, B, T, Cl, nh);                 // heads are independent
    matmul_fwd_cpu(y_part, atty_l, Wo_l, N, Cl, C);                      // row-parallel (partial)
}

void tp_attn_bwd(const tp_dims_t* d, float* dh_part, float* dWqkv_l, float* dWo_l, float* datty_l,
                 float* dqkv_l, const float* dy, const float* h, const float* qkv_l, const float* P_l,
                 const float* atty_l, const float* Wqkv_l, const float* Wo_l, const float* rope_cos,
                 const float* rope_sin, int B, int T) {
    const int N = B * T, C = d->C, Cl = d->Cl, nh = d->nh, HS = d->HS;
    matmul_bwd_cpu(datty_l, dWo_l, dy, atty_l, Wo_l, N, Cl, C);  // row-parallel: no communication
    attention_bwd_cpu(dqkv_l, datty_l, qkv_l, P_l, B, T, Cl, nh);
    rope_bwd_cpu(dqkv_l, B, T, nh, HS, 3 * Cl, rope_cos, rope_sin);
    rope_bwd_cpu(dqkv_l + Cl, B, T, nh, HS, 3 * Cl, rope_cos, rope_sin);
    matmul_bwd_cpu(dh_part, dWqkv_l, dqkv_l, h, Wqkv_l, N, C, 3 * Cl);  // column-parallel: partial dh
}

void tp_ffn_fwd(const tp_dims_t* d, float* y_part, float* h13_l, float* gate_l, const float* h,
                const float* W13_l, const float* W2_l, int N) {
    const int C = d->C, Fl = d->Fl;
    matmul_fwd_cpu(h13_l, h, W13_l, N, C, 2 * Fl);  // [h1 | h3] of this rank's d_ff columns
    swiglu_fwd_cpu(gate_l, h13_l, N, Fl);           // elementwise: stays local
    matmul_fwd_cpu(y_part, gate_l, W2_l, N, Fl, C);
}

void tp_ffn_bwd(const tp_dims_t* d, float* dh_part, float* dW13_l, float* dW2_l, float* dgate_l,
                float* dh13_l, const float* dy, const float* h, const float* h13_l, const float* gate_l,
                const float* W13_l, const float* W2_l, int N) {
    const int C = d->C, Fl = d->Fl;
    matmul_bwd_cpu(dgate_l, dW2_l, dy, gate_l, W2_l, N, Fl, C);
    swiglu_bwd_cpu(dh13_l, dgate_l, h13_l, N, Fl);
    matmul_bwd_cpu(dh_part, dW13_l, dh13_l, h, W13_l, N, C, 2 * Fl);
}
