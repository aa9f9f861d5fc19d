/* c_runner.c: runs one entry point of a model that mithrilc's C target generated and
 * the tests built as a shared object (tests/common/c_build.rs's run_c). It does what the
 * model's demo does for a run (the weights blob, inputs read and outputs written with
 * mr_files.c's .npy readers and writers, the arena, the entry's status) with the
 * model's ports given on the command line, so that the tests need not compile a demo
 * per model: for a one-node model, compiling and linking the demo took longer than
 * compiling the model. The runtime and mr_files.c are linked in and exported
 * (-rdynamic), and the model's library resolves them here when it is loaded. The
 * demo itself is built and run by tests/c_target.rs and tests/demo_files.rs.
 *
 *   c_runner LIB ENTRY WEIGHTS WEIGHTS_BYTES ARENA_BYTES OUTDIR DIMS MAX... PORT...
 *
 * LIB: the model's shared object; ENTRY: the function to call (<name>_forward or
 * <name>_backward); WEIGHTS: the weights blob, read when WEIGHTS_BYTES > 0; DIMS: how
 * many symbolic dimensions the entry takes (at most 4), then each one's maximum; each
 * PORT, in the entry's order, is
 *   in DESCR ELEM RANK D0 ... FILE   an input, read from FILE (.npy)
 *   out DESCR ELEM RANK D0 ...       an output, written to OUTDIR/output_<k>.npy
 * with DESCR its .npy type (mr_port's descr), ELEM the bytes of an element, and each
 * dimension its size, or its maximum and symbol as MAX/SYMBOL: the inputs set the
 * symbols' values (mr_npy_read), which the entry is called with.
 * Exit status: 0 done, 1 a bad argument or file (or an unknown status), 4 the model
 * refused its inputs (as the demo's).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mr_files.h"

#define MAX_PORTS 4096
#define MAX_DIMS 4

typedef int (*entry0)(const void *, const void *const *, void *const *, void *);
typedef int (*entry1)(const void *, const void *const *, void *const *, void *, int64_t);
typedef int (*entry2)(const void *, const void *const *, void *const *, void *, int64_t, int64_t);
typedef int (*entry3)(const void *, const void *const *, void *const *, void *, int64_t, int64_t, int64_t);
typedef int (*entry4)(const void *, const void *const *, void *const *, void *, int64_t, int64_t, int64_t, int64_t);

static void die(const char *what, const char *detail) {
    fprintf(stderr, "c_runner: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

/* A whole number in [0, max] ending at `*end` (NULL: at the string's end), or death. */
static long long number_to(const char *s, long long max, char **end) {
    char *stop;
    long long v;
    errno = 0;
    v = strtoll(s, &stop, 10);
    if (errno || stop == s || (end ? 0 : *stop) || v < 0 || v > max) { die("not a number in range", s); }
    if (end) { *end = stop; }
    return v;
}

static long long number(const char *s, long long max) { return number_to(s, max, NULL); }

/* n bytes (at least one) aligned to 64, each `fill`: zeros for the inputs, as the demo's;
 * all ones (NaN as floats) for the outputs and the arena, where the model may not rely
 * on what the memory held, so that a value it fails to write shows. */
static void *alloc64(size_t n, int fill) {
    void *p = NULL;
    size_t rounded = (n / 64 + 1) * 64;
    if (rounded < n) { die("a size overflows", NULL); }
    if (posix_memalign(&p, 64, rounded) != 0) { die("out of memory", NULL); }
    memset(p, fill, rounded);
    return p;
}

struct port {
    mr_port p;
    const char *file;
};

static struct port ports[MAX_PORTS];

int main(int argc, char **argv) {
    static const void *inputs[MAX_PORTS];
    static void *outputs[MAX_PORTS];
    static long long dim_value[MAX_DIMS + 1];
    static int dim_set[MAX_DIMS + 1];
    mr_dims dims = { dim_value, dim_set, 0 };
    char err[MR_ERR_SIZE];
    void *lib, *sym, *weights = NULL, *arena;
    size_t weights_bytes, arena_bytes;
    int a = 8, n_in = 0, n_out = 0, n = 0, i, status;
    if (argc < 8) { die("usage: c_runner LIB ENTRY WEIGHTS WEIGHTS_BYTES ARENA_BYTES OUTDIR DIMS MAX... PORT...", NULL); }
    weights_bytes = (size_t)number(argv[4], (long long)(SIZE_MAX / 2));
    arena_bytes = (size_t)number(argv[5], (long long)(SIZE_MAX / 2));
    dims.count = (int)number(argv[7], MAX_DIMS);
    if (a + dims.count > argc) { die("a symbolic dimension's maximum is missing", NULL); }
    for (i = 0; i < dims.count; ++i) { dim_value[i] = number(argv[a++], INT64_MAX); }
    while (a < argc) {
        struct port *q = &ports[n];
        int input = strcmp(argv[a], "in") == 0, d;
        size_t count = 1;
        long long *shape;
        int *syms;
        if (n == MAX_PORTS) { die("too many ports", NULL); }
        if (!input && strcmp(argv[a], "out") != 0) { die("a port is `in` or `out`", argv[a]); }
        if (a + 4 > argc) { die("a port needs DESCR ELEM RANK", NULL); }
        {
            char *name = (char *)malloc(32);
            if (!name) { die("out of memory", NULL); }
            snprintf(name, 32, "%s %d", input ? "input" : "output", input ? n_in : n_out);
            q->p.name = name;
        }
        q->p.descr = argv[a + 1];
        q->p.elem = (int)number(argv[a + 2], 16);
        if (q->p.elem == 0) { die("an element of no bytes", NULL); }
        q->p.rank = (int)number(argv[a + 3], MR_NPY_MAX_DIMS);
        a += 4;
        if (a + q->p.rank + input > argc) { die("a port's dimensions or file are missing", NULL); }
        shape = (long long *)malloc(sizeof *shape * (size_t)(q->p.rank + 1));
        syms = (int *)malloc(sizeof *syms * (size_t)(q->p.rank + 1));
        if (!shape || !syms) { die("out of memory", NULL); }
        for (d = 0; d < q->p.rank; ++d) {
            char *end;
            shape[d] = number_to(argv[a], INT64_MAX, &end);
            syms[d] = *end == '/' ? (int)number(end + 1, dims.count - 1) : -1;
            if (*end && *end != '/') { die("a dimension is SIZE or MAX/SYMBOL", argv[a]); }
            ++a;
            if (shape[d] != 0 && count > SIZE_MAX / 2 / (size_t)shape[d]) { die("a port's size overflows", NULL); }
            count *= (size_t)shape[d];
        }
        if (count > SIZE_MAX / 2 / (size_t)q->p.elem) { die("a port's size overflows", NULL); }
        q->p.size = count;
        q->p.shape = shape;
        q->p.sym = syms;
        q->file = input ? argv[a++] : NULL;
        if (input) { ++n_in; } else { ++n_out; }
        ++n;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { die("cannot load the model", dlerror()); }
    sym = dlsym(lib, argv[2]);
    if (!sym) { die("no such entry", argv[2]); }
    if (weights_bytes > 0) {
        weights = alloc64(weights_bytes, 0);
        if (mr_blob_read(argv[3], weights, weights_bytes, err) != 0) { die(err, NULL); }
    }
    for (i = 0, n_in = 0, n_out = 0; i < n; ++i) {
        struct port *q = &ports[i];
        size_t bytes = q->p.size * (size_t)q->p.elem;
        void *buf = alloc64(bytes, q->file ? 0 : 0xff);
        if (q->file) {
            if (mr_npy_read(q->file, &q->p, &dims, buf, bytes, err) != 0) { die(err, NULL); }
            inputs[n_in++] = buf;
        } else {
            outputs[n_out++] = buf;
        }
    }
    arena = alloc64(arena_bytes, 0xff);
    /* dlsym's object pointer becomes the function pointer by its bytes (ISO C has no
     * conversion between them; POSIX guarantees the representation). */
    switch (dims.count) {
    case 0: { entry0 f; memcpy(&f, &sym, sizeof f); status = f(weights, inputs, outputs, arena); break; }
    case 1: { entry1 f; memcpy(&f, &sym, sizeof f); status = f(weights, inputs, outputs, arena, dim_value[0]); break; }
    case 2: { entry2 f; memcpy(&f, &sym, sizeof f); status = f(weights, inputs, outputs, arena, dim_value[0], dim_value[1]); break; }
    case 3: { entry3 f; memcpy(&f, &sym, sizeof f); status = f(weights, inputs, outputs, arena, dim_value[0], dim_value[1], dim_value[2]); break; }
    default: { entry4 f; memcpy(&f, &sym, sizeof f); status = f(weights, inputs, outputs, arena, dim_value[0], dim_value[1], dim_value[2], dim_value[3]); break; }
    }
    if (status == -1) {
        fprintf(stderr, "c_runner: the model rejected the run-time sizes\n");
        return 4;
    }
    if (status == -2) {
        fprintf(stderr, "c_runner: a gather or embedding index is out of range (outside [-n, n) for an axis of size n)\n");
        return 4;
    }
    if (status != 0) { die("the model returned an unknown status", NULL); }
    for (i = 0, n_out = 0; i < n; ++i) {
        char file[32], *path;
        if (ports[i].file) { continue; }
        snprintf(file, sizeof file, "output_%d.npy", n_out);
        path = mr_path_join(argv[6], file);
        if (!path) { die("out of memory", NULL); }
        if (mr_npy_write(path, &ports[i].p, &dims, outputs[n_out], err) != 0) { die(err, NULL); }
        free(path);
        ++n_out;
    }
    return 0;
}
