// The batch sources (common/data.h): random ids, a .npy of ids, raw bytes; next-token targets;
// determinism; clear errors for short files, bad ids and bad arrays.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/data.h"
#include "common/npy.h"
#include "tests/child.h"
#include "tests/harness.h"

static const char* tmp_file(const char* name) {
    static char buf[4][512];
    static int k = 0;
    char* p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", test_tmpdir(), name);
    return p;
}

// Every row is a window of `stream` (n tokens) and targets are inputs shifted by one.
static void check_windows(const int32_t* x, const int32_t* y, int B, int T, const int32_t* stream,
                          size_t n) {
    for (int b = 0; b < B; b++) {
        const int32_t* xr = x + (size_t)b * T;
        const int32_t* yr = y + (size_t)b * T;
        for (int t = 0; t + 1 < T; t++) cr_assert_eq(yr[t], xr[t + 1], "row %d: target %d", b, t);
        int found = 0;
        for (size_t s = 0; s + T < n && !found; s++)
            found = memcmp(stream + s, xr, T * sizeof(int32_t)) == 0 && stream[s + T] == yr[T - 1];
        cr_assert(found, "row %d is not a window of the file", b);
    }
}

Test(data, npy_int32_and_int64_ids) {
    // A stream where every window is unique: 0, 1, ..., 99 (mod vocab 100).
    enum { N = 100 };
    int32_t ids32[N];
    int64_t ids64[N];
    for (int i = 0; i < N; i++) ids32[i] = i, ids64[i] = i;
    char err[512];
    const int64_t shape[1] = {N};
    cr_assert_eq(npy_write(tmp_file("ids32.npy"), DT_I32, 1, shape, ids32, err, sizeof err), 0, "%s", err);
    cr_assert_eq(npy_write(tmp_file("ids64.npy"), DT_I64, 1, shape, ids64, err, sizeof err), 0, "%s", err);
    const char* files[] = {tmp_file("ids32.npy"), tmp_file("ids64.npy")};
    for (int f = 0; f < 2; f++) {
        data_source_t d;
        cr_assert_eq(data_open_npy(&d, files[f], 100, 3, err, sizeof err), 0, "%s", err);
        cr_assert_eq(d.n_tokens, (size_t)N);
        cr_assert_eq(d.kind, DATA_NPY);
        const int B = 5, T = 9;
        int32_t x[45], y[45];
        memset(x, 0xFF, sizeof x);
        memset(y, 0xFF, sizeof y);
        sample_batch(&d, B, T, 4, x, y);
        check_windows(x, y, B, T, ids32, N);
        // The same step gives the same batch, and int32 and int64 files the same batch.
        int32_t x2[45], y2[45];
        sample_batch(&d, B, T, 4, x2, y2);
        cr_assert(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0);
        data_close(&d);
    }
}

Test(data, raw_bytes_file) {
    // 300 bytes, i % 251: windows of length >= 2 are unique (251 is prime, no repeat inside 251).
    enum { N = 300 };
    unsigned char bytes[N];
    int32_t stream[N];
    for (int i = 0; i < N; i++) bytes[i] = (unsigned char)(i % 251), stream[i] = i % 251;
    FILE* f = fopen(tmp_file("text.bin"), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, N, f), (size_t)N);
    fclose(f);
    data_source_t d;
    char err[512];
    cr_assert_eq(data_open_bytes(&d, tmp_file("text.bin"), 512, 9, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.n_tokens, (size_t)N);
    const int B = 7, T = 13;
    int32_t x[91], y[91];
    int differ = 0;
    int32_t first[91];
    for (int step = 0; step < 3; step++) {
        memset(x, 0xFF, sizeof x);
        memset(y, 0xFF, sizeof y);
        sample_batch(&d, B, T, step, x, y);
        check_windows(x, y, B, T, stream, N);
        if (step == 0) memcpy(first, x, sizeof x);
        else differ |= memcmp(first, x, sizeof x) != 0;
    }
    cr_assert(differ, "every step gave the same batch");
    data_close(&d);
    // Raw bytes need room for all 256 byte values.
    cr_assert_eq(data_open_bytes(&d, tmp_file("text.bin"), 200, 9, err, sizeof err), -1);
    cr_assert(strstr(err, "needs vocab >= 256") != NULL, "%s", err);
}

Test(data, random_source_in_range_and_deterministic) {
    data_source_t d;
    data_open_random(&d, 37, 5);
    const int B = 3, T = 50;
    int32_t x[150], y[150], x2[150], y2[150];
    memset(x, 0xFF, sizeof x);
    memset(y, 0xFF, sizeof y);
    sample_batch(&d, B, T, 11, x, y);
    int seen[37] = {0};
    for (int i = 0; i < B * T; i++) {
        cr_assert(x[i] >= 0 && x[i] < 37 && y[i] >= 0 && y[i] < 37, "id out of range at %d", i);
        seen[x[i]] = 1;
    }
    int distinct = 0;
    for (int v = 0; v < 37; v++) distinct += seen[v];
    cr_assert(distinct > 30, "150 draws hit only %d of 37 ids", distinct);
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++) cr_assert_eq(y[b * T + t], x[b * T + t + 1]);
    sample_batch(&d, B, T, 11, x2, y2);
    cr_assert(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0, "not deterministic");
    sample_batch(&d, B, T, 12, x2, y2);
    cr_assert(memcmp(x, x2, sizeof x) != 0, "steps 11 and 12 gave the same batch");
    data_close(&d);
}

Test(data, bad_files_are_clear_errors) {
    char err[512];
    data_source_t d;
    // An id >= vocab is named with its index.
    int32_t ids[6] = {1, 2, 3, 70, 4, 5};
    const int64_t s6[1] = {6};
    cr_assert_eq(npy_write(tmp_file("bad.npy"), DT_I32, 1, s6, ids, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_open_npy(&d, tmp_file("bad.npy"), 64, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "token id 70 at index 3 is out of range [0, 64)") != NULL, "%s", err);
    // A negative id too.
    ids[3] = -4;
    cr_assert_eq(npy_write(tmp_file("neg.npy"), DT_I32, 1, s6, ids, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_open_npy(&d, tmp_file("neg.npy"), 64, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "at index 3 is out of range") != NULL, "%s", err);
    // float32 ids, 2-D ids.
    float fl[6] = {0};
    cr_assert_eq(npy_write(tmp_file("f.npy"), DT_F32, 1, s6, fl, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_open_npy(&d, tmp_file("f.npy"), 64, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "must be int32 or int64") != NULL, "%s", err);
    const int64_t s23[2] = {2, 3};
    cr_assert_eq(npy_write(tmp_file("2d.npy"), DT_I32, 2, s23, ids, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_open_npy(&d, tmp_file("2d.npy"), 64, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "must be 1-D") != NULL, "%s", err);
    // Missing file.
    cr_assert_eq(data_open_bytes(&d, "/nonexistent/x.txt", 512, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "/nonexistent/x.txt: cannot open") != NULL, "%s", err);
}

Test(data, file_too_short_for_the_sequence) {
    int32_t ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    const int64_t s10[1] = {10};
    char err[512];
    cr_assert_eq(npy_write(tmp_file("short.npy"), DT_I32, 1, s10, ids, err, sizeof err), 0, "%s", err);
    data_source_t d;
    cr_assert_eq(data_open_npy(&d, tmp_file("short.npy"), 16, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_check_seq(&d, 9, err, sizeof err), 0, "10 tokens hold 9 inputs + 1 target");
    cr_assert_eq(data_check_seq(&d, 10, err, sizeof err), -1);
    cr_assert(strstr(err, "has 10 tokens; sequence length 10 needs at least 11") != NULL, "%s", err);
    // The exact fit: the only window is the whole file.
    int32_t x[9], y[9];
    sample_batch(&d, 1, 9, 0, x, y);
    cr_assert(x[0] == 0 && y[8] == 9);
    data_close(&d);
}

static void short_sample(void* arg) {
    (void)arg;
    set_progname("test_data");
    data_source_t d;
    data_open(&d, tmp_file("short2.npy"), 16, 1);
    int32_t x[64], y[64];
    sample_batch(&d, 2, 16, 0, x, y);
}

static void open_bad(void* arg) {
    set_progname("test_data");
    data_source_t d;
    data_open(&d, (const char*)arg, 16, 1);
}

Test(data, programs_fail_with_one_line_and_exit_2) {
    int32_t ids[10] = {0};
    const int64_t s10[1] = {10};
    char err[512], out[1024];
    cr_assert_eq(npy_write(tmp_file("short2.npy"), DT_I32, 1, s10, ids, err, sizeof err), 0, "%s", err);
    int st = run_child(short_sample, NULL, out, sizeof out);
    cr_assert_eq(st, EXIT_BAD_INPUT, "exit %d: %s", st, out);
    cr_assert(strstr(out, "test_data: error: ") == out && strstr(out, "needs at least 17") != NULL,
              "%s", out);
    int32_t big[4] = {1, 2, 16, 3};
    const int64_t s4[1] = {4};
    cr_assert_eq(npy_write(tmp_file("big.npy"), DT_I32, 1, s4, big, err, sizeof err), 0, "%s", err);
    st = run_child(open_bad, (void*)tmp_file("big.npy"), out, sizeof out);
    cr_assert_eq(st, EXIT_BAD_INPUT, "exit %d: %s", st, out);
    cr_assert(strstr(out, "token id 16 at index 2 is out of range [0, 16)") != NULL, "%s", out);
    // A text file with vocab 16 (< 256): the bytes path says why.
    st = run_child(open_bad, (void*)"README.md", out, sizeof out);
    cr_assert_eq(st, EXIT_BAD_INPUT, "exit %d: %s", st, out);
    cr_assert(strstr(out, "needs vocab >= 256") != NULL, "%s", out);
}
