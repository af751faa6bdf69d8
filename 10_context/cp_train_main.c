// cp_train: the Transformer LM trained under context parallelism (cp_model.h), optionally with
// data parallelism around it.
//
//   scripts/mpirun.sh 2 build/10_context/cp_train --model tiny --check                 # CP 2, zigzag
//   scripts/mpirun.sh 3 build/10_context/cp_train --split plain --context 31 --check   # CP 3, plain
//   scripts/mpirun.sh 4 build/10_context/cp_train --cp 2 --check                       # DP 2 x CP 2
//
// The ranks form the grid dp x cp (common/grid.h; context parallelism innermost). Every rank
// holds the whole model of model_init_params(seed); a context group sees the same B sequences,
// each rank its tokens of them; the dp groups split the global batch of B·dp sequences and
// average the (context-summed) gradients over dp before AdamW. Rank 0 prints the loss and the
// gradient norm per step and the median step time; at the end every rank checks that its
// parameters are bitwise those of every other rank. With --check rank 0 also trains one
// process's model (common/model_cpu.h) on the whole global batch and compares the loss and
// gradient norm of every step, step 0's gradient and every parameter at the end.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "10_context/cp_model.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/hash.h"
#include "common/stats.h"
#include "common/grid.h"
#include "common/model_cpu.h"
#include "common/referee.h"
#include "common/timer.h"
#include "common/train_loop.h"

#define MAX_STEPS 100000



// --check: rank 0 runs common/referee.h (one process's model on the whole global batch of every
// step); why its bounds (REFEREE_REL, REFEREE_UPD) hold under context parallelism:
//
// Tolerances. The context-parallel model makes the same row-wise products as one process on
// the same rows; what differs is attention and the order of sums. One process's attention
// (attention_fwd_cpu) takes a softmax over a row's keys at once; the ring runs the flash
// forward tile by tile and merges the partial results by their log-sum-exp, rescaling each
// partial sum of up to T terms (a reordered fp32 sum of n terms moves by at most n·eps·Σ|terms|:
// at a context of 64, 64 · 1.2e-7 = 8e-6 relative; the rescaling adds a few eps per merge). The loss is
// summed over the ranks' rows in double; the weight gradients (dW = dyᵀx over B·T rows) are
// summed per rank, then over the group: a reordered sum of B·T terms, 128 · 1.2e-7 = 1.5e-5.
// The errors of the layers add at first order, so the loss, the gradient norm and step 0's
// gradient of each parameter (normwise) must agree to REL = 1e-4 relative. After K AdamW steps
// an element whose gradient is a cancellation near 0 may have moved the other way (AdamW moves
// every element by about lr whatever its gradient's size), so the parameters are compared
// normwise on what training changed: ||p_cp − p_one|| <= UPD · ||p_one − p_init||, UPD = 1e-3.
// A wrong position, a missing sum or a chunk lost anywhere changes whole rows of attention,
// far above both (the tests show it).

int main(int argc, char** argv) {
    train_flags_t f = train_flags_default();
    int cp = 0, check = 0, layers = 0, grad_sum = 1;
    const char* split_s = "zigzag";
    cli_opt_t opts[TRAIN_FLAGS_N + 5];
    int nopts = train_flags_opts(&f, opts);
    for (int i = 0; i < nopts; i++) {
        if (!strcmp(opts[i].name, "batch")) opts[i].help = "sequences per context group (the global batch is batch x data-parallel groups)";
        if (!strcmp(opts[i].name, "seed")) opts[i].help = "every rank's model from model_init_params(seed), the data from seed";
        if (!strcmp(opts[i].name, "backend")) opts[i].help = "mpi (auto is mpi: the context-parallel model runs on the CPU; nccl is refused)";
        if (!strcmp(opts[i].name, "context")) opts[i].help = "T: the length of every sequence, cut into the split's chunks over the context group";
    }
    opts[nopts++] = (cli_opt_t){"cp", CLI_INT, &cp, "0", "context-parallel size (0: every rank; less: data parallelism over world/cp groups)", NULL};
    opts[nopts++] = (cli_opt_t){"split", CLI_CHOICE, &split_s, "zigzag", "how each sequence is cut over the context group", CP_SPLIT_CHOICES};
    opts[nopts++] = (cli_opt_t){"check", CLI_FLAG, &check, "0", "rank 0 also trains one process's model on the whole batch and compares loss, gradient norm and every parameter", NULL};
    opts[nopts++] = (cli_opt_t){"layers", CLI_INT, &layers, "0", "blocks in place of the model's own (0: its own)", NULL};
    opts[nopts++] = (cli_opt_t){"grad-sum", CLI_INT, &grad_sum, "1", "1: the gradients summed over the context group before AdamW; 0 leaves the sum out, to watch the replicas drift apart", NULL};
    comm_cli_parse(argc, argv, "Context-parallel training of the Transformer LM: each rank its tokens of every sequence, attention by the ring (run under mpirun).",
                   opts, nopts);
#define BAD(...) comm_bad_input(__VA_ARGS__)
    if (strcmp(f.backend, "nccl") == 0)
        BAD("--backend nccl: the context-parallel model runs on the CPU only; give --backend mpi");
    f.backend = "mpi";
    cp_split_t split;
    if (cp_split_parse(split_s, &split) != 0) BAD("--split: '%s' is not a split; give one of %s", split_s, CP_SPLIT_CHOICES);
    train_setup_t s;
    train_flags_check(&f, layers, &s);
    if (cp < 0 || cp > 4096) BAD("--cp: %d is out of range (0 for every rank, or 1..4096)", cp);
    if (grad_sum != 0 && grad_sum != 1) BAD("--grad-sum: %d must be 0 or 1", grad_sum);
    if (f.warmup + f.steps > MAX_STEPS) BAD("--warmup + --steps: %d is more than %d", f.warmup + f.steps, MAX_STEPS);
    train_setup_comm(&s);
    comm_t* c = s.c;
    const int Wd = c->world;
    if (cp == 0) cp = Wd;
    if (Wd % cp != 0) comm_refuse(c, "--cp %d does not divide the %d ranks; give a context-parallel size that divides the world size", cp, Wd);
    {
        char err[256];
        if (cp_check_sizes(split, f.context, cp, err, sizeof err) != 0) comm_refuse(c, "--context %d, --cp %d, --split %s: %s", f.context, cp, split_s, err);
    }
    const int dp = Wd / cp;
    const int dims[2] = {dp, cp};
    const char* const names[2] = {"dp", "cp"};
    grid_t* grid = grid_create(c, dims, names, 2);
    comm_t* cg = grid->group[1];
    comm_t* dg = grid->group[0];
    const int di = grid->coord[0];
    const int B = f.batch, T = f.context, V = s.cfg.vocab;

    cp_model_t m;
    cp_model_create(&m, cg, &s.cfg, B, T, split, (uint64_t)f.seed);
    const size_t psi = param_count(&m.layout);
    if (c->rank == 0) {
        printf("# cp_train: %s, context %d, batch %d per data-parallel group x %d, cp %d (%s split), mpi backend, %zu parameters\n",
               f.model, T, B, dp, cp, split_s, psi);
        printf("# tokens of each sequence per rank: %d to %d\n", cp_rank_tokens(split, T, cp, cp - 1) < cp_rank_tokens(split, T, cp, 0) ? cp_rank_tokens(split, T, cp, cp - 1) : cp_rank_tokens(split, T, cp, 0),
               cp_max_tokens(split, T, cp));
        fflush(stdout);
    }

    data_source_t data;
    data_open_random(&data, V, (uint64_t)f.seed);
    const int K = f.warmup + f.steps;
    int32_t* in_all = malloc((size_t)B * dp * T * sizeof(int32_t));
    int32_t* tg_all = malloc((size_t)B * dp * T * sizeof(int32_t));
    double* losses = calloc((size_t)K, sizeof(double));
    double* gnorms = calloc((size_t)K, sizeof(double));
    double* ms = calloc((size_t)K, sizeof(double));
    if (!in_all || !tg_all || !losses || !gnorms || !ms) DIE("cp_train: out of memory");
    float* g0 = check ? malloc(m.layout.total * sizeof(float)) : NULL;
    if (check && !g0) DIE("cp_train: out of memory");
    for (int k = 0; k < K; k++) {
        sample_batch(&data, B * dp, T, k, in_all, tg_all);
        const double t0 = time_now_s();
        const float loss = cp_model_forward(&m, in_all + (size_t)di * B * T, tg_all + (size_t)di * B * T);
        cp_model_backward(&m, grad_sum);
        if (dp > 1) comm_allreduce(dg, m.grads, m.grads, m.layout.total, COMM_F32, COMM_AVG, NULL);
        cp_model_adamw(&m, &s.opt);
        double t = (time_now_s() - t0) * 1e3;
        if (check && k == 0) memcpy(g0, m.grads, m.layout.total * sizeof(float));
        comm_host_allreduce_f64(c, &t, 1, COMM_MAX);
        ms[k] = t;
        double l = loss;
        comm_host_allreduce_f64(dg, &l, 1, COMM_SUM);
        losses[k] = l / dp;
        double sq = 0;
        for (size_t i = 0; i < m.layout.total; i++) sq += (double)m.grads[i] * m.grads[i];
        gnorms[k] = sqrt(sq);
        if (!isfinite(losses[k])) comm_fatal(c, 1, "step %d: the loss is not finite (%g)", k, losses[k]);
        if (c->rank == 0) printf("  step %3d  loss %.6f  grad norm %.6f  %.1f ms\n", k, losses[k], gnorms[k], ms[k]);
    }
    const double med = stats_compute(ms + f.warmup, f.steps).median;
    // Every rank holds the whole model: bitwise the same everywhere.
    const int same = train_hashes_agree(c, fnv1a(FNV1A_INIT, m.params, m.layout.total * sizeof(float)), 0, 1);
    int status = same ? 0 : 1;
    if (c->rank == 0) {
        printf("step: %.2f ms (median of %d after %d warm-up, slowest rank)\n", med, f.steps, f.warmup);
        printf("parameters: %s\n", same ? "bitwise identical on every rank" : "DIFFERENT across the ranks");
    }
    if (*f.csv && c->rank == 0) {
        FILE* csv = train_csv_open("csv", f.csv, "model,context,batch,ranks,cp,dp,split,backend,step_ms");
        fprintf(csv, "%s,%d,%d,%d,%d,%d,%s,mpi,%.3f\n", f.model, T, B, Wd, cp, dp, split_s, med);
        fclose(csv);
    }
    if (check && c->rank == 0) {
        char what[64];
        snprintf(what, sizeof what, "cp %d (%s) x dp %d", cp, split_s, dp);
        status |= referee_one_process(&s.cfg, &s.opt, &data, B * dp, T, K, (uint64_t)f.seed, losses, gnorms, g0, m.params,
                                      "cp", what);
    }
    free(g0);
    long long st = status;
    comm_host_allreduce_i64(c, &st, 1, COMM_MAX);
    free(in_all), free(tg_all), free(losses), free(gnorms), free(ms);
    data_close(&data);
    cp_model_destroy(&m);
    grid_destroy(grid);
    comm_destroy(c, 1);
    return (int)st;
}
