// Runs a schedule's action lists with a cost per action kind and reports what a pipeline step
// would take: makespan, busy time per rank, the bubble, peak live activations, and a timeline
// (CSV, ASCII, PNG). No GPU: this is the arithmetic of a schedule, not a measurement.
//
// Execution model (the executor's, see schedule.h): each rank runs its list in order from time
// 0. A compute action takes its cost. A group of communication actions is posted when the rank
// reaches it; the rank then waits until every operation of the group is done.
//   rendezvous (default): a send and its receive both finish at
//       max(time the send was posted, time the receive was posted) + comm
//     (the strictest reading of blocking or grouped NCCL/MPI point-to-point: a send may wait for
//     its receive to be posted);
//   eager: a send finishes when posted (the library buffers it); its receive finishes at
//       max(receive posted, send posted + comm).
// Bubble = (p·makespan − Σ_r busy_r) / (p·makespan), busy_r = the sum of rank r's compute costs:
// waiting at a group, including the comm latency, counts as bubble.
//
// Live activations: a micro-batch-chunk is live on its rank from the start of its F until its
// B ends, or, split (ZB-H1), until its W ends: W needs the layer inputs saved by F (dW = dYᵀ X),
// so ZB-H1 frees at W. The unit is one micro-batch through one chunk (1/v of a rank's layers).
// Counted from the list order alone, so it does not depend on the costs. A forward-only list
// (evaluation) keeps a set only until its output is sent: peak 1.
#pragma once
#include <stdio.h>

#include "08_pipeline/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double f, b, bi, w;  // cost of one F, B, BI, W (one chunk's worth)
    double comm;         // latency of one message (default 0)
    int eager;           // 0 rendezvous (default), 1 eager sends
} sim_costs_t;

// F = B = BI = W = 1, comm 0, rendezvous: the costs schedule_validate runs with.
sim_costs_t sim_unit_costs(void);

typedef struct {
    int p;
    double makespan;    // when the last rank finishes its last action
    double bubble;      // (p·makespan − Σ busy) / (p·makespan); 0 when makespan is 0
    double* busy;       // [p] Σ compute costs of rank r
    double* finish;     // [p] when rank r's last action ends
    int* peak_live;     // [p] peak live micro-batch-chunks (see above)
    double** start;     // [p][n_actions[r]] compute: start; communication: when posted
    double** end;       // [p][n_actions[r]] compute: end; communication: when it finished
} sim_result_t;

// Simulates `s` (structure checked first: schedule_check_structure, then the send/receive
// pairing). 0, or -1 with one line in err: a bad structure, an action whose input has not
// arrived, a send/receive mismatch, or a deadlock (which ranks wait at which group).
int sim_run(const schedule_t* s, const sim_costs_t* costs, sim_result_t* out, char* err, size_t errlen);
void sim_result_free(sim_result_t* res);

// A result from times measured elsewhere (an executor's timeline, pp_train --timeline):
// start[r][i] / end[r][i] for every action of every rank, on one time axis. Fills `out` as
// sim_run would: busy_r = Σ (end − start) of rank r's compute actions, finish_r = its latest
// end, makespan = the latest finish (time 0 is the axis' zero, not the first start), the
// bubble by the same formula, peak_live from the lists. 0, or -1 with one line in err (a bad
// structure, a time that is negative or not finite, an end before its start).
int sim_result_from_times(const schedule_t* s, const double* const* start, const double* const* end,
                          sim_result_t* out, char* err, size_t errlen);

// The textbook bubble for the schedule's kind (equal costs on every stage, comm 0):
//   GPipe, 1F1B:  (p−1)/(m+p−1)          interleaved: (p−1)/(v·m+p−1)
//   ZB-H1:        (p−1)(F+BI−W) / (m(F+BI+W) + (p−1)(F+BI−W))   for m >= p and W <= F+BI
// (the training lists' formulas: a forward-only list, whatever its kind, is the forwards'
// staircase, v·m + p − 1 forward times with unit costs; test_schedule checks it by simulation)
// NAN where no formula applies (ZB-H1 with m < p or W > F+BI).
double sim_formula_bubble(const schedule_t* s, const sim_costs_t* costs);

// Peak live micro-batch-chunks of one rank, from its list (the same number sim_run reports).
int sim_peak_live(const schedule_t* s, int rank);

// CSV, one row per action: rank,index,action,mb,chunk,peer,start,end (written atomically).
// 0, or -1 with the reason in err.
int sim_write_csv(const schedule_t* s, const sim_result_t* res, const char* path, char* err, size_t errlen);
// Reads such a CSV back (or pp_train's measured timeline, the same columns) into a schedule
// (p, m, v from the rows; kind left 1F1B: only the lists are known) and a result (start, end,
// busy, makespan, bubble, peak live), e.g. to draw a GPU run's timeline where gnuplot is. 0, or
// -1 with one line (both left empty). Free with schedule_free and sim_result_free.
int sim_read_csv(const char* path, schedule_t* s, sim_result_t* res, char* err, size_t errlen);

// ASCII timeline: one row per rank, one column per time quantum (the smallest compute cost,
// coarser if the makespan needs more than max_cols columns). F, B, W (BI is drawn B, as in the
// paper), upper case for even chunks and lower case for odd ones; '.' idle or waiting.
void sim_print_timeline(const schedule_t* s, const sim_result_t* res, const sim_costs_t* costs,
                        int max_cols, FILE* out);

// Draws the timeline (ranks × time, a box per compute labelled with its micro-batch) as a PNG
// through gnuplot, written atomically. 0, or -1 with the reason (gnuplot missing or failed).
int sim_plot_png(const schedule_t* s, const sim_result_t* res, const char* png, const char* title,
                 char* err, size_t errlen);
// The same with another x-axis label than "time (cost units)" (pp_train --timeline: ms).
int sim_plot_png_x(const schedule_t* s, const sim_result_t* res, const char* png, const char* title, const char* xlabel,
                   char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
