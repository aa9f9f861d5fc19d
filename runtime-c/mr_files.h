/*
 * mr_files.h -- the files a generated demo program reads and writes, and its command
 * line: .npy arrays (read and written), safetensors checkpoints and weights blobs (read).
 *
 * Host code for the demos of the C, CUDA, Metal and ggml targets (mr_files.c; C99 that
 * also compiles as C++ and as C11), never part of a generated library, which neither
 * prints nor allocates. Every file is treated as hostile: sizes and offsets are checked before
 * they are used (no arithmetic can overflow), nothing is read past what the format
 * says, and a file that is shorter or longer than its header says is refused.
 *
 * Every function returns 0 on success and -1 on failure, with a one-line message in
 * `err` (MR_ERR_SIZE bytes) that says what is wrong and, when a function opens a file,
 * names it. Nothing here prints or exits.
 */
#ifndef MR_FILES_H
#define MR_FILES_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Room for one message (longer ones are cut; a message is never a path to use). */
#define MR_ERR_SIZE 1024

/* The most dimensions an .npy array may have: more than NumPy's 64 (NPY_MAXDIMS), as a
 * model's arrays may have more and mithrilc writes them. */
#define MR_NPY_MAX_DIMS 1024

/* The longest .npy header read (bytes): NumPy's own reader stops at 10,000 unless told. */
#define MR_NPY_MAX_HEADER (1L << 20)

/* The longest safetensors header: the format's limit (the reference implementation's). */
#define MR_ST_MAX_HEADER 100000000ULL

/* The bounds of the demo's --threads (its pool's size) and --repeat (the times it keeps). */
#define MR_MAX_THREADS 64
#define MR_MAX_REPEAT 10000000L

/* An input or output of a model: its name (the demo's label), the .npy descr of its
 * element type ("<f4", "<f8", "<f2", "<i4", "<i8", "|b1", "|i1", "|u1", "<i2", "<u2",
 * "<u4" or "<u8"; bf16, which NumPy lacks, is "<f4" with 2-byte elements: its files
 * hold f32, rounded to nearest even when read), the bytes of an element, its
 * element count at the maxima, its rank and shape (symbolic dimensions at their
 * maxima), and the symbol of each dimension (-1: static). */
typedef struct mr_port {
    const char *name;
    const char *descr;
    int elem;
    size_t size;
    int rank;
    const long long *shape;
    const int *sym;
} mr_port;

/* The run-time sizes of a model's `count` symbolic dimensions: value[i] (its maximum
 * until an input file sets it) and set[i] (whether one has). */
typedef struct mr_dims {
    long long *value;
    int *set;
    int count;
} mr_dims;

/* Dimension d of `p` at the run-time sizes, and its element count at them. */
long long mr_port_dim(const mr_port *p, const mr_dims *dims, int d);
size_t mr_port_count(const mr_port *p, const mr_dims *dims);

/* Reads the .npy file `path` (format 1.0, 2.0 or 3.0) holding an array of `p`'s
 * element type and shape into dst (room for `capacity` bytes), in C order (a Fortran-
 * order array is transposed). Its symbolic dimensions set the run-time sizes in `dims`:
 * each within 1 to its maximum and the same as another input's. The header must be the
 * dictionary NumPy writes: the keys 'descr', 'fortran_order' and 'shape' once each in
 * any order, Python's spellings (either quotes, any whitespace, trailing commas), and
 * `descr` exactly what NumPy writes for the type (`dtype.str`: '<f4', not '=f4' or
 * 'float32'; a one-byte type in any byte order, '|b1' or '<b1'). The file must end
 * where the data does. mr_npy_read_stream reads an open stream (`path` names it). */
int mr_npy_read(const char *path, const mr_port *p, mr_dims *dims, void *dst, size_t capacity, char *err);
int mr_npy_read_stream(FILE *f, const char *path, const mr_port *p, mr_dims *dims, void *dst, size_t capacity, char *err);

/* Writes `p`'s array at src, at the run-time sizes, as the .npy file `path` (format 1.0,
 * or 2.0 when the header needs more than 65,535 bytes), C order; checks every write and
 * the close, and removes the file when one fails. mr_npy_write_stream writes to an open
 * stream and leaves it open. */
int mr_npy_write(const char *path, const mr_port *p, const mr_dims *dims, const void *src, char *err);
int mr_npy_write_stream(FILE *f, const char *path, const mr_port *p, const mr_dims *dims, const void *src, char *err);

/* dir/name, allocated (free it), or NULL when out of memory. Never cut short. */
char *mr_path_join(const char *dir, const char *name);

/* Reads exactly `size` bytes from the file `path` (a weights blob) into dst, refusing a
 * file that is shorter or longer. Reads at most size + 1 bytes, so /dev/zero and pipes
 * are refused as soon as they are known to be too long. */
int mr_blob_read(const char *path, void *dst, size_t size, char *err);
int mr_blob_read_stream(FILE *f, const char *path, void *dst, size_t size, char *err);

/* A parameter a model wants from a safetensors file: its key (key_len bytes, which may
 * include NUL), its element type in the file's spelling ("F32", "F64", "I32", "I64",
 * "BOOL", "I8", "U8", "I16", "U16", "U32" or "U64"; an F32 parameter may also come as
 * F16, BF16 or F64 and is converted), and its
 * shape, which the file's must equal. */
typedef struct mr_st_param {
    const char *key;
    size_t key_len;
    const char *dtype;
    int rank;
    const long long *shape;
} mr_st_param;

/* Receives parameter `index`'s elements (`bytes` of them, in the model's element type,
 * C order) from mr_safetensors_read: returns 0, or -1 with a message in err. */
typedef int (*mr_st_place)(void *user, int index, const void *data, size_t bytes, char *err);

/* Reads the `count` parameters from the safetensors file `path`, each through `place`.
 * The file is checked as the format's specification and reference implementation
 * require: an 8-byte little-endian header length within the file and at most
 * MR_ST_MAX_HEADER, a header that is a JSON object (UTF-8; `__metadata__` a map of
 * strings) of tensors with a known dtype, a shape and data offsets [begin, end] whose
 * sizes agree, the tensors in order of their offsets covering the data exactly (no
 * holes, no overlaps) to the end of the file. Keys that appear twice are refused. Reads
 * the file front to back, once (pipes work). */
int mr_safetensors_read(const char *path, const mr_st_param *params, int count, mr_st_place place, void *user, char *err);
int mr_safetensors_read_stream(FILE *f, const char *path, const mr_st_param *params, int count, mr_st_place place, void *user, char *err);

/* What a demo's command line may hold, beyond --input NAME=FILE, --input-index I=FILE
 * and --repeat N (1 to MR_MAX_REPEAT): --threads N (1 to MR_MAX_THREADS) and --graph. */
#define MR_CLI_THREADS 1u
#define MR_CLI_GRAPH 2u

/* A demo's command line. The demo fills the first part; mr_cli_parse the second. */
typedef struct mr_cli {
    const mr_port *inputs;         /* the model's inputs (their names) */
    int input_count;
    const char *const *options;    /* the options that take a value ("--weights", "--out", ...) */
    int option_count;
    unsigned flags;                /* MR_CLI_THREADS, MR_CLI_GRAPH */
    const char *usage;             /* the demo's usage, for an unknown argument's message */
    const char **values;           /* option_count entries: each option's value, or NULL */
    const char **input_paths;      /* input_count entries: each input's file, or NULL */
    long repeat;                   /* 1 unless given */
    int threads;                   /* 1 unless given */
    int graph;
} mr_cli;

/* Parses argv[1..argc-1] into `cli`. Every option may be given once. --input NAME=FILE
 * names the input whose name followed by `=` starts the argument: names may contain `=`,
 * so an argument two names fit (inputs `a` and `a=b`, argument `a=b=c.npy`) is refused
 * as ambiguous; --input-index I=FILE (I: the input's position, from 0) always is not. */
int mr_cli_parse(mr_cli *cli, int argc, char **argv, char *err);

/* A whole number in 1..max written in decimal digits alone (no sign, space or junk). */
int mr_parse_count(const char *text, long max, long *value);

#ifdef __cplusplus
}
#endif

#endif /* MR_FILES_H */
