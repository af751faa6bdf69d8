// The handout's benchmarking_mixed_precision (a), (b) in C (CPU only, see precision.h):
//   build/01_benchmarking/precision --mode dtypes   which dtype every tensor has, fp32 vs bf16,
//                                                   beside torch.autocast(bfloat16), with why
//   build/01_benchmarking/precision --mode norm     RMSNorm's statistics accumulated in fp16,
//                                                   bf16 and fp32: where fp16 overflows, how far
//                                                   bf16 is off
//   (--mode all, the default: both)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "01_benchmarking/precision.h"
#include "common/check.h"
#include "common/cli.h"

int main(int argc, char** argv) {
    const char* mode = NULL;
    int rows = 0;
    int seed = 0;
    const char* csv = NULL;
    cli_opt_t opts[] = {
        {"mode", CLI_CHOICE, &mode, "all", "what to print", "all|dtypes|norm"},
        {"rows", CLI_INT, &rows, "64", "norm: Gaussian activation rows per (d_model, rms)", NULL},
        {"seed", CLI_INT, &seed, "1", "norm: seed of the rows", NULL},
        {"csv", CLI_STR, &csv, "", "norm: also write the table to this CSV file", NULL},
    };
    cli_parse(argc, argv,
              "Mixed precision: the dtype of every tensor of the bf16 path, and RMSNorm's statistics in "
              "fp16/bf16/fp32.",
              opts, CLI_COUNT(opts));
    if (rows < 1 || rows > 100000) fail("--rows must be between 1 and 100000 (got %d)", rows);
    const int all = strcmp(mode, "all") == 0;

    if (all || strcmp(mode, "dtypes") == 0) {
        printf("## dtype of every tensor, fp32 and bf16 (common/model_dtypes.c)\n\n");
        char* md = precision_dtype_markdown();
        fputs(md, stdout);
        free(md);
        if (all) printf("\n");
    }
    if (all || strcmp(mode, "norm") == 0) {
        const int ds[] = {1600, 2560};
        const double rms[] = {1, 4, 5, 6, 8, 16, 64, 256, 1024};
        printf("## RMSNorm 1/rms: max relative error over %d Gaussian rows (inf: the sum of squares "
               "overflowed)\n\n",
               rows);
        table_t* t = norm_table(ds, 2, rms, (int)(sizeof rms / sizeof rms[0]), rows, (uint64_t)seed);
        table_print_md(t, stdout);
        if (csv[0] && table_write_csv(t, csv) != 0) fail("--csv %s: cannot write the file", csv);
        table_free(t);
    }
    return 0;
}
