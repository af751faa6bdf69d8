// Tests of the .npy reader and writer (common/npy.c) and of npy_load / npy_save
// (common/npy_tensor.c): round trips for every dtype and rank, every malformed-file error with
// its text, shape/dtype checks, and that a failed write never leaves or clobbers a file.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/npy.h"
#include "tests/child.h"
#include "tests/harness.h"

// ------------------------------------------------------------------ helpers

static const char* tmp_path(const char* name, char* buf, size_t len) {
    snprintf(buf, len, "%s/%s", test_tmpdir(), name);
    return buf;
}

// A .npy image: magic, version major.0, the header (padded to 64 with '\n' last, as numpy
// does), then `data`. Returns its length; buf must be big enough (callers use 4096).
static size_t make_npy(unsigned char* buf, int major, const char* header, const void* data, size_t datalen) {
    size_t pre = major == 1 ? 10 : 12, h = strlen(header);
    size_t hlen = ((pre + h + 1 + 63) / 64) * 64 - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (unsigned char)(hlen & 0xff), buf[9] = (unsigned char)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    }
    memcpy(buf + pre, header, h);
    memset(buf + pre + h, ' ', hlen - h - 1);
    buf[pre + hlen - 1] = '\n';
    if (datalen) memcpy(buf + pre + hlen, data, datalen);
    return pre + hlen + datalen;
}

static void write_bytes(const char* path, const void* b, size_t n) {
    FILE* f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

// Expect npy_parse to reject the image with a message containing `want`.
static void expect_parse_error(const void* b, size_t n, const char* want) {
    npy_array_t a;
    char err[256] = "";
    cr_assert_eq(npy_parse(b, n, &a, err, sizeof err), -1, "accepted; expected an error with '%s'", want);
    cr_assert(strstr(err, want) != NULL, "error was '%s', expected it to contain '%s'", err, want);
    cr_assert_null(a.data, "a failed parse must leave no data behind");
}

static void expect_header_error(const char* header, const void* data, size_t datalen, const char* want) {
    unsigned char buf[4096];
    size_t n = make_npy(buf, 1, header, data, datalen);
    expect_parse_error(buf, n, want);
}

// A deterministic byte pattern (no RNG needed: only equality matters).
static void fill_pattern(unsigned char* p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 8));
}

static int count_tmp_files(const char* dir_path) {
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '\\.tmp\\.'", dir_path);
    run_capture(cmd, out, sizeof out);
    return atoi(out);
}

// ------------------------------------------------------------------ round trips

static void roundtrip(dtype_t dt, int rank, const int64_t* shape) {
    size_t numel = 1;
    for (int i = 0; i < rank; i++) numel *= (size_t)shape[i];
    size_t nbytes = numel * dtype_size(dt);
    unsigned char* data = malloc(nbytes ? nbytes : 1);  // (numel,) elements of dt
    fill_pattern(data, nbytes, (unsigned)(rank * 10 + dt));
    char path[512], name[64], err[256];
    snprintf(name, sizeof name, "rt_%d_%d.npy", (int)dt, rank);
    tmp_path(name, path, sizeof path);
    cr_assert_eq(npy_write(path, dt, rank, shape, data, err, sizeof err), 0, "%s", err);

    npy_array_t a;
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "dtype %s rank %d: %s", dtype_name(dt), rank, err);
    cr_assert_eq(a.dtype, dt);
    cr_assert_eq(a.rank, rank);
    for (int i = 0; i < rank; i++) cr_assert_eq(a.shape[i], shape[i], "dim %d", i);
    cr_assert_eq(a.nbytes, nbytes);
    cr_assert_not_null(a.data);
    cr_assert(memcmp(a.data, data, nbytes) == 0, "data differs after a round trip (%s rank %d)", dtype_name(dt), rank);
    npy_array_free(&a);
    cr_assert_null(a.data);

    // numpy aligns the data to 64 bytes; so do we (the file is header + data).
    FILE* f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    cr_assert_eq((len - (long)nbytes) % 64, 0, "header of %ld bytes is not 64-aligned", len - (long)nbytes);
    free(data);
}

Test(npy, roundtrip_every_dtype_and_rank) {
    // Odd sizes; rank 0 is one element.
    const int64_t shape[TENSOR_MAX_RANK] = {3, 5, 7, 2, 3, 1, 2, 3};
    for (int dt = 0; dt < DT_COUNT; dt++) {
        for (int rank = 0; rank <= 4; rank++) roundtrip((dtype_t)dt, rank, shape);
        roundtrip((dtype_t)dt, TENSOR_MAX_RANK, shape);
    }
}

Test(npy, roundtrip_empty_array) {
    const int64_t shape[3] = {2, 0, 3};
    roundtrip(DT_F32, 3, shape);
}

Test(npy, zero_dimension_with_huge_others_is_empty) {
    unsigned char buf[4096];
    const char* headers[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775807), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775807, 0), }",
    };
    for (int h = 0; h < 2; h++) {
        size_t n = make_npy(buf, 1, headers[h], NULL, 0);
        npy_array_t a;
        char err[256];
        cr_assert_eq(npy_parse(buf, n, &a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(a.nbytes, 0);
        cr_assert_not_null(a.data, "even an empty array has a data pointer");
        npy_array_free(&a);
    }
}

Test(npy, rank0_is_one_element) {
    char path[512], err[256];
    int64_t v = -1234567890123LL;
    tmp_path("scalar.npy", path, sizeof path);
    cr_assert_eq(npy_write(path, DT_I64, 0, NULL, &v, err, sizeof err), 0, "%s", err);
    npy_array_t a;
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.rank, 0);
    cr_assert_eq(a.nbytes, 8);
    cr_assert_eq(*(int64_t*)a.data, v);
    npy_array_free(&a);
}

Test(npy, header_text_is_what_numpy_writes) {
    char path[512], err[256];
    float x[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    tmp_path("h.npy", path, sizeof path);
    cr_assert_eq(npy_write(path, DT_F32, 1, shape, x, err, sizeof err), 0, "%s", err);
    FILE* f = fopen(path, "rb");
    char buf[128] = {0};
    cr_assert_eq(fread(buf, 1, 128, f), 128);
    fclose(f);
    cr_assert(memcmp(buf, "\x93NUMPY\x01\x00\x76\x00", 10) == 0, "preamble: version 1.0, header 118 bytes");
    const char* want = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
    cr_assert(strncmp(buf + 10, want, strlen(want)) == 0, "header was '%.118s'", buf + 10);
    for (int i = 10 + (int)strlen(want); i < 127; i++) cr_assert_eq(buf[i], ' ', "padding at byte %d", i);
    cr_assert_eq(buf[127], '\n', "preamble + header is 128 bytes: a multiple of 64, ending in a newline");
}

Test(npy, accepts_versions_2_and_3_and_other_spellings) {
    unsigned char buf[4096];
    int32_t d[6] = {1, -2, 3, -4, 5, -6};
    // Keys in another order, double quotes, no trailing comma, Python 2 "L" suffix, no spaces.
    const char* headers[] = {
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
        "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<i4\"}",
        "{'descr':'<i4','fortran_order':False,'shape':(2L,3L,)}",
    };
    for (int major = 1; major <= 3; major++) {
        for (size_t h = 0; h < sizeof headers / sizeof *headers; h++) {
            size_t n = make_npy(buf, major, headers[h], d, sizeof d);
            npy_array_t a;
            char err[256];
            cr_assert_eq(npy_parse(buf, n, &a, err, sizeof err), 0, "version %d header %zu: %s", major, h, err);
            cr_assert_eq(a.dtype, DT_I32);
            cr_assert_eq(a.rank, 2);
            cr_assert_eq(a.shape[0], 2);
            cr_assert_eq(a.shape[1], 3);
            cr_assert(memcmp(a.data, d, sizeof d) == 0);
            npy_array_free(&a);
        }
    }
}

// ------------------------------------------------------------------ malformed files

Test(npy, rejects_bad_magic_and_short_input) {
    expect_parse_error("", 0, "bad magic");
    expect_parse_error("\x93NUM", 4, "bad magic");
    expect_parse_error("PK\x03\x04 this is a zip file", 24, "bad magic");
    expect_parse_error("\x93NUMPY\x01\x00\x40", 9, "truncated");
}

Test(npy, rejects_unsupported_version) {
    unsigned char buf[4096];
    float x = 1;
    size_t n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &x, 4);
    buf[6] = 4;
    expect_parse_error(buf, n, "unsupported .npy version 4.0");
    buf[6] = 1, buf[7] = 1;
    expect_parse_error(buf, n, "unsupported .npy version 1.1");
}

Test(npy, rejects_unsupported_dtypes_by_name) {
    double d = 1;
    expect_header_error("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", &d, 8,
                        "unsupported dtype '<f8'");
    expect_header_error("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", &d, 1,
                        "unsupported dtype '|u1'");
    expect_header_error("{'descr': '>f4', 'fortran_order': False, 'shape': (), }", &d, 4,
                        "big-endian dtype '>f4' is not supported");
    expect_header_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }", &d, 4,
                        "structured");
}

Test(npy, rejects_fortran_order) {
    float x[4] = {0};
    expect_header_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", x, 16,
                        "fortran_order True is not supported");
}

Test(npy, rejects_headers_that_do_not_parse) {
    float x[4] = {0};
    expect_header_error("hello", x, 16, "header does not parse");
    expect_header_error("", x, 16, "header does not parse");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, }", x, 16, "no 'shape' key");
    expect_header_error("{'fortran_order': False, 'shape': (4,), }", x, 16, "no 'descr' key");
    expect_header_error("{'descr': '<f4', 'shape': (4,), }", x, 16, "no 'fortran_order' key");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", x, 16,
                        "unexpected key 'x'");
    expect_header_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", x, 16,
                        "appears twice");
    expect_header_error("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,), }", x, 16,
                        "must be True or False");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4), }", x, 16, "not a tuple");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': [4], }", x, 16,
                        "header does not parse");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } junk", x, 16,
                        "junk after the dict");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4,", x, 16,
                        "header does not parse");
    expect_header_error("{'descr: '<f4', 'fortran_order': False, 'shape': (4,)}", x, 16,
                        "header does not parse");
}

Test(npy, rejects_bad_dimensions) {
    float x[4] = {0};
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", x, 16, "negative dimension");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", x, 16,
                        "dimension too large");
    // Each dimension fits in int64 but the byte count does not.
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", x, 16,
                        "element count overflows");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 4), }", x,
                        16, "rank exceeds the maximum 8");
}

Test(npy, rejects_truncated_and_trailing_data) {
    float x[13] = {0};
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", x, 47,
                        "truncated: expected 48 bytes of data, found 47");
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", x, 0,
                        "truncated: expected 48 bytes of data, found 0");
    // Trailing bytes are rejected: a longer file most likely means the header's shape is wrong.
    expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", x, 52,
                        "4 bytes of trailing data");
    // The header length points past the end of the file.
    unsigned char buf[4096];
    size_t n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", x, 4);
    expect_parse_error(buf, 40, "truncated: header says 118 bytes, file has 30 after the preamble");
    (void)n;
}

Test(npy, read_errors_name_the_file) {
    char path[512], err[512];
    npy_array_t a;
    tmp_path("does_not_exist.npy", path, sizeof path);
    cr_assert_eq(npy_read(path, &a, err, sizeof err), -1);
    cr_assert(strstr(err, path) == err && strstr(err, "cannot open"), "got '%s'", err);

    // The same checks as npy_parse, through the file reader (which reads the header and the
    // data separately).
    float x[12] = {0};
    unsigned char buf[4096];
    size_t n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", x, 40);
    tmp_path("short.npy", path, sizeof path);
    write_bytes(path, buf, n);
    cr_assert_eq(npy_read(path, &a, err, sizeof err), -1);
    char want[600];
    snprintf(want, sizeof want, "%s: truncated: expected 48 bytes of data, found 40", path);
    cr_assert_str_eq(err, want);

    n = make_npy(buf, 2, "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 4), }", x, 24);
    tmp_path("i2.npy", path, sizeof path);
    write_bytes(path, buf, n);
    cr_assert_eq(npy_read(path, &a, err, sizeof err), -1);
    cr_assert(strstr(err, "unsupported dtype '<i2'"), "got '%s'", err);

    tmp_path("tiny.npy", path, sizeof path);
    write_bytes(path, "\x93NUMPY\x01", 7);
    cr_assert_eq(npy_read(path, &a, err, sizeof err), -1);
    cr_assert(strstr(err, "bad magic"), "got '%s'", err);

    // A version 2.0 file read through the file path (4-byte header length).
    n = make_npy(buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", x, 48);
    tmp_path("v2.npy", path, sizeof path);
    write_bytes(path, buf, n);
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.nbytes, 48);
    npy_array_free(&a);
}

// ------------------------------------------------------------------ npy_check

Test(npy, check_names_both_dtype_and_shape) {
    npy_array_t a = {.dtype = DT_I32, .rank = 3, .shape = {4, 128, 32}};
    char err[256];
    cr_assert_eq(npy_check(&a, DT_F32, -1, NULL, err, sizeof err), -1);
    cr_assert_str_eq(err, "dtype is int32 ('<i4'), expected float32 ('<f4')");

    const int64_t want[3] = {4, 128, 64};
    cr_assert_eq(npy_check(&a, DT_I32, 3, want, err, sizeof err), -1);
    cr_assert_str_eq(err, "shape is [4, 128, 32], expected [4, 128, 64]");

    const int64_t want2[2] = {-1, 32};
    cr_assert_eq(npy_check(&a, -1, 2, want2, err, sizeof err), -1);
    cr_assert_str_eq(err, "shape is [4, 128, 32], expected [*, 32]");

    cr_assert_eq(npy_check(&a, -1, 2, NULL, err, sizeof err), -1);
    cr_assert_str_eq(err, "shape is [4, 128, 32] (rank 3), expected rank 2");

    // Wildcards and "any" pass.
    const int64_t any[3] = {-1, 128, -1};
    cr_assert_eq(npy_check(&a, DT_I32, 3, any, err, sizeof err), 0);
    cr_assert_eq(npy_check(&a, -1, -1, NULL, err, sizeof err), 0);
    cr_assert_eq(npy_check(&a, DT_I32, 3, NULL, err, sizeof err), 0);

    npy_array_t b = {.dtype = DT_BF16, .rank = 0};
    cr_assert_eq(npy_check(&b, DT_F32, 0, NULL, err, sizeof err), -1);
    cr_assert_str_eq(err, "dtype is bfloat16 ('<u2'), expected float32 ('<f4')");
    cr_assert_eq(npy_check(&b, DT_BF16, 1, NULL, err, sizeof err), -1);
    cr_assert_str_eq(err, "shape is [] (rank 0), expected rank 1");
}

// ------------------------------------------------------------------ npy_load / npy_save

Test(npy, load_returns_a_host_tensor) {
    char path[512], err[256];
    float x[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    const int64_t shape[2] = {2, 3};
    tmp_path("load.npy", path, sizeof path);
    cr_assert_eq(npy_write(path, DT_F32, 2, shape, x, err, sizeof err), 0, "%s", err);
    tensor_t t = npy_load(path, DT_F32, 2, shape);
    cr_assert_eq(t.device, DEV_CPU);
    cr_assert_eq(t.dtype, DT_F32);
    cr_assert_eq(t.rank, 2);
    cr_assert(tensor_is_contiguous(&t));
    cr_assert(memcmp(t.data, x, sizeof x) == 0);
    tensor_free(&t);
}

typedef struct {
    const char* path;
    int dtype, rank;
    const int64_t* shape;
} load_args_t;

static void child_load(void* p) {
    load_args_t* a = p;
    set_progname("npytest");
    tensor_t t = npy_load(a->path, a->dtype, a->rank, a->shape);
    tensor_free(&t);
}

Test(npy, load_fails_with_one_line_and_status_2) {
    char path[512], err[256], out[2048], want[1024];
    float x[4 * 5 * 3] = {0};
    const int64_t shape[3] = {4, 5, 3};
    tmp_path("q.npy", path, sizeof path);
    cr_assert_eq(npy_write(path, DT_F32, 3, shape, x, err, sizeof err), 0, "%s", err);

    const int64_t want_shape[3] = {4, 5, 7};
    load_args_t a = {path, DT_F32, 3, want_shape};
    cr_assert_eq(run_child(child_load, &a, out, sizeof out), 2, "output: %s", out);
    snprintf(want, sizeof want, "npytest: error: %s: shape is [4, 5, 3], expected [4, 5, 7]\n", path);
    cr_assert_str_eq(out, want);

    load_args_t b = {path, DT_BF16, -1, NULL};
    cr_assert_eq(run_child(child_load, &b, out, sizeof out), 2, "output: %s", out);
    snprintf(want, sizeof want, "npytest: error: %s: dtype is float32 ('<f4'), expected bfloat16 ('<u2')\n", path);
    cr_assert_str_eq(out, want);

    tmp_path("missing.npy", path, sizeof path);
    load_args_t c = {path, -1, -1, NULL};
    cr_assert_eq(run_child(child_load, &c, out, sizeof out), 2, "output: %s", out);
    snprintf(want, sizeof want, "npytest: error: %s: cannot open: No such file or directory\n", path);
    cr_assert_str_eq(out, want);
}

Test(npy, save_host_tensor_contiguous_and_strided) {
    char path[512];
    // A (3, 5) int32 tensor and its transpose, a (5, 3) strided view of the same memory.
    const int64_t shape[2] = {3, 5};
    tensor_t t = tensor_alloc(DEV_CPU, DT_I32, 2, shape, MEM_OTHER);
    int32_t* v = t.data;
    for (int i = 0; i < 15; i++) v[i] = 100 + i;
    tmp_path("save_c.npy", path, sizeof path);
    npy_save(path, &t);
    tensor_t r = npy_load(path, DT_I32, 2, shape);
    cr_assert(memcmp(r.data, t.data, 15 * sizeof(int32_t)) == 0);
    tensor_free(&r);

    const int64_t tshape[2] = {5, 3}, tstride[2] = {1, 5};
    tensor_t tt = tensor_view(t.data, DEV_CPU, DT_I32, 2, tshape, tstride);
    cr_assert(!tensor_is_contiguous(&tt));
    tmp_path("save_t.npy", path, sizeof path);
    npy_save(path, &tt);
    r = npy_load(path, DT_I32, 2, tshape);
    const int32_t* rv = r.data;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) cr_assert_eq(rv[i * 3 + j], v[j * 5 + i], "element (%d, %d)", i, j);
    tensor_free(&r);
    tensor_free(&t);
}

Test(npy, save_device_tensor_contiguous_and_strided) {
    SKIP_WITHOUT_GPU();
    char path[512];
    const int64_t shape[2] = {7, 9};
    tensor_t h = tensor_alloc(DEV_CPU, DT_F32, 2, shape, MEM_OTHER);
    float* hv = h.data;
    for (int i = 0; i < 63; i++) hv[i] = 0.5f * (float)i - 3;
    tensor_t d = tensor_to(&h, DEV_CUDA);
    tmp_path("save_dev.npy", path, sizeof path);
    npy_save(path, &d);
    tensor_t r = npy_load(path, DT_F32, 2, shape);
    cr_assert(memcmp(r.data, h.data, 63 * sizeof(float)) == 0, "device tensor saved wrongly");
    tensor_free(&r);

    // Columns 2..5 of every other row: a (4, 4) view with strides (18, 1) starting at (0, 2).
    const int64_t vshape[2] = {4, 4}, vstride[2] = {18, 1};
    tensor_t dv = tensor_view((float*)d.data + 2, DEV_CUDA, DT_F32, 2, vshape, vstride);
    tmp_path("save_dev_view.npy", path, sizeof path);
    npy_save(path, &dv);
    r = npy_load(path, DT_F32, 2, vshape);
    const float* rv = r.data;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) cr_assert_eq(rv[i * 4 + j], hv[(2 * i) * 9 + 2 + j], "element (%d, %d)", i, j);
    tensor_free(&r);
    tensor_free(&d);
    tensor_free(&h);
}

// ------------------------------------------------------------------ atomic writes

Test(npy, failed_write_leaves_existing_file_and_no_temporary) {
    char dir[400], path[512], err[256];
    snprintf(dir, sizeof dir, "%s/atomic", test_tmpdir());
    cr_assert_eq(mkdir_p(dir), 0);
    snprintf(path, sizeof path, "%s/keep.npy", dir);
    float x[2] = {7, 8};
    const int64_t shape[1] = {2};
    cr_assert_eq(npy_write(path, DT_F32, 1, shape, x, err, sizeof err), 0, "%s", err);

    // Bad arguments: refused before anything is created.
    const int64_t bad[1] = {-3};
    cr_assert_eq(npy_write(path, DT_F32, 1, bad, x, err, sizeof err), -1);
    cr_assert(strstr(err, "negative dimension"), "got '%s'", err);
    cr_assert_eq(npy_write(path, DT_F32, TENSOR_MAX_RANK + 1, shape, x, err, sizeof err), -1);
    cr_assert(strstr(err, "rank 9 is outside 0..8"), "got '%s'", err);

    npy_array_t a;
    cr_assert_eq(npy_read(path, &a, err, sizeof err), 0, "%s", err);
    cr_assert(memcmp(a.data, x, sizeof x) == 0, "the existing file was changed");
    npy_array_free(&a);
    cr_assert_eq(count_tmp_files(dir), 0, "a temporary file was left in %s", dir);

    // A directory that cannot be created (a regular file is in the way).
    char blocked[600];
    snprintf(blocked, sizeof blocked, "%s/keep.npy/sub/x.npy", dir);
    cr_assert_eq(npy_write(blocked, DT_F32, 1, shape, x, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot create"), "got '%s'", err);
}
