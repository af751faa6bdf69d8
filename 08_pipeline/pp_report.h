// What pp_train reports of its measured steps: every rank's means gathered to rank 0 (step,
// busy time per compute kind, time in groups, idle, peak live micro-batch-chunks against the
// simulator's count), replica 0's measured bubble beside the formula and the simulator run with
// the measured mean costs, and --timeline's measured and simulated timelines of the last step.
#pragma once
#include <stddef.h>
#include "08_pipeline/runner.h"
#include "08_pipeline/schedule.h"
#include "08_pipeline/simulate.h"
#include "common/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// One rank's numbers over the measured steps (doubles only: gathered as an array).
typedef struct {
    double wall, busy, comm;          // seconds, means over the measured steps
    double t_kind[4], n_kind[4];      // per compute kind F, B, BI, W: seconds and counts, means
    double peak_live, sim_peak_live;  // the first measured step's, and the simulator's count
    double slots, mem_peak;           // activation sets allocated; the allocator's peak bytes
} pp_meas_t;

// Adds one measured step (first: the first of them, whose peaks are kept).
void pp_meas_add(pp_meas_t* a, const pp_timing_t* tm, int sim_peak_live, double mem_peak, int first, int measured);

typedef struct {
    const schedule_t* sched;  // as re-planned (its kind, p)
    int world, warmup, measured, D;
    const char* clock;        // pp_runner_clock
    int gpu_memory;           // 1: each rank's line gives its peak GPU memory
    size_t msg_bytes;         // one activation message
    double dp_s;              // rank 0's seconds in the data-parallel sum over the measured steps
} pp_report_t;

// Collective. Rank 0 prints the timing lines; returns 1 there if a rank's peak live differs
// from the simulator's (else 0), and in *mean_costs the mean seconds per action kind (unit
// costs on the other ranks).
int pp_report_timing(comm_t* c, const pp_meas_t* mine, const pp_report_t* r, sim_costs_t* mean_costs);

// --timeline's check, before any work: NULL if the prefix can be written, else why.
const char* pp_timeline_prefix_problem(const char* prefix);
// --timeline: collective; rank 0 writes and prints the measured and simulated timelines of the
// last step (replica 0's pipeline, rank r of replica d). 0, or 1 if a file could not be written.
int pp_write_timelines(comm_t* c, pp_runner_t* run, const schedule_t* sched, int r, int d, int D,
                       const char* prefix, const sim_costs_t* costs, int world, size_t msg_bytes);

#ifdef __cplusplus
}
#endif
