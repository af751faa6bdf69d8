// NVTX ranges behind a run-time switch, and the per-thread range stack behind the profiler's
// regions (nvtx.h).
#include "common/nvtx.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

// Bit 0: send ranges to NVTX (--nvtx); bit 1: track them for the profiler. One word, so that
// the common case (both off) is a single test in nvtx_push / nvtx_pop.
#define F_NVTX 1
#define F_TRACK 2
static volatile int g_flags = 0;
static volatile unsigned g_gen = 1;  // tracking generation: bumped by every nvtx_track()

// Region names: append-only, interned at push time (not at launch time: the CUPTI callback
// that reads the current region runs on every CUDA API call and must not compare strings).
#define REGION_NAME_LEN 48
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_names[NVTX_MAX_REGIONS][REGION_NAME_LEN] = {"-", "(too deep)", "(other)"};
static volatile int g_nnames = 3;

// The calling thread's open tracked ranges: region ids, innermost last. `depth` keeps counting
// past NVTX_MAX_DEPTH so that pops stay balanced; ranges that deep report NVTX_REGION_TOO_DEEP.
typedef struct {
    unsigned gen;
    int depth;
    uint16_t id[NVTX_MAX_DEPTH];
} stack_t_;
static _Thread_local stack_t_ t_stack;

static stack_t_* my_stack(void) {
    stack_t_* s = &t_stack;
    if (s->gen != g_gen) {  // left over from an earlier tracking session (or never used)
        s->gen = g_gen;
        s->depth = 0;
    }
    return s;
}

static int intern(const char* name) {
    if (!name) name = "(null)";
    pthread_mutex_lock(&g_names_lock);
    int id = -1;
    // By content, never by pointer: a name built in a reused buffer ("step 3" where "step 2"
    // was) is another region. A step pushes a few tens of ranges and there are tens of names.
    for (int i = g_nnames; i-- > 3 && id < 0;)
        if (strncmp(g_names[i], name, REGION_NAME_LEN - 1) == 0) id = i;
    if (id < 0) {
        if (g_nnames < NVTX_MAX_REGIONS) {
            id = g_nnames;
            snprintf(g_names[id], REGION_NAME_LEN, "%s", name);
            g_nnames = id + 1;  // published after the name is written
        } else {
            id = NVTX_REGION_OTHER;
        }
    }
    pthread_mutex_unlock(&g_names_lock);
    return id;
}

static void track_push(const char* name) {
    stack_t_* s = my_stack();
    if (s->depth < NVTX_MAX_DEPTH) s->id[s->depth] = (uint16_t)intern(name);
    s->depth++;
}

static void track_pop(void) {
    stack_t_* s = my_stack();
    if (s->depth > 0) s->depth--;  // a pop of a range pushed before tracking began: ignored
}

void nvtx_enable(int on) {
    if (on) g_flags |= F_NVTX;
    else g_flags &= ~F_NVTX;
}
int nvtx_enabled(void) { return (g_flags & F_NVTX) != 0; }

void nvtx_push(const char* name) {
    if (g_flags) {
        if (g_flags & F_NVTX) nvtxRangePushA(name);
        if (g_flags & F_TRACK) track_push(name);
    }
}
void nvtx_pop(void) {
    if (g_flags) {
        if (g_flags & F_NVTX) nvtxRangePop();
        if (g_flags & F_TRACK) track_pop();
    }
}

void nvtx_track(int on) {
    g_gen = g_gen + 1;
    if (on) g_flags |= F_TRACK;
    else g_flags &= ~F_TRACK;
}
int nvtx_tracking(void) { return (g_flags & F_TRACK) != 0; }

int nvtx_region_current(void) {
    if (!(g_flags & F_TRACK)) return NVTX_REGION_NONE;
    stack_t_* s = my_stack();
    if (s->depth == 0) return NVTX_REGION_NONE;
    if (s->depth > NVTX_MAX_DEPTH) return NVTX_REGION_TOO_DEEP;
    return s->id[s->depth - 1];
}

const char* nvtx_region_name(int id) {
    if (id < 0 || id >= g_nnames) return "?";
    return g_names[id];
}

int nvtx_region_count(void) { return g_nnames; }
