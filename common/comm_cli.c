// Flag parsing for programs started by mpirun: every rank parses, only rank 0 speaks (one
// line for a bad flag, not one per rank). See comm.h.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/gpu.h"

int comm_env_rank(void) {
    // Set by mpirun before MPI_Init (OpenMPI; PMI_RANK for MPICH-style launchers).
    const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (int i = 0; i < 3; i++) {
        const char* s = getenv(names[i]);
        if (s && *s) return atoi(s);
    }
    return 0;
}

void comm_cli_parse(int argc, char** argv, const char* summary, cli_opt_t* opts, int nopts) {
    if (argc > 0 && argv[0]) set_progname(argv[0]);
    char err[512];
    int rc = cli_parse_err(argc, argv, opts, nopts, err, sizeof err);
    const int speak = comm_env_rank() == 0;
    if (rc == 1) {
        if (speak) cli_print_help(stdout, argc > 0 ? argv[0] : NULL, summary, opts, nopts);
        exit(0);
    }
    if (rc != 0) comm_bad_input("%s", err);
}

void comm_bad_input(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (comm_env_rank() == 0) fail("%s", msg);
    sleep(1);  // let rank 0's line out before mpirun ends the job
    exit(EXIT_BAD_INPUT);
}

double comm_timeout_flag(double flag_s) {
    if (flag_s < 0) comm_bad_input("--comm-timeout: %g is negative: give seconds > 0 (0: COMM_TIMEOUT or %.0f s)", flag_s, COMM_TIMEOUT_DEFAULT_S);
    return flag_s > 0 ? flag_s : comm_timeout_from_env();
}

int comm_backend_choose(const char* s, comm_backend_t* out) {
    if (s && strcmp(s, "auto") == 0) {
        // Every rank of this node needs a GPU of its own (mpirun tells how many share the node).
        const char* ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        const int local = ls ? atoi(ls) : 1, gpus = gpu_count();
        *out = (HAVE_NCCL && gpus > 0 && gpus >= local) ? COMM_NCCL : COMM_MPI;
        return 0;
    }
    return comm_backend_parse(s, out);
}
