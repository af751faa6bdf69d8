// bf16_comm_check: the two collectives bf16 ZeRO-3 runs in COMM_BF16 (zero3.h zero3_set_mixed),
// on either backend, against answers computed here on the host.
//   scripts/mpirun.sh 3 build/07_zero/bf16_comm_check --backend mpi
//   scripts/mpirun.sh 2 build/07_zero/bf16_comm_check --backend nccl
// - all-gather: every bit of every rank's bf16 piece arrives in place (NaN and infinity
//   patterns included: it moves bits, not numbers);
// - reduce-scatter SUM and AVG of small integers (exact in bf16 in any order): bit for bit;
// - reduce-scatter AVG of random values: within (n + 1) bf16 roundings (2^-8 relative each) of
//   the exact mean, computed in double — a reduction that rounds once per addition.
// Prints one line per check on rank 0 and exits 1 if any is wrong.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/dtype.h"
#include "common/rng.h"

typedef struct {
    comm_t* c;
    uint16_t *d_send, *d_recv;  // backend memory (host on MPI, device on NCCL)
} ctx_t;

static void to_backend(ctx_t* x, uint16_t* dst, const uint16_t* src, size_t n) {
    if (x->c->backend == COMM_NCCL) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * 2, cudaMemcpyHostToDevice, comm_stream(x->c)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(x->c)));
    } else {
        memcpy(dst, src, n * 2);
    }
}
static void from_backend(ctx_t* x, uint16_t* dst, const uint16_t* src, size_t n) {
    if (x->c->backend == COMM_NCCL) {
        comm_stream_sync(x->c, comm_stream(x->c), "the check's copy");
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * 2, cudaMemcpyDeviceToHost, comm_stream(x->c)));
        CUDA_CHECK(cudaStreamSynchronize(comm_stream(x->c)));
    } else {
        memcpy(dst, src, n * 2);
    }
}

// Rank r's element i: raw bits (all-gather), a small integer, or a random value in [-2, 2).
static uint16_t bits_of(int r, size_t i) { return (uint16_t)(rng_u64((uint64_t)r + 11, i) >> 48); }
static float small_int(int r, size_t i) { return (float)((int)((i * 5 + (size_t)r * 3) % 9) - 4); }
static float random_val(int r, size_t i) { return 4.0f * ((float)(rng_u64((uint64_t)r + 101, i) >> 40) / 16777216.0f) - 2.0f; }

static long long report(comm_t* c, const char* what, size_t count, long long bad, double worst) {
    comm_host_allreduce_i64(c, &bad, 1, COMM_SUM);
    if (c->rank == 0) printf("%-34s count %8zu: %s (%lld wrong; worst relative error %.3g)\n", what, count, bad ? "WRONG" : "ok", bad, worst);
    return bad != 0;
}

int main(int argc, char** argv) {
    const char* backend_s = "mpi";
    const char* counts_s = "1,7,1000,65537";
    double timeout_s = 0;
    cli_opt_t opts[] = {
        {"backend", CLI_CHOICE, &backend_s, "mpi", "communicator backend", COMM_BACKEND_CHOICES},
        {"counts", CLI_STR, &counts_s, "1,7,1000,65537", "elements a rank (comma list, K/M suffixes)", NULL},
        {"comm-timeout", CLI_DOUBLE, &timeout_s, "0", COMM_TIMEOUT_HELP, NULL},
    };
    comm_cli_parse(argc, argv, "Checks the bf16 all-gather and reduce-scatter (sum, avg) of the communicator (run under mpirun).",
                   opts, CLI_COUNT(opts));
    int64_t counts[16];
    const int nc = parse_size_list(counts_s, counts, 16);
    if (nc < 1) comm_bad_input("--counts: '%s' is not a comma list of sizes (e.g. 1,7,1K)", counts_s);
    for (int i = 0; i < nc; i++)
        if (counts[i] < 1 || counts[i] > (INT64_C(16) << 20))
            comm_bad_input("--counts: %lld is out of range (1 to 16M elements a rank)", (long long)counts[i]);
    comm_backend_t backend;
    comm_backend_parse(backend_s, &backend);
    ctx_t x = {comm_init(backend, timeout_s), NULL, NULL};
    comm_t* c = x.c;
    const int n = c->world, r = c->rank;
    size_t cap = 0;
    for (int i = 0; i < nc; i++) cap = (size_t)counts[i] > cap ? (size_t)counts[i] : cap;
    x.d_send = comm_alloc(c, cap * (size_t)n * 2, MEM_WORKSPACE);
    x.d_recv = comm_alloc(c, cap * (size_t)n * 2, MEM_WORKSPACE);
    uint16_t* h = malloc(cap * (size_t)n * 2);
    uint16_t* got = malloc(cap * (size_t)n * 2);
    if (!h || !got) DIE("out of host memory");
    long long wrong = 0;
    for (int ci = 0; ci < nc; ci++) {
        const size_t cnt = (size_t)counts[ci];
        // all-gather: bits
        for (size_t i = 0; i < cnt; i++) h[i] = bits_of(r, i);
        to_backend(&x, x.d_send, h, cnt);
        comm_allgather(c, x.d_send, x.d_recv, cnt, COMM_BF16, comm_stream(c));
        from_backend(&x, got, x.d_recv, cnt * (size_t)n);
        long long bad = 0;
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < cnt; i++) bad += got[(size_t)q * cnt + i] != bits_of(q, i);
        wrong += report(c, "all-gather bf16 (bits)", cnt, bad, 0);
        // reduce-scatter of small integers: exact in bf16 in any order
        for (int op = 0; op < 2; op++) {
            for (size_t i = 0; i < cnt * (size_t)n; i++) h[i] = bf16_from_f32(small_int(r, i));
            to_backend(&x, x.d_send, h, cnt * (size_t)n);
            comm_reduce_scatter(c, x.d_send, x.d_recv, cnt, COMM_BF16, op ? COMM_AVG : COMM_SUM, comm_stream(c));
            from_backend(&x, got, x.d_recv, cnt);
            bad = 0;
            double worst = 0;
            for (size_t i = 0; i < cnt; i++) {
                const size_t gi = (size_t)r * cnt + i;
                double sum = 0;
                for (int q = 0; q < n; q++) sum += small_int(q, gi);
                // SUM exact; AVG: the exact sum scaled by 1/n and rounded once (NCCL and the
                // MPI backend both divide the reduced bf16 sum)
                const double want = op ? (double)f32_from_bf16(bf16_from_f32((float)(sum / n))) : sum;
                const double g = f32_from_bf16(got[i]), e = fabs(g - want) / (fabs(want) > 1 ? fabs(want) : 1);
                if (!(e <= (op ? 1.0 / 256 : 0))) bad++;
                if (e > worst) worst = e;
            }
            wrong += report(c, op ? "reduce-scatter bf16 avg (integers)" : "reduce-scatter bf16 sum (integers)", cnt, bad, worst);
        }
        // reduce-scatter AVG of random values: rounding once per addition, and the division
        for (size_t i = 0; i < cnt * (size_t)n; i++) h[i] = bf16_from_f32(random_val(r, i));
        to_backend(&x, x.d_send, h, cnt * (size_t)n);
        comm_reduce_scatter(c, x.d_send, x.d_recv, cnt, COMM_BF16, COMM_AVG, comm_stream(c));
        from_backend(&x, got, x.d_recv, cnt);
        bad = 0;
        double worst = 0;
        for (size_t i = 0; i < cnt; i++) {
            const size_t gi = (size_t)r * cnt + i;
            double sum = 0, mag = 0;
            for (int q = 0; q < n; q++) {
                const double v = f32_from_bf16(bf16_from_f32(random_val(q, gi)));
                sum += v;
                mag += fabs(v);
            }
            // each rounding errs by at most 2^-9 of the partial sum's size (<= the sum of |v|)
            const double e = fabs(f32_from_bf16(got[i]) - sum / n), tol = (n + 1) * (mag / n) / 256.0;
            if (!(e <= tol)) bad++;
            if (mag > 0 && e / (mag / n) > worst) worst = e / (mag / n);
        }
        wrong += report(c, "reduce-scatter bf16 avg (random)", cnt, bad, worst);
    }
    if (r == 0) printf("bf16 collectives on %d ranks (%s): %s\n", n, comm_backend_name(backend), wrong ? "WRONG" : "all ok");
    mem_free(x.d_send);
    mem_free(x.d_recv);
    free(h);
    free(got);
    comm_destroy(c, 1);
    return wrong ? 1 : 0;
}
