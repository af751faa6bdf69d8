// tp_train: the Transformer LM trained tensor-parallel (tp.h), optionally with sequence
// parallelism and with data parallelism around it.
//
//   scripts/mpirun.sh 2 build/09_tensor/tp_train --model tiny --check              # TP 2
//   scripts/mpirun.sh 4 build/09_tensor/tp_train --model tiny --sp --check         # TP 4 + SP
//   scripts/mpirun.sh 4 build/09_tensor/tp_train --model tiny --tp 2 --check       # DP 2 x TP 2
//   scripts/mpirun.sh 4 build/09_tensor/tp_train --model tiny --tp 2 --zero 1 --check  # + ZeRO-1
//
// The ranks form the grid dp x tp (common/grid.h; tensor parallelism innermost, so a tensor
// group is consecutive ranks). Every tensor group holds the shards of the one model that
// model_init_params(seed) makes and sees the same B sequences; the dp groups split the global
// batch of B·dp sequences (a pure function of the seed and the step) and average the gradient
// shards over dp before AdamW, as DDP does; with --zero 1 they reduce-scatter them over dp
// instead, each keeps AdamW's moments for its 1/dp piece of the shard alone, and the updated
// pieces are all-gathered (tp.h tp_zero1_t; a dp of 1 is allowed and is plain TP bit for bit).
// Rank 0 prints the loss and the gradient norm per
// step and the median step time. At the end every rank checks that the replicated parameters
// (the RMSNorm weights) are bitwise the same across its tensor group and that every shard is
// bitwise the same across its dp group; with --check rank 0 also trains one process's model
// (common/model_cpu.h) on the whole global batch and compares loss and gradient norm per step
// and every parameter (gathered from the shards) at the end.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "09_tensor/tp.h"
#include "common/alloc.h"
#include "common/check.h"
#include "common/cli.h"
#include "common/comm.h"
#include "common/data.h"
#include "common/grid.h"
#include "common/hash.h"
#include "common/model_cpu.h"
#include "common/referee.h"
#include "common/stats.h"
#include "common/timer.h"
#include "common/train_loop.h"

#define MAX_STEPS 100000



// --check: rank 0 runs common/referee.h (one process's model on the whole global batch of every
// step, against this run's losses, gradient norms, step 0's gathered gradient and the gathered
// parameters at the end); why its bounds (REFEREE_REL, REFEREE_UPD) hold under tensor parallelism:
//
// Tolerances. The tensor-parallel model makes the same products as one process; what differs
// is the order in which sums split over ranks are added (every all-reduce and reduce-scatter,
// the vocabulary's Σ exp), and the longest such sum has V terms: a reordered fp32 sum of n
// terms moves by at most n·eps·Σ|terms| (tp_check verifies that bound per layer). Through the
// layers these errors add, not multiply, at the first order, so the loss, the gradient norm and
// step 0's gradient of each parameter (normwise) must agree to REL = 1e-4 relative: the
// longest split sum of the tiny model is the vocabulary's, 512 terms · 1.2e-7 = 6e-5.
// After K AdamW steps an element whose gradient is a cancellation near 0 (its sign at the
// rounding level) may have moved the other way (AdamW moves every element by about lr
// whatever its gradient's size), so the parameters are compared normwise on what training
// changed, over the whole model: ||p_tp − p_one|| <= UPD · ||p_one − p_init||, UPD = 1e-3. A
// wrong slice or a missing sum in any one weight matrix changes that matrix's whole update,
// at least sqrt(C·C / total) of the model's (0.15 for the tiny model); a few sign-noise elements
// make 1e-4 of it. The worst parameter and the count of elements beyond the data-parallel
// check's rtol 1e-4, atol 1e-5 are shown as well.

int main(int argc, char** argv) {
    train_flags_t f = train_flags_default();
    int tp = 0, sp = 0, keep = 0, check = 0, vocab = 0, layers = 0, norm_sum = 1, zero = 0;
    cli_opt_t opts[TRAIN_FLAGS_N + 8];
    int nopts = train_flags_opts(&f, opts);
    // What three shared flags mean here.
    for (int i = 0; i < nopts; i++) {
        if (!strcmp(opts[i].name, "batch")) opts[i].help = "sequences per tensor group (the global batch is batch x data-parallel groups)";
        if (!strcmp(opts[i].name, "seed")) opts[i].help = "every rank's shards from model_init_params(seed), the data from seed";
        if (!strcmp(opts[i].name, "backend")) opts[i].help = "mpi (auto is mpi: the tensor-parallel model runs on the CPU; nccl is refused)";
    }
    opts[nopts++] = (cli_opt_t){"tp", CLI_INT, &tp, "0", "tensor-parallel size (0: every rank; less: data parallelism over world/tp groups)", NULL};
    opts[nopts++] = (cli_opt_t){"sp", CLI_FLAG, &sp, "0", "sequence parallelism: the residual stream cut along the sequence between the blocks", NULL};
    opts[nopts++] = (cli_opt_t){"sp-keep-gathered", CLI_FLAG, &keep, "0", "with --sp: keep the forward's gathered norm outputs for the backward's dW (more memory) instead of gathering them again (more traffic)", NULL};
    opts[nopts++] = (cli_opt_t){"check", CLI_FLAG, &check, "0", "rank 0 also trains one process's model on the whole batch and compares loss, gradient norm and every parameter", NULL};
    opts[nopts++] = (cli_opt_t){"vocab", CLI_INT, &vocab, "0", "vocabulary size in place of the model's (0: its own; one that tp does not divide pads the last shard)", NULL};
    opts[nopts++] = (cli_opt_t){"layers", CLI_INT, &layers, "0", "blocks in place of the model's own (0: its own)", NULL};
    opts[nopts++] = (cli_opt_t){"sp-norm-sum", CLI_INT, &norm_sum, "1", "1: under --sp the RMSNorm weight gradients are summed over the tensor group; 0 leaves the sum out, to watch the replicas drift apart", NULL};
    opts[nopts++] = (cli_opt_t){"zero", CLI_INT, &zero, "0", "0: every rank keeps AdamW's moments for its whole shard; 1: ZeRO-1, the moments split over the data-parallel group (reduce-scatter, AdamW on 1/dp, all-gather)", NULL};
    comm_cli_parse(argc, argv, "Tensor-parallel (Megatron) training of the Transformer LM, with --sp sequence parallelism (run under mpirun).",
                   opts, nopts);
#define BAD(...) comm_bad_input(__VA_ARGS__)
    if (strcmp(f.backend, "nccl") == 0)
        BAD("--backend nccl: the GPU tensor-parallel model is not built yet; give --backend mpi (the CPU model over MPI)");
    f.backend = "mpi";  // auto: the CPU model, whatever the machine has
    train_setup_t s;
    train_flags_check(&f, layers, &s);
    if (vocab < 0 || vocab > 1000000) BAD("--vocab: %d is out of range (0 for the model's own, or 1..1000000)", vocab);
    if (vocab > 0) s.cfg.vocab = vocab;
    if (tp < 0 || tp > 4096) BAD("--tp: %d is out of range (0 for every rank, or 1..4096)", tp);
    if (zero != 0 && zero != 1)
        BAD("--zero: %d is not a level here; give 0 (no sharding) or 1 (ZeRO-1: the optimizer state split over the data-parallel group)", zero);
    if (norm_sum != 0 && norm_sum != 1) BAD("--sp-norm-sum: %d must be 0 or 1", norm_sum);
    if (keep && !sp) BAD("--sp-keep-gathered: give it with --sp (without sequence parallelism nothing is gathered)");
    if (f.warmup + f.steps > MAX_STEPS) BAD("--warmup + --steps: %d is more than %d", f.warmup + f.steps, MAX_STEPS);
    train_setup_comm(&s);
    comm_t* c = s.c;
    const int W = c->world;
    if (tp == 0) tp = W;
    if (W % tp != 0) comm_refuse(c, "--tp %d does not divide the %d ranks; give a tensor-parallel size that divides the world size", tp, W);
    {
        tp_dims_t d;
        char err[512];
        if (tp_dims_make(&s.cfg, tp, 0, &d, err, sizeof err) != 0) comm_refuse(c, "--tp %d: %s", tp, err);
        if (sp && f.context % tp != 0)
            comm_refuse(c, "--sp: --context %d does not split into %d equal pieces of the sequence; give a context divisible by --tp %d",
                        f.context, tp, tp);
    }
    const int dp = W / tp;
    const int dims[2] = {dp, tp};
    const char* const names[2] = {"dp", "tp"};
    grid_t* grid = grid_create(c, dims, names, 2);
    comm_t* tg = grid->group[1];
    comm_t* dg = grid->group[0];
    const int di = grid->coord[0], ti = grid->coord[1];
    const int B = f.batch, T = f.context, V = s.cfg.vocab;

    tp_model_t m;
    tp_model_create(&m, tg, &s.cfg, B, T, sp ? (keep ? TP_SP_KEEP : TP_SP) : TP_SP_OFF, (uint64_t)f.seed);
    m.sp_norm_sum = norm_sum;
    tp_zero1_t z;
    if (zero) tp_zero1_create(&z, &m, dg);  // pads the flat buffers to dp equal pieces
    const size_t psi = param_count(&m.layout);
    if (c->rank == 0) {
        printf("# tp_train: %s%s, context %d, batch %d per data-parallel group x %d, tp %d%s, mpi backend, %zu parameters (%.2f GB fp32)\n",
               f.model, vocab ? " (vocabulary changed)" : "", T, B, dp, tp, sp ? " with SP" : "", psi, 4e-9 * (double)psi);
        printf("# parameters per rank: %zu (%.1f%% of the model; vocabulary rows %d a rank, %d padding)\n", m.total,
               100.0 * (double)m.total / (double)psi, m.d.Vl, m.d.Vl * tp - V);
        printf("# activations per rank: %zu bytes saved for the backward%s\n", tp_model_acts_bytes(&m),
               sp ? (keep ? " (SP, gathered norm outputs kept)" : " (SP, norm outputs gathered again in the backward)") : "");
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
    if (!in_all || !tg_all || !losses || !gnorms || !ms) DIE("tp_train: out of memory");
    float* g0 = check ? malloc(m.layout.total * sizeof(float)) : NULL;  // step 0's gradient, gathered
    if (check && !g0) DIE("tp_train: out of memory");
    tp_comm_stats_t cs = {0};  // the tensor group's collectives in one step (forward + backward)
    for (int k = 0; k < K; k++) {
        sample_batch(&data, B * dp, T, k, in_all, tg_all);
        const double t0 = time_now_s();
        tp_comm_stats_reset();
        const float loss = tp_model_forward(&m, in_all + (size_t)di * B * T, tg_all + (size_t)di * B * T, B, T);
        tp_model_backward(&m);
        cs = tp_comm_stats();
        if (zero) {
            // ZeRO-1: reduce-scatter over dp, AdamW on this rank's piece, all-gather over dp.
            tp_zero1_step(&z, &m, &s.opt);
        } else {
            // Data parallelism: the shards of one place in the tensor group are averaged over dp.
            if (dp > 1) comm_allreduce(dg, m.grads, m.grads, m.total, COMM_F32, COMM_AVG, NULL);
            tp_model_adamw(&m, &s.opt);
        }
        double t = (time_now_s() - t0) * 1e3;
        if (check && k == 0) {  // (AdamW leaves the gradients as they were)
            if (zero) {  // the averaged gradient lives in dp pieces: put them together first
                float* gl = malloc(z.P * sizeof(float));
                if (!gl) DIE("tp_train: out of memory");
                tp_zero1_gather_grads(&z, &m, gl);
                tp_model_gather(&m, gl, g0);
                free(gl);
            } else {
                tp_model_gather(&m, m.grads, g0);
            }
        }
        comm_host_allreduce_f64(c, &t, 1, COMM_MAX);  // the slowest rank's
        ms[k] = t;
        double l = loss;
        comm_host_allreduce_f64(dg, &l, 1, COMM_SUM);  // the mean over the global batch
        losses[k] = l / dp;
        gnorms[k] = sqrt(zero ? tp_zero1_grad_sq(&z, &m) : tp_model_grad_sq(&m));
        if (!isfinite(losses[k])) comm_fatal(c, 1, "step %d: the loss is not finite (%g)", k, losses[k]);
        if (c->rank == 0) printf("  step %3d  loss %.6f  grad norm %.6f  %.1f ms\n", k, losses[k], gnorms[k], ms[k]);
    }
    const double med = stats_compute(ms + f.warmup, f.steps).median;
    int status = 0;
    // AdamW's moments as the counting allocator (common/alloc.h) holds them, beside the formula:
    // ZeRO-1 8·S (S = the shard padded to dp·64s, over dp), without it 8·Ψ_tp.
    long long opt_lo = (long long)mem_stats(DEV_CPU).live_by_tag[MEM_OPTIM], opt_hi = opt_lo;
    comm_host_allreduce_i64(c, &opt_lo, 1, COMM_MIN);
    comm_host_allreduce_i64(c, &opt_hi, 1, COMM_MAX);
    // The replicated RMSNorm weights: bitwise the same on every rank of a tensor group.
    unsigned long long h = FNV1A_INIT;
    for (int i = 0; i < m.layout.n; i++)
        if (m.p[i].split == TP_REPL) h = fnv1a(h, m.params + m.p[i].off, m.p[i].numel * sizeof(float));
    const int repl_same = train_hashes_agree(c, h, di, dp);
    // Every shard: bitwise the same across its dp group.
    const int dp_same = train_hashes_agree(c, fnv1a(FNV1A_INIT, m.params, m.total * sizeof(float)), ti, tp);
    if (c->rank == 0) {
        printf("step: %.2f ms (median of %d after %d warm-up, slowest rank)\n", med, f.steps, f.warmup);
        printf("tensor-group collectives per step: %lld all-reduces (%.0f elements), %lld all-gathers (%.0f), %lld reduce-scatters (%.0f); a ring sends %.4f MiB from each rank\n",
               cs.calls[TP_AR], cs.elems[TP_AR], cs.calls[TP_AG], cs.elems[TP_AG], cs.calls[TP_RS], cs.elems[TP_RS],
               cs.ring_bytes / 1048576.0);
        printf("replicated norm weights: %s\n", repl_same ? "bitwise identical across each tensor group" : "DIFFERENT across a tensor group");
        if (opt_lo == opt_hi) printf("optimizer state per rank: counted %lld bytes (MEM_OPTIM, the same on every rank); ", opt_hi);
        else printf("optimizer state per rank: counted %lld to %lld bytes (MEM_OPTIM) DIFFERENT across ranks; ", opt_lo, opt_hi);
        if (zero)
            printf("formula 8 x S = 8 x %zu = %zu bytes (ZeRO-1 over dp %d: the %zu-element shard padded to %zu and cut in %d pieces); without ZeRO 8 x %zu = %zu\n",
                   z.S, tp_zero1_state_bytes(&z), dp, m.total, z.P, dp, m.total, 8 * m.total);
        else
            printf("formula 8 x %zu = %zu bytes (the whole shard)\n", m.total, 8 * m.total);
        if (dp > 1) {
            // The data-parallel group's traffic: a ring sends 2(dp-1)/dp of an all-reduce's tensor,
            // (dp-1)/dp of a reduce-scatter's or an all-gather's: the same bytes, padding aside.
            const size_t n = zero ? z.P : m.total;
            printf("data-parallel collectives per step: %s of %zu elements; a ring sends %.4f MiB from each rank\n",
                   zero ? "1 reduce-scatter (gradients) + 1 all-gather (parameters)" : "1 all-reduce (gradients)", n,
                   2.0 * (dp - 1) / dp * 4.0 * (double)n / 1048576.0);
        }
        if (dp > 1) printf("shards: %s\n", dp_same ? "bitwise identical across each data-parallel group" : "DIFFERENT across a data-parallel group");
    }
    if (!repl_same || !dp_same || opt_lo != opt_hi) status = 1;
    if (*f.csv && c->rank == 0) {
        FILE* csv = train_csv_open("csv", f.csv, "model,context,batch,ranks,tp,dp,sp,backend,step_ms,params_per_rank,acts_bytes_per_rank,all_reduces,all_gathers,reduce_scatters,ring_mib_per_rank,zero,optim_bytes_per_rank");
        fprintf(csv, "%s,%d,%d,%d,%d,%d,%s,mpi,%.3f,%zu,%zu,%lld,%lld,%lld,%.4f,%d,%lld\n", f.model, T, B, W, tp, dp,
                sp ? (keep ? "keep" : "yes") : "no", med, m.total, tp_model_acts_bytes(&m),
                cs.calls[TP_AR], cs.calls[TP_AG], cs.calls[TP_RS], cs.ring_bytes / 1048576.0, zero, opt_hi);
        fclose(csv);
    }
    if (check) {
        // Every rank takes part in the gathers (dp group 0's tensor group is the one compared).
        float* gp = malloc(m.layout.total * sizeof(float));
        if (!gp) DIE("tp_train: out of memory");
        tp_model_gather(&m, m.params, gp);
        if (c->rank == 0) {
            // A fingerprint of the whole trained model, to compare two layouts of one run bit for bit.
            printf("check: gathered parameters fnv1a %016llx\n", (unsigned long long)fnv1a(FNV1A_INIT, gp, m.layout.total * sizeof(float)));
            char what[96];
            snprintf(what, sizeof what, "tp %d%s x dp %d%s", tp, sp ? " + SP" : "", dp, zero ? " with ZeRO-1" : "");
            status |= referee_one_process(&s.cfg, &s.opt, &data, B * dp, T, K, (uint64_t)f.seed, losses, gnorms, g0, gp,
                                          "tp", what);
        }
        free(gp);
        free(g0);
    }
    long long st = status;
    comm_host_allreduce_i64(c, &st, 1, COMM_MAX);
    free(in_all), free(tg_all), free(losses), free(gnorms), free(ms);
    data_close(&data);
    if (zero) tp_zero1_destroy(&z);
    tp_model_destroy(&m);
    grid_destroy(grid);
    comm_destroy(c, 1);
    return (int)st;
}
