// One way out for bad input under MPI: every rank that refuses its input ends the same way, with
// ONE line from rank 0 ("prog: error: ...", fail()'s form) and exit status 2 on every rank, and no
// MPI_Abort (that stays for real crashes). See comm.h, "bad input under MPI".
//
// How: the ranks agree at the point of the check. An all-reduce (MIN) of "my rank if I refuse,
// else the world size" names the first rank that refuses; that rank's reason (a fixed-size
// buffer) is broadcast; rank 0 prints it; a barrier makes sure the line is out before any rank
// exits (mpirun ends the others as soon as one exits non-zero). Every step is a host-side MPI
// call of the communicator, so all of it runs under the communicator's deadline.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/comm.h"

#define REASON_BYTES 1024

static void check_input_v(comm_t* c, int ok, const char* fmt, va_list ap) {
    long long first = ok ? (long long)c->world : (long long)c->rank;
    if (c->world > 1) comm_host_allreduce_i64(c, &first, 1, COMM_MIN);
    if (first >= c->world) return;  // nobody refuses
    char reason[REASON_BYTES] = "";
    if (!ok) vsnprintf(reason, sizeof reason, fmt, ap);
    if (c->world > 1) {
        comm_host_bcast(c, reason, sizeof reason, (int)first);
        reason[sizeof reason - 1] = '\0';
    }
    if (c->rank == 0) fail_line(reason);
    if (c->world > 1) comm_barrier(c);
    fflush(stdout);
    // exit, not _exit: atexit handlers still run (they remove half-written files). Should a
    // library's teardown hang in it, the watchdog ends the process.
    comm_watchdog_arm(c, "the exit after refused input", 10.0);
    exit(EXIT_BAD_INPUT);
}

void comm_check_input(comm_t* c, int ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    check_input_v(c, ok, fmt, ap);
    va_end(ap);
}

void comm_refuse(comm_t* c, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    check_input_v(c, 0, fmt, ap);
    va_end(ap);
    exit(EXIT_BAD_INPUT);  // not reached
}
