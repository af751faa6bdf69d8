// NCCL_CHECK: include only in code that links NCCL (stages 05-07).
#pragma once
#include <nccl.h>
#include "common/check.h"

#define NCCL_CHECK(call)                                                                   \
    do {                                                                                   \
        ncclResult_t r_ = (call);                                                          \
        if (r_ != ncclSuccess)                                                             \
            die_hint_at(__FILE__, __LINE__, "set NCCL_DEBUG=INFO for NCCL's own log",      \
                        "%s failed: %s (%d)", #call, ncclGetErrorString(r_), (int)r_);     \
    } while (0)
