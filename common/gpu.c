// GPU presence, properties and library versions. Nothing here fails on a machine without a
// GPU or driver: gpu_count() returns 0 and gpu_absent_reason() says why.
#include "common/gpu.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"

static int g_count = -1;

enum { kMaxCachedDevices = 64 };
static int g_sm_count[kMaxCachedDevices];  // 0: not asked yet

int gpu_sm_count(void) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 0 && dev < kMaxCachedDevices && g_sm_count[dev] > 0) return g_sm_count[dev];
    int n = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (n < 1) DIE("gpu_sm_count: device %d reports %d multiprocessors", dev, n);
    if (dev >= 0 && dev < kMaxCachedDevices) g_sm_count[dev] = n;
    return n;
}
static char g_reason[256] = "";

// Is any trace of the NVIDIA kernel driver here? Its user-space library (libcuda.so.1), its
// device files (/dev/nvidiactl, /dev/nvidia0) or its /proc entry. With none of them, the CUDA
// runtime's own words ("CUDA driver version is insufficient for CUDA runtime version") mislead:
// there is no driver at all, old or new.
static int driver_present(void) {
    if (access("/proc/driver/nvidia", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0 ||
        access("/dev/nvidia0", F_OK) == 0)
        return 1;
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h) dlclose(h);
    return h != NULL;
}

int gpu_count(void) {
    if (g_count >= 0) return g_count;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();  // not sticky, but keep later error checks clean
        if (!driver_present())
            snprintf(g_reason, sizeof g_reason,
                     "no NVIDIA driver / no GPU (no libcuda.so.1, /dev/nvidia* or /proc/driver/nvidia)");
        else
            snprintf(g_reason, sizeof g_reason, "no CUDA device (%s)", cudaGetErrorString(e));
        n = 0;
    } else if (n == 0) {
        snprintf(g_reason, sizeof g_reason, "no CUDA device found");
    }
    g_count = n;
    return n;
}

const char* gpu_absent_reason(void) {
    gpu_count();
    return g_reason;
}

int gpu_info(int dev, gpu_info_t* out) {
    memset(out, 0, sizeof *out);
    if (dev < 0 || dev >= gpu_count()) return -1;
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
    out->id = dev;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_bytes = p.totalGlobalMem;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->l2_bytes = p.l2CacheSize;
    out->smem_per_block_optin = p.sharedMemPerBlockOptin;
    int cur = 0;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == dev) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) out->free_bytes = fr;
    }
    return 0;
}

void gpu_require(const char* what) {
    if (gpu_count() == 0) fail("%s needs a CUDA GPU: %s", what, gpu_absent_reason());
}

static void fmt_cuda_version(int v, char* buf, size_t len) {
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

void version_cuda_driver(char* buf, size_t len) {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess || v == 0) snprintf(buf, len, "no driver");
    else fmt_cuda_version(v, buf, len);
}

void version_cuda_runtime(char* buf, size_t len) {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) snprintf(buf, len, "unknown");
    else fmt_cuda_version(v, buf, len);
}

void version_cublas(char* buf, size_t len) {
    int ma = 0, mi = 0, pa = 0;
    if (cublasGetProperty(MAJOR_VERSION, &ma) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &mi) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &pa) != CUBLAS_STATUS_SUCCESS)
        snprintf(buf, len, "unknown");
    else
        snprintf(buf, len, "%d.%d.%d", ma, mi, pa);
}

// NCCL is optional for everything before stage 05: look it up at run time instead of linking.
void version_nccl(char* buf, size_t len) {
    void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        snprintf(buf, len, "not found");
        return;
    }
    typedef int (*get_version_fn)(int*);
    get_version_fn fn;
    *(void**)&fn = dlsym(h, "ncclGetVersion");
    int v = 0;
    if (fn && fn(&v) == 0) snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    else snprintf(buf, len, "unknown");
    dlclose(h);
}
