// Ring attention on the CPU over the MPI backend (host buffers), on stage 03's
// flash_forward_cpu and stage 04's flash_backward_cpu.
//
// Forward: at step s (0..P-1) rank r holds the keys and values of rank (r - s) mod P. It posts
// the hand-on of that block to rank r+1 and the receipt of the next from rank r-1 BEFORE it
// computes, so the transfer runs while it works; then for each of its query chunks and each key
// chunk of the block it runs the forward (non-causal, causal on the diagonal, nothing for a
// future chunk) and merges the partial (O, L) into its running result.
//
// Backward: the same journey of K and V, with their gradient accumulators travelling one step
// behind: at step s the rank computes the block's contributions (dQ into its own dq; dK, dV of
// the block's owner into a scratch), waits for the accumulator of that owner from rank r-1,
// adds, and passes it on to rank r+1. After P steps each accumulator has visited every rank and
// the last hand-on brings it home. Every block uses the merged O and L of the forward, so P and
// D = rowsum(dO o O) are those of one process over the whole sequence.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/check.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "04_flashattn_bwd/flash_bwd.h"
#include "10_context/context.h"

static float* falloc(size_t n) {
    float* p = calloc(n ? n : 1, sizeof(float));
    if (!p) DIE("ring attention: out of host memory (%zu floats)", n);
    return p;
}

// A rank's chunks: ids, lengths and token offsets in its buffers.
typedef struct {
    int n, id[CP_MAX_CHUNKS], len[CP_MAX_CHUNKS], off[CP_MAX_CHUNKS];
} chunks_t;

static chunks_t rank_chunks(const cp_ring_t* g, int P, int r) {
    chunks_t c;
    c.n = cp_rank_chunks(g->split, P, r, c.id);
    for (int i = 0; i < c.n; i++) {
        int st;
        cp_chunk_range(g->N, cp_num_chunks(g->split, P), c.id[i], &st, &c.len[i]);
        c.off[i] = cp_chunk_offset(g->split, g->N, P, r, i);
    }
    return c;
}

static void check_cfg(comm_t* c, const cp_ring_t* g) {
    char err[256];
    if (c->backend != COMM_MPI) DIE("ring attention on the CPU needs the MPI backend (host buffers)");
    if (cp_check_sizes(g->split, g->N, c->world, err, sizeof err)) DIE("ring attention: %s", err);
    if (g->BH < 1 || g->d < 1) DIE("ring attention: BH %d, d %d", g->BH, g->d);
}

// Sends `send` to rank r+1 and receives `recv` from rank r-1, both posted now; returns the
// requests in req[0..1].
static void ring_post(comm_t* c, const float* send, float* recv, size_t count, comm_req_t* req[2]) {
    const int P = c->world, r = c->rank;
    comm_group_start(c);
    req[0] = comm_irecv(c, recv, count, COMM_F32, (r - 1 + P) % P, NULL);
    req[1] = comm_isend(c, send, count, COMM_F32, (r + 1) % P, NULL);
    comm_group_end(c);
}

// The P steps of the forward: kv[0] holds this rank's K then V (each blk floats); o and lse
// start empty (0, -inf) and end merged over every visible key.
static void forward_steps(comm_t* c, const cp_ring_t* g, const chunks_t* me, const float* q, float* kv[2],
                          size_t blk, float* o, float* lse, float* o_part, float* l_part) {
    // STUDENT-BEGIN(10.ring_fwd): the P steps of the ring forward: at step s hold owner (r - s) mod P's K|V; post its hand-on to r+1 and the next block's receipt from r-1 (ring_post) BEFORE computing; for each of my query chunks and each of the owner's key chunks (rank_chunks, cp_block_kind: skip, causal diagonal, full) flash_forward_cpu into o_part, l_part, then cp_merge_f32 into o, lse; wait, swap buffers (g->fault: from step 1 on keep computing on kv[0]) | see 10_context/README.md §The ring | test: test_10 ring_region/forward_* | uses: ring_post | needs: 10.merge_f32 10.zigzag 03.flash_fwd_cpu
    const int P = c->world, r = c->rank, BH = g->BH, d = g->d;
    int cur = 0;
    for (int s = 0; s < P; s++) {
        const int owner = (r - s + P) % P;
        comm_req_t* req[2] = {NULL, NULL};
        if (s < P - 1) ring_post(c, kv[cur], kv[1 - cur], 2 * blk, req);
        // A broken ring for the tests: from step 1 on, compute on the block of step 0 again.
        const float* K = kv[g->fault && s > 0 ? 0 : cur];
        const float* V = K + blk;
        const chunks_t theirs = rank_chunks(g, P, owner);
        for (int i = 0; i < me->n; i++) {
            const float* Qi = q + (size_t)me->off[i] * BH * d;
            float* Oi = o + (size_t)me->off[i] * BH * d;
            float* Li = lse + (size_t)me->off[i] * BH;
            for (int j = 0; j < theirs.n; j++) {
                const int kind = cp_block_kind(me->id[i], theirs.id[j], g->causal);
                if (kind == CP_BLOCK_SKIP) continue;
                const size_t koff = (size_t)theirs.off[j] * BH * d;
                flash_forward_cpu(Qi, K + koff, V + koff, o_part, l_part, BH, me->len[i],
                                  theirs.len[j], d, kind == CP_BLOCK_DIAG, g->scale, g->Bq, g->Bk);
                cp_merge_f32(Oi, Li, o_part, l_part, (size_t)BH * me->len[i], d);
            }
        }
        if (s < P - 1) {
            comm_waitall(c, req, 2);
            cur = 1 - cur;
        }
    }
    // STUDENT-END(10.ring_fwd)
}

void ring_forward_cpu(comm_t* c, const cp_ring_t* g, const float* q, const float* k,
                      const float* v, float* o, float* lse) {
    check_cfg(c, g);
    const int P = c->world, r = c->rank, BH = g->BH, d = g->d;
    const chunks_t mine = rank_chunks(g, P, r);
    const size_t blk = (size_t)cp_max_tokens(g->split, g->N, P) * BH * d;  // K (or V) of one rank
    const int ntok = cp_rank_tokens(g->split, g->N, P, r);
    // The travelling block: K then V of one rank, chunk-major; two of them (in hand, arriving).
    float* kv[2] = {falloc(2 * blk), falloc(2 * blk)};
    memcpy(kv[0], k, sizeof(float) * (size_t)ntok * BH * d);
    memcpy(kv[0] + blk, v, sizeof(float) * (size_t)ntok * BH * d);
    int maxlen = 0;
    for (int i = 0; i < mine.n; i++) maxlen = mine.len[i] > maxlen ? mine.len[i] : maxlen;
    float* o_part = falloc((size_t)BH * maxlen * d);
    float* l_part = falloc((size_t)BH * maxlen);
    for (size_t i = 0; i < (size_t)ntok * BH * d; i++) o[i] = 0.0f;
    for (size_t i = 0; i < (size_t)ntok * BH; i++) lse[i] = -INFINITY;

    forward_steps(c, g, &mine, q, kv, blk, o, lse, o_part, l_part);
    free(kv[0]);
    free(kv[1]);
    free(o_part);
    free(l_part);
}

// The P steps of the backward: kv[0] holds this rank's K then V; part and acc[2] are scratch of
// 2 blk floats; dq starts at 0; dk, dv receive this rank's gradients.
static void backward_steps(comm_t* c, const cp_ring_t* g, const chunks_t* me, const float* q, const float* o,
                           const float* lse, const float* dout, float* kv[2], size_t blk, float* part,
                           float* acc[2], float* dq_part, float* dk_part, float* dv_part, float* dq,
                           float* dk, float* dv, size_t nloc) {
    // STUDENT-BEGIN(10.ring_bwd): the P steps of the ring backward: K|V travel as in the forward; at each step flash_backward_cpu of every visible (query chunk, key chunk) pair, dQ added into dq, the owner's dK|dV into part; the owner's accumulator started at step 0, else received from r-1 and part added; then handed on to r+1 (one step behind the K|V); after P steps the last hand-on brings this rank's own dK, dV home into dk, dv | see 10_context/README.md §The backward | test: test_10 ring_region/backward_* | uses: ring_post | needs: 10.zigzag 03.flash_fwd_cpu 04.flash_bwd_cpu
    const int P = c->world, r = c->rank, BH = g->BH, d = g->d;
    int cur = 0, in = 0;             // kv[cur]: block in hand; acc[in]: accumulator arriving
    comm_req_t* dreq[2] = {NULL, NULL};
    for (int s = 0; s < P; s++) {
        const int owner = (r - s + P) % P;
        comm_req_t* req[2] = {NULL, NULL};
        if (s < P - 1) ring_post(c, kv[cur], kv[1 - cur], 2 * blk, req);
        const float* K = kv[g->fault && s > 0 ? 0 : cur];
        const float* V = K + blk;
        const chunks_t theirs = rank_chunks(g, P, owner);
        memset(part, 0, sizeof(float) * 2 * blk);
        for (int i = 0; i < me->n; i++) {
            const size_t qoff = (size_t)me->off[i] * BH * d;
            const float* Li = lse + (size_t)me->off[i] * BH;
            for (int j = 0; j < theirs.n; j++) {
                const int kind = cp_block_kind(me->id[i], theirs.id[j], g->causal);
                if (kind == CP_BLOCK_SKIP) continue;
                const size_t koff = (size_t)theirs.off[j] * BH * d;
                const size_t nq = (size_t)BH * me->len[i] * d, nk = (size_t)BH * theirs.len[j] * d;
                flash_backward_cpu(q + qoff, K + koff, V + koff, o + qoff, dout + qoff, Li, dq_part,
                                   dk_part, dv_part, BH, me->len[i], theirs.len[j], d,
                                   kind == CP_BLOCK_DIAG, g->scale, g->Bq, g->Bk);
                for (size_t x = 0; x < nq; x++) dq[qoff + x] += dq_part[x];
                for (size_t x = 0; x < nk; x++) {
                    part[koff + x] += dk_part[x];
                    part[blk + koff + x] += dv_part[x];
                }
            }
        }
        // The owner's accumulator: started here at step 0, else arriving from rank r-1.
        float* a = acc[in];
        if (s == 0) {
            memcpy(a, part, sizeof(float) * 2 * blk);
        } else {
            comm_waitall(c, dreq, 2);
            for (size_t x = 0; x < 2 * blk; x++) a[x] += part[x];
        }
        in = 1 - in;
        ring_post(c, a, acc[in], 2 * blk, dreq);
        if (s < P - 1) {
            comm_waitall(c, req, 2);
            cur = 1 - cur;
        }
    }
    comm_waitall(c, dreq, 2);  // the last hand-on: acc[in] holds this rank's own dK, dV
    memcpy(dk, acc[in], sizeof(float) * nloc);
    memcpy(dv, acc[in] + blk, sizeof(float) * nloc);
    // STUDENT-END(10.ring_bwd)
}

void ring_backward_cpu(comm_t* c, const cp_ring_t* g, const float* q, const float* k,
                       const float* v, const float* o, const float* lse, const float* dout,
                       float* dq, float* dk, float* dv) {
    check_cfg(c, g);
    const int P = c->world, r = c->rank, BH = g->BH, d = g->d;
    const chunks_t mine = rank_chunks(g, P, r);
    const size_t blk = (size_t)cp_max_tokens(g->split, g->N, P) * BH * d;
    const int ntok = cp_rank_tokens(g->split, g->N, P, r);
    const size_t nloc = (size_t)ntok * BH * d;
    float* kv[2] = {falloc(2 * blk), falloc(2 * blk)};
    memcpy(kv[0], k, sizeof(float) * nloc);
    memcpy(kv[0] + blk, v, sizeof(float) * nloc);
    // dK then dV of one rank: the scratch of this step's contributions, and the travelling
    // accumulators (one being sent, one arriving).
    float* part = falloc(2 * blk);
    float* acc[2] = {falloc(2 * blk), falloc(2 * blk)};
    int maxlen = 0;
    for (int i = 0; i < mine.n; i++) maxlen = mine.len[i] > maxlen ? mine.len[i] : maxlen;
    int maxk = 0;  // the longest chunk of any rank
    for (int p = 0; p < P; p++) {
        const chunks_t t = rank_chunks(g, P, p);
        for (int j = 0; j < t.n; j++) maxk = t.len[j] > maxk ? t.len[j] : maxk;
    }
    float* dq_part = falloc((size_t)BH * maxlen * d);
    float* dk_part = falloc((size_t)BH * maxk * d);
    float* dv_part = falloc((size_t)BH * maxk * d);
    for (size_t i = 0; i < nloc; i++) dq[i] = 0.0f;

    backward_steps(c, g, &mine, q, o, lse, dout, kv, blk, part, acc, dq_part, dk_part, dv_part, dq, dk, dv, nloc);
    free(kv[0]);
    free(kv[1]);
    free(part);
    free(acc[0]);
    free(acc[1]);
    free(dq_part);
    free(dk_part);
    free(dv_part);
}
