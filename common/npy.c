// Reading and writing NumPy .npy files, the exchange format with the PyTorch fixtures.
//
// The format (numpy.lib.format): the magic "\x93NUMPY", a major and a minor version byte, the
// header length (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0), then the header, a
// Python dict literal such as
//     {'descr': '<f4', 'fortran_order': False, 'shape': (4, 128, 64), }
// padded with spaces and a final '\n', then the raw C-order element data.
//
// This reader takes any byte string (it is fuzzed under ASan/UBSan): every length is checked
// before it is used, every product before it can overflow, and nothing relies on a NUL byte.
// Decisions:
//   - dtypes '<f4', '<i4', '<i8' and '<u2' (bf16 bits) only; big-endian and the rest are
//     rejected by name;
//   - the header must hold exactly the three keys, each once; a trailing comma is fine;
//   - data after the array is rejected ("N bytes of trailing data"): a file longer than its
//     header says is far more likely a writer bug (a wrong shape) than something to ignore.
// Only check.c, dtype.c and fileio.c may be linked with this file (the fuzz target links just
// those four), so the tensor wrappers live in npy_tensor.c.
#include "common/npy.h"
#include "common/check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fileio.h"

static const unsigned char NPY_MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// A header longer than this is not something numpy writes for a plain array (its own reader
// refuses headers over 10000 bytes by default); refusing early bounds the work on junk input.
#define NPY_MAX_HEADER (1u << 20)

// The numpy dtype string of each of our dtypes, and a readable name for messages.
static const char* npy_descr(dtype_t dt) {
    switch (dt) {
    case DT_F32: return "<f4";
    case DT_BF16: return "<u2";
    case DT_I32: return "<i4";
    case DT_I64: return "<i8";
    default: return NULL;
    }
}
static const char* npy_type_name(int dt) {
    switch (dt) {
    case DT_F32: return "float32";
    case DT_BF16: return "bfloat16";
    case DT_I32: return "int32";
    case DT_I64: return "int64";
    default: return "unknown";
    }
}

// ------------------------------------------------------------------ header tokenizer
// A cursor over the header bytes [p, end).
typedef struct {
    const char* p;
    const char* begin;
    const char* end;
} cur_t;

static void skip_ws(cur_t* c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

// "at byte 12 ('x')" or "at the end" for messages; printable characters only.
static const char* where(const cur_t* c, char* buf, size_t len) {
    if (c->p >= c->end) return "at the end of the header";
    unsigned char ch = (unsigned char)*c->p;
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(buf, len, "at header byte %ld ('%c')", (long)(c->p - c->begin), ch);
    else
        snprintf(buf, len, "at header byte %ld (0x%02x)", (long)(c->p - c->begin), ch);
    return buf;
}

static int expect_char(cur_t* c, char ch, char* err, size_t errlen) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 0;
    }
    char w[64];
    return set_err(err, errlen, "header does not parse: expected '%c' %s", ch, where(c, w, sizeof w));
}

// A Python string literal in single or double quotes, no escapes (numpy never writes any in
// the keys or dtype strings we accept). Copies at most outlen - 1 bytes; a longer string is an
// error since nothing we accept is that long.
static int parse_str(cur_t* c, char* out, size_t outlen, char* err, size_t errlen) {
    skip_ws(c);
    char w[64];
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return set_err(err, errlen, "header does not parse: expected a quoted string %s",
                       where(c, w, sizeof w));
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n')
            return set_err(err, errlen, "header does not parse: unsupported character in a string %s",
                           where(c, w, sizeof w));
        if (n + 1 >= outlen) return set_err(err, errlen, "header does not parse: string too long");
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return set_err(err, errlen, "header does not parse: unterminated string");
    c->p++;
    out[n] = '\0';
    return 0;
}

static int parse_bool(cur_t* c, int* out, char* err, size_t errlen) {
    skip_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = 1;
        return 0;
    }
    if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = 0;
        return 0;
    }
    char w[64];
    return set_err(err, errlen, "header does not parse: 'fortran_order' must be True or False, found %s",
                   where(c, w, sizeof w));
}

// A tuple of non-negative integers: (), (3,), (3, 4), (3, 4,). Python 2 files may write 3L.
static int parse_shape(cur_t* c, int* rank, int64_t* shape, char* err, size_t errlen) {
    if (expect_char(c, '(', err, errlen)) return -1;
    *rank = 0;
    char w[64];
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == ')') {
            c->p++;
            break;
        }
        if (c->p < c->end && *c->p == '-')
            return set_err(err, errlen, "negative dimension in shape");
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return set_err(err, errlen, "header does not parse: expected a dimension %s",
                           where(c, w, sizeof w));
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            int d = *c->p++ - '0';
            if (v > (INT64_MAX - d) / 10) return set_err(err, errlen, "dimension too large in shape");
            v = v * 10 + d;
        }
        if (c->p < c->end && *c->p == 'L') c->p++;
        if (*rank >= TENSOR_MAX_RANK)
            return set_err(err, errlen, "rank exceeds the maximum %d", TENSOR_MAX_RANK);
        shape[(*rank)++] = v;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == ')') {
            // Python needs the comma in a one-element tuple: "(3)" is the integer 3.
            if (*rank == 1)
                return set_err(err, errlen, "header does not parse: shape (N) is not a tuple, expected (N,)");
            c->p++;
            break;
        }
        return set_err(err, errlen, "header does not parse: expected ',' or ')' in shape %s",
                       where(c, w, sizeof w));
    }
    return 0;
}

static int descr_to_dtype(const char* d, dtype_t* out, char* err, size_t errlen) {
    for (int dt = 0; dt < DT_COUNT; dt++) {
        if (strcmp(d, npy_descr((dtype_t)dt)) == 0) {
            *out = (dtype_t)dt;
            return 0;
        }
    }
    if (d[0] == '>')
        return set_err(err, errlen, "big-endian dtype '%s' is not supported (only little-endian '<')", d);
    return set_err(err, errlen,
                   "unsupported dtype '%s' (supported: '<f4' float32, '<i4' int32, '<i8' int64, "
                   "'<u2' bf16 bits)", d);
}

// The header dict; exactly the keys descr, fortran_order and shape.
static int parse_header(const char* h, size_t hlen, npy_array_t* out, char* err, size_t errlen) {
    cur_t c = {h, h, h + hlen};
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
    char descr[32];
    if (expect_char(&c, '{', err, errlen)) return -1;
    for (;;) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') {
            c.p++;
            break;
        }
        char key[32];
        if (parse_str(&c, key, sizeof key, err, errlen)) return -1;
        if (expect_char(&c, ':', err, errlen)) return -1;
        int* seen;
        if (strcmp(key, "descr") == 0) {
            seen = &have_descr;
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return set_err(err, errlen, "unsupported dtype: structured arrays are not supported");
            if (parse_str(&c, descr, sizeof descr, err, errlen)) return -1;
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &have_fortran;
            if (parse_bool(&c, &fortran, err, errlen)) return -1;
        } else if (strcmp(key, "shape") == 0) {
            seen = &have_shape;
            if (parse_shape(&c, &out->rank, out->shape, err, errlen)) return -1;
        } else {
            return set_err(err, errlen, "header does not parse: unexpected key '%s'", key);
        }
        if (*seen) return set_err(err, errlen, "header does not parse: key '%s' appears twice", key);
        *seen = 1;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        if (expect_char(&c, '}', err, errlen)) return -1;
        break;
    }
    skip_ws(&c);
    if (c.p != c.end) {
        char w[64];
        return set_err(err, errlen, "header does not parse: junk after the dict %s", where(&c, w, sizeof w));
    }
    if (!have_descr) return set_err(err, errlen, "header does not parse: no 'descr' key");
    if (!have_fortran) return set_err(err, errlen, "header does not parse: no 'fortran_order' key");
    if (!have_shape) return set_err(err, errlen, "header does not parse: no 'shape' key");
    if (descr_to_dtype(descr, &out->dtype, err, errlen)) return -1;
    if (fortran)
        return set_err(err, errlen, "fortran_order True is not supported (save a C-order array: "
                                    "np.ascontiguousarray)");
    return 0;
}

// numel * element size of the parsed shape, or -1 if it overflows int64. A zero dimension makes
// the array empty whatever the other dimensions are (numpy agrees), so order does not matter.
static int data_bytes(const npy_array_t* a, size_t* out, char* err, size_t errlen) {
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] == 0) {
            *out = 0;
            return 0;
        }
    uint64_t n = dtype_size(a->dtype);
    for (int i = 0; i < a->rank; i++) {
        uint64_t d = (uint64_t)a->shape[i];
        if (n > (uint64_t)INT64_MAX / d)
            return set_err(err, errlen, "shape is too large (element count overflows)");
        n *= d;
    }
    if (n > (uint64_t)SIZE_MAX) return set_err(err, errlen, "shape is too large for this machine");
    *out = (size_t)n;
    return 0;
}

static uint32_t rd_u16(const unsigned char* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd_u32(const unsigned char* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Magic, version and header length from the first bytes. On success *pre is the preamble size
// (10 or 12) and *hlen the header size that follows it. `len` is how many bytes are available.
static int parse_preamble(const unsigned char* b, size_t len, size_t* pre, size_t* hlen, char* err,
                          size_t errlen) {
    if (len < 8 || memcmp(b, NPY_MAGIC, 6) != 0)
        return set_err(err, errlen, "not a .npy file (bad magic; expected \\x93NUMPY)");
    int major = b[6], minor = b[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        return set_err(err, errlen, "unsupported .npy version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor);
    *pre = major == 1 ? 10 : 12;
    if (len < *pre) return set_err(err, errlen, "truncated: the file ends inside the preamble");
    *hlen = major == 1 ? rd_u16(b + 8) : rd_u32(b + 8);
    if (*hlen > NPY_MAX_HEADER)
        return set_err(err, errlen, "header length %zu is implausibly large (limit %u)", *hlen,
                       NPY_MAX_HEADER);
    return 0;
}

static void clear_array(npy_array_t* a) { memset(a, 0, sizeof *a); }

int npy_parse(const void* buf, size_t len, npy_array_t* out, char* err, size_t errlen) {
    clear_array(out);
    const unsigned char* b = buf;
    size_t pre, hlen;
    if (!b) len = 0;
    if (parse_preamble(b, len, &pre, &hlen, err, errlen)) return -1;
    if (hlen > len - pre)
        return set_err(err, errlen, "truncated: header says %zu bytes, file has %zu after the preamble",
                       hlen, len - pre);
    npy_array_t a;
    clear_array(&a);
    if (parse_header((const char*)b + pre, hlen, &a, err, errlen)) return -1;
    size_t need = 0, have = len - pre - hlen;
    if (data_bytes(&a, &need, err, errlen)) return -1;
    if (have < need) return set_err(err, errlen, "truncated: expected %zu bytes of data, found %zu", need, have);
    if (have > need)
        return set_err(err, errlen, "%zu bytes of trailing data after the %zu bytes the shape needs",
                       have - need, need);
    a.data = malloc(need ? need : 1);  // never NULL on success, even for an empty array
    if (!a.data) return set_err(err, errlen, "out of memory reading %zu bytes", need);
    if (need) memcpy(a.data, b + pre + hlen, need);
    a.nbytes = need;
    *out = a;
    return 0;
}

// Reads the header first and then the data straight into its buffer, so a large file is not
// held twice in memory.
int npy_read(const char* path, npy_array_t* out, char* err, size_t errlen) {
    clear_array(out);
    FILE* f = fopen(path, "rb");
    if (!f) return set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return set_err(err, errlen, "%s: not a regular file", path);
    }
    size_t fsize = (size_t)st.st_size;
    unsigned char pre_buf[12];
    size_t got = fread(pre_buf, 1, sizeof pre_buf, f);
    size_t pre, hlen;
    char why[256];
    npy_array_t a;
    clear_array(&a);
    char* header = NULL;
    if (parse_preamble(pre_buf, got, &pre, &hlen, why, sizeof why)) goto fail;
    if (hlen > fsize - pre) {
        snprintf(why, sizeof why, "truncated: header says %zu bytes, file has %zu after the preamble",
                 hlen, fsize - pre);
        goto fail;
    }
    header = malloc(hlen ? hlen : 1);
    if (!header) {
        snprintf(why, sizeof why, "out of memory");
        goto fail;
    }
    // The preamble of a 1.0 file is 10 bytes: the last 2 bytes read above are header bytes.
    memcpy(header, pre_buf + pre, got - pre < hlen ? got - pre : hlen);
    if (got - pre < hlen && fread(header + (got - pre), 1, hlen - (got - pre), f) != hlen - (got - pre)) {
        snprintf(why, sizeof why, "read error in the header");
        goto fail;
    }
    if (parse_header(header, hlen, &a, why, sizeof why)) goto fail;
    size_t need = 0, have = fsize - pre - hlen;
    if (data_bytes(&a, &need, why, sizeof why)) goto fail;
    if (have < need) {
        snprintf(why, sizeof why, "truncated: expected %zu bytes of data, found %zu", need, have);
        goto fail;
    }
    if (have > need) {
        snprintf(why, sizeof why, "%zu bytes of trailing data after the %zu bytes the shape needs",
                 have - need, need);
        goto fail;
    }
    a.data = malloc(need ? need : 1);
    if (!a.data) {
        snprintf(why, sizeof why, "out of memory reading %zu bytes", need);
        goto fail;
    }
    if (fseek(f, (long)(pre + hlen), SEEK_SET) != 0 || fread(a.data, 1, need, f) != need) {
        snprintf(why, sizeof why, "read error: %s", ferror(f) ? strerror(errno) : "file shrank while reading");
        goto fail;
    }
    a.nbytes = need;
    free(header);
    fclose(f);
    *out = a;
    return 0;
fail:
    free(header);
    free(a.data);
    fclose(f);
    return set_err(err, errlen, "%s: %s", path, why);
}

void npy_array_free(npy_array_t* a) {
    if (!a) return;
    free(a->data);
    clear_array(a);
}

// "[4, 128, 64]"; entries < 0 print as "*" (any). Always NUL-terminates.
static const char* shape_str(int rank, const int64_t* shape, char* buf, size_t len) {
    size_t n = 0;
    n += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && n < len; i++) {
        if (shape[i] < 0) n += (size_t)snprintf(buf + n, len - n, "%s*", i ? ", " : "");
        else n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

int npy_check(const npy_array_t* a, int want_dtype, int want_rank, const int64_t* want_shape,
              char* err, size_t errlen) {
    char got_s[256], want_s[256];
    if (want_dtype >= 0 && (int)a->dtype != want_dtype)
        return set_err(err, errlen, "dtype is %s ('%s'), expected %s ('%s')", npy_type_name(a->dtype),
                       npy_descr(a->dtype) ? npy_descr(a->dtype) : "?", npy_type_name(want_dtype),
                       want_dtype < DT_COUNT ? npy_descr((dtype_t)want_dtype) : "?");
    if (want_rank < 0) return 0;
    int bad = a->rank != want_rank;
    for (int i = 0; !bad && want_shape && i < want_rank; i++)
        bad = want_shape[i] >= 0 && a->shape[i] != want_shape[i];
    if (!bad) return 0;
    shape_str(a->rank, a->shape, got_s, sizeof got_s);
    if (want_shape)
        return set_err(err, errlen, "shape is %s, expected %s", got_s,
                       shape_str(want_rank, want_shape, want_s, sizeof want_s));
    return set_err(err, errlen, "shape is %s (rank %d), expected rank %d", got_s, a->rank, want_rank);
}

int npy_write(const char* path, dtype_t dt, int rank, const int64_t* shape, const void* data,
              char* err, size_t errlen) {
    if ((int)dt < 0 || dt >= DT_COUNT) return set_err(err, errlen, "%s: invalid dtype %d", path, (int)dt);
    if (rank < 0 || rank > TENSOR_MAX_RANK)
        return set_err(err, errlen, "%s: rank %d is outside 0..%d", path, rank, TENSOR_MAX_RANK);
    npy_array_t a;
    clear_array(&a);
    a.dtype = dt;
    a.rank = rank;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return set_err(err, errlen, "%s: negative dimension %lld", path, (long long)shape[i]);
        a.shape[i] = shape[i];
    }
    size_t nbytes = 0;
    char why[128];
    if (data_bytes(&a, &nbytes, why, sizeof why)) return set_err(err, errlen, "%s: %s", path, why);
    if (nbytes && !data) return set_err(err, errlen, "%s: no data to write", path);

    // The header text, then spaces so that preamble + header is a multiple of 64 bytes (numpy
    // aligns the data so it can be memory-mapped), and a final newline.
    char header[512];
    int h = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", npy_descr(dt));
    for (int i = 0; i < rank; i++)
        h += snprintf(header + h, sizeof header - (size_t)h, "%s%lld", i ? ", " : "", (long long)shape[i]);
    // Python spells a one-element tuple "(3,)".
    h += snprintf(header + h, sizeof header - (size_t)h, "%s), }", rank == 1 ? "," : "");
    size_t total = 10 + (size_t)h + 1;
    size_t padded = (total + 63) / 64 * 64;
    while (10 + (size_t)h + 1 < padded) header[h++] = ' ';
    header[h++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(h & 0xff),
                             (unsigned char)(h >> 8)};

    if (mkdir_parent(path) != 0) return set_err(err, errlen, "%s: cannot create its directory: %s", path, strerror(errno));
    FILE* f = afile_open(path);
    if (!f) return set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    if (fwrite(pre, 1, sizeof pre, f) != sizeof pre || fwrite(header, 1, (size_t)h, f) != (size_t)h ||
        (nbytes && fwrite(data, 1, nbytes, f) != nbytes)) {
        int e = errno;
        afile_abort(f);
        return set_err(err, errlen, "%s: write failed: %s", path, strerror(e));
    }
    if (afile_commit(f) != 0) return set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return 0;
}
