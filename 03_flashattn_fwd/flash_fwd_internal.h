// Internal to stage 03: the two kernel launchers behind flash_forward_cuda (flash_fwd_api.c).
// Both assume flash_fwd_supports() accepted the arguments.
#pragma once
#include <cuda_runtime_api.h>
#include "common/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

// Query-tile rows of each path (the grid has ceil(Nq / Bq) * B * H blocks).
int flash_fwd_bf16_block_rows(int d);
int flash_fwd_f32_block_rows(int d);
void flash_fwd_bf16_launch(const attn_args_t* a, cudaStream_t stream);  // mma.sync tensor cores
void flash_fwd_f32_launch(const attn_args_t* a, cudaStream_t stream);   // fp32 CUDA cores

#ifdef __cplusplus
}
#endif
