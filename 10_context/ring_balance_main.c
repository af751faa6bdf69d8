// ring_balance: the work of each rank of causal ring attention under the plain and the zigzag
// split (visible query-key tile pairs, context.h cp_rank_work), and the imbalance max/mean,
// which bounds the ring's speed: every step waits for the busiest rank. No communication.
//   build/10_context/ring_balance --N 32768 --P 4 --tile 128 [--csv file]
#include <stdio.h>
#include "common/check.h"
#include "common/cli.h"
#include "10_context/context.h"

int main(int argc, char** argv) {
    int N = 32768, P = 4, tile = 128, causal = 1;
    const char* csv = "";
    cli_opt_t opts[] = {
        {"N", CLI_INT, &N, "32768", "the whole sequence length", NULL},
        {"P", CLI_INT, &P, "4", "ranks of the ring", NULL},
        {"tile", CLI_INT, &tile, "128", "tile of tokens (the kernels' block)", NULL},
        {"causal", CLI_INT, &causal, "1", "1: causal, 0: not", NULL},
        {"csv", CLI_STR, &csv, "", "also write the table to this CSV file", NULL},
    };
    cli_parse(argc, argv, "Work per rank of ring attention under the plain and the zigzag split.", opts, CLI_COUNT(opts));
    if (P < 1 || P > 1024) fail("--P: %d; give 1..1024 ranks", P);
    if (tile < 1) fail("--tile: %d; give a tile of at least 1 token", tile);
    if (causal != 0 && causal != 1) fail("--causal: %d; give 0 or 1", causal);
    char err[256];
    if (cp_check_sizes(CP_SPLIT_ZIGZAG, N, P, err, sizeof err)) fail("--N: %s", err);
    FILE* f = NULL;
    if (*csv && !(f = fopen(csv, "w"))) fail("--csv: cannot write %s; give a writable path", csv);
    printf("N %d, P %d, tile %d, %s: visible tile pairs per rank\n", N, P, tile, causal ? "causal" : "not causal");
    printf("%6s %12s %12s\n", "rank", "plain", "zigzag");
    if (f) fprintf(f, "rank,plain,zigzag\n");
    long long mx[2] = {0, 0}, tot[2] = {0, 0};
    for (int r = 0; r < P; r++) {
        long long w[2];
        for (int s = 0; s < 2; s++) {
            w[s] = cp_rank_work((cp_split_t)s, N, P, r, causal, tile);
            tot[s] += w[s];
            if (w[s] > mx[s]) mx[s] = w[s];
        }
        printf("%6d %12lld %12lld\n", r, w[0], w[1]);
        if (f) fprintf(f, "%d,%lld,%lld\n", r, w[0], w[1]);
    }
    const double imb0 = (double)mx[0] * P / (double)tot[0], imb1 = (double)mx[1] * P / (double)tot[1];
    printf("%6s %12.3f %12.3f\n", "max/mean", imb0, imb1);
    if (f) {
        fprintf(f, "max/mean,%.3f,%.3f\n", imb0, imb1);
        fclose(f);
    }
    return 0;
}
