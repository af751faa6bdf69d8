// build/03_flashattn_fwd/benchmark: stage 01's Transformer benchmark with this stage's flash
// forward offered as --attention flash (forward only: --mode forward; training with flash
// attention needs stage 04's backward, build/04_flashattn_bwd/benchmark).
#include "01_benchmarking/benchmark.h"
#include "03_flashattn_fwd/flash_fwd.h"

int main(int argc, char** argv) {
    const benchmark_attention_t flash = {"flash", flash_attention_fwd_impl()};
    return benchmark_main(argc, argv, &flash, 1);
}
