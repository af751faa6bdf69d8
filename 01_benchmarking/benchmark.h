// The Transformer LM benchmark driver (benchmark.c). Stage 01's program offers the model's
// naive attention; a later stage's program links its attention in and offers it by name:
//   static const benchmark_attention_t flash[] = {{"flash", NULL}};  (impl set at run time)
//   return benchmark_main(argc, argv, flash, 1);
#pragma once
#include "common/attention.h"

typedef struct {
    const char* name;              // the --attention value
    const attention_impl_t* impl;  // what the model plugs in
} benchmark_attention_t;

// Parses the flags (--help lists them), runs, prints the row; returns the exit status.
int benchmark_main(int argc, char** argv, const benchmark_attention_t* extra, int nextra);
