// Stage 05's demo (make run): an all-reduce by the library and by the hand-written ring, on the
// GPUs when there is one per rank (NCCL), else on the CPU (MPI). Started without mpirun, it
// starts itself under scripts/mpirun.sh with 2 ranks.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "05_collectives/ring.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/gpu.h"
#include "common/timer.h"

int main(int argc, char** argv) {
    int np = 2;
    const char* backend_s = "auto";
    cli_opt_t opts[] = {
        {"np", CLI_INT, &np, "2", "ranks to start when run without mpirun", NULL},
        {"backend", CLI_CHOICE, &backend_s, "auto", "auto: nccl with a GPU per rank, else mpi", COMM_BACKEND_AUTO_CHOICES},
    };
    comm_cli_parse(argc, argv, "All-reduce by the library and by the ring (stage 05's demo).", opts, CLI_COUNT(opts));
    if (np < 1 || np > 64) comm_bad_input("--np: %d is out of range (1..64)", np);
    if (!getenv("OMPI_COMM_WORLD_SIZE")) {
        // Not under mpirun: start this program again under the repository's scripts/mpirun.sh,
        // found from this program's own path (build/05_collectives/demo), wherever it is run from.
        char self[4096], launcher[4200] = "";
        const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) {
            self[len] = '\0';
            char* slash = strrchr(self, '/');
            if (slash) {
                *slash = '\0';  // .../build/05_collectives
                snprintf(launcher, sizeof launcher, "%s/../../scripts/mpirun.sh", self);
                *slash = '/';
            }
        }
        if (!launcher[0] || access(launcher, X_OK) != 0) {
            if (np > 1)
                fail("--np %d: cannot start %d ranks: %s not found from this program's place (a program of the "
                     "repository's build directory finds it; or run it under mpirun: scripts/mpirun.sh %d %s)",
                     np, np, launcher[0] ? launcher : "scripts/mpirun.sh", np, argv[0]);
        } else if (np > 1) {
            char nps[16];
            snprintf(nps, sizeof nps, "%d", np);
            char* args[] = {launcher, nps, self, "--backend", (char*)backend_s, NULL};
            setenv("MPIRUN_TIMEOUT", "120", 0);
            execv(args[0], args);
            fail("--np %d: cannot start %s: %s", np, launcher, strerror(errno));
        }
    }
    comm_backend_t backend;
    comm_backend_choose(backend_s, &backend);  // the flag's choices were checked by the parser
    comm_t* c = comm_init(backend, 0);
    const size_t count = (size_t)1 << 22;  // 16 MiB of fp32
    float* h = malloc(count * sizeof(float));
    float* h2 = malloc(count * sizeof(float));
    if (!h || !h2) DIE("out of host memory");
    for (size_t i = 0; i < count; i++) h[i] = (float)((int)((i + (size_t)c->rank) % 9) - 4);
    float* a = comm_alloc(c, count * sizeof(float), MEM_OTHER);
    float* b = comm_alloc(c, count * sizeof(float), MEM_OTHER);
    const int gpu = backend == COMM_NCCL;
    if (gpu) {  // then wait: the copy may return before the data lands (pageable memory)
        CUDA_CHECK(cudaMemcpy(a, h, count * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    else memcpy(a, h, count * sizeof(float));
    cudaStream_t st = comm_stream(c);
    double t[2];
    for (int k = 0; k < 2; k++) {
        for (int rep = 0; rep < 3; rep++) {  // the last of 3: the first pays for set-up
            comm_barrier(c);
            double t0 = time_now_s();
            if (k == 0) comm_allreduce(c, a, b, count, COMM_F32, COMM_SUM, st);
            else ring_allreduce(c, a, b, count, COMM_SUM, st);
            comm_stream_sync(c, st, "the demo's all-reduce");
            t[k] = time_now_s() - t0;
        }
        if (gpu) CUDA_CHECK(cudaMemcpy(k ? h2 : h, b, count * sizeof(float), cudaMemcpyDeviceToHost));
        else memcpy(k ? h2 : h, b, count * sizeof(float));
    }
    long long diff = memcmp(h, h2, count * sizeof(float)) != 0;
    comm_host_allreduce_i64(c, &diff, 1, COMM_SUM);
    if (c->rank == 0) {
        const double S = (double)count * sizeof(float), f = 2.0 * (c->world - 1) / c->world;
        printf("all-reduce of %.0f MiB over %d ranks (%s backend)\n", S / (1 << 20), c->world, comm_backend_name(backend));
        printf("  library: %8.3f ms  busbw %7.2f GB/s\n", 1e3 * t[0], S / t[0] / 1e9 * f);
        printf("  ring:    %8.3f ms  busbw %7.2f GB/s  (each rank sends 2(n-1)/n x S = %.1f MiB)\n", 1e3 * t[1],
               S / t[1] / 1e9 * f, f * S / (1 << 20));
        printf("  ring and library agree bit for bit: %s\n", diff ? "NO" : "yes");
    }
    mem_free(a); mem_free(b); free(h); free(h2);
    comm_destroy(c, 1);
    return diff ? 1 : 0;
}
