// Activation memory of the checkpointing policies on the CPU model (model_cpu.h "activation
// checkpointing"): for each depth L, one forward + backward with none, block, every-K (K the
// nearest integer to sqrt(L)) and nested; per policy the allocator's measured peak of the
// activations (acts tag, host) beside model_cpu_acts_bytes, the block forwards counted by the
// model beside model_ckpt_block_forwards, and whether loss and gradients are the bits of none.
//
//   build/01_benchmarking/ckpt_memory                               L = 2, 4, 8, 16, 32
//   build/01_benchmarking/ckpt_memory --layers 3,5 --out DIR --csv ckpt.csv
// Model: d_model 64, 4 heads, d_ff 176, vocab 256, batch 2 x context 64 (one block's internals
// weigh about 19 residual slices, as at the course sizes where the T x T scores dominate).
// Exit status 1 if a measured number differs from its formula or a gradient from none's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "01_benchmarking/acts_peak.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/fileio.h"
#include "common/model.h"
#include "common/model_cpu.h"
#include "common/rng.h"
#include "common/table.h"

enum { MAX_L = 64, B = 2, T = 64 };


typedef struct {
    size_t acts_peak;
    long fwds;
    float loss;
    float* grads;  // malloc'd, layout.total floats
} run_t;

static run_t run(const model_config_t* c, int k) {
    run_t o;
    acts_peak_t ap = {0, 0};
    mem_set_observer(acts_peak_observe, &ap);
    model_cpu_t m;
    model_cpu_create_ckpt(&m, c, B, T, 1, k);
    int32_t in[B * T], tg[B * T];
    rng_t r = rng_make(2);
    rng_fill_int(&r, in, B * T, 0, c->vocab);
    rng_fill_int(&r, tg, B * T, 0, c->vocab);
    m.block_fwds = 0;
    o.loss = model_cpu_forward(&m, in, tg, B, T);
    model_cpu_backward(&m, NULL, NULL);
    o.fwds = m.block_fwds;
    o.grads = malloc(m.layout.total * sizeof(float));
    if (!o.grads) DIE("out of host memory");
    memcpy(o.grads, m.grads, m.layout.total * sizeof(float));
    model_cpu_destroy(&m);
    mem_set_observer(NULL, NULL);
    o.acts_peak = ap.peak;
    return o;
}

int main(int argc, char** argv) {
    const char *layers_s, *out, *csv;
    cli_opt_t opts[] = {
        {"layers", CLI_STR, &layers_s, "2,4,8,16,32", "depths L to measure (a comma list, 1 to 64 each)", NULL},
        {"out", CLI_STR, &out, "results/01_benchmarking", "results directory", NULL},
        {"csv", CLI_STR, &csv, "checkpoint_memory.csv", "CSV file written in --out", NULL},
    };
    cli_parse(argc, argv, "Activation memory and block forwards of none, block, every-K and nested checkpointing (CPU model).",
              opts, CLI_COUNT(opts));
    char err[256];
    int Ls[MAX_L], nL = 0;
    if (list_check_items("--layers", layers_s, err, sizeof err) != 0) fail("%s", err);
    for (const char* p = layers_s; *p;) {
        char* end;
        const long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 1 || v > MAX_L || nL == MAX_L)
            fail("--layers '%s': not a comma list of depths; each from 1 to %d", layers_s, MAX_L);
        Ls[nL++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (file_name_check(csv, err, sizeof err) != 0) fail("--csv: %s; give a file name inside --out", err);
    if (dir_check_writable(out, err, sizeof err) != 0) fail("--out %s: %s", out, err);

    const char* hdr[] = {"L", "policy", "residual_slices", "blocks_kept", "acts_kib", "acts_kib_formula",
                         "vs_none", "block_forwards", "forwards_formula", "bits_of_none"};
    table_t* t = table_new("Activation checkpointing on the CPU model (batch 2 x context 64, d_model 64)", 10, hdr);
    int bad = 0;
    for (int i = 0; i < nL; i++) {
        const int L = Ls[i];
        const model_config_t c = {"ckpt", 256, T, 64, L, 4, 176};
        int K = (int)lround(sqrt((double)L));
        const int ks[] = {0, 1, K, MODEL_CKPT_NESTED};
        run_t ref = run(&c, 0);
        param_layout_t lay = param_layout_make(&c);
        for (int j = 0; j < 4; j++) {
            if (j == 2 && K <= 1) continue;  // every-1 is block
            const int k = ks[j];
            run_t o = j == 0 ? ref : run(&c, k);
            const size_t want = model_cpu_acts_bytes(&c, B, T, k);
            const long wantf = model_ckpt_block_forwards(L, k);
            const int same = memcmp(&o.loss, &ref.loss, sizeof o.loss) == 0 &&
                             memcmp(o.grads, ref.grads, lay.total * sizeof(float)) == 0;
            char name[24];
            table_row(t);
            table_cell(t, "%d", L);
            table_cell(t, "%s", model_ckpt_name(k, name, sizeof name));
            table_cell(t, "%d", model_ckpt_res_slices(L, k));
            table_cell(t, "%d", model_ckpt_slots(L, k));
            table_cell(t, "%.1f", o.acts_peak / 1024.0);
            table_cell(t, "%.1f", want / 1024.0);
            table_cell(t, "%.2f", (double)o.acts_peak / (double)ref.acts_peak);
            table_cell(t, "%ld", o.fwds);
            table_cell(t, "%ld", wantf);
            table_cell(t, "%s", same ? "yes" : "NO");
            if (o.acts_peak != want || o.fwds != wantf || !same) bad = 1;
            if (j != 0) free(o.grads);
        }
        free(ref.grads);
        param_layout_free(&lay);
    }
    table_print_md(t, stdout);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out, csv);
    if (mkdir_p(out) != 0 || table_write_csv(t, path) != 0) fail("--out %s: cannot write %s", out, path);
    printf("table: %s\n", path);
    table_free(t);
    if (bad) fprintf(stderr, "%s: a measured number differs from its formula, or a gradient from none's\n", progname());
    return bad;
}
