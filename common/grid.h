// The process grid: the job's ranks as a box of up to GRID_MAX_AXES axes (data x pipeline x
// tensor, with a context axis if wanted), each rank's coordinates and, along every axis, the
// group of the ranks that differ from it on that axis only.
//
// Rank order: the LAST axis varies fastest (Megatron puts tensor parallelism innermost, so a
// tensor group is consecutive ranks, which sit on one node):
//   rank = ((c0 · d1 + c1) · d2 + c2) ...      e.g. D x P x T = 2 x 1 x 2: rank 3 = (1, 0, 1)
// The group along axis a holds the d_a ranks whose other coordinates equal this rank's; this
// rank is number c_a in it. Stage 08's pipeline x data layout (world rank d·p + r) is the
// grid {D, p} with names {"dp", "pp"}: its "dp" groups are the replicas of one stage.
#pragma once
#include "common/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GRID_MAX_AXES 4

typedef struct {
    comm_t* world;                   // the communicator the grid was made from (not owned)
    int n_axes;
    int dims[GRID_MAX_AXES];         // ranks along each axis; their product is world->world
    char names[GRID_MAX_AXES][16];   // "dp", "pp", "tp", "cp"
    int coord[GRID_MAX_AXES];        // this rank's coordinates
    comm_t* group[GRID_MAX_AXES];    // this rank's group along each axis (named like the axis)
} grid_t;

// Collective over c (every rank passes the same dims and names). Refuses, in one line from
// rank 0 and exit 2 on every rank (comm_refuse), a grid of 0 or more than GRID_MAX_AXES axes,
// an axis of fewer than 1 rank, a name that comm_split would not take or that repeats, and
// dims whose product is not c's size.
grid_t* grid_create(comm_t* c, const int* dims, const char* const* names, int n_axes);
// Collective: frees every group (before c itself is destroyed).
void grid_destroy(grid_t* g);

// The axis called `name`, or -1.
int grid_axis(const grid_t* g, const char* name);
// The rank in g->world of the rank at `coord` (n_axes coordinates), and the inverse.
int grid_rank_of(const grid_t* g, const int* coord);
void grid_coords_of(const grid_t* g, int rank, int* coord);
// "2x1x2 (dp x pp x tp)"
const char* grid_describe(const grid_t* g, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
