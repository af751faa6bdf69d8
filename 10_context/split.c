// How the sequence is cut over the ranks, and how much work each rank then has.
//
// Causal attention makes the plain split uneven: rank r's queries see r+1 of the P key chunks
// (the last one half), so rank P-1 does about 2P-1 times the work of rank 0 and the ring waits
// for it at every step. The zigzag split cuts 2P chunks and gives rank r chunks r and 2P-1-r:
// an early chunk (little to see) paired with a late one (much to see), the same total on every
// rank up to the rounding of chunk lengths.
#include <stdio.h>
#include <string.h>
#include "common/check.h"
#include "10_context/context.h"

int cp_split_parse(const char* s, cp_split_t* out) {
    if (!s) return -1;
    if (!strcmp(s, "plain")) { *out = CP_SPLIT_PLAIN; return 0; }
    if (!strcmp(s, "zigzag")) { *out = CP_SPLIT_ZIGZAG; return 0; }
    return -1;
}

const char* cp_split_name(cp_split_t s) { return s == CP_SPLIT_ZIGZAG ? "zigzag" : "plain"; }

int cp_num_chunks(cp_split_t s, int P) { return s == CP_SPLIT_ZIGZAG ? 2 * P : P; }

void cp_chunk_range(int N, int n, int c, int* start, int* len) {
    const int base = N / n, extra = N % n;
    *len = base + (c < extra ? 1 : 0);
    *start = c * base + (c < extra ? c : extra);
}

int cp_rank_chunks(cp_split_t s, int P, int r, int out[CP_MAX_CHUNKS]) {
    // STUDENT-BEGIN(10.zigzag): rank r's chunk ids into out, returning how many: chunk r of P (plain), or chunks r and 2P-1-r of 2P (zigzag: an early chunk with a late one) | see 10_context/README.md §Causal load balance | test: test_10 split/*
    out[0] = r;
    if (s == CP_SPLIT_ZIGZAG) {
        out[1] = 2 * P - 1 - r;
        return 2;
    }
    return 1;
    // STUDENT-END(10.zigzag)
}

int cp_rank_tokens(cp_split_t s, int N, int P, int r) {
    int ch[CP_MAX_CHUNKS], n = cp_rank_chunks(s, P, r, ch), tot = 0;
    for (int i = 0; i < n; i++) {
        int st, len;
        cp_chunk_range(N, cp_num_chunks(s, P), ch[i], &st, &len);
        tot += len;
    }
    return tot;
}

int cp_max_tokens(cp_split_t s, int N, int P) {
    int m = 0;
    for (int r = 0; r < P; r++) {
        const int t = cp_rank_tokens(s, N, P, r);
        if (t > m) m = t;
    }
    return m;
}

int cp_chunk_offset(cp_split_t s, int N, int P, int r, int i) {
    int ch[CP_MAX_CHUNKS], n = cp_rank_chunks(s, P, r, ch), off = 0;
    if (i < 0 || i >= n) DIE("cp_chunk_offset: rank %d holds %d chunks, not %d", r, n, i + 1);
    for (int j = 0; j < i; j++) {
        int st, len;
        cp_chunk_range(N, cp_num_chunks(s, P), ch[j], &st, &len);
        off += len;
    }
    return off;
}

int cp_block_kind(int qc, int kc, int causal) {
    if (!causal || kc < qc) return CP_BLOCK_FULL;
    return kc == qc ? CP_BLOCK_DIAG : CP_BLOCK_SKIP;
}

static long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

long long cp_rank_work(cp_split_t s, int N, int P, int r, int causal, int tile) {
    const int n = cp_num_chunks(s, P);
    int ch[CP_MAX_CHUNKS], nc = cp_rank_chunks(s, P, r, ch);
    long long work = 0;
    for (int i = 0; i < nc; i++) {
        int qs, qn;
        cp_chunk_range(N, n, ch[i], &qs, &qn);
        for (int kc = 0; kc < n; kc++) {
            int ks, kn;
            cp_chunk_range(N, n, kc, &ks, &kn);
            const int kind = cp_block_kind(ch[i], kc, causal);
            if (kind == CP_BLOCK_FULL) {
                work += ceil_div(qn, tile) * ceil_div(kn, tile);
            } else if (kind == CP_BLOCK_DIAG) {
                // query tile ti (rows ti*T .. min(ti*T+T, n)-1) sees key tiles 0..ti
                for (long long ti = 0; ti < ceil_div(qn, tile); ti++) work += ti + 1;
            }
        }
    }
    return work;
}

int cp_check_sizes(cp_split_t s, int N, int P, char* err, size_t errlen) {
    const int n = cp_num_chunks(s, P);
    if (P < 1) return set_err(err, errlen, "%d ranks: need at least 1", P);
    if (N < n)
        return set_err(err, errlen, "sequence of %d tokens cannot be cut into %d %s chunks of at least one token; give N >= %d",
                       N, n, cp_split_name(s), n);
    return 0;
}
