// NVTX ranges (header-only NVTX3, shipped with the toolkit), switched on at run time
// (--nvtx in the benchmarks) so that untraced runs pay nothing but a branch.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

void nvtx_enable(int on);
int nvtx_enabled(void);
void nvtx_push(const char* name);
void nvtx_pop(void);

#ifdef __cplusplus
}
#endif
