// build/01_benchmarking/benchmark: the Transformer LM benchmark with the model's own (naive)
// attention. Flash attention lives in later stages: build/03_flashattn_fwd/benchmark (forward)
// and build/04_flashattn_bwd/benchmark (training) run this same driver with it.
#include "01_benchmarking/benchmark.h"

int main(int argc, char** argv) { return benchmark_main(argc, argv, NULL, 0); }
