// The flight recorder's ring and its deadline line (common/comm_rec.h), on hand-made rings:
// the ring wraps, numbers match the way ranks match operations, and the line names the rank
// that never entered the operation, or the one that stopped inside it.
#include <stdlib.h>
#include <string.h>

#include "common/comm_rec.h"
#include "tests/harness.h"

#define S 1000000000LL  // one second in ns

static comm_rec_ring_t* ring(int rank) {
    comm_rec_ring_t* r = malloc(sizeof *r);
    cr_assert_not_null(r);
    comm_rec_reset(r, rank);
    return r;
}

Test(recorder, the_ring_keeps_the_last_64_and_wraps) {
    comm_rec_ring_t* r = ring(3);
    for (int i = 1; i <= 100; i++) {
        int64_t pos = comm_rec_begin(r, i % 2 ? COMM_REC_ALLREDUCE : COMM_REC_SEND, (size_t)i, 1, (int64_t)i * S);
        cr_assert_eq(pos, i);
        if (i < 100) comm_rec_done(r, pos, (int64_t)i * S + 1);
    }
    comm_rec_entry_t e;
    cr_assert(!comm_rec_get(r, 36, &e), "entry 36 was overwritten by 100 (64 kept)");
    cr_assert(comm_rec_get(r, 37, &e) && e.pos == 37 && e.bytes == 37 && e.t_done_ns);
    cr_assert(comm_rec_get(r, 100, &e) && e.op == COMM_REC_SEND && e.peer == 1 && e.t_done_ns == 0);
    cr_assert(!comm_rec_get(r, 101, &e) && !comm_rec_get(r, 0, &e));
    // 50 all-reduces numbered 1..50 (collectives), 50 sends to rank 1 numbered 1..50
    cr_assert_eq(r->colls, 50);
    cr_assert_eq(r->sent[1], 50);
    cr_assert(comm_rec_get(r, 99, &e) && e.op == COMM_REC_ALLREDUCE && e.num == 50 && e.peer == -1);
    cr_assert(comm_rec_get(r, 100, &e) && e.num == 50);
    // done for an entry that left the ring changes nothing; done_upto marks the unfinished
    comm_rec_done(r, 5, 7);
    comm_rec_begin(r, COMM_REC_RECV, 8, 2, 200 * S);
    comm_rec_done_upto(r, 101, 300 * S);
    cr_assert(comm_rec_get(r, 100, &e) && e.t_done_ns == 300 * S);
    cr_assert(comm_rec_get(r, 101, &e) && e.t_done_ns == 300 * S && e.num == 1 && r->recvd[2] == 1);
    free(r);
}

// Rank 0 waits in its third all-reduce (4 MiB); rank 1 did two and a send, then went silent.
Test(recorder, the_line_names_the_rank_that_never_entered) {
    comm_rec_ring_t* r0 = ring(0);
    comm_rec_ring_t* r1 = ring(1);
    for (int i = 0; i < 2; i++) {
        comm_rec_done(r0, comm_rec_begin(r0, COMM_REC_ALLREDUCE, 4 << 20, -1, 10 * S), 11 * S);
        comm_rec_done(r1, comm_rec_begin(r1, COMM_REC_ALLREDUCE, 4 << 20, -1, 10 * S), 11 * S);
    }
    comm_rec_done(r1, comm_rec_begin(r1, COMM_REC_SEND, 64, 0, 11 * S), 12 * S - S / 5);
    const int64_t pos = comm_rec_begin(r0, COMM_REC_ALLREDUCE, 4 << 20, -1, 12 * S);
    const comm_rec_ring_t* rings[2] = {r0, r1};
    char line[512];
    int n = comm_rec_blame(line, sizeof line, rings, 2, 0, pos, 5, 2, 17 * S);
    cr_assert_eq(n, 1, "%s", line);
    cr_assert_str_eq(line, "comm: deadline 5 s passed in all-reduce #3 (4.0 MiB) on rank 0: rank 1 never "
                           "entered it (last: send #1 to rank 0, done 5.2 s ago)");
    // pos 0: the oldest unfinished entry, the same one
    comm_rec_blame(line, sizeof line, rings, 2, 0, 0, 5, 2, 17 * S);
    cr_assert(strstr(line, "in all-reduce #3 (4.0 MiB) on rank 0: rank 1 never entered it"), "%s", line);
    // a job of 4 ranks, two of them on another node: said so
    comm_rec_blame(line, sizeof line, rings, 2, 0, pos, 5, 4, 17 * S);
    cr_assert(strstr(line, "; the ranks of other nodes were not seen"), "%s", line);
    // once rank 1 entered it too, nobody is behind
    comm_rec_begin(r1, COMM_REC_ALLREDUCE, 4 << 20, -1, 12 * S);
    comm_rec_alive(r1, 17 * S);
    n = comm_rec_blame(line, sizeof line, rings, 2, 0, pos, 5, 2, 17 * S);
    cr_assert_eq(n, 0, "%s", line);
    cr_assert(strstr(line, "every rank entered it and is still running"), "%s", line);
    free(r0);
    free(r1);
}

Test(recorder, point_to_point_matches_the_nth_message_of_the_pair) {
    comm_rec_ring_t* r0 = ring(0);
    comm_rec_ring_t* r1 = ring(1);
    // rank 1 sent rank 0 one message; rank 0 waits for the second
    comm_rec_done(r1, comm_rec_begin(r1, COMM_REC_SEND, 16, 0, 1 * S), 2 * S);
    comm_rec_done(r0, comm_rec_begin(r0, COMM_REC_RECV, 16, 1, 1 * S), 2 * S);
    const int64_t pos = comm_rec_begin(r0, COMM_REC_RECV, 2048, 1, 3 * S);
    const comm_rec_ring_t* rings[2] = {r0, r1};
    char line[512];
    cr_assert_eq(comm_rec_blame(line, sizeof line, rings, 2, 0, pos, 3, 2, 6 * S), 1, "%s", line);
    cr_assert_str_eq(line, "comm: deadline 3 s passed in receive #2 from rank 1 (2.0 KiB) on rank 0: rank 1 never "
                           "entered the matching send (last: send #1 to rank 0, done 4.0 s ago)");
    // rank 1 is the speaker of its own side: its send #2 to rank 0 is matched by rank 0's receive
    comm_rec_begin(r1, COMM_REC_SEND, 2048, 0, 3 * S);
    comm_rec_alive(r1, 6 * S);
    comm_rec_alive(r0, 6 * S);
    cr_assert_eq(comm_rec_blame(line, sizeof line, rings, 2, 1, 0, 3, 2, 6 * S), 0, "%s", line);
    free(r0);
    free(r1);
}

// Both entered the all-reduce; rank 2 has shown no sign of life for 4 s (stopped).
Test(recorder, a_rank_stopped_inside_the_operation_is_named) {
    comm_rec_ring_t* r[3] = {ring(0), ring(1), ring(2)};
    for (int k = 0; k < 3; k++) comm_rec_begin(r[k], COMM_REC_BARRIER, 0, -1, 10 * S);
    comm_rec_alive(r[0], 15 * S);
    comm_rec_alive(r[1], 15 * S);
    comm_rec_alive(r[2], 11 * S);
    const comm_rec_ring_t* rings[3] = {r[0], r[1], r[2]};
    char line[512];
    cr_assert_eq(comm_rec_blame(line, sizeof line, rings, 3, 1, 0, 4, 3, 15 * S), 1, "%s", line);
    cr_assert_str_eq(line, "comm: deadline 4 s passed in barrier #1 on rank 1: rank 2 stopped answering inside "
                           "barrier #1 (started 5.0 s ago, no sign of life for 4.0 s)");
    for (int k = 0; k < 3; k++) free(r[k]);
}

Test(recorder, several_silent_ranks_are_all_named) {
    comm_rec_ring_t* r[3] = {ring(0), ring(1), ring(2)};
    comm_rec_begin(r[0], COMM_REC_HOST_BCAST, 128, -1, 1 * S);
    comm_rec_begin(r[0], COMM_REC_INIT, 0, -1, 1 * S);
    const comm_rec_ring_t* rings[3] = {r[0], r[1], r[2]};
    char line[512];
    cr_assert_eq(comm_rec_blame(line, sizeof line, rings, 3, 0, 0, 2, 3, 4 * S), 2, "%s", line);
    cr_assert_str_eq(line, "comm: deadline 2 s passed in host broadcast #1 (128 B) on rank 0: rank 1 never "
                           "entered it (last: no operation yet); rank 2 never entered it (last: no operation yet)");
    for (int k = 0; k < 3; k++) free(r[k]);
}

// A group's rings (comm_split): the line names the group's operation and each rank by its
// group rank and its world rank.
Test(recorder, a_group_line_names_the_group_and_both_ranks) {
    comm_rec_ring_t* r0 = ring(0);
    comm_rec_ring_t* r1 = ring(1);
    comm_rec_set_group(r0, "dp", 2);
    comm_rec_set_group(r1, "dp", 6);
    comm_rec_done(r1, comm_rec_begin(r1, COMM_REC_ALLGATHER, 1024, -1, 10 * S), 11 * S);
    comm_rec_done(r0, comm_rec_begin(r0, COMM_REC_ALLGATHER, 1024, -1, 10 * S), 11 * S);
    const int64_t pos = comm_rec_begin(r0, COMM_REC_ALLREDUCE, 4 << 20, -1, 12 * S);
    const comm_rec_ring_t* rings[2] = {r0, r1};
    char line[512];
    int n = comm_rec_blame(line, sizeof line, rings, 2, 0, pos, 5, 2, 17 * S);
    cr_assert_eq(n, 1, "%s", line);
    cr_assert_str_eq(line, "comm: deadline 5 s passed in dp all-reduce #2 (4.0 MiB) on dp rank 0 (world rank 2): "
                           "dp rank 1 (world rank 6) never entered it (last: dp all-gather #1, done 6.0 s ago)");
    // point to point inside the group: the peer by both ranks
    const int64_t rv = comm_rec_begin(r0, COMM_REC_RECV, 64, 1, 13 * S);
    comm_rec_begin(r1, COMM_REC_ALLREDUCE, 4 << 20, -1, 12 * S);
    comm_rec_blame(line, sizeof line, rings, 2, 0, rv, 5, 2, 17 * S);
    cr_assert(strstr(line, "in dp receive #1 from dp rank 1 (world rank 6) (64 B) on dp rank 0 (world rank 2): "
                           "dp rank 1 (world rank 6) never entered the matching send"), "%s", line);
    free(r0);
    free(r1);
}
