// build/04_flashattn_bwd/benchmark: stage 01's Transformer benchmark with flash attention
// (stage 03's forward, this stage's backward) offered as --attention flash, so it trains.
#include "01_benchmarking/benchmark.h"
#include "04_flashattn_bwd/flash_bwd.h"

int main(int argc, char** argv) {
    const benchmark_attention_t flash = {"flash", flash_attention_impl()};
    return benchmark_main(argc, argv, &flash, 1);
}
