// What GPU is there, if any. Every function works on a machine with no GPU or no driver:
// gpu_count() is then 0 and gpu_absent_reason() says why.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int id;
    char name[256];
    size_t total_bytes, free_bytes;
    int cc_major, cc_minor;
    int sm_count;
    int l2_bytes;
    size_t smem_per_block_optin;  // the most dynamic shared memory a block can ask for
} gpu_info_t;

int gpu_count(void);
const char* gpu_absent_reason(void);  // "" when a GPU is present
int gpu_info(int dev, gpu_info_t* out);  // 0 on success
// Dies with one clear line ("<what> needs a CUDA GPU: <reason>") when there is none.
void gpu_require(const char* what);
// Streaming multiprocessors of the current device (cudaDevAttrMultiProcessorCount), asked once
// per device and cached, so launchers can size grid-stride grids per call at no cost instead of
// hard-coding one GPU's count (132 on an H100 SXM, 114 on a PCIe card). Needs a GPU (CUDA_CHECK
// dies otherwise). Not thread-safe on the first call per device (a race would store the same value).
int gpu_sm_count(void);

// Versions as text ("13.0", "not found"); library ones are read at run time, so a missing
// optional library is reported rather than failing the link.
void version_cuda_driver(char* buf, size_t len);
void version_cuda_runtime(char* buf, size_t len);
void version_cublas(char* buf, size_t len);
void version_nccl(char* buf, size_t len);

#ifdef __cplusplus
}
#endif
