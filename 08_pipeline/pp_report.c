// pp_train's report (pp_report.h): the timing lines, the bubble, the timelines.
#include "08_pipeline/pp_report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/fileio.h"
#include "common/gnuplot.h"

void pp_meas_add(pp_meas_t* a, const pp_timing_t* tm, int sim_peak_live, double mem_peak, int first, int measured) {
    a->wall += tm->wall / measured;
    a->busy += tm->busy / measured;
    a->comm += tm->comm / measured;
    for (int z = 0; z < 4; z++) a->t_kind[z] += tm->t_kind[z] / measured, a->n_kind[z] += tm->n_kind[z] / (double)measured;
    if (!first) return;
    a->peak_live = tm->peak_live;
    a->sim_peak_live = sim_peak_live;
    a->slots = tm->pool_slots;
    a->mem_peak = mem_peak;
}

int pp_report_timing(comm_t* c, const pp_meas_t* mine, const pp_report_t* r, sim_costs_t* mean_costs) {
    char err[512];
    const int world = r->world, p = r->sched->p, measured = r->measured;
    const int nd = (int)(sizeof(pp_meas_t) / sizeof(double));
    pp_meas_t* all = calloc((size_t)world, sizeof(pp_meas_t));
    if (!all) DIE("out of host memory");
    all[c->rank] = *mine;
    comm_host_allreduce_f64(c, (double*)all, world * nd, COMM_SUM);  // each rank fills its own row
    int status = 0;
    *mean_costs = sim_unit_costs();
    if (c->rank == 0) {
        printf("\n# %s, mean of %d step%s after %d warm-up; idle = step - busy (waiting in groups included)\n",
               r->clock, measured, measured == 1 ? "" : "s", r->warmup);
        for (int w = 0; w < world; w++) {
            const pp_meas_t* t = &all[w];
            char kinds[160] = "";
            size_t n = 0;
            const char* kn[4] = {"F", "B", "BI", "W"};
            for (int q = 0; q < 4; q++)
                if (t->n_kind[q] > 0)
                    n += (size_t)snprintf(kinds + n, sizeof kinds - n, "%s%s %.2f x%d", n ? ", " : "", kn[q],
                                          1e3 * t->t_kind[q] / t->n_kind[q], (int)t->n_kind[q]);
            printf("rank %d (replica %d, pipeline rank %d): step %.2f ms, busy %.2f ms (%s ms), in groups %.2f ms, "
                   "idle %.2f ms = %.3f of the step; peak live %d (simulated %d), activation sets %d",
                   w, w / p, w % p, 1e3 * t->wall, 1e3 * t->busy, kinds, 1e3 * t->comm,
                   1e3 * (t->wall - t->busy), t->wall > 0 ? 1 - t->busy / t->wall : 0,
                   (int)t->peak_live, (int)t->sim_peak_live, (int)t->slots);
            if (r->gpu_memory) {  // the counting allocator's peak of the GPU's memory
                char mb_s[32];
                printf("; peak GPU memory %s", fmt_bytes((size_t)t->mem_peak, mb_s, sizeof mb_s));
            }
            printf("\n");
            if (t->peak_live != t->sim_peak_live) status = 1;
        }
        // Replica 0's pipeline: the simulator's definition, with the slowest rank's step.
        double mk = 0, busy = 0, cost[4] = {0}, cnt[4] = {0};
        for (int q = 0; q < p; q++) {
            const pp_meas_t* t = &all[q];
            mk = t->wall > mk ? t->wall : mk;
            busy += t->busy;
            for (int z = 0; z < 4; z++) cost[z] += t->t_kind[z], cnt[z] += t->n_kind[z];
        }
        sim_costs_t sc = sim_unit_costs();
        double* cs[4] = {&sc.f, &sc.b, &sc.bi, &sc.w};
        for (int z = 0; z < 4; z++)
            if (cnt[z] > 0) *cs[z] = cost[z] / cnt[z];  // mean seconds per action of each kind
        // The kinds a schedule does not run only fill the printout: B = BI + W for ZB-H1, halves elsewhere.
        if (r->sched->kind != SCHED_ZBH1) sc.bi = sc.b / 2, sc.w = sc.b / 2;
        else sc.b = sc.bi + sc.w;
        // Both send models: MPI sends small messages eagerly (buffered) and larger ones by
        // rendezvous (the send waits for its receive; OpenMPI's shared-memory limit is 4 KiB).
        sim_result_t sr;
        double sim_b[2] = {NAN, NAN};
        for (int e = 0; e < 2; e++) {
            sc.eager = e;
            if (sim_run(r->sched, &sc, &sr, err, sizeof err) == 0) {
                sim_b[e] = sr.bubble;
                sim_result_free(&sr);
            }
        }
        const double meas = mk > 0 ? 1 - busy / (p * mk) : 0;
        printf("pipeline (replica 0): measured bubble %.3f = 1 - sum busy / (p x slowest step %.2f ms); formula %.3f; "
               "simulated with the measured mean costs (F %.2f, B %.2f, BI %.2f, W %.2f ms) %.3f rendezvous, %.3f eager; "
               "message %zu bytes\n",
               meas, 1e3 * mk, sim_formula_bubble(r->sched, &sc), 1e3 * sc.f, 1e3 * sc.b, 1e3 * sc.bi, 1e3 * sc.w, sim_b[0],
               sim_b[1], r->msg_bytes);
        if (r->D > 1) printf("data parallel: gradient sum over %d replicas %.2f ms a step (rank 0)\n", r->D, 1e3 * r->dp_s / measured);
        if (status) printf("peak live: DIFFERS from the simulator's count\n");
        fflush(stdout);
        *mean_costs = sc;
    }
    free(all);
    return status;
}

// --timeline's check, before any work: no quote or newline (gnuplot's strings), an existing
// directory, a file name part after it. NULL if fine, else why.
const char* pp_timeline_prefix_problem(const char* prefix) {
    if (strpbrk(prefix, "'\"\n")) return "contains a quote or a newline";
    const char* slash = strrchr(prefix, '/');
    if (slash && slash[1] == '\0') return "ends with '/': give a file prefix inside the directory, e.g. DIR/run";
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == prefix) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - prefix) >= sizeof dir) return "is too long";
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - prefix), prefix);
    struct stat st;
    static char why[4200];
    if (stat(dir, &st) != 0) snprintf(why, sizeof why, "cannot be written: %s: %s", dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode)) snprintf(why, sizeof why, "cannot be written: %s: %s", dir, strerror(ENOTDIR));
    else if (dir_check_writable(dir, why, sizeof why) != 0) return why;
    else return NULL;
    return why;
}

// --timeline: every rank of replica 0 puts its last step's times in its row of a zero-filled
// [p][2·maxn + 1] array (starts, ends, its step's absolute start), summed to every rank; rank 0
// lines the rows up, writes the measured and the simulated timelines and prints both.
// `costs` (seconds, rank 0's) are the measured mean costs; eager: the simulation's send model.
int pp_write_timelines(comm_t* c, pp_runner_t* run, const schedule_t* sched, int r, int d, int D,
                           const char* prefix, const sim_costs_t* costs, int world, size_t msg_bytes) {
    const int gpu = lm_device(pp_runner_model(run)) == DEV_CUDA;  // NCCL sends by rendezvous; the caption
    const int p = sched->p;
    int maxn = 0;
    for (int q = 0; q < p; q++) maxn = sched->n_actions[q] > maxn ? sched->n_actions[q] : maxn;
    const size_t row = 2 * (size_t)maxn + 1;
    double* all = calloc((size_t)p * row, sizeof(double));
    if (!all) DIE("out of host memory");
    if (d == 0) {
        const double *st = NULL, *en = NULL;
        double t0 = 0;
        const int n = pp_runner_last_times(run, &st, &en, &t0);
        if (n != sched->n_actions[r]) DIE("timeline: rank %d has %d times for %d actions", r, n, sched->n_actions[r]);
        double* mine = all + (size_t)r * row;
        memcpy(mine, st, (size_t)n * sizeof(double));
        memcpy(mine + maxn, en, (size_t)n * sizeof(double));
        mine[2 * maxn] = t0;  // 0 on the GPU: every rank's zero is its own ev_t0 (after a barrier)
    }
    comm_host_allreduce_f64(c, all, (int)((size_t)p * row), COMM_SUM);
    int status = 0;
    if (c->rank == 0) {
        double t_min = INFINITY;
        for (int q = 0; q < p; q++) t_min = fmin(t_min, all[(size_t)q * row + 2 * maxn]);
        double** st = calloc((size_t)p, sizeof(double*));
        double** en = calloc((size_t)p, sizeof(double*));
        if (!st || !en) DIE("out of host memory");
        for (int q = 0; q < p; q++) {  // milliseconds from the earliest rank's step start
            double* rw = all + (size_t)q * row;
            const double shift = rw[2 * maxn] - t_min;
            st[q] = rw, en[q] = rw + maxn;
            for (int i = 0; i < sched->n_actions[q]; i++) st[q][i] = 1e3 * (st[q][i] + shift), en[q][i] = 1e3 * (en[q][i] + shift);
        }
        char err[512], path[4200], title[512];
        sim_result_t meas, simr;
        if (sim_result_from_times(sched, (const double* const*)st, (const double* const*)en, &meas, err, sizeof err) != 0)
            DIE("timeline: the measured times: %s", err);
        // The simulator with the same costs in milliseconds; MPI sends of up to 4 KiB go eagerly
        // (OpenMPI's shared-memory limit), larger ones and NCCL's by rendezvous.
        sim_costs_t ms = *costs;
        ms.f *= 1e3, ms.b *= 1e3, ms.bi *= 1e3, ms.w *= 1e3, ms.comm = 0;
        ms.eager = !gpu && msg_bytes <= 4096;
        if (sim_run(sched, &ms, &simr, err, sizeof err) != 0) DIE("timeline: the simulation: %s", err);
        char where[160];
        if (gpu) snprintf(where, sizeof where, "NCCL, %d GPUs", p);
        else snprintf(where, sizeof where, "MPI on the CPU, %d ranks%s", world, D > 1 ? ", replica 0" : "");
        char what[200];
        snprintf(what, sizeof what, "%s, p %d, m %d, v %d, %s", sched_name(sched->kind), p, sched->m, sched->v, where);
        const struct {
            const char* name;
            sim_result_t* res;
        } out[2] = {{"measured", &meas}, {"simulated", &simr}};
        if (D > 1) printf("\n# timeline: replica 0 of %d only (its %d pipeline ranks)\n", D, p);
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s_%s.csv", prefix, out[k].name);
            if (sim_write_csv(sched, out[k].res, path, err, sizeof err) != 0) {
                printf("timeline: %s\n", err);
                status = 1;
            }
            snprintf(title, sizeof title, "%s: %s; bubble %.3f measured, %.3f simulated (%s sends)",
                     out[k].name, what, meas.bubble, simr.bubble, ms.eager ? "eager" : "rendezvous");
            printf("\n# timeline, %s (%s): makespan %.2f ms, bubble %.3f; %s\n", out[k].name, what, out[k].res->makespan,
                   out[k].res->bubble, path);
            sim_print_timeline(sched, out[k].res, &ms, 120, stdout);
            snprintf(path, sizeof path, "%s_%s.png", prefix, out[k].name);
            if (sim_plot_png_x(sched, out[k].res, path, title, "time (ms from the earliest step start of a rank)", err, sizeof err) != 0) {
                printf("timeline: no %s (%s)\n", path, err);
                if (gnuplot_available()) status = 1;  // gnuplot is there and failed: an error
            }
            else
                printf("timeline: wrote %s\n", path);
        }
        fflush(stdout);
        sim_result_free(&meas);
        sim_result_free(&simr);
        free(st);
        free(en);
    }
    free(all);
    return status;
}

