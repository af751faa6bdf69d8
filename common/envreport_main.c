// envreport: the first thing `make run` prints — which GPU, which CUDA, which libraries.
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/gpu.h"
#include "common/table.h"

static void mpi_version(char* buf, size_t len) {
    snprintf(buf, len, "not found");
    FILE* p = popen("timeout 10 mpirun --version 2>/dev/null | head -n 1", "r");
    if (!p) return;
    if (fgets(buf, (int)len, p)) buf[strcspn(buf, "\n")] = '\0';
    else snprintf(buf, len, "not found");
    pclose(p);
}

#define JSON_PATH "results/environment.json"

int main(int argc, char** argv) {
    int json = 0;
    const char* need_gpu = NULL;
    cli_opt_t opts[] = {
        {"json", CLI_FLAG, &json, "0", "also write " JSON_PATH, NULL},
        {"need-gpu", CLI_STR, &need_gpu, "",
         "WHAT: print nothing and exit 0 if there is a CUDA GPU, else one line 'WHAT: error: needs a "
         "CUDA GPU: why' and exit 2 (how the benchmark scripts refuse a machine without one)", NULL},
    };
    cli_parse(argc, argv, "Report the GPU, CUDA and library versions this workbook will use.",
              opts, CLI_COUNT(opts));
    if (need_gpu[0]) {
        if (gpu_count() > 0) return 0;
        set_progname(need_gpu);
        fail("needs a CUDA GPU: %s", gpu_absent_reason());
    }
    char err[512];
    // Before the report, so that an unwritable place is said at once and nothing is printed.
    if (json && dir_check_writable("results", err, sizeof err) != 0)
        fail("--json: cannot write %s: %s", JSON_PATH, err);

    table_t* t = table_new("Environment", 2, (const char*[]){"what", "found"});
    char buf[256];
    const int n = gpu_count();
    if (n == 0) {
        table_row(t); table_cell(t, "GPU"); table_cell(t, "no GPU (%s)", gpu_absent_reason());
    }
    for (int i = 0; i < n; i++) {
        gpu_info_t g;
        if (gpu_info(i, &g) != 0) continue;
        char mem[32];
        table_row(t);
        table_cell(t, "GPU %d", i);
        table_cell(t, "%s, %s, sm_%d%d, %d SMs", g.name, fmt_bytes(g.total_bytes, mem, sizeof mem),
                   g.cc_major, g.cc_minor, g.sm_count);
    }
    version_cuda_driver(buf, sizeof buf);
    table_row(t); table_cell(t, "CUDA driver"); table_cell(t, "%s", buf);
    version_cuda_runtime(buf, sizeof buf);
    table_row(t); table_cell(t, "CUDA runtime"); table_cell(t, "%s", buf);
    version_cublas(buf, sizeof buf);
    table_row(t); table_cell(t, "cuBLAS"); table_cell(t, "%s", buf);
    version_nccl(buf, sizeof buf);
    table_row(t); table_cell(t, "NCCL"); table_cell(t, "%s", buf);
    mpi_version(buf, sizeof buf);
    table_row(t); table_cell(t, "MPI"); table_cell(t, "%s", buf);
    table_print_md(t, stdout);
    if (json && table_write_json(t, JSON_PATH) != 0) fail("--json: could not write %s (reason above)", JSON_PATH);
    table_free(t);
    return 0;
}
