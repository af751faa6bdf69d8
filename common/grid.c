// The process grid (grid.h): coordinates by the last axis fastest, one comm_split per axis.
#include "common/grid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

static int name_ok(const char* s) {
    if (!s || !*s || strlen(s) >= 16) return 0;
    for (const char* p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return 0;
    return 1;
}

static void dims_text(const int* dims, int n, char* buf, size_t len) {
    size_t k = 0;
    buf[0] = '\0';
    for (int a = 0; a < n && k < len; a++) k += (size_t)snprintf(buf + k, len - k, "%s%d", a ? "x" : "", dims[a]);
}

grid_t* grid_create(comm_t* c, const int* dims, const char* const* names, int n_axes) {
    if (n_axes < 1 || n_axes > GRID_MAX_AXES)
        comm_refuse(c, "a process grid of %d axes; allowed: 1 to %d (e.g. dp x pp x tp)", n_axes, GRID_MAX_AXES);
    char txt[96];
    dims_text(dims, n_axes, txt, sizeof txt);
    long long prod = 1;
    for (int a = 0; a < n_axes; a++) {
        if (dims[a] < 1)
            comm_refuse(c, "process grid %s: axis %d has %d ranks; every axis needs at least 1", txt, a, dims[a]);
        if (!name_ok(names[a]))
            comm_refuse(c, "process grid %s: axis name '%s'; allowed: 1-15 letters, digits, '-' or '_'", txt,
                        names[a] ? names[a] : "(null)");
        for (int b = 0; b < a; b++)
            if (strcmp(names[a], names[b]) == 0) comm_refuse(c, "process grid %s: the axis name '%s' repeats; each axis needs its own", txt, names[a]);
        prod *= dims[a];
        if (prod > c->world) break;
    }
    if (prod != c->world)
        comm_refuse(c, "process grid %s: %s%lld ranks, the job has %d; the product of the axes must be the job's size",
                    txt, prod > c->world ? "over " : "", prod, c->world);

    grid_t* g = calloc(1, sizeof *g);
    if (!g) DIE("grid: out of host memory");
    g->world = c;
    g->n_axes = n_axes;
    for (int a = 0; a < n_axes; a++) {
        g->dims[a] = dims[a];
        snprintf(g->names[a], sizeof g->names[a], "%s", names[a]);
    }
    grid_coords_of(g, c->rank, g->coord);
    // Axis a's group: the ranks that share every other coordinate. Color: this rank with its
    // own coordinate on a set to 0 (the group's first rank); key: the coordinate on a.
    for (int a = 0; a < n_axes; a++) {
        int at0[GRID_MAX_AXES];
        memcpy(at0, g->coord, sizeof at0);
        at0[a] = 0;
        g->group[a] = comm_split(c, grid_rank_of(g, at0), g->coord[a], g->names[a]);
        if (!g->group[a] || g->group[a]->rank != g->coord[a] || g->group[a]->world != dims[a])
            comm_fatal(c, 1, "grid: the %s group does not match the coordinates", g->names[a]);
    }
    return g;
}

void grid_destroy(grid_t* g) {
    if (!g) return;
    for (int a = g->n_axes - 1; a >= 0; a--) comm_destroy(g->group[a], 0);
    free(g);
}

int grid_axis(const grid_t* g, const char* name) {
    for (int a = 0; a < g->n_axes; a++)
        if (name && strcmp(g->names[a], name) == 0) return a;
    return -1;
}

int grid_rank_of(const grid_t* g, const int* coord) {
    int r = 0;
    for (int a = 0; a < g->n_axes; a++) r = r * g->dims[a] + coord[a];
    return r;
}

void grid_coords_of(const grid_t* g, int rank, int* coord) {
    for (int a = g->n_axes - 1; a >= 0; a--) {
        coord[a] = rank % g->dims[a];
        rank /= g->dims[a];
    }
}

const char* grid_describe(const grid_t* g, char* buf, size_t len) {
    char d[96];
    dims_text(g->dims, g->n_axes, d, sizeof d);
    size_t k = (size_t)snprintf(buf, len, "%s (", d);
    for (int a = 0; a < g->n_axes && k < len; a++) k += (size_t)snprintf(buf + k, len - k, "%s%s", a ? " x " : "", g->names[a]);
    if (k < len) snprintf(buf + k, len - k, ")");
    return buf;
}
