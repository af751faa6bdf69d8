// MPI_CHECK: include only in code built with mpicc (stages 05-07). MPI's default handler
// aborts the job on errors; code that sets MPI_ERRORS_RETURN checks every call with this.
#pragma once
#include <mpi.h>
#include "common/check.h"

#define MPI_CHECK(call)                                                                    \
    do {                                                                                   \
        int r_ = (call);                                                                   \
        if (r_ != MPI_SUCCESS) {                                                           \
            char s_[MPI_MAX_ERROR_STRING]; int n_ = 0;                                     \
            MPI_Error_string(r_, s_, &n_);                                                 \
            die_hint_at(__FILE__, __LINE__, "run with mpirun -np N; see mpirun --help",    \
                        "%s failed: %s", #call, s_);                                       \
        }                                                                                  \
    } while (0)
