// NVTX ranges behind a run-time switch.
#include "common/nvtx.h"

#include <nvtx3/nvToolsExt.h>

static int g_on = 0;

void nvtx_enable(int on) { g_on = on; }
int nvtx_enabled(void) { return g_on; }
void nvtx_push(const char* name) {
    if (g_on) nvtxRangePushA(name);
}
void nvtx_pop(void) {
    if (g_on) nvtxRangePop();
}
