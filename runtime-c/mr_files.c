/*
 * mr_files.c -- the demos' file readers and writers and their command line (mr_files.h).
 *
 * Host code: stdio and malloc, C99 that also compiles as C++ (the CUDA target's demo).
 * Every size read from a file is checked before it is used, with unsigned arithmetic
 * that cannot wrap (mul_ok, add_ok); every read is of a length the format has fixed
 * (never "to the end of the file"); every write and close is checked.
 */
#include "mr_files.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Messages and checked arithmetic                                                      */
/* ------------------------------------------------------------------------------------ */

/* The longest part of a path a message shows: its start and end around "...", so the
 * rest of the message always fits in MR_ERR_SIZE. */
#define MSG_PATH 300

/* Appends `n` bytes of s to the message at err (length *len), printable ASCII as it is
 * and anything else as \xNN, so a message is one line whatever a name holds. */
static void msg_bytes(char *err, size_t *len, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < n && *len + 5 < MR_ERR_SIZE; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            err[(*len)++] = (char)c;
        } else {
            err[(*len)++] = '\\';
            err[(*len)++] = 'x';
            err[(*len)++] = hex[c >> 4];
            err[(*len)++] = hex[c & 15];
        }
    }
    err[*len] = 0;
}

/* The message "PATH: what" (PATH cut in the middle when long; no "PATH: " when NULL). */
static int fail(char *err, const char *path, const char *fmt, ...)
{
    size_t len = 0;
    va_list ap;
    err[0] = 0;
    if (path) {
        size_t n = strlen(path);
        if (n <= MSG_PATH) {
            msg_bytes(err, &len, path, n);
        } else {
            msg_bytes(err, &len, path, MSG_PATH / 2);
            msg_bytes(err, &len, "...", 3);
            msg_bytes(err, &len, path + n - MSG_PATH / 2, MSG_PATH / 2);
        }
        msg_bytes(err, &len, ": ", 2);
    }
    va_start(ap, fmt);
    vsnprintf(err + len, MR_ERR_SIZE - len, fmt, ap);
    va_end(ap);
    return -1;
}

/* A name (key_len bytes) as a message shows it, quoted: at most 200 bytes of it. */
static const char *quoted(char *buf, size_t size, const char *name, size_t n)
{
    char tmp[MR_ERR_SIZE];
    size_t len = 0;
    tmp[0] = 0;
    msg_bytes(tmp, &len, name, n < 200 ? n : 200);
    snprintf(buf, size, "'%s%s'", tmp, n > 200 ? "..." : "");
    return buf;
}

/* a * b and a + b, refusing to wrap (0: it would). */
static int mul_ok(unsigned long long a, unsigned long long b, unsigned long long *r)
{
    if (b != 0 && a > ULLONG_MAX / b) { return 0; }
    *r = a * b;
    return 1;
}

static int add_ok(unsigned long long a, unsigned long long b, unsigned long long *r)
{
    if (a > ULLONG_MAX - b) { return 0; }
    *r = a + b;
    return 1;
}

/* Whether a count of bytes fits in size_t (a 32-bit host's). */
static int fits_size(unsigned long long n) { return n <= (unsigned long long)(size_t)-1; }

/* Reads exactly n bytes (0: the file ended first or a read failed). */
static int read_all(FILE *f, void *dst, size_t n) { return n == 0 || fread(dst, 1, n, f) == n; }

/* Why a read of a fixed length stopped: the end of the file, or the system's reason. */
static const char *short_read(FILE *f) { return ferror(f) ? strerror(errno) : "the file ends early"; }

/* Whether the stream is at its end (one more byte read would fail), without reading
 * more than that byte. */
static int at_end(FILE *f) { return fgetc(f) == EOF && !ferror(f); }

/* ------------------------------------------------------------------------------------ */
/* Ports                                                                                */
/* ------------------------------------------------------------------------------------ */

long long mr_port_dim(const mr_port *p, const mr_dims *dims, int d)
{
    return p->sym[d] >= 0 ? dims->value[p->sym[d]] : p->shape[d];
}

size_t mr_port_count(const mr_port *p, const mr_dims *dims)
{
    size_t n = 1;
    int d;
    for (d = 0; d < p->rank; ++d) { n *= (size_t)mr_port_dim(p, dims, d); }
    return n;
}

/* ------------------------------------------------------------------------------------ */
/* .npy                                                                                 */
/* ------------------------------------------------------------------------------------ */

/* An .npy header's dictionary: descr (its text), fortran_order, and the shape. */
struct npy_header {
    const char *descr;
    size_t descr_len;
    int fortran;
    int rank;
    unsigned long long shape[MR_NPY_MAX_DIMS];
};

/* A cursor over the header's text. */
struct npy_text {
    const char *s, *end;
};

/* Python's whitespace inside brackets (NumPy pads with spaces and ends with '\n'). */
static void npy_ws(struct npy_text *t)
{
    while (t->s < t->end && (*t->s == ' ' || *t->s == '\t' || *t->s == '\n' || *t->s == '\r' || *t->s == '\f')) { ++t->s; }
}

/* Whether the next character is c (taken when it is). */
static int npy_take(struct npy_text *t, char c)
{
    npy_ws(t);
    if (t->s < t->end && *t->s == c) {
        ++t->s;
        return 1;
    }
    return 0;
}

/* A Python string literal in either quotes, without prefix, escape or line break. */
static int npy_string(struct npy_text *t, const char **s, size_t *n)
{
    char q;
    const char *start;
    npy_ws(t);
    if (t->s >= t->end || (*t->s != '\'' && *t->s != '"')) { return 0; }
    q = *t->s++;
    start = t->s;
    while (t->s < t->end && *t->s != q) {
        if (*t->s == '\\' || *t->s == '\n' || *t->s == '\r') { return 0; }
        ++t->s;
    }
    if (t->s >= t->end) { return 0; }
    *s = start;
    *n = (size_t)(t->s - start);
    ++t->s;
    return 1;
}

/* Whether the next word is `word` (a whole identifier). */
static int npy_word(struct npy_text *t, const char *word)
{
    size_t n = strlen(word);
    npy_ws(t);
    if ((size_t)(t->end - t->s) < n || memcmp(t->s, word, n) != 0) { return 0; }
    if ((size_t)(t->end - t->s) > n) {
        char c = t->s[n];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') { return 0; }
    }
    t->s += n;
    return 1;
}

/* A dimension: a decimal integer as Python writes one (0, or no leading zero), up to
 * LLONG_MAX. */
static int npy_dim(struct npy_text *t, unsigned long long *v, char *err, const char *path)
{
    const char *start;
    npy_ws(t);
    start = t->s;
    *v = 0;
    while (t->s < t->end && *t->s >= '0' && *t->s <= '9') {
        unsigned d = (unsigned)(*t->s - '0');
        if (*v > ((unsigned long long)LLONG_MAX - d) / 10) { return fail(err, path, "a dimension in the .npy header's shape is too large"); }
        *v = *v * 10 + d;
        ++t->s;
    }
    if (t->s == start || (t->s - start > 1 && *start == '0')) { return fail(err, path, "the .npy header's shape is not a tuple of whole numbers"); }
    return 0;
}

/* The shape: (), (n,) or (n, m, ...), with an optional trailing comma after two or more. */
static int npy_shape(struct npy_text *t, struct npy_header *h, char *err, const char *path)
{
    static const char *const bad = "the .npy header's shape is not a tuple of whole numbers";
    if (!npy_take(t, '(')) { return fail(err, path, "%s", bad); }
    h->rank = 0;
    if (npy_take(t, ')')) { return 0; }
    for (;;) {
        if (h->rank == MR_NPY_MAX_DIMS) { return fail(err, path, "the .npy array has more than %d dimensions", MR_NPY_MAX_DIMS); }
        if (npy_dim(t, &h->shape[h->rank], err, path) != 0) { return -1; }
        ++h->rank;
        if (npy_take(t, ')')) {
            /* (n) is a number, not a tuple. */
            return h->rank == 1 ? fail(err, path, "%s", bad) : 0;
        }
        if (!npy_take(t, ',')) { return fail(err, path, "%s", bad); }
        if (npy_take(t, ')')) { return 0; }
    }
}

/* Parses the header's dictionary (n bytes at s) as Python's literal_eval reads what
 * NumPy writes. */
static int npy_parse(const char *s, size_t n, struct npy_header *h, char *err, const char *path)
{
    static const char *const keys[3] = { "descr", "fortran_order", "shape" };
    struct npy_text t;
    int seen[3] = { 0, 0, 0 };
    t.s = s;
    t.end = s + n;
    if (!npy_take(&t, '{')) { return fail(err, path, "the .npy header is not a Python dictionary"); }
    while (!npy_take(&t, '}')) {
        const char *key;
        size_t key_len;
        int k;
        if (!npy_string(&t, &key, &key_len)) { return fail(err, path, "the .npy header's dictionary is malformed (a key is not a plain quoted string)"); }
        for (k = 0; k < 3; ++k) {
            if (strlen(keys[k]) == key_len && memcmp(keys[k], key, key_len) == 0) { break; }
        }
        if (k == 3) {
            char q[MR_ERR_SIZE];
            return fail(err, path, "the .npy header has the key %s (it may have only 'descr', 'fortran_order' and 'shape')", quoted(q, sizeof q, key, key_len));
        }
        if (seen[k]) { return fail(err, path, "the .npy header has the key '%s' twice", keys[k]); }
        seen[k] = 1;
        if (!npy_take(&t, ':')) { return fail(err, path, "the .npy header's dictionary is malformed (no ':' after '%s')", keys[k]); }
        if (k == 0) {
            if (!npy_string(&t, &h->descr, &h->descr_len)) { return fail(err, path, "the .npy header's descr is not a plain quoted string"); }
        } else if (k == 1) {
            if (npy_word(&t, "True")) {
                h->fortran = 1;
            } else if (npy_word(&t, "False")) {
                h->fortran = 0;
            } else {
                return fail(err, path, "the .npy header's fortran_order is not True or False");
            }
        } else if (npy_shape(&t, h, err, path) != 0) {
            return -1;
        }
        if (!npy_take(&t, ',')) {
            if (!npy_take(&t, '}')) { return fail(err, path, "the .npy header's dictionary is malformed (no ',' or '}' after '%s')", keys[k]); }
            break;
        }
    }
    npy_ws(&t);
    if (t.s != t.end) { return fail(err, path, "the .npy header has text after its dictionary"); }
    if (!seen[0] || !seen[1] || !seen[2]) { return fail(err, path, "the .npy header lacks the key '%s'", keys[!seen[0] ? 0 : !seen[1] ? 1 : 2]); }
    return 0;
}

/* Whether the file's descr is the one NumPy writes for the port's type: exactly
 * `dtype.str`, or for a one-byte type the same with any byte order ('|b1', '<b1'). */
static int npy_descr_ok(const struct npy_header *h, const mr_port *p)
{
    size_t n = strlen(p->descr);
    if (h->descr_len != n) { return 0; }
    if (p->elem == 1 && n > 1 && h->descr[0] != 0 && strchr("|<>=", h->descr[0])) { return memcmp(h->descr + 1, p->descr + 1, n - 1) == 0; }
    return memcmp(h->descr, p->descr, n) == 0;
}

/* `count` elements of `elem` bytes in Fortran order at src, stored at dst in C order. */
static void fortran_to_c(const unsigned char *src, unsigned char *dst, const unsigned long long *shape, int rank, size_t elem, size_t count)
{
    size_t index[MR_NPY_MAX_DIMS], stride[MR_NPY_MAX_DIMS], at = 0, i;
    int d;
    for (d = rank - 1; d >= 0; --d) {
        index[d] = 0;
        stride[d] = d == rank - 1 ? 1 : stride[d + 1] * (size_t)shape[d + 1];
    }
    for (i = 0; i < count; ++i) {
        memcpy(dst + at * elem, src + i * elem, elem);
        /* The next element in Fortran order: the first index fastest. */
        for (d = 0; d < rank; ++d) {
            at += stride[d];
            if (++index[d] < (size_t)shape[d]) { break; }
            at -= stride[d] * (size_t)shape[d];
            index[d] = 0;
        }
    }
}

/* Whether `p` holds bf16 (2-byte elements, descr '<f4'): NumPy has no bf16, so its
 * files hold f32, as mithrilc writes bf16 data files; each value is rounded to bf16 on
 * reading and written exactly. */
static int port_bf16(const mr_port *p)
{
    return p->elem == 2 && strcmp(p->descr, "<f4") == 0;
}

/* The bf16 bits of the little-endian f32 at b, rounded to nearest even, a NaN kept a
 * quiet NaN: mithril_ops.h's mr_f32_to_bf16, repeated here because the demo's files go
 * without the runtime's headers (the ggml target's demo). */
static uint16_t bf16_of(const unsigned char *b)
{
    uint32_t x = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if ((x & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((x >> 16) | 0x40u); }
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Checks the header's shape against the port's, setting symbolic dimensions' sizes. */
static int npy_check_shape(const struct npy_header *h, const mr_port *p, mr_dims *dims, char *err, const char *path)
{
    char q[MR_ERR_SIZE];
    int d;
    quoted(q, sizeof q, p->name, strlen(p->name));
    if (h->rank != p->rank) { return fail(err, path, "the array has %d dimension(s); the input %s has %d", h->rank, q, p->rank); }
    for (d = 0; d < p->rank; ++d) {
        unsigned long long n = h->shape[d];
        if (p->sym[d] < 0) {
            if (n != (unsigned long long)p->shape[d]) {
                return fail(err, path, "dimension %d of the array is %llu; the input %s wants %lld", d, n, q, p->shape[d]);
            }
        } else {
            int s = p->sym[d];
            if (n < 1 || n > (unsigned long long)p->shape[d]) {
                return fail(err, path, "dimension %d of the array is %llu; the input %s takes 1 to %lld there", d, n, q, p->shape[d]);
            }
            if (dims->set[s] && (unsigned long long)dims->value[s] != n) {
                return fail(err, path, "dimension %d of the array is %llu; another input's file set it to %lld", d, n, dims->value[s]);
            }
        }
    }
    /* Set only once the whole shape is right. */
    for (d = 0; d < p->rank; ++d) {
        if (p->sym[d] >= 0) {
            dims->value[p->sym[d]] = (long long)h->shape[d];
            dims->set[p->sym[d]] = 1;
        }
    }
    return 0;
}

int mr_npy_read_stream(FILE *f, const char *path, const mr_port *p, mr_dims *dims, void *dst, size_t capacity, char *err)
{
    unsigned char pre[12];
    unsigned long long header_len, count = 1, bytes, room;
    size_t len_size, file_elem = port_bf16(p) ? 4 : (size_t)p->elem, i;
    char *text;
    struct npy_header h;
    unsigned char *data;
    int d, fortran;
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) { return fail(err, path, "not a .npy file (it does not start with \\x93NUMPY)"); }
    if ((pre[6] != 1 && pre[6] != 2 && pre[6] != 3) || pre[7] != 0) { return fail(err, path, "unsupported .npy format version %u.%u (1.0, 2.0 and 3.0 are)", pre[6], pre[7]); }
    len_size = pre[6] == 1 ? 2 : 4;
    if (!read_all(f, pre + 8, len_size)) { return fail(err, path, "the .npy header is cut short: %s", short_read(f)); }
    header_len = (unsigned long long)pre[8] | (unsigned long long)pre[9] << 8;
    if (len_size == 4) { header_len |= (unsigned long long)pre[10] << 16 | (unsigned long long)pre[11] << 24; }
    if (header_len > (unsigned long long)MR_NPY_MAX_HEADER) { return fail(err, path, "the .npy header is %llu bytes, more than the %ld read", header_len, (long)MR_NPY_MAX_HEADER); }
    text = (char *)malloc((size_t)header_len + 1);
    if (!text) { return fail(err, path, "out of memory for the .npy header"); }
    if (!read_all(f, text, (size_t)header_len)) {
        free(text);
        return fail(err, path, "the .npy header is cut short: %s", short_read(f));
    }
    memset(&h, 0, sizeof h);
    if (npy_parse(text, (size_t)header_len, &h, err, path) != 0) {
        free(text);
        return -1;
    }
    if (!npy_descr_ok(&h, p)) {
        char q[MR_ERR_SIZE], name[MR_ERR_SIZE];
        quoted(q, sizeof q, h.descr, h.descr_len);
        quoted(name, sizeof name, p->name, strlen(p->name));
        free(text);
        return fail(err, path, "the array's element type is %s; the input %s wants '%s'", q, name, p->descr);
    }
    free(text);
    if (npy_check_shape(&h, p, dims, err, path) != 0) { return -1; }
    for (d = 0; d < h.rank; ++d) {
        if (!mul_ok(count, h.shape[d], &count)) { return fail(err, path, "the array's element count overflows"); }
    }
    if (!mul_ok(count, (unsigned long long)file_elem, &bytes) || !fits_size(bytes) || !mul_ok(count, (unsigned long long)p->elem, &room) || room > capacity) {
        return fail(err, path, "the array's %llu elements do not fit the input's buffer", count);
    }
    data = (unsigned char *)dst;
    fortran = h.fortran && h.rank > 1 && bytes > 0;
    if (fortran || file_elem != (size_t)p->elem) {
        /* Fortran order: read as it is, then transposed to C order; bf16: read as f32,
         * then rounded. */
        data = (unsigned char *)malloc(bytes ? (size_t)bytes : 1);
        if (!data) { return fail(err, path, "out of memory for the array"); }
    }
    if (!read_all(f, data, (size_t)bytes)) {
        if (data != dst) { free(data); }
        return fail(err, path, "the file is shorter than its header says (%llu bytes of data): %s", bytes, short_read(f));
    }
    if (data != dst && file_elem == (size_t)p->elem) {
        fortran_to_c(data, (unsigned char *)dst, h.shape, h.rank, (size_t)p->elem, (size_t)count);
    } else if (data != dst) {
        unsigned char *c_order = data;
        if (fortran) {
            c_order = (unsigned char *)malloc((size_t)bytes);
            if (!c_order) {
                free(data);
                return fail(err, path, "out of memory for the array");
            }
            fortran_to_c(data, c_order, h.shape, h.rank, file_elem, (size_t)count);
        }
        for (i = 0; i < (size_t)count; ++i) {
            uint16_t v = bf16_of(c_order + 4 * i);
            memcpy((unsigned char *)dst + 2 * i, &v, 2);
        }
        if (c_order != data) { free(c_order); }
    }
    if (data != dst) { free(data); }
    if (!at_end(f)) { return fail(err, path, "the file is longer than its header says (%llu bytes of data)", bytes); }
    return 0;
}

int mr_npy_read(const char *path, const mr_port *p, mr_dims *dims, void *dst, size_t capacity, char *err)
{
    int status;
    FILE *f = fopen(path, "rb");
    if (!f) { return fail(err, path, "cannot open: %s", strerror(errno)); }
    status = mr_npy_read_stream(f, path, p, dims, dst, capacity, err);
    fclose(f);
    return status;
}

/* Appends text to the header being built at *buf (length *len, room *room), growing it. */
static int grow_append(char **buf, size_t *len, size_t *room, const char *text)
{
    size_t n = strlen(text);
    if (*len + n + 1 > *room) {
        size_t want = (*len + n + 1) * 2;
        char *more = (char *)realloc(*buf, want);
        if (!more) { return 0; }
        *buf = more;
        *room = want;
    }
    memcpy(*buf + *len, text, n + 1);
    *len += n;
    return 1;
}

int mr_npy_write_stream(FILE *f, const char *path, const mr_port *p, const mr_dims *dims, const void *src, char *err)
{
    char piece[64], *header = NULL;
    unsigned char pre[12];
    size_t len = 0, room = 0, count = mr_port_count(p, dims), pre_len, total;
    int d, ok;
    /* The dictionary NumPy writes, padded with spaces and a '\n' to a multiple of 64. */
    snprintf(piece, sizeof piece, "{'descr': '%s', 'fortran_order': False, 'shape': (", p->descr);
    ok = grow_append(&header, &len, &room, piece);
    for (d = 0; d < p->rank && ok; ++d) {
        snprintf(piece, sizeof piece, "%lld%s", mr_port_dim(p, dims, d), p->rank == 1 ? "," : d + 1 < p->rank ? ", " : "");
        ok = grow_append(&header, &len, &room, piece);
    }
    ok = ok && grow_append(&header, &len, &room, "), }");
    /* Format 1.0 unless the padded header would need more than its 2-byte length. */
    pre_len = len + 64 <= 65535 ? 10 : 12;
    for (total = pre_len + len + 1; ok && total % 64 != 0; ++total) { ok = grow_append(&header, &len, &room, " "); }
    ok = ok && grow_append(&header, &len, &room, "\n");
    if (!ok) {
        free(header);
        return fail(err, path, "out of memory for the .npy header");
    }
    memcpy(pre, "\x93NUMPY", 6);
    pre[6] = pre_len == 10 ? 1 : 2;
    pre[7] = 0;
    pre[8] = (unsigned char)(len & 0xff);
    pre[9] = (unsigned char)(len >> 8 & 0xff);
    pre[10] = (unsigned char)(len >> 16 & 0xff);
    pre[11] = (unsigned char)(len >> 24 & 0xff);
    ok = fwrite(pre, 1, pre_len, f) == pre_len && fwrite(header, 1, len, f) == len;
    free(header);
    if (ok && count > 0 && port_bf16(p)) {
        /* bf16 as the f32 it widens to, exactly, a block at a time. */
        unsigned char block[4 * 256];
        size_t i, k, n;
        for (i = 0; ok && i < count; i += n) {
            n = count - i < 256 ? count - i : 256;
            for (k = 0; k < n; ++k) {
                uint16_t v;
                memcpy(&v, (const unsigned char *)src + 2 * (i + k), 2);
                block[4 * k] = block[4 * k + 1] = 0;
                block[4 * k + 2] = (unsigned char)(v & 0xffu);
                block[4 * k + 3] = (unsigned char)(v >> 8);
            }
            ok = fwrite(block, 4, n, f) == n;
        }
    } else if (ok && count > 0) {
        ok = fwrite(src, (size_t)p->elem, count, f) == count;
    }
    if (!ok || fflush(f) != 0) { return fail(err, path, "cannot write: %s", strerror(errno)); }
    return 0;
}

int mr_npy_write(const char *path, const mr_port *p, const mr_dims *dims, const void *src, char *err)
{
    int status;
    FILE *f = fopen(path, "wb");
    if (!f) { return fail(err, path, "cannot write: %s", strerror(errno)); }
    status = mr_npy_write_stream(f, path, p, dims, src, err);
    if (fclose(f) != 0 && status == 0) { status = fail(err, path, "cannot write: %s", strerror(errno)); }
    if (status != 0) { remove(path); }
    return status;
}

char *mr_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *path;
    if (a > (size_t)-1 - b - 2) { return NULL; }
    path = (char *)malloc(a + b + 2);
    if (!path) { return NULL; }
    memcpy(path, dir, a);
    path[a] = '/';
    memcpy(path + a + 1, name, b + 1);
    return path;
}

/* ------------------------------------------------------------------------------------ */
/* Weights blobs                                                                        */
/* ------------------------------------------------------------------------------------ */

int mr_blob_read_stream(FILE *f, const char *path, void *dst, size_t size, char *err)
{
    size_t got = size == 0 ? 0 : fread(dst, 1, size, f);
    if (got != size) {
        if (ferror(f)) { return fail(err, path, "cannot read: %s", strerror(errno)); }
        return fail(err, path, "the weights file is %llu bytes, shorter than the model's %llu", (unsigned long long)got, (unsigned long long)size);
    }
    if (!at_end(f)) {
        if (ferror(f)) { return fail(err, path, "cannot read: %s", strerror(errno)); }
        return fail(err, path, "the weights file is longer than the model's %llu bytes", (unsigned long long)size);
    }
    return 0;
}

int mr_blob_read(const char *path, void *dst, size_t size, char *err)
{
    int status;
    FILE *f = fopen(path, "rb");
    if (!f) { return fail(err, path, "cannot open: %s", strerror(errno)); }
    status = mr_blob_read_stream(f, path, dst, size, err);
    fclose(f);
    return status;
}

/* ------------------------------------------------------------------------------------ */
/* safetensors                                                                          */
/* ------------------------------------------------------------------------------------ */

/* The format's element types (the reference implementation's, 0.8) and their bits. */
static const struct st_dtype {
    const char *name;
    unsigned bits;
} st_dtypes[] = {
    { "BOOL", 8 }, { "F4", 4 }, { "F6_E2M3", 6 }, { "F6_E3M2", 6 }, { "U8", 8 }, { "I8", 8 }, { "F8_E5M2", 8 },
    { "F8_E4M3", 8 }, { "F8_E8M0", 8 }, { "F8_E4M3FNUZ", 8 }, { "F8_E5M2FNUZ", 8 }, { "I16", 16 }, { "U16", 16 },
    { "F16", 16 }, { "BF16", 16 }, { "I32", 32 }, { "U32", 32 }, { "F32", 32 }, { "C64", 64 }, { "F64", 64 },
    { "I64", 64 }, { "U64", 64 },
};

/* One tensor of the header: its key, dtype, shape and data offsets, and which of the
 * wanted parameters it is (-1: none). */
struct st_tensor {
    char *key;
    size_t key_len;
    const struct st_dtype *dtype;
    unsigned long long *shape;
    int rank;
    unsigned long long begin, end;
    int want;
};

/* The header's JSON, parsed strictly (RFC 8259): a cursor, the depth of nesting, the
 * tensors found so far. */
struct json {
    const unsigned char *start, *s, *end;
    int depth;
    struct st_tensor *tensors;
    size_t count, room;
    char *err;
    const char *path;
};

/* Nesting deeper than this (in a value nobody reads) is refused, so the stack is bounded. */
#define JSON_MAX_DEPTH 64

static void json_ws(struct json *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) { ++j->s; }
}

static int json_error(struct json *j, const char *what)
{
    return fail(j->err, j->path, "the safetensors header is not valid JSON: %s at byte %llu of the header", what, (unsigned long long)(j->s - j->start));
}

static int json_take(struct json *j, unsigned char c)
{
    json_ws(j);
    if (j->s < j->end && *j->s == c) {
        ++j->s;
        return 1;
    }
    return 0;
}

/* Four hex digits of a \u escape. */
static int json_hex4(struct json *j, unsigned *v)
{
    int i;
    *v = 0;
    if (j->end - j->s < 4) { return 0; }
    for (i = 0; i < 4; ++i) {
        unsigned c = j->s[i];
        unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d == 16) { return 0; }
        *v = *v << 4 | d;
    }
    j->s += 4;
    return 1;
}

/* The length of the UTF-8 sequence at s (at most n bytes), 0 when it is not one
 * (overlong forms, surrogates and code points past U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0], cp, i, len;
    if (c < 0x80) { return 1; }
    if (c >= 0xc2 && c <= 0xdf) { len = 2, cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3, cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4, cp = c & 0x07; }
    else { return 0; }
    if (n < len) { return 0; }
    for (i = 1; i < len; ++i) {
        if ((s[i] & 0xc0) != 0x80) { return 0; }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) { return 0; }
    return len;
}

/* Appends code point cp as UTF-8 at out. */
static size_t utf8_put(unsigned char *out, unsigned long cp)
{
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { out[0] = (unsigned char)(0xc0 | cp >> 6); out[1] = (unsigned char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string, decoded into an allocation at *out (length *len; NULL out: checked and
 * dropped). Decoding never lengthens a string, so the raw length bounds it. */
static int json_string(struct json *j, char **out, size_t *len)
{
    const unsigned char *start;
    unsigned char *buf = NULL;
    size_t n = 0;
    json_ws(j);
    if (j->s >= j->end || *j->s != '"') { return json_error(j, "a string was expected"); }
    start = ++j->s;
    /* The raw length first: up to the closing quote (a quote after a backslash is not one). */
    while (j->s < j->end && *j->s != '"') { j->s += *j->s == '\\' && j->end - j->s > 1 ? 2 : 1; }
    if (j->s >= j->end) { return json_error(j, "a string does not end"); }
    if (out) {
        buf = (unsigned char *)malloc((size_t)(j->s - start) + 1);
        if (!buf) { return fail(j->err, j->path, "out of memory for the safetensors header"); }
    }
    j->s = start;
    while (*j->s != '"') {
        unsigned char c = *j->s;
        unsigned char tmp[4];
        size_t k;
        if (c < 0x20) {
            free(buf);
            return json_error(j, "a control character in a string");
        }
        if (c == '\\') {
            static const char simple[] = "\"\\/bfnrt", value[] = "\"\\/\b\f\n\r\t";
            const char *e;
            ++j->s;
            e = strchr(simple, (char)*j->s);
            if (*j->s != 0 && e) {
                tmp[0] = (unsigned char)value[e - simple];
                k = 1;
                ++j->s;
            } else if (*j->s == 'u') {
                unsigned hi, lo;
                unsigned long cp;
                ++j->s;
                if (!json_hex4(j, &hi)) {
                    free(buf);
                    return json_error(j, "a bad \\u escape");
                }
                cp = hi;
                if (hi >= 0xdc00 && hi <= 0xdfff) {
                    free(buf);
                    return json_error(j, "a lone surrogate escape");
                }
                if (hi >= 0xd800 && hi <= 0xdbff) {
                    if (j->end - j->s < 2 || j->s[0] != '\\' || j->s[1] != 'u' || (j->s += 2, !json_hex4(j, &lo)) || lo < 0xdc00 || lo > 0xdfff) {
                        free(buf);
                        return json_error(j, "a lone surrogate escape");
                    }
                    cp = 0x10000 + ((unsigned long)(hi - 0xd800) << 10) + (lo - 0xdc00);
                }
                k = utf8_put(tmp, cp);
            } else {
                free(buf);
                return json_error(j, "a bad escape in a string");
            }
            if (buf) { memcpy(buf + n, tmp, k); }
            n += k;
            continue;
        }
        k = utf8_len(j->s, (size_t)(j->end - j->s));
        if (k == 0) {
            free(buf);
            return json_error(j, "a string is not UTF-8");
        }
        if (buf) { memcpy(buf + n, j->s, k); }
        n += k;
        j->s += k;
    }
    ++j->s;
    if (out) {
        buf[n] = 0;
        *out = (char *)buf;
        *len = n;
    }
    return 0;
}

/* A whole number as JSON writes one (no sign, fraction, exponent or leading zero), up
 * to 2^64 - 1. */
static int json_uint(struct json *j, unsigned long long *v)
{
    const unsigned char *start;
    json_ws(j);
    start = j->s;
    *v = 0;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') {
        if (!mul_ok(*v, 10, v) || !add_ok(*v, (unsigned long long)(*j->s - '0'), v)) { return json_error(j, "a number too large"); }
        ++j->s;
    }
    if (j->s == start || (j->s - start > 1 && *start == '0')) { return json_error(j, "a whole number was expected"); }
    if (j->s < j->end && (*j->s == '.' || *j->s == 'e' || *j->s == 'E')) { return json_error(j, "a whole number was expected"); }
    return 0;
}

/* Any value, checked and dropped. */
static int json_skip(struct json *j)
{
    json_ws(j);
    if (j->s >= j->end) { return json_error(j, "a value was expected"); }
    if (*j->s == '"') { return json_string(j, NULL, NULL); }
    if (*j->s == '{' || *j->s == '[') {
        unsigned char close = *j->s == '{' ? '}' : ']';
        int object = close == '}';
        if (++j->depth > JSON_MAX_DEPTH) { return json_error(j, "nesting too deep"); }
        ++j->s;
        if (!json_take(j, close)) {
            do {
                if (object && json_string(j, NULL, NULL) != 0) { return -1; }
                if (object && !json_take(j, ':')) { return json_error(j, "':' was expected"); }
                if (json_skip(j) != 0) { return -1; }
            } while (json_take(j, ','));
            if (!json_take(j, close)) { return json_error(j, object ? "',' or '}' was expected" : "',' or ']' was expected"); }
        }
        --j->depth;
        return 0;
    }
    if (*j->s == '-' || (*j->s >= '0' && *j->s <= '9')) {
        /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
        if (*j->s == '-') { ++j->s; }
        if (j->s < j->end && *j->s == '0') {
            ++j->s;
        } else if (j->s < j->end && *j->s >= '1' && *j->s <= '9') {
            while (j->s < j->end && *j->s >= '0' && *j->s <= '9') { ++j->s; }
        } else {
            return json_error(j, "a bad number");
        }
        if (j->s < j->end && *j->s == '.') {
            const unsigned char *digits = ++j->s;
            while (j->s < j->end && *j->s >= '0' && *j->s <= '9') { ++j->s; }
            if (j->s == digits) { return json_error(j, "a bad number"); }
        }
        if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
            const unsigned char *digits;
            ++j->s;
            if (j->s < j->end && (*j->s == '+' || *j->s == '-')) { ++j->s; }
            digits = j->s;
            while (j->s < j->end && *j->s >= '0' && *j->s <= '9') { ++j->s; }
            if (j->s == digits) { return json_error(j, "a bad number"); }
        }
        return 0;
    }
    {
        static const char *const words[] = { "true", "false", "null" };
        int w;
        for (w = 0; w < 3; ++w) {
            size_t n = strlen(words[w]);
            if ((size_t)(j->end - j->s) >= n && memcmp(j->s, words[w], n) == 0) {
                j->s += n;
                return 0;
            }
        }
    }
    return json_error(j, "a value was expected");
}

/* `__metadata__`: null, or an object whose values are strings. */
static int json_metadata(struct json *j)
{
    json_ws(j);
    if ((size_t)(j->end - j->s) >= 4 && memcmp(j->s, "null", 4) == 0) {
        j->s += 4;
        return 0;
    }
    if (!json_take(j, '{')) { return fail(j->err, j->path, "the safetensors header's __metadata__ is not a map of strings"); }
    if (json_take(j, '}')) { return 0; }
    do {
        if (json_string(j, NULL, NULL) != 0) { return -1; }
        if (!json_take(j, ':')) { return json_error(j, "':' was expected"); }
        json_ws(j);
        if (j->s >= j->end || *j->s != '"') { return fail(j->err, j->path, "the safetensors header's __metadata__ is not a map of strings"); }
        if (json_string(j, NULL, NULL) != 0) { return -1; }
    } while (json_take(j, ','));
    if (!json_take(j, '}')) { return json_error(j, "',' or '}' was expected"); }
    return 0;
}

/* A tensor's entry: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]} in
 * any order, each once; other keys are allowed and dropped, as the reference
 * implementation does. */
static int json_tensor(struct json *j, struct st_tensor *t)
{
    char q[MR_ERR_SIZE];
    int seen[3] = { 0, 0, 0 };
    size_t room = 0;
    quoted(q, sizeof q, t->key, t->key_len);
    if (!json_take(j, '{')) { return fail(j->err, j->path, "the safetensors header's entry for %s is not an object", q); }
    if (!json_take(j, '}')) {
        do {
            char *key;
            size_t key_len;
            int k;
            if (json_string(j, &key, &key_len) != 0) { return -1; }
            k = key_len == 5 && !memcmp(key, "dtype", 5) ? 0 : key_len == 5 && !memcmp(key, "shape", 5) ? 1 : key_len == 12 && !memcmp(key, "data_offsets", 12) ? 2 : -1;
            free(key);
            if (!json_take(j, ':')) { return json_error(j, "':' was expected"); }
            if (k < 0) {
                if (json_skip(j) != 0) { return -1; }
                continue;
            }
            if (seen[k]) { return fail(j->err, j->path, "the safetensors header's entry for %s has '%s' twice", q, k == 0 ? "dtype" : k == 1 ? "shape" : "data_offsets"); }
            seen[k] = 1;
            if (k == 0) {
                char *name;
                size_t n, d;
                json_ws(j);
                if (j->s >= j->end || *j->s != '"') { return fail(j->err, j->path, "the safetensors header's dtype of %s is not a string", q); }
                if (json_string(j, &name, &n) != 0) { return -1; }
                for (d = 0; d < sizeof st_dtypes / sizeof st_dtypes[0]; ++d) {
                    if (strlen(st_dtypes[d].name) == n && memcmp(st_dtypes[d].name, name, n) == 0) { t->dtype = &st_dtypes[d]; }
                }
                if (!t->dtype) {
                    char qd[MR_ERR_SIZE];
                    fail(j->err, j->path, "the safetensors header gives %s the unknown dtype %s", q, quoted(qd, sizeof qd, name, n));
                    free(name);
                    return -1;
                }
                free(name);
            } else if (k == 1) {
                if (!json_take(j, '[')) { return fail(j->err, j->path, "the safetensors header's shape of %s is not a list", q); }
                if (!json_take(j, ']')) {
                    do {
                        if ((size_t)t->rank == room) {
                            size_t more = room ? room * 2 : 8;
                            unsigned long long *grown = (unsigned long long *)realloc(t->shape, more * sizeof *grown);
                            if (!grown) { return fail(j->err, j->path, "out of memory for the safetensors header"); }
                            t->shape = grown;
                            room = more;
                        }
                        if (t->rank == INT_MAX) { return fail(j->err, j->path, "the safetensors header's shape of %s is too long", q); }
                        if (json_uint(j, &t->shape[t->rank]) != 0) { return -1; }
                        ++t->rank;
                    } while (json_take(j, ','));
                    if (!json_take(j, ']')) { return json_error(j, "',' or ']' was expected"); }
                }
            } else {
                /* Two whole numbers (json_uint's message for one too large). */
                int k2;
                for (k2 = 0; k2 < 2; ++k2) {
                    if (!json_take(j, k2 == 0 ? '[' : ',')) { return fail(j->err, j->path, "the safetensors header's data_offsets of %s are not [begin, end]", q); }
                    json_ws(j);
                    if (j->s >= j->end || *j->s < '0' || *j->s > '9') { return fail(j->err, j->path, "the safetensors header's data_offsets of %s are not [begin, end]", q); }
                    if (json_uint(j, k2 == 0 ? &t->begin : &t->end) != 0) { return -1; }
                }
                if (!json_take(j, ']')) { return fail(j->err, j->path, "the safetensors header's data_offsets of %s are not [begin, end]", q); }
            }
        } while (json_take(j, ','));
        if (!json_take(j, '}')) { return json_error(j, "',' or '}' was expected"); }
    }
    if (!seen[0] || !seen[1] || !seen[2]) {
        return fail(j->err, j->path, "the safetensors header's entry for %s lacks '%s'", q, !seen[0] ? "dtype" : !seen[1] ? "shape" : "data_offsets");
    }
    return 0;
}

/* The whole header: an object of tensors and perhaps `__metadata__`. */
static int json_header(struct json *j)
{
    int metadata = 0;
    if (!json_take(j, '{')) { return json_error(j, "the header is not a JSON object"); }
    if (!json_take(j, '}')) {
        do {
            char *key;
            size_t key_len;
            struct st_tensor *t;
            if (json_string(j, &key, &key_len) != 0) { return -1; }
            if (!json_take(j, ':')) {
                free(key);
                return json_error(j, "':' was expected");
            }
            if (key_len == 12 && memcmp(key, "__metadata__", 12) == 0) {
                free(key);
                if (metadata) { return fail(j->err, j->path, "the safetensors header has __metadata__ twice"); }
                metadata = 1;
                if (json_metadata(j) != 0) { return -1; }
                continue;
            }
            if (j->count == j->room) {
                size_t more = j->room ? j->room * 2 : 16;
                struct st_tensor *grown = (struct st_tensor *)realloc(j->tensors, more * sizeof *grown);
                if (!grown) {
                    free(key);
                    return fail(j->err, j->path, "out of memory for the safetensors header");
                }
                j->tensors = grown;
                j->room = more;
            }
            t = &j->tensors[j->count++];
            memset(t, 0, sizeof *t);
            t->key = key;
            t->key_len = key_len;
            t->want = -1;
            if (json_tensor(j, t) != 0) { return -1; }
        } while (json_take(j, ','));
        if (!json_take(j, '}')) { return json_error(j, "',' or '}' was expected"); }
    }
    json_ws(j);
    if (j->s != j->end) { return json_error(j, "text after the header's object"); }
    return 0;
}

/* Orders tensors by their offsets (the data's order), then by key, so a check that
 * fails names the same tensor every time. */
static int st_by_offsets(const void *x, const void *y)
{
    const struct st_tensor *a = (const struct st_tensor *)x, *b = (const struct st_tensor *)y;
    int c;
    if (a->begin != b->begin) { return a->begin < b->begin ? -1 : 1; }
    if (a->end != b->end) { return a->end < b->end ? -1 : 1; }
    c = memcmp(a->key, b->key, a->key_len < b->key_len ? a->key_len : b->key_len);
    return c != 0 ? c : (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

static int st_by_key(const void *x, const void *y)
{
    const struct st_tensor *a = *(const struct st_tensor *const *)x, *b = *(const struct st_tensor *const *)y;
    int c = memcmp(a->key, b->key, a->key_len < b->key_len ? a->key_len : b->key_len);
    return c != 0 ? c : (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

/* The f32 value of an IEEE binary16. */
static float f16_value(unsigned h)
{
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) {
        v = (float)m * (1.0f / 16777216.0f);
    } else if (e == 31) {
        /* Infinity, or a NaN (0/0 without the math library's NAN macro). */
        uint32_t bits = m ? 0x7fc00000u : 0x7f800000u;
        memcpy(&v, &bits, 4);
    } else {
        uint32_t bits = (uint32_t)(e - 15 + 127) << 23 | (uint32_t)m << 13;
        memcpy(&v, &bits, 4);
    }
    return (h & 0x8000) ? -v : v;
}

/* `n` elements of the file's dtype read into dst as the model's f32 (F16, BF16 and F64
 * converted, F32 as it is), little-endian. */
static int st_read_floats(FILE *f, const char *file_dtype, size_t n, float *dst)
{
    unsigned char chunk[4096];
    size_t size = !strcmp(file_dtype, "F64") ? 8 : !strcmp(file_dtype, "F32") ? 4 : 2, done = 0;
    if (size == 4) { return read_all(f, dst, n * 4); }
    while (done < n) {
        size_t take = n - done < sizeof chunk / size ? n - done : sizeof chunk / size, i;
        if (!read_all(f, chunk, take * size)) { return 0; }
        for (i = 0; i < take; ++i) {
            const unsigned char *b = chunk + i * size;
            if (size == 8) {
                uint64_t bits = 0;
                double d;
                int k;
                for (k = 7; k >= 0; --k) { bits = bits << 8 | b[k]; }
                memcpy(&d, &bits, 8);
                dst[done + i] = (float)d;
            } else if (!strcmp(file_dtype, "F16")) {
                dst[done + i] = f16_value((unsigned)b[0] | (unsigned)b[1] << 8);
            } else {
                uint32_t bits = ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
                memcpy(&dst[done + i], &bits, 4);
            }
        }
        done += take;
    }
    return 1;
}

/* Skips n bytes by reading them (a seek past the end of a file would not fail). */
static int st_skip(FILE *f, unsigned long long n)
{
    unsigned char chunk[4096];
    while (n > 0) {
        size_t take = n < sizeof chunk ? (size_t)n : sizeof chunk;
        if (!read_all(f, chunk, take)) { return 0; }
        n -= take;
    }
    return 1;
}

/* The model's element size for a parameter's dtype, one of the format's ("F32" 4, "U8"
 * 1, "U64" 8, ...; st_check_param has matched it to the file's or to F32). */
static size_t st_model_elem(const char *dtype)
{
    size_t d;
    for (d = 0; d < sizeof st_dtypes / sizeof st_dtypes[0]; ++d) {
        if (!strcmp(st_dtypes[d].name, dtype)) { return st_dtypes[d].bits / 8; }
    }
    return 0;
}

/* Checks one wanted parameter's tensor: the dtype and shape the model wants. */
static int st_check_param(const struct st_tensor *t, const mr_st_param *w, const char *path, char *err)
{
    char q[MR_ERR_SIZE], have[512], want[512];
    size_t hl = 0, wl = 0;
    int d, same = t->rank == w->rank, widen = strcmp(w->dtype, "F32") == 0
        && (!strcmp(t->dtype->name, "F16") || !strcmp(t->dtype->name, "BF16") || !strcmp(t->dtype->name, "F64"));
    quoted(q, sizeof q, w->key, w->key_len);
    if (strcmp(t->dtype->name, w->dtype) != 0 && !widen) {
        return fail(err, path, "the parameter %s is %s, the model wants %s%s", q, t->dtype->name, w->dtype, strcmp(w->dtype, "F32") ? "" : " (or F16, BF16 or F64)");
    }
    for (d = 0; same && d < w->rank; ++d) { same = t->shape[d] == (unsigned long long)w->shape[d]; }
    if (same) { return 0; }
    /* [a, b, ...] for each, cut short when long. */
    for (d = 0; d < t->rank && hl + 32 < sizeof have; ++d) { hl += (size_t)snprintf(have + hl, sizeof have - hl, "%s%llu", d ? ", " : "", t->shape[d]); }
    if (d < t->rank) { hl += (size_t)snprintf(have + hl, sizeof have - hl, ", ..."); }
    want[0] = have[hl] = 0;
    for (d = 0; d < w->rank && wl + 32 < sizeof want; ++d) { wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%lld", d ? ", " : "", w->shape[d]); }
    return fail(err, path, "the parameter %s has shape [%s], the model's is [%s]", q, have, want);
}

int mr_safetensors_read_stream(FILE *f, const char *path, const mr_st_param *params, int count, mr_st_place place, void *user, char *err)
{
    unsigned char len8[8];
    unsigned long long header_len = 0, at = 0;
    char *header = NULL;
    size_t have = 0, i;
    struct json j;
    struct st_tensor **by_key = NULL;
    int k, status = -1;
    memset(&j, 0, sizeof j);
    j.err = err;
    j.path = path;
    if (!read_all(f, len8, 8)) { return fail(err, path, "not a safetensors file (shorter than its 8-byte header length)"); }
    for (k = 7; k >= 0; --k) { header_len = header_len << 8 | len8[k]; }
    if (header_len > MR_ST_MAX_HEADER) { return fail(err, path, "the safetensors header length %llu is more than the format's limit (%llu)", header_len, MR_ST_MAX_HEADER); }
    /* Read in growing pieces, so a length past the end of a small file costs no more
     * memory than the file holds. */
    while (have < header_len) {
        size_t want = header_len - have < 65536 + have ? (size_t)header_len - have : 65536 + have;
        char *grown = (char *)realloc(header, have + want + 1);
        if (!grown) {
            fail(err, path, "out of memory for the safetensors header");
            goto done;
        }
        header = grown;
        if (!read_all(f, header + have, want)) {
            if (ferror(f)) {
                fail(err, path, "cannot read: %s", strerror(errno));
            } else {
                fail(err, path, "the safetensors header length (%llu bytes) is beyond the end of the file", header_len);
            }
            goto done;
        }
        have += want;
    }
    j.s = j.start = (const unsigned char *)(header ? header : "");
    j.end = j.s + have;
    if (json_header(&j) != 0) { goto done; }
    /* The data: the tensors in order of offsets, each starting where the last ends. */
    if (j.count > 1) { qsort(j.tensors, j.count, sizeof *j.tensors, st_by_offsets); }
    for (i = 0; i < j.count; ++i) {
        struct st_tensor *t = &j.tensors[i];
        unsigned long long n = 1, bits;
        char q[MR_ERR_SIZE];
        int d;
        quoted(q, sizeof q, t->key, t->key_len);
        if (t->end < t->begin) {
            fail(err, path, "the safetensors data_offsets of %s end before they begin ([%llu, %llu])", q, t->begin, t->end);
            goto done;
        }
        if (t->begin != at) {
            fail(err, path, "the safetensors data_offsets of %s begin at %llu, not where the data before them ends (%llu): the tensors overlap or leave a hole", q, t->begin, at);
            goto done;
        }
        for (d = 0; d < t->rank; ++d) {
            if (!mul_ok(n, t->shape[d], &n)) {
                fail(err, path, "the safetensors shape of %s overflows", q);
                goto done;
            }
        }
        if (!mul_ok(n, t->dtype->bits, &bits) || bits % 8 != 0) {
            fail(err, path, "the safetensors shape of %s is not a whole number of bytes of %s", q, t->dtype->name);
            goto done;
        }
        if (t->end - t->begin != bits / 8) {
            fail(err, path, "the safetensors data_offsets of %s hold %llu bytes, its shape and dtype %llu", q, t->end - t->begin, bits / 8);
            goto done;
        }
        at = t->end;
    }
    /* Each key once, and every wanted parameter present with its dtype and shape. */
    by_key = (struct st_tensor **)malloc((j.count ? j.count : 1) * sizeof *by_key);
    if (!by_key) {
        fail(err, path, "out of memory for the safetensors header");
        goto done;
    }
    for (i = 0; i < j.count; ++i) { by_key[i] = &j.tensors[i]; }
    if (j.count > 1) { qsort(by_key, j.count, sizeof *by_key, st_by_key); }
    for (i = 1; i < j.count; ++i) {
        if (st_by_key(&by_key[i - 1], &by_key[i]) == 0) {
            char q[MR_ERR_SIZE];
            fail(err, path, "the safetensors header has the key %s twice", quoted(q, sizeof q, by_key[i]->key, by_key[i]->key_len));
            goto done;
        }
    }
    for (k = 0; k < count; ++k) {
        struct st_tensor probe, *pp = &probe, **found;
        probe.key = (char *)params[k].key;
        probe.key_len = params[k].key_len;
        found = j.count ? (struct st_tensor **)bsearch(&pp, by_key, j.count, sizeof *by_key, st_by_key) : NULL;
        if (!found) {
            char q[MR_ERR_SIZE];
            fail(err, path, "the parameter %s is not in the safetensors file", quoted(q, sizeof q, params[k].key, params[k].key_len));
            goto done;
        }
        if (st_check_param(*found, &params[k], path, err) != 0) { goto done; }
        (*found)->want = k;
    }
    /* Front to back: each wanted tensor converted and placed, the rest read past. */
    for (i = 0; i < j.count; ++i) {
        const struct st_tensor *t = &j.tensors[i];
        const mr_st_param *w;
        unsigned long long n = t->end - t->begin, elems, bytes;
        void *data;
        int ok;
        if (t->want < 0) {
            if (!st_skip(f, n)) {
                fail(err, path, "the safetensors data is cut short: %s", short_read(f));
                goto done;
            }
            continue;
        }
        w = &params[t->want];
        elems = n / (t->dtype->bits / 8);
        if (!mul_ok(elems, st_model_elem(w->dtype), &bytes) || !fits_size(bytes)) {
            fail(err, path, "the parameter is too large for this machine");
            goto done;
        }
        data = malloc(bytes ? (size_t)bytes : 1);
        if (!data) {
            fail(err, path, "out of memory for a parameter");
            goto done;
        }
        ok = strcmp(w->dtype, "F32") == 0 ? st_read_floats(f, t->dtype->name, (size_t)elems, (float *)data) : read_all(f, data, (size_t)bytes);
        if (!ok) {
            free(data);
            fail(err, path, "the safetensors data is cut short: %s", short_read(f));
            goto done;
        }
        ok = place(user, t->want, data, (size_t)bytes, err);
        free(data);
        if (ok != 0) { goto done; }
    }
    if (!at_end(f)) {
        fail(err, path, "the file is longer than its safetensors header says (%llu bytes of data)", at);
        goto done;
    }
    status = 0;
done:
    for (i = 0; i < j.count; ++i) {
        free(j.tensors[i].key);
        free(j.tensors[i].shape);
    }
    free(j.tensors);
    free(by_key);
    free(header);
    return status;
}

int mr_safetensors_read(const char *path, const mr_st_param *params, int count, mr_st_place place, void *user, char *err)
{
    int status;
    FILE *f = fopen(path, "rb");
    if (!f) { return fail(err, path, "cannot open: %s", strerror(errno)); }
    status = mr_safetensors_read_stream(f, path, params, count, place, user, err);
    fclose(f);
    return status;
}

/* ------------------------------------------------------------------------------------ */
/* The command line                                                                     */
/* ------------------------------------------------------------------------------------ */

int mr_parse_count(const char *text, long max, long *value)
{
    long v = 0;
    const char *s = text;
    if (*s == 0) { return -1; }
    for (; *s; ++s) {
        if (*s < '0' || *s > '9') { return -1; }
        if (v > (max - (*s - '0')) / 10) { return -1; }
        v = v * 10 + (*s - '0');
    }
    if (v < 1) { return -1; }
    *value = v;
    return 0;
}

/* The input an --input argument NAME=FILE names: the one input whose name and '=' start
 * it. */
static int cli_input(mr_cli *cli, const char *spec, int *which, const char **file, char *err)
{
    int k, found = -1;
    char q[MR_ERR_SIZE];
    for (k = 0; k < cli->input_count; ++k) {
        size_t n = strlen(cli->inputs[k].name);
        if (strncmp(spec, cli->inputs[k].name, n) == 0 && spec[n] == '=') {
            if (found >= 0) {
                char a[MR_ERR_SIZE], b[MR_ERR_SIZE];
                quoted(a, sizeof a, cli->inputs[found].name, strlen(cli->inputs[found].name));
                quoted(b, sizeof b, cli->inputs[k].name, strlen(cli->inputs[k].name));
                return fail(err, NULL, "--input %s is ambiguous: it fits the inputs %s and %s (names may contain '='); use --input-index I=FILE, I the input's position from 0",
                            quoted(q, sizeof q, spec, strlen(spec)), a, b);
            }
            found = k;
        }
    }
    if (found < 0) {
        size_t len;
        if (!strchr(spec, '=')) { return fail(err, NULL, "--input wants NAME=FILE.npy, not %s", quoted(q, sizeof q, spec, strlen(spec))); }
        fail(err, NULL, "--input %s names no input of the model (its inputs:", quoted(q, sizeof q, spec, strlen(spec)));
        len = strlen(err);
        for (k = 0; k < cli->input_count && len + 8 < MR_ERR_SIZE; ++k) {
            msg_bytes(err, &len, k ? ", '" : " '", k ? 3 : 2);
            msg_bytes(err, &len, cli->inputs[k].name, strlen(cli->inputs[k].name));
            msg_bytes(err, &len, "'", 1);
        }
        msg_bytes(err, &len, cli->input_count ? ")" : " none)", cli->input_count ? 1 : 6);
        return -1;
    }
    *which = found;
    *file = spec + strlen(cli->inputs[found].name) + 1;
    return 0;
}

/* The input an --input-index argument I=FILE names. */
static int cli_input_index(mr_cli *cli, const char *spec, int *which, const char **file, char *err)
{
    const char *eq = strchr(spec, '=');
    long i = 0;
    const char *s;
    char q[MR_ERR_SIZE];
    int ok = eq != NULL && eq != spec && eq - spec <= 9;
    for (s = spec; ok && s < eq; ++s) {
        ok = *s >= '0' && *s <= '9';
        i = i * 10 + (*s - '0');
    }
    if (!ok || i >= cli->input_count) {
        return fail(err, NULL, "--input-index wants I=FILE.npy with I from 0 to %d (the model's inputs), not %s", cli->input_count - 1, quoted(q, sizeof q, spec, strlen(spec)));
    }
    *which = (int)i;
    *file = eq + 1;
    return 0;
}

int mr_cli_parse(mr_cli *cli, int argc, char **argv, char *err)
{
    int i, k, repeat_set = 0, threads_set = 0;
    char q[MR_ERR_SIZE];
    for (k = 0; k < cli->option_count; ++k) { cli->values[k] = NULL; }
    for (k = 0; k < cli->input_count; ++k) { cli->input_paths[k] = NULL; }
    cli->repeat = 1;
    cli->threads = 1;
    cli->graph = 0;
    for (i = 1; i < argc; ++i) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 0;
        for (k = 0; k < cli->option_count; ++k) {
            if (strcmp(arg, cli->options[k]) == 0) { break; }
        }
        takes = k < cli->option_count || !strcmp(arg, "--input") || !strcmp(arg, "--input-index") || !strcmp(arg, "--repeat")
            || ((cli->flags & MR_CLI_THREADS) && !strcmp(arg, "--threads"));
        if (takes && !value) { return fail(err, NULL, "%s wants a value", arg); }
        if (k < cli->option_count) {
            if (cli->values[k]) { return fail(err, NULL, "%s is given twice", arg); }
            cli->values[k] = value;
        } else if (!strcmp(arg, "--input") || !strcmp(arg, "--input-index")) {
            int which = 0;
            const char *file = NULL;
            if ((!strcmp(arg, "--input-index") ? cli_input_index(cli, value, &which, &file, err) : cli_input(cli, value, &which, &file, err)) != 0) { return -1; }
            if (cli->input_paths[which]) {
                return fail(err, NULL, "the input %s is given twice", quoted(q, sizeof q, cli->inputs[which].name, strlen(cli->inputs[which].name)));
            }
            if (!*file) { return fail(err, NULL, "%s %s names no file", arg, quoted(q, sizeof q, value, strlen(value))); }
            cli->input_paths[which] = file;
        } else if (!strcmp(arg, "--repeat")) {
            if (repeat_set++) { return fail(err, NULL, "--repeat is given twice"); }
            if (mr_parse_count(value, MR_MAX_REPEAT, &cli->repeat) != 0) {
                return fail(err, NULL, "--repeat wants a whole number from 1 to %ld, not %s", MR_MAX_REPEAT, quoted(q, sizeof q, value, strlen(value)));
            }
        } else if ((cli->flags & MR_CLI_THREADS) && !strcmp(arg, "--threads")) {
            long n;
            if (threads_set++) { return fail(err, NULL, "--threads is given twice"); }
            if (mr_parse_count(value, MR_MAX_THREADS, &n) != 0) {
                return fail(err, NULL, "--threads wants a whole number from 1 to %d, not %s", MR_MAX_THREADS, quoted(q, sizeof q, value, strlen(value)));
            }
            cli->threads = (int)n;
        } else if ((cli->flags & MR_CLI_GRAPH) && !strcmp(arg, "--graph")) {
            if (cli->graph) { return fail(err, NULL, "--graph is given twice"); }
            cli->graph = 1;
            continue;
        } else {
            return fail(err, NULL, "unknown argument %s (usage: %s)", quoted(q, sizeof q, arg, strlen(arg)), cli->usage);
        }
        ++i;
    }
    return 0;
}
